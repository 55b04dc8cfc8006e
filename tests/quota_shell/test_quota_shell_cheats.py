"""Cheats tried with the worker's own rights on the simulator, and what the pool makes of them: a job
is charged what its pods ask for and queued at its creation, whatever its annotations claim; a group
and user the charging rule forbids are never admitted; honest jobs beside them run."""

from __future__ import annotations

from sim_fixtures import cluster_fixture

from airflow_jobs_plugin.cluster import watch as shared
from airflow_jobs_plugin.cluster.kube import CONFIGMAPS, JOBS
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.queueing import quota
from airflow_jobs_plugin.queueing.engines.pool import Admission

from .conftest import NAMESPACE, annotation, create_jobs, job_body, ledger_of, unique, wait_for

cluster = cluster_fixture(nodes=3, controller=False)


async def put_pool(client, name: str, policy: str, charging: str | None = None) -> None:
    data = {quota.POLICY_KEY: policy, **({quota.model.CHARGING_KEY: charging} if charging else {})}
    await client.create(CONFIGMAPS, NAMESPACE, {"metadata": {"name": name}, "data": data})


async def admission_for(name: str):
    watch = await shared.acquire("kubernetes_default", NAMESPACE)
    await watch.wait_synced(timeout=30)
    return watch, Admission.for_watch(watch, quota_configmap=name, quota_namespace=NAMESPACE)


def admitted(watch, job: dict) -> dict | None:
    current = watch.get(JOBS, job["metadata"]["name"])
    return current if current and annotation(current, labels.ADMITTED_AT) else None


async def test_a_job_annotated_smaller_earlier_and_higher_is_charged_its_pods_and_honest_jobs_run(client):
    """2 pods x 8 GPUs annotated gpus 1, priority 1000, queued in 1970, against a group quota of 2."""
    group, name = unique("cheat"), unique("policy")
    await put_pool(client, name, f"groups:\n  {group}: {{gpus: 2}}\npriorities: {{high: 100, normal: 0}}\n")
    watch, admission = await admission_for(name)
    forged = job_body(group, "mallory", 8, workers=2, framework="torchrun", run=10_000, task="forged")
    forged["metadata"]["annotations"].update(
        {labels.GPUS: "1", labels.PRIORITY: "1000", labels.QUEUED_AT: "1970-01-01T00:00:00Z"}
    )
    forged_job, alice, bob = await create_jobs(
        client,
        forged,
        job_body(group, "alice", 1, run=10_000, task="honest-a"),
        job_body(group, "bob", 1, run=10_000, task="honest-b"),
    )
    await admission.run_pass(group)
    await wait_for(lambda: admitted(watch, alice))
    await wait_for(lambda: admitted(watch, bob))

    def failed() -> dict | None:
        current = watch.get(JOBS, forged_job["metadata"]["name"])
        return current if current and annotation(current, labels.VERDICT) else None

    ruled = await wait_for(failed)
    assert annotation(ruled, labels.VERDICT) == "OverQuota"
    assert "needs 16 GPUs" in annotation(ruled, labels.VERDICT_MESSAGE)
    assert annotation(ruled, labels.ADMITTED_AT) is None
    ledger = await ledger_of(client, group)
    assert {r.job: r.gpus for r in ledger.reservations} == {
        alice["metadata"]["name"]: 1,
        bob["metadata"]["name"]: 1,
    }


async def test_a_job_charged_to_a_pair_the_charging_rule_forbids_is_never_admitted(client):
    group, name = unique("chg"), unique("policy")
    charging = f"folders:\n  /dags/team: {{groups: [{group}], users: [alice]}}\n"
    await put_pool(client, name, f"groups:\n  {group}: {{gpus: 4}}\n", charging)
    watch, admission = await admission_for(name)
    mallory, alice = await create_jobs(
        client,
        job_body(group, "mallory", 0, run=10_000, task="forged"),
        job_body(group, "alice", 1, run=10_000, task="honest"),
    )
    await admission.run_pass(group)
    await wait_for(lambda: admitted(watch, alice))
    status = await admission.ensure(watch.get(JOBS, mallory["metadata"]["name"]))
    assert status is not None and status.reason == "Inadmissible"
    assert f"charging rule charging.yaml: no DAG folder may charge group {group!r} as user 'mallory'" in (
        status.message
    )
    assert admitted(watch, mallory) is None
    assert [r.user for r in (await ledger_of(client, group)).reservations] == ["alice"]


async def test_a_job_whose_pods_reach_uncharged_gpus_ends_inadmissible_naming_the_field(client):
    # Its pod template cannot change while it waits (only scheduling directives of a suspended Job
    # can: kubernetes v1.36 pkg/apis/batch/validation ValidateJobSpecUpdate), so it is ended, not kept.
    group, name = unique("dra"), unique("policy")
    await put_pool(client, name, f"groups:\n  {group}: {{gpus: 4}}\n")
    watch, admission = await admission_for(name)
    body = job_body(group, "alice", 1, run=10_000, task="claims")
    body["spec"]["template"]["spec"]["nodeName"] = "node-0"
    (job,) = await create_jobs(client, body)
    await admission.run_pass(group)

    assert await admission.ensure(watch.get(JOBS, job["metadata"]["name"])) is None

    ended = await client.get(JOBS, NAMESPACE, job["metadata"]["name"])
    assert annotation(ended, labels.VERDICT) == "Inadmissible"
    assert "worker template spec.nodeName: binds the pod to node 'node-0' without the scheduler" in (
        annotation(ended, labels.VERDICT_MESSAGE) or ""
    )
    assert admitted(watch, job) is None
