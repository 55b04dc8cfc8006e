"""What earlier tries of a task leave for the next one: a fatal failure ends the task, even if Airflow
starts another try on its own; a returned success that Airflow dropped is adopted, not trained again."""

from __future__ import annotations

from airflow_jobs_plugin.jobs.outcome import (
    AttemptRecord,
    EventStatus,
    JobEvent,
    ReplicaRecord,
    TryOutcome,
    delivered_job,
    failure_message,
    repeated_fatal_failure,
    summary,
    timed_out_try,
)

RECORD = TryOutcome(1, job="train-a1", message="Job default/train-a1 ended FAILED (reason ImagePull)")


def test_a_try_after_a_fatal_failure_in_the_same_run_of_the_task_fails_with_its_message():
    message = repeated_fatal_failure(RECORD, try_number=2, max_tries=2, retries=2)
    assert message is not None
    assert message.startswith("try 1 of this task already failed")
    assert message.endswith("ended FAILED (reason ImagePull)")


def test_a_try_after_the_task_was_cleared_runs_again():
    # Cleared after try 1: Airflow sets max_tries to 1 + retries, so this run of the task starts at try 2.
    assert repeated_fatal_failure(RECORD, try_number=2, max_tries=3, retries=2) is None


def test_a_fatal_failure_of_a_later_run_of_the_task_counts_from_its_first_try():
    record = TryOutcome(3, message="exited with code 3")
    # Cleared after try 2 (max_tries 2 + 2): try 3 failed fatally, try 4 must not run the job again.
    assert repeated_fatal_failure(record, try_number=4, max_tries=4, retries=2) is not None


def test_without_a_record_or_without_max_tries_the_try_runs():
    assert repeated_fatal_failure(None, try_number=2, max_tries=2, retries=2) is None
    assert repeated_fatal_failure(RECORD, try_number=2, max_tries=None, retries=2) is None


def test_the_try_that_recorded_the_failure_is_not_refused_on_its_own_rerun():
    assert repeated_fatal_failure(RECORD, try_number=1, max_tries=2, retries=2) is None


def test_a_success_returned_in_this_run_of_the_task_was_dropped_by_airflow_and_is_adopted_again():
    record = TryOutcome(1, job="train-a1")
    assert delivered_job(record, try_number=2, max_tries=1, retries=1) == ""


def test_a_success_returned_before_the_task_was_cleared_is_not_adopted_again():
    record = TryOutcome(1, job="train-a1")
    assert delivered_job(record, try_number=2, max_tries=2, retries=1) == "train-a1"


def test_a_returned_success_without_its_try_or_without_max_tries_is_never_adopted_again():
    older = TryOutcome.from_json("train-a1")  # a bare job name: which try returned it is unknown
    assert delivered_job(older, try_number=2, max_tries=1, retries=1) == "train-a1"
    assert delivered_job(TryOutcome(1, job="train-a1"), try_number=2, max_tries=None, retries=1) == "train-a1"


def test_nothing_returned_yet_lets_any_success_be_adopted():
    assert delivered_job(None, try_number=2, max_tries=1, retries=1) == ""


def test_a_stored_outcome_reads_back_as_written_and_garbage_reads_as_none():
    outcome = TryOutcome(2, job="train-a2", message="boom")
    assert TryOutcome.from_json(outcome.to_json()) == outcome
    assert TryOutcome.from_json(None) is None
    assert TryOutcome.from_json(["not", "a", "record"]) is None
    assert TryOutcome.from_json({"try": "x", "job": "j"}) == TryOutcome(0, job="j")


def test_a_try_after_a_cancel_in_the_same_run_of_the_task_says_it_was_cancelled():
    record = TryOutcome(
        1, job="train-a1", message="Job ml/train-a1 was cancelled by bob at T", cancelled=True
    )
    assert TryOutcome.from_json(record.to_json()) == record
    message = repeated_fatal_failure(record, try_number=2, max_tries=2, retries=2)
    assert message is not None and message.startswith("try 1 of this task was cancelled")
    assert message.endswith("was cancelled by bob at T")
    assert repeated_fatal_failure(record, try_number=2, max_tries=3, retries=2) is None  # cleared


# --- the trigger's final event: one writer, one reader ---

