"""What every kind of job answers for itself, so that nothing else asks which kind a job is.

The model is Kueue's ``GenericJob`` (kubernetes-sigs/kueue v0.19.2,
``pkg/controller/jobframework/interface.go``): one object per kind that knows how the kind is
suspended and resumed, which pod sets it runs, and when it is finished. Here the adapters are pure:
they read and describe the API's plain JSON and never call the cluster.
"""

from __future__ import annotations

import copy
import enum
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow_jobs_plugin.cluster.objects import as_int, condition_true, dig, mapping
from airflow_jobs_plugin.cluster.records import PodFacts, pod_facts
from airflow_jobs_plugin.cluster.resources import Resource
from airflow_jobs_plugin.jobs import labels

if TYPE_CHECKING:
    from airflow_jobs_plugin.jobs.spec import JobSpec, TaskIdentity

LAUNCHER = "launcher"
WORKER = "worker"
# A launcher's JOB_RANK where it runs no rank itself: always set and always an integer, so
# ``int(os.environ["JOB_RANK"])`` works everywhere, and never a valid worker index.
LAUNCHER_RANK = -1

# Kubernetes' own key that the product does not write, so it is not in labels.py.
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"  # annotation on pods of Indexed Jobs

# The controllers' final words (batch/v1 Job: Complete/Failed; kubeflow MPIJob: Succeeded/Failed).
TERMINAL_CONDITIONS = ("Complete", "Succeeded", "Failed")


class Ending(enum.Enum):
    """How a cancel ends a job."""

    # A batch/v1 Job's own activeDeadlineSeconds (a suspended one resumed with parallelism 0 so its
    # clock starts without a pod): the Job controller fails it and deletes its pods, and its
    # ttlSecondsAfterFinished removes it later (``BatchJob.ending_spec``).
    OWN_DEADLINE = "own deadline"
    # A running MPIJob through its launcher Job's deadline: mpi-operator marks the MPIJob Failed and its
    # runPolicy.ttlSecondsAfterFinished removes it later (``MPIJob.ending_writes``).
    LAUNCHER_DEADLINE = "launcher deadline"
    # Nothing can end it: delete it with its pods (Background propagation).
    DELETE = "delete"


class Then(enum.Enum):
    """What follows one write of an ending (:class:`EndingWrite`)."""

    STOP = "stop"  # the job is ended (or nothing is left to end): no further write
    NEXT = "next"  # go on with the next write


@dataclass(frozen=True)
class EndingWrite:
    """One write that ends a job the product ruled failed, beyond the ruling write itself: Kueue's
    ``JobWithCustomStop.Stop`` (kubernetes-sigs/kueue v0.19.2 ``pkg/controller/jobframework/
    interface.go``) as data, so the adapter decides and the shell (``quota.ledger.end_ruled_job``) only
    sends. ``patch`` is a merge patch of ``subresource`` (``None``: the object itself), or ``None`` for a
    Background delete. ``if_absent`` / ``if_conflict`` say what a 404 / 409 answer means; ``None``
    there means the answer is an error to raise."""

    resource: Resource
    name: str
    patch: Mapping[str, Any] | None
    subresource: str | None = None
    then: Then = Then.STOP
    if_absent: Then | None = Then.STOP
    if_conflict: Then | None = None


@dataclass(frozen=True)
class PodSet:
    """Pods of one template that a job runs at once: ``count`` pods of role ``role`` (Kueue's PodSet)."""

    role: str
    count: int
    template: Mapping[str, Any]


