"""Preemption within a group: the head of a group's queue may send admitted jobs of lower priority
back to the queue (opt-in per group), the fewest, newest first; never a job of equal or higher priority."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_jobs_plugin.queueing.quota import ledger_model
from airflow_jobs_plugin.queueing.quota.ledger_model import Ledger, ObservedJob, plan_admission
from airflow_jobs_plugin.queueing.quota.model import QueuedJob, Reservation, Verdict
from airflow_jobs_plugin.queueing.quota.parse import PolicyError, parse_policy
from airflow_jobs_plugin.queueing.quota.policy import decide
from airflow_jobs_plugin.queueing.quota.preemption import WithinGroup, plan_preemption

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=timezone.utc)
NOW = T0 + timedelta(minutes=30)

PREEMPTING = parse_policy(
    "groups: {vision: {gpus: 8, preemption: {within_group: lower_priority}}}\n"
    "priorities: {low: 0, high: 100}\n"
)
STRICT = parse_policy("groups: {vision: {gpus: 8}}\npriorities: {low: 0, high: 100}\n")


def job(name: str, gpus: int, *, user: str = "ann", priority: int = 0, minute: int = 20) -> QueuedJob:
    return QueuedJob(
        name=name,
        group="vision",
        user=user,
        gpus=gpus,
        priority=priority,
        queued_at=T0 + timedelta(minutes=minute),
        uid=f"uid-{name}",
        namespace="ml",
    )


def held(name: str, gpus: int, *, priority: int | None = 0, minute: int = 0, **extra) -> Reservation:
    return Reservation(
        job=name,
        group="vision",
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


# --- the policy ------------------------------------------------------------------------------------


def test_preemption_is_off_unless_the_group_asks_for_it():
    assert STRICT.groups["vision"].within_group is WithinGroup.NEVER
    assert PREEMPTING.groups["vision"].within_group is WithinGroup.LOWER_PRIORITY


def test_an_unknown_preemption_setting_names_the_key_and_the_choices():
    with pytest.raises(PolicyError) as err:
        parse_policy("groups: {vision: {gpus: 8, preemption: {within_group: lower}}}")
    assert "groups.vision.preemption.within_group: must be one of never, lower_priority" in str(err.value)
    with pytest.raises(PolicyError) as err:
        parse_policy("groups: {vision: {gpus: 8, preemption: {whithin_group: never}}}")
    assert "groups.vision.preemption.whithin_group: unknown key; did you mean 'within_group'?" in str(
        err.value
    )


# --- who is preempted --------------------------------------------------------------------------------


def test_strict_fifo_group_makes_a_high_priority_job_wait_behind_a_low_priority_one():
    decisions = by_name(decide(STRICT, [job("urgent", 8, priority=100)], [held("sweep", 8)], NOW))

    assert decisions["urgent"].verdict is Verdict.GROUP_QUOTA
    assert decisions["urgent"].preempts == ()


def test_a_higher_priority_job_preempts_a_lower_priority_one_holding_the_group():
    decisions = by_name(decide(PREEMPTING, [job("urgent", 8, priority=100)], [held("sweep", 8)], NOW))

    urgent = decisions["urgent"]
    assert urgent.verdict is Verdict.PREEMPTING
    assert [r.job for r in urgent.preempts] == ["sweep"]
    assert urgent.position == 1  # still waiting: it starts once sweep's pods are gone
    assert "preempting ml/sweep (lower priority, 8 GPUs) for ml/urgent (priority 100)" in urgent.message


def test_never_a_job_of_equal_or_higher_priority():
    reservations = [held("peer", 4, priority=100), held("boss", 4, priority=200)]

    decisions = by_name(decide(PREEMPTING, [job("urgent", 8, priority=100)], reservations, NOW))

    assert decisions["urgent"].verdict is Verdict.GROUP_QUOTA
    assert decisions["urgent"].preempts == ()
    assert "not enough admitted jobs of lower priority to preempt" in decisions["urgent"].message


def test_nobody_is_preempted_when_all_of_them_would_still_not_make_room():
    reservations = [held("small", 2, priority=0), held("peer", 6, priority=100)]

    decisions = by_name(decide(PREEMPTING, [job("urgent", 4, priority=100)], reservations, NOW))

    assert decisions["urgent"].verdict is Verdict.GROUP_QUOTA
    assert decisions["urgent"].preempts == ()


def test_the_lowest_priority_goes_first_then_the_newest():
    reservations = [
        held("old-low", 2, priority=0, minute=1),
        held("new-low", 2, priority=0, minute=5),
        held("mid", 2, priority=50, minute=9),
        held("peer", 2, priority=100, minute=9),
    ]

    decisions = by_name(decide(PREEMPTING, [job("urgent", 2, priority=100)], reservations, NOW))
    assert [r.job for r in decisions["urgent"].preempts] == ["new-low"]

    decisions = by_name(decide(PREEMPTING, [job("urgent", 4, priority=100)], reservations, NOW))
    assert [r.job for r in decisions["urgent"].preempts] == ["new-low", "old-low"]

    decisions = by_name(decide(PREEMPTING, [job("urgent", 6, priority=100)], reservations, NOW))
    assert sorted(r.job for r in decisions["urgent"].preempts) == ["mid", "new-low", "old-low"]


def test_the_fewest_jobs_are_preempted():
    # Newest first would take the 1-GPU job and then the 4-GPU one; the 1-GPU job is not needed.
    reservations = [held("big", 4, priority=0, minute=1), held("tiny", 1, priority=0, minute=5)]
    free_quota = parse_policy("groups: {vision: {gpus: 5, preemption: {within_group: lower_priority}}}")

    decisions = by_name(decide(free_quota, [job("urgent", 4, priority=100)], reservations, NOW))

    assert [r.job for r in decisions["urgent"].preempts] == ["big"]


def test_free_gpus_count_before_any_victim():
    decisions = by_name(decide(PREEMPTING, [job("urgent", 6, priority=100)], [held("sweep", 4)], NOW))

    assert [r.job for r in decisions["urgent"].preempts] == ["sweep"]  # 4 free + 4 freed >= 6
    assert decisions["urgent"].verdict is Verdict.PREEMPTING


def test_gpus_already_on_their_way_back_are_counted_before_preempting_more():
    reservations = [held("leaving", 4, priority=0), held("sweep", 4, priority=0)]

    decisions = by_name(
        decide(PREEMPTING, [job("urgent", 4, priority=100)], reservations, NOW, releasing={"uid-leaving"})
    )

    urgent = decisions["urgent"]
    assert urgent.verdict is Verdict.PREEMPTING
    assert urgent.preempts == ()
    assert "waiting for 4 GPUs being freed" in urgent.message


def test_victims_chosen_by_an_earlier_pass_are_not_chosen_again():
    reservations = [held("sweep", 4, preempted_by="ml/urgent, priority 100"), held("other", 4)]

    decisions = by_name(decide(PREEMPTING, [job("urgent", 4, priority=100)], reservations, NOW))

    assert decisions["urgent"].verdict is Verdict.PREEMPTING
    assert decisions["urgent"].preempts == ()


def test_a_reservation_of_unknown_priority_is_never_preempted():
    decisions = by_name(
        decide(PREEMPTING, [job("urgent", 8, priority=100)], [held("legacy", 8, priority=None)], NOW)
    )

    assert decisions["urgent"].verdict is Verdict.GROUP_QUOTA


def test_only_jobs_of_the_same_device_are_preempted():
    policy = parse_policy(
        "groups: {vision: {gpus: 8, devices: {nvidia.com/mig-1g.10gb: 7}, "
        "preemption: {within_group: lower_priority}}}"
    )
    reservations = [held("mig", 7, resource="nvidia.com/mig-1g.10gb"), held("whole", 8)]

    decisions = by_name(decide(policy, [job("urgent", 8, priority=100)], reservations, NOW))

    assert [r.job for r in decisions["urgent"].preempts] == ["whole"]


def test_jobs_handed_to_kueue_are_never_preempted_by_the_pool():
    decisions = by_name(
        decide(PREEMPTING, [job("urgent", 8, priority=100)], [held("handed", 8, kueue=True)], NOW)
    )

    assert decisions["urgent"].preempts == ()


def test_jobs_behind_a_preempting_head_wait_for_it():
    queue = [job("urgent", 8, priority=100, minute=20), job("small", 1, priority=100, minute=21)]

    decisions = by_name(decide(PREEMPTING, queue, [held("sweep", 8)], NOW))

    assert decisions["small"].verdict is Verdict.BEHIND_HEAD
    assert decisions["small"].blocked_by == "urgent"


def test_a_job_over_its_user_quota_preempts_nobody_of_its_own_priority():
    policy = parse_policy(
        "groups: {vision: {gpus: 8, user_gpus: 4, preemption: {within_group: lower_priority}}}"
    )
    reservations = [held("mine", 4, user="ann", priority=100), held("theirs", 4, user="bob")]

    decisions = by_name(decide(policy, [job("urgent", 2, user="ann", priority=100)], reservations, NOW))

    assert decisions["urgent"].verdict is Verdict.USER_QUOTA
    assert decisions["urgent"].preempts == ()


def test_one_job_of_a_group_preempts_in_a_pass_so_no_one_preempts_for_gpus_another_takes():
    """Two jobs of a user over their limit: the first preempts; the second waits for the next pass
    instead of counting the first one's victims as coming back to itself and preempting more."""
    policy = parse_policy("groups: {vision: {gpus: 7, preemption: {within_group: lower_priority}}}")
    reservations = [held("big", 6, user="ann"), held("small", 1, user="ann")]
    queue = [job("first", 1, user="ann", priority=2, minute=20), job("second", 7, user="ann", priority=1)]

    decisions = by_name(decide(policy, queue, reservations, NOW))

    assert decisions["first"].verdict is Verdict.PREEMPTING and decisions["first"].preempts
    assert decisions["second"].preempts == ()
    assert decisions["second"].verdict is Verdict.USER_QUOTA


