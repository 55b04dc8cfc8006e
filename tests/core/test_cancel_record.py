"""The record a person's cancel leaves for its task try (jobs/cancel_record.py): its name, whose try a
job is, which earlier tries a new try reads, what it says, when it expires."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone

import pytest

from airflow_jobs_plugin.jobs import cancel_record, labels
from airflow_jobs_plugin.jobs.cancel_record import CancelRecord
from airflow_jobs_plugin.jobs.manifests import build_manifest
from airflow_jobs_plugin.jobs.naming import DNS_SUBDOMAIN, TaskIdentity
from airflow_jobs_plugin.jobs.outcome import same_run_of_task
from airflow_jobs_plugin.jobs.spec import JobSpec

AT = datetime(2026, 3, 1, 12, 0, 5, tzinfo=timezone.utc)
TASK = TaskIdentity("nightly", "train", "scheduled__2026-03-01T00:00:00+00:00", -1, 2)


def job_of(task: TaskIdentity, attempt: int = 1, workers: int = 1) -> dict:
    spec = JobSpec.build(image="trainer:1", group="vision", user="alice", gpus=1, workers=workers)
    return build_manifest(spec, name=task.job_name(attempt), task=task, attempt=attempt, queued_at=AT)


# --- record_name: one per task try, a DNS subdomain of bounded length ---


@pytest.mark.parametrize(
    "task",
    [
        TASK,
        TaskIdentity("d" * 250, "t" * 250, "r" * 250, 1023, 99),
        TaskIdentity("Überwachung", "训练", "manual__2026-03-01T00:00:00.123456+00:00", 7, 1),
        TaskIdentity("9lives", "---", "--", -1, 1),
    ],
)
def test_a_record_name_is_a_bounded_dns_subdomain_per_task_try(task):
    name = cancel_record.record_name(task)
    assert name.startswith(cancel_record.PREFIX)
    assert len(name) <= 70 and DNS_SUBDOMAIN.match(name)
    again = TaskIdentity(task.dag_id, task.task_id, task.run_id, task.map_index, task.try_number + 1)
    assert cancel_record.record_name(again) != name


@pytest.mark.parametrize("attempt", [1, 2, 37])
def test_the_record_of_a_job_is_found_from_any_attempt_s_name(attempt):
    assert cancel_record.record_name_of_job(TASK.job_name(attempt)) == cancel_record.record_name(TASK)


def test_a_name_the_product_does_not_give_jobs_has_no_record():
    assert cancel_record.record_name_of_job("hand-made") is None


# --- task_try_of: the try a job's annotations name, when its name and labels agree ---


@pytest.mark.parametrize("workers", [1, 2])
def test_a_job_the_operator_builds_names_its_task_try(workers):
    assert cancel_record.task_try_of(job_of(TASK, attempt=3, workers=workers)) == TASK


def _tampered(path: tuple[str, ...], value: str | None) -> dict:
    job = job_of(TASK)
    target = job
    for key in path[:-1]:
        target = target[key]
    if value is None:
        target.pop(path[-1], None)
    else:
        target[path[-1]] = value
    return job


OTHER = TaskIdentity("payroll", "train", "manual__1", -1, 1)


@pytest.mark.parametrize(
    ("path", "value", "why"),
    [
        (("metadata", "name"), OTHER.job_name(1), "named after another task's try"),
        (("metadata", "name"), "hand-made", "a name the product does not give"),
        (("metadata", "labels", labels.TASK_KEY), OTHER.instance_key(), "another task's key label"),
        (("metadata", "labels", labels.TRY), "1", "another try's label"),
        (("metadata", "annotations", labels.DAG_ID), "payroll", "annotations of another DAG"),
        (("metadata", "annotations", labels.TRY_NUMBER), "1", "annotated with another try"),
        (("metadata", "annotations", labels.TRY_NUMBER), "two", "an unreadable try"),
        (("metadata", "annotations", labels.RUN_ID), None, "no run"),
        (("metadata", "annotations", labels.MAP_INDEX), "x", "an unreadable map index"),
    ],
)
def test_a_job_whose_labels_disagree_with_its_annotations_names_no_try(path, value, why):
    assert cancel_record.task_try_of(_tampered(path, value)) is None, why


def test_a_job_of_no_task_try_needs_no_record():
    job = _tampered(("metadata", "annotations"), None)
    assert cancel_record.record_of(job, kind="Job", by="bob", at=AT, keep=timedelta(days=1)) is None


# --- lease and found: what is written is what is read back ---


def test_the_lease_says_who_cancelled_which_job_when_and_for_how_long():
    record = cancel_record.record_of(
        job_of(TASK, attempt=2, workers=2), kind="MPIJob", by="bob", at=AT, keep=timedelta(days=7)
    )
    assert record == CancelRecord(TASK, "MPIJob", TASK.job_name(2), "bob", AT, timedelta(days=7))
    lease = cancel_record.lease(record)
    assert (lease["apiVersion"], lease["kind"]) == ("coordination.k8s.io/v1", "Lease")
    assert lease["metadata"]["name"] == cancel_record.record_name(TASK)
    assert lease["metadata"]["labels"][labels.RECORD] == labels.CANCEL_RECORD_VALUE
    assert lease["spec"] == {
        "holderIdentity": "bob",
        "acquireTime": "2026-03-01T12:00:05.000000Z",
        "renewTime": "2026-03-01T12:00:05.000000Z",
        "leaseDurationSeconds": 7 * 86400,
    }
    seen = cancel_record.found(lease)
    assert (seen.job, seen.by, seen.at, seen.expires_at) == (
        TASK.job_name(2),
        "bob",
        AT,
        AT + timedelta(days=7),
    )


def test_a_record_missing_its_fields_is_still_a_cancel_kept_the_default_time():
    bare = {
        "metadata": {"name": cancel_record.record_name(TASK), "creationTimestamp": "2026-03-01T12:00:05Z"}
    }
    seen = cancel_record.found(bare)
    assert (seen.job, seen.by, seen.at) == (None, None, AT)
    assert seen.expires_at == AT + cancel_record.DEFAULT_KEEP
    message = cancel_record.refusal(bare, 2, now=AT)
    assert message is not None and "by someone at 2026-03-01 12:00:05 UTC" in message


# --- earlier_tries: a retry reads its run's earlier tries; a clear starts a run that reads none ---


@pytest.mark.parametrize(
    ("try_number", "max_tries", "retries", "expected"),
    [
        (1, 2, 2, []),  # the first try of the first run
        (2, 2, 2, [1]),  # a retry
        (3, 2, 2, [1, 2]),  # a second retry: both earlier tries
        (2, 3, 2, []),  # cleared after try 1: max_tries = 1 + retries, a new run
        (3, 3, 2, [2]),  # the retry of the cleared run reads only its own run
        (5, 6, 2, []),  # cleared after try 4
        (2, None, 2, []),  # unknown max_tries: nothing is read (same_run_of_task's answer)
        (2, 0, 0, [1]),  # retries=0 and a stale start (a scheduler race): still the same run
    ],
)
def test_a_try_reads_the_records_of_the_earlier_tries_of_its_run_only(
    try_number, max_tries, retries, expected
):
    tries = list(cancel_record.earlier_tries(try_number=try_number, max_tries=max_tries, retries=retries))
    assert tries == expected
    # One rule with the task state store's (outcome.same_run_of_task), for every try before this one.
    assert tries == [
        n
        for n in range(1, try_number)
        if same_run_of_task(n, try_number=try_number, max_tries=max_tries, retries=retries)
    ]


def test_record_names_are_the_earlier_tries_newest_first():
    task = TaskIdentity("nightly", "train", "run-1", -1, 4)
    names = cancel_record.record_names(task, max_tries=3, retries=3)
    assert [n for n, _ in names] == [3, 2, 1]
    assert names[0][1] == cancel_record.record_name(TaskIdentity("nightly", "train", "run-1", -1, 3))


# --- refusal: who cancelled and when, until the record expires ---


def test_a_record_ends_a_later_try_saying_who_cancelled_which_job_and_when():
    record = cancel_record.lease(
        CancelRecord(TASK, "MPIJob", TASK.job_name(1), "bob", AT, timedelta(hours=1))
    )
    assert cancel_record.refusal(record, 2, now=AT + timedelta(minutes=59)) == (
        f"try 2 of this task was cancelled (job {TASK.job_name(1)}, by bob at 2026-03-01 12:00:05 UTC) and "
        "the task was not cleared since: not running the job again (clear the task to run it again)"
    )


def test_an_expired_record_no_longer_counts():
    record = cancel_record.lease(CancelRecord(TASK, "Job", TASK.job_name(1), "bob", AT, timedelta(hours=1)))
    assert cancel_record.refusal(record, 2, now=AT + timedelta(hours=1)) is None


# --- expired_records: what the orphan sweep deletes ---


def _record(name_task: TaskIdentity, keep: timedelta, uid: str) -> dict:
    lease = cancel_record.lease(CancelRecord(name_task, "Job", name_task.job_name(1), "bob", AT, keep))
    lease["metadata"]["uid"] = uid
    return lease


def test_the_sweep_deletes_only_expired_records_by_name_and_uid():
    old = _record(TASK, timedelta(hours=1), "u-old")
    fresh = _record(OTHER, timedelta(days=7), "u-fresh")
    deleting = copy.deepcopy(old)
    deleting["metadata"]["uid"] = "u-deleting"
    deleting["metadata"]["deletionTimestamp"] = "2026-03-01T13:00:00Z"
    # Another Lease that happens to carry the label is not a record unless it is named as one.
    leader = _record(TASK, timedelta(seconds=1), "u-leader")
    leader["metadata"]["name"] = "some-controller-leader"
    unlabelled = _record(TASK, timedelta(seconds=1), "u-unlabelled")
    del unlabelled["metadata"]["labels"][labels.RECORD]
    now = AT + timedelta(hours=2)
    found = cancel_record.expired_records([old, fresh, deleting, leader, unlabelled], now)
    assert found == [(cancel_record.record_name(TASK), "u-old")]


# --- keep_from: [airflow_jobs] cancel_record_ttl ---


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, timedelta(days=7)),
        ("", timedelta(days=7)),
        ("3600", timedelta(hours=1)),
        (" 60 ", timedelta(minutes=1)),
    ],
)
def test_the_keep_time_is_whole_seconds_with_a_week_by_default(value, expected):
    assert cancel_record.keep_from(value) == expected


@pytest.mark.parametrize("value", ["0", "-5", "1h", "2147483648"])
def test_a_keep_time_a_lease_cannot_hold_is_refused_naming_the_option(value):
    with pytest.raises(
        ValueError, match=r"\[airflow_jobs\] cancel_record_ttl must be whole seconds from 1 to"
    ):
        cancel_record.keep_from(value)
