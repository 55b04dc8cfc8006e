"""A job's state, computed from the cluster objects alone: :func:`snapshot`.

Inputs are what listing the cluster returns: the Job or MPIJob dict, pods and events (a whole
namespace's worth is fine: the job's own are picked out), plus the quota pool's view of the job
(:class:`QueueStatus` while it waits, :class:`Reservation` once admitted). The decision, first match
wins:

1. No job object: UNKNOWN / NotFound.
2. The controller's verdict: Complete (MPIJob Succeeded) is SUCCEEDED; Failed is FAILED with the most
   specific cause (image pull, invalid image, container cannot run, OOMKilled, evicted, preempted,
   node lost found on the pods, else DeadlineExceeded, BackoffLimitExceeded after retries, Error).
3. A product verdict annotation (QueueTimeout, OverQuota, OverRequeueLimit, Cancelled): FAILED or
   CANCELLED with that reason, TERMINATING while pods still run. Then FailureTarget and
   SuccessCriteriaMet (the controller decided and is stopping the pods): TERMINATING while pods run.
4. The job object being deleted: TERMINATING / Deleted.
5. Suspended: TERMINATING while pods still run (Requeued if requeued before, else Preempted); with a
   live reservation SCHEDULING / QuotaReserved; else QUEUED with the pool's reason and position
   (Requeued during a requeue back-off or when the pool says nothing), default Pending.
6. Running, from the replicas (launcher first): a failed pod the job will replace is RETRYING, one it
   will not (an MPIJob's worker) is DEGRADED next to running pods; a container failing in place is RETRYING when it is the launcher's or nothing runs, else DEGRADED;
   every pod lost is UNKNOWN / NodeLost, some lost is DEGRADED; a pod not placed is SCHEDULING
   (Unschedulable with the scheduler's message, SchedulingGated, Pending); a pod still starting or
   missing is STARTING (ImagePull, InvalidImageName, CreateContainerConfigError, Initializing,
   ContainerCreating, Creating); a pod being deleted is TERMINATING (DEGRADED next to running ones);
   a pod not ready is DEGRADED; all running is RUNNING (Finishing when every pod has succeeded).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from types import MappingProxyType
from typing import Annotated, Any

from airflow_jobs_plugin.cluster.objects import (
    as_int,
    as_utc,
    condition,
    dig,
    items,
    mapping,
    parse_time,
    time_text,
)
from airflow_jobs_plugin.cluster.records import NOT_YET, PodFacts, ReadMemo, pod_facts
from airflow_jobs_plugin.jobs import history, labels
from airflow_jobs_plugin.jobs.bounded import MESSAGE_LIMIT, bounded
from airflow_jobs_plugin.jobs.jobview import JobView
from airflow_jobs_plugin.jobs.kinds import LAUNCHER, JobKind, kind_of
from airflow_jobs_plugin.json_fields import Json
from airflow_jobs_plugin.lifecycle.replicas import (
    Health,
    ReplicaStatus,
    disrupted_pod,
    event_time,
    events_about,
    lost_with_its_node,
    replica_key,
    replicas_from,
)
from airflow_jobs_plugin.lifecycle.state import QUEUE_REASONS, VERDICTS, JobState, Reason

DEFAULT_BACKOFF_LIMIT = 6  # batch/v1 Job default, also what the MPI launcher Job gets
ADMITTED = "Admitted"  # the quota pool's verdict for a job whose GPUs it reserved (quota.Verdict.ADMIT)

# A caller that saw no disruption on the job's pods (the default of ``snapshot``'s ``disruptions``).
_NONE_SEEN: Mapping[str, Reason] = MappingProxyType({})
# What a pod's DisruptionTarget condition can say took it (replicas._DISRUPTIONS): one of these, seen on a
# pod before it went, is the cause of a failure its controller puts down to the disruption.
_DISRUPTION_CAUSES = frozenset({Reason.NODE_LOST, Reason.EVICTED, Reason.PREEMPTED})

# Kueue's reason on the Evicted condition of a Workload preempted for another (WorkloadEvictedByPreemption).
KUEUE_PREEMPTED = "Preempted"


@dataclass(frozen=True, slots=True)
class QueueStatus:
    """The quota pool's view of a queued job: why it waits and where it stands (0 = next)."""

    reason: str
    position: int | None = None
    message: str = ""
    # Why the engine sent an admitted job back (Kueue's Evicted condition's reason, e.g. "Preempted",
    # "PodsReadyTimeout", "Deactivated"); empty when it did not, or does not say.
    evicted_for: str = ""

    def __post_init__(self) -> None:
        # Every waiting task logs this message: whatever a policy or a person wrote, it stays a line.
        if len(self.message) > MESSAGE_LIMIT:
            object.__setattr__(self, "message", bounded(self.message))


@dataclass(frozen=True, slots=True)
class Reservation:
    """A job's GPU reservation in the quota ledger; ``released_at`` is ``None`` while it is held."""

    gpus: int
    admitted_at: datetime
    released_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class TaskRef:
    """The Airflow task instance try that submitted a job, from the job's own annotations: what a sweep
    for jobs nobody follows (their task no longer running, deferred or up for retry) asks Airflow about."""

    dag_id: Annotated[str, Json("the DAG")]
    task_id: Annotated[str, Json("the task")]
    run_id: Annotated[str, Json("the DAG run")]
    map_index: Annotated[int, Json("-1 for an unmapped task")] = -1
    try_number: Annotated[int | None, Json("the task's try number")] = None

    @classmethod
    def of(cls, annotations: Mapping[str, str]) -> TaskRef | None:
        """``None`` for a job without the exact identifiers (not submitted by a task of this product)."""
        dag_id, task_id, run_id = (annotations.get(k) for k in (labels.DAG_ID, labels.TASK_ID, labels.RUN_ID))
        if not (dag_id and task_id and run_id):
            return None
        map_index = as_int(annotations.get(labels.MAP_INDEX), -1)
        return cls(
            dag_id=dag_id,
            task_id=task_id,
            run_id=run_id,
            map_index=-1 if map_index is None else map_index,
            try_number=as_int(annotations.get(labels.TRY_NUMBER)),
        )


