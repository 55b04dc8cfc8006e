"""The simulated MPI operator: objects it builds (pure) and MPIJob lifecycles in a running cluster."""

from __future__ import annotations

import json
import threading
import uuid
from datetime import datetime, timezone
from functools import partial

import pytest
from airflow_jobs_sim.cluster import SimCluster
from airflow_jobs_sim.config import ClusterConfig
from airflow_jobs_sim.controllers.mpi import (
    Create,
    SuspendLauncher,
    job_service,
    launcher_job,
    plan_mpijob,
    worker_pod,
)
from airflow_jobs_sim.scenarios import ANNOTATION
from sim_waiting import wait_for as _wait_for

from airflow_jobs_plugin.jobs.kinds.mpi import worker_host

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def mpijob(
    name: str = "train",
    workers: int = 2,
    launcher_scenario: dict | None = None,
    worker_scenario: dict | None = None,
    init: bool = False,
    launcher_restart: str | None = None,
    **run_policy,
) -> dict:
    def template(scenario: dict | None, containers: list[dict]) -> dict:
        meta = {"labels": {"team": "vision"}}
        if scenario is not None:
            meta["annotations"] = {ANNOTATION: json.dumps(scenario)}
        return {"metadata": meta, "spec": {"containers": containers}}

    launcher = template(
        launcher_scenario,
        [{"name": "main", "image": "mpi-launcher:1.0", "command": ["mpirun", "python", "train.py"]}],
    )
    if init:
        launcher["spec"]["initContainers"] = [{"name": "wait-for-workers", "image": "busybox:1.36"}]
    worker_containers = [
        {"name": "main", "image": "mpi-trainer:1.0", "resources": {"limits": {"nvidia.com/gpu": "2"}}}
    ]
    policy = {"cleanPodPolicy": "Running", **run_policy}
    spec = {
        "slotsPerWorker": 2,
        "runPolicy": policy,
        "mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "template": launcher},
            "Worker": {"replicas": workers, "template": template(worker_scenario, worker_containers)},
        },
    }
    if launcher_restart is not None:
        spec["mpiReplicaSpecs"]["Launcher"]["restartPolicy"] = launcher_restart
    if "launcherCreationPolicy" in run_policy:
        spec["launcherCreationPolicy"] = policy.pop("launcherCreationPolicy")
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name, "namespace": "default", "uid": "mpi-uid"},
        "spec": spec,
    }


def test_worker_pods_are_named_labelled_and_owned_like_the_operators():
    pod = worker_pod(mpijob(), 1)
    meta = pod["metadata"]
    assert meta["name"] == "train-worker-1"
    assert meta["labels"] == {
        "team": "vision",
        "training.kubeflow.org/operator-name": "mpi-operator",
        "training.kubeflow.org/job-name": "train",
        "training.kubeflow.org/job-role": "worker",
        "training.kubeflow.org/replica-index": "1",
    }
    ref = meta["ownerReferences"][0]
    assert (ref["kind"], ref["apiVersion"], ref["controller"], ref["blockOwnerDeletion"]) == (
        "MPIJob",
        "kubeflow.org/v2beta1",
        True,
        True,
    )
    assert (pod["spec"]["hostname"], pod["spec"]["subdomain"], pod["spec"]["restartPolicy"]) == (
        "train-worker-1",
        "train",
        "Never",
    )


def test_the_launcher_job_carries_the_run_policy_and_the_launcher_labels():
    job = launcher_job(mpijob(backoffLimit=2, activeDeadlineSeconds=600), suspend=True)
    assert job["metadata"]["name"] == "train-launcher"
    assert (
        job["spec"]["backoffLimit"] == 2
        and job["spec"]["activeDeadlineSeconds"] == 600
        and job["spec"]["suspend"]
    )
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert labels["training.kubeflow.org/job-role"] == "launcher" and labels["team"] == "vision"
    assert job["metadata"]["ownerReferences"][0]["kind"] == "MPIJob"


