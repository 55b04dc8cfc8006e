"""One probe per process, not per trigger: the triggers (or keepers) that start together ask the cluster
once whether Kueue is served, what its configuration says and what their namespace's labels are
(queueing/engines/kueue.py, queueing/kueue_cluster.py, cluster/single_flight.py).

Against a counting fake client whose reads the test holds open until every caller has asked: a cluster
without Kueue answers 404 for Workloads and for Kueue's ConfigMap, as a real API server does for a
resource it does not serve and an object that does not exist."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from airflow_jobs_plugin.cluster.kube import CONFIGMAPS, WORKLOADS, KubeError
from airflow_jobs_plugin.cluster.resources import NAMESPACES
from airflow_jobs_plugin.cluster.watch import SharedWatch
from airflow_jobs_plugin.queueing import kueue, kueue_cluster
from airflow_jobs_plugin.queueing.engines.door import Door
from airflow_jobs_plugin.queueing.engines.kueue import KueueEngine

NAMESPACE = "team-a"
TRIGGERS = 200


class CountingClient:
    """The reads a Kueue probe sends, counted by (verb, plural); each held until ``release``."""

    def __init__(self, *, kueue_config: str | None = None) -> None:
        self.requests: Counter[tuple[str, str]] = Counter()
        self.release = asyncio.Event()
        self.fail_next: dict[str, KubeError] = {}
        self.kueue_config = kueue_config

    async def _answer(self, verb: str, plural: str) -> None:
        self.requests[(verb, plural)] += 1
        await self.release.wait()
        failure = self.fail_next.pop(plural, None)
        if failure is not None:
            raise failure

    async def list(self, resource, namespace, **_selectors) -> dict:
        await self._answer("list", resource.plural)
        if resource is WORKLOADS:
            raise KubeError(404, "NotFound", "the server could not find the requested resource")
        return {"items": []}

    async def get(self, resource, namespace, name) -> dict:
        await self._answer("get", resource.plural)
        if resource is CONFIGMAPS and self.kueue_config is not None:
            return {"data": {kueue.CONFIG_KEY: self.kueue_config}}
        if resource is NAMESPACES:
            return {"metadata": {"name": name, "labels": {"team": "a"}}}
        raise KubeError(404, "NotFound", f'{resource.plural} "{name}" not found')

    async def get_or_none(self, resource, namespace, name) -> dict | None:
        try:
            return await self.get(resource, namespace, name)
        except KubeError as exc:
            if exc.not_found:
                return None
            raise


def unlabelled_job(index: int) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"train-{index}", "namespace": NAMESPACE, "uid": f"uid-{index}"},
        "spec": {"suspend": True},
    }


def queued_job(index: int) -> dict:
    job = unlabelled_job(index)
    job["metadata"]["labels"] = {kueue.QUEUE_NAME_LABEL: "gpus"}
    return job


def engine_on(client: CountingClient) -> KueueEngine:
    watch = SharedWatch(client, NAMESPACE)  # type: ignore[arg-type]
    return KueueEngine(watch, Door(watch))


async def everyone_asked(client: CountingClient) -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_triggers_starting_together_probe_kueue_and_its_configuration_once():
    client = CountingClient()
    engine = engine_on(client)
    asking = [asyncio.ensure_future(engine.takes(unlabelled_job(i))) for i in range(TRIGGERS)]
    await everyone_asked(client)
    client.release.set()
    assert await asyncio.gather(*asking) == [False] * TRIGGERS
    assert client.requests == Counter({("get", "configmaps"): 1, ("list", "workloads"): 1})


async def test_triggers_of_kueue_jobs_on_a_cluster_without_kueue_probe_once():
    client = CountingClient()
    engine = engine_on(client)
    asking = [asyncio.ensure_future(engine.observe(queued_job(i))) for i in range(TRIGGERS)]
    await everyone_asked(client)
    client.release.set()
    statuses = await asyncio.gather(*asking)
    assert {s.reason for s in statuses} == {kueue.no_api_status(queued_job(0)).reason}
    assert client.requests == Counter({("list", "workloads"): 1})


async def test_the_namespaces_labels_are_read_once_for_every_job_kueues_configuration_may_take():
    config = "manageJobsWithoutQueueName: true\n"
    client = CountingClient(kueue_config=config)
    asking = [
        asyncio.ensure_future(kueue_cluster.configured_to_take(client, unlabelled_job(i)))  # type: ignore[arg-type]
        for i in range(TRIGGERS)
    ]
    await everyone_asked(client)
    client.release.set()
    assert await asyncio.gather(*asking) == [True] * TRIGGERS
    assert client.requests == Counter({("get", "configmaps"): 1, ("get", "namespaces"): 1})


async def test_jobs_asked_about_by_the_api_server_probe_kueues_workloads_once_where_none_are_served():
    client = CountingClient()
    asking = [
        asyncio.ensure_future(kueue_cluster.workload_of(client, unlabelled_job(i)))  # type: ignore[arg-type]
        for i in range(TRIGGERS)
    ]
    await everyone_asked(client)
    client.release.set()
    assert await asyncio.gather(*asking) == [None] * TRIGGERS
    assert client.requests == Counter({("list", "workloads"): 1})
    await kueue_cluster.workload_of(client, unlabelled_job(0))  # type: ignore[arg-type]
    assert client.requests[("list", "workloads")] == 1  # the answer holds: no Kueue here


async def test_a_failed_probe_is_not_kept_the_next_caller_probes_again():
    client = CountingClient()
    engine = engine_on(client)
    client.fail_next["workloads"] = KubeError(500, "InternalError", "etcd leader changed")
    asking = [asyncio.ensure_future(engine.observe(queued_job(i))) for i in range(10)]
    await everyone_asked(client)
    client.release.set()
    results = await asyncio.gather(*asking, return_exceptions=True)
    assert all(isinstance(r, KubeError) and r.status == 500 for r in results)
    assert client.requests[("list", "workloads")] == 1
    status = await engine.observe(queued_job(0))
    assert status is not None and status.reason == kueue.no_api_status(queued_job(0)).reason
    assert client.requests[("list", "workloads")] == 2


async def test_a_trigger_cancelled_while_the_probe_is_in_flight_leaves_it_to_the_others():
    client = CountingClient()
    engine = engine_on(client)
    first = asyncio.ensure_future(engine.observe(queued_job(0)))  # it starts the probe
    others = [asyncio.ensure_future(engine.observe(queued_job(i))) for i in range(1, 10)]
    await everyone_asked(client)
    first.cancel()
    await everyone_asked(client)
    client.release.set()
    statuses = await asyncio.gather(*others)
    assert all(s is not None for s in statuses)
    with pytest.raises(asyncio.CancelledError):
        await first
    assert client.requests == Counter({("list", "workloads"): 1})
