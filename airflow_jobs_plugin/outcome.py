"""What a finished job means for its Airflow task: the XCom summary, or the error to raise. Pure.

Two kinds of failure leave the trigger. Some say the job can never succeed as submitted (the image
does not exist, the job can never fit the quota, an exit code the author declared fatal): Airflow must
not retry the task, so the operator raises ``AirflowFailException``. The rest (a training error,
attempts used up on a flaky node) are ordinary failures the DAG's own ``retries`` may retry.
"""

from __future__ import annotations

from collections.abc import Mapping
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
