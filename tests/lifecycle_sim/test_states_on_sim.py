"""Every job state, reached by the simulated cluster and read back by the lifecycle model.

Each scenario creates a real ``batch/v1`` Job or ``kubeflow.org/v2beta1`` MPIJob, lets the simulator
drive it (scenario annotations on the pod templates, faults, deletions) until its own objects show
the situation, then checks that the snapshot computed from exactly those objects names the expected
state, reason and per-replica kubectl STATUS, and that for every pod the lifecycle's STATUS equals
what the simulator's API server prints in its Table answer (and what kubectl prints, where it is
installed). The lifecycle model and the simulator's printer were written apart: here they must agree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.lifecycle import JobState, Reason, pod_status

from .bench import (
    FOREVER,
    KUBECTL,
    Bench,
    Printed,
    Seen,
    batch_job,
    check,
    container_state,
    is_running,
    mpi_job,
    waiting_reason,
)

# A process that ignores SIGTERM keeps its pod in the termination grace period until SIGKILL.
STUBBORN = ["sh", "-c", "trap '' TERM; while :; do sleep 0.05; done"]
WORKERS_RUNNING = {"worker-0": "Running", "worker-1": "Running"}


def phase(pod: dict | None) -> str | None:
    return ((pod or {}).get("status") or {}).get("phase")


def workers(seen: Seen) -> list[dict]:
    return [p for p in seen.pods if "-worker-" in p["metadata"]["name"]]


def workers_running(seen: Seen, ready: bool = True) -> bool:
    return bool(workers(seen)) and all(is_running(p, ready=ready) for p in workers(seen))


def workers_waiting(seen: Seen, reason: str) -> bool:
    return bool(workers(seen)) and all(waiting_reason(p) == reason for p in workers(seen))


def launcher(seen: Seen) -> dict | None:
    return seen.pod("train-launcher-")


def launchers(seen: Seen) -> list[dict]:
    return [p for p in seen.pods if p["metadata"]["name"].startswith("train-launcher-")]


def failed(seen: Seen) -> object:
    return seen.condition("Failed")


def worker_failures(seen: Seen) -> int:
    """The failed workers the MPI operator counted in the MPIJob's status."""
    statuses = ((seen.job or {}).get("status") or {}).get("replicaStatuses") or {}
    return int((statuses.get("Worker") or {}).get("failed") or 0)


