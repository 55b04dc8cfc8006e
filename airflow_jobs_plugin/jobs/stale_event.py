"""When a trigger may hand its job's end to Airflow without racing the deferral's own exit. Pure.

A task that defers ends its worker process, and the executor reports that exit as a success. Airflow
3.3.2's scheduler takes that report for the end of the try it belongs to: when it drains the report only
after the trigger's event has put the task instance back in ``queued`` or ``running`` for the same try, it
fails the resumed try as "killed externally" (airflow-core 3.3.2 ``jobs/scheduler_job_runner.py``,
``process_executor_events``: a task instance still ``scheduled`` with a ``next_method`` is told apart, a
``queued`` or ``running`` one is not unless the executor still holds its key; apache/airflow#66374,
#67287, #72716). The report is drained within a scheduler loop or two of the worker's exit, which follows
the deferral by the supervisor's teardown: seconds, more on a loaded machine.

So a trigger does not fire within ``settle`` seconds of the deferral: a job that ends sooner is reported
``settle`` seconds after the task deferred, by which time the stale report has been drained while the
task instance was still ``deferred`` (a state that report cannot fail). A trigger that starts later than
that (a triggerer restart, a queued job) fires at once. The earlier try's job that a later try finds
SUCCEEDED (usecases/submission.py ``returned_at_once``) remains the backstop when a scheduler is slower
still.
"""

from __future__ import annotations

from datetime import datetime

# The default of [airflow_jobs] resume_settle_seconds: a LocalExecutor or Celery worker's teardown after
# defer() and a scheduler loop to drain it take 1-3 s on an idle machine and stretch with its load.
DEFAULT_SETTLE_SECONDS = 15.0


def settle_wait(deferred_at: str | None, now: datetime, settle_seconds: float) -> float:
    """Seconds a trigger waits before firing its event at ``now``: what is left of ``settle_seconds``
    since the task deferred at ``deferred_at`` (an ISO time with its zone, as the operator records it).

    0 when the deferral time is unknown or unreadable (a trigger built by hand, an older operator's
    kwargs), when the setting is 0 or less, or when the settle has passed. Never more than
    ``settle_seconds``, whatever a clock skew between worker and triggerer says."""
    if settle_seconds <= 0 or not deferred_at:
        return 0.0
    try:
        deferred = datetime.fromisoformat(deferred_at)
    except ValueError:
        return 0.0
    if deferred.tzinfo is None or now.tzinfo is None:
        return 0.0
    left = settle_seconds - (now - deferred).total_seconds()
    return min(max(left, 0.0), settle_seconds)
