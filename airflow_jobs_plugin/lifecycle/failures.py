"""Which failures are worth another attempt: :func:`classify_failure`.

Retrying helps when the infrastructure let the job down (its node was lost, its pod was evicted or
preempted, the registry refused a pull for a while) and never when the job itself is wrong (an
invalid image name, an image that does not exist, a container that cannot start, a missing config
key, a time limit hit, a verdict of the quota pool). A process that ran out of memory or exited with a
non-zero code is the job's own failure too, unless the DAG author declares its exit code retryable.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from enum import Enum

from .snapshot import JobSnapshot
from .state import Reason


class FailureClass(str, Enum):
    """RETRYABLE: resubmit the job (with back-off). FATAL: give up; Airflow must not retry either."""

    RETRYABLE = "retryable"
    FATAL = "fatal"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Failure:
    """A classified failure: its class, the reason and exit code it was judged on, and why."""

    failure_class: FailureClass
    reason: Reason
    exit_code: int | None
    message: str

    @property
    def retryable(self) -> bool:
        """Whether another attempt may succeed."""
        return self.failure_class == FailureClass.RETRYABLE


_INFRASTRUCTURE = frozenset({Reason.NODE_LOST, Reason.EVICTED, Reason.PREEMPTED})
_ALWAYS_FATAL = frozenset(
    {
        Reason.INVALID_IMAGE_NAME,
        Reason.CONTAINER_CANNOT_RUN,
        Reason.CONTAINER_CONFIG_ERROR,
        Reason.DEADLINE_EXCEEDED,
        Reason.QUEUE_TIMEOUT,
        Reason.OVER_QUOTA,
        Reason.OVER_REQUEUE_LIMIT,
        Reason.CANCELLED,
        Reason.DELETED,
        Reason.NOT_FOUND,
    }
)
_BY_EXIT_CODE = frozenset(
    {Reason.ERROR, Reason.OOM_KILLED, Reason.BACKOFF_LIMIT_EXCEEDED, Reason.CRASH_LOOP_BACK_OFF}
)
FAILURE_REASONS = _INFRASTRUCTURE | _ALWAYS_FATAL | _BY_EXIT_CODE | {Reason.IMAGE_PULL}

# Registry answers that mean "not now" rather than "never" (rate limits, overload, network trouble).
_TRANSIENT_PULL_MARKERS = (
    "429",
    "toomanyrequests",
    "too many requests",
    "rate limit",
    "i/o timeout",
    "timeout",
    "timed out",
    "connection reset",
    "connection refused",
    "502 bad gateway",
    "503 service unavailable",
    "504 gateway timeout",
    "service unavailable",
    "temporary failure in name resolution",
    "unexpected eof",
)
# Answers that no amount of waiting changes.
_PERMANENT_PULL_MARKERS = (
    "not found",
    "manifest unknown",
    "pull access denied",
    "repository does not exist",
    "unauthorized",
    "authentication required",
    "invalid reference format",
    "no such host",
)


def is_transient_pull_error(message: str) -> bool:
    """Whether an image pull error message reads as temporary (e.g. ``429 Too Many Requests``).

    A message naming a permanent cause (not found, access denied) is never transient, even if it also
    mentions a timeout; a message with no recognisable cause is not transient either.
    """
    text = message.lower()
    if any(marker in text for marker in _PERMANENT_PULL_MARKERS):
        return False
    return any(marker in text for marker in _TRANSIENT_PULL_MARKERS)


def classify_failure(
    snapshot: JobSnapshot,
    *,
    retryable_exit_codes: Collection[int] = (),
    fatal_exit_codes: Collection[int] = (),
    exit_code_default: FailureClass = FailureClass.FATAL,
) -> Failure:
    """Classify the failure a snapshot (FAILED, RETRYING, DEGRADED or UNKNOWN) reports.

    Node lost, evicted and preempted are RETRYABLE whatever the exit code (the code is the kill's, not
    the program's). An image pull failure is RETRYABLE only when the registry's message is transient.
    Non-zero exits (Error, BackoffLimitExceeded, CrashLoopBackOff, OOMKilled) follow the author's
    lists: ``fatal_exit_codes`` first, then ``retryable_exit_codes``, else ``exit_code_default``
    (OOMKilled stays FATAL unless its code is listed as retryable). Everything else is FATAL.

    Raises ``ValueError`` for a snapshot whose reason is not a failure (e.g. RUNNING).
    """
    reason = snapshot.reason
    code = snapshot.exit_code
    if reason not in FAILURE_REASONS:
        raise ValueError(f"{snapshot.state} / {reason} is not a failure")
    if reason in _INFRASTRUCTURE:
        return Failure(
            FailureClass.RETRYABLE, reason, code, f"{reason}: the infrastructure, not the job, failed"
        )
    if reason == Reason.IMAGE_PULL:
        messages = [snapshot.message] + [
            r.message for r in snapshot.replicas if r.reason == Reason.IMAGE_PULL
        ]
        if any(is_transient_pull_error(m) for m in messages if m):
            return Failure(FailureClass.RETRYABLE, reason, code, "the registry refused the pull for now")
        return Failure(FailureClass.FATAL, reason, code, "the image cannot be pulled")
    if reason in _BY_EXIT_CODE:
        if code is not None and code in fatal_exit_codes:
            return Failure(FailureClass.FATAL, reason, code, f"exit code {code} is declared fatal")
        if code is not None and code in retryable_exit_codes:
            return Failure(FailureClass.RETRYABLE, reason, code, f"exit code {code} is declared retryable")
        if reason == Reason.OOM_KILLED:
            return Failure(FailureClass.FATAL, reason, code, "out of memory; more attempts would run out too")
        default = exit_code_default
        shown = f"exit code {code}" if code is not None else "the failure"
        return Failure(default, reason, code, f"{shown} is {default} by default")
    return Failure(FailureClass.FATAL, reason, code, f"{reason} does not change on another attempt")
