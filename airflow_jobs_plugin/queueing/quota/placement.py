"""Whether a job's pods can ever be placed on the cluster's nodes: :func:`never_fits`.

The quota pool bounds what a group may hold; the nodes bound what one pod may ask. A pod asking for more
GPUs than any node it may run on has in all is Unschedulable forever (the scheduler's message only says
"Insufficient nvidia.com/gpu", which also means "not now"), and would wait until its job's deadline. The
rule looks only at GPUs and at a pod template's ``nodeSelector`` (equality of labels, as the scheduler's
NodeAffinity filter applies it); free GPUs do not matter, only what a node offers when empty.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import yaml

from airflow_jobs_plugin.cluster.objects import Meta
from airflow_jobs_plugin.jobs import kinds, labels
from airflow_jobs_plugin.jobs.bounded import BoundedSafeLoader
from airflow_jobs_plugin.jobs.kinds.charge import ChargeRefused, job_charge, job_device, pod_request
from airflow_jobs_plugin.jobs.spec import GPU_RESOURCE_PREFIXES
from airflow_jobs_plugin.queueing.quota.preemption import NodeRoom, Placement, PodsOf


@dataclass(frozen=True)
class NodeCapacity:
    """A node as placement sees it: its name, its labels and the GPUs it can ever offer pods."""

    name: str
    gpus: int
    node_labels: Mapping[str, str]
    # Every GPU-like device the node offers, by resource name (MIG slices, AMD GPUs, ...): a pod is
    # placed by the count of the resource it asks for, never by another device's.
    devices: Mapping[str, int] = field(default_factory=dict)

    def offers(self, resource: str) -> int:
        """How many of ``resource`` the node can ever offer pods."""
        return self.gpus if resource == labels.GPU_RESOURCE else self.devices.get(resource, 0)

    @classmethod
    def of(cls, node: Mapping[str, Any]) -> NodeCapacity:
        """From a core/v1 Node: ``status.allocatable`` (what pods may use; capacity minus reservations)."""
        meta = Meta(node)
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        return cls(
            name=meta.name,
            gpus=_count(allocatable.get(labels.GPU_RESOURCE)),
            node_labels={str(k): str(v) for k, v in meta.labels.items()},
            devices={
                str(k): _count(v) for k, v in allocatable.items() if str(k).startswith(GPU_RESOURCE_PREFIXES)
            },
        )


@dataclass(frozen=True)
class PodShape:
    """What one pod of a job asks for: its role, its GPUs, and the labels its nodes must carry."""

    role: str
    gpus: int
    node_selector: Mapping[str, str]
    resource: str = labels.GPU_RESOURCE  # the GPU resource name the pod asks for (gpu_resource)


def _count(value: Any) -> int:
    try:
        return int(str(value)) if value is not None else 0
    except ValueError:
        return 0


def pod_shapes(job: Mapping[str, Any]) -> list[PodShape]:
    """One shape per pod set of the job, each pod's GPUs as the quota pool charges them (jobs/kinds/charge.py)."""
    pod_sets = kinds.kind_of(job).pod_sets(job)
    resource = job_device(pod_set.template for pod_set in pod_sets)
    return [
        PodShape(
            role=pod_set.role,
            gpus=pod_request(pod_set.template.get("spec") or {}, resource),
            resource=resource,
            node_selector={
                str(k): str(v)
                for k, v in ((pod_set.template.get("spec") or {}).get("nodeSelector") or {}).items()
            },
        )
        for pod_set in pod_sets
    ]


def _devices(resource: str) -> str:
    return "GPUs" if resource == labels.GPU_RESOURCE else resource


@dataclass(frozen=True)
class Autoscaling:
    """The nodes a cluster can add, as far as they can be learnt. ``shapes``: nodes it can add, each as
    large as it will be (from the ``autoscaled_node_shapes`` option, or a Karpenter NodePool's limits);
    ``unbounded``: why it can add nodes of a shape nobody said (a cluster-autoscaler, a NodePool without
    GPU limits), where no pod is ever ruled too large; ``None`` when nothing says it can."""

    shapes: tuple[NodeCapacity, ...] = ()
    unbounded: str | None = None


NO_AUTOSCALING = Autoscaling()


class NodeShapesError(ValueError):
    """The ``autoscaled_node_shapes`` option is malformed; the message names the entry and the fix."""


