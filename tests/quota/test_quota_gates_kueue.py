"""The pool in front of a Kueue that takes jobs at creation: its admission gate, the hand-over that lifts
it, and the rules that say when Kueue has a job the pool never named a queue for (kueue.py)."""

from __future__ import annotations

from datetime import datetime, timezone

from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.manifests import pool_gate
from airflow_jobs_plugin.queueing import kueue
from airflow_jobs_plugin.queueing.quota.ledger import awaits_release, handed_to_kueue, handoff_patch

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=timezone.utc)


def job(*, queue: str | None = None, gated: bool = True, handoff: str | None = None, admitted=False) -> dict:
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "ml", "uid": "u1", "labels": {}, "annotations": {}},
        "spec": {"suspend": True, "template": {"spec": {"containers": []}}},
    }
    if gated:
        body = pool_gate(body)
    if queue:
        body["metadata"]["labels"][kueue.QUEUE_NAME_LABEL] = queue
    if handoff:
        body["metadata"]["annotations"][labels.KUEUE_HANDOFF] = handoff
    if admitted:
        body["metadata"]["labels"][labels.ADMITTED] = labels.ADMITTED_VALUE
    return body


def test_every_pool_job_is_created_behind_the_pools_admission_gate():
    assert kueue.gates(job()) == (kueue.POOL_GATE,)
    assert kueue.gated_by_pool(job())


def test_a_gate_someone_else_set_stays_when_the_pool_adds_its_own():
    body = job(gated=False)
    body["metadata"]["annotations"][kueue.ADMISSION_GATE_ANNOTATION] = "example.com/budget"
    assert kueue.gates(pool_gate(body)) == ("example.com/budget", kueue.POOL_GATE)
    assert kueue.gate_annotation_without_pool(pool_gate(body)) == "example.com/budget"


def test_a_job_kueue_gave_its_default_queue_still_waits_for_the_pool():
    taken = job(queue=kueue.DEFAULT_LOCAL_QUEUE)
    assert kueue.manages(taken)
    assert not handed_to_kueue(taken)
    assert awaits_release(taken)


def test_the_hand_over_lifts_the_gate_and_keeps_the_queue_kueue_gave():
    patch = handoff_patch(job(queue=kueue.DEFAULT_LOCAL_QUEUE), NOW)
    assert patch["metadata"]["annotations"][kueue.ADMISSION_GATE_ANNOTATION] is None
    assert patch["metadata"]["labels"][kueue.QUEUE_NAME_LABEL] == kueue.DEFAULT_LOCAL_QUEUE


def test_the_hand_over_names_the_queue_the_task_asked_for_over_kueues_default():
    patch = handoff_patch(job(queue=kueue.DEFAULT_LOCAL_QUEUE, handoff="team-a"), NOW)
    assert patch["metadata"]["labels"][kueue.QUEUE_NAME_LABEL] == "team-a"


def test_a_job_a_kueue_managing_every_job_took_without_a_queue_is_handed_to_its_default():
    patch = handoff_patch(job(), NOW)
    assert patch["metadata"]["labels"][kueue.QUEUE_NAME_LABEL] == kueue.DEFAULT_LOCAL_QUEUE


def test_a_handed_over_job_is_kueues_and_no_longer_awaits_the_pool():
    handed = job(queue="team-a", gated=False, admitted=True)
    assert handed_to_kueue(handed)
    assert not awaits_release(handed)


def test_kueue_takes_unlabelled_jobs_only_when_it_manages_them_and_the_namespace_is_selected():
    ml = {kueue.NAMESPACE_NAME_LABEL: "ml"}
    assert not kueue.takes_unlabelled_jobs({}, ml)
    assert not kueue.takes_unlabelled_jobs({"manageJobsWithoutQueueName": False}, ml)
    assert kueue.takes_unlabelled_jobs({"manageJobsWithoutQueueName": True}, ml)
    system = {kueue.NAMESPACE_NAME_LABEL: "kube-system"}
    assert not kueue.takes_unlabelled_jobs({"manageJobsWithoutQueueName": True}, system)
    selected = {
        "manageJobsWithoutQueueName": True,
        "managedJobsNamespaceSelector": {"matchLabels": {"team": "ml"}},
    }
    assert not kueue.takes_unlabelled_jobs(selected, ml)
    assert kueue.takes_unlabelled_jobs(selected, {**ml, "team": "ml"})


def test_a_kueue_that_copies_no_gate_to_the_workload_does_not_honour_gates():
    workload = {"metadata": {"name": "job-train-1", "annotations": {}}}
    assert kueue.ignores_gate(job(queue="default"), workload)
    honoured = {
        "metadata": {"name": "job-train-1", "annotations": {kueue.ADMISSION_GATE_ANNOTATION: kueue.POOL_GATE}}
    }
    assert not kueue.ignores_gate(job(queue="default"), honoured)


def test_a_deactivated_workload_is_the_end_of_the_job_in_kueues_words():
    workload = {
        "metadata": {"name": "job-train-1"},
        "spec": {"active": False},
        "status": {
            "conditions": [
                {
                    "type": "Evicted",
                    "status": "True",
                    "reason": "Deactivated",
                    "message": "The workload is deactivated",
                }
            ]
        },
    }
    said = kueue.deactivation(workload)
    assert said is not None and "deactivated its Workload job-train-1" in said and "is deactivated" in said
    assert kueue.deactivation({**workload, "spec": {"active": True}}) is None
