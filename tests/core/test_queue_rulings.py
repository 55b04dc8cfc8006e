"""What is ruled on a suspended job before any engine queues it, from plain data (queueing/engines/ruling.py)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.queueing.engines.ruling import (
    Ruling,
    not_before,
    ruling_before_queue,
    wake_after,
)
from airflow_jobs_plugin.queueing.quota.placement import NO_AUTOSCALING, Autoscaling, NodeCapacity

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
EIGHT_GPU_NODES = [NodeCapacity(name=f"gpu-{i}", gpus=8, node_labels={}) for i in range(3)]


def job(gpus: int | str, **annotations: str) -> dict:
    limits = {"nvidia.com/gpu": gpus}
    return {
        "kind": "Job",
        "metadata": {"name": "train", "annotations": annotations},
        "spec": {"template": {"spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]}}},
    }


def test_a_job_larger_than_any_node_is_ruled_unschedulable_with_or_without_a_pool():
    for pooled in (True, False):
        ruling = ruling_before_queue(job(16), EIGHT_GPU_NODES, NO_AUTOSCALING, pooled=pooled)
        assert ruling is not None and ruling.reason == "Unschedulable"
        assert "asks for 16 GPUs but any node offers at most 8" in ruling.message


def test_a_job_that_fits_a_node_is_queued():
    assert ruling_before_queue(job(8), EIGHT_GPU_NODES, NO_AUTOSCALING, pooled=True) is None


def test_nothing_is_ruled_when_the_nodes_are_unknown():
    assert ruling_before_queue(job(64), [], NO_AUTOSCALING, pooled=False) is None


def test_a_job_that_fits_a_node_the_cluster_can_add_is_queued():
    larger = Autoscaling(shapes=(NodeCapacity(name="big", gpus=16, node_labels={}),))
    assert ruling_before_queue(job(16), EIGHT_GPU_NODES, larger, pooled=False) is None


def test_nothing_is_ruled_where_the_cluster_adds_nodes_of_a_shape_nobody_said():
    unbounded = Autoscaling(unbounded="a cluster-autoscaler")
    assert ruling_before_queue(job(64), EIGHT_GPU_NODES, unbounded, pooled=False) is None


def test_a_pooled_job_whose_pods_the_pool_cannot_charge_is_ruled_inadmissible():
    uncharged = job("many")
    ruling = ruling_before_queue(uncharged, EIGHT_GPU_NODES, NO_AUTOSCALING, pooled=True)
    assert ruling is not None and ruling.reason == "Inadmissible"
    assert "nvidia.com/gpu" in ruling.message


def test_an_unpooled_job_is_not_charged_so_not_ruled_for_it():
    assert ruling_before_queue(job("many"), EIGHT_GPU_NODES, NO_AUTOSCALING, pooled=False) is None


def test_a_ruling_is_plain_frozen_data():
    assert Ruling("Unschedulable", "why") == Ruling("Unschedulable", "why")


def test_a_trigger_sleeps_no_longer_than_its_jobs_back_off():
    backing_off = job(1, **{labels.REQUEUE_NOT_BEFORE: (NOW + timedelta(seconds=7)).isoformat()})
    assert not_before(backing_off) == NOW + timedelta(seconds=7)
    assert wake_after(backing_off, 30.0, NOW) == 7.0
    assert wake_after(backing_off, 5.0, NOW) == 5.0
    assert wake_after(job(1), 30.0, NOW) == 30.0


def test_a_back_off_already_over_wakes_the_trigger_at_once_but_not_in_a_busy_loop():
    over = job(1, **{labels.REQUEUE_NOT_BEFORE: (NOW - timedelta(seconds=7)).isoformat()})
    assert wake_after(over, 30.0, NOW) == 0.05
