"""Admission: the step that turns a queued (suspended) job into a running one.

Every job is created suspended so the queue is visible in the cluster; admitting it is unsuspending it.
This module is the one door through which that happens. Without a quota policy it admits at once
(after any retry back-off recorded on the object); the quota pool gates the same door.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any
from weakref import WeakKeyDictionary

from airflow_jobs_plugin import labels
from airflow_jobs_plugin.kube import JOBS, MPIJOBS, KubeClient, KubeError
from airflow_jobs_plugin.lifecycle import QueueStatus
from airflow_jobs_plugin.watch import SharedWatch

log = logging.getLogger(__name__)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def not_before(job: dict) -> datetime | None:
    """The time before which a job must not be admitted (a job-level retry's back-off)."""
    return _parse_time(((job.get("metadata") or {}).get("annotations") or {}).get(labels.REQUEUE_NOT_BEFORE))


def unsuspend_patch(job: dict, now: datetime) -> dict[str, Any]:
    """The merge patch that admits ``job``: unsuspend, and record when."""
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    spec: dict[str, Any] = (
        {"runPolicy": {"suspend": False}} if job.get("kind") == "MPIJob" else {"suspend": False}
    )
    return {"metadata": {"annotations": {labels.ADMITTED_AT: stamp}}, "spec": spec}


class Admission:
    """Admission for the jobs of one shared watch (one namespace of one cluster)."""

    _by_watch: WeakKeyDictionary[SharedWatch, Admission] = WeakKeyDictionary()

    def __init__(self, watch: SharedWatch, quota_configmap: str | None, quota_namespace: str | None):
        self.watch = watch
        self.client: KubeClient = watch.client
        self.quota_configmap = quota_configmap
        self.quota_namespace = quota_namespace or watch.namespace

    @classmethod
    def for_watch(
        cls, watch: SharedWatch, *, quota_configmap: str | None = None, quota_namespace: str | None = None
    ) -> Admission:
        existing = cls._by_watch.get(watch)
        if existing is None or (existing.quota_configmap, existing.quota_namespace) != (
            quota_configmap,
            quota_namespace or watch.namespace,
        ):
            existing = cls(watch, quota_configmap, quota_namespace)
            cls._by_watch[watch] = existing
        return existing

    async def ensure(self, job: dict) -> QueueStatus | None:
        """Called while ``job`` is suspended: admit it if it may run, else say why it waits."""
        now = _now()
        wait_until = not_before(job)
        if wait_until is not None and wait_until > now:
            secs = int((wait_until - now).total_seconds())
            return QueueStatus(
                reason="BackingOff", position=None, message=f"retry back-off: admitted in {secs}s"
            )
        resource = MPIJOBS if job.get("kind") == "MPIJob" else JOBS
        meta = job["metadata"]
        try:
            await self.client.merge_patch(
                resource, meta["namespace"], meta["name"], unsuspend_patch(job, now)
            )
        except KubeError as exc:
            if not exc.not_found:
                raise
        return None

    def wake_after(self, job: dict, default: float) -> float:
        """How long a trigger may sleep before it must look again even without a watch event."""
        wait_until = not_before(job)
        if wait_until is None:
            return default
        return max(0.05, min(default, (wait_until - _now()).total_seconds()))

    async def release(self, job: dict) -> None:
        """A job reached its end: give its GPUs back (nothing to do without a quota pool)."""
        await self.release_job(self.client, job, self.quota_configmap, self.quota_namespace)

    @staticmethod
    async def release_job(
        client: KubeClient, job: dict, quota_configmap: str | None, quota_namespace: str | None
    ) -> None:
        return None
