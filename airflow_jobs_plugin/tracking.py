"""What a trigger says and does as a job moves: pure rules over snapshots, no I/O.

The trigger (the imperative shell in :mod:`airflow_jobs_plugin.triggers`) computes a snapshot after every
change the shared watch reports and asks this module three questions: what to log, whether the job is
over, and if it failed, whether a new attempt should follow and when.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from enum import Enum
from typing import Any

from airflow_jobs_plugin.lifecycle import (
    Failure,
    FailureClass,
    JobSnapshot,
    JobState,
    Reason,
    ReplicaStatus,
    is_transient_pull_error,
    start_cannot_succeed,
)


def replica_summary(replicas: Sequence[ReplicaStatus]) -> str:
    """``launcher Init:1/2, workers 2/2 ContainerCreating``: the per-replica kubectl statuses, grouped.

    The launcher is named on its own; workers are counted by status so a 64-worker job stays one line.
    """
    parts = []
    launchers = [r for r in replicas if r.role == "launcher"]
    workers = [r for r in replicas if r.role != "launcher"]
    for r in launchers:
        parts.append(f"launcher {r.status}")
    if workers:
        counts = Counter(r.status for r in workers)
        total = len(workers)
        noun = "worker" if total == 1 else "workers"
        if len(counts) == 1:
            (status,) = counts
            parts.append(f"{noun} {total}/{total} {status}" if total > 1 else f"{noun} {status}")
        else:
            parts.append(
                f"{noun} "
                + ", ".join(f"{n}/{total} {s}" for s, n in sorted(counts.items(), key=lambda kv: -kv[1]))
            )
    return ", ".join(parts)


def state_line(snapshot: JobSnapshot) -> str:
    """One line naming the state, its reason and the replicas, e.g.
    ``STARTING (launcher Init:1/2, workers 2/2 ContainerCreating)``."""
    detail = []
    reason = str(getattr(snapshot.reason, "value", snapshot.reason) or "")
    if (
        reason
        and reason not in ("Running", "Completed", "Pending")
        and snapshot.state is not JobState.SUCCEEDED
    ):
        detail.append(reason)
    summary = replica_summary(snapshot.replicas)
    if summary and snapshot.state not in (JobState.QUEUED,):
        detail.append(summary)
    line = snapshot.state.value
    if detail:
        line += f" ({'; '.join(detail)})"
    if snapshot.message and snapshot.state in (JobState.QUEUED, JobState.SCHEDULING, JobState.FAILED):
        line += f": {snapshot.message}"
    return line


def signature(snapshot: JobSnapshot) -> tuple:
    """What must change for the trigger to log a new line (not every watch event is news)."""
    return (
        snapshot.state,
        snapshot.reason,
        tuple((r.role, r.index, r.status) for r in snapshot.replicas),
        snapshot.queue_position,
    )


class Step(str, Enum):
    WAIT = "wait"  # not over: keep watching
    FAIL_FAST = "fail_fast"  # stuck in a way no waiting cures: rule FAILED now (verdict + suspend)
    RETRY = "retry"  # failed, retryable, attempts left: submit the next attempt after a back-off
    FINISH = "finish"  # over: yield the final event


@dataclass(frozen=True)
class Decision:
    step: Step
    delay: timedelta = timedelta(0)
    retryable: bool = False


def decide(
    snapshot: JobSnapshot,
    failure: Failure | None,
    *,
    attempt: int,
    max_attempts: int,
    backoff: timedelta,
    backoff_max: timedelta,
) -> Decision:
    """After a snapshot: keep waiting, start another attempt, or finish.

    Only a terminal FAILED job with a retryable failure class gets another attempt, and only while
    attempts are left; everything else terminal finishes (the task's own retries are Airflow's).
    """
    if not snapshot.state.is_terminal:
        if stuck_for_good(snapshot, failure):
            return Decision(Step.FAIL_FAST)
        return Decision(Step.WAIT)
    if snapshot.state is JobState.FAILED and failure is not None and failure.retryable:
        if attempt < max_attempts:
            delay = (
                min(backoff_max, backoff * (2 ** max(0, attempt - 1)))
                if backoff > timedelta(0)
                else timedelta(0)
            )
            return Decision(Step.RETRY, delay=delay, retryable=True)
        return Decision(Step.FINISH, retryable=True)
    return Decision(Step.FINISH, retryable=False)


# Pod problems Kubernetes retries forever (a pod in ImagePullBackOff never fails on its own, so the Job
# would sit until its active deadline, a day by default, holding its GPUs).
_STUCK = frozenset({Reason.IMAGE_PULL, Reason.INVALID_IMAGE_NAME})


def stuck_for_good(
    snapshot: JobSnapshot, failure: Failure | None, events: Iterable[Mapping[str, Any]] = ()
) -> bool:
    """A live job that cannot progress: a replica on a lost node; pods that can never start: an invalid
    image name at once; an image pull only once
    the kubelet has backed off at least once and the registry's answer is permanent (not found,
    denied), never for a transient one (rate limit, timeout), which the kubelet's own retries cure.

    The pod's back-off message hides the registry's answer; the pull events (``events``) carry it, so
    any transient answer among them keeps the job waiting."""
    if start_cannot_succeed(snapshot):  # containers that cannot be created, past the grace
        return True
    if snapshot.state is JobState.UNKNOWN and snapshot.reason is Reason.NODE_LOST:
        # Its pods cannot finish on a node that is gone, and a controller waiting for them to become
        # terminal would hold the job (and its quota) forever: end the attempt so a new one can start.
        return True
    if snapshot.reason not in _STUCK or failure is None or failure.failure_class is not FailureClass.FATAL:
        return False
    if snapshot.reason is Reason.INVALID_IMAGE_NAME:
        return True
    if any(is_transient_pull_error(str(e.get("message") or "")) for e in events):
        return False
    return any(r.status == "ImagePullBackOff" for r in snapshot.replicas)


def exit_codes(snapshot: JobSnapshot) -> dict[str, int]:
    """Exit codes by replica (``launcher``, ``worker-0``, ...), for messages and the XCom."""
    codes = {
        (r.role if r.role == "launcher" else f"{r.role}-{r.index}"): r.exit_code
        for r in snapshot.replicas
        if r.exit_code is not None
    }
    if not codes and snapshot.exit_code is not None:
        codes["job"] = snapshot.exit_code
    return codes


def event_payload(
    snapshot: JobSnapshot,
    failure: Failure | None,
    *,
    status: str,
    job_name: str,
    kind: str,
    namespace: str,
    attempts: Sequence[dict[str, Any]],
    log_tail: Sequence[str],
    retryable: bool,
) -> dict[str, Any]:
    """The final TriggerEvent's payload: JSON-safe, no secret, enough for execute_complete's message."""
    return {
        "status": status,
        "job_name": job_name,
        "kind": kind,
        "namespace": namespace,
        "state": snapshot.state.value,
        "reason": str(getattr(snapshot.reason, "value", snapshot.reason) or ""),
        "message": snapshot.message,
        "failure_class": failure.failure_class.value if failure is not None else None,
        "failure_message": failure.message if failure is not None else None,
        "exit_codes": exit_codes(snapshot),
        "replicas": [
            {"role": r.role, "index": r.index, "pod": r.pod, "status": r.status} for r in snapshot.replicas
        ],
        "attempts": list(attempts),
        "gpu_seconds": snapshot.gpu_seconds,
        "log_tail": list(log_tail),
        "retryable": retryable,
    }