def scheduled_reason(pod: dict | None) -> str | None:
    for cond in ((pod or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled":
            return cond.get("reason")
    return None


def evict_job_pod_once_running(bench: Bench, name: str) -> None:
    pod = bench.wait("Job", name, lambda s: is_running(s.pod())).pod()
    assert pod is not None
    bench.cluster.controllers.evict_pod(bench.namespace, pod["metadata"]["name"])


def evict_worker_0_once_running(bench: Bench, name: str) -> None:
    bench.wait("MPIJob", name, lambda s: is_running(launcher(s)) and workers_running(s))
    bench.cluster.controllers.evict_pod(bench.namespace, "train-worker-0")


@dataclass(frozen=True)
class Case:
    """A job, what is done to it once created, when the simulator is there, and what must be read."""

    id: str
    manifest: dict
    until: Callable[[Seen], object]
    state: JobState
    reason: Reason
    replicas: dict[str, str]
    exit_code: int | None = None
    act: Callable[[Bench, str], None] | None = None

    @property
    def kind(self) -> str:
        return self.manifest["kind"]


CASES = [
    Case(
        "QUEUED-Pending-an-mpi-job-created-suspended",
        mpi_job("train", launcher={"main": FOREVER}, suspend=True),
        lambda s: s.condition("Suspended"),
        JobState.QUEUED,
        Reason.PENDING,
        {"launcher": "<none>", "worker-0": "<none>", "worker-1": "<none>"},
    ),
    Case(
        "SCHEDULING-SchedulingGated",
        batch_job("train", {"main": FOREVER}, pod_spec={"schedulingGates": [{"name": "example.com/gate"}]}),
        lambda s: scheduled_reason(s.pod()) == "SchedulingGated",
        JobState.SCHEDULING,
        Reason.SCHEDULING_GATED,
        {"worker-0": "SchedulingGated"},
    ),
    Case(
        "STARTING-ContainerCreating-during-a-long-pull",
        batch_job("train", {"main": {"pull": 3000, "run": None}}, image="trainer:slow-pull"),
        lambda s: (
            (s.pod() or {}).get("spec", {}).get("nodeName") and waiting_reason(s.pod()) == "ContainerCreating"
        ),
        JobState.STARTING,
        Reason.CONTAINER_CREATING,
        {"worker-0": "ContainerCreating"},
    ),
    Case(
        "STARTING-Init-0-of-1-on-an-mpi-launcher",
        mpi_job("train", launcher_init=True, launcher={"wait-for-workers": {"run": 3000}, "main": FOREVER}),
        lambda s: (
            "running" in container_state(launcher(s), "wait-for-workers", init=True) and workers_running(s)
        ),
        JobState.STARTING,
        Reason.INITIALIZING,
        {"launcher": "Init:0/1", **WORKERS_RUNNING},
    ),
    Case(
        "STARTING-PodInitializing-on-an-mpi-launcher",
        mpi_job(
            "train",
            launcher_init=True,
            launcher_image="mpi-launcher:slow-pull",
            launcher={"wait-for-workers": {"run": 0}, "main": {"pull": 3000, "run": None}},
        ),
        lambda s: (
            "terminated" in container_state(launcher(s), "wait-for-workers", init=True)
            and waiting_reason(launcher(s)) == "PodInitializing"
            and workers_running(s)
        ),
        JobState.STARTING,
        Reason.INITIALIZING,
        {"launcher": "PodInitializing", **WORKERS_RUNNING},
    ),
    Case(
        "STARTING-ImagePull-while-the-image-pull-backs-off",
        batch_job("train", image="trainer:not-found"),
        lambda s: waiting_reason(s.pod()) == "ImagePullBackOff",
        JobState.STARTING,
        Reason.IMAGE_PULL,
        {"worker-0": "ImagePullBackOff"},
    ),
    Case(
        "STARTING-CreateContainerConfigError-for-a-malformed-scenario",
        batch_job("train", {"main": {"rnu": 1}}),
        lambda s: waiting_reason(s.pod()) == "CreateContainerConfigError",
        JobState.STARTING,
        Reason.CONTAINER_CONFIG_ERROR,
        {"worker-0": "CreateContainerConfigError"},
    ),
    Case(
        "RUNNING-a-single-pod-job",
        batch_job("train", {"main": FOREVER}),
        lambda s: is_running(s.pod()),
        JobState.RUNNING,
        Reason.RUNNING,
        {"worker-0": "Running"},
    ),
    Case(
        "RUNNING-an-mpi-job-with-2-workers",
        mpi_job("train", launcher={"main": FOREVER}),
        lambda s: s.condition("Running") and is_running(launcher(s)) and workers_running(s),
        JobState.RUNNING,
        Reason.RUNNING,
        {"launcher": "Running", **WORKERS_RUNNING},
    ),
    Case(
        "DEGRADED-NotReady-mpi-workers-running-but-not-ready",
        mpi_job("train", launcher={"main": FOREVER}, worker={"main": {"run": None, "ready": 3000}}),
        lambda s: is_running(launcher(s)) and workers_running(s, ready=False),
        JobState.DEGRADED,
        Reason.NOT_READY,
        {"launcher": "Running", **WORKERS_RUNNING},
    ),
    Case(
        "DEGRADED-CrashLoopBackOff-mpi-workers-restarting-next-to-a-running-launcher",
        mpi_job(
            "train",
            launcher={"main": FOREVER},
            worker={"main": {"run": 1, "exit": 1}},
            worker_restart="OnFailure",
        ),
        lambda s: is_running(launcher(s)) and workers_waiting(s, "CrashLoopBackOff"),
        JobState.DEGRADED,
        Reason.CRASH_LOOP_BACK_OFF,
        {"launcher": "Running", "worker-0": "CrashLoopBackOff", "worker-1": "CrashLoopBackOff"},
        exit_code=1,
    ),
    Case(
        "RETRYING-CrashLoopBackOff-with-restart-policy-OnFailure",
        batch_job("train", {"main": {"run": 1, "exit": 2}}, restart="OnFailure", backoffLimit=6),
        lambda s: waiting_reason(s.pod()) == "CrashLoopBackOff",
        JobState.RETRYING,
        Reason.CRASH_LOOP_BACK_OFF,
        {"worker-0": "CrashLoopBackOff"},
        exit_code=2,
    ),
    Case(
        "RETRYING-Init-CrashLoopBackOff-on-an-mpi-launcher",
        mpi_job(
            "train",
            launcher_init=True,
            launcher_restart="OnFailure",
            launcher={"wait-for-workers": {"run": 1, "exit": 1}, "main": FOREVER},
        ),
        lambda s: (
            waiting_reason(launcher(s), "wait-for-workers", init=True) == "CrashLoopBackOff"
            and workers_running(s)
        ),
        JobState.RETRYING,
        Reason.CRASH_LOOP_BACK_OFF,
        {"launcher": "Init:CrashLoopBackOff", **WORKERS_RUNNING},
        exit_code=1,
    ),
    Case(
        "SUCCEEDED-a-single-pod-job",
        batch_job("train", {"main": {"run": 1}}),
        lambda s: s.condition("Complete"),
        JobState.SUCCEEDED,
        Reason.COMPLETED,
        {"worker-0": "Completed"},
        exit_code=0,
    ),
    Case(
        "SUCCEEDED-an-mpi-job",
        mpi_job("train", launcher={"main": {"run": 1}}, cleanPodPolicy="Running"),
        lambda s: s.condition("Succeeded") and not s.pod("train-worker"),
        JobState.SUCCEEDED,
        Reason.COMPLETED,
        {"launcher": "Completed", "worker-0": "<none>", "worker-1": "<none>"},
        exit_code=0,
    ),
    # With cleanPodPolicy None mpi-operator leaves the workers running after the launcher succeeded:
    # they still hold their GPUs, so the job is not over.
    Case(
        "TERMINATING-an-mpi-job-that-succeeded-while-its-workers-still-run",
        mpi_job("train", launcher={"main": {"run": 1}}, cleanPodPolicy="None"),
        lambda s: s.condition("Succeeded"),
        JobState.TERMINATING,
        Reason.COMPLETED,
        {"launcher": "Completed", **WORKERS_RUNNING},
        exit_code=0,
    ),
    Case(
        "FAILED-BackoffLimitExceeded-after-retries",
        batch_job("train", {"main": {"run": 1, "exit": 3}}, backoffLimit=1),
        failed,
        JobState.FAILED,
        Reason.BACKOFF_LIMIT_EXCEEDED,
        {"worker-0": "Error"},
        exit_code=3,
    ),
    Case(
        "FAILED-DeadlineExceeded",
        batch_job("train", {"main": FOREVER}, activeDeadlineSeconds=2),
        lambda s: failed(s) and not s.pods,
        JobState.FAILED,
        Reason.DEADLINE_EXCEEDED,
        {"worker-0": "<none>"},
    ),
    # The MPIJob failed but, under the simulator's default cleanPodPolicy None (mpi-operator's too), its
    # workers keep running and holding their GPUs: the job is TERMINATING with the failure's reason.
    Case(
        "TERMINATING-failed-ImagePull-mpi-workers-backing-off-when-the-deadline-hits",
        mpi_job(
            "train",
            launcher={"main": FOREVER},
            worker_image="mpi-trainer:not-found",
            activeDeadlineSeconds=30,
        ),
        lambda s: failed(s) and workers_waiting(s, "ImagePullBackOff"),
        JobState.TERMINATING,
        Reason.IMAGE_PULL,
        {"launcher": "<none>", "worker-0": "ImagePullBackOff", "worker-1": "ImagePullBackOff"},
    ),
    Case(
        "TERMINATING-failed-InvalidImageName-mpi-workers-when-the-deadline-hits",
        mpi_job(
            "train",
            launcher={"main": FOREVER},
            worker_image="Mpi-Trainer:Bad Tag",
            activeDeadlineSeconds=30,
        ),
        lambda s: failed(s) and workers_waiting(s, "InvalidImageName"),
        JobState.TERMINATING,
        Reason.INVALID_IMAGE_NAME,
        {"launcher": "<none>", "worker-0": "InvalidImageName", "worker-1": "InvalidImageName"},
    ),
    Case(
        "FAILED-ContainerCannotRun",
        batch_job("train", {"main": {"cannot_run": True}}, backoffLimit=0),
        failed,
        JobState.FAILED,
        Reason.CONTAINER_CANNOT_RUN,
        {"worker-0": "ContainerCannotRun"},
        exit_code=128,
    ),
    Case(
        "FAILED-OOMKilled",
        batch_job("train", {"main": {"run": 1, "oom": True}}, backoffLimit=0),
        failed,
        JobState.FAILED,
        Reason.OOM_KILLED,
        {"worker-0": "OOMKilled"},
        exit_code=137,
    ),
    Case(
        "FAILED-Evicted-by-the-kubelet",
        batch_job("train", {"main": FOREVER}, backoffLimit=0),
        failed,
        JobState.FAILED,
        Reason.EVICTED,
        # The kubelet stops the container (exit 137, reason Error) and kubectl prints a terminated
        # container's reason over the pod's: the eviction shows in status.reason and DisruptionTarget.
        {"worker-0": "Error"},
        act=evict_job_pod_once_running,
    ),
    Case(
        "TERMINATING-failed-Evicted-an-mpi-worker",
        mpi_job("train", launcher={"main": FOREVER}),
        failed,
        JobState.TERMINATING,
        Reason.EVICTED,
        {"launcher": "Running", "worker-0": "Error", "worker-1": "Running"},
        act=evict_worker_0_once_running,
    ),
    Case(
        # mpi-operator v0.8.2 (updateMPIJobStatus) fails an MPIJob for evicted workers only: workers that
        # exit non-zero are counted, and the job runs on with its launcher until mpirun fails.
        "DEGRADED-Error-mpi-workers-exited-non-zero-next-to-a-running-launcher",
        mpi_job("train", launcher={"main": FOREVER}, worker={"main": {"run": 1, "exit": 3}}),
        # The workers' 1 s may end before a loaded machine has the launcher running: the state named is
        # the one with all three there.
        lambda s: (
            worker_failures(s) == 2
            and all(phase(p) == "Failed" for p in workers(s))
            and phase(launcher(s)) == "Running"
        ),
        JobState.DEGRADED,
        Reason.ERROR,
        {"launcher": "Running", "worker-0": "Error", "worker-1": "Error"},
        exit_code=3,
    ),
    Case(
        # ... and when mpirun loses the rank and exits non-zero, the launcher Job's failure fails the job.
        "FAILED-Error-an-mpi-launcher-failing-after-its-workers",
        mpi_job(
            "train",
            launcher={"main": {"run": 40, "exit": 1, "logs": ["mpirun: rank 1 lost"]}},
            worker={"main": {"run": 1, "exit": 3}},
            launcher_restart="Never",
            backoffLimit=0,
        ),
        lambda s: failed(s) and phase(launcher(s)) == "Failed",
        JobState.FAILED,
        Reason.ERROR,
        {"launcher": "Error", "worker-0": "Error", "worker-1": "Error"},
        exit_code=1,
    ),
    Case(
        "TERMINATING-failed-BackoffLimitExceeded-Init-Error-on-an-mpi-launcher",
        mpi_job(
            "train",
            launcher_init=True,
            launcher_restart="Never",
            launcher={"wait-for-workers": {"run": 1, "exit": 1}, "main": FOREVER},
            backoffLimit=1,
        ),
        failed,
        JobState.TERMINATING,
        Reason.BACKOFF_LIMIT_EXCEEDED,
        {"launcher": "Init:Error", **WORKERS_RUNNING},
        exit_code=1,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_snapshot_of_the_simulators_objects_names_the_state_the_simulator_reached(bench, case):
    name = bench.create(case.manifest)
    if case.act is not None:
        case.act(bench, name)
    seen = bench.wait(case.kind, name, case.until)
    check(bench, seen, case.state, case.reason, case.replicas, case.exit_code)


def test_a_job_created_suspended_is_queued_then_unschedulable_once_released_with_more_gpus_than_a_node_has(
    bench,
):
    name = bench.create(batch_job("big", {"main": FOREVER}, gpus=9, suspend=True))
    seen = bench.wait("Job", name, lambda s: s.condition("Suspended"))
    check(bench, seen, JobState.QUEUED, Reason.PENDING, {"worker-0": "<none>"})

    bench.patch("Job", name, {"spec": {"suspend": False}})
    seen = bench.wait("Job", name, lambda s: scheduled_reason(s.pod()) == "Unschedulable")
    snap = check(bench, seen, JobState.SCHEDULING, Reason.UNSCHEDULABLE, {"worker-0": "Pending"})
    assert "Insufficient nvidia.com/gpu" in snap.message


def test_an_mpi_job_with_one_worker_that_fits_no_node_is_scheduling_though_the_others_run(bench):
    # Three workers of 8 GPUs on two 8-GPU nodes: one of them waits, and the gang with it.
    name = bench.create(mpi_job("train", workers=3, worker_gpus=8, launcher={"main": FOREVER}))
    seen = bench.wait(
        "MPIJob",
        name,
        lambda s: (
            is_running(launcher(s))
            and len(workers(s)) == 3
            and sum(is_running(p) for p in workers(s)) == 2
            and any(scheduled_reason(p) == "Unschedulable" for p in workers(s))
        ),
    )
    expected = {"launcher": "Running"}
    for pod in workers(seen):
        index = pod["metadata"]["labels"][labels.MPI_REPLICA_INDEX]
        expected[f"worker-{index}"] = "Running" if is_running(pod) else "Pending"
    snap = check(bench, seen, JobState.SCHEDULING, Reason.UNSCHEDULABLE, expected)
    assert "Insufficient nvidia.com/gpu" in snap.message


def test_a_failed_pod_under_the_backoff_limit_is_retrying_until_its_replacement_runs(bench):
    # Each pod lives 1.5 s of real time, so a pod and its replacement never share a creation second
    # (timestamps have second precision; the newest pod of a replica is the replica's current one).
    name = bench.create(batch_job("flaky", {"main": {"run": 150, "exit": 1}}, backoffLimit=6))
    seen = bench.wait("Job", name, lambda s: phase(s.pod()) == "Failed" and not s.condition("FailureTarget"))
    snap = check(bench, seen, JobState.RETRYING, Reason.ERROR, {"worker-0": "Error"}, exit_code=1)
    first = snap.replicas[0].pod

    seen = bench.wait("Job", name, lambda s: is_running(s.pod()) and s.pod()["metadata"]["name"] != first)
    snap = check(bench, seen, JobState.RUNNING, Reason.RUNNING, {"worker-0": "Running"})
    assert snap.replicas[0].pod != first and snap.pod_failures >= 1


def test_a_running_pod_deleted_with_a_grace_period_is_terminating_until_it_stops(bench):
    # Replaced only once it has stopped, so that the terminating pod stays the replica's current one.
    manifest = batch_job(
        "stubborn",
        command=STUBBORN,
        pod_spec={"terminationGracePeriodSeconds": 600},
        podReplacementPolicy="Failed",
    )
    name = bench.create(manifest)
    pod = bench.wait("Job", name, lambda s: is_running(s.pod())).pod()
    assert pod is not None
    bench.store.delete("pods", pod["metadata"]["name"], bench.namespace, grace_period_seconds=600)
    seen = bench.wait(
        "Job",
        name,
        lambda s: (s.pod() or {}).get("metadata", {}).get("deletionTimestamp") and is_running(s.pod()),
    )
    check(bench, seen, JobState.TERMINATING, Reason.DELETED, {"worker-0": "Terminating"})


def cancel(bench: Bench, name: str) -> Seen:
    """What the product does when a user stops a job: its verdict on the object, then deletion."""
    bench.patch(
        "Job",
        name,
        {"metadata": {"annotations": {labels.VERDICT: "Cancelled", labels.CANCELLED_BY: "alice"}}},
    )
    seen = bench.wait(
        "Job", name, lambda s: labels.VERDICT in (s.job or {})["metadata"].get("annotations", {})
    )
    bench.store.delete("jobs", name, bench.namespace, propagation_policy="Foreground")
    return seen


def test_a_cancelled_job_is_terminating_while_its_pods_run_then_cancelled(bench):
    name = bench.create(batch_job("cancel-me", {"main": FOREVER}))
    seen = bench.wait("Job", name, lambda s: is_running(s.pod()))
    # Hold the pod after it stops (a finalizer of the test's own), so its final state stays readable:
    # the Job controller releases and the kubelet removes a stopped pod of a deleted Job at once.
    pod_name = seen.pod()["metadata"]["name"]
    hold = "test.airflow-jobs.io/hold"
    bench.store.patch(
        "pods",
        pod_name,
        [{"op": "add", "path": "/metadata/finalizers/-", "value": hold}],
        "json",
        bench.namespace,
    )
    seen = cancel(bench, name)
    snap = check(bench, seen, JobState.TERMINATING, Reason.CANCELLED, {"worker-0": "Running"})
    assert "alice" in snap.message

    seen = bench.wait("Job", name, lambda s: s.pods and all(phase(p) == "Failed" for p in s.pods))
    check(bench, seen, JobState.CANCELLED, Reason.CANCELLED, {"worker-0": "Error"})
    pod = bench.store.get("pods", pod_name, bench.namespace, copy=True)
    pod["metadata"]["finalizers"] = [f for f in pod["metadata"]["finalizers"] if f != hold]
    bench.store.update("pods", pod)


def test_a_cancelled_job_deleted_in_the_foreground_is_gone_once_its_pods_stopped(bench):
    name = bench.create(batch_job("cancel-me", {"main": FOREVER}))
    bench.wait("Job", name, lambda s: is_running(s.pod()))
    cancel(bench, name)
    # 300 simulated seconds: far more than stopping one container takes.
    seen = bench.wait("Job", name, lambda s: s.job is None and not s.pods, timeout=3)
    assert bench.snapshot(seen).state == JobState.UNKNOWN


def test_an_mpi_launcher_with_the_default_restart_policy_retries_its_failing_init_container_in_place(bench):
    name = bench.create(
        mpi_job(
            "train", launcher_init=True, launcher={"wait-for-workers": {"run": 1, "exit": 1}, "main": FOREVER}
        )
    )
    seen = bench.wait(
        "MPIJob",
        name,
        lambda s: (
            len(launchers(s)) > 1
            or (
                waiting_reason(launcher(s), "wait-for-workers", init=True) == "CrashLoopBackOff"
                and workers_running(s)
            )
        ),
    )
    assert len(launchers(seen)) == 1, [pod_status(p) for p in launchers(seen)]
    check(
        bench,
        seen,
        JobState.RETRYING,
        Reason.CRASH_LOOP_BACK_OFF,
        {"launcher": "Init:CrashLoopBackOff", **WORKERS_RUNNING},
    )


def test_a_job_object_that_is_gone_reads_unknown_not_found(bench):
    name = bench.create(batch_job("gone", {"main": FOREVER}))
    bench.wait("Job", name, lambda s: is_running(s.pod()))
    bench.store.delete("jobs", name, bench.namespace, propagation_policy="Background")
    seen = bench.wait("Job", name, lambda s: s.job is None)
    snap = bench.snapshot(seen)
    assert (snap.state, snap.reason) == (JobState.UNKNOWN, Reason.NOT_FOUND)


def test_kubectl_prints_the_status_the_lifecycle_computes_for_every_pod_of_a_running_mpi_job(bench):
    if KUBECTL is None:
        pytest.skip(
            "kubectl is not installed (looked on PATH and at /usr/bin/kubectl): nothing to compare with"
        )
    name = bench.create(mpi_job("train", launcher={"main": FOREVER}))
    seen = bench.wait("MPIJob", name, lambda s: is_running(launcher(s)) and workers_running(s))
    rows = bench.kubectl()
    assert rows is not None
    assert {name: cols for name, cols, _ in rows} == {p["metadata"]["name"]: Printed.of(p) for p in seen.pods}


def test_a_job_whose_sidecar_keeps_running_is_running_once_its_main_container_started(bench):
    sidecar = {"name": "proxy", "image": "proxy:1.0", "restartPolicy": "Always"}
    name = bench.create(
        batch_job("train", {"proxy": FOREVER, "main": FOREVER}, pod_spec={"initContainers": [sidecar]})
    )
    # 300 simulated seconds: far more than starting two containers takes.
    seen = bench.wait("Job", name, lambda s: is_running(s.pod()), timeout=3)
    snap = check(bench, seen, JobState.RUNNING, Reason.RUNNING, {"worker-0": "Running"})
    assert snap.replicas[0].ready == "2/2"
