"""Which engine queues a job, picked once per trigger, and what each engine answers without a cluster."""

from __future__ import annotations

import asyncio

from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.queueing import kueue
from airflow_jobs_plugin.queueing.engines.kueue import KueueEngine
from airflow_jobs_plugin.queueing.engines.pick import engine_for
from airflow_jobs_plugin.queueing.engines.pool import Admission
from airflow_jobs_plugin.queueing.engines.unmanaged import UnmanagedEngine


class _Watch:
    """What an engine keeps of the shared watch until it is asked to do anything."""

    namespace = "ml"
    client = object()


def _job(**job_labels: str) -> dict:
    return {
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "ml", "uid": "u1", "labels": job_labels},
    }


def test_a_task_that_names_a_quota_pool_is_queued_by_the_pool_even_for_kueue():
    watch = _Watch()
    handed = _job(**{kueue.QUEUE_NAME_LABEL: "team-a"})
    engine = engine_for(watch, "team-policy", None, handed)  # type: ignore[arg-type]
    assert isinstance(engine, Admission) and not engine.direct
    assert engine is engine_for(watch, "team-policy", None)  # type: ignore[arg-type]


def test_a_job_that_names_a_local_queue_without_a_pool_is_kueues():
    engine = engine_for(_Watch(), None, None, _job(**{kueue.QUEUE_NAME_LABEL: "team-a"}))  # type: ignore[arg-type]
    assert isinstance(engine, KueueEngine)


def test_any_other_job_is_let_go_by_the_unmanaged_engine():
    watch = _Watch()
    engine = engine_for(watch, None, None, _job())  # type: ignore[arg-type]
    assert isinstance(engine, UnmanagedEngine) and engine.direct
    assert engine is UnmanagedEngine.for_watch(watch)  # type: ignore[arg-type]


def test_only_the_pool_reserves_gpus_and_the_others_have_nothing_to_give_back():
    watch = _Watch()
    unmanaged = engine_for(watch, None, None, _job())  # type: ignore[arg-type]
    queued_by_kueue = engine_for(watch, None, None, _job(**{kueue.QUEUE_NAME_LABEL: "q"}))  # type: ignore[arg-type]
    for engine in (unmanaged, queued_by_kueue):
        assert engine.reserved_gpus("u1") is None
        asyncio.run(engine.release(_job()))  # no cluster call: nothing was held


def test_a_job_already_ruled_on_is_not_queued_again():
    ruled = _job()
    ruled["metadata"]["annotations"] = {labels.VERDICT: "OverQuota"}
    for engine in (
        engine_for(_Watch(), None, None, ruled),  # type: ignore[arg-type]
        engine_for(_Watch(), None, None, _job(**{kueue.QUEUE_NAME_LABEL: "q"})),  # type: ignore[arg-type]
    ):
        assert asyncio.run(engine.ensure(ruled)) is None
