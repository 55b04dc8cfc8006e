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

from airflow_jobs_plugin import cli
from airflow_jobs_plugin import watch as shared
from airflow_jobs_plugin.admission import shutdown as admission_shutdown
from airflow_jobs_plugin.operators import JobOperator

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


def run_to_end(op: JobOperator, dag_id: str) -> dict:
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(task_context(dag_id))

    async def follow() -> list[dict]:
        try:
            return [e.payload async for e in deferred.value.trigger.run()]
        finally:
            await admission_shutdown()
            await shared.shutdown()

    (event,) = asyncio.run(asyncio.wait_for(follow(), 600))
    return event


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
