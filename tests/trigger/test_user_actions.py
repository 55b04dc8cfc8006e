"""What a person does to a running job, and what the task then says: cancel from the GPU Jobs page or
the CLI, ``kubectl delete job``, Airflow's mark failed / mark success / clear, stop and resume.

Each scenario runs the real operator (``execute`` defers, the trigger follows the job on the simulated
cluster, ``execute_complete`` decides) and the same cancel the UI and CLI call (``inspect.cancel``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import time
from datetime import datetime, timedelta, timezone

import pytest
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred
from task_doubles import FakeTI, StateStore, the_api_server_answers_kills

from airflow_jobs_plugin.airflow.operators import JobOperator
from airflow_jobs_plugin.airflow.triggers import AIRFLOW_USER, JobTrigger
from airflow_jobs_plugin.cluster import watch as shared
from airflow_jobs_plugin.cluster.kube import JOBS, PODS, KubeClient
from airflow_jobs_plugin.cluster.objects import time_text
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.outcome import DELETED_BY_SOMEONE
from airflow_jobs_plugin.jobs.spec import TaskIdentity
from airflow_jobs_plugin.queueing.engines import pool as admission
from airflow_jobs_plugin.queueing.pools import POLICY_LABELS
from airflow_jobs_plugin.readmodel import inspect
from tests.patience import Deadline

from .conftest import RUNS

_runs = RUNS  # shared with the package's other modules (conftest.py says why)
FOREVER = '{"main": {"run": null}}'


def train(**kwargs) -> JobOperator:
    values = {
        "task_id": "train",
        "image": "registry.example/trainer:1",
        "group": "vision",
        "gpus": 1,
        "owner": "alice",
        "retries": 2,
        "job_annotations": {"sim.airflow-jobs.io/scenario": FOREVER},
    }
    values.update(kwargs)
    return JobOperator(**values)


class TaskRun:
    """One run of one task (a DAG run), try after try, with the state store Airflow keeps across tries."""

    def __init__(self, op: JobOperator):
        self.op = op
        self.run_id = f"run-{next(_runs)}"
        self.store = StateStore()
        self.max_tries = op.retries  # Airflow's budget before any clear

    def context(self, try_number: int) -> dict:
        ti = FakeTI("nightly", self.op.task_id, self.run_id, -1, try_number, self.max_tries)
        return {"ti": ti, "task_state_store": self.store}

    def execute(self, try_number: int) -> TaskDeferred:
        with pytest.raises(TaskDeferred) as info:
            self.op.execute(self.context(try_number))
        return info.value

    def clear(self, last_try: int) -> None:
        """What a clear does to the budget: the next try starts a new run of the task."""
        self.max_tries = last_try + (self.op.retries or 0)


async def jobs_of(client: KubeClient, task: TaskRun) -> list[dict]:
    key = TaskIdentity("nightly", task.op.task_id, task.run_id).instance_key()
    return (await client.list(JOBS, "default", label_selector=f"{labels.TASK_KEY}={key}"))["items"]


async def until_running(client: KubeClient, name: str) -> None:
    for _ in range(600):
        pods = (await client.list(PODS, "default"))["items"]
        if any(
            name in p["metadata"]["name"] and (p.get("status") or {}).get("phase") == "Running" for p in pods
        ):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{name} never ran")


def follow_while(deferred: TaskDeferred, cluster, action) -> dict:
    """Run the trigger; once the job runs, do ``action(client, name, trigger)``; the trigger's event."""

    async def go():
        client = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
        trigger = deferred.trigger
        try:
            events = asyncio.ensure_future(_collect(trigger))
            await until_running(client, trigger.job_name)
            await action(client, trigger.job_name, trigger)
            return await asyncio.wait_for(events, 60)
        finally:
            await client.close()
            await admission.shutdown()
            await shared.shutdown()

    (event,) = asyncio.run(go())
    return event


async def _collect(trigger):
    return [e.payload async for e in trigger.run()]


async def cancel_from_the_ui(client, name, _trigger):
    await inspect.cancel(client, inspect.Target(quota_configmap=None), name, "bob")


async def kubectl_delete(client, name, _trigger):
    await client.delete(JOBS, "default", name)


async def airflow_mark_failed(client, name, trigger):
    await trigger.on_kill()  # asks, in the triggerer
    await the_api_server_answers_kills(client, "default", "failed")  # confirms in Airflow's database, cancels


