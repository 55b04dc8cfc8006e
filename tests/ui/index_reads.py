"""Stand-ins for the index's cluster reads (``inspect.read_in_pages``, ``read_window``,
``pods_of_job``, ``read_job_keys``) and a job page's read without the index (``read_around_job``) over a test's stand-in of ``read_cluster``: the fill reads the
cluster once, as one page; the refresh, a window of a cluster that does not change, answers what the
fill read; around a job, the waiting jobs and the job's own pods."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from airflow_jobs_plugin.lifecycle import pods_of
from airflow_jobs_plugin.readmodel import inspect, views
from airflow_jobs_plugin.readmodel.views import ClusterState


def serve_index_from(monkeypatch: Any, read_cluster: Callable[[Any, Any], Awaitable[ClusterState]]) -> None:
    last: list[ClusterState] = []

    async def read_in_pages(client, target):
        last[:] = [await read_cluster(client, target)]
        yield last[0]

    async def read_window(client, target, selector, unlabelled):
        return last[0] if last else await read_cluster(client, target)

    async def pods_of_job(client, job):
        return list(pods_of(job, last[0].pods)) if last else []

    async def read_job_keys(client, target):
        return [(j["metadata"]["namespace"], j["metadata"]["name"]) for j in last[0].jobs]

    async def read_around_job(client, target, job):
        state = await read_cluster(client, target)
        waiting = tuple(j for j in state.jobs if views._is_waiting(j))
        return dataclasses.replace(state, jobs=waiting, pods=tuple(pods_of(job, state.pods)))

    for name, stand_in in {
        "read_in_pages": read_in_pages,
        "read_window": read_window,
        "pods_of_job": pods_of_job,
        "read_job_keys": read_job_keys,
        "read_around_job": read_around_job,
    }.items():
        monkeypatch.setattr(inspect, name, stand_in)
