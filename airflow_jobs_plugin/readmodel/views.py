"""Page data for the GPU Jobs UI and CLI, built from what listing the cluster returns. No I/O.

Inputs are plain objects: the product's Jobs and MPIJobs, the pods and events of their namespace, the
quota policy (or why there is none) and each group's decoded ledger. Outputs are frozen dataclasses that
the HTML pages, the JSON endpoints and the CLI tables all render, so the three always agree. They hold
typed values (times, seconds, counts); the pages and tables print them (``readmodel/display.py``) and the
JSON API returns them as they are (``readmodel/schema.py``):

- :func:`overview`: pools (quota, used, queued, per user), each group's queue with positions and
  pending reasons, the job list and one GPU-usage chart per group;
- :func:`job_detail`: one job with its state timeline, replicas (kubectl STATUS), pods, events and
  log tails by rank.

Queue positions and pending reasons are recomputed with the quota pool's own rule
(:func:`airflow_jobs_plugin.queueing.quota.decide`) from the same inputs the admission pass reads, so every
reader sees what the pool decides.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any, NamedTuple
from urllib.parse import quote

from airflow_jobs_plugin.cluster.objects import Meta, parse_time
from airflow_jobs_plugin.jobs import action_rules, history, kinds, labels
from airflow_jobs_plugin.jobs.jobview import JobView
from airflow_jobs_plugin.json_fields import Json
from airflow_jobs_plugin.lifecycle import (
    LAUNCHER,
    JobSnapshot,
    JobState,
    QueueStatus,
    Reason,
    ReplicaStatus,
    events_of,
    pod_restarts,
    pod_row,
    pods_of,
    snapshot,
    tracking,
)
from airflow_jobs_plugin.lifecycle import Reservation as HeldGpus
from airflow_jobs_plugin.lifecycle.owners import OwnerIndex
from airflow_jobs_plugin.lifecycle.replicas import NO_POD, event_time, ready_counts
from airflow_jobs_plugin.queueing import kueue, quota
from airflow_jobs_plugin.queueing.quota import jobs as pool_jobs
from airflow_jobs_plugin.queueing.quota import ledger_model as ledger_rules
from airflow_jobs_plugin.queueing.quota.fair_share import UsageHistory, recent_by_group

PREFIX = "/airflow-jobs"
CHART_WINDOW = timedelta(hours=1)
CHART_MIN_SPAN = timedelta(minutes=5)
LAUNCHER_RANK = -1  # the launcher's JOB_RANK: always an integer, below every worker's


# --------------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterState:
    """One namespace's worth of cluster objects, as read at ``now``.

    ``jobs`` are the product's Jobs and MPIJobs (``kind`` set on each); ``policy`` is ``None`` when no
    quota policy is configured or it cannot be read, with the reason in ``policy_problem``;
    ``ledgers`` holds every group's decoded ledger, ``usage_histories`` the usage history a ledger
    of ``fair_share`` groups keeps, by ledger name (a group's, or its cohort's).
    """

    jobs: tuple[Mapping[str, Any], ...]
    pods: tuple[Mapping[str, Any], ...]
    events: tuple[Mapping[str, Any], ...]
    now: datetime
    policy: quota.QuotaPolicy | None = None
    policy_problem: str | None = None
    ledgers: Mapping[str, quota.Ledger] = dataclasses.field(default_factory=dict)
    usage_histories: Mapping[str, UsageHistory] = dataclasses.field(default_factory=dict)
    # Kueue's Workloads by their job's UID (none where Kueue is not installed), and why they could not
    # be read, if they could not.
    workloads: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    workloads_problem: str | None = None
    # Where Kueue's visibility API answered: the pending Workloads' positions by (namespace, name).
    kueue_positions: Mapping[tuple[str, str], kueue.PendingPosition] = dataclasses.field(default_factory=dict)

    @functools.cached_property
    def owners(self) -> OwnerIndex:
        """The pods and events indexed by job, built on first use: each job's lookup is O(1), not a scan."""
        return OwnerIndex(self.pods, self.events)

    def with_jobs(self, jobs: Iterable[Mapping[str, Any]]) -> ClusterState:
        """This state with other jobs: the same pods and events, and their index if it is built already
        (it depends on nothing else)."""
        other = dataclasses.replace(self, jobs=tuple(jobs))
        if "owners" in self.__dict__:
            other.__dict__["owners"] = self.__dict__["owners"]
        return other


# --------------------------------------------------------------------------------------------------
# Outputs
# --------------------------------------------------------------------------------------------------


class JobRow(NamedTuple):
    """One line of the job list, and the head of a job's page: one GPU job.

    Each field is declared once, with its JSON description (``json_fields.py``): the JSON API's
    ``Job`` is derived from this class, and the index of every job (``readmodel/job_index.py``) keeps
    one per job: a named tuple of strings, numbers and times, without a ``__dict__``, as the index
    holds 51,000 of them. The links are computed from the fields, not kept.
    """

    namespace: Annotated[str, Json("the job's namespace")]
    name: Annotated[str, Json("the Job or MPIJob name")]
    kind: Annotated[str, Json("Job or MPIJob")]
    state: Annotated[str, Json("where the job is in its life (docs/states.md)", as_type=JobState)]
    reason: Annotated[str, Json("why it is in that state", as_type=Reason)]
    message: Annotated[str, Json("the cluster's or the pool's words about the state", blank_is_null=True)]
    group: Annotated[str, Json("the quota group it runs in", blank_is_null=True)]
    user: Annotated[str, Json("the user it runs for", blank_is_null=True)]
    gpus: Annotated[int, Json("GPUs the job asks for, all replicas together")]
    # The GPU resource ``gpus`` counts: whole NVIDIA GPUs, a MIG profile, amd.com/gpu (the job's gpu_resource).
    device: Annotated[
        str, Json("the GPU resource gpus counts: nvidia.com/gpu, a MIG profile, amd.com/gpu, ...")
    ]
    attempt: Annotated[int, Json("the product's submission attempt of the task try, from 1")]
    requeue_count: Annotated[int, Json("how often the pool sent it back to the queue")]
    pod_failures: Annotated[int, Json("pods that failed within this attempt")]
    created_at: Annotated[datetime | None, Json("when the job object was created")]
    # Seconds since the object was created, at the overview's ``now`` (``None`` without a creation time).
    age_seconds: Annotated[float | None, Json("seconds since created_at, when the data was read")]
    queue_position: Annotated[int | None, Json("place in its queue (1 = next) while it waits")]
    dag_id: Annotated[str | None, Json("the DAG of the task that submitted it; null outside Airflow")]
    task_id: Annotated[str | None, Json("the task that submitted it")]
    run_id: Annotated[str | None, Json("the DAG run of that task")]
    map_index: Annotated[int | None, Json("the task's map index (-1 unmapped)")]
    # Where Kueue admits the job: its LocalQueue, and the ClusterQueue that reserved quota for it.
    kueue_queue: Annotated[str | None, Json("Kueue LocalQueue of a job Kueue admits; null for the pool")] = (
        None
    )
    cluster_queue: Annotated[str | None, Json("Kueue ClusterQueue that reserved quota for it")] = None

    @property
    def detail_url(self) -> Annotated[str, Json("the job page, relative to Airflow's root")]:
        return job_url(self.namespace, self.name)

    @property
    def dag_run_url(
        self,
    ) -> Annotated[str | None, Json("the DAG run in Airflow's UI, relative to Airflow's root")]:
        dag_id, run_id = self.dag_id, self.run_id
        return dag_run_url(dag_id, run_id) if dag_id and run_id else None

    @property
    def task_url(
        self,
    ) -> Annotated[str | None, Json("the task instance in Airflow's UI, relative to Airflow's root")]:
        dag_id, run_id, task_id = self.dag_id, self.run_id, self.task_id
        return task_url(dag_id, run_id, task_id, self.map_index) if dag_id and run_id and task_id else None


@dataclass(frozen=True)
class UserRow:
    """One user's share of a group: GPUs held, jobs running, their limit and what they have queued."""

    user: Annotated[str, Json("the user the GPUs are held or asked for")]
    gpus: Annotated[int, Json("GPUs the user's admitted jobs hold in this group")]
    jobs: Annotated[int, Json("admitted jobs of the user in this group")]
    limit: Annotated[int | None, Json("the user's GPU limit in this group; null when none applies")]
    queued_jobs: Annotated[int, Json("jobs of the user waiting in the group's queue")]
    queued_gpus: Annotated[int, Json("GPUs those waiting jobs ask for")]
    # In a fair_share group: the user's recent usage in GPUs, which orders the queue (queueing/quota/fair_share.py).
    recent_gpus: Annotated[
        float | None,
        Json(
            "in a fair_share group, the user's recent usage in GPUs (GPUs held, decayed with the "
            "group's fair_share_half_life), which orders the group's queue; null in any other group",
            digits=3,
        ),
    ] = None


