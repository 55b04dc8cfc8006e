"""What a person does to a job on purpose: cancel it, stop it, resume it.

One implementation for every door a user comes through: the GPU Jobs page and the CLI (through
:mod:`airflow_jobs_plugin.readmodel.inspect`), Airflow's own mark failed / mark success / clear (through
``JobTrigger.on_kill``) and the orphan sweep. Every action is taken on the newest attempt of the task try
the named job belongs to, so an earlier attempt's name, as printed in an old log line, still finds the
live job. Whether an action applies at all is :func:`airflow_jobs_plugin.jobs.action_rules.refusal`: an action
that does not apply (a second cancel, a stop of a stopped job) answers in one line and changes nothing.

Each action also records a Kubernetes Event on the job (``Cancelled``, ``Stopped``, ``Resumed``, with who
did it), so ``kubectl describe``, the job page's events and a later ``cancel`` of a job that is already
gone can all say who acted and when. A person's cancel first leaves the record that keeps every later try
of the task's run from submitting the job again, even once the job is gone
(:mod:`airflow_jobs_plugin.jobs.cancel_record`): no record, no cancel.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_jobs_plugin import config
from airflow_jobs_plugin.cluster.kube import EVENTS, LEASES, PODS, KubeClient, KubeError, patiently
from airflow_jobs_plugin.cluster.objects import Meta
from airflow_jobs_plugin.jobs import action_rules, attempts, cancel_record, history, kinds, labels
from airflow_jobs_plugin.jobs.action_rules import Action, Ending, JobFacts, refusal
from airflow_jobs_plugin.jobs.action_rules import ActionOutcome as ActionOutcome
from airflow_jobs_plugin.jobs.action_rules import CancelOutcome as CancelOutcome
from airflow_jobs_plugin.jobs.jobview import JobView
from airflow_jobs_plugin.lifecycle import snapshot
from airflow_jobs_plugin.queueing import queue_clock
from airflow_jobs_plugin.queueing.engines.ruling import not_before
from airflow_jobs_plugin.queueing.quota.ledger import (
    end_ruled_job,
    is_finished,
    patch_job,
    read_ledger,
    resource_of,
    verdict_patch,
)

log = logging.getLogger(__name__)

EVENT_SOURCE = "airflow-jobs"
# Reads and conditional writes a cancel tries while the job keeps changing under it, before deleting it.
CANCEL_TRIES = 5
# Attempts at writing a cancel's record while the API answers with a transient error (about 6 s in all).
RECORD_TRIES = 6


class CancelNotRecorded(KubeError):
    """A cancel whose record (:mod:`~airflow_jobs_plugin.jobs.cancel_record`) could not be written: the
    job was left as it was, since a cancel without its record could be undone by a retry of its task."""


def facts_of(job: Mapping[str, Any]) -> JobFacts:
    """The facts :func:`~airflow_jobs_plugin.jobs.action_rules.refusal` reads; finished as the ledger reads it."""
    return action_rules.facts_of(job, finished=is_finished(job))


async def newest_attempt(client: KubeClient, namespace: str, job: Mapping[str, Any]) -> dict:
    """The newest job-level attempt of the task try ``job`` belongs to (``job`` itself if it is alone)."""
    resource = resource_of(job)
    meta_labels = Meta(job).labels
    if not meta_labels.get(labels.TASK_KEY):
        return dict(job)
    selector = f"{labels.TASK_KEY}={meta_labels[labels.TASK_KEY]}"
    if meta_labels.get(labels.TRY):
        selector += f",{labels.TRY}={meta_labels[labels.TRY]}"
    listing = await client.list(resource, namespace, label_selector=selector)
    return dict(attempts.latest_attempt(listing.get("items") or []) or job)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class _Seen:
    """What an action reads of the job's pods before it acts: the run it would end, and how many of
    the pods still hold their node (not yet gone)."""

    run: history.Run | None
    live_pods: int


async def _seen(client: KubeClient, namespace: str, job: Mapping[str, Any]) -> _Seen:
    """The job's run as its pods show it now, before a stop or a cancel has their controller delete
    them and, with them, the only record of when the run's first container started. Best effort: the
    action stands without it (the run is then recorded without a start)."""
    name = Meta(job).name
    try:
        listing = await client.list(
            PODS, namespace, label_selector=f"{kinds.kind_of(job).pod_job_label}={name}"
        )
        pods = listing.get("items") or []
    except KubeError:
        pods = []
    snap = snapshot(job, pods, now=datetime.now(timezone.utc))
    live = [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    return _Seen(history.run_ended(snap.admitted_at, snap.started_at, snap.gpus), len(live))


def _history(job: Mapping[str, Any], act: history.Act, by: str, run: history.Run | None = None) -> str:
    """The job's history annotation with this action added."""
    annotations = Meta(job).annotations
    return history.appended(annotations, history.Entry(act, datetime.now(timezone.utc), by, run))


