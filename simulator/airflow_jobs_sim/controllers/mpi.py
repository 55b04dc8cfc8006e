"""The simulated kubeflow MPI operator (``kubeflow.org/v2beta1`` MPIJob).

Follows kubeflow/mpi-operator ``pkg/controller/mpi_job_controller.go`` (v0.5.0, checked against
v0.8.0, the newest release): an MPIJob gets a headless Service ``<name>`` selecting its pods, worker
pods ``<name>-worker-<i>`` with ``hostname`` = pod name and ``subdomain: <name>`` (so a Ready worker is
``<name>-worker-<i>.<name>.<ns>.svc``), a hostfile ConfigMap ``<name>-config`` listing those names and a
launcher batch/v1 Job ``<name>-launcher`` whose pod the Job controller creates. The launcher Job
deciding success or failure, a failed or evicted worker failing the MPIJob, suspend,
launcherCreationPolicy (including its upstream gap: a suspended MPIJob gets its launcher Job at once,
issue #615), cleanPodPolicy and ttlSecondsAfterFinished (copied onto the launcher Job, whose TTL the
Job controller applies; the MPIJob itself is never deleted) follow the operator, and so does
``ValidateMPIJob`` (``pkg/apis/kubeflow/validation/validation.go``): the API server accepts these
fields (the CRD has no enum for them), the operator refuses to sync an invalid MPIJob and says why in
a ``ValidationError`` Warning event. ``plan_mpijob`` is the pure decision; ``MPIController`` applies it.
"""

from __future__ import annotations

import copy
import logging
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from airflow_jobs_sim import rbac
from airflow_jobs_sim.clock import Clock, rfc3339
from airflow_jobs_sim.conditions import condition_true, get_condition, set_condition
from airflow_jobs_sim.controllers.base import (
    Reconciler,
    controller_ref,
    key_of,
    owned_by,
    owner_reference,
    pod_is_terminal,
    split_key,
)
from airflow_jobs_sim.events import MPI_OPERATOR, NORMAL, WARNING, EventRecorder, EventSpec
from airflow_jobs_sim.store import default_mpijob_spec

log = logging.getLogger(__name__)

API_VERSION = "kubeflow.org/v2beta1"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
OPERATOR_NAME_LABEL = "training.kubeflow.org/operator-name"
OPERATOR_NAME = "mpi-operator"


@dataclass
class MPIMemory:
    """Precise times the operator remembers about one MPIJob."""

    finished_at: datetime | None = None


@dataclass(frozen=True)
class Create:
    resource: str
    obj: dict


@dataclass(frozen=True)
class Delete:
    resource: str
    name: str
    propagation: str | None = None


@dataclass(frozen=True)
class SuspendLauncher:
    name: str
    suspend: bool


MPIAction = Create | Delete | SuspendLauncher


@dataclass
class MPIPlan:
    status: dict
    actions: list[MPIAction] = field(default_factory=list)
    events: list[EventSpec] = field(default_factory=list)
    memory: MPIMemory = field(default_factory=MPIMemory)
    wake_at: datetime | None = None


def _labels(name: str, role: str) -> dict[str, str]:
    return {OPERATOR_NAME_LABEL: OPERATOR_NAME, JOB_NAME_LABEL: name, JOB_ROLE_LABEL: role}


def _replica(mpijob: dict, role: str) -> dict:
    return (mpijob.get("spec", {}).get("mpiReplicaSpecs") or {}).get(role) or {}


def _pod_restart_policy(replica: dict) -> str:
    policy = replica.get("restartPolicy") or "Never"
    return "Never" if policy == "ExitCode" else policy


def _launcher_works(mpijob: dict) -> bool:
    return bool(mpijob.get("spec", {}).get("runLauncherAsWorker"))


def worker_replica_index(mpijob: dict, index: int) -> str:
    """workerReplicaIndexLabel (v0.7.0+): with runLauncherAsWorker the launcher is replica 0 and the
    workers are padded by one, so every pod of the job has a unique index (Kueue's TAS needs it)."""
    return str(index + 1 if _launcher_works(mpijob) else index)


