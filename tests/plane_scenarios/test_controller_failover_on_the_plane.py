"""The admission controller killed while jobs queue, on the real control plane: two replicas, each its own
OS process electing a leader on a ``coordination.k8s.io/v1`` Lease; the leader is SIGKILLed three times
(no release: the other replica takes over once the Lease expires, and the killed one starts again as a
Deployment restarts its pod). Sampled all along from the real API server: no group ever runs more GPUs
than its quota, no job is admitted without its reservation, and at the end every job succeeded once and
no reservation is left. The simulator's version, with faults and triggerers killed beside it:
tests/reliability/test_chaos.py."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from pathlib import Path

import pytest

from airflow_jobs_plugin.cluster.kube import CONFIGMAPS, JOBS, KubeClient, KubeError
from airflow_jobs_plugin.cluster.resources import LEASES, NAMESPACES
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.manifests import build_manifest, pool_gate
from airflow_jobs_plugin.jobs.spec import TaskIdentity, validate
from airflow_jobs_plugin.queueing.quota.ledger import read_ledger
from tests.reliability.chaos_harness import Controllers

from .plane import OWN_CONTROLLER, kube, on_cluster, scenario

pytestmark = [pytest.mark.real_cluster, pytest.mark.timeout(900)]

NAMESPACE = "plane-failover"
GROUP = "failover"
QUOTA = 4
JOBS_SUBMITTED = 12
POLICY = f"groups:\n  {GROUP}: {{gpus: {QUOTA}, user_gpus: {QUOTA}}}\n"
LEASE = "airflow-jobs-admission-controller"
# Long enough for the controller to have admitted a wave before each kill, short enough for the run.
RUN_SECONDS = 6


def job_body(index: int) -> dict:
    identity = TaskIdentity("plane_failover", f"train_{index}", "run-1", -1, 1)
    spec = validate(
        image="registry.example/trainer:1",
        group=GROUP,
        user="alice",
        gpus=1,
        namespace=NAMESPACE,
        annotations=scenario(main={"run": RUN_SECONDS, "logs": ["epoch 1"]}),
    )
    body = build_manifest(
        spec, name=identity.job_name(1), task=identity, attempt=1, queued_at=datetime.now(timezone.utc)
    )
    return pool_gate(body)


def finished(job: dict) -> bool:
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or ()
    )


async def set_up(client: KubeClient) -> None:
    try:
        await client.create(
            NAMESPACES, "", {"metadata": {"name": NAMESPACE, "labels": {OWN_CONTROLLER: "true"}}}
        )
    except KubeError as exc:
        if exc.status != 409:
            raise
    await client.create(
        CONFIGMAPS,
        NAMESPACE,
        {"metadata": {"name": "airflow-jobs-quota-policy"}, "data": {"policy.yaml": POLICY}},
    )


def test_the_leader_killed_three_times_admits_no_job_twice_nor_over_quota(cluster, tmp_path: Path):
    if getattr(cluster, "simulated", True) is not False:
        pytest.skip("the real API server and Lease: tests/reliability/test_chaos.py runs it on the simulator")
    on_cluster(cluster.kubeconfig_path, set_up)
    controllers = Controllers(cluster.kubeconfig_path, NAMESPACE, tmp_path)
    controllers.start_all()

    async def run() -> dict:
        seen = {"most_running": 0, "most_reserved": 0, "unpaid": [], "leaders": set()}
        async with kube(cluster.kubeconfig_path) as client:
            for index in range(JOBS_SUBMITTED):
                await client.create(JOBS, NAMESPACE, job_body(index))
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 600
            next_kill = None
            while True:
                # A reservation is written before its job is unsuspended and released after it ended: a job
                # the list shows running is in the ledger read before the list or in the one after it.
                before = (await read_ledger(client, NAMESPACE, GROUP)).ledger
                listed = (await client.list(JOBS, NAMESPACE))["items"]
                ledger = (await read_ledger(client, NAMESPACE, GROUP)).ledger
                reserved = {r.uid for r in ledger.reservations}
                paid = reserved | {r.uid for r in before.reservations}
                running = [j for j in listed if not j["spec"].get("suspend") and not finished(j)]
                seen["most_running"] = max(seen["most_running"], len(running))
                seen["most_reserved"] = max(seen["most_reserved"], before.used_gpus, ledger.used_gpus)
                seen["unpaid"] += [j["metadata"]["name"] for j in running if j["metadata"]["uid"] not in paid]
                lease = await client.get_or_none(LEASES, NAMESPACE, LEASE)
                leader = controllers.holding(((lease or {}).get("spec") or {}).get("holderIdentity"))
                admitted = sum(
                    1 for j in listed if labels.ADMITTED_AT in j["metadata"].get("annotations", {})
                )
                # A kill while jobs queue: once the leader admitted a wave beyond the last kill's.
                if leader is not None and controllers.kills < 3:
                    if next_kill is None:
                        next_kill = admitted + QUOTA // 2
                    if admitted >= next_kill:
                        seen["leaders"].add(leader)
                        controllers.kill(leader)
                        next_kill = None
                if len(listed) == JOBS_SUBMITTED and all(finished(j) for j in listed) and not reserved:
                    seen["jobs"] = listed
                    return seen
                assert loop.time() < deadline, (len([j for j in listed if finished(j)]), controllers.kills)
                await asyncio.sleep(0.2)

    try:
        seen = asyncio.run(run())
    finally:
        controllers.stop()

    assert controllers.kills == 3
    assert seen["most_running"] <= QUOTA and seen["most_reserved"] <= QUOTA, seen
    assert not seen["unpaid"], seen["unpaid"]
    jobs = seen["jobs"]
    assert len({j["metadata"]["uid"] for j in jobs}) == JOBS_SUBMITTED
    assert all(
        any(c["type"] == "Complete" and c["status"] == "True" for c in j["status"]["conditions"])
        for j in jobs
    ), [(j["metadata"]["name"], j["status"]) for j in jobs if "Complete" not in str(j["status"])]
