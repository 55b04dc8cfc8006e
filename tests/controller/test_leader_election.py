"""The elector (controller/leader.py) against an API server: the simulator, or the real kube-apiserver
v1.36.3 when AIRFLOW_JOBS_TEST_KUBECONFIG names one (every test here is marked ``real_cluster``).

What is checked is what the rules promise (controller/lease.py): one leader at a time, measured as the
terms ``lead`` ran; a standby takes over no sooner than ``lease_duration`` after the dead leader's last
renewal and no later than one (jittered) retry period past that, plus the round trips; a release hands
over at once; ``leaseTransitions`` counts the changes of holder and nothing else.
"""

from __future__ import annotations

import asyncio
import re
import time
from datetime import timedelta

import pytest

from airflow_jobs_plugin.controller.lease import JITTER_FACTOR

from .candidates import LATENCY, TIMINGS, Candidate, Term, election, overlapping, until

D, RD, R = TIMINGS["lease_duration"], TIMINGS["renew_deadline"], TIMINGS["retry_period"]
# The longest a candidate waits between two attempts (client-go's jitter).
SLOWEST_RETRY = R * (1 + JITTER_FACTOR)
MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")

pytestmark = [pytest.mark.timeout(120), pytest.mark.real_cluster]


async def test_one_candidate_creates_the_lease_leads_and_releases_it_on_cancel(cluster):
    async with election(cluster.kubeconfig_path) as vote:
        first = (await vote.candidate("controller-a")).start()
        await until(lambda: first.leading, 10 * D, "the only candidate leads")
        assert first.elector.is_leader and first.elector.holder == "controller-a" and len(first.terms) == 1
        await asyncio.sleep(3 * R)  # a few renewals
        spec = (await vote.lease())["spec"]
        assert (spec["holderIdentity"], spec["leaseDurationSeconds"], spec["leaseTransitions"]) == (
            "controller-a",
            3,
            0,
        )
        assert MICRO_TIME.match(spec["acquireTime"]) and MICRO_TIME.match(spec["renewTime"])
        assert spec["renewTime"] > spec["acquireTime"], "renewed since it was acquired"

        await first.stop()
        assert first.task.cancelled()
        assert first.terms[0].stopped is not None and not first.elector.is_leader
        released = (await vote.lease())["spec"]
        assert (
            released["holderIdentity"],
            released["leaseDurationSeconds"],
            released["leaseTransitions"],
        ) == (
            "",
            1,
            0,
        )


async def test_a_standby_takes_over_a_lease_whose_holder_died_once_it_expires(cluster):
    async with election(cluster.kubeconfig_path) as vote:
        first = (await vote.candidate("controller-a")).start()
        await until(lambda: first.leading, 10 * D, "the first candidate leads")
        second = (await vote.candidate("controller-b")).start()
        await until(lambda: second.elector.holder == "controller-a", 10 * D, "the standby sees the leader")
        await asyncio.sleep(D)  # longer than a term: the leader renews, the standby keeps waiting
        assert not second.terms and first.elector.is_leader

        died = await first.kill()
        last_renewal = first.elector.renewed_at  # its last write that succeeded
        await until(lambda: second.leading, D + SLOWEST_RETRY + 5 * LATENCY, "the standby takes over")
        took_over = second.terms[0].started

        # Not before the dead leader's term ended (its last renewal's time plus lease_duration, both on
        # this machine's clock), and within a term and a retry period of its death, plus the round trips.
        assert second.terms[0].started_wall >= last_renewal + timedelta(seconds=D)
        assert took_over - died <= D + SLOWEST_RETRY + 2 * LATENCY, took_over - died
        assert overlapping(first, second) == []
        spec = (await vote.lease())["spec"]
        assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("controller-b", 1)


async def test_a_release_on_cancel_hands_the_lease_over_at_once(cluster):
    async with election(cluster.kubeconfig_path) as vote:
        first = (await vote.candidate("controller-a")).start()
        await until(lambda: first.leading, 10 * D, "the first candidate leads")
        second = (await vote.candidate("controller-b")).start()
        await until(lambda: second.elector.holder == "controller-a", 10 * D, "the standby sees the leader")

        stopped = time.monotonic()
        await first.stop()
        took_over = await until(
            lambda: second.leading,
            SLOWEST_RETRY + 2 * LATENCY,
            "the standby takes the released Lease",
        )
        # At its next attempt, long before the released term would have expired.
        assert took_over - stopped < D
        assert overlapping(first, second) == []
        spec = (await vote.lease())["spec"]
        assert (spec["holderIdentity"], spec["leaseDurationSeconds"], spec["leaseTransitions"]) == (
            "controller-b",
            3,
            1,
        )