def count_jobs(cluster, task: TaskRun) -> int:
    """The task's jobs that are neither being deleted nor cancelled: what a retry would have submitted.
    A cancelled job stays, ended, until its TTL (``actions.cancel``)."""

    async def go():
        client = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
        try:
            return len(
                [
                    j
                    for j in await jobs_of(client, task)
                    if not j["metadata"].get("deletionTimestamp")
                    and (j["metadata"].get("annotations") or {}).get(labels.VERDICT) != "Cancelled"
                ]
            )
        finally:
            await client.close()

    return asyncio.run(go())


def test_a_running_job_cancelled_from_the_ui_or_cli_ends_the_task_cancelled_for_good(cluster, capsys):
    task = TaskRun(train())
    event = follow_while(task.execute(1), cluster, cancel_from_the_ui)
    assert (event["state"], event["reason"], event["cancelled_by"]) == ("CANCELLED", "Cancelled", "bob")
    assert event["cancelled_at"]
    with pytest.raises(AirflowFailException) as raised:
        task.op.execute_complete(task.context(1), event)
    assert str(raised.value).startswith(f"Job default/{event['job_name']} was cancelled by bob at ")
    log = capsys.readouterr().out
    assert f"CANCELLED: cancelled by bob at {time_text(event['cancelled_at'])}" in log
    assert (
        log.rstrip()
        .splitlines()[-1]
        .count(f"was cancelled by bob at {time_text(event['cancelled_at'])}; not retried")
    )
    # Airflow retries anyway (retries=2, a stale executor event): the retry submits nothing.
    with pytest.raises(AirflowFailException, match="try 1 of this task was cancelled"):
        task.op.execute(task.context(2))
    assert count_jobs(cluster, task) == 0


def test_a_cancelled_task_runs_its_job_again_only_when_cleared(cluster):
    task = TaskRun(train())
    event = follow_while(task.execute(1), cluster, cancel_from_the_ui)
    with pytest.raises(AirflowFailException):
        task.op.execute_complete(task.context(1), event)
    task.clear(last_try=1)
    task.execute(2)  # deferred again, following a new job
    assert count_jobs(cluster, task) == 1


def test_a_job_deleted_with_kubectl_is_a_cancel_by_whoever_deletes_job_objects(cluster):
    task = TaskRun(train())
    event = follow_while(task.execute(1), cluster, kubectl_delete)
    assert (event["status"], event["state"]) == ("failed", "CANCELLED")
    assert event["cancelled_by"] == DELETED_BY_SOMEONE and event["cancelled_at"]
    with pytest.raises(AirflowFailException, match="cancelled by someone who deleted the job object"):
        task.op.execute_complete(task.context(1), event)
    with pytest.raises(AirflowFailException, match="was cancelled"):
        task.op.execute(task.context(2))
    assert count_jobs(cluster, task) == 0


def test_airflow_mark_failed_cancels_the_job_and_says_so_in_the_task_log(cluster, capsys):
    task = TaskRun(train())
    event = follow_while(task.execute(1), cluster, airflow_mark_failed)
    assert (event["state"], event["cancelled_by"]) == ("CANCELLED", AIRFLOW_USER)
    log = capsys.readouterr().out
    # The trigger asks (it may not cancel: DAG code runs beside it); the API server's app cancels.
    assert "task killed in Airflow: asked for Job default/" in log
    assert f"CANCELLED: cancelled by {AIRFLOW_USER} at " in log
    assert count_jobs(cluster, task) == 0


def test_a_kill_after_the_job_finished_leaves_it_alone(cluster, capsys):
    task = TaskRun(train(job_annotations={"sim.airflow-jobs.io/scenario": '{"main": {"run": 1}}'}))
    deferred = task.execute(1)

    async def go():
        try:
            (event,) = await asyncio.wait_for(_collect(deferred.trigger), 60)
            await deferred.trigger.on_kill()  # mark success after the fact
            return event
        finally:
            await shared.shutdown()

    event = asyncio.run(go())
    assert event["state"] == "SUCCEEDED"
    assert "already finished, left as it is" in capsys.readouterr().out
    assert count_jobs(cluster, task) == 1


