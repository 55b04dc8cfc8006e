"""What a finished job means for its Airflow task: the XCom summary, or the error to raise. Pure.

Two kinds of failure leave the trigger. Some say the job can never succeed as submitted (the image
does not exist, the job can never fit the quota, an exit code the author declared fatal): Airflow must
not retry the task, so the operator raises ``AirflowFailException``. The rest (a training error,
attempts used up on a flaky node) are ordinary failures the DAG's own ``retries`` may retry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Product verdicts that no retry of the same task can cure (pod failures carry their own class).
FATAL_VERDICTS = frozenset({"OverQuota", "Inadmissible", "Cancelled"})


def is_fatal(event: Mapping[str, Any]) -> bool:
    """True if Airflow should not retry the task at all: the failure class is fatal (an invalid or
    missing image, ContainerCannotRun, OOMKilled, a non-zero exit not declared retryable), or the
    product itself ruled the job can never run as submitted."""
    if event.get("failure_class") == "fatal":
        return True
    return str(event.get("reason") or "") in FATAL_VERDICTS


def same_run_of_task(earlier_try: int, *, try_number: int, max_tries: int | None, retries: int) -> bool:
    """True if ``earlier_try`` came before this try within the same run of the task (no clear between).

    A clear starts a new run of the task: Airflow sets ``max_tries`` to the last try plus ``retries``, so
    the first try of the current run is ``max_tries - retries + 1``. Unknown ``max_tries``: False.
    """
    if max_tries is None:
        return False
    return max_tries - retries + 1 <= earlier_try < try_number


@dataclass(frozen=True)
class TryOutcome:
    """What a try of the task ended with, kept in the task's state store for the tries after it: the
    job whose success it returned, or the message of the fatal failure it raised."""

    try_number: int
    job: str = ""
    message: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"try": self.try_number, "job": self.job, "message": self.message}

    @classmethod
    def from_json(cls, value: Any) -> TryOutcome | None:
        """Read back a stored record; a bare job name (an older record) has no known try."""
        if not value:
            return None
        if isinstance(value, str):
            return cls(try_number=0, job=value)
        if not isinstance(value, Mapping):
            return None
        try:
            number = int(value.get("try") or 0)
        except (TypeError, ValueError):
            number = 0
        return cls(number, str(value.get("job") or ""), str(value.get("message") or ""))


def repeated_fatal_failure(
    fatal: TryOutcome | None, *, try_number: int, max_tries: int | None, retries: int
) -> str | None:
    """The message to fail this try with at once, or None to run it.

    A fatal failure ends the task: Airflow is told not to retry it. If a later try starts anyway in the
    same run of the task, Airflow started it on its own (its scheduler acted on a stale executor event of
    the deferral after the resumed try failed) and running the job again cannot help. After a clear the
    job runs again: whoever cleared the task saw the failure.
    """
    if fatal is None:
        return None
    if not same_run_of_task(fatal.try_number, try_number=try_number, max_tries=max_tries, retries=retries):
        return None
    return (
        f"try {fatal.try_number} of this task already failed in a way no retry can cure, and the task was "
        f"not cleared since: not running the job again (clear the task to run it after fixing the cause)\n"
        f"{fatal.message}"
    ).rstrip()


def delivered_job(
    delivered: TryOutcome | None, *, try_number: int, max_tries: int | None, retries: int
) -> str:
    """The job whose returned success Airflow kept, or "" if none: a later try may adopt any other
    succeeded job of the task instead of training again.

    A success returned by an earlier try of the same run of the task was lost: had Airflow kept it, the
    task would have succeeded and no later try would run without a clear (the scheduler can fail a
    resumed try that already returned, on a stale event of its deferral). That job is adopted again.
    """
    if delivered is None:
        return ""
    if same_run_of_task(delivered.try_number, try_number=try_number, max_tries=max_tries, retries=retries):
        return ""
    return delivered.job


def summary(event: Mapping[str, Any]) -> dict[str, Any]:
    """The XCom a successful task returns: job, kind, attempts, durations, GPU-seconds, final state."""
    history = list(event.get("attempts") or [])
    return {
        "job_name": event.get("job_name"),
        "kind": event.get("kind"),
        "namespace": event.get("namespace"),
        "state": event.get("state"),
        "attempts": len(history) or 1,
        "attempt_history": history,
        "gpu_seconds": sum(float(a.get("gpu_seconds") or 0) for a in history) or event.get("gpu_seconds"),
        "queued_at": history[0].get("queued_at") if history else None,
        "started_at": history[-1].get("started_at") if history else None,
        "finished_at": history[-1].get("finished_at") if history else None,
    }


def failure_message(event: Mapping[str, Any]) -> str:
    """One readable message: state, reason, exit codes, attempts, and the last log lines."""
    name = f"{event.get('kind', 'Job')} {event.get('namespace', '')}/{event.get('job_name', '?')}"
    head = f"{name} ended {event.get('state', 'UNKNOWN')}"
    if event.get("reason"):
        head += f" (reason {event['reason']})"
    codes = event.get("exit_codes") or {}
    if codes:
        head += "; exit codes " + ", ".join(f"{who}={code}" for who, code in sorted(codes.items()))
    history = event.get("attempts") or []
    if len(history) > 1:
        head += f"; after {len(history)} attempts"
    lines = [head]
    for key in ("message", "failure_message"):
        if event.get(key):
            lines.append(str(event[key]))
    tail = event.get("log_tail") or []
    if tail:
        lines.append(f"last {len(tail)} log lines:")
        lines.extend(f"  {line}" for line in tail)
    return "\n".join(lines)
