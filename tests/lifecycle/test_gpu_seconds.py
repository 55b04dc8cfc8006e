"""GPU-seconds run from admission to the job's end, read from the job itself when no ledger is at hand."""

from __future__ import annotations

from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.lifecycle import JobState, Reservation, snapshot

from .factories import at, batch_job, job_condition, ts


def test_a_finished_job_is_charged_from_admission_to_completion():
    job = batch_job(
        annotations={labels.ADMITTED_AT: ts(0), labels.GPUS: "4"},
        conditions=[job_condition("Complete", at_s=300)],
        succeeded=1,
    )
    snap = snapshot(job, [], now=at(3600))
    assert snap.state is JobState.SUCCEEDED
    assert snap.gpu_seconds == 4 * 300  # the hour after completion is not charged


def test_a_running_job_is_charged_up_to_now():
    job = batch_job(annotations={labels.ADMITTED_AT: ts(0), labels.GPUS: "2"}, active=1)
    assert snapshot(job, [], now=at(60)).gpu_seconds == 2 * 60


def test_a_job_never_admitted_costs_nothing():
    assert snapshot(batch_job(suspend=True, annotations={labels.GPUS: "8"}), [], now=at(600)).gpu_seconds == 0


def test_the_ledgers_reservation_wins_over_the_annotations():
    job = batch_job(annotations={labels.ADMITTED_AT: ts(0), labels.GPUS: "4"}, active=1)
    reservation = Reservation(gpus=1, admitted_at=at(30), released_at=at(90))
    assert snapshot(job, [], reservation=reservation, now=at(600)).gpu_seconds == 60