def test_a_new_mpijob_gets_created_condition_workers_config_and_launcher():
    plan = plan_mpijob(mpijob(), [], None, T0, config_exists=False)
    created = [(a.resource, a.obj["metadata"]["name"]) for a in plan.actions if isinstance(a, Create)]
    assert created == [
        ("configmaps", "train-config"),
        ("pods", "train-worker-0"),
        ("pods", "train-worker-1"),
        ("jobs", "train-launcher"),
    ]
    cond = plan.status["conditions"][0]
    assert (cond["type"], cond["status"], cond["reason"], cond["message"]) == (
        "Created",
        "True",
        "MPIJobCreated",
        "MPIJob default/train is created.",
    )
    config = next(a.obj for a in plan.actions if isinstance(a, Create) and a.resource == "configmaps")
    hosts = [line.split()[0] for line in config["data"]["hostfile"].splitlines()]
    assert hosts == [worker_host("train", i, "default") for i in range(2)]
    assert (
        config["data"]["hostfile"]
        == "train-worker-0.train.default.svc slots=2\ntrain-worker-1.train.default.svc slots=2\n"
    )


def test_a_launcher_that_runs_as_a_worker_is_replica_zero_and_first_in_the_hostfile():
    # workerReplicaIndexLabel / newLauncherPodTemplate / newConfigMap, mpi-operator v0.7.0 and v0.8.0.
    body = mpijob()
    body["spec"]["runLauncherAsWorker"] = True
    plan = plan_mpijob(body, [], None, T0, config_exists=False)
    created = {a.obj["metadata"]["name"]: a.obj for a in plan.actions if isinstance(a, Create)}
    index = "training.kubeflow.org/replica-index"
    assert created["train-worker-0"]["metadata"]["labels"][index] == "1"
    assert created["train-worker-1"]["metadata"]["labels"][index] == "2"
    assert created["train-launcher"]["spec"]["template"]["metadata"]["labels"][index] == "0"
    hosts = [line.split()[0] for line in created["train-config"]["data"]["hostfile"].splitlines()]
    assert hosts == [
        "train-launcher.train.default.svc",
        *(worker_host("train", i, "default") for i in range(2)),
    ]


def test_padded_worker_indexes_are_not_taken_for_surplus_workers():
    # getOrCreateWorker deletes by index only when there are more worker pods than replicas: worker 1,
    # labelled 2 of 2 replicas, is one of the job's own.
    body = mpijob()
    body["spec"]["runLauncherAsWorker"] = True
    pods = [worker_pod(body, i) for i in range(2)]
    for pod in pods:
        pod["metadata"]["ownerReferences"][0]["uid"] = "mpi-uid"
    plan = plan_mpijob(body, pods, None, T0)
    assert not [a for a in plan.actions if type(a).__name__ == "Delete"]


def _running_launcher() -> tuple[dict, dict]:
    """A launcher Job that runs, and its Running pod."""
    job = launcher_job(mpijob(), suspend=False)
    job["metadata"]["uid"] = "launcher-uid"
    job["status"] = {"active": 1}
    pod = {
        "metadata": {
            "name": "train-launcher-x7k2p",
            "labels": job["spec"]["template"]["metadata"]["labels"],
            "ownerReferences": [
                {"kind": "Job", "name": "train-launcher", "uid": "launcher-uid", "controller": True}
            ],
        },
        "status": {"phase": "Running"},
    }
    return job, pod


def _worker(index: int, phase: str, reason: str | None = None) -> dict:
    pod = worker_pod(mpijob(), index)
    pod["metadata"]["ownerReferences"][0]["uid"] = "mpi-uid"
    pod["status"] = {"phase": phase, **({"reason": reason} if reason else {})}
    return pod


def test_a_worker_that_fails_leaves_the_mpijob_running_and_counts_as_failed():
    # updateMPIJobStatus, mpi-operator v0.8.2: a failed worker pod is counted in the Worker replica
    # status; only an evicted one fails the MPIJob.
    launcher, launcher_pod = _running_launcher()
    pods = [_worker(0, "Failed"), _worker(1, "Running"), launcher_pod]
    plan = plan_mpijob(mpijob(), pods, launcher, T0)
    assert [c["type"] for c in plan.status["conditions"] if c["status"] == "True"] == ["Created"]
    assert plan.status["replicaStatuses"]["Worker"] == {"active": 1, "failed": 1}
    assert not [e for e in plan.events if e.reason in ("MPIJobFailed", "MPIJobEvicted")]


