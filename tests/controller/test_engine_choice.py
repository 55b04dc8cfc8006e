"""Which engine the admission controller asks about a job: the route its group's pool gives it
(queueing/pools.py), never anything the job's task chose; and what each engine answers without a cluster."""

from __future__ import annotations

import asyncio

from airflow_jobs_plugin.controller.runner import NamespaceController
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.queueing.engines.pool import Admission
from airflow_jobs_plugin.queueing.engines.unmanaged import UnmanagedEngine
from airflow_jobs_plugin.queueing.pools import Route, Way


def _controller() -> NamespaceController:
    # Nothing is asked of the cluster until the controller runs: a client is never called here.
    return NamespaceController(object(), "ml", "controller-0")  # type: ignore[arg-type]


def _job(**annotations: str) -> dict:
    return {
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "ml", "uid": "u1", "annotations": annotations},
    }


def test_a_job_of_a_pools_group_is_asked_of_that_pools_engine_one_per_policy():
    controller = _controller()
    engine = controller.engine(Route(Way.POOL, "team-policy"))
    assert isinstance(engine, Admission) and not engine.direct
    assert engine.quota_configmap == "team-policy" and engine.quota_namespace == "ml"
    assert engine is controller.engine(Route(Way.POOL, "team-policy"))
    assert controller.engine(Route(Way.POOL, "other-policy")) is not engine


def test_a_job_no_pool_queues_is_let_go_by_the_unmanaged_engine_which_leaves_kueues_jobs_to_kueue():
    controller = _controller()
    engine = controller.engine(Route(Way.LET_GO))
    assert isinstance(engine, UnmanagedEngine) and engine.direct
    assert engine is controller.engine(Route(Way.LET_GO))


def test_only_the_pool_reserves_gpus_and_the_others_have_nothing_to_give_back():
    unmanaged = _controller().engine(Route(Way.LET_GO))
    for engine in (unmanaged, unmanaged.kueue):  # type: ignore[attr-defined]
        assert engine.reserved_gpus("u1") is None
        asyncio.run(engine.release(_job()))  # no cluster call: nothing was held


def test_a_job_already_ruled_on_is_not_queued_again():
    unmanaged = _controller().engine(Route(Way.LET_GO))
    ruled = _job(**{labels.VERDICT: "OverQuota"})
    for engine in (unmanaged, unmanaged.kueue):  # type: ignore[attr-defined]
        assert asyncio.run(engine.ensure(ruled)) is None
