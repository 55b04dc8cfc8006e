"""Which failures are worth another attempt: :func:`classify_failure`.

Retrying helps when the infrastructure let the job down (its node was lost, its pod was evicted or
preempted, the registry refused a pull for a while) and never when the job itself is wrong (an
invalid image name, an image that does not exist, a container that cannot start, a missing config
key, a time limit hit, a verdict of the quota pool). A process that ran out of memory or exited with a
non-zero code is the job's own failure too, unless the DAG author declares its exit code retryable.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from enum import Enum
from typing import Any

from airflow_jobs_plugin.lifecycle.snapshot import JobSnapshot
from airflow_jobs_plugin.lifecycle.state import Reason


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
        Reason.POD_REFUSED,
        Reason.DEADLINE_EXCEEDED,
        Reason.QUEUE_TIMEOUT,
        Reason.OVER_QUOTA,
        Reason.UNSCHEDULABLE,  # only ever a failure as the product's verdict: a pod larger than any node
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


# --- starts that cannot succeed ------------------------------------------------------------------

# How long a pod may sit in CreateContainerConfigError / CreateContainerError before the product
# rules it failed. The kubelet retries both on every pod sync, without end
# (``pkg/kubelet/kuberuntime/kuberuntime_container.go``, Kubernetes 1.32: ``startContainer`` returns
# ``ErrCreateContainerConfig`` when ``generateContainerConfig`` fails and ``ErrCreateContainer`` when the
# runtime's CreateContainer does), so only a verdict frees the GPUs before the job's deadline.
START_GRACE = timedelta(seconds=60)

_CREATE_ERRORS = ("CreateContainerConfigError", "CreateContainerError")

# Runtime answers to CreateContainer that the kubelet's next sync cures: containerd keeps a name
# reserved while an earlier, timed-out create of the same container is still finishing ("failed to
# reserve container name ... is reserved for ..."), and a runtime under load misses the kubelet's
# deadline. Tolerated however long they last: the job's own deadline still bounds them.
_TRANSIENT_CREATE_MARKERS = ("is reserved for", "context deadline exceeded", "deadlineexceeded")

# The kubelet's words for a missing object (``pkg/kubelet/kubelet_pods.go``, Kubernetes 1.32,
# ``makeEnvironmentVariables``: ``couldn't find key %v in ConfigMap %v/%v``, the same for Secret; a
# missing object is the API's NotFound, ``configmap "x" not found`` / ``secret "x" not found``).
_MISSING_KEY = re.compile(
    r"couldn't find key (?P<key>\S+) in (?P<kind>Secret|ConfigMap) (?P<where>\S+)", re.I
)
_MISSING_OBJECT = re.compile(r"(?P<kind>secret|configmap)s? \"(?P<name>[^\"]+)\" not found", re.I)


def missing_object(message: str) -> str | None:
    """The Secret or ConfigMap (and key) a kubelet message says is missing, e.g.
    ``key password of Secret ml/db-creds`` or ``Secret db-creds``; ``None`` if it names none."""
    found = _MISSING_KEY.search(message)
    if found:
        kind = "Secret" if found["kind"].lower() == "secret" else "ConfigMap"
        return f"key {found['key']} of {kind} {found['where']}"
    found = _MISSING_OBJECT.search(message)
    if found:
        kind = "Secret" if found["kind"].lower() == "secret" else "ConfigMap"
        return f"{kind} {found['name']}"
    return None


def start_cannot_succeed(snapshot: JobSnapshot, grace: timedelta | None = None) -> str | None:
    """Why a live job can never start, once a replica's containers have failed to be created for
    ``grace`` (default :data:`START_GRACE`; ``None`` while none has, or its error is one the kubelet's
    retries cure).

    The grace covers what a short wait does cure: a Secret or ConfigMap created with or just after
    the job (by the same DAG, or synced by an operator such as external-secrets), and the kubelet's
    own view of it, which its watch-based Secret and ConfigMap managers (``pkg/kubelet/secret``,
    ``pkg/kubelet/configmap``) bring up to date moments after the object changes. The message names
    the missing object where the kubelet's does.
    """
    grace = START_GRACE if grace is None else grace
    now = snapshot.observed_at
    if now is None or snapshot.state.is_terminal:
        return None
    for replica in snapshot.replicas:
        word = replica.status[len("Init:") :] if replica.status.startswith("Init:") else replica.status
        if word not in _CREATE_ERRORS or replica.since is None:
            continue
        text = replica.message.lower()
        if word == "CreateContainerError" and any(m in text for m in _TRANSIENT_CREATE_MARKERS):
            continue
        stuck = now - replica.since
        if stuck < grace:
            continue
        missing = missing_object(replica.message)
        cause = f"missing {missing}" if missing else (replica.message or word)
        return (
            f"{replica.name} cannot start its containers: {cause} ({word} for {int(stuck.total_seconds())}s)"
        )
    return None


# --- pods the API server refuses -----------------------------------------------------------------

# How each controller tells that the API server refused a pod it created, on the object it controls:
# the Job controller ("FailedCreate", "Error creating: <error>": RealPodControl.createPods in
# kubernetes pkg/controller/controller_utils.go, v1.36) for a Job, a torchrun Job and an MPIJob's
# launcher Job; the MPI operator for an MPIJob's workers ("MPIJobFailed", "worker pod created failed:
# <error>": kubeflow/mpi-operator v0.8.0 pkg/controller/mpi_job_controller.go, ``getOrCreateWorker``).
_REFUSAL_PREFIXES = {"FailedCreate": "Error creating: ", "MPIJobFailed": "worker pod created failed: "}
# The API server's words for a refusal no retry cures by itself: an admission plugin's or a policy's
# 403 (``<resource> "<name>" is forbidden: ...``: PriorityClass, PodSecurity, ResourceQuota's "exceeded
# quota", a ValidatingAdmissionPolicy) and validation's 422 (``... is invalid: ...``).
_REFUSALS = re.compile(r'^pods "[^"]*" is (forbidden|invalid): ')


def refused_pods(events: Iterable[Mapping[str, Any]]) -> str | None:
    """The API server's message for the newest pod it refused to a job's controller, read from the
    events about the job (and its launcher Job), or ``None`` when it refused none.

    The controller asks again and again (the Job controller with its back-off, the MPI operator on its
    next sync): without a ruling the job holds its quota, podless, until its deadline."""
    newest: tuple[str, str] | None = None
    for event in events:
        prefix = _REFUSAL_PREFIXES.get(str(event.get("reason") or ""))
        text = str(event.get("message") or event.get("note") or "")
        if prefix is None or not text.startswith(prefix):
            continue
        error = text[len(prefix) :].strip()
        if not _REFUSALS.match(error):
            continue
        stamp = str(event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp") or "")
        if newest is None or stamp >= newest[0]:
            newest = (stamp, error)
    return newest[1] if newest is not None else None
