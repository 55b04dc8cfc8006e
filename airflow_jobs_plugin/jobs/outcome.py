"""What a finished job means for its Airflow task: the XCom summary, or the error to raise. Pure.

Two kinds of failure leave the trigger. Some say the job can never succeed as submitted (the image
does not exist, the job can never fit the quota, an exit code the author declared fatal): Airflow must
not retry the task, so the operator raises ``AirflowFailException``. The rest (a training error,
attempts used up on a flaky node) are ordinary failures the DAG's own ``retries`` may retry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from airflow_jobs_plugin.cluster.objects import time_text
from airflow_jobs_plugin.jobs import kinds
from airflow_jobs_plugin.logs.logcursor import LogMarker

# Product verdicts that no retry of the same task can cure (pod failures carry their own class). A
# cancel is one: whoever stopped the job on purpose did not ask for it to run again.
FATAL_VERDICTS = frozenset({"OverQuota", "Inadmissible", "Cancelled"})

# Who a cancel is put down to when the job object was deleted without the product's verdict on it.
DELETED_BY_SOMEONE = "someone who deleted the job object (kubectl delete or the API)"


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
    job whose success it returned, or the message of the fatal failure (or cancel) it raised."""

    try_number: int
    job: str = ""
    message: str = ""
    cancelled: bool = False  # the fatal end was a cancel (UI, CLI, kubectl delete), not a failure

    def to_json(self) -> dict[str, Any]:
        value: dict[str, Any] = {"try": self.try_number, "job": self.job, "message": self.message}
        if self.cancelled:
            value["cancelled"] = True
        return value

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
        return cls(
            number,
            str(value.get("job") or ""),
            str(value.get("message") or ""),
            bool(value.get("cancelled")),
        )


def repeated_fatal_failure(
    fatal: TryOutcome | None, *, try_number: int, max_tries: int | None, retries: int
) -> str | None:
    """The message to fail this try with at once, or None to run it.

    A fatal failure (a cancel is one) ends the task: Airflow is told not to retry it. If a later try starts anyway in the
    same run of the task, Airflow started it on its own (its scheduler acted on a stale executor event of
    the deferral after the resumed try failed) and running the job again cannot help. After a clear the
    job runs again: whoever cleared the task saw the failure.
    """
    if fatal is None:
        return None
    if not same_run_of_task(fatal.try_number, try_number=try_number, max_tries=max_tries, retries=retries):
        return None
    if fatal.cancelled:
        return (
            f"try {fatal.try_number} of this task was cancelled and the task was not cleared since: not "
            f"running the job again (clear the task to run it again)\n{fatal.message}"
        ).rstrip()
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


def timed_out_try(
    timed_out: TryOutcome | None, *, try_number: int, max_tries: int | None, retries: int
) -> int | None:
    """The earlier try of this run of the task whose deferral ran out of its execution_timeout, whose
    jobs this try must not follow (None: none). Airflow retries a timeout as any failure, and a retry is a
    new job through the queue, not the rest of the old one's time. After a clear the record is
    forgotten: the cancel ended that job anyway."""
    if timed_out is None:
        return None
    if not same_run_of_task(
        timed_out.try_number, try_number=try_number, max_tries=max_tries, retries=retries
    ):
        return None
    return timed_out.try_number


class EventStatus(str, Enum):
    """How a trigger's wait ended: the job reached what was awaited, did not, or could not be read."""

    SUCCESS = "success"
    FAILED = "failed"
    ERROR = "error"  # the job vanished before the trigger saw it: what became of it is unknown


@dataclass(frozen=True)
class AttemptRecord:
    """One job-level attempt of a try, as it ended (times are ISO 8601 strings)."""

    attempt: int
    job_name: str
    state: str
    reason: str = ""
    exit_codes: Mapping[str, int] = field(default_factory=dict)
    queued_at: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    gpu_seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "job_name": self.job_name,
            "state": self.state,
            "reason": self.reason,
            "exit_codes": dict(self.exit_codes),
            "queued_at": self.queued_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "gpu_seconds": self.gpu_seconds,
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> AttemptRecord:
        return cls(
            attempt=_int(value.get("attempt"), 1),
            job_name=str(value.get("job_name") or ""),
            state=str(value.get("state") or ""),
            reason=str(value.get("reason") or ""),
            exit_codes=_codes(value.get("exit_codes")),
            queued_at=value.get("queued_at"),
            started_at=value.get("started_at"),
            finished_at=value.get("finished_at"),
            gpu_seconds=_float(value.get("gpu_seconds")),
        )


@dataclass(frozen=True)
class ReplicaRecord:
    role: str
    index: int
    pod: str | None
    status: str


