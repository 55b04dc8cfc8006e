"""The shared watch's cache never edits an object it handed out: every change stores a new one.

A trigger keeps what it read of its job and pods from one look to the next (``records.ReadMemo``),
knowing them by identity. That is only sound while a changed object is a new object and the one a
look read stays as it was; these tests hold the cache to it.
"""

from __future__ import annotations

import copy

from airflow_jobs_plugin.cluster.kube import JOBS, PODS
from airflow_jobs_plugin.cluster.watch import SharedWatch


def pod(version: str, phase: str) -> dict:
    return {
        "kind": "Pod",
        "metadata": {
            "name": "train-x7k2p",
            "namespace": "default",
            "resourceVersion": version,
            "labels": {"batch.kubernetes.io/job-name": "train"},
        },
        "status": {"phase": phase},
    }


def job(version: str, suspend: bool) -> dict:
    return {
        "kind": "Job",
        "metadata": {
            "name": "train",
            "namespace": "default",
            "resourceVersion": version,
            "labels": {"app.kubernetes.io/managed-by": "airflow-jobs-plugin"},
        },
        "spec": {"suspend": suspend},
    }


def watch() -> SharedWatch:
    return SharedWatch(None, "default")  # type: ignore[arg-type] - the cache alone, no API calls


async def test_a_watch_event_stores_a_new_object_and_leaves_the_one_read_before():
    w = watch()
    w._deliver(PODS, "ADDED", pod("10", "Pending"))
    w._deliver(JOBS, "ADDED", job("9", True))
    (seen_pod,) = w.pods_of("train")
    seen_job = w.get(JOBS, "train")
    kept = copy.deepcopy((seen_pod, seen_job))
    w._deliver(PODS, "MODIFIED", pod("12", "Running"))
    w._deliver(JOBS, "MODIFIED", job("11", False))
    (now_pod,) = w.pods_of("train")
    assert now_pod is not seen_pod and now_pod["status"]["phase"] == "Running"
    assert w.get(JOBS, "train") is not seen_job
    assert (seen_pod, seen_job) == kept


async def test_a_read_folded_in_stores_a_new_object_and_leaves_the_one_read_before():
    w = watch()
    w._deliver(PODS, "ADDED", pod("10", "Running"))
    (seen,) = w.pods_of("train")
    kept = copy.deepcopy(seen)
    read = pod("15", "Succeeded")
    assert w.absorb(PODS, read)
    (now,) = w.pods_of("train")
    assert now is not seen and now is not read and now["status"]["phase"] == "Succeeded"
    assert seen == kept


async def test_an_unchanged_object_is_handed_out_as_the_same_object():
    """What lets a trigger's next look reuse what it read: the pods an event did not touch."""
    w = watch()
    w._deliver(PODS, "ADDED", pod("10", "Running"))
    first = w.pods_of("train")
    w._deliver(JOBS, "ADDED", job("11", False))
    assert w.pods_of("train")[0] is first[0]
