"""The admission rule: per group, in order of priority then enqueue time; user quota skips, group quota blocks."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_jobs_plugin.queueing.quota.model import (
    GroupQuota,
    QueuedJob,
    QuotaPolicy,
    Reservation,
    Verdict,
)
from airflow_jobs_plugin.queueing.quota.parse import parse_policy
from airflow_jobs_plugin.queueing.quota.policy import decide, usage
from airflow_jobs_plugin.queueing.quota.requeue import RequeueSettings

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=timezone.utc)
NOW = T0 + timedelta(minutes=10)

PHUSERS = parse_policy("groups: {phusers: {gpus: 4, user_gpus: 4}}")


def job(name: str, gpus: int, user: str, *, minute: int = 0, group: str = "phusers", **extra) -> QueuedJob:
    return QueuedJob(
        name=name,
        group=group,
        user=user,
        gpus=gpus,
        queued_at=T0 + timedelta(minutes=minute),
        uid=f"uid-{name}",
        **extra,
    )


def held(name: str, gpus: int, user: str, *, group: str = "phusers", **extra) -> Reservation:
    return Reservation(
        job=name, group=group, user=user, gpus=gpus, uid=f"uid-{name}", admitted_at=T0, **extra
    )


def outcome(decisions) -> dict[str, tuple[str, int | None]]:
    return {d.job.name: (d.verdict.reason, d.position) for d in decisions}


# --- the two PrimeHub examples, verbatim ---------------------------------------------------------


def test_primehub_example_1_group_quota_blocks_the_group():
    queue = [job("A", 2, "bob", minute=0), job("B", 4, "pan", minute=1), job("C", 2, "lin", minute=2)]

    decisions = decide(PHUSERS, queue, [], NOW)

    assert outcome(decisions) == {
        "A": ("Admitted", None),  # Preparing
        "B": ("GroupQuota", 1),  # Pending: not enough GPUs left in the group
        "C": ("BehindHead", 2),  # Pending: blocked by B, FIFO
    }
    by_name = {d.job.name: d for d in decisions}
    assert by_name["B"].message == "group phusers uses 2 of 4 GPUs; this job needs 4"
    assert by_name["C"].blocked_by == "B"


def test_primehub_example_2_user_quota_does_not_block_other_users():
    queue = [job("A", 2, "bob", minute=0), job("B", 4, "bob", minute=1), job("C", 2, "lin", minute=2)]

    decisions = decide(PHUSERS, queue, [], NOW)

    assert outcome(decisions) == {
        "A": ("Admitted", None),
        "B": ("UserQuota", 1),  # bob holds 2 of 4: B does not fit his quota and blocks nobody
        "C": ("Admitted", None),
    }
    by_name = {d.job.name: d for d in decisions}
    assert by_name["B"].message == "user bob uses 2 of 4 GPUs in group phusers; this job needs 4"


# --- the rule, case by case ----------------------------------------------------------------------

VISION = parse_policy(
    """
groups:
  vision: {gpus: 8, user_gpus: 4, users: {alice: 6}}
  nlp: {gpus: 16, user_gpus: 8}
