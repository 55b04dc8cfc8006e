"""A GPU node pool scaled to zero: no node offers a GPU now, but the autoscaler can add one. A GPU job
waits for the node, and runs once it joins; a job larger than any node the cluster can add still fails
at once (queueing/quota/placement.py ``never_fits`` with ``Autoscaling``)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from airflow_jobs_sim.cluster import node_object
from airflow_jobs_sim.config import ClusterConfig
from sim_fixtures import cluster_fixture

from airflow_jobs_plugin.cluster import watch as shared
from airflow_jobs_plugin.cluster.kube import EVENTS, JOBS, NODES, PODS
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.queueing.engines.pool import Admission
from airflow_jobs_plugin.queueing.engines.unmanaged import UnmanagedEngine

from .conftest import NAMESPACE, annotation, create_jobs, job_body, put_policy, unique, wait_for

# CPU nodes only: the GPU pool is at zero.
cluster = cluster_fixture(nodes=1, gpus_per_node=0, controller=False)
SHAPES = "[{labels: {pool: gpu}, resources: {nvidia.com/gpu: 8}}]"


@pytest.fixture
def autoscaled(monkeypatch):
    monkeypatch.setenv("AIRFLOW__AIRFLOW_JOBS__AUTOSCALED_NODE_SHAPES", SHAPES)


async def _admission() -> UnmanagedEngine:
    watch = await shared.acquire("kubernetes_default", NAMESPACE)
    await watch.wait_synced(timeout=30)
    return UnmanagedEngine.for_watch(watch)


async def test_a_gpu_job_waits_for_the_node_pool_and_runs_when_a_node_joins(client, autoscaled):
    admission = await _admission()
    (job,) = await create_jobs(client, job_body(unique("zero"), "ann", 4, run=10_000, task="waits"))

    await admission.ensure(job)

    current = await client.get(JOBS, NAMESPACE, job["metadata"]["name"])
    assert annotation(current, labels.VERDICT) is None  # not ruled larger than any node

    gpu_node = node_object(7, ClusterConfig(nodes=1, gpus_per_node=8))
    gpu_node["metadata"]["labels"]["pool"] = "gpu"
    await client.create(NODES, "", gpu_node)
    try:

        async def running_on_the_new_node() -> bool:
            pods = (await client.list(PODS, NAMESPACE, label_selector=f"job-name={job['metadata']['name']}"))[
                "items"
            ]
            return any(
                p["spec"].get("nodeName") == gpu_node["metadata"]["name"]
                and p["status"].get("phase") == "Running"
                for p in pods
            )

        await wait_for(running_on_the_new_node, timeout=60)
        current = await client.get(JOBS, NAMESPACE, job["metadata"]["name"])
        assert annotation(current, labels.VERDICT) is None
    finally:
        await client.delete(NODES, "", gpu_node["metadata"]["name"])


async def test_a_job_larger_than_any_node_the_cluster_can_add_still_fails_at_once(client, autoscaled):
    admission = await _admission()
    (job,) = await create_jobs(client, job_body(unique("huge"), "ann", 16, task="huge"))

    assert await admission.ensure(job) is None

    ruled = await client.get(JOBS, NAMESPACE, job["metadata"]["name"])
    assert annotation(ruled, labels.VERDICT) == "Unschedulable"
    assert "asks for 16 GPUs but any node offers at most 8 (largest node: autoscaled-0)" in (
        annotation(ruled, labels.VERDICT_MESSAGE) or ""
    )


async def test_a_pod_an_autoscaler_adds_a_node_for_waits_past_its_schedule_timeout(client, autoscaled):
    """Both jobs are admitted and wait Unschedulable (no GPU node yet); the cluster-autoscaler wrote
    TriggeredScaleUp on the first one's pod. At schedule_timeout the second is requeued as stuck; the
    first waits for its node (placement.node_coming)."""
    group, name = unique("scale"), unique("policy")
    await put_policy(client, name, f"groups:\n  {group}: {{gpus: 8}}\nschedule_timeout: 1s\n")
    watch = await shared.acquire("kubernetes_default", NAMESPACE)
    admission = Admission.for_watch(watch, quota_configmap=name, quota_namespace=NAMESPACE)
    admission.start_group(group)
    coming, stuck = await create_jobs(
        client,
        job_body(group, "ann", 4, run=10_000, task="scaleup"),
        job_body(group, "bob", 4, run=10_000, task="noscale"),
    )

    async def pending_pod() -> dict | None:
        selector = f"job-name={coming['metadata']['name']}"
        pods = (await client.list(PODS, NAMESPACE, label_selector=selector))["items"]
        return next((p for p in pods if not p["spec"].get("nodeName")), None)

    pod = await wait_for(pending_pod, timeout=30)
    await client.create(
        EVENTS,
        NAMESPACE,
        {
            "metadata": {"name": unique("scale-up")},
            "involvedObject": {"kind": "Pod", "name": pod["metadata"]["name"], "namespace": NAMESPACE},
            "reason": "TriggeredScaleUp",
            "message": "pod triggered scale-up: [{gpu-pool 0->1 (max: 4)}]",
            "type": "Normal",
            "source": {"component": "cluster-autoscaler"},
            "lastTimestamp": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
    )

    async def stuck_requeued() -> bool:
        job = await client.get(JOBS, NAMESPACE, stuck["metadata"]["name"])
        return annotation(job, labels.REQUEUE_COUNT) == "1"

    await wait_for(stuck_requeued, timeout=30)
    await admission.run_pass(group)

    waiting = await client.get(JOBS, NAMESPACE, coming["metadata"]["name"])
    assert annotation(waiting, labels.REQUEUE_COUNT) == "0"  # never requeued
    assert not waiting["spec"].get("suspend")
