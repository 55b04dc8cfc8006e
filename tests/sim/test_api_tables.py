"""Server-side Table printing: the pod STATUS rules, job STATUS, ages and durations."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from airflow_jobs_sim import tables

NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=timezone.utc)


def ts(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def running(ready=True):
    return {"state": {"running": {"startedAt": ts(60)}}, "ready": ready, "restartCount": 0}


def waiting(reason):
    return {"state": {"waiting": {"reason": reason}}, "ready": False, "restartCount": 0}


def terminated(exit_code=0, reason=None, signal=None):
    state = {"exitCode": exit_code, "finishedAt": ts(30)}
    if reason:
        state["reason"] = reason
    if signal:
        state["signal"] = signal
    return {"state": {"terminated": state}, "ready": False, "restartCount": 0}


def make_pod(
    containers=("main",),
    init=(),
    statuses=(),
    init_statuses=(),
    phase="Pending",
    conditions=(),
    deleting=False,
    reason=None,
    sidecars=(),
):
    pod = {
        "metadata": {"name": "p", "creationTimestamp": ts(300)},
        "spec": {
            "containers": [{"name": c} for c in containers],
            "initContainers": [
                {"name": c, **({"restartPolicy": "Always"} if c in sidecars else {})} for c in init
            ],
        },
        "status": {"phase": phase, "conditions": list(conditions)},
    }
    if statuses:
        pod["status"]["containerStatuses"] = [
            dict(s, name=n) for n, s in zip(containers, statuses, strict=True)
        ]
    if init_statuses:
        pod["status"]["initContainerStatuses"] = [
            dict(s, name=n) for n, s in zip(init, init_statuses, strict=True)
        ]
    if deleting:
        pod["metadata"]["deletionTimestamp"] = ts(0)
    if reason:
        pod["status"]["reason"] = reason
    return pod


READY = {"type": "Ready", "status": "True"}
INITIALIZED = {"type": "Initialized", "status": "True"}


@pytest.mark.parametrize(
    ("scenario", "pod", "status"),
    [
        ("unscheduled", make_pod(), "Pending"),
        (
            "scheduling gated",
            make_pod(conditions=[{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]),
            "SchedulingGated",
        ),
        ("pulling", make_pod(statuses=[waiting("ContainerCreating")]), "ContainerCreating"),
        ("pull failed", make_pod(statuses=[waiting("ErrImagePull")]), "ErrImagePull"),
        ("pull back-off", make_pod(statuses=[waiting("ImagePullBackOff")]), "ImagePullBackOff"),
        ("running", make_pod(statuses=[running()], phase="Running", conditions=[READY]), "Running"),
        ("crash loop", make_pod(statuses=[waiting("CrashLoopBackOff")], phase="Running"), "CrashLoopBackOff"),
        ("completed", make_pod(statuses=[terminated(0, "Completed")], phase="Succeeded"), "Completed"),
        ("error", make_pod(statuses=[terminated(1, "Error")], phase="Failed"), "Error"),
        ("oom", make_pod(statuses=[terminated(137, "OOMKilled")], phase="Failed"), "OOMKilled"),
        ("exit code without reason", make_pod(statuses=[terminated(3)], phase="Failed"), "ExitCode:3"),
        ("signal without reason", make_pod(statuses=[terminated(137, signal=9)], phase="Failed"), "Signal:9"),
        (
            "first of two init containers",
            make_pod(
                init=("a", "b"),
                init_statuses=[waiting("PodInitializing"), waiting("PodInitializing")],
                statuses=[waiting("PodInitializing")],
            ),
            "Init:0/2",
        ),
        (
            "second of two init containers",
            make_pod(
                init=("a", "b"),
                init_statuses=[terminated(0, "Completed"), running()],
                statuses=[waiting("PodInitializing")],
            ),
            "Init:1/2",
        ),
        (
            "init container failed",
            make_pod(
                init=("a",), init_statuses=[terminated(1, "Error")], statuses=[waiting("PodInitializing")]
            ),
            "Init:Error",
        ),
        (
            "init container exit code",
            make_pod(init=("a",), init_statuses=[terminated(2)], statuses=[waiting("PodInitializing")]),
            "Init:ExitCode:2",
        ),
        (
            "init container signal",
            make_pod(
                init=("a",), init_statuses=[terminated(2, signal=15)], statuses=[waiting("PodInitializing")]
            ),
            "Init:Signal:15",
        ),
        (
            "init container crash loop",
            make_pod(
                init=("a",),
                init_statuses=[waiting("CrashLoopBackOff")],
                statuses=[waiting("PodInitializing")],
            ),
            "Init:CrashLoopBackOff",
        ),
        (
            "init done, main pulling",
            make_pod(
                init=("a",), init_statuses=[terminated(0, "Completed")], statuses=[waiting("PodInitializing")]
            ),
            "PodInitializing",
        ),
        (
            "sidecar started, main running",
            make_pod(
                init=("side",),
                sidecars=("side",),
                init_statuses=[dict(running(), started=True)],
                statuses=[running()],
                phase="Running",
                conditions=[READY, INITIALIZED],
            ),
            "Running",
        ),
        (
            "one done one running and ready",
            make_pod(
                containers=("a", "b"),
                statuses=[terminated(0, "Completed"), running()],
                phase="Running",
                conditions=[READY],
            ),
            "Running",
        ),
        (
            "one done one running not ready",
            make_pod(
                containers=("a", "b"), statuses=[running(), terminated(0, "Completed")], phase="Running"
            ),
            "NotReady",
        ),
        ("terminating", make_pod(statuses=[running()], phase="Running", deleting=True), "Terminating"),
        (
            "deleted after success",
            make_pod(statuses=[terminated(0, "Completed")], phase="Succeeded", deleting=True),
            "Completed",
        ),
        (
            "node lost",
            make_pod(statuses=[running()], phase="Running", deleting=True, reason="NodeLost"),
            "Unknown",
        ),
        ("evicted", make_pod(statuses=[terminated(137, "Error")], phase="Failed", reason="Evicted"), "Error"),
        ("evicted without statuses", make_pod(phase="Failed", reason="Evicted"), "Evicted"),
    ],
)
def test_pod_status_column(scenario, pod, status):
    assert tables.pod_columns(pod, NOW)[1] == status, scenario


def test_ready_column_counts_ready_app_containers_and_started_sidecars():
    pod = make_pod(
        containers=("a", "b"),
        init=("side",),
        sidecars=("side",),
        init_statuses=[dict(running(), started=True, ready=True)],
        statuses=[running(), running(ready=False)],
        phase="Running",
        conditions=[INITIALIZED],
    )
    assert tables.pod_columns(pod, NOW)[0] == "2/3"


def test_restarts_column_shows_count_and_age_of_last_restart():
    status = running()
    status["restartCount"] = 2
    status["lastState"] = {"terminated": {"exitCode": 1, "finishedAt": ts(45)}}
    pod = make_pod(statuses=[status], phase="Running", conditions=[READY])
    assert tables.pod_columns(pod, NOW)[2] == "2 (45s ago)"
    assert tables.pod_columns(pod, NOW)[3] == "5m"


@pytest.mark.parametrize(
    ("conditions", "deleting", "status"),
    [
        ([], False, "Running"),
        ([{"type": "Complete", "status": "True"}], False, "Complete"),
        ([{"type": "Failed", "status": "True"}], True, "Failed"),
        ([], True, "Terminating"),
        ([{"type": "Suspended", "status": "True"}], False, "Suspended"),
        ([{"type": "Suspended", "status": "False"}], False, "Running"),
        ([{"type": "FailureTarget", "status": "True"}], False, "FailureTarget"),
        ([{"type": "SuccessCriteriaMet", "status": "True"}], False, "SuccessCriteriaMet"),
    ],
)
def test_job_status_column(conditions, deleting, status):
    job = {"metadata": {"name": "j"}, "status": {"conditions": conditions}}
    if deleting:
        job["metadata"]["deletionTimestamp"] = ts(0)
    assert tables.job_status(job) == status


def test_job_row_completions_and_duration():
    job = {
        "metadata": {"name": "j", "creationTimestamp": ts(200)},
        "spec": {
            "completions": 1,
            "template": {"spec": {"containers": [{"name": "main", "image": "img:1"}]}},
            "selector": {"matchLabels": {"a": "b"}},
        },
        "status": {
            "succeeded": 1,
            "startTime": ts(190),
            "completionTime": ts(100),
            "conditions": [{"type": "Complete", "status": "True"}],
        },
    }
    assert tables.job_row(job, NOW) == ["j", "Complete", "1/1", "90s", "3m20s", "main", "img:1", "a=b"]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (59, "59s"),
        (119, "119s"),
        (120, "2m"),
        (130, "2m10s"),
        (600, "10m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 600, "3h10m"),
        (10 * 3600, "10h"),
        (50 * 3600, "2d2h"),
        (9 * 86400, "9d"),
        (800 * 86400, "2y70d"),
    ],
)
def test_human_duration(seconds, text):
    assert tables.human_duration(seconds) == text


def test_table_rows_carry_partial_object_metadata_by_default():
    pod = make_pod()
    table = tables.table("pods", [pod], NOW, "7")
    assert [c["name"] for c in table["columnDefinitions"]][:5] == [
        "Name",
        "Ready",
        "Status",
        "Restarts",
        "Age",
    ]
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    assert table["metadata"]["resourceVersion"] == "7"
