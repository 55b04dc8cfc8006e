"""Kueue as the queueing engine: which jobs Kueue owns, and what its Workload says about a queued job.

Pure rules over plain dicts: no I/O, no Airflow. The shell (``queueing/engines/pool.py``) watches the Workloads of
a namespace and asks these functions.

Where a job is Kueue's, the product never admits, suspends or requeues it: Kueue's job reconciler
(kubernetes-sigs/kueue v0.19.2 ``pkg/controller/jobframework/reconciler.go``, step 8) suspends again any
managed job that runs without an admitted Workload ("Not admitted by cluster queue"), so a second
admission controller on ``spec.suspend`` can only fight it -- and, when it wins a race, run a job whose
GPUs Kueue never counted.

The product's states for a Kueue-managed job waiting in its queue, with Kueue's words (the jobq
document's vocabulary, where Pending means "quota reserved"):

=====================================  ===========================  ==========================
Workload (v1beta2 conditions)          jobq / Kueue                 product (state, reason)
=====================================  ===========================  ==========================
no Workload yet                        Submitted                    QUEUED, Pending
QuotaReserved=False, reason Pending    Submitted (waiting)          QUEUED, Pending
QuotaReserved=False, Inadmissible      Inadmissible                 QUEUED, Inadmissible
QuotaReserved=True, Admitted=False     Pending (quota reserved)     SCHEDULING, QuotaReserved
Admitted=True (job not yet released)   Admitted                     SCHEDULING, QuotaReserved
Evicted=True / Requeued                Evicted, back to Submitted   QUEUED, Requeued
Finished=True                          Succeeded / Failed           read from the job itself
=====================================  ===========================  ==========================
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_jobs_plugin.cluster.objects import Meta
from airflow_jobs_plugin.jobs import kueue_job, labels
from airflow_jobs_plugin.jobs.kueue_job import manages as manages
from airflow_jobs_plugin.jobs.kueue_job import queue_name as queue_name

# Kueue's keys and names are facts of its API, declared in jobs/labels.py (building and comparing a job
# needs them, and no engine); what they mean for admission is this module's.
QUEUE_NAME_LABEL = labels.KUEUE_QUEUE_NAME
# Kueue labels each Workload with its job's UID (``pkg/controller/constants``, JobUIDLabel).
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
PRIORITY_CLASS_LABEL = labels.KUEUE_PRIORITY_CLASS
GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"

# The QueueStatus reasons the lifecycle reads (lifecycle.snapshot._suspended).
PENDING, INADMISSIBLE, REQUEUED, RESERVED = "Pending", "Inadmissible", "Requeued", "Admitted"


# Kueue's admission gate (labels.KUEUE_ADMISSION_GATE). The quota pool gates every job it admits, so that
# a job Kueue takes at creation -- through a LocalQueue named ``default`` in its namespace, or a Kueue
# that manages every job -- still waits for the pool's per-user limits; the pool's admission of such a
# job is the removal of its gate.
ADMISSION_GATE_ANNOTATION = labels.KUEUE_ADMISSION_GATE
POOL_GATE = kueue_job.POOL_GATE
MIN_GATED_VERSION = "v0.19"

# Kueue's default LocalQueue name (labels.KUEUE_DEFAULT_LOCAL_QUEUE).
DEFAULT_LOCAL_QUEUE = labels.KUEUE_DEFAULT_LOCAL_QUEUE


def choose_queue(task_queue: str | None, deployment_queue: str, kueue_manages_all: bool) -> str | None:
    """The LocalQueue a job is submitted to: the task's, else the deployment's default, else -- where the
    cluster's Kueue manages every job (``manageJobsWithoutQueueName``) -- Kueue's default LocalQueue, the
    one its own webhook would give the job; ``None``: the product's pool admits it."""
    if task_queue:
        return task_queue
    if deployment_queue:
        return deployment_queue
    return DEFAULT_LOCAL_QUEUE if kueue_manages_all else None


