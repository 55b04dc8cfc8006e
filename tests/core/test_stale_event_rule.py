"""A retry that follows an earlier try's job which already SUCCEEDED returns its success from execute(),
without deferring (usecases/submission.py ``returned_at_once``): Airflow 3.3.2's scheduler can fail a try whose
trigger fires seconds after the deferral, on the stale executor event of the deferral exit."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from lifecycle.factories import at, batch_job, job_condition

from airflow_jobs_plugin.jobs.stale_event import settle_wait
from airflow_jobs_plugin.usecases.submission import returned_at_once


def test_a_succeeded_job_is_returned_at_once():
    done = batch_job(succeeded=1, conditions=[job_condition("SuccessCriteriaMet"), job_condition("Complete")])
    assert returned_at_once(done, at(400))


def test_a_running_or_queued_job_is_followed_by_a_deferral():
    assert not returned_at_once(batch_job(active=1), at(400))
    assert not returned_at_once(batch_job(suspend=True), at(400))


# --- jobs/stale_event.py: a trigger reports a job's end only once the deferral has settled ---

DEFERRED = datetime(2026, 3, 2, 12, 0, tzinfo=timezone.utc)


def test_a_job_that_ends_seconds_after_the_deferral_is_reported_once_the_settle_has_passed():
    assert settle_wait(DEFERRED.isoformat(), DEFERRED + timedelta(seconds=4), 15) == 11


def test_a_job_that_ends_after_the_settle_is_reported_at_once():
    assert settle_wait(DEFERRED.isoformat(), DEFERRED + timedelta(minutes=5), 15) == 0


def test_a_trigger_that_does_not_know_when_its_task_deferred_reports_at_once():
    now = DEFERRED + timedelta(seconds=1)
    assert settle_wait(None, now, 15) == 0
    assert settle_wait("", now, 15) == 0
    assert settle_wait("not a time", now, 15) == 0
    assert settle_wait("2026-03-02T12:00:00", now, 15) == 0  # no zone: not the operator's


def test_a_settle_of_zero_reports_at_once():
    assert settle_wait(DEFERRED.isoformat(), DEFERRED, 0) == 0


def test_a_worker_clock_ahead_of_the_triggerer_never_makes_the_wait_longer_than_the_settle():
    assert settle_wait((DEFERRED + timedelta(minutes=3)).isoformat(), DEFERRED, 15) == 15
