"""Cancel, stop and resume on a real control plane, through each door a user comes through: the CLI,
the GPU Jobs page's actions (``inspect.stop`` / ``resume`` / ``cancel``, what its routes call) and
Airflow's own mark failed (the trigger's ``on_kill``), for an MPIJob run by the real MPI operator and a
torchrun Indexed Job run by the real Job controller, under a quota pool.

A stop suspends the job: its controller deletes the pods (kubernetes v1.36 pkg/controller/job/
job_controller.go ``manageJob``, "Deleting all active pods in suspended job"; kubeflow/mpi-operator v0.8
pkg/controller/mpi_job_controller.go ``syncHandler``: a suspended MPIJob suspends its launcher Job and
deletes its workers), and the pool drops the reservation once they are gone. A resume puts the job back
in its queue and the pool admits it again.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime, timezone

import pytest
from task_doubles import task_context, the_api_server_answers_kills

from airflow_jobs_plugin.airflow import cli
from airflow_jobs_plugin.airflow.operators import JobOperator
from airflow_jobs_plugin.airflow.triggers import AIRFLOW_USER
from airflow_jobs_plugin.cluster.kube import CONFIGMAPS, EVENTS, PODS, KubeClient
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.kinds.mpi import MPIJOBS
from airflow_jobs_plugin.queueing import quota
from airflow_jobs_plugin.queueing.pools import POLICY_LABELS
from airflow_jobs_plugin.queueing.quota.ledger import read_ledger
from airflow_jobs_plugin.readmodel import inspect

from .plane import (
    DEADLINE,
    TaskLog,
    create_or_replace,
    defer,
    ensure_namespace,
    follow,
    kube,
    on_cluster,
    scenario,
    until_state,
)

pytestmark = [pytest.mark.real_cluster, pytest.mark.timeout(900)]

NAMESPACE = "plane-actions"
POLICY = "plane-actions-quota-policy"
GROUP = "actions"
RUN_ID = f"manual__{datetime.now(timezone.utc).isoformat()}"


@pytest.fixture(scope="module", autouse=True)
def quota_pool(cluster):
    async def put(client: KubeClient) -> None:
        await ensure_namespace(client, NAMESPACE)
        with contextlib.suppress(Exception):
            await client.delete(CONFIGMAPS, NAMESPACE, quota.ledger_name(GROUP))
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": POLICY, "labels": POLICY_LABELS},
            "data": {quota.POLICY_KEY: f"groups:\n  {GROUP}: {{gpus: 8}}\n"},
        }
        await create_or_replace(client, body, NAMESPACE)

    on_cluster(cluster.kubeconfig_path, put)


def job(task_id: str, **kwargs) -> tuple[JobOperator, dict]:
    """A job that trains until it is stopped or cancelled (its main containers run until their pods go)."""
    op = JobOperator(
        task_id=task_id,
        image="registry.example/trainer:1",
        group=GROUP,
        user="alice",
        namespace=NAMESPACE,
        quota_configmap=POLICY,
        job_annotations=scenario(main={"run": None, "logs": ["training"]}),
        **kwargs,
    )
    return op, task_context("plane_actions", task_id, run_id=RUN_ID)


async def pods_of(client: KubeClient, name: str) -> list[str]:
    """The job's pods that still exist (any attempt's pods carry the task key; this one's its name)."""
    listed = await client.list(PODS, NAMESPACE)
    return [p["metadata"]["name"] for p in listed["items"] if p["metadata"]["name"].startswith(f"{name}-")]


async def until_no_pods(client: KubeClient, name: str) -> None:
    deadline = asyncio.get_running_loop().time() + DEADLINE
    while left := await pods_of(client, name):
        assert asyncio.get_running_loop().time() < deadline, f"{name} still has pods {left}"
        await asyncio.sleep(0.3)


async def reserved(client: KubeClient, name: str) -> bool:
    stored = await read_ledger(client, NAMESPACE, GROUP)
    return any(r.job.endswith(name) for r in stored.ledger.reservations)


