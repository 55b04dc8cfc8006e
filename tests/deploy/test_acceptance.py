"""Acceptance: the checks a platform team runs on its own cluster before rolling the provider out.

They run on the simulator by default and, with ``AIRFLOW_JOBS_TEST_KUBECONFIG`` set, on that cluster
(docs/deploying.md has a kind + mpi-operator recipe). Each job carries both a real command (what a real
cluster runs) and the simulator's scenario annotation (what the simulator plays instead), so the same
test asserts the same outcome in both places.
"""

from __future__ import annotations

import asyncio
import json
import os

import pytest
from airflow.sdk.exceptions import TaskDeferred
from sim_fixtures import cluster_fixture, connection_fixture
from task_doubles import task_context

from airflow_jobs_plugin.airflow import cli
from airflow_jobs_plugin.airflow.operators import JobOperator
from airflow_jobs_plugin.cluster import watch as shared
from airflow_jobs_plugin.cluster.kube import CONFIGMAPS, JOBS, KubeClient
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.queueing import quota
from airflow_jobs_plugin.queueing.engines.pool import shutdown as admission_shutdown
from airflow_jobs_plugin.queueing.pools import POLICY_LABELS
from airflow_jobs_plugin.queueing.quota.ledger import read_ledger
from airflow_jobs_plugin.readmodel import inspect
from airflow_jobs_plugin.readmodel.views import job_detail

pytestmark = [pytest.mark.real_cluster, pytest.mark.slow]

cluster = cluster_fixture(nodes=1)
connection = connection_fixture()

SCENARIO = "sim.airflow-jobs.io/scenario"
IMAGE = os.environ.get("AIRFLOW_JOBS_TEST_IMAGE", "busybox:1.36")
NAMESPACE = os.environ.get("AIRFLOW_JOBS_TEST_NAMESPACE", "default")


@pytest.fixture(autouse=True)
def no_default_pool(monkeypatch):
    """No deployment-wide quota pool: a kind cluster has no GPUs to share ([airflow_jobs] docs)."""
    monkeypatch.setenv("AIRFLOW__AIRFLOW_JOBS__QUOTA_CONFIGMAP", "")


def run_to_end(op: JobOperator, dag_id: str, during=None) -> dict:
    """Execute ``op`` as a worker does, then follow its trigger as the triggerer does, to its one event;
    ``during(job_name)``, a coroutine function, runs beside the trigger (a user acting on the job)."""
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(task_context(dag_id))
    trigger = deferred.value.trigger

    async def follow() -> list[dict]:
        try:
            events = asyncio.ensure_future(_events(trigger))
            if during is not None:
                await during(trigger.job_name)
            return await events
        finally:
            await admission_shutdown()
            await shared.shutdown()

    (event,) = asyncio.run(asyncio.wait_for(follow(), 600))
    return event


async def _events(trigger) -> list[dict]:
    return [e.payload async for e in trigger.run()]


async def state_of(kubeconfig: str, name: str) -> str:
    """The job's state as the CLI's describe and the GPU Jobs page read it."""
    client = await KubeClient.from_kubeconfig(kubeconfig)
    try:
        cluster_state, job = await inspect.read_job(client, inspect.Target(namespace=NAMESPACE), name)
        return job_detail(cluster_state, job).job.state
    finally:
        await client.close()


async def until_state(kubeconfig: str, name: str, *states: str, timeout: float = 300) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while (state := await state_of(kubeconfig, name)) not in states:
        assert asyncio.get_running_loop().time() < deadline, f"{name} is {state}, not {states}"
        await asyncio.sleep(0.2)


async def cli_says(*args: str) -> int:
    """Run the CLI as a user would, beside the running trigger (its output goes to the captured stdout)."""
    return await asyncio.to_thread(cli.main, list(args))


def job(task_id: str, shell: str, scenario: dict, **kwargs) -> JobOperator:
    return JobOperator(
        task_id=task_id,
        image=IMAGE,
        command=["sh", "-c", shell],
        group="acceptance",
        namespace=NAMESPACE,
        gpus=0,
        job_annotations={SCENARIO: json.dumps({"main": scenario})},
        **kwargs,
    )


def test_a_job_runs_to_success_with_its_log(cluster):
    event = run_to_end(job("hello", "echo epoch 1", {"run": 1, "logs": ["epoch 1"]}), "acceptance_ok")
    assert event["status"] == "success", event
    assert event["state"] == "SUCCEEDED"
    assert any("epoch 1" in line for line in event["log_tail"]), event["log_tail"]


