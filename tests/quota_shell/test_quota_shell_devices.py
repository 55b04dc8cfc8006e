"""A group's quota of another GPU device (MIG slices) on the simulator: a job asking for slices is
charged the group's slices, recorded so in the ledger, and runs on nodes that offer them; a job asking
for whole GPUs is charged the whole GPUs."""

from __future__ import annotations

from sim_fixtures import cluster_fixture

from airflow_jobs_plugin.cluster import watch as shared
from airflow_jobs_plugin.cluster.kube import JOBS
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.queueing.engines.pool import Admission

from .conftest import NAMESPACE, annotation, create_jobs, job_body, ledger_of, put_policy, unique, wait_for

MIG = "nvidia.com/mig-1g.10gb"

cluster = cluster_fixture(nodes=2, devices_per_node=((MIG, 7),), controller=False)


async def test_a_mig_job_is_charged_the_groups_slices_and_a_whole_gpu_job_its_gpus(client):
    group, name = unique("mig"), unique("policy")
    await put_policy(client, name, f"groups:\n  {group}: {{gpus: 2, user_gpus: 8, devices: {{{MIG}: 4}}}}\n")
    watch = await shared.acquire("kubernetes_default", NAMESPACE)
    await watch.wait_synced(timeout=30)
    admission = Admission.for_watch(watch, quota_configmap=name, quota_namespace=NAMESPACE)
    slices, whole, more_slices = await create_jobs(
        client,
        job_body(group, "alice", 3, run=10_000, task="slices", gpu_resource=MIG),
        job_body(group, "bob", 2, run=10_000, task="whole"),
        job_body(group, "carol", 2, run=10_000, task="more-slices", gpu_resource=MIG),
    )
    assert annotation(slices, labels.GPU_DEVICE) == MIG and annotation(whole, labels.GPU_DEVICE) is None
    await admission.run_pass(group)

    def admitted(job: dict) -> dict | None:
        current = watch.get(JOBS, job["metadata"]["name"])
        return current if current and annotation(current, labels.ADMITTED_AT) else None

    await wait_for(lambda: admitted(slices))
    await wait_for(lambda: admitted(whole))
    # 3 of the group's 4 slices are held: 2 more must wait, whatever whole GPUs are free.
    status = await admission.ensure(watch.get(JOBS, more_slices["metadata"]["name"]))
    assert status.reason == "GroupQuota" and f"uses 3 of 4 {MIG}" in status.message
    ledger = await ledger_of(client, group)
    assert {r.job: (r.resource, r.gpus) for r in ledger.reservations} == {
        slices["metadata"]["name"]: (MIG, 3),
        whole["metadata"]["name"]: (labels.GPU_RESOURCE, 2),
    }
