"""The simulated scheduler: placement rules (pure) and binding through a running cluster."""

from __future__ import annotations

import uuid
from decimal import Decimal
from functools import partial

import pytest
from airflow_jobs_sim.cluster import SimCluster
from airflow_jobs_sim.config import ClusterConfig
from airflow_jobs_sim.controllers.scheduler import (
    Placement,
    Unschedulable,
    fit_pod,
    parse_quantity,
    pending_order,
    pod_requests,
)
from sim_waiting import wait_for as _wait_for


def node(
    name: str,
    gpus: int = 8,
    cpu: str = "64",
    memory: str = "512Gi",
    labels: dict | None = None,
    taints: list | None = None,
    unschedulable: bool = False,
) -> dict:
    alloc = {"cpu": cpu, "memory": memory, "nvidia.com/gpu": str(gpus), "pods": "110"}
    spec: dict = {"taints": taints} if taints else {}
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
        "status": {"allocatable": alloc},
    }


def pod(
    name: str = "x",
    gpus: int = 0,
    cpu: str | None = None,
    node_name: str | None = None,
    phase: str = "Pending",
    **spec,
) -> dict:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    requests = {"cpu": cpu} if cpu else {}
    container = {"name": "main", "image": "trainer:1", "resources": {"limits": limits, "requests": requests}}
    body = {"containers": [container], **spec}
    if node_name:
        body["nodeName"] = node_name
    return {
        "metadata": {"name": name, "namespace": "default", "uid": name},
        "spec": body,
        "status": {"phase": phase},
    }


NODES = [node("sim-node-0"), node("sim-node-1")]


def test_a_pod_asking_for_more_gpus_than_any_node_has_gets_the_real_scheduler_message():
    decision = fit_pod(pod(gpus=9), NODES, [])
    assert decision == Unschedulable(
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are available: "
        "2 No preemption victims found for incoming pod."
    )


def test_gpus_held_by_running_pods_are_not_available():
    busy = [
        pod("a", gpus=8, node_name="sim-node-0", phase="Running"),
        pod("b", gpus=4, node_name="sim-node-1", phase="Running"),
    ]
    assert isinstance(fit_pod(pod(gpus=5), NODES, busy), Unschedulable)
    assert fit_pod(pod(gpus=4), NODES, busy) == Placement("sim-node-1")


def test_finished_pods_release_their_gpus():
    done = [
        pod("a", gpus=8, node_name="sim-node-0", phase="Succeeded"),
        pod("b", gpus=8, node_name="sim-node-1", phase="Failed"),
    ]
    assert isinstance(fit_pod(pod(gpus=8), NODES, done), Placement)


def test_bin_packing_prefers_the_most_allocated_node_that_fits():
    busy = [pod("a", gpus=6, node_name="sim-node-1", phase="Running")]
    assert fit_pod(pod(gpus=2), NODES, busy) == Placement("sim-node-1")


def test_a_node_selector_excludes_nodes_and_preemption_is_not_helpful_there():
    nodes = [node("sim-node-0", labels={"pool": "a100"}), node("sim-node-1")]
    decision = fit_pod(pod(gpus=9, nodeSelector={"pool": "a100"}), nodes, [])
    assert decision == Unschedulable(
        "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) didn't match Pod's node affinity/selector. "
        "preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, "
        "1 Preemption is not helpful for scheduling."
    )
    assert fit_pod(pod(gpus=1, nodeSelector={"pool": "a100"}), nodes, []) == Placement("sim-node-0")


