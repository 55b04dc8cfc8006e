"""core/v1 Events as the simulated controllers emit them.

Events are built as the real components' recorders build them (``involvedObject`` reference, ``source``,
``count``, first/last timestamps) and a repeated event (same object, reason and message) increments the
count of the existing one instead of creating another, as client-go's event correlator does; that is what
makes ``kubectl describe`` print ``(x3 over 40s)``.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow_jobs_sim.clock import rfc3339

if TYPE_CHECKING:
    from airflow_jobs_sim.clock import Clock

log = logging.getLogger(__name__)

NORMAL = "Normal"
WARNING = "Warning"

# Components as they appear in `source.component` (kubectl describe's "From" column).
SCHEDULER = "default-scheduler"
KUBELET = "kubelet"
JOB_CONTROLLER = "job-controller"
MPI_OPERATOR = "mpi-job-controller"
NODE_CONTROLLER = "node-controller"
TAINT_MANAGER = "taint-eviction-controller"

_API_VERSIONS = {"Pod": "v1", "Node": "v1", "Job": "batch/v1", "MPIJob": "kubeflow.org/v2beta1"}
_CORRELATION_CACHE = 4096


@dataclass(frozen=True)
class EventSpec:
    """One event to emit about an object: what a pure controller decision returns."""

    type: str
    reason: str
    message: str
    field_path: str | None = None


def involved_object(obj: dict, kind: str | None = None, field_path: str | None = None) -> dict:
    """The ``involvedObject`` reference to ``obj`` (kind inferred from the object when present)."""
    meta = obj.get("metadata", {})
    kind = kind or obj.get("kind") or "Pod"
    ref: dict[str, Any] = {
        "kind": kind,
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "apiVersion": obj.get("apiVersion") or _API_VERSIONS.get(kind, "v1"),
        "resourceVersion": meta.get("resourceVersion"),
    }
    if meta.get("namespace"):
        ref["namespace"] = meta["namespace"]
    if field_path:
        ref["fieldPath"] = field_path
    return ref


def build_event(
    obj: dict,
    spec: EventSpec,
    component: str,
    now: datetime,
    *,
    host: str | None = None,
    kind: str | None = None,
    name: str | None = None,
) -> dict:
    """A new core/v1 Event about ``obj``; node (cluster-scoped) events live in ``default`` as real ones do."""
    ref = involved_object(obj, kind, spec.field_path)
    namespace = ref.get("namespace") or "default"
    source: dict[str, str] = {"component": component}
    if host:
        source["host"] = host
    stamp = rfc3339(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name or f"{ref['name']}.{time.time_ns():x}", "namespace": namespace},
        "involvedObject": ref,
        "reason": spec.reason,
        "message": spec.message,
        "source": source,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
        "type": spec.type,
        "eventTime": None,
        "reportingComponent": component,
        "reportingInstance": host or "",
    }


class EventRecorder:
    """Writes events into the store, folding repeats into one event with a growing count."""

    def __init__(self, store: Any, clock: Clock):
        self._store = store
        self._clock = clock
        self._seen: OrderedDict[tuple, tuple[str, str, int]] = OrderedDict()
        self._serial = itertools.count()

    def record(
        self,
        obj: dict,
        spec: EventSpec,
        component: str,
        *,
        host: str | None = None,
        kind: str | None = None,
    ) -> None:
        """Emit ``spec`` about ``obj``; never raises (a lost event must not stop a controller)."""
        try:
            self._record(obj, spec, component, host, kind)
        except Exception:  # noqa: BLE001 - events are best effort, as in client-go
            log.exception(
                "could not record event %s for %s", spec.reason, obj.get("metadata", {}).get("name")
            )

    def _record(self, obj: dict, spec: EventSpec, component: str, host: str | None, kind: str | None) -> None:
        now = self._clock.now()
        meta = obj.get("metadata", {})
        key = (
            meta.get("namespace"),
            kind or obj.get("kind"),
            meta.get("name"),
            meta.get("uid"),
            spec.field_path,
            spec.type,
            spec.reason,
            spec.message,
            component,
            host,
        )
        previous = self._seen.get(key)
        if previous is not None:
            namespace, name, count = previous
            try:
                self._store.patch(
                    "events",
                    name,
                    {"count": count + 1, "lastTimestamp": rfc3339(now)},
                    "merge",
                    namespace=namespace,
                )
                self._seen[key] = (namespace, name, count + 1)
                self._seen.move_to_end(key)
                return
            except Exception:  # noqa: BLE001 - the old event is gone (deleted or expired): start a new one
                del self._seen[key]
        base = f"{meta.get('name')}.{time.time_ns():x}"
        event = build_event(
            obj, spec, component, now, host=host, kind=kind, name=f"{base}{next(self._serial):x}"
        )
        namespace = event["metadata"]["namespace"]
        created = self._store.create("events", event, namespace=namespace)
        self._seen[key] = (namespace, created["metadata"]["name"], 1)
        if len(self._seen) > _CORRELATION_CACHE:
            self._seen.popitem(last=False)
