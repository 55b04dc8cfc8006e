"""The node view: GPUs per node, used and free, and which jobs hold them (what ``mcli util`` shows).

Pure: nodes and pods in, rows out. A node offers what its ``status.allocatable`` says; a pod holds the
GPUs its containers ask for from the moment the scheduler bound it (``spec.nodeName``) until it ends,
which is how kube-scheduler's NodeResourcesFit plugin counts a node's requested resources
(kubernetes v1.32 ``pkg/scheduler/framework/types.go``, ``NodeInfo.AddPod``: every pod bound to the
node, terminal ones removed by the scheduler's cache). Init containers count as the scheduler counts
them: the larger of their largest request and the sum of the regular containers'.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from airflow_jobs_plugin import labels
from airflow_jobs_plugin.quota.placement import NodeCapacity
from airflow_jobs_plugin.watch import job_key

ENDED = ("Succeeded", "Failed")


@dataclass(frozen=True)
class NodeHolder:
    """A job (or another pod) holding GPUs on a node."""

    namespace: str
    job: str  # the product job's name, else the pod's
    gpus: int
    user: str | None = None
    group: str | None = None
    product: bool = True  # False: a pod of something else, not a GPU job of this product
    dag_id: str | None = None


@dataclass(frozen=True)
class NodeRow:
    """One node: its GPUs, how many pods hold, and who."""

    name: str
    gpus: int
    used: int
    free: int
    ready: bool
    schedulable: bool
    holders: tuple[NodeHolder, ...]


@dataclass(frozen=True)
class NodeView:
    """Every node with GPUs, and the totals; ``problem`` says what could not be read."""

    nodes: tuple[NodeRow, ...]
    gpus: int
    used: int
    free: int
    problem: str | None = None


def _count(value: Any) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def _asks(container: Mapping[str, Any], resource: str) -> int:
    resources = container.get("resources") or {}
    # An extended resource is given as a limit (the request defaults to it) or as both, equal.
    return _count(
        (resources.get("requests") or {}).get(resource) or (resources.get("limits") or {}).get(resource)
    )


def pod_gpus(pod: Mapping[str, Any], resource: str = labels.GPU_RESOURCE) -> int:
    """The GPUs a pod holds on its node, counted as the scheduler counts a pod's request."""
    spec = pod.get("spec") or {}
    regular = sum(_asks(c, resource) for c in spec.get("containers") or ())
    init = max((_asks(c, resource) for c in spec.get("initContainers") or ()), default=0)
    return max(regular, init)


def _ready(node: Mapping[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def node_view(
    nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]], problem: str | None = None
) -> NodeView:
    """The nodes that offer GPUs, busiest first, with the jobs holding them, largest first."""
    held: dict[str, dict[tuple[str, str], NodeHolder]] = {}
    for pod in pods:
        spec, meta = pod.get("spec") or {}, pod.get("metadata") or {}
        node = spec.get("nodeName")
        gpus = pod_gpus(pod)
        if not node or not gpus or (pod.get("status") or {}).get("phase") in ENDED:
            continue
        namespace = str(meta.get("namespace") or "")
        annotations = meta.get("annotations") or {}
        owner = job_key(pod)
        product = labels.MANAGED_BY in (meta.get("labels") or {}) and owner is not None
        name = str(owner if product else meta.get("name") or "")
        before = held.setdefault(node, {}).get((namespace, name))
        held[node][(namespace, name)] = NodeHolder(
            namespace,
            name,
            gpus + (before.gpus if before else 0),
            annotations.get(labels.USER_NAME) if product else None,
            annotations.get(labels.GROUP_NAME) if product else None,
            product,
            annotations.get(labels.DAG_ID) if product else None,
        )
    rows = []
    for node in nodes:
        capacity = NodeCapacity.of(node)
        holders = tuple(
            sorted(held.get(capacity.name, {}).values(), key=lambda h: (-h.gpus, h.namespace, h.job))
        )
        if not capacity.gpus and not holders:
            continue
        used = sum(h.gpus for h in holders)
        rows.append(
            NodeRow(
                name=capacity.name,
                gpus=capacity.gpus,
                used=used,
                free=max(0, capacity.gpus - used),
                ready=_ready(node),
                schedulable=not (node.get("spec") or {}).get("unschedulable"),
                holders=holders,
            )
        )
    rows.sort(key=lambda r: (-r.used, r.name))
    return NodeView(
        tuple(rows),
        gpus=sum(r.gpus for r in rows),
        used=sum(r.used for r in rows),
        free=sum(r.free for r in rows),
        problem=problem,
    )


HIDDEN = "(a job you may not read)"


def for_reader(view: NodeView, may_read: Callable[[str | None], bool]) -> NodeView:
    """``view`` for a reader: the GPUs every job holds still count (the nodes are shared), but a job of
    a DAG the reader may not read, or outside any DAG for a reader who may not read every DAG, is not
    named, as the job list leaves it out."""
    verdicts: dict[str | None, bool] = {}

    def allowed(dag_id: str | None) -> bool:
        if dag_id not in verdicts:
            verdicts[dag_id] = may_read(dag_id)
        return verdicts[dag_id]

    rows = []
    for row in view.nodes:
        holders = tuple(
            h
            if not h.product or allowed(h.dag_id)
            else NodeHolder(h.namespace, HIDDEN, h.gpus, None, h.group, True, None)
            for h in row.holders
        )
        rows.append(replace(row, holders=holders))
    return replace(view, nodes=tuple(rows))
