"""Factories for Kubernetes objects as the API server returns them (JSON dicts, camelCase, RFC 3339).

Each factory builds a complete object: the pods a kubelet reports at each step of a pod's life, the
Job and MPIJob objects their controllers maintain, and the events they record. ``parses`` checks an
object against the official ``kubernetes`` client's models, field by field.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any

from kubernetes.client import ApiClient

from airflow_jobs_plugin.jobs import labels

T0 = datetime(2026, 3, 2, 9, 0, 0, tzinfo=timezone.utc)
NAMESPACE = "ml-team"
IMAGE = "registry.example.com/vision/train:1.4"
GPU_NODE = "gpu-node-1"


def ts(seconds: float = 0) -> str:
    """An RFC 3339 timestamp ``seconds`` after ``T0``, formatted as the API server does."""
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def at(seconds: float = 0) -> datetime:
    """``T0`` plus ``seconds`` as a datetime (for ``now`` arguments)."""
    return T0 + timedelta(seconds=seconds)


def uid(name: str) -> str:
    """A stable, UUID-shaped uid derived from a name."""
    digits = "".join(f"{ord(c):02x}" for c in name)[:32].ljust(32, "0")
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:32]}"


# --- container statuses ---------------------------------------------------------------------------


def _container_status(
    name: str, state: dict, *, ready: bool, restarts: int, started: bool | None, last=None
) -> dict:
    status: dict[str, Any] = {
        "name": name,
        "image": IMAGE,
        "imageID": "" if "waiting" in state else f"{IMAGE}@sha256:{'ab' * 32}",
        "ready": ready,
        "restartCount": restarts,
        "state": state,
        "lastState": {"terminated": last} if last else {},
    }
    if started is not None:
        status["started"] = started
    if "waiting" not in state:
        status["containerID"] = f"containerd://{uid(name).replace('-', '')}"
    return status


def running(
    name: str = "main", *, since: float = 30, ready: bool = True, restarts: int = 0, last=None
) -> dict:
    """A running container (``last`` is a previous termination, e.g. from :func:`ended`)."""
    return _container_status(
        name, {"running": {"startedAt": ts(since)}}, ready=ready, restarts=restarts, started=True, last=last
    )


def waiting(
    name: str = "main", reason: str = "ContainerCreating", message: str = "", *, restarts: int = 0, last=None
) -> dict:
    """A waiting container (``ContainerCreating``, ``PodInitializing``, ``CrashLoopBackOff``, ...)."""
    detail = {"reason": reason}
    if message:
        detail["message"] = message
    return _container_status(
        name, {"waiting": detail}, ready=False, restarts=restarts, started=False, last=last
    )


def ended(
    exit_code: int = 0,
    reason: str | None = None,
    *,
    signal: int | None = None,
    at_s: float = 90,
    message: str = "",
) -> dict:
    """A ``terminated`` container state; ``reason`` defaults to what the kubelet writes (Completed/Error)."""
    terminated: dict[str, Any] = {
        "exitCode": exit_code,
        "startedAt": ts(at_s - 60),
        "finishedAt": ts(at_s),
        "containerID": f"containerd://{'cd' * 32}",
    }
    if reason is None:
        reason = "Completed" if exit_code == 0 else "Error"
    if reason:  # "" leaves the reason out, as some runtimes do
        terminated["reason"] = reason
    if signal is not None:
        terminated["signal"] = signal
    if message:
        terminated["message"] = message
    return terminated


def terminated(
    name: str = "main",
    exit_code: int = 0,
    reason: str | None = None,
    *,
    signal=None,
    restarts: int = 0,
    message: str = "",
) -> dict:
    """A terminated container (``Completed``, ``Error``, ``OOMKilled``, or no reason at all)."""
    state = {"terminated": ended(exit_code, reason, signal=signal, message=message)}
    return _container_status(name, state, ready=False, restarts=restarts, started=False)


# --- pods -------------------------------------------------------------------------------------------


def _conditions(*, scheduled, initialized, ready, unschedulable_message, gated) -> list[dict]:
    def cond(kind: str, ok: bool, **extra) -> dict:
        return {
            "type": kind,
            "status": "True" if ok else "False",
            "lastProbeTime": None,
            "lastTransitionTime": ts(5),
            **extra,
        }

    if gated:
        return [
            cond(
                "PodScheduled",
                False,
                reason="SchedulingGated",
                message="Scheduling is blocked due to non-empty scheduling gates",
            )
        ]
    if not scheduled:
        if unschedulable_message is None:
            return []
        return [cond("PodScheduled", False, reason="Unschedulable", message=unschedulable_message)]
    result = [
        cond("PodReadyToStartContainers", True),
        cond(
            "Initialized",
            initialized,
            **(
                {}
                if initialized
                else {
                    "reason": "ContainersNotInitialized",
                    "message": "containers with incomplete status: [init]",
                }
            ),
        ),
        cond(
            "Ready",
            ready,
            **(
                {}
                if ready
                else {"reason": "ContainersNotReady", "message": "containers with unready status: [main]"}
            ),
        ),
        cond(
            "ContainersReady",
            ready,
            **(
                {}
                if ready
                else {"reason": "ContainersNotReady", "message": "containers with unready status: [main]"}
            ),
        ),
        cond("PodScheduled", True),
    ]
    return result


def pod(
    name: str,
    *,
    phase: str = "Pending",
    statuses: list[dict] | None = None,
    init_statuses: list[dict] | None = None,
    containers: tuple[str, ...] = ("main",),
    init_containers: tuple[str, ...] = (),
    sidecars: tuple[str, ...] = (),
    node: str | None = GPU_NODE,
    initialized: bool | None = None,
    ready: bool | None = None,
    unschedulable_message: str | None = None,
    gated: bool = False,
    reason: str | None = None,
    message: str | None = None,
    deleting: bool = False,
    disruption: str | None = None,
    pod_labels: dict | None = None,
    owner: dict | None = None,
    created: float = 0,
    restart_policy: str = "Never",
    conditions: list[dict] | None = None,
) -> dict:
    """A pod as the API returns it. ``sidecars`` are init containers with ``restartPolicy: Always``.

    Conditions follow the kubelet: Initialized unless an init container is pending, Ready when every
    container status is ready; ``node=None`` leaves the pod unscheduled.
    """
    statuses = statuses if statuses is not None else []
    init_statuses = init_statuses if init_statuses is not None else []
    init_specs = [{"name": n, "image": IMAGE, "command": ["sh", "-c", "true"]} for n in init_containers]
    init_specs += [{"name": n, "image": IMAGE, "restartPolicy": "Always"} for n in sidecars]
    if initialized is None:
        initialized = all(
            s["state"].get("terminated", {}).get("exitCode", 1) == 0
            or (s["name"] in sidecars and s.get("started"))
            for s in init_statuses
        )
    if ready is None:
        ready = bool(statuses) and all(s["ready"] for s in statuses) and phase == "Running"
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": uid(name),
            "resourceVersion": "4242",
            "creationTimestamp": ts(created),
            "labels": dict(pod_labels or {}),
            "ownerReferences": [owner] if owner else [],
        },
        "spec": {
            "restartPolicy": restart_policy,
            "schedulerName": "default-scheduler",
            "initContainers": init_specs,
            "containers": [
                {
                    "name": n,
                    "image": IMAGE,
                    "command": ["python", "train.py"],
                    "resources": {
                        "limits": {labels.GPU_RESOURCE: "1"},
                        "requests": {labels.GPU_RESOURCE: "1"},
                    },
                }
                for n in containers
            ],
        },
        "status": {
            "phase": phase,
            "qosClass": "BestEffort",
            "conditions": conditions
            if conditions is not None
            else _conditions(
                scheduled=node is not None,
                initialized=initialized,
                ready=ready,
                unschedulable_message=unschedulable_message,
                gated=gated,
            ),
        },
    }
    if gated:
        body["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
    if node is not None:
        body["spec"]["nodeName"] = node
        body["status"].update(hostIP="10.0.0.11", podIP="10.244.1.7", startTime=ts(created + 2))
    if init_statuses:
        body["status"]["initContainerStatuses"] = init_statuses
    if statuses:
        body["status"]["containerStatuses"] = statuses
    if reason:
        body["status"]["reason"] = reason
    if message:
        body["status"]["message"] = message
    if deleting:
        body["metadata"]["deletionTimestamp"] = ts(120)
        body["metadata"]["deletionGracePeriodSeconds"] = 30
    if disruption:
        body["status"]["conditions"].append(
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": disruption,
                "message": {
                    "PreemptionByScheduler": "default-scheduler: preempting to accommodate a higher priority pod",
                    "EvictionByEvictionAPI": "Eviction API: evicting",
                    "DeletionByTaintManager": "Taint manager: deleting due to NoExecute taint",
                    "DeletionByPodGC": "PodGC: node no longer exists",
                    "TerminationByKubelet": "The node was low on resource: memory.",
                }.get(disruption, disruption),
                "lastProbeTime": None,
                "lastTransitionTime": ts(110),
            }
        )
    return body


def _owner(kind: str, name: str, api_version: str) -> dict:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid(name),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def job_pod(job_name: str = "train", suffix: str = "x7k2p", **kwargs) -> dict:
    """A pod of a single-pod batch/v1 Job (labels and owner reference as the Job controller sets them)."""
    pod_labels = {
        labels.BATCH_JOB_NAME: job_name,
        labels.LEGACY_JOB_NAME: job_name,
        labels.CONTROLLER_UID: uid(job_name),
        "controller-uid": uid(job_name),
        labels.ROLE: "worker",
        labels.MANAGED_BY: labels.MANAGED_BY_VALUE,
    }
    return pod(
        f"{job_name}-{suffix}", pod_labels=pod_labels, owner=_owner("Job", job_name, "batch/v1"), **kwargs
    )


def worker_pod(job_name: str = "dist", index: int = 0, **kwargs) -> dict:
    """An MPIJob worker pod, created by the MPI operator with the kubeflow labels."""
    pod_labels = {
        labels.MPI_JOB_NAME: job_name,
        labels.MPI_JOB_ROLE: "worker",
        labels.MPI_REPLICA_INDEX: str(index),
        "training.kubeflow.org/operator-name": "mpijob-controller",
        labels.ROLE: "worker",
        labels.RANK: str(index + 1),
    }
    kwargs.setdefault("restart_policy", "OnFailure")
    owner = _owner("MPIJob", job_name, "kubeflow.org/v2beta1")
    return pod(f"{job_name}-worker-{index}", pod_labels=pod_labels, owner=owner, **kwargs)


def launcher_pod(job_name: str = "dist", suffix: str = "q8zvn", **kwargs) -> dict:
    """The MPIJob launcher pod, created by the launcher batch Job (``<name>-launcher``)."""
    launcher_job = f"{job_name}-launcher"
    pod_labels = {
        labels.MPI_JOB_NAME: job_name,
        labels.MPI_JOB_ROLE: "launcher",
        labels.BATCH_JOB_NAME: launcher_job,
        labels.LEGACY_JOB_NAME: launcher_job,
        labels.CONTROLLER_UID: uid(launcher_job),
        labels.ROLE: "launcher",
        labels.RANK: "0",
    }
    kwargs.setdefault("restart_policy", "OnFailure")
    return pod(
        f"{launcher_job}-{suffix}",
        pod_labels=pod_labels,
        owner=_owner("Job", launcher_job, "batch/v1"),
        **kwargs,
    )


# --- jobs -------------------------------------------------------------------------------------------


def job_condition(
    kind: str, reason: str = "", message: str = "", *, status: str = "True", at_s: float = 300
) -> dict:
    """A Job/MPIJob status condition."""
    cond = {"type": kind, "status": status, "lastProbeTime": ts(at_s), "lastTransitionTime": ts(at_s)}
    if reason:
        cond["reason"] = reason
    if message:
        cond["message"] = message
    return cond


def _metadata(name: str, annotations: dict | None, attempt: int, deleting: bool) -> dict:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": NAMESPACE,
        "uid": uid(name),
        "resourceVersion": "777",
        "generation": 2,
        "creationTimestamp": ts(-60),
        "labels": {
            labels.MANAGED_BY: labels.MANAGED_BY_VALUE,
            labels.GROUP: "vision",
            labels.USER: "alice",
            labels.ATTEMPT: str(attempt),
        },
        "annotations": {labels.GPUS: "4", labels.QUEUED_AT: ts(-60), **(annotations or {})},
    }
    if deleting:
        meta["deletionTimestamp"] = ts(200)
        meta["deletionGracePeriodSeconds"] = 0
        meta["finalizers"] = ["foregroundDeletion"]
    return meta


def _template(role: str, restart_policy: str) -> dict:
    return {
        "metadata": {"labels": {labels.ROLE: role}},
        "spec": {
            "restartPolicy": restart_policy,
            "containers": [{"name": "main", "image": IMAGE, "command": ["python", "train.py"]}],
        },
    }


def batch_job(
    name: str = "train",
    *,
    suspend: bool = False,
    annotations: dict | None = None,
    conditions: list[dict] | None = None,
    active: int = 0,
    failed: int = 0,
    succeeded: int = 0,
    backoff_limit: int = 3,
    attempt: int = 1,
    deleting: bool = False,
    listed: bool = False,
) -> dict:
    """A batch/v1 Job. ``listed=True`` drops kind/apiVersion, as items of a JobList come back."""
    status: dict[str, Any] = {"conditions": list(conditions or [])}
    if suspend:
        status["conditions"].append(job_condition("Suspended", "JobSuspended", "Job suspended", at_s=-60))
    else:
        status["startTime"] = ts(0)
    for key, value in (("active", active), ("failed", failed), ("succeeded", succeeded)):
        if value:
            status[key] = value
    if any(c["type"] in ("Complete", "Failed") and c["status"] == "True" for c in status["conditions"]):
        if any(c["type"] == "Complete" for c in status["conditions"]):
            status["completionTime"] = ts(300)
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(name, annotations, attempt, deleting),
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": backoff_limit,
            "suspend": suspend,
            "completionMode": "NonIndexed",
            "template": _template("worker", "Never"),
        },
        "status": status,
    }
    if listed:
        del body["apiVersion"], body["kind"]
    return body


def mpi_job(
    name: str = "dist",
    *,
    workers: int = 2,
    suspend: bool = False,
    annotations: dict | None = None,
    conditions: list[dict] | None = None,
    launcher_failed: int = 0,
    backoff_limit: int = 3,
    attempt: int = 1,
    deleting: bool = False,
) -> dict:
    """A kubeflow.org/v2beta1 MPIJob with one launcher and ``workers`` workers."""
    default_conditions = [
        job_condition("Created", "MPIJobCreated", f"MPIJob {NAMESPACE}/{name} is created.", at_s=-60)
    ]
    if suspend:
        default_conditions.append(job_condition("Suspended", "MPIJobSuspended", "MPIJob suspended", at_s=-60))
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": _metadata(name, annotations, attempt, deleting),
        "spec": {
            "slotsPerWorker": 1,
            "mpiImplementation": "OpenMPI",
            "launcherCreationPolicy": "AtStartup",
            "runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": backoff_limit, "suspend": suspend},
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "restartPolicy": "OnFailure",
                    "template": _template("launcher", "OnFailure"),
                },
                "Worker": {
                    "replicas": workers,
                    "restartPolicy": "OnFailure",
                    "template": _template("worker", "OnFailure"),
                },
            },
        },
        "status": {
            "conditions": default_conditions + list(conditions or []),
            "replicaStatuses": {
                "Launcher": {"active": 0 if suspend else 1, "failed": launcher_failed},
                "Worker": {"active": 0 if suspend else workers},
            },
            **({} if suspend else {"startTime": ts(0)}),
        },
    }


def event(
    kind: str,
    name: str,
    reason: str,
    message: str,
    *,
    type_: str = "Warning",
    at_s: float = 20,
    count: int = 1,
) -> dict:
    """A core/v1 Event about the object ``kind``/``name``."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{name}.{reason.lower()}-{int(at_s)}",
            "namespace": NAMESPACE,
            "creationTimestamp": ts(at_s),
        },
        "involvedObject": {
            "kind": kind,
            "name": name,
            "namespace": NAMESPACE,
            "uid": uid(name),
            "apiVersion": "v1" if kind == "Pod" else "batch/v1",
        },
        "reason": reason,
        "message": message,
        "type": type_,
        "count": count,
        "firstTimestamp": ts(at_s),
        "lastTimestamp": ts(at_s),
        "source": {"component": "kubelet" if kind == "Pod" else "job-controller"},
        "reportingComponent": "kubelet" if kind == "Pod" else "job-controller",
        "reportingInstance": "",
    }