def test_a_suspended_mpijob_has_no_workers_and_a_suspended_launcher():
    plan = plan_mpijob(mpijob(suspend=True), [], None, T0)
    created = [a.obj for a in plan.actions if isinstance(a, Create)]
    assert [o["kind"] for o in created] == ["Job"] and created[0]["spec"]["suspend"] is True
    suspended = next(c for c in plan.status["conditions"] if c["type"] == "Suspended")
    assert (suspended["status"], suspended["reason"]) == ("True", "MPIJobSuspended")


def test_resuming_unsuspends_the_launcher_job():
    first = plan_mpijob(mpijob(suspend=True), [], None, T0)
    launcher = {**next(a.obj for a in first.actions if isinstance(a, Create)), "status": {}}
    launcher["metadata"] = {**launcher["metadata"], "uid": "launcher-uid"}
    resumed = plan_mpijob({**mpijob(), "status": first.status}, [], launcher, T0)
    assert SuspendLauncher("train-launcher", False) in resumed.actions
    cond = next(c for c in resumed.status["conditions"] if c["type"] == "Suspended")
    assert (cond["status"], cond["reason"]) == ("False", "MPIJobResumed")


def test_with_wait_for_workers_ready_the_launcher_waits_for_ready_workers():
    job = mpijob(launcherCreationPolicy="WaitForWorkersReady")
    plan = plan_mpijob(job, [], None, T0)
    assert "Job" not in [a.obj["kind"] for a in plan.actions if isinstance(a, Create)]
    ready = []
    for i in range(2):
        pod = worker_pod(job, i)
        pod["metadata"]["uid"] = f"w{i}"
        pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        ready.append(pod)
    plan = plan_mpijob(job, ready, None, T0)
    assert [a.obj["kind"] for a in plan.actions if isinstance(a, Create)] == ["Job"]


def test_the_workers_service_is_headless_and_named_after_the_mpijob():
    # newJobService (mpi_job_controller.go v0.5.0, v0.8.0): Service <job>, selecting every pod of the job;
    # since v0.7 it publishes not-ready addresses only when the launcher also runs as a worker.
    svc = job_service(mpijob())
    assert svc["metadata"]["name"] == "train"
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == {
        "training.kubeflow.org/operator-name": "mpi-operator",
        "training.kubeflow.org/job-name": "train",
    }
    assert "publishNotReadyAddresses" not in svc["spec"]  # omitempty: false is absent
    as_worker = mpijob()
    as_worker["spec"]["runLauncherAsWorker"] = True
    assert job_service(as_worker)["spec"]["publishNotReadyAddresses"] is True


def test_pod_hostnames_and_subdomain_give_the_names_the_product_waits_for():
    job = mpijob()
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["subdomain"] = "mine"
    launcher = launcher_job(job, suspend=False)["spec"]["template"]["spec"]
    assert (launcher["hostname"], launcher["subdomain"]) == ("train-launcher", "train")
    worker = worker_pod(job, 1)["spec"]
    assert (worker["hostname"], worker["subdomain"]) == ("train-worker-1", "train")
    assert worker["dnsConfig"]["searches"] == ["train.default.svc.cluster.local"]
    published = f"{worker['hostname']}.{worker['subdomain']}.default.svc"
    assert published == worker_host("train", 1, "default")


