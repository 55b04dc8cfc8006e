"""What a trigger reads of its job's queue: the admission controller's queue boards and Kueue's Workloads.

A trigger runs where DAG code runs (the triggerer: Airflow's security model), so it admits nothing,
writes no ledger and rules on no job: the admission controller does (controller/). The trigger only
says why its job waits and where it stands, from what the controller published on the namespace's
queue boards (queueing/board.py) and, for a job Kueue holds, from Kueue's own Workload. Nothing a
trigger is given (its arguments) changes what it reads: the boards are keyed by the job's uid.

One observer per shared watch, shared by the process's triggers: one watch of the namespace's boards
(a handful of ConfigMaps), each decoded once per change, and the triggers whose job's entry changed
woken.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timezone
from weakref import WeakKeyDictionary

from airflow_jobs_plugin.cluster.kube import CONFIGMAPS
from airflow_jobs_plugin.cluster.objects import Meta
from airflow_jobs_plugin.cluster.watch import Scope, SharedWatch
from airflow_jobs_plugin.jobs.jobview import JobView
from airflow_jobs_plugin.lifecycle import QueueStatus
from airflow_jobs_plugin.queueing import board as boards
from airflow_jobs_plugin.queueing import kueue
from airflow_jobs_plugin.queueing.engines.door import ENSURE_WAIT_SECONDS, Door, detached
from airflow_jobs_plugin.queueing.engines.kueue import KueueEngine
from airflow_jobs_plugin.queueing.engines.ruling import not_before, wake_after

log = logging.getLogger(__name__)

# What a waiting job is told before the admission controller has published anything about it.
NOT_JUDGED = (
    "waiting for the admission controller to judge it (no decision published yet: is "
    "`airflow-jobs admission-controller` running for this namespace?)"
)


def _now() -> datetime:
    return datetime.now(timezone.utc)


class Observer:
    """The queue statuses of the jobs of one shared watch, read only."""

    _registry: WeakKeyDictionary[SharedWatch, Observer] = WeakKeyDictionary()

    def __init__(self, watch: SharedWatch):
        self.watch = watch
        self.kueue = KueueEngine(watch, Door(watch))
        self._boards: SharedWatch | None = None
        self._decoded: dict[str, tuple[str, boards.Board | None]] = {}  # name -> (resourceVersion, board)
        self._entries: dict[str, tuple[boards.Board, boards.BoardEntry]] = {}
        self._names: dict[str, str] = {}  # uid -> job name, for the jobs triggers asked about

    @classmethod
    def for_watch(cls, watch: SharedWatch) -> Observer:
        existing = cls._registry.get(watch)
        if existing is None:
            existing = cls._registry[watch] = cls(watch)
        return existing

    async def status(self, job: dict) -> QueueStatus | None:
        """Why a suspended job waits, as the controller (or Kueue) says; ``None`` for a job ruled on."""
        view = JobView(job)
        if view.verdict:
            return None
        if kueue.manages(job) and not kueue.gated_by_pool(job):
            return await self.kueue.observe(job)
        self._names[view.uid] = view.name
        await self._boards_synced()
        found = self._entries.get(view.uid)
        if found is not None:
            board, entry = found
            return QueueStatus(entry.reason, entry.position, entry.message)
        wait_until = not_before(job)
        now = _now()
        if wait_until is not None and wait_until > now:
            secs = int((wait_until - now).total_seconds())
            return QueueStatus(reason="BackingOff", message=f"retry back-off: admitted in {secs}s")
        return QueueStatus(reason="Pending", message=NOT_JUDGED)

    def wake_after(self, job: dict, default: float) -> float:
        return wake_after(job, default, _now())

    def forget(self, uid: str) -> None:
        """The trigger of job ``uid`` is done with it."""
        self._names.pop(uid, None)

    async def close(self) -> None:
        if self._boards is not None:
            await self._boards.stop()
            self._boards = None
        await self.kueue.close()

    async def _boards_synced(self) -> None:
        if self._boards is None:
            self._boards = SharedWatch(
                self.watch.client,
                self.watch.namespace,
                resources=(CONFIGMAPS,),
                scope=Scope(job_labels=boards.BOARD_SELECTOR, job_fields=None, pod_labels=None),
            )
            self._boards.add_listener(self._on_board)
            # The boards' watch is the observer's, not the first calling trigger's.
            detached().run(self._boards.start)
        await self._boards.wait_synced(timeout=ENSURE_WAIT_SECONDS)

    def _on_board(self, etype: str, plural: str, obj: dict) -> None:
        meta = Meta(obj)
        if etype == "DELETED":
            self._decoded.pop(meta.name, None)
        else:
            cached = self._decoded.get(meta.name)
            if cached is not None and cached[0] == meta.resource_version:
                return
            try:
                decoded: boards.Board | None = boards.decode(obj.get("data"))
            except boards.BoardError as exc:
                log.warning("queue board %s/%s cannot be read: %s", self.watch.namespace, meta.name, exc)
                decoded = None
            self._decoded[meta.name] = (meta.resource_version or "", decoded)
        before = self._entries
        self._entries = boards.merged(b for _, b in self._decoded.values() if b is not None)
        for uid, name in list(self._names.items()):
            old, new = before.get(uid), self._entries.get(uid)
            if (old[1] if old else None) != (new[1] if new else None):
                self.watch.notify(name)


async def close_all() -> None:
    """Close every observer of the running loop (tests, CLI)."""
    loop = asyncio.get_running_loop()
    for observer in list(Observer._registry.values()):
        boards_watch = observer._boards
        if boards_watch is not None and any(t.get_loop() is loop for t in boards_watch._tasks):
            await observer.close()
