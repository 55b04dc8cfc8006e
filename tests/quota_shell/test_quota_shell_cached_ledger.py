"""The ledger as the process's ledger watch holds it stands in for a GET wherever a compare-and-swap
checks it anyway: a trigger's release, and a pass whose write from the cache lost to another process.
Three processes racing on every job's end would otherwise each read what their watches bring them a
moment later (docs/benchmarks.md, admission under load)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from airflow_jobs_plugin.cluster import watch as shared
from airflow_jobs_plugin.cluster.kube import CONFIGMAPS, JOBS, KubeClient
from airflow_jobs_plugin.cluster.watch import SharedWatch
from airflow_jobs_plugin.queueing.engines import pool as admission_module
from airflow_jobs_plugin.queueing.engines.pool import Admission
from airflow_jobs_plugin.queueing.quota import ledger as ledger_io

from .conftest import NAMESPACE, create_jobs, job_body, ledger_of, put_policy, unique, wait_for


async def _admission(client, group_gpus: int = 2) -> tuple[str, Admission]:
    group, name = unique("cached"), unique("policy")
    await put_policy(client, name, f"groups:\n  {group}: {{gpus: {group_gpus}, user_gpus: {group_gpus}}}\n")
    watch = await shared.acquire("kubernetes_default", NAMESPACE)
    await watch.wait_synced(timeout=30)
    return group, Admission.for_watch(watch, quota_configmap=name, quota_namespace=NAMESPACE)


@contextlib.asynccontextmanager
async def _another_process(cluster, first: Admission) -> AsyncIterator[Admission]:
    """The same pool in a second process: its own client, shared watch and admission."""
    other_client = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
    other_watch = SharedWatch(other_client, NAMESPACE)
    other_watch.start()
    second = None
    try:
        await other_watch.wait_synced(timeout=30)
        second = Admission.for_watch(
            other_watch, quota_configmap=first.quota_configmap, quota_namespace=NAMESPACE
        )
        yield second
    finally:
        if second is not None:
            await second.close()
        await other_watch.stop()
        await other_client.close()


def _ledger_written(admission: Admission, group: str) -> bool:
    stored = admission._cached_ledger(group)
    return stored is not None and stored.configmap is not None


async def _admitted(client, admission: Admission, group: str, job: dict) -> dict:
    """Run passes until ``job`` runs; the job as the watch then holds it, its reservation cached."""
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]

    async def running() -> dict | None:
        await admission.run_pass(group)
        cached = admission.watch.get(JOBS, name)
        held = admission._cached_ledger(group)
        if cached and not ledger_io.is_suspended(cached) and held and held.ledger.find(uid):
            return cached
        return None

    return await wait_for(running)


async def test_a_release_the_pass_already_made_asks_nothing_of_the_api_server(client, cluster):
    group, admission = await _admission(client)
    (job,) = await create_jobs(client, job_body(group, "ann", 2, run=0.5))
    await _admitted(client, admission, group, job)

    def dropped() -> bool:
        held = admission._cached_ledger(group)
        return held is not None and held.configmap is not None and not held.ledger.reservations

    await wait_for(dropped)  # the job ended and its group's pass gave its GPUs back
    finished = admission.watch.get(JOBS, job["metadata"]["name"])
    cluster.reset_counters()

    await admission.release(finished)

    counters = cluster.counters()
    assert counters.get(("get", "configmaps"), 0) == 0
    assert counters.get(("update", "configmaps"), 0) == 0


async def test_a_release_is_one_write_of_its_groups_pass_whatever_its_pods_still_hold(client, cluster):
    """The trigger lets the job go whatever its pods hold (here they still run); its group's pass drops
    the reservation, writing over the cached ledger: nothing is read."""
    group, admission = await _admission(client)
    (job,) = await create_jobs(client, job_body(group, "ann", 2, run=10_000))
    running = await _admitted(client, admission, group, job)
    cluster.reset_counters()

    await admission.release(running)

    counters = cluster.counters()
    assert counters.get(("get", "configmaps"), 0) == 0
    assert counters.get(("update", "configmaps"), 0) == 1
    assert not (await ledger_of(client, group)).reservations


async def test_a_release_over_a_stale_cached_ledger_reads_it_again_and_still_releases(client, cluster):
    group, admission = await _admission(client)
    (job,) = await create_jobs(client, job_body(group, "ann", 2, run=10_000))
    running = await _admitted(client, admission, group, job)
    stale = admission._cached_ledger(group)
    assert stale is not None and stale.configmap is not None
    # Someone changes the ledger's ConfigMap (its version moves on) before this process's watch shows it.
    meta = stale.configmap["metadata"]
    touched = {**meta, "labels": {**(meta.get("labels") or {}), "touched": "1"}}
    await client.replace(CONFIGMAPS, NAMESPACE, {**stale.configmap, "metadata": touched})
    cluster.reset_counters()

    released = await ledger_io.release(client, NAMESPACE, group, running["metadata"]["uid"], cached=stale)

    counters = cluster.counters()
    assert released
    assert counters.get(("update", "configmaps"), 0) == 2  # the stale write lost, the fresh one won
    assert counters.get(("get", "configmaps"), 0) == 1  # read again once, at once
    assert not (await ledger_of(client, group)).reservations


async def test_a_pass_whose_cached_write_lost_plans_again_on_the_ledger_its_watch_brings(client, cluster):
    """Two processes judge the same end at once: the one whose write lost does not GET the ledger, it
    waits for its ledger watch to bring the winner's and finds nothing left to do."""
    group, first = await _admission(client)
    async with _another_process(cluster, first) as second:
        for admission in (first, second):  # both processes' ledger watches up, neither judging the group
            admission.start_group(unique("elsewhere"))
            await wait_for(lambda a=admission: a._cached_ledger(group) is not None)
        (job,) = await create_jobs(client, job_body(group, "ann", 2, run=10_000))
        name = job["metadata"]["name"]
        await wait_for(lambda: first.watch.get(JOBS, name) and second.watch.get(JOBS, name))

        steps: list[str] = []

        async def race(step: str) -> None:
            steps.append(step)
            if step == "planned" and steps.count("planned") == 1:
                # The other process wins the race: it writes the same admission first.
                await second.run_pass(group)

        first.hook = race
        cluster.reset_counters()
        await first.run_pass(group)

        counters = cluster.counters()
        assert steps.count("planned") == 2  # planned again, on the winner's ledger
        assert "ledger-written" not in steps  # nothing left to write
        assert counters.get(("get", "configmaps"), 0) == 0
        held = (await ledger_of(client, group)).reservations
        assert [r.job for r in held] == [name]
        assert counters.get(("patch", "jobs"), 0) == 1  # unsuspended once, by the winner