async def until_released(client: KubeClient, name: str) -> None:
    deadline = asyncio.get_running_loop().time() + DEADLINE
    while await reserved(client, name):
        assert asyncio.get_running_loop().time() < deadline, f"the pool still holds {name}'s GPUs"
        await asyncio.sleep(0.3)


async def reasons_recorded(client: KubeClient, name: str) -> list[str]:
    """The Events the actions recorded on the job (reason: message), sorted: their timestamps have whole
    seconds, so a stop and a resume of one second cannot be ordered by them."""
    listed = await client.list(EVENTS, NAMESPACE, field_selector=f"involvedObject.name={name}")
    ours = [e for e in listed["items"] if e.get("reason") in ("Stopped", "Resumed", "Cancelled")]
    return sorted(f"{e['reason']}: {e['message']}" for e in ours)


async def history_told(client: KubeClient, name: str) -> tuple[list[str], list[str], object]:
    """What the job page and ``describe`` tell of the job's life: the timeline's labels, its details,
    and when its attempt started."""
    from airflow_jobs_plugin.readmodel.views import job_detail

    state, found = await inspect.read_job(
        client, inspect.Target(namespace=NAMESPACE, quota_configmap=POLICY), name
    )
    detail = job_detail(state, found)
    (attempt,) = detail.attempts
    return [e.label for e in detail.timeline], [e.detail for e in detail.timeline], attempt.started_at


def assert_told_as_it_happened(labels_seen: list[str], details: list[str], started: object, who: str) -> None:
    """Two runs, the stop between them and the cancel that ended the second, each with who did it; the
    controller's way of ending the cancelled job (FailureTarget, Failed: DeadlineExceeded) not told as
    what happened to it."""
    ours = [label for label in labels_seen if label in ("STARTED", "STOPPED", "RESUMED", "CANCELLED")]
    assert ours == ["STARTED", "STOPPED", "RESUMED", "STARTED", "CANCELLED"], labels_seen
    assert not any(label.startswith(("FailureTarget", "Failed")) for label in labels_seen), labels_seen
    assert not any("DeadlineExceeded" in d for d in details), details
    assert f"stopped by {who}" in " ".join(details) and f"cancelled by {who}" in " ".join(details)
    assert started is not None


def test_an_mpijob_stopped_from_the_cli_frees_its_gpus_and_runs_again_once_resumed_until_cancelled(
    cluster, capsys
):
    kubeconfig = cluster.kubeconfig_path
    where = ("--kubeconfig", kubeconfig, "--namespace", NAMESPACE, "--quota-configmap", POLICY)
    op, context = job("mpi_pausable", workers=2, gpus=2)

    async def user(name: str) -> None:
        async with kube(kubeconfig) as client:
            await until_state(client, NAMESPACE, name, "RUNNING")
            assert await asyncio.to_thread(cli.main, ["stop", name, "--by", "ann", *where]) == 0
            await until_state(client, NAMESPACE, name, "STOPPED")
            # The MPI operator deleted the launcher's and the workers' pods; the pool let the GPUs go.
            await until_no_pods(client, name)
            await until_released(client, name)
            assert await asyncio.to_thread(cli.main, ["resume", name, "--by", "ann", *where]) == 0
            # Back in the queue, admitted again by the pool, started again by the operator.
            await until_state(client, NAMESPACE, name, "RUNNING")
            assert await reserved(client, name)
            assert await asyncio.to_thread(cli.main, ["cancel", name, "--by", "ann", *where]) == 0

    event = follow(defer(op, context), during=user)

    assert event["kind"] == "MPIJob" and event["state"] == "CANCELLED", event
    assert event["cancelled_by"].startswith("ann"), event
    out = capsys.readouterr().out
    assert " stopped: " in out and " resumed: back in group actions's queue" in out and " cancelled " in out

    async def after(client: KubeClient) -> tuple[list[str], bool]:
        await until_no_pods(client, event["job_name"])
        await until_released(client, event["job_name"])
        return await reasons_recorded(client, event["job_name"]), await reserved(client, event["job_name"])

    recorded, held = on_cluster(kubeconfig, after)
    assert recorded == [
        "Cancelled: cancelled by ann",
        "Resumed: resumed by ann",
        "Stopped: stopped by ann",
    ], recorded
    assert not held
    assert_told_as_it_happened(*on_cluster(kubeconfig, lambda c: history_told(c, event["job_name"])), "ann")