def test_a_stopped_job_keeps_the_task_deferred_and_runs_again_when_resumed(cluster, capsys):
    task = TaskRun(train(job_annotations={"sim.airflow-jobs.io/scenario": '{"main": {"run": 300}}'}))
    deferred = task.execute(1)
    name = deferred.trigger.job_name

    async def go():
        client = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
        try:
            events = asyncio.ensure_future(_collect(deferred.trigger))
            await until_running(client, name)
            seen = ""
            while f"Job {name}: RUNNING" not in seen:  # the task saw it run before it is stopped
                assert not events.done(), events.result()
                seen += capsys.readouterr().out
                await asyncio.sleep(0.02)
            # What a stop does (the UI's and CLI's action): who and when, then suspend (pods deleted).
            stop = {labels.STOPPED_AT: "2026-11-23T21:00:00+00:00", labels.STOPPED_BY: "bob"}
            await client.merge_patch(JOBS, "default", name, {"metadata": {"annotations": stop}})
            await client.merge_patch(JOBS, "default", name, {"spec": {"suspend": True}})
            for _ in range(1000):
                seen += capsys.readouterr().out
                if "STOPPED: stopped by bob at 2026-11-23 21:00:00 UTC" in seen:
                    break
                await asyncio.sleep(0.02)
            else:
                raise AssertionError("the task log never said the job was stopped")
            await asyncio.sleep(0.5)  # stopped stays stopped: nothing admits it again
            assert not events.done()
            job = await client.get(JOBS, "default", name)
            assert job["spec"]["suspend"] is True
            # Resume: the stop is lifted; the job goes back to the queue and runs from the start.
            resume = {labels.STOPPED_AT: None, labels.STOPPED_BY: None}
            await client.merge_patch(JOBS, "default", name, {"metadata": {"annotations": resume}})
            (event,) = await asyncio.wait_for(events, 60)
            return event, seen + capsys.readouterr().out
        finally:
            await client.close()
            await shared.shutdown()

    event, log = asyncio.run(go())
    assert event["status"] == "success", event
    states = [
        line.split(f"Job {name}: ")[1].split()[0].rstrip(":")
        for line in log.splitlines()
        if f"Job {name}: " in line
    ]
    stopped = states.index("STOPPED")
    # Resumed, the admission controller lets it go again at once: it runs again, from the start.
    assert "RUNNING" in states[:stopped] and "RUNNING" in states[stopped:] and states[-1] == "SUCCEEDED"
    assert count_jobs(cluster, task) == 1  # resumed, not resubmitted


def test_the_task_log_says_who_resumed_its_stopped_job(cluster, capsys):
    """Stopped and resumed through the page's and the CLI's actions: the task log says who stopped the
    job, then who resumed it, not that it was created suspended."""
    task = TaskRun(train(job_annotations={"sim.airflow-jobs.io/scenario": '{"main": {"run": 300}}'}))
    deferred = task.execute(1)
    name = deferred.trigger.job_name
    target = inspect.Target(namespace="default", quota_configmap=None)

    async def go() -> str:
        client = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
        try:
            events = asyncio.ensure_future(_collect(deferred.trigger))
            await until_running(client, name)
            assert (await inspect.stop(client, target, name, by="alice")).done
            seen = ""
            for _ in range(1000):
                seen += capsys.readouterr().out
                if f"Job {name}: STOPPED: stopped by alice" in seen:
                    break
                await asyncio.sleep(0.02)
            else:
                raise AssertionError("the task log never said the job was stopped")
            assert (await inspect.resume(client, target, name, by="bob")).done
            await asyncio.wait_for(events, 60)
            return seen + capsys.readouterr().out
        finally:
            await client.close()
            await shared.shutdown()

    log = asyncio.run(go())
    lines = [line.split(f"Job {name}: ", 1)[1] for line in log.splitlines() if f"Job {name}: " in line]
    stopped = max(i for i, line in enumerate(lines) if line.startswith("STOPPED: stopped by alice"))
    assert lines[stopped + 1].startswith("resumed by bob at "), lines
    assert not any("created suspended" in line for line in lines[stopped:]), lines
    assert lines[-1].startswith("SUCCEEDED")


