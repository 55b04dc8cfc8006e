"""The quota ledger on the cluster: compare-and-swap on a group's ConfigMap, admission passes, requeues.

The shell half of the quota pool: the rules are the pure functions of this package, this module does
the reads and writes around them in the order ``docs/quota.md`` prescribes. Every write that could race
is conditional: the ledger ConfigMap is replaced with the ``resourceVersion`` that was read, and every
patch of a job carries the job's ``resourceVersion`` as a precondition, so a process acting on a stale
view loses with a 409 instead of undoing someone else's newer decision.

The steps of a pass and of a requeue call an optional ``hook`` at each boundary (``read``, ``planned``,
``ledger-written``, ``failed:<job>``, ``unsuspended:<job>``, ``requeue-patched:<job>``,
``released:<job>``), which is where a process may die; the tests use it to kill a pass at every step.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import random
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from airflow_jobs_plugin.cluster.kube import CONFIGMAPS, PODS, KubeClient, KubeError
from airflow_jobs_plugin.cluster.objects import Meta
from airflow_jobs_plugin.jobs import kinds, labels
from airflow_jobs_plugin.jobs.bounded import bounded
from airflow_jobs_plugin.jobs.jobview import JobView
from airflow_jobs_plugin.queueing import kueue, kueue_cluster, queue_clock

# The pure readers of a job (jobs.py), re-exported: the ledger's callers in the shell read them here.
from airflow_jobs_plugin.queueing.quota.jobs import POD_GONE_MARGIN as POD_GONE_MARGIN
from airflow_jobs_plugin.queueing.quota.jobs import _seconds_annotation as _seconds_annotation
from airflow_jobs_plugin.queueing.quota.jobs import admitted_at_of as admitted_at_of
from airflow_jobs_plugin.queueing.quota.jobs import all_pods_scheduled as all_pods_scheduled
from airflow_jobs_plugin.queueing.quota.jobs import awaits_release as awaits_release
from airflow_jobs_plugin.queueing.quota.jobs import expected_pods as expected_pods
from airflow_jobs_plugin.queueing.quota.jobs import fingerprint as fingerprint
from airflow_jobs_plugin.queueing.quota.jobs import handed_to_kueue as handed_to_kueue
from airflow_jobs_plugin.queueing.quota.jobs import is_finished as is_finished
from airflow_jobs_plugin.queueing.quota.jobs import is_product_job as is_product_job
from airflow_jobs_plugin.queueing.quota.jobs import is_stopped as is_stopped
from airflow_jobs_plugin.queueing.quota.jobs import is_suspended as is_suspended
from airflow_jobs_plugin.queueing.quota.jobs import job_settings as job_settings
from airflow_jobs_plugin.queueing.quota.jobs import observe as observe
from airflow_jobs_plugin.queueing.quota.jobs import pod_scheduled as pod_scheduled
from airflow_jobs_plugin.queueing.quota.jobs import pods_hold_gpus as pods_hold_gpus
from airflow_jobs_plugin.queueing.quota.jobs import queued_job as queued_job
from airflow_jobs_plugin.queueing.quota.jobs import resource_of as resource_of
from airflow_jobs_plugin.queueing.quota.jobs import rfc3339 as rfc3339
from airflow_jobs_plugin.queueing.quota.jobs import utcnow as utcnow
from airflow_jobs_plugin.queueing.quota.ledger_model import (
    UNSUSPEND_GRACE,
    Drop,
    Ledger,
    ObservedJob,
    cas_retry_delay,
    decode,
    encode,
    ledger_name,
    plan_admission,
    reclaimed_for,
    without,
)
from airflow_jobs_plugin.queueing.quota.model import Decision, QueuedJob, QuotaPolicy, Reservation
from airflow_jobs_plugin.queueing.quota.preemption import Placement
from airflow_jobs_plugin.queueing.quota.requeue import (
    Requeue,
    RequeueLimitReached,
    RequeueSettings,
    requeue_decision,
)

Hook = Callable[[str], "Awaitable[None] | None"]
JobSource = Callable[[], "Awaitable[Sequence[dict]] | Sequence[dict]"]

MAX_CAS_ATTEMPTS = 30


class LedgerConflict(Exception):
    """Another process changed (or created, or deleted) the ledger since it was read."""


async def _call(hook: Hook | None, step: str) -> None:
    if hook is None:
        return
    result = hook(step)
    if inspect.isawaitable(result):
        await result


# --------------------------------------------------------------------------------------------------
# The ledger ConfigMap
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredLedger:
    """A ledger as read, with the ConfigMap it came from (``None``: it does not exist yet)."""

    ledger: Ledger
    configmap: dict | None

    @property
    def version(self) -> str | None:
        return Meta(self.configmap).resource_version


async def read_ledger(
    client: KubeClient, namespace: str, group: str, members: Collection[str] = ()
) -> StoredLedger:
    """GET the ledger of a group (or of a cohort, holding its ``members`` groups); a missing ConfigMap
    is an empty ledger (created on the first write)."""
    configmap = await client.get_or_none(CONFIGMAPS, namespace, ledger_name(group))
    return StoredLedger(decode(group, (configmap or {}).get("data"), members), configmap)


async def write_ledger(client: KubeClient, namespace: str, stored: StoredLedger, new: Ledger) -> StoredLedger:
    """Compare-and-swap ``new`` over ``stored``: PUT with the read resourceVersion, or create.

    Raises :class:`LedgerConflict` on a 409 (someone wrote first), on AlreadyExists (someone created
    it first) and on 404 (someone deleted it since): re-read and plan again.
    """
    data = encode(new)
    try:
        if stored.configmap is None:
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": ledger_name(new.group),
                    "namespace": namespace,
                    "labels": {labels.MANAGED_BY: labels.MANAGED_BY_VALUE, labels.GROUP: new.group},
                },
                "data": data,
            }
            written = await client.create(CONFIGMAPS, namespace, body)
        else:
            body = dict(stored.configmap)
            body["data"] = data
            written = await client.replace(CONFIGMAPS, namespace, body)
    except KubeError as exc:
        if exc.status == 409 or exc.not_found:
            raise LedgerConflict(str(exc)) from exc
        raise
    return StoredLedger(new, written)


async def _sleep_before_retry(attempt: int, rng: random.Random) -> None:
    await asyncio.sleep(cas_retry_delay(attempt, rng.random()).total_seconds())


async def update_ledger(
    client: KubeClient,
    namespace: str,
    group: str,
    change: Callable[[Ledger], Ledger],
    *,
    rng: random.Random | None = None,
    max_attempts: int = MAX_CAS_ATTEMPTS,
    members: Collection[str] = (),
    cached: StoredLedger | None = None,
) -> StoredLedger:
    """Read, apply ``change``, compare-and-swap; on a conflict re-read and apply again (jittered).

    ``cached`` (the ledger as a watch last saw it) replaces the first read: the compare-and-swap tells
    if it was stale, and a stale one is re-read at once. A change that leaves the cached ledger as it
    is returns it unread: only a write proves a read current, so that caller must not rely on it."""
    rng = rng or random.Random()
    for attempt in range(1, max_attempts + 1):
        from_cache = cached is not None and attempt == 1
        stored = (
            cached
            if from_cache and cached is not None
            else await read_ledger(client, namespace, group, members)
        )
        new = change(stored.ledger)
        if new.reservations == stored.ledger.reservations:
            return stored
        try:
            return await write_ledger(client, namespace, stored, new)
        except LedgerConflict:
            if attempt == max_attempts:
                raise
            if not from_cache:
                await _sleep_before_retry(attempt, rng)
    raise AssertionError("unreachable")


async def release(
    client: KubeClient,
    namespace: str,
    group: str,
    uid: str,
    *,
    requeue_count_at_most: int | None = None,
    rng: random.Random | None = None,
    members: Collection[str] = (),
    cached: StoredLedger | None = None,
) -> bool:
    """Remove job ``uid``'s reservation; True if there was one.

    ``requeue_count_at_most`` limits the release to a reservation of that attempt or an earlier one,
    so a requeue never frees the reservation of a newer admission made meanwhile. ``cached``: see
    :func:`update_ledger`.
    """
    released = False

    def change(ledger: Ledger) -> Ledger:
        nonlocal released
        held = ledger.find(uid)
        released = held is not None and (
            requeue_count_at_most is None or held.requeue_count <= requeue_count_at_most
        )
        return without(ledger, uid, utcnow()) if released else ledger

    await update_ledger(client, namespace, group, change, rng=rng, members=members, cached=cached)
    return released


# --------------------------------------------------------------------------------------------------
# Patches of jobs
# --------------------------------------------------------------------------------------------------


def _precondition(job: Mapping[str, Any]) -> dict[str, Any]:
    version = Meta(job).resource_version
    return {"resourceVersion": version} if version else {}


def unsuspend_patch(job: Mapping[str, Any], admitted_at: datetime, *, conditional: bool = True) -> dict:
    """The merge patch that admits ``job``: unsuspend and record the admission time in one write.

    ``conditional`` adds the job's resourceVersion as a precondition: a job that changed since it was
    read (requeued, finished, failed by another process) is not unsuspended on a stale decision.
    """
    return {
        "metadata": {
            **(_precondition(job) if conditional else {}),
            "labels": {labels.ADMITTED: labels.ADMITTED_VALUE},
            "annotations": {labels.ADMITTED_AT: rfc3339(admitted_at)},
        },
        "spec": kinds.kind_of(job).suspend_patch(False),
    }


def handoff_patch(job: Mapping[str, Any], admitted_at: datetime) -> dict:
    """The merge patch that releases a job to Kueue: its LocalQueue's name, the removal of the pool's
    admission gate, and the admission time.

    The job stays suspended: from this write on Kueue admits it (its job reconciler creates the
    Workload once the queue-name label is there, and admits a Workload once no gate holds it:
    kubernetes-sigs/kueue v0.19.2 ``pkg/controller/jobframework/reconciler.go``,
    ``pkg/workload/workload.go`` ``HasAdmissionGate``), and Kueue's webhook lets the label change only
    while the job is suspended (``jobframework/validation.go``, ``validateUpdateForQueueName``). The queue
    is the one the task asked for (``labels.KUEUE_HANDOFF``), else the one Kueue gave the job at
    creation, else -- a Kueue that manages every job took it without one -- Kueue's ``default``.
    """
    queue = kueue.handoff_queue(job, JobView(job).annotations.get(labels.KUEUE_HANDOFF))
    annotations: dict[str, Any] = {labels.ADMITTED_AT: rfc3339(admitted_at)}
    if kueue.gated_by_pool(job):
        annotations[kueue.ADMISSION_GATE_ANNOTATION] = kueue.gate_annotation_without_pool(job)
    return {
        "metadata": {
            **_precondition(job),
            "labels": {kueue.QUEUE_NAME_LABEL: queue, labels.ADMITTED: labels.ADMITTED_VALUE},
            "annotations": annotations,
        }
    }


def verdict_only_patch(job: Mapping[str, Any], reason: str, message: str) -> dict:
    """Record a product verdict on a job and change nothing else (a Kueue job's ``suspend`` is Kueue's)."""
    return {
        "metadata": {
            **_precondition(job),
            "annotations": {labels.VERDICT: reason, labels.VERDICT_MESSAGE: bounded(message)},
        }
    }


# The shortest deadline the API accepts (the kinds end a ruled batch/v1 Job, or a launcher, with it).
ENDING_DEADLINE_SECONDS = kinds.ENDING_DEADLINE_SECONDS


def verdict_patch(job: Mapping[str, Any], reason: str, message: str) -> dict:
    """Record a product verdict on a job, in the write that also ends it where one write can: the
    job's kind says how (``JobKind.ending_spec``: a batch/v1 Job through its own deadline, so
    ``kubectl get jobs`` shows it Failed; the product's verdict stays the job's reason). A kind whose
    job one write cannot end (an MPIJob) only gets the verdict here, and is ended by
    :func:`end_ruled_job`."""
    adapter = kinds.kind_of(job)
    metadata = {
        **_precondition(job),
        "annotations": {labels.VERDICT: reason, labels.VERDICT_MESSAGE: bounded(message)},
    }
    spec = adapter.ending_spec(job)
    if not spec:
        return {"metadata": metadata}
    record = adapter.ended_spec_record(job)
    if record is not None:
        metadata["annotations"][labels.ENDED_SPEC] = json.dumps(record, sort_keys=True)
    return {"metadata": metadata, "spec": spec}


def ruled_but_running(job: Mapping[str, Any]) -> bool:
    """A job that carries a failing verdict of the product but still runs, which its kind ends by
    further writes (:func:`end_ruled_job`; ``JobKind.ruled_but_running``)."""
    return kinds.kind_of(job).ruled_but_running(job)


def ruled_while_queued(job: Mapping[str, Any]) -> bool:
    """A job the product ruled failed while it was queued, which the cluster does not show ended yet
    (``JobKind.ruled_while_queued``): :func:`end_ruled_job` ends it."""
    return kinds.kind_of(job).ruled_while_queued(job)


async def end_ruled_job(client: KubeClient, job: Mapping[str, Any]) -> None:
    """End a job the product has ruled failed where the verdict's own write did not: send the writes
    its kind asks for (``JobKind.ending_writes``, Kueue's ``JobWithCustomStop``), in order, each
    answer deciding whether the next is sent."""
    namespace = JobView(job).namespace
    for write in kinds.kind_of(job).ending_writes(job, utcnow()):
        try:
            if write.patch is None:
                await client.delete(write.resource, namespace, write.name, propagation_policy="Background")
            else:
                await client.merge_patch(
                    write.resource, namespace, write.name, dict(write.patch), sub=write.subresource
                )
        except KubeError as exc:
            then = write.if_absent if exc.not_found else write.if_conflict if exc.status == 409 else None
            if then is None:
                raise
        else:
            then = write.then
        if then is kinds.Then.STOP:
            return


def requeue_patch(job: Mapping[str, Any], outcome: Requeue) -> dict:
    """Suspend a stuck job and record its requeue in one write (before its reservation is released)."""
    return {
        "metadata": {
            **_precondition(job),
            "labels": {labels.ADMITTED: None},
            "annotations": {
                labels.REQUEUE_COUNT: str(outcome.requeue_count),
                labels.REQUEUE_NOT_BEFORE: rfc3339(outcome.not_before),
                labels.ADMITTED_AT: None,
                # A stuck start is no preemption: the last preemption's record must not describe it.
                labels.PREEMPTED_BY: None,
                labels.PREEMPTION_MESSAGE: None,
            },
        },
        "spec": kinds.kind_of(job).suspend_patch(True),
    }


def preempt_patch(job: Mapping[str, Any], reservation: Reservation) -> dict:
    """Suspend a preempted job and record who preempted it, in one write.

    It goes back to the queue at once (no back-off) at its original position (``queued-at`` is kept);
    the requeue count moves on so its old reservation reads as an earlier attempt's, and the preemption
    count with it, so that ``requeue_limit`` counts only stuck starts (:func:`requeue_stuck`).
    Suspending deletes every pod of the job (all ranks of a gang): the Job controller for a Job
    (``pkg/controller/job/job_controller.go``, Kubernetes 1.32, ``suspendJob`` path of ``syncJob``),
    mpi-operator for an MPIJob (``runPolicy.suspend``, v0.5+).
    """
    annotations = JobView(job).annotations
    count = int(annotations.get(labels.REQUEUE_COUNT) or 0)
    preemptions = int(annotations.get(labels.PREEMPTIONS) or 0)
    by = reservation.preempted_by or "a job of higher priority"
    where = "" if reclaimed_for(by) else f" in group {reservation.group}"
    message = (
        f"preempted by {by}{where}: "
        f"its {reservation.gpus} GPU(s) go to that job; back in the queue at its original position"
    )
    return {
        "metadata": {
            **_precondition(job),
            "labels": {labels.ADMITTED: None},
            "annotations": {
                # Its run is off the queue clock: the wait before its admission is banked, a new one
                # starts now.
                **queue_clock.leave_queue(annotations, utcnow(), rejoin=True),
                labels.REQUEUE_COUNT: str(count + 1),
                labels.PREEMPTIONS: str(preemptions + 1),
                labels.PREEMPTED_BY: by.split(",", 1)[0],
                labels.PREEMPTION_MESSAGE: message,
                labels.REQUEUE_NOT_BEFORE: None,
                labels.ADMITTED_AT: None,
            },
        },
        "spec": kinds.kind_of(job).suspend_patch(True),
    }


async def patch_job(client: KubeClient, job: Mapping[str, Any], patch: Mapping[str, Any]) -> dict | None:
    """Apply a conditional patch; ``None`` if the job changed since it was read (409) or is gone."""
    meta = JobView(job)
    try:
        return await client.merge_patch(resource_of(job), meta.namespace, meta.name, patch)
    except KubeError as exc:
        if exc.status == 409 or exc.not_found:
            return None
        raise


# --------------------------------------------------------------------------------------------------
# One admission pass
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupView:
    """The group's jobs as one pass sees them."""

    by_uid: Mapping[str, dict]
    queued: tuple[QueuedJob, ...]
    running: tuple[Reservation, ...]
    observed: Mapping[str, ObservedJob]
    unreadable: Mapping[str, str]  # uid -> why the job cannot be queued


_MISSING: dict = {}


async def _lookup(client: KubeClient, reservation: Reservation, namespace: str) -> dict | None:
    """A reserved job the view does not hold, by name; ``_MISSING`` if gone, ``None`` if unknown."""
    ns = reservation.namespace or namespace
    try:
        for resource in kinds.RESOURCES:
            try:
                job = await client.get(resource, ns, reservation.job)
            except KubeError as exc:
                if exc.not_found:
                    continue
                raise
            if JobView(job).uid == reservation.uid:
                return job
        return _MISSING
    except KubeError:
        # The API did not answer: the job was not looked at, so its reservation stays.
        return None


async def _pods_of_gone(
    client: KubeClient,
    reservation: Reservation,
    namespace: str,
    pods_of: Callable[[dict], Iterable[Mapping[str, Any]] | None] | None,
) -> list[Mapping[str, Any]]:
    """The pods left of a deleted reserved job, by its name: as the process's watch holds them, else read
    (a Job's pods carry ``batch.kubernetes.io/job-name``, an MPIJob's ``training.kubeflow.org/job-name``);
    none when they cannot be read (the job is gone: nothing better than freeing its GPUs is known)."""
    ns = reservation.namespace or namespace
    stub = {"metadata": {"name": reservation.job, "namespace": ns}}
    held = pods_of(stub) if pods_of is not None else None
    if held is not None:
        return list(held)
    found: list[Mapping[str, Any]] = []
    try:
        for key in (labels.BATCH_JOB_NAME, labels.MPI_JOB_NAME):
            listing = await client.list(PODS, ns, label_selector=f"{key}={reservation.job}")
            found.extend(listing.get("items") or [])
    except KubeError:
        return []
    return found


async def read_view(
    client: KubeClient,
    group: str,
    ledger: Ledger,
    jobs: Iterable[dict],
    ledger_namespace: str,
    now: datetime,
    pods_of: Callable[[dict], Iterable[Mapping[str, Any]] | None] | None = None,
    members: Collection[str] = (),
    released: Collection[str] = (),
) -> GroupView:
    """Sort the group's jobs into queued, running (for adoption) and observed (for reconcile).

    A reserved job missing from ``jobs`` (another namespace, a view that lags) is looked up by name:
    only a positive answer (404, or another uid under that name) marks it gone. A stopped job is queued
    (never adopted, even before its suspension lands) so its queue timeout keeps counting. ``pods_of``
    returns a job's pods where they are known (``None`` elsewhere); ``released``: the uids of jobs
    their triggers let go of.
    """
    by_uid: dict[str, dict] = {}
    queued: list[QueuedJob] = []
    running: list[Reservation] = []
    unreadable: dict[str, str] = {}
    mine = {group, *members}
    for job in jobs:
        view = JobView(job)
        uid = view.uid
        if not uid or view.group not in mine or not is_product_job(job):
            continue
        by_uid[uid] = job
        if view.finished:
            continue
        try:
            entry = queued_job(job)
        except ValueError as exc:
            unreadable[uid] = str(exc)
            continue
        if awaits_release(job) or view.stopped:
            if not view.deleting:
                queued.append(entry)
        else:
            running.append(Reservation.for_job(entry, view.admitted_at or now))
    # A running job the ledger does not hold is adopted (charged), which only a lost ledger or a
    # hand-unsuspended job needs. The cache that shows it running may be older than the ledger: a job
    # whose end a pass already released shows running in a lagging watch, and adopting it would charge
    # GPUs nobody holds (a cohort's ledger held 20 GPUs of 16). So no adoption rests on a view older
    # than the ledger: each candidate is read again from the API server, after the ledger was read.
    known = {r.uid for r in ledger.reservations}
    confirmed: list[Reservation] = []
    for candidate in running:
        if candidate.uid in known:
            confirmed.append(candidate)
            continue
        fresh = await _lookup(client, candidate, ledger_namespace)
        if fresh is None:
            continue  # not read: not adopted this pass (the next pass asks again)
        if fresh is _MISSING:
            by_uid.pop(candidate.uid, None)
            continue
        by_uid[candidate.uid] = fresh
        if not (is_finished(fresh) or awaits_release(fresh) or is_stopped(fresh)):
            confirmed.append(candidate)
    running = confirmed
    observed = {
        uid: observe(job, pods_of(job) if pods_of is not None else None, released=uid in released)
        for uid, job in by_uid.items()
    }
    for reservation in ledger.reservations:
        if reservation.uid in by_uid:
            continue
        found = await _lookup(client, reservation, ledger_namespace)
        if found is _MISSING:
            pods = await _pods_of_gone(client, reservation, ledger_namespace, pods_of)
            observed[reservation.uid] = ObservedJob.gone(holding_pods=pods_hold_gpus(pods, now))
        elif found is not None:
            by_uid[reservation.uid] = found
            observed[reservation.uid] = observe(found)
    return GroupView(by_uid, tuple(queued), tuple(running), observed, unreadable)


@dataclass(frozen=True)
class PassOutcome:
    """What one admission pass decided and did."""

    group: str
    stored: StoredLedger  # the ledger after the pass, with its ConfigMap
    view: GroupView
    decisions: tuple[Decision, ...]
    drops: tuple[Drop, ...]
    admitted: tuple[str, ...]  # names of the jobs this pass unsuspended
    failed: tuple[str, ...]  # names of the jobs this pass failed (OverQuota, QueueTimeout)
    preempted: tuple[str, ...]  # names of the jobs this pass suspended for a preemptor
    conflicts: int  # ledger compare-and-swaps lost before this pass won
    stale: bool  # a job changed under the pass (409): run again once the view catches up
    # The jobs as this pass's patches (or re-reads) left them, each with the version the pass had read.
    patched: tuple[tuple[str, dict], ...] = ()
    written_over: str | None = None  # the ledger version this pass's compare-and-swap replaced
    written: bool = False
    unsuspend_due: datetime | None = (
        None  # when a reservation in its grace must be repaired if still suspended
    )

    @property
    def ledger(self) -> Ledger:
        return self.stored.ledger


async def _fetch(jobs: JobSource) -> Sequence[dict]:
    result = jobs()
    if inspect.isawaitable(result):
        result = await result
    return result


async def admission_pass(
    client: KubeClient,
    *,
    ledger_namespace: str,
    group: str,
    policy: QuotaPolicy,
    jobs: JobSource,
    now: Callable[[], datetime] = utcnow,
    hook: Hook | None = None,
    rng: random.Random | None = None,
    max_attempts: int = MAX_CAS_ATTEMPTS,
    cached: Callable[[], StoredLedger | None] | None = None,
    cached_after: Callable[[str | None], Awaitable[StoredLedger | None]] | None = None,
    unsuspend_grace: timedelta = UNSUSPEND_GRACE,
    pods_of: Callable[[dict], Iterable[Mapping[str, Any]] | None] | None = None,
    members: Collection[str] = (),
    released: Collection[str] = (),
    placement_of: Callable[[Sequence[dict]], Placement | None] | None = None,
) -> PassOutcome:
    """Read, plan, write the ledger (CAS), fail, unsuspend: one idempotent pass for ``group``.

    ``jobs`` returns the group's Job/MPIJob objects (a watch cache or a LIST; other objects are
    ignored); it is called again on every CAS retry. ``cached`` may return the ledger as a watch last
    saw it (``None``: unknown): a pass that only plans on it saves a GET, and one that writes learns it
    was stale from the compare-and-swap; before acting on jobs without writing, it reads the ledger
    afresh. ``cached_after(version)`` waits for the watch to hold a ledger newer than ``version`` and
    returns it (``None`` if it does not come soon): a write from the cache that lost plans again on the
    winner's ledger as the watch delivers it, instead of a GET of it. ``pods_of`` returns a job's pods where known: a reservation of a job that ended or was
    stopped is kept while they live. ``group`` names the ledger: a cohort's decides for its ``members``
    groups at once. ``released``: uids of jobs whose triggers let their reservations go (dropped
    whatever their pods hold). ``placement_of(jobs)`` tells a preemption the nodes, where the jobs'
    pods are and what they ask for (queueing/quota/placement.py ``preemption_placement``). Safe to run in any
    number of processes at once.
    """
    rng = rng or random.Random()
    conflicts = 0
    written_over: str | None = None
    written = False
    attempt = 0
    next_cached = cached() if cached is not None else None
    while True:
        attempt += 1
        from_cache, next_cached = next_cached, None
        fresh = from_cache is None
        stored = (
            await read_ledger(client, ledger_namespace, group, members) if from_cache is None else from_cache
        )
        moment = now()
        fetched = await _fetch(jobs)
        view = await read_view(
            client,
            group,
            stored.ledger,
            fetched,
            ledger_namespace,
            moment,
            pods_of,
            members,
            released,
        )
        await _call(hook, "read")
        plan = plan_admission(
            policy,
            stored.ledger,
            view.queued,
            view.observed,
            moment,
            view.running,
            unsuspend_grace,
            members,
            placement_of(fetched) if placement_of is not None else None,
        )
        await _call(hook, "planned")
        if not plan.ledger_changed:
            if not fresh and (plan.unsuspend or plan.fail or plan.preempt):
                continue  # never act on jobs from a cached ledger: read it and plan again
            break
        replaced = stored.version
        try:
            stored = await write_ledger(client, ledger_namespace, stored, plan.ledger)
        except LedgerConflict:
            conflicts += 1
            if attempt >= max_attempts:
                raise
            if fresh:
                await _sleep_before_retry(conflicts, rng)
            elif cached_after is not None:
                # A cached ledger that lost is simply stale: the winner's write is on its way to the
                # watch (read it afresh if it is slow to come). Three processes racing on every end
                # would otherwise each GET what the watch brings them a moment later.
                next_cached = await cached_after(stored.version)
            continue
        written_over, written = replaced, True
        await _call(hook, "ledger-written")
        break

    stale = False
    failed: list[str] = []
    patched: list[tuple[str, dict]] = []
    for decision in plan.fail:
        job = view.by_uid[decision.job.uid]
        result, ours = await settle(client, job, _verdict_of(decision), is_finished)
        if result is None:
            stale = True
        else:
            patched.append((JobView(job).resource_version or "", result))
            if ours:
                failed.append(decision.job.name)
            await end_ruled_job(client, result)
        await _call(hook, f"failed:{decision.job.name}")

    async def release_each(
        reservations: Iterable[Reservation],
        act: Callable[[KubeClient, dict, Reservation], Awaitable[tuple[dict | None, bool]]],
        step: str,
    ) -> list[str]:
        """Apply ``act`` to each reserved job the view holds; the names this pass changed itself."""
        nonlocal stale
        ours_names: list[str] = []
        for reservation in reservations:
            seen = view.by_uid.get(reservation.uid)
            result, ours = (None, False) if seen is None else await act(client, seen, reservation)
            if seen is None or result is None:
                stale = True
            else:
                patched.append((JobView(seen).resource_version or "", result))
                if ours:  # not found done already by another process
                    ours_names.append(reservation.job)
            await _call(hook, f"{step}:{reservation.job}")
        return ours_names

    admitted = await release_each(plan.unsuspend, _unsuspend, "unsuspended")
    preempted = await release_each(plan.preempt, _preempt, "preempted")
    return PassOutcome(
        group=group,
        stored=stored,
        view=view,
        decisions=plan.decisions,
        drops=plan.drops,
        admitted=tuple(admitted),
        failed=tuple(failed),
        preempted=tuple(preempted),
        conflicts=conflicts,
        stale=stale,
        patched=tuple(patched),
        unsuspend_due=plan.unsuspend_due,
        written_over=written_over,
        written=written,
    )


async def kueue_took(client: KubeClient, job: Mapping[str, Any]) -> bool:
    """Whether Kueue manages ``job`` though it names no LocalQueue (a Kueue that manages every job): the
    pool must then hand it over, never unsuspend it, or Kueue suspends it again. Asked only of jobs the
    pool gated (kueue_cluster.takes: Kueue's configuration, else a Workload made for the job)."""
    return kueue.gated_by_pool(job) and await kueue_cluster.takes(client, job)


async def _unsuspend(client: KubeClient, job: dict, reservation: Reservation) -> tuple[dict | None, bool]:
    """Unsuspend ``job`` for ``reservation`` (see :func:`settle`); a job requeued meanwhile is left to
    the next pass, which reconciles its reservation. A job Kueue manages -- handed to it by the task,
    given its ``default`` LocalQueue at creation, or taken by a Kueue that manages every job -- is
    handed over instead: Kueue, not the pool, lifts its ``suspend``."""
    to_kueue = reservation.kueue or kueue.manages(job) or await kueue_took(client, job)
    release = handoff_patch if to_kueue else unsuspend_patch
    return await settle(
        client,
        job,
        lambda j: release(j, reservation.admitted_at),
        lambda j: is_finished(j) or not awaits_release(j),
        # A job stopped since the pass read it is never released by that pass's stale decision.
        lambda j: observe(j).requeue_count == reservation.requeue_count and not is_stopped(j),
    )


async def _preempt(client: KubeClient, job: dict, reservation: Reservation) -> tuple[dict | None, bool]:
    """Suspend a victim the ledger marked (see :func:`settle`); a job that moved on to another attempt,
    ended or was stopped meanwhile is not preempted."""
    return await settle(
        client,
        job,
        lambda j: preempt_patch(j, reservation),
        lambda j: observe(j).requeue_count > reservation.requeue_count,
        lambda j: (
            not is_finished(j)
            and not is_stopped(j)
            and not awaits_release(j)
            and observe(j).requeue_count == reservation.requeue_count
        ),
    )


def _verdict_of(decision: Decision) -> Callable[[dict], dict]:
    """The patch that writes ``decision``'s verdict on the job it is read from."""

    def patch(job: dict) -> dict:
        return verdict_patch(job, decision.reason, decision.message)

    return patch


async def settle(
    client: KubeClient,
    job: dict,
    patch: Callable[[dict], dict],
    done: Callable[[dict], bool],
    still_wanted: Callable[[dict], bool] = lambda _job: True,
) -> tuple[dict | None, bool]:
    """Apply ``patch(job)`` conditionally: the job as it now is (``None`` if unknown) and whether this
    call changed it.

    The patch is conditional on the version the pass saw. When that version was stale (409), one read
    tells why: another process did it already (``done``: the job as read), or the job changed otherwise
    and the patch is ``still_wanted`` (patch once more on the fresh version). Re-reading one job costs
    a GET where running the whole pass again would cost a pass of every process.
    """
    result = await patch_job(client, job, patch(job))
    if result is not None:
        return result, True
    meta = JobView(job)
    current = await client.get_or_none(resource_of(job), meta.namespace, meta.name)
    if current is None or JobView(current).uid != meta.uid:
        return None, False
    if done(current):
        return current, False
    if not still_wanted(current):
        return None, False
    result = await patch_job(client, current, patch(current))
    return result, result is not None


# --------------------------------------------------------------------------------------------------
# Requeue of a stuck job
# --------------------------------------------------------------------------------------------------


async def requeue_stuck(
    client: KubeClient,
    job: Mapping[str, Any],
    *,
    ledger_namespace: str,
    settings: RequeueSettings,
    now: datetime,
    hook: Hook | None = None,
    rng: random.Random | None = None,
    ledger_group: str | None = None,
    members: Collection[str] = (),
) -> Requeue | RequeueLimitReached | None:
    """Send an admitted job whose pods were not placed in time back to the queue, or fail it.

    First one patch suspends it and records the requeue (or the OverRequeueLimit verdict); only then is
    its reservation released, so a job that may still run never goes unaccounted. ``None`` if the job
    changed since it was read (another process got there first): nothing was written.
    """
    meta = JobView(job)
    annotations = meta.annotations
    count = int(annotations.get(labels.REQUEUE_COUNT) or 0)
    preemptions = int(annotations.get(labels.PREEMPTIONS) or 0)
    outcome = requeue_decision(max(0, count - preemptions), now, settings)
    if isinstance(outcome, Requeue):
        patch = requeue_patch(job, replace(outcome, requeue_count=outcome.requeue_count + preemptions))
    else:
        patch = verdict_patch(job, outcome.reason, outcome.message)
    result = await patch_job(client, job, patch)
    if result is None:
        return None
    await end_ruled_job(client, result)
    await _call(hook, f"requeue-patched:{meta.name}")
    group = ledger_group or meta.group  # a cohort's groups share its ledger
    if group:
        await release(
            client,
            ledger_namespace,
            group,
            meta.uid,
            requeue_count_at_most=count,
            rng=rng,
            members=members,
        )
    await _call(hook, f"released:{meta.name}")
    return outcome
