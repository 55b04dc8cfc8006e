"""What a trigger says and does as a job moves: pure rules over snapshots, no I/O.

The trigger (the imperative shell in :mod:`airflow_jobs_plugin.airflow.triggers`) computes a snapshot after every
change the shared watch reports and asks this module three questions: what to log, whether the job is
over, and if it failed, whether a new attempt should follow and when.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import Enum
from typing import Any, TypeVar

from airflow_jobs_plugin.cluster import resource_version
from airflow_jobs_plugin.cluster.objects import Meta, condition_true, parse_time, time_text
from airflow_jobs_plugin.jobs import attempts, history, kinds, labels, retry
from airflow_jobs_plugin.jobs.jobview import JobView
from airflow_jobs_plugin.jobs.outcome import (
    DELETED_BY_SOMEONE,
    AttemptRecord,
    EventStatus,
    JobEvent,
    ReplicaRecord,
)
from airflow_jobs_plugin.lifecycle import (
    Failure,
    FailureClass,
    Health,
    JobSnapshot,
    JobState,
    Reason,
    ReplicaStatus,
    holds_node,
    is_transient_pull_error,
    snapshot,
    start_cannot_succeed,
)
from airflow_jobs_plugin.logs.logcursor import LogMarker


def pods_picture(pods: Iterable[Mapping[str, Any]]) -> tuple[tuple[str, str], ...]:
    """Which pods a look saw, each at which version: a job's pods changed since a look when this did."""
    return tuple(sorted((meta.name, meta.resource_version or "") for meta in map(Meta, pods)))


def pods_outran_job(
    job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], seen_before: Iterable[str] = ()
) -> bool:
    """Whether the job's pods show a change its cached object does not, so the job must be read afresh
    before a state is derived from both.

    A job and its pods come on two watch streams, and either may lag. While the job's stream lags, a
    stop or a cancel reaches the pods first: the controller kills them (they fail, with exit 137) and
    deletes them, while the cached job still says it runs. Read together, those views make a state the
    job was never in (RETRYING (Error): a pod failed and another will come; SCHEDULING (Creating): no
    pod yet). So a job the cache shows admitted and unfinished, whose pods are being deleted, have
    failed beyond the failures it counts, or are gone since the last look (``seen_before``: the pod
    names it saw), is read again. A real pod failure costs one read, which confirms it.

    The other way round, a job the cache still shows suspended while pods of it live that nothing is
    deleting was released since (its controller creates pods only then, and deletes them when the job
    is suspended): the admission controller's unsuspend is on the lagging stream, and the cached job read
    with those pods would make a state it was never in (QUEUED after RUNNING)."""
    kind = kinds.kind_of(job)
    if kind.is_finished(job) or JobView(job).verdict is not None:
        return False
    if kind.is_suspended(job):
        return any(not Meta(pod).deleting for pod in pods)
    names = set()
    failed = 0
    for pod in pods:
        pod_meta = Meta(pod)
        names.add(pod_meta.name)
        if pod_meta.deleting:
            return True
        failed += (pod.get("status") or {}).get("phase") == "Failed"
    # A failure the job already counts is old news; only one it does not count yet is read about.
    return failed > kind.pod_failures(job) or any(name not in names for name in seen_before)


Pod = TypeVar("Pod", bound=Mapping[str, Any])

# The Job controller's words that it has decided the outcome and is stopping what is left
# (kubernetes v1.36.3 ``pkg/controller/job/job_controller.go``): a ruling, like the final conditions.
_RULINGS = ("FailureTarget", "SuccessCriteriaMet")


