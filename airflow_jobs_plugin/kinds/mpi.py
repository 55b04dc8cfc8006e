"""A kubeflow ``MPIJob`` (``kubeflow.org/v2beta1``): a launcher and N workers, run by mpi-operator.

The rules are mpi-operator's (kubeflow/mpi-operator v0.8.0, ``pkg/controller/mpi_job_controller.go``):
``runPolicy.suspend`` suspends it, its pods carry ``training.kubeflow.org/job-name`` / ``job-role`` /
``replica-index``, the launcher is a batch/v1 Job ``<name>-launcher`` and the workers are pods
``<name>-worker-<i>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import labels
from ..objects import as_int, dig, mapping
from ..resources import MPIJOBS
from .base import COMPLETION_INDEX, LAUNCHER, WORKER, JobKind, PodSet

# kubeflow/mpi-operator pkg/controller/mpi_job_controller.go (v0.5.0 .. v0.8.0): launcherSuffix.
LAUNCHER_SUFFIX = "-launcher"
# kubeflow/mpi-operator pkg/apis/kubeflow/v2beta1/default.go (v0.8.0): runPolicy.backoffLimit's default.
DEFAULT_BACKOFF_LIMIT = 6


class MPIJob(JobKind):
    name = "MPIJob"
    resource = MPIJOBS
    # The MPIJob CRD comes with the MPI operator, which a cluster may not run.
    resource_may_be_absent = True
    pod_job_label = labels.MPI_JOB_NAME
    succeeded_condition = "Succeeded"

    def recognises(self, job: Mapping[str, Any]) -> bool:
        # List responses may omit ``kind``; the API group or the spec's shape still tell.
        return (
            job.get("kind") == self.name
            or str(job.get("apiVersion") or "").startswith("kubeflow.org/")
            or dig(job, "spec", "mpiReplicaSpecs") is not None
        )

    def is_suspended(self, job: Mapping[str, Any]) -> bool:
        return bool(dig(job, "spec", "runPolicy", "suspend"))

    def suspend_patch(self, suspend: bool) -> dict[str, Any]:
        return {"runPolicy": {"suspend": suspend}}

    def pod_sets(self, job: Mapping[str, Any]) -> list[PodSet]:
        return [
            PodSet(role.lower(), as_int(dig(replica, "replicas"), 1) or 0, mapping(replica, "template"))
            for role, replica in mapping(job, "spec", "mpiReplicaSpecs").items()
            if isinstance(replica, Mapping) or replica is None
        ]

    def backoff_limit(self, job: Mapping[str, Any]) -> int | None:
        return as_int(dig(job, "spec", "runPolicy", "backoffLimit"), DEFAULT_BACKOFF_LIMIT)

    def pod_failures(self, job: Mapping[str, Any]) -> int:
        return sum(
            as_int(dig(status, "failed"), 0) or 0
            for status in mapping(job, "status", "replicaStatuses").values()
            if isinstance(status, Mapping)
        )

    def expected_replicas(self, job: Mapping[str, Any]) -> list[tuple[str, int]]:
        specs = mapping(job, "spec", "mpiReplicaSpecs")
        wanted = []
        if "Launcher" in specs:
            wanted += [(LAUNCHER, i) for i in range(as_int(dig(specs, "Launcher", "replicas"), 1) or 0)]
        if "Worker" in specs:
            # With runLauncherAsWorker the launcher is index 0 and workers carry 1..N
            # (workerReplicaIndexLabel, v0.7.0+).
            first = 1 if dig(job, "spec", "runLauncherAsWorker") is True else 0
            count = as_int(dig(specs, "Worker", "replicas"), 1) or 0
            wanted += [(WORKER, i) for i in range(first, first + count)]
        return wanted

    def owns_labels(self, job: Mapping[str, Any], pod_labels: Mapping[str, Any]) -> bool:
        name = dig(job, "metadata", "name")
        return (
            pod_labels.get(labels.MPI_JOB_NAME) == name
            or pod_labels.get(labels.BATCH_JOB_NAME) == f"{name}{LAUNCHER_SUFFIX}"
        )

    def key_of(self, pod_labels: Mapping[str, Any], pod_annotations: Mapping[str, Any]) -> tuple[str, int]:
        role = pod_labels.get(labels.MPI_JOB_ROLE) or pod_labels.get(labels.ROLE) or WORKER
        index = as_int(pod_labels.get(labels.MPI_REPLICA_INDEX))
        if index is None and role != LAUNCHER:
            index = as_int(pod_labels.get(labels.RANK))
        if index is None:
            index = as_int(pod_annotations.get(COMPLETION_INDEX), 0)
        return str(role), index or 0

    def related_names(self, job: Mapping[str, Any]) -> set[tuple[str, str]]:
        name = str(dig(job, "metadata", "name") or "")
        related = {("Job", f"{name}{LAUNCHER_SUFFIX}")}
        # Workers are pods named <job>-worker-<i> (workerName); their events outlive them.
        related |= {
            ("Pod", f"{name}-worker-{i}") for role, i in self.expected_replicas(job) if role == WORKER
        }
        return related

    def launcher_name(self, job: Mapping[str, Any]) -> str:
        return f"{dig(job, 'metadata', 'name')}{LAUNCHER_SUFFIX}"


MPI_JOB = MPIJob()
