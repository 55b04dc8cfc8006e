"""The JSON API's response models: what ``/airflow-jobs/api/...`` and ``airflow-jobs ... --json`` return.

The view models (:mod:`airflow_jobs_plugin.readmodel.views`, :mod:`airflow_jobs_plugin.readmodel.nodes`) are
shared with the page and the CLI tables; these models are their JSON form, with typed values only:
times are ISO 8601 in UTC (``2026-03-02T09:10:00Z``) or ``null``, durations are numbers of seconds in
fields ending in ``_seconds``, counts are integers, and an absent value is ``null``, never ``""`` or
kubectl's ``<none>``. How a person reads them (``19s``, ``1/2``) is the page's and the CLI table's
business (``readmodel/display.py``). FastAPI publishes these models in the app's ``/openapi.json``.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, create_model

from airflow_jobs_plugin.jobs import action_rules
from airflow_jobs_plugin.lifecycle import Health, JobSnapshot, JobState, Reason, ReplicaStatus
from airflow_jobs_plugin.lifecycle.replicas import NO_POD
from airflow_jobs_plugin.readmodel import fields, nodes, views


def _utc(moment: datetime | None) -> datetime | None:
    if moment is None:
        return None
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment.astimezone(timezone.utc)


# Every time the API returns goes through this: a naive time would lose its zone in JSON.
Time = Annotated[datetime, AfterValidator(_utc)]
ActionName = Literal["stop", "resume", "cancel"]
_ACTIONS: dict[str, ActionName] = {"stop": "stop", "resume": "resume", "cancel": "cancel"}
_STOP_OR_RESUME: dict[str, Literal["stop", "resume"]] = {"stop": "stop", "resume": "resume"}


def _text(value: str | None) -> str | None:
    """An absent text is ``null`` in the API, not the empty string or kubectl's ``<none>``."""
    return None if value is None or value == "" or value == NO_POD else value


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


M = TypeVar("M", bound=Model)


class Problem(Model):
    """An error: FastAPI's ``{"detail": ...}``."""

    detail: str = Field(description="what went wrong and, where there is one, the fix")


# --------------------------------------------------------------------------------------------------
# Overview: pools, queues, jobs, charts
# --------------------------------------------------------------------------------------------------


def _json_type(kind: Any) -> Any:
    """A view field's type as the JSON model declares it: every time goes through :data:`Time`, a
    view's tuples are JSON lists and its mappings JSON objects."""
    if kind is datetime:
        return Time
    if kind == datetime | None:
        return Time | None
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return list[_MODELS.get(args[0], args[0])]  # type: ignore[misc]
    if origin is Mapping:
        return dict[args[0], args[1]]  # type: ignore[valid-type]
    return kind


def _converter(field: fields.JsonField) -> Callable[[Any], Any] | None:
    """What turns the view's value of ``field`` into its JSON value (None: nothing), chosen once per
    field rather than asked of every value: the job list converts thousands of rows."""
    json = field.json
    steps: list[Callable[[Any], Any]] = []
    if json.blank_is_null:
        steps.append(_text)
    if json.digits is not None:
        digits = json.digits
        steps.append(lambda v: None if v is None else round(v, digits))
    elif json.as_type is not None:
        as_type = json.as_type
        steps.append(lambda v: None if v is None else as_type(v))
    origin, args = typing.get_origin(field.type), typing.get_args(field.type)
    if origin is tuple:
        nested = _MODELS.get(args[0])
        steps.append(list if nested is None else lambda v: [_from_view(nested, item) for item in v])
    elif origin is Mapping:
        steps.append(dict)
    if not steps:
        return None
    if len(steps) == 1:
        return steps[0]

    def in_turn(value: Any) -> Any:
        for step in steps:
            value = step(value)
        return value

    return in_turn


_CONVERTERS: dict[type, tuple[tuple[str, Callable[[Any], Any] | None], ...]] = {}


def _converters(view: type) -> tuple[tuple[str, Callable[[Any], Any] | None], ...]:
    if view not in _CONVERTERS:
        _CONVERTERS[view] = tuple((f.name, _converter(f)) for f in fields.json_fields(view))
    return _CONVERTERS[view]


# The model made of each view, so that a view holding others (a node's holders) holds their models.
_MODELS: dict[type, type[Model]] = {}


def _model_of(view: type, name: str, doc: str) -> type[Model]:
    """The JSON model of ``view``, from the fields it declares with a :class:`fields.Json` (in order,
    then its JSON properties): a field's name, type and description are written once, on the view."""
    declared: dict[str, Any] = {
        f.name: (_json_type(f.type), Field(description=f.json.description)) for f in fields.json_fields(view)
    }
    model = create_model(name, __base__=Model, __doc__=doc, __module__=__name__, **declared)
    _MODELS[view] = model
    return model