@dataclass(frozen=True)
class DeviceRow:
    """A group's quota and use of a GPU device other than whole NVIDIA GPUs (``devices`` in the policy)."""

    resource: Annotated[str, Json("the device's extended-resource name, e.g. nvidia.com/mig-1g.10gb")]
    quota: Annotated[int, Json("the group's quota of the device (policy: groups.<group>.devices)")]
    used: Annotated[int, Json("how many of the device the group's admitted jobs hold")]

    @property
    def free(self) -> Annotated[int, Json("quota minus used, never below 0")]:
        return max(0, self.quota - self.used)


@dataclass(frozen=True)
class PoolRow:
    """One group's quota pool: ``quota``/``used``/``free`` of whole GPUs, ``devices`` of the others.

    ``most`` is the most whole GPUs it may hold (its quota, or in a ``cohort`` what borrowing allows);
    ``borrowed`` what it holds of the cohort's above its quota, ``lent`` what of its quota others hold.
    """

    group: Annotated[str, Json("the group (quota pool) name")]
    quota: Annotated[int | None, Json("the group's GPU quota; null when the policy does not name the group")]
    used: Annotated[int, Json("GPUs the group's admitted jobs hold")]
    free: Annotated[
        int | None,
        Json(
            "GPUs the group may take now: quota minus used, or in a cohort what is left of its "
            "guaranteed part plus what the cohort has left to lend, within its borrowing_limit; null without a quota"
        ),
    ]
    queued_jobs: Annotated[int, Json("jobs waiting in the group's queue")]
    queued_gpus: Annotated[int, Json("GPUs the waiting jobs ask for")]
    users: Annotated[tuple[UserRow, ...], Json("per user, in name order")]
    devices: Annotated[
        tuple[DeviceRow, ...],
        Json("other GPU devices the group has a quota of or holds (MIG profiles, other vendors)"),
    ] = ()
    cohort: Annotated[
        str | None, Json("the cohort whose groups lend each other unused GPUs; null for none")
    ] = None
    borrowed: Annotated[
        int, Json("GPUs the group holds above its quota, lent by its cohort; 0 outside one")
    ] = 0
    lent: Annotated[
        int, Json("GPUs of the group's quota that other groups of its cohort hold now; 0 outside one")
    ] = 0
    most: Annotated[
        int | None,
        Json(
            "the most GPUs the group may hold: its quota, or in a cohort its quota minus what it "
            "lends plus all the cohort lends, within its borrowing_limit; null without a quota"
        ),
    ] = None
    more_users: Annotated[
        int,
        Json(
            "users of the group left out of users (the overview lists those holding or waiting for the most "
            "GPUs); 0 when users lists every one"
        ),
    ] = 0


@dataclass(frozen=True)
class QueueEntry:
    """A waiting job at its position (1 = next) with the pool's reason and message."""

    position: Annotated[
        int | None, Json("place in the queue, 1 = next; null when the pool cannot judge the job")
    ]
    namespace: Annotated[str, Json("the job's namespace")]
    name: Annotated[str, Json("the job's name")]
    user: Annotated[str, Json("the user the job runs for", blank_is_null=True)]
    gpus: Annotated[int, Json("GPUs the job asks for")]
    priority: Annotated[int, Json("the job's priority within its group")]
    reason: Annotated[
        str,
        Json(
            "why it waits: GroupQuota, UserQuota, BehindHead, BackingOff, Inadmissible, Pending, "
            "Preempting (it waits for the jobs it preempted to end), Preempted (the pool preempted it; the "
            "message names who took its GPUs)"
        ),
    ]
    message: Annotated[str, Json("the pool's words about why it waits", blank_is_null=True)]
    # Since when it waits (the product's queued-at, else the object's creation) and for how many seconds.
    queued_at: Annotated[datetime | None, Json("when the job joined the queue")]
    waiting_seconds: Annotated[float | None, Json("seconds since queued_at, at the overview's now")]
    detail_url: Annotated[str, Json("the job page, relative to Airflow's root")]


@dataclass(frozen=True)
class GroupQueue:
    """A group's queue, in order."""

    group: Annotated[str, Json("the group")]
    entries: Annotated[tuple[QueueEntry, ...], Json("the waiting jobs, next first")]
    more: Annotated[
        int,
        Json(
            "waiting jobs after entries, left out (the overview lists the first of each queue; the job list "
            "pages through them all: state QUEUED, the group, sorted by position); 0 when entries lists every one"
        ),
    ] = 0


@dataclass(frozen=True)
class UsagePoint:
    """From ``at`` until the next point, the group held ``gpus`` GPUs."""

    at: Annotated[datetime, Json("when the level began")]
    gpus: Annotated[int, Json("GPUs held from then on")]


@dataclass(frozen=True)
class UsageChart:
    """A group's GPUs held over ``[start, end]`` as steps, with its quota for reference."""

    group: Annotated[str, Json("the group")]
    quota: Annotated[int | None, Json("the group's quota, for reference")]
    start: Annotated[datetime, Json("start of the span drawn")]
    end: Annotated[datetime, Json("end of the span drawn (the overview's now)")]
    points: Annotated[tuple[UsagePoint, ...], Json("change points, the first at start")]

    @property
    def peak(self) -> Annotated[int, Json("the most GPUs held within the span")]:
        return max((p.gpus for p in self.points), default=0)


@dataclass(frozen=True)
class Overview:
    """Everything the overview page and ``airflow-jobs status`` show."""

    now: Annotated[datetime, Json("when the cluster was read")]
    pools: Annotated[tuple[PoolRow, ...], Json("every group of the policy, and any group holding GPUs")]
    queues: Annotated[tuple[GroupQueue, ...], Json("each group's waiting jobs the reader may see")]
    jobs: Annotated[tuple[JobRow, ...], Json("the page of jobs asked for (sort, offset, limit)")]
    charts: Annotated[tuple[UsageChart, ...], Json("one GPU usage chart per group")]
    problems: Annotated[tuple[str, ...], Json("what could not be read: no policy, unreadable ledger entries")]


@dataclass(frozen=True)
class PagedOverview(Overview):
    """An overview whose jobs are one page of the filtered job list, and where that page sits: what
    the JSON API's overview and ``airflow-jobs status --json`` return."""

    jobs_total: Annotated[
        int | None,
        Json(
            "jobs matching the filters, on every page; null when not counted (`airflow-jobs status "
            "--json` in the default order reads only the newest jobs: see jobs_more)"
        ),
    ]
    jobs_more: Annotated[bool, Json("whether jobs follow this page (next page: offset + limit)")]
    jobs_offset: Annotated[int, Json("jobs skipped before this page")]
    jobs_limit: Annotated[int, Json("most jobs on a page")]

    @classmethod
    def of(cls, ov: Overview, *, total: int | None, offset: int, limit: int, more: bool) -> PagedOverview:
        """``ov`` (already narrowed and paged) with the size of the whole filtered job list (None: not
        counted) and whether jobs follow the page."""
        return cls(ov.now, ov.pools, ov.queues, ov.jobs, ov.charts, ov.problems, total, more, offset, limit)


@dataclass(frozen=True)
class Phase:
    """A stretch of a job's life in one state (``end`` is ``None`` for an instant, e.g. the finish)."""

    state: Annotated[str, Json("the state of the stretch", as_type=JobState)]
    start: Annotated[datetime, Json("when the stretch began")]
    end: Annotated[datetime | None, Json("null for an instant (the final state)")]
    detail: Annotated[str, Json("what happened", blank_is_null=True)]

    @property
    def duration_seconds(self) -> Annotated[float | None, Json("end minus start; null for an instant")]:
        return None if self.end is None else (self.end - self.start).total_seconds()


@dataclass(frozen=True)
class TimelineEntry:
    """A dated fact about the job: a state it entered or a condition the controller set."""

    at: Annotated[datetime, Json("when")]
    label: Annotated[str, Json("QUEUED, ADMITTED, STARTED, a condition, or the final state")]
    detail: Annotated[str, Json("the reason and message of the fact", blank_is_null=True)]


