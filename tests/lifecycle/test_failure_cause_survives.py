"""The cause of a failure outlives the pod that showed it: the pod's last Warning events stay in the
snapshot and end the failure's message, found through the events the controllers leave on the job."""

from __future__ import annotations

from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.lifecycle import JobState, Reason, TaskRef, snapshot
from airflow_jobs_plugin.readmodel import schema

from .factories import at, batch_job, event, mpi_job
from .scenarios import NOT_FOUND

RULED = {
    labels.VERDICT: "ImagePull",
    labels.VERDICT_MESSAGE: "the image cannot be pulled: worker-0: ImagePullBackOff",
}


def test_a_missing_image_job_whose_pod_is_gone_still_says_the_registrys_answer():
    job = batch_job(suspend=True, annotations=RULED)
    events = [
        event("Job", "train", "SuccessfulCreate", "Created pod: train-x7k2p", type_="Normal", at_s=1),
        event("Pod", "train-x7k2p", "Failed", NOT_FOUND, at_s=10),
        event(
            "Pod",
            "train-x7k2p",
            "BackOff",
            'Back-off pulling image "registry.example.com/vision/train:1.4"',
            at_s=30,
        ),
        event("Pod", "train-x7k2p", "Failed", "Error: ImagePullBackOff", at_s=31),
        # Another job's pod, whose name only starts the same way, is not this job's.
        event("Pod", "train-other-zz9zz", "Failed", "Error: something else", at_s=40),
    ]
    result = snapshot(job, [], events, now=at(60))
    assert (result.state, result.reason) == (JobState.FAILED, Reason.IMAGE_PULL)
    assert any(NOT_FOUND in line for line in result.last_events)
    assert not any("something else" in line for line in result.last_events)
    assert result.message.endswith("last event: Error: ImagePullBackOff")


def test_the_failure_message_keeps_the_registrys_answer_when_it_is_the_newest_word():
    job = batch_job(suspend=True, annotations=RULED)
    events = [
        event("Job", "train", "SuccessfulCreate", "Created pod: train-x7k2p", type_="Normal", at_s=1),
        event("Pod", "train-x7k2p", "Failed", NOT_FOUND, at_s=10),
    ]
    result = snapshot(job, [], events, now=at(60))
    assert result.message.endswith(f"last event: {NOT_FOUND}")


def test_an_mpi_workers_events_outlive_the_worker():
    job = mpi_job(annotations=RULED, suspend=True)
    events = [event("Pod", "dist-worker-1", "FailedMount", 'secret "hosts" not found', at_s=10)]
    result = snapshot(job, [], events, now=at(60))
    assert result.last_events == ('dist-worker-1 FailedMount: secret "hosts" not found',)


def test_a_succeeded_job_carries_no_failure_cause():
    job = batch_job(succeeded=1, conditions=[{"type": "Complete", "status": "True"}])
    events = [
        event("Job", "train", "SuccessfulCreate", "Created pod: train-x7k2p", type_="Normal", at_s=1),
        event("Pod", "train-x7k2p", "Unhealthy", "Readiness probe failed", at_s=10),
    ]
    result = snapshot(job, [], events, now=at(60))
    assert result.state is JobState.SUCCEEDED and "last event" not in result.message


def test_a_snapshot_names_the_task_instance_try_that_submitted_the_job():
    # What a sweep for orphaned jobs asks Airflow about, and whether the job still costs GPUs.
    annotations = {
        labels.DAG_ID: "nightly",
        labels.TASK_ID: "train",
        labels.RUN_ID: "scheduled__2026-01-01T00:00:00+00:00",
        labels.MAP_INDEX: "3",
        labels.TRY_NUMBER: "2",
        labels.ADMITTED_AT: "2026-03-02T09:00:00Z",
        labels.GPUS: "4",
    }
    result = snapshot(batch_job(annotations=annotations, active=1), [], now=at(60))
    assert result.task == TaskRef("nightly", "train", "scheduled__2026-01-01T00:00:00+00:00", 3, 2)
    assert result.created_at is not None
    assert result.holds_gpus
    assert schema.snapshot(result).model_dump(mode="json")["task"]["map_index"] == 3
    queued = snapshot(batch_job(suspend=True), [], now=at(60))
    assert queued.task is None and not queued.holds_gpus
