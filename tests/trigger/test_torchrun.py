"""A torchrun task through the real path: an Indexed Job and its headless Service on the simulator,
every node started together, every node's rank followed and its log streamed, its result as XCom."""

from __future__ import annotations

import asyncio
import json

from task_doubles import StateStore

from airflow_jobs_plugin.cluster.kube import JOBS, PODS, KubeClient
from airflow_jobs_plugin.cluster.resources import SERVICES
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.spec import TaskIdentity

from .test_operator import _runs, context_for, deferral, operator, run_to_event


def _read(cluster, resource, selector: str | None = None) -> list[dict]:
    async def go():
        client = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
        try:
            return (await client.list(resource, "default", label_selector=selector))["items"]
        finally:
            await client.close()

    return asyncio.run(go())


def test_a_torchrun_task_runs_an_indexed_job_with_a_headless_service(cluster, capsys):
    op = operator(
        task_id="train_ddp",
        framework="torchrun",
        workers=2,
        gpus=1,
        job_annotations={
            "sim.airflow-jobs.io/scenario": json.dumps(
                {"main": {"run": 2, "logs": ["step 1 loss=0.5"], "message": json.dumps({"loss": 0.5})}}
            )
        },
    )
    run_id = f"run-{next(_runs)}"
    deferred = deferral(op, context_for(op, run_id, 1, StateStore()))
    assert deferred.trigger.kind == "torchrun"
    key = TaskIdentity("nightly", op.task_id, run_id).instance_key()
    (job,) = _read(cluster, JOBS, f"{labels.TASK_KEY}={key}")
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["parallelism"] == job["spec"]["completions"] == 2
    (service,) = [s for s in _read(cluster, SERVICES) if s["metadata"]["name"] == job["metadata"]["name"]]
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    event = run_to_event(deferred)
    result = op.execute_complete({}, event)
    assert result["kind"] == "torchrun" and result["state"] == "SUCCEEDED"
    # Node 0's termination message is the task's result (every node wrote one here).
    assert result["result"] == {"loss": 0.5}
    pods = _read(cluster, PODS, f"batch.kubernetes.io/job-name={job['metadata']['name']}")
    assert sorted(p["spec"]["hostname"] for p in pods) == [f"{job['metadata']['name']}-{i}" for i in (0, 1)]
    text = capsys.readouterr().out
    # Every node's rank is followed and its log streamed into the task log.
    assert "nodes 2/2" in text
    assert "[node-0] step 1 loss=0.5" in text and "[node-1] step 1 loss=0.5" in text
