"""Cohorts: groups lend each other the whole GPUs they do not use, within lending and borrowing limits;
a group that needs its quota back waits, or reclaims it by preempting the borrowers, newest first."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_jobs_plugin.queueing.quota import cohort as cohorts
from airflow_jobs_plugin.queueing.quota import ledger_model
from airflow_jobs_plugin.queueing.quota.cohort import Limits, Reclaim
from airflow_jobs_plugin.queueing.quota.ledger_model import Ledger, ObservedJob, plan_admission
from airflow_jobs_plugin.queueing.quota.model import (
    GroupQuota,
    QueuedJob,
    QuotaPolicy,
    Reservation,
    Verdict,
)
from airflow_jobs_plugin.queueing.quota.parse import PolicyError, parse_policy
from airflow_jobs_plugin.queueing.quota.policy import decide
from tests.examples_budget import examples

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=timezone.utc)
NOW = T0 + timedelta(hours=1)

RESEARCH = parse_policy(
    """
groups:
  vision: {gpus: 8, cohort: research}
  nlp: {gpus: 8, cohort: research}
  infra: {gpus: 4}
"""
)


def job(
    name: str, group: str, gpus: int, *, user: str = "ann", minute: int = 0, priority: int = 0
) -> QueuedJob:
    return QueuedJob(
        name=name,
        group=group,
        user=user,
        gpus=gpus,
        priority=priority,
        queued_at=T0 + timedelta(minutes=minute),
        uid=f"uid-{name}",
        namespace="ml",
    )


def held(
    name: str, group: str, gpus: int, *, minute: int = 0, priority: int | None = 0, **extra
) -> Reservation:
    return Reservation(
        job=name,
        group=group,
        user=extra.pop("user", "bob"),
        gpus=gpus,
        uid=f"uid-{name}",
        admitted_at=T0 + timedelta(minutes=minute),
        namespace="ml",
        priority=priority,
        **extra,
    )


def by_name(decisions):
    return {d.job.name: d for d in decisions}


# --- the policy ------------------------------------------------------------------------------------------


def test_a_cohorts_groups_share_one_ledger_named_after_the_cohort():
    assert RESEARCH.ledger_of("vision") == RESEARCH.ledger_of("nlp") == "research"
    assert RESEARCH.ledger_of("infra") == "infra"
    assert RESEARCH.members("research") == ("nlp", "vision")


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            "groups: {a: {gpus: 4, lending_limit: 2}}",
            "groups.a.lending_limit: only means something in a cohort",
        ),
        (
            "groups: {a: {gpus: 4, cohort: c, lending_limit: 5}}",
            "groups.a.lending_limit: must be at most the group's gpus (4)",
        ),
        ("groups: {a: {gpus: 4, cohort: Big Pool}}", "groups.a.cohort: must be a DNS-1123 label"),
        ("groups: {a: {gpus: 4, cohort: b}, b: {gpus: 4}}", "groups.a.cohort: 'b' is also a group's name"),
        (
            "groups: {a: {gpus: 4, preemption: {reclaim_within_cohort: any}}}",
            "groups.a.preemption.reclaim_within_cohort: only means something in a cohort",
        ),
        (
            "groups: {a: {gpus: 4, cohort: c, preemption: {reclaim_within_cohort: all}}}",
            "groups.a.preemption.reclaim_within_cohort: must be one of never, lower_priority, any",
        ),
    ],
)
def test_cohort_settings_are_checked_with_the_key_named(text, error):
    with pytest.raises(PolicyError) as err:
        parse_policy(text)
    assert error in str(err.value)


# --- the arithmetic --------------------------------------------------------------------------------------


def test_a_group_borrows_what_its_cohort_does_not_use():
    limits = {"a": Limits(8), "b": Limits(8)}
    assert cohorts.fits("a", 16, limits, {})
    assert not cohorts.fits("a", 17, limits, {})
    assert not cohorts.fits("a", 4, limits, {"a": 10, "b": 4})


def test_a_lending_limit_keeps_part_of_the_quota_for_the_group_itself():
    limits = {"a": Limits(8, lending_limit=2), "b": Limits(8)}
    assert cohorts.fits("b", 10, limits, {})  # 8 of its own and the 2 a lends
    assert not cohorts.fits("b", 11, limits, {})
    assert cohorts.fits("a", 6, limits, {"b": 10})  # a's guaranteed 6 are always its own


def test_a_borrowing_limit_caps_what_a_group_takes_above_its_quota():
    limits = {"a": Limits(8, borrowing_limit=2), "b": Limits(8)}
    assert cohorts.fits("a", 10, limits, {})
    assert not cohorts.fits("a", 11, limits, {})
    assert cohorts.most("a", limits) == 10


def test_borrowed_and_lent_gpus():
    limits = {"a": Limits(8), "b": Limits(8), "c": Limits(8)}
    used = {"a": 12, "b": 0, "c": 4}
    assert cohorts.borrowed("a", limits, used) == 4
    # b leaves 8 idle, c 4: the 4 borrowed GPUs come from them in that proportion.
    assert (cohorts.lent("b", limits, used), cohorts.lent("c", limits, used)) == (3, 1)
    assert cohorts.lent("a", limits, used) == 0


# --- admission -------------------------------------------------------------------------------------------


def test_a_job_waits_in_an_idle_cohort_only_without_a_cohort():
    nlp_idle = [job("big", "vision", 12)]

    assert by_name(decide(RESEARCH, nlp_idle, [], NOW))["big"].verdict is Verdict.ADMIT
    hard = parse_policy("groups: {vision: {gpus: 8}, nlp: {gpus: 8}}")
    assert by_name(decide(hard, nlp_idle, [], NOW))["big"].verdict is Verdict.OVER_QUOTA


def test_a_job_larger_than_the_whole_cohort_can_never_be_admitted():
    decision = by_name(decide(RESEARCH, [job("huge", "vision", 17)], [], NOW))["huge"]
    assert decision.verdict is Verdict.OVER_QUOTA


def test_the_group_waits_when_the_cohort_has_nothing_left_to_lend():
    decisions = by_name(decide(RESEARCH, [job("more", "vision", 4)], [held("nlp-run", "nlp", 14)], NOW))

    more = decisions["more"]
    assert more.verdict is Verdict.GROUP_QUOTA
    assert more.message == (
        "group vision uses 0 of 8 GPUs (0 borrowed from cohort research, which has 2 GPUs left to lend); "
        "this job needs 4"
    )


def test_spare_gpus_go_to_the_job_that_waited_longest_whatever_its_group():
    queue = [job("nlp-early", "nlp", 6, minute=1), job("vision-late", "vision", 6, minute=2)]
    reservations = [held("v", "vision", 8), held("n", "nlp", 4)]

    decisions = by_name(decide(RESEARCH, queue, reservations, NOW))

    assert decisions["nlp-early"].verdict is Verdict.GROUP_QUOTA  # needs 6, the cohort has 4 spare
    assert decisions["vision-late"].verdict is Verdict.GROUP_QUOTA


def test_groups_outside_the_cohort_neither_lend_nor_borrow():
    decisions = by_name(decide(RESEARCH, [job("infra-big", "infra", 6)], [], NOW))
    assert decisions["infra-big"].verdict is Verdict.OVER_QUOTA


def test_without_reclaim_the_owner_waits_for_borrowed_gpus_to_come_back():
    reservations = [held("nlp-borrow", "nlp", 16, minute=5)]

    decision = by_name(decide(RESEARCH, [job("mine", "vision", 4)], reservations, NOW))["mine"]

    assert decision.verdict is Verdict.GROUP_QUOTA
    assert decision.preempts == ()


RECLAIMING = parse_policy(
    """
