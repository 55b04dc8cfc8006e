"""What a trigger says of its waiting job: it reads the admission controller's queue board, and writes
nothing (queueing/engines/observer.py). Here no controller runs: each test writes the board itself, as
the controller would, so the trigger's lines are checked against exactly what was published."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

from sim_fixtures import cluster_fixture

from airflow_jobs_plugin.airflow.triggers import JobTrigger
from airflow_jobs_plugin.cluster.kube import CONFIGMAPS, JOBS, KubeClient
from airflow_jobs_plugin.cluster.objects import rfc3339
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.queueing import board
from airflow_jobs_plugin.queueing.engines.observer import NOT_JUDGED
from airflow_jobs_plugin.queueing.quota.ledger import unsuspend_patch
from tests.patience import Deadline

from .conftest import job_manifest, task_identity

cluster = cluster_fixture(nodes=1, controller=False)


async def publish(client: KubeClient, unit: str, entries: dict[str, board.BoardEntry]) -> None:
    """Write ``unit``'s board as the admission controller does."""
    body = board.configmap(board.Board(unit, datetime.now(timezone.utc), "controller", entries), "default")
    current = await client.get_or_none(CONFIGMAPS, "default", body["metadata"]["name"])
    if current is None:
        await client.create(CONFIGMAPS, "default", body)
    else:
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        await client.replace(CONFIGMAPS, "default", body)


async def queued_job(client: KubeClient, **annotations: str) -> dict:
    body = job_manifest(task_identity(), scenario={"main": {"run": 5}})
    body["metadata"]["annotations"].update(annotations)
    return await client.create(JOBS, "default", body)


async def until_logged(capsys, text: str, seconds: float = 10) -> str:
    """The captured output once it holds ``text`` (the trigger logs it when it looks)."""
    seen = ""
    deadline = Deadline(seconds)
    while text not in seen:
        if deadline.passed():
            raise AssertionError(f"never logged {text!r} in {deadline}:\n{seen}")
        await asyncio.sleep(0.05)
        seen += capsys.readouterr().out
    return seen


def follow(job: dict) -> asyncio.Task:
    trigger = JobTrigger(job_name=job["metadata"]["name"], namespace="default", stream_logs=False)

    async def collect() -> list[dict]:
        return [e.payload async for e in trigger.run()]

    return asyncio.create_task(collect())


async def test_a_job_no_decision_was_published_for_waits_for_the_admission_controller(client, capsys):
    job = await queued_job(client)
    task = follow(job)
    try:
        await until_logged(capsys, f"Job {job['metadata']['name']}: QUEUED: {NOT_JUDGED}")
    finally:
        task.cancel()


async def test_the_boards_reason_and_position_are_the_task_logs_and_its_change_wakes_the_trigger(
    client, capsys
):
    job = await queued_job(client)
    uid, name = job["metadata"]["uid"], job["metadata"]["name"]
    waits = "group vision uses 6 of 8 GPUs; this job needs 4"
    await publish(client, "vision", {uid: board.BoardEntry("GroupQuota", 1, waits)})
    task = follow(job)
    try:
        await until_logged(capsys, f"Job {name}: QUEUED (GroupQuota): {waits} (position 1)")
        await publish(client, "vision", {uid: board.BoardEntry("Admitted", 0, "admitted")})
        # Admitted means GPUs reserved: SCHEDULING / QuotaReserved, never "QUEUED: admitted".
        logged = await until_logged(capsys, f"Job {name}: SCHEDULING (QuotaReserved")
        assert "1 GPU(s) reserved" in logged
        assert not [line for line in logged.splitlines() if "QUEUED" in line and "admitted" in line]
        # The controller's unsuspend lands: the job runs and the trigger follows it to the end.
        await client.merge_patch(
            JOBS, "default", name, unsuspend_patch(job, datetime.now(timezone.utc), conditional=False)
        )
        (event,) = await asyncio.wait_for(task, 60 * Deadline(1).factor)
        assert (event["status"], event["state"]) == ("success", "SUCCEEDED")
        # The trigger wrote nothing on the job: the admission fields are the controller's only.
        after = await client.get(JOBS, "default", name)
        assert after["metadata"]["annotations"].get(labels.VERDICT) is None
    finally:
        task.cancel()


async def test_a_job_in_its_retry_back_off_says_so_before_any_decision(client, capsys):
    until = datetime.now(timezone.utc) + timedelta(minutes=5)
    job = await queued_job(client, **{labels.REQUEUE_NOT_BEFORE: rfc3339(until)})
    task = follow(job)
    try:
        await until_logged(capsys, f"Job {job['metadata']['name']}: QUEUED: retry back-off")
    finally:
        task.cancel()


async def test_a_board_the_trigger_cannot_read_leaves_the_job_waiting_for_the_controller(client, capsys):
    job = await queued_job(client)
    await client.create(
        CONFIGMAPS,
        "default",
        {
            "metadata": {"name": board.board_name("broken"), "labels": {board.BOARD_LABEL: "true"}},
            "data": {board.BOARD_KEY: "not json"},
        },
    )
    task = follow(job)
    try:
        await until_logged(capsys, f"Job {job['metadata']['name']}: QUEUED: {NOT_JUDGED}")
    finally:
        task.cancel()
