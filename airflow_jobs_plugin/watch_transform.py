"""What the shared watch keeps of each object it caches: only the fields the product reads.

This is client-go's informer transform (``k8s.io/client-go/tools/cache``,
``SharedIndexInformer.SetTransform`` / ``TransformFunc``): every object is cut down once, as it enters
the cache, and nothing downstream ever sees the full object. A triggerer follows thousands of jobs, and a
whole decoded Job or Pod (``managedFields``, env, volumes, every defaulted field of the pod spec) costs
several kilobytes of Python objects while a snapshot reads a few hundred bytes of it.

The rule: keep whole what is read broadly (metadata, a job's own spec and status, a pod's status), cut
only what nothing reads (``managedFields``; of a pod spec or a job's pod templates everything but the
container names, resources and node choice; a few addressing fields of a pod status). A field dropped
here that some reader does look at is a silent bug, so the test ``tests/core/test_watch_transform.py``
compares snapshots and admission decisions of trimmed and whole objects; add a field here before reading
it from the watch. The one reader that needs a whole job, the next attempt of a failed job (a clone of
the previous attempt, env and volumes included), reads it with a GET (``triggers._Follow``).

Pure: no I/O, and the input is never changed (the caller of ``SharedWatch.absorb`` keeps its object).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

# Written by the API server for server-side apply; the product never reads who owns which field. On a
# real cluster it is often the largest part of an object (one entry per manager: controller, kubelet,
# the product's own patches).
_DROPPED_METADATA = frozenset({"managedFields"})

# Of a pod spec, and of the pod templates inside a job's spec, what is read:
_POD_SPEC_KEPT = frozenset(
    {
        # containers: their number is READY's denominator (lifecycle.pod_status), the first one's name
        # is whose logs are streamed (logstream), their resources are what placement counts (templates);
        "containers",
        # init containers: a sidecar (restartPolicy Always) counts in READY and is skipped in STATUS, the
        # way kubectl prints it; placement takes the largest init container's GPUs;
        "initContainers",
        # the node a pod is bound to: a pod on no node holds no GPUs (quota.ledger), the replica's node
        # (lifecycle.replicas), a deleted pod that never ran (lifecycle.snapshot);
        "nodeName",
        # the labels a node must carry for a template's pods (quota.placement.pod_shapes).
        "nodeSelector",
    }
)
# Of each (init) container: its name (sidecars are looked up by name, logs are streamed by name), the
# resources placement counts GPUs from, and restartPolicy, which makes an init container a sidecar.
_CONTAINER_KEPT = frozenset({"name", "resources", "restartPolicy"})

# Of a pod status everything is read (phase, reason, message, conditions, container states, exit codes,
# termination messages, start times) but the pod's addresses and QoS class.
_POD_STATUS_DROPPED = frozenset({"hostIP", "hostIPs", "podIP", "podIPs", "qosClass", "resourceClaimStatuses"})
# Of a container status, the runtime's identifiers and what the kubelet mounted and allocated; its
# name, state, lastState (exit codes, reasons, termination message, start and finish times), ready,
# started and restartCount are read by lifecycle.pod_status, lifecycle.replicas, results and logstream.
_CONTAINER_STATUS_DROPPED = frozenset(
    {
        "imageID",
        "containerID",
        "volumeMounts",
        "allocatedResources",
        "allocatedResourcesStatus",
        "resources",
        "user",
        "stopSignal",
    }
)

# Strings shorter than this are interned: label and annotation keys and values, condition types and
# reasons, names and uids repeat in every job and pod (a pod repeats its job's labels), and one shared
# copy of each costs nothing per object. Longer ones (messages) are rarely shared.
_INTERN_BELOW = 128


def trim(obj: Mapping[str, Any], kind: str | None = None) -> dict[str, Any]:
    """A copy of ``obj`` holding what the product reads of it (``kind`` when the object lacks it, as
    list items of built-in types do). Jobs, MPIJobs and Pods are trimmed; any other object loses only
    its ``managedFields``. Idempotent: ``trim(trim(o)) == trim(o)``."""
    kind = str(obj.get("kind") or kind or "")
    out: dict[str, Any] = {}
    for key, value in obj.items():
        if key == "metadata" and isinstance(value, Mapping):
            out["metadata"] = {_s(k): _compact(v) for k, v in value.items() if k not in _DROPPED_METADATA}
        elif key == "spec" and isinstance(value, Mapping) and kind == "Pod":
            out["spec"] = _pod_spec(value)
        elif key == "spec" and isinstance(value, Mapping) and kind in ("Job", "MPIJob"):
            out["spec"] = _job_spec(value)
        elif key == "status" and isinstance(value, Mapping) and kind == "Pod":
            out["status"] = _pod_status(value)
        else:
            out[_s(key)] = _compact(value)
    return out


def _job_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A Job's or MPIJob's own fields are all kept (suspend, parallelism, completions, completionMode,
    backoffLimit, the deadline verdict_patch records, runPolicy, runLauncherAsWorker, replica counts);
    only the pod templates inside are cut like a pod."""
    out = {_s(k): _compact(v) for k, v in spec.items() if k not in ("template", "mpiReplicaSpecs")}
    if "template" in spec:
        out["template"] = _template(spec["template"])
    replica_specs = spec.get("mpiReplicaSpecs")
    if isinstance(replica_specs, Mapping):
        out["mpiReplicaSpecs"] = {
            _s(role): (
                {_s(k): (_template(v) if k == "template" else _compact(v)) for k, v in replica.items()}
                if isinstance(replica, Mapping)
                else _compact(replica)
            )
            for role, replica in replica_specs.items()
        }
    elif "mpiReplicaSpecs" in spec:
        out["mpiReplicaSpecs"] = _compact(replica_specs)
    return out


def _template(template: Any) -> Any:
    """A pod template: its metadata whole (the role label names the pod set), its spec cut like a pod's."""
    if not isinstance(template, Mapping):
        return _compact(template)
    return {
        _s(k): (_pod_spec(v) if k == "spec" and isinstance(v, Mapping) else _compact(v))
        for k, v in template.items()
    }


def _pod_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in spec.items():
        if key not in _POD_SPEC_KEPT:
            continue
        if key in ("containers", "initContainers") and isinstance(value, list):
            out[key] = [
                {_s(k): _compact(v) for k, v in c.items() if k in _CONTAINER_KEPT}
                if isinstance(c, Mapping)
                else _compact(c)
                for c in value
            ]
        else:
            out[key] = _compact(value)
    return out


def _pod_status(status: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in status.items():
        if key in _POD_STATUS_DROPPED:
            continue
        if key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses") and isinstance(
            value, list
        ):
            out[key] = [
                {_s(k): _compact(v) for k, v in c.items() if k not in _CONTAINER_STATUS_DROPPED}
                if isinstance(c, Mapping)
                else _compact(c)
                for c in value
            ]
        else:
            out[_s(key)] = _compact(value)
    return out


def _s(value: str) -> str:
    return sys.intern(value) if type(value) is str and len(value) < _INTERN_BELOW else value


def _compact(value: Any) -> Any:
    """A copy of a JSON value with its short strings interned (a fresh copy also lets the decoded
    event's own containers be freed)."""
    if isinstance(value, Mapping):
        return {_s(k): _compact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_compact(v) for v in value]
    if type(value) is str:
        return _s(value)
    return value
