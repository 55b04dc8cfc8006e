"""Which live jobs nobody follows any more: the orphan sweep's rule. Pure: no I/O, no Airflow import.

A task that dies after creating its job and before deferring leaves the job on the cluster with no
trigger following it. A retry or a clear reattaches to it (by its task key), but with no retry left
nothing ever does: under a quota pool another process's admission pass admits it and it runs, holding
GPUs until its deadline, its result read by nobody. The sweep (``airflow_jobs_plugin.plugin.sweep``)
reads the task instance each live job was submitted for and asks :func:`judge`; first match wins:

1. a job that finished or is being deleted: keep (nothing holds GPUs for long);
2. a job with no Airflow task on it (submitted by hand or by another tool): keep;
3. a job whose try ran out of its ``execution_timeout`` (:func:`deferral_timed_out`: the database shows
   the try's deferral deadline passed and the try failing or failed for it), in a DAG this Airflow has:
   cancel at once, naming the timeout, so Airflow's retries still run (each a new job). The trigger's
   cleanup asks for this cancel as the deadline passes (jobs/kill_request.py); this rule is for a
   triggerer that died before it could, which would otherwise leave the job running, charged, until
   its own deadline while the next try runs a job of its own;
4. a job younger than the grace period: keep; its task may be between creating it and deferring, and
   a worker that just started a try has not yet reported it running;
5. a job of a DAG this Airflow does not have: keep; another Airflow deployment sharing the namespace
   owns it, and only that deployment can tell whether its task lives;
6. no such task instance (its DAG run was deleted): cancel;
7. a task instance that still follows or will follow the job (running, deferred, waiting for a retry,
   queued or scheduled for its next try, restarting after a clear, or not yet given a state): keep;
8. a task instance that ended less than the grace period ago: keep; the task's own end (a user's mark
   failed runs the trigger's ``on_kill``, which cancels the job itself and names who did it) gets the
   first word;
9. otherwise (success, failed, skipped, upstream_failed, removed, ... for longer than the grace):
   cancel.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from airflow_jobs_plugin.cluster.objects import Meta, as_int
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.timeouts import AIRFLOW_FAIL_METHOD, TIMEOUT_CANCEL_BY

# Airflow's TaskInstanceState values (airflow-core ``airflow/utils/state.py``, 3.3) in which a try of the
# task is running or will run, and so follows (or will reattach to) the task's live job. ``None`` is a
# task instance with no state yet (just created, or cleared); ``awaiting_input`` is a task still running
# that waits for a person.
FOLLOWING_STATES = frozenset(
    {
        "running",
        "deferred",
        "up_for_retry",
        "up_for_reschedule",
        "queued",
        "scheduled",
        "restarting",
        "awaiting_input",
        None,
    }
)
DEFAULT_GRACE = timedelta(minutes=10)


@dataclass(frozen=True)
class TaskRef:
    """The Airflow task instance a job was submitted for."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int = -1

    def __str__(self) -> str:
        mapped = f"[{self.map_index}]" if self.map_index >= 0 else ""
        return f"{self.dag_id}.{self.task_id}{mapped} of run {self.run_id}"


@dataclass(frozen=True)
class JobRecord:
    """What the rule reads of a job: its task, its try, its age and whether it is still live."""

    name: str
    task: TaskRef | None
    try_number: int | None
    created_at: datetime | None
    live: bool


@dataclass(frozen=True)
class TaskRecord:
    """What the rule reads of a task instance in Airflow's metadata database."""

    state: str | None
    try_number: int
    end_date: datetime | None = None
    # The deadline of the try's deferral (defer(timeout=), Airflow's ``trigger_timeout`` column) and the
    # method its resume calls: ``__fail__`` once the scheduler failed the deferral (jobs/timeouts.py).
    trigger_timeout: datetime | None = None
    next_method: str | None = None