@dataclass(frozen=True)
class ReplicaRow:
    """A replica (launcher or worker) and its current pod, with the facts behind kubectl's columns.

    ``status`` is kubectl's STATUS (``None`` while the replica has no pod), ``ready_containers`` of
    ``containers`` its READY. ``restarts_column`` is kubectl's RESTARTS cell as printed (``3 (5m ago)``),
    kept for the page and the CLI table; ``restarts`` is the number.
    """

    replica: Annotated[str, Json("launcher, or worker-<index>")]
    rank: Annotated[int, Json("-1 for the MPI launcher, the index for a worker")]
    pod: Annotated[str | None, Json("the current pod; null before it has one")]
    ready_containers: Annotated[int | None, Json("ready containers (kubectl READY's first number)")]
    containers: Annotated[int | None, Json("containers counted (kubectl READY's second number)")]
    status: Annotated[str | None, Json("kubectl's STATUS; null without a pod", blank_is_null=True)]
    restarts: Annotated[int, Json("container restarts (kubectl RESTARTS)")]
    restarts_column: str
    pod_created_at: Annotated[datetime | None, Json("when the pod was created")]
    age_seconds: Annotated[float | None, Json("seconds since pod_created_at (kubectl AGE)")]
    node: Annotated[str | None, Json("the node it is bound to")]
    message: Annotated[str, Json("the cluster's words about a problem", blank_is_null=True)]


@dataclass(frozen=True)
class EventRow:
    """An event about the job or one of its pods, as ``kubectl describe`` lists them."""

    type: Annotated[str, Json("Normal or Warning", blank_is_null=True)]
    reason: Annotated[str, Json("the event's reason", blank_is_null=True)]
    object: Annotated[str, Json("<kind>/<name> the event is about")]
    message: Annotated[str, Json("the event's message", blank_is_null=True)]
    count: Annotated[int, Json("how often it was seen")]
    # When it was last seen, and how many seconds before the view's ``now``.
    at: Annotated[datetime | None, Json("when it was last seen")]
    age_seconds: Annotated[float | None, Json("seconds since at, when the data was read")]


@dataclass(frozen=True)
class LogTail:
    """The last lines of one replica's log (``error`` when they could not be read)."""

    replica: Annotated[str, Json("launcher, or worker-<index>")]
    rank: Annotated[int, Json("-1 for the MPI launcher")]
    pod: Annotated[str, Json("the pod the lines were read from")]
    container: Annotated[str, Json("the container the lines were read from", blank_is_null=True)]
    lines: Annotated[tuple[str, ...], Json("the last lines, oldest first")]
    error: Annotated[str | None, Json("why the log could not be read; null when it was")] = None


@dataclass(frozen=True)
class JobDetail:
    """Everything the job page and ``airflow-jobs describe`` show."""

    job: Annotated[JobRow, Json("the job's line")]
    snapshot: Annotated[JobSnapshot, Json("the lifecycle snapshot")]
    phases: Annotated[tuple[Phase, ...], Json("the state timeline, first to last")]
    timeline: Annotated[tuple[TimelineEntry, ...], Json("dated facts, oldest first")]
    replicas: Annotated[tuple[ReplicaRow, ...], Json("the launcher, then the workers")]
    events: Annotated[tuple[EventRow, ...], Json("oldest first")]
    logs: Annotated[tuple[LogTail, ...], Json("by rank, the launcher first")]
    # What a user who may edit the job's DAG can do to it now: "stop", "resume", "cancel".
    actions: Annotated[
        tuple[action_rules.ActionName, ...], Json("the actions that apply now, for a user who may act")
    ]
    # Every attempt of the job's task try the cluster still holds, first to last (this one included).
    attempts: Annotated[
        tuple[AttemptRow, ...], Json("every attempt of the task try the cluster holds, first to last")
    ] = ()


@dataclass(frozen=True)
class AttemptRow:
    """One attempt of a task try: how it went, on which nodes, for how many GPU-seconds."""

    attempt: Annotated[int, Json("the attempt's number, from 1")]
    name: Annotated[str, Json("the attempt's job name")]
    state: Annotated[str, Json("the attempt's state", as_type=JobState)]
    reason: Annotated[str, Json("why it is in that state", blank_is_null=True)]
    message: Annotated[str, Json("the cluster's or the pool's words about the state", blank_is_null=True)]
    requeues: Annotated[int, Json("how often the pool sent it back to the queue")]
    queued_at: Annotated[datetime | None, Json("when it joined the queue")]
    started_at: Annotated[datetime | None, Json("when its first container started")]
    finished_at: Annotated[datetime | None, Json("when it reached its final state")]
    exit_codes: Annotated[Mapping[str, int], Json("exit code by replica")]
    nodes: Annotated[tuple[str, ...], Json("nodes its pods ran on")]
    gpu_seconds: Annotated[float, Json("GPU-seconds it held")]
    detail_url: Annotated[str, Json("the attempt's job page, relative to Airflow's root")]


# --------------------------------------------------------------------------------------------------
# Small readers
# --------------------------------------------------------------------------------------------------


def _seconds_since(moment: datetime | None, now: datetime) -> float | None:
    """Seconds from ``moment`` to ``now`` (``None`` without a moment): what a page shows as an age."""
    return None if moment is None else (now - moment).total_seconds()


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def dag_of(job: Mapping[str, Any]) -> str | None:
    """The DAG the job belongs to (``None`` for a job submitted outside Airflow)."""
    return Meta(job).annotations.get(labels.DAG_ID) or None


def device_of(job: Mapping[str, Any]) -> str:
    """The GPU resource a job's ``gpus`` are: the annotation the operator writes when it is not whole
    NVIDIA GPUs (``labels.GPU_DEVICE``)."""
    return Meta(job).annotations.get(labels.GPU_DEVICE) or labels.GPU_RESOURCE


def may_be_waiting(job: Mapping[str, Any]) -> bool:
    """Whether a job may be waiting in the pool's queue, from its metadata alone: it carries no
    ``admitted-at``. Every write that suspends a job for the pool's queue removes ``admitted-at`` in
    the same write (a requeue, ``quota.ledger.requeue_patch``; a stop, ``actions.stop``), a job is
    created suspended without one, and the admission sets it in the write that unsuspends
    (``quota.ledger.unsuspend_patch``): so a job carrying it is not in the queue, whatever its status.
    The others still need their whole object to tell (:func:`_is_waiting`)."""
    return JobView(job).admitted_at is None


def may_have_a_position(job: Mapping[str, Any]) -> bool:
    """Whether a job may have a place in the pool's queue, from its metadata alone: it may be waiting
    (:func:`may_be_waiting`) and no person stopped it. A stopped job keeps its enqueue time but is
    never admitted and takes no place in line until a resume (``queueing/quota/policy.py``: ``_judge``
    rules it ``Stopped`` before anything else, ``decide`` gives it no position), and its snapshot reads
    STOPPED (or TERMINATING while its pods stop) whatever the queue says (``lifecycle/snapshot.py``,
    ``_suspended``): its page needs nothing of the queue."""
    return may_be_waiting(job) and not JobView(job).stopped


def is_suspended(job: Mapping[str, Any]) -> bool:
    return kinds.kind_of(job).is_suspended(job)


def _is_waiting(job: Mapping[str, Any]) -> bool:
    """Suspended, not ruled on by the product, not finished, not being deleted: in the pool's queue
    (a job Kueue admits waits in Kueue's queue, not the pool's)."""
    if not is_suspended(job) or JobView(job).verdict or kueue.manages(job):
        return False
    if Meta(job).deleting:
        return False
    conditions = (job.get("status") or {}).get("conditions") or ()
    return not any(
        c.get("type") in ("Complete", "Succeeded", "Failed") and c.get("status") == "True" for c in conditions
    )


def _uid(job: Mapping[str, Any]) -> str:
    return Meta(job).uid


def job_url(namespace: str, name: str) -> str:
    """The job page."""
    return f"{PREFIX}/jobs/{quote(namespace, safe='')}/{quote(name, safe='')}"


def dag_run_url(dag_id: str, run_id: str) -> str:
    """The DAG run in Airflow's own UI."""
    return f"/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"


def task_url(dag_id: str, run_id: str, task_id: str, map_index: int | None) -> str:
    """The task instance in Airflow's own UI (the mapped instance for a mapped task)."""
    url = f"{dag_run_url(dag_id, run_id)}/tasks/{quote(task_id, safe='')}"
    return f"{url}/mapped/{map_index}" if map_index is not None and map_index >= 0 else url


