"""Whether a person's action (cancel, stop, resume) applies to a job, and the one line that says why not.

Pure: the shell (:mod:`airflow_jobs_plugin.usecases.actions`) reads the job and hands over the few facts that
matter. An action that does not apply is not an error: a second cancel, a stop of a stopped job or a
resume of a running one gets a clear answer and changes nothing, so a double click or a retried CLI
call is harmless. Rules, first match wins:

1. a job being deleted: nothing to do (its deletion is under way);
2. a job the product cancelled: "already cancelled by <who> at <when>";
3. a finished job (the controller's final condition or another verdict of the product): nothing to do;
4. stop of a stopped job: "already stopped by <who> at <when>";
5. resume of a job that is not stopped: nothing to resume (it is queued or holds its GPUs);
6. otherwise the action applies.

How a cancel ends a job (:func:`cancel_ending`) is a rule too: through the job's own controller
wherever one can end it, so that the job stays listed, CANCELLED, until its TTL removes it like any
finished job; deleted only where no controller can.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from airflow_jobs_plugin.cluster.objects import time_text
from airflow_jobs_plugin.jobs import kinds, kueue_job, labels
from airflow_jobs_plugin.jobs.jobview import JobView
from airflow_jobs_plugin.json_fields import Json


class Action(enum.Enum):
    CANCEL = "cancel"
    STOP = "stop"
    RESUME = "resume"


# An action's name as the JSON API and the CLI write it.
ActionName = Literal["stop", "resume", "cancel"]
NAMES: dict[Action, ActionName] = {Action.CANCEL: "cancel", Action.STOP: "stop", Action.RESUME: "resume"}


@dataclass(frozen=True)
class JobFacts:
    """What the rules read of a job (its newest attempt)."""

    kind: str
    name: str
    finished: bool
    deleting: bool
    suspended: bool
    verdict: str | None = None
    cancelled_by: str | None = None
    cancelled_at: str | None = None
    stopped_by: str | None = None
    stopped_at: str | None = None
    kueue_queue: str | None = None  # the Kueue LocalQueue that admits the job, when Kueue does

    @property
    def ref(self) -> str:
        """``job/name`` or ``mpijob/name``, as kubectl names it."""
        return f"{self.kind.lower()}/{self.name}"


def refusal(action: Action, job: JobFacts) -> str | None:
    """Why ``action`` does not apply to ``job`` (one line), or ``None`` when it does."""
    verb = action.value
    if job.deleting:
        return f"{job.ref} is already being deleted: nothing to {verb}"
    if job.verdict == "Cancelled":
        return f"{job.ref} was already cancelled by {job.cancelled_by or 'a user'}{_at(job.cancelled_at)}"
    if job.finished:
        why = f" ({job.verdict})" if job.verdict else ""
        return f"{job.ref} already finished{why}: nothing to {verb}"
    if action in (Action.STOP, Action.RESUME) and job.kueue_queue is not None:
        # Suspending a job Kueue admitted is undone by Kueue (reconciler.go step 7 starts it again);
        # Kueue's own stop is deactivating the Workload, which is Kueue's to offer.
        return (
            f"{job.ref} is queued by Kueue (LocalQueue {job.kueue_queue}): {verb} it through Kueue "
            "(the Workload's spec.active); cancel works"
        )
    if action is Action.STOP and job.stopped_at:
        return (
            f"{job.ref} is already stopped by {job.stopped_by or 'a user'}{_at(job.stopped_at)}; "
            "resume puts it back in its queue"
        )
    if action is Action.RESUME and not job.stopped_at:
        where = "waiting in its queue" if job.suspended else "admitted and holds its GPUs"
        return f"{job.ref} is not stopped ({where}): nothing to resume"
    return None


# How a cancel ends a job: its kind's answer (``JobKind.cancel_ending``), or a delete.
Ending = kinds.Ending


def cancel_ending(job: JobFacts) -> Ending:
    """How cancelling ``job`` ends it.

    - A suspended MPIJob (queued or stopped) is deleted (``MPIJob.cancel_ending``).
    - A suspended Job that Kueue admits is deleted: Kueue's job reconciler suspends again a managed job
      that runs without an admitted Workload (kubernetes-sigs/kueue v0.19.2
      ``pkg/controller/jobframework/reconciler.go``), so its deadline's clock would never start.
    - A running MPIJob ends through its launcher's deadline; any other Job through its own.
    """
    if job.suspended and job.kueue_queue is not None:
        return Ending.DELETE
    return kinds.for_name(job.kind).cancel_ending(job.suspended)


def kept_for(job: Mapping[str, Any]) -> int | None:
    """Seconds a finished ``job`` is kept (its kind's ``ttl_after_finished``), ``None`` if nothing
    removes it."""
    return kinds.kind_of(job).ttl_after_finished(job)


def facts_of(job: Mapping[str, Any], *, finished: bool) -> JobFacts:
    """The facts of a Job or MPIJob; ``finished`` is the caller's reading of its end (one rule each:
    the quota ledger's for the actions, the lifecycle snapshot's for the pages)."""
    view = JobView(job)
    annotations = view.annotations
    kind = view.kind
    return JobFacts(
        kind=kind.name,
        name=view.name,
        finished=finished,
        deleting=view.deleting,
        suspended=kind.is_suspended(job),
        verdict=view.verdict,
        cancelled_by=annotations.get(labels.CANCELLED_BY),
        cancelled_at=annotations.get(labels.CANCELLED_AT),
        stopped_by=annotations.get(labels.STOPPED_BY),
        stopped_at=annotations.get(labels.STOPPED_AT),
        kueue_queue=(kueue_job.queue_name(job) or "(default)") if kueue_job.manages(job) else None,
    )


def available(job: JobFacts) -> tuple[Action, ...]:
    """The actions that apply to ``job`` now, in the order the job page offers them."""
    return tuple(a for a in (Action.STOP, Action.RESUME, Action.CANCEL) if refusal(a, job) is None)


def _at(when: str | None) -> str:
    return f" at {time_text(when)}" if when else ""


@dataclass(frozen=True)
class CancelOutcome:
    """What cancelling did: the job (latest attempt) it ruled on, and whether it was ended through its
    controller (kept until its TTL) or deleted."""

    namespace: Annotated[str, Json("the job's namespace")]
    name: Annotated[str, Json("the attempt it ruled on (the task try's newest)")]
    kind: Annotated[str, Json("Job or MPIJob")]
    deleted: Annotated[bool, Json("whether the job object was deleted (a queued MPIJob or Kueue job)")]
    already_finished: Annotated[bool, Json("the job had already finished: nothing was done")]
    message: Annotated[str, Json("the one-line answer", blank_is_null=True)] = ""
    # Ended through its controller and kept, CANCELLED, until its TTL (``deleted`` is then False).
    ended: Annotated[
        bool,
        Json(
            "whether it was ended through its controller: it stays listed, CANCELLED, until its TTL",
            after="deleted",
        ),
    ] = False


@dataclass(frozen=True)
class ActionOutcome:
    """What a stop or a resume did: ``done`` False when it did not apply, ``message`` says why or what."""

    action: Annotated[Literal["stop", "resume"], Json("which action")]
    namespace: Annotated[str, Json("the job's namespace")]
    name: Annotated[str, Json("the attempt it acted on (the task try's newest)")]
    kind: Annotated[str, Json("Job or MPIJob")]
    done: Annotated[bool, Json("false when the action did not apply; message says why")]
    message: Annotated[str, Json("the one-line answer")]
