"""Garbage collector and namespace finalizer of the simulated cluster.

Like the real controllers it works asynchronously from store events:
- an object whose owners (ownerReferences) are all gone is deleted (background cascade); a dangling
  reference next to a live owner is removed;
- an owner marked with the ``foregroundDeletion`` finalizer has its dependents deleted first, and the
  finalizer is removed once none is left;
- a namespace being deleted has all its content deleted, then disappears;
- a pod bound to a node that no longer exists is marked Failed with a ``DisruptionTarget`` condition and
  force-deleted (pod GC: kubernetes release-1.32 ``pkg/controller/podgc/gc_controller.go`` ``gcOrphaned``
  and ``markFailedAndDeletePodWithCondition``; upstream first quarantines the orphan for 40 s in case the
  node comes back, the simulator acts on the node's deletion at once);
- a pod being deleted that was never bound to a node is marked Failed and force-deleted (``gcUnscheduled
  Terminating`` and ``markFailedAndDeletePod``, same file): no kubelet will ever finish it, and a
  finalizer such as the Job controller's tracking finalizer is released only once it is Failed. Upstream
  runs every 20 s (``gcCheckPeriod``); the simulator acts on the pod's change at once.
"""

from __future__ import annotations

import asyncio
import logging

from airflow_jobs_sim.conditions import set_condition
from airflow_jobs_sim.config import RESOURCES
from airflow_jobs_sim.errors import ApiError
from airflow_jobs_sim.store import FOREGROUND, Store

log = logging.getLogger(__name__)