def test_a_trigger_serialized_by_the_previous_version_is_rebuilt(cluster):
    # The previous JobTrigger wrote the sensor's kwargs into every trigger; with observe it was a sensor.
    old = {
        "job_name": "x-a1",
        "namespace": "default",
        "kind": "Job",
        "max_attempts": 2,
        "observe": False,
        "label_selector": None,
        "target_states": ["SUCCEEDED"],
        "fail_states": ["FAILED", "CANCELLED"],
    }
    follower = JobTrigger(**old)
    assert follower.serialize()[0] == "airflow_jobs_plugin.airflow.triggers.JobTrigger"
    assert "observe" not in follower.serialize()[1]
    sensor = JobTrigger(**{**old, "observe": True})
    assert sensor.serialize()[0] == "airflow_jobs_plugin.airflow.job_sensor_trigger.JobSensorTrigger"
    with pytest.raises(TypeError, match="bogus"):
        JobTrigger(**{**old, "bogus": 1})


def test_a_job_deleted_by_hand_under_a_quota_gives_its_gpus_back(cluster):
    from airflow_jobs_plugin.cluster.kube import CONFIGMAPS

    policy = f"pool-{next(_runs)}"

    async def create_policy():
        client = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
        try:
            text = "groups:\n  vision: {gpus: 8}\n"
            await client.create(
                CONFIGMAPS,
                "default",
                {"metadata": {"name": policy, "labels": POLICY_LABELS}, "data": {"policy.yaml": text}},
            )
        finally:
            await client.close()

    asyncio.run(create_policy())
    task = TaskRun(train(quota_configmap=policy))
    deferred = task.execute(1)
    uid = {}

    async def delete_after_noting_its_uid(client, name, _trigger):
        uid["job"] = (await client.get(JOBS, "default", name))["metadata"]["uid"]
        held = cluster.store.get("configmaps", "airflow-jobs-quota-vision", "default")
        assert [value for value in held["data"].values() if uid["job"] in value]  # it runs on reserved GPUs
        await kubectl_delete(client, name, _trigger)

    event = follow_while(deferred, cluster, delete_after_noting_its_uid)
    assert (event["state"], event["cancelled_by"]) == ("CANCELLED", DELETED_BY_SOMEONE)

    def held() -> list[str]:
        ledger = cluster.store.get("configmaps", "airflow-jobs-quota-vision", "default") or {}
        return [value for value in (ledger.get("data") or {}).values() if uid["job"] in value]

    # The admission controller frees them once it sees the job gone with its pods.
    deadline = Deadline(30)
    while held():
        assert not deadline.passed(), f"the deleted job still holds its GPUs after {deadline}: {held()}"
        time.sleep(0.05)


def _rebuilt_after_the_job_was_deleted(cluster, task: TaskRun, deferred: TaskDeferred) -> dict:
    """No triggerer runs while the job is deleted with kubectl; then one starts and rebuilds the trigger
    from its serialized kwargs, as after a triggerer outage."""
    classpath, kwargs = deferred.trigger.serialize()

    async def go():
        client = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
        try:
            # Nobody admitted it (no triggerer): it is deleted while it waits in the queue.
            await client.delete(JOBS, "default", kwargs["job_name"])
            for _ in range(400):
                if not any(j["metadata"]["name"] == kwargs["job_name"] for j in await jobs_of(client, task)):
                    break
                await asyncio.sleep(0.05)
            module, _, cls = classpath.rpartition(".")
            trigger = getattr(importlib.import_module(module), cls)(**kwargs)
            return (await asyncio.wait_for(_collect(trigger), 60))[0]
        finally:
            await client.close()
            await admission.shutdown()
            await shared.shutdown()

    return asyncio.run(go())


def test_a_job_deleted_with_kubectl_while_no_triggerer_ran_is_still_a_cancel(cluster):
    task = TaskRun(train())
    event = _rebuilt_after_the_job_was_deleted(cluster, task, task.execute(1))
    assert (event["status"], event["state"], event["reason"]) == ("failed", "CANCELLED", "Cancelled")
    assert event["cancelled_by"] == DELETED_BY_SOMEONE
    with pytest.raises(AirflowFailException, match="cancelled by someone who deleted the job object"):
        task.op.execute_complete(task.context(1), event)
    with pytest.raises(AirflowFailException, match="was cancelled"):
        task.op.execute(task.context(2))  # Airflow's retry submits nothing
    assert count_jobs(cluster, task) == 0