def parse_node_shapes(text: str) -> tuple[NodeCapacity, ...]:
    """The ``autoscaled_node_shapes`` option: a YAML (or JSON) list of the nodes the cluster's
    autoscaler can add, each ``{labels: {...}, resources: {nvidia.com/gpu: 8}}``; empty for ``""``."""
    if not text.strip():
        return ()
    try:
        entries = yaml.load(text, Loader=BoundedSafeLoader)  # noqa: S506 - a SafeLoader subclass
    except (yaml.YAMLError, RecursionError) as exc:
        raise NodeShapesError(f"autoscaled_node_shapes: not YAML: {str(exc)[:200]}") from None
    example = "[{labels: {node.kubernetes.io/instance-type: p4d.24xlarge}, resources: {nvidia.com/gpu: 8}}]"
    if not isinstance(entries, list):
        raise NodeShapesError(f"autoscaled_node_shapes: must be a list of node shapes, e.g. {example}")
    shapes = []
    for i, entry in enumerate(entries):
        where = f"autoscaled_node_shapes[{i}]"
        node_labels = entry.get("labels", {}) if isinstance(entry, dict) else None
        resources = entry.get("resources") if isinstance(entry, dict) else None
        if not isinstance(node_labels, dict) or not isinstance(resources, dict) or not resources:
            raise NodeShapesError(f"{where}: must be a mapping of labels and resources, e.g. {example}")
        counts = {str(k): _count(v) for k, v in resources.items()}
        if any(not str(k).startswith(GPU_RESOURCE_PREFIXES) for k in counts) or any(
            c <= 0 for c in counts.values()
        ):
            raise NodeShapesError(
                f"{where}.resources: GPU resources and their counts per node (whole numbers above 0), "
                f"got {dict(resources)!r:.120}"
            )
        shapes.append(
            NodeCapacity(
                name=f"autoscaled-{i}",
                gpus=counts.get(labels.GPU_RESOURCE, 0),
                node_labels={str(k): str(v) for k, v in node_labels.items()},
                devices=counts,
            )
        )
    return tuple(shapes)


def nodepool_shape(pool: Mapping[str, Any]) -> NodeCapacity | None:
    """The largest node a Karpenter NodePool (karpenter.sh/v1, ``pkg/apis/v1/nodepool.go`` v1.x) can
    add, bounded by its ``spec.limits`` (no node of it can hold more of a resource than the whole pool
    may); ``None`` when its limits do not bound GPUs. Its nodes carry the template's labels and every
    ``In`` requirement of one value."""
    spec = pool.get("spec") or {}
    limits = spec.get("limits") or {}
    gpu_limits = {str(k): _count(v) for k, v in limits.items() if str(k).startswith(GPU_RESOURCE_PREFIXES)}
    if labels.GPU_RESOURCE not in gpu_limits:
        return None
    template = spec.get("template") or {}
    node_labels = {str(k): str(v) for k, v in Meta(template).labels.items()}
    for requirement in (template.get("spec") or {}).get("requirements") or ():
        values = requirement.get("values") or []
        if requirement.get("operator") == "In" and len(values) == 1:
            node_labels[str(requirement.get("key"))] = str(values[0])
    return NodeCapacity(
        name=f"nodepool/{Meta(pool).name}",
        gpus=gpu_limits[labels.GPU_RESOURCE],
        node_labels=node_labels,
        devices=gpu_limits,
    )


def never_fits(
    job: Mapping[str, Any], nodes: Iterable[NodeCapacity], autoscaling: Autoscaling = NO_AUTOSCALING
) -> str | None:
    """Why a pod of ``job`` can never be placed on any of ``nodes``; ``None`` if every pod can be
    (or no node is known, where nothing can be said).

    A cluster that can add nodes is judged with the nodes it can add (``autoscaling.shapes``): a GPU
    node pool scaled to zero offers no GPU now, and a job that fits its nodes must wait for one, not
    fail. Where it can add nodes of a shape nobody said (``autoscaling.unbounded``), nothing is ruled."""
    if autoscaling.unbounded is not None:
        return None
    known = [*nodes, *autoscaling.shapes]
    if not known:
        return None
    for shape in pod_shapes(job):
        if shape.gpus == 0:
            continue
        eligible = [
            n for n in known if all(n.node_labels.get(k) == v for k, v in shape.node_selector.items())
        ]
        largest = max((n.offers(shape.resource) for n in eligible), default=0)
        if shape.gpus <= largest:
            continue
        where = (
            f"a node matching its nodeSelector {dict(shape.node_selector)}"
            if shape.node_selector
            else "any node"
        )
        if not eligible:
            continue  # nodes with those labels may yet join the cluster: nothing can be said
        return (
            f"its {shape.role} pod asks for {shape.gpus} {_devices(shape.resource)} but {where} offers at most {largest} "
            f"(largest node: {max(eligible, key=lambda n: n.offers(shape.resource)).name}): it can never be "
            "scheduled; ask for "
            f"at most {largest} GPUs per pod, or more workers with fewer GPUs each"
        )
    return None


