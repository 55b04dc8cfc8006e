"""Stop and resume through the real admission: a stopped job gives its GPUs back, is never released
again until resumed, and then returns to its original position in its group's queue."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from airflow_jobs_plugin.cluster import watch as shared
from airflow_jobs_plugin.cluster.kube import JOBS
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.queueing.engines.pool import Admission
from airflow_jobs_plugin.queueing.engines.unmanaged import UnmanagedEngine
from airflow_jobs_plugin.queueing.quota import ledger as ledger_io
from airflow_jobs_plugin.usecases import actions

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
from .test_quota_shell_never_fits import job_failed


async def admission_for(client, group_gpus: int, extra: str = "") -> tuple[str, Admission]:
    group, name = unique("stop"), unique("policy")
    await put_policy(
        client, name, f"groups:\n  {group}: {{gpus: {group_gpus}, user_gpus: {group_gpus}}}\n{extra}"
    )
    watch = await shared.acquire("kubernetes_default", NAMESPACE)
    await watch.wait_synced(timeout=30)
    return group, Admission.for_watch(watch, quota_configmap=name, quota_namespace=NAMESPACE)


def stop_patch(who: str = "alice") -> dict:
    """What a user's stop writes: who and when, and the suspension that deletes the pods."""
    return {
        "metadata": {"annotations": {labels.STOPPED_AT: "2026-01-01T00:00:00Z", labels.STOPPED_BY: who}},
        "spec": {"suspend": True},
    }


RESUME = {"metadata": {"annotations": {labels.STOPPED_AT: None, labels.STOPPED_BY: None}}}


async def test_a_stopped_job_frees_its_quota_for_the_next_and_resumes_at_its_original_position(client):
    group, admission = await admission_for(client, 2)
    first, second, third = await create_jobs(
        client,
        job_body(group, "ann", 2, run=10_000, task="first"),
        job_body(group, "bob", 2, run=10_000, task="second"),
        job_body(group, "cy", 2, run=10_000, task="third"),
    )
    name = first["metadata"]["name"]
    await admission.run_pass(group)
    assert [r.job for r in (await ledger_of(client, group)).reservations] == [name]

    await client.merge_patch(JOBS, NAMESPACE, name, stop_patch())

    async def second_admitted() -> bool:
        await admission.run_pass(group)
        reserved = [r.job for r in (await ledger_of(client, group)).reservations]
        return reserved == [second["metadata"]["name"]]

    await wait_for(second_admitted)
    stopped = await client.get(JOBS, NAMESPACE, name)
    assert ledger_io.is_suspended(stopped)
    assert annotation(stopped, labels.QUEUED_AT) == annotation(first, labels.QUEUED_AT)
    status = await admission.ensure({**stopped, "kind": "Job"})
    assert status is not None and status.reason == "Stopped"

    # Resumed while the group is full: it waits at the head of the queue, ahead of the third job that
    # was queued after it, and is not released until the GPUs are free.
    await client.merge_patch(JOBS, NAMESPACE, name, RESUME)
    resumed = await wait_for(
        lambda: (j := admission.watch.get(JOBS, name)) and not annotation(j, labels.STOPPED_AT) and j
    )
    status = await admission.ensure(resumed)
    assert status is not None and (status.reason, status.position) == ("GroupQuota", 1)
    third_status = await admission.ensure(admission.watch.get(JOBS, third["metadata"]["name"]))
    assert third_status is not None and (third_status.reason, third_status.position) == ("BehindHead", 2)


async def test_a_job_stopped_after_running_longer_than_its_queue_timeout_waits_for_its_resume_and_runs_again(
    client,
):
    group, admission = await admission_for(client, 2, "queue_timeout: 1h\n")
    (job,) = await create_jobs(client, job_body(group, "ann", 2, run=10_000, task="long-run"))
    name = job["metadata"]["name"]
    await admission.run_pass(group)
    # It waited ten seconds for quota two hours ago and has run ever since.
    two_hours_ago = datetime.now(timezone.utc) - timedelta(hours=2)
    await client.merge_patch(
        JOBS,
        NAMESPACE,
        name,
        {
            "metadata": {
                "annotations": {
                    labels.QUEUED_AT: ledger_io.rfc3339(two_hours_ago),
                    labels.ADMITTED_AT: ledger_io.rfc3339(two_hours_ago + timedelta(seconds=10)),
                }
            }
        },
    )
    running = await wait_for(
        lambda: (j := admission.watch.get(JOBS, name)) and annotation(j, labels.ADMITTED_AT) and j
    )

    stopped = await actions.stop(client, NAMESPACE, running, "ann")
    assert stopped.done, stopped.message
    current = await client.get(JOBS, NAMESPACE, name)
    assert annotation(current, labels.QUEUE_WAITED) == "10.000"

    async def released() -> bool:
        await admission.run_pass(group)
        return (await ledger_of(client, group)).reservations == ()

    await wait_for(released)
    current = await client.get(JOBS, NAMESPACE, name)
    assert annotation(current, labels.VERDICT) is None
    status = await admission.ensure(current)
    assert status is not None and status.reason == "Stopped"

    resumed = await actions.resume(client, NAMESPACE, current, "ann", NAMESPACE)
    assert resumed.done, resumed.message

    async def admitted_again() -> bool:
        await admission.run_pass(group)
        return [r.job for r in (await ledger_of(client, group)).reservations] == [name]

    await wait_for(admitted_again)
    assert annotation(await client.get(JOBS, NAMESPACE, name), labels.VERDICT) is None


async def test_a_job_stopped_after_waiting_past_its_queue_timeout_fails_as_the_queue_timeout_says(client):
    group, admission = await admission_for(client, 2, "queue_timeout: 1s\n")
    body = job_body(group, "ann", 2, run=10_000, task="stopped")
    body["metadata"]["annotations"].update(
        {
            labels.STOPPED_AT: "2026-01-01T00:00:00Z",
            labels.STOPPED_BY: "ann",
            labels.QUEUED_AT: "2026-01-01T00:00:00Z",
            # It had waited five seconds for quota when it was stopped.
            labels.QUEUE_WAITED: "5",
        }
    )
    (job,) = await create_jobs(client, body)

    async def failed() -> dict | None:
        await admission.run_pass(group)
        current = await client.get(JOBS, NAMESPACE, job["metadata"]["name"])
        return current if annotation(current, labels.VERDICT) else None

    current = await wait_for(failed)
    assert annotation(current, labels.VERDICT) == "QueueTimeout"
    assert "stopped at 2026-01-01T00:00:00Z" in (annotation(current, labels.VERDICT_MESSAGE) or "")
    assert await reservations_once_released(client, group) == ()
    # Its controller marks it Failed (kubectl shows Failed, not Suspended as a queued job), without a pod.
    failed = await wait_for(lambda: job_failed(client, job["metadata"]["name"]))
    assert failed["spec"]["parallelism"] == 0


async def test_without_a_quota_policy_a_stopped_job_is_not_released_either(client):
    watch = await shared.acquire("kubernetes_default", NAMESPACE)
    await watch.wait_synced(timeout=30)
    admission = UnmanagedEngine.for_watch(watch)
    body = job_body(unique("free"), "ann", 1, task="stopped")
    body["metadata"]["annotations"].update(
        {labels.STOPPED_AT: "2026-01-01T00:00:00Z", labels.STOPPED_BY: "ann"}
    )
    (job,) = await create_jobs(client, body)

    status = await admission.ensure(job)

    assert status is not None and status.reason == "Stopped"
    assert ledger_io.is_suspended(await client.get(JOBS, NAMESPACE, job["metadata"]["name"]))
