"""A job's page without the index (the API server has just started and the index is filling): what is
read around the job (``inspect.read_around_job``: its pods, the jobs that may wait in the pool's queue,
the events, policy, ledgers and Workloads) gives the page that reading the whole namespace gives, on
the UI tests' simulated cluster."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from airflow_jobs_plugin.cluster.kube import KubeClient
from airflow_jobs_plugin.readmodel import inspect, views
from airflow_jobs_plugin.readmodel.inspect import Target
from airflow_jobs_plugin.usecases import actions
from tests.ui.conftest import NAMESPACE

# Jobs whose objects do not change while the test reads (running until deleted, finished, queued).
STEADY = ["runner", "done", "broken", "waiting", "mpi"]


@pytest.mark.parametrize("role", STEADY)
def test_a_job_page_read_around_its_job_equals_the_page_from_the_whole_namespace(population, role):
    name = population.names[role]

    async def read() -> tuple[views.ClusterState, views.ClusterState, dict]:
        client = await KubeClient.from_kubeconfig(population.kubeconfig)
        try:
            target = Target(namespace=NAMESPACE)
            job = await inspect.find_job(client, NAMESPACE, name)
            around = await inspect.read_around_job(client, target, job)
            whole = await inspect.read_cluster(client, target)
            return around, whole, job
        finally:
            await client.close()

    around, whole, job = asyncio.run(read())
    assert len(around.jobs) < len(whole.jobs)  # not the namespace: the waiting jobs only, if it may wait
    assert {p["metadata"]["name"] for p in around.pods} == {
        p["metadata"]["name"] for p in whole.owners.pods_for(job)
    }
    # The same moment for both, so ages and waiting times agree.
    page = views.job_detail(dataclasses.replace(around, now=whole.now), job)
    assert page == views.job_detail(whole, job)


def test_a_waiting_job_read_around_has_its_queue_position(population):
    name = population.names["waiting"]

    async def read() -> tuple[views.ClusterState, dict]:
        client = await KubeClient.from_kubeconfig(population.kubeconfig)
        try:
            job = await inspect.find_job(client, NAMESPACE, name)
            return await inspect.read_around_job(client, Target(namespace=NAMESPACE), job), job
        finally:
            await client.close()

    around, job = asyncio.run(read())
    assert views.job_detail(around, job).job.queue_position == 1
    assert name in {j["metadata"]["name"] for j in around.jobs}


def merged(body: dict, patch: dict) -> dict:
    """``body`` with a JSON merge patch applied (RFC 7386, as the API server applies it)."""
    out = dict(body)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict):
            out[key] = merged(out.get(key) or {}, value)
        else:
            out[key] = value
    return out


def test_a_stopped_job_read_around_reads_no_queue_and_shows_the_page_of_the_whole_namespace(
    population, monkeypatch
):
    """A stop removes ``admitted-at``, but a stopped job has no place in the queue: its page reads none
    of the waiting jobs, and is the page the whole namespace gives."""
    name = population.names["runner"]
    queue_reads: list[str] = []
    jobs_whole = inspect._jobs_whole

    async def counted(client, spaces, selector, *args, **kwargs):
        queue_reads.append(selector)
        return await jobs_whole(client, spaces, selector, *args, **kwargs)

    monkeypatch.setattr(inspect, "_jobs_whole", counted)

    async def read() -> tuple[views.ClusterState, views.ClusterState, dict]:
        client = await KubeClient.from_kubeconfig(population.kubeconfig)
        try:
            target = Target(namespace=NAMESPACE)
            # The job as the stop's own write leaves it (its pods still stopping), read back.
            job = merged(await inspect.find_job(client, NAMESPACE, name), actions.stop_patch({}, "admin"))
            around = await inspect.read_around_job(client, target, job)
            whole = await inspect.read_cluster(client, target)
            return around, whole, job
        finally:
            await client.close()

    around, whole, job = asyncio.run(read())
    assert views.may_be_waiting(job) and not views.may_have_a_position(job)
    assert queue_reads == []
    assert [j["metadata"]["name"] for j in around.jobs] == [name]
    others = tuple(j for j in whole.jobs if j["metadata"]["name"] != name)
    whole = dataclasses.replace(whole, jobs=(*others, job))
    page = views.job_detail(dataclasses.replace(around, now=whole.now), job)
    assert page == views.job_detail(whole, job)
    assert page.job.state in ("STOPPED", "TERMINATING") and page.job.queue_position is None
