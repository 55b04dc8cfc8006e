"""What the shared watch keeps of each object it caches: only the fields the product reads.

This is client-go's informer transform (``k8s.io/client-go/tools/cache``,
``SharedIndexInformer.SetTransform`` / ``TransformFunc``): every object is cut down once, as it enters
the cache, and nothing downstream ever sees the full object. A triggerer follows thousands of jobs, and a
whole decoded Job or Pod (``managedFields``, env, volumes, every defaulted field of the pod spec) costs
several kilobytes of Python objects while a snapshot reads a few hundred bytes of it.

The rule: keep whole what is read broadly (metadata, a job's own spec and status, a pod's status), cut
only what nothing reads (``managedFields``; a job's selector, which the API server derives from its uid;
of a pod spec or a job's pod templates everything but the container names, resources and node choice; a
few addressing fields of a pod status, the runtime's container ids). A field dropped here that some
reader does look at is a silent bug, so the test ``tests/lifecycle/test_watch_transform.py`` compares
snapshots and admission decisions of trimmed and whole objects; add a field here before reading it from
the watch. The one reader that needs a whole job, the next attempt of a failed job (a clone of the
previous attempt, env and volumes included), reads it with a GET (``triggers._Follow``).

What is kept is also shared: with a :class:`Sharing` (each shared watch has one), the dicts and lists
of an object are looked up by content, and an equal one already in the cache is used instead of the
copy. A pod carries its job's pod template labels and annotations, pods started in the same second
carry the same conditions and container states, every job of a DAG has the same pod template spec: one
copy of each. What is an object's own (its top level and metadata, a job's own labels and annotations,
the dicts that hold its templates) is not looked up: it would only fill the table. Sharing is safe
because nothing changes a cached object, ever (the product patches the API server and reads the result
back; the trigger tests check it on every object the watch caches, ``tests/trigger/conftest.py``).

And what stays an object's own takes less room: its metadata, labels, annotations, spec and status
are dicts that share their key table with every other dict of their kind (PEP 412, see ``_shape``),
ordinary dicts to every reader.

No I/O, and the input is never changed (the caller of ``SharedWatch.absorb`` keeps its object).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from airflow_jobs_plugin.jobs import kinds, labels

# Written by the API server for server-side apply; the product never reads who owns which field. On a
# real cluster it is often the largest part of an object (one entry per manager: controller, kubelet,
# the product's own patches).
_DROPPED_METADATA = frozenset({"managedFields"})

# Of a job's own spec, each kind drops what the API server sets from the job's uid (and so different in
# every job) and nothing reads from the cache (``JobKind.cache_dropped_spec``); a next attempt is cloned
# from the whole object (and clears them there).

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

# A container status's states (ContainerState: waiting, running, terminated).
_STATES = frozenset({"state", "lastState"})

# Strings shorter than this are interned: keys, label and annotation values, condition types and
# reasons, node names and times in whole seconds repeat in many jobs and pods, and one shared copy of
# each costs nothing per object. Longer ones (messages) are rarely shared.
_INTERN_BELOW = 128

# Values that name or stamp one object: they are not interned but kept one copy per object, its
# versions and the readers of each (a job's name and uid also label its pod template; ``trim``'s
# ``previous``). The interpreter's table of interned strings is a dict that never shrinks (CPython 3.11,
# ``Objects/unicodeobject.c``): every uid and resourceVersion in it costs a slot, and as the watch
# delivers new versions of 20,000 jobs, each with a new resourceVersion, the table outgrows its room and
# is copied to one twice its size (docs/benchmarks.md).
_OWN_VALUES = frozenset(
    {
        # metadata, and an owner reference's
        "name",
        "generateName",
        "uid",
        "resourceVersion",
        # the labels the API server writes on a Job's pod template, its pods' labels then
        # (generateSelector, pkg/registry/batch/job/strategy.go, Kubernetes 1.32), and mpi-operator's
        # on an MPIJob's pods (pkg/controller/mpi_job_controller.go, v0.8.0)
        labels.CONTROLLER_UID,
        labels.LEGACY_CONTROLLER_UID,
        labels.BATCH_JOB_NAME,
        labels.LEGACY_JOB_NAME,
        labels.MPI_JOB_NAME,
        # the product's own: the task instance a job runs, its times (microseconds)
        labels.TASK_KEY,
        labels.QUEUED_AT,
        labels.ADMITTED_AT,
        labels.REQUEUE_NOT_BEFORE,
        labels.STOPPED_AT,
        labels.CANCELLED_AT,
    }
)


# --- dicts that share their keys with the other dicts of their kind ---


def _shape(role: str) -> type:
    """The class whose instances' attribute dicts serve as the dicts of ``role``: CPython keeps one key
    table for the attribute dicts of every instance of a class (PEP 412, key-sharing dictionaries), so
    such a dict holds only its values. A Job's 12 annotations take 180 bytes that way instead of 464
    (docs/benchmarks.md), and the dict is an ordinary ``dict`` to every reader. The key table holds up
    to 30 keys: beyond that, or on another interpreter, the dicts are simply ordinary ones."""
    return type(
        f"_{role}", (), {"__module__": __name__, "__doc__": f"Key table of the cache's {role} dicts."}
    )


_OBJECT, _METADATA, _LABELS, _ANNOTATIONS = (
    _shape(r) for r in ("object", "metadata", "labels", "annotations")
)
_JOB_SPEC, _JOB_STATUS, _POD_SPEC, _POD_STATUS = (
    _shape(r) for r in ("job_spec", "job_status", "pod_spec", "pod_status")
)
_TEMPLATE, _OWNER = _shape("template"), _shape("owner_reference")
# Names an instance attribute cannot take: setting them changes the holder, not its dict.
_NOT_ATTRIBUTES = frozenset({"__class__", "__dict__", "__weakref__"})


def _keyed(shape: type, items: dict[str, Any]) -> dict[str, Any]:
    """``items`` as a dict of ``shape``: equal to it, ordered as it, keys shared (see :func:`_shape`)."""
    if not items:
        return items
    holder: Any = object.__new__(shape)
    for key, value in items.items():
        if type(key) is not str or key in _NOT_ATTRIBUTES:
            return items
        setattr(holder, key, value)
    return holder.__dict__


def _keyed_copy(
    shape: type, value: Mapping[str, Any], share: Sharing, words: dict[str, str] | None = None
) -> dict[str, Any]:
    """``{key: _compact(item)}`` of ``value`` as a dict of ``shape``, built in one pass: as fast as the
    ordinary dict (``setattr`` interns each key as ``_s`` would). With ``words`` (the object's own
    strings), the values of :data:`_OWN_VALUES` are the object's copies, not interned."""
    holder: Any = object.__new__(shape)
    for key, item in value.items():
        if type(key) is not str or key in _NOT_ATTRIBUTES:
            return {_s(k): _value(k, v, share, words) for k, v in value.items()}
        setattr(holder, key, _value(key, item, share, words))
    return holder.__dict__ if value else {}