# Where a deployment of Kueue keeps its manager configuration: config/default's ConfigMap
# ``kueue-manager-config`` in ``kueue-system`` (namePrefix ``kueue-``), key ``controller_manager_config.yaml``;
# the Helm chart uses the same names.
CONFIG_NAMESPACE = "kueue-system"
CONFIG_MAP = "kueue-manager-config"
CONFIG_KEY = "controller_manager_config.yaml"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def takes_unlabelled_jobs(
    configuration: Mapping[str, Any] | None, namespace_labels: Mapping[str, str]
) -> bool:
    """Whether this Kueue configuration takes a job that names no LocalQueue in a namespace with these
    labels: ``manageJobsWithoutQueueName`` on and the namespace matched by ``managedJobsNamespaceSelector``
    (kubernetes-sigs/kueue v0.19.2 ``apis/config/v1beta2/defaults.go``: by default every namespace but
    ``kube-system`` and Kueue's own)."""
    if not configuration or configuration.get("manageJobsWithoutQueueName") is not True:
        return False
    own = str(configuration.get("namespace") or CONFIG_NAMESPACE)
    default_selector = {
        "matchExpressions": [
            {"key": NAMESPACE_NAME_LABEL, "operator": "NotIn", "values": ["kube-system", own]}
        ]
    }
    selector = configuration.get("managedJobsNamespaceSelector") or default_selector
    return selector_matches(selector, namespace_labels)


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A Kubernetes LabelSelector (matchLabels, matchExpressions) against a label set, as
    k8s.io/apimachinery v0.36 ``pkg/apis/meta/v1/helpers.go`` (LabelSelectorAsSelector) reads it; an
    operator it does not know matches nothing (it refuses the selector)."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or ():
        key, op, values = expr.get("key"), expr.get("operator"), set(expr.get("values") or ())
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True


def gates(obj: Mapping[str, Any]) -> tuple[str, ...]:
    """The admission gates an object (a job or its Workload) carries, in order."""
    value = Meta(obj).annotations.get(ADMISSION_GATE_ANNOTATION) or ""
    return tuple(g.strip() for g in value.split(",") if g.strip())


def gated_by_pool(job: Mapping[str, Any]) -> bool:
    """Whether the quota pool still holds ``job`` back from Kueue (its gate is on the job)."""
    return POOL_GATE in gates(job)


def gate_annotation_without_pool(job: Mapping[str, Any]) -> str | None:
    """The gate annotation's value once the pool's gate is removed (``None``: remove the annotation)."""
    rest = [g for g in gates(job) if g != POOL_GATE]
    return ",".join(rest) if rest else None


def ignores_gate(job: Mapping[str, Any], workload: Mapping[str, Any] | None) -> bool:
    """Kueue made ``job``'s Workload without the pool's gate: this Kueue does not honour admission gates
    (before v0.19, or its AdmissionGatedBy feature off), so it may admit the job before the pool does.
    Kueue copies the gate onto the Workload only when it honours it
    (``jobframework/reconciler.go``, ``PropagateAdmissionGatedByAnnotation``)."""
    return workload is not None and gated_by_pool(job) and POOL_GATE not in gates(workload)


def deactivation(workload: Mapping[str, Any] | None) -> str | None:
    """Why Kueue will never admit ``workload`` again: it is deactivated (``spec.active: false``), by an
    admin or by Kueue itself past its requeuing limit (v0.19.2 ``pkg/workload``: the Evicted condition's
    reason ``Deactivated`` / ``DeactivatedDueTo...``); ``None`` while it may still run."""
    if workload is None or (workload.get("spec") or {}).get("active", True) is not False:
        return None
    view = workload_view(workload)
    evicted = view.condition("Evicted")
    detail = evicted.get("message") or evicted.get("reason") or ""
    base = f"Kueue deactivated its Workload {view.name} (spec.active: false)"
    return f"{base}: {detail}" if detail else f"{base}; it will never be admitted again"