# --------------------------------------------------------------------------------------------------
# Queue decisions and snapshots
# --------------------------------------------------------------------------------------------------


def _reservations(state: ClusterState) -> list[quota.Reservation]:
    return [r for ledger in state.ledgers.values() for r in ledger.reservations]


def queue_decisions(state: ClusterState) -> tuple[dict[str, quota.Decision], dict[str, str]]:
    """The pool's decision for every waiting job (by uid), and why some jobs cannot be judged.

    Without a policy there are no decisions: every waiting job is reported with the policy problem.
    """
    waiting = [job for job in state.jobs if _is_waiting(job)]
    problems: dict[str, str] = {}
    if state.policy is None:
        if state.policy_problem:
            for job in waiting:
                problems[Meta(job).uid] = state.policy_problem
        return {}, problems
    queued = []
    for job in waiting:
        try:
            queued.append(quota.queued_job_from_metadata(Meta(job).fields))
        except ValueError as exc:
            problems[Meta(job).uid] = str(exc)
    # As a pass sees the ledgers (quota.ledger_model.plan_admission): without the reservations of jobs
    # read as gone, finished, stopped or requeued, and with those whose pods still hold their GPUs on
    # their way back, which a preempting head waits for before it preempts anyone. A reservation whose
    # job was not read (``status`` reads only some jobs whole) is kept as it is, as a pass keeps one.
    observed = _observed(state)
    current = [quota.reconcile(ledger, observed) for ledger in state.ledgers.values()]
    held = [r for ledger in current for r in ledger.reservations]
    releasing = frozenset(uid for ledger in current for uid in ledger_rules.releasing(ledger, observed))
    # A fair_share group's queue is in the order its users' recent usage gives, as a pass walks it.
    recent = recent_by_group(state.policy, state.usage_histories, held, state.now)
    decisions = quota.decide(state.policy, queued, held, state.now, releasing, recent=recent)
    return {d.job.uid: d for d in decisions}, problems


def _observed(state: ClusterState) -> dict[str, quota.ObservedJob]:
    """What a pass would observe of each reserved job the state holds (by uid), its pods included."""
    wanted = {r.uid for r in _reservations(state)}
    observed = {}
    for job in state.jobs:
        uid = _uid(job)
        if uid in wanted:
            observed[uid] = pool_jobs.observe(job, pods_of(job, state.owners.pods_for(job)))
    return observed


def _queue_status(
    state: ClusterState,
    job: Mapping[str, Any],
    decisions: Mapping[str, quota.Decision],
    problems: Mapping[str, str],
    held: Mapping[str, quota.Reservation],
) -> QueueStatus | None:
    """Why a waiting job waits, as its snapshot reads it: the pool's view of it, or Kueue's."""
    uid = _uid(job)
    if uid in decisions:
        d = decisions[uid]
        if d.verdict is quota.Verdict.ADMIT and uid not in held:
            # The pool's rule says it fits, but no pass has reserved its GPUs yet: it still waits in
            # the queue. Showing it SCHEDULING (QuotaReserved) would show a state it is not in.
            return QueueStatus(
                "Pending", d.position, "fits the quota now; the next admission pass releases it"
            )
        return QueueStatus(d.reason, d.position, d.message)
    if uid in problems:
        return QueueStatus("Inadmissible", None, problems[uid])
    if kueue.manages(job) and is_suspended(job) and not JobView(job).verdict:
        return _kueue_queue_status(state, job, uid)
    return None


def snapshots(state: ClusterState) -> list[tuple[Mapping[str, Any], JobSnapshot]]:
    """Every job with its snapshot, the queue status and reservation taken from the pool's view."""
    return snapshots_of(state, state.jobs, *queue_decisions(state))


def row_inputs(
    state: ClusterState, decisions: Mapping[str, quota.Decision], problems: Mapping[str, str]
) -> dict[str, tuple[QueueStatus | None, quota.Reservation | None]]:
    """What each job's snapshot in ``state`` reads besides its own objects, by uid: the queue status the
    pool's decisions (``queue_decisions(state)``) give it and the reservation the ledgers hold for it.
    A job whose inputs and objects did not change has the same snapshot (``now`` aside)."""
    held = {r.uid: r for r in _reservations(state)}
    return {
        _uid(job): (_queue_status(state, job, decisions, problems, held), held.get(_uid(job)))
        for job in state.jobs
    }


def snapshots_of(
    state: ClusterState,
    jobs: Iterable[Mapping[str, Any]],
    decisions: Mapping[str, quota.Decision],
    problems: Mapping[str, str],
) -> list[tuple[Mapping[str, Any], JobSnapshot]]:
    """``jobs`` (of ``state``) with their snapshots, given the pool's decisions over ``state``."""
    held = {r.uid: r for r in _reservations(state)}
    result = []
    for job in jobs:
        uid = _uid(job)
        queue = _queue_status(state, job, decisions, problems, held)
        reservation = held.get(uid)
        gpus = HeldGpus(reservation.gpus, reservation.admitted_at) if reservation is not None else None
        pods = state.owners.pods_for(job)
        events = state.owners.events_for(job, pods)
        snap = snapshot(job, pods, events, queue=queue, reservation=gpus, now=state.now)
        result.append((job, snap))
    return result


def _kueue_queue_status(state: ClusterState, job: Mapping[str, Any], uid: str) -> QueueStatus:
    """What Kueue says of a job waiting in its queue, as the job's trigger logs it (kueue.queue_status)."""
    if state.workloads_problem and uid not in state.workloads:
        name = kueue.queue_name(job) or "(default)"
        return QueueStatus(
            kueue.PENDING, None, f"Kueue: waiting in LocalQueue {name}; {state.workloads_problem}"
        )
    workload = state.workloads.get(uid)
    status = kueue.queue_status(job, workload)
    if workload is not None:
        view = kueue.workload_view(workload)
        namespace = Meta(workload).namespace
        status = kueue.with_position(status, state.kueue_positions.get((namespace, view.name)), view.queue)
    return QueueStatus(status.reason, status.position, status.message, status.evicted_for)


def job_row(
    job: Mapping[str, Any], snap: JobSnapshot, now: datetime, workload: Mapping[str, Any] | None = None
) -> JobRow:
    """The job list line of ``job``."""
    view = JobView(job)
    annotations = view.annotations
    namespace = snap.namespace or view.namespace
    name = snap.name or view.name
    created = view.created_at
    return JobRow(
        namespace=namespace,
        name=name,
        kind=snap.kind,
        state=snap.state.value,
        reason=snap.reason.value,
        message=snap.message,
        group=view.group or "",
        user=view.user or "",
        gpus=snap.gpus,
        device=device_of(job),
        attempt=snap.attempt,
        requeue_count=snap.requeue_count,
        pod_failures=snap.pod_failures,
        created_at=created,
        age_seconds=_seconds_since(created, now),
        queue_position=snap.queue_position,
        dag_id=dag_of(job),
        task_id=annotations.get(labels.TASK_ID) or None,
        run_id=annotations.get(labels.RUN_ID) or None,
        map_index=_int(annotations.get(labels.MAP_INDEX)),
        kueue_queue=kueue.queue_name(job),
        cluster_queue=kueue.cluster_queue(workload),
    )


# --------------------------------------------------------------------------------------------------
# Overview
# --------------------------------------------------------------------------------------------------


def _queued_by(decisions: Iterable[quota.Decision]) -> dict[str, dict[str, tuple[int, int]]]:
    """Per group and user: (jobs, GPUs) still waiting."""
    out: dict[str, dict[str, tuple[int, int]]] = {}
    for d in decisions:
        if not d.verdict.waiting:
            continue
        users = out.setdefault(d.job.group, {})
        jobs, gpus = users.get(d.job.user, (0, 0))
        users[d.job.user] = (jobs + 1, gpus + d.job.gpus)
    return out


