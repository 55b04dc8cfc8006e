"""A process may die between any two steps of an admission pass: the next pass repairs what it left.

The scene, group quota 4 (user quota 4): F finished but still holds 2 GPUs (its release was lost), O
asks for 8 GPUs (OverQuota), Q1 and Q2 (2 GPUs each) fit once F's GPUs are back, Q3 waits for them. A pass
is killed at each step boundary; whatever it wrote, the invariant holds at once (every unsuspended
unfinished job holds a reservation, the ledger never exceeds the quota) and one more pass reaches the
same end state as an uninterrupted one: no leak, no double admission.
"""

from __future__ import annotations

import multiprocessing
import os
from datetime import timedelta

import pytest

from airflow_jobs_plugin.cluster.kube import JOBS, KubeClient
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.queueing import quota
from airflow_jobs_plugin.queueing.quota import ledger as ledger_io

from .conftest import NAMESPACE, annotation, create_jobs, job_body, ledger_of, list_jobs, unique, wait_for

# Slow (scenario: processes killed at each crash point of a pass): not in the fast lane.
pytestmark = pytest.mark.slow

QUOTA = 4


class Crash(Exception):
    """The process dies here."""


def policy(group: str) -> quota.QuotaPolicy:
    return quota.parse_policy(f"groups:\n  {group}: {{gpus: {QUOTA}, user_gpus: 4}}\n")


async def run_pass(client: KubeClient, group: str, hook=None, later: bool = False) -> ledger_io.PassOutcome:
    """One pass; ``later``: once a dead pass's reservations are past their grace (orphans to repair)."""
    shift = ledger_io.UNSUSPEND_GRACE if later else timedelta(0)
    return await ledger_io.admission_pass(
        client,
        ledger_namespace=NAMESPACE,
        group=group,
        policy=policy(group),
        jobs=lambda: list_jobs(client),
        hook=hook,
        now=lambda: ledger_io.utcnow() + shift,
    )


async def scene(client: KubeClient) -> tuple[str, dict[str, dict]]:
    """F admitted and finished with its reservation still held; then O, Q1, Q2, Q3 queued."""
    group = unique("crash")
    (f,) = await create_jobs(client, job_body(group, "fay", 2, run=1, task="f"))
    await run_pass(client, group)

    async def f_finished():
        job = await client.get(JOBS, NAMESPACE, f["metadata"]["name"])
        return ledger_io.is_finished(job)

    await wait_for(f_finished)
    jobs = await create_jobs(
        client,
        job_body(group, "oscar", 8, task="o"),
        job_body(group, "quinn", 2, run=10_000, task="q1"),
        job_body(group, "quincy", 2, run=10_000, task="q2"),
        job_body(group, "quentin", 2, run=10_000, task="q3"),
    )
    return group, dict(zip(("F", "O", "Q1", "Q2", "Q3"), [f, *jobs], strict=True))


async def current(client: KubeClient, jobs: dict[str, dict]) -> dict[str, dict]:
    return {k: await client.get(JOBS, NAMESPACE, j["metadata"]["name"]) for k, j in jobs.items()}


def assert_safe(ledger: quota.Ledger, jobs: dict[str, dict]) -> None:
    """The invariant at every instant: nothing runs unaccounted, the ledger holds at most the quota."""
    reserved = {r.uid for r in ledger.reservations}
    for key, job in jobs.items():
        if not ledger_io.is_suspended(job) and not ledger_io.is_finished(job):
            assert job["metadata"]["uid"] in reserved, f"{key} runs without a reservation"
    assert ledger.used_gpus <= QUOTA
    assert len(reserved) == len(ledger.reservations)


def assert_repaired(ledger: quota.Ledger, jobs: dict[str, dict]) -> None:
    held = {r.job: r.gpus for r in ledger.reservations}
    name = {k: j["metadata"]["name"] for k, j in jobs.items()}
    assert held == {name["Q1"]: 2, name["Q2"]: 2}
    assert annotation(jobs["O"], labels.VERDICT) == "OverQuota"
    assert not ledger_io.is_suspended(jobs["Q1"]) and not ledger_io.is_suspended(jobs["Q2"])
    assert annotation(jobs["Q1"], labels.ADMITTED_AT) and annotation(jobs["Q2"], labels.ADMITTED_AT)
    assert ledger_io.is_suspended(jobs["Q3"])


STEPS = ["read", "planned", "ledger-written", "failed:O", "unsuspended:Q1", "unsuspended:Q2"]


@pytest.mark.parametrize("step", STEPS)
async def test_a_pass_killed_at_a_step_leaves_a_safe_state_the_next_pass_repairs(client, step):
    group, jobs = await scene(client)
    key, _, job = step.partition(":")
    target = f"{key}:{jobs[job]['metadata']['name']}" if job else step

    def die(at: str) -> None:
        if at == target:
            raise Crash(at)

    with pytest.raises(Crash):
        await run_pass(client, group, hook=die)
    assert_safe(await ledger_of(client, group), await current(client, jobs))

    await run_pass(client, group, later=True)
    ledger, now = await ledger_of(client, group), await current(client, jobs)
    assert_safe(ledger, now)
    assert_repaired(ledger, now)


async def test_a_pass_racing_one_between_its_write_and_its_unsuspend_leaves_the_unsuspend_to_it(client):
    group, jobs = await scene(client)
    raced = []

    async def race(at: str) -> None:
        if at == "ledger-written" and not raced:
            # Another process's pass, in the gap: the reservations are the first pass's to unsuspend.
            raced.append(await run_pass(client, group))

    outcome = await run_pass(client, group, hook=race)
    (other,) = raced
    assert other.admitted == () and other.unsuspend_due is not None
    assert len(outcome.admitted) == 2
    assert_repaired(await ledger_of(client, group), await current(client, jobs))


