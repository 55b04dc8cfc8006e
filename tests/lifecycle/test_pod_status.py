"""kubectl's READY, STATUS and RESTARTS columns: one pod per STATUS string kubectl can print."""

from __future__ import annotations

import pytest

from airflow_jobs_plugin.lifecycle import (
    PodRow,
    human_duration,
    pod_ready,
    pod_restarts,
    pod_row,
    pod_status,
    restarts_column,
    timestamp_age,
)

from .factories import at, ended, job_pod, launcher_pod, parses, pod, running, terminated, waiting, worker_pod

UNSCHEDULABLE = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
INIT = ("wait-for-workers", "fetch-code")


def _cond(kind: str, ok: bool) -> dict:
    return {
        "type": kind,
        "status": "True" if ok else "False",
        "lastProbeTime": None,
        "lastTransitionTime": "2026-03-02T09:00:05Z",
    }


# (scenario, pod, STATUS, READY, RESTARTS)
CASES = [
    ("pending-not-yet-scheduled", job_pod(node=None), "Pending", "0/1", 0),
    ("pending-unschedulable", job_pod(node=None, unschedulable_message=UNSCHEDULABLE), "Pending", "0/1", 0),
    ("scheduling-gated", job_pod(node=None, gated=True), "SchedulingGated", "0/1", 0),
    ("container-creating", job_pod(statuses=[waiting()]), "ContainerCreating", "0/1", 0),
    (
        "init-0-of-2-first-init-running",
        launcher_pod(
            init_containers=INIT,
            init_statuses=[
                running("wait-for-workers", ready=False),
                waiting("fetch-code", "PodInitializing"),
            ],
            statuses=[waiting("main", "PodInitializing")],
        ),
        "Init:0/2",
        "0/1",
        0,
    ),
    (
        "init-1-of-2-launcher-waiting-for-second-init",
        launcher_pod(
            init_containers=INIT,
            init_statuses=[terminated("wait-for-workers"), running("fetch-code", ready=False)],
            statuses=[waiting("main", "PodInitializing")],
        ),
        "Init:1/2",
        "0/1",
        0,
    ),
    (
        "init-containers-not-reported-yet-is-pending",
        launcher_pod(init_containers=INIT, initialized=False, statuses=[]),
        "Pending",
        "0/1",
        0,
    ),
    (
        "init-error",
        launcher_pod(
            init_containers=INIT,
            init_statuses=[terminated("wait-for-workers", 1), waiting("fetch-code", "PodInitializing")],
            statuses=[waiting("main", "PodInitializing")],
        ),
        "Init:Error",
        "0/1",
        0,
    ),
    (
        "init-crash-loop-back-off",
        launcher_pod(
            init_containers=INIT,
            init_statuses=[
                waiting("wait-for-workers", "CrashLoopBackOff", "back-off 1m20s", restarts=4, last=ended(1)),
                waiting("fetch-code", "PodInitializing"),
            ],
            statuses=[waiting("main", "PodInitializing")],
        ),
        "Init:CrashLoopBackOff",
        "0/1",
        4,
    ),
    (
        "init-exit-code-without-reason",
        launcher_pod(
            init_containers=INIT,
            init_statuses=[terminated("wait-for-workers", 3, ""), waiting("fetch-code", "PodInitializing")],
            statuses=[waiting("main", "PodInitializing")],
        ),
        "Init:ExitCode:3",
        "0/1",
        0,
    ),
    (
        "init-signal-without-reason",
        launcher_pod(
            init_containers=INIT,
            init_statuses=[
                terminated("wait-for-workers", 137, "", signal=9),
                waiting("fetch-code", "PodInitializing"),
            ],
            statuses=[waiting("main", "PodInitializing")],
        ),
        "Init:Signal:9",
        "0/1",
        0,
    ),
    (
        "init-image-pull-back-off",
        launcher_pod(
            init_containers=INIT,
            init_statuses=[
                waiting("wait-for-workers", "ImagePullBackOff"),
                waiting("fetch-code", "PodInitializing"),
            ],
            statuses=[waiting("main", "PodInitializing")],
        ),
        "Init:ImagePullBackOff",
        "0/1",
        0,
    ),
    (
        "pod-initializing-after-init-containers",
        launcher_pod(
            init_containers=INIT,
            init_statuses=[terminated("wait-for-workers"), terminated("fetch-code")],
            statuses=[waiting("main", "PodInitializing")],
        ),
        "PodInitializing",
        "0/1",
        0,
    ),
    (
        "started-sidecar-is-skipped",
        job_pod(
            init_containers=("fetch-code",),
            sidecars=("log-shipper",),
            init_statuses=[running("log-shipper", ready=True), running("fetch-code", ready=False)],
            statuses=[waiting("main", "PodInitializing")],
        ),
        "Init:1/2",
        "1/2",
        0,
    ),
    (
        "sidecar-not-started-blocks-init",
        job_pod(
            sidecars=("log-shipper",),
            init_statuses=[waiting("log-shipper", "ContainerCreating")],
            statuses=[waiting("main", "PodInitializing")],
        ),
        "Init:ContainerCreating",
        "0/2",
        0,
    ),
    ("running", job_pod(phase="Running", statuses=[running()]), "Running", "1/1", 0),
    (
        "running-with-ready-sidecar",
        job_pod(
            phase="Running",
            sidecars=("log-shipper",),
            init_statuses=[running("log-shipper", restarts=1, last=ended(2))],
            statuses=[running()],
        ),
        "Running",
        "2/2",
        1,
    ),
    ("running-not-ready", worker_pod(phase="Running", statuses=[running(ready=False)]), "Running", "0/1", 0),
    (
        "err-image-pull",
        job_pod(statuses=[waiting("main", "ErrImagePull", "manifest unknown")]),
        "ErrImagePull",
        "0/1",
        0,
    ),
    (
        "image-pull-back-off",
        job_pod(statuses=[waiting("main", "ImagePullBackOff")]),
        "ImagePullBackOff",
        "0/1",
        0,
    ),
    (
        "invalid-image-name",
        job_pod(statuses=[waiting("main", "InvalidImageName")]),
        "InvalidImageName",
        "0/1",
        0,
    ),
    (
        "create-container-config-error",
        job_pod(statuses=[waiting("main", "CreateContainerConfigError")]),
        "CreateContainerConfigError",
        "0/1",
        0,
    ),
    (
        "crash-loop-back-off",
        worker_pod(
            phase="Running", statuses=[waiting("main", "CrashLoopBackOff", restarts=5, last=ended(1))]
        ),
        "CrashLoopBackOff",
        "0/1",
        5,
    ),
    (
        "error-exit-code",
        job_pod(phase="Failed", statuses=[terminated("main", 1)], ready=False),
        "Error",
        "0/1",
        0,
    ),
    (
        "oom-killed",
        job_pod(phase="Failed", statuses=[terminated("main", 137, "OOMKilled")], ready=False),
        "OOMKilled",
        "0/1",
        0,
    ),
    (
        "container-cannot-run",
        job_pod(phase="Failed", statuses=[terminated("main", 128, "ContainerCannotRun")], ready=False),
        "ContainerCannotRun",
        "0/1",
        0,
    ),
    ("completed", job_pod(phase="Succeeded", statuses=[terminated()], ready=False), "Completed", "0/1", 0),
    (
        "exit-code-without-reason",
        job_pod(phase="Failed", statuses=[terminated("main", 2, "")], ready=False),
        "ExitCode:2",
        "0/1",
        0,
    ),
    (
        "signal-without-reason",
        job_pod(phase="Failed", statuses=[terminated("main", 143, "", signal=15)], ready=False),
        "Signal:15",
        "0/1",
        0,
    ),
    (
        "first-container-decides",
        job_pod(
            phase="Running",
            containers=("main", "metrics"),
            statuses=[waiting("main", "CrashLoopBackOff", restarts=1, last=ended(1)), running("metrics")],
        ),
        "CrashLoopBackOff",
        "1/2",
        1,
    ),
    (
        "completed-with-running-container-and-ready-pod-is-running",
        job_pod(
            phase="Running",
            containers=("main", "metrics"),
            statuses=[terminated("main"), running("metrics")],
            conditions=[_cond("Initialized", True), _cond("Ready", True), _cond("PodScheduled", True)],
        ),
        "Running",
        "1/2",
        0,
    ),
    (
        "completed-with-running-container-and-unready-pod-is-not-ready",
        job_pod(
            phase="Running",
            containers=("main", "metrics"),
            statuses=[terminated("main"), running("metrics")],
            conditions=[_cond("Initialized", True), _cond("Ready", False), _cond("PodScheduled", True)],
        ),
        "NotReady",
        "1/2",
        0,
    ),
    (
        "evicted",
        job_pod(
            phase="Failed",
            reason="Evicted",
            message="The node was low on resource: memory.",
            statuses=[terminated("main", 137, "ContainerStatusUnknown")],
            ready=False,
        ),
        "ContainerStatusUnknown",
        "0/1",
        0,
    ),
    (
        "evicted-before-containers-reported",
        job_pod(
            phase="Failed", reason="Evicted", message="The node was low on resource: memory.", ready=False
        ),
        "Evicted",
        "0/1",
        0,
    ),
    ("terminating", job_pod(phase="Running", statuses=[running()], deleting=True), "Terminating", "1/1", 0),
    (
        "unknown-on-lost-node",
        job_pod(phase="Running", statuses=[running()], deleting=True, reason="NodeLost"),
        "Unknown",
        "1/1",
        0,
    ),
    (
        "deleted-after-success-stays-completed",
        job_pod(phase="Succeeded", statuses=[terminated()], deleting=True, ready=False),
        "Completed",
        "0/1",
        0,
    ),
]


