"""The JSON API's response models: what ``/airflow-jobs/api/...`` and ``airflow-jobs ... --json`` return.

Each model is derived from the dataclass it returns: the view models
(:mod:`airflow_jobs_plugin.readmodel.views`, :mod:`airflow_jobs_plugin.readmodel.nodes`), shared with the
page and the CLI tables, the lifecycle's ``JobSnapshot`` and an action's outcome, each of which declares
its fields' JSON form (:mod:`airflow_jobs_plugin.json_fields`). The models are their JSON form, with
typed values only:
times are ISO 8601 in UTC (``2026-03-02T09:10:00Z``) or ``null``, durations are numbers of seconds in
fields ending in ``_seconds``, counts are integers, and an absent value is ``null``, never ``""`` or
kubectl's ``<none>``. How a person reads them (``19s``, ``1/2``) is the page's and the CLI table's
business (``readmodel/display.py``). FastAPI publishes these models in the app's ``/openapi.json``.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, create_model

from airflow_jobs_plugin import json_fields
from airflow_jobs_plugin.jobs import action_rules
from airflow_jobs_plugin.lifecycle import JobSnapshot, ReplicaStatus
from airflow_jobs_plugin.lifecycle.replicas import NO_POD
from airflow_jobs_plugin.lifecycle.snapshot import TaskRef as SubmittingTask
from airflow_jobs_plugin.readmodel import nodes, views


def _utc(moment: datetime | None) -> datetime | None:
    if moment is None:
        return None
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment.astimezone(timezone.utc)


# Every time the API returns goes through this: a naive time would lose its zone in JSON.
Time = Annotated[datetime, AfterValidator(_utc)]


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
# The models, derived from the dataclasses' declarations
# --------------------------------------------------------------------------------------------------


def _nested(kind: Any) -> tuple[type[Model] | None, bool]:
    """The model of a dataclass ``kind`` holds (None: it holds none), and whether it may be None."""
    if kind in _MODELS:
        return _MODELS[kind], False
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        if len(args) == 1 and args[0] in _MODELS:
            return _MODELS[args[0]], True
    return None, False


def _json_type(kind: Any) -> Any:
    """A field's type as the JSON model declares it: every time goes through :data:`Time`, a dataclass
    the JSON carries is its model, tuples are JSON lists and mappings JSON objects."""
    if kind is datetime:
        return Time
    if kind == datetime | None:
        return Time | None
    model, optional = _nested(kind)
    if model is not None:
        return model | None if optional else model
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return list[_MODELS.get(args[0], args[0])]  # type: ignore[misc]
    if origin is Mapping:
        return dict[args[0], args[1]]  # type: ignore[valid-type]
    return kind


def _converter(field: json_fields.JsonField) -> Callable[[Any], Any] | None:
    """What turns the dataclass's value of ``field`` into its JSON value (None: nothing), chosen once
    per field rather than asked of every value: the job list converts thousands of rows."""
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
    model, optional = _nested(field.type)
    origin, args = typing.get_origin(field.type), typing.get_args(field.type)
    if model is not None:
        held = model
        steps.append(
            (lambda v: None if v is None else _from_view(held, v))
            if optional
            else (lambda v: _from_view(held, v))
        )
    elif origin is tuple:
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
        _CONVERTERS[view] = tuple((f.name, _converter(f)) for f in json_fields.json_fields(view))
    return _CONVERTERS[view]


# The model made of each dataclass, so that a dataclass holding others (a node's holders, a job page's
# snapshot) holds their models. Filled in order: a model is made after the models it holds.
_MODELS: dict[type, type[Model]] = {}


def _model_of(view: type, name: str, doc: str) -> type[Model]:
    """The JSON model of ``view``, from the fields it declares with a :class:`json_fields.Json` (in
    order, then its JSON properties): a field's name, type and description are written once, on the
    dataclass."""
    declared: dict[str, Any] = {
        f.name: (_json_type(f.type), Field(description=f.json.description))
        for f in json_fields.json_fields(view)
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


if TYPE_CHECKING:
    # A model made at run time is no type a checker can read: it reads the models' stub, generated
    # from the models below by scripts/schema-stub; tests/ui/test_schema_stub.py fails when it differs.
    from airflow_jobs_plugin.readmodel.schema_models import (
        ActionResult,
        Attempt,
        CancelResult,
        Device,
        DeviceTotal,
        Event,
        GroupQueue,
        Job,
        JobDetail,
        LogTail,
        Node,
        NodeHolder,
        Nodes,
        Overview,
        Phase,
        Pool,
        QueueEntry,
        Replica,
        Snapshot,
        SnapshotReplica,
        TaskRef,
        TimelineEntry,
        UsageChart,
        UsagePoint,
        UserShare,
    )
else:  # a model follows every model it holds
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
    Overview = _model_of(
        views.PagedOverview, "Overview", "Pools, queues, one page of jobs and the usage charts."
    )
    SnapshotReplica = _model_of(
        ReplicaStatus, "SnapshotReplica", "A replica as the lifecycle snapshot reads it."
    )
    TaskRef = _model_of(SubmittingTask, "TaskRef", "The Airflow task instance try that submitted the job.")
    Snapshot = _model_of(
        JobSnapshot,
        "Snapshot",
        "Everything the lifecycle says about the job at one moment (``JobSnapshot``).",
    )
    JobDetail = _model_of(
        views.JobDetail,
        "JobDetail",
        "A job's page: the job, its lifecycle, replicas, events, logs and what may be done to it.",
    )
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
    CancelResult = _model_of(action_rules.CancelOutcome, "CancelResult", "What a cancel did.")
    ActionResult = _model_of(action_rules.ActionOutcome, "ActionResult", "What a stop or a resume did.")


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
    return _from_view(
        Overview, views.PagedOverview.of(ov, total=total, offset=offset, limit=limit, more=more)
    )


def snapshot(s: JobSnapshot) -> Snapshot:
    return _from_view(Snapshot, s)


def job_detail(d: views.JobDetail) -> JobDetail:
    return _from_view(JobDetail, d)


def node_view(v: nodes.NodeView) -> Nodes:
    return _from_view(Nodes, v)


def cancel_result(o: action_rules.CancelOutcome) -> CancelResult:
    return _from_view(CancelResult, o)


def action_result(o: action_rules.ActionOutcome) -> ActionResult:
    return _from_view(ActionResult, o)


def outcome(o: action_rules.CancelOutcome | action_rules.ActionOutcome) -> CancelResult | ActionResult:
    """The JSON of a cancel, stop or resume."""
    return cancel_result(o) if isinstance(o, action_rules.CancelOutcome) else action_result(o)