@dataclass(frozen=True)
class JobEvent:
    """The one event a trigger yields at the end of its wait, and all the task learns from it.

    Written only by :meth:`to_payload` (a TriggerEvent payload must be JSON) and read back only by
    :meth:`from_payload`, which also reads what an older triggerer wrote: the same keys, some missing
    (a triggerer upgraded while tasks were deferred resumes them with payloads of the previous version).
    """

    status: EventStatus
    job_name: str
    kind: str = kinds.DEFAULT_KIND.name
    namespace: str = ""
    state: str = "UNKNOWN"
    reason: str = ""
    message: str = ""
    failure_class: str | None = None
    failure_message: str | None = None
    exit_codes: Mapping[str, int] = field(default_factory=dict)
    replicas: tuple[ReplicaRecord, ...] = ()
    attempts: tuple[AttemptRecord, ...] = ()
    gpu_seconds: float = 0.0
    log_tail: tuple[str, ...] = ()
    retryable: bool = False
    cancelled_by: str = ""  # set for a CANCELLED job: who, and when (ISO 8601)
    cancelled_at: str = ""
    result: Any = None  # the JSON document the job wrote to its termination message (results.py)
    # Container runs whose last lines the trigger did not print before this event: the worker reads
    # them from these cursors (logtail), so every line reaches the task log, once.
    log_markers: tuple[LogMarker, ...] = ()

    @property
    def succeeded(self) -> bool:
        return self.status is EventStatus.SUCCESS

    @property
    def cancelled(self) -> bool:
        return self.state == "CANCELLED"

    @property
    def fatal(self) -> bool:
        """True if Airflow should not retry the task at all: the failure class is fatal (an invalid or
        missing image, ContainerCannotRun, OOMKilled, a non-zero exit not declared retryable), the
        product ruled the job can never run as submitted, or someone cancelled it on purpose."""
        return self.failure_class == "fatal" or self.reason in FATAL_VERDICTS or self.cancelled

    def to_payload(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "job_name": self.job_name,
            "kind": self.kind,
            "namespace": self.namespace,
            "state": self.state,
            "reason": self.reason,
            "message": self.message,
            "failure_class": self.failure_class,
            "failure_message": self.failure_message,
            "exit_codes": dict(self.exit_codes),
            "replicas": [
                {"role": r.role, "index": r.index, "pod": r.pod, "status": r.status} for r in self.replicas
            ],
            "attempts": [a.to_json() for a in self.attempts],
            "gpu_seconds": self.gpu_seconds,
            "log_tail": list(self.log_tail),
            "retryable": self.retryable,
            "cancelled_by": self.cancelled_by,
            "cancelled_at": self.cancelled_at,
            "result": self.result,
            "log_markers": [m.to_json() for m in self.log_markers],
        }

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> JobEvent:
        try:
            status = EventStatus(payload.get("status"))
        except ValueError:
            status = EventStatus.ERROR
        replicas = tuple(
            ReplicaRecord(
                str(r.get("role") or ""), _int(r.get("index"), 0), r.get("pod"), str(r.get("status") or "")
            )
            for r in _mappings(payload.get("replicas"))
        )
        return cls(
            status=status,
            job_name=str(payload.get("job_name") or "?"),
            kind=str(payload.get("kind") or kinds.DEFAULT_KIND.name),
            namespace=str(payload.get("namespace") or ""),
            state=str(payload.get("state") or "UNKNOWN"),
            reason=str(payload.get("reason") or ""),
            message=str(payload.get("message") or ""),
            failure_class=payload.get("failure_class"),
            failure_message=payload.get("failure_message"),
            exit_codes=_codes(payload.get("exit_codes")),
            replicas=replicas,
            attempts=tuple(AttemptRecord.from_json(a) for a in _mappings(payload.get("attempts"))),
            gpu_seconds=_float(payload.get("gpu_seconds")),
            log_tail=tuple(str(line) for line in payload.get("log_tail") or ()),
            retryable=bool(payload.get("retryable")),
            cancelled_by=str(payload.get("cancelled_by") or ""),
            cancelled_at=str(payload.get("cancelled_at") or ""),
            result=payload.get("result"),
            log_markers=tuple(LogMarker.from_json(m) for m in _mappings(payload.get("log_markers"))),
        )


def summary(event: JobEvent) -> dict[str, Any]:
    """The XCom a successful task returns: job, kind, attempts, durations, GPU-seconds, final state."""
    history = event.attempts
    return {
        "job_name": event.job_name,
        "kind": event.kind,
        "namespace": event.namespace,
        "state": event.state,
        "attempts": attempt_count(history),
        "attempt_history": [a.to_json() for a in history],
        "gpu_seconds": sum(a.gpu_seconds for a in history) or event.gpu_seconds,
        "queued_at": history[0].queued_at if history else None,
        "started_at": history[-1].started_at if history else None,
        "finished_at": history[-1].finished_at if history else None,
        "result": event.result,
    }


def headline(event: JobEvent) -> str:
    """The first line of a failure: ``Job ml/train-a1 was cancelled by bob at 2026-...``, or the state,
    reason, exit codes and attempts."""
    name = f"{event.kind} {event.namespace}/{event.job_name}"
    if event.cancelled and event.cancelled_by:
        head = f"{name} was cancelled by {event.cancelled_by}"
        return head + (f" at {time_text(event.cancelled_at)}" if event.cancelled_at else "")
    head = f"{name} ended {event.state}"
    if event.reason:
        head += f" (reason {event.reason})"
    if event.exit_codes:
        head += "; exit codes " + ", ".join(f"{who}={code}" for who, code in sorted(event.exit_codes.items()))
    count = attempt_count(event.attempts)
    if count > 1:
        head += f"; after {count} attempts"
    return head


def attempt_count(history: Sequence[AttemptRecord]) -> int:
    """How many job-level attempts ``history`` holds. A stop, a preemption or a stuck-start requeue ends a
    run of an attempt, not the attempt: the history records that run and the attempt's end under the
    same attempt number, and counts as one attempt."""
    return len({record.attempt for record in history}) or 1


def failure_message(event: JobEvent) -> str:
    """One readable message: the headline, the job's own message, and the last log lines."""
    lines = [headline(event)]
    for text in (event.message, event.failure_message):
        if text:
            lines.append(text)
    if event.log_tail:
        lines.append(f"last {len(event.log_tail)} log lines:")
        lines.extend(f"  {line}" for line in event.log_tail)
    return "\n".join(lines)


def _mappings(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, Sequence) else []


def _codes(value: Any) -> dict[str, int]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): _int(v, 0) for k, v in value.items()}


def _int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _float(value: Any) -> float:
    try:
        return float(value or 0)
    except (TypeError, ValueError):
        return 0.0
