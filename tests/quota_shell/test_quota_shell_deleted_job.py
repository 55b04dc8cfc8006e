"""`kubectl delete job` on a running job: the job goes at once, its pods after, each within its grace
period. The job's GPUs stay in the pool's ledger until its pods are gone, even once its trigger has let
the job go; then the next job in line gets them."""

from __future__ import annotations

from airflow_jobs_plugin.cluster.kube import JOBS, PODS

from .conftest import NAMESPACE, create_jobs, job_body, ledger_of, wait_for
from .test_quota_shell_stop import admission_for


async def test_a_deleted_job_holds_its_gpus_until_its_pods_are_gone(client, cluster):
    group, admission = await admission_for(client, 2)
    first, second = await create_jobs(
        client,
        job_body(group, "ann", 2, run=10_000, task="deleted"),
        job_body(group, "bob", 2, run=10_000, task="next"),
    )
    name = first["metadata"]["name"]
    await admission.run_pass(group)
    pod = await wait_for(
        lambda: next(
            (p for p in admission.watch.pods_of(name) if (p.get("spec") or {}).get("nodeName")), None
        )
    )
    # Its node stops answering: the kubelet never confirms the pod gone, so it stops for its whole grace.
    cluster.controllers.lose_node(pod["spec"]["nodeName"], eviction_after=10_000)
    last_seen = admission.watch.get(JOBS, name)

    await client.delete(JOBS, NAMESPACE, name, propagation_policy="Background")
    await wait_for(lambda: admission.watch.get(JOBS, name) is None)
    stopping = await wait_for(
        lambda: next(
            (p for p in admission.watch.pods_of(name) if p["metadata"].get("deletionTimestamp")), None
        )
    )
    # The trigger that followed the job lets it go, as it does when its job vanishes.
    await admission.release(last_seen)
    await admission.run_pass(group)
    assert [r.job for r in (await ledger_of(client, group)).reservations] == [name]

    # The pod is gone (its node's pods force-deleted): the GPUs go to the next job in line.
    await client.delete(PODS, NAMESPACE, stopping["metadata"]["name"], grace_period_seconds=0)

    async def second_admitted() -> bool:
        await admission.run_pass(group)
        return [r.job for r in (await ledger_of(client, group)).reservations] == [second["metadata"]["name"]]

    await wait_for(second_admitted)
    cluster.controllers.restore_node(pod["spec"]["nodeName"])
