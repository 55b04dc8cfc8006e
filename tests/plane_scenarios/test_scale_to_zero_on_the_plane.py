"""A GPU node pool scaled to zero, on a real control plane: no node of the pool exists until an
autoscaler adds one. With ``[airflow_jobs] autoscaled_node_shapes`` naming the pool's nodes (label
``pool: gpu-zero``, 8 GPUs), a job of 4 GPUs in the pool waits for its node, not ruled larger than any
node; the test then adds the node as an autoscaler would (a kwok node of 8 GPUs with that label), the
real kube-scheduler places the pod there and the job succeeds. A job of 16 GPUs in the pool is larger
than any node the pool can add and fails at once, naming the shape (queueing/quota/placement.py ``never_fits``).
Without the option the 16-GPU job is not ruled either: no node matches its selector yet, and of such a
selector nothing is certain (docs/quota.md); it would wait for ever.

On the plane the new node is a kwok node: it carries the annotation kwok manages nodes by
(scripts/realplane/nodes.py ``MANAGED_ANNOTATION``), so kwok marks it Ready and plays its pods'
scenarios; on the simulator the same object is a node like any other.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timezone

import pytest
from airflow.sdk.exceptions import AirflowFailException
from task_doubles import task_context

from airflow_jobs_plugin.airflow.operators import JobOperator
from airflow_jobs_plugin.cluster.kube import JOBS, NODES, PODS, KubeClient, KubeError
from airflow_jobs_plugin.cluster.resources import NAMESPACES
from airflow_jobs_plugin.jobs import labels

from .plane import (
    DEADLINE,
    OWN_CONTROLLER,
    TaskLog,
    defer,
    ensure_namespace,
    follow,
    kube,
    on_cluster,
    scenario,
    state_of,
)

pytestmark = [pytest.mark.real_cluster, pytest.mark.timeout(900)]

NAMESPACE = "plane-scale-to-zero"
RUN_ID = f"manual__{datetime.now(timezone.utc).isoformat()}"
POOL = {"pool": "gpu-zero"}  # a label no node of the cluster has: the pool is at zero
SHAPES = "[{labels: {pool: gpu-zero}, resources: {nvidia.com/gpu: 8}}]"
NEW_NODE = "gpu-zero-node-0"
# kwok manages only the nodes with this annotation (scripts/realplane/nodes.py MANAGED_ANNOTATION).
KWOK_ANNOTATION = "kwok.x-k8s.io/node"


@pytest.fixture(scope="module", autouse=True)
def namespace(cluster, tmp_path_factory):
    """The namespace, and on the real plane an admission controller of its own configured as a platform
    would configure it (``autoscaled_node_shapes`` is the controller's setting: it rules never-fits);
    on the simulator the cluster's controller runs in the test's process and reads the test's setting."""
    if getattr(cluster, "simulated", True) is not False:
        on_cluster(cluster.kubeconfig_path, lambda client: ensure_namespace(client, NAMESPACE))
        yield
        return

    async def create(client: KubeClient) -> None:
        body = {"metadata": {"name": NAMESPACE, "labels": {OWN_CONTROLLER: "true"}}}
        try:
            await client.create(NAMESPACES, "", body)
        except KubeError as exc:
            if exc.status != 409:
                raise
            await client.merge_patch(
                NAMESPACES, "", NAMESPACE, {"metadata": {"labels": body["metadata"]["labels"]}}
            )

    on_cluster(cluster.kubeconfig_path, create)
    log = tmp_path_factory.mktemp("controller") / "controller.log"
    env = {**os.environ, "AIRFLOW__AIRFLOW_JOBS__AUTOSCALED_NODE_SHAPES": SHAPES}
    command = [
        sys.executable,
        "-m",
        "airflow_jobs_plugin.airflow.cli",
        "admission-controller",
        "--kubeconfig",
        cluster.kubeconfig_path,
        "--namespace",
        NAMESPACE,
    ]
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            yield
        finally:
            process.terminate()
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture
def autoscaled(monkeypatch):
    monkeypatch.setenv("AIRFLOW__AIRFLOW_JOBS__AUTOSCALED_NODE_SHAPES", SHAPES)


@pytest.fixture
def pool_node(cluster) -> Iterator[dict]:
    """The node the autoscaler adds to the pool (created by the test when it chooses); removed at the
    end, as the autoscaler scales the pool back to zero."""
    capacity = {
        "cpu": "64",
        "memory": "512Gi",
        "pods": "110",
        "ephemeral-storage": "1Ti",
        labels.GPU_RESOURCE: "8",
    }
    # As a new node registers: capacity and labels, not Ready yet. kwok's node-initialize Stage (kwok
    # v0.8 kustomize/stage/node/fast/node-initialize.yaml) takes such a node and gives it Ready, its
    # addresses and the kubelet endpoint the API server reaches for the pods' logs.
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NEW_NODE,
            "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": NEW_NODE,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.count": "8",
                **POOL,
            },
        },
        "status": {"capacity": dict(capacity), "allocatable": dict(capacity)},
    }

    async def remove(client: KubeClient) -> None:
        with contextlib.suppress(KubeError):
            await client.delete(NODES, "", NEW_NODE)

    on_cluster(cluster.kubeconfig_path, remove)  # a node left by an interrupted run
    yield node
    on_cluster(cluster.kubeconfig_path, remove)


