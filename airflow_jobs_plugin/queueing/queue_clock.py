"""The queue clock: how long a job has waited for quota, which is all that ``queue_timeout`` measures.

A job's waits are banked on the job when a run or a stop takes it off the queue's clock, so every
process that judges it reads the same number (labels.QUEUE_WAITED, seconds), and the current wait's start
is written when it comes back (labels.QUEUE_WAIT_SINCE; absent, the first wait started at ``queued-at``).
``queued-at`` itself never changes: it is the job's position in line, not its clock.

Pure: annotation maps in, annotation patches out.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from airflow_jobs_plugin.cluster.objects import parse_time, rfc3339
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.queueing.quota.requeue import banked_wait


def waited_before(annotations: Mapping[str, Any]) -> timedelta:
    """The waits a job banked before its current one (labels.QUEUE_WAITED); unreadable reads as none."""
    try:
        seconds = float(annotations.get(labels.QUEUE_WAITED) or 0)
    except (TypeError, ValueError):
        return timedelta(0)
    return timedelta(seconds=seconds) if seconds > 0 else timedelta(0)


def wait_since(annotations: Mapping[str, Any]) -> datetime | None:
    """When the job's current wait began, if not at its first enqueue."""
    return parse_time(annotations.get(labels.QUEUE_WAIT_SINCE))


def leave_queue(annotations: Mapping[str, Any], now: datetime, *, rejoin: bool) -> dict[str, str | None]:
    """The annotations that take a job off the queue's clock now (a stop; a preemption or a next attempt
    when ``rejoin``, which start a new wait at once): its wait so far is banked, and its run (from its
    admission to now) is not counted. Call it with the job's annotations before the write that removes
    ``admitted-at``."""
    queued_at = parse_time(annotations.get(labels.QUEUED_AT)) or now
    waited = banked_wait(
        queued_at,
        waited_before=waited_before(annotations),
        wait_since=wait_since(annotations),
        admitted_at=parse_time(annotations.get(labels.ADMITTED_AT)),
        now=now,
    )
    return {
        labels.QUEUE_WAITED: f"{waited.total_seconds():.3f}",
        labels.QUEUE_WAIT_SINCE: rfc3339(now) if rejoin else None,
    }


def rejoin_queue(now: datetime) -> dict[str, str | None]:
    """The annotation that starts a stopped job's new wait (a resume)."""
    return {labels.QUEUE_WAIT_SINCE: rfc3339(now)}