async def test_lease_transitions_count_the_changes_of_holder_and_nothing_else(cluster):
    async with election(cluster.kubeconfig_path) as vote:
        a = (await vote.candidate("controller-a")).start()
        await until(lambda: a.leading, 10 * D, "a leads")
        b = (await vote.candidate("controller-b")).start()
        await asyncio.sleep(4 * R)  # renewals by a, reads by b: no change of holder
        assert (await vote.lease())["spec"]["leaseTransitions"] == 0

        await a.stop()  # a -> released -> b
        await until(lambda: b.leading, D, "b leads")
        c = (await vote.candidate("controller-c")).start()
        await until(lambda: c.elector.holder == "controller-b", 10 * D, "c sees b")
        await b.stop()  # b -> released -> c
        await until(lambda: c.leading, D, "c leads")
        await asyncio.sleep(4 * R)
        spec = (await vote.lease())["spec"]
        assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("controller-c", 2)
        assert overlapping(a, b, c) == []


async def test_candidates_that_start_together_elect_exactly_one(cluster):
    """Both find no Lease and create it: one create answers AlreadyExists, and its sender reads the
    winner's Lease and waits."""
    async with election(cluster.kubeconfig_path) as vote:
        racers = [await vote.candidate(f"controller-{i}") for i in range(3)]
        for racer in racers:
            racer.start()
        await until(lambda: any(r.leading for r in racers), 10 * D, "someone leads")
        await asyncio.sleep(D + SLOWEST_RETRY)
        leaders = [r.identity for r in racers if r.elector.is_leader]
        assert len(leaders) == 1
        assert {r.elector.holder for r in racers} == set(leaders)
        assert sum(len(r.terms) for r in racers) == 1
        assert (await vote.lease())["spec"]["leaseTransitions"] == 0


async def test_a_lead_that_returns_releases_the_lease_and_ends_the_run(cluster):
    async with election(cluster.kubeconfig_path) as vote:
        done = await vote.candidate("controller-a")

        async def short() -> None:
            await asyncio.sleep(R)

        await asyncio.wait_for(done.elector.run(short), 10 * D)
        assert not done.elector.is_leader
        assert (await vote.lease())["spec"]["holderIdentity"] == ""


async def test_a_lead_that_raises_releases_the_lease_and_the_run_raises_it(cluster):
    async with election(cluster.kubeconfig_path) as vote:
        broken = await vote.candidate("controller-a")

        async def crashes() -> None:
            raise RuntimeError("the controller's loop failed")

        with pytest.raises(RuntimeError, match="the controller's loop failed"):
            await asyncio.wait_for(broken.elector.run(crashes), 10 * D)
        assert (await vote.lease())["spec"]["holderIdentity"] == ""


@pytest.mark.parametrize(
    "timings, words",
    [
        ({"lease_duration": 2.5}, "lease_duration must be a whole number of seconds"),
        ({"lease_duration": 2.0}, "lease_duration (2 s) must be greater than renew_deadline + retry_period"),
    ],
)
async def test_an_elector_refuses_timings_that_cannot_elect_one_leader(cluster, timings, words):
    async with election(cluster.kubeconfig_path) as vote:
        with pytest.raises(ValueError) as refused:
            await vote.candidate("controller-a", **timings)
        assert words in str(refused.value)


def test_the_overlap_check_sees_two_leaders_at_once():
    a = Candidate("a", None, None, [Term(0.0, None, 5.0), Term(9.0, None, None)])  # type: ignore[arg-type]
    b = Candidate("b", None, None, [Term(5.0, None, 8.0)])  # type: ignore[arg-type]
    assert overlapping(a, b) == []
    late = Candidate("c", None, None, [Term(4.0, None, 6.0)])  # type: ignore[arg-type]
    assert overlapping(a, late) == ["a led 0.000-5.000 and c 4.000-6.000"]
    after = Candidate("d", None, None, [Term(10.0, None, 11.0)])  # type: ignore[arg-type]
    assert overlapping(a, b, after) == ["a led 9.000-inf and d 10.000-11.000"]
