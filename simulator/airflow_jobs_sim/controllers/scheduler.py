"""The simulated kube-scheduler: places pending pods on nodes by GPU, CPU and memory.

The decision (``fit_pod``) is pure: filters in the real scheduler's order (NodeUnschedulable,
TaintToleration, NodeAffinity, NodeResourcesFit), then the most-allocated node wins (bin-packing, which
keeps whole nodes free for big GPU jobs). A pod that fits nowhere gets the real scheduler's message, e.g.
``0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are available: 2 No
preemption victims found for incoming pod.``
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from airflow_jobs_sim.clock import Clock
from airflow_jobs_sim.conditions import get_condition, set_condition
from airflow_jobs_sim.controllers.base import (
    Reconciler,
    pod_is_terminal,
)
from airflow_jobs_sim.events import NORMAL, SCHEDULER, WARNING, EventRecorder, EventSpec
from airflow_jobs_sim.references import CLAIMS, missing_claim

log = logging.getLogger(__name__)

GPU = "nvidia.com/gpu"
SCHEDULER_NAME = "default-scheduler"
_SCORED = (("cpu", 1), ("memory", 1), (GPU, 3))
_SUFFIXES = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")

NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"


def parse_quantity(value: Any) -> Decimal:
    """A Kubernetes resource quantity ("500m", "64", "512Gi", 2) as a number."""
    return _parse_quantity(str(value).strip())


@functools.lru_cache(maxsize=4096)
def _parse_quantity(text: str) -> Decimal:
    # A cluster repeats a handful of quantities thousands of times per scheduling pass.
    match = _QUANTITY.match(text)
    if not match:
        raise ValueError(f"quantities must match the regular expression: {text!r}")
    try:
        return Decimal(match.group(1)) * Decimal(str(_SUFFIXES[match.group(2) or ""]))
    except InvalidOperation:
        raise ValueError(f"invalid quantity {text!r}") from None


def _container_requests(container: dict) -> dict[str, Decimal]:
    resources = container.get("resources") or {}
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {name: parse_quantity(v) for name, v in merged.items()}


def pod_requests(pod: dict) -> dict[str, Decimal]:
    """What the pod needs from a node: the sum over its containers, at least the largest init container."""
    spec = pod.get("spec", {})
    total: dict[str, Decimal] = {}
    for container in spec.get("containers") or ():
        _add_usage(total, _container_requests(container))
    for container in spec.get("initContainers") or ():
        for name, qty in _container_requests(container).items():
            total[name] = max(total.get(name, Decimal(0)), qty)
    return total


def _add_usage(used: dict[str, Decimal], requests: Mapping[str, Decimal], sign: int = 1) -> None:
    """Add (``sign`` -1: take away) ``requests`` to the counts ``used``, in place."""
    for name, qty in requests.items():
        used[name] = used.get(name, Decimal(0)) + sign * qty


def node_allocatable(node: dict) -> dict[str, Decimal]:
    """The node's allocatable resources."""
    alloc = node.get("status", {}).get("allocatable") or node.get("status", {}).get("capacity") or {}
    return {name: parse_quantity(v) for name, v in alloc.items()}


def occupies_node(pod: dict) -> bool:
    """Whether the pod holds resources on its node (bound and not finished; terminating pods still do)."""
    return bool(pod.get("spec", {}).get("nodeName")) and not pod_is_terminal(pod)


def wants_scheduling(pod: dict) -> bool:
    """Whether the scheduler should try to place this pod now."""
    spec = pod.get("spec", {})
    return (
        not spec.get("nodeName")
        and not spec.get("schedulingGates")
        and spec.get("schedulerName", SCHEDULER_NAME) == SCHEDULER_NAME
        and not pod.get("metadata", {}).get("deletionTimestamp")
        and not pod_is_terminal(pod)
    )


@dataclass(frozen=True)
class Placement:
    """The pod fits; bind it to ``node``."""

    node: str