def _value(key: Any, item: Any, share: Sharing, words: dict[str, str] | None) -> Any:
    if words is not None and type(item) is str and key in _OWN_VALUES:
        return words.setdefault(item, item)
    return _compact(item, share)


def trim(
    obj: Mapping[str, Any],
    kind: str | None = None,
    sharing: Sharing | None = None,
    previous: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A copy of ``obj`` holding what the product reads of it (``kind`` when the object lacks it, as
    list items of built-in types do). Jobs, MPIJobs and Pods are trimmed; any other object loses only
    its ``managedFields``. Idempotent: ``trim(trim(o)) == trim(o)``.

    With ``sharing``, the dicts and lists below the top level and ``metadata`` are those of the
    sharing's objects when equal (see :class:`Sharing`): the result must then never be changed. With
    ``previous`` (the cached version ``obj`` replaces), the object's own strings that did not change
    (its name, uid, times) are those of ``previous``."""
    kind = str(obj.get("kind") or kind or "")
    share = sharing if sharing is not None else _NO_SHARING
    # The object's own strings (_OWN_VALUES), one copy of each, and the same copy in every version.
    words = _own_words(previous)
    out: dict[str, Any] = {}
    for key, value in obj.items():
        if key == "metadata" and isinstance(value, Mapping):
            # A job's own labels and annotations (its task, its times) are its alone: not looked up.
            # A pod's are its template's.
            own = _NO_SHARING if kind in kinds.API_KINDS else share
            out["metadata"] = _metadata(value, own, words)
        elif key == "spec" and isinstance(value, Mapping) and kind == "Pod":
            out["spec"] = _pod_spec(value, share)
        elif key == "spec" and isinstance(value, Mapping) and kind in kinds.API_KINDS:
            out["spec"] = _job_spec(value, kind, share, words)
        elif key == "status" and isinstance(value, Mapping) and kind == "Pod":
            out["status"] = _pod_status(value, share)
        elif key == "status" and isinstance(value, Mapping) and kind in kinds.API_KINDS:
            out["status"] = _keyed_copy(_JOB_STATUS, value, share)
        else:
            out[_s(key)] = _compact(value, share)
    return _keyed(_OBJECT, out)


def _own_words(previous: Mapping[str, Any] | None) -> dict[str, str]:
    """The own strings of a cached version: of its metadata, its labels, annotations and owners. (Its
    pod templates' labels hold the same name and uid as its metadata.)"""
    words: dict[str, str] = {}
    meta = previous.get("metadata") if previous is not None else None
    if type(meta) is not dict:
        return words
    parts: list[Any] = [meta, meta.get("labels"), meta.get("annotations")]
    owners = meta.get("ownerReferences")
    if type(owners) is list:
        parts.extend(owners)
    for part in parts:
        if type(part) is dict:
            for key in _OWN_VALUES.intersection(part):
                value = part[key]
                if type(value) is str:
                    words[value] = value
    return words


def _metadata(meta: Mapping[str, Any], share: Sharing, words: dict[str, str]) -> dict[str, Any]:
    """An object's or a pod template's metadata, its labels and annotations dicts of their shapes."""
    out: dict[str, Any] = {}
    for key, value in meta.items():
        if key in _DROPPED_METADATA:
            continue
        if key in ("labels", "annotations") and type(value) is dict:
            shape = _LABELS if key == "labels" else _ANNOTATIONS
            out[key] = share.of_dict(_keyed_copy(shape, value, share, words))
        elif key == "ownerReferences" and type(value) is list:
            out[key] = share.of_list(
                [
                    share.of_dict(_keyed_copy(_OWNER, ref, share, words))
                    if type(ref) is dict
                    else _compact(ref, share)
                    for ref in value
                ]
            )
        else:
            out[_s(key)] = _value(key, value, share, words)
    return _keyed(_METADATA, out)


def _job_spec(spec: Mapping[str, Any], kind: str, share: Sharing, words: dict[str, str]) -> dict[str, Any]:
    """A Job's or MPIJob's own fields are all kept (suspend, parallelism, completions, completionMode,
    backoffLimit, the deadline verdict_patch records, runPolicy, runLauncherAsWorker, replica counts)
    but a Job's selector; the pod templates inside are cut like a pod. The dicts holding the templates
    are the job's alone (its templates' labels name it): only their parts are looked up."""
    adapter = kinds.for_api_kind(kind)
    dropped = adapter.cache_dropped_spec if adapter is not None else frozenset()
    out = {
        _s(k): _compact(v, share)
        for k, v in spec.items()
        if k not in ("template", "mpiReplicaSpecs") and k not in dropped
    }
    if "template" in spec:
        out["template"] = _template(spec["template"], share, words)
    replica_specs = spec.get("mpiReplicaSpecs")
    if isinstance(replica_specs, Mapping):
        out["mpiReplicaSpecs"] = {
            _s(role): (
                {
                    _s(k): (_template(v, share, words) if k == "template" else _compact(v, share))
                    for k, v in replica.items()
                }
                if isinstance(replica, Mapping)
                else _compact(replica, share)
            )
            for role, replica in replica_specs.items()
        }
    elif "mpiReplicaSpecs" in spec:
        out["mpiReplicaSpecs"] = _compact(replica_specs, share)
    return _keyed(_JOB_SPEC, out)


def _template(template: Any, share: Sharing, words: dict[str, str]) -> Any:
    """A pod template: its metadata whole (the role label names the pod set), its spec cut like a pod's.
    Its labels and annotations are looked up (its pods carry the same), its metadata and itself not."""
    if not isinstance(template, Mapping):
        return _compact(template, share)
    out: dict[str, Any] = {}
    for key, value in template.items():
        if key == "spec" and isinstance(value, Mapping):
            out["spec"] = _pod_spec(value, share)
        elif key == "metadata" and isinstance(value, Mapping):
            out["metadata"] = _metadata(value, share, words)
        else:
            out[_s(key)] = _compact(value, share)
    return _keyed(_TEMPLATE, out)


def _pod_spec(spec: Mapping[str, Any], share: Sharing) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in spec.items():
        if key not in _POD_SPEC_KEPT:
            continue
        if key in ("containers", "initContainers") and isinstance(value, list):
            out[key] = share.of_list(
                [
                    share.of_dict({_s(k): _compact(v, share) for k, v in c.items() if k in _CONTAINER_KEPT})
                    if isinstance(c, Mapping)
                    else _compact(c, share)
                    for c in value
                ]
            )
        else:
            out[key] = _compact(value, share)
    return share.of_dict(_keyed(_POD_SPEC, out))


def _pod_status(status: Mapping[str, Any], share: Sharing) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in status.items():
        if key in _POD_STATUS_DROPPED:
            continue
        if key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses") and isinstance(
            value, list
        ):
            out[key] = share.of_list(
                [
                    share.of_dict(
                        {
                            _s(k): (_container_state(v, share) if k in _STATES else _compact(v, share))
                            for k, v in c.items()
                            if k not in _CONTAINER_STATUS_DROPPED
                        }
                    )
                    if isinstance(c, Mapping)
                    else _compact(c, share)
                    for c in value
                ]
            )
        else:
            out[_s(key)] = _compact(value, share)
    return share.of_dict(_keyed(_POD_STATUS, out))


def _container_state(state: Any, share: Sharing) -> Any:
    """A container's state or last state, its terminated state without the runtime's container id
    (``ContainerStateTerminated.containerID``, k8s.io/api ``core/v1/types.go``, release-1.32; the same
    id the container status drops): unique to each container, it kept two containers that ended in the
    same second with the same exit code from sharing one state, and filled the interned strings."""
    if type(state) is dict:
        ended = state.get("terminated")
        if type(ended) is dict and "containerID" in ended:
            state = {**state, "terminated": {k: v for k, v in ended.items() if k != "containerID"}}
    return _compact(state, share)


def _s(value: str) -> str:
    return sys.intern(value) if type(value) is str and len(value) < _INTERN_BELOW else value


def _compact(value: Any, share: Sharing) -> Any:
    """A copy of a JSON value with its short strings interned and its dicts and lists shared (a fresh
    copy also lets the decoded event's own containers be freed)."""
    kind = type(value)
    # Decoded JSON holds plain strs, dicts and lists: tested by type first, the Mapping ABC last.
    if kind is str:
        return _intern(value) if len(value) < _INTERN_BELOW else value
    if kind is dict or (kind is not list and isinstance(value, Mapping)):
        # ``_s`` written out: this runs for every key of every object the watch caches.
        return share.of_dict(
            {
                (_intern(k) if type(k) is str and len(k) < _INTERN_BELOW else k): _compact(v, share)
                for k, v in value.items()
            }
        )
    if kind is list:
        return share.of_list([_compact(v, share) for v in value])
    return value


_intern = sys.intern


# --- sharing equal parts between cached objects ---

# The table is swept once it holds this many entries, or a quarter of what it kept at the last sweep,
# more than that: what it keeps of objects the cache dropped stays bounded, and a sweep (a pass over the
# table) comes once every so many new entries.
_SWEEP_ABOVE = 4096
# The table's shards (a power of two, so that a hash's low bits, under the mask, pick one).
_SHARDS = 256
_SHARD_MASK = _SHARDS - 1


class Sharing:
    """One copy of every distinct dict and list of a cache: hash-consing, by content.

    A dict or list is looked up once its own contents are shared (bottom up), so its identity stands for
    its content: two are equal when their keys and plain values are equal, of the same types
    (``True`` is not ``1``), and their dicts and lists are the same objects. The table maps a hash of
    that to the first copy seen; a different dict under the same hash is simply not shared.

    The table keeps its copies alive, so it sweeps itself: once it has grown by ``_SWEEP_ABOVE``
    entries, or by a quarter, since the last sweep, it drops the copies nothing else holds any more (by
    their reference count, pass after pass until one drops nothing: a dropped dict lets its own dicts
    go). A copy dropped while something still holds it stays valid; the next equal one just gets a copy
    of its own. The table only ever decides what is shared, never what a cached object holds.

    The table is ``_SHARDS`` dicts, by the hash's low bits: at 20,000 jobs it holds about 190,000
    copies, and one dict of them is 10 MB that CPython copies whole each time it grows or is compacted,
    the old and the new at once (a 10 MB spike in the RSS, docs/benchmarks.md). A shard is copied alone.

    Only for objects that are never changed once made: every holder of a shared dict sees a change.
    """

    __slots__ = ("_shards", "_size", "_limit")

    def __init__(self) -> None:
        self._shards: list[dict[int, Any]] = [{} for _ in range(_SHARDS)]
        self._size = 0
        self._limit = _SWEEP_ABOVE

    @property
    def size(self) -> int:
        """Copies in the table."""
        return self._size

    def of_dict(self, value: dict[str, Any]) -> dict[str, Any]:
        """``value`` (whose own dicts and lists are shared already), or an equal dict of the table."""
        tokens: tuple | None = None
        try:  # a dict of plain values (labels, a condition) hashes as it is
            key = hash((*value, *value.values()))
        except TypeError:  # it holds dicts or lists: by their identity
            tokens = tuple(map(_token, value.values()))
            key = hash((*value, *tokens))
        found = self._shards[key & _SHARD_MASK].get(key)
        if found is None:
            self._add(key, value)
            return value
        if type(found) is dict and len(found) == len(value):
            if tokens is None:
                # Equal, and of the same types (1 == True == 1.0, and they hash alike).
                if found == value and list(map(type, found.values())) == list(map(type, value.values())):
                    return found
            elif tuple(found) == tuple(value) and tuple(map(_token, found.values())) == tokens:
                return found
        return value

    def of_list(self, value: list[Any]) -> list[Any]:
        """``value`` (whose own dicts and lists are shared already), or an equal list of the table."""
        tokens = tuple(map(_token, value))
        key = hash((_LIST, *tokens))
        found = self._shards[key & _SHARD_MASK].get(key)
        if found is None:
            self._add(key, value)
            return value
        if type(found) is list and len(found) == len(value) and tuple(map(_token, found)) == tokens:
            return found
        return value

    def _add(self, key: int, value: Any) -> None:
        if self._size >= self._limit:
            self.sweep()
        self._shards[key & _SHARD_MASK][key] = value
        self._size += 1

    def sweep(self) -> None:
        """Drop the copies only the table holds."""
        shards = self._shards
        getrefcount = getattr(sys, "getrefcount", None)
        if getrefcount is None:  # no reference counts to go by (not CPython): start afresh
            for shard in shards:
                shard.clear()
        else:
            # What the count below reads for a copy held by the table alone.
            probe = shards[0]
            probe[_PROBE] = {}
            alone = getrefcount(probe[_PROBE])
            del probe[_PROBE]
            dropped = True
            while dropped:
                dropped = False
                for shard in shards:
                    # Newest first: a dict is added after the dicts it holds, so dropping it first
                    # lets those in the same shard go in the same pass; the next pass finds the rest.
                    for key in reversed(list(shard)):
                        if getrefcount(shard[key]) <= alone:
                            del shard[key]
                            dropped = True
            for index, shard in enumerate(shards):
                shards[index] = dict(shard)  # compact: a dict does not shrink as entries go
        self._size = sum(map(len, shards))
        self._limit = self._size + max(_SWEEP_ABOVE, self._size // 4)


class _NoSharing(Sharing):
    """Copies stay copies (``trim`` without a cache to share with)."""

    __slots__ = ()

    def of_dict(self, value: dict[str, Any]) -> dict[str, Any]:
        return value

    def of_list(self, value: list[Any]) -> list[Any]:
        return value


_NO_SHARING = _NoSharing()
_LIST = object()  # marks a list's hash apart from a dict's
_PROBE = -1  # a key the sweep borrows: hash() never returns -1


def _token(value: Any) -> Any:
    """What stands for a value in a hash: a shared dict or list by its identity, a number or a boolean
    with its type (``1``, ``1.0`` and ``True`` hash alike)."""
    kind = type(value)
    if kind is str or value is None:
        return value
    if kind is dict or kind is list:
        return id(value)
    return (kind, value)
