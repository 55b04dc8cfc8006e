"""The node view: GPUs per node, used and free, and which jobs hold them (what ``mcli util`` shows).

Pure: nodes and pods in, rows out. A node offers what its ``status.allocatable`` says; a pod holds the
GPUs its containers ask for from the moment the scheduler bound it (``spec.nodeName``) until it ends,
which is how kube-scheduler's NodeResourcesFit plugin counts a node's requested resources
(kubernetes v1.32 ``pkg/scheduler/framework/types.go``, ``NodeInfo.AddPod``: every pod bound to the
node, terminal ones removed by the scheduler's cache). Init containers count as the scheduler counts
them: the larger of their largest request and the sum of the regular containers'.

Every GPU device counts apart: whole NVIDIA GPUs (``nvidia.com/gpu``), each MIG profile
(``nvidia.com/mig-1g.10gb``, ...: the NVIDIA device plugin's mixed strategy advertises each profile as a
resource of its own), AMD (``amd.com/gpu``) and Intel (``gpu.intel.com/...``) GPUs, the names
``spec.GPU_RESOURCE_PREFIXES`` knows. A node offering two devices has a row for each; a holder names the
device it holds; totals are per device, and rows are ordered device by device, so a MIG slice is never
added to, compared with or sorted among whole GPUs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Annotated, Any

from airflow_jobs_plugin.cluster.objects import Meta
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.kinds import job_key
from airflow_jobs_plugin.jobs.spec import GPU_RESOURCE_PREFIXES
from airflow_jobs_plugin.json_fields import Json
from airflow_jobs_plugin.queueing.quota.placement import NodeCapacity

ENDED = ("Succeeded", "Failed")
# The GPU model of a node, as NVIDIA's GPU Feature Discovery labels it (NVIDIA-A100-SXM4-80GB): the same
# label a quota flavor's node_labels select (queueing/quota/flavors.py).
GPU_PRODUCT = "nvidia.com/gpu.product"


@dataclass(frozen=True)
class NodeHolder:
    """A job (or another pod) holding GPUs on a node."""

    namespace: Annotated[str, Json("the holder's namespace")]
    # The product job's name, else the pod's.
    job: Annotated[str, Json("the job's name, else the pod's; a job the reader may not read is not named")]
    gpus: Annotated[int, Json("GPUs it holds on the node")]
    user: Annotated[
        str | None, Json("the job's user; null for other pods and unreadable jobs", blank_is_null=True)
    ] = None
    group: Annotated[str | None, Json("the job's group", blank_is_null=True)] = None
    # False: a pod of something else, not a GPU job of this product.
    product: Annotated[bool, Json("false for a pod that is not a GPU job of this product")] = True
    dag_id: Annotated[
        str | None, Json("the job's DAG; null for other pods and unreadable jobs", blank_is_null=True)
    ] = None
    # The resource it holds: nvidia.com/gpu, a MIG profile, amd.com/gpu.
    device: Annotated[
        str, Json("the GPU resource it holds: nvidia.com/gpu, a MIG profile, amd.com/gpu, ...")
    ] = labels.GPU_RESOURCE


@dataclass(frozen=True)
class NodeRow:
    """One device of one node: how many it offers, how many pods hold, and who."""

    name: Annotated[str, Json("the node's name")]
    gpus: Annotated[int, Json("allocatable units of the device")]
    used: Annotated[int, Json("units of the device the live pods bound to it ask for")]
    free: Annotated[int, Json("gpus minus used, at least 0")]
    ready: Annotated[bool, Json("the node's Ready condition")]
    schedulable: Annotated[bool, Json("false when cordoned")]
    holders: Annotated[tuple[NodeHolder, ...], Json("largest first")]
    device: Annotated[
        str, Json("the GPU resource of this row: nvidia.com/gpu, a MIG profile, amd.com/gpu, ...")
    ] = labels.GPU_RESOURCE
    product: Annotated[
        str | None,
        Json(
            "the node's GPU model, its nvidia.com/gpu.product label (NVIDIA's GPU Feature Discovery); "
            "null without one",
            blank_is_null=True,
        ),
    ] = None


@dataclass(frozen=True)
class NodeLine:
    """One node as the node page lists it: once, with every device it offers (its rows of the view)."""

    name: str
    ready: bool
    schedulable: bool
    product: str | None
    devices: tuple[NodeRow, ...]


@dataclass(frozen=True)
class DeviceTotal:
    """One device over every node."""

    device: Annotated[str, Json("the GPU resource")]
    gpus: Annotated[int, Json("allocatable units on every node")]
    used: Annotated[int, Json("units held on every node")]
    free: Annotated[int, Json("units free on every node")]
    nodes: Annotated[int, Json("nodes offering or holding it")]


@dataclass(frozen=True)
class NodeView:
    """Every node with GPUs, a row per device it offers, and the totals per device (``gpus``, ``used``,
    ``free``: whole NVIDIA GPUs; ``devices``: every device); ``problem`` says what could not be read."""

    nodes: Annotated[tuple[NodeRow, ...], Json("device by device (whole NVIDIA GPUs first), busiest first")]
    gpus: Annotated[int, Json("allocatable whole NVIDIA GPUs (nvidia.com/gpu) of every node; see devices")]
    used: Annotated[int, Json("whole NVIDIA GPUs held on every node")]
    free: Annotated[int, Json("whole NVIDIA GPUs free on every node")]
    problem: Annotated[
        str | None,
        Json("what could not be read (e.g. pods outside the jobs' namespaces)", blank_is_null=True),
    ] = None
    devices: Annotated[tuple[DeviceTotal, ...], Json("the totals of every device, never added together")] = ()


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


def is_gpu_device(resource: str) -> bool:
    return resource.startswith(GPU_RESOURCE_PREFIXES)


def pod_devices(pod: Mapping[str, Any]) -> dict[str, int]:
    """Every GPU device a pod holds on its node, by resource name, counted as the scheduler counts."""
    spec = pod.get("spec") or {}
    names = {
        str(name)
        for c in [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]
        for part in ("requests", "limits")
        for name in ((c.get("resources") or {}).get(part) or {})
        if is_gpu_device(str(name))
    }
    return {name: n for name in sorted(names) if (n := pod_gpus(pod, name))}


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
    """A row per device of every node that offers or holds GPUs, device by device, busiest first,
    with the jobs holding them, largest first."""
    held: dict[tuple[str, str], dict[tuple[str, str], NodeHolder]] = {}
    for pod in pods:
        spec, meta = pod.get("spec") or {}, Meta(pod)
        node = spec.get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in ENDED:
            continue
        namespace = meta.namespace
        annotations = meta.annotations
        owner = job_key(pod)
        product = labels.MANAGED_BY in meta.labels and owner is not None
        name = str(owner if product else meta.name)
        for device, gpus in pod_devices(pod).items():
            on_node = held.setdefault((node, device), {})
            before = on_node.get((namespace, name))
            on_node[(namespace, name)] = NodeHolder(
                namespace,
                name,
                gpus + (before.gpus if before else 0),
                annotations.get(labels.USER_NAME) if product else None,
                annotations.get(labels.GROUP_NAME) if product else None,
                product,
                annotations.get(labels.DAG_ID) if product else None,
                device,
            )
    rows = []
    for node in nodes:
        capacity = NodeCapacity.of(node)
        offered = {d: n for d, n in capacity.devices.items() if n}
        devices = sorted(set(offered) | {d for n, d in held if n == capacity.name})
        for device in devices:
            holders = tuple(
                sorted(
                    held.get((capacity.name, device), {}).values(),
                    key=lambda h: (-h.gpus, h.namespace, h.job),
                )
            )
            used = sum(h.gpus for h in holders)
            gpus = offered.get(device, 0)
            rows.append(
                NodeRow(
                    name=capacity.name,
                    gpus=gpus,
                    used=used,
                    free=max(0, gpus - used),
                    ready=_ready(node),
                    schedulable=not (node.get("spec") or {}).get("unschedulable"),
                    holders=holders,
                    device=device,
                    product=Meta(node).labels.get(GPU_PRODUCT) or None,
                )
            )
    # Whole GPUs first, then the other devices by name; busiest first within a device.
    rows.sort(key=lambda r: (r.device != labels.GPU_RESOURCE, r.device, -r.used, r.name))
    totals = []
    for device in dict.fromkeys(r.device for r in rows):
        mine = [r for r in rows if r.device == device]
        totals.append(
            DeviceTotal(
                device,
                sum(r.gpus for r in mine),
                sum(r.used for r in mine),
                sum(r.free for r in mine),
                len(mine),
            )
        )
    whole = next((t for t in totals if t.device == labels.GPU_RESOURCE), None)
    return NodeView(
        tuple(rows),
        gpus=whole.gpus if whole else 0,
        used=whole.used if whole else 0,
        free=whole.free if whole else 0,
        problem=problem,
        devices=tuple(totals),
    )


def node_lines(view: NodeView) -> tuple[NodeLine, ...]:
    """A line per node, with its devices' rows in the view's order (whole GPUs first), the nodes in the
    order their first row comes: the view keeps a row per device so that no total adds a MIG slice to a
    whole GPU, but a person looks for a node once."""
    devices: dict[str, list[NodeRow]] = {}
    for row in view.nodes:
        devices.setdefault(row.name, []).append(row)
    return tuple(
        NodeLine(
            name=name,
            ready=rows[0].ready,
            schedulable=rows[0].schedulable,
            product=next((r.product for r in rows if r.product), None),
            devices=tuple(rows),
        )
        for name, rows in devices.items()
    )


def totals_line(view: NodeView) -> str:
    """Per device: ``8 of 24 nvidia.com/gpu in use, 16 free, on 3 nodes; 2 of 14 nvidia.com/mig-1g.10gb ...``."""
    if not view.devices:
        return "no node offers GPUs"
    return "; ".join(
        f"{t.used} of {t.gpus} {t.device} in use, {t.free} free, on {t.nodes} node{'s' if t.nodes != 1 else ''}"
        for t in view.devices
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
            else NodeHolder(h.namespace, HIDDEN, h.gpus, None, h.group, True, None, h.device)
            for h in row.holders
        )
        rows.append(replace(row, holders=holders))
    return replace(view, nodes=tuple(rows))