"""
)


@pytest.mark.parametrize(
    ("scenario", "queue", "reservations", "expected"),
    [
        (
            "never_fits_the_group_fails_fast_and_blocks_nobody",
            [job("big", 10, "alice", group="vision"), job("small", 2, "bob", minute=1, group="vision")],
            [],
            {"big": ("OverQuota", None), "small": ("Admitted", None)},
        ),
        (
            "never_fits_the_user_fails_fast",
            [job("five", 5, "bob", group="vision")],
            [],
            {"five": ("OverQuota", None)},
        ),
        (
            "per_user_override_lets_alice_take_six",
            [job("a6", 6, "alice", group="vision"), job("b4", 4, "bob", minute=1, group="vision")],
            [],
            {"a6": ("Admitted", None), "b4": ("GroupQuota", 1)},
        ),
        (
            "override_counts_existing_reservations",
            [job("a3", 3, "alice", group="vision")],
            [held("running", 4, "alice", group="vision")],
            {"a3": ("UserQuota", 1)},
        ),
        (
            "existing_reservations_fill_the_group",
            [job("b2", 2, "bob", group="vision")],
            [held("r1", 4, "alice", group="vision"), held("r2", 4, "carol", group="vision")],
            {"b2": ("GroupQuota", 1)},
        ),
        (
            "groups_are_independent_queues",
            [job("v6", 6, "alice", group="vision"), job("n8", 8, "dan", minute=1, group="nlp")],
            [held("r", 4, "x", group="vision")],
            {"v6": ("GroupQuota", 1), "n8": ("Admitted", None)},
        ),
        (
            "admissions_in_one_pass_count_against_later_jobs",
            [
                job("a", 4, "bob", group="vision"),
                job("b", 4, "carol", minute=1, group="vision"),
                job("c", 1, "dan", minute=2, group="vision"),
            ],
            [],
            {"a": ("Admitted", None), "b": ("Admitted", None), "c": ("GroupQuota", 1)},
        ),
        (
            "user_quota_behind_the_head_reports_the_user_quota",
            [
                job("head", 8, "alice", minute=0, group="vision"),
                job("bob3", 3, "bob", minute=1, group="vision"),
                job("lin1", 1, "lin", minute=2, group="vision"),
            ],
            [held("r", 2, "bob", group="vision")],
            {"head": ("OverQuota", None), "bob3": ("UserQuota", 1), "lin1": ("Admitted", None)},
        ),
        (
            "zero_gpu_job_fits_even_a_full_group",
            [job("cpu", 0, "bob", group="vision")],
            [held("r1", 4, "alice", group="vision"), held("r2", 4, "carol", group="vision")],
            {"cpu": ("Admitted", None)},
        ),
        (
            "unknown_group_is_inadmissible_and_waits",
            [job("x", 1, "bob", group="audio"), job("y", 1, "bob", minute=1, group="audio")],
            [],
            {"x": ("Inadmissible", 1), "y": ("Inadmissible", 2)},
        ),
        (
            "overcommitted_group_after_a_policy_cut_admits_nothing_with_gpus",
            [job("one", 1, "bob", group="vision")],
            [held("r", 9, "alice", group="vision")],
            {"one": ("GroupQuota", 1)},
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_admission_rule(scenario, queue, reservations, expected):
    assert outcome(decide(VISION, queue, reservations, NOW)) == expected


def test_over_quota_message_names_the_limit():
    (decision,) = decide(VISION, [job("five", 5, "bob", group="vision")], [], NOW)
    assert decision.verdict.terminal
    assert "needs 5 GPUs but user bob may hold at most 4 GPUs in group vision" in decision.message


def test_unknown_group_message_names_known_groups():
    (decision,) = decide(VISION, [job("x", 1, "bob", group="visoin")], [], NOW)
    assert decision.verdict is Verdict.INADMISSIBLE
    assert "did you mean 'vision'" in decision.message
    assert "known groups: nlp, vision" in decision.message


def test_user_limit_above_group_quota_is_capped_by_the_group():
    policy = parse_policy("groups: {small: {gpus: 4, user_gpus: 8, users: {alice: 16}}}")
    assert policy.user_limit("small", "alice") == 4
    (decision,) = decide(policy, [job("a", 6, "alice", group="small")], [], NOW)
    assert decision.verdict is Verdict.OVER_QUOTA
    assert "group small's whole quota is 4 GPUs" in decision.message


# --- priorities ----------------------------------------------------------------------------------


def test_higher_priority_goes_first_despite_later_enqueue():
    policy = parse_policy("groups: {g: {gpus: 4}}\npriorities: {high: 100, normal: 0}")
    queue = [
        job("early", 4, "bob", minute=0, group="g", priority=policy.priority_of("normal")),
        job("urgent", 4, "lin", minute=5, group="g", priority=policy.priority_of("high")),
    ]
    assert outcome(decide(policy, queue, [], NOW)) == {
        "urgent": ("Admitted", None),
        "early": ("GroupQuota", 1),
    }


def test_blocked_high_priority_head_stops_lower_priorities():
    policy = parse_policy("groups: {g: {gpus: 4}}")
    queue = [
        job("low", 1, "bob", minute=0, group="g", priority=-10),
        job("high", 4, "lin", minute=5, group="g", priority=10),
    ]
    reservations = [held("r", 2, "carol", group="g")]
    assert outcome(decide(policy, queue, reservations, NOW)) == {
        "high": ("GroupQuota", 1),
        "low": ("BehindHead", 2),
    }


def test_same_priority_and_time_breaks_ties_by_name():
    policy = parse_policy("groups: {g: {gpus: 2}}")
    queue = [job("b", 2, "u1", group="g"), job("a", 2, "u2", group="g")]
    assert outcome(decide(policy, queue, [], NOW)) == {"a": ("Admitted", None), "b": ("GroupQuota", 1)}


# --- max running jobs per user -------------------------------------------------------------------


def test_max_running_jobs_per_user_skips_the_user_only():
    policy = parse_policy("groups: {g: {gpus: 16, max_running_jobs_per_user: 2}}")
    queue = [
        job("b1", 1, "bob", minute=0, group="g"),
        job("b2", 1, "bob", minute=1, group="g"),
        job("b3", 1, "bob", minute=2, group="g"),
        job("l1", 1, "lin", minute=3, group="g"),
    ]
    decisions = decide(policy, queue, [], NOW)
    assert outcome(decisions) == {
        "b1": ("Admitted", None),
        "b2": ("Admitted", None),
        "b3": ("UserQuota", 1),
        "l1": ("Admitted", None),
    }
    assert "max_running_jobs_per_user: 2" in {d.job.name: d for d in decisions}["b3"].message


def test_max_running_jobs_counts_existing_reservations():
    policy = parse_policy("defaults: {max_running_jobs_per_user: 1}\ngroups: {g: {gpus: 16}}")
    decisions = decide(policy, [job("b2", 1, "bob", group="g")], [held("b1", 1, "bob", group="g")], NOW)
    assert outcome(decisions) == {"b2": ("UserQuota", 1)}


# --- requeue back-off and queue timeout ----------------------------------------------------------


def test_job_in_back_off_keeps_its_position_and_blocks_nobody():
    queue = [
        job("requeued", 4, "pan", minute=0, not_before=NOW + timedelta(seconds=30), requeue_count=1),
        job("next", 2, "lin", minute=1),
    ]
    decisions = decide(PHUSERS, queue, [], NOW)
    assert outcome(decisions) == {"requeued": ("BackingOff", 1), "next": ("Admitted", None)}
    assert "30s left" in decisions[0].message


@pytest.mark.parametrize(
    ("requeue_count", "why"),
    [
        (1, "requeued 1 time after its pods could not be scheduled"),
        (0, "a new attempt after its last attempt failed"),
    ],
)
def test_a_back_off_names_its_cause_a_requeue_or_a_retried_attempt(requeue_count, why):
    # A retryable exit's next attempt starts its requeue count again at 0 (jobs/attempts.next_attempt):
    # "requeued 0 times after its pods could not be scheduled" would be false.
    queue = [job("waiting", 4, "pan", not_before=NOW + timedelta(seconds=30), requeue_count=requeue_count)]
    (decision,) = decide(PHUSERS, queue, [], NOW)
    assert decision.message.startswith(f"{why}; back-off until "), decision.message


def test_job_whose_back_off_expired_competes_at_its_original_position():
    queue = [
        job("later", 2, "lin", minute=5),
        job("requeued", 4, "pan", minute=0, not_before=NOW - timedelta(seconds=1), requeue_count=1),
    ]
    assert outcome(decide(PHUSERS, queue, [], NOW)) == {
        "requeued": ("Admitted", None),
        "later": ("GroupQuota", 1),
    }


def test_queue_timeout_fails_a_job_that_waited_too_long():
    policy = QuotaPolicy(
        groups={"phusers": GroupQuota("phusers", gpus=4)},
        requeue=RequeueSettings(queue_timeout=timedelta(minutes=10)),
    )
    queue = [job("old", 4, "pan", minute=0), job("young", 4, "lin", minute=1)]
    decisions = decide(policy, queue, [held("r", 2, "bob")], NOW)
    assert outcome(decisions) == {"old": ("QueueTimeout", None), "young": ("GroupQuota", 1)}
    assert decisions[0].verdict.terminal
    assert "longer than queue_timeout 10m" in decisions[0].message


def test_per_job_queue_timeout_overrides_the_policy():
    queue = [job("impatient", 4, "pan", minute=5, queue_timeout=timedelta(minutes=1))]
    assert outcome(decide(PHUSERS, queue, [held("r", 2, "bob")], NOW)) == {
        "impatient": ("QueueTimeout", None)
    }


# --- crash repair inside the rule ----------------------------------------------------------------


def test_queued_job_already_holding_a_reservation_is_resumed_without_double_charge():
    queue = [job("A", 4, "bob", minute=0), job("B", 1, "lin", minute=1)]
    decisions = decide(PHUSERS, queue, [held("A", 4, "bob")], NOW)
    assert outcome(decisions) == {"A": ("Admitted", None), "B": ("GroupQuota", 1)}
    assert "resuming" in decisions[0].message


def test_reservation_of_an_earlier_attempt_still_counts_but_does_not_admit():
    queue = [job("A", 2, "bob", requeue_count=1)]
    decisions = decide(PHUSERS, queue, [held("A", 4, "bob", requeue_count=0)], NOW)
    assert outcome(decisions) == {"A": ("UserQuota", 1)}
    assert decisions[0].message == "user bob uses 4 of 4 GPUs in group phusers; this job needs 2"


def test_duplicate_queue_entries_collapse_to_one_decision():
    decisions = decide(PHUSERS, [job("A", 2, "bob"), job("A", 2, "bob")], [], NOW)
    assert outcome(decisions) == {"A": ("Admitted", None)}
    assert len(decisions) == 1


def test_naive_now_is_rejected():
    with pytest.raises(ValueError, match="timezone-aware"):
        decide(PHUSERS, [], [], datetime(2025, 1, 1))


# --- GPU accounting ------------------------------------------------------------------------------


def test_mpi_job_is_charged_for_all_workers_and_the_launcher():
    policy = parse_policy("groups: {g: {gpus: 8, user_gpus: 8}}")
    mpi = job("mpi", 3 * 2 + 1, "bob", group="g")  # spec.total_gpus: workers x GPUs + launcher
    single = job("single", 2, "lin", minute=1, group="g")
    decisions = decide(policy, [mpi, single], [], NOW)
    # 3 x 2 + 1 = 7 of 8: the 2-GPU job behind it no longer fits.
    assert outcome(decisions) == {"mpi": ("Admitted", None), "single": ("GroupQuota", 1)}


def test_mpi_job_wider_than_the_group_is_over_quota():
    policy = parse_policy("groups: {g: {gpus: 8}}")
    (decision,) = decide(policy, [job("mpi", 5 * 2, "bob", group="g")], [], NOW)
    assert decision.verdict is Verdict.OVER_QUOTA


def test_usage_sums_reservations_per_group_and_user():
    (nlp, vision) = usage(
        VISION, [held("a", 4, "alice", group="vision"), held("b", 2, "alice", group="vision")]
    )
    assert (vision.used, vision.free, nlp.used) == (6, 2, 0)
    assert [(u.user, u.gpus, u.jobs, u.limit) for u in vision.users] == [("alice", 6, 2, 6)]
