"""The simulated batch/v1 Job controller, following Kubernetes 1.32.

``plan_job`` is the pure decision: from a Job, its pods, the time and the controller's memory of the Job
it returns the new Job status, the pods to create / delete / release (the ``job-tracking`` finalizer) and
the events. It implements parallelism/completions (NonIndexed and Indexed), suspend/resume, backoffLimit with the pod
re-creation back-off, activeDeadlineSeconds, podFailurePolicy, the 1.32 terminal-condition sequence
(FailureTarget then Failed, SuccessCriteriaMet then Complete, once no pod is left terminating) and
ttlSecondsAfterFinished. ``JobController`` applies the plan to the store.
"""

from __future__ import annotations

import copy
import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from airflow_jobs_sim.clock import Clock, parse_time, rfc3339
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
from airflow_jobs_sim.events import JOB_CONTROLLER, NORMAL, WARNING, EventRecorder, EventSpec

log = logging.getLogger(__name__)

JOB_TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
LEGACY_JOB_NAME_LABEL = "job-name"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
LEGACY_CONTROLLER_UID_LABEL = "controller-uid"

# Indexed Jobs (pkg/controller/job/indexed_job_utils.go and job_controller.go manageJob, 1.32): every pod
# of index i carries it as this annotation and label (PodIndexLabel, on by default since 1.28, GA in
# 1.32), gets hostname <job>-<i>, the name prefix <job>-<i>- and JOB_COMPLETION_INDEX read from the label.
COMPLETION_INDEX_KEY = "batch.kubernetes.io/job-completion-index"
COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"
POD_BACKOFF_BASE = 10.0
POD_BACKOFF_MAX = 360.0

BACKOFF_LIMIT_EXCEEDED = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
DEADLINE_EXCEEDED = ("DeadlineExceeded", "Job was active longer than specified deadline")
COMPLETIONS_REACHED = ("CompletionsReached", "Reached expected number of succeeded pods")
SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def random_suffix(rng: random.Random | None = None, n: int = 5) -> str:
    """The 5-character suffix the API server uses for generateName."""
    pick = rng or random
    return "".join(pick.choice(SUFFIX_ALPHABET) for _ in range(n))


@dataclass
class JobMemory:
    """What the controller remembers about a Job between syncs (precise times; the API has seconds)."""

    started_at: datetime | None = None
    last_failure_at: datetime | None = None
    finished_at: datetime | None = None
    # Pods this controller deleted itself (suspend, terminal condition): not failures of the workload.
    deleted: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class CreatePod:
    pod: dict


@dataclass(frozen=True)
class DeletePod:
    name: str


@dataclass(frozen=True)
class ReleasePod:
    """Remove the job-tracking finalizer: the pod was counted."""

    name: str


@dataclass(frozen=True)
class DeleteJob:
    """ttlSecondsAfterFinished expired: delete the Job with Background propagation."""


Action = CreatePod | DeletePod | ReleasePod | DeleteJob


@dataclass
class JobPlan:
    status: dict
    actions: list[Action] = field(default_factory=list)
    events: list[EventSpec] = field(default_factory=list)
    memory: JobMemory = field(default_factory=JobMemory)
    wake_at: datetime | None = None


def pod_backoff(failures: int) -> float:
    """Simulated seconds before a replacement pod after ``failures`` failures: 10 s doubling, max 6 min."""
    if failures <= 0:
        return 0.0
    return min(POD_BACKOFF_BASE * 2 ** (failures - 1), POD_BACKOFF_MAX)


def job_finished(job: dict) -> bool:
    """Whether the Job has its Complete or Failed condition."""
    conditions = job.get("status", {}).get("conditions")
    return condition_true(conditions, "Complete") or condition_true(conditions, "Failed")


def job_pods(job: dict, pods: list[dict]) -> list[dict]:
    """The pods controlled by ``job``."""
    uid = job["metadata"].get("uid")
    return [p for p in pods if owned_by(p, uid)]


