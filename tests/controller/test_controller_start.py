"""How the admission controller starts (controller/runner.py): a job is routed only once the namespace's
quota policies are read, so a controller whose ConfigMaps come late never lets a pool's job go unpooled.
Found by the chaos run, where injected API errors made the policies' list come after the jobs'."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime, timezone

import pytest
from airflow_jobs_sim import ClusterConfig, SimCluster
from controller_fixture import ControllerThread

from airflow_jobs_plugin.cluster.kube import CONFIGMAPS, JOBS, KubeClient
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.manifests import build_manifest, pool_gate
from airflow_jobs_plugin.jobs.spec import TaskIdentity, validate
from airflow_jobs_plugin.queueing import board, quota
from airflow_jobs_plugin.queueing.pools import POLICY_LABELS
from tests.patience import Deadline

pytestmark = pytest.mark.fault_injection("holds back the ConfigMaps' list with the simulator's latency fault")


def _job(name: str, gpus: int) -> dict:
    spec = validate(
        image="registry.example/trainer:1",
        group="vision",
        user="alice",
        gpus=gpus,
        annotations={"sim.airflow-jobs.io/scenario": json.dumps({"main": {"run": None}})},  # runs on
    )
    task = TaskIdentity("start", name, "run-1", -1, 1)
    return pool_gate(
        build_manifest(
            spec, name=task.job_name(1), task=task, attempt=1, queued_at=datetime.now(timezone.utc)
        )
    )


def test_a_job_waits_for_the_namespaces_policies_before_it_is_routed():
    with SimCluster(ClusterConfig(nodes=1, gpus_per_node=8, time_scale=0.01)) as sim:

        async def prepare() -> tuple[str, str]:
            client = await KubeClient.from_kubeconfig(sim.kubeconfig_path)
            try:
                policy = {
                    "metadata": {"name": "pool", "labels": POLICY_LABELS},
                    "data": {quota.POLICY_KEY: "groups:\n  vision: {gpus: 2}\n"},
                }
                await client.create(CONFIGMAPS, "default", policy)
                first, second = _job("first", 2), _job("second", 2)
                for body in (first, second):
                    await client.create(JOBS, "default", body)
                return first["metadata"]["name"], second["metadata"]["name"]
            finally:
                await client.close()

        first, second = asyncio.run(prepare())
        # The controller's list of ConfigMaps comes two seconds after its list of jobs.
        sim.faults.set_latency(2.0, verb="list", resource="configmaps")
        with ControllerThread(sim.kubeconfig_path, namespaces=("default",)):
            deadline = Deadline(20)
            while not sim.store.list(
                "configmaps", "default", field_selector=f"metadata.name={board.board_name('vision')}"
            ):
                assert not deadline.passed(), "the pool never published its queue"
                time.sleep(0.05)
            time.sleep(0.5)
            jobs = {j["metadata"]["name"]: j for j in sim.store.list("jobs", "default")}
        sim.faults.clear()
        # The pool admitted one 2-GPU job of its 2 GPUs; the other waits in its queue.
        running = [n for n in (first, second) if not jobs[n]["spec"]["suspend"]]
        assert running == [first], {n: jobs[n]["spec"]["suspend"] for n in (first, second)}
        assert labels.ADMITTED_AT in jobs[first]["metadata"]["annotations"]