def test_a_suspended_mpijob_gets_its_launcher_at_once_whatever_the_creation_policy():
    # kubeflow/mpi-operator issue #615 (open at v0.8.0): no workers exist while suspended, so
    # countReadyWorkerPods(worker) == len(worker) reads 0 == 0 and the launcher Job is created, suspended;
    # resuming unsuspends it in the same sync that creates the workers. Hence the product's own wait.
    job = mpijob(suspend=True, launcherCreationPolicy="WaitForWorkersReady")
    first = plan_mpijob(job, [], None, T0)
    launcher = next(a.obj for a in first.actions if isinstance(a, Create) and a.resource == "jobs")
    assert launcher["spec"]["suspend"] is True
    launcher = {**launcher, "metadata": {**launcher["metadata"], "uid": "launcher-uid"}, "status": {}}
    resumed_job = mpijob(launcherCreationPolicy="WaitForWorkersReady")
    resumed = plan_mpijob({**resumed_job, "status": first.status}, [], launcher, T0)
    assert SuspendLauncher("train-launcher", False) in resumed.actions
    assert [a.obj["metadata"]["name"] for a in resumed.actions if isinstance(a, Create)] == [
        "train-worker-0",
        "train-worker-1",
    ]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda j: j["spec"]["runPolicy"].update(cleanPodPolicy="Sometimes"),
            'spec.runPolicy.cleanPodPolicy: Unsupported value: "Sometimes": supported values: "All", "None", "Running"',
        ),
        (
            lambda j: j["spec"]["mpiReplicaSpecs"]["Launcher"].update(replicas=2),
            "spec.mpiReplicaSpecs[Launcher].replicas: Invalid value: 2: must be 1",
        ),
        (
            lambda j: j["spec"]["mpiReplicaSpecs"]["Worker"].update(restartPolicy="Always"),
            'spec.mpiReplicaSpecs[Worker].restartPolicy: Unsupported value: "Always"',
        ),
        (
            lambda j: j["metadata"].update(name="x" * 60),
            "will not able to create pod and service with invalid DNS label",
        ),
    ],
)
def test_the_operator_refuses_what_validate_mpijob_refuses(change, message):
    # pkg/apis/kubeflow/validation/validation.go (v0.8.0): the CRD accepts these values, the operator
    # records a ValidationError Warning and creates nothing.
    job = mpijob()
    change(job)
    plan = plan_mpijob(job, [], None, T0, config_exists=False, service_exists=False)
    assert plan.actions == [] and "conditions" not in plan.status
    (event,) = plan.events
    assert (event.type, event.reason) == ("Warning", "ValidationError")
    assert event.message.startswith("Found validation errors: ") and message in event.message


