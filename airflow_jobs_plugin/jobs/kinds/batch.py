"""A ``batch/v1`` Job: one pod template run ``parallelism`` times, suspended through ``spec.suspend``."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow_jobs_plugin.cluster.objects import as_int, condition_true, dig, items, mapping
from airflow_jobs_plugin.cluster.resources import JOBS
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.kinds.base import WORKER, JobKind, PodSet
from airflow_jobs_plugin.jobs.pod_template import (
    author_init_containers,
    build_template,
    deadlines,
    identity_annotations,
    main_container,
    metadata,
    object_labels,
    pod_env,
    resource_requirements,
)
from airflow_jobs_plugin.jobs.spec import MAIN_CONTAINER

if TYPE_CHECKING:
    from airflow_jobs_plugin.jobs.spec import JobSpec, TaskIdentity

# kubernetes/kubernetes pkg/controller/job/job_controller.go (1.32): a Job without backoffLimit gets 6.
DEFAULT_BACKOFF_LIMIT = 6
# kubernetes v1.36.3 pkg/apis/batch/v1/defaults.go: the backoffLimit of a Job with backoffLimitPerIndex.
_MAX_INT32 = 2**31 - 1

# The arguments that describe an MPI job's launcher and workers apart, which one pod has not.
REFUSED_ARGUMENTS = ("launcher_gpus", "launcher_cpu", "launcher_memory", "worker_command")

# The shortest deadline the API accepts: the Job controller fails the job at its next sync.
ENDING_DEADLINE_SECONDS = 1


class BatchJob(JobKind):
    name = "Job"
    resource = JOBS
    pod_job_label = labels.LEGACY_JOB_NAME
    succeeded_condition = "Complete"
    # The selector the API server generates from the Job's uid (and the fields beside it): read by nothing
    # from the watch's cache, and unique per Job, so caching it would cost a copy per Job.
    cache_dropped_spec = frozenset({"selector", "manualSelector", "podReplacementPolicy"})

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

    def takes(self, framework: str, workers: int) -> bool:
        del framework, workers  # a single pod: what no more specific kind takes
        return True

    def argument_problems(self, values: Mapping[str, Any], given: AbstractSet[str]) -> list[tuple[str, str]]:
        # ``workers`` is absent from ``values`` while a template holds it (the check at parse time).
        but = f", but workers is {values['workers']}" if "workers" in values else ""
        return [
            (name, f"only applies to MPI jobs (workers > 1){but} -- remove it")
            for name in REFUSED_ARGUMENTS
            if name in given
        ]

    def build(
        self, spec: JobSpec, *, name: str, task: TaskIdentity, attempt: int, queued_at: datetime
    ) -> dict[str, Any]:
        """A suspended batch/v1 Job running one pod (``workers == 1``)."""
        pod_labels = {**object_labels(spec, task, attempt), labels.ROLE: WORKER, labels.RANK: "0"}
        env = pod_env(spec, name, attempt, role=WORKER, rank=0, world_size=spec.workers)
        return {
            "apiVersion": self.resource.api_version,
            "kind": self.resource.kind,
            "metadata": metadata(spec, name, task, attempt, queued_at, gpus=self.total_gpus(spec)),
            "spec": {
                "suspend": True,
                "parallelism": 1,
                "completions": 1,
                **deadlines(spec),
                "podFailurePolicy": pod_failure_policy(spec),
                "template": job_pod_template(spec, task, pod_labels, env),
            },
        }

    def ending_spec(self, job: Mapping[str, Any]) -> dict[str, Any]:
        """A batch/v1 Job is ended through its own ``activeDeadlineSeconds``, which the API lets a Job
        change at any time (``pkg/apis/batch/validation/validation.go``, Kubernetes 1.32:
        ``ValidateJobSpecUpdate`` keeps completions, selector, template, completionMode,
        podFailurePolicy and backoffLimitPerIndex immutable, not the deadline). The Job controller
        (``pkg/controller/job/job_controller.go``, ``pastActiveDeadline`` from ``status.startTime``)
        then writes FailureTarget and Failed (DeadlineExceeded) and deletes the pods itself, so
        ``kubectl get jobs`` shows the job Failed, never ``Suspended`` as a queued one. A job still
        suspended (queued, stopped) has no start time: it is resumed with ``parallelism: 0``, which
        starts the deadline's clock without creating a pod."""
        spec: dict[str, Any] = {"activeDeadlineSeconds": ENDING_DEADLINE_SECONDS}
        if self.is_suspended(job):
            spec.update(suspend=False, parallelism=0)
        return spec

    def ended_spec_record(self, job: Mapping[str, Any]) -> dict[str, Any] | None:
        if labels.ENDED_SPEC in mapping(job, "metadata", "annotations"):
            return None  # a second ruling must not record the ending values
        job_spec = mapping(job, "spec")
        return {field: job_spec.get(field) for field in self.ending_spec(job) if field != "suspend"}

    def still_counts_pods(self, job: Mapping[str, Any]) -> bool:
        # The Job controller (pkg/controller/job/job_controller.go, 1.31+) writes SuccessCriteriaMet and
        # FailureTarget only after counting the pods that decided them, deleting the others.
        counted = (as_int(dig(job, "status", "active"), 0) or 0) + (
            as_int(dig(job, "status", "terminating"), 0) or 0
        )
        return counted > 0 and not (condition_true(job, "Complete") or condition_true(job, "Failed"))

    def clear_run(self, spec: dict[str, Any], ended: Mapping[str, Any]) -> None:
        # A run the product ended through its own deadline (ending_spec) gets the
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

    def fill_stored_defaults(self, obj: dict[str, Any]) -> None:
        """``SetDefaults_Job`` and ``SetDefaults_PodFailurePolicyOnPodConditionsPattern`` (kubernetes
        v1.36.3 ``pkg/apis/batch/v1/defaults.go``), then what the registry writes on create
        (``pkg/registry/batch/job/strategy.go``, ``generateSelector``): unless ``manualSelector``, a
        selector on the Job's uid, and the job-name and controller-uid labels, each in its current and
        its legacy spelling, on the pod template."""
        spec = obj["spec"]
        if spec.get("completions") is None and spec.get("parallelism") is None:
            spec["completions"] = 1
            spec["parallelism"] = 1
        spec.setdefault("parallelism", 1)
        per_index = spec.get("backoffLimitPerIndex") is not None
        spec.setdefault("backoffLimit", _MAX_INT32 if per_index else DEFAULT_BACKOFF_LIMIT)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("suspend", False)
        failures = spec.get("podFailurePolicy")
        spec.setdefault("podReplacementPolicy", "Failed" if failures is not None else "TerminatingOrFailed")
        spec.setdefault("manualSelector", False)
        for rule in items(spec, "podFailurePolicy", "rules"):
            for pattern in items(rule, "onPodConditions") if isinstance(rule, Mapping) else []:
                if isinstance(pattern, dict):
                    pattern.setdefault("status", "True")
        if spec.get("manualSelector") is True:
            return
        meta = mapping(obj, "metadata")
        name, uid = str(meta.get("name") or ""), str(meta.get("uid") or "")
        template = spec.setdefault("template", {})
        if not isinstance(template, dict):
            return
        template_meta = template.setdefault("metadata", {})
        template_labels = template_meta.setdefault("labels", {}) if isinstance(template_meta, dict) else None
        if isinstance(template_labels, dict):
            for key in (labels.LEGACY_JOB_NAME, labels.BATCH_JOB_NAME):
                template_labels.setdefault(key, name)
            for key in (labels.LEGACY_CONTROLLER_UID, labels.CONTROLLER_UID):
                template_labels.setdefault(key, uid)
        selector = spec.setdefault("selector", {})
        match = selector.setdefault("matchLabels", {}) if isinstance(selector, dict) else None
        if isinstance(match, dict):
            match.setdefault(labels.CONTROLLER_UID, uid)

    def owns_labels(self, job: Mapping[str, Any], pod_labels: Mapping[str, Any]) -> bool:
        name = dig(job, "metadata", "name")
        if name not in (pod_labels.get(labels.BATCH_JOB_NAME), pod_labels.get(labels.LEGACY_JOB_NAME)):
            return False
        # A job recreated under the same name must not adopt the pods of its predecessor.
        uid = dig(job, "metadata", "uid")
        pod_uid = pod_labels.get(labels.CONTROLLER_UID) or pod_labels.get(labels.LEGACY_CONTROLLER_UID)
        return not (uid and pod_uid and pod_uid != uid)