def pools(state: ClusterState, decisions: Iterable[quota.Decision]) -> tuple[PoolRow, ...]:
    """Every group of the policy (and any group holding a ledger entry without one), with its users."""
    queued = _queued_by(decisions)
    usage = (
        {
            u.group: u
            for u in quota.usage(state.policy, _reservations(state), state.now, state.usage_histories)
        }
        if state.policy
        else {}
    )
    groups = sorted(
        set(usage) | {g for g, ledger in state.ledgers.items() if ledger.reservations} | set(queued)
    )
    rows = []
    for group in groups:
        waiting = queued.get(group, {})
        held = usage.get(group)
        per_user: dict[str, UserRow] = {}
        recent = held.recent if held is not None else None
        if held is not None:
            for u in held.users:
                jobs, gpus = waiting.get(u.user, (0, 0))
                per_user[u.user] = UserRow(u.user, u.gpus, u.jobs, u.limit, jobs, gpus)
        else:
            ledger = state.ledgers.get(group)
            for r in ledger.reservations if ledger else ():
                prev = per_user.get(r.user) or UserRow(r.user, 0, 0, None, 0, 0)
                per_user[r.user] = dataclasses.replace(prev, gpus=prev.gpus + r.gpus, jobs=prev.jobs + 1)
        for user, (jobs, gpus) in waiting.items():
            if user not in per_user:
                limit = None
                if state.policy is not None and group in state.policy.groups:
                    limit = state.policy.groups[group].user_limit(user)
                per_user[user] = UserRow(user, 0, 0, limit, jobs, gpus)
        if recent is not None:
            for user in recent if held is not None and held.cohort is None else ():
                # Held GPUs lately but none now: their usage still puts them later in the queue. (A
                # cohort's groups share one history, which cannot tell in which group someone was.)
                if user not in per_user and state.policy is not None:
                    per_user[user] = UserRow(user, 0, 0, state.policy.groups[group].user_limit(user), 0, 0)
            # Anyone with no history and nothing held reads 0: first in line among equals.
            per_user = {
                u: dataclasses.replace(row, recent_gpus=recent.get(u, 0.0)) for u, row in per_user.items()
            }
        used = held.used if held is not None else sum(u.gpus for u in per_user.values())
        group_quota = held.quota if held is not None else None
        rows.append(
            PoolRow(
                group=group,
                quota=group_quota,
                used=used,
                free=held.free if held is not None else None,
                queued_jobs=sum(j for j, _ in waiting.values()),
                queued_gpus=sum(g for _, g in waiting.values()),
                users=tuple(per_user[u] for u in sorted(per_user)),
                devices=tuple(DeviceRow(d.resource, d.quota, d.used) for d in held.devices) if held else (),
                cohort=held.cohort if held is not None else None,
                borrowed=held.borrowed if held is not None else 0,
                lent=held.lent if held is not None else 0,
                most=(held.quota if held.most is None else held.most) if held is not None else None,
            )
        )
    return tuple(rows)


def queues(
    state: ClusterState, decisions: Iterable[quota.Decision], problems: Mapping[str, str]
) -> tuple[GroupQueue, ...]:
    """Each group's waiting jobs in queue order; jobs the pool cannot judge come last with the reason."""
    by_group: dict[str, list[QueueEntry]] = {}
    preempted = {
        _uid(job): why for job in state.jobs if (why := Meta(job).annotations.get(labels.PREEMPTION_MESSAGE))
    }
    for d in decisions:
        if not d.verdict.waiting:
            continue
        reason, message = d.reason, d.message
        if d.job.uid in preempted:
            # As its snapshot reads (lifecycle/snapshot.py): until it is admitted again, the preemption
            # (and who took its GPUs) is why it waits; the queue's words follow.
            reason, message = Reason.PREEMPTED.value, f"{preempted[d.job.uid]}; {d.message}"
        by_group.setdefault(d.job.group, []).append(
            QueueEntry(
                position=d.position,
                namespace=d.job.namespace,
                name=d.job.name,
                user=d.job.user,
                gpus=d.job.gpus,
                priority=d.job.priority,
                reason=reason,
                message=message,
                queued_at=d.job.queued_at,
                waiting_seconds=_seconds_since(d.job.queued_at, state.now),
                detail_url=job_url(d.job.namespace, d.job.name),
            )
        )
    for job in state.jobs:
        view = JobView(job)
        uid = view.uid
        if uid not in problems:
            continue
        namespace, name = view.namespace, view.name
        queued_at = parse_time(view.annotations.get(labels.QUEUED_AT)) or view.created_at
        by_group.setdefault(view.group or "", []).append(
            QueueEntry(
                position=None,
                namespace=namespace,
                name=name,
                user=view.user or "",
                gpus=_int(view.annotations.get(labels.GPUS)) or 0,
                priority=_int(view.annotations.get(labels.PRIORITY)) or 0,
                reason="Inadmissible",
                message=problems[uid],
                queued_at=queued_at,
                waiting_seconds=_seconds_since(queued_at, state.now),
                detail_url=job_url(namespace, name),
            )
        )
    result = []
    for group in sorted(by_group):
        entries = sorted(
            by_group[group], key=lambda e: (e.position is None, e.position or 0, e.namespace, e.name)
        )
        result.append(GroupQueue(group, tuple(entries)))
    return tuple(result)


def gpu_intervals(snap: JobSnapshot, now: datetime) -> tuple[datetime, datetime, int] | None:
    """When ``snap``'s job held its GPUs: from admission to its end (or ``now``); ``None`` if never."""
    if snap.admitted_at is None or snap.gpus <= 0 or snap.state == JobState.QUEUED:
        return None
    if snap.is_terminal:
        end = snap.finished_at or snap.admitted_at
    else:
        end = now
    return (snap.admitted_at, max(end, snap.admitted_at), snap.gpus)


def usage_steps(
    intervals: Iterable[tuple[datetime, datetime, int]], start: datetime, end: datetime
) -> tuple[UsagePoint, ...]:
    """GPUs held over ``[start, end]`` as change points; the first point is at ``start``.

    An interval counts from its start (inclusive) to its end (exclusive); intervals outside the window
    do not count, those straddling its start count from ``start``.
    """
    changes: dict[datetime, int] = {}
    base = 0
    for begin, finish, gpus in intervals:
        if finish <= start or begin >= end or finish <= begin:
            continue
        if begin <= start:
            base += gpus
        else:
            changes[begin] = changes.get(begin, 0) + gpus
        if finish < end:
            changes[finish] = changes.get(finish, 0) - gpus
    points = [UsagePoint(start, base)]
    level = base
    for moment in sorted(changes):
        if changes[moment] == 0:
            continue
        level += changes[moment]
        points.append(UsagePoint(moment, level))
    return tuple(points)


def charts(
    state: ClusterState,
    pairs: Sequence[tuple[Mapping[str, Any], JobSnapshot]],
    pool_rows: Sequence[PoolRow],
    window: timedelta = CHART_WINDOW,
) -> tuple[UsageChart, ...]:
    """One chart per group, from the jobs still present on the cluster, all over the same span.

    The span is at most ``window``, shorter when every job is younger (but at least
    :data:`CHART_MIN_SPAN`), so a fresh cluster's usage is not squeezed into the last pixels.
    """
    by_group: dict[str, list[tuple[datetime, datetime, int]]] = {}
    for job, snap in pairs:
        interval = gpu_intervals(snap, state.now)
        if interval is not None:
            by_group.setdefault(JobView(job).group or "", []).append(interval)
    earliest = min((i[0] for intervals in by_group.values() for i in intervals), default=state.now)
    margin = (state.now - earliest) / 10
    start = max(state.now - window, min(earliest - margin, state.now - CHART_MIN_SPAN))
    quotas = {p.group: p.quota for p in pool_rows}
    groups = sorted(set(by_group) | set(quotas))
    return tuple(
        UsageChart(g, quotas.get(g), start, state.now, usage_steps(by_group.get(g, ()), start, state.now))
        for g in groups
    )


Visible = Callable[[Mapping[str, Any]], bool]


def overview(state: ClusterState, visible: Visible | None = None) -> Overview:
    """The overview of ``state``.

    ``visible`` filters the job list and queue entries to what the reader may see (a predicate on the
    job dict, see :func:`dag_filter`); pools and charts count every job, since quota is shared.
    """
    decisions, problems = queue_decisions(state)
    pairs = snapshots(state)
    pool_rows = pools(state, decisions.values())
    allowed = {_identity(j) for j in state.jobs if visible is None or visible(j)}
    rows = [job_row(job, snap, state.now, state.workloads.get(_uid(job))) for job, snap in pairs]
    rows = [r for r in rows if (r.namespace, r.name) in allowed]
    rows.sort(key=lambda r: (r.created_at or state.now, r.name), reverse=True)
    queue_views = tuple(
        GroupQueue(q.group, tuple(e for e in q.entries if (e.namespace, e.name) in allowed))
        for q in queues(state, decisions.values(), problems)
    )
    return Overview(
        now=state.now,
        pools=pool_rows,
        queues=tuple(q for q in queue_views if q.entries),
        jobs=tuple(rows),
        charts=charts(state, pairs, pool_rows),
        problems=problems_of(state),
    )