def worker_pod(mpijob: dict, index: int) -> dict:
    """Worker pod number ``index`` of an MPIJob."""
    meta = mpijob["metadata"]
    replica = _replica(mpijob, "Worker")
    template = copy.deepcopy(replica.get("template") or {})
    tmeta = template.get("metadata") or {}
    name = f"{meta['name']}-worker-{index}"
    labels = {
        **(tmeta.get("labels") or {}),
        **_labels(meta["name"], "worker"),
        REPLICA_INDEX_LABEL: worker_replica_index(mpijob, index),
    }
    spec = template.get("spec") or {}
    spec["hostname"] = name
    spec["subdomain"] = meta["name"]  # the Service's name: <name>-worker-<i>.<name>.<ns>.svc
    # newWorker: Intel MPI and MPICH reach the launcher by its short hostname through this search path.
    dns = spec.setdefault("dnsConfig", {})
    dns["searches"] = [
        *(dns.get("searches") or []),
        f"{meta['name']}.{meta.get('namespace')}.svc.cluster.local",
    ]
    spec["restartPolicy"] = _pod_restart_policy(replica)
    pod_meta: dict[str, Any] = {
        "name": name,
        "namespace": meta.get("namespace"),
        "labels": labels,
        "ownerReferences": [owner_reference(mpijob, API_VERSION, "MPIJob")],
    }
    if tmeta.get("annotations"):
        pod_meta["annotations"] = dict(tmeta["annotations"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}


def launcher_job(mpijob: dict, suspend: bool) -> dict:
    """The launcher batch/v1 Job of an MPIJob."""
    meta = mpijob["metadata"]
    replica = _replica(mpijob, "Launcher")
    run_policy = mpijob.get("spec", {}).get("runPolicy") or {}
    template = copy.deepcopy(replica.get("template") or {})
    tmeta = template.setdefault("metadata", {})
    tmeta["labels"] = {**(tmeta.get("labels") or {}), **_labels(meta["name"], "launcher")}
    if _launcher_works(mpijob):
        tmeta["labels"][REPLICA_INDEX_LABEL] = "0"  # newLauncherPodTemplate, v0.7.0+
    tspec = template.setdefault("spec", {})
    tspec["restartPolicy"] = _pod_restart_policy(
        {"restartPolicy": replica.get("restartPolicy") or "OnFailure"}
    )
    # newLauncherPodTemplate overwrites whatever the template says.
    tspec["hostname"] = f"{meta['name']}-launcher"
    tspec["subdomain"] = meta["name"]
    spec: dict[str, Any] = {"template": template, "suspend": suspend}
    # newLauncherJob copies ttlSecondsAfterFinished, activeDeadlineSeconds and backoffLimit from the
    # MPIJob's runPolicy onto the launcher Job (kubeflow/mpi-operator v0.8.0
    # pkg/controller/mpi_job_controller.go, ``newLauncherJob``): the Job controller's TTL removes the
    # launcher Job; nothing in the operator ever deletes the finished MPIJob itself.
    for source, target in (
        ("ttlSecondsAfterFinished", "ttlSecondsAfterFinished"),
        ("backoffLimit", "backoffLimit"),
        ("activeDeadlineSeconds", "activeDeadlineSeconds"),
    ):
        if run_policy.get(source) is not None:
            spec[target] = run_policy[source]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"{meta['name']}-launcher",
            "namespace": meta.get("namespace"),
            # newLauncherJob labels the Job `app: <name>` only; its pod template carries the
            # training.kubeflow.org labels (mpi-operator v0.8.2, as the real plane shows).
            "labels": {"app": meta["name"]},
            "ownerReferences": [owner_reference(mpijob, API_VERSION, "MPIJob")],
        },
        "spec": spec,
    }


