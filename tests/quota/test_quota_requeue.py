"""Requeue on a stuck start, the back-off before readmission, the requeue limit and the queue timeout."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_jobs_plugin.quota.requeue import (
    Requeue,
    RequeueLimitReached,
    RequeueSettings,
    format_duration,
    queue_timed_out,
    requeue_backoff,
    requeue_decision,
    schedule_deadline,
    schedule_deadline_passed,
)

ADMITTED = datetime(2025, 3, 1, 9, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("scenario", "pods_scheduled", "elapsed", "passed"),
    [
        ("unscheduled_within_the_timeout_keeps_waiting", False, timedelta(minutes=2, seconds=59), False),
        ("unscheduled_at_the_timeout_is_requeued", False, timedelta(minutes=3), True),
        ("unscheduled_long_after_is_requeued", False, timedelta(hours=1), True),
        ("scheduled_but_still_pulling_images_is_never_requeued", True, timedelta(hours=1), False),
        ("scheduled_early_is_fine", True, timedelta(seconds=5), False),
    ],
)
def test_schedule_deadline_counts_only_scheduling(scenario, pods_scheduled, elapsed, passed):
    assert schedule_deadline_passed(ADMITTED, pods_scheduled, ADMITTED + elapsed) is passed


def test_schedule_timeout_is_configurable():
    now = ADMITTED + timedelta(minutes=4)
    assert not schedule_deadline_passed(ADMITTED, False, now, schedule_timeout=timedelta(minutes=5))
    assert schedule_deadline(ADMITTED, timedelta(minutes=5)) == ADMITTED + timedelta(minutes=5)


def test_naive_datetimes_are_rejected():
    with pytest.raises(ValueError, match="timezone-aware"):
        schedule_deadline_passed(datetime(2025, 1, 1), False, ADMITTED)


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
    assert queue_timed_out(ADMITTED, ADMITTED + waited, timeout) is timed_out


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