def manages_every_job_status(workload: Mapping[str, Any] | None) -> KueueStatus:
    """Why a job that names no LocalQueue waits: Kueue took it anyway (``manageJobsWithoutQueueName``)."""
    made = f" and made Workload {workload_view(workload).name} for this one" if workload else ""
    return KueueStatus(
        INADMISSIBLE,
        f"Kueue manages every job of this namespace (manageJobsWithoutQueueName){made}, so the product "
        "leaves its admission to Kueue; the job names no "
        "LocalQueue, so Kueue cannot admit it: name one (JobOperator kueue_queue=..., or [airflow_jobs] "
        "kueue_queue), or set [airflow_jobs] kueue_manages_all_jobs = True to use Kueue's LocalQueue "
        f"{DEFAULT_LOCAL_QUEUE!r}",
    )


@dataclass(frozen=True)
class WorkloadView:
    """What the product reads of a Workload."""

    name: str
    queue: str
    cluster_queue: str | None
    conditions: Mapping[str, Mapping[str, Any]]  # by type

    def true(self, type_: str) -> bool:
        return (self.conditions.get(type_) or {}).get("status") == "True"

    def condition(self, type_: str) -> Mapping[str, Any]:
        return self.conditions.get(type_) or {}


def workload_view(workload: Mapping[str, Any]) -> WorkloadView:
    status = workload.get("status") or {}
    return WorkloadView(
        name=Meta(workload).name,
        queue=(workload.get("spec") or {}).get("queueName", ""),
        cluster_queue=(status.get("admission") or {}).get("clusterQueue"),
        conditions={c.get("type", ""): c for c in status.get("conditions") or ()},
    )


@dataclass(frozen=True)
class KueueStatus:
    """A queued job's place in Kueue, as the lifecycle's QueueStatus takes it."""

    reason: str  # PENDING / INADMISSIBLE / REQUEUED / RESERVED
    message: str
    position: int | None = None  # 1-based, in its ClusterQueue, where the visibility API told it
    evicted_for: str = ""  # the Evicted condition's reason while REQUEUED


@dataclass(frozen=True)
class PendingPosition:
    """Where a pending Workload stands, as Kueue's visibility API says (its positions count from 0)."""

    cluster_queue: int
    local_queue: int


def pending_positions(summary: Mapping[str, Any]) -> dict[str, PendingPosition]:
    """The positions in a ``PendingWorkloadsSummary`` (kubernetes-sigs/kueue v0.19.2
    ``apis/visibility/v1beta2/types.go``), by Workload name; entries without both positions are skipped."""
    out: dict[str, PendingPosition] = {}
    for item in summary.get("items") or ():
        name = Meta(item).name
        in_cq, in_lq = item.get("positionInClusterQueue"), item.get("positionInLocalQueue")
        if name and isinstance(in_cq, int) and isinstance(in_lq, int):
            out[name] = PendingPosition(in_cq, in_lq)
    return out


def waits_in_queue(status: KueueStatus) -> bool:
    """Whether the job waits in Kueue's queue, where the visibility API can tell its position."""
    return status.reason in (PENDING, INADMISSIBLE, REQUEUED)


def workload_name(workload: Mapping[str, Any] | None) -> str | None:
    return Meta(workload).name or None


def with_position(status: KueueStatus, position: PendingPosition | None, queue: str) -> KueueStatus:
    """``status`` with the Workload's position: the job's queue position is its place in the ClusterQueue
    (the order Kueue admits in, as the pool's position is in its group); the message adds its place
    among its own LocalQueue's."""
    if position is None or not waits_in_queue(status):
        return status
    place = f"{_ordinal(position.local_queue + 1)} in LocalQueue {queue}"
    plain = f" (LocalQueue {queue})"
    if status.message.endswith(plain):
        message = f"{status.message[: -len(plain)]} ({place})"
    else:
        message = f"{status.message}; {place}"
    return KueueStatus(status.reason, message, position.cluster_queue + 1, status.evicted_for)


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def no_api_status(job: Mapping[str, Any]) -> KueueStatus:
    """Why a job for a LocalQueue waits on a cluster that serves no Kueue API."""
    return KueueStatus(
        INADMISSIBLE,
        f"the job names Kueue LocalQueue {queue_name(job) or '(default)'} but the cluster serves no Kueue "
        f"API {GROUP}/{VERSION} (Kueue v0.15 or later; an older Kueue serves only v1beta1): install or "
        "upgrade Kueue, or submit without a queue",
    )