async def test_another_processs_ledger_write_is_followed_up_here_only_as_a_backstop(
    client, cluster, monkeypatch
):
    """The process that wrote follows its write up itself; this one looks later (a pending backstop),
    so the two do not race to act on the same change."""
    monkeypatch.setattr(admission_module, "BACKSTOP_SECONDS", 3600.0)
    group, first = await _admission(client)
    async with _another_process(cluster, first) as second:
        await first.run_pass(group)  # this process judges the group, an empty queue so far
        # The policy's watch delivers the policy during that first pass and marks every group for
        # another: a pass asked for after it leaves nothing pending.
        await first.run_pass(group)
        worker = first._groups[group]
        assert not worker._dirty.is_set()
        passes = worker.started
        (job,) = await create_jobs(client, job_body(group, "ann", 2, run=10_000))
        await second.run_pass(group)  # the other process admits it
        await wait_for(lambda: _ledger_written(first, group))
        await wait_for(lambda: first.watch.get(JOBS, job["metadata"]["name"]))

        assert worker.started == passes  # neither the job's creation nor the ledger write ran a pass
        assert worker._backstop is not None  # one is due, as a backstop


async def test_a_release_its_pass_could_not_make_writes_the_cohorts_ledger_read_again(
    client, cluster, monkeypatch
):
    """A group in a cohort keeps its reservations in the cohort's ledger. When the group's pass cannot
    drop a released job (it fails) and the watch's copy of that ledger is stale, the release's own
    write loses and reads the cohort's ledger again, not the group's own, which does not exist."""
    group, cohort, name = unique("cohm"), unique("coh"), unique("policy")
    await put_policy(
        client,
        name,
        f"groups:\n  {group}: {{gpus: 2, user_gpus: 2, cohort: {cohort}}}\n"
        f"  {unique('cohn')}: {{gpus: 2, user_gpus: 2, cohort: {cohort}}}\n",
    )
    watch = await shared.acquire("kubernetes_default", NAMESPACE)
    await watch.wait_synced(timeout=30)
    admission = Admission.for_watch(watch, quota_configmap=name, quota_namespace=NAMESPACE)
    (job,) = await create_jobs(client, job_body(group, "ann", 2, run=10_000))
    uid = job["metadata"]["uid"]

    async def running() -> dict | None:
        await admission.run_pass(group)
        cached = admission.watch.get(JOBS, job["metadata"]["name"])
        held = admission._ledger_of(group)
        if cached and not ledger_io.is_suspended(cached) and held and held.ledger.find(uid):
            return cached
        return None

    admitted = await wait_for(running)
    stale = admission._ledger_of(group)
    assert stale is not None and stale.configmap is not None
    assert stale.configmap["metadata"]["name"] == ledger_io.ledger_name(cohort)
    meta = stale.configmap["metadata"]
    await client.replace(
        CONFIGMAPS, NAMESPACE, {**stale.configmap, "metadata": {**meta, "labels": {"touched": "1"}}}
    )

    async def failing_pass(_worker) -> None:
        raise ledger_io.LedgerConflict("the pass lost every write")

    monkeypatch.setattr(admission, "_pass", failing_pass)
    monkeypatch.setattr(admission, "_cached_ledger", lambda *_: stale)  # the watch lags behind the write
    monkeypatch.setattr(admission_module, "RELEASE_WAIT_SECONDS", 0.5)
    cluster.reset_counters()

    await admission.release(admitted)

    members = tuple(sorted((await admission._policy.current()).policy.members(cohort)))
    assert group in members
    assert (await ledger_io.read_ledger(client, NAMESPACE, cohort, members)).ledger.find(uid) is None
    counters = cluster.counters()
    assert counters.get(("update", "configmaps"), 0) == 2  # the stale write lost, the fresh one won
    assert counters.get(("get", "configmaps"), 0) >= 1
    monkeypatch.undo()
    await admission.close()
    shared.release("kubernetes_default", NAMESPACE)
