"""Which of a replica's pods is its current one, when creation times (one-second precision) tie."""

from __future__ import annotations

import pytest

from airflow_jobs_plugin.lifecycle.replicas import current_pod, replicas_of

from .factories import batch_job, job_pod, running, terminated


def version(pod: dict, resource_version: str) -> dict:
    pod["metadata"]["resourceVersion"] = resource_version
    return pod


def failed(suffix: str, created: float = 0, resource_version: str = "100") -> dict:
    pod = job_pod(suffix=suffix, phase="Failed", statuses=[terminated("main", 1)], created=created)
    return version(pod, resource_version)


def alive(suffix: str, created: float = 0, resource_version: str = "100", **kwargs) -> dict:
    pod = job_pod(suffix=suffix, phase="Running", statuses=[running("main")], created=created, **kwargs)
    return version(pod, resource_version)


def name(pod: dict | None) -> str | None:
    return pod["metadata"]["name"] if pod is not None else None


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        pytest.param(
            [alive("new22", resource_version="120"), failed("old11", resource_version="101")],
            "train-new22",
            id="the-replacement-listed-first-beats-the-failed-pod-of-the-same-second",
        ),
        pytest.param(
            [failed("old11", resource_version="999"), alive("new22", resource_version="120")],
            "train-new22",
            id="a-live-pod-beats-a-failed-one-whatever-their-versions",
        ),
        pytest.param(
            [alive("gone1", resource_version="150", deleting=True), alive("new22", resource_version="140")],
            "train-new22",
            id="a-pod-being-deleted-gives-way-to-its-replacement",
        ),
        pytest.param(
            [failed("b2222", resource_version="10"), failed("a1111", resource_version="9")],
            "train-b2222",
            id="among-ended-pods-of-the-same-second-the-higher-version-wins-compared-as-a-number",
        ),
        pytest.param(
            [failed("later", created=5, resource_version="1"), failed("early", resource_version="500")],
            "train-later",
            id="among-ended-pods-the-later-creation-second-wins-over-any-version",
        ),
        pytest.param(
            [failed("first", resource_version="x"), failed("secnd", resource_version="y")],
            "train-secnd",
            id="opaque-versions-of-the-same-second-leave-the-list-order",
        ),
        pytest.param([], None, id="no-pod"),
    ],
)
def test_the_current_pod_of_a_replica(pods, expected):
    assert name(current_pod(pods)) == expected


def test_a_job_whose_failed_pod_and_replacement_share_a_second_reads_the_replacement():
    pods = [alive("new22", resource_version="120"), failed("old11", resource_version="101")]
    [replica] = replicas_of(batch_job(), pods)
    assert (replica.pod, replica.status) == ("train-new22", "Running")


def test_of_a_finished_job_the_pod_that_ended_stands_for_the_replica_not_a_newer_leftover():
    # Kueue suspended the job while its pod ran; on readmission the Job controller created a
    # replacement, then the terminating pod finished its work and succeeded: the job is Complete and
    # the replacement, which never ran, is a leftover the controller deletes. The outcome is the
    # succeeded pod's, exit code included.
    succeeded = job_pod(suffix="old", phase="Succeeded", statuses=[terminated("main", 0)], created=0)
    leftover = job_pod(suffix="new", phase="Pending", created=5)
    assert current_pod([succeeded, leftover], finished=True) is succeeded
    assert current_pod([succeeded, leftover]) is leftover  # while the job runs, the live pod stands