def test_an_untolerated_taint_keeps_pods_off_the_node_unless_tolerated():
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    nodes = [node("sim-node-0", taints=[taint])]
    decision = fit_pod(pod(gpus=1), nodes, [])
    assert decision == Unschedulable(
        "0/1 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu: present}. "
        "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    )
    tolerant = pod(
        gpus=1, tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    )
    assert fit_pod(tolerant, nodes, []) == Placement("sim-node-0")


def test_a_cordoned_node_takes_no_pods():
    decision = fit_pod(pod(), [node("sim-node-0", unschedulable=True)], [])
    assert isinstance(decision, Unschedulable) and "1 node(s) were unschedulable" in decision.message


def test_several_insufficient_resources_are_all_reported():
    decision = fit_pod(pod(gpus=9, cpu="100"), [node("sim-node-0")], [])
    assert "1 Insufficient cpu, 1 Insufficient nvidia.com/gpu." in decision.message


def test_init_containers_count_with_their_largest_request():
    p = pod(cpu="1")
    p["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"cpu": "4"}}}]
    assert pod_requests(p)["cpu"] == Decimal(4)


@pytest.mark.parametrize(
    ("text", "value"), [("500m", "0.5"), ("64", "64"), ("1Gi", str(2**30)), ("2k", "2000"), (8, "8")]
)
def test_quantities_are_parsed_like_the_api_server(text, value):
    assert parse_quantity(text) == Decimal(value)


def test_gated_and_bound_pods_are_not_in_the_scheduling_queue():
    gated = pod("g", schedulingGates=[{"name": "quota"}])
    bound = pod("b", node_name="sim-node-0")
    assert pending_order([gated, bound, pod("free")]) == [pod("free")]


# ----------------------------------------------------------------------------- through the cluster


@pytest.fixture(scope="module")
def cluster():
    with SimCluster(ClusterConfig(nodes=2, gpus_per_node=8, time_scale=0.02)) as c:
        yield c


@pytest.fixture
def ns(cluster):
    name = f"sched-{uuid.uuid4().hex[:6]}"
    cluster.store.create("namespaces", {"metadata": {"name": name}})
    return name


# This file's controllers need a different default patience.
wait_for = partial(_wait_for, timeout=10.0)


def events_for(cluster, ns: str, name: str) -> list[dict]:
    return [e for e in cluster.store.list("events", namespace=ns) if e["involvedObject"]["name"] == name]


def gpu_pod(name: str, gpus: int, run: float | None = None) -> dict:
    annotation = (
        '{"main": {"pull": 0, "run": null}}' if run is None else f'{{"main": {{"pull": 0, "run": {run}}}}}'
    )
    return {
        "metadata": {"name": name, "annotations": {"sim.airflow-jobs.io/scenario": annotation}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "trainer:1.0",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ],
        },
    }


def test_a_pod_is_bound_with_a_scheduled_event(cluster, ns):
    cluster.store.create("pods", gpu_pod("small", 1, run=1), namespace=ns)
    bound = wait_for(lambda: cluster.store.get("pods", "small", ns)["spec"].get("nodeName"))
    scheduled = wait_for(lambda: [e for e in events_for(cluster, ns, "small") if e["reason"] == "Scheduled"])
    assert scheduled[0]["message"] == f"Successfully assigned {ns}/small to {bound}"
    assert scheduled[0]["type"] == "Normal" and scheduled[0]["source"]["component"] == "default-scheduler"
    cond = next(
        c
        for c in cluster.store.get("pods", "small", ns)["status"]["conditions"]
        if c["type"] == "PodScheduled"
    )
    assert cond["status"] == "True"


def test_an_unschedulable_pod_waits_with_failedscheduling_and_is_placed_once_capacity_frees(cluster, ns):
    cluster.store.create("pods", gpu_pod("hog-a", 8), namespace=ns)
    cluster.store.create("pods", gpu_pod("hog-b", 8), namespace=ns)
    wait_for(
        lambda: all(
            cluster.store.get("pods", n, ns)["status"].get("phase") == "Running" for n in ("hog-a", "hog-b")
        )
    )
    cluster.store.create("pods", gpu_pod("waiter", 4, run=1), namespace=ns)

    def unschedulable():
        conds = cluster.store.get("pods", "waiter", ns)["status"].get("conditions") or []
        return next(
            (c for c in conds if c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"), None
        )

    cond = wait_for(unschedulable)
    message = (
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are available: "
        "2 No preemption victims found for incoming pod."
    )
    assert (cond["status"], cond["message"]) == ("False", message)
    failed = wait_for(
        lambda: [e for e in events_for(cluster, ns, "waiter") if e["reason"] == "FailedScheduling"]
    )
    assert failed[0]["type"] == "Warning" and failed[0]["message"] == message
    cluster.store.delete("pods", "hog-a", namespace=ns)
    wait_for(lambda: cluster.store.get("pods", "waiter", ns)["spec"].get("nodeName"))
    wait_for(lambda: cluster.store.get("pods", "waiter", ns)["status"].get("phase") == "Succeeded")
    cluster.store.delete("pods", "hog-b", namespace=ns)


def test_a_pod_with_scheduling_gates_is_not_scheduled_until_they_are_removed(cluster, ns):
    body = gpu_pod("gated", 1, run=1)
    body["spec"]["schedulingGates"] = [{"name": "airflow-jobs.io/quota"}]
    cluster.store.create("pods", body, namespace=ns)

    def gated():
        conds = cluster.store.get("pods", "gated", ns)["status"].get("conditions") or []
        return any(c.get("reason") == "SchedulingGated" for c in conds)

    wait_for(gated)
    assert not cluster.store.get("pods", "gated", ns)["spec"].get("nodeName")
    cluster.store.patch("pods", "gated", {"spec": {"schedulingGates": None}}, "merge", namespace=ns)
    wait_for(lambda: cluster.store.get("pods", "gated", ns)["spec"].get("nodeName"))
