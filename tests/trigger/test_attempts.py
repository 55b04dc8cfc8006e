"""A retryable failure becomes a new attempt cloned from the failed attempt's cluster object."""

from __future__ import annotations

from datetime import datetime, timezone

from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.attempts import attempt_of, latest_attempt, next_attempt

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc)
LATER = datetime(2026, 11, 22, 12, 1, 30, tzinfo=timezone.utc)


def failed_job(kind: str = "Job") -> dict:
    template = {
        "metadata": {
            "labels": {
                labels.ATTEMPT: "1",
                "controller-uid": "u-1",
                labels.CONTROLLER_UID: "u-1",
                labels.BATCH_JOB_NAME: "train-a1",
                labels.TASK_KEY: "k",
            }
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "trainer:1",
                    "env": [
                        {"name": "JOB_ATTEMPT", "value": "1"},
                        {"name": "JOB_NAME", "value": "train-a1"},
                        {"name": "SECRET_TOKEN", "value": "s3cr3t"},
                    ],
                }
            ]
        },
    }
    meta = {
        "name": "train-a1",
        "namespace": "default",
        "uid": "u-1",
        "resourceVersion": "42",
        "creationTimestamp": "2026-11-22T11:00:00Z",
        "labels": {
            labels.ATTEMPT: "1",
            labels.TASK_KEY: "k",
            labels.MANAGED_BY: labels.MANAGED_BY_VALUE,
            labels.CREATED: "1795864800",
            labels.ADMITTED: labels.ADMITTED_VALUE,
        },
        "annotations": {
            labels.QUEUED_AT: "2026-11-22T11:00:00Z",
            labels.ADMITTED_AT: "2026-11-22T11:00:05Z",
            labels.REQUEUE_COUNT: "2",
        },
    }
    if kind == "MPIJob":
        return {
            "apiVersion": "kubeflow.org/v2beta1",
            "kind": "MPIJob",
            "metadata": meta,
            "spec": {
                "runPolicy": {"suspend": False, "backoffLimit": 0},
                "mpiReplicaSpecs": {
                    "Launcher": {"replicas": 1, "template": template},
                    "Worker": {"replicas": 2, "template": template},
                },
            },
            "status": {"conditions": [{"type": "Failed", "status": "True"}]},
        }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "suspend": False,
            "selector": {"matchLabels": {labels.CONTROLLER_UID: "u-1"}},
            "template": template,
        },
        "status": {"failed": 1, "conditions": [{"type": "Failed", "status": "True"}]},
    }


def test_next_attempt_of_a_job_is_a_fresh_suspended_object():
    new = next_attempt(failed_job(), name="train-a2", attempt=2, not_before=LATER, now=NOW)
    assert new["metadata"]["name"] == "train-a2"
    assert new["spec"]["suspend"] is True
    assert "status" not in new
    assert "selector" not in new["spec"]
    for key in ("uid", "resourceVersion", "creationTimestamp"):
        assert key not in new["metadata"]
    tlabels = new["spec"]["template"]["metadata"]["labels"]
    assert labels.CONTROLLER_UID not in tlabels and "controller-uid" not in tlabels
    assert tlabels[labels.ATTEMPT] == "2"
    assert attempt_of(new) == 2


def test_next_attempt_keeps_the_original_queue_position_and_carries_the_back_off():
    new = next_attempt(failed_job(), name="train-a2", attempt=2, not_before=LATER, now=NOW)
    ann = new["metadata"]["annotations"]
    assert ann[labels.QUEUED_AT] == "2026-11-22T11:00:00Z"
    # Written as every time the product writes, to the microsecond (objects.rfc3339).
    assert ann[labels.REQUEUE_NOT_BEFORE] == "2026-11-22T12:01:30.000000Z"
    assert ann[labels.REQUEUE_COUNT] == "0"
    assert labels.ADMITTED_AT not in ann


def test_next_attempt_is_labelled_as_created_now_and_not_admitted():
    new = next_attempt(failed_job(), name="train-a2", attempt=2, not_before=LATER, now=NOW)
    assert new["metadata"]["labels"][labels.CREATED] == str(int(NOW.timestamp()))
    assert labels.ADMITTED not in new["metadata"]["labels"]


def test_next_attempt_updates_the_attempt_env_and_keeps_the_rest():
    new = next_attempt(failed_job(), name="train-a2", attempt=2, not_before=LATER, now=NOW)
    env = {e["name"]: e["value"] for e in new["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env == {"JOB_ATTEMPT": "2", "JOB_NAME": "train-a2", "SECRET_TOKEN": "s3cr3t"}


def test_next_attempt_of_an_mpi_job_suspends_through_the_run_policy():
    new = next_attempt(failed_job("MPIJob"), name="train-a2", attempt=2, not_before=LATER, now=NOW)
    assert new["spec"]["runPolicy"] == {"suspend": True, "backoffLimit": 0}
    for replica in new["spec"]["mpiReplicaSpecs"].values():
        assert replica["template"]["metadata"]["labels"][labels.ATTEMPT] == "2"


def test_the_previous_object_is_not_modified():
    old = failed_job()
    next_attempt(old, name="train-a2", attempt=2, not_before=LATER, now=NOW)
    assert old == failed_job()


def test_latest_attempt_is_the_highest_attempt_label():
    a1, a3, a2 = ({"metadata": {"name": f"x-a{n}", "labels": {labels.ATTEMPT: str(n)}}} for n in (1, 3, 2))
    assert latest_attempt([a1, a3, a2]) is a3
    assert latest_attempt([]) is None


def test_attempt_of_an_unlabelled_or_garbled_object_is_one():
    assert attempt_of({"metadata": {}}) == 1
    assert attempt_of({"metadata": {"labels": {labels.ATTEMPT: "many"}}}) == 1


def test_next_attempt_of_a_job_the_product_ended_gets_the_authors_deadline_back():
    """A job ruled failed is ended through its own one-second deadline (quota.ledger.verdict_patch);
    a retry cloned from it must not inherit that deadline, or the new attempt fails at once."""
    from airflow_jobs_plugin.queueing.quota.ledger import verdict_patch

    job = failed_job()
    job["spec"]["activeDeadlineSeconds"] = 86400
    patch = verdict_patch(job, "NodeLost", "node gone")
    ended = failed_job()
    ended["spec"].update(patch["spec"])
    ended["metadata"]["annotations"].update(patch["metadata"]["annotations"])
    assert ended["spec"]["activeDeadlineSeconds"] == 1

    new = next_attempt(ended, name="train-a2", attempt=2, not_before=LATER, now=NOW)
    assert new["spec"]["activeDeadlineSeconds"] == 86400
    assert "parallelism" not in new["spec"]
    assert labels.ENDED_SPEC not in new["metadata"]["annotations"]


def test_a_second_ruling_keeps_the_first_recorded_deadline():
    from airflow_jobs_plugin.queueing.quota.ledger import verdict_patch

    job = failed_job()
    job["metadata"]["annotations"][labels.ENDED_SPEC] = '{"activeDeadlineSeconds": 600}'
    job["spec"]["activeDeadlineSeconds"] = 1
    patch = verdict_patch(job, "ImagePull", "not found")
    assert labels.ENDED_SPEC not in patch["metadata"]["annotations"]
