"""Job lifecycle: kubectl's pod STATUS, the product's job states, failure classes and vocabularies.

Pure functions over plain Kubernetes objects (dicts as the API returns them); no I/O. The main entry
points: :func:`pod_status` (kubectl's STATUS column), :func:`snapshot` (a job's :class:`JobSnapshot`),
:func:`classify_failure` (retry or give up) and :func:`render_markdown_table` (the state vocabulary).
"""

from __future__ import annotations

from airflow_jobs_plugin.lifecycle.failures import (
    FAILURE_REASONS,
    START_GRACE,
    Failure,
    FailureClass,
    classify_failure,
    is_transient_pull_error,
    missing_object,
    refused_pods,
    start_cannot_succeed,
)
from airflow_jobs_plugin.lifecycle.pod_status import (
    PodRow,
    human_duration,
    is_restartable_init_container,
    pod_ready,
    pod_restarts,
    pod_row,
    pod_status,
    restarts_column,
    timestamp_age,
)
from airflow_jobs_plugin.lifecycle.replicas import (
    LAUNCHER,
    NO_POD,
    WORKER,
    Health,
    ReplicaStatus,
    disrupted_pod,
    events_of,
    job_kind,
    pods_of,
    replicas_of,
)
from airflow_jobs_plugin.lifecycle.snapshot import (
    JobSnapshot,
    QueueStatus,
    Reservation,
    TaskRef,
    snapshot,
)
from airflow_jobs_plugin.lifecycle.state import (
    QUEUE_REASONS,
    TERMINAL_STATES,
    VERDICTS,
    JobState,
    Reason,
)
from airflow_jobs_plugin.lifecycle.vocabulary import (
    MEANINGS,
    STATE_REASONS,
    TERMS,
    VOCABULARY,
    Source,
    SourceTerm,
    render_markdown_table,
    states_for,
    terms_for,
)

__all__ = [
    "FAILURE_REASONS",
    "LAUNCHER",
    "MEANINGS",
    "NO_POD",
    "QUEUE_REASONS",
    "STATE_REASONS",
    "TERMINAL_STATES",
    "TERMS",
    "VERDICTS",
    "VOCABULARY",
    "WORKER",
    "Failure",
    "FailureClass",
    "Health",
    "JobSnapshot",
    "TaskRef",
    "JobState",
    "PodRow",
    "QueueStatus",
    "Reason",
    "ReplicaStatus",
    "Reservation",
    "Source",
    "SourceTerm",
    "classify_failure",
    "disrupted_pod",
    "events_of",
    "human_duration",
    "is_restartable_init_container",
    "is_transient_pull_error",
    "missing_object",
    "refused_pods",
    "start_cannot_succeed",
    "START_GRACE",
    "job_kind",
    "pod_ready",
    "pod_restarts",
    "pod_row",
    "pod_status",
    "pods_of",
    "render_markdown_table",
    "replicas_of",
    "restarts_column",
    "snapshot",
    "states_for",
    "terms_for",
    "timestamp_age",
]