def problems_of(state: ClusterState) -> tuple[str, ...]:
    """What the overview says first: no usable policy, unreadable ledger entries, Kueue unreadable."""
    notes = []
    if state.policy is None and state.policy_problem:
        notes.append(state.policy_problem)
    for ledger in state.ledgers.values():
        notes.extend(f"ledger of group {ledger.group}: {p}" for p in ledger.problems)
    if state.workloads_problem:
        notes.append(state.workloads_problem)
    return tuple(notes)


@dataclass(frozen=True)
class JobChange:
    """One job as read again right after an action on it: the job (``None`` once deleted), its pods,
    and the quota policy and ledgers the action may have changed."""

    namespace: str
    name: str
    job: Mapping[str, Any] | None
    pods: tuple[Mapping[str, Any], ...]
    now: datetime
    policy: quota.QuotaPolicy | None
    policy_problem: str | None
    ledgers: Mapping[str, quota.Ledger]
    usage_histories: Mapping[str, UsageHistory]


def _identity(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = Meta(obj)
    return meta.namespace, meta.name


def dag_filter(readable_dags: set[str] | None, *, all_dags: bool) -> Visible:
    """A ``visible`` predicate: jobs of readable DAGs; jobs without a DAG only for readers of every DAG.

    ``readable_dags=None`` means no restriction.
    """

    def visible(job: Mapping[str, Any]) -> bool:
        if readable_dags is None:
            return True
        dag_id = dag_of(job)
        return dag_id in readable_dags if dag_id else all_dags

    return visible


# --------------------------------------------------------------------------------------------------
# Job detail
# --------------------------------------------------------------------------------------------------


def rank_of(replica: ReplicaStatus) -> int:
    """A replica's rank: the launcher is -1, a worker its index."""
    return LAUNCHER_RANK if replica.role == LAUNCHER else replica.index


def _current_run(snap: JobSnapshot, done: Sequence[history.Entry]) -> history.Run | None:
    """The run the job is in now, or ended last without a stop: admitted after every run a stop
    recorded. A stopped job has none (its stop ended it; the pool may still hold that run's
    reservation while its pods stop, which is not a new run), and a pod's start before this admission
    belongs to an earlier run (a stopped pod still going)."""
    if done and done[-1].act is history.Act.STOPPED:
        return None
    admitted = snap.admitted_at
    recorded = [e.run.admitted_at for e in done if e.run is not None and e.act is history.Act.STOPPED]
    if admitted is not None and recorded and admitted <= max(recorded):
        admitted = None
    started = snap.started_at
    # A cancel ends the run it recorded: it came after that run's start, so the run is looked for after
    # the action before the cancel; and once the pods are gone, the cancel's record speaks for the start.
    cancel = done[-1] if done and done[-1].act is history.Act.CANCELLED else None
    if started is None and cancel is not None and cancel.run is not None:
        started = cancel.run.started_at
    before = done[:-1] if cancel is not None else done
    if admitted is None:
        # No admission of its own was written (no quota pool here, or none kept after the end): the run
        # is known from its start, after the newest action before it, and held its GPUs from then as
        # far as anyone recorded.
        since = before[-1].at.replace(microsecond=0) if before else None
        if started is None or (since is not None and started < since):
            return None
        return history.Run(started, started, snap.finished_at, snap.gpus)
    if started is not None and started < admitted.replace(microsecond=0):
        started = None
    return history.Run(admitted, started, snap.finished_at, snap.gpus)


def runs(snap: JobSnapshot, done: Sequence[history.Entry] = ()) -> tuple[history.Run, ...]:
    """Every run of the job in order: each a stop ended (recorded by the stop), then the current or
    last one."""
    recorded = [e.run for e in done if e.act is history.Act.STOPPED and e.run is not None]
    current = _current_run(snap, done)
    return (*recorded, *([current] if current is not None else []))


def placed_at(snap: JobSnapshot, pods: Iterable[Mapping[str, Any]]) -> datetime | None:
    """When every replica's current pod was bound to a node (the latest ``PodScheduled`` transition to
    True among them), or ``None`` while one is not placed (or has no pod). From then until its first
    container runs the job pulls images and runs init containers: STARTING, as its snapshot and its
    task's log call it, not SCHEDULING."""
    if not snap.replicas:
        return None
    by_name = {Meta(p).name: p for p in pods}
    times = []
    for replica in snap.replicas:
        pod = by_name.get(replica.pod or "")
        conditions = ((pod or {}).get("status") or {}).get("conditions") or ()
        bound = next(
            (c for c in conditions if c.get("type") == "PodScheduled" and c.get("status") == "True"), None
        )
        at = parse_time((bound or {}).get("lastTransitionTime"))
        if at is None:
            return None
        times.append(at)
    return max(times)


def _run_marks(
    run: history.Run, admitted: bool, placed: datetime | None = None
) -> list[tuple[datetime, str, str]]:
    marks = []
    if admitted:
        marks.append((run.admitted_at, JobState.SCHEDULING.value, f"admitted with {run.gpus} GPU(s)"))
        # Placement is known for the current run's pods only; a pod placed after the start is a
        # replacement, not this run's start-up.
        if (
            placed is not None
            and placed >= run.admitted_at.replace(microsecond=0)
            and (run.started_at is None or placed < run.started_at)
        ):
            marks.append(
                (placed, JobState.STARTING.value, "every pod placed on a node; images, init containers")
            )
    if run.started_at is not None:
        marks.append((run.started_at, JobState.RUNNING.value, "first container started"))
    return marks


def phases(
    snap: JobSnapshot, done: Sequence[history.Entry] = (), placed: datetime | None = None
) -> tuple[Phase, ...]:
    """The job's life as consecutive stretches: queued, admitted (SCHEDULING until its pods are all
    placed on nodes, ``placed``: :func:`placed_at`; then STARTING), running, and for each stop and
    resume a person made (``done``, the job's history) stopped then queued again, run by run; then the
    final state as an instant. A live job's last stretch is its current state up to now."""
    now = snap.observed_at or datetime.now(timezone.utc)
    marks: list[tuple[datetime, str, str]] = []
    if snap.queued_at is not None:
        marks.append((snap.queued_at, JobState.QUEUED.value, "waiting for quota"))
    for entry in done:
        if entry.act is history.Act.STOPPED:
            if entry.run is not None:
                marks.extend(_run_marks(entry.run, admitted=True))
            marks.append((entry.at, JobState.STOPPED.value, f"stopped by {entry.by}"))
        elif entry.act is history.Act.RESUMED:
            marks.append((entry.at, JobState.QUEUED.value, f"resumed by {entry.by}; waiting for quota"))
    current = _current_run(snap, done)
    if current is not None:
        marks.extend(_run_marks(current, admitted=current.admitted_at != current.started_at, placed=placed))
    # The stretches follow the job's life in order, not the clock: Kubernetes writes whole seconds
    # (a pod's startedAt 12:00:05) where the product writes microseconds (admitted 12:00:05.300), so a
    # start may read earlier than the admission it followed. Each mark starts no earlier than the last.
    for i in range(1, len(marks)):
        if marks[i][0] < marks[i - 1][0]:
            marks[i] = (marks[i - 1][0], marks[i][1], marks[i][2])
    end = snap.finished_at if snap.is_terminal and snap.finished_at is not None else now
    if not snap.is_terminal and marks and marks[-1][1] != snap.state.value:
        # The latest stretch is whatever the job is doing now (e.g. RETRYING after it first ran).
        last_at = marks[-1][0]
        marks[-1] = (last_at, snap.state.value, snap.message)
    result = []
    for i, (at, state, detail) in enumerate(marks):
        until = marks[i + 1][0] if i + 1 < len(marks) else end
        result.append(Phase(state, at, max(until, at), detail))
    if snap.is_terminal:
        result.append(Phase(snap.state.value, max(end, marks[-1][0]) if marks else end, None, snap.message))
    return tuple(result)


# The controller conditions the facts table tells (the others say nothing a person acts on).
_CONDITION_TYPES = frozenset(
    {
        "Suspended",
        "Complete",
        "Succeeded",
        "Failed",
        "FailureTarget",
        "SuccessCriteriaMet",
        "Created",
        "Running",
        "Restarting",
    }
)
# The status a controller's reason asserts, by (condition type, reason). mpi-operator v0.8.2 keeps a
# condition's reason and message when it turns the condition over for another one
# (pkg/controller/mpi_job_controller_status.go, filterOutCondition: Running, and Failed, become False
# when the job succeeds or fails, still reading "MPIJobRunning: MPIJob default/x is running."). A reason
# that asserts the other status is stale: the facts table says so rather than show it as current.
_REASON_ASSERTS = {
    ("Running", "MPIJobRunning"): "True",
    ("Created", "MPIJobCreated"): "True",
    ("Succeeded", "MPIJobSucceeded"): "True",
    ("Failed", "MPIJobFailed"): "True",
    ("Suspended", "MPIJobSuspended"): "True",
    ("Suspended", "MPIJobResumed"): "False",
    ("Suspended", "JobSuspended"): "True",
    ("Suspended", "JobResumed"): "False",
}


def condition_fact(cond: Mapping[str, Any]) -> tuple[str, str]:
    """A controller condition as the facts table tells it: its type with its own status (``Running=False``)
    and its reason and message; a reason the controller left over from the condition's other status
    (mpi-operator's, see above) is named as stale and its message, which describes that other status,
    left out."""
    kind = str(cond.get("type") or "")
    truth = str(cond.get("status") or "")
    reason = str(cond.get("reason") or "")
    message = str(cond.get("message") or "")
    asserts = _REASON_ASSERTS.get((kind, reason))
    if asserts is not None and asserts != truth:
        return f"{kind}={truth}", f"(stale reason {reason}, left by the operator from when it was {asserts})"
    return f"{kind}={truth}", ": ".join(x for x in (reason, message) if x)


# The conditions a controller writes when it ends a job the product ruled on (a cancel, a queue
# timeout): the product ends a Job through its one-second activeDeadlineSeconds and an MPIJob through its
# launcher (quota.ledger.verdict_patch), so they read DeadlineExceeded, which is how, not why. The
# timeline shows the ruling instead.
_ENDING_CONDITIONS = frozenset({"Failed", "FailureTarget"})
_ACT_LABELS = {
    history.Act.STOPPED: "STOPPED",
    history.Act.RESUMED: "RESUMED",
    history.Act.CANCELLED: "CANCELLED",
}


def _product_ending(job: Mapping[str, Any], cond: Mapping[str, Any], cancelled_at: datetime | None) -> bool:
    """Whether a controller condition is the mechanism of the product's own ending of the job."""
    if not JobView(job).verdict:
        return False
    if cond.get("type") in _ENDING_CONDITIONS:
        return True
    # A cancelled stopped Job is resumed with no pods so that its deadline can end it: the controller's
    # "resumed" after the cancel is part of the ending too.
    at = parse_time(cond.get("lastTransitionTime"))
    return cancelled_at is not None and at is not None and at >= cancelled_at.replace(microsecond=0)


# What a controller condition follows in a job's life: a resume's (Suspended False) follows the
# admission that unsuspended the job, a suspension (Suspended True) the stop or the creation, the rest
# (Complete, Failed, ...) the run's start.
_CONDITION_FOLLOWS = {("Suspended", "False"): ("ADMITTED",), ("Suspended", "True"): ("STOPPED", "QUEUED")}


def _life(job: Mapping[str, Any], snap: JobSnapshot, done: Sequence[history.Entry]) -> list[TimelineEntry]:
    """The product's own facts in the order the job lived them: submitted, then each run (admitted,
    started) and the action that ended it, each resume, then the end."""
    life = []
    if snap.queued_at is not None:
        life.append(
            TimelineEntry(snap.queued_at, "QUEUED", f"submitted to group {JobView(job).group or '-'}")
        )

    def run_facts(run: history.Run) -> None:
        if run.admitted_at != run.started_at:
            life.append(TimelineEntry(run.admitted_at, "ADMITTED", f"{run.gpus} GPU(s) reserved"))
        if run.started_at is not None:
            life.append(TimelineEntry(run.started_at, "STARTED", "first container started"))

    for entry in done:
        if entry.run is not None and entry.act is history.Act.STOPPED:
            run_facts(entry.run)
        if entry.act is history.Act.CANCELLED:
            continue  # after the current run, which it ended
        life.append(_act_entry(entry))
    current = _current_run(snap, done)
    if current is not None:
        run_facts(current)
    cancel = history.last(done, history.Act.CANCELLED)
    if cancel is not None:
        life.append(_act_entry(cancel))
    if (
        snap.is_terminal
        and snap.finished_at is not None
        and not (cancel is not None and snap.state is JobState.CANCELLED)
    ):
        life.append(TimelineEntry(snap.finished_at, snap.state.value, f"{snap.reason.value}: {snap.message}"))
    return life


def _act_entry(entry: history.Entry) -> TimelineEntry:
    detail = f"{entry.act.value} by {entry.by}"
    if entry.run is not None:
        ran = "never started" if entry.run.started_at is None else "ran"
        detail += f" ({ran}; {round(entry.run.gpu_seconds(entry.at))} GPU-seconds)"
    return TimelineEntry(entry.at, _ACT_LABELS[entry.act], detail)


def timeline(job: Mapping[str, Any], snap: JobSnapshot) -> tuple[TimelineEntry, ...]:
    """Dated facts in order: submitted, each run's admission and start, each stop, resume and cancel
    with who did it, the controller's conditions (not those of an ending the product caused), the end.

    Kubernetes writes whole seconds (a condition's lastTransitionTime, a pod's startedAt) where the
    product writes microseconds, so facts of one second are ordered by the job's life: the product's
    own facts in the order it lived them, a condition just after the fact it follows."""
    done = history.entries(Meta(job).annotations)
    life = _life(job, snap, done)
    # Each fact's second, never before the one it followed.
    seconds: list[datetime] = []
    for fact in life:
        second = fact.at.replace(microsecond=0)
        seconds.append(max(second, seconds[-1]) if seconds else second)
    keyed: list[tuple[datetime, float, datetime, TimelineEntry]] = [
        (second, float(i), fact.at, fact) for i, (second, fact) in enumerate(zip(seconds, life, strict=True))
    ]
    cancel = history.last(done, history.Act.CANCELLED)
    for cond in (job.get("status") or {}).get("conditions") or ():
        at = parse_time(cond.get("lastTransitionTime"))
        kind = str(cond.get("type") or "")
        if at is None or kind not in _CONDITION_TYPES:
            continue
        if _product_ending(job, cond, cancel.at if cancel is not None else None):
            continue
        truth = str(cond.get("status") or "")
        label, detail = condition_fact(cond)
        follows = _CONDITION_FOLLOWS.get((kind, truth), ("STARTED",))
        second = at.replace(microsecond=0)
        anchor = max(
            (i for i, fact in enumerate(life) if fact.label in follows and seconds[i] <= second), default=-1
        )
        keyed.append((second, anchor + 0.5, at, TimelineEntry(at, label, detail)))
    deleted = Meta(job).deletion_time
    if deleted is not None:
        keyed.append(
            (
                deleted.replace(microsecond=0),
                float(len(life)),
                deleted,
                TimelineEntry(deleted, "DELETING", "the job object is being deleted"),
            )
        )
    keyed.sort(key=lambda k: (k[0], k[1], k[2]))
    return tuple(k[3] for k in keyed)


def replica_rows(
    job: Mapping[str, Any], snap: JobSnapshot, pods: Iterable[Mapping[str, Any]], now: datetime
) -> tuple[ReplicaRow, ...]:
    """Each replica with its current pod's kubectl columns (no status, counts or age while it has no pod)."""
    by_name = {Meta(p).name: p for p in pods}
    rows = []
    for replica in snap.replicas:
        pod = by_name.get(replica.pod or "")
        printed = pod_row(pod, now) if pod is not None else None
        ready, containers = ready_counts(printed.ready if printed else replica.ready)
        status = printed.status if printed else replica.status
        created = Meta(pod).created_at if pod is not None else None
        rows.append(
            ReplicaRow(
                replica=replica.name,
                rank=rank_of(replica),
                pod=replica.pod,
                ready_containers=ready,
                containers=containers,
                status=None if status == NO_POD else status,
                restarts=pod_restarts(pod) if pod is not None else replica.restarts,
                restarts_column=printed.restarts if printed else str(replica.restarts),
                pod_created_at=created,
                age_seconds=_seconds_since(created, now),
                node=replica.node,
                message=replica.message,
            )
        )
    return tuple(rows)


def event_rows(events: Iterable[Mapping[str, Any]], now: datetime) -> tuple[EventRow, ...]:
    """Events oldest first, each with kubectl describe's columns."""
    rows = []
    for event in events:
        about = event.get("involvedObject") or event.get("regarding") or {}
        at = event_time(event)
        rows.append(
            EventRow(
                type=str(event.get("type") or ""),
                reason=str(event.get("reason") or ""),
                object=f"{str(about.get('kind') or '').lower()}/{about.get('name') or ''}",
                message=str(event.get("message") or event.get("note") or ""),
                count=_int(event.get("count")) or 1,
                at=at,
                age_seconds=_seconds_since(at, now),
            )
        )
    rows.sort(key=lambda r: (r.at or now, r.object, r.reason))
    return tuple(rows)


def expected_ranks(job: Mapping[str, Any]) -> list[int]:
    """The ranks a job has, as its spec asks (the launcher's is -1), whether or not their pods exist."""
    return sorted(
        LAUNCHER_RANK if role == LAUNCHER else index
        for role, index in kinds.kind_of(job).expected_replicas(job)
    )


def log_targets(
    job: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]
) -> tuple[tuple[str, int, str, str], ...]:
    """(replica, rank, pod, container) whose log to show: each replica's newest pod, its main container."""
    kind = kinds.kind_of(job)
    newest: dict[tuple[str, int], Mapping[str, Any]] = {}
    for pod in pods_of(job, pods):
        key = kind.replica_key(pod)
        current = newest.get(key)
        if current is None or Meta(pod).creation_timestamp >= Meta(current).creation_timestamp:
            newest[key] = pod
    targets = []
    for (role, index), pod in sorted(newest.items(), key=lambda kv: (kv[0][0] != LAUNCHER, kv[0][1])):
        containers = (pod.get("spec") or {}).get("containers") or [{}]
        name = "launcher" if role == LAUNCHER else f"{role}-{index}"
        rank = LAUNCHER_RANK if role == LAUNCHER else index
        targets.append((name, rank, Meta(pod).name, str(containers[0].get("name") or "")))
    return tuple(targets)


