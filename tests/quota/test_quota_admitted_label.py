"""The ``admitted`` label goes with the ``admitted-at`` annotation in every write that sets or removes it,
so that the API server can list the jobs that may wait in the pool's queue (``!airflow-jobs.io/admitted``)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.queueing.quota import Reservation
from airflow_jobs_plugin.queueing.quota.ledger import (
    handoff_patch,
    preempt_patch,
    requeue_patch,
    unsuspend_patch,
)
from airflow_jobs_plugin.queueing.quota.requeue import Requeue

NOW = datetime(2026, 11, 26, 12, tzinfo=timezone.utc)


def job() -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train-a1",
            "resourceVersion": "7",
            "labels": {},
            "annotations": {labels.KUEUE_HANDOFF: "team-queue"},
        },
        "spec": {"suspend": True},
    }


def _label_and_annotation(patch: dict) -> tuple[object, object]:
    meta = patch["metadata"]
    return (meta.get("labels") or {}).get(labels.ADMITTED, "absent"), meta["annotations"].get(
        labels.ADMITTED_AT, "absent"
    )


@pytest.mark.parametrize("admit", [unsuspend_patch, handoff_patch], ids=["unsuspend", "kueue-handoff"])
def test_an_admission_writes_the_label_with_the_time(admit):
    label, when = _label_and_annotation(admit(job(), NOW))
    assert label == labels.ADMITTED_VALUE and when == "2026-11-26T12:00:00.000000Z"


def test_a_requeue_removes_both():
    outcome = Requeue(requeue_count=1, not_before=NOW, backoff=timedelta(seconds=10), message="stuck")
    assert _label_and_annotation(requeue_patch(job(), outcome)) == (None, None)


def test_a_preemption_removes_both():
    victim = Reservation(job="train-a1", group="g", user="u", gpus=2, uid="u1", admitted_at=NOW)
    assert _label_and_annotation(preempt_patch(job(), victim)) == (None, None)
