"""PyTorch distributed training with ``torchrun``, on nothing but batch/v1: an Indexed Job and a
headless Service.

An Indexed Job (``completionMode: Indexed``, parallelism = completions = nodes) gives each pod a
completion index, as the annotation and label ``batch.kubernetes.io/job-completion-index`` and the
variable ``JOB_COMPLETION_INDEX``, and the hostname ``<job>-<index>``; with ``subdomain`` naming a
headless Service of the same name, pod 0 is reachable as ``<job>-0.<job>``, the rendezvous address of
every node (kubernetes/kubernetes 1.32 ``pkg/controller/job/indexed_job_utils.go``,
``addCompletionIndexEnvVariables`` / ``addCompletionIndexLabel``; ``job_controller.go`` sets the
hostname; Kubernetes docs "Indexed Job for Parallel Processing with Static Work Assignment" and "DNS
for Services and Pods"). No training operator is needed.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow_jobs_plugin.cluster.objects import as_int, dig, mapping
from airflow_jobs_plugin.cluster.resources import SERVICES, Resource
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.kinds.base import COMPLETION_INDEX
from airflow_jobs_plugin.jobs.kinds.batch import BatchJob, job_pod_template, pod_failure_policy
from airflow_jobs_plugin.jobs.kinds.mpi import MPI_ARGUMENTS
from airflow_jobs_plugin.jobs.pod_template import deadlines, metadata, object_labels, pod_env
from airflow_jobs_plugin.jobs.spec import PRODUCT_ENV

if TYPE_CHECKING:
    from airflow_jobs_plugin.jobs.spec import JobSpec, TaskIdentity

# The product's label on a torchrun Job and its pods (labels.FRAMEWORK); its value names the kind.
FRAMEWORK_VALUE = "torchrun"
# torchrun's default rendezvous port (torch.distributed.run, --master-port / --rdzv-endpoint).
TORCHRUN_PORT = 29500
# The arguments only an MPIJob reads: every node of a torchrun job runs the same command, and torchrun
# starts gpus processes per node.
REFUSED_ARGUMENTS = MPI_ARGUMENTS
# The role every node plays (labels.ROLE, JOB_ROLE): they run the same template.
ROLE_NODE = "node"


class TorchrunJob(BatchJob):
    name = "torchrun"
    framework = FRAMEWORK_VALUE

    def recognises(self, job: Mapping[str, Any]) -> bool:
        return (
            super().recognises(job)
            and dig(job, "spec", "completionMode") == "Indexed"
            and mapping(job, "metadata", "labels").get(labels.FRAMEWORK) == FRAMEWORK_VALUE
        )

    def takes(self, framework: str, workers: int) -> bool:
        return framework == self.framework  # any number of nodes, one included

    def argument_problems(self, values: Mapping[str, Any], given: AbstractSet[str]) -> list[tuple[str, str]]:
        return [
            (
                name,
                f"only applies to MPI jobs, but framework is {self.framework!r} (every node runs the same "
                "command; torchrun starts gpus processes per node) -- remove it",
            )
            for name in REFUSED_ARGUMENTS
            if name in given
        ]

    def build(
        self, spec: JobSpec, *, name: str, task: TaskIdentity, attempt: int, queued_at: datetime
    ) -> dict[str, Any]:
        """A suspended batch/v1 Indexed Job of ``spec.workers`` nodes for ``torchrun``.

        parallelism = completions = nodes, so every node runs at once, each once; the Job succeeds when
        every index has. Its pods' ``subdomain`` is the headless Service :meth:`companions` that the
        submitter creates beside it.
        """
        base_labels = {**object_labels(spec, task, attempt), labels.FRAMEWORK: FRAMEWORK_VALUE}
        template = job_pod_template(
            spec, task, {**base_labels, labels.ROLE: ROLE_NODE}, _torchrun_env(spec, name, attempt)
        )
        template["spec"]["subdomain"] = name
        meta = metadata(spec, name, task, attempt, queued_at, gpus=self.total_gpus(spec))
        meta["labels"][labels.FRAMEWORK] = FRAMEWORK_VALUE
        return {
            "apiVersion": self.resource.api_version,
            "kind": self.resource.kind,
            "metadata": meta,
            "spec": {
                "suspend": True,
                "completionMode": "Indexed",
                "parallelism": spec.workers,
                "completions": spec.workers,
                **deadlines(spec),
                "podFailurePolicy": pod_failure_policy(spec),
                "template": template,
            },
        }

    def key_of(self, pod_labels: Mapping[str, Any], pod_annotations: Mapping[str, Any]) -> tuple[str, int]:
        # Every node runs the same template: its rank is its completion index, never a fixed label.
        role = pod_labels.get(labels.ROLE) or ROLE_NODE
        index = as_int(pod_annotations.get(COMPLETION_INDEX))
        if index is None:
            index = as_int(pod_labels.get(COMPLETION_INDEX), 0)
        return str(role), index or 0

    def related_names(self, job: Mapping[str, Any]) -> set[tuple[str, str]]:
        return {("Service", str(dig(job, "metadata", "name") or ""))}

    def companions(self, job: Mapping[str, Any]) -> list[tuple[Resource, dict[str, Any]]]:
        """The headless Service that gives the job's pods their DNS names (``<job>-<i>.<job>``), owned
        by the Job so that the garbage collector deletes it with the Job. Headless (no ``clusterIP``):
        one A record per pod; ``publishNotReadyAddresses``: every node resolves node 0 before node 0 is
        Ready, which is when the rendezvous needs it (Kubernetes docs, "DNS for Services and Pods")."""
        meta = mapping(job, "metadata")
        name = str(meta.get("name") or "")
        kept = (labels.MANAGED_BY, labels.GROUP, labels.USER, labels.TASK_KEY, labels.FRAMEWORK)
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": name,
                "namespace": meta.get("namespace"),
                "labels": {k: v for k, v in mapping(meta, "labels").items() if k in kept},
                "ownerReferences": [
                    {
                        "apiVersion": self.resource.api_version,
                        "kind": self.resource.kind,
                        "name": name,
                        "uid": meta.get("uid"),
                        "controller": True,
                        "blockOwnerDeletion": False,
                    }
                ],
            },
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": True,
                "selector": {labels.BATCH_JOB_NAME: name},
                "ports": [{"name": "rendezvous", "port": TORCHRUN_PORT, "protocol": "TCP"}],
            },
        }
        return [(SERVICES, service)]


def torchrun_master(name: str) -> str:
    """The rendezvous host of a torchrun job: node 0, ``<job>-0`` under the headless Service ``<job>``.

    The Job controller names an Indexed Job's pod of index i ``<job>-<i>`` (its hostname) and the pod's
    ``subdomain`` names the Service, so the name resolves through the pod's DNS search path
    (kubernetes/kubernetes 1.32 ``pkg/controller/job/job_controller.go``; Kubernetes docs, "DNS for
    Services and Pods": A records for a pod's hostname and subdomain)."""
    return f"{name}-0.{name}"


def _torchrun_env(spec: JobSpec, name: str, attempt: int) -> list[dict]:
    """The product's variables (``JOB_RANK`` is the node's index), then torchrun's settings as
    ``PET_*`` variables, which ``torchrun`` reads for each of its flags (torch.distributed.run's
    arguments take their defaults from ``PET_<FLAG>``; Kubeflow Trainer's torch plugin sets the same
    names), and the ``MASTER_*`` / ``WORLD_SIZE`` / ``NODE_RANK`` names that launchers other than
    torchrun read."""
    # kubernetes/kubernetes 1.32 pkg/controller/job/indexed_job_utils.go: the completion index of a pod
    # of an Indexed Job, as annotation.
    index: dict[str, Any] = {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}}
    env = pod_env(spec, name, attempt, role=ROLE_NODE, rank=index, world_size=spec.workers)
    nproc = max(spec.gpus, 1)
    master = torchrun_master(name)
    torchrun: list[dict[str, Any]] = [
        {"name": "PET_NNODES", "value": str(spec.workers)},
        {"name": "PET_NPROC_PER_NODE", "value": str(nproc)},
        {"name": "PET_NODE_RANK", "valueFrom": index},
        {"name": "PET_MASTER_ADDR", "value": master},
        {"name": "PET_MASTER_PORT", "value": str(TORCHRUN_PORT)},
        {"name": "MASTER_ADDR", "value": master},
        {"name": "MASTER_PORT", "value": str(TORCHRUN_PORT)},
        {"name": "NODE_RANK", "valueFrom": index},
        {"name": "WORLD_SIZE", "value": str(spec.workers * nproc)},
    ]
    # The product's variables (always pod_env's first ones), then torchrun's, then the author's.
    return env[: len(PRODUCT_ENV)] + torchrun + env[len(PRODUCT_ENV) :]


TORCHRUN = TorchrunJob()
