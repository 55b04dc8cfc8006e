"""A succeeded MPIJob's workers, stopped by the MPI operator once its launcher succeeded, are no error of
the job: on the real plane (mpi-operator v0.8.2, whose ``syncHandler`` deletes the workers of a finished
MPIJob, ``cleanUpWorkerPods``) as on the simulator. The plane's pods stop as a kubelet stops them
(SIGTERM's exit code 143, phase Failed: ``scripts/realplane/stages/scenario.yaml``); a finalizer the test
puts on the workers keeps them, so the trigger's last look reads them exited.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timezone

import pytest

from airflow_jobs_plugin.airflow.triggers import JobTrigger
from airflow_jobs_plugin.cluster.kube import PODS, KubeClient
from airflow_jobs_plugin.jobs.kinds.mpi import MPIJOBS
from airflow_jobs_plugin.jobs.manifests import build_manifest
from airflow_jobs_plugin.jobs.spec import TaskIdentity, validate
from tests.patience import Deadline, stretch

from .plane import SCENARIO, ensure_namespace, follow, kube, on_cluster

pytestmark = [pytest.mark.real_cluster, pytest.mark.timeout(900)]

NAMESPACE = "plane-lines"
HOLD = "test.airflow-jobs.io/hold"


@pytest.fixture(scope="module", autouse=True)
def namespace(cluster):
    on_cluster(cluster.kubeconfig_path, lambda client: ensure_namespace(client, NAMESPACE))


def manifest(launcher_run: float) -> dict:
    identity = TaskIdentity(
        "plane_lines", "train", f"run-{datetime.now(timezone.utc).timestamp():.0f}", -1, 1
    )
    spec = validate(image="registry.example/trainer:1", group="vision", user="alice", gpus=1, workers=2)
    body = build_manifest(
        spec, name=identity.job_name(1), task=identity, attempt=1, queued_at=datetime.now(timezone.utc)
    )
    body["metadata"]["namespace"] = NAMESPACE
    roles = body["spec"]["mpiReplicaSpecs"]
    for role, scenario in (("Launcher", {"run": launcher_run, "exit": 0}), ("Worker", {"run": None})):
        annotations = roles[role]["template"].setdefault("metadata", {}).setdefault("annotations", {})
        annotations[SCENARIO] = json.dumps({"main": scenario})
    return body


async def release(client: KubeClient, name: str) -> None:
    for pod in (await client.list(PODS, NAMESPACE))["items"]:
        if pod["metadata"]["name"].startswith(name) and HOLD in (pod["metadata"].get("finalizers") or []):
            await client.merge_patch(
                PODS, NAMESPACE, pod["metadata"]["name"], {"metadata": {"finalizers": None}}
            )


def test_a_succeeded_mpijobs_workers_stopped_by_the_operator_are_no_error(cluster):
    # The launcher runs long enough (stretched with the load) for the workers to be held before it ends.
    body = manifest(launcher_run=20 * stretch())
    name = body["metadata"]["name"]

    async def hold_workers(_: str) -> None:
        async with kube(cluster.kubeconfig_path) as client:
            await client.create(MPIJOBS, NAMESPACE, body)
            deadline = Deadline(120)
            held: set[str] = set()
            while len(held) < 2:
                assert not deadline.passed(), f"workers of {name} not created within {deadline}"
                for pod in (await client.list(PODS, NAMESPACE))["items"]:
                    pod_name = pod["metadata"]["name"]
                    if pod_name.startswith(f"{name}-worker-") and pod_name not in held:
                        await client.merge_patch(
                            PODS, NAMESPACE, pod_name, {"metadata": {"finalizers": [HOLD]}}
                        )
                        held.add(pod_name)
                await asyncio.sleep(0.2)

    try:
        event = follow(JobTrigger(job_name=name, namespace=NAMESPACE, kind="MPIJob"), during=hold_workers)
    finally:

        async def clean(client: KubeClient) -> None:
            await release(client, name)
            await client.delete(MPIJOBS, NAMESPACE, name)

        on_cluster(cluster.kubeconfig_path, clean)
    assert event["state"] == "SUCCEEDED", event
    workers = [r for r in event["replicas"] if r["role"] == "worker"]
    assert len(workers) == 2 and all(r["status"] != "Error" for r in workers), event["replicas"]
    assert set(event["exit_codes"]) <= {"launcher"}, event["exit_codes"]
