"""What the trigger logs and decides after each snapshot: pure rules, no cluster."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.outcome import DELETED_BY_SOMEONE
from airflow_jobs_plugin.lifecycle import (
    Failure,
    FailureClass,
    Health,
    JobSnapshot,
    JobState,
    Reason,
    ReplicaStatus,
)
from airflow_jobs_plugin.lifecycle.tracking import (
    SensorVerdict,
    Step,
    after_deletion,
    decide,
    exit_codes,
    interrupted_run,
    replica_summary,
    sensor_verdict,
    signature,
    state_line,
    stuck_for_good,
    who_cancelled,
)


def replica(role: str, index: int, status: str, exit_code: int | None = None) -> ReplicaStatus:
    return ReplicaStatus(
        role=role,
        index=index,
        pod=f"p-{role}-{index}",
        status=status,
        ready="0/1",
        restarts=0,
        node=None,
        health=Health.STARTING,
        exit_code=exit_code,
    )


def snap(
    state: JobState, reason: Reason = Reason.PENDING, *replicas: ReplicaStatus, message: str = ""
) -> JobSnapshot:
    return JobSnapshot(
        name="j",
        namespace="ns",
        kind="MPIJob",
        state=state,
        reason=reason,
        message=message,
        replicas=replicas,
    )


def failure(cls: FailureClass, reason: Reason = Reason.ERROR) -> Failure:
    return Failure(cls, reason, None, "")


MPI_STARTING = (
    replica("launcher", 0, "Init:1/2"),
    replica("worker", 0, "ContainerCreating"),
    replica("worker", 1, "ContainerCreating"),
)


def test_the_launcher_is_named_and_workers_are_counted_by_status():
    assert replica_summary(MPI_STARTING) == "launcher Init:1/2, workers 2/2 ContainerCreating"


def test_workers_in_mixed_states_are_counted_per_state_most_common_first():
    workers = [replica("worker", i, s) for i, s in enumerate(["Running", "Running", "CrashLoopBackOff"])]
    assert replica_summary(workers) == "workers 2/3 Running, 1/3 CrashLoopBackOff"


def test_a_single_pod_job_reads_as_one_worker():
    assert replica_summary([replica("worker", 0, "Running")]) == "worker Running"


def test_the_state_line_names_state_reason_and_replicas():
    line = state_line(snap(JobState.STARTING, Reason.INITIALIZING, *MPI_STARTING))
    assert line == "STARTING (Initializing; launcher Init:1/2, workers 2/2 ContainerCreating)"


def test_a_queued_line_carries_the_pools_message_not_the_replicas():
    line = state_line(snap(JobState.QUEUED, Reason.GROUP_QUOTA, message="group vision uses 6 of 8 GPUs"))
    assert line == "QUEUED (GroupQuota): group vision uses 6 of 8 GPUs"


BACKOFF = {
    "attempt": 1,
    "max_attempts": 3,
    "backoff": timedelta(seconds=30),
    "backoff_max": timedelta(minutes=10),
}


@pytest.mark.parametrize("state", [JobState.QUEUED, JobState.RUNNING, JobState.RETRYING, JobState.DEGRADED])
def test_a_live_job_is_watched(state):
    assert decide(snap(state), None, **BACKOFF).step is Step.WAIT


def test_a_success_finishes():
    assert decide(snap(JobState.SUCCEEDED, Reason.COMPLETED), None, **BACKOFF).step is Step.FINISH


def test_a_retryable_failure_with_attempts_left_retries_after_an_exponential_back_off():
    s = snap(JobState.FAILED, Reason.NODE_LOST)
    first = decide(s, failure(FailureClass.RETRYABLE, Reason.NODE_LOST), **BACKOFF)
    second = decide(s, failure(FailureClass.RETRYABLE, Reason.NODE_LOST), **{**BACKOFF, "attempt": 2})
    assert (first.step, first.delay) == (Step.RETRY, timedelta(seconds=30))
    assert (second.step, second.delay) == (Step.RETRY, timedelta(seconds=60))


def test_a_retryable_failure_on_the_last_attempt_finishes():
    d = decide(snap(JobState.FAILED), failure(FailureClass.RETRYABLE), **{**BACKOFF, "attempt": 3})
    assert (d.step, d.retryable) == (Step.FINISH, True)


def test_a_fatal_failure_finishes_without_another_attempt():
    d = decide(snap(JobState.FAILED), failure(FailureClass.FATAL), **BACKOFF)
    assert (d.step, d.retryable) == (Step.FINISH, False)


def test_a_permanent_image_pull_failure_after_a_back_off_is_failed_fast():
    s = snap(JobState.STARTING, Reason.IMAGE_PULL, replica("worker", 0, "ImagePullBackOff"))
    assert decide(s, failure(FailureClass.FATAL, Reason.IMAGE_PULL), **BACKOFF).step is Step.FAIL_FAST


def test_the_first_err_image_pull_is_not_yet_failed():
    s = snap(JobState.STARTING, Reason.IMAGE_PULL, replica("worker", 0, "ErrImagePull"))
    assert not stuck_for_good(s, failure(FailureClass.FATAL, Reason.IMAGE_PULL))


def test_a_rate_limited_pull_seen_in_the_events_is_waited_out():
    s = snap(JobState.STARTING, Reason.IMAGE_PULL, replica("worker", 0, "ImagePullBackOff"))
    events = [{"reason": "Failed", "message": "429 Too Many Requests - toomanyrequests: pull rate limit"}]
    assert not stuck_for_good(s, failure(FailureClass.FATAL, Reason.IMAGE_PULL), events)


def test_an_invalid_image_name_is_failed_at_once():
    s = snap(JobState.STARTING, Reason.INVALID_IMAGE_NAME, replica("worker", 0, "InvalidImageName"))
    assert stuck_for_good(s, failure(FailureClass.FATAL, Reason.INVALID_IMAGE_NAME))


def test_a_job_on_a_lost_node_is_ended_so_a_new_attempt_can_start():
    assert stuck_for_good(snap(JobState.UNKNOWN, Reason.NODE_LOST, replica("worker", 0, "Unknown")), None)


def test_exit_codes_are_reported_per_replica():
    s = snap(
        JobState.FAILED, Reason.ERROR, replica("launcher", 0, "Error", 1), replica("worker", 1, "Error", 137)
    )
    assert exit_codes(s) == {"launcher": 1, "worker-1": 137}


# --- a job object that is gone: what it ended as ---


def job_object(*, annotations: dict | None = None, conditions: list | None = None) -> dict:
    return {
        "kind": "Job",
        "metadata": {"name": "train-a1", "namespace": "ml", "annotations": annotations or {}},
        "spec": {"suspend": False},
        "status": {"conditions": conditions or [], "active": 1},
    }


NOW = datetime(2026, 11, 23, 21, 0, tzinfo=timezone.utc)


def test_a_live_job_deleted_without_a_verdict_was_cancelled_by_whoever_deletes_job_objects():
    gone, annotations = after_deletion(job_object(), now=NOW)
    assert (gone.state, gone.reason) == (JobState.CANCELLED, Reason.CANCELLED)
    assert annotations[labels.CANCELLED_BY] == DELETED_BY_SOMEONE
    assert gone.message == f"cancelled by {DELETED_BY_SOMEONE} at 2026-11-23 21:00:00 UTC"


def test_a_job_cancelled_from_the_ui_reads_as_cancelled_by_that_user_at_that_time():
    cancel = {
        labels.VERDICT: "Cancelled",
        labels.CANCELLED_BY: "bob",
        labels.CANCELLED_AT: "2026-11-23T20:59:00+00:00",
    }
    gone, annotations = after_deletion(job_object(annotations=cancel), now=NOW)
    assert gone.state is JobState.CANCELLED
    assert gone.message == "cancelled by bob at 2026-11-23 20:59:00 UTC"
    assert annotations[labels.CANCELLED_BY] == "bob"


def test_a_job_the_product_ended_and_then_removed_is_not_read_as_a_cancel():
    # TTL after success: the controller's Complete stands.
    done = [{"type": "Complete", "status": "True"}]
    gone, _ = after_deletion(job_object(conditions=done), now=NOW)
    assert gone.state is JobState.SUCCEEDED
    # A product verdict (a queue timeout) stands too.
    ruled = {labels.VERDICT: "QueueTimeout"}
    gone, annotations = after_deletion(job_object(annotations=ruled), now=NOW)
    assert (gone.state, gone.reason) == (JobState.FAILED, Reason.QUEUE_TIMEOUT)
    assert labels.CANCELLED_BY not in annotations


# --- stopped and cancelled jobs in the task log ---


def test_a_stopped_job_says_who_stopped_it_and_when():
    line = state_line(
        snap(JobState.STOPPED, Reason.STOPPED, message="stopped by bob at 21:00; resume to requeue")
    )
    assert line == "STOPPED: stopped by bob at 21:00; resume to requeue"


def test_a_stopped_job_is_watched_not_finished():
    assert decide(snap(JobState.STOPPED, Reason.STOPPED), None, **BACKOFF).step is Step.WAIT


def test_a_cancelled_job_says_who_cancelled_it():
    line = state_line(
        snap(JobState.CANCELLED, Reason.CANCELLED, *MPI_STARTING, message="cancelled by bob at 21:00")
    )
    assert line == "CANCELLED: cancelled by bob at 21:00"


# --- JobSensor: a target reached, passed, or out of reach ---


@pytest.mark.parametrize(
    ("state", "targets", "fails", "verdict"),
    [
        (JobState.RUNNING, ["RUNNING"], ["FAILED"], SensorVerdict.REACHED),
        (JobState.SUCCEEDED, ["RUNNING"], ["FAILED"], SensorVerdict.REACHED),  # passed through RUNNING
        (JobState.SUCCEEDED, ["STARTING"], [], SensorVerdict.REACHED),
        (JobState.QUEUED, ["RUNNING"], ["FAILED"], SensorVerdict.WAIT),
        (JobState.STOPPED, ["SUCCEEDED"], ["FAILED"], SensorVerdict.WAIT),
        (JobState.FAILED, ["RUNNING"], ["FAILED"], SensorVerdict.FAILED),
        (JobState.FAILED, ["SUCCEEDED"], [], SensorVerdict.FAILED),  # can never succeed now
        (JobState.CANCELLED, ["SUCCEEDED"], ["FAILED"], SensorVerdict.FAILED),
        (JobState.SUCCEEDED, ["FAILED"], [], SensorVerdict.FAILED),
    ],
)
def test_a_sensor_target_is_reached_when_the_job_is_in_it_or_has_passed_it(state, targets, fails, verdict):
    assert sensor_verdict(state, target_states=targets, fail_states=fails) is verdict


def test_a_finished_job_logs_its_final_state_once_whatever_its_pods_still_report():
    # The final look reads the pods again; a launcher or worker status changing under a job that has
    # already SUCCEEDED is not a new state for the task log.
    before = snap(JobState.SUCCEEDED, Reason.COMPLETED, replica("launcher", 0, "Running"))
    after = snap(JobState.SUCCEEDED, Reason.COMPLETED, replica("launcher", 0, "Completed"))
    assert signature(before) == signature(after)


def test_a_cancelled_job_still_in_the_cluster_reads_who_and_when_too():
    cancelled = snap(JobState.CANCELLED, Reason.CANCELLED, message="cancelled by bob")
    stamped = {labels.CANCELLED_BY: "bob", labels.CANCELLED_AT: "2026-11-23T20:59:00+00:00"}
    read, _ = who_cancelled(cancelled, stamped, now=NOW)
    assert read.message == "cancelled by bob at 2026-11-23 20:59:00 UTC"
    running = snap(JobState.RUNNING, Reason.RUNNING)
    assert who_cancelled(running, stamped, now=NOW)[0] is running


# --- runs interrupted before the job's end ---


def test_a_run_preempted_back_into_the_queue_is_recorded():
    ran = snap(JobState.RUNNING, Reason.RUNNING, replica("worker", 0, "Running"))
    record = interrupted_run(job_object(), ran, ran, snap(JobState.QUEUED, Reason.REQUEUED), NOW)
    assert record is not None
    assert (record.attempt, record.state, record.reason, record.finished_at) == (
        1,
        "REQUEUED",
        "Requeued",
        NOW.isoformat(),
    )


def test_a_run_a_user_stopped_is_recorded_as_stopped():
    ran = snap(JobState.RUNNING, Reason.RUNNING)
    record = interrupted_run(job_object(), ran, ran, snap(JobState.STOPPED, Reason.STOPPED), NOW)
    assert record is not None and record.state == "STOPPED"


def test_a_job_still_stopping_has_not_ended_its_run_yet():
    ran = snap(JobState.RUNNING, Reason.RUNNING)
    assert interrupted_run(job_object(), ran, ran, snap(JobState.TERMINATING, Reason.PREEMPTED), NOW) is None


def test_a_requeue_seen_only_as_requeued_is_one_run_and_not_one_per_look():
    queued, requeued = snap(JobState.QUEUED, Reason.PENDING), snap(JobState.QUEUED, Reason.REQUEUED)
    assert interrupted_run(job_object(), None, queued, requeued, NOW) is not None
    assert interrupted_run(job_object(), None, requeued, requeued, NOW) is None
    assert interrupted_run(job_object(), None, queued, queued, NOW) is None  # never admitted: no run
