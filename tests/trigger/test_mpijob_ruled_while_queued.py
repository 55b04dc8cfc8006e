"""An MPIJob the pool rules failed while it is queued ends Failed on the cluster, as a batch Job does
through its controller, and never starts a pod: the MPI operator has no failed state for a job that never
started, so the product writes its Failed condition, which the operator then leaves alone."""

from __future__ import annotations

import asyncio

import pytest
from sim_fixtures import held_back

from airflow_jobs_plugin.airflow.triggers import JobTrigger
from airflow_jobs_plugin.cluster.kube import JOBS, PODS
from airflow_jobs_plugin.cluster.objects import condition_true
from airflow_jobs_plugin.jobs import kinds, labels
from airflow_jobs_plugin.jobs.kinds.mpi import MPIJOBS
from airflow_jobs_plugin.queueing.quota import ledger
from tests.patience import Deadline

from .conftest import job_manifest, task_identity
from .test_trigger_scenarios import run_trigger

# Nothing here is the simulator's: the same scenario runs against mpi-operator v0.8.2 on the real plane.
pytestmark = pytest.mark.real_cluster


async def _until(read, holds, seconds: float = 8.0):
    """The value ``read`` gives once ``holds`` says so, or the last one read after ``seconds`` of a quiet
    machine (stretched with the load): the caller's assertion then shows it."""
    deadline = Deadline(seconds)
    value = await read()
    while not holds(value) and not deadline.passed():
        await asyncio.sleep(0.02)
        value = await read()
    return value


async def test_an_mpijob_ruled_while_queued_ends_failed_and_starts_no_pod(client):
    # Held in its queue (a retry back-off), so the admission controller lets the ruling below come first.
    body = held_back(job_manifest(task_identity(), workers=2, gpus=1), 120)
    name = body["metadata"]["name"]
    await client.create(MPIJOBS, "default", body)

    async def read() -> dict:
        return await client.get(MPIJOBS, "default", name)

    def conditions(job: dict) -> list[dict]:
        return (job.get("status") or {}).get("conditions") or []

    queued = await _until(read, lambda j: condition_true(j, "Suspended"))
    assert condition_true(queued, "Suspended")
    # The pool's ruling: the verdict first (its own write), then the job's end.
    ruled = await client.merge_patch(
        MPIJOBS, "default", name, ledger.verdict_patch(queued, "QueueTimeout", "waited longer than 1m")
    )
    assert ledger.ruled_while_queued(ruled)
    await ledger.end_ruled_job(client, ruled)
    # The operator syncs it again (any change does): it keeps the Failed status and creates nothing.
    await client.merge_patch(MPIJOBS, "default", name, {"metadata": {"annotations": {"nudge": "1"}}})
    ended = await _until(read, lambda j: j["metadata"].get("annotations", {}).get("nudge") == "1")
    await asyncio.sleep(0.5)  # room for the operator's sync of that change, were it to undo the end
    ended = await read()
    last = conditions(ended)[-1]
    assert (last["type"], last["status"], last["reason"]) == ("Failed", "True", "QueueTimeout")
    assert last["message"] == "waited longer than 1m"
    assert ended["status"].get("completionTime")
    assert ended["spec"]["runPolicy"]["suspend"] is True
    assert ended["metadata"]["annotations"][labels.VERDICT] == "QueueTimeout"
    assert not ledger.ruled_while_queued(ended)  # nothing left to end
    pods = (await client.list(PODS, "default", label_selector=f"{labels.MPI_JOB_NAME}={name}"))["items"]
    assert pods == []
    # Its launcher Job (created suspended with it) ends Failed through the Job controller, with no pod.
    launcher = await _until(
        lambda: client.get(JOBS, "default", kinds.MPI_JOB.launcher_name(ended)),
        lambda j: condition_true(j, "Failed"),
    )
    assert condition_true(launcher, "Failed") and launcher["spec"]["parallelism"] == 0
    pods = (await client.list(PODS, "default"))["items"]
    assert not [p for p in pods if p["metadata"]["name"].startswith(name)]
    mpijob = await read()
    assert conditions(mpijob)[-1]["type"] == "Failed" and mpijob["spec"]["runPolicy"]["suspend"] is True


async def test_the_controller_ends_an_mpijob_whose_ruling_process_stopped_before_writing_its_failed_condition(
    client,
):
    body = held_back(job_manifest(task_identity("ruled_half"), workers=2, gpus=1), 120)
    name = body["metadata"]["name"]
    await client.create(MPIJOBS, "default", body)
    queued = await _until(
        lambda: client.get(MPIJOBS, "default", name), lambda j: condition_true(j, "Suspended")
    )
    # Only the verdict was written: the process that ruled stopped before the job's end.
    await client.merge_patch(
        MPIJOBS, "default", name, ledger.verdict_patch(queued, "Inadmissible", "no flavor fits")
    )
    (event,) = await run_trigger(JobTrigger(job_name=name, namespace="default", kind="MPIJob"))
    assert event["status"] == "failed" and event["reason"] == "Inadmissible", event
    ended = await client.get(MPIJOBS, "default", name)
    last = ended["status"]["conditions"][-1]
    assert (last["type"], last["status"], last["reason"]) == ("Failed", "True", "Inadmissible")
    assert ended["spec"]["runPolicy"]["suspend"] is True
    pods = (await client.list(PODS, "default"))["items"]
    assert not [p for p in pods if p["metadata"]["name"].startswith(name)]