def test_a_failing_job_reports_its_exit_code(cluster):
    event = run_to_end(job("fails", "exit 3", {"run": 1, "exit": 3}, backoff_limit=0), "acceptance_fail")
    assert event["status"] == "failed", event
    assert event["state"] == "FAILED"
    assert "3" in event["message"], event["message"]


def test_the_cli_shows_the_jobs(cluster, capsys):
    code = cli.main(["status", "--kubeconfig", cluster.kubeconfig_path, "--namespace", NAMESPACE, "--json"])
    out = capsys.readouterr().out
    assert code == 0
    assert "acceptance-ok-train" in out and "acceptance-fail-train" in out


def test_a_retryable_exit_code_starts_a_second_attempt(cluster):
    op = job(
        "flaky",
        "exit 3",
        {"run": 1, "exit": 3},
        backoff_limit=0,
        retryable_exit_codes=[3],
        max_attempts=2,
        retry_backoff=1,
    )
    event = run_to_end(op, "acceptance_retry")
    assert event["status"] == "failed", event
    assert [a["attempt"] for a in event["attempts"]] == [1, 2], event["attempts"]
    assert event["job_name"].endswith("-a2")
    assert event["exit_codes"] == {"worker-0": 3}


def test_stop_resume_and_cancel_from_the_cli(cluster, capsys):
    kube = cluster.kubeconfig_path

    async def user(name: str) -> None:
        where = ("--kubeconfig", kube, "--namespace", NAMESPACE)
        await until_state(kube, name, "RUNNING")
        assert await cli_says("stop", name, "--by", "acceptance", *where) == 0
        await until_state(kube, name, "STOPPED")
        assert await cli_says("resume", name, "--by", "acceptance", *where) == 0
        await until_state(kube, name, "RUNNING")  # no quota pool: the resume starts it again
        assert await cli_says("cancel", name, "--by", "acceptance", *where) == 0

    event = run_to_end(job("pausable", "sleep 3600", {"run": None}), "acceptance_stop", during=user)
    assert event["state"] == "CANCELLED", event
    assert event["cancelled_by"].startswith("acceptance"), event
    out = capsys.readouterr().out
    assert (
        " stopped: " in out
        and " resumed: the admission controller starts it again" in out
        and " cancelled " in out
    )


def test_a_job_under_a_quota_pool_is_admitted_by_the_pool_and_leaves_no_reservation(cluster, monkeypatch):
    """The pool's whole protocol on the cluster's own API server: the job is created suspended, the
    admission controller reserves it in the group's ledger (a compare-and-swap on a ConfigMap) and
    unsuspends it, and the reservation is gone once the job has ended."""
    policy = "acceptance-quota-policy"

    async def put_policy() -> None:
        client = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
        try:
            await client.delete(CONFIGMAPS, NAMESPACE, policy)
            await client.delete(CONFIGMAPS, NAMESPACE, quota.ledger_name("acceptance"))
            body = {
                "metadata": {"name": policy, "labels": POLICY_LABELS},
                "data": {quota.POLICY_KEY: "groups:\n  acceptance: {gpus: 4}\n"},
            }
            await client.create(CONFIGMAPS, NAMESPACE, body)
        finally:
            await client.close()

    asyncio.run(put_policy())
    event = run_to_end(
        job("pooled", "echo admitted", {"run": 1, "logs": ["admitted"]}, quota_configmap=policy),
        "acceptance_pool",
    )
    assert event["status"] == "success", event

    async def after() -> tuple[dict, tuple]:
        # The admission controller releases the reservation once it sees the job end, which may be just
        # after the trigger's final event.
        client = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
        try:
            deadline = asyncio.get_running_loop().time() + 60
            while True:
                ran = await client.get(JOBS, NAMESPACE, event["job_name"])
                stored = await read_ledger(client, NAMESPACE, "acceptance")
                held = [r for r in stored.ledger.reservations if r.job.endswith(event["job_name"])]
                if not held or asyncio.get_running_loop().time() > deadline:
                    return ran, stored.ledger.reservations
                await asyncio.sleep(0.2)
        finally:
            await client.close()

    ran, reservations = asyncio.run(after())
    assert ran["metadata"]["annotations"].get(labels.ADMITTED_AT), "the pool did not admit it"
    assert not any(r.job.endswith(event["job_name"]) for r in reservations), reservations