# --- checking fixtures against the official models -------------------------------------------------

_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


def _normal(value: Any) -> Any:
    """Compare modulo what a model round trip changes: timestamp spelling, empty maps and lists, nulls."""
    if isinstance(value, dict):
        cleaned = {k: _normal(v) for k, v in value.items()}
        return {k: v for k, v in cleaned.items() if v not in (None, {}, [])}
    if isinstance(value, list):
        return [_normal(v) for v in value]
    if isinstance(value, str) and _TIMESTAMP.match(value):
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc)
    return value


def parses(obj: dict, model: str) -> bool:
    """Whether ``obj`` deserializes into the kubernetes client's ``model`` without losing a field.

    The client drops keys it does not know, so a round trip that changes the object means a
    misspelled or invented field.
    """
    client = ApiClient()
    parsed = client._ApiClient__deserialize(obj, model)  # noqa: SLF001 - the client's own JSON path
    again = client.sanitize_for_serialization(parsed)
    return _normal(again) == _normal(obj)


def mpi_job_parses(job: dict) -> bool:
    """An MPIJob has no model in the client: check its metadata and every replica's pod template."""
    client = ApiClient()
    client._ApiClient__deserialize(job["metadata"], "V1ObjectMeta")  # noqa: SLF001
    return all(
        parses(spec["template"], "V1PodTemplateSpec") for spec in job["spec"]["mpiReplicaSpecs"].values()
    ) and parses({"metadata": job["metadata"]}, "V1PodTemplateSpec")