def pods_lag_ruling(job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the job's controller has had its final word while the cached pods still show one that has
    not ended: the pods must be read in one consistent list before a state is derived from both.

    A trigger that starts after the job ended (or looks as the job ends) reads the job from one watch
    stream and its pods from another. When the pods' stream lags, the cache holds pod versions older than
    the job's own: a launcher still Pending, workers still Running or Pending, next to an MPIJob that has
    Succeeded. Those phases never coexisted with the finished job, and the stream's events that follow,
    applied one by one, replay the pods' whole past as TERMINATING lines. One LIST of the job's pods is a
    view at one resourceVersion, read after the job: with it, the job's ruling and its pods are of one
    moment (or the pods of a later one), and the stream's older events that follow are refused by the
    cache (``SharedWatch._deliver``)."""
    kind = kinds.kind_of(job)
    if not (kind.is_finished(job) or any(condition_true(job, ruling) for ruling in _RULINGS)):
        return False
    return any((pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed") for pod in pods)


def pods_as_listed(pods: Iterable[Pod], listed: frozenset[str], listed_at: str | None) -> list[Pod]:
    """The cached ``pods`` without those a LIST at ``listed_at`` proved gone: a pod the list did not have
    is gone unless the cache holds it at a later version (created after the list).

    The list is newer than a lagging stream: until the stream delivers their deletions, the cache still
    holds pods the list no longer had (and the stream's older events may even move them). A pod's
    resourceVersions compare with the list's (pods are one resource: kubernetes KEP-5504, stable in
    1.35); where they cannot be compared, only a pod the list had is known to exist."""
    kept = []
    for pod in pods:
        meta = Meta(pod)
        if meta.name in listed or resource_version.compare(meta.resource_version, listed_at) == 1:
            kept.append(pod)
    return kept


def newest_pods(before: Sequence[Pod], pods: Sequence[Pod]) -> list[Pod]:
    """``pods``, each at the newest version of it a look has seen: a pod never goes back.

    A pod's versions only move forward (its resourceVersion grows; a ``deletionTimestamp``, once set, is
    never removed: kubernetes v1.36.3 ``pkg/registry/rest/delete.go``, ``BeforeDelete``, only shortens a
    graceful deletion). So a pod this look reads at an older version than the last look did (a view
    pieced together from a list and a stream that lags it), or without the deletion the last look saw,
    is the last look's version: a line never steps back, from ``workers 1/2 Terminating`` to ``2/2
    Running``. Pods are matched by uid (a pod deleted and created again under its name is another);
    a pod the last look had and this one lacks is gone."""
    if not before:
        return list(pods)
    seen = {Meta(pod).uid: pod for pod in before}
    newest = []
    for pod in pods:
        meta = Meta(pod)
        old = seen.get(meta.uid) if meta.uid else None
        if old is not None and old is not pod:
            order = resource_version.compare(meta.resource_version, Meta(old).resource_version)
            if order == -1 or (order is None and Meta(old).deleting and not meta.deleting):
                pod = old
        newest.append(pod)
    return newest


def disruptions_seen(snap: JobSnapshot, known: Mapping[str, Reason]) -> Mapping[str, Reason]:
    """``known`` (pod name to the disruption that took it) with what ``snap`` shows on its pods: a pod the
    control plane is killing for its node, an eviction or a preemption. ``known`` itself when there is
    nothing new, so a trigger of a job never disrupted keeps the one empty mapping."""
    found = {
        r.pod: r.reason
        for r in snap.replicas
        if r.pod and r.reason in _DISRUPTIONS and known.get(r.pod) is not r.reason
    }
    return {**known, **found} if found else known


_DISRUPTIONS = frozenset({Reason.NODE_LOST, Reason.EVICTED, Reason.PREEMPTED})


def replica_summary(replicas: Sequence[ReplicaStatus]) -> str:
    """``launcher Init:1/2, workers 2/2 ContainerCreating``: the per-replica kubectl statuses, grouped.

    The launcher is named on its own; workers are counted by status so a 64-worker job stays one line.
    """
    parts = []
    launchers = [r for r in replicas if r.role == "launcher"]
    workers = [r for r in replicas if r.role != "launcher"]
    for r in launchers:
        parts.append(f"launcher {r.status}")
    if workers:
        counts = Counter(r.status for r in workers)
        total = len(workers)
        # The role's own word: MPI and single-pod jobs have workers, a torchrun job has nodes.
        role = workers[0].role if len({r.role for r in workers}) == 1 else "worker"
        noun = role if total == 1 else f"{role}s"
        if len(counts) == 1:
            (status,) = counts
            parts.append(f"{noun} {total}/{total} {status}" if total > 1 else f"{noun} {status}")
        else:
            parts.append(
                f"{noun} "
                + ", ".join(f"{n}/{total} {s}" for s, n in sorted(counts.items(), key=lambda kv: -kv[1]))
            )
    return ", ".join(parts)


def state_line(snapshot: JobSnapshot) -> str:
    """One line naming the state, its reason and the replicas, e.g.
    ``STARTING (launcher Init:1/2, workers 2/2 ContainerCreating)``."""
    detail = []
    reason = str(getattr(snapshot.reason, "value", snapshot.reason) or "")
    if (
        reason
        and reason not in ("Running", "Completed", "Pending")
        and snapshot.state is not JobState.SUCCEEDED
        # ``STOPPED (Stopped)`` says nothing twice
        and reason.upper() != snapshot.state.value
    ):
        detail.append(reason)
    summary = replica_summary(snapshot.replicas)
    # A queued, stopped or cancelled job has no pods worth naming (its line says why instead).
    if summary and snapshot.state not in (JobState.QUEUED, JobState.STOPPED, JobState.CANCELLED):
        detail.append(summary)
    line = snapshot.state.value
    if detail:
        line += f" ({'; '.join(detail)})"
    if snapshot.message and snapshot.state in _SAYS_WHY:
        line += f": {snapshot.message}"
    return line


def resumed_line(before: JobSnapshot | None, now: JobSnapshot, annotations: Mapping[str, str]) -> str | None:
    """``resumed by bob at 2026-11-28 17:59:21 UTC``: what a task log says when the job it follows, last
    reported stopped (or stopping), is stopped no more because a person resumed it. The job's next line
    says where it waits (the pool's reason) or that it runs; this one says who put it back."""
    if before is None or before.reason is not Reason.STOPPED or now.reason is Reason.STOPPED:
        return None
    done = history.entries(annotations) if labels.HISTORY in annotations else ()
    if not done or done[-1].act is not history.Act.RESUMED:
        return None
    return f"resumed by {done[-1].by} at {time_text(done[-1].at)}"


# States whose line ends with the job's message: why it waits, why it ended, who stopped it.
_SAYS_WHY = (JobState.QUEUED, JobState.SCHEDULING, JobState.FAILED, JobState.CANCELLED, JobState.STOPPED)


def signature(snapshot: JobSnapshot) -> tuple:
    """What must change for the trigger to log a new line (not every watch event is news).

    A job that has ended is logged once: its pods' last statuses arriving after its final state (the
    final look reads them again) are not news."""
    if snapshot.state.is_terminal:
        return (snapshot.state, snapshot.reason)
    return (
        snapshot.state,
        snapshot.reason,
        tuple((r.role, r.index, r.status) for r in snapshot.replicas),
        snapshot.queue_position,
    )


class Step(str, Enum):
    WAIT = "wait"  # not over: keep watching
    FAIL_FAST = "fail_fast"  # stuck in a way no waiting cures: rule FAILED now (verdict + suspend)
    RETRY = "retry"  # failed, retryable, attempts left: submit the next attempt after a back-off
    FINISH = "finish"  # over: yield the final event


@dataclass(frozen=True)
class Decision:
    step: Step
    delay: timedelta = timedelta(0)
    retryable: bool = False


def decide(
    snapshot: JobSnapshot,
    failure: Failure | None,
    *,
    attempt: int,
    max_attempts: int,
    backoff: timedelta,
    backoff_max: timedelta,
) -> Decision:
    """After a snapshot: keep waiting, start another attempt, or finish.

    Only a terminal FAILED job with a retryable failure class gets another attempt, and only while
    attempts are left; everything else terminal finishes (the task's own retries are Airflow's).
    """
    if not snapshot.state.is_terminal:
        if stuck_for_good(snapshot, failure):
            return Decision(Step.FAIL_FAST)
        return Decision(Step.WAIT)
    if snapshot.state is JobState.FAILED and failure is not None and failure.retryable:
        if retry.next_attempt_allowed(attempt, max_attempts):
            return Decision(
                Step.RETRY, delay=retry.backoff_delay(attempt, backoff, backoff_max), retryable=True
            )
        return Decision(Step.FINISH, retryable=True)
    return Decision(Step.FINISH, retryable=False)


# Pod problems Kubernetes retries forever (a pod in ImagePullBackOff never fails on its own, so the Job
# would sit until its active deadline, a day by default, holding its GPUs).
_STUCK = frozenset({Reason.IMAGE_PULL, Reason.INVALID_IMAGE_NAME})


def stuck_for_good(
    snapshot: JobSnapshot, failure: Failure | None, events: Iterable[Mapping[str, Any]] = ()
) -> bool:
    """A live job that cannot progress: a replica on a lost node; pods that can never start: an invalid
    image name at once; an image pull only once
    the kubelet has backed off at least once and the registry's answer is permanent (not found,
    denied), never for a transient one (rate limit, timeout), which the kubelet's own retries cure.

    The pod's back-off message hides the registry's answer; the pull events (``events``) carry it, so
    any transient answer among them keeps the job waiting."""
    if start_cannot_succeed(snapshot):  # containers that cannot be created, past the grace
        return True
    if snapshot.state is JobState.UNKNOWN and snapshot.reason is Reason.NODE_LOST:
        # Its pods cannot finish on a node that is gone, and a controller waiting for them to become
        # terminal would hold the job (and its quota) forever: end the attempt so a new one can start.
        return True
    if snapshot.reason not in _STUCK or failure is None or failure.failure_class is not FailureClass.FATAL:
        return False
    if snapshot.reason is Reason.INVALID_IMAGE_NAME:
        return True
    if any(is_transient_pull_error(str(e.get("message") or "")) for e in events):
        return False
    return any(r.status == "ImagePullBackOff" for r in snapshot.replicas)


def exit_codes(snapshot: JobSnapshot) -> dict[str, int]:
    """Exit codes by replica (``launcher``, ``worker-0``, ...), for messages and the XCom."""
    codes = {
        (r.role if r.role == "launcher" else f"{r.role}-{r.index}"): r.exit_code
        for r in snapshot.replicas
        if r.exit_code is not None
    }
    if not codes and snapshot.exit_code is not None:
        codes["job"] = snapshot.exit_code
    return codes


def attempt_record(job: Mapping[str, Any], snapshot: JobSnapshot) -> AttemptRecord:
    """How one attempt ended, for the event's history and the XCom."""
    return AttemptRecord(
        attempt=attempts.attempt_of(job),
        job_name=JobView(job).name,
        state=snapshot.state.value,
        reason=_reason(snapshot),
        exit_codes=exit_codes(snapshot),
        queued_at=_iso(snapshot.queued_at),
        started_at=_iso(snapshot.started_at),
        finished_at=_iso(snapshot.finished_at),
        gpu_seconds=snapshot.gpu_seconds,
    )


# States of an admitted job (quota reserved or held, pods being placed or running): a return to the queue
# from one of them interrupted a run (a preemption by Kueue or the pool, a requeue of pods that could not
# be scheduled, an eviction requeued, a user's stop).
STARTED = frozenset(
    {JobState.SCHEDULING, JobState.STARTING, JobState.RUNNING, JobState.DEGRADED, JobState.RETRYING}
)


def interrupted_run(
    job: Mapping[str, Any],
    ran: JobSnapshot | None,
    before: JobSnapshot | None,
    now_seen: JobSnapshot,
    now: datetime,
) -> AttemptRecord | None:
    """The record of a run that ``now_seen`` shows interrupted, or ``None``.

    A job last seen admitted or running (``ran``) that waits again, queued or stopped by a user, was
    interrupted. So was one that comes back to the queue as Requeued when the look before (``before``)
    did not say so: a preemption can take a job from its queue and back within one wait of the trigger,
    and the Requeued reason alone says it had been admitted. A record carries what ``ran`` knew (start,
    exit codes, GPU-seconds) when there is one."""
    if now_seen.state not in (JobState.QUEUED, JobState.STOPPED):
        return None
    newly_requeued = now_seen.reason is Reason.REQUEUED and not (
        before is not None and before.state is JobState.QUEUED and before.reason is Reason.REQUEUED
    )
    if ran is None and not newly_requeued:
        return None
    last = ran or now_seen
    return AttemptRecord(
        attempt=attempts.attempt_of(job),
        job_name=JobView(job).name,
        state="STOPPED" if now_seen.state is JobState.STOPPED else "REQUEUED",
        reason=_reason(now_seen),
        exit_codes=exit_codes(ran) if ran is not None else {},
        queued_at=_iso(last.queued_at),
        started_at=_iso(ran.started_at) if ran is not None else None,
        finished_at=_iso(now),
        gpu_seconds=ran.gpu_seconds if ran is not None else 0.0,
    )


def final_event(
    snapshot: JobSnapshot,
    failure: Failure | None,
    *,
    status: EventStatus,
    job_name: str,
    kind: str,
    namespace: str,
    history: Sequence[AttemptRecord],
    log_tail: Sequence[str],
    retryable: bool,
    annotations: Mapping[str, str] | None = None,
    result: Any = None,
    log_markers: Sequence[LogMarker] = (),
) -> JobEvent:
    """The trigger's final event for a snapshot: JSON-safe once written, no secret, enough for the
    task's message. ``annotations`` (the job's) say who cancelled a CANCELLED job, and when."""
    annotations = annotations or {}
    cancelled = snapshot.state is JobState.CANCELLED
    return JobEvent(
        status=status,
        job_name=job_name,
        kind=kind,
        namespace=namespace,
        state=snapshot.state.value,
        reason=_reason(snapshot),
        message=snapshot.message,
        failure_class=failure.failure_class.value if failure is not None else None,
        failure_message=failure.message if failure is not None else None,
        exit_codes=exit_codes(snapshot),
        replicas=tuple(ReplicaRecord(r.role, r.index, r.pod, r.status) for r in snapshot.replicas),
        attempts=tuple(history),
        gpu_seconds=snapshot.gpu_seconds,
        log_tail=tuple(log_tail),
        retryable=retryable,
        cancelled_by=(annotations.get(labels.CANCELLED_BY) or "a user") if cancelled else "",
        cancelled_at=(annotations.get(labels.CANCELLED_AT) or "") if cancelled else "",
        result=result if status is EventStatus.SUCCESS else None,
        log_markers=tuple(log_markers),
    )


def unseen_deletion_is_a_cancel(
    deferred_at: str | datetime | None, ttl_after_finished: timedelta | None, *, now: datetime
) -> bool:
    """Whether a job that vanished while no triggerer watched it was deleted on purpose (a cancel).

    The job existed when its task deferred (``deferred_at``: the task had just created or found it). Its
    own TTL removes a finished job only ``ttl_after_finished`` after it finished (the Job controller's
    ``ttlSecondsAfterFinished``, kubernetes ``pkg/controller/ttlafterfinished``), so a job gone sooner
    than that after the deferral, or one without a TTL, was deleted by someone: a cancel. Past it the
    job may have finished and been cleaned up: its end is unknown. ``deferred_at`` None (a trigger
    serialized before it was recorded) keeps that old reading, unknown.
    """
    deferred = parse_time(deferred_at)
    if deferred is None:
        return False
    return ttl_after_finished is None or now - deferred < ttl_after_finished


def after_deletion(
    last_seen: Mapping[str, Any], *, now: datetime, pods: Sequence[Mapping[str, Any]] = ()
) -> tuple[JobSnapshot, dict[str, str]]:
    """What a job the trigger followed ended as once its object is gone, from the last object it saw
    (the watch's DELETED event carries the object as it was deleted), and the annotations to report.

    While ``pods`` of it still hold their nodes, it has not ended: it is TERMINATING. A job deleted
    without ``--cascade=foreground`` (``kubectl delete``'s default, background propagation) is gone at
    once, and the garbage collector deletes its pods afterwards (kubernetes v1.36.3
    ``pkg/controller/garbagecollector/garbagecollector.go``, ``attemptToDeleteItem`` of each dependent
    whose owner is gone); each pod then stops within its grace period, holding its GPUs. Only once the
    last is gone is the job over.

    The product's own end stands: a job that had finished (its TTL then removed it) or that the product
    ruled on (a verdict: ``actions.cancel`` writes Cancelled, who and when, before it deletes) reads as
    that verdict says. Any other deletion of a live job was done on purpose by someone outside the
    product: it is a cancel, put down to whoever deletes job objects, at the moment it was seen.
    """
    if any(holds_node(pod) for pod in pods):
        stopping = snapshot(_being_deleted(last_seen, now), pods, (), now=now)
        if stopping.state is JobState.TERMINATING:
            return stopping, dict(Meta(last_seen).annotations)
    gone = snapshot(last_seen, (), (), now=now)
    annotations = dict(Meta(last_seen).annotations)
    if gone.state.is_terminal:
        return who_cancelled(gone, annotations, now=now)
    when = _iso(now) or ""
    annotations[labels.CANCELLED_BY] = DELETED_BY_SOMEONE
    annotations[labels.CANCELLED_AT] = when
    cancelled = replace(
        gone,
        state=JobState.CANCELLED,
        reason=Reason.CANCELLED,
        message=f"cancelled by {DELETED_BY_SOMEONE} at {time_text(when)}",
    )
    return cancelled, annotations


def _being_deleted(job: Mapping[str, Any], now: datetime) -> Mapping[str, Any]:
    """``job`` as a job being deleted (a deletion timestamp, as the API server sets one; a job deleted in
    the background is simply gone, so its last version has none)."""
    meta = Meta(job)
    if meta.deleting:
        return job
    metadata = {**meta.fields, "deletionTimestamp": _iso(now)}
    return {**job, "metadata": metadata}


def who_cancelled(
    snap: JobSnapshot, annotations: Mapping[str, str], *, now: datetime
) -> tuple[JobSnapshot, dict[str, str]]:
    """A CANCELLED snapshot whose message names who cancelled and when (the cancel's annotations; a
    cancel that did not record its time is dated when it was seen); any other snapshot as it is."""
    annotations = dict(annotations)
    if snap.state is not JobState.CANCELLED:
        return snap, annotations
    who = annotations.get(labels.CANCELLED_BY) or "a user"
    when = annotations.get(labels.CANCELLED_AT) or _iso(now) or ""
    annotations[labels.CANCELLED_BY] = who
    annotations[labels.CANCELLED_AT] = when
    return replace(snap, message=f"cancelled by {who} at {time_text(when)}"), annotations


class SensorVerdict(str, Enum):
    WAIT = "wait"
    REACHED = "reached"
    FAILED = "failed"


# Every job that succeeded went through these states, whether or not anyone looked while it did.
_BEFORE_SUCCESS = frozenset({JobState.QUEUED, JobState.SCHEDULING, JobState.STARTING, JobState.RUNNING})


def sensor_verdict(
    state: JobState, *, target_states: Iterable[str], fail_states: Iterable[str]
) -> SensorVerdict:
    """Whether a sensor waiting for ``target_states`` is done, given the job's ``state`` now.

    A target the job is in is reached; so is one it has passed: a SUCCEEDED job has been QUEUED,
    SCHEDULING, STARTING and RUNNING even if no look caught it there (a short job can finish between
    two looks). A fail state fails the sensor. A job that ended in a state that is neither can never
    reach a target: the sensor fails at once rather than wait for its timeout.
    """
    targets = {JobState(s) for s in target_states}
    if state in targets:
        return SensorVerdict.REACHED
    if state in {JobState(s) for s in fail_states}:
        return SensorVerdict.FAILED
    if state is JobState.SUCCEEDED and targets & _BEFORE_SUCCESS:
        return SensorVerdict.REACHED
    if state.is_terminal:
        return SensorVerdict.FAILED
    return SensorVerdict.WAIT


def _reason(snapshot: JobSnapshot) -> str:
    return str(getattr(snapshot.reason, "value", snapshot.reason) or "")


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


# --- a sensor's states ---

DEFAULT_TARGET_STATES = (JobState.SUCCEEDED.value,)
DEFAULT_FAIL_STATES = (JobState.FAILED.value, JobState.CANCELLED.value)


def check_states(target_states: Any, fail_states: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The sensor's states, validated: known state names, at least one target, no overlap."""
    known = {s.value for s in JobState}
    for field, states in (("target_states", target_states), ("fail_states", fail_states)):
        bad = [s for s in states if s not in known]
        if bad:
            raise ValueError(f"{field}: unknown state(s) {bad}; known: {sorted(known)}")
    if not target_states:
        raise ValueError("target_states: give at least one state to wait for, e.g. ['SUCCEEDED']")
    if set(target_states) & set(fail_states):
        raise ValueError(
            f"target_states and fail_states must not overlap: {sorted(set(target_states) & set(fail_states))}"
        )
    return tuple(target_states), tuple(fail_states)


def awaits_pods(job: Mapping[str, Any], snapshot: JobSnapshot) -> bool:
    """A released job (not suspended, no verdict) still waiting for some of its pods to be created: the
    one moment the API server's refusal of them (``lifecycle.refused_pods``) is worth looking for."""
    if JobView(job).verdict is not None or kinds.kind_of(job).is_suspended(job):
        return False
    if snapshot.state not in (JobState.SCHEDULING, JobState.STARTING):
        return False
    return any(r.health is Health.MISSING for r in snapshot.replicas)


def mpijob_expiry(
    job: Mapping[str, Any], snapshot: JobSnapshot, ttl_after_finished: timedelta | None
) -> datetime | None:
    """When a finished job whose controller outlives its TTL (``JobKind.outlives_its_ttl``: an MPIJob) is
    to be deleted (labels.DELETE_AFTER), or ``None``: another kind, no TTL, not finished, or already
    marked. Its end is the controller's completion time where known, else now's
    snapshot time, so every reader of the mark deletes it when its TTL says."""
    if not kinds.kind_of(job).outlives_its_ttl or ttl_after_finished is None:
        return None
    if labels.DELETE_AFTER in JobView(job).annotations:
        return None
    if snapshot.state not in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED):
        return None
    finished = snapshot.finished_at
    if finished is None:
        return None
    return finished + ttl_after_finished
