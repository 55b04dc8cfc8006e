"""An admission controller over many namespaces (``--all-namespaces``, ``--namespace-selector``) keeps its
Lease and admits in every one (controller/main.py, controller/runner.py). Each namespace holds about six
watches open; on one connection pool of 100 (kubernetes_asyncio v36.1.0) some fifteen namespaces held
every connection: the next namespaces were never listed, and the Lease's renewals waited behind the
watches past their deadline, so the leader stepped down and started over, again and again (found on the
real plane, where the real tier's controller follows forty-odd namespaces)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from airflow_jobs_sim import ClusterConfig, SimCluster

from airflow_jobs_plugin.cluster.kube import JOBS, KubeClient
from airflow_jobs_plugin.cluster.resources import NAMESPACES
from airflow_jobs_plugin.jobs.manifests import build_manifest, pool_gate
from airflow_jobs_plugin.jobs.spec import TaskIdentity, validate
from tests.patience import Deadline

NAMESPACES_FOLLOWED = 30


def _job(namespace: str) -> dict:
    spec = validate(
        image="registry.example/trainer:1",
        group="vision",
        user="alice",
        gpus=0,
        namespace=namespace,
        annotations={"sim.airflow-jobs.io/scenario": json.dumps({"main": {"run": None}})},
    )
    task = TaskIdentity("many", namespace, "run-1", -1, 1)
    return pool_gate(
        build_manifest(
            spec, name=task.job_name(1), task=task, attempt=1, queued_at=datetime.now(timezone.utc)
        )
    )


def test_a_controller_of_thirty_namespaces_keeps_its_lease_and_lets_every_namespaces_job_go(tmp_path: Path):
    with SimCluster(ClusterConfig(nodes=1, gpus_per_node=8, time_scale=0.01)) as sim:
        names = [f"team-{i:02d}" for i in range(NAMESPACES_FOLLOWED)]

        async def prepare() -> None:
            client = await KubeClient.from_kubeconfig(sim.kubeconfig_path)
            try:
                for namespace in names:
                    await client.create(NAMESPACES, "", {"metadata": {"name": namespace}})
                    await client.create(JOBS, namespace, _job(namespace))
            finally:
                await client.close()

        asyncio.run(prepare())
        log = tmp_path / "controller.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "airflow_jobs_plugin.airflow.cli",
                    "admission-controller",
                    "--kubeconfig",
                    sim.kubeconfig_path,
                    "--all-namespaces",
                    "--lease-namespace",
                    "default",
                    *("--lease-duration", "3", "--renew-deadline", "2", "--retry-period", "0.5"),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
            try:
                deadline = Deadline(120)
                while True:
                    waiting = [n for n in names if sim.store.list("jobs", n)[0]["spec"]["suspend"]]
                    if not waiting:
                        break
                    assert not deadline.passed(), f"never let go in {waiting}: {log.read_text()[-2000:]}"
                    time.sleep(0.2)
                # Several renewals later, still the leader.
                time.sleep(4)
            finally:
                process.terminate()
                process.wait(timeout=30)
        told = log.read_text()
        assert "lost leadership" not in told and "no renewal within" not in told, told[-2000:]
