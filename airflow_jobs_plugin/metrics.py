"""The provider's metrics: their names, what to emit for an event, and a thin emitter onto Airflow's Stats.

Every metric goes through Airflow's own ``Stats`` (``airflow.sdk.observability.stats``), so it reaches
whichever backend the deployment configured in ``[metrics]``: StatsD, Datadog StatsD or OpenTelemetry.
Names are stable and carry their dimensions as tags (group, state, reason, namespace), as Airflow 3
names its own (``pool.open_slots`` with ``pool_name``; airflow-core/src/airflow/jobs/scheduler_job_runner.py,
Airflow 3.3): a backend without tags (plain StatsD) sees the totals. docs/deploying.md lists them.

The functions that decide what to emit are pure and return :class:`Metric` values; :func:`emit` is the
only place that talks to Airflow, and a metrics backend that fails never fails the product.

A sink: it takes plain values (a group, a state, a reason) and imports no model of the product, so every
layer may emit (the watch at the bottom too); the layer that knows a job reads its group out of it.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow_jobs_plugin.queueing.quota.ledger import PassOutcome
    from airflow_jobs_plugin.queueing.quota.model import QuotaPolicy

log = logging.getLogger(__name__)

PREFIX = "airflow_jobs"

# Gauges, per quota group (tag ``group``), written by every admission pass of the group.
GROUP_GPUS_QUOTA = f"{PREFIX}.group.gpus_quota"
GROUP_GPUS_HELD = f"{PREFIX}.group.gpus_held"
GROUP_GPUS_QUEUED = f"{PREFIX}.group.gpus_queued"
GROUP_QUEUE_LENGTH = f"{PREFIX}.group.queue_length"
# Timing: from a job's first enqueue to its admission (tag ``group``).
ADMISSION_LATENCY = f"{PREFIX}.admission.latency"
# Counters.
JOB_OUTCOMES = f"{PREFIX}.job.outcomes"  # tags: state, reason, group
REQUEUES = f"{PREFIX}.job.requeues"  # tags: group, reason
WATCH_RECONNECTS = f"{PREFIX}.watch.reconnects"  # tags: namespace, resource
WATCH_ERRORS = f"{PREFIX}.watch.errors"  # tags: namespace, resource, error

NAMES = (
    GROUP_GPUS_QUOTA,
    GROUP_GPUS_HELD,
    GROUP_GPUS_QUEUED,
    GROUP_QUEUE_LENGTH,
    ADMISSION_LATENCY,
    JOB_OUTCOMES,
    REQUEUES,
    WATCH_RECONNECTS,
    WATCH_ERRORS,
)

# A tag value is bounded: an error text or a reason from a cluster can be long, and a backend keeps one
# time series per distinct value.
MAX_TAG_LENGTH = 63


class Kind(enum.Enum):
    GAUGE = "gauge"
    COUNTER = "counter"
    TIMING = "timing"


@dataclass(frozen=True)
class Metric:
    kind: Kind
    name: str
    value: float
    tags: dict[str, str] = field(default_factory=dict)


def _tag(value: object) -> str:
    text = str(value) if value not in (None, "") else "none"
    return text[:MAX_TAG_LENGTH]


def group_pool(
    group: str, *, quota_gpus: int, held_gpus: int, queued_gpus: int, queued_jobs: int
) -> tuple[Metric, ...]:
    """A group's pool after an admission pass: its quota, the GPUs its admitted jobs hold, and its queue."""
    tags = {"group": _tag(group)}
    return (
        Metric(Kind.GAUGE, GROUP_GPUS_QUOTA, quota_gpus, tags),
        Metric(Kind.GAUGE, GROUP_GPUS_HELD, held_gpus, tags),
        Metric(Kind.GAUGE, GROUP_GPUS_QUEUED, queued_gpus, tags),
        Metric(Kind.GAUGE, GROUP_QUEUE_LENGTH, queued_jobs, tags),
    )


def admitted(group: str, *, queued_at: datetime, admitted_at: datetime) -> Metric:
    """A job was admitted: how long it waited, in milliseconds (never negative across clock skew)."""
    waited_ms = max(0.0, (admitted_at - queued_at).total_seconds() * 1000)
    return Metric(Kind.TIMING, ADMISSION_LATENCY, waited_ms, {"group": _tag(group)})


def from_pass(outcome: PassOutcome, policy: QuotaPolicy, now: datetime) -> tuple[Metric, ...]:
    """What one admission pass of a group tells: its pool, and each job it admitted, with its wait."""
    group = outcome.group
    quota = policy.groups.get(group)
    waiting = [d for d in outcome.decisions if d.verdict.waiting]
    pool = group_pool(
        group,
        quota_gpus=quota.gpus if quota is not None else 0,
        held_gpus=outcome.ledger.used_gpus,
        queued_gpus=sum(d.job.gpus for d in waiting),
        queued_jobs=len(waiting),
    )
    names = set(outcome.admitted)
    latencies = tuple(
        admitted(group, queued_at=d.job.queued_at, admitted_at=now)
        for d in outcome.decisions
        if d.job.name in names
    )
    return pool + latencies


def watch_interrupted(namespace: str, resource: str, error: BaseException) -> tuple[Metric, ...]:
    """A watch stream broke and will be opened again: a reconnect, and an error unless the API server
    only said its history expired (410 Gone, an ordinary relist)."""
    reconnect = watch_reconnected(namespace, resource)
    if getattr(error, "gone", False):
        return (reconnect,)
    return (reconnect, watch_failed(namespace, resource, error))


def outcome(state: str, reason: str | None, group: str | None) -> Metric:
    """A job reached a final state (SUCCEEDED, FAILED, CANCELLED...) for ``reason``."""
    return Metric(
        Kind.COUNTER, JOB_OUTCOMES, 1, {"state": _tag(state), "reason": _tag(reason), "group": _tag(group)}
    )


def requeued(group: str | None, reason: str | None) -> Metric:
    return Metric(Kind.COUNTER, REQUEUES, 1, {"group": _tag(group), "reason": _tag(reason)})


def watch_reconnected(namespace: str, resource: str) -> Metric:
    return Metric(
        Kind.COUNTER, WATCH_RECONNECTS, 1, {"namespace": _tag(namespace), "resource": _tag(resource)}
    )


def watch_failed(namespace: str, resource: str, error: BaseException | str) -> Metric:
    """A watch stream failed; ``error`` is tagged by its type, never by its (unbounded) message."""
    kind = error if isinstance(error, str) else type(error).__name__
    return Metric(
        Kind.COUNTER,
        WATCH_ERRORS,
        1,
        {"namespace": _tag(namespace), "resource": _tag(resource), "error": _tag(kind)},
    )


# --- the emitter: the only code that talks to Airflow ---


def emit(metrics: Metric | Iterable[Metric]) -> None:
    """Send ``metrics`` to Airflow's Stats. Never raises: a metric lost is better than a job lost."""
    batch = (metrics,) if isinstance(metrics, Metric) else tuple(metrics)
    try:
        from airflow.sdk.observability import stats

        for metric in batch:
            if metric.kind is Kind.GAUGE:
                stats.gauge(metric.name, metric.value, tags=metric.tags)
            elif metric.kind is Kind.COUNTER:
                stats.incr(metric.name, int(metric.value), tags=metric.tags)
            else:
                stats.timing(metric.name, metric.value, tags=metric.tags)
    except Exception:  # noqa: BLE001 - the backend's trouble must not reach the admission or a trigger
        log.debug("could not emit %d metric(s)", len(batch), exc_info=True)