def _from_view(model: type[M], view: Any) -> M:
    """``view`` as ``model`` (made by :func:`_model_of` from ``view``'s class)."""
    values = {}
    for name, convert in _converters(type(view)):
        value = getattr(view, name)
        values[name] = value if convert is None else convert(value)
    return model(**values)


if TYPE_CHECKING:  # a model made at import time is not a type mypy can check against; the base is
    Job = Model
    QueueEntry = Model
    UsagePoint = Model
    Phase = Model
    TimelineEntry = Model
    Replica = Model
    Event = Model
    LogTail = Model
    Attempt = Model
    NodeHolder = Model
    Node = Model
    DeviceTotal = Model
    Nodes = Model
    UserShare = Model
    Device = Model
    Pool = Model
    GroupQueue = Model
    UsageChart = Model
else:
    Job = _model_of(views.JobRow, "Job", "One GPU job: a line of the job list, and the head of a job's page.")
    QueueEntry = _model_of(views.QueueEntry, "QueueEntry", "A waiting job at its place in its group's queue.")
    UsagePoint = _model_of(
        views.UsagePoint, "UsagePoint", "From ``at`` until the next point, the group held ``gpus`` GPUs."
    )
    Phase = _model_of(
        views.Phase, "Phase", "A stretch of the job's life in one state, drawn on the timeline."
    )
    TimelineEntry = _model_of(
        views.TimelineEntry,
        "TimelineEntry",
        "A dated fact: a state entered, or a condition the controller set.",
    )
    Replica = _model_of(
        views.ReplicaRow, "Replica", "A replica and its current pod: the facts behind kubectl's columns."
    )
    Event = _model_of(views.EventRow, "Event", "An event about the job or one of its pods.")
    LogTail = _model_of(views.LogTail, "LogTail", "The last lines of one replica's log.")
    Attempt = _model_of(views.AttemptRow, "Attempt", "One attempt of the job's task try.")
    UserShare = _model_of(views.UserRow, "UserShare", "One user's share of a group's quota.")
    Device = _model_of(
        views.DeviceRow, "Device", "A group's quota and use of a GPU device other than whole NVIDIA GPUs."
    )
    Pool = _model_of(views.PoolRow, "Pool", "A group's quota pool.")
    GroupQueue = _model_of(views.GroupQueue, "GroupQueue", "A group's queue, in order.")
    UsageChart = _model_of(views.UsageChart, "UsageChart", "A group's GPUs held over time, as steps.")
    NodeHolder = _model_of(nodes.NodeHolder, "NodeHolder", "A job (or another pod) holding GPUs on a node.")
    Node = _model_of(
        nodes.NodeRow,
        "Node",
        "One GPU device of one node (a node offering several devices has a row for each).",
    )
    DeviceTotal = _model_of(nodes.DeviceTotal, "DeviceTotal", "One GPU device over every node.")
    Nodes = _model_of(
        nodes.NodeView, "Nodes", "Every node with GPUs, a row per device, and the totals per device."
    )


class Overview(Model):
    """Pools, queues, one page of jobs and the usage charts."""

    now: Time = Field(description="when the cluster was read")
    pools: list[Pool] = Field(description="every group of the policy, and any group holding GPUs")
    queues: list[GroupQueue] = Field(description="each group's waiting jobs the reader may see")
    jobs: list[Job] = Field(description="the page of jobs asked for (sort, offset, limit)")
    charts: list[UsageChart] = Field(description="one GPU usage chart per group")
    problems: list[str] = Field(description="what could not be read: no policy, unreadable ledger entries")
    jobs_total: int | None = Field(
        description="jobs matching the filters, on every page; null when not counted (`airflow-jobs "
        "status --json` in the default order reads only the newest jobs: see jobs_more)"
    )
    jobs_more: bool = Field(description="whether jobs follow this page (next page: offset + limit)")
    jobs_offset: int = Field(description="jobs skipped before this page")
    jobs_limit: int = Field(description="most jobs on a page")


# --------------------------------------------------------------------------------------------------
# A job's page
# --------------------------------------------------------------------------------------------------