def test_a_job_gone_after_its_ttl_could_have_removed_it_is_not_called_a_cancel():
    from datetime import datetime, timedelta, timezone

    from airflow_jobs_plugin.lifecycle.tracking import unseen_deletion_is_a_cancel

    now = datetime(2026, 11, 24, 12, tzinfo=timezone.utc)
    week = timedelta(days=7)
    assert unseen_deletion_is_a_cancel(now - timedelta(hours=2), week, now=now)
    assert unseen_deletion_is_a_cancel(now - timedelta(days=30), None, now=now)  # no TTL: never removed
    assert not unseen_deletion_is_a_cancel(now - timedelta(days=8), week, now=now)  # may have finished
    assert not unseen_deletion_is_a_cancel(None, week, now=now)  # a trigger from before: unknown


def test_a_kill_request_a_dag_wrote_on_another_tenants_job_cancels_nothing(cluster):
    # Any DAG can write what the triggerer may (Airflow's security model): here, a kill request on a job
    # whose task instance Airflow's database shows deferred on it. The API server's app cancels nothing
    # and takes the request off; the victim's job runs on to its end.
    victim = TaskRun(train(job_annotations={"sim.airflow-jobs.io/scenario": '{"main": {"run": 200}}'}))

    async def forge_a_kill_request(client, name, _trigger):
        await client.merge_patch(
            JOBS, "default", name, {"metadata": {"labels": {labels.KILL_REQUESTED: "1"}}}
        )
        (answered,) = await the_api_server_answers_kills(client, "default", "deferred")
        assert not answered.verdict.cancel and "still follows the job" in answered.verdict.reason
        job = await client.get(JOBS, "default", name)
        assert labels.KILL_REQUESTED not in job["metadata"]["labels"]
        assert labels.VERDICT not in (job["metadata"].get("annotations") or {})

    event = follow_while(victim.execute(1), cluster, forge_a_kill_request)
    assert (event["status"], event["state"]) == ("success", "SUCCEEDED")


def test_a_deferral_past_its_timeout_has_its_job_cancelled_naming_it_and_a_retry_runs_a_new_job(
    cluster, capsys
):
    from airflow_jobs_plugin.jobs.orphans import TaskRecord
    from airflow_jobs_plugin.jobs.timeouts import TIMEOUT_CANCEL_BY
    from airflow_jobs_plugin.plugin import kills

    task = TaskRun(train(execution_timeout=timedelta(seconds=60)))
    deferred = task.execute(1)
    deadline = datetime.now(timezone.utc) - timedelta(seconds=1)

    def the_scheduler_failed_the_deferral(refs):
        # check_trigger_timeouts: scheduled again, to fail with "__fail__"; the deadline kept.
        return {r.dag_id for r in refs}, {
            r: TaskRecord("scheduled", 1, trigger_timeout=deadline, next_method="__fail__") for r in refs
        }

    async def go():
        client = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
        trigger = deferred.trigger
        try:
            following = asyncio.ensure_future(_collect(trigger))
            await until_running(client, trigger.job_name)
            # Airflow's triggerer cancels a trigger past its timeout without on_kill; cleanup runs.
            trigger.timeout_after = deadline
            following.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await following
            await trigger.cleanup()
            target = inspect.Target(namespace="default", quota_configmap=None)
            (answered,) = await kills.answer(client, target, the_scheduler_failed_the_deferral)
            assert answered.verdict.cancel, answered.verdict.reason
            job = await client.get(JOBS, "default", trigger.job_name)
            for _ in range(500):  # the Job controller deletes the cancelled job's pods
                pods = (await client.list(PODS, "default"))["items"]
                if not any(trigger.job_name in p["metadata"]["name"] for p in pods):
                    return job
                await asyncio.sleep(0.02)
            raise AssertionError(f"the pods of {trigger.job_name} outlived its cancel")
        finally:
            await client.close()
            await admission.shutdown()
            await shared.shutdown()

    job = asyncio.run(go())
    assert job["metadata"]["annotations"][labels.CANCELLED_BY] == TIMEOUT_CANCEL_BY
    assert "task's deferral timed out (execution_timeout): asked for Job default/" in capsys.readouterr().out
    # Not a person's cancel: Airflow's retry runs, as a new job through the queue.
    second = task.execute(2)
    assert second.trigger.job_name != deferred.trigger.job_name
    assert count_jobs(cluster, task) == 1
