"""What the quota pool reads of a job object: its group, whether it is suspended, finished, stopped or
handed to Kueue, its queue entry and timeouts, whether its pods still hold GPUs. No I/O.

The readers the ledger's passes (``ledger.py``), the admission shell and the read model share, kept
apart from the ledger's reads and writes so that a pure module may use them without importing the
client.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_jobs_plugin.cluster.objects import Meta
from airflow_jobs_plugin.cluster.objects import rfc3339 as rfc3339
from airflow_jobs_plugin.cluster.resources import Resource
from airflow_jobs_plugin.jobs import kinds, labels
from airflow_jobs_plugin.jobs.jobview import JobView
from airflow_jobs_plugin.queueing import kueue
from airflow_jobs_plugin.queueing.quota.ledger_model import ObservedJob, observed_job, queued_job_of
from airflow_jobs_plugin.queueing.quota.model import QueuedJob
from airflow_jobs_plugin.queueing.quota.requeue import RequeueSettings


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def resource_of(job: Mapping[str, Any]) -> Resource:
    return kinds.kind_of(job).resource


def is_suspended(job: Mapping[str, Any]) -> bool:
    return kinds.kind_of(job).is_suspended(job)


def handed_to_kueue(job: Mapping[str, Any]) -> bool:
    """A job the pool handed to Kueue (:func:`handoff_patch`): from then on Kueue's alone to admit,
    suspend or requeue; the pool only keeps its reservation. A job Kueue took at creation (its
    ``default`` LocalQueue) is not handed over while the pool's admission gate still holds it."""
    if not kueue.manages(job) or kueue.gated_by_pool(job):
        return False
    meta = Meta(job)
    admitted = meta.labels.get(labels.ADMITTED) == labels.ADMITTED_VALUE
    return admitted or bool(meta.annotations.get(labels.KUEUE_HANDOFF))


def awaits_release(job: Mapping[str, Any]) -> bool:
    """Not yet released by the pool: suspended, or -- for a job the pool hands to Kueue -- not yet
    handed over (a handed-over job waits in Kueue suspended, and that is Kueue's to end)."""
    return is_suspended(job) and not handed_to_kueue(job)


def is_finished(job: Mapping[str, Any]) -> bool:
    """The controller's final word (Complete / Succeeded / Failed) or a verdict of the product."""
    return JobView(job).finished


def is_product_job(job: Mapping[str, Any]) -> bool:
    """A Job or MPIJob the product submitted, not the launcher Job an MPI operator made for an MPIJob."""
    return not kinds.made_for_another_job(job)


def fingerprint(job: Mapping[str, Any]) -> tuple:
    """What an admission pass reads from a job: a pass is due only when this changes."""
    meta = Meta(job)
    annotations = meta.annotations
    return (
        awaits_release(job),
        is_finished(job),
        meta.deleting,
        tuple(
            annotations.get(k)
            for k in (
                labels.GPUS,
                labels.PRIORITY,
                labels.QUEUED_AT,
                labels.REQUEUE_COUNT,
                labels.REQUEUE_NOT_BEFORE,
                labels.QUEUE_TIMEOUT,
                labels.GROUP_NAME,
                labels.USER_NAME,
                labels.STOPPED_AT,  # a stop or a resume changes what the pass decides
                labels.QUEUE_WAITED,
                labels.QUEUE_WAIT_SINCE,
            )
        ),
    )


def _seconds_annotation(annotations: Mapping[str, str], key: str) -> timedelta | None:
    raw = annotations.get(key)
    if raw is None or raw in ("", "none"):
        return None
    try:
        seconds = float(raw)
    except ValueError:
        raise ValueError(f"annotation {key} must be a number of seconds, got {raw!r}") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"annotation {key} must be a positive number of seconds, got {raw!r}")
    return timedelta(seconds=seconds)