class SnapshotReplica(Model):
    """A replica as the lifecycle snapshot reads it."""

    role: str = Field(description="launcher or worker")
    index: int = Field(description="the replica's index within its role")
    name: str = Field(description="launcher, or <role>-<index>")
    pod: str | None = Field(description="its current pod; null before it has one")
    status: str | None = Field(description="kubectl's STATUS of the pod; null without a pod")
    ready_containers: int | None = Field(description="ready containers of the pod (kubectl READY)")
    containers: int | None = Field(description="containers counted by kubectl READY")
    restarts: int = Field(description="container restarts of the pod")
    node: str | None = Field(description="the node the pod is bound to")
    health: Health = Field(description="what the pod is doing, coarser than its status")
    reason: Reason | None = Field(description="the product's reading of a problem; null when none")
    exit_code: int | None = Field(description="the exit code that explains a failure")
    message: str | None = Field(description="the cluster's own words about the problem")
    since: Time | None = Field(description="since when the pod has been where it is now")


class TaskRef(Model):
    """The Airflow task instance try that submitted the job."""

    dag_id: str = Field(description="the DAG")
    task_id: str = Field(description="the task")
    run_id: str = Field(description="the DAG run")
    map_index: int = Field(description="-1 for an unmapped task")
    try_number: int | None = Field(description="the task's try number")


class Snapshot(Model):
    """Everything the lifecycle says about the job at one moment (``JobSnapshot``)."""

    name: str = Field(description="the job's name")
    namespace: str = Field(description="the job's namespace")
    kind: str = Field(description="Job or MPIJob")
    state: JobState = Field(description="where the job is in its life")
    reason: Reason = Field(description="why it is in that state")
    message: str | None = Field(description="the cluster's or the pool's words about the state")
    replicas: list[SnapshotReplica] = Field(description="the launcher, then the workers")
    attempt: int = Field(description="the product's submission attempt, from 1")
    requeue_count: int = Field(description="how often the pool sent it back to the queue")
    queue_position: int | None = Field(description="place in its queue (1 = next) while it waits")
    pod_failures: int = Field(description="pods that failed within this attempt")
    exit_code: int | None = Field(description="the exit code that explains a failure, if any")
    gpus: int = Field(description="GPUs the job asks for")
    gpu_seconds: float = Field(description="GPU-seconds from admission to release (or observed_at)")
    queued_at: Time | None = Field(description="when it joined its group's queue")
    admitted_at: Time | None = Field(description="when the pool reserved its GPUs")
    started_at: Time | None = Field(description="when its first container started")
    finished_at: Time | None = Field(description="when it reached its final state")
    observed_at: Time | None = Field(description="when the objects were read")
    last_events: list[str] = Field(description="the newest Warning events about its pods, newest last")
    task: TaskRef | None = Field(description="the task instance try that submitted it")
    created_at: Time | None = Field(description="when the job object was created")
    is_terminal: bool = Field(description="SUCCEEDED, FAILED or CANCELLED: it will not change any more")
    holds_gpus: bool = Field(description="whether it holds GPUs now")


class JobDetail(Model):
    """A job's page: the job, its lifecycle, replicas, events, logs and what may be done to it."""

    job: Job = Field(description="the job's line")
    snapshot: Snapshot = Field(description="the lifecycle snapshot")
    phases: list[Phase] = Field(description="the state timeline, first to last")
    timeline: list[TimelineEntry] = Field(description="dated facts, oldest first")
    replicas: list[Replica] = Field(description="the launcher, then the workers")
    events: list[Event] = Field(description="oldest first")
    logs: list[LogTail] = Field(description="by rank, the launcher first")
    actions: list[ActionName] = Field(description="the actions that apply now, for a user who may act")
    attempts: list[Attempt] = Field(
        description="every attempt of the task try the cluster holds, first to last"
    )


# --------------------------------------------------------------------------------------------------
# Nodes and actions
# --------------------------------------------------------------------------------------------------


class CancelResult(Model):
    """What a cancel did."""

    namespace: str = Field(description="the job's namespace")
    name: str = Field(description="the attempt it ruled on (the task try's newest)")
    kind: str = Field(description="Job or MPIJob")
    deleted: bool = Field(description="whether the job object was deleted (a queued MPIJob or Kueue job)")
    ended: bool = Field(
        description="whether it was ended through its controller: it stays listed, CANCELLED, until its TTL"
    )
    already_finished: bool = Field(description="the job had already finished: nothing was done")
    message: str | None = Field(description="the one-line answer")


class ActionResult(Model):
    """What a stop or a resume did."""

    action: Literal["stop", "resume"] = Field(description="which action")
    namespace: str = Field(description="the job's namespace")
    name: str = Field(description="the attempt it acted on (the task try's newest)")
    kind: str = Field(description="Job or MPIJob")
    done: bool = Field(description="false when the action did not apply; message says why")
    message: str = Field(description="the one-line answer")