@pytest.mark.parametrize(("pod", "status"), [(c[1], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_status_column(pod, status):
    assert pod_status(pod) == status


@pytest.mark.parametrize(("pod", "ready"), [(c[1], c[3]) for c in CASES], ids=[c[0] for c in CASES])
def test_ready_column(pod, ready):
    assert pod_ready(pod) == ready


@pytest.mark.parametrize(("pod", "restarts"), [(c[1], c[4]) for c in CASES], ids=[c[0] for c in CASES])
def test_restart_count(pod, restarts):
    assert pod_restarts(pod) == restarts


@pytest.mark.parametrize("pod", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_fixture_parses_with_the_kubernetes_models(pod):
    assert parses(pod, "V1Pod")


def test_restarts_column_says_how_long_ago_the_last_restart_was():
    crashing = worker_pod(
        phase="Running", statuses=[waiting("main", "CrashLoopBackOff", restarts=3, last=ended(1, at_s=200))]
    )
    assert restarts_column(crashing, at(245)) == "3 (45s ago)"


def test_restarts_column_without_restarts_is_a_plain_zero():
    assert restarts_column(job_pod(phase="Running", statuses=[running()]), at(600)) == "0"


def test_init_container_restarts_count_while_initializing():
    initializing = launcher_pod(
        init_containers=INIT,
        init_statuses=[
            waiting("wait-for-workers", "CrashLoopBackOff", restarts=2, last=ended(1, at_s=100)),
            waiting("fetch-code", "PodInitializing"),
        ],
        statuses=[waiting("main", "PodInitializing", restarts=0)],
    )
    assert restarts_column(initializing, at(400)) == "2 (5m ago)"


def test_init_container_restarts_are_forgotten_once_initialized():
    done = launcher_pod(
        phase="Running",
        init_containers=("wait-for-workers",),
        init_statuses=[{**terminated("wait-for-workers"), "restartCount": 2}],
        statuses=[running()],
    )
    assert pod_restarts(done) == 0


def test_pod_row_is_the_whole_kubectl_line():
    crashing = worker_pod(
        phase="Running",
        created=0,
        statuses=[waiting("main", "CrashLoopBackOff", restarts=1, last=ended(1, at_s=60))],
    )
    assert pod_row(crashing, at(3 * 3600 + 125)) == PodRow(
        name="dist-worker-0", ready="0/1", status="CrashLoopBackOff", restarts="1 (3h1m ago)", age="3h2m"
    )


def test_age_without_timestamp_is_unknown():
    assert timestamp_age(None, at(0)) == "<unknown>"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-5, "<invalid>"),
        (-1, "0s"),
        (0, "0s"),
        (119, "119s"),
        (120, "2m"),
        (125, "2m5s"),
        (599, "9m59s"),
        (600, "10m"),
        (179 * 60 + 59, "179m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 60 * 25, "3h25m"),
        (8 * 3600 + 60 * 25, "8h"),
        (47 * 3600, "47h"),
        (48 * 3600, "2d"),
        (3 * 86400 + 5 * 3600, "3d5h"),
        (8 * 86400, "8d"),
        (729 * 86400, "729d"),
        (730 * 86400, "2y"),
        (800 * 86400, "2y70d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_human_duration_matches_kubectl(seconds, text):
    assert human_duration(seconds) == text


def test_pod_without_status_prints_an_empty_status():
    bare = pod("bare", node=None)
    del bare["status"]
    assert pod_status(bare) == ""
    assert pod_ready(bare) == "0/1"
