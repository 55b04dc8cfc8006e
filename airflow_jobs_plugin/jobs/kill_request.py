"""A kill of an Airflow task carried out on its job: which kill requests are honoured. Pure: no I/O.

When a user marks a deferred task failed or success, or clears it, Airflow ends its trigger and calls the
trigger's ``on_kill`` (apache-airflow 3.3, ``BaseTrigger.on_kill``) in the triggerer. DAG authors run code
in the triggerer (airflow-core ``docs/security/security_model.rst``), so whatever the triggerer may do to
a job any DAG may do to any job: it may not cancel. Its ``on_kill`` only asks, by the label
``airflow-jobs.io/kill-requested`` on the job; the GPU Jobs app in Airflow's API server, where no DAG code
runs and Airflow's metadata database is read, answers. A request is a hint, never a proof: it is honoured
only when the database says the job's task instance was killed, so a request a DAG wrote on another
tenant's job cancels nothing. First match wins:

1. a job that finished or is being deleted: nothing to do;
2. a job no Airflow task submitted: not this rule's (its requester is not its task);
3. the job's DAG is not in this Airflow: another deployment answers;
4. no such task instance (its DAG run was deleted): cancel;
5. the job's try ran out of its time: the try's deferral deadline (``trigger_timeout``, from the
   operator's ``defer(timeout=)``: jobs/timeouts.py) has passed and the task instance is no longer
   deferred on it: the scheduler failed the deferral (``next_method`` ``__fail__``) or the try already
   ended or waits for its retry: cancel, naming the timeout. Airflow 3.3's triggerer does not call
   ``on_kill`` for a trigger it cancels past its timeout (airflow-core 3.3 ``jobs/triggerer_job_runner.py``
   ``run_trigger``: "For timeout, raise immediately without calling on_kill()"): the trigger's
   ``cleanup`` asks instead;
6. a task instance that ended (success, failed, skipped, upstream_failed, removed: marked, or ended
   otherwise while its trigger followed the job): cancel. A run past its ``dagrun_timeout`` sets its
   unfinished task instances skipped (airflow-core 3.3 ``jobs/scheduler_job_runner.py``,
   ``_schedule_dag_run``), its deferred ones included, and their triggers are cancelled with ``on_kill``;
7. a task instance cleared since (no state, restarting, or a later try scheduled or queued): cancel, so
   the new run of the task submits a job of its own rather than follow the old one;
8. otherwise (deferred on the job, running, waiting for a retry that will reattach): keep.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from airflow_jobs_plugin.jobs.orphans import (
    JobRecord,
    TaskRecord,
    Verdict,
    deferral_timed_out,
    timeout_verdict,
)

# Who a kill's cancel names (the task log's "cancelled by ..."): Airflow does not tell which user killed.
KILLED_BY = "an Airflow user (mark failed, mark success or clear)"
# A skipped task instance was skipped by its run's dagrun_timeout or by a person: the database does not say.
SKIPPED_BY = "Airflow (the task instance was set skipped: its DAG run's dagrun_timeout, or a user)"
# Airflow's TaskInstanceState values (airflow-core ``airflow/utils/state.py``, 3.3) of a task instance
# that ended: a mark failed or mark success sets one of the first two.
ENDED_STATES = frozenset({"success", "failed", "skipped", "upstream_failed", "removed"})
# A clear leaves the task instance with no state (or restarting, where it ran), and the scheduler then
# schedules and queues its next try.
CLEARED_STATES = frozenset({None, "restarting"})
NEXT_TRY_STATES = frozenset({"scheduled", "queued"})


@dataclass(frozen=True)
class KillRequest:
    """A kill request as the job carries it: the try its trigger followed (0 where it did not say)."""

    try_number: int


def judge_kill(
    job: JobRecord, task: TaskRecord | None, *, dag_known: bool, now: datetime | None = None
) -> Verdict:
    """Cancel or keep a job whose trigger asked for it to be killed (the module's rules), a cancel naming
    who it is for (the job's page, its events, the task log). Without ``now`` no deferral is judged
    timed out."""
    if not job.live:
        return Verdict(False, "finished or being deleted")
    if job.task is None:
        return Verdict(False, "not submitted by an Airflow task")
    if not dag_known:
        return Verdict(False, f"DAG {job.task.dag_id} is not in this Airflow: another deployment may own it")
    if task is None:
        return Verdict(True, f"task instance {job.task} no longer exists", by=KILLED_BY)
    if deferral_timed_out(job, task, now):
        return timeout_verdict(job, task)
    if task.state in ENDED_STATES:
        by = SKIPPED_BY if task.state == "skipped" else KILLED_BY
        return Verdict(True, f"task instance {job.task} was set {task.state}", by=by)
    later = job.try_number is not None and task.try_number > job.try_number
    if task.state in CLEARED_STATES or (task.state in NEXT_TRY_STATES and later):
        return Verdict(
            True, f"task instance {job.task} was cleared (now {task.state or 'no state'})", by=KILLED_BY
        )
    return Verdict(False, f"task instance {job.task} is {task.state}: it still follows the job")


def request_of(value: str | None) -> KillRequest | None:
    """The request a label value carries (``None``: no request)."""
    if value is None:
        return None
    return KillRequest(int(value) if value.isdigit() else 0)
