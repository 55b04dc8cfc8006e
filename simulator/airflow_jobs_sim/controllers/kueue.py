"""A simulated Kueue: the job webhook, the job reconciler and the scheduler, for batch Jobs and MPIJobs.

Off by default (``ClusterConfig.kueue``). What it models, each rule from kubernetes-sigs/kueue v0.19.2:

- **Which jobs Kueue manages**: a job with the ``kueue.x-k8s.io/queue-name`` label, or every job when
  ``manageJobsWithoutQueueName`` is set; a Job owned by a managed MPIJob (its launcher) is the MPIJob's
  (``pkg/controller/jobframework/reconciler.go``, ``FindAncestorJobManagedByKueue``).
- **The webhook** suspends a managed job on create (``jobframework/defaults.go``
  ``ApplyDefaultForSuspend``) and refuses to change its queue name while it runs
  (``jobframework/validation.go`` ``ValidateUpdateForQueueName``).
- **The job reconciler** (``jobframework/reconciler.go`` ``ReconcileGenericJob``): one Workload per job,
  named ``<kind>-<name>-<hash>`` (``workload_names.go``) and owned by it; a finished job finishes its
  Workload; an evicted Workload stops (suspends) its job and, once no pod of it is active, gives the quota
  back and is requeued; an admitted Workload starts (unsuspends) its job with event ``Started``; a
  running job whose Workload is not admitted is suspended again (``Stopped``: "Not admitted by cluster
  queue") -- the rule that makes a second admission controller fight Kueue.
- **The scheduler** (``pkg/scheduler/scheduler.go``, ``flavorassigner/flavorassigner.go``,
  ``preemption/preemption.go``): per ClusterQueue, pending Workloads in priority order then by creation
  (StrictFIFO: the head blocks the queue; BestEffortFIFO, the default, lets later ones pass); the first
  flavor of the resource group with room for every pod set; borrowing from the cohort up to
  ``borrowingLimit``; ``withinClusterQueue: LowerPriority`` preemption of the fewest, lowest-priority,
  newest workloads; the conditions and messages of ``pkg/workload/workload.go`` with the
  ``UnadmittedWorkloadsObservability`` gate off (its v0.19 default): reasons ``Pending`` and
  ``Inadmissible``.
- **waitForPodsReady**, on by default as in Kueue v0.19.2 (``KueueConfig``): the job reconciler keeps
  the Workload's ``PodsReady`` condition (``WaitForStart``, ``Started``, ``WaitForRecovery``,
  ``Recovered``: ``jobframework/reconciler.go`` ``generatePodsReadyCondition``), and an admitted
  Workload not ready within the timeout (since its admission) or the recovery timeout (since its pods
  stopped being ready) is evicted (``PodsReadyTimeout``, ``pkg/controller/core/workload_controller.go``)
  and requeued after ``backoffBaseSeconds * 2^(n-1)``, at most ``backoffMaxSeconds``.
- **The visibility API** (``pkg/visibility/storage``, served by ``sim/server.py``): a LocalQueue's or a
  ClusterQueue's pending Workloads with their positions, from :meth:`KueueController.pending_workloads`.

Not modelled (said in docs/simulator.md): admission checks, fair sharing, topology-aware scheduling,
partial admission, ``lendingLimit``, preemption across the cohort.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from airflow_jobs_sim import rbac
from airflow_jobs_sim.clock import Clock, rfc3339
from airflow_jobs_sim.conditions import condition_true, get_condition
from airflow_jobs_sim.config import KueueConfig
from airflow_jobs_sim.controllers.base import (
    Reconciler,
    controller_ref,
    key_of,
    split_key,
)
from airflow_jobs_sim.controllers.scheduler import parse_quantity as _quantity
from airflow_jobs_sim.errors import ApiError, Cause, invalid
from airflow_jobs_sim.events import NORMAL, EventRecorder, EventSpec
from airflow_jobs_sim.store import parse_time


def parse_quantity(value: str) -> float:
    return float(_quantity(value))


QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
# Kueue's default LocalQueue (v0.19.2 pkg/controller/constants, DefaultLocalQueueName) and its admission
# gate (pkg/constants/constants.go, AdmissionGatedByAnnotation; beta, on by default since v0.19).
DEFAULT_LOCAL_QUEUE = "default"
ADMISSION_GATE = "kueue.x-k8s.io/admission-gated-by"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
KUEUE = "kueue-admission"  # the events' source component (Kueue's manager)
API_VERSION = "kueue.x-k8s.io/v1beta2"
JOB_KINDS = {"jobs": ("Job", "batch"), "mpijobs": ("MPIJob", "kubeflow.org")}
MPI_JOB_NAME_LABEL = "training.kubeflow.org/job-name"


# ---------------------------------------------------------------------------- jobs, as Kueue sees them


def is_suspended(resource: str, job: dict) -> bool:
    spec = job.get("spec") or {}
    if resource == "mpijobs":
        return bool((spec.get("runPolicy") or {}).get("suspend"))
    return bool(spec.get("suspend"))


def suspend_patch(resource: str, suspend: bool) -> dict:
    if resource == "mpijobs":
        return {"spec": {"runPolicy": {"suspend": suspend}}}
    return {"spec": {"suspend": suspend}}


def queue_name(job: dict) -> str | None:
    return (job.get("metadata", {}).get("labels") or {}).get(QUEUE_NAME_LABEL)


def is_managed(resource: str, job: dict, config: KueueConfig) -> bool:
    """Whether Kueue manages ``job``: labelled, or all jobs; a child of an MPIJob is its parent's."""
    if resource not in JOB_KINDS:
        return False
    owner = controller_ref(job)
    if owner is not None and owner.get("kind") == "MPIJob":
        return False
    return queue_name(job) is not None or config.manage_jobs_without_queue_name


