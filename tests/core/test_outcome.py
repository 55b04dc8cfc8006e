"""What earlier tries of a task leave for the next one: a fatal failure ends the task, even if Airflow
starts another try on its own; a returned success that Airflow dropped is adopted, not trained again."""

from __future__ import annotations

from airflow_jobs_plugin.outcome import TryOutcome, delivered_job, repeated_fatal_failure

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
