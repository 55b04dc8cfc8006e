"""A gang that cannot be placed whole is requeued whole: a torchrun job of 2 nodes on a cluster with room
for one node's pod never keeps that pod's GPUs while it waits for the other; after schedule_timeout it is
suspended (every pod deleted), its reservation goes, and it waits at its place in the queue."""

from __future__ import annotations

import pytest
from sim_fixtures import cluster_fixture

from airflow_jobs_plugin.cluster import watch as shared
from airflow_jobs_plugin.cluster.kube import JOBS, PODS
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.kinds.mpi import MPIJOBS
from airflow_jobs_plugin.queueing.engines.pool import Admission
from airflow_jobs_plugin.queueing.quota import ledger as ledger_io

from .conftest import NAMESPACE, annotation, create_jobs, job_body, ledger_of, put_policy, unique, wait_for

cluster = cluster_fixture(nodes=2, controller=False)


async def test_a_torchrun_job_that_only_half_fits_is_requeued_whole_and_holds_no_gpus(client):
    group, name = unique("gang"), unique("policy")
    await put_policy(
        client,
        name,
        f"groups:\n  {group}: {{gpus: 24, user_gpus: 24}}\n"
        "schedule_timeout: 1s\nrequeue_limit: 5\nrequeue_backoff: {base: 60s, cap: 60s}\n",
    )
    watch = await shared.acquire("kubernetes_default", NAMESPACE)
    admission = Admission.for_watch(watch, quota_configmap=name, quota_namespace=NAMESPACE)
    admission.start_group(group)
    # One node of the two is taken whole: only one of the gang's two 8-GPU pods can be placed.
    (blocker,) = await create_jobs(client, job_body(group, "ann", 8, run=10_000, task="blocker"))

    async def admitted(job: dict) -> dict | None:
        current = await client.get(JOBS, NAMESPACE, job["metadata"]["name"])
        return current if annotation(current, labels.ADMITTED_AT) else None

    await wait_for(lambda: admitted(blocker))
    (gang,) = await create_jobs(
        client, job_body(group, "bob", 8, run=10_000, task="gang", framework="torchrun", workers=2)
    )
    gang_name = gang["metadata"]["name"]

    async def pods_of_gang() -> list[dict]:
        return (
            await client.list(PODS, NAMESPACE, label_selector=f"batch.kubernetes.io/job-name={gang_name}")
        )["items"]

    async def half_placed() -> list[dict] | None:
        pods = await pods_of_gang()
        placed = [p for p in pods if p["spec"].get("nodeName")]
        return pods if len(pods) == 2 and len(placed) == 1 else None

    await wait_for(half_placed)

    async def requeued() -> dict | None:
        current = await client.get(JOBS, NAMESPACE, gang_name)
        return current if annotation(current, labels.REQUEUE_COUNT) == "1" else None

    job = await wait_for(requeued)
    assert ledger_io.is_suspended(job)
    # The pod that was placed is gone with the one that was not: no half-started gang holds GPUs.
    assert await wait_for(lambda: _none_left(pods_of_gang)) is True

    async def only_the_blocker_holds_gpus() -> bool:
        # Released by the requeue, or (adopted meanwhile by a pass that still saw it running) by the
        # pass the gang's last pod's end wakes: a reservation is kept while the job's pods live.
        return [r.job for r in (await ledger_of(client, group)).reservations] == [blocker["metadata"]["name"]]

    await wait_for(only_the_blocker_holds_gpus)


async def _none_left(pods_of_gang) -> bool | None:
    return True if not await pods_of_gang() else None


async def _gpus_on_nodes(client, group: str) -> int:
    pods = (await client.list(PODS, NAMESPACE))["items"]
    total = 0
    for pod in pods:
        if (pod["metadata"].get("annotations") or {}).get(labels.GROUP_NAME) != group:
            continue
        if not pod["spec"].get("nodeName") or (pod.get("status") or {}).get("phase") in (
            "Succeeded",
            "Failed",
        ):
            continue
        for container in pod["spec"]["containers"]:
            total += int(((container.get("resources") or {}).get("limits") or {}).get(labels.GPU_RESOURCE, 0))
    return total


@pytest.mark.parametrize("framework", ["mpi", "torchrun"])
async def test_a_preempted_gang_goes_whole_and_its_preemptor_starts_only_after(client, framework):
    group, name = unique("gangpre"), unique("policy")
    await put_policy(
        client, name, f"groups:\n  {group}: {{gpus: 8, preemption: {{within_group: lower_priority}}}}\n"
    )
    watch = await shared.acquire("kubernetes_default", NAMESPACE)
    admission = Admission.for_watch(watch, quota_configmap=name, quota_namespace=NAMESPACE)
    admission.start_group(group)
    (gang,) = await create_jobs(
        client, job_body(group, "ann", 4, run=10_000, task="gang", framework=framework, workers=2)
    )
    resource = MPIJOBS if gang["kind"] == "MPIJob" else JOBS

    async def gang_running() -> bool:
        return await _gpus_on_nodes(client, group) == 8

    await wait_for(gang_running, timeout=30)
    (urgent,) = await create_jobs(client, job_body(group, "bob", 8, run=10_000, task="urgent", priority=100))
    peak = 0

    async def urgent_running() -> bool:
        nonlocal peak
        peak = max(peak, await _gpus_on_nodes(client, group))
        current = await client.get(JOBS, NAMESPACE, urgent["metadata"]["name"])
        return bool(annotation(current, labels.ADMITTED_AT)) and await _gpus_on_nodes(client, group) == 8

    await wait_for(urgent_running, timeout=30, interval=0.02)
    assert peak <= 8  # never the urgent job's pods beside what is left of the gang
    preempted = await client.get(resource, NAMESPACE, gang["metadata"]["name"])
    assert ledger_io.is_suspended(preempted)
    assert annotation(preempted, labels.PREEMPTIONS) == "1"
    assert annotation(preempted, labels.VERDICT) is None