def test_unset_policies_take_the_v2beta1_defaults():
    # default.go: cleanPodPolicy None, launcherCreationPolicy AtStartup, restart policies
    # OnFailure (Launcher) and Never (Worker); the operator defaults its copy before validating.
    job = mpijob()
    del job["spec"]["runPolicy"]["cleanPodPolicy"]
    plan = plan_mpijob(job, [], None, T0)
    kinds = [a.obj["kind"] for a in plan.actions if isinstance(a, Create)]
    assert kinds == ["Pod", "Pod", "Job"] and not plan.events[1:]
    launcher = next(a.obj for a in plan.actions if isinstance(a, Create) and a.resource == "jobs")
    assert launcher["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"
    worker = next(a.obj for a in plan.actions if isinstance(a, Create) and a.resource == "pods")
    assert worker["spec"]["restartPolicy"] == "Never"


# ----------------------------------------------------------------------------- through the cluster


@pytest.fixture(scope="module")
def cluster():
    with SimCluster(ClusterConfig(nodes=2, gpus_per_node=8, time_scale=0.02)) as c:
        yield c


@pytest.fixture
def ns(cluster):
    name = f"mpi-{uuid.uuid4().hex[:6]}"
    cluster.store.create("namespaces", {"metadata": {"name": name}})
    return name


# This file's controllers need a different default patience.
wait_for = partial(_wait_for, timeout=20.0)


def kubectl_status(status: dict) -> str:
    """The STATUS column kubectl prints, for the cases these tests reach."""
    inits = status.get("initContainerStatuses") or []
    for i, c in enumerate(inits):
        term = c["state"].get("terminated")
        if term and term.get("exitCode") == 0:
            continue
        waiting = c["state"].get("waiting")
        if term:
            return f"Init:{term.get('reason') or 'Error'}"
        if waiting and waiting.get("reason") not in (None, "PodInitializing"):
            return f"Init:{waiting['reason']}"
        return f"Init:{i}/{len(inits)}"
    for c in status.get("containerStatuses") or []:
        state = c["state"]
        if "waiting" in state:
            return state["waiting"]["reason"]
        if "terminated" in state:
            return state["terminated"]["reason"]
    return status.get("phase") or "Pending"


class PodHistory:
    def __init__(self, cluster, ns: str, prefix: str):
        self.seen: list[str] = []
        self._lock = threading.Lock()

        def on_event(event_type, resource, obj):
            meta = obj["metadata"]
            if (
                resource == "pods"
                and meta.get("namespace") == ns
                and meta["name"].startswith(prefix)
                and obj.get("status")
            ):
                word = kubectl_status(obj["status"])
                with self._lock:
                    if not self.seen or self.seen[-1] != word:
                        self.seen.append(word)

        self.close = cluster.store.subscribe(on_event)


def condition(cluster, ns: str, name: str, type_: str) -> dict | None:
    status = cluster.store.get("mpijobs", name, ns).get("status") or {}
    c = next((c for c in status.get("conditions") or [] if c["type"] == type_), None)
    return c if c and c["status"] == "True" else None


def mpi_events(cluster, ns: str, name: str) -> list[str]:
    return [
        e["reason"] for e in cluster.store.list("events", namespace=ns) if e["involvedObject"]["name"] == name
    ]


def create(cluster, ns: str, body: dict) -> None:
    body = json.loads(json.dumps(body))
    body["metadata"] = {"name": body["metadata"]["name"]}
    cluster.store.create("mpijobs", body, namespace=ns)


def test_a_launcher_with_an_init_container_goes_through_init_then_the_mpijob_succeeds(cluster, ns):
    history = PodHistory(cluster, ns, "train-launcher-")
    try:
        body = mpijob(init=True, launcher_scenario={"wait-for-workers": {"run": 2}, "main": {"run": 3}})
        # An image no node has yet, so that the main container is pulled after the init container.
        body["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["image"] = (
            f"mpi-launcher:{ns}"
        )
        create(cluster, ns, body)
        done = wait_for(lambda: condition(cluster, ns, "train", "Succeeded"))
    finally:
        history.close()
    assert (done["reason"], done["message"]) == (
        "MPIJobSucceeded",
        f"MPIJob {ns}/train successfully completed.",
    )
    seen = history.seen
    order = [seen.index(s) for s in ("Init:0/1", "PodInitializing", "Running", "Completed")]
    assert order == sorted(order), seen
    status = cluster.store.get("mpijobs", "train", ns)["status"]
    assert status["replicaStatuses"]["Launcher"] == {"succeeded": 1}
    assert status["startTime"] and status["completionTime"]
    running = next(c for c in status["conditions"] if c["type"] == "Running")
    assert running["status"] == "False"  # a finished MPIJob is no longer running
    reasons = mpi_events(cluster, ns, "train")
    assert reasons[:1] == ["MPIJobCreated"] and "MPIJobRunning" in reasons and "MPIJobSucceeded" in reasons
    launcher = cluster.store.get("jobs", "train-launcher", ns)
    assert launcher["metadata"]["labels"] == {"app": "train"}  # newLauncherJob, mpi-operator v0.8.2
    assert launcher["metadata"]["ownerReferences"][0]["name"] == "train"
    # cleanPodPolicy Running: the workers, still running their sshd, are removed.
    wait_for(
        lambda: (
            not cluster.store.list(
                "pods", namespace=ns, label_selector="training.kubeflow.org/job-role=worker"
            )
        )
    )


def test_a_failed_worker_ends_the_mpijob_only_through_its_launchers_failure(cluster, ns):
    # mpi-operator v0.8.2 (pkg/controller/mpi_job_controller.go, updateMPIJobStatus) fails an MPIJob for
    # an evicted worker only: a worker exiting non-zero is counted, and the job ends when mpirun on the
    # launcher notices the lost rank and exits non-zero, failing the launcher Job.
    create(
        cluster,
        ns,
        mpijob(
            backoffLimit=0,
            worker_scenario={"main": {"run": 2, "exit": 1}},
            launcher_scenario={"main": {"run": 60, "exit": 1, "logs": ["mpirun: rank 1 lost"]}},
        ),
    )
    failed = wait_for(lambda: condition(cluster, ns, "train", "Failed"))
    assert (failed["reason"], failed["message"]) == (
        "BackoffLimitExceeded",
        "Job has reached the specified backoff limit",
    )
    assert "MPIJobFailed" not in mpi_events(cluster, ns, "train")
    # cleanPodPolicy Running (mpi_job_controller.go deleteWorkerPods, v0.5.0..v0.8.2) deletes the workers
    # still Running or Pending and keeps the ended ones, then initializeMPIJobStatuses resets their counts.
    wait_for(lambda: cluster.store.get("mpijobs", "train", ns)["status"]["replicaStatuses"]["Worker"] == {})
    status = cluster.store.get("mpijobs", "train", ns)["status"]
    assert status["completionTime"]
    failed_pods = [
        p for p in cluster.store.list("pods", namespace=ns) if p["status"].get("phase") == "Failed"
    ]
    assert any(p["metadata"]["name"].startswith("train-worker-") for p in failed_pods)


def test_an_evicted_worker_fails_the_mpijob_with_reason_mpijobevicted(cluster, ns):
    create(cluster, ns, mpijob(launcher_scenario={"main": {"run": None}}))
    wait_for(lambda: condition(cluster, ns, "train", "Running"))
    cluster.controllers.evict_pod(ns, "train-worker-0")
    failed = wait_for(lambda: condition(cluster, ns, "train", "Failed"))
    assert (failed["reason"], failed["message"]) == ("MPIJobEvicted", "1/2 workers are evicted")


def test_a_failing_launcher_fails_the_mpijob_after_the_launcher_backoff_limit(cluster, ns):
    create(cluster, ns, mpijob(backoffLimit=0, launcher_scenario={"main": {"run": 1, "exit": 2}}))
    failed = wait_for(lambda: condition(cluster, ns, "train", "Failed"))
    # An OnFailure launcher restarts in place: no launcher pod ends Failed, so v0.8.2 appends nothing
    # (pkg/controller/mpi_job_controller.go updateMPIJobFailedStatus appends the last Failed pod's words).
    assert failed["reason"] == "BackoffLimitExceeded"
    assert failed["message"] == "Job has reached the specified backoff limit"


def test_a_suspended_mpijob_starts_nothing_until_resumed(cluster, ns):
    create(cluster, ns, mpijob(suspend=True, launcher_scenario={"main": {"run": None}}))
    wait_for(lambda: condition(cluster, ns, "train", "Suspended"))
    assert cluster.store.list("pods", namespace=ns) == []
    assert cluster.store.get("jobs", "train-launcher", ns)["spec"]["suspend"] is True
    cluster.store.patch(
        "mpijobs", "train", {"spec": {"runPolicy": {"suspend": False}}}, "merge", namespace=ns
    )
    wait_for(lambda: condition(cluster, ns, "train", "Running"))
    resumed = next(
        c
        for c in cluster.store.get("mpijobs", "train", ns)["status"]["conditions"]
        if c["type"] == "Suspended"
    )
    assert (resumed["status"], resumed["reason"]) == ("False", "MPIJobResumed")
    cluster.store.patch("mpijobs", "train", {"spec": {"runPolicy": {"suspend": True}}}, "merge", namespace=ns)
    wait_for(
        lambda: condition(cluster, ns, "train", "Suspended") and not cluster.store.list("pods", namespace=ns)
    )
    assert cluster.store.get("jobs", "train-launcher", ns)["spec"]["suspend"] is True


def test_with_wait_for_workers_ready_the_launcher_job_appears_after_the_workers_are_ready(cluster, ns):
    order: list[str] = []

    def on_event(event_type, resource, obj):
        if obj["metadata"].get("namespace") != ns:
            return
        if resource == "jobs" and event_type == "ADDED":
            order.append("launcher")
        elif resource == "pods" and any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in obj.get("status", {}).get("conditions") or []
        ):
            order.append(f"ready:{obj['metadata']['name']}")

    close = cluster.store.subscribe(on_event)
    try:
        create(
            cluster,
            ns,
            mpijob(launcherCreationPolicy="WaitForWorkersReady", launcher_scenario={"main": {"run": 1}}),
        )
        wait_for(lambda: condition(cluster, ns, "train", "Succeeded"))
    finally:
        close()
    first_launcher = order.index("launcher")
    assert {"ready:train-worker-0", "ready:train-worker-1"} <= set(order[:first_launcher])


