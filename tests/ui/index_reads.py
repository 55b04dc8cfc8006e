"""Stand-ins for the index's cluster reads (``inspect.read_in_pages``, ``read_window``,
``pods_of_job``, ``read_job_keys``) over a test's stand-in of ``read_cluster``: the fill reads the
cluster once, as one page; the refresh, a window of a cluster that does not change, answers what the
fill read."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from airflow_jobs_plugin import inspect
from airflow_jobs_plugin.lifecycle import pods_of
from airflow_jobs_plugin.plugin.views import ClusterState


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

    for name, stand_in in {
        "read_in_pages": read_in_pages,
        "read_window": read_window,
        "pods_of_job": pods_of_job,
        "read_job_keys": read_job_keys,
    }.items():
        monkeypatch.setattr(inspect, name, stand_in)