groups:
  vision: {gpus: 8, cohort: research, preemption: {reclaim_within_cohort: any}}
  nlp: {gpus: 8, cohort: research}
"""
)


def test_reclaim_preempts_the_newest_borrowing_jobs_never_below_the_borrowers_quota():
    reservations = [
        held("nlp-own", "nlp", 8, minute=1),
        held("nlp-borrow-old", "nlp", 4, minute=2),
        held("nlp-borrow-new", "nlp", 4, minute=3),
    ]

    decision = by_name(decide(RECLAIMING, [job("mine", "vision", 4)], reservations, NOW))["mine"]

    assert decision.verdict is Verdict.PREEMPTING
    assert [r.job for r in decision.preempts] == ["nlp-borrow-new"]
    assert "reclaiming its quota from borrowing jobs of cohort research" in decision.message


def test_one_job_of_a_cohort_reclaims_in_a_pass_so_no_one_reclaims_for_gpus_another_takes():
    """Two groups of a cohort reclaim from the same borrower in one pass: the first one's victim would
    count as room for the second, which would reclaim one job too few to start and still preempt it."""
    policy = parse_policy(
        """
groups:
  vision: {gpus: 4, cohort: research, preemption: {reclaim_within_cohort: any}}
  audio: {gpus: 8, cohort: research, preemption: {reclaim_within_cohort: any}}
  nlp: {gpus: 4, cohort: research}