def test_the_plan_alone_returns_none_when_nothing_would_make_room():
    assert plan_preemption(job("urgent", 9, priority=100), 0, 0, [held("a", 8)]) is None


# --- the ledger: the choice is made once, and kept until the victim's pods are gone ------------------


def running(reservation: Reservation, **extra) -> ObservedJob:
    return ObservedJob(exists=True, requeue_count=reservation.requeue_count, **extra)


def test_a_pass_marks_its_victims_in_the_ledger_and_suspends_them():
    sweep = held("sweep", 8)
    plan = plan_admission(
        PREEMPTING,
        Ledger("vision", (sweep,)),
        [job("urgent", 8, priority=100)],
        {sweep.uid: running(sweep)},
        NOW,
    )

    assert plan.ledger_changed
    marked = plan.ledger.find(sweep.uid)
    assert marked is not None and marked.preempted_by == "ml/urgent, priority 100"
    assert [r.job for r in plan.preempt] == ["sweep"]
    assert plan.unsuspend == ()


def test_a_marked_victim_still_running_is_suspended_again_by_the_next_pass():
    sweep = held("sweep", 8, preempted_by="ml/urgent, priority 100")
    plan = plan_admission(
        PREEMPTING,
        Ledger("vision", (sweep,)),
        [job("urgent", 8, priority=100)],
        {sweep.uid: running(sweep)},
        NOW,
    )

    assert not plan.ledger_changed
    assert [r.job for r in plan.preempt] == ["sweep"]