def pod_failure_policy(spec: JobSpec) -> dict:
    """The author's fatal and retryable exit codes, and a disrupted pod, fail the Job at once
    (``FailJob``): the product tells them apart and decides on a new attempt (``jobs/manifests.py``)."""
    rules: list[dict] = []
    for codes in (spec.fatal_exit_codes, spec.retryable_exit_codes):
        if codes:
            rules.append(
                {
                    "action": "FailJob",
                    "onExitCodes": {"containerName": MAIN_CONTAINER, "operator": "In", "values": list(codes)},
                }
            )
    rules.append({"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]})
    return {"rules": rules}


def job_pod_template(spec: JobSpec, task: TaskIdentity, pod_labels: dict[str, str], env: list[dict]) -> dict:
    """The pod template of a batch/v1 Job's pods: the main container and the author's init containers,
    never restarted in place (``restartPolicy: Never``, which podFailurePolicy requires)."""
    container = main_container(
        spec,
        env=env,
        command=spec.command,
        args=spec.args,
        resources=resource_requirements(spec, spec.cpu, spec.memory, spec.gpus),
    )
    return build_template(
        spec,
        labels=pod_labels,
        annotations=identity_annotations(spec, task),
        container=container,
        init_containers=author_init_containers(spec, env),
        restart_policy="Never",
    )


BATCH_JOB = BatchJob()
