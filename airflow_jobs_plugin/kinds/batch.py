"""A ``batch/v1`` Job: one pod template run ``parallelism`` times, suspended through ``spec.suspend``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import labels
from ..objects import as_int, dig, mapping
from ..resources import JOBS
from .base import WORKER, JobKind, PodSet

# kubernetes/kubernetes pkg/controller/job/job_controller.go (1.32): a Job without backoffLimit gets 6.
DEFAULT_BACKOFF_LIMIT = 6


class BatchJob(JobKind):
    name = "Job"
    resource = JOBS
    pod_job_label = labels.LEGACY_JOB_NAME
    succeeded_condition = "Complete"

    def recognises(self, job: Mapping[str, Any]) -> bool:
        return job.get("kind") in (None, "Job") and dig(job, "spec", "mpiReplicaSpecs") is None

    def is_suspended(self, job: Mapping[str, Any]) -> bool:
        return bool(dig(job, "spec", "suspend"))

    def suspend_patch(self, suspend: bool) -> dict[str, Any]:
        return {"suspend": suspend}

    def pod_sets(self, job: Mapping[str, Any]) -> list[PodSet]:
        parallelism = as_int(dig(job, "spec", "parallelism"), 1)
        count = 1 if parallelism is None else parallelism
        # The Job controller never runs more pods than completions remain (kubernetes/kubernetes
        # pkg/controller/job/job_controller.go, manageJob's wantActive, v1.32).
        completions = as_int(dig(job, "spec", "completions"))
        if completions is not None:
            count = min(count, completions)
        template = mapping(job, "spec", "template")
        role = mapping(template, "metadata", "labels").get(labels.ROLE) or WORKER
        return [PodSet(str(role), count, template)]

    def backoff_limit(self, job: Mapping[str, Any]) -> int | None:
        return as_int(dig(job, "spec", "backoffLimit"), DEFAULT_BACKOFF_LIMIT)

    def pod_failures(self, job: Mapping[str, Any]) -> int:
        return as_int(dig(job, "status", "failed"), 0) or 0

    def expected_replicas(self, job: Mapping[str, Any]) -> list[tuple[str, int]]:
        return [(pod_set.role, i) for pod_set in self.pod_sets(job) for i in range(pod_set.count)]

    def clear_run(self, spec: dict[str, Any], ended: Mapping[str, Any]) -> None:
        # A run the product ended through its own deadline (quota.ledger.verdict_patch) gets the
        # author's deadline and parallelism back.
        for field, value in ended.items():
            if value is None:
                spec.pop(field, None)
            else:
                spec[field] = value
        # The API server defaults the selector (and its label on the template) from the Job's uid;
        # a new object with it is refused unless manualSelector is set.
        spec.pop("selector", None)
        spec.pop("manualSelector", None)

    def owns_labels(self, job: Mapping[str, Any], pod_labels: Mapping[str, Any]) -> bool:
        name = dig(job, "metadata", "name")
        if name not in (pod_labels.get(labels.BATCH_JOB_NAME), pod_labels.get(labels.LEGACY_JOB_NAME)):
            return False
        # A job recreated under the same name must not adopt the pods of its predecessor.
        uid = dig(job, "metadata", "uid")
        pod_uid = pod_labels.get(labels.CONTROLLER_UID) or pod_labels.get(labels.LEGACY_CONTROLLER_UID)
        return not (uid and pod_uid and pod_uid != uid)


BATCH_JOB = BatchJob()