class JobKind(ABC):
    """One kind of job the product submits and follows.

    ``name`` is the product's word for the kind (``Job``, ``MPIJob``, ``torchrun``); ``resource`` the
    API resource its objects are; ``pod_job_label`` the label its controller puts on every pod with
    the job's name (what a pod watch selects on); ``succeeded_condition`` the condition its controller
    writes when the job succeeded; ``resource_may_be_absent`` whether a cluster may lack the resource
    (a custom resource whose operator is not installed), so a 404 on it means "none here", not an error.
    """

    name: str
    # The value of the author's ``framework`` argument that asks for this kind (``None``: none does, the
    # kind is chosen by the rest of the arguments).
    framework: str | None = None
    resource: Resource
    resource_may_be_absent: bool = False
    pod_job_label: str
    succeeded_condition: str

    @abstractmethod
    def recognises(self, job: Mapping[str, Any]) -> bool:
        """Whether ``job`` (as the API returns it, maybe without ``kind`` in a list) is of this kind."""

    @abstractmethod
    def is_suspended(self, job: Mapping[str, Any]) -> bool:
        """Suspended by whoever admits it (the pool, Kueue, a stop)."""

    @abstractmethod
    def suspend_patch(self, suspend: bool) -> dict[str, Any]:
        """The merge patch (of ``spec``'s content) that suspends or resumes a job of this kind."""

    @abstractmethod
    def pod_sets(self, job: Mapping[str, Any]) -> list[PodSet]:
        """The templates the job runs, each with how many pods of it run at once."""

    @abstractmethod
    def backoff_limit(self, job: Mapping[str, Any]) -> int | None:
        """How many pod failures the job's controller tolerates (``None`` where the spec is silent)."""

    @abstractmethod
    def pod_failures(self, job: Mapping[str, Any]) -> int:
        """How many of its pods failed, as its controller counted them."""

    @abstractmethod
    def expected_replicas(self, job: Mapping[str, Any]) -> list[tuple[str, int]]:
        """The (role, index) of every replica the job should have, launcher first."""

    @abstractmethod
    def owns_labels(self, job: Mapping[str, Any], pod_labels: Mapping[str, Any]) -> bool:
        """Whether a pod (of the job's namespace) with ``pod_labels`` is one of the job's."""

    def replica_key(self, pod: Mapping[str, Any]) -> tuple[str, int]:
        """The (role, index) a pod plays, from the product's labels or the completion index."""
        return self.key_of(mapping(pod, "metadata", "labels"), mapping(pod, "metadata", "annotations"))

    def key_of(self, pod_labels: Mapping[str, Any], pod_annotations: Mapping[str, Any]) -> tuple[str, int]:
        """:meth:`replica_key` from a pod's labels and annotations, for a reader that has them at hand."""
        role = pod_labels.get(labels.ROLE) or WORKER
        index = as_int(pod_labels.get(labels.RANK))
        if index is None:
            index = as_int(pod_annotations.get(COMPLETION_INDEX), 0)
        return str(role), index or 0

    def stored_form(self, job: Mapping[str, Any]) -> dict[str, Any]:
        """``job``'s API kind, metadata and spec as its API server stores them and its controllers read
        them: the defaults they fill filled in, what reads as absent left out, its pod templates as
        :func:`~airflow_jobs_plugin.jobs.stored_form.pod_template` writes them. Two objects of the kind
        run the same pods the same way exactly when their stored forms are equal (its status is left
        out). ``job`` is not changed."""
        # Imported here: stored_form reads quantities with spec_checks, which imports this package.
        from airflow_jobs_plugin.jobs import stored_form

        obj = {
            key: copy.deepcopy(job[key]) for key in ("apiVersion", "kind", "metadata", "spec") if key in job
        }
        if not isinstance(obj.get("spec"), Mapping):
            return obj
        obj["spec"] = stored_form.pruned(obj["spec"])
        self.fill_stored_defaults(obj)
        for pod_set in self.pod_sets(obj):
            # The pod sets hand back the templates inside ``obj``: each is rewritten in place.
            template = pod_set.template
            if isinstance(template, dict):
                normal = stored_form.pod_template(template)
                template.clear()
                template.update(normal)
        obj["spec"] = stored_form.pruned(obj["spec"])
        return obj

    def fill_stored_defaults(self, obj: dict[str, Any]) -> None:
        """Fill in ``obj`` (kind, metadata and a spec, changed in place) what the kind's API server and
        controller default or generate outside its pod templates (:meth:`stored_form`)."""
        del obj  # a kind whose server and controller fill nothing changes nothing

    def clear_run(self, spec: dict[str, Any], ended: Mapping[str, Any]) -> None:
        """Drop from a copied ``spec`` what the API server or the product wrote about the run it
        describes, so that it can be created again; ``ended`` holds the author's values of fields the
        product changed to end that run."""
        del spec, ended  # kinds whose objects carry nothing of the kind need no change

    def companions(self, job: Mapping[str, Any]) -> list[tuple[Resource, dict[str, Any]]]:
        """Objects the submitter creates beside the created ``job`` (owned by it, so deleted with it)."""
        del job  # most kinds need nothing beside them
        return []

    def pod_creators(self, job: Mapping[str, Any]) -> list[str]:
        """The names of the objects whose controllers create the job's pods (their FailedCreate
        events say why a pod was refused): the job itself, and any object made for it."""
        return [str(dig(job, "metadata", "name") or "")]

    def priority_classes(self, job: Mapping[str, Any]) -> list[str]:
        """The PriorityClasses the job names: each pod template's ``priorityClassName`` (which the
        scheduler preempts other pods by, and Kueue orders a job by without a WorkloadPriorityClass)."""
        found = (dig(pod_set.template, "spec", "priorityClassName") for pod_set in self.pod_sets(job))
        return [name for name in found if isinstance(name, str) and name]

    def related_names(self, job: Mapping[str, Any]) -> set[tuple[str, str]]:
        """(kind, name) of objects besides the job and its pods whose events explain it."""
        return set()

    # The author's choice (JobSpec -> kind) ------------------------------------------------------------

    @abstractmethod
    def takes(self, framework: str, workers: int) -> bool:
        """Whether a job of the author's ``framework`` and ``workers`` runs as this kind, asked of the
        kinds most specific first (``kinds.for_choice``)."""

    def pod_count(self, spec: JobSpec) -> int:
        """Pods one attempt of ``spec`` runs."""
        return spec.workers

    def total_gpus(self, spec: JobSpec) -> int:
        """GPUs a job of ``spec`` holds while running, what the quota pool charges."""
        return spec.workers * spec.gpus

    def argument_problems(self, values: Mapping[str, Any], given: AbstractSet[str]) -> list[tuple[str, str]]:
        """(argument, message naming the fix) for each argument a job of this kind refuses, at DAG parse
        time: ``values`` holds the arguments valid on their own (by JobSpec field), ``given`` those of
        them the author set to other than their default."""
        del values, given  # a kind that reads every argument refuses none
        return []

    @abstractmethod
    def build(
        self, spec: JobSpec, *, name: str, task: TaskIdentity, attempt: int, queued_at: datetime
    ) -> dict[str, Any]:
        """The object a task submits for ``spec``, suspended, from the shared pieces of
        :mod:`airflow_jobs_plugin.jobs.pod_template`."""

    # Ending a job the product ruled failed (Kueue's JobWithCustomStop) ---------------------------------

    def ending_spec(self, job: Mapping[str, Any]) -> dict[str, Any]:
        """The merge patch of ``spec`` that ends the job in the very write that records the product's
        verdict (``quota.ledger.verdict_patch``); empty where one write cannot end it."""
        del job  # a kind that is ended by later writes (ending_writes) changes no spec here
        return {}

    def ended_spec_record(self, job: Mapping[str, Any]) -> dict[str, Any] | None:
        """The author's values of the fields :meth:`ending_spec` changes, recorded on the job with the
        verdict so a retry's clone gets them back (:meth:`clear_run`); ``None``: nothing to record."""
        del job
        return None

    def ruled_but_running(self, job: Mapping[str, Any]) -> bool:
        """Carries a failing verdict of the product but still runs: :meth:`ending_writes` has work."""
        del job
        return False

    def ruled_while_queued(self, job: Mapping[str, Any]) -> bool:
        """Ruled failed while queued (suspended), not yet shown ended: :meth:`ending_writes` has work."""
        del job
        return False

    def ending_writes(self, job: Mapping[str, Any], now: datetime) -> list[EndingWrite]:
        """The writes, in order, that end ``job`` (as read after its verdict was written) where the
        verdict's write alone does not; empty when there is nothing left to end."""
        del job, now
        return []

    def cancel_ending(self, suspended: bool) -> Ending:
        """How a cancel ends a job of this kind, suspended (queued, stopped) or not."""
        del suspended
        return Ending.OWN_DEADLINE

    def ttl_after_finished(self, job: Mapping[str, Any]) -> int | None:
        """Seconds its controller keeps the finished job (``None``: nothing removes it)."""
        return as_int(dig(job, "spec", "ttlSecondsAfterFinished"))

    # Pods and GPUs after the controller's final word ------------------------------------------------

    def pod_outlives_job(self, role: str) -> bool:
        """Whether a live pod of ``role`` keeps running (and holding its GPUs) after the controller
        ruled on the job, until something deletes it."""
        del role
        return False

    def replaces_failed_pod(self, role: str) -> bool:
        """Whether the controller creates a new pod for a pod of ``role`` that failed (until its
        backoff limit): a failed pod it does not replace leaves its replica down while the job runs."""
        del role
        return True

    def still_counts_pods(self, job: Mapping[str, Any]) -> bool:
        """Whether the controller still counts pods as active or terminating, before its final word
        (pods it counts hold their GPUs whatever the view of them says)."""
        del job
        return False

    # Whether its controller leaves the finished job in place when ``ttl_after_finished`` runs out, so
    # the product marks it (labels.DELETE_AFTER) and the orphan sweep deletes it.
    outlives_its_ttl: bool = False

    # Whether the launcher's log holds every rank's lines (mpirun gathers them), so a rank whose pod is
    # gone can still be read there.
    ranks_in_launcher_log: bool = False

    # What the watch's cache keeps of the kind's spec
    # (watch_transform): fields the product never reads and the API server writes per object.
    cache_dropped_spec: frozenset[str] = frozenset()

    # Shared readings, the same for every kind ------------------------------------------------------

    def expected_pods(self, job: Mapping[str, Any]) -> int:
        """How many pods the job runs at once when admitted (at least one)."""
        return sum(pod_set.count for pod_set in self.pod_sets(job)) or 1

    def is_finished(self, job: Mapping[str, Any]) -> bool:
        """The controller's final word, success or failure, is written."""
        return any(condition_true(job, kind) for kind in TERMINAL_CONDITIONS)

    def succeeded(self, job: Mapping[str, Any]) -> bool:
        return condition_true(job, self.succeeded_condition)

    def pods_of(self, job: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """The pods of ``job`` among ``pods`` (e.g. everything a namespace-wide pod list returned):
        owned through a reference to the job's uid, or named by the kind's labels."""
        return [pod.obj for pod in self.own_pods(job, [pod_facts(pod) for pod in pods])]

    def own_pods(self, job: Mapping[str, Any], pods: Iterable[PodFacts]) -> list[PodFacts]:
        """:meth:`pods_of` over pods already read."""
        uid = dig(job, "metadata", "uid")
        namespace = dig(job, "metadata", "namespace")
        mine = []
        for pod in pods:
            if namespace and pod.namespace and pod.namespace != namespace:
                continue
            if (uid and uid in pod.owner_uids) or self.owns_labels(job, pod.labels):
                mine.append(pod)
        return mine

    def __repr__(self) -> str:
        return f"<job kind {self.name}>"
