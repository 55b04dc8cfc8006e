"""Airflow's timeouts on a deferred JobOperator task: what is left of them, and what their end says. Pure.

Airflow 3.3 runs ``execution_timeout`` as an alarm around ``execute()`` on the worker only
(task-sdk 1.3 ``airflow/sdk/execution_time/task_runner.py``, ``_run_execute_callable``, marked "TODO:
handle timeout in case of deferral"). Once the task defers, the only clock is the one passed to
``defer(timeout=)``: it is stored as the task instance's ``trigger_timeout`` (airflow-core 3.3
``api_fastapi/execution_api/routes/task_instances.py``, the deferred branch of ``ti_update_state``), and
the scheduler's ``check_trigger_timeouts`` (``jobs/scheduler_job_runner.py``, every
``[scheduler] trigger_timeout_check_interval`` seconds, 15 by default) moves a task instance deferred past
it to ``scheduled`` with ``next_method="__fail__"``; the worker that resumes it raises
``TaskDeferralTimeout`` (task-sdk ``BaseOperator.resume_execution``), a failure Airflow retries as any
other. So the operator passes what the try has left of its ``execution_timeout``: the try's clock starts
when the worker starts it, and keeps running while the job waits in its queue and while it runs.
"""

from __future__ import annotations

from datetime import datetime, timedelta

# Who a cancel names when the job's try ran out of time (the job's page, its events, the task log): not a
# person's cancel, so the retries Airflow has left still run (adoption.cancelled_in_run).
TIMEOUT_CANCEL_BY = "Airflow: the task's execution_timeout (its deferral timed out)"

# next_method and its error as the scheduler writes them on a task instance whose deferral timed out
# (airflow-core 3.3 ``models/trigger.py`` TRIGGER_FAIL_REPR, TriggerFailureReason.TRIGGER_TIMEOUT).
AIRFLOW_FAIL_METHOD = "__fail__"
AIRFLOW_TRIGGER_TIMEOUT = "Trigger timeout"


def remaining_timeout(
    execution_timeout: timedelta | None, started: datetime | None, now: datetime
) -> timedelta | None:
    """What is left of ``execution_timeout`` at ``now`` for a try the worker started at ``started``:
    the timeout to defer with (None: the task has no execution_timeout, and the deferral none).

    Never negative: a try already past its timeout defers with none left, and the scheduler's next check
    fails it. A try whose start is unknown is given the whole timeout."""
    if execution_timeout is None:
        return None
    if not isinstance(execution_timeout, timedelta):
        raise TypeError(
            f"execution_timeout must be a datetime.timedelta or None, got {type(execution_timeout).__name__}"
        )
    if execution_timeout <= timedelta(0):
        raise ValueError(f"execution_timeout must be positive, got {execution_timeout}")
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    if started is None:
        return execution_timeout
    if started.tzinfo is None:
        raise ValueError("started (the try's start_date) must be timezone-aware")
    spent = max(now - started, timedelta(0))
    return max(execution_timeout - spent, timedelta(0))


def timed_out(next_method: str | None, next_kwargs: object) -> bool:
    """True if a resumed try is Airflow failing its deferral for the timeout (not a trigger's error)."""
    if next_method != AIRFLOW_FAIL_METHOD or not isinstance(next_kwargs, dict):
        return False
    # The scheduler stores the reason as the enum's value: it reads back as the string.
    return (
        str(getattr(next_kwargs.get("error"), "value", next_kwargs.get("error"))) == AIRFLOW_TRIGGER_TIMEOUT
    )


def timeout_message(
    *,
    execution_timeout: timedelta | None,
    job: str,
    kind: str,
    namespace: str,
    try_number: int,
) -> str:
    """The task's last words when its deferral timed out: the timeout, the job, and what becomes of it."""
    limit = (
        f"execution_timeout ({execution_timeout})" if execution_timeout is not None else "deferral timeout"
    )
    what = f"{kind or 'job'} {namespace}/{job}" if job else "its job"
    return (
        f"try {try_number} ran out of its {limit} while {what} was queued or running: the job is "
        f"cancelled (its pods deleted and its GPUs released within seconds); Airflow's retries, if any are "
        f"left, submit a new job through the queue"
    )