"""
    )
    reservations = [held(f"nlp-{i}", "nlp", 4, minute=i) for i in range(4)]  # nlp borrows 12

    decisions = by_name(
        decide(
            policy,
            [job("small", "vision", 4, minute=0), job("large", "audio", 8, minute=1)],
            reservations,
            NOW,
        )
    )

    assert decisions["small"].verdict is Verdict.PREEMPTING and len(decisions["small"].preempts) == 1
    assert decisions["large"].preempts == ()


def test_reclaim_takes_back_only_the_groups_own_quota():
    reservations = [held("nlp-borrow", "nlp", 16, minute=5)]

    decision = by_name(decide(RECLAIMING, [job("greedy", "vision", 10)], reservations, NOW))["greedy"]

    assert decision.preempts == ()  # 10 > vision's 8: reclaiming would only be borrowing back


def test_reclaim_lower_priority_spares_borrowers_of_equal_or_higher_priority():
    policy = parse_policy(
        """
groups:
  vision: {gpus: 8, cohort: research, preemption: {reclaim_within_cohort: lower_priority}}
  nlp: {gpus: 8, cohort: research}
"""
    )
    reservations = [
        held("nlp-a", "nlp", 8, minute=1, priority=5),
        held("nlp-b", "nlp", 8, minute=2, priority=9),
    ]

    decision = by_name(decide(policy, [job("mine", "vision", 4, priority=5)], reservations, NOW))["mine"]

    assert decision.verdict is Verdict.GROUP_QUOTA and decision.preempts == ()


def test_a_cohort_pass_admits_every_groups_jobs_into_one_ledger():
    policy = RESEARCH
    queue = [job("v1", "vision", 10), job("n1", "nlp", 4, minute=1)]

    plan = plan_admission(policy, Ledger("research"), queue, {}, NOW, members=("nlp", "vision"))

    assert sorted((r.job, r.group) for r in plan.ledger.reservations) == [("n1", "nlp"), ("v1", "vision")]
    data = ledger_model.encode(plan.ledger)
    again = ledger_model.decode("research", data, ("nlp", "vision"))
    assert again.reservations == plan.ledger.reservations
    # Read as a single group's ledger, the other group's entry is reported, not counted.
    assert len(ledger_model.decode("research", data).unreadable) == 2


def test_a_reclaimed_borrower_keeps_its_gpus_until_its_pods_are_gone():
    borrow = held("nlp-borrow", "nlp", 8, minute=5, preempted_by="ml/mine, priority 0")
    own = held("nlp-own", "nlp", 8, minute=1)
    observed = {
        borrow.uid: ObservedJob(suspended=True, requeue_count=1, holding_pods=True),
        own.uid: ObservedJob(),
    }
    plan = plan_admission(
        RECLAIMING,
        Ledger("research", (own, borrow)),
        [job("mine", "vision", 8)],
        observed,
        NOW,
        members=("nlp", "vision"),
    )
    assert by_name(plan.decisions)["mine"].verdict is Verdict.PREEMPTING
    assert plan.ledger.find(borrow.uid) is not None


# --- properties ------------------------------------------------------------------------------------------

GROUPS = ("a", "b", "c")


@st.composite
def cohort_policies(draw) -> QuotaPolicy:
    groups = {}
    for name in GROUPS:
        gpus = draw(st.integers(0, 10))
        in_cohort = draw(st.booleans())
        groups[name] = GroupQuota(
            name=name,
            gpus=gpus,
            cohort="pool" if in_cohort else None,
            lending_limit=draw(st.none() | st.integers(0, gpus)) if in_cohort else None,
            borrowing_limit=draw(st.none() | st.integers(0, 10)) if in_cohort else None,
            reclaim=draw(st.sampled_from(Reclaim)) if in_cohort else Reclaim.NEVER,
        )
    return QuotaPolicy(groups=groups)


@st.composite
def cohort_queues(draw) -> list[QueuedJob]:
    return [
        QueuedJob(
            name=f"q{i}",
            group=draw(st.sampled_from(GROUPS)),
            user=draw(st.sampled_from(("u1", "u2"))),
            gpus=draw(st.integers(0, 8)),
            priority=draw(st.integers(0, 2)),
            queued_at=T0 + timedelta(minutes=draw(st.integers(0, 59))),
            uid=f"q{i}",
        )
        for i in range(draw(st.integers(0, 10)))
    ]


@settings(max_examples=examples(400), deadline=None)
@given(cohort_policies(), cohort_queues())
def test_no_group_above_its_quota_plus_what_it_may_borrow_and_no_cohort_above_its_sum(policy, queue):
    decisions = decide(policy, queue, [], NOW)
    used: dict[str, int] = {}
    for d in decisions:
        if d.verdict is Verdict.ADMIT:
            used[d.job.group] = used.get(d.job.group, 0) + d.job.gpus
    for name, quota in policy.groups.items():
        mine = used.get(name, 0)
        if quota.cohort is None:
            assert mine <= quota.gpus
            continue
        limits = policy.cohort_limits(quota.cohort)
        assert mine <= cohorts.most(name, limits)
        if quota.borrowing_limit is not None:
            assert mine <= quota.gpus + quota.borrowing_limit
        assert mine <= limits[name].guaranteed + cohorts.shared_capacity(limits)
    members = [n for n, q in policy.groups.items() if q.cohort == "pool"]
    assert sum(used.get(n, 0) for n in members) <= sum(policy.groups[n].gpus for n in members)
    limits = policy.cohort_limits("pool")
    if limits:
        assert cohorts.shared_used(limits, used) <= cohorts.shared_capacity(limits)


@settings(max_examples=examples(300), deadline=None)
@given(cohort_policies(), cohort_queues(), st.lists(st.integers(0, 6), max_size=6), st.data())
def test_reclaim_only_takes_borrowed_gpus_of_other_groups(policy, queue, sizes, data):
    reservations = [
        held(
            f"r{i}", data.draw(st.sampled_from(GROUPS)), gpus, minute=i, priority=data.draw(st.integers(0, 2))
        )
        for i, gpus in enumerate(sizes)
    ]
    decisions = decide(policy, queue, reservations, NOW)
    for d in decisions:
        for victim in d.preempts:
            quota = policy.groups[d.job.group]
            if victim.group == d.job.group:
                continue  # preemption within the group, covered elsewhere
            assert quota.reclaim is not Reclaim.NEVER
            assert victim.group in policy.cohort_limits(quota.cohort or "")
            # What the victim's group holds after this pass (its admissions before the preemptor's turn
            # included) never falls below its quota.
            used = sum(r.gpus for r in reservations if r.group == victim.group) + sum(
                o.job.gpus for o in decisions if o.verdict is Verdict.ADMIT and o.job.group == victim.group
            )
            assert (
                used - sum(v.gpus for v in d.preempts if v.group == victim.group)
                >= policy.groups[victim.group].gpus
            )
            if quota.reclaim is Reclaim.LOWER_PRIORITY:
                assert victim.priority is not None and victim.priority < d.job.priority


def test_reclaim_takes_the_lowest_priority_borrower_before_a_newer_one():
    reservations = [
        held("nlp-own", "nlp", 8, minute=1, priority=0),
        held("nlp-low-old", "nlp", 4, minute=2, priority=0),
        held("nlp-high-new", "nlp", 4, minute=3, priority=5),
    ]

    decision = by_name(decide(RECLAIMING, [job("mine", "vision", 4)], reservations, NOW))["mine"]

    assert [r.job for r in decision.preempts] == ["nlp-low-old"]


def test_a_job_within_its_groups_quota_goes_before_an_older_one_that_would_borrow():
    # nlp's borrowed job was sent back for vision; it was queued first, but taking the GPUs again would
    # be borrowing, and vision's job asks only for its own quota (Kueue: under nominal before borrowing).
    queue = [job("nlp-again", "nlp", 8, minute=0), job("vision-back", "vision", 8, minute=30)]

    decisions = by_name(decide(RECLAIMING, queue, [held("nlp-own", "nlp", 8)], NOW))

    assert decisions["vision-back"].verdict is Verdict.ADMIT
    assert decisions["nlp-again"].verdict is Verdict.GROUP_QUOTA
