"""JobSensor waits on the triggerer for a job something else submitted."""

from __future__ import annotations

import asyncio
import json

import pytest
from airflow.exceptions import AirflowException
from airflow.sdk.exceptions import TaskDeferred

from airflow_jobs_plugin.airflow.sensors import JobSensor
from airflow_jobs_plugin.cluster import watch as shared
from airflow_jobs_plugin.cluster.kube import JOBS, KubeClient


def plain_job(name: str, *, exit_code: int = 0, labels: dict | None = None, run: int = 2) -> dict:
    """A batch/v1 Job as any other tool would submit it: no product labels."""
    scenario = json.dumps({"main": {"run": run, "exit": exit_code}})
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {
                    "labels": labels or {},
                    "annotations": {"sim.airflow-jobs.io/scenario": scenario},
                },
                "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox:1"}]},
            },
        },
    }


def sensor_event(sensor: JobSensor, create: dict | None, kubeconfig: str, timeout: float = 60) -> dict:
    with pytest.raises(TaskDeferred) as info:
        sensor.execute({})

    async def go():
        client = await KubeClient.from_kubeconfig(kubeconfig)
        try:
            run = asyncio.ensure_future(_collect(info.value.trigger))
            await asyncio.sleep(0.2)  # the sensor is already waiting when the job appears
            if create is not None:
                await client.create(JOBS, "default", create)
            return await asyncio.wait_for(run, timeout)
        finally:
            await client.close()
            await shared.shutdown()

    (event,) = asyncio.run(go())
    return event


async def _collect(trigger):
    return [e.payload async for e in trigger.run()]


def test_a_sensor_waits_for_a_job_by_name_even_before_it_exists(cluster):
    sensor = JobSensor(task_id="wait", job_name="external-train-1")
    event = sensor_event(sensor, plain_job("external-train-1"), cluster.kubeconfig_path)
    assert event["status"] == "success" and event["state"] == "SUCCEEDED"
    assert sensor.execute_complete({}, event)["job_name"] == "external-train-1"


def test_a_sensor_by_labels_picks_the_matching_job(cluster):
    sensor = JobSensor(task_id="wait", labels={"team": "speech", "pipeline": "asr"})
    job = plain_job("external-asr-7", labels={"team": "speech", "pipeline": "asr"})
    event = sensor_event(sensor, job, cluster.kubeconfig_path)
    assert event["job_name"] == "external-asr-7" and event["status"] == "success"


def test_a_sensor_fails_the_task_when_the_job_fails(cluster):
    sensor = JobSensor(task_id="wait", job_name="external-train-2")
    event = sensor_event(sensor, plain_job("external-train-2", exit_code=1), cluster.kubeconfig_path)
    assert event["status"] == "failed" and event["state"] == "FAILED"
    with pytest.raises(AirflowException, match="FAILED"):
        sensor.execute_complete({}, event)


def test_a_sensor_can_wait_for_running_rather_than_done(cluster):
    sensor = JobSensor(task_id="wait", job_name="external-train-3", target_states=["RUNNING"])
    # Long enough (30 s) that the sensor's look catches it running rather than finished.
    event = sensor_event(sensor, plain_job("external-train-3", run=3000), cluster.kubeconfig_path)
    assert event["state"] == "RUNNING"


def finished(cluster, job: dict) -> None:
    """Submit ``job`` and wait until it has ended, as a job that finished before anyone looked."""

    async def go():
        client = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
        try:
            await client.create(JOBS, "default", job)
            for _ in range(1000):
                done = await client.get(JOBS, "default", job["metadata"]["name"])
                if any(
                    c.get("type") in ("Complete", "Failed")
                    for c in done.get("status", {}).get("conditions") or []
                ):
                    return
                await asyncio.sleep(0.02)
            raise AssertionError("the job never ended")
        finally:
            await client.close()

    asyncio.run(go())


def test_a_target_the_job_has_passed_is_reached(cluster):
    # The job succeeded before the sensor looked: it was RUNNING, whether or not anyone saw it.
    finished(cluster, plain_job("external-train-4"))
    sensor = JobSensor(task_id="wait", job_name="external-train-4", target_states=["RUNNING"])
    event = sensor_event(sensor, None, cluster.kubeconfig_path)
    assert (event["status"], event["state"]) == ("success", "SUCCEEDED")
    assert sensor.execute_complete({}, event)["state"] == "SUCCEEDED"
    poking = JobSensor(
        task_id="poke", job_name="external-train-4", target_states=["RUNNING"], deferrable=False
    )
    assert poking.poke({}) is True


def test_a_job_that_ended_where_no_target_can_follow_fails_the_sensor_at_once(cluster):
    finished(cluster, plain_job("external-train-5", exit_code=1))
    sensor = JobSensor(
        task_id="wait", job_name="external-train-5", target_states=["SUCCEEDED"], fail_states=[]
    )
    event = sensor_event(sensor, None, cluster.kubeconfig_path)
    assert (event["status"], event["state"]) == ("failed", "FAILED")
    with pytest.raises(AirflowException, match=r"the sensor waited for \['SUCCEEDED'\]"):
        sensor.execute_complete({}, event)
    poking = JobSensor(task_id="poke", job_name="external-train-5", fail_states=[], deferrable=False)
    with pytest.raises(AirflowException, match="never will be"):
        poking.poke({})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of job_name or labels"),
        ({"job_name": "x", "labels": {"a": "b"}}, "exactly one of job_name or labels"),
        ({"job_name": "x", "target_states": ["DONE"]}, "target_states"),
        ({"job_name": "x", "kind": "PyTorchJob"}, "kind"),
        ({"job_name": "x", "target_states": ["FAILED"]}, "must not overlap"),
    ],
)
def test_bad_sensor_arguments_fail_at_parse_time(kwargs, message):
    with pytest.raises(ValueError, match=message):
        JobSensor(task_id="wait", **kwargs)


def test_a_sensor_wait_deferred_by_the_previous_version_resumes_after_an_upgrade(cluster):
    # The previous version deferred JobSensor to JobTrigger(observe=True, ...); the triggerer, upgraded
    # while the task was deferred, rebuilds it from those stored kwargs.
    from airflow_jobs_plugin.airflow.triggers import JobTrigger

    finished(cluster, plain_job("external-train-6"))
    stored = {
        "job_name": "external-train-6",
        "namespace": "default",
        "kind": "Job",
        "kubernetes_conn_id": "kubernetes_default",
        "max_attempts": 1,
        "stream_logs": False,
        "observe": True,
        "label_selector": None,
        "target_states": ["SUCCEEDED"],
        "fail_states": ["FAILED", "CANCELLED"],
    }

    async def go():
        try:
            return await asyncio.wait_for(_collect(JobTrigger(**stored)), 60)
        finally:
            await shared.shutdown()

    (event,) = asyncio.run(go())
    assert (event["status"], event["state"]) == ("success", "SUCCEEDED")
    sensor = JobSensor(task_id="wait", job_name="external-train-6")
    assert sensor.execute_complete({}, event)["state"] == "SUCCEEDED"