def test_a_finished_mpijobs_ttl_removes_its_launcher_job_and_never_the_mpijob(cluster, ns):
    # mpi-operator v0.8 newLauncherJob copies ttlSecondsAfterFinished onto the launcher Job only: the Job
    # controller deletes the launcher (and its pod) at the TTL; nothing deletes the MPIJob.
    create(cluster, ns, mpijob(ttlSecondsAfterFinished=5, launcher_scenario={"main": {"run": 1}}))
    wait_for(lambda: condition(cluster, ns, "train", "Succeeded"))
    (launcher,) = cluster.store.list("jobs", namespace=ns)
    assert launcher["spec"]["ttlSecondsAfterFinished"] == 5
    wait_for(lambda: not cluster.store.list("jobs", namespace=ns))
    wait_for(
        lambda: (
            not [p for p in cluster.store.list("pods", namespace=ns) if "launcher" in p["metadata"]["name"]]
        )
    )
    assert [m["metadata"]["name"] for m in cluster.store.list("mpijobs", namespace=ns)] == ["train"]
    assert condition(cluster, ns, "train", "Succeeded")


def test_a_failed_launcher_pod_that_is_retried_marks_the_mpijob_restarting(cluster, ns):
    create(
        cluster,
        ns,
        mpijob(backoffLimit=1, launcher_restart="Never", launcher_scenario={"main": {"run": 1, "exit": 1}}),
    )
    failed = wait_for(lambda: condition(cluster, ns, "train", "Failed"))
    # A Never launcher's pods end Failed; v0.8.2 appends the last one's reason and message, both empty
    # for a plain non-zero exit, as they are (pkg/controller/mpi_job_controller.go updateMPIJobFailedStatus).
    assert (failed["reason"], failed["message"]) == (
        "BackoffLimitExceeded/",
        "Job has reached the specified backoff limit: ",
    )
    assert "MPIJobRestarting" in mpi_events(cluster, ns, "train")
    assert (
        len(
            cluster.store.list("pods", namespace=ns, label_selector="training.kubeflow.org/job-role=launcher")
        )
        == 2
    )


