"""No credential travels where Airflow stores things unencrypted or shows them: trigger kwargs, XCom,
the task log. The cluster here demands a bearer token, carried only by the Airflow connection."""

from __future__ import annotations

import asyncio
import json

import pytest
from airflow.sdk.exceptions import TaskDeferred
from airflow_jobs_sim import ClusterConfig, SimCluster
from airflow_jobs_sim.kubeconfig import kubeconfig_text
from controller_fixture import ControllerThread
from task_doubles import task_context

from airflow_jobs_plugin.airflow.operators import JobOperator
from airflow_jobs_plugin.cluster import watch as shared

TOKEN = "tok-3e1c9f0a7b-never-log-me"
DAG_SECRET = "s3cr3t-wandb-key"


@pytest.fixture(scope="module")
def guarded_cluster():
    with (
        SimCluster(ClusterConfig(nodes=1, gpus_per_node=8, time_scale=0.01, token=TOKEN)) as sim,
        ControllerThread(sim.kubeconfig_path),
    ):
        yield sim


def test_a_token_in_the_connection_never_reaches_kwargs_xcom_or_logs(guarded_cluster, monkeypatch, capsys):
    # The whole kubeconfig, token included, lives inline in the connection's extras (kube_config).
    kubeconfig = kubeconfig_text(guarded_cluster.url, TOKEN)
    monkeypatch.setenv(
        "AIRFLOW_CONN_KUBERNETES_DEFAULT",
        json.dumps({"conn_type": "kubernetes", "extra": {"kube_config": kubeconfig}}),
    )
    op = JobOperator(
        task_id="train",
        image="registry.example/trainer:1",
        group="vision",
        owner="alice",
        gpus=1,
        env={"WANDB_API_KEY": DAG_SECRET},
        job_annotations={
            "sim.airflow-jobs.io/scenario": json.dumps({"main": {"run": 2, "logs": ["step 1"]}})
        },
    )
    context = task_context("secrets")
    with pytest.raises(TaskDeferred) as info:
        op.execute(context)
    trigger = info.value.trigger
    kwargs = json.dumps(trigger.serialize()[1])

    async def run():
        try:
            return [e.payload async for e in trigger.run()]
        finally:
            await shared.shutdown()

    (event,) = asyncio.run(asyncio.wait_for(run(), 60))
    result = op.execute_complete(context, event)
    logs = capsys.readouterr()
    assert result["state"] == "SUCCEEDED"
    assert "step 1" in logs.out  # the log did stream: the check below is not vacuous
    for where, text in {
        "trigger kwargs": kwargs,
        "trigger event": json.dumps(event),
        "XCom": json.dumps(result),
        "task state store": json.dumps(context["task_state_store"].values),
        "logs": logs.out + logs.err,
    }.items():
        assert TOKEN not in text, f"the connection's token leaked into the {where}"
        assert DAG_SECRET not in text, f"an env value of the job leaked into the {where}"
