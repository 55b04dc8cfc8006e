"""`kubectl delete job` frees the job's GPUs only once its pods are gone: a background deletion removes
the job at once and the garbage collector its pods after, each stopping within its grace period; a
foreground deletion keeps the job until then. A pod its kubelet never confirms gone (a lost node) stops
holding the quota a minute past its deletion deadline."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from airflow_jobs_plugin.queueing.quota.ledger import POD_GONE_MARGIN, pods_hold_gpus
from airflow_jobs_plugin.queueing.quota.ledger_model import (
    DropReason,
    Ledger,
    ObservedJob,
    observed_job,
    reconcile_drops,
)
from airflow_jobs_plugin.queueing.quota.model import Reservation

NOW = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
HELD = Reservation(
    job="train", group="vision", user="bob", gpus=4, uid="uid-train", admitted_at=NOW, namespace="ml"
)
LEDGER = Ledger("vision", (HELD,))


def pod(*, deleting_by: datetime | None = None, phase: str = "Running", node: str | None = "gpu-1") -> dict:
    meta: dict = {"name": "train-0"}
    if deleting_by is not None:
        meta["deletionTimestamp"] = deleting_by.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"metadata": meta, "spec": {"nodeName": node}, "status": {"phase": phase}}


def test_a_deleted_job_whose_pods_still_stop_keeps_its_gpus():
    stopping = pods_hold_gpus([pod(deleting_by=NOW + timedelta(seconds=30))], NOW)
    assert stopping
    assert reconcile_drops(LEDGER, {"uid-train": ObservedJob.gone(holding_pods=stopping)}) == ()


def test_a_deleted_job_whose_pods_are_gone_frees_its_gpus():
    (drop,) = reconcile_drops(LEDGER, {"uid-train": ObservedJob.gone(holding_pods=pods_hold_gpus([], NOW))})
    assert drop.reason is DropReason.GONE


def test_a_job_deleted_in_the_foreground_keeps_its_gpus_while_its_pods_stop_even_once_its_trigger_let_go():
    deleting = {"name": "train", "uid": "uid-train", "deletionTimestamp": "2026-03-01T09:00:00Z"}
    seen = observed_job(deleting, suspended=False, terminal=False, holding_pods=True, released=True)
    assert reconcile_drops(LEDGER, {"uid-train": seen}) == ()
    gone_pods = observed_job(deleting, suspended=False, terminal=False, holding_pods=False, released=True)
    (drop,) = reconcile_drops(LEDGER, {"uid-train": gone_pods})
    assert drop.reason is DropReason.GONE


def test_a_pod_never_confirmed_gone_stops_holding_a_minute_past_its_deletion_deadline():
    deadline = NOW - POD_GONE_MARGIN - timedelta(seconds=1)
    assert not pods_hold_gpus([pod(deleting_by=deadline)], NOW)
    assert pods_hold_gpus([pod(deleting_by=NOW - timedelta(seconds=5))], NOW)


def test_pods_that_ended_or_were_never_placed_hold_nothing():
    assert not pods_hold_gpus([pod(phase="Succeeded"), pod(phase="Failed"), pod(node=None)], NOW)