def failed_log_target(
    job: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]
) -> tuple[str, int, str, str] | None:
    """(replica, rank, pod, container) of the first container of the job that failed (the earliest
    non-zero exit, init containers included): where a failure's cause is written. None if none failed."""
    kind = kinds.kind_of(job)
    first: tuple[str, tuple[str, int, str, str]] | None = None
    for pod in pods_of(job, pods):
        status = pod.get("status") or {}
        role, index = kind.replica_key(pod)
        for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
            for state in (
                (cs.get("state") or {}).get("terminated"),
                (cs.get("lastState") or {}).get("terminated"),
            ):
                if not state or not state.get("exitCode"):
                    continue
                at = str(state.get("finishedAt") or "")
                name = "launcher" if role == LAUNCHER else f"{role}-{index}"
                rank = LAUNCHER_RANK if role == LAUNCHER else index
                if first is None or at < first[0]:
                    first = (at, (name, rank, Meta(pod).name, str(cs.get("name") or "")))
    return first[1] if first is not None else None


def pick_log_target(
    targets: Sequence[tuple[str, int, str, str]], rank: int | None
) -> tuple[str, int, str, str] | None:
    """The replica for ``airflow-jobs logs``: the given rank, else the launcher, else the first worker."""
    if rank is not None:
        return next((t for t in targets if t[1] == rank), None)
    return next((t for t in targets if t[1] == LAUNCHER_RANK), targets[0] if targets else None)