def test_a_torchrun_job_is_stopped_resumed_and_cancelled_from_the_gpu_jobs_page(cluster):
    kubeconfig = cluster.kubeconfig_path
    target = inspect.Target(namespace=NAMESPACE, quota_configmap=POLICY)
    op, context = job("ddp_pausable", framework="torchrun", workers=2, gpus=1)
    said: list[str] = []

    async def user(name: str) -> None:
        async with kube(kubeconfig) as client:
            await until_state(client, NAMESPACE, name, "RUNNING")
            said.append((await inspect.stop(client, target, name, by="bob")).message)
            await until_state(client, NAMESPACE, name, "STOPPED")
            # The Job controller deleted every node's pod.
            await until_no_pods(client, name)
            said.append((await inspect.resume(client, target, name, by="bob")).message)
            await until_state(client, NAMESPACE, name, "RUNNING")
            said.append((await inspect.cancel(client, target, name, by="bob")).message)

    event = follow(defer(op, context), during=user)

    assert event["kind"] == "torchrun" and event["state"] == "CANCELLED", event
    assert event["cancelled_by"].startswith("bob"), event
    stopped, resumed, cancelled = said
    assert "stopped: its pods are deleted and its GPUs released" in stopped
    assert "resumed" in resumed and "CANCELLED" in cancelled.upper(), said
    on_cluster(kubeconfig, lambda client: until_no_pods(client, event["job_name"]))
    on_cluster(kubeconfig, lambda client: until_released(client, event["job_name"]))
    assert_told_as_it_happened(*on_cluster(kubeconfig, lambda c: history_told(c, event["job_name"])), "bob")


def test_marking_the_task_failed_in_airflow_cancels_its_running_mpijob(cluster, capsys):
    """Airflow cancels the deferred trigger and calls its ``on_kill`` (mark failed, mark success, clear):
    the MPIJob ends CANCELLED, its pods go and the pool frees its GPUs."""
    kubeconfig = cluster.kubeconfig_path
    log = TaskLog(capsys)
    op, context = job("mpi_killed", workers=2, gpus=1)
    trigger = defer(op, context)

    async def airflow_user() -> str:
        from airflow_jobs_plugin.cluster import watch as shared
        from airflow_jobs_plugin.queueing.engines.pool import shutdown as admission_shutdown

        following = asyncio.ensure_future(trigger.run().__anext__())
        try:
            async with kube(kubeconfig) as client:
                await until_state(client, NAMESPACE, trigger.job_name, "RUNNING")
                following.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await following
                await trigger.on_kill()  # asks, in the triggerer
                # The GPU Jobs app in Airflow's API server confirms the kill in Airflow's database, cancels.
                await the_api_server_answers_kills(client, NAMESPACE, "failed")
                state = await until_state(client, NAMESPACE, trigger.job_name, "CANCELLED")
                await until_no_pods(client, trigger.job_name)
                await until_released(client, trigger.job_name)
                return state
        finally:
            await admission_shutdown()
            await shared.shutdown()

    assert asyncio.run(asyncio.wait_for(airflow_user(), DEADLINE)) == "CANCELLED"
    assert log.first(rf"^task killed in Airflow: asked for MPIJob {NAMESPACE}/\S+ to be cancelled") >= 0, log

    async def annotations(client: KubeClient) -> dict:
        # Listed as cancelled until its TTL: who cancelled it stays on it.
        return (await client.get(MPIJOBS, NAMESPACE, trigger.job_name))["metadata"]["annotations"]

    assert on_cluster(kubeconfig, annotations)[labels.CANCELLED_BY] == AIRFLOW_USER
