"""The unmanaged engine: without a quota pool, a suspended job is let go at once.

After its retry back-off, and never while a user holds it stopped (past its own queue timeout a stopped
job fails as the timeout says). A job that can never be placed is failed first (engines.ruling). Every
job is created behind the pool's admission gate (``kueue.POOL_GATE``), so letting it go is one of two
writes: a job Kueue is to take (it asks for a LocalQueue, Kueue gave it its ``default`` one at creation,
or Kueue manages every job) is handed over -- the gate removed, the LocalQueue named -- once that queue
exists and is active; any other is unsuspended. A job already handed to Kueue is the Kueue engine's.
"""

from __future__ import annotations

from datetime import datetime, timezone
from weakref import WeakKeyDictionary

from airflow_jobs_plugin.cluster.kube import KubeClient, KubeError
from airflow_jobs_plugin.cluster.watch import SharedWatch
from airflow_jobs_plugin.jobs import kinds, labels
from airflow_jobs_plugin.jobs.jobview import JobView
from airflow_jobs_plugin.lifecycle import QueueStatus
from airflow_jobs_plugin.queueing import kueue
from airflow_jobs_plugin.queueing.engines.door import Door, ThroughTheDoor
from airflow_jobs_plugin.queueing.engines.kueue import KueueEngine
from airflow_jobs_plugin.queueing.engines.ruling import not_before, wake_after
from airflow_jobs_plugin.queueing.quota import ledger
from airflow_jobs_plugin.queueing.quota.ledger import handoff_patch, unsuspend_patch
from airflow_jobs_plugin.queueing.quota.model import QueuedJob, Verdict
from airflow_jobs_plugin.queueing.quota.requeue import format_duration, queue_timed_out


def _now() -> datetime:
    return datetime.now(timezone.utc)


class UnmanagedEngine(ThroughTheDoor):
    """Jobs of one shared watch that no quota pool queues."""

    _registry: WeakKeyDictionary[SharedWatch, UnmanagedEngine] = WeakKeyDictionary()
    direct = True  # ``ensure``'s None: the job was let go (or ruled) by this very call

    def __init__(self, watch: SharedWatch):
        self.watch = watch
        self.client: KubeClient = watch.client
        self.door = Door(watch)
        self.kueue = KueueEngine(watch, self.door)

    @classmethod
    def for_watch(cls, watch: SharedWatch) -> UnmanagedEngine:
        """The process's unmanaged engine for ``watch`` (one per watch)."""
        existing = cls._registry.get(watch)
        if existing is None:
            existing = cls._registry[watch] = cls(watch)
        return existing

    async def ensure(self, job: dict) -> QueueStatus | None:
        """Called while ``job`` is suspended: let it go if it may run now, else say why it waits."""
        if JobView(job).verdict:
            return None
        if self.kueue.manages(job) and not kueue.gated_by_pool(job):
            # Kueue admits it; unsuspending it would only make Kueue suspend it again (kueue.py).
            return await self.kueue.ensure(job)
        to_kueue = await self._for_kueue(job)
        if not to_kueue:
            ruling = await self.door.ruling_before_queue(job, pooled=False)
            if ruling is not None:
                await self.door.rule(job, ruling.reason, ruling.message)
                return None
        return await self._admit_at_once(job, to_kueue)

    async def _for_kueue(self, job: dict) -> bool:
        """Whether ``job`` is to be handed to Kueue rather than unsuspended."""
        if JobView(job).annotations.get(labels.KUEUE_HANDOFF) or self.kueue.manages(job):
            return True
        return kueue.gated_by_pool(job) and await self.kueue.takes(job)

    def wake_after(self, job: dict, default: float) -> float:
        return wake_after(job, default, _now())

    async def release(self, job: dict) -> None:
        """Nothing to give back: no pool holds GPUs for the job."""

    def reserved_gpus(self, uid: str) -> int | None:
        return None

    async def close(self) -> None:
        await self.kueue.close()

    async def _admit_at_once(self, job: dict, to_kueue: bool) -> QueueStatus | None:
        now = _now()
        if ledger.is_stopped(job):
            return await self._hold_stopped(job, now)
        wait_until = not_before(job)
        if wait_until is not None and wait_until > now:
            secs = int((wait_until - now).total_seconds())
            return QueueStatus(
                reason="BackingOff", position=None, message=f"retry back-off: admitted in {secs}s"
            )
        resource = kinds.kind_of(job).resource
        meta = JobView(job)
        if to_kueue:
            queue = kueue.handoff_queue(job, meta.annotations.get(labels.KUEUE_HANDOFF))
            problem = await self.kueue.queue_problem(queue)
            if problem is not None:
                return QueueStatus(reason="Inadmissible", message=problem)
            patch = handoff_patch(job, now)
        else:
            patch = unsuspend_patch(job, now, conditional=False)
            if kueue.gated_by_pool(job):
                # No Kueue takes it: the gate is the product's own mark, gone with the admission.
                patch["metadata"]["annotations"][kueue.ADMISSION_GATE_ANNOTATION] = (
                    kueue.gate_annotation_without_pool(job)
                )
        try:
            patched = await self.client.merge_patch(resource, meta.namespace, meta.name, patch)
        except KubeError as exc:
            # Gone, or changed since it was read (the hand-over is conditional): its next look decides.
            if not (exc.not_found or exc.conflict):
                raise
            return None
        # Fold the unsuspended job into the shared watch now, as the quota path does: its pods can
        # arrive on their own stream before the Job's own update does, and must not meet a cached Job
        # that still reads suspended.
        if meta.namespace == self.watch.namespace:
            self.watch.absorb(resource, patched, replaces=meta.resource_version)
        return None

    async def _hold_stopped(self, job: dict, now: datetime) -> QueueStatus | None:
        """A stopped job is never released; past its own queue timeout it fails as the timeout says."""
        try:
            queued: QueuedJob | None = ledger.queued_job(job)
        except ValueError:  # no readable queue time or timeout: it simply stays stopped
            queued = None
        stopped_at = (queued.stopped_at if queued else None) or now
        timeout = queued.queue_timeout if queued else None
        if queued is not None and timeout is not None and queue_timed_out(queued.waited(now), timeout):
            message = (
                f"stopped at {ledger.rfc3339(stopped_at)} after waiting {format_duration(queued.waited(now))} "
                f"for quota, longer than queue_timeout {format_duration(timeout)}"
            )
            await self.door.rule(job, Verdict.QUEUE_TIMEOUT.value, message, ledger.is_stopped)
            return None
        return QueueStatus(
            reason="Stopped", message=f"stopped at {ledger.rfc3339(stopped_at)}; resume to requeue it"
        )
