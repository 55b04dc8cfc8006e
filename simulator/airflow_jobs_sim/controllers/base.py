"""Plumbing shared by the simulated controllers: a keyed work queue and helpers over object dicts.

Each controller is a pure decision function wrapped by a ``Reconciler``: keys (usually
``namespace/name``) are marked dirty by store notifications and timers, and reconciled one at a time on
the cluster's event loop. An exception while reconciling one key is logged and the loop goes on: a bad
object never stops the simulator.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import Any

from airflow_jobs_sim import rbac

log = logging.getLogger(__name__)

TERMINAL_PHASES = ("Succeeded", "Failed")


class Reconciler:
    """A keyed work queue drained by one coroutine; subclasses implement ``reconcile``."""

    name = "controller"
    # Who this controller's writes are from, as the admission policies see them (None: the controller
    # manager's, rbac.CONTROLLERS). A cluster's add-ons call as their own service accounts.
    identity: rbac.User | None = None

    def __init__(self) -> None:
        self._dirty: dict[str, None] = {}
        self._wakeup: asyncio.Event | None = None
        self._timers: dict[str, tuple[float, asyncio.TimerHandle]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def enqueue(self, key: str) -> None:
        """Mark ``key`` for reconciliation (call on the loop thread)."""
        self._dirty[key] = None
        if self._wakeup is not None:
            self._wakeup.set()

    def enqueue_after(self, key: str, delay: float) -> None:
        """Reconcile ``key`` after ``delay`` real seconds, unless an earlier wake-up is already due."""
        if self._loop is None:
            self.enqueue(key)
            return
        due = self._loop.time() + max(delay, 0.0)
        current = self._timers.get(key)
        if current is not None and current[0] <= due and not current[1].cancelled():
            return
        if current is not None:
            current[1].cancel()
        self._timers[key] = (due, self._loop.call_at(due, self._fire, key))

    def enqueue_at(self, key: str, when: datetime | None, now: datetime) -> None:
        """Reconcile ``key`` at the real instant ``when`` (nothing for None)."""
        if when is not None:
            self.enqueue_after(key, (when - now).total_seconds())

    def _fire(self, key: str) -> None:
        self._timers.pop(key, None)
        self.enqueue(key)

    def reconcile(self, key: str) -> Any:
        """Bring the objects behind ``key`` one step towards their desired state."""
        raise NotImplementedError

    async def run(self) -> None:
        """Drain the queue until cancelled."""
        self._loop = asyncio.get_running_loop()
        self._wakeup = asyncio.Event()
        if self.identity is not None:
            # This task's own context: the writes it makes are this controller's.
            rbac.CALLER.set(self.identity)
        if self._dirty:
            self._wakeup.set()
        try:
            while True:
                await self._wakeup.wait()
                self._wakeup.clear()
                while self._dirty:
                    key = next(iter(self._dirty))
                    del self._dirty[key]
                    try:
                        result = self.reconcile(key)
                        if asyncio.iscoroutine(result):
                            await result
                    except Exception:  # noqa: BLE001 - one bad object must not stop the controller
                        log.exception("%s: reconciling %s failed", self.name, key)
                    await asyncio.sleep(0)
        finally:
            for _, handle in self._timers.values():
                handle.cancel()
            self._timers.clear()


def key_of(obj: dict) -> str:
    """``namespace/name`` of a namespaced object, ``name`` of a cluster-scoped one."""
    meta = obj.get("metadata", {})
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


def split_key(key: str) -> tuple[str | None, str]:
    """Inverse of ``key_of``."""
    if "/" in key:
        ns, name = key.split("/", 1)
        return ns, name
    return None, key


def controller_ref(obj: dict) -> dict | None:
    """The ownerReference with ``controller: true`` (None when the object has no controller)."""
    for ref in obj.get("metadata", {}).get("ownerReferences") or ():
        if ref.get("controller"):
            return ref
    return None


def owned_by(obj: dict, owner_uid: str) -> bool:
    """Whether ``obj``'s controller is the object with uid ``owner_uid``."""
    ref = controller_ref(obj)
    return ref is not None and ref.get("uid") == owner_uid


def owner_reference(owner: dict, api_version: str, kind: str) -> dict:
    """A controller ownerReference to ``owner``, as the built-in controllers write them."""
    meta = owner["metadata"]
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def pod_is_terminal(pod: dict) -> bool:
    """Whether the pod reached Succeeded or Failed."""
    return pod.get("status", {}).get("phase") in TERMINAL_PHASES
