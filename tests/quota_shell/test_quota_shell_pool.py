"""The process's admission worker: one coalesced pass serves every waiting trigger; MPI jobs."""

from __future__ import annotations

import asyncio

from airflow_jobs_plugin.cluster import watch as shared
from airflow_jobs_plugin.cluster.kube import JOBS
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.kinds.mpi import MPIJOBS
from airflow_jobs_plugin.queueing.engines.pool import Admission
from airflow_jobs_plugin.queueing.quota import ledger as ledger_io

from .conftest import (
    NAMESPACE,
    annotation,
    create_jobs,
    job_body,
    ledger_of,
    put_policy,
    unique,
    wait_for,
)

WAITING = 120


async def admission_for(client, policy_text: str) -> tuple[str, Admission]:
    group, name = unique("pool"), unique("policy")
    await put_policy(client, name, policy_text.format(group=group))
    watch = await shared.acquire("kubernetes_default", NAMESPACE)
    await watch.wait_synced(timeout=30)
    return group, Admission.for_watch(watch, quota_configmap=name, quota_namespace=NAMESPACE)


async def test_many_waiting_triggers_of_a_group_share_one_pass(client, cluster):
    group, admission = await admission_for(client, "groups:\n  {group}: {{gpus: 2, user_gpus: 2}}\n")
    (running,) = await create_jobs(client, job_body(group, "ann", 2, run=10_000, task="running"))
    await admission.run_pass(group)
    queued = await create_jobs(client, *(job_body(group, f"u{i}", 1, task=f"q{i}") for i in range(WAITING)))
    names = [j["metadata"]["name"] for j in queued]

    def all_cached() -> list[dict] | None:
        jobs = [admission.watch.get(JOBS, n) for n in names]
        return jobs if all(jobs) else None

    cached = await wait_for(all_cached)
    await asyncio.sleep(0.3)  # let the passes the creations caused run before counting requests
    cluster.reset_counters()

    statuses = await asyncio.gather(*(admission.ensure(job) for job in cached))

    assert [s.position for s in statuses] == list(range(1, WAITING + 1))
    assert statuses[0].reason == "GroupQuota" and {s.reason for s in statuses[1:]} == {"BehindHead"}
    counters = cluster.counters()
    assert counters.get(("get", "configmaps"), 0) <= 2  # one ledger read per pass, not per trigger
    assert counters.get(("patch", "jobs"), 0) == 0


async def test_an_mpi_job_is_charged_for_every_replica_and_admitted_by_unsuspending_its_run_policy(client):
    group, admission = await admission_for(
        client, "groups:\n  {group}: {{gpus: 4, user_gpus: 4}}\nschedule_timeout: 2s\n"
    )
    bodies = [job_body(group, user, 2, workers=2, run=300, task=f"mpi-{user}") for user in ("ann", "ben")]
    first, second = await create_jobs(client, *bodies)
    admission.start_group(group)

    async def get(job: dict) -> dict:
        current = await client.get(MPIJOBS, NAMESPACE, job["metadata"]["name"])
        current.setdefault("kind", "MPIJob")
        return current

    async def first_running():
        return not ledger_io.is_suspended(await get(first))

    await wait_for(first_running)
    (reservation,) = (await ledger_of(client, group)).reservations
    assert (reservation.job, reservation.gpus) == (first["metadata"]["name"], 4)
    decision = await wait_for(lambda: admission.decision(second["metadata"]["uid"]))
    assert decision.reason == "GroupQuota"
    assert decision.message == f"group {group} uses 4 of 4 GPUs; this job needs 4"

    # Every replica placed in time: past the schedule deadline the job keeps running, not requeued.
    async def first_done():
        return ledger_io.is_finished(await get(first))

    await wait_for(first_done, timeout=30)
    assert annotation(await get(first), labels.REQUEUE_COUNT) == "0"

    async def second_running():
        return not ledger_io.is_suspended(await get(second))

    await wait_for(second_running)
