"""A job whose containers cannot be created is failed after a short grace, through the real trigger,
instead of holding its GPUs until its deadline."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone

from sim_fixtures import cluster_fixture, connection_fixture

from airflow_jobs_plugin.airflow.triggers import JobTrigger
from airflow_jobs_plugin.cluster import watch as shared
from airflow_jobs_plugin.cluster.kube import JOBS, PODS, KubeClient
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.kinds.mpi import MPIJOBS
from airflow_jobs_plugin.jobs.manifests import build_manifest
from airflow_jobs_plugin.jobs.spec import TaskIdentity, validate
from airflow_jobs_plugin.lifecycle import failures

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


async def test_an_mpi_job_ruled_failed_ends_through_its_launcher_and_reads_failed(cluster):
    # A missing image on every replica: the trigger rules it ImagePull. Suspending the MPIJob would
    # leave its launcher Job Suspended in `kubectl get jobs` (how a queued job looks); ending the
    # launcher Job through its own deadline makes mpi-operator mark the MPIJob Failed
    # (pkg/controller/mpi_job_controller.go, updateMPIJobFailedStatus, v0.8.0) and clean its workers.
    identity = TaskIdentity("stuck", "train", "run-3", -1, 1)
    spec = validate(
        image="registry.example/trainer:not-found", group="vision", user="alice", gpus=1, workers=2
    )
    body = build_manifest(
        spec, name=identity.job_name(1), task=identity, attempt=1, queued_at=datetime.now(timezone.utc)
    )
    client = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
    try:
        await client.create(MPIJOBS, "default", body)
        name = body["metadata"]["name"]
        trigger = JobTrigger(job_name=name, namespace="default", kind="MPIJob", recheck_interval=0.5)

        async def collect() -> list[dict]:
            return [event.payload async for event in trigger.run()]

        (event,) = await asyncio.wait_for(collect(), 60)
        assert (event["state"], event["reason"]) == ("FAILED", "ImagePull"), event
        mpijob = await client.get(MPIJOBS, "default", name)
        conditions = {c["type"]: c for c in mpijob["status"]["conditions"]}
        assert conditions["Failed"]["status"] == "True"
        assert conditions["Failed"]["reason"] == "DeadlineExceeded"
        assert mpijob["spec"]["runPolicy"]["suspend"] is not True
        assert mpijob["metadata"]["annotations"][labels.VERDICT] == "ImagePull"
        launcher = await client.get(JOBS, "default", f"{name}-launcher")
        launcher_conditions = {c["type"]: c["status"] for c in launcher["status"]["conditions"]}
        assert launcher_conditions.get("Failed") == "True" and "Suspended" not in {
            c["type"] for c in launcher["status"]["conditions"] if c["status"] == "True"
        }
        pods = (await client.list(PODS, "default"))["items"]
        assert not [p for p in pods if p["metadata"]["name"].startswith(name)]  # every GPU is free
    finally:
        await client.close()
        await shared.shutdown()


async def test_a_ruled_mpi_job_whose_launcher_was_not_ended_is_ended_by_the_admission_controller(cluster):
    # The process that ruled stopped between its two writes: the verdict is on the MPIJob, but its
    # launcher runs on. The admission controller finishes ending it; its trigger reports the end.
    identity = TaskIdentity("stuck", "train", "run-4", -1, 1)
    spec = validate(
        image="registry.example/trainer:1",
        group="vision",
        user="alice",
        gpus=1,
        workers=2,
        annotations={"sim.airflow-jobs.io/scenario": json.dumps({"main": {"run": None}})},
    )
    body = build_manifest(
        spec, name=identity.job_name(1), task=identity, attempt=1, queued_at=datetime.now(timezone.utc)
    )
    client = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
    try:
        body["spec"]["runPolicy"]["suspend"] = False
        await client.create(MPIJOBS, "default", body)
        name = body["metadata"]["name"]
        for _ in range(400):
            launcher = await client.get_or_none(JOBS, "default", f"{name}-launcher")
            if launcher and not launcher["spec"].get("suspend"):
                break
            await asyncio.sleep(0.05)
        await client.merge_patch(
            MPIJOBS, "default", name, {"metadata": {"annotations": {labels.VERDICT: "ImagePull"}}}
        )
        trigger = JobTrigger(job_name=name, namespace="default", kind="MPIJob", recheck_interval=0.5)

        async def collect() -> list[dict]:
            return [event.payload async for event in trigger.run()]

        (event,) = await asyncio.wait_for(collect(), 60)
        assert (event["state"], event["reason"]) == ("FAILED", "ImagePull"), event
        launcher = await client.get(JOBS, "default", f"{name}-launcher")
        assert launcher["spec"]["activeDeadlineSeconds"] == 1
        pods = (await client.list(PODS, "default"))["items"]
        assert not [p for p in pods if p["metadata"]["name"].startswith(name)]
    finally:
        await client.close()
        await shared.shutdown()
