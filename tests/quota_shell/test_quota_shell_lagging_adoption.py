"""No write of a ledger rests on a view older than the ledger it writes: a job whose end a pass already
released is never charged again because a lagging watch still shows it running."""

from __future__ import annotations

from airflow_jobs_plugin.cluster.kube import JOBS, KubeClient
from airflow_jobs_plugin.cluster.watch import SharedWatch
from airflow_jobs_plugin.queueing import quota
from airflow_jobs_plugin.queueing.quota import ledger as ledger_io

from .conftest import NAMESPACE, create_jobs, job_body, ledger_of, list_jobs, put_policy, unique, wait_for


async def _pass(client: KubeClient, group: str, policy: quota.QuotaPolicy, jobs) -> ledger_io.PassOutcome:
    return await ledger_io.admission_pass(
        client, ledger_namespace=NAMESPACE, group=group, policy=policy, jobs=jobs
    )


async def test_a_finished_job_a_lagging_watch_still_shows_running_is_not_charged_again(client, cluster):
    group, name = unique("lag"), unique("policy")
    text = f"groups:\n  {group}: {{gpus: 2, user_gpus: 2}}\n"
    await put_policy(client, name, text)
    policy = quota.parse_policy(text)
    (first,) = await create_jobs(client, job_body(group, "alice", 2, run=200, task="first"))
    await _pass(client, group, policy, lambda: list_jobs(client))

    # A second process whose job stream is held back: it lists the first job running, and every
    # change after that reaches it late.
    other = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
    lagging = SharedWatch(other, NAMESPACE)
    cluster.faults.set_latency(60.0, verb="watch", resource="jobs")
    try:
        lagging.start()
        await lagging.wait_synced(timeout=30)
        seen = lagging.get(JOBS, first["metadata"]["name"])
        assert seen is not None and not ledger_io.is_suspended(seen), seen
        assert not ledger_io.is_finished(seen), seen

        async def first_finished() -> bool:
            job = await client.get(JOBS, NAMESPACE, first["metadata"]["name"])
            return ledger_io.is_finished(job)

        await wait_for(first_finished)
        # The up-to-date process releases the finished job and admits the next one in its place.
        (second,) = await create_jobs(client, job_body(group, "alice", 2, run=3000, task="second"))
        fresh = await _pass(client, group, policy, lambda: list_jobs(client))
        assert fresh.admitted == (second["metadata"]["name"],)

        # The lagging process still sees the first job running and holding no reservation.
        assert not ledger_io.is_finished(lagging.get(JOBS, first["metadata"]["name"]) or {})
        await _pass(client, group, policy, lambda: lagging.jobs(JOBS))

        held = await ledger_of(client, group)
        assert [r.job for r in held.reservations] == [second["metadata"]["name"]]
        assert sum(r.gpus for r in held.reservations) <= 2
    finally:
        cluster.faults.clear()
        await lagging.stop()
        await other.close()


async def test_a_job_unsuspended_by_hand_is_still_charged_from_a_fresh_read(client):
    group, name = unique("hand"), unique("policy")
    text = f"groups:\n  {group}: {{gpus: 4, user_gpus: 4}}\n"
    await put_policy(client, name, text)
    policy = quota.parse_policy(text)
    (job,) = await create_jobs(client, job_body(group, "alice", 2, run=30))
    # An administrator unsuspends it past the pool: the ledger charges it all the same.
    await client.merge_patch(JOBS, NAMESPACE, job["metadata"]["name"], {"spec": {"suspend": False}})
    await _pass(client, group, policy, lambda: list_jobs(client))
    held = await ledger_of(client, group)
    assert [r.uid for r in held.reservations] == [job["metadata"]["uid"]]
