"""A job whose containers cannot be created is failed after a short grace, through the real trigger,
instead of holding its GPUs until its deadline."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone

from sim_fixtures import cluster_fixture, connection_fixture

from airflow_jobs_plugin import labels
from airflow_jobs_plugin import watch as shared
from airflow_jobs_plugin.kube import JOBS, PODS, KubeClient
from airflow_jobs_plugin.lifecycle import failures
from airflow_jobs_plugin.manifests import build_manifest
from airflow_jobs_plugin.spec import TaskIdentity, validate
from airflow_jobs_plugin.triggers import JobTrigger

cluster = cluster_fixture(nodes=1)
connection = connection_fixture()


async def test_a_pod_stuck_in_create_container_config_error_fails_fast_and_frees_its_gpus(
    cluster, monkeypatch
):
    # The simulator's kubelet reports CreateContainerConfigError for a pod whose configuration it
    # cannot build (here: a scenario it cannot read), as a real kubelet does for a missing Secret key.
    monkeypatch.setattr(failures, "START_GRACE", timedelta(seconds=1))
    identity = TaskIdentity("stuck", "train", "run-1", -1, 1)
    spec = validate(
        image="registry.example/trainer:1",
        group="vision",
        user="alice",
        gpus=1,
        annotations={"sim.airflow-jobs.io/scenario": json.dumps({"main": "not an object"})},
    )
    body = build_manifest(
        spec, name=identity.job_name(1), task=identity, attempt=1, queued_at=datetime.now(timezone.utc)
    )
    client = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
    try:
        await client.create(JOBS, "default", body)
        name = body["metadata"]["name"]
        trigger = JobTrigger(job_name=name, namespace="default", recheck_interval=0.5)

        async def collect() -> list[dict]:
            return [event.payload async for event in trigger.run()]

        (event,) = await asyncio.wait_for(collect(), 60)
        assert (event["state"], event["reason"]) == ("FAILED", "CreateContainerConfigError"), event
        assert event["failure_class"] == "fatal"
        job = await client.get(JOBS, "default", name)
        assert job["metadata"]["annotations"][labels.VERDICT] == "CreateContainerConfigError"
        pods = (await client.list(PODS, "default"))["items"]
        assert not [p for p in pods if p["metadata"]["name"].startswith(name)]  # its GPUs are free
    finally:
        await client.close()
        await shared.shutdown()


async def test_a_job_larger_than_any_node_fails_at_once_through_the_trigger(cluster):
    identity = TaskIdentity("stuck", "train", "run-2", -1, 1)
    spec = validate(image="registry.example/trainer:1", group="vision", user="alice", gpus=16)
    body = build_manifest(
        spec, name=identity.job_name(1), task=identity, attempt=1, queued_at=datetime.now(timezone.utc)
    )
    client = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
    try:
        await client.create(JOBS, "default", body)
        trigger = JobTrigger(job_name=body["metadata"]["name"], namespace="default")

        async def collect() -> list[dict]:
            return [event.payload async for event in trigger.run()]

        (event,) = await asyncio.wait_for(collect(), 60)
        assert (event["state"], event["reason"]) == ("FAILED", "Unschedulable"), event
        assert "asks for 16 GPUs but any node offers at most 8" in event["message"]
    finally:
        await client.close()
        await shared.shutdown()
