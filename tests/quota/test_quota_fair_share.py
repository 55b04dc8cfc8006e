"""Fair sharing among the users of a group: among jobs of equal priority, the user who held least
recently goes first; one user cannot take the group with early submissions."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_jobs_plugin.queueing.quota import ledger_model
from airflow_jobs_plugin.queueing.quota.fair_share import (
    Ordering,
    UsageHistory,
    fair_order,
    held_seconds,
    recent_gpus,
    with_released,
)
from airflow_jobs_plugin.queueing.quota.ledger_model import Ledger, ObservedJob, plan_admission
from airflow_jobs_plugin.queueing.quota.model import QueuedJob, Reservation, Verdict
from airflow_jobs_plugin.queueing.quota.parse import PolicyError, parse_policy
from airflow_jobs_plugin.queueing.quota.policy import decide, queue_order
from tests.examples_budget import examples

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=timezone.utc)
NOW = T0 + timedelta(hours=1)
HOUR = timedelta(hours=1)

FAIR = parse_policy("groups: {nlp: {gpus: 8, ordering: fair_share, fair_share_half_life: 1h}}")
FIFO = parse_policy("groups: {nlp: {gpus: 8}}")


def job(name: str, user: str, gpus: int = 2, *, minute: int = 0, priority: int = 0) -> QueuedJob:
    return QueuedJob(
        name=name,
        group="nlp",
        user=user,
        gpus=gpus,
        priority=priority,
        queued_at=T0 + timedelta(minutes=minute),
        uid=f"uid-{name}",
    )


def held(name: str, user: str, gpus: int, admitted_at: datetime) -> Reservation:
    return Reservation(
        job=name, group="nlp", user=user, gpus=gpus, uid=f"uid-{name}", admitted_at=admitted_at
    )


def verdicts(decisions) -> dict[str, str]:
    return {d.job.name: d.verdict.reason for d in decisions}


# --- the policy ----------------------------------------------------------------------------------------


def test_fifo_is_the_default_and_fair_share_is_asked_for_by_name():
    assert FIFO.groups["nlp"].ordering is Ordering.FIFO
    assert FAIR.groups["nlp"].ordering is Ordering.FAIR_SHARE
    assert FAIR.groups["nlp"].fair_share_half_life == HOUR


def test_a_misspelt_ordering_names_the_key_and_the_choices():
    with pytest.raises(PolicyError) as err:
        parse_policy("groups: {nlp: {gpus: 8, ordering: fairshare}}")
    assert (
        "groups.nlp.ordering: must be one of fifo, fair_share, got 'fairshare'; did you mean 'fair_share'?"
        in str(err.value)
    )
    with pytest.raises(PolicyError) as err:
        parse_policy("groups: {nlp: {gpus: 8, ordering: fair_share, fair_share_half_life: soon}}")
    assert "groups.nlp.fair_share_half_life: must be a duration" in str(err.value)


# --- the usage figure ----------------------------------------------------------------------------------


def test_a_user_holding_4_gpus_for_many_half_lives_reads_4():
    recent = recent_gpus(UsageHistory(), [held("long", "ann", 4, NOW - 20 * HOUR)], NOW, HOUR)
    assert recent["ann"] == pytest.approx(4.0, rel=1e-5)


def test_a_half_life_after_they_stopped_it_reads_half():
    history = with_released(UsageHistory(), [held("long", "ann", 4, NOW - 20 * HOUR)], NOW, HOUR)
    assert recent_gpus(history, [], NOW + HOUR, HOUR)["ann"] == pytest.approx(2.0, rel=1e-5)


def test_gpu_seconds_decay_by_half_per_half_life():
    one_hour_now = held_seconds(1, NOW - HOUR, NOW, NOW, HOUR)
    one_hour_ago = held_seconds(1, NOW - 2 * HOUR, NOW - HOUR, NOW, HOUR)
    assert one_hour_ago == pytest.approx(one_hour_now / 2)


def test_usage_nobody_remembers_is_forgotten():
    history = with_released(UsageHistory(), [held("tiny", "ann", 1, NOW - timedelta(seconds=5))], NOW, HOUR)
    assert "ann" in history.gpu_seconds
    assert with_released(history, [], NOW + 40 * HOUR, HOUR).gpu_seconds == {}


# --- the order -----------------------------------------------------------------------------------------


def test_one_user_cannot_take_the_group_with_early_submissions():
    queue = [job(f"ann{i}", "ann", minute=i) for i in range(4)] + [job("bob0", "bob", minute=5)]

    assert verdicts(decide(FIFO, queue, [], NOW))["bob0"] == "GroupQuota"
    fair = verdicts(decide(FAIR, queue, [], NOW))

    assert fair["bob0"] == "Admitted"
    assert [fair[f"ann{i}"] for i in range(4)] == ["Admitted", "Admitted", "Admitted", "GroupQuota"]


def test_users_who_queue_together_alternate():
    queue = [job(f"ann{i}", "ann", minute=i) for i in range(3)] + [
        job(f"bob{i}", "bob", minute=10 + i) for i in range(3)
    ]

    order = [j.name for j in fair_order(queue, {}, queue_order)]

    assert order == ["ann0", "bob0", "ann1", "bob1", "ann2", "bob2"]


def test_the_user_who_held_the_group_recently_goes_after_the_one_who_did_not():
    queue = [job("ann0", "ann", 8, minute=0), job("bob0", "bob", 8, minute=30)]

    order = [j.name for j in fair_order(queue, {"ann": 6.0}, queue_order)]

    assert order == ["bob0", "ann0"]


def test_priority_still_comes_first():
    queue = [job("ann-urgent", "ann", 8, minute=0, priority=10), job("bob0", "bob", 8, minute=0)]

    order = [j.name for j in fair_order(queue, {"ann": 100.0}, queue_order)]

    assert order == ["ann-urgent", "bob0"]


def test_a_users_own_jobs_keep_their_order():
    queue = [job("ann-b", "ann", 1, minute=2), job("ann-a", "ann", 4, minute=1), job("bob0", "bob", minute=3)]

    order = [j.name for j in fair_order(queue, {}, queue_order)]

    assert order.index("ann-a") < order.index("ann-b")


def test_the_primehub_rules_walk_the_fair_order():
    policy = parse_policy("groups: {nlp: {gpus: 4, user_gpus: 4, ordering: fair_share}}")
    # bob held the group lately, so lin's job is judged first; bob's big job then blocks the group.
    queue = [
        job("bob-big", "bob", 4, minute=0),
        job("lin0", "lin", 2, minute=1),
        job("pan0", "pan", 4, minute=2),
    ]
    reservations = [held("lin-held", "lin", 2, NOW - timedelta(minutes=1))]

    decisions = decide(policy, queue, reservations, NOW, recent={"nlp": {"bob": 3.0, "lin": 0.5}})

    by_name = {d.job.name: d for d in decisions}
    assert [d.job.name for d in decisions] == ["pan0", "lin0", "bob-big"]
    assert by_name["pan0"].verdict is Verdict.GROUP_QUOTA  # 2 of 4 used; needs 4: the group stops here
    assert by_name["lin0"].verdict is Verdict.BEHIND_HEAD
    assert by_name["bob-big"].verdict is Verdict.BEHIND_HEAD


# --- the ledger ------------------------------------------------------------------------------------------


def test_a_released_reservation_is_charged_to_its_user_in_the_write_that_drops_it():
    run = held("ann0", "ann", 4, NOW - HOUR)
    plan = plan_admission(FAIR, Ledger("nlp", (run,)), [], {run.uid: ObservedJob(terminal=True)}, NOW)

    assert plan.ledger_changed and plan.ledger.reservations == ()
    assert plan.ledger.usage.gpu_seconds["ann"] == pytest.approx(held_seconds(4, NOW - HOUR, NOW, NOW, HOUR))
    decoded = ledger_model.decode("nlp", ledger_model.encode(plan.ledger))
    assert decoded.usage.gpu_seconds["ann"] == pytest.approx(plan.ledger.usage.gpu_seconds["ann"], abs=1e-3)
    assert decoded.usage.half_life == HOUR


def test_a_release_outside_a_pass_is_charged_too():
    run = held("ann0", "ann", 4, NOW - HOUR)
    ledger = Ledger("nlp", (run,), usage=UsageHistory(at=NOW - HOUR, gpu_seconds={}, half_life=HOUR))

    released = ledger_model.without(ledger, run.uid, NOW)

    assert released.usage.gpu_seconds["ann"] > 0


def test_a_fifo_group_keeps_no_history():
    run = held("ann0", "ann", 4, NOW - HOUR)
    plan = plan_admission(FIFO, Ledger("nlp", (run,)), [], {run.uid: ObservedJob(terminal=True)}, NOW)

    assert plan.ledger.usage.at is None
    assert ledger_model.USAGE_KEY not in ledger_model.encode(plan.ledger)


def test_an_unreadable_history_starts_afresh_and_is_reported():
    ledger = ledger_model.decode("nlp", {ledger_model.USAGE_KEY: "{oops"})
    assert ledger.usage.at is None
    assert [e.key for e in ledger.unreadable] == [ledger_model.USAGE_KEY]


# --- properties ----------------------------------------------------------------------------------------

USERS = ("u1", "u2", "u3")


@st.composite
def fair_queues(draw) -> list[QueuedJob]:
    return [
        QueuedJob(
            name=f"j{i}",
            group="nlp",
            user=draw(st.sampled_from(USERS)),
            gpus=draw(st.integers(0, 8)),
            priority=draw(st.integers(0, 2)),
            queued_at=T0 + timedelta(minutes=draw(st.integers(0, 59))),
            uid=f"j{i}",
        )
        for i in range(draw(st.integers(0, 12)))
    ]


recents = st.dictionaries(st.sampled_from(USERS), st.floats(0, 16, allow_nan=False))


@settings(max_examples=examples(300), deadline=None)
@given(fair_queues(), recents)
def test_fair_order_reorders_only_across_users_of_equal_priority(queue, recent):
    order = fair_order(queue, recent, queue_order)

    assert sorted(j.uid for j in order) == sorted(j.uid for j in queue)
    assert [j.priority for j in order] == sorted((j.priority for j in order), reverse=True)
    for user in USERS:
        for priority in range(3):
            own = [j for j in order if j.user == user and j.priority == priority]
            assert own == sorted(own, key=queue_order)


@settings(max_examples=examples(300), deadline=None)
@given(fair_queues(), recents, st.integers(0, 12), st.integers(1, 12))
def test_fair_share_never_admits_past_a_group_block_and_never_above_quota(queue, recent, gpus, user_gpus):
    policy = parse_policy(f"groups: {{nlp: {{gpus: {gpus}, user_gpus: {user_gpus}, ordering: fair_share}}}}")

    decisions = decide(policy, queue, [], NOW, recent={"nlp": recent})

    assert [d.job.uid for d in decisions] == [j.uid for j in fair_order(queue, recent, queue_order)]
    admitted = [d.job for d in decisions if d.verdict is Verdict.ADMIT]
    assert sum(j.gpus for j in admitted) <= gpus
    blocked = next((i for i, d in enumerate(decisions) if d.verdict is Verdict.GROUP_QUOTA), None)
    if blocked is not None:
        assert not any(d.verdict is Verdict.ADMIT for d in decisions[blocked:])
