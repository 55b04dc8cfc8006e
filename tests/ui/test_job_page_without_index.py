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
    assert {p["metadata"]["name"] for p in around.owners.pods_for(job)} == {
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


# --- airflow-jobs describe: what it reads does not grow with the jobs the namespace keeps -------------


class Counted:
    """Every LIST and GET a client sends, and how many objects they answered with."""

    def __init__(self, client: KubeClient) -> None:
        self.requests = 0
        self.objects = 0
        real_list, real_get = client.list, client.get_or_none

        async def listing(resource, namespace, **kw):
            found = await real_list(resource, namespace, **kw)
            self.requests += 1
            self.objects += len(found.get("items") or [])
            return found

        async def getting(resource, namespace, name):
            found = await real_get(resource, namespace, name)
            self.requests += 1
            self.objects += found is not None
            return found

        client.list = listing  # type: ignore[method-assign]
        client.get_or_none = getting  # type: ignore[method-assign]


def test_describe_reads_as_much_beside_many_finished_jobs_as_beside_few():
    """A waiting job (the reads that depend on the queue and the pool's reservations are all made) in
    a namespace whose finished history grows tenfold: ``read_job`` sends as many requests and reads as
    many objects, and its page is the one the whole namespace gives."""
    from airflow_jobs_sim import ClusterConfig, SimCluster

    from airflow_jobs_plugin.cluster.kube import CONFIGMAPS, JOBS
    from airflow_jobs_plugin.jobs.spec import TaskIdentity
    from airflow_jobs_plugin.queueing import quota
    from tests.ui.conftest import POLICY, _admit_all, _manifest

    policy = quota.parse_policy(POLICY)

    async def create(client: KubeClient, task: str, scenario: dict, **args) -> str:
        body = _manifest(TaskIdentity("history", task, "manual__1", -1, 1), scenario, **args)
        await client.create(JOBS, NAMESPACE, body)
        return body["metadata"]["name"]

    async def finish(client: KubeClient, count: int, start: int) -> None:
        names = [
            await create(client, f"old_{i}", {"*": {"run": 0.1}}, group="nlp", user="bob", gpus=1)
            for i in range(start, start + count)
        ]
        deadline = asyncio.get_running_loop().time() + 60
        while True:
            await _admit_all(client, policy)
            states = {
                r.name: r.state for r in views.overview(await inspect.read_cluster(client, target)).jobs
            }
            if all(states.get(n) == "SUCCEEDED" for n in names):
                await _admit_all(client, policy)
                return
            assert asyncio.get_running_loop().time() < deadline, states
            await asyncio.sleep(0.2)

    async def described(client: KubeClient, kubeconfig: str, name: str) -> tuple[int, int, views.JobDetail]:
        """The requests and objects of describe's read (on a client of its own), and its page."""
        own = await KubeClient.from_kubeconfig(kubeconfig)
        try:
            counted = Counted(own)
            state, job = await inspect.read_job(own, target, name)
        finally:
            await own.close()
        whole = await inspect.read_cluster(client, target)
        page = views.job_detail(dataclasses.replace(state, now=whole.now), job)
        assert page == views.job_detail(whole, job)
        return counted.requests, counted.objects, page

    target = Target(namespace=NAMESPACE)

    async def scenario(cluster: SimCluster) -> None:
        client = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
        try:
            await client.create(
                CONFIGMAPS,
                NAMESPACE,
                {"metadata": {"name": quota.DEFAULT_POLICY_CONFIGMAP}, "data": {quota.POLICY_KEY: POLICY}},
            )
            await create(client, "runner", {"*": {"run": None}}, group="vision", user="alice", gpus=2)
            await _admit_all(client, policy)
            waiting = await create(
                client, "waiting", {"*": {"run": None}}, group="vision", user="grace", gpus=4
            )
            await finish(client, 3, 0)
            requests, objects, page = await described(client, cluster.kubeconfig_path, waiting)
            assert page.job.state == "QUEUED" and page.job.queue_position == 1
            await finish(client, 27, 3)
            more = await described(client, cluster.kubeconfig_path, waiting)
            assert more[:2] == (requests, objects)
        finally:
            await client.close()

    with SimCluster(ClusterConfig(nodes=2, gpus_per_node=8, time_scale=0.02)) as cluster:
        asyncio.run(scenario(cluster))
