"""A trigger reports a job that ended seconds after its task deferred only once the deferral has settled
(airflow/settle.py, jobs/stale_event.py): Airflow 3.3.2's scheduler fails a try resumed before it has
drained the deferring worker's exit."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

from sim_fixtures import held_back

from airflow_jobs_plugin.airflow import settle as settle_module
from airflow_jobs_plugin.airflow.job_sensor_trigger import JobSensorTrigger
from airflow_jobs_plugin.airflow.triggers import JobTrigger
from airflow_jobs_plugin.cluster.kube import JOBS

from .conftest import job_manifest, task_identity

SETTLE = 60.0


async def quick_job(client) -> str:
    body = held_back(job_manifest(task_identity(), scenario={"main": {"run": 0.1, "exit": 0}}))
    await client.create(JOBS, "default", body)
    return body["metadata"]["name"]


async def until_succeeded(client, name: str) -> None:
    for _ in range(int(600 / 0.05)):
        job = await client.get_or_none(JOBS, "default", name)
        if (job or {}).get("status", {}).get("succeeded"):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{name} never succeeded")


async def first_event(trigger: JobTrigger) -> dict:
    async for event in trigger.run():
        return dict(event.payload)
    raise AssertionError("the trigger ended without an event")


async def test_a_job_that_ended_when_its_task_deferred_is_reported_once_the_settle_has_passed(
    client, monkeypatch
):
    monkeypatch.setenv("AIRFLOW__AIRFLOW_JOBS__RESUME_SETTLE_SECONDS", str(SETTLE))
    waits: list[float] = []

    async def recorded(seconds: float) -> None:  # the wait is recorded, not slept: no timing in the test
        waits.append(seconds)

    monkeypatch.setattr(settle_module, "asyncio", SimpleNamespace(sleep=recorded))
    name = await quick_job(client)
    await until_succeeded(client, name)
    deferred = datetime.now(timezone.utc)
    event = await first_event(
        JobTrigger(job_name=name, namespace="default", deferred_at=deferred.isoformat())
    )
    assert event["state"] == "SUCCEEDED", event
    (wait,) = waits
    assert 0 < wait <= SETTLE


async def test_a_trigger_started_long_after_the_deferral_reports_at_once(client, monkeypatch):
    monkeypatch.setenv("AIRFLOW__AIRFLOW_JOBS__RESUME_SETTLE_SECONDS", "3600")
    name = await quick_job(client)
    long_ago = (datetime.now(timezone.utc) - timedelta(hours=2)).isoformat()
    # Were the settle applied, this would wait an hour.
    event = await asyncio.wait_for(
        first_event(JobTrigger(job_name=name, namespace="default", deferred_at=long_ago)), timeout=600
    )
    assert event["state"] == "SUCCEEDED", event


def test_a_setting_that_is_no_number_counts_as_the_default(monkeypatch, caplog):
    from airflow_jobs_plugin.airflow.settle import settle_seconds
    from airflow_jobs_plugin.jobs.stale_event import DEFAULT_SETTLE_SECONDS

    monkeypatch.setenv("AIRFLOW__AIRFLOW_JOBS__RESUME_SETTLE_SECONDS", "fifteen")
    assert settle_seconds() == DEFAULT_SETTLE_SECONDS
    assert "resume_settle_seconds must be a number of seconds" in caplog.text


async def test_a_sensor_that_deferred_on_a_job_already_done_reports_once_the_settle_has_passed(
    client, monkeypatch
):
    # A JobSensor deferring on a job that already succeeded would otherwise fire within a second of its
    # deferral: the race at its likeliest.
    monkeypatch.setenv("AIRFLOW__AIRFLOW_JOBS__RESUME_SETTLE_SECONDS", str(SETTLE))
    waits: list[float] = []

    async def recorded(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(settle_module, "asyncio", SimpleNamespace(sleep=recorded))
    name = await quick_job(client)
    await until_succeeded(client, name)
    trigger = JobSensorTrigger(
        job_name=name, namespace="default", deferred_at=datetime.now(timezone.utc).isoformat()
    )
    async for event in trigger.run():
        assert event.payload["state"] == "SUCCEEDED", event.payload
        break
    (wait,) = waits
    assert 0 < wait <= SETTLE
