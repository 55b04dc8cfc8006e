"""Stuck starts and timeouts, driven by the process's admission worker on the simulated cluster.

An admitted job whose pod cannot be placed (a node selector no node matches) is suspended again after
schedule_timeout, its GPUs go to the next job, and after its back-off it is judged again at its
original position; past requeue_limit it fails with OverRequeueLimit. A job waiting longer than its
queue_timeout fails with QueueTimeout; one that can never fit fails with OverQuota.
"""

from __future__ import annotations

import pytest

from airflow_jobs_plugin.cluster import watch as shared
from airflow_jobs_plugin.cluster.kube import JOBS
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.queueing import quota
from airflow_jobs_plugin.queueing.engines.pool import Admission
from airflow_jobs_plugin.queueing.quota import ledger as ledger_io

from .conftest import (
    NAMESPACE,
    annotation,
    create_jobs,
    job_body,
    ledger_of,
    put_policy,
    reservations_once_released,
    unique,
    wait_for,
)

NOWHERE = {"pool": "nowhere"}


@pytest.fixture
async def pool(client):
    """A fresh group under a fresh policy, served by this process's admission worker."""

    async def start(policy_text: str) -> tuple[str, Admission]:
        group, name = unique("rq"), unique("policy")
        await put_policy(client, name, policy_text.format(group=group))
        watch = await shared.acquire("kubernetes_default", NAMESPACE)
        admission = Admission.for_watch(watch, quota_configmap=name, quota_namespace=NAMESPACE)
        admission.start_group(group)
        return group, admission

    return start


async def failure_target(client, name: str) -> bool:
    job = await client.get(JOBS, NAMESPACE, name)
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(c["type"] == "FailureTarget" and c["status"] == "True" for c in conditions)


def job_getter(client, job: dict):
    async def get() -> dict:
        return await client.get(JOBS, NAMESPACE, job["metadata"]["name"])

    return get


async def test_a_stuck_job_is_requeued_keeps_its_position_and_fails_past_the_limit(client, pool):
    group, admission = await pool(
        "groups:\n  {group}: {{gpus: 2, user_gpus: 2}}\n"
        "schedule_timeout: 1s\nrequeue_limit: 1\nrequeue_backoff: {{base: 1s, cap: 2s}}\n"
    )
    stuck, other = await create_jobs(
        client,
        job_body(group, "sam", 2, node_selector=NOWHERE, task="stuck"),
        job_body(group, "will", 2, run=200, task="other"),
    )
    get_stuck, get_other = job_getter(client, stuck), job_getter(client, other)

    # The stuck job is admitted first; after schedule_timeout it goes back to the queue with a back-off
    # and its GPUs go to the next job, which does not wait for the back-off.
    async def stuck_admitted():
        job = await get_stuck()
        return job if annotation(job, labels.ADMITTED_AT) else None

    first = await wait_for(stuck_admitted)
    await wait_for(lambda: admission.decision(other["metadata"]["uid"]))
    assert admission.decision(other["metadata"]["uid"]).reason == "GroupQuota"

    async def requeued():
        job = await get_stuck()
        return job if annotation(job, labels.REQUEUE_COUNT) == "1" else None

    job = await wait_for(requeued)
    assert ledger_io.is_suspended(job) and annotation(job, labels.REQUEUE_NOT_BEFORE)
    assert annotation(job, labels.QUEUED_AT) == annotation(first, labels.QUEUED_AT)

    async def other_admitted():
        return annotation(await get_other(), labels.ADMITTED_AT)

    await wait_for(other_admitted)
    assert stuck["metadata"]["uid"] not in {r.uid for r in (await ledger_of(client, group)).reservations}

    # A job queued after the requeue stands behind the stuck job, which keeps its original place.
    (late,) = await create_jobs(client, job_body(group, "xena", 2, run=5, task="late"))
    late_uid = late["metadata"]["uid"]
    decision = await wait_for(lambda: admission.decision(late_uid))
    assert decision.position == 2
    assert admission.decision(stuck["metadata"]["uid"]).position == 1

    # Back-off over and the other job done, the stuck job is admitted again before the late one ...
    async def readmitted():
        job = await get_stuck()
        return job if not ledger_io.is_suspended(job) else None

    await wait_for(readmitted)
    assert ledger_io.is_suspended(await job_getter(client, late)())

    # ... and, stuck again with its one requeue spent, fails; the late job starts.
    async def failed():
        job = await get_stuck()
        return job if annotation(job, labels.VERDICT) else None

    job = await wait_for(failed)
    assert annotation(job, labels.VERDICT) == "OverRequeueLimit"
    assert "requeue_limit: 1" in annotation(job, labels.VERDICT_MESSAGE)
    # Ended by its own controller (activeDeadlineSeconds): it rules the job failed (FailureTarget, then
    # Failed once the pod garbage collector has removed its never-placed pod, which the simulator lacks).
    assert job["spec"]["activeDeadlineSeconds"] == ledger_io.ENDING_DEADLINE_SECONDS
    await wait_for(lambda: failure_target(client, stuck["metadata"]["name"]))

    async def late_admitted():
        return annotation(await job_getter(client, late)(), labels.ADMITTED_AT)

    await wait_for(late_admitted)
    held = {r.uid for r in (await ledger_of(client, group)).reservations}
    assert stuck["metadata"]["uid"] not in held


