"""What is left of a try's execution_timeout when it defers, and how a timed-out deferral reads
(jobs/timeouts.py)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_jobs_plugin.jobs.timeouts import remaining_timeout, timed_out, timeout_message

START = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)


def test_no_execution_timeout_defers_without_one():
    assert remaining_timeout(None, START, START + timedelta(seconds=5)) is None


def test_what_the_worker_spent_before_deferring_counts():
    left = remaining_timeout(timedelta(minutes=10), START, START + timedelta(seconds=42))
    assert left == timedelta(minutes=10) - timedelta(seconds=42)


def test_a_try_already_past_its_timeout_defers_with_nothing_left():
    assert remaining_timeout(timedelta(seconds=30), START, START + timedelta(minutes=2)) == timedelta(0)


def test_an_unknown_start_gives_the_whole_timeout_and_a_clock_behind_spends_nothing():
    assert remaining_timeout(timedelta(hours=6), None, START) == timedelta(hours=6)
    assert remaining_timeout(timedelta(hours=6), START, START - timedelta(seconds=3)) == timedelta(hours=6)


@pytest.mark.parametrize(
    ("timeout", "started", "now", "field"),
    [
        (60, START, START, "execution_timeout"),
        (timedelta(0), START, START, "execution_timeout"),
        (timedelta(seconds=-1), START, START, "execution_timeout"),
        (timedelta(seconds=60), START.replace(tzinfo=None), START, "started"),
        (timedelta(seconds=60), START, START.replace(tzinfo=None), "now"),
    ],
)
def test_bad_input_is_refused_naming_the_field(timeout, started, now, field):
    with pytest.raises((TypeError, ValueError), match=field):
        remaining_timeout(timeout, started, now)


def test_only_airflows_timeout_of_the_deferral_counts_as_timed_out():
    assert timed_out("__fail__", {"error": "Trigger timeout"})
    assert not timed_out("__fail__", {"error": "Trigger failure"})
    assert not timed_out("__fail__", None)
    assert not timed_out("execute_complete", {"event": {"status": "success"}})


def test_the_message_names_the_timeout_the_job_and_the_retries():
    message = timeout_message(
        execution_timeout=timedelta(seconds=60),
        job="train-a1-1-1",
        kind="MPIJob",
        namespace="ml",
        try_number=2,
    )
    assert "execution_timeout (0:01:00)" in message
    assert "MPIJob ml/train-a1-1-1" in message
    assert message.startswith("try 2 ")
    assert "new job through the queue" in message
