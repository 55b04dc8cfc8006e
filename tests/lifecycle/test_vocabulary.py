"""The source vocabularies: every status of every source document maps to a reachable product state."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from airflow_jobs_plugin.lifecycle import (
    STATE_REASONS,
    TERMS,
    VOCABULARY,
    JobState,
    Source,
    render_markdown_table,
    snapshot,
    states_for,
    terms_for,
)

from .scenarios import SCENARIOS

DOCS = Path(__file__).resolve().parents[2] / "docs" / "states.md"

# Every status (and mcli failure reason) the source documents name, spelled as they spell it.
SEED_TERMS: dict[Source, list[str]] = {
    Source.RUNAI_JOB: [
        "Pending",
        "ContainerCreating",
        "Running",
        "Succeeded",
        "Terminating",
        "Deleted",
        "TimedOut",
        "Preempted",
        "ContainerCannotRun",
        "Error",
        "Fail",
        "CrashLoopBackOff",
        "ErrImagePull",
        "ImagePullBackOff",
        "Unknown",
        "Init:A/B",
        "PodInitializing",
        "Init:Error",
        "Init:CrashLoopBackOff",
    ],
    Source.MCLI: [
        "PENDING",
        "QUEUED",
        "STARTING",
        "RUNNING",
        "TERMINATING",
        "COMPLETED",
        "STOPPED",
        "FAILED",
        "FailedImagePull",
        "Error",
    ],
    Source.PRIMEHUB: ["Pending", "Preparing", "Running", "Failed", "Succeeded", "Cancelled"],
    Source.KUEUE_JOBQ: [
        "Submitted",
        "Pending",
        "Inadmissible",
        "Admitted",
        "Succeeded",
        "Failed",
        "evicted",
        "requeued",
    ],
    Source.RUNAI_WORKLOAD: [
        "Creating",
        "Pending",
        "Initializing",
        "Running",
        "Degraded",
        "Deleting",
        "Stopped",
        "Failed",
        "Completed",
    ],
}


def _observed() -> list:
    return [
        snapshot(s.job, s.pods, s.events, queue=s.queue, reservation=s.reservation, now=s.now)
        for s in SCENARIOS
    ]


OBSERVED = _observed()
REACHED = {(o.state, o.reason) for o in OBSERVED}


@pytest.mark.parametrize(
    ("source", "term"), [(source, term) for source, terms in SEED_TERMS.items() for term in terms], ids=str
)
def test_every_status_of_the_source_documents_maps_to_a_job_state(source, term):
    assert states_for(source, term), f"{source.title} {term!r} has no JobState"


@pytest.mark.parametrize("entry", TERMS, ids=lambda t: f"{t.source}-{t.term}-{t.state.value}")
def test_every_source_term_is_reachable_from_cluster_objects(entry):
    if entry.reason is None:
        assert any(state == entry.state for state, _ in REACHED)
    else:
        assert (entry.state, entry.reason) in REACHED


@pytest.mark.parametrize(
    ("state", "reason"), [(s, r) for s, reasons in STATE_REASONS.items() for r in reasons], ids=str
)
def test_every_documented_reason_is_reachable(state, reason):
    assert (state, reason) in REACHED


def test_every_reached_reason_is_documented():
    undocumented = {(s, r) for s, r in REACHED if r not in STATE_REASONS[s]}
    assert not undocumented


def test_every_state_is_reachable():
    assert {state for state, _ in REACHED} == set(JobState)


# Run:ai shows the kubectl status of the job's pod: those words must appear as a replica's status.
@pytest.mark.parametrize(
    ("term", "state"),
    [
        ("ContainerCreating", JobState.STARTING),
        ("Init:A/B", JobState.STARTING),
        ("PodInitializing", JobState.STARTING),
        ("ErrImagePull", JobState.STARTING),
        ("ImagePullBackOff", JobState.STARTING),
        ("ImagePullBackOff", JobState.FAILED),
        ("Running", JobState.RUNNING),
        ("Error", JobState.RETRYING),
        ("Init:Error", JobState.RETRYING),
        ("CrashLoopBackOff", JobState.RETRYING),
        ("Init:CrashLoopBackOff", JobState.RETRYING),
        ("Terminating", JobState.TERMINATING),
    ],
)
def test_runai_pod_statuses_appear_as_replica_statuses(term, state):
    assert state in states_for(Source.RUNAI_JOB, term)
    pattern = re.compile(r"Init:\d+/\d+" if term == "Init:A/B" else re.escape(term))
    assert any(o.state == state and any(pattern.fullmatch(r.status) for r in o.replicas) for o in OBSERVED)


def test_vocabulary_and_reverse_lookup_agree():
    for state, row in VOCABULARY.items():
        for source, words in row.items():
            assert words == terms_for(state, source)
            for word in words:
                assert state in states_for(source, word)


def test_unknown_term_maps_to_nothing():
    assert states_for(Source.MCLI, "Running") == ()


def test_table_has_a_row_per_state_and_a_column_per_source():
    lines = render_markdown_table().strip().splitlines()
    assert len(lines) == 2 + len(JobState)
    assert all(line.count("|") == 4 + len(Source) for line in lines)
    assert "FAILED (reasons FailedImagePull, Error)" in render_markdown_table()


def test_docs_contain_the_rendered_table():
    assert render_markdown_table() in DOCS.read_text(encoding="utf-8")
