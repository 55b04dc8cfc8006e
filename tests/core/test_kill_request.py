"""Which kill requests the GPU Jobs app honours (jobs/kill_request.py): one scenario per rule."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_jobs_plugin.jobs.kill_request import KILLED_BY, SKIPPED_BY, judge_kill, request_of
from airflow_jobs_plugin.jobs.orphans import JobRecord, TaskRecord, TaskRef
from airflow_jobs_plugin.jobs.timeouts import TIMEOUT_CANCEL_BY

TASK = TaskRef("nightly", "train", "scheduled__2026-12-01", -1)
CREATED = datetime(2026, 12, 1, tzinfo=timezone.utc)


def job(*, live: bool = True, task: TaskRef | None = TASK, try_number: int | None = 2) -> JobRecord:
    return JobRecord("nightly-train-a1", task, try_number, CREATED, live)


def test_a_finished_job_is_left_as_it_is():
    verdict = judge_kill(job(live=False), TaskRecord("failed", 2), dag_known=True)
    assert not verdict.cancel and verdict.reason == "finished or being deleted"


def test_a_job_no_airflow_task_submitted_is_not_this_rules():
    assert not judge_kill(job(task=None), None, dag_known=True).cancel


def test_a_job_of_a_dag_this_airflow_does_not_have_is_left_to_its_own_deployment():
    verdict = judge_kill(job(), None, dag_known=False)
    assert not verdict.cancel and "another deployment" in verdict.reason


def test_a_job_whose_dag_run_was_deleted_is_cancelled():
    verdict = judge_kill(job(), None, dag_known=True)
    assert verdict.cancel and "no longer exists" in verdict.reason


@pytest.mark.parametrize("state", ["failed", "success", "skipped", "upstream_failed", "removed"])
def test_a_task_instance_marked_or_ended_has_its_job_cancelled(state):
    verdict = judge_kill(job(), TaskRecord(state, 2), dag_known=True)
    assert verdict.cancel and verdict.reason.endswith(f"was set {state}")
    assert verdict.by == (SKIPPED_BY if state == "skipped" else KILLED_BY)


@pytest.mark.parametrize(
    ("state", "try_number"), [(None, 2), ("restarting", 2), ("scheduled", 3), ("queued", 3)]
)
def test_a_cleared_task_instance_has_its_job_cancelled_so_its_new_run_submits_its_own(state, try_number):
    verdict = judge_kill(job(), TaskRecord(state, try_number), dag_known=True)
    assert verdict.cancel and "was cleared" in verdict.reason
    assert verdict.by == KILLED_BY


@pytest.mark.parametrize(
    ("state", "try_number"),
    [("deferred", 2), ("running", 2), ("up_for_retry", 2), ("scheduled", 2), ("queued", 2), ("deferred", 3)],
)
def test_a_request_the_database_does_not_confirm_cancels_nothing(state, try_number):
    # A DAG wrote it on another tenant's job, or a retry that will reattach is on its way.
    verdict = judge_kill(job(), TaskRecord(state, try_number), dag_known=True)
    assert not verdict.cancel and "still follows the job" in verdict.reason


@pytest.mark.parametrize(("value", "expected"), [(None, None), ("3", 3), ("0", 0), ("x", 0)])
def test_a_requests_label_value_is_the_try_its_trigger_followed(value, expected):
    request = request_of(value)
    assert (request.try_number if request else None) == expected


DEADLINE = datetime(2026, 12, 1, 10, 0, tzinfo=timezone.utc)
AFTER = DEADLINE + timedelta(seconds=20)


@pytest.mark.parametrize(
    ("state", "next_method"),
    [("scheduled", "__fail__"), ("queued", "__fail__"), ("running", "__fail__"), ("up_for_retry", None)],
)
def test_a_try_past_its_deferral_deadline_has_its_job_cancelled_naming_the_timeout(state, next_method):
    task = TaskRecord(state, 2, trigger_timeout=DEADLINE, next_method=next_method)
    verdict = judge_kill(job(), task, dag_known=True, now=AFTER)
    assert verdict.cancel and "ran out of its execution_timeout" in verdict.reason
    assert verdict.by == TIMEOUT_CANCEL_BY


def test_a_try_failed_for_its_timeout_names_the_timeout_too():
    task = TaskRecord("failed", 2, trigger_timeout=DEADLINE)
    verdict = judge_kill(job(), task, dag_known=True, now=AFTER)
    assert verdict.cancel
    assert verdict.by == TIMEOUT_CANCEL_BY


@pytest.mark.parametrize(
    "task",
    [
        # Still deferred: the scheduler has not failed the deferral yet (a triggerer restarted just past
        # the deadline asks too early); its cancel asks again.
        TaskRecord("deferred", 2, trigger_timeout=DEADLINE),
        # Resumed on its trigger's event, not failed by the timeout.
        TaskRecord("running", 2, trigger_timeout=DEADLINE, next_method="execute_complete"),
        # The deadline is still ahead.
        TaskRecord("up_for_retry", 2, trigger_timeout=AFTER + timedelta(minutes=1)),
    ],
)
def test_a_deadline_the_database_does_not_show_passed_and_acted_on_cancels_nothing(task):
    verdict = judge_kill(job(), task, dag_known=True, now=AFTER)
    assert not verdict.cancel
    assert verdict.by is None  # nothing is cancelled, so nothing is named: least of all the timeout


def test_another_trys_deadline_says_nothing_of_this_jobs_try():
    # A retry deferred with a deadline of its own; this job's try 2 is judged by the earlier rules.
    task = TaskRecord("deferred", 3, trigger_timeout=DEADLINE)
    assert not judge_kill(job(), task, dag_known=True, now=AFTER).cancel


def test_without_a_clock_no_deferral_is_judged_timed_out():
    task = TaskRecord("up_for_retry", 2, trigger_timeout=DEADLINE)
    assert not judge_kill(job(), task, dag_known=True).cancel


def test_a_run_past_its_dagrun_timeout_skips_the_task_and_its_job_is_cancelled_naming_it():
    task = TaskRecord("skipped", 2)
    verdict = judge_kill(job(), task, dag_known=True, now=AFTER)
    assert verdict.cancel
    assert verdict.by is not None and "dagrun_timeout" in verdict.by
