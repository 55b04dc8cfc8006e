"""GPU flavors: quotas per type of GPU node (A100 nodes, H100 nodes), as Kueue's ResourceFlavors and
Run:ai's node pools give them.

A flavor is a GPU resource on the nodes that carry its labels, e.g. ``nvidia.com/gpu`` on nodes labelled
``nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3`` (the label NVIDIA's GPU Feature Discovery puts on
every GPU node). The policy names the flavors once, and each group gets a quota per flavor::

    flavors:
      a100: {node_labels: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB}}
      h100: {node_labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}}
    groups:
      vision: {gpus: 0, flavors: {a100: 16, h100: 8}}

**Which flavor a job is charged.** A job asks for a flavor by selecting its nodes: its ``node_selector``
holds every label of exactly one flavor of its GPU resource (kubernetes-sigs/kueue v0.19.2 assigns a
flavor and writes its ``nodeLabels`` into the pods, ``pkg/scheduler/flavorassigner/flavorassigner.go``;
here the DAG author picks, and the pod already carries the labels). It is then charged against its
group's quota of that flavor, and waits in that flavor's line: a job waiting for H100s never holds back
one that asks for A100s.

**Jobs that name no flavor** are charged against the group's plain ``gpus`` and kept off every flavored
node of their resource (a required node affinity ``NotIn`` each flavor's label values, which the
scheduler enforces: kubernetes ``pkg/scheduler/framework/plugins/nodeaffinity``, v1.32), so they can
never spend a flavor's GPUs without being charged for them (Slurm documents that loophole for typed
GRES requested without a type). A group with ``gpus: 0`` has no such quota: such a job is refused at
submission with the flavors it may ask for.

Flavors apply to whole-GPU quota lines of their own; cohorts lend plain ``gpus`` only. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from airflow_jobs_plugin.jobs.labels import GPU_RESOURCE


@dataclass(frozen=True)
class Flavor:
    """One kind of GPU node: a GPU resource on the nodes carrying ``node_labels``."""

    name: str
    node_labels: Mapping[str, str] = field(hash=False)
    resource: str = GPU_RESOURCE


class FlavorError(ValueError):
    """The job's node selection and the policy's flavors disagree; the message names the fix."""


def flavor_of(
    flavors: Mapping[str, Flavor], resource: str, node_selector: Mapping[str, str] | None
) -> Flavor | None:
    """The flavor a job selects with ``node_selector`` (None: it selects none). Raises
    :class:`FlavorError` if it selects several."""
    selector = node_selector or {}
    matches = [
        f
        for f in flavors.values()
        if f.resource == resource and all(selector.get(k) == v for k, v in f.node_labels.items())
    ]
    if len(matches) > 1:
        names = ", ".join(sorted(f.name for f in matches))
        raise FlavorError(f"node_selector selects several GPU flavors ({names}); select the labels of one")
    return matches[0] if matches else None


def avoid_flavors(flavors: Mapping[str, Flavor], resource: str) -> dict[str, tuple[str, ...]]:
    """Node labels and the values a job that names no flavor of ``resource`` must avoid."""
    avoid: dict[str, set[str]] = {}
    for f in flavors.values():
        if f.resource != resource:
            continue
        for key, value in f.node_labels.items():
            avoid.setdefault(key, set()).add(value)
    return {key: tuple(sorted(values)) for key, values in sorted(avoid.items())}


def with_avoidance(affinity: Mapping | None, avoid: Mapping[str, tuple[str, ...]]) -> dict | None:
    """``affinity`` (a pod's Affinity JSON) that also keeps the pod off nodes labelled as in ``avoid``.

    The required node selector terms are ORed and each term's expressions ANDed, so the ``NotIn``
    expressions go into every term (or one new term), and no existing term can bypass them.
    """
    if not avoid:
        return dict(affinity) if affinity is not None else None
    expressions = [{"key": k, "operator": "NotIn", "values": list(v)} for k, v in avoid.items()]
    result = {k: v for k, v in (affinity or {}).items()}
    node = dict(result.get("nodeAffinity") or {})
    required = dict(node.get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = [dict(t) for t in required.get("nodeSelectorTerms") or ()] or [{}]
    for term in terms:
        term["matchExpressions"] = [*(term.get("matchExpressions") or ()), *expressions]
    required["nodeSelectorTerms"] = terms
    node["requiredDuringSchedulingIgnoredDuringExecution"] = required
    result["nodeAffinity"] = node
    return result


@dataclass(frozen=True)
class Charge:
    """How a job is charged: its quota line (a flavor's name, or its resource) and, for a job that
    names no flavor of a resource that has some, the node labels it must keep away from."""

    key: str
    flavor: Flavor | None = None
    avoid: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)


def charge(
    flavors: Mapping[str, Flavor],
    group: str,
    group_flavors: Mapping[str, int],
    plain_quota: int,
    resource: str,
    node_selector: Mapping[str, str] | None,
) -> Charge:
    """The quota line of a job of ``group`` asking for ``resource`` on ``node_selector``'s nodes.

    Raises :class:`FlavorError` when the selection and the policy disagree: several flavors selected,
    a flavor the group has no quota of, or no flavor in a group whose plain quota is 0 but which has
    flavors of the resource (the message lists the node selectors to use).
    """
    flavor = flavor_of(flavors, resource, node_selector)
    if flavor is not None:
        if flavor.name not in group_flavors:
            mine = ", ".join(sorted(group_flavors)) or "none"
            raise FlavorError(
                f"node_selector picks GPU flavor {flavor.name}, of which group {group} has no quota "
                f"(its flavors: {mine}); pick another or ask a platform admin for "
                f"groups.{group}.flavors.{flavor.name} in the quota policy"
            )
        return Charge(key=flavor.name, flavor=flavor)
    avoid = avoid_flavors(flavors, resource)
    offered = [flavors[n] for n in sorted(group_flavors) if n in flavors and flavors[n].resource == resource]
    if avoid and plain_quota == 0 and offered:
        choices = "; ".join(f"{f.name}: node_selector={dict(f.node_labels)}" for f in offered)
        raise FlavorError(
            f"group {group} has quota for {resource} only per GPU flavor: pick one with node_selector ({choices})"
        )
    return Charge(key=resource, avoid=avoid)