def test_a_running_mpijob_has_its_headless_service_and_its_finished_workers_keep_their_logs(cluster, ns):
    create(
        cluster,
        ns,
        mpijob(
            launcher_scenario={"main": {"run": 2}},
            worker_scenario={"main": {"run": 1, "logs": ["rank ready"]}},
            launcherCreationPolicy="AtStartup",
        ),
    )
    svc = wait_for(lambda: _get(cluster, "services", "train", ns))
    assert svc["spec"]["clusterIP"] == "None" and svc["metadata"]["ownerReferences"][0]["kind"] == "MPIJob"
    wait_for(lambda: condition(cluster, ns, "train", "Succeeded"))
    # The workers ended on their own before the launcher: cleanPodPolicy Running keeps them.
    names = {p["metadata"]["name"] for p in cluster.store.list("pods", namespace=ns)}
    assert {"train-worker-0", "train-worker-1"} <= names


def _get(cluster, resource: str, name: str, ns: str) -> dict | None:
    try:
        return cluster.store.get(resource, name, ns)
    except Exception:  # noqa: BLE001 - not there yet
        return None


@pytest.mark.parametrize("dag_id", ["2024_retrain", "x" * 200])
def test_the_products_mpijobs_pass_the_operators_validation(dag_id):
    # A name the operator refuses (DNS-1035 for <name>-worker-<last>) would leave the job never starting.
    from airflow_jobs_sim.controllers.mpi import validation_errors
    from airflow_jobs_sim.store import default_mpijob_spec

    from airflow_jobs_plugin.jobs.manifests import build_manifest
    from airflow_jobs_plugin.jobs.spec import TaskIdentity, validate

    task = TaskIdentity(dag_id, "train", "manual__2026-01-01", -1, 1)
    spec = validate(image="trainer:1", group="vision", user="alice", gpus=1, workers=64)
    body = build_manifest(spec, name=task.job_name(1), task=task, attempt=1, queued_at=T0)
    default_mpijob_spec(body["spec"])
    assert validation_errors(body) == []
