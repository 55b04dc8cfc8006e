"""What is ruled on a suspended job before any engine queues it, and when it may be let go: pure.

A job that can never be placed (a pod larger than any node the cluster has or can add) is failed at
once, whichever engine would queue it: admitting it would only trade a wait in the queue for a wait as
Unschedulable. A job of the quota pool whose pod templates the pool cannot charge is failed too: its
templates cannot change while it waits, so it would wait in no queue for ever. The decision is made
here, from plain data (the job object, the nodes' shapes, the shapes the cluster can add); the engines
read the cluster for it and write what it decides.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from airflow_jobs_plugin.cluster.objects import Meta, parse_time
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.kinds import charge
from airflow_jobs_plugin.lifecycle import Reason
from airflow_jobs_plugin.queueing.quota import placement


@dataclass(frozen=True)
class Ruling:
    """The product's verdict on a queued job: the reason users see, and why."""

    reason: str
    message: str


def not_before(job: dict) -> datetime | None:
    """The time before which a job must not be admitted (a retry's or a requeue's back-off)."""
    return parse_time(Meta(job).annotations.get(labels.REQUEUE_NOT_BEFORE))


def wake_after(job: dict, default: float, now: datetime) -> float:
    """How long a trigger may sleep before it must look at ``job`` again even without a watch event:
    ``default``, or less when the job's back-off ends sooner (at least 50 ms)."""
    wait_until = not_before(job)
    if wait_until is None:
        return default
    return max(0.05, min(default, (wait_until - now).total_seconds()))


def ruling_before_queue(
    job: dict,
    nodes: Sequence[placement.NodeCapacity],
    autoscaling: placement.Autoscaling,
    *,
    pooled: bool,
) -> Ruling | None:
    """The verdict a suspended job gets before it is queued (``None``: it is queued).

    ``nodes`` are the cluster's nodes as placement sees them (none when they cannot be read: nothing is
    ruled then), ``autoscaling`` the nodes it can add; ``pooled`` says the quota pool queues the job.
    """
    too_large = placement.never_fits(job, nodes, autoscaling)
    if too_large is not None:
        return Ruling(Reason.UNSCHEDULABLE.value, too_large)
    if pooled:
        try:
            charge.job_charge(job)
        except charge.ChargeRefused as exc:
            return Ruling(Reason.INADMISSIBLE.value, str(exc))
    return None
