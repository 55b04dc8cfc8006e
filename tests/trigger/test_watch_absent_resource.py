"""A custom resource the cluster does not serve (no MPI operator installed) costs the shared watch one
list per ``absent_recheck``, not one every few seconds, and is checked again at once when a trigger or a
sensor needs it (``SharedWatch.want``): the operator has been installed by the time one of its jobs
exists."""

from __future__ import annotations

import asyncio
from collections import Counter

from airflow_jobs_plugin.cluster.kube import JOBS, PODS, KubeError
from airflow_jobs_plugin.cluster.watch import SharedWatch
from airflow_jobs_plugin.jobs import kinds
from tests.patience import stretch

ABSENT = next(kind.resource for kind in kinds.KINDS if kind.resource_may_be_absent)


class NoOperatorYet:
    """A client whose cluster serves Jobs and pods but not ``ABSENT`` until ``install()``; watches
    stay open and deliver nothing."""

    def __init__(self) -> None:
        self.lists: Counter[str] = Counter()
        self.installed = False

    def install(self) -> None:
        self.installed = True

    async def list(self, resource, namespace, **_):
        self.lists[resource.plural] += 1
        if resource == ABSENT and not self.installed:
            raise KubeError(
                404, "NotFound", f"the server could not find the requested resource ({resource.plural})"
            )
        items = []
        if resource == ABSENT:
            items = [{"metadata": {"name": "train-1", "namespace": namespace, "resourceVersion": "7"}}]
        return {"metadata": {"resourceVersion": "7"}, "items": items}

    async def watch(self, resource, namespace, **_):
        if resource == ABSENT and not self.installed:
            raise KubeError(404, "NotFound", "gone")
        await asyncio.Event().wait()
        yield {}  # pragma: no cover - never reached


async def _settle(watch: SharedWatch) -> None:
    assert await watch.wait_synced(timeout=10 * stretch())
    for _ in range(50):  # many loop turns: the old rule (a check every max_backoff) would list again
        await asyncio.sleep(0.01)


async def test_an_absent_resource_is_checked_once_per_recheck_not_at_every_backoff():
    client = NoOperatorYet()
    watch = SharedWatch(client, "ml", resources=(JOBS, ABSENT, PODS), max_backoff=0.001, absent_recheck=3600)  # type: ignore[arg-type]
    watch.start()
    try:
        await _settle(watch)
        assert client.lists[ABSENT.plural] == 1
        assert watch.synced  # an absent resource is listed: none of its jobs exist
    finally:
        await watch.stop()


async def test_a_trigger_that_needs_the_absent_resource_has_it_checked_at_once():
    client = NoOperatorYet()
    watch = SharedWatch(client, "ml", resources=(JOBS, ABSENT, PODS), absent_recheck=3600)  # type: ignore[arg-type]
    watch.start()
    try:
        await _settle(watch)
        client.install()
        arrived = asyncio.Event()
        watch.add_listener(lambda etype, plural, obj: arrived.set() if plural == ABSENT.plural else None)
        watch.want(ABSENT)
        await asyncio.wait_for(arrived.wait(), timeout=10 * stretch())
        assert watch.get(ABSENT, "train-1") is not None
        assert client.lists[ABSENT.plural] == 2
    finally:
        await watch.stop()


async def test_wanting_a_served_resource_costs_no_request():
    client = NoOperatorYet()
    client.install()
    watch = SharedWatch(client, "ml", resources=(JOBS, ABSENT, PODS), absent_recheck=3600)  # type: ignore[arg-type]
    watch.start()
    try:
        await _settle(watch)
        watch.want(ABSENT)
        watch.want(JOBS)
        await _settle(watch)
        assert client.lists == Counter({JOBS.plural: 1, ABSENT.plural: 1, PODS.plural: 1})
    finally:
        await watch.stop()


class _Recording(SharedWatch):
    def __init__(self) -> None:
        super().__init__(None, "ml")  # type: ignore[arg-type] - the cache alone, no API calls
        self.wanted: list[str] = []

    def want(self, resource) -> None:
        self.wanted.append(resource.plural)


def test_a_trigger_asks_the_watch_for_its_kinds_resource_as_it_starts_following():
    from airflow_jobs_plugin.airflow.triggers import JobTrigger, _Follow

    for kind in kinds.KINDS:
        watch = _Recording()
        _Follow(JobTrigger(job_name="train-1", namespace="ml", kind=kind.name), watch)
        assert watch.wanted == [kind.resource.plural]


async def test_a_sensor_waiting_for_a_job_of_an_absent_resource_looks_again_at_its_own_pace(monkeypatch):
    """The operator is installed and the job created after the sensor started: the sensor's next
    recheck, not the watch's long ``absent_recheck``, is when it sees the job."""
    from airflow_jobs_plugin.airflow.job_sensor_trigger import JobSensorTrigger
    from airflow_jobs_plugin.cluster import watch as shared

    client = NoOperatorYet()
    finished = {"status": {"conditions": [{"type": "Succeeded", "status": "True"}]}}
    served = client.list

    async def list_with_status(resource, namespace, **kw):
        listing = await served(resource, namespace, **kw)
        for item in listing["items"]:
            item.update(finished)
        return listing

    client.list = list_with_status  # type: ignore[method-assign]

    async def fake_client_for(conn_id):
        return client

    monkeypatch.setattr(shared, "client_for", fake_client_for)
    kind = next(k for k in kinds.KINDS if k.resource == ABSENT)
    sensor = JobSensorTrigger(job_name="train-1", namespace="ml", kind=kind.name, recheck_interval=0.05)
    events = sensor.run()
    first = asyncio.ensure_future(events.__anext__())
    await asyncio.sleep(0.3)
    assert not first.done() and client.lists[ABSENT.plural] >= 1
    client.install()
    event = await asyncio.wait_for(first, timeout=10 * stretch())
    assert event.payload["status"] == "success"
    await events.aclose()