@dataclass(frozen=True, slots=True)
class JobSnapshot:
    """Everything the product says about a job at one moment.

    ``replicas`` lists the launcher then the workers (one worker for a single-pod Job), each with the
    kubectl STATUS of its current pod. ``attempt`` is the product's submission attempt (label
    ``labels.ATTEMPT``, 1 when absent), ``requeue_count`` how often the pool sent it back to the queue,
    ``pod_failures`` how many pods failed within this attempt. ``exit_code`` is the exit code that
    explains a failure, if any. ``gpu_seconds`` runs from admission to release (or ``observed_at``).
    """

    name: Annotated[str, Json("the job's name")]
    namespace: Annotated[str, Json("the job's namespace")]
    kind: Annotated[str, Json("Job or MPIJob")]
    state: Annotated[JobState, Json("where the job is in its life")]
    reason: Annotated[Reason, Json("why it is in that state")]
    message: Annotated[str, Json("the cluster's or the pool's words about the state", blank_is_null=True)]
    replicas: Annotated[tuple[ReplicaStatus, ...], Json("the launcher, then the workers")] = ()
    attempt: Annotated[int, Json("the product's submission attempt, from 1")] = 1
    requeue_count: Annotated[int, Json("how often the pool sent it back to the queue")] = 0
    queue_position: Annotated[int | None, Json("place in its queue (1 = next) while it waits")] = None
    pod_failures: Annotated[int, Json("pods that failed within this attempt")] = 0
    exit_code: Annotated[int | None, Json("the exit code that explains a failure, if any")] = None
    gpus: Annotated[int, Json("GPUs the job asks for")] = 0
    gpu_seconds: Annotated[float, Json("GPU-seconds from admission to release (or observed_at)")] = 0.0
    queued_at: Annotated[datetime | None, Json("when it joined its group's queue")] = None
    admitted_at: Annotated[datetime | None, Json("when the pool reserved its GPUs")] = None
    started_at: Annotated[datetime | None, Json("when its first container started")] = None
    finished_at: Annotated[datetime | None, Json("when it reached its final state")] = None
    observed_at: Annotated[datetime | None, Json("when the objects were read")] = None
    # The newest Warning events about the job's pods, newest last, even of pods already deleted:
    # ``worker-0 train-x7k2p Failed: Failed to pull image "...": not found``. The cause of a failure
    # outlives the pod that showed it.
    last_events: Annotated[
        tuple[str, ...], Json("the newest Warning events about its pods, newest last")
    ] = ()
    # Who submitted it and when the object was created: a job younger than a short grace may belong to
    # a task between creating it and deferring, which is not an orphan yet.
    task: Annotated[TaskRef | None, Json("the task instance try that submitted it")] = None
    created_at: Annotated[datetime | None, Json("when the job object was created")] = None

    @property
    def is_terminal(
        self,
    ) -> Annotated[bool, Json("SUCCEEDED, FAILED or CANCELLED: it will not change any more")]:
        """Whether the job reached SUCCEEDED, FAILED or CANCELLED."""
        return self.state.is_terminal

    @property
    def holds_gpus(self) -> Annotated[bool, Json("whether it holds GPUs now")]:
        """Whether the job holds GPUs now: admitted and not finished, or pods of it still running."""
        return (self.admitted_at is not None and self.finished_at is None and not self.is_terminal) or (
            self.state is JobState.TERMINATING
        )

    def replica(self, role: str, index: int = 0) -> ReplicaStatus | None:
        """The replica ``role``/``index`` (e.g. ``("launcher", 0)``, ``("worker", 3)``), if present."""
        for replica in self.replicas:
            if replica.role == role and replica.index == index:
                return replica
        return None


@dataclass(frozen=True)
class _Decision:
    state: JobState
    reason: Reason
    message: str
    exit_code: int | None = None


@dataclass(frozen=True, slots=True)
class _Facts:
    """What the job object says, read once."""

    adapter: JobKind
    annotations: Mapping[str, str]
    suspended: bool
    deleting: bool
    backoff_limit: int
    pod_failures: int
    requeue_count: int
    # The product's own readings of the job (jobview.JobView): its verdict and when it was admitted.
    verdict: str | None = None
    verdict_message: str | None = None
    admitted_at: datetime | None = None
    # The first status condition of each type, as ``objects.condition`` finds it: one pass, where every
    # rule asking about a condition walked the list again.
    conditions: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def holds(self, kind: str) -> bool:
        """Whether the job's condition ``kind`` is ``True`` (``objects.condition_true``)."""
        cond = self.conditions.get(kind)
        return cond is not None and cond.get("status") == "True"


@dataclass(frozen=True, slots=True)
class _JobRead:
    """What a snapshot reads of the job object alone: the same at every look at one version of it."""

    facts: _Facts
    expected: tuple[tuple[str, int], ...]  # every replica the job should have
    finished: bool  # its controller's final word is written
    name: str
    namespace: str
    attempt: int
    queued_at: datetime | None
    created_at: datetime | None
    task: TaskRef | None