def job_service(mpijob: dict) -> dict:
    """The headless Service named after the MPIJob that gives its pods their DNS names (``newJobService``).

    Without ``publishNotReadyAddresses`` (only ``runLauncherAsWorker`` sets it, v0.8.0), a pod's name
    resolves only while the pod is Ready.
    """
    meta = mpijob["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": meta["name"],
            "namespace": meta.get("namespace"),
            "labels": {"app": meta["name"]},
            "ownerReferences": [owner_reference(mpijob, API_VERSION, "MPIJob")],
        },
        "spec": {
            "clusterIP": "None",
            "selector": {OPERATOR_NAME_LABEL: OPERATOR_NAME, JOB_NAME_LABEL: meta["name"]},
            # A Go bool with `omitempty`: absent unless runLauncherAsWorker sets it.
            **(
                {"publishNotReadyAddresses": True}
                if mpijob.get("spec", {}).get("runLauncherAsWorker")
                else {}
            ),
        },
    }


_CLEAN_POD_POLICIES = ("All", "None", "Running")
_RESTART_POLICIES = ("Never", "OnFailure")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def _quoted(values: tuple[str, ...]) -> str:
    return ", ".join(f'"{v}"' for v in values)


def validation_errors(mpijob: dict) -> list[str]:
    """What the operator's ``ValidateMPIJob`` refuses, for the fields the simulator models (pure).

    Messages are Kubernetes field errors, as the operator's ``ValidationError`` event prints them.
    """
    meta = mpijob["metadata"]
    spec = mpijob.get("spec") or {}
    errs: list[str] = []
    worker = _replica(mpijob, "Worker")
    replicas = worker.get("replicas")
    last = int(replicas) - 1 if isinstance(replicas, int) and replicas > 0 else 0
    hostname = f"{meta['name']}-worker-{last}"
    if len(hostname) > 63 or not _DNS1035_LABEL.match(hostname):
        errs.append(
            f'metadata.name: Invalid value: "{meta["name"]}": will not able to create pod and service with '
            f'invalid DNS label "{hostname}"'
        )
    policy = (spec.get("runPolicy") or {}).get("cleanPodPolicy")
    if policy is None:
        errs.append("spec.runPolicy.cleanPodPolicy: Required value: must have clean Pod policy")
    elif policy not in _CLEAN_POD_POLICIES:
        errs.append(
            f'spec.runPolicy.cleanPodPolicy: Unsupported value: "{policy}": supported values: '
            + _quoted(_CLEAN_POD_POLICIES)
        )
    for role in ("Launcher", "Worker"):
        replica = _replica(mpijob, role)
        if not replica:
            if role == "Launcher":
                errs.append("spec.mpiReplicaSpecs[Launcher]: Required value: must have Launcher replica spec")
            continue
        path = f"spec.mpiReplicaSpecs[{role}]"
        restart = replica.get("restartPolicy")
        if restart not in _RESTART_POLICIES:
            errs.append(
                f'{path}.restartPolicy: Unsupported value: "{restart}": supported values: '
                + _quoted(_RESTART_POLICIES)
            )
        count = replica.get("replicas")
        if role == "Launcher" and count != 1:
            errs.append(f"{path}.replicas: Invalid value: {count}: must be 1")
        if role == "Worker" and isinstance(count, int) and count <= 0:
            errs.append(f"{path}.replicas: Invalid value: {count}: must be greater than or equal to 1")
    return errs


def config_map(mpijob: dict) -> dict:
    """The ConfigMap with the hostfile mpirun reads."""
    meta = mpijob["metadata"]
    name, ns = meta["name"], meta.get("namespace")
    slots = mpijob.get("spec", {}).get("slotsPerWorker", 1)
    workers = int(_replica(mpijob, "Worker").get("replicas") or 0)
    # newConfigMap: a launcher that works is the first host, by its own hostname.
    hosts = [f"{name}-launcher.{name}.{ns}.svc"] if _launcher_works(mpijob) else []
    hosts += [f"{name}-worker-{i}.{name}.{ns}.svc" for i in range(workers)]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{name}-config",
            "namespace": ns,
            "labels": {"app": name},
            "ownerReferences": [owner_reference(mpijob, API_VERSION, "MPIJob")],
        },
        "data": {
            "hostfile": "".join(f"{h} slots={slots}\n" for h in hosts),
            "discover_hosts.sh": "#!/bin/sh\n" + "".join(f"echo {h}\n" for h in hosts),
        },
    }


