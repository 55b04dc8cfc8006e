"""One time format in what a person reads: the messages print a moment as the pages' tables do."""

from __future__ import annotations

from datetime import datetime, timezone

from airflow_jobs_plugin.cluster.objects import time_text
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.lifecycle import JobState, snapshot


def test_a_moment_prints_as_the_pages_print_it_whatever_wrote_it():
    expected = "2026-12-05 06:59:38 UTC"
    assert time_text("2026-12-05T06:59:38+00:00") == expected  # an annotation written by an action
    assert time_text("2026-12-05T06:59:38Z") == expected  # a Kubernetes timestamp
    assert time_text(datetime(2026, 12, 5, 6, 59, 38, 412345, tzinfo=timezone.utc)) == expected
    assert time_text("2026-12-05T07:59:38+01:00") == expected  # printed in UTC


def test_text_that_is_not_a_time_is_printed_as_it_is():
    assert time_text("yesterday") == "yesterday"
    assert time_text(None) == ""


def test_a_stopped_job_says_when_it_was_stopped_in_the_pages_format():
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train",
            "namespace": "ml",
            "annotations": {labels.STOPPED_AT: "2026-12-05T06:59:38+00:00", labels.STOPPED_BY: "alice"},
        },
        "spec": {"suspend": True},
        "status": {},
    }
    snap = snapshot(job, [], now=datetime(2026, 12, 5, 7, tzinfo=timezone.utc))
    assert snap.state is JobState.STOPPED
    assert snap.message == "stopped by alice at 2026-12-05 06:59:38 UTC; resume to requeue"
