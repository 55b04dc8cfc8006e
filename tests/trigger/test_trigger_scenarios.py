"""JobTrigger against the simulated cluster: one scenario per lifecycle path."""

from __future__ import annotations

import asyncio

from airflow_jobs_plugin.kube import JOBS
from airflow_jobs_plugin.triggers import JobTrigger

from .conftest import job_manifest, task_identity


async def run_trigger(trigger: JobTrigger, timeout: float = 60) -> list[dict]:
    async def collect():
        return [e.payload async for e in trigger.run()]

    return await asyncio.wait_for(collect(), timeout)


async def test_a_job_that_exits_zero_succeeds(client, capsys):
    ident = task_identity()
    body = job_manifest(
        ident, scenario={"main": {"pull": 1, "run": 5, "exit": 0, "logs": ["epoch 1", "epoch 2"]}}
    )
    await client.create(JOBS, "default", body)
    events = await run_trigger(JobTrigger(job_name=body["metadata"]["name"], namespace="default"))
    assert len(events) == 1
    (event,) = events
    assert event["status"] == "success", event
    assert event["state"] == "SUCCEEDED"
    text = capsys.readouterr().out
    assert "QUEUED" in text and "SUCCEEDED" in text
    assert "[worker-0] epoch 2" in text