@dataclass(frozen=True)
class Unschedulable:
    """The pod fits nowhere; ``message`` is the scheduler's explanation."""

    message: str


def tolerates(tolerations: list[dict], taint: dict) -> bool:
    """Whether one of ``tolerations`` tolerates ``taint``."""
    for tol in tolerations:
        if tol.get("effect") and tol["effect"] != taint.get("effect"):
            continue
        if tol.get("operator", "Equal") == "Exists":
            if not tol.get("key") or tol["key"] == taint.get("key"):
                return True
        elif tol.get("key") == taint.get("key") and (tol.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _match_expression(labels: dict, expr: dict) -> bool:
    key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt") and key in labels and values:
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def matches_node(pod: dict, node: dict) -> bool:
    """nodeSelector and required node affinity."""
    labels = node.get("metadata", {}).get("labels") or {}
    spec = pod.get("spec", {})
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required and required.get("nodeSelectorTerms"):
        return any(
            all(_match_expression(labels, e) for e in term.get("matchExpressions") or ())
            for term in required["nodeSelectorTerms"]
        )
    return True


def _filter(
    pod: dict,
    node: dict,
    used: Mapping[str, Decimal],
    requests: dict[str, Decimal] | None = None,
    alloc: dict[str, Decimal] | None = None,
) -> tuple[list[str], bool]:
    """Why ``node`` cannot take ``pod`` (empty: it can), and whether preemption could help.

    ``requests`` (``pod_requests(pod)``) and ``alloc`` (``node_allocatable(node)``) save parsing them
    again for every node and every pod of a pass."""
    if node.get("spec", {}).get("unschedulable"):
        return ["node(s) were unschedulable"], False
    tolerations = pod.get("spec", {}).get("tolerations") or []
    for taint in node.get("spec", {}).get("taints") or ():
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
            return [
                f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value') or ''}}}"
            ], False
    if not matches_node(pod, node):
        return ["node(s) didn't match Pod's node affinity/selector"], False
    if alloc is None:
        alloc = node_allocatable(node)
    reasons = []
    if "pods" in alloc and used.get("pods", Decimal(0)) + 1 > alloc["pods"]:
        reasons.append("Too many pods")
    for name, qty in sorted((requests if requests is not None else pod_requests(pod)).items()):
        if qty > 0 and used.get(name, Decimal(0)) + qty > alloc.get(name, Decimal(0)):
            reasons.append(f"Insufficient {name}")
    return reasons, True


def node_usage(node_name: str, pods: list[dict]) -> dict[str, Decimal]:
    """Resources requested by the pods occupying ``node_name`` (plus their count under "pods")."""
    used: dict[str, Decimal] = {}
    for pod in pods:
        if pod.get("spec", {}).get("nodeName") == node_name and occupies_node(pod):
            _add_usage(used, pod_requests(pod))
            used["pods"] = used.get("pods", Decimal(0)) + 1
    return used


def _ranked(counts: Counter[str]) -> str:
    return ", ".join(sorted(f"{n} {reason}" for reason, n in counts.items()))


def fit_pod(
    pod: dict,
    nodes: list[dict],
    pods: list[dict],
    usage: Mapping[str, Mapping[str, Decimal]] | None = None,
    allocatable: Mapping[str, dict[str, Decimal]] | None = None,
    memo: dict[str, dict[str, tuple[list[str], bool, float]]] | None = None,
) -> Placement | Unschedulable:
    """Choose a node for ``pod`` given the cluster's ``nodes`` and all ``pods`` (pure).

    ``usage`` (node name -> requested resources, as ``node_usage`` computes it) saves recomputing it
    from ``pods`` when many pods are placed in one pass; ``allocatable`` (node name ->
    ``node_allocatable(node)``) saves parsing every node's quantities again for every pod. ``memo``, a
    dict kept by the caller for one pass over the same nodes and ``usage``, remembers each node's
    verdict (filter reasons and score) for pods that ask the same of a node (tolerations, node selector
    and affinity, requests), since that is all the verdict depends on; the caller drops a node's entry
    (``memo.pop(name)``) when its usage changes.
    """
    failures: Counter[str] = Counter()
    preemption: Counter[str] = Counter()
    candidates: list[tuple[float, str]] = []
    requests = pod_requests(pod)
    asks = _asks(pod, requests) if memo is not None else ""
    for node in nodes:
        name = node["metadata"]["name"]
        known = memo.get(name, {}).get(asks) if memo is not None else None
        if known is None:
            used = usage[name] if usage is not None and name in usage else node_usage(name, pods)
            alloc = (
                allocatable[name]
                if allocatable is not None and name in allocatable
                else node_allocatable(node)
            )
            reasons, helpful = _filter(pod, node, used, requests, alloc)
            score, weights = 0.0, 0
            if not reasons:
                for resource, weight in _SCORED:
                    if alloc.get(resource):
                        after = used.get(resource, Decimal(0)) + requests.get(resource, Decimal(0))
                        score += weight * float(after / alloc[resource])
                        weights += weight
            known = (reasons, helpful, score / weights if weights else 0.0)
            if memo is not None:
                memo.setdefault(name, {})[asks] = known
        reasons, helpful, score = known
        if reasons:
            failures.update(reasons)
            preemption[NO_VICTIMS if helpful else NOT_HELPFUL] += 1
            continue
        candidates.append((score, name))
    if candidates:
        best = min(candidates, key=lambda c: (-c[0], c[1]))  # ties: the first node by name
        return Placement(best[1])
    total = len(nodes)
    if total == 0:
        return Unschedulable("no nodes available to schedule pods")
    return Unschedulable(
        f"0/{total} nodes are available: {_ranked(failures)}. "
        f"preemption: 0/{total} nodes are available: {_ranked(preemption)}."
    )


def _asks(pod: dict, requests: dict[str, Decimal]) -> str:
    """What ``_filter`` and the score read of a pod, as a key."""
    spec = pod.get("spec") or {}
    return json.dumps(
        [spec.get("tolerations"), spec.get("nodeSelector"), spec.get("affinity"), sorted(requests.items())],
        sort_keys=True,
        default=str,
    )


def unresolvable(message: str, total: int) -> Unschedulable:
    """A PreFilter rejection (UnschedulableAndUnresolvable): no node is tried and preemption cannot help.

    The wording is ``FitError.Error()`` of kubernetes release-1.32 ``pkg/scheduler/framework/types.go``
    with a PreFilter message, followed by the preemption PostFilter's summary.
    """
    return Unschedulable(
        f"0/{total} nodes are available: {message}. "
        f"preemption: 0/{total} nodes are available: {total} {NOT_HELPFUL}."
    )


def pending_order(pods: list[dict]) -> list[dict]:
    """Pods waiting for a node, highest priority first, then oldest first (the scheduling queue's order)."""
    waiting = [p for p in pods if wants_scheduling(p)]
    return sorted(
        waiting,
        key=lambda p: (
            -int(p.get("spec", {}).get("priority") or 0),
            p.get("metadata", {}).get("creationTimestamp") or "",
            int(p.get("metadata", {}).get("resourceVersion") or 0),
        ),
    )


# What an empty node holds; shared, never changed (a pass copies a node's counts before adding to them).
_NONE: dict[str, Decimal] = {}  # shared by every empty node; never changed


class Capacity:
    """What the pods hold on each node, and which pods wait for one, kept current inside every write.

    A pass used to recount every pod in the store: one pass per pod created, each O(all pods), made
    starting thousands of pods quadratic. This is fed by the store's watcher hook, under the store lock
    and in write order, so it is never behind the store; a pass copies it under the same lock.
    """

    def __init__(self) -> None:
        self.usage: dict[str, dict[str, Decimal]] = {}
        self.waiting: dict[str, tuple[str, str]] = {}  # uid -> (namespace, name): no node yet
        self._held: dict[str, tuple[str, dict[str, Decimal]]] = {}  # uid -> (node, requests)

    def on_write(self, rv: int, event_type: str, resource: str, pod: dict, prev: dict | None) -> None:
        if resource != "pods":
            return
        meta = pod["metadata"]
        uid = meta.get("uid") or ""
        held = self._held.pop(uid, None)
        if held is not None:
            self._add(held[0], held[1], -1)
        self.waiting.pop(uid, None)
        if event_type == "DELETED":
            return
        node = (pod.get("spec") or {}).get("nodeName")
        if node and occupies_node(pod):
            # A pod's requests never change: counted once, when it first holds its node.
            requests = held[1] if held is not None else pod_requests(pod)
            self._held[uid] = (node, requests)
            self._add(node, requests, 1)
        elif not node and not pod_is_terminal(pod):
            self.waiting[uid] = (meta.get("namespace") or "default", meta["name"])

    def _add(self, node: str, requests: dict[str, Decimal], sign: int) -> None:
        # New counts, never a change to the ones a pass may hold: a pass takes the mapping as it is
        # and copies a node's counts only when it places a pod there.
        used = dict(self.usage.get(node, _NONE))
        _add_usage(used, requests, sign)
        used["pods"] = used.get("pods", Decimal(0)) + sign
        self.usage[node] = used


class Scheduler(Reconciler):
    """Runs a scheduling pass whenever pods or nodes change."""

    name = "scheduler"
    PASS = "pass"

    def __init__(self, store: Any, clock: Clock, recorder: EventRecorder):
        super().__init__()
        self.store = store
        self.clock = clock
        self.recorder = recorder
        self.capacity = Capacity()
        self._parsed: dict[tuple[str, str | None], dict[str, Decimal]] = {}
        replay, _, self._unwatch = store.watch("pods", None, self.capacity.on_write)
        for rv, event_type, pod, prev in replay:
            self.capacity.on_write(rv, event_type, "pods", pod, prev)

    def on_change(self, event_type: str, resource: str, obj: dict) -> None:
        """Store notification: anything that may free or need capacity triggers a pass."""
        if resource == "nodes" or (resource == CLAIMS and event_type == "ADDED"):
            self.enqueue(self.PASS)
        elif resource == "pods":
            spec = obj.get("spec", {})
            if event_type == "DELETED" or not spec.get("nodeName") or pod_is_terminal(obj):
                self.enqueue(self.PASS)

    def reconcile(self, key: str) -> None:
        """One pass over all pending pods, in queue order, each seeing the placements before it."""
        with self.store.lock:
            # Read-only views of the stored nodes and waiting pods: nothing here modifies them.
            nodes = sorted(
                self.store.list_with_rv("nodes", copy=False)[0], key=lambda n: n["metadata"]["name"]
            )
            # The counts as they stand: Capacity replaces a node's counts on every change, never edits them.
            held = dict(self.capacity.usage)
            usage: dict[str, dict[str, Decimal]] = {
                n["metadata"]["name"]: held.get(n["metadata"]["name"], _NONE) for n in nodes
            }
            allocatable = self._allocatable(nodes)
            memo: dict[str, dict[str, tuple[list[str], bool, float]]] = {}
            waiting = []
            for namespace, name in list(self.capacity.waiting.values()):
                try:
                    waiting.append(self.store.get("pods", name, namespace=namespace, copy=False))
                except Exception:  # noqa: BLE001 - deleted in the same write that emptied the entry
                    continue
        for pod in waiting:
            if pod.get("spec", {}).get("schedulingGates"):
                self._mark_gated(pod)
        for pod in pending_order(waiting):
            try:
                placed = self._schedule(pod, nodes, [], usage, allocatable, memo)
            except Exception:  # noqa: BLE001 - one bad pod must not block the queue
                log.exception("scheduling %s failed", pod["metadata"].get("name"))
                continue
            if placed is not None and placed in usage:
                memo.pop(placed, None)
                usage[placed] = counts = dict(usage[placed])  # the pass's own copy, not Capacity's
                _add_usage(counts, pod_requests(pod))
                counts["pods"] = counts.get("pods", Decimal(0)) + 1

    def _mark_gated(self, pod: dict) -> None:
        cond = get_condition(pod.get("status", {}).get("conditions"), "PodScheduled")
        if cond is not None and cond.get("reason") == "SchedulingGated":
            return
        now = self.clock.now()
        conditions = set_condition(
            pod.get("status", {}).get("conditions"),
            "PodScheduled",
            "False",
            now,
            "SchedulingGated",
            "Scheduling is blocked due to non-empty scheduling gates",
        )
        self._patch_status(pod, {"phase": "Pending", "conditions": conditions})

    def _allocatable(self, nodes: list[dict]) -> dict[str, dict[str, Decimal]]:
        """Each node's parsed allocatable resources, parsed once per version of the node (a stored
        version never changes)."""
        out = {}
        for node in nodes:
            meta = node["metadata"]
            version = (meta["name"], meta.get("resourceVersion"))
            alloc = self._parsed.get(version)
            if alloc is None:
                alloc = node_allocatable(node)
                self._parsed = {k: v for k, v in self._parsed.items() if k[0] != meta["name"]}
                self._parsed[version] = alloc
            out[meta["name"]] = alloc
        return out

    def _schedule(
        self,
        pod: dict,
        nodes: list[dict],
        pods: list[dict],
        usage: dict[str, dict[str, Decimal]],
        allocatable: Mapping[str, dict[str, Decimal]] | None = None,
        memo: dict[str, dict[str, tuple[list[str], bool, float]]] | None = None,
    ) -> str | None:
        """Place one pod; returns the node it was bound to."""
        meta = pod["metadata"]
        now = self.clock.now()
        claim_error = missing_claim(pod, self._lookup)
        if claim_error is not None:
            decision: Placement | Unschedulable = unresolvable(claim_error, len(nodes))
        else:
            decision = fit_pod(pod, nodes, pods, usage, allocatable, memo)
        conditions = pod.get("status", {}).get("conditions")
        if isinstance(decision, Unschedulable):
            cond = get_condition(conditions, "PodScheduled")
            if cond is not None and cond.get("message") == decision.message:
                return None  # already told; the real scheduler also backs off before repeating itself
            self._patch_status(
                pod,
                {
                    "phase": "Pending",
                    "conditions": set_condition(
                        conditions, "PodScheduled", "False", now, "Unschedulable", decision.message
                    ),
                },
            )
            self.recorder.record(pod, EventSpec(WARNING, "FailedScheduling", decision.message), SCHEDULER)
            return None
        bound = self.store.patch(
            "pods",
            meta["name"],
            {"spec": {"nodeName": decision.node}},
            "merge",
            namespace=meta.get("namespace"),
        )
        bound = self._patch_status(
            bound,
            {"phase": "Pending", "conditions": set_condition(conditions, "PodScheduled", "True", now)},
        )
        self.recorder.record(
            bound,
            EventSpec(
                NORMAL,
                "Scheduled",
                f"Successfully assigned {meta.get('namespace')}/{meta['name']} to {decision.node}",
            ),
            SCHEDULER,
        )
        return decision.node

    def _lookup(self, kind: str, namespace: str, name: str) -> dict | None:
        try:
            return self.store.get(kind, name, namespace=namespace, copy=False)
        except Exception:  # noqa: BLE001 - not found
            return None

    def _patch_status(self, pod: dict, status: dict) -> dict:
        meta = pod["metadata"]
        return self.store.patch(
            "pods",
            meta["name"],
            {"status": status},
            "merge",
            namespace=meta.get("namespace"),
            subresource="status",
        )
