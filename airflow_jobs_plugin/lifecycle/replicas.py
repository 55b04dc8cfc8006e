"""Replicas of a job: which pods belong to it, which pod is each replica's current one, and how it is doing.

A single-pod ``batch/v1`` Job has one replica (role ``worker``, index 0); an MPIJob has a ``launcher``
and ``worker`` 0..N-1. A replica may have had several pods (a failed pod stays next to its
replacement), so its *current* pod is the live one if there is one, else the most recently created.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import Enum
from typing import Annotated, Any

from airflow_jobs_plugin.cluster.objects import condition, dig, latest, parse_time
from airflow_jobs_plugin.cluster.records import NOT_YET, PodFacts, pod_facts
from airflow_jobs_plugin.cluster.resources import JOBS
from airflow_jobs_plugin.jobs import kinds
from airflow_jobs_plugin.jobs.kinds import (  # noqa: F401  (re-exported by lifecycle)
    LAUNCHER,
    WORKER,
)
from airflow_jobs_plugin.json_fields import Json
from airflow_jobs_plugin.lifecycle.pod_status import columns
from airflow_jobs_plugin.lifecycle.state import Reason

NO_POD = "<none>"  # STATUS of a replica whose pod does not exist (kubectl's word for an empty cell)


class Health(Enum):
    """What a replica's current pod is doing, coarser than its kubectl STATUS."""

    MISSING = "missing"  # no pod yet
    AWAITING_SCHEDULER = "awaiting-scheduler"  # created, the scheduler has not decided
    UNSCHEDULABLE = "unschedulable"
    GATED = "gated"
    STARTING = "starting"  # on a node: pulling, initializing, creating containers
    RUNNING = "running"
    NOT_READY = "not-ready"
    FAILING = "failing"  # a container failed and the pod restarts it in place
    FAILED = "failed"  # the pod ended in failure
    SUCCEEDED = "succeeded"
    TERMINATING = "terminating"  # being deleted, still holding its node
    LOST = "lost"  # its node is unreachable


@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    """One replica of a job as the snapshot sees it.

    ``status`` is the exact kubectl STATUS of the current pod, ``ready`` the READY column (both
    ``<none>`` while the replica has no pod), ``restarts`` the restart count. ``reason`` is the product's reading of a
    problem (``None`` when there is none) and ``message`` the cluster's own words about it.
    """

    role: Annotated[str, Json("launcher or worker")]
    index: Annotated[int, Json("the replica's index within its role")]
    pod: Annotated[str | None, Json("its current pod; null before it has one")]
    status: Annotated[str, Json("kubectl's STATUS of the pod; null without a pod", blank_is_null=True)]
    # The JSON carries it as two counts (ready_containers, containers).
    ready: str
    restarts: Annotated[int, Json("container restarts of the pod")]
    node: Annotated[str | None, Json("the node the pod is bound to")]
    health: Annotated[Health, Json("what the pod is doing, coarser than its status")]
    reason: Annotated[Reason | None, Json("the product's reading of a problem; null when none")] = None
    exit_code: Annotated[int | None, Json("the exit code that explains a failure")] = None
    # An init container's exit is not the program's: the MPI launcher's wait-for-workers init container
    # runs before the job's command and exits non-zero when the workers never come up.
    exit_from: Annotated[
        str,
        Json("the init container the exit code is from; null when it is the pod's own", blank_is_null=True),
    ] = ""
    message: Annotated[str, Json("the cluster's own words about the problem", blank_is_null=True)] = ""
    # Since when the current pod has been where it is now, as far as its own conditions tell: for a
    # pod whose containers cannot be created, the moment it got ready to start them.
    since: Annotated[datetime | None, Json("since when the pod has been where it is now")] = None

    @property
    def name(self) -> Annotated[str, Json("launcher, or <role>-<index>", after="index")]:
        """``launcher`` for the MPI launcher, else ``<role>-<index>`` (e.g. ``worker-1``)."""
        return self.role if self.role == LAUNCHER and self.index == 0 else f"{self.role}-{self.index}"

    @property
    def ready_containers(
        self,
    ) -> Annotated[int | None, Json("ready containers of the pod (kubectl READY)", after="status")]:
        return ready_counts(self.ready)[0]

    @property
    def containers(
        self,
    ) -> Annotated[int | None, Json("containers counted by kubectl READY", after="ready_containers")]:
        return ready_counts(self.ready)[1]


