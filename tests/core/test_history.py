"""A job's history annotation: what people did to it and the runs their stops and cancels ended."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from airflow_jobs_plugin.jobs import history, labels
from airflow_jobs_plugin.jobs.history import Act, Entry, Run

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_an_entry_written_is_read_back_with_the_run_it_ended():
    run = history.run_ended(at(0.25), at(5), gpus=2)
    value = history.appended({}, Entry(Act.CANCELLED, at(61), "alice", run))
    (entry,) = history.entries({labels.HISTORY: value})
    assert entry == Entry(Act.CANCELLED, at(61), "alice", Run(at(0.25), at(5), at(61), 2))
    assert entry.run is not None and entry.run.gpu_seconds(at(999)) == 2 * 60.75


def test_entries_are_appended_oldest_first_and_only_the_newest_are_kept():
    annotations: dict[str, str] = {}
    for i in range(history.KEEP + 3):
        annotations[labels.HISTORY] = history.appended(annotations, Entry(Act.STOPPED, at(i), "bob"))
    found = history.entries(annotations)
    assert len(found) == history.KEEP
    assert [e.at for e in found] == [at(i) for i in range(3, history.KEEP + 3)]


def test_an_unreadable_history_is_shown_as_none_and_a_bad_entry_is_skipped():
    assert history.entries({labels.HISTORY: "not json"}) == ()
    assert history.entries({labels.HISTORY: '{"act": "stopped"}'}) == ()
    value = '[{"act": "exploded", "at": "2026-03-02T09:00:00Z"}, {"act": "resumed", "at": "2026-03-02T09:00:01Z"}]'
    assert history.entries({labels.HISTORY: value}) == (Entry(Act.RESUMED, at(1), "a user"),)


def test_a_job_never_admitted_ended_no_run():
    assert history.run_ended(None, None, gpus=4) is None


def test_a_pod_start_before_the_runs_admission_belongs_to_an_earlier_run():
    assert history.run_ended(at(10.5), at(3), gpus=1) == Run(at(10.5), None, None, 1)
    # Kubernetes writes whole seconds: a start in the admission's second is this run's.
    assert history.run_ended(at(10.5), at(10), gpus=1) == Run(at(10.5), at(10), None, 1)


def test_the_newest_entry_of_an_act():
    found = (Entry(Act.STOPPED, at(1), "a"), Entry(Act.RESUMED, at(2), "b"), Entry(Act.STOPPED, at(3), "c"))
    assert history.last(found, Act.STOPPED) == found[2]
    assert history.last(found, Act.CANCELLED) is None