def by_job_uid(workloads: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Workloads by the UID of the job each was made for (Kueue's job-uid label)."""
    out: dict[str, Mapping[str, Any]] = {}
    for workload in workloads:
        uid = Meta(workload).labels.get(JOB_UID_LABEL)
        if uid:
            out[uid] = workload
    return out


def cluster_queue(workload: Mapping[str, Any] | None) -> str | None:
    """The ClusterQueue that admitted (or reserved quota for) a Workload."""
    return ((workload or {}).get("status") or {}).get("admission", {}).get("clusterQueue") or None


def queue_status(job: Mapping[str, Any], workload: Mapping[str, Any] | None) -> KueueStatus:
    """Why a suspended, Kueue-managed job waits, in Kueue's own words."""
    queue = queue_name(job) or "(none)"
    if workload is None:
        return KueueStatus(PENDING, f"Kueue: submitted to LocalQueue {queue}; no Workload yet")
    view = workload_view(workload)
    # The Workload names its LocalQueue; one read without its job, or made before its queue was set,
    # may not: the job's label then, never an empty name.
    queue = view.queue or queue
    if view.true("Evicted") or (view.true("Requeued") and not view.true("QuotaReserved")):
        evicted = view.condition("Evicted") if view.true("Evicted") else view.condition("Requeued")
        why = evicted.get("reason") or "Evicted"
        text = evicted.get("message") or why
        return KueueStatus(
            REQUEUED,
            f"Kueue: evicted ({why}): {text}; waiting in LocalQueue {queue}",
            evicted_for=why,
        )
    if view.true("QuotaReserved"):
        where = view.cluster_queue or "its ClusterQueue"
        if view.true("Admitted"):
            return KueueStatus(RESERVED, f"Kueue: admitted by ClusterQueue {where}")
        return KueueStatus(
            RESERVED, f"Kueue: quota reserved in ClusterQueue {where}; admission checks pending"
        )
    reserved = view.condition("QuotaReserved")
    message = reserved.get("message") or "waiting for Kueue to reserve quota"
    if reserved.get("reason") == "Inadmissible":
        return KueueStatus(INADMISSIBLE, f"Kueue: {message}")
    return KueueStatus(PENDING, f"Kueue: {message} (LocalQueue {queue})")


def handoff_queue(job: Mapping[str, Any], requested: str | None) -> str:
    """The LocalQueue a gated job is handed to: the one asked for (``requested``: the task's, as the job
    carries it), else the one Kueue gave it at creation (its ``default`` LocalQueue), else Kueue's
    ``default`` (a Kueue that manages every job took it without one)."""
    return requested or queue_name(job) or DEFAULT_LOCAL_QUEUE


def local_queue_problem(local_queue: Mapping[str, Any] | None, name: str, namespace: str) -> str | None:
    """Why a job may not be handed to LocalQueue ``name`` now (``None``: it may): it does not exist, or
    Kueue does not hold it active (its ClusterQueue is missing or stopped: kubernetes-sigs/kueue v0.19.2
    ``apis/kueue/v1beta2/localqueue_types.go``, condition ``Active``). Handed over anyway, the job would
    wait in Kueue for ever while its user's booking in the pool kept her next jobs out."""
    if local_queue is None:
        return (
            f"Kueue LocalQueue {name!r} does not exist in namespace {namespace!r}: the job stays in the "
            "product's queue, charged to no one, until a platform admin creates it (or the job names "
            "another queue)"
        )
    for cond in (local_queue.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Active":
            if cond.get("status") == "True":
                return None
            why = cond.get("reason") or "Inactive"
            text = cond.get("message") or ""
            return (
                f"Kueue LocalQueue {namespace}/{name} is not active ({why}{': ' + text if text else ''}): the job "
                "stays in the product's queue, charged to no one, until Kueue activates it"
            )
    return (
        f"Kueue has not activated LocalQueue {namespace}/{name} yet (no Active condition): the job stays in "
        "the product's queue, charged to no one, until it does"
    )
