"""The node view (``mcli util``): GPUs per node, used and free, and which jobs hold them."""

from __future__ import annotations

import json

from airflow_jobs_plugin import labels
from airflow_jobs_plugin.plugin import html, text
from airflow_jobs_plugin.plugin.nodes import HIDDEN, for_reader, node_view, pod_gpus

GPU = labels.GPU_RESOURCE


def node(name: str, gpus: int, *, ready: bool = True, cordoned: bool = False) -> dict:
    return {
        "metadata": {"name": name, "labels": {}},
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {
            "allocatable": {"cpu": "32", **({GPU: str(gpus)} if gpus else {})},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod(
    name: str, on: str | None, gpus: int, *, job: str | None = None, phase: str = "Running", **extra
) -> dict:
    meta: dict = {"name": name, "namespace": "ml", "labels": {}, "annotations": {}}
    if job:
        meta["labels"] = {labels.MANAGED_BY: "airflow-jobs-plugin", labels.BATCH_JOB_NAME: job}
        meta["annotations"] = {
            labels.USER_NAME: "alice",
            labels.GROUP_NAME: "vision",
            labels.DAG_ID: "nightly",
        }
    spec: dict = {"containers": [{"name": "main", "resources": {"limits": {GPU: str(gpus)}}}], **extra}
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
    assert "train" not in page and "4 of 8 GPUs in use" in page


def test_the_cli_shows_the_nodes_of_the_cluster(population, capsys):
    from airflow_jobs_plugin import cli

    assert cli.main(["nodes", "--kubeconfig", population.kubeconfig]) == 0
    out = capsys.readouterr().out
    assert "GPUS" in out and "of 16 GPUs in use" in out
    assert population.names["runner"] in out
    assert cli.main(["nodes", "--json", "--kubeconfig", population.kubeconfig]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["gpus"] == 16 and body["used"] + body["free"] == 16
    held = {h["job"] for n in body["nodes"] for h in n["holders"]}
    assert population.names["runner"] in held