def _mpi_condition(
    conditions: list[dict], type_: str, status: str, now: datetime, reason: str, message: str
) -> list[dict]:
    """Set a condition as the operator does (``setCondition`` / ``filterOutCondition``,
    pkg/controller/mpi_job_controller_status.go, mpi-operator v0.8.2): Succeeded or Failed turns Running
    (and an earlier Failed) to status False, keeping its reason, message and time; Running and Restarting
    replace each other."""
    if status == "True" and type_ in ("Succeeded", "Failed"):
        conditions = [
            {**c, "status": "False"}
            if c.get("type") in ("Running", "Failed") and c.get("type") != type_
            else c
            for c in conditions
        ]
    if type_ == "Running":
        conditions = [c for c in conditions if c.get("type") != "Restarting"]
    if type_ == "Restarting":
        conditions = [c for c in conditions if c.get("type") != "Running"]
    return set_condition(conditions, type_, status, now, reason, message, style="job")


def _replica_status(active: int = 0, succeeded: int = 0, failed: int = 0) -> dict:
    return {k: v for k, v in (("active", active), ("succeeded", succeeded), ("failed", failed)) if v}


def plan_mpijob(
    mpijob: dict,
    pods: list[dict],
    launcher: dict | None,
    now: datetime,
    scale: float = 1.0,
    memory: MPIMemory | None = None,
    config_exists: bool = True,
    service_exists: bool = True,
) -> MPIPlan:
    """One sync of an MPIJob given the namespace's pods and its launcher Job (pure)."""
    memory = copy.deepcopy(memory) if memory is not None else MPIMemory()
    meta = mpijob["metadata"]
    name, ns = meta["name"], meta.get("namespace")
    ref = f"{ns}/{name}"
    status = copy.deepcopy(mpijob.get("status") or {})
    plan = MPIPlan(status=status, memory=memory)
    if meta.get("deletionTimestamp"):
        return plan
    # syncHandler defaults its copy (scheme.Scheme.Default) before it validates and acts on it.
    mpijob = {**mpijob, "spec": copy.deepcopy(mpijob.get("spec") or {})}
    default_mpijob_spec(mpijob["spec"])
    errs = validation_errors(mpijob)
    if errs:
        # The operator records the refusal and does not requeue; nothing of the job is created.
        detail = errs[0] if len(errs) == 1 else "[" + ", ".join(errs) + "]"
        plan.events.append(EventSpec(WARNING, "ValidationError", f"Found validation errors: {detail}"))
        return plan
    spec = mpijob.get("spec", {})
    run_policy = spec.get("runPolicy") or {}
    suspended = bool(run_policy.get("suspend"))
    uid = meta.get("uid")
    workers_wanted = int(_replica(mpijob, "Worker").get("replicas") or 0)
    workers = {
        p["metadata"]["name"]: p
        for p in pods
        if owned_by(p, uid) and (p["metadata"].get("labels") or {}).get(JOB_ROLE_LABEL) == "worker"
    }
    if launcher is not None and not owned_by(launcher, uid):
        launcher = None  # a same-named Job that is not ours: the real operator refuses to adopt it too
    launcher_pods = [p for p in pods if launcher is not None and owned_by(p, launcher["metadata"].get("uid"))]
    conditions = status.get("conditions") or []
    if not conditions:
        message = f"MPIJob {ref} is created."
        conditions = _mpi_condition(conditions, "Created", "True", now, "MPIJobCreated", message)
        plan.events.append(EventSpec(NORMAL, "MPIJobCreated", message))
    launcher_done = launcher is not None and (
        condition_true(launcher.get("status", {}).get("conditions"), "Complete")
        or condition_true(launcher.get("status", {}).get("conditions"), "Failed")
    )
    if not launcher_done:
        # syncHandler: the Service and the hostfile exist while the launcher has not finished.
        if not service_exists:
            plan.actions.append(Create("services", job_service(mpijob)))
        if not config_exists:
            plan.actions.append(Create("configmaps", config_map(mpijob)))

    finished = condition_true(conditions, "Succeeded") or condition_true(conditions, "Failed")
    if finished:
        policy = run_policy.get("cleanPodPolicy") or "None"
        for pod in workers.values():
            if pod["metadata"].get("deletionTimestamp"):
                continue
            if policy == "All" or (policy == "Running" and not pod_is_terminal(pod)):
                plan.actions.append(Delete("pods", pod["metadata"]["name"]))
        status["conditions"] = conditions
        _counts(status, workers, launcher, launcher_pods, cleaned=policy in ("All", "Running"))
        return plan

    if suspended:
        if not condition_true(conditions, "Suspended"):
            message = f"MPIJob {ref} is suspended."
            conditions = set_condition(
                conditions, "Suspended", "True", now, "MPIJobSuspended", message, style="job"
            )
            if get_condition(conditions, "Running") is not None:
                conditions = set_condition(
                    conditions, "Running", "False", now, "MPIJobSuspended", message, style="job"
                )
            plan.events.append(EventSpec(NORMAL, "MPIJobSuspended", message))
        for pod in workers.values():
            if not pod["metadata"].get("deletionTimestamp"):
                plan.actions.append(Delete("pods", pod["metadata"]["name"]))
        if launcher is None:
            # Whatever the launcherCreationPolicy: while suspended there are no workers, and the
            # operator's ``countReadyWorkerPods(worker) == len(worker)`` reads 0 == 0 (issue #615).
            plan.actions.append(Create("jobs", launcher_job(mpijob, suspend=True)))
        elif not launcher.get("spec", {}).get("suspend"):
            plan.actions.append(SuspendLauncher(launcher["metadata"]["name"], True))
        status["conditions"] = conditions
        _counts(status, {}, launcher, launcher_pods)
        return plan

    if condition_true(conditions, "Suspended"):
        message = f"MPIJob {ref} is resumed."
        conditions = set_condition(
            conditions, "Suspended", "False", now, "MPIJobResumed", message, style="job"
        )
        plan.events.append(EventSpec(NORMAL, "MPIJobResumed", message))
        status["startTime"] = rfc3339(now)
    status.setdefault("startTime", rfc3339(now))

    for index in range(workers_wanted):
        pod_name = f"{name}-worker-{index}"
        if pod_name not in workers:
            plan.actions.append(Create("pods", worker_pod(mpijob, index)))
    # getOrCreateWorker: only when there are more worker pods than replicas, delete those whose
    # replica-index label is at least the replica count (the label as is, padded or not: v0.8.0).
    if len(workers) > workers_wanted:
        for pod_name, pod in workers.items():
            index = (pod["metadata"].get("labels") or {}).get(REPLICA_INDEX_LABEL, "")
            if index.isdigit() and int(index) >= workers_wanted:
                if not pod["metadata"].get("deletionTimestamp"):
                    plan.actions.append(Delete("pods", pod_name))

    # countReadyWorkerPods: a worker counts once its Ready condition is True; any policy but AtStartup
    # waits for all of them (the CRD does not restrict the value).
    all_ready = len(workers) >= workers_wanted and all(
        condition_true(p.get("status", {}).get("conditions"), "Ready") for p in workers.values()
    )
    if launcher is None:
        if spec.get("launcherCreationPolicy", "AtStartup") == "AtStartup" or all_ready:
            plan.actions.append(Create("jobs", launcher_job(mpijob, suspend=False)))
    elif launcher.get("spec", {}).get("suspend"):
        plan.actions.append(SuspendLauncher(launcher["metadata"]["name"], False))

    launcher_conditions = (launcher or {}).get("status", {}).get("conditions")
    failed_workers = [p for p in workers.values() if p.get("status", {}).get("phase") == "Failed"]
    evicted = [p for p in failed_workers if p.get("status", {}).get("reason") == "Evicted"]
    running_workers = [p for p in workers.values() if p.get("status", {}).get("phase") == "Running"]
    if launcher is not None and condition_true(launcher_conditions, "Complete"):
        message = f"MPIJob {ref} successfully completed."
        conditions = _mpi_condition(conditions, "Succeeded", "True", now, "MPIJobSucceeded", message)
        status["completionTime"] = launcher.get("status", {}).get("completionTime") or rfc3339(now)
        plan.events.append(EventSpec(NORMAL, "MPIJobSucceeded", message))
        memory.finished_at = now
    elif launcher is not None and condition_true(launcher_conditions, "Failed"):
        failed_cond = get_condition(launcher_conditions, "Failed") or {}
        reason = failed_cond.get("reason") or "MPIJobFailed"
        message = failed_cond.get("message") or f"MPIJob {ref} has failed"
        if reason == "BackoffLimitExceeded":
            last = max(
                (p for p in launcher_pods if p.get("status", {}).get("phase") == "Failed"),
                key=lambda p: p["metadata"].get("creationTimestamp") or "",
                default=None,
            )
            if last is not None:
                # As the operator does (v0.8.2 mpi_job_controller.go updateMPIJobFailedStatus): append
                # the last failed launcher pod's reason and message, even when both are empty (a pod
                # whose container exited non-zero has neither), leaving "BackoffLimitExceeded/" and a
                # message ending in ": ".
                last_status = last.get("status", {})
                reason += "/" + (last_status.get("reason") or "")
                message += ": " + (last_status.get("message") or "")
        conditions = _mpi_condition(conditions, "Failed", "True", now, reason, message)
        status["completionTime"] = rfc3339(now)
        plan.events.append(EventSpec(WARNING, reason, message))
        memory.finished_at = now
    elif evicted:
        # updateMPIJobStatus (mpi-operator v0.8.2, pkg/controller/mpi_job_controller.go) fails the MPIJob
        # for workers whose pod failed with reason Evicted, and for nothing else a worker does: a worker
        # that exits non-zero only counts in replicaStatuses.Worker.failed, and the job ends when its
        # launcher does (mpirun loses the rank and exits non-zero, which fails the launcher Job).
        reason, message = "MPIJobEvicted", f"{len(evicted)}/{len(workers)} workers are evicted"
        conditions = _mpi_condition(conditions, "Failed", "True", now, reason, message)
        status["completionTime"] = rfc3339(now)
        plan.events.append(EventSpec(WARNING, reason, message))
        memory.finished_at = now
    else:
        launcher_running = any(p.get("status", {}).get("phase") == "Running" for p in launcher_pods)
        launcher_failures = int((launcher or {}).get("status", {}).get("failed") or 0)
        if launcher_running and len(running_workers) == workers_wanted:
            if not condition_true(conditions, "Running"):
                message = f"MPIJob {ref} is running."
                conditions = _mpi_condition(conditions, "Running", "True", now, "MPIJobRunning", message)
                plan.events.append(EventSpec(NORMAL, "MPIJobRunning", f"MPIJob {ref} is running"))
        elif launcher_failures and not condition_true(conditions, "Restarting") and not launcher_running:
            message = f"MPIJob {ref} is restarting because {launcher_failures} Launcher replica(s) failed."
            conditions = _mpi_condition(conditions, "Restarting", "True", now, "MPIJobRestarting", message)
            plan.events.append(EventSpec(WARNING, "MPIJobRestarting", message))
    status["conditions"] = conditions
    _counts(status, workers, launcher, launcher_pods)
    return plan