def no_log_target(
    job_name: str, rank: int | None, targets: Sequence[tuple[str, int, str, str]], *, finished: bool
) -> str:
    """Why ``airflow-jobs logs`` has no pod to read: the rank asked for (if one was) and the ranks whose
    pods exist; a job that has ended has had its pods removed, not "not yet" started them."""
    present = ", ".join(str(t[1]) for t in targets)
    if not targets:
        why = "its pods are gone (the job has ended)" if finished else "none of its pods has started yet"
        asked = f"no pod of rank {rank}" if rank is not None else "no pod to read a log from"
        return f"job {job_name} has {asked}: {why}"
    return f"job {job_name} has no pod of rank {rank} (pods of ranks: {present})"


def job_detail(
    state: ClusterState,
    job: Mapping[str, Any],
    logs: Sequence[LogTail] = (),
    attempts: Sequence[Mapping[str, Any]] | None = None,
) -> JobDetail:
    """The job page of ``job`` (one of ``state.jobs``, or a job read on its own). ``attempts``: the
    objects of every attempt of its task try, where ``state`` does not hold them all (the API server's
    cache keeps only the waiting jobs); by default they are found among ``state.jobs``."""
    uid = Meta(job).uid
    jobs = tuple(state.jobs)
    if not any(Meta(j).uid == uid for j in jobs):
        jobs += (job,)
    decisions, problems = queue_decisions(dataclasses.replace(state, jobs=jobs))
    reservations = {r.uid: r for r in _reservations(state)}
    queue = _queue_status(state, job, decisions, problems, reservations)
    held = reservations.get(uid)
    pods = state.owners.pods_for(job)
    events = state.owners.events_for(job, pods)
    snap = snapshot(
        job,
        pods,
        events,
        queue=queue,
        reservation=HeldGpus(held.gpus, held.admitted_at) if held else None,
        now=state.now,
    )
    own_pods = pods_of(job, pods)
    return JobDetail(
        job=job_row(job, snap, state.now, state.workloads.get(_uid(job))),
        snapshot=snap,
        phases=phases(snap, history.entries(Meta(job).annotations), placed_at(snap, own_pods)),
        timeline=timeline(job, snap),
        replicas=replica_rows(job, snap, own_pods, state.now),
        events=event_rows(events_of(job, own_pods, events), state.now),
        logs=tuple(logs),
        actions=tuple(
            action_rules.NAMES[a]
            for a in action_rules.available(action_rules.facts_of(job, finished=snap.is_terminal))
        ),
        attempts=attempt_rows(state, job, snap, attempts),
    )


def _try_of(job: Mapping[str, Any]) -> tuple[str, str, str] | None:
    meta = Meta(job)
    key = meta.labels.get(labels.TASK_KEY)
    return (meta.namespace, key, meta.labels.get(labels.TRY) or "") if key else None


def attempt_rows(
    state: ClusterState,
    job: Mapping[str, Any],
    snap: JobSnapshot,
    candidates: Sequence[Mapping[str, Any]] | None = None,
) -> tuple[AttemptRow, ...]:
    """Every attempt of ``job``'s task try the cluster still holds (a TTL may have removed older ones),
    each with its own snapshot: state, reason, times, exit codes, nodes and GPU-seconds. The other
    attempts are found among ``candidates`` (default: ``state.jobs``)."""
    key = _try_of(job)
    own = _uid(job)
    pool = state.jobs if candidates is None else candidates
    siblings = [j for j in pool if key is not None and _try_of(j) == key and _uid(j) != own]
    rows = []
    for other in [*siblings, job]:
        other_snap = snap
        if other is not job:
            pods = state.owners.pods_for(other)
            other_snap = snapshot(other, pods, state.owners.events_for(other, pods), now=state.now)
        record = tracking.attempt_record(other, other_snap)
        namespace = Meta(other).namespace
        # A stopped and resumed attempt had several runs: it started with the first, and used the
        # GPU-seconds of each (the stops recorded the runs they ended; the snapshot counts the current).
        done = history.entries(Meta(other).annotations)
        ended = [e.run for e in done if e.act is history.Act.STOPPED and e.run is not None]
        starts = [r.started_at for r in runs(other_snap, done) if r.started_at is not None]
        rows.append(
            AttemptRow(
                attempt=record.attempt,
                name=record.job_name,
                state=record.state,
                reason=record.reason,
                message=other_snap.message,
                requeues=other_snap.requeue_count,
                queued_at=other_snap.queued_at,
                started_at=min(starts) if starts else None,
                finished_at=other_snap.finished_at,
                exit_codes=dict(record.exit_codes),
                nodes=tuple(sorted({r.node for r in other_snap.replicas if r.node})),
                gpu_seconds=sum(r.gpu_seconds(state.now) for r in ended)
                + (record.gpu_seconds if _current_run(other_snap, done) is not None else 0.0),
                detail_url=job_url(namespace, record.job_name),
            )
        )
    return tuple(sorted(rows, key=lambda r: r.attempt))