CANCELLED = JobEvent(
    status=EventStatus.FAILED,
    job_name="train-a2",
    kind="MPIJob",
    namespace="ml",
    state="CANCELLED",
    reason="Cancelled",
    message="cancelled by bob at 2026-11-23T21:00:00+00:00",
    exit_codes={"launcher": 137},
    replicas=(ReplicaRecord("launcher", 0, "train-a2-launcher", "Terminating"),),
    attempts=(
        AttemptRecord(1, "train-a1", "FAILED", "NodeLost", gpu_seconds=10.0),
        AttemptRecord(2, "train-a2", "CANCELLED", "Cancelled", gpu_seconds=5.0),
    ),
    log_tail=("epoch 3",),
    cancelled_by="bob",
    cancelled_at="2026-11-23T21:00:00+00:00",
)


def test_an_event_reads_back_as_written():
    assert JobEvent.from_payload(CANCELLED.to_payload()) == CANCELLED


def test_a_cancelled_job_is_fatal_and_its_message_names_who_and_when():
    assert CANCELLED.fatal and CANCELLED.cancelled and not CANCELLED.succeeded
    assert failure_message(CANCELLED).splitlines()[0] == (
        "MPIJob ml/train-a2 was cancelled by bob at 2026-11-23 21:00:00 UTC"
    )


def test_a_payload_of_the_previous_version_is_read():
    # Written by the previous triggerer (no cancelled_by / cancelled_at; the vanished job's dict).
    old_failure = {
        "status": "failed",
        "job_name": "train-a1",
        "kind": "Job",
        "namespace": "ml",
        "state": "FAILED",
        "reason": "BackoffLimitExceeded",
        "message": "failed",
        "failure_class": "fatal",
        "failure_message": "exited 1",
        "exit_codes": {"worker-0": 1},
        "replicas": [{"role": "worker", "index": 0, "pod": "p", "status": "Error"}],
        "attempts": [{"attempt": 1, "job_name": "train-a1", "state": "FAILED", "gpu_seconds": 3}],
        "gpu_seconds": 3,
        "log_tail": ["loss: nan"],
        "retryable": False,
    }
    event = JobEvent.from_payload(old_failure)
    assert event.fatal and event.exit_codes == {"worker-0": 1} and event.attempts[0].gpu_seconds == 3.0
    assert "exit codes worker-0=1" in failure_message(event)
    old_vanished = {"status": "error", "job_name": "x-a1", "state": "UNKNOWN", "reason": "JobDeleted"}
    gone = JobEvent.from_payload(old_vanished)
    assert gone.status is EventStatus.ERROR and not gone.fatal


def test_a_success_summary_adds_up_every_attempt():
    done = JobEvent.from_payload({**CANCELLED.to_payload(), "status": "success", "state": "SUCCEEDED"})
    result = summary(done)
    assert (result["attempts"], result["gpu_seconds"], result["state"]) == (2, 15.0, "SUCCEEDED")


def test_a_stopped_and_resumed_job_that_fails_is_one_attempt_in_its_message_and_summary():
    # Attempt 1 ran, was stopped by its user, resumed, and then failed: two runs, one attempt.
    event = JobEvent(
        status=EventStatus.FAILED,
        job_name="train-a1",
        kind="Job",
        namespace="ml",
        state="FAILED",
        reason="QueueTimeout",
        attempts=(
            AttemptRecord(1, "train-a1", "STOPPED", "Stopped", gpu_seconds=60.0),
            AttemptRecord(1, "train-a1", "FAILED", "QueueTimeout"),
        ),
    )
    assert "attempts" not in failure_message(event).splitlines()[0]
    assert summary(event)["attempts"] == 1
    retried = JobEvent(
        **{**vars(event), "attempts": (*event.attempts, AttemptRecord(2, "train-a2", "FAILED"))}
    )
    assert failure_message(retried).splitlines()[0].endswith("; after 2 attempts")
    assert summary(retried)["attempts"] == 2


def test_a_retry_never_follows_the_job_of_a_try_whose_deferral_timed_out():
    record = TryOutcome(2, job="train-a1-2-1", message="ran out of its execution_timeout")
    # retries=3, first run: tries 1..4; the record's try 2 came before this try 3.
    assert timed_out_try(record, try_number=3, max_tries=3, retries=3) == 2
    # After a clear (max_tries raised past the record's run) the record is forgotten.
    assert timed_out_try(record, try_number=5, max_tries=7, retries=3) is None
    assert timed_out_try(None, try_number=3, max_tries=3, retries=3) is None
