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
from airflow_jobs_plugin.queueing.quota.ledger_model import LEDGER_NAME_PREFIX
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


def _ledger_reservations(sim: SimCluster) -> dict[str, tuple]:
    def on_loop() -> dict[str, tuple]:
        return {
            cm["metadata"]["name"][len(LEDGER_NAME_PREFIX) :]: quota.decode(
                cm["metadata"]["name"][len(LEDGER_NAME_PREFIX) :], cm.get("data")
            ).reservations
            for cm in sim.store.list("configmaps", "default")
            if cm["metadata"]["name"].startswith(LEDGER_NAME_PREFIX)
        }

    return sim.call(on_loop)


def test_a_job_that_ended_while_no_controller_led_has_its_gpus_released_by_the_next_leader():
    """Nothing keeps a finished job, and no event of it comes again: a job that ended between its
    leader's death and the next leader's start left its reservation in the ledger, and a group with no
    waiting job ran no pass to drop it. The next leader passes every group at its start."""
    with SimCluster(ClusterConfig(nodes=1, gpus_per_node=8, time_scale=0.01)) as sim:

        async def prepare() -> str:
            client = await KubeClient.from_kubeconfig(sim.kubeconfig_path)
            try:
                policy = {
                    "metadata": {"name": "pool", "labels": POLICY_LABELS},
                    "data": {quota.POLICY_KEY: "groups:\n  vision: {gpus: 2}\n"},
                }
                await client.create(CONFIGMAPS, "default", policy)
                body = _job("ends-alone", 2)
                scenario = json.dumps({"main": {"run": 300}})  # 3 s at this time scale
                body["metadata"]["annotations"]["sim.airflow-jobs.io/scenario"] = scenario
                body["spec"]["template"]["metadata"]["annotations"]["sim.airflow-jobs.io/scenario"] = scenario
                await client.create(JOBS, "default", body)
                return body["metadata"]["name"]
            finally:
                await client.close()

        name = asyncio.run(prepare())

        def job() -> dict:
            return next(j for j in sim.store.list("jobs", "default") if j["metadata"]["name"] == name)

        with ControllerThread(sim.kubeconfig_path, namespaces=("default",)):
            deadline = Deadline(20)
            while job()["spec"]["suspend"] or not any(_ledger_reservations(sim).values()):
                assert not deadline.passed(), f"the pool never admitted the job after {deadline}"
                time.sleep(0.05)
        # No controller leads while the job runs to its end.
        deadline = Deadline(30)
        while not any(c["type"] == "Complete" for c in job().get("status", {}).get("conditions") or []):
            assert not deadline.passed(), f"the job never completed after {deadline}"
            time.sleep(0.05)
        assert any(_ledger_reservations(sim).values()), (
            "the reservation was dropped before a leader saw the end"
        )
        with ControllerThread(sim.kubeconfig_path, namespaces=("default",)):
            deadline = Deadline(20)
            while any(_ledger_reservations(sim).values()):
                assert not deadline.passed(), f"still reserved after {deadline}: {_ledger_reservations(sim)}"
                time.sleep(0.05)
