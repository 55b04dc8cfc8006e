"""A retry that follows an earlier try's job which already SUCCEEDED returns its success from execute(),
without deferring (usecases/submission.py ``returned_at_once``): Airflow 3.3.2's scheduler can fail a try whose
trigger fires seconds after the deferral, on the stale executor event of the deferral exit."""

from __future__ import annotations

from lifecycle.factories import at, batch_job, job_condition

from airflow_jobs_plugin.usecases.submission import returned_at_once


def test_a_succeeded_job_is_returned_at_once():
    done = batch_job(succeeded=1, conditions=[job_condition("SuccessCriteriaMet"), job_condition("Complete")])
    assert returned_at_once(done, at(400))


def test_a_running_or_queued_job_is_followed_by_a_deferral():
    assert not returned_at_once(batch_job(active=1), at(400))
    assert not returned_at_once(batch_job(suspend=True), at(400))
