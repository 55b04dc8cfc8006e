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
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow_jobs_plugin.cluster.objects import as_int, dig, mapping
from airflow_jobs_plugin.cluster.resources import SERVICES, Resource
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.kinds.base import COMPLETION_INDEX
from airflow_jobs_plugin.jobs.kinds.batch import BatchJob
from airflow_jobs_plugin.jobs.spec import TORCHRUN_PORT

if TYPE_CHECKING:
    from airflow_jobs_plugin.jobs.spec import JobSpec, TaskIdentity

# The product's label on a torchrun Job and its pods (labels.FRAMEWORK); its value names the kind.
FRAMEWORK_VALUE = "torchrun"
# The role every node plays (labels.ROLE, JOB_ROLE): they run the same template.
ROLE_NODE = "node"


class TorchrunJob(BatchJob):
    name = "torchrun"

    def recognises(self, job: Mapping[str, Any]) -> bool:
        return (
            super().recognises(job)
            and dig(job, "spec", "completionMode") == "Indexed"
            and mapping(job, "metadata", "labels").get(labels.FRAMEWORK) == FRAMEWORK_VALUE
        )

    def build(
        self, spec: JobSpec, *, name: str, task: TaskIdentity, attempt: int, queued_at: datetime
    ) -> dict[str, Any]:
        from airflow_jobs_plugin.jobs.manifests import build_torchrun  # see BatchJob.build

        return build_torchrun(spec, name=name, task=task, attempt=attempt, queued_at=queued_at)

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


TORCHRUN = TorchrunJob()