def job_finished(resource: str, job: dict) -> tuple[bool, bool, str]:
    """(finished, succeeded, message) from the job's conditions (Complete/Failed; MPIJob Succeeded/Failed)."""
    conditions = (job.get("status") or {}).get("conditions")
    done = "Succeeded" if resource == "mpijobs" else "Complete"
    for type_, ok in ((done, True), ("Failed", False)):
        cond = get_condition(conditions, type_)
        if cond is not None and cond.get("status") == "True":
            return True, ok, cond.get("message") or cond.get("reason") or type_
    return False, False, ""


def _pod_requests(template: dict) -> dict[str, float]:
    """A pod's requests as Kueue sums them (limits stand in for missing requests)."""
    total: dict[str, float] = {}
    for c in (template.get("spec") or {}).get("containers") or ():
        res = c.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        for name, value in merged.items():
            total[name] = total.get(name, 0.0) + parse_quantity(str(value))
    return total


def pod_sets(resource: str, job: dict) -> list[dict]:
    """The Workload's podSets: ``main`` for a Job; ``launcher`` and ``worker`` for an MPIJob."""
    spec = job.get("spec") or {}
    if resource == "mpijobs":
        out = []
        for role, rs in (spec.get("mpiReplicaSpecs") or {}).items():
            out.append(
                {
                    "name": role.lower(),
                    "count": int(rs.get("replicas", 1)),
                    "template": rs.get("template") or {},
                }
            )
        return out
    count = int(spec.get("parallelism", 1))
    return [{"name": "main", "count": count, "template": spec.get("template") or {}}]


def workload_name(resource: str, job: dict) -> str:
    """``workload_names.go`` ``GetWorkloadNameForOwnerWithGVK``: ``<kind>-<name>`` and a sha1 tail."""
    kind, group = JOB_KINDS[resource]
    meta = job["metadata"]
    digest = hashlib.sha1(f"{kind}\n{group}\n{meta['name']}\n{meta['uid']}".encode()).hexdigest()
    prefix = f"{kind.lower()}-{meta['name']}"[: 253 - 1 - 5]
    return f"{prefix}-{digest[:5]}"


