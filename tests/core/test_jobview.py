"""The one typed view of a job (jobview.py): each reading, one rule per test."""

from __future__ import annotations

from datetime import datetime, timezone

from airflow_jobs_plugin import kinds, labels
from airflow_jobs_plugin.jobview import JobView
from airflow_jobs_plugin.quota import jobs as pool_jobs

AT = "2026-01-01T10:00:00.000000Z"
TEN = datetime(2026, 1, 1, 10, tzinfo=timezone.utc)


def job(annotations=None, job_labels=None, spec=None, status=None, **meta) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train-a1",
            "annotations": annotations or {},
            "labels": job_labels or {},
            **meta,
        },
        "spec": spec or {},
        "status": status or {},
    }


def test_the_exact_group_and_user_annotations_win_over_the_labels_slugs():
    view = JobView(
        job(
            {labels.GROUP_NAME: "Vision Team", labels.USER_NAME: "alice@example.com"},
            {labels.GROUP: "vision-team", labels.USER: "alice-example.com"},
        )
    )
    assert (view.group, view.user) == ("Vision Team", "alice@example.com")


def test_without_annotations_the_labels_name_group_and_user():
    view = JobView(job(job_labels={labels.GROUP: "vision", labels.USER: "alice"}))
    assert (view.group, view.user) == ("vision", "alice")


def test_a_job_with_neither_has_no_group_or_user():
    assert (JobView(job()).group, JobView(job()).user) == (None, None)


def test_a_verdict_is_read_and_an_empty_one_is_none():
    assert (
        JobView(job({labels.VERDICT: "QueueTimeout", labels.VERDICT_MESSAGE: "waited"})).verdict
        == "QueueTimeout"
    )
    assert JobView(job({labels.VERDICT: ""})).verdict is None


def test_admitted_at_parses_and_an_unparseable_time_reads_as_absent():
    assert JobView(job({labels.ADMITTED_AT: AT})).admitted_at == TEN
    assert JobView(job({labels.ADMITTED_AT: "yesterday"})).admitted_at is None
    assert JobView(job()).admitted_at is None


def test_a_stop_mark_stops_the_job_even_when_its_time_does_not_parse():
    view = JobView(job({labels.STOPPED_AT: "garbled"}))
    assert view.stopped and view.stopped_at is None


def test_suspended_is_the_kinds_answer():
    assert JobView(job(spec={"suspend": True})).suspended
    mpijob = {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "spec": {"runPolicy": {"suspend": True}},
    }
    assert JobView(mpijob).kind is kinds.MPI_JOB and JobView(mpijob).suspended


def test_a_job_is_finished_by_its_controllers_final_word_or_by_a_verdict():
    failed = job(status={"conditions": [{"type": "Failed", "status": "True", "lastTransitionTime": AT}]})
    assert JobView(failed).finished and JobView(failed).finished_at == TEN
    assert JobView(job({labels.VERDICT: "NodeLost"})).finished
    assert not JobView(job()).finished and JobView(job()).finished_at is None


def test_completion_time_is_when_it_finished():
    done = job(status={"completionTime": AT, "conditions": [{"type": "Complete", "status": "True"}]})
    assert JobView(done).finished_at == TEN


def test_creation_and_deletion_are_read_from_metadata():
    view = JobView(job(creationTimestamp=AT, deletionTimestamp=AT, namespace="ml", uid="u-1"))
    assert (view.created_at, view.deleting, view.namespace, view.uid) == (TEN, True, "ml", "u-1")


def test_the_pools_readers_are_the_views():
    obj = job({labels.GROUP_NAME: "vision", labels.ADMITTED_AT: AT, labels.VERDICT: "X"})
    assert pool_jobs.group_of(obj) == "vision"
    assert pool_jobs.admitted_at_of(obj) == TEN
    assert pool_jobs.is_finished(obj)


def test_a_metadata_only_object_is_read_alike():
    partial = {
        "kind": "MPIJob",
        "apiVersion": "kubeflow.org/v2beta1",
        "metadata": {"name": "t", "labels": {labels.GROUP: "nlp"}},
    }
    assert (JobView(partial).group, JobView(partial).kind) == ("nlp", kinds.MPI_JOB)