def stop_patch(
    job: Mapping[str, Any],
    by: str,
    run: history.Run | None = None,
    clock: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The merge patch of a stop: suspended, no longer admitted, who stopped it and when, the run it
    ends in the job's history, and its queue clock banked (``clock``, queue_clock.leave_queue): the
    fields admission-policy.yaml's user-actions-only rule lets the acting identity write."""
    return {
        "metadata": {
            "labels": {labels.ADMITTED: None},
            "annotations": {
                labels.STOPPED_AT: _now(),
                labels.STOPPED_BY: by,
                labels.ADMITTED_AT: None,
                labels.HISTORY: _history(job, history.Act.STOPPED, by, run),
                **(clock or {}),
            },
        },
        "spec": kinds.kind_of(job).suspend_patch(True),
    }


# What a resume writes on a job under a quota pool (its pass admits it again from its queue).
RESUME_PATCH: Mapping[str, Any] = {
    "metadata": {"annotations": {labels.STOPPED_AT: None, labels.STOPPED_BY: None}}
}


async def _still_reserved(
    client: KubeClient,
    ledger_namespace: str,
    job: Mapping[str, Any],
    ledger_unit: str | None,
    members: tuple[str, ...],
    resumed_at: datetime,
) -> bool:
    """Whether the group's ledger still holds the job's reservation from before the stop: resumed before
    the admitting pass saw its stopped pods gone, the job keeps GPUs nobody else could take meanwhile,
    and that pass starts it again (``quota.ledger_model.pending_unsuspend``) instead of queueing it.

    A reservation admitted since ``resumed_at`` is not kept but new: a pass saw the resume, found the
    GPUs free and admitted the job from its queue before this read (a quiet pool does it within
    milliseconds), which is what "back in its queue" said."""
    view = JobView(job)
    group, uid = view.group, view.uid
    if not group or not uid:
        return False
    try:
        stored = await read_ledger(client, ledger_namespace, ledger_unit or group, members)
    except KubeError:
        return False
    return any(r.uid == uid and r.admitted_at < resumed_at for r in stored.ledger.reservations)


async def record_event(
    client: KubeClient, namespace: str, job: Mapping[str, Any], reason: str, message: str
) -> None:
    """A Normal Event on ``job`` saying what a person did (best effort: the action stands without it)."""
    meta = Meta(job)
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {
        "metadata": {"generateName": f"{meta.name or 'job'}.", "namespace": namespace},
        "involvedObject": {
            "apiVersion": job.get("apiVersion") or resource_of(job).api_version,
            "kind": resource_of(job).kind,
            "name": meta.name,
            "namespace": namespace,
            "uid": meta.uid,
        },
        "reason": reason,
        "message": message,
        "type": "Normal",
        "source": {"component": EVENT_SOURCE},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    with contextlib.suppress(KubeError):
        await client.create(EVENTS, namespace, body)


def _record_keep() -> timedelta:
    """How long a cancel's record is kept (``[airflow_jobs] cancel_record_ttl``); a value that is not a
    number of seconds is logged and the default kept: a cancel must not fail for it."""
    try:
        return cancel_record.keep_from(config.get("cancel_record_ttl"))
    except ValueError as exc:
        log.error("%s", exc)
        return cancel_record.DEFAULT_KEEP


async def _record(
    client: KubeClient, namespace: str, job: Mapping[str, Any], by: str, at: datetime, ref: str
) -> None:
    """Write the record of cancelling ``job``, before anything ends or deletes it. A job of no task try
    needs none; a record already there (a cancel of another attempt of the same try) stands. Raises
    :class:`CancelNotRecorded`, naming the missing right, when it cannot be written."""
    record = cancel_record.record_of(job, kind=resource_of(job).kind, by=by, at=at, keep=_record_keep())
    if record is None:
        return
    try:
        await patiently(
            client.create, LEASES, namespace, cancel_record.lease(record), log=log, tries=RECORD_TRIES
        )
    except KubeError as exc:
        if exc.already_exists:
            return
        if exc.status == 403:
            fix = (
                f"this identity needs create on leases.coordination.k8s.io in namespace {namespace} "
                "(helm-values/rbac.yaml grants it to the api-server's Role): cancel from the GPU Jobs page, "
                "or ask for that right"
            )
        else:
            fix = "try the cancel again"
        raise CancelNotRecorded(
            exc.status,
            exc.reason,
            f"{ref} was not cancelled: its cancel could not be recorded (Lease {namespace}/{record.name}: "
            f"{exc.message or exc}), and a cancel without its record could be undone by a retry of its "
            f"task; {fix}",
            exc.body,
        ) from exc


async def cancel(
    client: KubeClient, namespace: str, job: Mapping[str, Any], by: str, *, record: bool = True
) -> CancelOutcome:
    """Cancel ``job``'s newest attempt: rule it Cancelled and end it.

    A person's cancel (``record``, the default: the GPU Jobs page, the CLI) first writes the record of the
    cancelled task try, which keeps every later try of the run from submitting the job again even once
    the job is gone; if it cannot be written nothing is done (:class:`CancelNotRecorded`). The orphan
    sweep and Airflow's own kill pass ``record=False``: the task instance's state already keeps the run
    from trying again, or a clear starts a new run that must run (``cancel_record``'s docstring).

    The verdict goes on in the write that ends the job, so every reader (the task's trigger above all)
    reports CANCELLED from then on. The job is ended through its own controller where one can end it
    (:func:`~airflow_jobs_plugin.jobs.action_rules.cancel_ending`): the controller deletes its pods and marks
    it failed, and the job stays listed, CANCELLED, with who cancelled it, until its TTL removes it like
    any finished job. A queued or stopped MPIJob, and a queued job of Kueue's, are deleted with their
    pods instead. A job that already finished is left alone; a stopped job is cancelled like any other.

    The quota is freed by the admitting triggerer, not here: its pass drops the reservation of a job
    that is gone, or ruled and without live pods (``quota.ledger_model.reconcile_drops``), and the
    job's change wakes that pass. So the identities that act for people (the API server, the CLI) need
    no write on the ledgers, and the GPUs count until the pods holding them have really stopped.
    """
    at = datetime.now(timezone.utc)
    when = at.isoformat(timespec="seconds")
    recorded = not record
    for _ in range(CANCEL_TRIES):
        job = await newest_attempt(client, namespace, job)
        resource = resource_of(job)
        facts = facts_of(job)
        why_not = refusal(Action.CANCEL, facts)
        if why_not is not None:
            return CancelOutcome(namespace, facts.name, resource.kind, False, True, why_not)
        if not recorded:
            await _record(client, namespace, job, by, at, facts.ref)
            recorded = True
        ending = action_rules.cancel_ending(facts)
        if ending is Ending.DELETE:
            break
        seen = await _seen(client, namespace, job)
        patch = verdict_patch(job, "Cancelled", f"cancelled by {by}")
        patch["metadata"]["annotations"].update(
            {
                labels.CANCELLED_BY: by,
                labels.CANCELLED_AT: when,
                labels.HISTORY: _history(job, history.Act.CANCELLED, by, seen.run),
            }
        )
        # Conditional on the job as read: a job suspended (preempted, requeued) since would keep a
        # deadline that never counts. A job that changed is read again and ruled on afresh.
        ended = await patch_job(client, job, patch)
        if ended is None:
            continue
        await record_event(client, namespace, job, "Cancelled", f"cancelled by {by}")
        if ending is Ending.LAUNCHER_DEADLINE:
            await end_ruled_job(client, ended)
        kept = action_rules.kept_for(ended)
        until = f"until its TTL removes it in {_span(kept)}" if kept is not None else "until it is deleted"
        return CancelOutcome(
            namespace,
            facts.name,
            resource.kind,
            False,
            False,
            f"{facts.ref} cancelled: its pods are stopped and it stays listed as cancelled {until}",
            ended=True,
        )
    # Nothing can end it, or it kept changing under us: delete it, which always ends it. A cancel that
    # must be recorded has been, in the loop, before this delete.
    resource, name = resource_of(job), facts.name
    with contextlib.suppress(KubeError):
        await client.merge_patch(
            resource,
            namespace,
            name,
            {
                "metadata": {
                    "annotations": {
                        labels.VERDICT: "Cancelled",
                        labels.CANCELLED_BY: by,
                        labels.CANCELLED_AT: when,
                        labels.HISTORY: _history(job, history.Act.CANCELLED, by),
                    }
                }
            },
        )
    await record_event(client, namespace, job, "Cancelled", f"cancelled by {by}")
    deleted = await client.delete(resource, namespace, name, propagation_policy="Background")
    gone = "deleted with its pods" if deleted else "already gone"
    return CancelOutcome(namespace, name, resource.kind, deleted, False, f"{facts.ref} cancelled ({gone})")


def _span(seconds: int) -> str:
    """``7d``, ``1h``, ``90s``: the largest unit that divides ``seconds``."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


async def stop(client: KubeClient, namespace: str, job: Mapping[str, Any], by: str) -> ActionOutcome:
    """Stop ``job``'s newest attempt: suspend it and mark it stopped.

    One write suspends the job and records ``stopped-at`` / ``stopped-by`` (and drops ``admitted-at``:
    the admission ends here, as a requeue's does), so no reader ever sees a stopped job that is not
    suspended. The pods are not deleted here: suspending makes their controller delete them, the Job
    controller for a batch/v1 Job (kubernetes ``pkg/controller/job/job_controller.go``, ``manageJob``:
    "Deleting all active pods in suspended job", v1.24+ where suspend is GA) and the MPI operator for an
    MPIJob (kubeflow/mpi-operator v0.8.0 ``pkg/controller/mpi_job_controller.go``, ``syncHandler``:
    a suspended MPIJob suspends its launcher Job and ``cleanUpWorkerPods`` deletes the workers). The job
    reads TERMINATING (Stopped) until its pods are gone, then STOPPED. The admitting triggerer's pass
    drops its reservation once those pods are gone (``quota.ledger_model.reconcile_drops``), as for a
    cancel.
    """
    job = await newest_attempt(client, namespace, job)
    resource = resource_of(job)
    facts = facts_of(job)
    why_not = refusal(Action.STOP, facts)
    if why_not is not None:
        return ActionOutcome("stop", namespace, facts.name, resource.kind, False, why_not)
    now = datetime.now(timezone.utc)
    # The run this stop ends, recorded before the stop drops its admitted-at and deletes its pods.
    seen = await _seen(client, namespace, job)
    # The queue clock stops with the job: the wait it had before its admission (or before this stop,
    # when it was still queued) is banked, and the run since its admission never counts.
    clock = queue_clock.leave_queue(Meta(job).annotations, now, rejoin=False)
    await client.merge_patch(resource, namespace, facts.name, stop_patch(job, by, seen.run, clock))
    await record_event(client, namespace, job, "Stopped", f"stopped by {by}")
    return ActionOutcome(
        "stop",
        namespace,
        facts.name,
        resource.kind,
        True,
        f"{facts.ref} stopped: its pods are deleted and its GPUs released; resume puts it back in its queue",
    )


async def resume(
    client: KubeClient,
    namespace: str,
    job: Mapping[str, Any],
    by: str,
    ledger_namespace: str | None,
    ledger_unit: str | None = None,
    ledger_members: tuple[str, ...] = (),
) -> ActionOutcome:
    """Resume a stopped job: it goes back to its group's queue at its original position.

    Resumed while its stopped pods are still going, before the admitting pass has freed its GPUs, it
    keeps them and that pass starts it again at once: nobody else could have used them meanwhile.
    ``ledger_unit`` and ``ledger_members`` name the ledger holding the job's group (its cohort's, for a
    group of a cohort: ``QuotaPolicy.ledger_of``); by default the group's own.

    Removing ``stopped-at`` / ``stopped-by`` is the whole resume: the job is still suspended and keeps
    ``queued-at``, so under a quota pool the next admission pass places it where it was first enqueued (a
    stop is a pause, not a resubmission); its queue clock starts again from the waits banked at the stop.
    Without a quota pool the admission controller lets it go at once (``engines.unmanaged``), unless a
    retry back-off is still running. This identity never unsuspends a job itself (the admission policy
    refuses it: only the admission controller admits). The job then runs again from the start (its
    controller creates fresh pods).
    """
    job = await newest_attempt(client, namespace, job)
    resource = resource_of(job)
    facts = facts_of(job)
    why_not = refusal(Action.RESUME, facts)
    if why_not is not None:
        return ActionOutcome("resume", namespace, facts.name, resource.kind, False, why_not)
    now = datetime.now(timezone.utc)
    # Its new wait for quota starts now, on top of the waits banked when it was stopped.
    forget = {
        labels.STOPPED_AT: None,
        labels.STOPPED_BY: None,
        labels.HISTORY: _history(job, history.Act.RESUMED, by),
        **queue_clock.rejoin_queue(now),
    }
    # Lifting the stop is the whole resume: the admission controller, the one identity that admits,
    # lets the job go again (at once without a pool, after its back-off, or in its queue's order).
    backing_off = (not_before(job) or now) > now
    patch = copy.deepcopy(dict(RESUME_PATCH))
    patch["metadata"]["annotations"].update(forget)
    group = JobView(job).group
    queued_at = Meta(job).annotations.get(labels.QUEUED_AT)
    since = f", queued since {queued_at}" if queued_at else ""
    message = f"{facts.ref} resumed: back in group {group}'s queue at its original position{since}"
    if ledger_namespace is None:
        message = (
            f"{facts.ref} resumed: starts when its retry back-off ends"
            if backing_off
            else f"{facts.ref} resumed: the admission controller starts it again (no quota pool)"
        )
    await client.merge_patch(resource, namespace, facts.name, patch)
    # Read after the resume has landed: from then on the pass no longer drops the reservation as a
    # stopped job's, so what the ledger holds now is what the job keeps.
    if ledger_namespace is not None and await _still_reserved(
        client, ledger_namespace, job, ledger_unit, ledger_members, now
    ):
        # Why it still holds them, as it is now: the stopped pods still stopping (the pool frees a
        # stopped job's GPUs only once they are gone), or gone with no admission pass since to free them.
        stopping = (await _seen(client, namespace, job)).live_pods
        why = (
            f"{stopping} stopped pod(s) still stopping"
            if stopping
            else "its stopped pods are gone, but no admission pass has freed them since"
        )
        message = f"{facts.ref} resumed: it still holds its GPUs ({why}), so it starts again without queueing"
    await record_event(client, namespace, job, "Resumed", f"resumed by {by}")
    return ActionOutcome("resume", namespace, facts.name, resource.kind, True, message)