def _counts(
    status: dict,
    workers: dict[str, dict],
    launcher: dict | None,
    launcher_pods: list[dict],
    cleaned: bool = False,
) -> None:
    lstatus = (launcher or {}).get("status", {})
    lconds = lstatus.get("conditions")
    phases = [p.get("status", {}).get("phase") for p in workers.values()]
    # Once the launcher Job has finished, syncHandler lists no workers (`done`) and updateMPIJobStatus
    # reports the Worker replica status initialized, {} (mpi_job_controller.go, mpi-operator v0.8.2).
    cleaned = cleaned or condition_true(lconds, "Complete") or condition_true(lconds, "Failed")
    status["replicaStatuses"] = {
        "Launcher": _replica_status(
            active=int(lstatus.get("active") or 0),
            succeeded=1 if condition_true(lconds, "Complete") else 0,
            failed=1 if condition_true(lconds, "Failed") else 0,
        ),
        # cleanUpWorkerPods resets the workers' counts (initializeMPIJobStatuses) once it cleaned them.
        "Worker": {}
        if cleaned
        else _replica_status(
            active=phases.count("Running"),
            succeeded=phases.count("Succeeded"),
            failed=phases.count("Failed"),
        ),
    }


class MPIController(Reconciler):
    """Keeps every MPIJob's workers, launcher Job and status in line with its spec."""

    name = "mpi-operator"
    # The operator, as kubeflow/mpi-operator v0.8.2's manifests deploy it (deploy/v2beta1/mpi-operator.yaml:
    # namespace mpi-operator, the service account mpi-operator).
    identity = rbac.User.service_account("mpi-operator", "mpi-operator")

    def __init__(self, store: Any, clock: Clock, recorder: EventRecorder):
        super().__init__()
        self.store = store
        self.clock = clock
        self.recorder = recorder
        self.memory: dict[str, MPIMemory] = {}

    def on_change(self, event_type: str, resource: str, obj: dict) -> None:
        """Store notification: an MPIJob, its launcher Job or one of its pods changed."""
        if resource == "mpijobs":
            if event_type == "DELETED":
                self.memory.pop(obj["metadata"].get("uid"), None)
            else:
                self.enqueue(key_of(obj))
            return
        if resource not in ("pods", "jobs"):
            return
        labels = obj.get("metadata", {}).get("labels") or {}
        ref = controller_ref(obj)
        name = labels.get(JOB_NAME_LABEL)
        if name and (
            labels.get(OPERATOR_NAME_LABEL) == OPERATOR_NAME or (ref and ref.get("kind") == "MPIJob")
        ):
            self.enqueue(f"{obj['metadata'].get('namespace')}/{name}")

    def reconcile(self, key: str) -> None:
        """Sync one MPIJob."""
        ns, name = split_key(key)
        try:
            mpijob = self.store.get("mpijobs", name, namespace=ns)
        except Exception:  # noqa: BLE001 - deleted meanwhile
            return
        try:
            launcher = self.store.get("jobs", f"{name}-launcher", namespace=ns)
        except Exception:  # noqa: BLE001 - not created yet
            launcher = None
        try:
            self.store.get("configmaps", f"{name}-config", namespace=ns)
            config_exists = True
        except Exception:  # noqa: BLE001 - not created yet
            config_exists = False
        try:
            self.store.get("services", name, namespace=ns)
            service_exists = True
        except Exception:  # noqa: BLE001 - not created yet
            service_exists = False
        # Read-only views of the workers (owned by the MPIJob) and the launcher's pods (owned by its Job).
        owners = [mpijob["metadata"]["uid"], *([launcher["metadata"]["uid"]] if launcher else [])]
        pods = sorted(
            (
                p
                for owner in owners
                for p in self.store.owned("pods", owner)
                if (p["metadata"].get("labels") or {}).get(JOB_NAME_LABEL) == name
            ),
            key=lambda p: p["metadata"]["name"],
        )
        now = self.clock.now()
        uid = mpijob["metadata"]["uid"]
        plan = plan_mpijob(
            mpijob,
            pods,
            launcher,
            now,
            self.clock.time_scale,
            self.memory.get(uid),
            config_exists,
            service_exists,
        )
        self.memory[uid] = plan.memory
        for action in plan.actions:
            try:
                self._apply(ns, action)
            except Exception as exc:  # noqa: BLE001 - races with the garbage collector are harmless
                if getattr(exc, "code", None) not in (404, 409):
                    raise
        # Events before the status: whoever sees the new condition also finds the event explaining it.
        for spec in plan.events:
            self.recorder.record(mpijob, spec, MPI_OPERATOR)
        if plan.status != (mpijob.get("status") or {}):
            body = {"metadata": {"name": name, "namespace": ns}, "status": plan.status}
            self.store.update("mpijobs", body, subresource="status")
        self.enqueue_at(key, plan.wake_at, now)

    def _apply(self, ns: str | None, action: MPIAction) -> None:
        if isinstance(action, Create):
            self.store.create(action.resource, action.obj, namespace=ns)
        elif isinstance(action, Delete):
            self.store.delete(
                action.resource, action.name, namespace=ns, propagation_policy=action.propagation
            )
        else:
            self.store.patch(
                "jobs", action.name, {"spec": {"suspend": action.suspend}}, "merge", namespace=ns
            )