# --------------------------------------------------------------------------------------------------
# From view models
# --------------------------------------------------------------------------------------------------


def job(row: views.JobRow) -> Job:
    return _from_view(Job, row)


def jobs(rows: Iterable[views.JobRow]) -> list[Job]:
    return [job(r) for r in rows]


def pools(rows: Iterable[views.PoolRow]) -> list[Pool]:
    return [_from_view(Pool, p) for p in rows]


def queues(rows: Iterable[views.GroupQueue]) -> list[GroupQueue]:
    return [_from_view(GroupQueue, q) for q in rows]


def charts(rows: Iterable[views.UsageChart]) -> list[UsageChart]:
    return [_from_view(UsageChart, c) for c in rows]


def overview(ov: views.Overview, *, total: int | None, offset: int, limit: int, more: bool) -> Overview:
    """``ov`` (already narrowed and paged) with the size of the whole filtered job list (None: not
    counted) and whether jobs follow the page."""
    return Overview(
        now=ov.now,
        pools=pools(ov.pools),
        queues=queues(ov.queues),
        jobs=jobs(ov.jobs),
        charts=charts(ov.charts),
        problems=list(ov.problems),
        jobs_total=total,
        jobs_more=more,
        jobs_offset=offset,
        jobs_limit=limit,
    )


def _snapshot_replica(r: ReplicaStatus) -> SnapshotReplica:
    ready, containers = views.ready_counts(r.ready)
    return SnapshotReplica(
        role=r.role,
        index=r.index,
        name=r.name,
        pod=r.pod,
        status=_text(r.status),
        ready_containers=ready,
        containers=containers,
        restarts=r.restarts,
        node=r.node,
        health=r.health,
        reason=r.reason,
        exit_code=r.exit_code,
        message=_text(r.message),
        since=r.since,
    )


def snapshot(s: JobSnapshot) -> Snapshot:
    task = s.task
    return Snapshot(
        name=s.name,
        namespace=s.namespace,
        kind=s.kind,
        state=s.state,
        reason=s.reason,
        message=_text(s.message),
        replicas=[_snapshot_replica(r) for r in s.replicas],
        attempt=s.attempt,
        requeue_count=s.requeue_count,
        queue_position=s.queue_position,
        pod_failures=s.pod_failures,
        exit_code=s.exit_code,
        gpus=s.gpus,
        gpu_seconds=s.gpu_seconds,
        queued_at=s.queued_at,
        admitted_at=s.admitted_at,
        started_at=s.started_at,
        finished_at=s.finished_at,
        observed_at=s.observed_at,
        last_events=list(s.last_events),
        task=None
        if task is None
        else TaskRef(
            dag_id=task.dag_id,
            task_id=task.task_id,
            run_id=task.run_id,
            map_index=task.map_index,
            try_number=task.try_number,
        ),
        created_at=s.created_at,
        is_terminal=s.is_terminal,
        holds_gpus=s.holds_gpus,
    )


def job_detail(d: views.JobDetail) -> JobDetail:
    return JobDetail(
        job=job(d.job),
        snapshot=snapshot(d.snapshot),
        phases=[_from_view(Phase, p) for p in d.phases],
        timeline=[_from_view(TimelineEntry, e) for e in d.timeline],
        replicas=[_from_view(Replica, r) for r in d.replicas],
        events=[_from_view(Event, e) for e in d.events],
        logs=[_from_view(LogTail, t) for t in d.logs],
        actions=[_ACTIONS[a] for a in d.actions],
        attempts=[_from_view(Attempt, a) for a in d.attempts],
    )


def node_view(v: nodes.NodeView) -> Nodes:
    return _from_view(Nodes, v)


def cancel_result(o: action_rules.CancelOutcome) -> CancelResult:
    return CancelResult(
        namespace=o.namespace,
        name=o.name,
        kind=o.kind,
        deleted=o.deleted,
        ended=o.ended,
        already_finished=o.already_finished,
        message=_text(o.message),
    )


def action_result(o: action_rules.ActionOutcome) -> ActionResult:
    return ActionResult(
        action=_STOP_OR_RESUME[o.action],
        namespace=o.namespace,
        name=o.name,
        kind=o.kind,
        done=o.done,
        message=o.message,
    )


def outcome(o: action_rules.CancelOutcome | action_rules.ActionOutcome) -> CancelResult | ActionResult:
    """The JSON of a cancel, stop or resume."""
    return cancel_result(o) if isinstance(o, action_rules.CancelOutcome) else action_result(o)
