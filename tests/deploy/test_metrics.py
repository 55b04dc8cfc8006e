"""Metrics: what the product emits, under which names, through Airflow's own Stats."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from airflow.sdk.exceptions import TaskDeferred
from controller_fixture import ControllerThread
from task_doubles import task_context

from airflow_jobs_plugin import metrics
from airflow_jobs_plugin.cluster import watch as shared
from airflow_jobs_plugin.cluster.kube import KubeError
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.jobview import JobView
from airflow_jobs_plugin.queueing.engines.pool import requeue_metrics
from airflow_jobs_plugin.queueing.engines.pool import shutdown as admission_shutdown
from airflow_jobs_plugin.queueing.pools import POLICY_LABELS
from airflow_jobs_plugin.queueing.quota.requeue import Requeue, RequeueLimitReached

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


class Recorder:
    """Stands in for Airflow's Stats module functions; records (kind, name, value, tags)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, float, dict]] = []

    def gauge(self, name, value, *, tags=None):
        self.sent.append(("gauge", name, value, tags))

    def incr(self, name, count=None, *, tags=None):
        self.sent.append(("counter", name, count, tags))

    def timing(self, name, dt, *, tags=None):
        self.sent.append(("timing", name, dt, tags))

    def named(self, name: str) -> list[tuple[str, str, float, dict]]:
        return [s for s in self.sent if s[1] == name]


@pytest.fixture
def stats(monkeypatch) -> Recorder:
    from airflow.sdk.observability import stats as airflow_stats

    recorder = Recorder()
    for kind in ("gauge", "incr", "timing"):
        monkeypatch.setattr(airflow_stats, kind, getattr(recorder, kind))
    return recorder


def job(group: str = "vision") -> dict:
    return {
        "metadata": {"name": "j", "annotations": {labels.GROUP_NAME: group}, "labels": {labels.GROUP: group}}
    }


# --- what to emit ---


def test_a_pool_is_four_gauges_tagged_by_group():
    sent = metrics.group_pool("vision", quota_gpus=8, held_gpus=6, queued_gpus=4, queued_jobs=2)
    assert [(m.kind, m.name, m.value, m.tags) for m in sent] == [
        (metrics.Kind.GAUGE, metrics.GROUP_GPUS_QUOTA, 8, {"group": "vision"}),
        (metrics.Kind.GAUGE, metrics.GROUP_GPUS_HELD, 6, {"group": "vision"}),
        (metrics.Kind.GAUGE, metrics.GROUP_GPUS_QUEUED, 4, {"group": "vision"}),
        (metrics.Kind.GAUGE, metrics.GROUP_QUEUE_LENGTH, 2, {"group": "vision"}),
    ]


def test_admission_latency_is_milliseconds_and_never_negative():
    assert metrics.admitted("nlp", queued_at=T0, admitted_at=T0 + timedelta(seconds=2.5)).value == 2500
    assert metrics.admitted("nlp", queued_at=T0 + timedelta(seconds=1), admitted_at=T0).value == 0


def test_an_outcome_counts_state_reason_and_group():
    metric = metrics.outcome("FAILED", "OOMKilled", JobView(job("nlp")).group)
    assert (metric.name, metric.value, metric.tags) == (
        metrics.JOB_OUTCOMES,
        1,
        {"state": "FAILED", "reason": "OOMKilled", "group": "nlp"},
    )
    assert metrics.outcome("SUCCEEDED", None, JobView({"metadata": {}}).group).tags == {
        "state": "SUCCEEDED",
        "reason": "none",
        "group": "none",
    }


def test_a_requeue_counts_but_the_requeue_limit_is_an_outcome_seen_later():
    requeue = Requeue(requeue_count=1, not_before=T0, backoff=timedelta(seconds=30), message="m")
    (metric,) = requeue_metrics(job(), requeue)
    assert (metric.name, metric.tags) == (metrics.REQUEUES, {"group": "vision", "reason": "ScheduleTimeout"})
    assert requeue_metrics(job(), RequeueLimitReached(requeue_count=3, message="m")) == ()


