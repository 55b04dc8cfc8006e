"""What every kind of job answers for itself, so that nothing else asks which kind a job is.

The model is Kueue's ``GenericJob`` (kubernetes-sigs/kueue v0.19.2,
``pkg/controller/jobframework/interface.go``): one object per kind that knows how the kind is
suspended and resumed, which pod sets it runs, and when it is finished. Here the adapters are pure:
they read and describe the API's plain JSON and never call the cluster.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .. import labels
from ..objects import as_int, condition_true, dig, mapping
from ..records import PodFacts, pod_facts
from ..resources import Resource

LAUNCHER = "launcher"
WORKER = "worker"

# Kubernetes' own key that the product does not write, so it is not in labels.py.
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"  # annotation on pods of Indexed Jobs

# The controllers' final words (batch/v1 Job: Complete/Failed; kubeflow MPIJob: Succeeded/Failed).
TERMINAL_CONDITIONS = ("Complete", "Succeeded", "Failed")


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

    def owns_pod(self, job: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
        """Whether ``pod`` (of the same namespace) is one of the job's, by its labels."""
        return self.owns_labels(job, mapping(pod, "metadata", "labels"))

    @abstractmethod
    def owns_labels(self, job: Mapping[str, Any], pod_labels: Mapping[str, Any]) -> bool:
        """:meth:`owns_pod` from the pod's labels."""

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

    def clear_run(self, spec: dict[str, Any], ended: Mapping[str, Any]) -> None:
        """Drop from a copied ``spec`` what the API server or the product wrote about the run it
        describes, so that it can be created again; ``ended`` holds the author's values of fields the
        product changed to end that run."""
        del spec, ended  # kinds whose objects carry nothing of the kind need no change

    def companions(self, job: Mapping[str, Any]) -> list[tuple[Resource, dict[str, Any]]]:
        """Objects the submitter creates beside the created ``job`` (owned by it, so deleted with it)."""
        del job  # most kinds need nothing beside them
        return []

    def related_names(self, job: Mapping[str, Any]) -> set[tuple[str, str]]:
        """(kind, name) of objects besides the job and its pods whose events explain it."""
        return set()

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