def test_a_preempted_job_keeps_its_gpus_until_its_pods_are_gone():
    sweep = held("sweep", 8, preempted_by="ml/urgent, priority 100")
    suspended = ObservedJob(exists=True, suspended=True, requeue_count=1, holding_pods=True)
    queue = [job("urgent", 8, priority=100), job("sweep", 8, user="bob", minute=0)]
    queue[1] = QueuedJob(**{**queue[1].__dict__, "requeue_count": 1})

    plan = plan_admission(PREEMPTING, Ledger("vision", (sweep,)), queue, {sweep.uid: suspended}, NOW)

    assert plan.ledger.find(sweep.uid) is not None
    assert plan.preempt == ()
    assert by_name(plan.decisions)["urgent"].verdict is Verdict.PREEMPTING
    assert plan.unsuspend == ()

    gone = ObservedJob(exists=True, suspended=True, requeue_count=1, holding_pods=False)
    plan = plan_admission(PREEMPTING, Ledger("vision", (sweep,)), queue, {sweep.uid: gone}, NOW)

    assert plan.ledger.find(sweep.uid) is None
    decisions = by_name(plan.decisions)
    assert decisions["urgent"].verdict is Verdict.ADMIT
    # The victim is back in the queue at its original position, behind the job that preempted it.
    assert decisions["sweep"].verdict is Verdict.GROUP_QUOTA
    assert [d.reason for d in plan.drops] == [ledger_model.DropReason.REQUEUED]


def test_ledger_entries_keep_priority_and_preemptor():
    sweep = held("sweep", 8, priority=-5, preempted_by="ml/urgent, priority 100")

    decoded = ledger_model.decode("vision", ledger_model.encode(Ledger("vision", (sweep,))))

    assert decoded.reservations == (sweep,)
    legacy = ledger_model.decode(
        "vision", ledger_model.encode(Ledger("vision", (held("old", 1, priority=None),)))
    )
    assert legacy.reservations[0].priority is None


def test_a_job_over_its_users_limit_preempts_that_users_own_lower_priority_job():
    policy = parse_policy(
        "groups: {vision: {gpus: 16, user_gpus: 8, preemption: {within_group: lower_priority}}}"
    )
    reservations = [held("my-sweep", 8, user="ann", minute=1), held("theirs", 8, user="bob", minute=2)]

    decisions = by_name(decide(policy, [job("urgent", 8, user="ann", priority=100)], reservations, NOW))

    urgent = decisions["urgent"]
    assert urgent.verdict is Verdict.PREEMPTING
    assert [r.job for r in urgent.preempts] == ["my-sweep"]  # never bob's, which frees nothing of ann's
    assert urgent.message.startswith(
        "user ann uses 8 of 8 GPUs in group vision; this job needs 8; preempting"
    )


def test_a_job_over_its_users_limit_never_jumps_a_job_waiting_for_the_group():
    policy = parse_policy(
        "groups: {vision: {gpus: 8, user_gpus: 4, preemption: {within_group: lower_priority}}}"
    )
    reservations = [held("mine", 4, user="ann", priority=0), held("peer", 4, user="bob", priority=200)]
    queue = [
        job("head", 4, user="cy", priority=150, minute=1),
        job("urgent", 4, user="ann", priority=100, minute=2),
    ]

    decisions = by_name(decide(policy, queue, reservations, NOW))

    assert decisions["head"].verdict is Verdict.PREEMPTING  # takes ann's job for the group's sake
    assert decisions["urgent"].preempts == ()
