"""How each product state reads in the vocabulary of the GPU platforms users come from.

The data is one list of :class:`SourceTerm` (a status, or a failure reason, as a source document
spells it, and the product state it corresponds to). The per-state table used by the docs and the UI
(:data:`VOCABULARY`, :func:`render_markdown_table`) is derived from it, so the two never disagree.
Sources: Run:ai job statuses (including the MPI launcher/worker statuses), MosaicML ``mcli`` run
statuses and failure reasons, PrimeHub job phases, jobq/Kueue workload states and transitions, Run:ai
workload phases.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from airflow_jobs_plugin.lifecycle.state import JobState, Reason


class Source(str, Enum):
    """A platform whose job-state vocabulary the product speaks."""

    RUNAI_JOB = "runai_job"
    MCLI = "mcli"
    PRIMEHUB = "primehub"
    KUEUE_JOBQ = "kueue_jobq"
    RUNAI_WORKLOAD = "runai_workload"

    def __str__(self) -> str:
        return self.value

    @property
    def title(self) -> str:  # type: ignore[override]  # a column heading, never str.title()
        """The column heading used in tables."""
        return _TITLES[self]


_TITLES = {
    Source.RUNAI_JOB: "Run:ai job",
    Source.MCLI: "mcli",
    Source.PRIMEHUB: "PrimeHub",
    Source.KUEUE_JOBQ: "Kueue/jobq",
    Source.RUNAI_WORKLOAD: "Run:ai workload",
}


@dataclass(frozen=True)
class SourceTerm:
    """A word of a source (``term``) and the product state (and reason, when it implies one) it means.

    ``is_reason`` marks a failure reason (mcli's ``FailedImagePull``) rather than a status. A term
    may appear for several states when the source does not distinguish them (Run:ai's ``Pending``
    covers QUEUED and SCHEDULING).
    """

    source: Source
    term: str
    state: JobState
    reason: Reason | None = None
    is_reason: bool = False


def _terms(source: Source, state: JobState, *terms: str, reason: Reason | None = None) -> list[SourceTerm]:
    return [SourceTerm(source, term, state, reason) for term in terms]


_R, _M, _P, _K, _W = Source.RUNAI_JOB, Source.MCLI, Source.PRIMEHUB, Source.KUEUE_JOBQ, Source.RUNAI_WORKLOAD
_S = JobState

TERMS: tuple[SourceTerm, ...] = tuple(
    # QUEUED
    _terms(_R, _S.QUEUED, "Pending")
    + _terms(_M, _S.QUEUED, "PENDING", "QUEUED")
    + _terms(_P, _S.QUEUED, "Pending")
    + _terms(_K, _S.QUEUED, "Submitted", "Pending")
    + _terms(_K, _S.QUEUED, "Inadmissible", reason=Reason.INADMISSIBLE)
    + _terms(_K, _S.QUEUED, "requeued", reason=Reason.REQUEUED)
    + _terms(_W, _S.QUEUED, "Pending")
    # SCHEDULING
    + _terms(_R, _S.SCHEDULING, "Pending")
    + _terms(_M, _S.SCHEDULING, "STARTING")
    + _terms(_P, _S.SCHEDULING, "Preparing")
    + _terms(_K, _S.SCHEDULING, "Admitted")
    + _terms(_W, _S.SCHEDULING, "Creating", "Pending")
    # STARTING
    + _terms(_R, _S.STARTING, "ContainerCreating", reason=Reason.CONTAINER_CREATING)
    + _terms(_R, _S.STARTING, "Init:A/B", "PodInitializing", reason=Reason.INITIALIZING)
    + _terms(_R, _S.STARTING, "ErrImagePull", "ImagePullBackOff", reason=Reason.IMAGE_PULL)
    + _terms(_M, _S.STARTING, "STARTING")
    + _terms(_P, _S.STARTING, "Preparing")
    + _terms(_K, _S.STARTING, "Admitted")
    + _terms(_W, _S.STARTING, "Initializing")
    # RUNNING
    + _terms(_R, _S.RUNNING, "Running")
    + _terms(_M, _S.RUNNING, "RUNNING")
    + _terms(_P, _S.RUNNING, "Running")
    + _terms(_K, _S.RUNNING, "Admitted")
    + _terms(_W, _S.RUNNING, "Running")
    # DEGRADED
    + _terms(_R, _S.DEGRADED, "Running")
    + _terms(_M, _S.DEGRADED, "RUNNING")
    + _terms(_P, _S.DEGRADED, "Running")
    + _terms(_K, _S.DEGRADED, "Admitted")
    + _terms(_W, _S.DEGRADED, "Degraded")
    # RETRYING
    + _terms(_R, _S.RETRYING, "Error", "Init:Error", reason=Reason.ERROR)
    + _terms(_R, _S.RETRYING, "CrashLoopBackOff", "Init:CrashLoopBackOff", reason=Reason.CRASH_LOOP_BACK_OFF)
    + _terms(_M, _S.RETRYING, "RUNNING")
    + _terms(_P, _S.RETRYING, "Running")
    + _terms(_K, _S.RETRYING, "Admitted")
    + _terms(_W, _S.RETRYING, "Running")
    # TERMINATING
    + _terms(_R, _S.TERMINATING, "Terminating")
    + _terms(_R, _S.TERMINATING, "Preempted", reason=Reason.PREEMPTED)
    + _terms(_M, _S.TERMINATING, "TERMINATING")
    + _terms(_K, _S.TERMINATING, "evicted", reason=Reason.PREEMPTED)
    + _terms(_W, _S.TERMINATING, "Deleting")
    # SUCCEEDED
    + _terms(_R, _S.SUCCEEDED, "Succeeded")
    + _terms(_M, _S.SUCCEEDED, "COMPLETED")
    + _terms(_P, _S.SUCCEEDED, "Succeeded")
    + _terms(_K, _S.SUCCEEDED, "Succeeded")
    + _terms(_W, _S.SUCCEEDED, "Completed")
    # FAILED
    + _terms(_R, _S.FAILED, "Fail", reason=Reason.BACKOFF_LIMIT_EXCEEDED)
    + _terms(_R, _S.FAILED, "ErrImagePull", "ImagePullBackOff", reason=Reason.IMAGE_PULL)
    + _terms(_R, _S.FAILED, "ContainerCannotRun", reason=Reason.CONTAINER_CANNOT_RUN)
    + _terms(_R, _S.FAILED, "TimedOut", reason=Reason.DEADLINE_EXCEEDED)
    + _terms(_M, _S.FAILED, "FAILED")
    + [
        SourceTerm(_M, "FailedImagePull", _S.FAILED, Reason.IMAGE_PULL, is_reason=True),
        SourceTerm(_M, "Error", _S.FAILED, Reason.ERROR, is_reason=True),
    ]
    + _terms(_P, _S.FAILED, "Failed")
    + _terms(_K, _S.FAILED, "Failed")
    + _terms(_W, _S.FAILED, "Failed")
    # CANCELLED
    + _terms(_R, _S.CANCELLED, "Deleted", reason=Reason.CANCELLED)
    + _terms(_P, _S.CANCELLED, "Cancelled", reason=Reason.CANCELLED)
    # STOPPED
    + _terms(_M, _S.STOPPED, "STOPPED", reason=Reason.STOPPED)
    + _terms(_W, _S.STOPPED, "Stopped", reason=Reason.STOPPED)
    # UNKNOWN
    + _terms(_R, _S.UNKNOWN, "Unknown")
    + _terms(_M, _S.UNKNOWN, "UNKNOWN")
    + _terms(_P, _S.UNKNOWN, "Unknown")
)

# The reasons a snapshot gives with each state (see docs/states.md for what each one means).
STATE_REASONS: dict[JobState, tuple[Reason, ...]] = {
    _S.QUEUED: (
        Reason.PENDING,
        Reason.GROUP_QUOTA,
        Reason.USER_QUOTA,
        Reason.BEHIND_HEAD,
        Reason.INADMISSIBLE,
        Reason.REQUEUED,
    ),
    _S.SCHEDULING: (
        Reason.QUOTA_RESERVED,
        Reason.CREATING,
        Reason.PENDING,
        Reason.UNSCHEDULABLE,
        Reason.SCHEDULING_GATED,
    ),
    _S.STARTING: (
        Reason.CONTAINER_CREATING,
        Reason.INITIALIZING,
        Reason.IMAGE_PULL,
        Reason.INVALID_IMAGE_NAME,
        Reason.CONTAINER_CONFIG_ERROR,
        Reason.CREATING,
    ),
    _S.RUNNING: (Reason.RUNNING, Reason.FINISHING),
    _S.DEGRADED: (
        Reason.NOT_READY,
        Reason.NODE_LOST,
        Reason.CRASH_LOOP_BACK_OFF,
        Reason.ERROR,
        Reason.DELETED,
    ),
    _S.RETRYING: (
        Reason.ERROR,
        Reason.CRASH_LOOP_BACK_OFF,
        Reason.OOM_KILLED,
        Reason.CONTAINER_CANNOT_RUN,
        Reason.EVICTED,
        Reason.PREEMPTED,
        Reason.NODE_LOST,
    ),
    _S.TERMINATING: (
        Reason.CANCELLED,
        Reason.STOPPED,
        Reason.OVER_REQUEUE_LIMIT,
        Reason.REQUEUED,
        Reason.PREEMPTED,
        Reason.EVICTED,
        Reason.DELETED,
        Reason.BACKOFF_LIMIT_EXCEEDED,
        Reason.IMAGE_PULL,
        Reason.INVALID_IMAGE_NAME,
        Reason.COMPLETED,
    ),
    _S.SUCCEEDED: (Reason.COMPLETED,),
    _S.FAILED: (
        Reason.POD_REFUSED,
        Reason.IMAGE_PULL,
        Reason.INVALID_IMAGE_NAME,
        Reason.CONTAINER_CANNOT_RUN,
        Reason.CONTAINER_CONFIG_ERROR,
        Reason.OOM_KILLED,
        Reason.ERROR,
        Reason.BACKOFF_LIMIT_EXCEEDED,
        Reason.DEADLINE_EXCEEDED,
        Reason.QUEUE_TIMEOUT,
        Reason.OVER_QUOTA,
        Reason.UNSCHEDULABLE,
        Reason.OVER_REQUEUE_LIMIT,
        Reason.NODE_LOST,
        Reason.EVICTED,
        Reason.PREEMPTED,
    ),
    _S.CANCELLED: (Reason.CANCELLED,),
    _S.STOPPED: (Reason.STOPPED,),
    _S.UNKNOWN: (Reason.NODE_LOST, Reason.NOT_FOUND),
}

MEANINGS: dict[JobState, str] = {
    _S.QUEUED: "created suspended, waiting for GPU quota",
    _S.SCHEDULING: "quota reserved, pods not all placed on nodes yet",
    _S.STARTING: "placed; pulling images, running init containers, creating containers",
    _S.RUNNING: "every replica running",
    _S.DEGRADED: "some replicas running, others not (restarting, not ready, lost)",
    _S.RETRYING: "a pod failed; the job tries again (pod back-off or a new pod)",
    _S.TERMINATING: "being stopped; pods still hold GPUs",
    _S.SUCCEEDED: "finished, exit code 0",
    _S.FAILED: "finished in failure",
    _S.CANCELLED: "cancelled by a user (UI, CLI, kubectl delete, Airflow mark failed or clear)",
    _S.STOPPED: "stopped by a user: pods deleted, GPUs and quota released, waiting for a resume",
    _S.UNKNOWN: "cannot be read (node lost, object missing)",
}


def _vocabulary() -> dict[JobState, dict[Source, tuple[SourceTerm, ...]]]:
    table: dict[JobState, dict[Source, tuple[SourceTerm, ...]]] = {
        state: {source: () for source in Source} for state in JobState
    }
    for term in TERMS:
        cell = table[term.state][term.source]
        if term.term not in {t.term for t in cell if t.is_reason == term.is_reason}:
            table[term.state][term.source] = (*cell, term)
    return table


_TABLE = _vocabulary()

# JobState -> source -> the source's words for it (statuses, then failure reasons).
VOCABULARY: dict[JobState, dict[Source, tuple[str, ...]]] = {
    state: {source: tuple(t.term for t in terms) for source, terms in row.items()}
    for state, row in _TABLE.items()
}


def terms_for(state: JobState, source: Source) -> tuple[str, ...]:
    """The words ``source`` uses for ``state`` (statuses first, then failure reasons); may be empty."""
    return VOCABULARY[state][source]


def states_for(source: Source, term: str) -> tuple[JobState, ...]:
    """Every product state a source's status or reason ``term`` corresponds to (empty if unknown)."""
    found: list[JobState] = []
    for entry in TERMS:
        if entry.source == source and entry.term == term and entry.state not in found:
            found.append(entry.state)
    return tuple(found)


def _cell(terms: tuple[SourceTerm, ...]) -> str:
    statuses = [t.term for t in terms if not t.is_reason]
    reasons = [t.term for t in terms if t.is_reason]
    text = ", ".join(statuses) if statuses else "–"
    if reasons:
        text += f" (reasons {', '.join(reasons)})"
    return text


def render_markdown_table() -> str:
    """The state table as Markdown: each state, its reasons, and every source's words for it."""
    header = ["JobState", "meaning", "reasons", *(source.title for source in Source)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for state in JobState:
        reasons = ", ".join(reason.value for reason in STATE_REASONS[state])
        cells = [f"`{state.value}`", MEANINGS[state], reasons]
        cells += [_cell(_TABLE[state][source]) for source in Source]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