def test_a_broken_watch_is_a_reconnect_and_an_error_but_an_expired_history_only_a_reconnect():
    broken = metrics.watch_interrupted("ml", "jobs", KubeError.from_status(500, {"message": "x" * 500}))
    assert [m.name for m in broken] == [metrics.WATCH_RECONNECTS, metrics.WATCH_ERRORS]
    assert broken[1].tags == {"namespace": "ml", "resource": "jobs", "error": "KubeError"}
    gone = metrics.watch_interrupted("ml", "pods", KubeError.from_status(410, {"message": "too old"}))
    assert [m.name for m in gone] == [metrics.WATCH_RECONNECTS]


def test_tag_values_are_bounded():
    assert len(metrics.outcome("FAILED", "r" * 500, "g").tags["reason"]) == metrics.MAX_TAG_LENGTH


# --- the emitter ---


def test_emit_sends_each_kind_through_airflows_stats(stats):
    metrics.emit(metrics.group_pool("vision", quota_gpus=8, held_gpus=2, queued_gpus=0, queued_jobs=0))
    metrics.emit(metrics.admitted("vision", queued_at=T0, admitted_at=T0 + timedelta(seconds=1)))
    metrics.emit(metrics.outcome("SUCCEEDED", "Completed", "vision"))
    assert stats.sent[0] == ("gauge", metrics.GROUP_GPUS_QUOTA, 8, {"group": "vision"})
    assert stats.named(metrics.ADMISSION_LATENCY) == [
        ("timing", metrics.ADMISSION_LATENCY, 1000.0, {"group": "vision"})
    ]
    assert stats.named(metrics.JOB_OUTCOMES)[0][:3] == ("counter", metrics.JOB_OUTCOMES, 1)


def test_a_failing_metrics_backend_never_reaches_the_caller(monkeypatch):
    from airflow.sdk.observability import stats as airflow_stats

    def down(*args, **kwargs):
        raise OSError("statsd host unreachable")

    monkeypatch.setattr(airflow_stats, "incr", down)
    metrics.emit(metrics.outcome("FAILED", "Error", "vision"))  # no exception


def test_every_metric_name_is_documented():
    text = (ROOT / "docs" / "deploying.md").read_text()
    for name in metrics.NAMES:
        assert re.search(rf"`{re.escape(name)}`", text), name


# --- emitted by the product on the simulated cluster ---


@pytest.mark.slow
def test_a_job_under_the_pool_emits_its_pool_its_wait_and_its_outcome(stats, monkeypatch):
    from airflow_jobs_sim import ClusterConfig, SimCluster

    from airflow_jobs_plugin.airflow.operators import JobOperator

    with (
        SimCluster(ClusterConfig(nodes=1, gpus_per_node=8, time_scale=0.01)) as cluster,
        ControllerThread(cluster.kubeconfig_path),
    ):
        monkeypatch.setenv(
            "AIRFLOW_CONN_KUBERNETES_DEFAULT",
            json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": cluster.kubeconfig_path}}),
        )
        cluster.store.create(
            "configmaps",
            {
                "metadata": {"name": "policy", "labels": POLICY_LABELS},
                "data": {"policy.yaml": "groups:\n  vision: {gpus: 8}\n"},
            },
            "default",
        )
        scenario = {"sim.airflow-jobs.io/scenario": json.dumps({"main": {"run": 1}})}
        op = JobOperator(
            task_id="train",
            image="t:1",
            group="vision",
            gpus=2,
            quota_configmap="policy",
            job_annotations=scenario,
        )
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(task_context("metrics_dag"))

        async def follow() -> list[dict]:
            try:
                return [e.payload async for e in deferred.value.trigger.run()]
            finally:
                await admission_shutdown()
                await shared.shutdown()

        (event,) = asyncio.run(asyncio.wait_for(follow(), 60))
    assert event["status"] == "success"
    quota = stats.named(metrics.GROUP_GPUS_QUOTA)
    assert quota and all(s[2:] == (8, {"group": "vision"}) for s in quota)
    assert 2 in [s[2] for s in stats.named(metrics.GROUP_GPUS_HELD)]  # the job held its 2 GPUs
    assert [s[3] for s in stats.named(metrics.ADMISSION_LATENCY)] == [{"group": "vision"}]
    assert [s[3] for s in stats.named(metrics.JOB_OUTCOMES)] == [
        {"state": "SUCCEEDED", "reason": event.get("reason") or "none", "group": "vision"}
    ]