def _exit_codes(pod: dict) -> list[tuple[str, int]]:
    status = pod.get("status", {})
    out = []
    for c in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        term = (c.get("state") or {}).get("terminated")
        if term is not None:
            out.append((c["name"], int(term.get("exitCode", 0))))
    return out


def match_pod_failure_policy(job: dict, pod: dict) -> tuple[str, str] | None:
    """The action of the first podFailurePolicy rule matching a failed pod, with the condition message."""
    policy = job.get("spec", {}).get("podFailurePolicy")
    if not policy:
        return None
    meta = pod["metadata"]
    pod_ref = f"{meta.get('namespace')}/{meta['name']}"
    for index, rule in enumerate(policy.get("rules") or []):
        action = rule.get("action")
        on_codes = rule.get("onExitCodes")
        if on_codes:
            values = set(on_codes.get("values") or [])
            wanted = on_codes.get("containerName")
            for name, code in _exit_codes(pod):
                if code == 0 or (wanted and wanted != name):
                    continue
                hit = code in values if on_codes.get("operator") == "In" else code not in values
                if hit:
                    return action, (
                        f"Container {name} for pod {pod_ref} failed with exit code {code} matching {action} rule at index {index}"
                    )
        for pattern in rule.get("onPodConditions") or []:
            cond = get_condition(pod.get("status", {}).get("conditions"), pattern.get("type"))
            if cond is not None and cond.get("status") == pattern.get("status", "True"):
                return (
                    action,
                    f"Pod {pod_ref} has condition {pattern.get('type')} matching {action} rule at index {index}",
                )
    return None


def pod_counts_failed(job: dict, pod: dict) -> bool:
    """Whether a pod counts as failed (1.32: a pod being deleted counts unless only Failed pods are replaced)."""
    phase = pod.get("status", {}).get("phase")
    if phase == "Failed":
        return True
    if phase == "Succeeded":
        return False
    spec = job.get("spec", {})
    if spec.get("podFailurePolicy") or spec.get("podReplacementPolicy") == "Failed":
        return False
    return bool(pod["metadata"].get("deletionTimestamp"))


def _restarts(pods: list[dict]) -> int:
    total = 0
    for pod in pods:
        if pod.get("status", {}).get("phase") in ("Pending", "Running"):
            status = pod.get("status", {})
            for c in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
                total += int(c.get("restartCount", 0))
    return total


def completion_index(pod: dict) -> int | None:
    """The index of a pod of an Indexed Job (getCompletionIndex: the annotation, a whole number >= 0)."""
    value = (pod["metadata"].get("annotations") or {}).get(COMPLETION_INDEX_KEY)
    try:
        index = int(value) if value is not None else -1
    except ValueError:
        return None
    return index if index >= 0 else None


def parse_indexes(text: str | None) -> set[int]:
    """``status.completedIndexes`` ("1,3-5") as a set."""
    out: set[int] = set()
    for part in (text or "").split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        out.update(range(int(first), int(last or first) + 1))
    return out


