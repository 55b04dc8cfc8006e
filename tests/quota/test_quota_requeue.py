"""Requeue on a stuck start, the back-off before readmission, the requeue limit and the queue timeout."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_jobs_plugin.queueing.quota.ledger import all_pods_scheduled
from airflow_jobs_plugin.queueing.quota.requeue import (
    Requeue,
    RequeueLimitReached,
    RequeueSettings,
    banked_wait,
    format_duration,
    queue_timed_out,
    requeue_backoff,
    requeue_decision,
    schedule_deadline,
    waited_for_quota,
)

ADMITTED = datetime(2025, 3, 1, 9, 0, tzinfo=timezone.utc)


def pod(*, node: str | None = None, deleting: bool = False, waiting: str | None = None) -> dict:
    status: dict = {"phase": "Pending"}
    if waiting:
        status["containerStatuses"] = [{"name": "main", "state": {"waiting": {"reason": waiting}}}]
    meta: dict = {"name": "p"}
    if deleting:
        meta["deletionTimestamp"] = "2025-03-01T09:10:00Z"
    return {"metadata": meta, "spec": {"nodeName": node} if node else {}, "status": status}


JOB = {"kind": "Job", "spec": {"parallelism": 1}}


@pytest.mark.parametrize(
    ("scenario", "pods", "scheduled"),
    [
        ("no_pod_yet_is_not_scheduled", [], False),
        ("a_pod_waiting_for_a_node_is_not_scheduled", [pod()], False),
        ("a_pod_pulling_its_image_is_scheduled", [pod(node="gpu-1", waiting="ImagePullBackOff")], True),
        ("a_pod_on_its_way_out_does_not_count", [pod(node="gpu-1", deleting=True)], False),
    ],
)
def test_only_scheduling_counts_against_the_schedule_timeout(scenario, pods, scheduled):
    # The rule the admission's stuck-start check runs: every pod bound to a node, whatever its
    # containers do (image pulls and init containers never count).
    assert all_pods_scheduled(JOB, pods) is scheduled


def test_the_schedule_deadline_is_admission_plus_the_timeout():
    assert schedule_deadline(ADMITTED) == ADMITTED + timedelta(minutes=3)
    assert schedule_deadline(ADMITTED, timedelta(minutes=5)) == ADMITTED + timedelta(minutes=5)


def test_naive_datetimes_are_rejected():
    with pytest.raises(ValueError, match="timezone-aware"):
        schedule_deadline(datetime(2025, 1, 1))


@pytest.mark.parametrize(
    ("count", "expected"),
    [
        (1, timedelta(seconds=30)),
        (2, timedelta(minutes=1)),
        (3, timedelta(minutes=2)),
        (5, timedelta(minutes=8)),
        (6, timedelta(minutes=15)),  # 16 min capped
        (1000, timedelta(minutes=15)),
    ],
)
def test_backoff_doubles_up_to_the_cap(count, expected):
    assert requeue_backoff(count) == expected


def test_backoff_with_custom_base_and_cap():
    assert requeue_backoff(3, base=timedelta(seconds=10), cap=timedelta(seconds=25)) == timedelta(seconds=25)


@pytest.mark.parametrize("count", [0, -1, True, 1.5])
def test_backoff_rejects_counts_below_one(count):
    with pytest.raises(ValueError, match="requeue count"):
        requeue_backoff(count)


def test_first_stuck_start_requeues_with_the_first_backoff():
    now = ADMITTED + timedelta(minutes=3)
    decision = requeue_decision(0, now)
    assert decision == Requeue(
        requeue_count=1,
        not_before=now + timedelta(seconds=30),
        backoff=timedelta(seconds=30),
        message=decision.message,
    )
    assert "not scheduled within 3m" in decision.message
    assert "requeued (1 of 3)" in decision.message


def test_stuck_start_below_the_limit_requeues_with_a_longer_backoff():
    decision = requeue_decision(2, ADMITTED)
    assert isinstance(decision, Requeue)
    assert (decision.requeue_count, decision.backoff) == (3, timedelta(minutes=2))


def test_stuck_start_at_the_limit_fails_over_requeue_limit():
    decision = requeue_decision(3, ADMITTED)
    assert isinstance(decision, RequeueLimitReached)
    assert decision.reason == "OverRequeueLimit"
    assert "already requeued 3 times (requeue_limit: 3)" in decision.message


def test_requeue_limit_zero_fails_the_first_stuck_start():
    decision = requeue_decision(0, ADMITTED, RequeueSettings(requeue_limit=0))
    assert isinstance(decision, RequeueLimitReached)


@pytest.mark.parametrize(
    ("waited", "timeout", "timed_out"),
    [
        (timedelta(hours=5), None, False),
        (timedelta(minutes=59), timedelta(hours=1), False),
        (timedelta(hours=1), timedelta(hours=1), True),
        (timedelta(days=2), timedelta(hours=1), True),
    ],
)
def test_queue_timeout(waited, timeout, timed_out):
    assert queue_timed_out(waited_for_quota(ADMITTED, ADMITTED + waited), timeout) is timed_out


def test_the_queue_clock_counts_waits_and_never_a_run():
    queued = ADMITTED
    # Waited 10 minutes, ran for 3 hours from its admission: 10 minutes banked at its stop.
    banked = banked_wait(
        queued,
        waited_before=timedelta(0),
        wait_since=None,
        admitted_at=queued + timedelta(minutes=10),
        now=queued + timedelta(hours=3),
    )
    assert banked == timedelta(minutes=10)
    # Stopped while still queued: the wait up to the stop is banked.
    assert banked_wait(
        queued,
        waited_before=banked,
        wait_since=queued + timedelta(hours=4),
        admitted_at=None,
        now=queued + timedelta(hours=4, minutes=5),
    ) == timedelta(minutes=15)
    # While stopped only the banked waits count.
    assert waited_for_quota(queued, queued + timedelta(days=1), waited_before=banked, waiting=False) == banked


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (timedelta(0), "0s"),
        (timedelta(seconds=45), "45s"),
        (timedelta(minutes=3), "3m"),
        (timedelta(hours=1, minutes=30, seconds=5), "1h 30m"),
        (timedelta(days=2, minutes=4), "2d 4m"),
    ],
)
def test_format_duration(value, text):
    assert format_duration(value) == text