def new_workload(resource: str, job: dict, priority: int, priority_class: str | None) -> dict:
    kind, group = JOB_KINDS[resource]
    meta = job["metadata"]
    spec: dict[str, Any] = {
        "queueName": queue_name(job) or "",
        "podSets": pod_sets(resource, job),
        "priority": priority,
        "active": True,
    }
    if priority_class:
        spec["priorityClassRef"] = {
            "group": "kueue.x-k8s.io",
            "kind": "WorkloadPriorityClass",
            "name": priority_class,
        }
    return {
        "apiVersion": API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": workload_name(resource, job),
            "namespace": meta["namespace"],
            "labels": {"kueue.x-k8s.io/job-uid": meta["uid"]},
            **({"annotations": {ADMISSION_GATE: ",".join(gates(job))}} if gates(job) else {}),
            "ownerReferences": [
                {
                    "apiVersion": f"{group}/{'v1' if resource == 'jobs' else 'v2beta1'}",
                    "kind": kind,
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


# ---------------------------------------------------------------------------- the webhook


def default_on_create(resource: str, job: dict, config: KueueConfig) -> None:
    """Kueue's mutating webhook: a managed job is created suspended (``ApplyDefaultForSuspend``)."""
    if is_managed(resource, job, config) and not is_suspended(resource, job):
        spec = job.setdefault("spec", {})
        if resource == "mpijobs":
            spec.setdefault("runPolicy", {})["suspend"] = True
        else:
            spec["suspend"] = True


def gates(obj: dict) -> list[str]:
    value = (obj.get("metadata", {}).get("annotations") or {}).get(ADMISSION_GATE) or ""
    return [g.strip() for g in value.split(",") if g.strip()]


def validate_gates(resource: str, new: dict, old: dict) -> None:
    """A gate is set only at creation and only removed later (pkg/util/webhook/
    validation_admissiongatedby.go, ValidateAdmissionGatedByAnnotationOnUpdate)."""
    before, after = gates(old), gates(new)
    if not before and after:
        message = "cannot add admission gate after creation"
    elif any(g not in before for g in after):
        message = "can only remove gates, not add new ones"
    else:
        return
    raise invalid(
        JOB_KINDS[resource][0],
        old["metadata"]["name"],
        [Cause("FieldValueForbidden", f"metadata.annotations[{ADMISSION_GATE}]", f"Forbidden: {message}")],
        JOB_KINDS[resource][1],
    )


def validate_update(resource: str, new: dict, old: dict, config: KueueConfig) -> None:
    """Kueue's validating webhook: admission gates are only removed; the queue name of a running job is
    immutable."""
    validate_gates(resource, new, old)
    if not is_managed(resource, old, config) or is_suspended(resource, old):
        return
    if queue_name(new) != queue_name(old):
        raise invalid(
            JOB_KINDS[resource][0],
            old["metadata"]["name"],
            [Cause("FieldValueInvalid", f"metadata.labels[{QUEUE_NAME_LABEL}]", "field is immutable")],
            JOB_KINDS[resource][1],
        )


# ---------------------------------------------------------------------------- quota and the scheduler


@dataclass(frozen=True)
class Candidate:
    key: str  # namespace/name of the Workload
    uid: str
    cluster_queue: str
    priority: int
    created: datetime
    requests: dict[str, float]  # total over pod sets
    admitted_at: datetime | None = None


@dataclass
class QueueView:
    """One ClusterQueue: nominal quota per (flavor, resource), what is in use, its cohort's share."""

    name: str
    strategy: str
    flavors: list[tuple[str, dict[str, float], dict[str, float | None]]]  # (flavor, nominal, borrowingLimit)
    covered: set[str]
    cohort: str | None
    preempt_lower_priority: bool
    usage: dict[tuple[str, str], float] = field(default_factory=dict)


def cluster_queue_view(cq: dict) -> QueueView:
    spec = cq.get("spec") or {}
    flavors: list[tuple[str, dict[str, float], dict[str, float | None]]] = []
    covered: set[str] = set()
    for group in spec.get("resourceGroups") or ():
        covered.update(group.get("coveredResources") or ())
        for fl in group.get("flavors") or ():
            nominal = {
                r["name"]: parse_quantity(str(r.get("nominalQuota", 0))) for r in fl.get("resources") or ()
            }
            borrow = {
                r["name"]: (parse_quantity(str(r["borrowingLimit"])) if "borrowingLimit" in r else None)
                for r in fl.get("resources") or ()
            }
            flavors.append((fl["name"], nominal, borrow))
    preemption = spec.get("preemption") or {}
    return QueueView(
        name=cq["metadata"]["name"],
        strategy=spec.get("queueingStrategy") or "BestEffortFIFO",
        flavors=flavors,
        covered=covered,
        cohort=spec.get("cohortName") or spec.get("cohort"),
        preempt_lower_priority=preemption.get("withinClusterQueue") == "LowerPriority",
    )


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def available(queue: QueueView, cohort: Iterable[QueueView], flavor: str, resource: str) -> float:
    """How much of ``resource`` in ``flavor`` ``queue`` can still take (pure; negative when over-admitted).

    Kueue v0.19.2 ``pkg/cache/scheduler/resource_node.go`` (``available``, ``accumulateFromChild``), for
    a flat cohort without lending limits: every ClusterQueue lends all its nominal quota to the cohort
    and all its usage counts there, so what a member can take is the cohort's nominal quota (its own
    included) less the cohort's usage (its own and every other member's, borrowed or not), capped by
    its ``borrowingLimit`` above its own nominal quota less its own usage. A queue's own usage is
    counted once: it is part of the cohort's usage, nowhere else. Outside a cohort: nominal less usage.
    ``cohort`` holds the ClusterQueues to consider; those of another cohort (and ``queue`` itself,
    if present) are skipped."""
    key = (flavor, resource)
    nominal = dict((name, quota) for name, quota, _ in queue.flavors).get(flavor, {})
    limits = dict((name, limit) for name, _, limit in queue.flavors).get(flavor, {})
    own_left = nominal.get(resource, 0.0) - queue.usage.get(key, 0.0)
    if queue.cohort is None:
        return own_left
    members = [queue, *(q for q in cohort if q.cohort == queue.cohort and q.name != queue.name)]
    cohort_quota = sum(
        quota.get(resource, 0.0) for q in members for name, quota, _ in q.flavors if name == flavor
    )
    cohort_left = cohort_quota - sum(q.usage.get(key, 0.0) for q in members)
    limit = limits.get(resource)
    return cohort_left if limit is None else min(cohort_left, own_left + limit)


def assign_flavor(
    queue: QueueView, requests: dict[str, float], cohort: Iterable[QueueView] = ()
) -> tuple[str | None, str]:
    """The first flavor with room for every request (nominal, then borrowed from ``cohort``, the other
    ClusterQueues), or why none fits. Kueue v0.19.2 ``pkg/scheduler/flavorassigner/flavorassigner.go``
    (``fitsResourceQuota``): a request fits when it is at most :func:`available`; else the message
    says how much more is needed (the request less what is available)."""
    for name in requests:
        if name not in queue.covered and requests[name] > 0:
            return None, f"resource {name} unavailable in ClusterQueue"
    members = list(cohort)
    reasons: list[str] = []
    for flavor, _, _ in queue.flavors:
        ok = True
        for res, amount in requests.items():
            if amount <= 0 or res not in queue.covered:
                continue
            room = available(queue, members, flavor, res)
            if amount > room:
                ok = False
                reasons.append(
                    f"insufficient unused quota for {res} in flavor {flavor}, {_fmt(amount - room)} more needed"
                )
                break
        if ok:
            return flavor, ""
    return None, "; ".join(reasons) or "no flavor in ClusterQueue"


def choose_victims(
    queue: QueueView, flavor: str, head: Candidate, admitted: list[Candidate]
) -> list[Candidate] | None:
    """``withinClusterQueue: LowerPriority``: the fewest lower-priority workloads to evict (lowest priority,
    then newest admitted first) so the head fits in its flavor's nominal quota; None when none suffice."""
    nominal = next(n for f, n, _ in queue.flavors if f == flavor)
    lower = sorted(
        (c for c in admitted if c.priority < head.priority),
        key=lambda c: (c.priority, -(c.admitted_at or c.created).timestamp()),
    )
    usage = dict(queue.usage)
    chosen: list[Candidate] = []

    def fits() -> bool:
        return all(
            amount <= nominal.get(res, 0.0) - usage.get((flavor, res), 0.0)
            for res, amount in head.requests.items()
            if amount > 0 and res in queue.covered  # what the ClusterQueue does not cover is not its quota
        )

    for victim in lower:
        if fits():
            break
        chosen.append(victim)
        for res, amount in victim.requests.items():
            usage[(flavor, res)] = usage.get((flavor, res), 0.0) - amount
    return chosen if chosen and fits() else None


# ---------------------------------------------------------------------------- waitForPodsReady

# The PodsReady condition's reasons and messages (Kueue v0.19.2 apis/kueue/v1beta2/workload_types.go,
# pkg/controller/jobframework/reconciler.go ``generatePodsReadyCondition``).
WAIT_FOR_START = ("WaitForStart", "Not all pods are ready or succeeded")
WAIT_FOR_RECOVERY = ("WaitForRecovery", "At least one pod has failed, waiting for recovery")
READY_MESSAGE = "All pods reached readiness and the workload is running"


def job_pods_ready(resource: str, job: dict) -> bool:
    """Whether the job's pods count as ready for waitForPodsReady (pure). Kueue v0.19.2: a batch Job's
    ready and succeeded pods reach its pod count, the smaller of parallelism and completions
    (pkg/controller/jobs/job/job_controller.go ``PodsReady``, ``podsCount``); an MPIJob is ready once
    its ``Running`` condition is True (pkg/controller/jobs/mpijob/mpijob_controller.go ``PodsReady``)."""
    status = job.get("status") or {}
    if resource == "mpijobs":
        return condition_true(status.get("conditions"), "Running")
    spec = job.get("spec") or {}
    count = int(spec.get("parallelism", 1) if spec.get("parallelism") is not None else 1)
    if spec.get("completions") is not None:
        count = min(count, int(spec["completions"]))
    uncounted = len(((status.get("uncountedTerminatedPods") or {}).get("succeeded")) or ())
    return int(status.get("ready") or 0) + int(status.get("succeeded") or 0) + uncounted >= count


def pods_ready_condition(admitted: bool, current: dict | None, ready: bool) -> tuple[str, str, str]:
    """The Workload's PodsReady condition as (status, reason, message) (pure), as Kueue v0.19.2's
    ``generatePodsReadyCondition`` writes it whenever waitForPodsReady is on: WaitForStart until the
    admitted job's pods are first ready (and again once it is no longer admitted), then Started;
    WaitForRecovery when they stop being ready, then Recovered."""
    if not admitted:
        return ("False", *WAIT_FOR_START)
    if ready:
        recovering = current is not None and current.get("reason") in ("WaitForRecovery", "Recovered")
        return ("True", "Recovered" if recovering else "Started", READY_MESSAGE)
    if current is not None and (
        current.get("status") == "True" or current.get("reason") == "WaitForRecovery"
    ):
        return ("False", *WAIT_FOR_RECOVERY)
    return ("False", *WAIT_FOR_START)


def pods_ready_deadline(conditions: list[dict], timeout: float, recovery: float | None) -> datetime | None:
    """When an admitted Workload not ready in time is evicted (pure; ``None``: never), as Kueue v0.19.2
    ``pkg/controller/core/workload_controller.go`` ``admittedNotReadyWorkload`` times it: waiting to
    start, ``timeout`` after its admission; waiting to recover, ``recovery`` (0: never) after its pods
    stopped being ready. ``timeout`` and ``recovery`` are in real seconds."""
    current = get_condition(conditions, "PodsReady")
    if current is not None and current.get("status") == "True":
        return None
    if current is None or current.get("reason") in ("WaitForStart", "PodsReady"):
        admitted = parse_time((get_condition(conditions, "Admitted") or {}).get("lastTransitionTime"))
        return None if admitted is None else admitted + timedelta(seconds=timeout)
    if current.get("reason") == "WaitForRecovery" and recovery:
        since = parse_time(current.get("lastTransitionTime"))
        return None if since is None else since + timedelta(seconds=recovery)
    return None


def requeue_backoff(count: int, base: float, cap: float) -> float:
    """Seconds before the ``count``-th requeue after a PodsReady timeout (pure): ``base * 2^(count-1)``
    capped at ``cap`` (Kueue v0.19.2 pkg/workload/workload.go ``UpdateRequeueState``, jitter left out)."""
    return min(base * (2 ** (count - 1)), cap)


# ---------------------------------------------------------------------------- conditions


def _set(
    conditions: list[dict], type_: str, status: str, reason: str, message: str, now: datetime
) -> list[dict]:
    out = [dict(c) for c in conditions]
    for c in out:
        if c.get("type") == type_:
            if c.get("status") != status:
                c["lastTransitionTime"] = rfc3339(now)
            c.update(status=status, reason=reason, message=message)
            return out
    out.append(
        {
            "type": type_,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": rfc3339(now),
        }
    )
    return out


def has_quota(wl: dict) -> bool:
    return condition_true((wl.get("status") or {}).get("conditions"), "QuotaReserved")


def is_admitted(wl: dict) -> bool:
    return condition_true((wl.get("status") or {}).get("conditions"), "Admitted")


def is_finished(wl: dict) -> bool:
    return condition_true((wl.get("status") or {}).get("conditions"), "Finished")


def is_evicted(wl: dict) -> bool:
    return condition_true((wl.get("status") or {}).get("conditions"), "Evicted")


def queue_order(cand: Candidate) -> tuple[int, datetime]:
    """A ClusterQueue's queue order: higher priority first, then older first (Kueue's
    ``pkg/cache/queue/cluster_queue.go`` heap ordering by priority and queue-ordering timestamp)."""
    return (-cand.priority, cand.created)


# ---------------------------------------------------------------------------- the controller


class KueueController(Reconciler):
    """Kueue's job reconciler and scheduler on the simulated cluster."""

    name = "kueue"
    # Kueue's manager, as its manifests deploy it (config/default: namespace kueue-system, the service
    # account kueue-controller-manager).
    identity = rbac.User.service_account("kueue-system", "kueue-controller-manager")

    def __init__(self, store: Any, clock: Clock, recorder: EventRecorder, config: KueueConfig):
        super().__init__()
        self.store = store
        self.clock = clock
        self.recorder = recorder
        self.config = config

    # -- webhook hooks (called by the store inside create/update)
    def admit_create(self, resource: str, obj: dict) -> None:
        if resource in JOB_KINDS and queue_name(obj) is None:
            owner = controller_ref(obj)
            namespace = obj.get("metadata", {}).get("namespace") or "default"
            if (owner is None or owner.get("kind") != "MPIJob") and self._has_default_queue(namespace):
                # A job naming no queue, in a namespace with a LocalQueue "default", gets that queue
                # (pkg/controller/jobframework/defaults.go, ApplyDefaultLocalQueue...; since v0.12).
                obj.setdefault("metadata", {}).setdefault("labels", {})[QUEUE_NAME_LABEL] = (
                    DEFAULT_LOCAL_QUEUE
                )
        default_on_create(resource, obj, self.config)

    def _has_default_queue(self, namespace: str) -> bool:
        try:
            self.store.get("localqueues", DEFAULT_LOCAL_QUEUE, namespace=namespace)
        except ApiError:
            return False
        return True

    def admit_update(self, resource: str, new: dict, old: dict) -> None:
        if resource in JOB_KINDS:
            validate_update(resource, new, old, self.config)

    # -- notifications
    def on_change(self, event_type: str, resource: str, obj: dict) -> None:
        if resource in JOB_KINDS:
            if event_type != "DELETED":
                self.enqueue(f"job:{resource}:{key_of(obj)}")
        elif resource == "pods":
            ns = obj["metadata"].get("namespace")
            ref = controller_ref(obj)
            if ref is not None and ref.get("kind") == "Job":
                self.enqueue(f"job:jobs:{ns}/{ref.get('name')}")
            # A launcher's or a worker's pod names its MPIJob in a label (mpi-operator's job-name label).
            mpi = (obj["metadata"].get("labels") or {}).get(MPI_JOB_NAME_LABEL)
            if mpi:
                self.enqueue(f"job:mpijobs:{ns}/{mpi}")
        elif resource in (
            "workloads",
            "clusterqueues",
            "localqueues",
            "resourceflavors",
            "workloadpriorityclasses",
        ):
            self.enqueue("schedule")
            if resource == "localqueues" and event_type != "DELETED":
                self.enqueue(f"lq:{obj['metadata'].get('namespace')}/{obj['metadata'].get('name')}")
            elif resource == "clusterqueues":
                for lq in self.store.list("localqueues"):
                    if (lq.get("spec") or {}).get("clusterQueue") == obj["metadata"].get("name"):
                        self.enqueue(f"lq:{lq['metadata'].get('namespace')}/{lq['metadata'].get('name')}")
            if resource == "workloads":
                ref = controller_ref(obj)
                if ref is not None:
                    plural = "mpijobs" if ref.get("kind") == "MPIJob" else "jobs"
                    self.enqueue(f"job:{plural}:{obj['metadata'].get('namespace')}/{ref.get('name')}")

    def reconcile(self, key: str) -> None:
        if key == "schedule":
            self._schedule()
            return
        if key.startswith("lq:"):
            namespace, name = split_key(key[3:])
            self._reconcile_local_queue(namespace or "", name)
            return
        _, resource, nskey = key.split(":", 2)
        ns, name = split_key(nskey)
        try:
            job = self.store.get(resource, name, namespace=ns)
        except ApiError:
            return
        if not is_managed(resource, job, self.config):
            return
        self._reconcile_job(resource, job)

    def _reconcile_local_queue(self, namespace: str, name: str) -> None:
        """A LocalQueue's Active condition, as Kueue's LocalQueue reconciler writes it
        (kubernetes-sigs/kueue v0.19.2 pkg/controller/core/localqueue_controller.go Reconcile): False
        (Stopped) with a stopPolicy, False (ClusterQueueDoesNotExist) without its ClusterQueue, else True
        (Ready). A ClusterQueue here is active once it exists (the simulator does not model inactive ones)."""
        try:
            lq = self.store.get("localqueues", name, namespace=namespace)
        except ApiError:
            return
        spec = lq.get("spec") or {}
        if (spec.get("stopPolicy") or "None") != "None":
            wanted = ("False", "Stopped", "LocalQueue is stopped")
        else:
            try:
                self.store.get("clusterqueues", spec.get("clusterQueue") or "")
                wanted = ("True", "Ready", "Can submit new workloads to localQueue")
            except ApiError:
                wanted = ("False", "ClusterQueueDoesNotExist", "Can't submit new workloads to clusterQueue")
        conditions = list((lq.get("status") or {}).get("conditions") or ())
        current = next((c for c in conditions if c.get("type") == "Active"), None)
        if current is not None and (current.get("status"), current.get("reason")) == wanted[:2]:
            return
        status = dict(
            lq.get("status") or {}, conditions=_set(conditions, "Active", *wanted, self.clock.now())
        )
        self.store.update("localqueues", {"metadata": lq["metadata"], "status": status}, subresource="status")

    # -- the job reconciler (reconciler.go ReconcileGenericJob, in its order)
    def _workload_of(self, job: dict) -> dict | None:
        uid = job["metadata"]["uid"]
        for wl in self.store.owned("workloads", uid):
            return wl
        return None

    def _priority(self, job: dict) -> tuple[int, str | None]:
        cls = (job["metadata"].get("labels") or {}).get(PRIORITY_CLASS_LABEL)
        if not cls:
            return 0, None
        try:
            return int(self.store.get("workloadpriorityclasses", cls).get("value", 0)), cls
        except ApiError:
            return 0, None

    def _reconcile_job(self, resource: str, job: dict) -> None:
        now = self.clock.now()
        ns = job["metadata"]["namespace"]
        wl = self._workload_of(job)
        if wl is not None and is_finished(wl):
            return
        finished, ok, message = job_finished(resource, job)
        if finished:
            if wl is not None:
                self._status(
                    wl,
                    _set(self._conds(wl), "Finished", "True", "Succeeded" if ok else "Failed", message, now),
                )
            return
        if wl is None:
            priority, cls = self._priority(job)
            try:
                self.store.create("workloads", new_workload(resource, job, priority, cls), namespace=ns)
            except ApiError as exc:
                if exc.code != 409:
                    raise
            self.recorder.record(
                job,
                EventSpec(
                    NORMAL, "CreatedWorkload", f"Created Workload: {ns}/{workload_name(resource, job)}"
                ),
                KUEUE,
            )
            return
        if gates(wl) != gates(job):
            # The job's gates, copied onto its Workload (jobframework/reconciler.go,
            # PropagateAdmissionGatedByAnnotation): removing the last one lets the Workload be admitted.
            meta = copy.deepcopy(wl["metadata"])
            annotations = meta.setdefault("annotations", {})
            if gates(job):
                annotations[ADMISSION_GATE] = ",".join(gates(job))
            else:
                annotations.pop(ADMISSION_GATE, None)
            self.store.update("workloads", {**wl, "metadata": meta})
            self.enqueue("schedule")
            return
        if self.config.wait_for_pods_ready_seconds is not None:
            # jobframework/reconciler.go step 5: keep the PodsReady condition current; a change is written
            # alone, and the Workload's update brings the job back here.
            conds = self._conds(wl)
            ready_status, ready_reason, ready_message = pods_ready_condition(
                is_admitted(wl), get_condition(conds, "PodsReady"), job_pods_ready(resource, job)
            )
            current = get_condition(conds, "PodsReady") or {}
            if (current.get("status"), current.get("reason")) != (ready_status, ready_reason):
                self._status(wl, _set(conds, "PodsReady", ready_status, ready_reason, ready_message, now))
                return
        if self._pods_ready_timeout(resource, job, wl, now):
            return
        if is_evicted(wl):
            message = (get_condition(self._conds(wl), "Evicted") or {}).get("message", "")
            self._stop(resource, job, message)
            if has_quota(wl) and not self._active_pods(resource, job):
                reason = (get_condition(self._conds(wl), "Evicted") or {}).get("reason", "")
                conds = self._conds(wl)
                conds = _set(
                    conds,
                    "Requeued",
                    "True" if reason in ("Preempted", "PodsReadyTimeout") else "False",
                    reason,
                    message,
                    now,
                )
                conds = _set(conds, "QuotaReserved", "False", "Pending", message, now)
                conds = _set(
                    conds, "Admitted", "False", "NoReservation", "The workload has no reservation", now
                )
                conds = _set(conds, "Evicted", "False", reason, message, now)
                status = dict(wl.get("status") or {}, conditions=conds)
                status.pop("admission", None)
                self.store.update(
                    "workloads", {"metadata": wl["metadata"], "status": status}, subresource="status"
                )
            return
        if is_suspended(resource, job):
            if is_admitted(wl):
                self.store.patch(
                    resource, job["metadata"]["name"], suspend_patch(resource, False), "merge", namespace=ns
                )
                cq = (wl.get("status") or {}).get("admission", {}).get("clusterQueue", "")
                self.recorder.record(
                    job, EventSpec(NORMAL, "Started", f"Admitted by clusterQueue {cq}"), KUEUE
                )
            return
        if not is_admitted(wl):
            self._stop(resource, job, "Not admitted by cluster queue")

    def _conds(self, wl: dict) -> list[dict]:
        return list((wl.get("status") or {}).get("conditions") or ())

    def _status(self, wl: dict, conditions: list[dict], **extra: Any) -> None:
        status = dict(wl.get("status") or {}, conditions=conditions, **extra)
        self.store.update("workloads", {"metadata": wl["metadata"], "status": status}, subresource="status")

    def _stop(self, resource: str, job: dict, message: str) -> None:
        if is_suspended(resource, job):
            return
        self.store.patch(
            resource,
            job["metadata"]["name"],
            suspend_patch(resource, True),
            "merge",
            namespace=job["metadata"]["namespace"],
        )
        self.recorder.record(job, EventSpec(NORMAL, "Stopped", message), KUEUE)

    def _job_pods(self, resource: str, job: dict) -> list[dict]:
        ns = job["metadata"]["namespace"]
        if resource == "jobs":
            return self.store.owned("pods", job["metadata"]["uid"])
        name = job["metadata"]["name"]
        return [
            p
            for p in self.store.list("pods", namespace=ns)
            if (p["metadata"].get("labels") or {}).get(MPI_JOB_NAME_LABEL) == name
        ]

    def _active_pods(self, resource: str, job: dict) -> bool:
        return any(
            (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            for p in self._job_pods(resource, job)
        )

    def _pods_ready_timeout(self, resource: str, job: dict, wl: dict, now: datetime) -> bool:
        """waitForPodsReady: an admitted Workload not ready by :func:`pods_ready_deadline` is evicted
        (``PodsReadyTimeout``) and requeued after :func:`requeue_backoff`."""
        timeout = self.config.wait_for_pods_ready_seconds
        if timeout is None or not is_admitted(wl) or is_evicted(wl) or is_suspended(resource, job):
            return False
        recovery = self.config.recovery_timeout_seconds
        recovery = timeout if recovery is None else recovery
        scale = self.clock.time_scale
        conds = self._conds(wl)
        due = pods_ready_deadline(conds, timeout * scale, recovery * scale)
        if due is None:
            return False
        if now < due:
            self.enqueue_at(f"job:{resource}:{key_of(job)}", due, now)
            return False
        ns, name = wl["metadata"]["namespace"], wl["metadata"]["name"]
        message = f"Exceeded the PodsReady timeout {ns}/{name}"
        count = int(((wl.get("status") or {}).get("requeueState") or {}).get("count", 0)) + 1
        backoff = requeue_backoff(
            count, self.config.requeue_backoff_base_seconds, self.config.requeue_backoff_max_seconds
        )
        requeue_at = now + timedelta(seconds=backoff * scale)
        conds = _set(conds, "Evicted", "True", "PodsReadyTimeout", message, now)
        self._status(wl, conds, requeueState={"count": count, "requeueAt": rfc3339(requeue_at)})
        self.enqueue_at("schedule", requeue_at, now)
        return True

    # -- the scheduler
    def _schedule(self) -> None:
        now = self.clock.now()
        cqs = {cq["metadata"]["name"]: cluster_queue_view(cq) for cq in self.store.list("clusterqueues")}
        lqs = {
            (lq["metadata"]["namespace"], lq["metadata"]["name"]): lq for lq in self.store.list("localqueues")
        }
        pending: dict[str, list[tuple[Candidate, dict]]] = {}
        admitted: dict[str, list[Candidate]] = {}
        for wl in self.store.list("workloads"):
            if is_finished(wl) or not (wl.get("spec") or {}).get("active", True):
                continue
            meta, spec = wl["metadata"], wl.get("spec") or {}
            lq = lqs.get((meta["namespace"], spec.get("queueName", "")))
            cq_name = ((lq or {}).get("spec") or {}).get("clusterQueue", "")
            requests: dict[str, float] = {}
            for ps in spec.get("podSets") or ():
                for res, amount in _pod_requests(ps.get("template") or {}).items():
                    requests[res] = requests.get(res, 0.0) + amount * int(ps.get("count", 1))
            cand = Candidate(
                key=key_of(wl),
                uid=meta["uid"],
                cluster_queue=cq_name,
                priority=int(spec.get("priority", 0)),
                created=parse_time(meta.get("creationTimestamp")) or now,
                requests=requests,
                admitted_at=parse_time(
                    (get_condition(self._conds(wl), "QuotaReserved") or {}).get("lastTransitionTime")
                ),
            )
            if has_quota(wl):
                assignment = ((wl.get("status") or {}).get("admission") or {}).get("podSetAssignments") or ()
                cq = cqs.get(((wl.get("status") or {}).get("admission") or {}).get("clusterQueue", ""))
                if cq is not None:
                    flavor = (
                        next(iter((assignment[0].get("flavors") or {}).values()), None)
                        if assignment
                        else None
                    )
                    for res, amount in requests.items():
                        if flavor is not None:
                            cq.usage[(flavor, res)] = cq.usage.get((flavor, res), 0.0) + amount
                    if not is_evicted(wl):
                        admitted.setdefault(cq.name, []).append(cand)
                continue
            requeue_at = parse_time(((wl.get("status") or {}).get("requeueState") or {}).get("requeueAt"))
            if requeue_at is not None and requeue_at > now:
                self.enqueue_at("schedule", requeue_at, now)
                continue
            if gates(wl):
                # pkg/workload/workload.go (HasAdmissionGate): no quota is reserved while a gate holds it.
                self._pending(wl, "AdmissionGated", f"Admission is gated by: {', '.join(gates(wl))}", now)
                continue
            if lq is None:
                self._pending(
                    wl, "Inadmissible", f"LocalQueue {spec.get('queueName', '')} doesn't exist", now
                )
                continue
            if cq_name not in cqs:
                self._pending(wl, "Inadmissible", f"ClusterQueue {cq_name} doesn't exist", now)
                continue
            pending.setdefault(cq_name, []).append((cand, wl))
        for cq_name, entries in pending.items():
            cq = cqs[cq_name]
            entries.sort(key=lambda e: queue_order(e[0]))
            for cand, wl in entries:
                flavor, why = assign_flavor(cq, cand.requests, cqs.values())
                if flavor is not None:
                    self._reserve(wl, cq, flavor, cand, now)
                    continue
                if cq.preempt_lower_priority:
                    victims = self._preemption(cq, cand, admitted.get(cq_name, []))
                    if victims:
                        for victim in victims:
                            self._evict_for(victim, wl, now)
                            admitted[cq_name].remove(victim)
                        why = f"{why}. Pending the preemption of {len(victims)} workload(s)"
                self._pending(
                    wl, "Pending", f"couldn't assign flavors to pod set {self._first_pod_set(wl)}: {why}", now
                )
                if cq.strategy == "StrictFIFO":
                    break

    def pending_workloads(self, cluster_queue: str) -> list[dict] | None:
        """The ClusterQueue's pending Workloads in queue order, as Kueue's visibility API lists them
        (``pkg/visibility/storage/pending_workloads_cq.go`` over ``ClusterQueue.Snapshot``: the queued
        and the inadmissible ones, sorted); ``None`` for a ClusterQueue Kueue does not know. A Workload
        waiting out its requeue back-off is not in the queue yet, as the scheduler here does not see it."""
        if not any(cq["metadata"]["name"] == cluster_queue for cq in self.store.list("clusterqueues")):
            return None
        now = self.clock.now()
        targets = {
            (lq["metadata"]["namespace"], lq["metadata"]["name"])
            for lq in self.store.list("localqueues")
            if ((lq.get("spec") or {}).get("clusterQueue") or "") == cluster_queue
        }
        entries = []
        for wl in self.store.list("workloads"):
            meta, spec = wl["metadata"], wl.get("spec") or {}
            if is_finished(wl) or has_quota(wl) or not spec.get("active", True):
                continue
            if (meta["namespace"], spec.get("queueName", "")) not in targets:
                continue
            requeue_at = parse_time(((wl.get("status") or {}).get("requeueState") or {}).get("requeueAt"))
            if requeue_at is not None and requeue_at > now:
                continue
            cand = Candidate(
                key=key_of(wl),
                uid=meta["uid"],
                cluster_queue=cluster_queue,
                priority=int(spec.get("priority", 0)),
                created=parse_time(meta.get("creationTimestamp")) or now,
                requests={},
            )
            entries.append((cand, wl))
        entries.sort(key=lambda e: queue_order(e[0]))
        return [wl for _, wl in entries]

    def _preemption(
        self, cq: QueueView, head: Candidate, admitted: list[Candidate]
    ) -> list[Candidate] | None:
        for flavor, _, _ in cq.flavors:
            victims = choose_victims(cq, flavor, head, admitted)
            if victims:
                return victims
        return None

    def _first_pod_set(self, wl: dict) -> str:
        sets = (wl.get("spec") or {}).get("podSets") or ()
        return sets[0].get("name", "main") if sets else "main"

    def _pending(self, wl: dict, reason: str, message: str, now: datetime) -> None:
        current = get_condition(self._conds(wl), "QuotaReserved")
        if current is not None and (current.get("status"), current.get("reason"), current.get("message")) == (
            "False",
            reason,
            message,
        ):
            return
        self._status(wl, _set(self._conds(wl), "QuotaReserved", "False", reason, message, now))

    def _reserve(self, wl: dict, cq: QueueView, flavor: str, cand: Candidate, now: datetime) -> None:
        for res, amount in cand.requests.items():
            cq.usage[(flavor, res)] = cq.usage.get((flavor, res), 0.0) + amount
        assignments = []
        for ps in (wl.get("spec") or {}).get("podSets") or ():
            per_pod = _pod_requests(ps.get("template") or {})
            count = int(ps.get("count", 1))
            assignments.append(
                {
                    "name": ps.get("name", "main"),
                    "flavors": {res: flavor for res in per_pod if res in cq.covered},
                    "resourceUsage": {
                        res: _fmt(v * count) for res, v in per_pod.items() if res in cq.covered
                    },
                    "count": count,
                }
            )
        conds = _set(
            self._conds(wl),
            "QuotaReserved",
            "True",
            "QuotaReserved",
            f"Quota reserved in ClusterQueue {cq.name}",
            now,
        )
        conds = _set(conds, "Admitted", "True", "Admitted", "The workload is admitted", now)
        conds = [c for c in conds if c.get("type") != "Requeued" or c.get("status") == "True"]
        self._status(wl, conds, admission={"clusterQueue": cq.name, "podSetAssignments": assignments})
        self.recorder.record(
            wl,
            EventSpec(NORMAL, "QuotaReserved", f"Quota reserved in ClusterQueue {cq.name}"),
            KUEUE,
            kind="Workload",
        )
        self.recorder.record(
            wl, EventSpec(NORMAL, "Admitted", f"Admitted by ClusterQueue {cq.name}"), KUEUE, kind="Workload"
        )

    def _evict_for(self, victim: Candidate, preemptor: dict, now: datetime) -> None:
        ns, name = split_key(victim.key)
        try:
            wl = self.store.get("workloads", name, namespace=ns)
        except ApiError:
            return
        job_uid = (preemptor["metadata"].get("labels") or {}).get("kueue.x-k8s.io/job-uid", "UNKNOWN")
        message = (
            f"Preempted to accommodate a workload (UID: {preemptor['metadata']['uid']}, JobUID: {job_uid}) "
            f"due to prioritization in the ClusterQueue"
        )
        conds = _set(self._conds(wl), "Evicted", "True", "Preempted", message, now)
        conds = _set(conds, "Preempted", "True", "InClusterQueue", message, now)
        self._status(wl, conds)
        self.recorder.record(wl, EventSpec(NORMAL, "Preempted", message), KUEUE, kind="Workload")