async def test_an_unsuspend_that_lost_to_another_process_reads_the_job_instead_of_passing_again(client):
    group, jobs = await scene(client)
    lagging = await list_jobs(client)  # what a process whose watch lags still sees
    await run_pass(client, group)  # another process admits Q1 and Q2

    outcome = await ledger_io.admission_pass(
        client,
        ledger_namespace=NAMESPACE,
        group=group,
        policy=policy(group),
        jobs=lambda: lagging,
        now=lambda: ledger_io.utcnow() + ledger_io.UNSUSPEND_GRACE,
    )

    assert outcome.admitted == () and not outcome.stale  # no second admission, no pass to run again
    seen = {job["metadata"]["name"]: job for _, job in outcome.patched}  # as read back, for the cache
    assert not ledger_io.is_suspended(seen[jobs["Q1"]["metadata"]["name"]])
    assert not ledger_io.is_suspended(seen[jobs["Q2"]["metadata"]["name"]])
    assert annotation(seen[jobs["O"]["metadata"]["name"]], labels.VERDICT) == "OverQuota"


async def test_a_pass_after_a_complete_pass_changes_nothing(client):
    group, jobs = await scene(client)
    await run_pass(client, group)
    before = await ledger_io.read_ledger(client, NAMESPACE, group)

    again = await run_pass(client, group)

    assert again.admitted == () and again.failed == () and again.conflicts == 0
    assert again.stored.version == before.version
    assert_repaired(again.ledger, await current(client, jobs))


def _killed_pass(kubeconfig: str, group: str, target: str) -> None:
    import asyncio

    async def main() -> None:
        client = await KubeClient.from_kubeconfig(kubeconfig)

        def die(at: str) -> None:
            if at == target:
                os._exit(17)  # the process dies on the spot: no cleanup, no finally

        await run_pass(client, group, hook=die)

    asyncio.run(main())


@pytest.mark.parametrize("step", ["ledger-written", "unsuspended:Q1"])
async def test_a_process_killed_in_the_middle_of_a_pass_is_repaired_by_another(client, cluster, step):
    group, jobs = await scene(client)
    key, _, job = step.partition(":")
    target = f"{key}:{jobs[job]['metadata']['name']}" if job else step
    process = multiprocessing.get_context("spawn").Process(
        target=_killed_pass, args=(cluster.kubeconfig_path, group, target)
    )
    process.start()
    await wait_for(lambda: not process.is_alive(), timeout=60)
    assert process.exitcode == 17
    assert_safe(await ledger_of(client, group), await current(client, jobs))

    await run_pass(client, group, later=True)
    ledger, now = await ledger_of(client, group), await current(client, jobs)
    assert_safe(ledger, now)
    assert_repaired(ledger, now)


# --- a pass that preempts ------------------------------------------------------------------------------


def preempting(group: str) -> quota.QuotaPolicy:
    return quota.parse_policy(
        f"groups:\n  {group}: {{gpus: {QUOTA}, preemption: {{within_group: lower_priority}}}}\n"
    )


def _killed_preempting_pass(kubeconfig: str, group: str, target: str) -> None:
    import asyncio

    async def main() -> None:
        client = await KubeClient.from_kubeconfig(kubeconfig)

        def die(at: str) -> None:
            if at == target:
                os._exit(17)

        await ledger_io.admission_pass(
            client,
            ledger_namespace=NAMESPACE,
            group=group,
            policy=preempting(group),
            jobs=lambda: list_jobs(client),
            hook=die,
        )

    asyncio.run(main())


@pytest.mark.parametrize("step", ["ledger-written", "preempted:L"])
async def test_a_process_killed_while_preempting_is_repaired_and_the_victim_is_requeued(
    client, cluster, step
):
    group = unique("crashpre")
    (low,) = await create_jobs(client, job_body(group, "lou", 4, run=10_000, task="low"))
    await ledger_io.admission_pass(
        client,
        ledger_namespace=NAMESPACE,
        group=group,
        policy=preempting(group),
        jobs=lambda: list_jobs(client),
    )
    (high,) = await create_jobs(client, job_body(group, "hal", 4, run=10_000, task="high", priority=100))
    names = {"L": low["metadata"]["name"], "H": high["metadata"]["name"]}
    key, _, job = step.partition(":")
    target = f"{key}:{names[job]}" if job else step
    process = multiprocessing.get_context("spawn").Process(
        target=_killed_preempting_pass, args=(cluster.kubeconfig_path, group, target)
    )
    process.start()
    await wait_for(lambda: not process.is_alive(), timeout=60)
    assert process.exitcode == 17
    ledger = await ledger_of(client, group)
    # Marked, still charged: the preemptor is not admitted on GPUs the victim still holds.
    assert [(r.job, r.preempted_by is not None) for r in ledger.reservations] == [(names["L"], True)]

    async def admitted_after_the_victim_left() -> bool:
        await ledger_io.admission_pass(
            client,
            ledger_namespace=NAMESPACE,
            group=group,
            policy=preempting(group),
            jobs=lambda: list_jobs(client),
        )
        ledger = await ledger_of(client, group)
        assert ledger.used_gpus <= QUOTA
        return [r.job for r in ledger.reservations] == [names["H"]]

    await wait_for(admitted_after_the_victim_left, timeout=60, interval=0.2)
    victim = await client.get(JOBS, NAMESPACE, names["L"])
    assert ledger_io.is_suspended(victim) and annotation(victim, labels.VERDICT) is None
    assert annotation(victim, labels.PREEMPTIONS) == "1"
    assert annotation(victim, labels.PREEMPTED_BY) == f"{NAMESPACE}/{names['H']}"
