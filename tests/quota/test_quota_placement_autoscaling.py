"""Clusters that scale: a job is ruled larger than any node only where the answer is certain, judged
with the nodes the cluster can add; a pod an autoscaler is adding a node for is waiting, not stuck."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from airflow_jobs_plugin.queueing.quota.placement import (
    NO_AUTOSCALING,
    NODE_PROVISION_WAIT,
    Autoscaling,
    NodeCapacity,
    NodeShapesError,
    never_fits,
    node_coming,
    nodepool_shape,
    parse_node_shapes,
)


def node(name: str, gpus: int) -> NodeCapacity:
    return NodeCapacity(name=name, gpus=gpus, node_labels={})


def job(gpus: int, *, node_selector: dict | None = None) -> dict:
    container = {"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
    spec = {"containers": [container], **({"nodeSelector": node_selector} if node_selector else {})}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {"template": {"spec": spec}},
    }


CPU_ONLY = [node("cpu-0", 0), node("cpu-1", 0)]
GPU_POOL = "[{labels: {pool: gpu}, resources: {nvidia.com/gpu: 8}}]"
T = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)


def test_a_gpu_pool_scaled_to_zero_fails_a_gpu_job_only_where_nothing_says_it_can_scale():
    assert "any node offers at most 0" in (never_fits(job(1), CPU_ONLY, NO_AUTOSCALING) or "")


def test_a_gpu_job_that_fits_a_node_the_cluster_can_add_waits():
    assert never_fits(job(8), CPU_ONLY, Autoscaling(shapes=parse_node_shapes(GPU_POOL))) is None


def test_a_job_larger_than_any_node_the_cluster_can_add_still_fails_at_once():
    problem = never_fits(job(16), CPU_ONLY, Autoscaling(shapes=parse_node_shapes(GPU_POOL)))
    assert problem is not None and "offers at most 8 (largest node: autoscaled-0)" in problem


def test_an_autoscaler_of_unknown_shapes_rules_nothing():
    assert never_fits(job(64), CPU_ONLY, Autoscaling(unbounded="a cluster-autoscaler")) is None


def test_a_selector_only_an_added_node_matches_is_judged_with_that_node():
    shapes = parse_node_shapes(GPU_POOL)
    assert never_fits(job(8, node_selector={"pool": "gpu"}), CPU_ONLY, Autoscaling(shapes=shapes)) is None
    assert "matching its nodeSelector" in (
        never_fits(job(9, node_selector={"pool": "gpu"}), CPU_ONLY, Autoscaling(shapes=shapes)) or ""
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{pool: gpu}", "must be a list of node shapes"),
        ("[{labels: {pool: gpu}}]", "autoscaled_node_shapes[0]: must be a mapping of labels and resources"),
        ("[{resources: {cpu: 8}}]", "autoscaled_node_shapes[0].resources: GPU resources"),
        ("[{resources: {nvidia.com/gpu: 0}}]", "whole numbers above 0"),
        ("[" * 100 + "]" * 100, "nested deeper than"),
    ],
)
def test_a_malformed_node_shape_names_the_entry_and_the_fix(text, message):
    with pytest.raises(NodeShapesError, match=message.replace("[", r"\[").replace(".", r"\.")):
        parse_node_shapes(text)


def test_a_karpenter_nodepool_bounds_its_nodes_by_its_gpu_limit():
    pool = {
        "metadata": {"name": "gpu"},
        "spec": {
            "limits": {"cpu": "1000", "nvidia.com/gpu": "16"},
            "template": {
                "metadata": {"labels": {"team": "ml"}},
                "spec": {
                    "requirements": [
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
                    ]
                },
            },
        },
    }
    shape = nodepool_shape(pool)
    assert shape == NodeCapacity(
        name="nodepool/gpu",
        gpus=16,
        node_labels={"team": "ml", "karpenter.sh/capacity-type": "on-demand"},
        devices={"nvidia.com/gpu": 16},
    )
    assert nodepool_shape({"metadata": {"name": "any"}, "spec": {"limits": {"cpu": "1000"}}}) is None


def event(reason: str, at: datetime) -> dict:
    return {"reason": reason, "lastTimestamp": at.strftime("%Y-%m-%dT%H:%M:%SZ")}


def test_a_pod_the_cluster_autoscaler_is_adding_a_node_for_waits_for_it():
    events = [event("FailedScheduling", T), event("TriggeredScaleUp", T)]
    assert node_coming(events) == T + NODE_PROVISION_WAIT


def test_a_karpenter_nomination_is_a_node_coming():
    assert (
        node_coming([{"reason": "Nominated", "eventTime": "2026-03-01T09:00:00.000000Z"}])
        == T + NODE_PROVISION_WAIT
    )


def test_a_later_refusal_to_scale_up_means_no_node_is_coming():
    events = [event("TriggeredScaleUp", T), event("NotTriggerScaleUp", T.replace(minute=5))]
    assert node_coming(events) is None
    assert node_coming([event("FailedScheduling", T)]) is None