def ready_counts(column: str) -> tuple[int | None, int | None]:
    """kubectl's READY cell (``1/2``) as (ready, containers); ``(None, None)`` for ``<none>``."""
    ready, slash, total = column.partition("/")
    if not slash:
        return None, None
    return _count(ready), _count(total)


def _count(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def job_kind(job: Mapping[str, Any]) -> str:
    """The product's word for the job's kind (``Job``, ``MPIJob``, ``torchrun``)."""
    return kinds.kind_of(job).name


def pods_of(job: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The pods of ``job`` among ``pods`` (e.g. everything a namespace-wide pod list returned)."""
    return kinds.kind_of(job).pods_of(job, pods)


# The Job controller names the pod its pod failure policy matched: "Pod <ns>/<name> has condition
# DisruptionTarget matching FailJob rule at index <i>".
_DISRUPTED_POD = re.compile(
    r"^Pod (?P<namespace>[^/\s]+)/(?P<name>\S+) has condition DisruptionTarget matching "
)
# What the node lifecycle controller and the taint eviction controller record on the pods of a node that
# stopped answering: the evidence of a node loss that outlives the pod.
_NODE_LOSS_EVENTS = frozenset({"NodeNotReady", "TaintManagerEviction"})


def disrupted_pod(job: Mapping[str, Any]) -> str | None:
    """The pod whose DisruptionTarget condition failed the Job through its pod failure policy, as the
    controller's Failed (or FailureTarget) condition names it; the pod itself may be gone."""
    for kind in ("Failed", "FailureTarget"):
        match = _DISRUPTED_POD.match(str(dig(condition(job, kind), "message") or ""))
        if match:
            return match["name"]
    return None


def lost_with_its_node(pod_name: str | None, events: Iterable[Mapping[str, Any]]) -> bool:
    """True if the events say the pod's node stopped answering (not-ready, then the taint eviction)."""
    if not pod_name:
        return False
    return any(
        event.get("reason") in _NODE_LOSS_EVENTS
        and (about := event.get("involvedObject") or event.get("regarding") or {}).get("kind") == "Pod"
        and about.get("name") == pod_name
        for event in events
    )


def events_of(
    job: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], events: Iterable[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """The events about ``job``, its launcher Job, one of ``pods``, or the pod that the job's pod
    failure policy names (core/v1 or events.k8s.io/v1)."""
    return events_about(kinds.kind_of(job), job, [pod_facts(pod) for pod in pods], events)


def events_about(
    kind: kinds.JobKind, job: Mapping[str, Any], pods: Sequence[PodFacts], events: Iterable[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """:func:`events_of` for a job of ``kind`` whose pods are already read."""
    event_list = list(events)
    if not event_list:
        # A trigger's look has none (it reads events only before ruling): skip naming what they are about.
        return []
    name = dig(job, "metadata", "name")
    namespace = dig(job, "metadata", "namespace")
    uids = {dig(job, "metadata", "uid")} | {pod.uid for pod in pods}
    uids.discard(None)
    names = {(kind.resource.kind, name)} | kind.related_names(job)
    names |= {("Pod", pod.name) for pod in pods}
    disrupted = disrupted_pod(job)
    if disrupted:
        names.add(("Pod", disrupted))
    # Pods already gone still explain the job: the Job controller names every pod it creates in a
    # SuccessfulCreate event on the Job ("Created pod: <name>", pkg/controller/job/job_controller.go,
    # Kubernetes 1.32), which outlives the pod; an MPIJob's workers are named <job>-worker-<i> by
    # mpi-operator (pkg/controller/mpi_job_controller.go, v0.8.0, workerName).
    for event in event_list:
        about = event.get("involvedObject") or event.get("regarding") or {}
        if (
            (about.get("kind"), about.get("name")) in names
            and about.get("kind") == JOBS.kind  # the Job controller's (an MPI launcher's too)
            and event.get("reason") == "SuccessfulCreate"
        ):
            created = _CREATED_POD.match(str(event.get("message") or event.get("note") or ""))
            if created:
                names.add(("Pod", created["pod"]))
    mine = []
    for event in event_list:
        about = event.get("involvedObject") or event.get("regarding") or {}
        if namespace and about.get("namespace") and about.get("namespace") != namespace:
            continue
        if about.get("uid") in uids or (about.get("kind"), about.get("name")) in names:
            mine.append(event)
    return mine


_CREATED_POD = re.compile(r"^Created pod: (?P<pod>\S+)$")


def event_time(event: Mapping[str, Any]) -> datetime | None:
    """When an event was last seen (deprecated and new fields both read)."""
    for value in (
        event.get("lastTimestamp"),
        dig(event, "series", "lastObservedTime"),
        event.get("eventTime"),
        event.get("firstTimestamp"),
        dig(event, "metadata", "creationTimestamp"),
    ):
        moment = parse_time(value)
        if moment is not None:
            return moment
    return None


def expected_replicas(job: Mapping[str, Any]) -> list[tuple[str, int]]:
    """The (role, index) of every replica the job should have, launcher first."""
    return kinds.kind_of(job).expected_replicas(job)


def _role_order(key: tuple[str, int]) -> tuple[int, str, int]:
    return (0 if key[0] == LAUNCHER else 1, key[0], key[1])


def replicas_of(
    job: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], events: Iterable[Mapping[str, Any]] = ()
) -> list[ReplicaStatus]:
    """Every expected replica, plus any replica seen only through a pod, launcher first then by index."""
    kind = kinds.kind_of(job)
    pod_list = [pod_facts(pod) for pod in pods]
    return replicas_from(kind, kind.expected_replicas(job), kind.is_finished(job), pod_list, events)


def replicas_from(
    kind: kinds.JobKind,
    expected: Iterable[tuple[str, int]],
    finished: bool,
    pods: Sequence[PodFacts],
    events: Iterable[Mapping[str, Any]] = (),
) -> list[ReplicaStatus]:
    """:func:`replicas_of` for a job of ``kind`` read already (its ``expected`` replicas, whether it
    has ``finished``: its controller's final word written) whose pods are read too.

    The controller's final word is about the pods that ended: a pod of a finished job that never ran
    (a replacement created as a suspension's terminating pod went on to succeed, then deleted by the
    controller) is a leftover, not the replica's outcome."""
    by_key: dict[tuple[str, int], list[PodFacts]] = {key: [] for key in expected}
    for pod in pods:
        by_key.setdefault(replica_key(kind, pod), []).append(pod)
    event_list = list(events)
    result = []
    for key in sorted(by_key, key=_role_order):
        current = _current(by_key[key], finished)
        result.append(_read(key[0], key[1], current, event_list))
    return result


def replica_key(kind: kinds.JobKind, pod: PodFacts) -> tuple[str, int]:
    """The (role, index) ``pod`` plays in a job of ``kind`` (``JobKind.replica_key``), derived once per record."""
    if pod.key_kind is not kind:
        pod.key = kind.key_of(pod.labels, pod.annotations)
        pod.key_kind = kind
    key: tuple[str, int] = pod.key
    return key


_NEVER = datetime.min.replace(tzinfo=timezone.utc)


def current_pod(pods: Iterable[Mapping[str, Any]], *, finished: bool = False) -> Mapping[str, Any] | None:
    """The pod that stands for a replica among all its pods, ``None`` when there is none.

    A pod that has not ended and is not being deleted wins over the pods it replaced; among equals the
    newest does. Of a ``finished`` job, a pod that ended wins instead: it is the one the job's outcome
    (and its exit code) is about. Creation times have one-second precision, so pods created in the same second are
    ordered by ``resourceVersion`` (the API server's counter, compared as a number when it is one),
    then by their order in ``pods``.
    """

    chosen = _current([pod_facts(pod) for pod in pods], finished)
    return chosen.obj if chosen is not None else None


def _current(pods: Sequence[PodFacts], finished: bool) -> PodFacts | None:
    if len(pods) < 2:  # nearly every replica: its one pod, or none
        return pods[0] if pods else None

    def rank(entry: tuple[int, PodFacts]) -> tuple[bool, datetime, int, int]:
        position, pod = entry
        ended = pod.phase in ("Succeeded", "Failed")
        live = ended if finished else not ended and not pod.deletion
        created = parse_time(pod.created) or _NEVER
        version = str(pod.resource_version or "")
        return live, created, int(version) if version.isdigit() else -1, position

    return max(enumerate(pods), key=rank)[1]


def read_replica(
    role: str, index: int, pod: Mapping[str, Any] | None, events: Iterable[Mapping[str, Any]] = ()
) -> ReplicaStatus:
    """How the replica ``role``/``index`` is doing according to its current ``pod`` and its events."""
    return _read(role, index, pod_facts(pod) if pod is not None else None, events)


def _read(role: str, index: int, pod: PodFacts | None, events: Iterable[Mapping[str, Any]]) -> ReplicaStatus:
    if pod is None:
        return ReplicaStatus(role, index, None, NO_POD, NO_POD, 0, None, Health.MISSING, Reason.CREATING)
    pod_name = pod.name
    pod_events = [
        e
        for e in events
        if (e.get("involvedObject") or e.get("regarding") or {}).get("name") == pod_name
        and e.get("type") == "Warning"
    ]
    if pod_events:
        return _replica(role, index, pod, pod_events)
    # Without warnings about it, the replica is the pod's alone: derived once per record.
    known = pod.replica
    if known is NOT_YET or known.role != role or known.index != index:
        known = pod.replica = _replica(role, index, pod, pod_events)
    replica: ReplicaStatus = known
    return replica


def _replica(role: str, index: int, pod: PodFacts, pod_events: list[Mapping[str, Any]]) -> ReplicaStatus:
    status, ready, restarts = columns(pod)
    health, reason = _health(pod, status)
    return ReplicaStatus(
        role=role,
        index=index,
        pod=pod.name,
        status=status,
        ready=ready,
        restarts=restarts,
        node=pod.node or None,
        health=health,
        reason=reason,
        exit_code=_exit_code(pod),
        exit_from=_exit_from(pod),
        message=_message(pod, health, reason, pod_events),
        since=_since(pod),
    )


def _since(pod: PodFacts) -> datetime | None:
    """When the pod's containers could first be created: the latest transition to True of the
    conditions that precede it (scheduled, sandbox ready, init containers done), else its creation."""
    moments = [
        parse_time(cond.get("lastTransitionTime"))
        for cond in pod.conditions
        if cond.get("type") in ("PodScheduled", "PodReadyToStartContainers", "Initialized")
        and cond.get("status") == "True"
    ]
    known = [m for m in moments if m is not None]
    return max(known) if known else parse_time(pod.created)


# kubectl STATUS words (after an optional "Init:") and what they mean for the product.
_STARTING_REASONS: dict[str, Reason] = {
    "ErrImagePull": Reason.IMAGE_PULL,
    "ImagePullBackOff": Reason.IMAGE_PULL,
    "InvalidImageName": Reason.INVALID_IMAGE_NAME,
    "ErrImageNeverPull": Reason.IMAGE_PULL,
    "CreateContainerConfigError": Reason.CONTAINER_CONFIG_ERROR,
    "ContainerCreating": Reason.CONTAINER_CREATING,
    "PodInitializing": Reason.INITIALIZING,
    "Pending": Reason.CONTAINER_CREATING,
}
_FAILING_REASONS: dict[str, Reason] = {
    "CrashLoopBackOff": Reason.CRASH_LOOP_BACK_OFF,
    "OOMKilled": Reason.OOM_KILLED,
    "ContainerCannotRun": Reason.CONTAINER_CANNOT_RUN,
    "StartError": Reason.CONTAINER_CANNOT_RUN,
    "RunContainerError": Reason.CONTAINER_CANNOT_RUN,
    "CreateContainerError": Reason.CONTAINER_CANNOT_RUN,
    "Error": Reason.ERROR,
    "Evicted": Reason.EVICTED,
    "DeadlineExceeded": Reason.DEADLINE_EXCEEDED,
}
# DisruptionTarget condition reasons: why the control plane or the kubelet is killing a pod.
_DISRUPTIONS: dict[str, Reason] = {
    "PreemptionByScheduler": Reason.PREEMPTED,
    "PreemptionByKubeScheduler": Reason.PREEMPTED,
    "EvictionByEvictionAPI": Reason.EVICTED,
    "TerminationByKubelet": Reason.EVICTED,
    "DeletionByTaintManager": Reason.NODE_LOST,
    "DeletionByPodGC": Reason.NODE_LOST,
}


def _status_word(status: str) -> str:
    return status[len("Init:") :] if status.startswith("Init:") else status


def _failure_reason(pod: PodFacts, status: str) -> Reason:
    disruption = pod.condition("DisruptionTarget")
    if disruption is not None and disruption.get("status") == "True":
        found = _DISRUPTIONS.get(str(disruption.get("reason") or ""))
        if found is not None:
            return found
    pod_reason = str(pod.reason or "")
    if pod_reason == "NodeLost":
        return Reason.NODE_LOST
    if pod_reason in _FAILING_REASONS:  # the kubelet's verdict on the whole pod (Evicted, DeadlineExceeded)
        return _FAILING_REASONS[pod_reason]
    word = _status_word(status)
    if word.startswith(("ExitCode:", "Signal:")):
        return Reason.ERROR
    return _FAILING_REASONS.get(word, _STARTING_REASONS.get(word, Reason.ERROR))


def _container_problem(pod: PodFacts) -> Reason | None:
    """A container that cannot start or failed, whatever the pod's STATUS shows."""
    for status in pod.init_container_statuses + pod.container_statuses:
        word = str(dig(status, "state", "waiting", "reason") or "")
        if word in _FAILING_REASONS or (word in _STARTING_REASONS and _STARTING_REASONS[word] in _PROBLEMS):
            return _FAILING_REASONS.get(word) or _STARTING_REASONS[word]
        terminated = dig(status, "state", "terminated")
        if isinstance(terminated, Mapping) and (terminated.get("exitCode") or 0) != 0:
            return _FAILING_REASONS.get(str(terminated.get("reason") or ""), Reason.ERROR)
    return None


_PROBLEMS = frozenset({Reason.IMAGE_PULL, Reason.INVALID_IMAGE_NAME, Reason.CONTAINER_CONFIG_ERROR})


def _health(pod: PodFacts, status: str) -> tuple[Health, Reason | None]:
    phase = pod.phase or "Pending"
    word = _status_word(status)
    if status == "Unknown" or phase == "Unknown":
        return Health.LOST, Reason.NODE_LOST
    if phase == "Failed":
        return Health.FAILED, _failure_reason(pod, status)
    if phase == "Succeeded":
        return Health.SUCCEEDED, None
    if status == "Terminating":
        # Deletion hides the pod's own trouble from STATUS; a failed image pull must still show.
        disruption = pod.condition("DisruptionTarget")
        reason = _DISRUPTIONS.get(str((disruption or {}).get("reason") or ""))
        return Health.TERMINATING, reason or _container_problem(pod) or Reason.DELETED
    if phase == "Pending" and not pod.node:
        scheduled = pod.condition("PodScheduled") or {}
        if status == "SchedulingGated" or scheduled.get("reason") == "SchedulingGated":
            return Health.GATED, Reason.SCHEDULING_GATED
        if scheduled.get("status") == "False":
            return Health.UNSCHEDULABLE, Reason.UNSCHEDULABLE
        return Health.AWAITING_SCHEDULER, Reason.PENDING
    if word in _FAILING_REASONS or word.startswith(("ExitCode:", "Signal:")):
        return Health.FAILING, _failure_reason(pod, status)
    if status.startswith("Init:"):
        return Health.STARTING, _STARTING_REASONS.get(word, Reason.INITIALIZING)
    if word in _STARTING_REASONS:
        return Health.STARTING, _STARTING_REASONS[word]
    if phase == "Pending":
        return Health.STARTING, Reason.CONTAINER_CREATING
    if status == "Completed":
        return Health.SUCCEEDED, None
    ready = pod.condition("Ready")
    if status == "NotReady" or (ready is not None and ready.get("status") != "True"):
        return Health.NOT_READY, Reason.NOT_READY
    return Health.RUNNING, None


def _exit_code(pod: PodFacts) -> int | None:
    """The exit code that explains the pod's trouble: a failed container's, else the last crash's."""
    statuses = [s for s in pod.container_statuses + pod.init_container_statuses if isinstance(s, Mapping)]
    for which in ("state", "lastState"):
        for status in statuses:
            terminated = dig(status.get(which), "terminated")
            if isinstance(terminated, Mapping) and (terminated.get("exitCode") or 0) != 0:
                return int(terminated["exitCode"])
    for status in pod.container_statuses:
        terminated = dig(status, "state", "terminated")
        if isinstance(terminated, Mapping):
            return int(terminated.get("exitCode") or 0)
    return None


def _exit_from(pod: PodFacts) -> str:
    """The init container whose non-zero exit ``_exit_code`` reports, ``""`` when it is not one."""
    containers = [s for s in pod.container_statuses if isinstance(s, Mapping)]
    inits = [s for s in pod.init_container_statuses if isinstance(s, Mapping)]
    for which in ("state", "lastState"):
        for status in containers + inits:
            terminated = dig(status.get(which), "terminated")
            if isinstance(terminated, Mapping) and (terminated.get("exitCode") or 0) != 0:
                return "" if status in containers else f"init container {status.get('name') or '?'}"
    return ""


# A kubelet event that only names the container's waiting reason ("Error: ImagePullBackOff").
_KUBELET_SUMMARY = re.compile(r"^Error: [A-Za-z]+$")


def _text(event: Mapping[str, Any]) -> str:
    return str(event.get("message") or event.get("note") or "").strip()


def _message(pod: PodFacts, health: Health, reason: Reason | None, warnings: list[Mapping[str, Any]]) -> str:
    """The cluster's own words about a replica's trouble, most specific first."""
    if health in (Health.RUNNING, Health.SUCCEEDED):
        return ""
    newest_warning = latest(warnings, event_time)
    if health in (Health.UNSCHEDULABLE, Health.GATED, Health.AWAITING_SCHEDULER):
        message = str(dig(pod.condition("PodScheduled"), "message") or "")
        if not message and newest_warning is not None and newest_warning.get("reason") == "FailedScheduling":
            message = str(newest_warning.get("message") or newest_warning.get("note") or "")
        return message
    if reason == Reason.IMAGE_PULL:
        # The back-off message only names the image; the kubelet's Failed event carries the registry's
        # error. The kubelet posts two Failed events per failed pull and one per back-off: the registry's
        # answer ('Failed to pull image "x": ... not found', pkg/kubelet/images/image_manager.go,
        # ``EnsureImageExists``) and its summaries ("Error: ErrImagePull", "Error: ImagePullBackOff",
        # pkg/kubelet/kuberuntime/kuberuntime_container.go, ``startContainer``; Kubernetes 1.36), which
        # come after it and say nothing the reason does not: the newest answer is the one to show.
        pulls = [
            e
            for e in warnings
            if e.get("reason") in ("Failed", "ErrImagePull") and not _KUBELET_SUMMARY.match(_text(e))
        ]
        newest_pull = latest(pulls, event_time)
        if newest_pull is not None:
            return _text(newest_pull)
    texts = [pod.message, dig(pod.condition("DisruptionTarget"), "message")]
    for status in pod.init_container_statuses + pod.container_statuses:
        for path in (("state", "waiting"), ("state", "terminated"), ("lastState", "terminated")):
            detail = dig(status, *path)
            if isinstance(detail, Mapping) and detail.get("reason") not in (
                None,
                "Completed",
                "PodInitializing",
            ):
                texts.append(detail.get("message"))
    texts.append(dig(pod.condition("Ready"), "message") if health == Health.NOT_READY else None)
    for text in texts:
        if text:
            return str(text).strip()
    if newest_warning is not None:
        return str(newest_warning.get("message") or newest_warning.get("note") or "")
    return ""
