"""Which engine queues a job: the one choice a trigger makes before it asks."""

from __future__ import annotations

from airflow_jobs_plugin.cluster.watch import SharedWatch
from airflow_jobs_plugin.queueing.engines.base import QueueEngine
from airflow_jobs_plugin.queueing.engines.pool import Admission
from airflow_jobs_plugin.queueing.engines.unmanaged import UnmanagedEngine


def engine_for(
    watch: SharedWatch, quota_configmap: str | None, quota_namespace: str | None, job: dict | None = None
) -> QueueEngine:
    """The engine that queues a job of ``watch``: the quota pool when the task names one (it hands a
    job to Kueue itself, and judges first a job Kueue took at creation), else Kueue when the job names a
    LocalQueue, else the unmanaged engine (which still leaves to Kueue a job a Kueue that manages every
    job took). One engine per watch and policy in a process, shared by its triggers."""
    if quota_configmap is not None:
        return Admission.for_watch(watch, quota_configmap=quota_configmap, quota_namespace=quota_namespace)
    unmanaged = UnmanagedEngine.for_watch(watch)
    if job is not None and unmanaged.kueue.manages(job):
        return unmanaged.kueue
    return unmanaged