async def test_a_job_queued_longer_than_its_queue_timeout_fails_with_queue_timeout(client, pool):
    group, admission = await pool("groups:\n  {group}: {{gpus: 2, user_gpus: 2}}\n")
    running, waiting = await create_jobs(
        client,
        job_body(group, "ann", 2, run=10_000, task="running"),
        job_body(group, "ben", 2, task="waiting", annotations={labels.QUEUE_TIMEOUT: "1"}),
    )

    async def timed_out():
        job = await job_getter(client, waiting)()
        return job if annotation(job, labels.VERDICT) else None

    job = await wait_for(timed_out)
    assert annotation(job, labels.VERDICT) == "QueueTimeout"
    assert "longer than queue_timeout 1s" in annotation(job, labels.VERDICT_MESSAGE)
    assert waiting["metadata"]["uid"] not in {r.uid for r in (await ledger_of(client, group)).reservations}
    assert not ledger_io.is_suspended(await job_getter(client, running)())


async def test_a_job_that_can_never_fit_fails_with_over_quota(client, pool):
    group, admission = await pool("groups:\n  {group}: {{gpus: 4, user_gpus: 2}}\n")
    (job,) = await create_jobs(client, job_body(group, "ann", 3, task="big"))

    async def failed():
        current = await job_getter(client, job)()
        return current if annotation(current, labels.VERDICT) else None

    current = await wait_for(failed)
    assert annotation(current, labels.VERDICT) == "OverQuota"
    assert f"user ann may hold at most 2 GPUs in group {group}" in annotation(current, labels.VERDICT_MESSAGE)
    assert await reservations_once_released(client, group) == ()


async def test_a_requeue_killed_between_its_suspend_and_its_release_is_repaired_by_the_next_pass(client):
    group = unique("rq")
    policy = quota.parse_policy(f"groups:\n  {group}: {{gpus: 2, user_gpus: 2}}\nschedule_timeout: 1s\n")

    async def run_pass():
        from .conftest import list_jobs

        return await ledger_io.admission_pass(
            client, ledger_namespace=NAMESPACE, group=group, policy=policy, jobs=lambda: list_jobs(client)
        )

    (stuck,) = await create_jobs(client, job_body(group, "sam", 2, node_selector=NOWHERE, task="stuck"))
    await run_pass()
    job = await job_getter(client, stuck)()

    class Crash(Exception):
        pass

    def die(step: str) -> None:
        if step.startswith("requeue-patched:"):
            raise Crash(step)

    with pytest.raises(Crash):
        await ledger_io.requeue_stuck(
            client, job, ledger_namespace=NAMESPACE, settings=policy.requeue, now=ledger_io.utcnow(), hook=die
        )
    job = await job_getter(client, stuck)()
    assert ledger_io.is_suspended(job) and annotation(job, labels.REQUEUE_COUNT) == "1"
    assert [r.uid for r in (await ledger_of(client, group)).reservations] == [stuck["metadata"]["uid"]]

    outcome = await run_pass()

    assert [d.reason.value for d in outcome.drops] == ["JobRequeued"]
    assert outcome.ledger.reservations == ()
    (decision,) = outcome.decisions
    assert decision.reason == "BackingOff" and decision.position == 1