def job_settings(job: Mapping[str, Any], policy: RequeueSettings) -> RequeueSettings:
    """The policy's requeue settings with the job's own limits (labels.SCHEDULE_TIMEOUT, ...) applied.

    A malformed annotation raises ValueError naming it.
    """
    annotations = Meta(job).annotations
    settings = policy
    schedule = _seconds_annotation(annotations, labels.SCHEDULE_TIMEOUT)
    if schedule is not None:
        settings = replace(settings, schedule_timeout=schedule)
    queue = _seconds_annotation(annotations, labels.QUEUE_TIMEOUT)
    if queue is not None:
        settings = replace(settings, queue_timeout=queue)
    raw = annotations.get(labels.REQUEUE_LIMIT)
    if raw == "none":
        settings = replace(settings, requeue_limit=sys.maxsize)
    elif raw is not None and raw != "":
        try:
            limit = int(raw)
        except ValueError:
            raise ValueError(
                f"annotation {labels.REQUEUE_LIMIT} must be a count or 'none', got {raw!r}"
            ) from None
        if limit < 0:
            raise ValueError(f"annotation {labels.REQUEUE_LIMIT} must be >= 0, got {raw!r}")
        settings = replace(settings, requeue_limit=limit)
    return settings


def queued_job(job: Mapping[str, Any]) -> QueuedJob:
    """The job as the admission rule sees it, with its own queue timeout (ValueError names a bad key)."""
    result = queued_job_of(job)
    own_timeout = _seconds_annotation(Meta(job).annotations, labels.QUEUE_TIMEOUT)
    return replace(result, queue_timeout=own_timeout) if own_timeout is not None else result


def admitted_at_of(job: Mapping[str, Any]) -> datetime | None:
    return JobView(job).admitted_at


def expected_pods(job: Mapping[str, Any]) -> int:
    """How many pods an admitted job runs at once: its parallelism, or an MPIJob's replicas."""
    return kinds.kind_of(job).expected_pods(job)


def pod_scheduled(pod: Mapping[str, Any]) -> bool:
    if (pod.get("spec") or {}).get("nodeName"):
        return True
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or ()
    )


def all_pods_scheduled(job: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> bool:
    """Whether every pod the job runs is bound to a node (whatever its containers are doing).

    Pods being deleted do not count: the controller is replacing them, the new ones must be placed.
    """
    placed = sum(1 for p in pods if not Meta(p).deleting and pod_scheduled(p))
    return placed >= expected_pods(job)


def is_stopped(job: Mapping[str, Any]) -> bool:
    """A user stopped the job (labels.STOPPED_AT): no admission may release it until a resume."""
    return JobView(job).stopped


# How long past its deletion deadline (``metadata.deletionTimestamp``: the deletion's time plus its grace
# period, k8s.io/apiserver pkg/registry/rest/delete.go BeforeDelete) a pod still counts as holding its
# GPUs. A pod its kubelet never confirms gone sits on a lost node: its quota must not wait for the node.
POD_GONE_MARGIN = timedelta(seconds=60)


def pods_hold_gpus(pods: Iterable[Mapping[str, Any]], now: datetime) -> bool:
    """Whether any of ``pods`` still holds GPUs: placed on a node, not ended, and (when being deleted)
    not yet past its deletion deadline by POD_GONE_MARGIN."""
    for pod in pods:
        if not (pod.get("spec") or {}).get("nodeName"):  # a pod never placed holds no GPUs
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        deadline = Meta(pod).deletion_time
        if deadline is not None and now > deadline + POD_GONE_MARGIN:
            continue
        return True
    return False


def observe(
    job: Mapping[str, Any], pods: Iterable[Mapping[str, Any]] | None = None, *, released: bool = False
) -> ObservedJob:
    """What reconcile needs from ``job``; ``pods`` (its pods, where known) tell whether it still holds
    GPUs after it ended or was stopped; ``released``: its trigger let its reservation go."""
    holding = pods is not None and pods_hold_gpus(pods, utcnow())
    return observed_job(
        Meta(job).fields,
        suspended=awaits_release(job),
        terminal=is_finished(job),
        holding_pods=holding,
        released=released,
    )