def _read_job(job: Mapping[str, Any]) -> _JobRead:
    kind = kind_of(job)
    facts = _facts(job, kind)
    annotations = facts.annotations
    created_at = parse_time(dig(job, "metadata", "creationTimestamp"))
    return _JobRead(
        facts=facts,
        expected=tuple(kind.expected_replicas(job)),
        finished=kind.is_finished(job),
        name=str(dig(job, "metadata", "name") or ""),
        namespace=str(dig(job, "metadata", "namespace") or ""),
        attempt=as_int(mapping(job, "metadata", "labels").get(labels.ATTEMPT))
        or as_int(annotations.get(labels.ATTEMPT))
        or 1,
        queued_at=parse_time(annotations.get(labels.QUEUED_AT)) or created_at,
        created_at=created_at,
        task=TaskRef.of(annotations),
    )


# Causes found on the pods that say more than the controller's generic verdict.
_SPECIFIC_CAUSES = frozenset(
    {
        Reason.IMAGE_PULL,
        Reason.INVALID_IMAGE_NAME,
        Reason.CONTAINER_CONFIG_ERROR,
        Reason.CONTAINER_CANNOT_RUN,
        Reason.OOM_KILLED,
        Reason.EVICTED,
        Reason.PREEMPTED,
        Reason.NODE_LOST,
    }
)


def snapshot(
    job: Mapping[str, Any] | None,
    pods: Iterable[Mapping[str, Any]] = (),
    events: Iterable[Mapping[str, Any]] = (),
    *,
    queue: QueueStatus | None = None,
    reservation: Reservation | None = None,
    now: datetime,
    memo: ReadMemo | None = None,
    disruptions: Mapping[str, Reason] = _NONE_SEEN,
) -> JobSnapshot:
    """The state of ``job`` (a batch/v1 Job or kubeflow.org/v2beta1 MPIJob dict) at ``now``.

    ``pods`` and ``events`` may hold other objects too (e.g. a namespace-wide list): only those of the
    job are used. ``job=None`` means the job object is gone. See the module docstring for the rules.
    ``memo`` keeps what was read of the job and each pod for the caller's next snapshot (see
    :class:`~airflow_jobs_plugin.cluster.records.ReadMemo`: only for objects that are replaced, never changed in
    place); the snapshot is the same with or without it.
    ``disruptions`` are the causes a caller saw on pods of the job before (``tracking.disruptions_seen``:
    pod name to NodeLost, Evicted or Preempted); a pod gone since still names the cause of a failure its
    controller put down to the pod's disruption.
    Objects read through a client's models convert back with the client's
    ``ApiClient().sanitize_for_serialization(obj)``.
    """
    now = as_utc(now)
    if job is None:
        return JobSnapshot(
            name="",
            namespace="",
            kind="",
            state=JobState.UNKNOWN,
            reason=Reason.NOT_FOUND,
            message="the job object does not exist",
            gpus=reservation.gpus if reservation else 0,
            gpu_seconds=_gpu_seconds(reservation, now),
            admitted_at=reservation.admitted_at if reservation else None,
            observed_at=now,
        )
    # Each pod is read once into a record every rule below reads, and so is the job: with a memo, only
    # what changed since the caller's last look (a trigger's: one pod, by one event) is read at all.
    if memo is not None:
        read = memo.derived(job, _read_job)
        records = memo.pods(pods)
    else:
        read = _read_job(job)
        records = [pod_facts(pod) for pod in pods]
    facts = read.facts
    kind = facts.adapter
    own_pods = kind.own_pods(job, records)
    own_events = events_about(kind, job, own_pods, events)
    replicas = tuple(replicas_from(kind, read.expected, read.finished, own_pods, own_events))
    if _succeeded(facts):
        replicas = tuple(_stopped_after_success(r) for r in replicas)
    live = _live_pods(own_pods)
    decision = _decide(job, facts, replicas, live, queue, reservation, now, own_events, disruptions)
    last_events = _last_warnings(own_events)
    if decision.state in (JobState.FAILED, JobState.TERMINATING) and decision.reason not in _NOT_FAILURES:
        decision = _with_cause(decision, own_events)
    annotations = facts.annotations
    finished_at = _finished_at(job, decision.state, reservation)
    if reservation is None:
        reservation = _reservation_on(facts, finished_at)
    return JobSnapshot(
        name=read.name,
        namespace=read.namespace,
        kind=kind.name,
        state=decision.state,
        reason=decision.reason,
        message=decision.message,
        replicas=replicas,
        attempt=read.attempt,
        requeue_count=facts.requeue_count,
        queue_position=queue.position if queue is not None and decision.state == JobState.QUEUED else None,
        pod_failures=facts.pod_failures,
        exit_code=decision.exit_code,
        gpus=reservation.gpus if reservation else (as_int(annotations.get(labels.GPUS)) or 0),
        gpu_seconds=_gpu_seconds(reservation, now),
        queued_at=read.queued_at,
        admitted_at=facts.admitted_at or (reservation.admitted_at if reservation else None),
        started_at=_started_at(own_pods) or _recorded_start(annotations),
        finished_at=finished_at,
        observed_at=now,
        last_events=last_events,
        task=read.task,
        created_at=read.created_at,
    )


LAST_EVENTS = 5
# Ends that are no failure of the job: their messages need no cause from the pods' events.
_NOT_FAILURES = frozenset(
    {Reason.COMPLETED, Reason.PREEMPTED, Reason.REQUEUED, Reason.STOPPED, Reason.CANCELLED, Reason.DELETED}
)


