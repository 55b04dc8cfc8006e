"""What the lifecycle rules read of a pod, taken out of the pod dict in one pass (:class:`PodFacts`),
and what a reader that looks again and again keeps of its last look (:class:`ReadMemo`).

A trigger computes a snapshot at every event of its job, and a snapshot asks each pod a few dozen
questions (which job and replica it belongs to, its phase, conditions and containers' states for
STATUS, READY, health, exit code, since when). Asked of the dict each time, every question walked
``metadata``/``spec``/``status`` again through the generic accessors of
:mod:`airflow_jobs_plugin.cluster.objects`; read once into a record, each is an attribute. The job kinds
(:mod:`airflow_jobs_plugin.jobs.kinds`) and the lifecycle both read it, hence its place beside ``objects``.

The record holds the pod's own values (no copy, no conversion), so a rule reads exactly what it read
from the dict: a missing or ``null`` field is ``None`` or empty, as ``dig``/``items`` gave it.

A trigger looks at its job after every event of it, and an event changes one object: the records of
the others can serve again. A :class:`ReadMemo` keeps them from one look to the next.

No I/O, and no object read is ever changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

T = TypeVar("T")

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _map(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a mapping, else an empty one (``objects.mapping`` for one level)."""
    # Decoded JSON is plain dicts: the exact type check spares them the ABC check (see objects.dig).
    if type(value) is dict or isinstance(value, Mapping):
        return value
    return _EMPTY


# Shared by every record lacking a list field, and never changed: a fresh empty list per missing field
# would cost more than the record.
_NO_ITEMS: list[Any] = []
# What a derived slot holds until the lifecycle derives it (None is a value it may derive).
NOT_YET: Any = object()


def _list(value: Any) -> list[Any]:
    """``value`` when it is a list, else an empty one (``objects.items`` for one level)."""
    return value if isinstance(value, list) else _NO_ITEMS


def _mappings(value: Any) -> list[Mapping[str, Any]]:
    """The mapping entries of a list field. The pod's own list when they all are (as decoded JSON's
    are): a record kept by a trigger's memo costs no copy of it."""
    entries = _list(value)
    if all(type(e) is dict for e in entries):
        return entries
    return [e for e in entries if isinstance(e, Mapping)]


class PodFacts:
    """One pod as the lifecycle reads it, read once. ``obj`` is the pod itself, for the rare reader of
    anything else; ``conditions`` and ``init_containers`` keep only their mapping entries, as every
    reader of them skipped the others; the container status lists are the pod's own.

    Read-only by convention: a slots class filled by its constructor, not a frozen dataclass, whose
    ``__init__`` pays an ``object.__setattr__`` per field (half the cost of the whole read). The last
    four slots are the exception: what the lifecycle derives from this pod alone, filled the first
    time it is asked for, so that a record kept across looks (:class:`ReadMemo`) is not derived again.
    """

    __slots__ = (
        "obj",
        "name",
        "namespace",
        "uid",
        "labels",
        "annotations",
        "resource_version",
        "created",
        "deletion",
        "owner_uids",
        "node",
        "containers",
        "init_containers",
        "phase",
        "reason",
        "message",
        "conditions",
        "container_statuses",
        "init_container_statuses",
        "key_kind",
        "key",
        "replica",
        "started",
    )

    def __init__(self, pod: Mapping[str, Any]) -> None:
        whole = _map(pod)  # anything but a mapping reads as an empty pod, as dig read it
        meta = _map(whole.get("metadata"))
        spec = _map(whole.get("spec"))
        status = _map(whole.get("status"))
        self.obj = pod
        self.name: Any = meta.get("name")
        self.namespace: Any = meta.get("namespace")
        self.uid: Any = meta.get("uid")
        self.labels = _map(meta.get("labels"))
        self.annotations = _map(meta.get("annotations"))
        self.resource_version: Any = meta.get("resourceVersion")
        self.created: Any = meta.get("creationTimestamp")  # as given: a string, or a datetime in tests
        self.deletion: Any = meta.get("deletionTimestamp")  # as given
        # A tuple: a pod has one owner or two, and a frozenset's table costs five times the memory.
        self.owner_uids = tuple(ref.get("uid") for ref in _mappings(meta.get("ownerReferences")))
        self.node: Any = spec.get("nodeName")
        self.containers = _list(spec.get("containers"))
        self.init_containers = _mappings(spec.get("initContainers"))
        self.phase: Any = status.get("phase")
        self.reason: Any = status.get("reason")
        self.message: Any = status.get("message")
        self.conditions = _mappings(status.get("conditions"))
        self.container_statuses = _list(status.get("containerStatuses"))
        self.init_container_statuses = _list(status.get("initContainerStatuses"))
        # Derived by the lifecycle, NOT_YET until then: the (role, index) the pod plays in a job of kind
        # ``key_kind``; the replica's status read from it without events; when its first container
        # started.
        self.key_kind: Any = NOT_YET
        self.key: Any = NOT_YET
        self.replica: Any = NOT_YET
        self.started: Any = NOT_YET

    @property
    def deleting(self) -> bool:
        """Whether the pod is being deleted (its deletion timestamp is set)."""
        return self.deletion is not None

    def condition(self, kind: str) -> Mapping[str, Any] | None:
        """The first condition of type ``kind`` (``objects.condition``)."""
        for cond in self.conditions:
            if cond.get("type") == kind:
                return cond
        return None

    def __repr__(self) -> str:
        return f"<PodFacts {self.namespace}/{self.name}>"


def pod_facts(pod: Mapping[str, Any]) -> PodFacts:
    """Read ``pod`` (a dict as the API returns it, trimmed or whole) once."""
    return PodFacts(pod)


class ReadMemo:
    """What one reader's looks read of a job and its pods, kept for its next look: a pod unchanged since
    the last look is not read (nor its replica derived) again, nor is an unchanged job.

    Of an MPIJob's nine pods, an event changes one: eight are the very objects of the last look, and
    the job is too. The memo knows an object
    by identity and keeps the object with what was read of it, so an id is never taken for another
    object's. That is only sound for objects never changed in place, each change being a new object:
    the shared watch's cache (``watch.SharedWatch``: every change, event or read, stores a fresh trimmed
    copy). It holds the objects of the last look only.
    """

    __slots__ = ("_pods", "_derived")

    def __init__(self) -> None:
        # A list, not a table by id: a trigger keeps its memo as long as it follows its job, and the
        # table is built again at each look for the few pods of one job.
        self._pods: list[PodFacts] = []
        self._derived: tuple[Any, Callable[[Any], Any], Any] | None = None

    def pods(self, pods: Iterable[Mapping[str, Any]]) -> list[PodFacts]:
        """The records of ``pods``, in order: the last look's where the object is the same, else new."""
        known = {id(record.obj): record for record in self._pods}
        records = []
        for pod in pods:
            record = known.get(id(pod))
            if record is None or record.obj is not pod:
                record = PodFacts(pod)
            records.append(record)
        self._pods = records
        return records

    def derived(self, obj: Mapping[str, Any], derive: Callable[[Mapping[str, Any]], T]) -> T:
        """``derive(obj)``, computed again only when ``obj`` (or ``derive``) is not the last look's."""
        known = self._derived
        if known is not None and known[0] is obj and known[1] is derive:
            value: T = known[2]
            return value
        value = derive(obj)
        self._derived = (obj, derive, value)
        return value
