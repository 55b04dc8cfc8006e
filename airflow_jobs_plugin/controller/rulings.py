"""What the admission controller rules on a released job: pods that can never start, pods the API server
refuses, and the end of a finished MPIJob. Pure: no I/O.

These verdicts end a job, so they are the controller's, not the triggers': a trigger runs where DAG code
runs (Airflow's security model), and a right to end jobs held there would let any DAG end any tenant's
job. The controller reaches the same verdicts from the same cluster objects; the trigger reads them back
as the job's state. First match wins:

1. the job is not released (suspended, ruled, finished or being deleted): nothing to rule here;
2. its live pods can never start (containers that cannot be created past the start grace, an invalid
   image name, a replica on a lost node): ruled at once with the snapshot's reason;
3. a pod is stuck on an image pull the registry answered for good: ruled only once the pull events
   say so, and never while any of them reads transient (``lifecycle.is_transient_pull_error``);
4. pods are missing: the API server's refusal of them (``lifecycle.refused_pods``) is looked for.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from airflow_jobs_plugin.jobs import kinds
from airflow_jobs_plugin.jobs.jobview import JobView
from airflow_jobs_plugin.lifecycle import JobSnapshot, classify_failure, refused_pods
from airflow_jobs_plugin.lifecycle.failures import Failure
from airflow_jobs_plugin.lifecycle.state import JobState, Reason
from airflow_jobs_plugin.lifecycle.tracking import awaits_pods, mpijob_expiry, stuck_for_good

# The states a failure is read from (a job waiting for its pods reports none).
_FAILING = (JobState.FAILED, JobState.STARTING, JobState.RETRYING, JobState.DEGRADED, JobState.UNKNOWN)


class Look(enum.Enum):
    NOTHING = "nothing"
    RULE = "rule"  # rule now: ``ruling_of(snapshot)`` says what
    PULL_EVENTS = "pull-events"  # read the stuck pods' events, then ``ruling_of(snapshot, events)``
    REFUSALS = "refusals"  # pods are missing: look for the API server's refusal of them


@dataclass(frozen=True)
class Ruling:
    reason: str
    message: str


def failure_of(snapshot: JobSnapshot) -> Failure | None:
    """The failure a live job reports, classified by the product's defaults (a task's own exit codes
    only change whether a finished job is retried, which is the trigger's to decide)."""
    if snapshot.state not in _FAILING:
        return None
    try:
        return classify_failure(snapshot)
    except ValueError:
        return None


def released(job: Mapping[str, Any]) -> bool:
    """Released and live: neither suspended, ruled, finished nor being deleted."""
    view = JobView(job)
    return not (view.suspended or view.verdict or view.finished or view.deleting)


def look(job: Mapping[str, Any], snapshot: JobSnapshot) -> Look:
    """What to look at next for a job (the module docstring's rules)."""
    if not released(job) or snapshot.state.is_terminal:
        return Look.NOTHING
    failure = failure_of(snapshot)
    if stuck_for_good(snapshot, failure):
        if snapshot.reason in (Reason.IMAGE_PULL,):
            return Look.PULL_EVENTS
        return Look.RULE
    if awaits_pods(job, snapshot):
        return Look.REFUSALS
    return Look.NOTHING


def ruling_of(snapshot: JobSnapshot, events: Iterable[Mapping[str, Any]] = ()) -> Ruling | None:
    """The verdict for a job stuck for good (``events``: its stuck pods' events), or ``None``."""
    failure = failure_of(snapshot)
    if not stuck_for_good(snapshot, failure, events):
        return None
    message = (failure.message if failure else "") + (f": {snapshot.message}" if snapshot.message else "")
    return Ruling(snapshot.reason.value if snapshot.reason else Reason.ERROR.value, message[:1000])


def refusal_ruling(job: Mapping[str, Any], events: Iterable[Mapping[str, Any]]) -> Ruling | None:
    """The verdict for a job whose pods the API server refuses, from the refusal events about the
    objects that create its pods (the job, an MPIJob's launcher Job), or ``None``."""
    creators = set(kinds.kind_of(job).pod_creators(job))
    about = [e for e in events if str((e.get("involvedObject") or {}).get("name") or "") in creators]
    refusal = refused_pods(about)
    if refusal is None:
        return None
    return Ruling(Reason.POD_REFUSED.value, f"the API server refused its pods: {refusal}"[:1000])


def event_subject(event: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The kind and name of the object an event is about (``involvedObject``, or ``regarding`` in the
    events.k8s.io/v1 form), ``(None, None)`` if it names none."""
    about = event.get("involvedObject") or event.get("regarding") or {}
    kind, name = about.get("kind"), about.get("name")
    return (str(kind) if kind else None, str(name) if name else None)


def expiry(job: Mapping[str, Any], snapshot: JobSnapshot) -> datetime | None:
    """When a finished job whose controller outlives its TTL (an MPIJob) is to be deleted, or ``None``:
    its own ``ttlSecondsAfterFinished`` read from the object, as the kind keeps it."""
    seconds = kinds.kind_of(job).ttl_after_finished(job)
    ttl = None if seconds is None else timedelta(seconds=seconds)
    return mpijob_expiry(job, snapshot, ttl)