def _warnings(events: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    about_pods = [
        e
        for e in events
        if e.get("type") == "Warning"
        and (e.get("involvedObject") or e.get("regarding") or {}).get("kind") == "Pod"
    ]
    return sorted(about_pods, key=lambda e: event_time(e) or datetime.min.replace(tzinfo=timezone.utc))


def _event_text(event: Mapping[str, Any]) -> str:
    return str(event.get("message") or event.get("note") or "").strip()


def _last_warnings(events: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    lines = []
    for event in _warnings(events)[-LAST_EVENTS:]:
        about = event.get("involvedObject") or event.get("regarding") or {}
        pod = str(about.get("name") or "")
        lines.append(f"{pod} {event.get('reason') or ''}: {_event_text(event)}".strip())
    return tuple(lines)


def _with_cause(decision: _Decision, events: Iterable[Mapping[str, Any]]) -> _Decision:
    """A failure's message ends with the newest Warning of its pods when it does not say it already:
    the registry's "not found", the kubelet's missing key, after the pod that showed them is gone."""
    warnings = _warnings(events)
    if not warnings:
        return decision
    text = _event_text(warnings[-1])
    if not text or text in decision.message:
        return decision
    return _Decision(
        decision.state, decision.reason, f"{decision.message}; last event: {text}", decision.exit_code
    )


def _reservation_on(facts: _Facts, finished_at: datetime | None) -> Reservation | None:
    """The GPUs an admitted job holds, read from the job itself (admission time and GPU total), held
    until the job finished: what a caller without the quota ledger at hand can still account."""
    admitted = facts.admitted_at
    gpus = as_int(facts.annotations.get(labels.GPUS))
    if admitted is None or not gpus:
        return None
    return Reservation(gpus=gpus, admitted_at=admitted, released_at=finished_at)


def _facts(job: Mapping[str, Any], adapter: JobKind) -> _Facts:
    annotations = _strings(mapping(job, "metadata", "annotations"))
    backoff = adapter.backoff_limit(job)
    view = JobView(job)
    return _Facts(
        verdict=view.verdict,
        verdict_message=view.verdict_message,
        admitted_at=view.admitted_at,
        adapter=adapter,
        annotations=annotations,
        suspended=adapter.is_suspended(job),
        deleting=dig(job, "metadata", "deletionTimestamp") is not None,
        backoff_limit=backoff if backoff is not None else DEFAULT_BACKOFF_LIMIT,
        pod_failures=adapter.pod_failures(job),
        requeue_count=as_int(annotations.get(labels.REQUEUE_COUNT), 0) or 0,
        conditions=_first_of_each_type(items(job, "status", "conditions")),
    )


def _strings(annotations: Mapping[str, Any]) -> Mapping[str, str]:
    """Annotations with string keys and values, as the API gives them: the job's own then (a trigger's
    memo keeps what a look read of its job, and a copy would cost as much as the annotations again)."""
    if type(annotations) is dict and all(type(k) is str and type(v) is str for k, v in annotations.items()):
        return annotations
    return {str(k): str(v) for k, v in annotations.items()}


def _first_of_each_type(conditions: list[Any]) -> dict[str, Mapping[str, Any]]:
    first: dict[str, Mapping[str, Any]] = {}
    for cond in conditions:
        if isinstance(cond, Mapping) and isinstance(kind := cond.get("type"), str) and kind not in first:
            first[kind] = cond
    return first


def _live_pods(pods: Iterable[PodFacts]) -> list[PodFacts]:
    """Pods that still hold their node: not ended, and not stranded on a lost node."""
    live = []
    for pod in pods:
        if pod.phase in ("Succeeded", "Failed", "Unknown"):
            continue
        deleting = pod.deleting
        if deleting and pod.reason == "NodeLost":
            continue
        if deleting and not pod.node:
            # Never placed, it holds no GPUs; the pod garbage collector fails and removes it
            # (pkg/controller/podgc/gc_controller.go, gcUnscheduledTerminating).
            continue
        live.append(pod)
    return live


def _decide(
    job: Mapping[str, Any],
    facts: _Facts,
    replicas: tuple[ReplicaStatus, ...],
    live: list[PodFacts],
    queue: QueueStatus | None,
    reservation: Reservation | None,
    now: datetime,
    events: list[Mapping[str, Any]],
    disruptions: Mapping[str, Reason],
) -> _Decision:
    # The controller's final word is a fact about what ran; a verdict written after it cannot undo it.
    succeeded = facts.adapter.succeeded_condition
    # Until every pod is gone the job still holds its GPUs: it is TERMINATING, whatever was decided.
    # Only a ruling asks (a running job's look skips reading every pod's role for it).
    ruled = any(facts.holds(kind) for kind in (succeeded, "Failed", "FailureTarget", "SuccessCriteriaMet"))
    holding = _holding(job, facts, live) if ruled else []
    if facts.holds(succeeded):
        message = _condition_message(job, succeeded, "completed")
        if holding:
            return _Decision(JobState.TERMINATING, Reason.COMPLETED, _stopping(message, holding), 0)
        return _Decision(JobState.SUCCEEDED, Reason.COMPLETED, message, 0)
    if facts.holds("Failed"):
        state = JobState.TERMINATING if holding else JobState.FAILED
        return _with_verdict(
            _failed(job, "Failed", facts, replicas, state, events, disruptions), facts, holding
        )
    verdict = facts.verdict
    if verdict:
        return _verdict(verdict, facts.verdict_message or "", facts, live)
    if facts.holds("FailureTarget"):
        state = JobState.TERMINATING if holding else JobState.FAILED
        return _failed(job, "FailureTarget", facts, replicas, state, events, disruptions)
    if facts.holds("SuccessCriteriaMet"):
        message = _condition_message(job, "SuccessCriteriaMet", "completed")
        if holding:
            return _Decision(JobState.TERMINATING, Reason.COMPLETED, _stopping(message, holding), 0)
        return _Decision(JobState.SUCCEEDED, Reason.COMPLETED, message, 0)
    if facts.deleting:
        return _Decision(
            JobState.TERMINATING, Reason.DELETED, f"the job is being deleted; {len(live)} pod(s) left"
        )
    if facts.suspended:
        stopping = [pod for pod in live if _being_stopped(job, pod)]
        if live and not stopping:
            # Every live pod was created after the job's last suspension: the job has been resumed
            # since the version read here (its own update has not arrived yet); it is not stopping.
            return _active(facts, replicas)
        return _suspended(facts, stopping, queue, reservation, now)
    return _active(facts, replicas)


def holds_node(pod: Mapping[str, Any]) -> bool:
    """Whether ``pod`` still holds its node (and its GPUs): not ended, not stranded on a lost node, and
    placed on one. A job whose object is gone is still stopping while one of its pods does."""
    return bool(_live_pods([pod_facts(pod)]))


def _succeeded(facts: _Facts) -> bool:
    """The controller's word that the job succeeded: its success condition, or a success policy met."""
    return facts.holds(facts.adapter.succeeded_condition) or facts.holds("SuccessCriteriaMet")


# Exit codes of a container killed by its stop: 128 + SIGTERM (the kubelet's first signal on a
# deletion) and 128 + SIGKILL (after the grace period).
_STOP_EXITS = frozenset({143, 137})


def _stopped_after_success(replica: ReplicaStatus) -> ReplicaStatus:
    """A worker its controller stopped because the job had succeeded reads as done, not as an error.

    Once an MPIJob's launcher succeeded, mpi-operator deletes its workers (v0.8.2
    ``pkg/controller/mpi_job_controller.go``, ``syncHandler``: ``isFinished`` with a completion time, then
    ``cleanUpWorkerPods``/``deleteWorkerPods``); the kubelet sends them SIGTERM, then SIGKILL past the
    grace, and a worker's process exits 143 (or 137). kubectl shows such a pod ``Error``, and with
    ``cleanPodPolicy: Running`` it is kept so. A success policy's Job (``SuccessCriteriaMet``) stops its
    remaining pods the same way. The job's outcome is its controller's success; the kill is the end of the
    worker's part in it, so the replica reads ``Completed`` with no exit code to report. An OOM kill
    (reason ``OOMKilled``, also 137) is no stop and keeps its reading.
    """
    if replica.role == LAUNCHER or replica.health not in (Health.FAILED, Health.FAILING):
        return replica
    if replica.exit_code not in _STOP_EXITS or replica.reason is not Reason.ERROR:
        return replica
    return replace(
        replica,
        status="Completed",
        health=Health.SUCCEEDED,
        reason=None,
        exit_code=None,
        exit_from="",
        message=f"stopped once the job had succeeded (exit code {replica.exit_code})",
    )


def _holding(job: Mapping[str, Any], facts: _Facts, live: list[PodFacts]) -> list[Mapping[str, Any]]:
    """The live pods that still hold their GPUs once the controller has ruled on the job.

    A pod being deleted holds its GPUs until it is gone. So does a pod its kind says outlives the job (``JobKind.pod_outlives_job``), an MPI worker: the workers of an
    MPIJob never end by themselves; mpi-operator (``pkg/controller/mpi_job_controller.go``, v0.8.0,
    ``deleteWorkerPods`` after the launcher finished) deletes them per ``cleanPodPolicy``, and with
    ``None`` they keep running. A launcher pod or a Job's pod that looks live without a deletion
    timestamp is a view older than the job's own: the launcher Job only finishes once its pod ended,
    and the Job controller (``pkg/controller/job/job_controller.go``, 1.31+) writes SuccessCriteriaMet
    and FailureTarget only after counting the pods that decided them, deleting the others; while it
    still counts pods as active or terminating (``JobKind.still_counts_pods``), they hold.
    """
    holding: list[Mapping[str, Any]] = []
    if not live:
        return holding
    adapter = facts.adapter
    still_counted = adapter.still_counts_pods(job)
    for pod in live:
        if pod.deleting:
            holding.append(pod.obj)
        elif adapter.pod_outlives_job(replica_key(adapter, pod)[0]):
            holding.append(pod.obj)
        elif still_counted:
            holding.append(pod.obj)
    return holding


def _being_stopped(job: Mapping[str, Any], pod: PodFacts) -> bool:
    """Whether a live pod of a suspended job is one its suspension is stopping.

    It is if it is being deleted, or if it predates the job's last ``Suspended=True`` transition: the
    Job controller (``pkg/controller/job/job_controller.go``, 1.32: ``ensureJobConditionStatus`` with
    ``jm.clock.Now()``) and mpi-operator (``pkg/controller/mpi_job_controller.go``, v0.8.0:
    ``updateMPIJobConditions(JobSuspended, True, "MPIJobSuspended")``) write that condition, with its
    lastTransitionTime, only when the status flips, after deleting the active pods. A pod created at or
    after it was created by a resume the version read here does not show yet (or in the same second,
    the API's precision, where the resume is far likelier than a stop). While the condition still says
    ``False`` (resumed), the suspension is newer than the controller's last word: every pod is stopping.
    Without the condition at all the job has never been seen suspended by its controller, so no pod of
    it can predate a suspension.
    """
    if pod.deleting:
        return True
    cond = condition(job, "Suspended")
    if cond is None:
        return False
    if cond.get("status") != "True":
        return True
    suspended_at = parse_time(cond.get("lastTransitionTime"))
    created = parse_time(pod.created)
    if suspended_at is None or created is None:
        return True
    return created < suspended_at


def _stopping(message: str, holding: list[Mapping[str, Any]]) -> str:
    return f"{message}; {len(holding)} pod(s) still stopping"


def _with_verdict(decision: _Decision, facts: _Facts, holding: list[Mapping[str, Any]]) -> _Decision:
    """A controller failure the product caused on purpose (it ended a job it had ruled failed, so that
    the cluster shows it failed) reads as the product's verdict, not the controller's generic cause.
    A cancel ends a job the same way (``actions.cancel``), so a cancelled job that failed is CANCELLED:
    its verdict is written in the same write as the deadline that fails it, conditional on the job as
    read, so it never lands on a job that had already failed by itself."""
    verdict = facts.verdict
    reason = VERDICTS.get(verdict or "")
    if reason is None or reason is Reason.STOPPED:
        return decision
    if reason is Reason.CANCELLED:
        message = f"cancelled by {facts.annotations.get(labels.CANCELLED_BY) or 'a user'}"
        if holding:
            return _Decision(JobState.TERMINATING, reason, _stopping(message, holding), decision.exit_code)
        return _Decision(JobState.CANCELLED, reason, message, decision.exit_code)
    message = facts.verdict_message or decision.message
    if holding:
        message = _stopping(message, holding)
    return _Decision(decision.state, reason, message, decision.exit_code)


def _verdict(verdict: str, message: str, facts: _Facts, live: list[PodFacts]) -> _Decision:
    reason = VERDICTS.get(verdict, Reason.ERROR)
    if reason == Reason.ERROR:
        message = f"verdict {verdict}: {message}" if message else f"verdict {verdict}"
    message = message or {
        Reason.CANCELLED: f"cancelled by {facts.annotations.get(labels.CANCELLED_BY) or 'a user'}",
        Reason.QUEUE_TIMEOUT: "waited in the queue longer than allowed",
        Reason.OVER_QUOTA: "asks for more GPUs than its quota can ever grant",
        Reason.OVER_REQUEUE_LIMIT: f"requeued {facts.requeue_count} times without starting",
    }.get(reason, "")
    if live:
        return _Decision(JobState.TERMINATING, reason, f"{message}; stopping {len(live)} pod(s)")
    return _Decision(JobState.CANCELLED if reason == Reason.CANCELLED else JobState.FAILED, reason, message)


def _condition_message(job: Mapping[str, Any], kind: str, default: str) -> str:
    cond = condition(job, kind) or {}
    return _clean_message(str(cond.get("message") or "")) or str(cond.get("reason") or default)


def _clean_message(message: str) -> str:
    """The controller's message without an empty tail: on a backoff-limit failure the MPI operator
    appends ``": " + the last failed launcher pod's status message`` (v0.8.2
    ``pkg/controller/mpi_job_controller.go`` ``updateMPIJobFailedStatus``), which is usually empty."""
    return message.rstrip().removesuffix(":").rstrip()


def _reason_head(reason: str) -> str:
    """The controller's reason, without what the MPI operator appends to it on a backoff-limit
    failure (``"BackoffLimitExceeded/" + the last failed pod's reason``, same function as above)."""
    return reason.split("/", 1)[0]


def _failed(
    job: Mapping[str, Any],
    kind: str,
    facts: _Facts,
    replicas: tuple[ReplicaStatus, ...],
    state: JobState,
    events: list[Mapping[str, Any]],
    disruptions: Mapping[str, Reason] = _NONE_SEEN,
) -> _Decision:
    """A failed (or failing) job's reason: a specific cause on the pods beats the controller's word."""
    cond_reason = _reason_head(str(dig(condition(job, kind), "reason") or ""))
    detail = _condition_message(job, kind, "failed")
    troubled = [r for r in replicas if r.reason is not None and r.health != Health.MISSING]
    specific = next((r for r in troubled if r.reason in _SPECIFIC_CAUSES), None)
    failed = next((r for r in troubled if r.exit_code not in (None, 0)), None)
    exit_code = specific.exit_code if specific is not None else (failed.exit_code if failed else None)
    if specific is not None:
        return _Decision(
            state, specific.reason or Reason.ERROR, f"{detail}; {_describe(specific)}", exit_code
        )
    cond_message = str(dig(condition(job, kind), "message") or "")
    if cond_reason == "PodFailurePolicy" and "DisruptionTarget" in cond_message:
        # The pod was disrupted (evicted, preempted, or its node lost) and may be gone: the
        # infrastructure failed the job, not the program, whatever the killed container's exit code.
        # Which disruption: a NodeLost ruling the product wrote before the controller's word, or the
        # node controllers' events on the pod, which outlive it.
        # A node deleted outright leaves no event at all: the pod GC marks its pods
        # ``DisruptionTarget``/``DeletionByPodGC`` ("PodGC: node no longer exists") and force-deletes them
        # (kubernetes v1.36.3 ``pkg/controller/podgc/gc_controller.go``, ``gcOrphaned``), so by the time
        # the Job fails the pod is gone; what a caller saw on it (``disruptions``) still names the cause
        # it showed while the job was retrying, and the attempt ends with that one cause.
        pod = disrupted_pod(job)
        lost = facts.verdict == Reason.NODE_LOST.value
        lost = lost or lost_with_its_node(pod, events)
        seen = disruptions.get(pod) if pod else None
        reason = Reason.NODE_LOST if lost else seen if seen in _DISRUPTION_CAUSES else Reason.EVICTED
        return _Decision(state, reason, f"{detail}; its pod was disrupted", None)
    if cond_reason == "DeadlineExceeded":
        reason = Reason.DEADLINE_EXCEEDED
    elif cond_reason in ("MPIJobEvicted",):
        reason = Reason.EVICTED
    elif cond_reason == "BackoffLimitExceeded" and facts.backoff_limit > 0:
        reason = Reason.BACKOFF_LIMIT_EXCEEDED
    else:
        reason = Reason.ERROR
    if failed is not None:
        who = f"{failed.name}'s {failed.exit_from}" if failed.exit_from else failed.name
        detail = f"{detail}; {who} exited with code {failed.exit_code}"
    return _Decision(state, reason, detail, exit_code)


def _suspended(
    facts: _Facts,
    live: list[PodFacts],
    queue: QueueStatus | None,
    reservation: Reservation | None,
    now: datetime,
) -> _Decision:
    stopped_at = facts.annotations.get(labels.STOPPED_AT)
    if stopped_at:
        # A user's stop: the job keeps its place in the queue's history but no admission pass may
        # release it until a resume removes the annotation.
        who = facts.annotations.get(labels.STOPPED_BY) or "a user"
        if live:
            return _Decision(
                JobState.TERMINATING, Reason.STOPPED, f"stopped by {who}; stopping {len(live)} pod(s)"
            )
        return _Decision(
            JobState.STOPPED,
            Reason.STOPPED,
            f"stopped by {who} at {time_text(stopped_at)}; resume to requeue",
        )
    preempted = facts.annotations.get(labels.PREEMPTION_MESSAGE)
    if live and preempted:
        # The product's own pool preempted it (queueing/quota/preemption.py): the message names the preemptor.
        return _Decision(JobState.TERMINATING, Reason.PREEMPTED, f"{preempted}; stopping {len(live)} pod(s)")
    if live:
        reason = Reason.REQUEUED if facts.requeue_count > 0 else Reason.PREEMPTED
        if queue is not None and queue.evicted_for:
            # Kueue evicts for many causes (v0.19.2 apis/kueue/v1beta2/workload_types.go,
            # WorkloadEvictedBy*): only one of them is a preemption.
            reason = Reason.PREEMPTED if queue.evicted_for == KUEUE_PREEMPTED else Reason.EVICTED
        message = f"suspended; stopping {len(live)} pod(s)"
        if queue is not None and queue.reason == Reason.REQUEUED.value and queue.message:
            # Whoever evicted it says why (Kueue's preemption message names the workload that won).
            message = f"{message}: {queue.message}"
        return _Decision(JobState.TERMINATING, reason, message)
    if reservation is not None and reservation.released_at is None:
        return _Decision(
            JobState.SCHEDULING,
            Reason.QUOTA_RESERVED,
            f"{reservation.gpus} GPU(s) reserved; releasing the job",
        )
    if queue is not None and queue.reason == ADMITTED:
        # The pool reserved its GPUs; the unsuspend that releases it has not landed yet.
        return _Decision(JobState.SCHEDULING, Reason.QUOTA_RESERVED, queue.message or "GPUs reserved")
    not_before = parse_time(facts.annotations.get(labels.REQUEUE_NOT_BEFORE))
    requeued = f"requeued {facts.requeue_count} time(s)"
    if facts.requeue_count > 0 and not_before is not None and not_before > now:
        return _Decision(
            JobState.QUEUED, Reason.REQUEUED, f"{requeued}; back in the queue at {time_text(not_before)}"
        )
    if queue is not None:
        reason = next((r for r in QUEUE_REASONS if r.value == queue.reason), Reason.PENDING)
        message = queue.message or (reason.value if reason != Reason.PENDING else queue.reason)
        if queue.position is not None:
            message = f"{message} (position {queue.position})"
        if preempted:
            # Until it is admitted again, the preemption is why it waits, whatever the queue says next.
            reason, message = Reason.PREEMPTED, f"{preempted}; {message}"
        return _Decision(JobState.QUEUED, reason, message)
    if facts.requeue_count > 0:
        return _Decision(JobState.QUEUED, Reason.REQUEUED, requeued)
    # No admission decision is known yet (without a quota policy the job is released at the next
    # look; with one, the pool's first pass has not judged it): say that, not "quota", and say who put
    # it back in the queue if a person did.
    resumed = _resumed(facts.annotations)
    return _Decision(
        JobState.QUEUED, Reason.PENDING, f"{resumed or 'created suspended'}; waiting to be admitted"
    )


def _resumed(annotations: Mapping[str, str]) -> str | None:
    """``resumed by alice at 2026-12-05 12:00:05 UTC`` when a person's resume is the newest thing done to the job."""
    if labels.HISTORY not in annotations:
        return None
    done = history.entries(annotations)
    if not done or done[-1].act is not history.Act.RESUMED:
        return None
    return f"resumed by {done[-1].by} at {time_text(done[-1].at)}"


def _recorded_start(annotations: Mapping[str, str]) -> datetime | None:
    """When the job's last run started, as the cancel that ended it recorded from its pods: the
    controller deletes a cancelled job's pods, and with them every trace of its start."""
    if labels.HISTORY not in annotations:
        return None
    cancelled = history.last(history.entries(annotations), history.Act.CANCELLED)
    return cancelled.run.started_at if cancelled is not None and cancelled.run is not None else None


def _describe(replica: ReplicaStatus) -> str:
    """``worker-1: CrashLoopBackOff, exit code 2 (back-off 40s restarting failed container)``."""
    if replica.pod is None:
        return f"{replica.name}: no pod yet"
    text = f"{replica.name}: {replica.status}"
    if replica.exit_code not in (None, 0):
        text += f", exit code {replica.exit_code}"
    return f"{text} ({replica.message})" if replica.message else text


def _active(facts: _Facts, replicas: tuple[ReplicaStatus, ...]) -> _Decision:
    """An unsuspended, unfinished job: the replicas' health decides."""

    def having(*healths: Health) -> list[ReplicaStatus]:
        return [r for r in replicas if r.health in healths]

    with_pods = [r for r in replicas if r.health != Health.MISSING]
    running = having(Health.RUNNING, Health.SUCCEEDED)
    if not with_pods:
        if facts.pod_failures > 0:
            return _Decision(
                JobState.RETRYING,
                Reason.ERROR,
                f"{facts.pod_failures} pod(s) failed; waiting for the next one",
            )
        return _Decision(JobState.SCHEDULING, Reason.CREATING, "waiting for pods to be created")
    failed = having(Health.FAILED)
    replaced = [r for r in failed if facts.adapter.replaces_failed_pod(r.role)]
    if replaced:
        first = replaced[0]
        return _Decision(
            JobState.RETRYING, first.reason or Reason.ERROR, _retry_message(first, facts), first.exit_code
        )
    if failed and running:
        # A failed pod nothing replaces (an MPIJob's worker) next to running ones: the job is not retrying,
        # it runs short of a replica until its controller ends it (mpirun's failure on the launcher).
        first = failed[0]
        return _Decision(JobState.DEGRADED, first.reason or Reason.ERROR, _describe(first), first.exit_code)
    failing = having(Health.FAILING)
    if failing:
        first = failing[0]
        launcher_failing = any(r.role == LAUNCHER for r in failing)
        state = JobState.RETRYING if launcher_failing or not running else JobState.DEGRADED
        if launcher_failing:
            first = next(r for r in failing if r.role == LAUNCHER)
        return _Decision(state, first.reason or Reason.ERROR, _describe(first), first.exit_code)
    lost = having(Health.LOST)
    if lost:
        state = JobState.UNKNOWN if len(lost) == len(with_pods) else JobState.DEGRADED
        return _Decision(state, Reason.NODE_LOST, "; ".join(f"{_describe(r)} on node {r.node}" for r in lost))
    placing = having(Health.UNSCHEDULABLE, Health.GATED, Health.AWAITING_SCHEDULER)
    if placing:
        first = placing[0]
        return _Decision(JobState.SCHEDULING, first.reason or Reason.PENDING, _describe(first))
    starting = having(Health.STARTING, Health.MISSING)
    if starting:
        first = _most_telling(starting)
        return _Decision(JobState.STARTING, first.reason or Reason.CONTAINER_CREATING, _describe(first))
    terminating = having(Health.TERMINATING)
    if terminating:
        first = terminating[0]
        state = JobState.DEGRADED if running else JobState.TERMINATING
        return _Decision(state, first.reason or Reason.DELETED, _describe(first))
    not_ready = having(Health.NOT_READY)
    if not_ready:
        return _Decision(JobState.DEGRADED, Reason.NOT_READY, _describe(not_ready[0]))
    if all(r.health == Health.SUCCEEDED for r in replicas):
        return _Decision(
            JobState.RUNNING, Reason.FINISHING, "all pods succeeded; waiting for the job to complete", 0
        )
    return _Decision(JobState.RUNNING, Reason.RUNNING, f"{len(running)} replica(s) running")


_STARTING_PRIORITY = (
    Reason.INVALID_IMAGE_NAME,
    Reason.IMAGE_PULL,
    Reason.CONTAINER_CONFIG_ERROR,
    Reason.INITIALIZING,
    Reason.CONTAINER_CREATING,
    Reason.CREATING,
)


def _most_telling(starting: list[ReplicaStatus]) -> ReplicaStatus:
    """The starting replica to report: a problem (bad image) before plain progress."""
    rank = {reason: i for i, reason in enumerate(_STARTING_PRIORITY)}
    return min(starting, key=lambda r: rank.get(r.reason, len(rank)) if r.reason else len(rank))


def _retry_message(replica: ReplicaStatus, facts: _Facts) -> str:
    text = _describe(replica)
    return (
        f"{text}; {facts.pod_failures} pod failure(s), the job fails at {facts.backoff_limit + 1}; retrying"
    )


def _gpu_seconds(reservation: Reservation | None, now: datetime) -> float:
    if reservation is None:
        return 0.0
    end = as_utc(reservation.released_at) if reservation.released_at is not None else now
    return max(0.0, (end - as_utc(reservation.admitted_at)).total_seconds()) * reservation.gpus


def _started_at(pods: Iterable[PodFacts]) -> datetime | None:
    """When the first container of the job started running (image pulls and init containers excluded)."""
    starts = []
    for pod in pods:
        if pod.started is NOT_YET:
            pod.started = _first_start(pod)
        if pod.started is not None:
            starts.append(pod.started)
    return min(starts) if starts else None


def _first_start(pod: PodFacts) -> datetime | None:
    starts = []
    for status in pod.container_statuses:
        if not isinstance(status, Mapping):
            continue
        for which, what in (("state", "running"), ("state", "terminated"), ("lastState", "terminated")):
            moment = parse_time(dig(status.get(which), what, "startedAt"))
            if moment is not None:
                starts.append(moment)
    return min(starts) if starts else None


def _finished_at(job: Mapping[str, Any], state: JobState, reservation: Reservation | None) -> datetime | None:
    if not state.is_terminal:
        return None
    moment = parse_time(dig(job, "status", "completionTime"))
    if moment is not None:
        return moment
    for kind in ("Complete", "Succeeded", "Failed"):
        cond = condition(job, kind)
        if cond is not None and cond.get("status") == "True":
            moment = parse_time(cond.get("lastTransitionTime"))
            if moment is not None:
                return moment
    return reservation.released_at if reservation is not None else None
