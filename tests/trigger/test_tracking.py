"""What the trigger logs and decides after each snapshot: pure rules, no cluster."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_jobs_plugin.lifecycle import (
    Failure,
    FailureClass,
    Health,
    JobSnapshot,
    JobState,
    Reason,
    ReplicaStatus,
)
from airflow_jobs_plugin.tracking import Step, decide, exit_codes, replica_summary, state_line, stuck_for_good


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
