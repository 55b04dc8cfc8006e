"""The one typed view of a job (jobview.py): each reading, one rule per test."""

from __future__ import annotations

from datetime import datetime, timezone

from package_source import findings

from airflow_jobs_plugin.jobs import kinds, labels
from airflow_jobs_plugin.jobs.jobview import JobView
from airflow_jobs_plugin.queueing.quota import jobs as pool_jobs

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
    assert pool_jobs.admitted_at_of(obj) == TEN
    assert pool_jobs.is_finished(obj)


def test_a_metadata_only_object_is_read_alike():
    partial = {
        "kind": "MPIJob",
        "apiVersion": "kubeflow.org/v2beta1",
        "metadata": {"name": "t", "labels": {labels.GROUP: "nlp"}},
    }
    assert (JobView(partial).group, JobView(partial).kind) == ("nlp", kinds.MPI_JOB)


# --- the view is the one reader ---------------------------------------------------------------------

READ_KEYS = frozenset({"GROUP_NAME", "USER_NAME", "GROUP", "USER", "VERDICT", "ADMITTED_AT"})
# Modules that read those keys themselves, each with why.
OWN_READERS = {
    "jobs/jobview.py": "the view",
    "jobs/kinds/mpi.py": "below the view: the MPIJob's ending reads its verdict",
    "readmodel/nodes.py": "a pod's annotations, not a job's",
    "queueing/queue_clock.py": "an annotation map it is handed before the write that changes it",
}


def _reads_of_keys(source: str) -> list[int]:
    """Lines that read one of READ_KEYS from a mapping: ``x.get(labels.KEY)`` or ``labels.KEY in x``."""
    import ast

    def is_key(node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and node.attr in READ_KEYS

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            if node.args and is_key(node.args[0]):
                found.append(node.lineno)
        elif isinstance(node, ast.Compare) and is_key(node.left):
            if any(isinstance(op, ast.In | ast.NotIn) for op in node.ops):
                found.append(node.lineno)
    return found


def test_group_user_verdict_and_admitted_at_are_read_through_the_view():
    assert findings(_reads_of_keys, OWN_READERS) == set(), "read them through jobview.JobView"


def test_the_check_sees_a_get_and_a_membership_test():
    source = "a = ann.get(labels.VERDICT)\nb = labels.ADMITTED_AT not in ann\nc = ann.get(labels.DAG_ID)\n"
    assert _reads_of_keys(source) == [1, 2]
