"""The owner index picks each job's pods and events out of a namespace in one pass, and every snapshot
read through it equals the snapshot read from the whole namespace (the lifecycle rules decide alone)."""

from __future__ import annotations

import pytest

from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.lifecycle import events_of, pods_of, snapshot
from airflow_jobs_plugin.lifecycle.owners import OwnerIndex
from tests.lifecycle.factories import (
    at,
    batch_job,
    event,
    job_pod,
    launcher_pod,
    mpi_job,
    running,
    worker_pod,
)
from tests.lifecycle.scenarios import NOT_FOUND, SCENARIOS, Scenario

WITH_JOB = [s for s in SCENARIOS if s.job is not None]
# Every scenario's objects in one namespace: same job names, recreated jobs, launchers and workers side
# by side, as a namespace keeping many jobs holds them.
ALL_PODS = [p for s in WITH_JOB for p in s.pods]
ALL_EVENTS = [e for s in WITH_JOB for e in s.events]
POOLED = OwnerIndex(ALL_PODS, ALL_EVENTS)
RULED = {
    labels.VERDICT: "ImagePull",
    labels.VERDICT_MESSAGE: "the image cannot be pulled: worker-0: ImagePullBackOff",
}


def _through_index(scenario: Scenario, index: OwnerIndex):
    pods = index.pods_for(scenario.job)
    events = index.events_for(scenario.job, pods)
    return pods, events


@pytest.mark.parametrize("scenario", WITH_JOB, ids=[s.id for s in WITH_JOB])
def test_a_snapshot_through_the_index_equals_the_snapshot_of_the_whole_namespace(scenario: Scenario) -> None:
    for pods, events, index in (
        (scenario.pods, scenario.events, OwnerIndex(scenario.pods, scenario.events)),
        (ALL_PODS, ALL_EVENTS, POOLED),
    ):
        own_pods, own_events = _through_index(scenario, index)
        kwargs = dict(queue=scenario.queue, reservation=scenario.reservation, now=scenario.now)
        assert snapshot(scenario.job, own_pods, own_events, **kwargs) == snapshot(
            scenario.job, pods, events, **kwargs
        )
        assert pods_of(scenario.job, own_pods) == pods_of(scenario.job, pods)
        mine = pods_of(scenario.job, pods)
        assert events_of(scenario.job, mine, own_events) == events_of(scenario.job, mine, events)


def test_the_index_hands_a_job_only_objects_that_name_it() -> None:
    job = next(s for s in WITH_JOB if s.pods).job
    pods = POOLED.pods_for(job)
    assert pods and len(pods) < len(ALL_PODS)


def _both_ways(job: dict, pods: list, events: list):
    index = OwnerIndex(pods, events)
    own_pods = index.pods_for(job)
    through = snapshot(job, own_pods, index.events_for(job, own_pods), now=at(60))
    return through, snapshot(job, pods, events, now=at(60))


def test_a_gone_pods_events_reach_its_job_through_the_jobs_successful_create_event() -> None:
    job = batch_job(suspend=True, annotations=RULED)
    events = [
        event("Job", "train", "SuccessfulCreate", "Created pod: train-x7k2p", type_="Normal", at_s=1),
        event("Pod", "train-x7k2p", "Failed", NOT_FOUND, at_s=10),
        event("Pod", "train-other-zz9zz", "Failed", "Error: something else", at_s=40),
    ]
    through, whole = _both_ways(job, [], events)
    assert through == whole
    assert any(NOT_FOUND in line for line in through.last_events)


def test_a_launcher_pod_known_only_by_its_launcher_jobs_name_label_is_the_mpijobs() -> None:
    job = mpi_job(workers=1)
    launcher = launcher_pod(statuses=[running("launcher", ready=True)], phase="Running", ready=True)
    del launcher["metadata"]["labels"][labels.MPI_JOB_NAME]
    launcher["metadata"]["ownerReferences"] = []
    worker = worker_pod(index=0, statuses=[running("worker", ready=True)], phase="Running", ready=True)
    through, whole = _both_ways(job, [launcher, worker, job_pod("other")], [])
    assert through == whole
    assert through.replica("launcher").pod == launcher["metadata"]["name"]