class GarbageCollector:
    """Runs on the cluster's event loop; see the module docstring."""

    def __init__(self, store: Store):
        self.store = store
        self._queue: asyncio.Queue | None = None

    async def run(self) -> None:
        """Process store events until cancelled."""
        loop = asyncio.get_running_loop()
        self._queue = asyncio.Queue()
        queue = self._queue

        def on_event(event_type: str, resource: str, obj: dict) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, (event_type, resource, obj))

        unsubscribe = self.store.subscribe(on_event)
        try:
            # Objects stored before the collector started get the same treatment.
            for resource in RESOURCES:
                for obj in self.store.list(resource):
                    self._handle("ADDED", resource, obj)
            while True:
                event_type, resource, obj = await queue.get()
                try:
                    self._handle(event_type, resource, obj)
                except ApiError as exc:
                    if exc.code not in (404, 409):
                        log.warning("garbage collector: %s", exc.message)
                except Exception:
                    log.exception("garbage collector failed on %s %s", event_type, resource)
        finally:
            unsubscribe()

    def _handle(self, event_type: str, resource: str, obj: dict) -> None:
        meta = obj["metadata"]
        if event_type == "DELETED" and resource == "nodes":
            self._collect_orphaned_pods(meta["name"])
        if event_type == "DELETED":
            self._collect_dependents(meta["uid"])
            for ref in meta.get("ownerReferences") or []:
                self._maybe_finish_foreground(ref.get("uid"))
            if RESOURCES[resource].namespaced:
                self.store.finalize_namespace(meta["namespace"])
            return
        # Events are handled after the fact: decide on the object as it is now, not as the event saw it.
        found = self.store.find_uid(meta["uid"])
        if found is None:
            return
        obj = found[1]
        meta = obj["metadata"]
        if resource == "namespaces" and meta.get("deletionTimestamp"):
            self._empty_namespace(meta["name"])
            return
        if (
            resource == "pods"
            and meta.get("deletionTimestamp")
            and not (obj.get("spec") or {}).get("nodeName")
        ):
            self._collect_unscheduled_terminating(obj)
            return
        if meta.get("deletionTimestamp") and FOREGROUND in (meta.get("finalizers") or []):
            for dep_resource, dep in self._dependents(meta["uid"]):
                if not dep["metadata"].get("deletionTimestamp"):
                    self._delete(dep_resource, dep)
            self._maybe_finish_foreground(meta["uid"])
        if event_type == "ADDED" and meta.get("ownerReferences"):
            refs = meta["ownerReferences"]
            if not any(self.store.exists_uid(r.get("uid", "")) for r in refs):
                self._delete(resource, obj)

    def _collect_orphaned_pods(self, node: str) -> None:
        for pod in self.store.list("pods"):
            if (pod.get("spec") or {}).get("nodeName") == node:
                self._mark_failed_and_delete(pod, ("DeletionByPodGC", "PodGC: node no longer exists"))

    def _collect_unscheduled_terminating(self, pod: dict) -> None:
        self._mark_failed_and_delete(pod)

    def _mark_failed_and_delete(self, pod: dict, disruption: tuple[str, str] | None = None) -> None:
        """Fail a pod that has not ended (with a ``DisruptionTarget`` condition of ``disruption``'s
        reason and message, if given) and force-delete it: podgc's ``markFailedAndDeletePod`` and
        ``markFailedAndDeletePodWithCondition``."""
        meta = pod["metadata"]
        try:
            status: dict = {}
            if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                status["phase"] = "Failed"
            if disruption is not None:
                status["conditions"] = set_condition(
                    (pod.get("status") or {}).get("conditions"),
                    "DisruptionTarget",
                    "True",
                    self.store.now(),
                    *disruption,
                )
            if status:
                self.store.patch(
                    "pods",
                    meta["name"],
                    {"status": status},
                    "merge",
                    meta.get("namespace"),
                    subresource="status",
                )
            self.store.delete(
                "pods",
                meta["name"],
                meta.get("namespace"),
                grace_period_seconds=0,
                preconditions={"uid": meta["uid"]},
            )
        except ApiError as exc:
            if exc.code not in (404, 409):
                raise

    def _collect_dependents(self, uid: str) -> None:
        for resource, dep in self._dependents(uid):
            refs = dep["metadata"].get("ownerReferences") or []
            alive = [r for r in refs if r.get("uid") != uid and self.store.exists_uid(r.get("uid", ""))]
            if alive:
                patch = [
                    {
                        "op": "test",
                        "path": "/metadata/resourceVersion",
                        "value": dep["metadata"]["resourceVersion"],
                    },
                    {
                        "op": "replace",
                        "path": "/metadata/ownerReferences",
                        "value": [r for r in refs if r.get("uid") != uid],
                    },
                ]
                self.store.patch(
                    resource, dep["metadata"]["name"], patch, "json", dep["metadata"].get("namespace")
                )
            elif not dep["metadata"].get("deletionTimestamp"):
                self._delete(resource, dep)

    def _dependents(self, uid: str) -> list[tuple[str, dict]]:
        # Store.dependents' annotation says `list` inside a class whose `list` method shadows the builtin,
        # which mypy cannot resolve; restated here so callers see the items' types.
        return self.store.dependents(uid)

    def _maybe_finish_foreground(self, uid: str | None) -> None:
        if not uid or self.store.dependents(uid):
            return
        found = self.store.find_uid(uid)
        if found is None:
            return
        resource, obj = found
        meta = obj["metadata"]
        if FOREGROUND in (meta.get("finalizers") or []):
            finalizers = [f for f in meta["finalizers"] if f != FOREGROUND]
            self.store.patch(
                resource,
                meta["name"],
                {"metadata": {"finalizers": finalizers or None, "resourceVersion": meta["resourceVersion"]}},
                "merge",
                meta.get("namespace"),
            )

    def _empty_namespace(self, namespace: str) -> None:
        for resource, rtype in RESOURCES.items():
            if not rtype.namespaced:
                continue
            for obj in self.store.list(resource, namespace):
                if not obj["metadata"].get("deletionTimestamp"):
                    self._delete(resource, obj)
        self.store.finalize_namespace(namespace)

    def _delete(self, resource: str, obj: dict) -> None:
        try:
            self.store.delete(
                resource,
                obj["metadata"]["name"],
                obj["metadata"].get("namespace"),
                propagation_policy="Background",
                preconditions={"uid": obj["metadata"]["uid"]},
            )
        except ApiError as exc:
            if exc.code not in (404, 409):
                raise