def job(task_id: str, gpus: int, main: dict) -> tuple[JobOperator, dict]:
    op = JobOperator(
        task_id=task_id,
        image="registry.example/trainer:1",
        group="vision",
        user="alice",
        gpus=gpus,
        namespace=NAMESPACE,
        node_selector=POOL,
        job_annotations=scenario(main=main),
        stream_logs=True,
    )
    return op, task_context("plane_scale_to_zero", task_id, run_id=RUN_ID)


async def _unscheduled_pod(client: KubeClient, job_name: str) -> dict | None:
    """The job's pod once the scheduler has tried it and found no node (PodScheduled False)."""
    pods = (await client.list(PODS, NAMESPACE, label_selector=f"job-name={job_name}"))["items"]
    for pod in pods:
        conditions = (pod.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "PodScheduled" and c.get("status") == "False" for c in conditions):
            return pod
    return None


def test_a_gpu_job_waits_for_a_pool_scaled_to_zero_and_runs_on_the_node_it_adds(
    cluster, autoscaled, pool_node, capsys
):
    op, context = job("waits-for-node", 4, {"run": 3, "logs": ["training on the new node"]})
    log = TaskLog(capsys)
    seen: dict = {}

    async def autoscaler(job_name: str) -> None:
        async with kube(cluster.kubeconfig_path) as client:
            deadline = asyncio.get_running_loop().time() + DEADLINE
            while (pod := await _unscheduled_pod(client, job_name)) is None:
                assert asyncio.get_running_loop().time() < deadline, (
                    f"{job_name}: no pod tried by the scheduler"
                )
                await asyncio.sleep(0.3)
            # While it waits: admitted (not ruled), its pod pending on no node, the job Scheduling.
            current = await client.get(JOBS, NAMESPACE, job_name)
            seen["verdict"] = (current["metadata"].get("annotations") or {}).get(labels.VERDICT)
            seen["suspended"] = current["spec"].get("suspend")
            seen["state"] = await state_of(client, NAMESPACE, job_name)
            seen["pod"] = pod["metadata"]["name"]
            await client.create(NODES, "", pool_node)

    event = follow(defer(op, context), during=autoscaler)

    assert seen["verdict"] is None, seen  # not ruled larger than any node
    assert not seen["suspended"], seen
    assert seen["state"] == "SCHEDULING", seen
    assert event["status"] == "success", event
    op.execute_complete(context, event)

    async def placed(client: KubeClient) -> str | None:
        return (await client.get(PODS, NAMESPACE, seen["pod"]))["spec"].get("nodeName")

    assert on_cluster(cluster.kubeconfig_path, placed) == NEW_NODE
    # The task log says it waits for a node (the scheduler's words), then it runs there.
    waiting = log.first(
        r": SCHEDULING \(Unschedulable; worker Pending\): worker-0: Pending \(0/\d+ nodes are available"
    )
    running = log.first(r": RUNNING \(worker Running\)")
    succeeded = log.first(r": SUCCEEDED \(worker Completed\)")
    assert 0 <= waiting < running < succeeded, log
    assert log.first(r"^\[worker-0\] training on the new node") > waiting, log


def test_a_job_larger_than_the_node_the_pool_can_add_fails_at_once(cluster, autoscaled):
    op, context = job("larger-than-pool", 16, {"run": 3})

    event = follow(defer(op, context))

    assert event["status"] == "failed" and event["reason"] == "Unschedulable", event
    with pytest.raises(AirflowFailException) as failed:
        op.execute_complete(context, event)
    assert (
        "pod asks for 16 GPUs but a node matching its nodeSelector {'pool': 'gpu-zero'} offers at most 8 "
        "(largest node: autoscaled-0)"
    ) in str(failed.value), str(failed.value)
