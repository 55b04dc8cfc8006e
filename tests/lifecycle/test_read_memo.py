"""A snapshot taken with a memo (what a trigger keeps from look to look) is the snapshot taken without.

The memo knows objects by identity: these looks reuse the previous look's objects where they are equal
and bring new objects where they differ, as the shared watch's cache does from one event to the next.
"""

from __future__ import annotations

import copy

import pytest

from airflow_jobs_plugin.cluster.records import ReadMemo
from airflow_jobs_plugin.lifecycle import snapshot

from .factories import batch_job, job_condition, job_pod, mpi_job, running, worker_pod
from .scenarios import SCENARIOS, Scenario


def _look(scenario: Scenario, memo: ReadMemo | None, job: dict | None, pods: list[dict]):
    return snapshot(
        job,
        pods,
        scenario.events,
        queue=scenario.queue,
        reservation=scenario.reservation,
        now=scenario.now,
        memo=memo,
    )


def _reusing(previous: list[dict], objects: list[dict]) -> list[dict]:
    """``objects``, each replaced by an equal object of ``previous`` where there is one."""
    return [next((p for p in previous if p == o), o) for o in objects]


def test_every_scenario_reads_the_same_through_one_memo_look_after_look():
    memo = ReadMemo()
    previous_pods: list[dict] = []
    previous_job: dict | None = None
    for scenario in SCENARIOS:
        job = previous_job if scenario.job is not None and scenario.job == previous_job else scenario.job
        pods = _reusing(previous_pods, scenario.pods)
        expected = _look(scenario, None, copy.deepcopy(job), copy.deepcopy(pods))
        assert _look(scenario, memo, job, pods) == expected, scenario.id
        # The same objects again: everything is the memo's.
        assert _look(scenario, memo, job, pods) == expected, scenario.id
        previous_pods, previous_job = pods, job


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.id)
def test_a_new_object_of_a_pod_or_job_is_read_afresh(scenario):
    """Each pod in turn comes back changed (its last container status gone, as a pod re-created would
    show it); then the job does. Every look reads what it is given, not what the memo kept."""
    if scenario.job is None:
        return
    memo = ReadMemo()
    pods = list(scenario.pods)
    _look(scenario, memo, scenario.job, pods)
    for i, pod in enumerate(scenario.pods):
        changed = copy.deepcopy(pod)
        (changed.get("status") or {}).pop("containerStatuses", None)
        pods = pods[:i] + [changed] + pods[i + 1 :]
        assert _look(scenario, memo, scenario.job, pods) == _look(scenario, None, scenario.job, pods)
    job = copy.deepcopy(scenario.job)
    job.setdefault("status", {})["conditions"] = []
    assert _look(scenario, memo, job, pods) == _look(scenario, None, job, pods)


def test_the_same_pods_under_a_job_of_another_kind_play_that_kinds_replicas():
    """What a record keeps of a pod's replica depends on the job's kind: an MPI worker is
    ``worker-<replica-index>`` to its MPIJob and ``worker-<rank>`` to a Job of the same uid."""
    pods = [worker_pod(index=i, phase="Running", statuses=[running()]) for i in range(2)]
    mpi = mpi_job(workers=2)
    batch = batch_job(name="dist")  # the same name, hence the same uid: it owns the workers too
    now = SCENARIOS[0].now
    memo = ReadMemo()
    seen = []
    for job in (mpi, batch, mpi):
        look = snapshot(job, pods, now=now, memo=memo)
        assert look == snapshot(job, pods, now=now)
        seen.append([(r.role, r.index, r.pod) for r in look.replicas])
    assert seen[0] != seen[1]  # the case this test is about


def test_a_finished_job_picks_the_pod_that_ended_from_records_it_kept():
    """Which pod stands for a replica depends on the job (finished or not), not on the pod alone: the
    records kept while the job ran serve its finished look too."""
    ended = job_pod(suffix="a1b2c", phase="Succeeded", created=0, ready=False)
    replacement = job_pod(suffix="d3e4f", phase="Running", statuses=[running()], created=5)
    job = batch_job()
    done = batch_job(conditions=[job_condition("Complete", "", "", at_s=60)])
    now = SCENARIOS[0].now
    memo = ReadMemo()
    for look in (job, done, job):
        assert snapshot(look, [ended, replacement], now=now, memo=memo) == snapshot(
            look, [ended, replacement], now=now
        )


def test_the_memo_keeps_the_pods_of_the_last_look_only():
    memo = ReadMemo()
    pods = [worker_pod(index=i, phase="Running", statuses=[running()]) for i in range(3)]
    records = memo.pods(pods)
    assert [r.obj for r in records] == pods
    assert memo.pods(pods)[0] is records[0]  # unchanged: kept
    memo.pods(pods[:1])  # a look without the others
    again = memo.pods(pods)
    assert again[0] is records[0]
    assert again[1] is not records[1] and again[1].obj is pods[1]  # dropped, then read anew
