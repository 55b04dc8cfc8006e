"""Failure classes: what a retry can fix (infrastructure, transient pulls) and what it cannot."""

from __future__ import annotations

import pytest

from airflow_jobs_plugin.lifecycle import (
    FAILURE_REASONS,
    FailureClass,
    JobSnapshot,
    JobState,
    Reason,
    classify_failure,
    is_transient_pull_error,
    snapshot,
)

from .factories import batch_job, event, job_condition, job_pod, waiting
from .scenarios import BY_ID, NOT_FOUND, NOW, RATE_LIMITED, Scenario

RETRYABLE, FATAL = FailureClass.RETRYABLE, FailureClass.FATAL


def take(scenario: Scenario) -> JobSnapshot:
    return snapshot(
        scenario.job,
        scenario.pods,
        scenario.events,
        queue=scenario.queue,
        reservation=scenario.reservation,
        now=scenario.now,
    )


@pytest.mark.parametrize(
    ("scenario", "expected"),
    [
        ("retrying-after-pod-gc-on-lost-node", RETRYABLE),
        ("failed-node-lost", RETRYABLE),
        ("unknown-only-pod-on-lost-node", RETRYABLE),
        ("retrying-after-kubelet-eviction", RETRYABLE),
        ("failed-mpi-worker-evicted", RETRYABLE),
        ("retrying-after-preemption-by-scheduler", RETRYABLE),
        ("failed-after-preemption", RETRYABLE),
        ("failed-invalid-image-name", FATAL),
        ("failed-image-pull-after-deadline", FATAL),
        ("failed-container-cannot-run", FATAL),
        ("failed-create-container-config-error", FATAL),
        ("failed-oom-killed", FATAL),
        ("failed-backoff-limit-exceeded", FATAL),
        ("failed-error-exit-without-retries", FATAL),
        ("failed-deadline-exceeded-while-running", FATAL),
        ("failed-queue-timeout", FATAL),
        ("failed-over-quota", FATAL),
        ("failed-over-requeue-limit", FATAL),
        ("cancelled-by-user", FATAL),
        ("unknown-job-object-missing", FATAL),
    ],
)
def test_default_class_of_each_failure(scenario, expected):
    assert classify_failure(take(BY_ID[scenario])).failure_class == expected


def _image_pull_failure(message: str) -> JobSnapshot:
    pod = job_pod(
        phase="Failed",
        ready=False,
        statuses=[waiting("main", "ImagePullBackOff", 'Back-off pulling image "x"')],
    )
    job = batch_job(
        failed=1,
        conditions=[
            job_condition("Failed", "DeadlineExceeded", "Job was active longer than specified deadline")
        ],
    )
    return snapshot(job, [pod], [event("Pod", pod["metadata"]["name"], "Failed", message)], now=NOW)


def test_registry_rate_limit_is_a_transient_image_pull_failure():
    failure = classify_failure(_image_pull_failure(RATE_LIMITED))
    assert (failure.reason, failure.failure_class) == (Reason.IMAGE_PULL, RETRYABLE)
    assert failure.retryable


def test_image_not_found_after_back_off_is_fatal():
    failure = classify_failure(_image_pull_failure(NOT_FOUND))
    assert (failure.reason, failure.failure_class) == (Reason.IMAGE_PULL, FATAL)
    assert not failure.retryable


@pytest.mark.parametrize(
    ("message", "transient"),
    [
        (
            "429 Too Many Requests - Server message: toomanyrequests: You have reached your pull rate limit.",
            True,
        ),
        ("dial tcp 10.0.0.5:443: i/o timeout", True),
        ("received unexpected HTTP status: 503 Service Unavailable", True),
        ("net/http: TLS handshake timeout", True),
        ("manifest unknown: manifest unknown", False),
        (
            "pull access denied for vision/train, repository does not exist or may require 'docker login'",
            False,
        ),
        ("failed to resolve reference: unauthorized: authentication required", False),
        ("registry.example.com/vision/train:1.4: not found", False),
        ("dial tcp: lookup registry.exmaple.com: no such host", False),
        ("something nobody has seen before", False),
    ],
)
def test_image_pull_messages(message, transient):
    assert is_transient_pull_error(message) is transient


def test_author_declared_retryable_exit_code_makes_an_error_retryable():
    failure = classify_failure(take(BY_ID["failed-backoff-limit-exceeded"]), retryable_exit_codes={1})
    assert (failure.failure_class, failure.exit_code) == (RETRYABLE, 1)


def test_author_declared_retryable_exit_code_137_makes_oom_retryable():
    assert classify_failure(take(BY_ID["failed-oom-killed"]), retryable_exit_codes=[137]).retryable


def test_oom_stays_fatal_when_exit_codes_default_to_retryable():
    failure = classify_failure(take(BY_ID["failed-oom-killed"]), exit_code_default=RETRYABLE)
    assert failure.failure_class == FATAL


def test_fatal_exit_code_wins_over_retryable_default():
    snap = take(BY_ID["failed-error-exit-without-retries"])  # exit code 3
    assert classify_failure(snap, exit_code_default=RETRYABLE).retryable
    assert not classify_failure(snap, exit_code_default=RETRYABLE, fatal_exit_codes=(3,)).retryable


def test_fatal_exit_code_wins_over_retryable_exit_code():
    snap = take(BY_ID["failed-error-exit-without-retries"])
    assert not classify_failure(snap, retryable_exit_codes=(3,), fatal_exit_codes=(3,)).retryable


def test_exit_code_lists_do_not_touch_infrastructure_failures():
    snap = take(BY_ID["failed-node-lost"])  # the kill's exit code 137
    assert classify_failure(snap, fatal_exit_codes=(137,)).retryable


def test_retrying_snapshot_can_be_classified_too():
    failure = classify_failure(take(BY_ID["retrying-after-non-zero-exit"]), retryable_exit_codes=(1,))
    assert (failure.reason, failure.failure_class) == (Reason.ERROR, RETRYABLE)


@pytest.mark.parametrize(
    "scenario", ["running-single-pod", "succeeded-job-complete", "queued-behind-group-quota"]
)
def test_snapshots_without_failure_cannot_be_classified(scenario):
    with pytest.raises(ValueError, match="not a failure"):
        classify_failure(take(BY_ID[scenario]))


def test_every_failed_state_reason_can_be_classified():
    from airflow_jobs_plugin.lifecycle import STATE_REASONS

    assert set(STATE_REASONS[JobState.FAILED]) <= FAILURE_REASONS