def format_indexes(indexes: set[int]) -> str:
    """The compressed interval form the Job controller writes ("1,3-5")."""
    ordered = sorted(indexes)
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def new_pod(job: dict, name: str, index: int | None = None) -> dict:
    """The pod the Job controller creates from the Job's template (of completion ``index`` if Indexed)."""
    meta = job["metadata"]
    template = copy.deepcopy(job.get("spec", {}).get("template") or {})
    tmeta = template.get("metadata") or {}
    labels = dict(tmeta.get("labels") or {})
    if index is not None:
        labels[COMPLETION_INDEX_KEY] = str(index)
        tmeta = {
            **tmeta,
            "annotations": {**(tmeta.get("annotations") or {}), COMPLETION_INDEX_KEY: str(index)},
        }
        pod_spec = template.setdefault("spec", {})
        pod_spec["hostname"] = f"{meta['name']}-{index}"
        for container in (pod_spec.get("initContainers") or []) + (pod_spec.get("containers") or []):
            env = container.setdefault("env", [])
            if not any(e.get("name") == COMPLETION_INDEX_ENV for e in env):
                env.append(
                    {
                        "name": COMPLETION_INDEX_ENV,
                        "valueFrom": {
                            "fieldRef": {"fieldPath": f"metadata.labels['{COMPLETION_INDEX_KEY}']"}
                        },
                    }
                )
    labels.update(
        {
            CONTROLLER_UID_LABEL: meta["uid"],
            JOB_NAME_LABEL: meta["name"],
            LEGACY_CONTROLLER_UID_LABEL: meta["uid"],
            LEGACY_JOB_NAME_LABEL: meta["name"],
        }
    )
    pod_meta: dict[str, Any] = {
        "name": name,
        "generateName": f"{meta['name']}-" if index is None else f"{meta['name']}-{index}-",
        "namespace": meta.get("namespace"),
        "labels": labels,
        "ownerReferences": [owner_reference(job, "batch/v1", "Job")],
        # The template's own finalizers come along, as the real controller copies them.
        "finalizers": [
            *(f for f in tmeta.get("finalizers") or [] if f != JOB_TRACKING_FINALIZER),
            JOB_TRACKING_FINALIZER,
        ],
    }
    if tmeta.get("annotations"):
        pod_meta["annotations"] = dict(tmeta["annotations"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": template.get("spec") or {}}


def plan_job(
    job: dict,
    pods: list[dict],
    now: datetime,
    scale: float = 1.0,
    memory: JobMemory | None = None,
    suffix: Callable[[], str] = random_suffix,
) -> JobPlan:
    """One sync of ``job`` given its ``pods`` (pure; ``memory`` is copied, the new one is in the plan)."""
    # copy.deepcopy's result without its cost: the times are immutable, only the set needs a copy.
    memory = replace(memory, deleted=set(memory.deleted)) if memory is not None else JobMemory()
    before = replace(memory, deleted=set(memory.deleted))  # the memory as this sync found it
    spec = job.get("spec", {})
    meta = job["metadata"]
    status = copy.deepcopy(job.get("status") or {})
    plan = JobPlan(status=status, memory=memory)
    # A Job being deleted still counts its pods and lets every one of them go (a Foreground deletion
    # waits for the pods, which must not wait for this finalizer); it only stops managing them.
    deleting = bool(meta.get("deletionTimestamp"))
    conditions = status.get("conditions") or []
    pods = job_pods(job, pods)

    indexed = spec.get("completionMode") == "Indexed"
    completed = parse_indexes(status.get("completedIndexes")) if indexed else set()
    # Count finished pods still holding the tracking finalizer, then release them.
    new_succeeded = new_failed = 0
    uncounted: dict[str, list[str]] = {"succeeded": [], "failed": []}
    fail_job: str | None = None
    for pod in pods:
        if JOB_TRACKING_FINALIZER not in (pod["metadata"].get("finalizers") or []):
            continue
        uid = pod["metadata"].get("uid")
        if pod.get("status", {}).get("phase") == "Succeeded":
            if uid not in memory.deleted:
                index = completion_index(pod) if indexed else None
                if index is not None and index not in completed:
                    completed.add(index)
                    new_succeeded += 1
                    uncounted["succeeded"].append(uid)
                elif not indexed:
                    new_succeeded += 1
                    uncounted["succeeded"].append(uid)
        elif pod_counts_failed(job, pod):
            matched = (
                match_pod_failure_policy(job, pod) if pod.get("status", {}).get("phase") == "Failed" else None
            )
            action = matched[0] if matched else "Count"
            if matched and action == "FailJob" and fail_job is None:
                fail_job = matched[1]
            if uid not in memory.deleted and action != "Ignore":
                new_failed += 1
                uncounted["failed"].append(uid)
        elif not deleting:
            continue
        plan.actions.append(ReleasePod(pod["metadata"]["name"]))
        memory.deleted.discard(uid)
    succeeded = int(status.get("succeeded") or 0) + new_succeeded
    failed = int(status.get("failed") or 0) + new_failed
    if indexed:
        # An Indexed Job's succeeded count is its number of completed indexes.
        succeeded = len(completed)
        status["completedIndexes"] = format_indexes(completed)
    if new_failed:
        memory.last_failure_at = now

    active = [p for p in pods if not pod_is_terminal(p) and not p["metadata"].get("deletionTimestamp")]
    terminating = [p for p in pods if p["metadata"].get("deletionTimestamp") and not pod_is_terminal(p)]
    finished = condition_true(conditions, "Complete") or condition_true(conditions, "Failed")
    suspended = bool(spec.get("suspend"))

    if finished:
        _apply_ttl(job, plan, now, scale)
        _set_counts(status, active=[], pods=pods, succeeded=succeeded, failed=failed)
        return plan

    if not status.get("startTime") and not suspended:
        status["startTime"] = rfc3339(now)
        memory.started_at = now
    started = memory.started_at or parse_time(status.get("startTime"))

    failure = get_condition(conditions, "FailureTarget")
    success = get_condition(conditions, "SuccessCriteriaMet")
    completions = spec.get("completions")
    targeted_now = False
    if failure is None and success is None:
        limit = int(spec.get("backoffLimit", 6))
        on_failure = spec.get("template", {}).get("spec", {}).get("restartPolicy") == "OnFailure"
        restarts = _restarts(active)
        deadline = spec.get("activeDeadlineSeconds")
        target: tuple[str, str] | None = None
        if fail_job is not None:
            target = ("PodFailurePolicy", fail_job)
        elif failed > limit or (on_failure and restarts > 0 and restarts >= max(limit, 1)):
            target = BACKOFF_LIMIT_EXCEEDED
        elif deadline is not None and not suspended and started is not None:
            due = started + timedelta(seconds=float(deadline) * scale)
            if now >= due:
                target = DEADLINE_EXCEEDED
            else:
                plan.wake_at = due
        if target is not None:
            conditions = set_condition(conditions, "FailureTarget", "True", now, *target, style="job")
            plan.events.append(EventSpec(WARNING, target[0], target[1]))
            failure = get_condition(conditions, "FailureTarget")
            plan.wake_at = None
            targeted_now = True
        elif (completions is not None and succeeded >= int(completions)) or (
            completions is None and succeeded > 0 and not active
        ):
            conditions = set_condition(
                conditions, "SuccessCriteriaMet", "True", now, *COMPLETIONS_REACHED, style="job"
            )
            success = get_condition(conditions, "SuccessCriteriaMet")
            targeted_now = True

    if targeted_now:
        # The sync that finds the Job's end writes only the interim condition (FailureTarget or
        # SuccessCriteriaMet), the newly ended pods in uncountedTerminatedPods and the deletions of the
        # rest; the next sync removes the finalizers, counts the pods and, once none is left running,
        # writes Failed or Complete (pkg/controller/job/job_controller.go trackJobStatusAndRemoveFinalizers
        # and flushUncountedAndRemoveFinalizers, kubernetes v1.36.3): a watcher sees the interim condition
        # on its own first, with succeeded and failed not yet counted.
        plan.memory = memory = replace(before, started_at=memory.started_at)
        plan.actions = [a for a in plan.actions if not isinstance(a, ReleasePod)]
        for pod in active:
            _delete(plan, pod, memory, counted=failure is not None)
        status["conditions"] = conditions
        _set_counts(
            status,
            active=[],
            pods=pods,
            succeeded=succeeded - new_succeeded,
            failed=failed - new_failed,
            deleting=active,
        )
        status["uncountedTerminatedPods"] = {k: v for k, v in uncounted.items() if v}
        if indexed:
            status["completedIndexes"] = (job.get("status") or {}).get("completedIndexes", "")
        plan.wake_at = now
        return plan

    if failure is not None or success is not None:
        for pod in active:
            _delete(plan, pod, memory, counted=failure is not None)
        if not any(not pod_is_terminal(p) for p in pods):
            if failure is not None:
                conditions = set_condition(
                    conditions,
                    "Failed",
                    "True",
                    now,
                    failure.get("reason"),
                    failure.get("message"),
                    style="job",
                )
            else:
                conditions = set_condition(
                    conditions, "Complete", "True", now, *COMPLETIONS_REACHED, style="job"
                )
                status["completionTime"] = rfc3339(now)
                plan.events.append(EventSpec(NORMAL, "Completed", "Job completed"))
            memory.finished_at = now
        status["conditions"] = conditions
        _set_counts(status, active=[], pods=pods, succeeded=succeeded, failed=failed, deleting=active)
        if job_finished({"status": status}):
            _apply_ttl({**job, "status": status}, plan, now, scale)
        return plan

    if suspended:
        for pod in active if not deleting else ():
            _delete(plan, pod, memory)
        if not condition_true(conditions, "Suspended"):
            conditions = set_condition(
                conditions, "Suspended", "True", now, "JobSuspended", "Job suspended", style="job"
            )
            plan.events.append(EventSpec(NORMAL, "Suspended", "Job suspended"))
        if not active and not terminating:
            # A suspended Job with no pods left gets its startTime cleared, so that a resume starts the
            # activeDeadlineSeconds clock again.
            status.pop("startTime", None)
            memory.started_at = None
        status["conditions"] = conditions
        _set_counts(status, active=[], pods=pods, succeeded=succeeded, failed=failed, deleting=active)
        return plan

    if condition_true(conditions, "Suspended"):
        conditions = set_condition(
            conditions, "Suspended", "False", now, "JobResumed", "Job resumed", style="job"
        )
        plan.events.append(EventSpec(NORMAL, "Resumed", "Job resumed"))
        status["startTime"] = rfc3339(now)
        memory.started_at = now
        deadline = spec.get("activeDeadlineSeconds")
        if deadline is not None:
            plan.wake_at = now + timedelta(seconds=float(deadline) * scale)

    parallelism = int(spec.get("parallelism", 1))
    wanted = parallelism if completions is None else max(0, min(parallelism, int(completions) - succeeded))
    replacing = len(active) + (len(terminating) if spec.get("podReplacementPolicy") == "Failed" else 0)
    missing = 0 if deleting else wanted - replacing
    created: list[dict] = []
    if missing > 0:
        delay = pod_backoff(failed) * scale
        ready_at = (
            memory.last_failure_at + timedelta(seconds=delay) if memory.last_failure_at and failed else None
        )
        if ready_at is not None and ready_at > now:
            plan.wake_at = min(filter(None, (plan.wake_at, ready_at)))
        else:
            wanted_indexes: list[int | None] = [None] * missing
            if indexed:
                # The lowest indexes neither completed nor running (firstPendingIndexes).
                running = {completion_index(p) for p in active}
                pending = [i for i in range(int(completions or 0)) if i not in completed and i not in running]
                wanted_indexes = list(pending[:missing])
            for index in wanted_indexes:
                prefix = meta["name"] if index is None else f"{meta['name']}-{index}"
                pod = new_pod(job, f"{prefix}-{suffix()}", index)
                plan.actions.append(CreatePod(pod))
                plan.events.append(
                    EventSpec(NORMAL, "SuccessfulCreate", f"Created pod: {pod['metadata']['name']}")
                )
                created.append(pod)
    elif missing < 0:
        for pod in sorted(active, key=lambda p: p["metadata"].get("creationTimestamp") or "", reverse=True)[
            :-missing
        ]:
            _delete(plan, pod, memory)
    status["conditions"] = conditions
    if not conditions:
        status.pop("conditions", None)
    _set_counts(status, active=active + created, pods=pods, succeeded=succeeded, failed=failed)
    return plan


def _delete(plan: JobPlan, pod: dict, memory: JobMemory, counted: bool = False) -> None:
    """Delete ``pod``; unless ``counted``, its end is not counted as a failure. The pods a failing Job
    stops are counted (job_controller.go, kubernetes v1.36.3: once the Job has a FailureTarget, every pod
    that ends not Succeeded is failed), as the real plane shows: DeadlineExceeded with `failed: 1`."""
    plan.actions.append(DeletePod(pod["metadata"]["name"]))
    plan.events.append(EventSpec(NORMAL, "SuccessfulDelete", f"Deleted pod: {pod['metadata']['name']}"))
    if not counted:
        memory.deleted.add(pod["metadata"].get("uid"))


def _set_counts(
    status: dict,
    *,
    active: list[dict],
    pods: list[dict],
    succeeded: int,
    failed: int,
    deleting: Sequence[dict] = (),
) -> None:
    deleting_uids = {p["metadata"].get("uid") for p in deleting}
    terminating = sum(
        1
        for p in pods
        if not pod_is_terminal(p)
        and (p["metadata"].get("deletionTimestamp") or p["metadata"].get("uid") in deleting_uids)
    )
    ready = sum(1 for p in active if condition_true(p.get("status", {}).get("conditions"), "Ready"))
    for key, value in (("active", len(active)), ("succeeded", succeeded), ("failed", failed)):
        if value:
            status[key] = value
        else:
            status.pop(key, None)
    status["ready"] = ready
    status["terminating"] = terminating
    status["uncountedTerminatedPods"] = {}


def _apply_ttl(job: dict, plan: JobPlan, now: datetime, scale: float) -> None:
    ttl = job.get("spec", {}).get("ttlSecondsAfterFinished")
    if ttl is None:
        return
    status = job.get("status", {})
    finished_at = plan.memory.finished_at
    if finished_at is None:
        terminal = get_condition(status.get("conditions"), "Complete") or get_condition(
            status.get("conditions"), "Failed"
        )
        finished_at = parse_time(status.get("completionTime")) or parse_time(
            (terminal or {}).get("lastTransitionTime")
        )
    if finished_at is None:
        return
    expire = finished_at + timedelta(seconds=float(ttl) * scale)
    if now >= expire:
        plan.actions.append(DeleteJob())
    else:
        plan.wake_at = expire


# Seconds of the cluster's clock before a Job whose pod the API server refused is synced again.
POD_CREATE_RETRY_SECONDS = 10.0


class JobController(Reconciler):
    """Keeps every Job's pods and status in line with its spec."""

    name = "job-controller"

    def __init__(self, store: Any, clock: Clock, recorder: EventRecorder):
        super().__init__()
        self.store = store
        self.clock = clock
        self.recorder = recorder
        self.memory: dict[str, JobMemory] = {}

    def on_change(self, event_type: str, resource: str, obj: dict) -> None:
        """Store notification: a Job or one of its pods changed."""
        if resource == "jobs":
            if event_type == "DELETED":
                self.memory.pop(obj["metadata"].get("uid"), None)
            self.enqueue(key_of(obj))
        elif resource == "pods":
            ref = controller_ref(obj)
            if ref is not None and ref.get("kind") == "Job":
                self.enqueue(f"{obj['metadata'].get('namespace')}/{ref.get('name')}")

    def reconcile(self, key: str) -> None:
        """Sync one Job."""
        ns, name = split_key(key)
        try:
            job = self.store.get("jobs", name, namespace=ns)
        except Exception:  # noqa: BLE001 - the Job is gone: its pods must not stay blocked on our finalizer
            self._release_orphans(ns, name)
            return
        uid = job["metadata"]["uid"]
        # Read-only views of this Job's pods: the ones it owns that still carry its selector's label.
        pods = [
            p
            for p in self.store.owned("pods", uid)
            if (p["metadata"].get("labels") or {}).get(CONTROLLER_UID_LABEL) == uid
        ]
        now = self.clock.now()
        plan = plan_job(job, pods, now, self.clock.time_scale, self.memory.get(uid))
        self.memory[uid] = plan.memory
        refused = False
        for action in plan.actions:
            refused = self._apply(job, action) or refused
        if refused:
            # The Job controller's sync fails and is retried with the queue's back-off (its first step is
            # DefaultJobPodFailureBackOff, 10 s: pkg/controller/job/job_controller.go, v1.36).
            self.enqueue_after(key, POD_CREATE_RETRY_SECONDS * self.clock.time_scale)
        # Events before the status: whoever sees the new condition also finds the event explaining it.
        for spec in plan.events:
            self.recorder.record(job, spec, JOB_CONTROLLER)
        if plan.status != (job.get("status") or {}):
            body = {"metadata": {"name": name, "namespace": ns}, "status": plan.status}
            self.store.update("jobs", body, subresource="status")
        self.enqueue_at(key, plan.wake_at, now)

    def _release_orphans(self, ns: str | None, name: str) -> None:
        for pod in self.store.list("pods", namespace=ns):
            ref = controller_ref(pod)
            if ref is None or ref.get("kind") != "Job" or ref.get("name") != name:
                continue
            if JOB_TRACKING_FINALIZER in (pod["metadata"].get("finalizers") or []):
                self._apply(
                    {"metadata": {"namespace": ns, "name": name}}, ReleasePod(pod["metadata"]["name"])
                )

    def _apply(self, job: dict, action: Action) -> bool:
        """Carry out one action; True when the API server refused a pod the Job asked for."""
        ns = job["metadata"].get("namespace")
        try:
            if isinstance(action, CreatePod):
                try:
                    self._create_pod(action.pod, ns)
                except Exception as exc:  # noqa: BLE001 - the API server's refusal, told as the controller tells it
                    if getattr(exc, "code", None) in (None, 404):
                        raise
                    # RealPodControl.createPods (pkg/controller/controller_utils.go, v1.36): a Warning
                    # FailedCreate event on the Job, "Error creating: <the API server's message>".
                    self.recorder.record(
                        job, EventSpec(WARNING, "FailedCreate", f"Error creating: {exc}"), JOB_CONTROLLER
                    )
                    return True
            elif isinstance(action, DeletePod):
                self.store.delete("pods", action.name, namespace=ns)
            elif isinstance(action, ReleasePod):
                pod = self.store.get("pods", action.name, namespace=ns)
                finalizers = [
                    f for f in pod["metadata"].get("finalizers") or [] if f != JOB_TRACKING_FINALIZER
                ]
                self.store.patch(
                    "pods",
                    action.name,
                    {"metadata": {"finalizers": finalizers or None}},
                    "merge",
                    namespace=ns,
                )
            elif isinstance(action, DeleteJob):
                self.store.delete(
                    "jobs", job["metadata"]["name"], namespace=ns, propagation_policy="Background"
                )
        except Exception as exc:  # noqa: BLE001 - a vanished pod is not an error
            if getattr(exc, "code", None) != 404:
                raise
        return False

    def _create_pod(self, pod: dict, ns: str | None) -> None:
        for _ in range(5):
            try:
                self.store.create("pods", pod, namespace=ns)
                return
            except Exception as exc:  # noqa: BLE001 - name taken: draw another suffix
                if getattr(exc, "code", None) != 409:
                    raise
                pod = copy.deepcopy(pod)
                pod["metadata"]["name"] = pod["metadata"]["generateName"] + random_suffix()
