"""The node view (``mcli util``): GPUs per node and device, used and free, and which jobs hold them."""

from __future__ import annotations

import json

from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.plugin import html
from airflow_jobs_plugin.readmodel import text
from airflow_jobs_plugin.readmodel.nodes import (
    GPU_PRODUCT,
    HIDDEN,
    for_reader,
    node_lines,
    node_view,
    pod_gpus,
)

GPU = labels.GPU_RESOURCE


def node(
    name: str, gpus: int, *, ready: bool = True, cordoned: bool = False, devices: dict[str, int] | None = None
) -> dict:
    offered = {**({GPU: gpus} if gpus else {}), **(devices or {})}
    return {
        "metadata": {"name": name, "labels": {}},
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {
            "allocatable": {"cpu": "32", **{k: str(v) for k, v in offered.items()}},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod(
    name: str,
    on: str | None,
    gpus: int,
    *,
    job: str | None = None,
    phase: str = "Running",
    device: str = GPU,
    **extra,
) -> dict:
    meta: dict = {"name": name, "namespace": "ml", "labels": {}, "annotations": {}}
    if job:
        meta["labels"] = {labels.MANAGED_BY: "airflow-jobs-plugin", labels.BATCH_JOB_NAME: job}
        meta["annotations"] = {
            labels.USER_NAME: "alice",
            labels.GROUP_NAME: "vision",
            labels.DAG_ID: "nightly",
        }
    spec: dict = {"containers": [{"name": "main", "resources": {"limits": {device: str(gpus)}}}], **extra}
    if on:
        spec["nodeName"] = on
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def test_a_node_counts_the_gpus_of_the_live_pods_bound_to_it():
    view = node_view(
        [node("gpu-a", 8), node("gpu-b", 8), node("cpu-only", 0)],
        [
            pod("train-0", "gpu-a", 4, job="train"),
            pod("train-1", "gpu-a", 2, job="train"),  # two pods of one job on one node: one line
            pod("done", "gpu-a", 2, job="old", phase="Succeeded"),  # ended: its GPUs are free again
            pod("pending", None, 4, job="waiting"),  # not bound: holds nothing yet
            pod("notebook", "gpu-b", 1),  # not a product job, still holds its GPU
        ],
    )
    assert [(n.name, n.gpus, n.used, n.free) for n in view.nodes] == [("gpu-a", 8, 6, 2), ("gpu-b", 8, 1, 7)]
    (train,) = view.nodes[0].holders
    assert (train.namespace, train.job, train.gpus, train.user, train.group) == (
        "ml",
        "train",
        6,
        "alice",
        "vision",
    )
    (other,) = view.nodes[1].holders
    assert (other.job, other.product) == ("notebook", False)
    assert (view.gpus, view.used, view.free) == (16, 7, 9)


def test_init_containers_count_as_the_scheduler_counts_them():
    waiter = {"name": "wait", "resources": {"limits": {GPU: "2"}}}
    assert pod_gpus(pod("p", "n", 1, initContainers=[waiter])) == 2  # the larger of init and regular
    assert pod_gpus(pod("p", "n", 4, initContainers=[waiter])) == 4


def test_a_node_not_ready_or_cordoned_says_so():
    view = node_view([node("a", 8, ready=False), node("b", 8, cordoned=True)], [])
    assert {(n.name, n.ready, n.schedulable) for n in view.nodes} == {("a", False, True), ("b", True, False)}
    assert "NotReady" in text.nodes_text(view) and "SchedulingDisabled" in text.nodes_text(view)


def test_a_reader_sees_the_gpus_of_jobs_it_may_not_read_but_not_their_names():
    view = node_view([node("gpu-a", 8)], [pod("train-0", "gpu-a", 4, job="train")])
    (hidden,) = for_reader(view, lambda dag_id: dag_id != "nightly").nodes[0].holders
    assert (hidden.job, hidden.gpus, hidden.user) == (HIDDEN, 4, None)
    page = html.nodes_page(for_reader(view, lambda dag_id: False))
    assert "train" not in page and "4 of 8 nvidia.com/gpu in use" in page


def test_the_cli_shows_the_nodes_of_the_cluster(population, capsys):
    from airflow_jobs_plugin.airflow import cli

    assert cli.main(["nodes", "--kubeconfig", population.kubeconfig]) == 0
    out = capsys.readouterr().out
    assert "DEVICE" in out and "of 16 nvidia.com/gpu in use" in out
    assert population.names["runner"] in out
    assert cli.main(["nodes", "--json", "--kubeconfig", population.kubeconfig]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["gpus"] == 16 and body["used"] + body["free"] == 16
    held = {h["job"] for n in body["nodes"] for h in n["holders"]}
    assert population.names["runner"] in held


# --- every device: MIG profiles, AMD GPUs ------------------------------------------------------------

MIG = "nvidia.com/mig-1g.10gb"
AMD = "amd.com/gpu"


def test_a_running_mig_job_shows_on_its_nodes_mig_row_not_among_whole_gpus():
    view = node_view(
        [node("a100-mig", 0, devices={MIG: 7}), node("gpu-b", 8)],
        [pod("slice-0", "a100-mig", 2, job="slice", device=MIG), pod("train-0", "gpu-b", 4, job="train")],
    )
    assert [(n.name, n.device, n.gpus, n.used, n.free) for n in view.nodes] == [
        ("gpu-b", GPU, 8, 4, 4),
        ("a100-mig", MIG, 7, 2, 5),
    ]
    (holder,) = view.nodes[1].holders
    assert (holder.job, holder.gpus, holder.device) == ("slice", 2, MIG)
    assert (view.gpus, view.used, view.free) == (8, 4, 4)  # whole GPUs only: a slice is not a GPU
    assert [(t.device, t.gpus, t.used, t.free, t.nodes) for t in view.devices] == [
        (GPU, 8, 4, 4, 1),
        (MIG, 7, 2, 5, 1),
    ]


def test_a_node_offering_two_devices_has_a_row_for_each_and_totals_never_add_them():
    view = node_view(
        [node("mixed", 4, devices={MIG: 14}), node("mi300", 0, devices={AMD: 8})],
        [
            pod("whole-0", "mixed", 4, job="whole"),
            pod("slice-0", "mixed", 3, job="slice", device=MIG),
            pod("rocm-0", "mi300", 8, job="rocm", device=AMD),
        ],
    )
    assert [(n.name, n.device, n.used) for n in view.nodes] == [
        ("mixed", GPU, 4),
        ("mi300", AMD, 8),
        ("mixed", MIG, 3),
    ]
    out = text.nodes_text(view)
    assert "4 of 4 nvidia.com/gpu in use, 0 free, on 1 node" in out
    assert "8 of 8 amd.com/gpu in use, 0 free, on 1 node" in out
    assert "3 of 14 nvidia.com/mig-1g.10gb in use, 11 free, on 1 node" in out
    page = html.nodes_page(view)
    assert 'data-device="amd.com/gpu" data-job="rocm"' in page


def test_a_pod_holding_a_device_its_node_does_not_list_still_counts():
    """The scheduler bound it, so the device is there whatever the node's allocatable says now (a device
    plugin that restarted): the holder is shown, offering 0."""
    view = node_view([node("gpu-a", 8)], [pod("slice-0", "gpu-a", 1, job="slice", device=MIG)])
    assert [(n.device, n.gpus, n.used, n.free) for n in view.nodes] == [(GPU, 8, 0, 8), (MIG, 0, 1, 0)]


# --- one line per node -------------------------------------------------------------------------------


def test_a_node_is_one_line_with_each_device_it_offers_and_its_gpu_product():
    a100 = node("mixed", 4, devices={MIG: 14})
    a100["metadata"]["labels"][GPU_PRODUCT] = "NVIDIA-A100-SXM4-80GB"
    view = node_view(
        [a100, node("plain", 8)],
        [pod("whole-0", "mixed", 4, job="whole"), pod("slice-0", "mixed", 3, job="slice", device=MIG)],
    )
    lines = node_lines(view)
    assert [(n.name, n.product) for n in lines] == [("mixed", "NVIDIA-A100-SXM4-80GB"), ("plain", None)]
    assert [(d.device, d.gpus, d.used) for d in lines[0].devices] == [(GPU, 4, 4), (MIG, 14, 3)]
    page = html.nodes_page(view)
    assert page.count('<tr class="node"') == 2
    assert 'data-node="mixed" data-product="NVIDIA-A100-SXM4-80GB"' in page
    # Each holder still names the device it holds.
    assert 'data-device="nvidia.com/mig-1g.10gb" data-job="slice"' in page