@dataclass(frozen=True)
class Verdict:
    cancel: bool
    reason: str
    # Who a cancel names, where not the caller itself: a timeout's cancel names Airflow's execution_timeout
    # so the task's retries still run (adoption.cancelled_in_run).
    by: str | None = None


def deferral_timed_out(job: JobRecord, task: TaskRecord | None, now: datetime | None) -> bool:
    """True if the database says the try that submitted ``job`` ran out of its deferral's time.

    Only the job's own try: a later try defers with a deadline of its own, which says nothing of this one.
    A try that resumed on a fired trigger keeps its past deadline too, but its job has ended (the trigger
    fires only then), which the callers' first rule answers; one resumed with ``__fail__`` and still
    scheduled, queued or running can only be failing its deferral (jobs/timeouts.py)."""
    if task is None or now is None or task.trigger_timeout is None or task.trigger_timeout > now:
        return False
    if job.try_number is None or task.try_number != job.try_number:
        return False
    if task.state in {"scheduled", "queued", "running"}:
        return task.next_method == AIRFLOW_FAIL_METHOD
    return task.state in {"up_for_retry", "failed"}


def timeout_verdict(job: JobRecord, task: TaskRecord) -> Verdict:
    """The cancel of a job whose try ran out of its time (:func:`deferral_timed_out` said so)."""
    deadline = task.trigger_timeout.isoformat(timespec="seconds") if task.trigger_timeout else "?"
    return Verdict(
        True,
        f"try {job.try_number} of task instance {job.task} ran out of its execution_timeout (its "
        f"deferral's deadline {deadline} passed; now {task.state})",
        by=TIMEOUT_CANCEL_BY,
    )


def job_record(job: Mapping[str, Any], *, finished: bool) -> JobRecord:
    """The record of a Job or MPIJob, from the annotations the operator writes (exact Airflow ids)."""
    meta = Meta(job)
    annotations = meta.annotations
    dag_id, task_id, run_id = (annotations.get(k) for k in (labels.DAG_ID, labels.TASK_ID, labels.RUN_ID))
    task = None
    if dag_id and task_id and run_id:
        map_index = as_int(annotations.get(labels.MAP_INDEX))
        task = TaskRef(dag_id, task_id, run_id, -1 if map_index is None else map_index)
    return JobRecord(
        name=meta.name,
        task=task,
        try_number=as_int(annotations.get(labels.TRY_NUMBER)),
        created_at=meta.created_at,
        live=not finished and not meta.deleting,
    )


def judge(
    job: JobRecord,
    task: TaskRecord | None,
    *,
    dag_known: bool,
    now: datetime,
    grace: timedelta = DEFAULT_GRACE,
) -> Verdict:
    """Cancel or keep ``job`` (see the module's rules); ``task`` is ``None`` when no such instance exists."""
    if not job.live:
        return Verdict(False, "finished or being deleted")
    if job.task is None:
        return Verdict(False, "not submitted by an Airflow task")
    if dag_known and task is not None and deferral_timed_out(job, task, now):
        return timeout_verdict(job, task)
    if job.created_at is None or now - job.created_at < grace:
        return Verdict(False, f"younger than {_span(grace)}: its task may not have deferred yet")
    if not dag_known:
        return Verdict(False, f"DAG {job.task.dag_id} is not in this Airflow: another deployment may own it")
    if task is None:
        return Verdict(True, f"task instance {job.task} no longer exists")
    if task.state in FOLLOWING_STATES:
        return Verdict(False, f"task instance is {task.state or 'waiting for a state'}")
    if task.end_date is not None and now - task.end_date < grace:
        return Verdict(False, f"task instance ended {_span(now - task.end_date)} ago ({task.state})")
    ended = f" since {task.end_date.isoformat(timespec='seconds')}" if task.end_date else ""
    return Verdict(
        True,
        f"task instance {job.task} is {task.state}{ended} (try {task.try_number}): no try follows the job",
    )


def _span(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"
