"""A job whose pod is larger than any node fails at admission, with or without a quota policy, instead
of waiting as Unschedulable until its deadline."""

from __future__ import annotations

import pytest

from airflow_jobs_plugin.cluster import watch as shared
from airflow_jobs_plugin.cluster.kube import JOBS
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.queueing.engines.pool import Admission
from airflow_jobs_plugin.queueing.engines.unmanaged import UnmanagedEngine
from airflow_jobs_plugin.queueing.quota import ledger as ledger_io

from .conftest import (
    NAMESPACE,
    annotation,
    create_jobs,
    job_body,
    put_policy,
    reservations_once_released,
    unique,
    wait_for,
)


async def job_failed(client, name: str) -> dict | None:
    """The job once its controller marked it Failed (what ``kubectl get jobs`` shows as Failed)."""
    job = await client.get(JOBS, NAMESPACE, name)
    conditions = (job.get("status") or {}).get("conditions") or []
    return job if any(c["type"] == "Failed" and c["status"] == "True" for c in conditions) else None


@pytest.mark.parametrize("with_quota", [False, True], ids=["without-quota", "with-quota"])
async def test_sixteen_gpus_on_eight_gpu_nodes_fails_at_once_saying_why(client, with_quota):
    group = unique("big")
    watch = await shared.acquire("kubernetes_default", NAMESPACE)
    await watch.wait_synced(timeout=30)
    if with_quota:
        policy = unique("policy")
        await put_policy(client, policy, f"groups:\n  {group}: {{gpus: 32, user_gpus: 32}}\n")
        admission = Admission.for_watch(watch, quota_configmap=policy, quota_namespace=NAMESPACE)
    else:
        admission = UnmanagedEngine.for_watch(watch)
    (job,) = await create_jobs(client, job_body(group, "ann", 16, task="huge"))

    assert await admission.ensure(job) is None

    ruled = await client.get(JOBS, NAMESPACE, job["metadata"]["name"])
    assert annotation(ruled, labels.VERDICT) == "Unschedulable"
    message = annotation(ruled, labels.VERDICT_MESSAGE) or ""
    assert "asks for 16 GPUs but any node offers at most 8" in message
    # Its controller marks it Failed, as kubectl shows it; it never ran a pod.
    failed = await wait_for(lambda: job_failed(client, job["metadata"]["name"]))
    assert failed["spec"]["parallelism"] == 0 and not failed["status"].get("active")
    if with_quota:
        await admission.run_pass(group)
        assert await reservations_once_released(client, group) == ()


async def test_a_job_as_large_as_a_node_is_admitted(client):
    watch = await shared.acquire("kubernetes_default", NAMESPACE)
    await watch.wait_synced(timeout=30)
    admission = UnmanagedEngine.for_watch(watch)
    (job,) = await create_jobs(client, job_body(unique("full"), "ann", 8, task="full-node"))
    assert await admission.ensure(job) is None
    admitted = await client.get(JOBS, NAMESPACE, job["metadata"]["name"])
    assert not ledger_io.is_suspended(admitted) and annotation(admitted, labels.VERDICT) is None