def preemption_placement(
    nodes: Sequence[NodeCapacity],
    jobs: Iterable[dict],
    pods_of: Callable[[dict], Iterable[Mapping[str, Any]] | None],
    every_pod: Iterable[Mapping[str, Any]] | None = None,
) -> Placement | None:
    """What a preemption needs to know of the nodes (queueing/quota/preemption.py ``Placement``), from the
    nodes, one pass's jobs and their pods, and ``every_pod`` the process sees (other groups' too);
    ``None`` when no node is known.

    A node's free GPUs are what it offers less what the pods bound to it that have not ended ask for
    (pods being deleted still hold theirs until they are gone): ``every_pod``'s, else the jobs' own.
    GPUs held by pods nobody sees (another namespace, not the product's) count as free, so there a plan
    may still leave a preemptor Unschedulable, as a plan by quota alone would."""
    if not nodes:
        return None
    used: dict[str, dict[str, int]] = {}
    held_on: dict[str, dict[str, int]] = {}
    asks: dict[str, tuple[PodsOf, ...]] = {}
    for job in jobs:
        uid = Meta(job).uid
        if not uid:
            continue
        try:
            charged = job_charge(job)
        except ChargeRefused:
            continue
        asks[uid] = tuple(PodsOf(p.count, p.gpus, dict(p.node_selector)) for p in charged.pods)
        for pod in pods_of(job) or ():
            spec = pod.get("spec") or {}
            node = spec.get("nodeName")
            if not node or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            gpus = pod_request(spec, charged.resource)
            if gpus <= 0:
                continue
            if every_pod is None:
                on_node = used.setdefault(str(node), {})
                on_node[charged.resource] = on_node.get(charged.resource, 0) + gpus
            held = held_on.setdefault(uid, {})
            held[str(node)] = held.get(str(node), 0) + gpus
    for pod in every_pod or ():
        spec = pod.get("spec") or {}
        node = spec.get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        on_node = used.setdefault(str(node), {})
        for resource in {
            labels.GPU_RESOURCE,
            *(
                n
                for c in spec.get("containers") or ()
                for n in ((c.get("resources") or {}).get("limits") or {})
            ),
        }:
            if str(resource).startswith(GPU_RESOURCE_PREFIXES):
                on_node[resource] = on_node.get(resource, 0) + pod_request(spec, resource)
    rooms = tuple(
        NodeRoom(
            name=n.name,
            node_labels=dict(n.node_labels),
            free={
                resource: max(0, n.offers(resource) - used.get(n.name, {}).get(resource, 0))
                for resource in {labels.GPU_RESOURCE, *n.devices}
            },
        )
        for n in nodes
    )
    return Placement(nodes=rooms, held_on=held_on, pods=asks)


# The events an autoscaler writes on a pod it is adding a node for: the cluster-autoscaler's
# TriggeredScaleUp, and NotTriggerScaleUp when no node group can take it (kubernetes/autoscaler
# cluster-autoscaler/processors/status/eventing_scale_up_processor.go); Karpenter's Nominated, once it
# has launched a NodeClaim for the pod (kubernetes-sigs/karpenter pkg/controllers/provisioning/scheduling/events.go).
SCALE_UP_REASONS = frozenset({"TriggeredScaleUp", "Nominated"})
NO_SCALE_UP_REASONS = frozenset({"NotTriggerScaleUp"})
# How long a node being added is waited for: the cluster-autoscaler's --max-node-provision-time
# default, after which it gives the node up itself.
NODE_PROVISION_WAIT = timedelta(minutes=15)


def node_coming(events: Iterable[Mapping[str, Any]]) -> datetime | None:
    """Until when a pod waits for a node an autoscaler is adding: the newest scale-up event's time plus
    :data:`NODE_PROVISION_WAIT`, unless a later event says no scale-up helps; ``None`` otherwise. Such
    a pod is waiting for its node, not stuck: its schedule deadline waits too."""
    newest_up: datetime | None = None
    newest_no: datetime | None = None
    for event in events:
        reason = event.get("reason")
        if reason not in SCALE_UP_REASONS and reason not in NO_SCALE_UP_REASONS:
            continue
        at = _event_time(event)
        if at is None:
            continue
        if reason in SCALE_UP_REASONS:
            newest_up = at if newest_up is None else max(newest_up, at)
        else:
            newest_no = at if newest_no is None else max(newest_no, at)
    if newest_up is None or (newest_no is not None and newest_no > newest_up):
        return None
    return newest_up + NODE_PROVISION_WAIT


def _event_time(event: Mapping[str, Any]) -> datetime | None:
    for key in ("lastTimestamp", "eventTime", "firstTimestamp"):
        text = event.get(key) or (
            (event.get("series") or {}).get("lastObservedTime") if key == "eventTime" else None
        )
        if isinstance(text, str) and text:
            try:
                return datetime.fromisoformat(text.replace("Z", "+00:00"))
            except ValueError:
                continue
    return None
