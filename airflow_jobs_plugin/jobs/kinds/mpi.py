"""A kubeflow ``MPIJob`` (``kubeflow.org/v2beta1``): a launcher and N workers, run by mpi-operator.

The rules are mpi-operator's (kubeflow/mpi-operator v0.8.0, ``pkg/controller/mpi_job_controller.go``):
``runPolicy.suspend`` suspends it, its pods carry ``training.kubeflow.org/job-name`` / ``job-role`` /
``replica-index``, the launcher is a batch/v1 Job ``<name>-launcher`` and the workers are pods
``<name>-worker-<i>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow_jobs_plugin.cluster.objects import as_int, dig, mapping, rfc3339
from airflow_jobs_plugin.cluster.resources import JOBS, Resource
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.bounded import bounded
from airflow_jobs_plugin.jobs.kinds.base import (
    COMPLETION_INDEX,
    LAUNCHER,
    LAUNCHER_RANK,
    WORKER,
    Ending,
    EndingWrite,
    JobKind,
    PodSet,
    Then,
)
from airflow_jobs_plugin.jobs.kinds.batch import ENDING_DEADLINE_SECONDS
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
from airflow_jobs_plugin.jobs.spec import WAIT_FOR_WORKERS_CONTAINER

if TYPE_CHECKING:
    from airflow_jobs_plugin.jobs.spec import JobSpec, TaskIdentity

# The MPIJob custom resource (kubeflow/mpi-operator v0.8.0 ``pkg/apis/kubeflow/v2beta1``), served only
# where the MPI operator's CRD is installed (``MPIJob.resource_may_be_absent``).
MPIJOBS = Resource("kubeflow.org", "v2beta1", "mpijobs", "MPIJob")
# kubeflow/mpi-operator pkg/controller/mpi_job_controller.go (v0.5.0 .. v0.8.0): launcherSuffix.
LAUNCHER_SUFFIX = "-launcher"
# What a worker runs unless the author says: the sshd that mpirun reaches it through.
DEFAULT_WORKER_COMMAND = ("/usr/sbin/sshd", "-De")
WAIT_FOR_WORKERS_RESOURCES = {"cpu": "100m", "memory": "64Mi"}
# Sleep between DNS checks; the launcher waits at most as long as the workers take to become Ready.
_WAIT_SLEEP_SECONDS = 2
# The arguments only an MPIJob reads (what a torchrun job refuses: TorchrunJob.argument_problems).
MPI_ARGUMENTS = (
    "launcher_gpus",
    "launcher_cpu",
    "launcher_memory",
    "worker_command",
    "wait_for_workers",
    "launcher_creation_policy",
    "mpi_implementation",
)
# kubeflow/mpi-operator pkg/apis/kubeflow/v2beta1/default.go (v0.8.0): runPolicy.backoffLimit's default.
DEFAULT_BACKOFF_LIMIT = 6


class MPIJob(JobKind):
    name = "MPIJob"
    framework = "mpi"
    resource = MPIJOBS
    # The MPIJob CRD comes with the MPI operator, which a cluster may not run.
    resource_may_be_absent = True
    # mpi-operator (v0.5-v0.8) applies runPolicy.ttlSecondsAfterFinished to the launcher Job only.
    outlives_its_ttl = True
    ranks_in_launcher_log = True
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

    def priority_classes(self, job: Mapping[str, Any]) -> list[str]:
        # An MPIJob names one more: its gang's (runPolicy.schedulingPolicy.priorityClass), the PodGroup's
        # under gang scheduling (kubeflow/mpi-operator v0.8.2 pkg/controller/podgroup.go) and what Kueue
        # orders it by before its templates' (kubernetes-sigs/kueue v0.19.2
        # pkg/controller/jobs/mpijob/mpijob_controller.go, PriorityClass).
        gang = dig(job, "spec", "runPolicy", "schedulingPolicy", "priorityClass")
        return [*([gang] if isinstance(gang, str) and gang else []), *super().priority_classes(job)]

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
        """The batch/v1 Job mpi-operator creates for the launcher (``launcherSuffix``)."""
        return f"{dig(job, 'metadata', 'name')}{LAUNCHER_SUFFIX}"

    def pod_creators(self, job: Mapping[str, Any]) -> list[str]:
        # The launcher is a Job of the Job controller; the workers are mpi-operator's own pods.
        return [*super().pod_creators(job), self.launcher_name(job)]

    def takes(self, framework: str, workers: int) -> bool:
        # One worker is a single pod, which a batch/v1 Job runs without an operator.
        return framework == self.framework and workers >= 2

    def pod_count(self, spec: JobSpec) -> int:
        return spec.workers + 1  # the launcher

    def total_gpus(self, spec: JobSpec) -> int:
        return spec.workers * spec.gpus + spec.launcher_gpus

    def argument_problems(self, values: Mapping[str, Any], given: AbstractSet[str]) -> list[tuple[str, str]]:
        if (
            "launcher_gpus" in values
            and "gpus" in values
            and values["launcher_gpus"] not in (0, values["gpus"])
        ):
            return [
                (
                    "launcher_gpus",
                    f"must be 0 or equal to gpus ({values['gpus']}), got {values['launcher_gpus']}: a launcher "
                    "with GPUs runs as an extra MPI worker with the same number of slots",
                )
            ]
        return []

    def build(
        self, spec: JobSpec, *, name: str, task: TaskIdentity, attempt: int, queued_at: datetime
    ) -> dict[str, Any]:
        """A suspended MPIJob: one launcher and ``spec.workers`` workers."""
        base_labels = object_labels(spec, task, attempt)
        pod_annotations = identity_annotations(spec, task)
        hosts = world_size(spec)

        launcher_rank = 0 if launcher_works(spec) else LAUNCHER_RANK
        launcher_env = pod_env(spec, name, attempt, role=LAUNCHER, rank=launcher_rank, world_size=hosts)
        launcher_init = author_init_containers(spec, launcher_env)
        if spec.wait_for_workers:
            launcher_init.append(_wait_for_workers_container(spec, launcher_env))
        launcher_resources = resource_requirements(
            spec,
            spec.launcher_cpu if spec.launcher_cpu is not None else spec.cpu,
            spec.launcher_memory if spec.launcher_memory is not None else spec.memory,
            spec.launcher_gpus,
        )
        launcher = build_template(
            spec,
            labels={**base_labels, labels.ROLE: LAUNCHER},
            annotations=pod_annotations,
            container=main_container(
                spec, env=launcher_env, command=spec.command, args=spec.args, resources=launcher_resources
            ),
            init_containers=launcher_init,
            restart_policy=None,  # set per replica below; the MPI operator warns about one in the template
        )

        # The workers share one template: each reads its rank from the operator's replica-index label.
        worker_rank = {"fieldRef": {"fieldPath": f"metadata.labels['{labels.MPI_REPLICA_INDEX}']"}}
        worker_env = pod_env(spec, name, attempt, role=WORKER, rank=worker_rank, world_size=hosts)
        worker = build_template(
            spec,
            labels={**base_labels, labels.ROLE: WORKER},
            annotations=dict(pod_annotations),
            container=main_container(
                spec,
                env=worker_env,
                command=spec.worker_command or DEFAULT_WORKER_COMMAND,
                args=None,
                resources=resource_requirements(spec, spec.cpu, spec.memory, spec.gpus),
            ),
            init_containers=author_init_containers(spec, worker_env),
            restart_policy=None,
        )

        mpi_spec: dict[str, Any] = {
            "slotsPerWorker": max(spec.gpus, 1),
            "mpiImplementation": spec.mpi_implementation,
            "launcherCreationPolicy": spec.launcher_creation_policy,
        }
        if launcher_works(spec):
            mpi_spec["runLauncherAsWorker"] = True
        mpi_spec["runPolicy"] = {"suspend": True, "cleanPodPolicy": "Running", **deadlines(spec)}
        mpi_spec["mpiReplicaSpecs"] = {
            "Launcher": {"replicas": 1, "restartPolicy": "Never", "template": launcher},
            "Worker": {"replicas": spec.workers, "restartPolicy": "OnFailure", "template": worker},
        }
        return {
            "apiVersion": self.resource.api_version,
            "kind": self.resource.kind,
            "metadata": metadata(spec, name, task, attempt, queued_at, gpus=self.total_gpus(spec)),
            "spec": mpi_spec,
        }

    def fill_stored_defaults(self, obj: dict[str, Any]) -> None:
        """The MPIJob CRD's schema defaults, which the API server writes (kubeflow/mpi-operator v0.8.2
        ``manifests/base/kubeflow.org_mpijobs.yaml``: slotsPerWorker, sshAuthMountPath,
        mpiImplementation, launcherCreationPolicy, runLauncherAsWorker, runPolicy.suspend), and those
        the operator applies when it reads one (``pkg/apis/kubeflow/v2beta1/default.go``: cleanPodPolicy
        None, a launcher's one replica restarted OnFailure, workers' none restarted Never). A missing
        ``runPolicy.backoffLimit`` reaches the launcher Job as nothing, which the Job API defaults."""
        spec = obj["spec"]
        for key, default in (
            ("slotsPerWorker", 1),
            ("sshAuthMountPath", "/root/.ssh"),
            ("mpiImplementation", "OpenMPI"),
            ("launcherCreationPolicy", "AtStartup"),
            ("runLauncherAsWorker", False),
        ):
            spec.setdefault(key, default)
        policy = spec.setdefault("runPolicy", {})
        if isinstance(policy, dict):
            policy.setdefault("cleanPodPolicy", "None")
            policy.setdefault("suspend", False)
            policy.setdefault("backoffLimit", DEFAULT_BACKOFF_LIMIT)
        replicas = spec.get("mpiReplicaSpecs")
        if not isinstance(replicas, dict):
            return
        for role, count, restart in (("Launcher", 1, "OnFailure"), ("Worker", 0, "Never")):
            if isinstance(replicas.get(role), dict):
                replicas[role].setdefault("replicas", count)
                replicas[role].setdefault("restartPolicy", restart)

    def ttl_after_finished(self, job: Mapping[str, Any]) -> int | None:
        return as_int(dig(job, "spec", "runPolicy", "ttlSecondsAfterFinished"))

    def cancel_ending(self, suspended: bool) -> Ending:
        # A suspended MPIJob (queued or stopped) is deleted: mpi-operator has no failed state for a job
        # that never started (a suspended MPIJob's launcher is suspended too, and a deadline never
        # counts on a suspended Job), and unsuspending it to fail it would place its workers.
        return Ending.DELETE if suspended else Ending.LAUNCHER_DEADLINE

    def pod_outlives_job(self, role: str) -> bool:
        # The workers never end by themselves: mpi-operator (pkg/controller/mpi_job_controller.go,
        # v0.8.0, deleteWorkerPods after the launcher finished) deletes them per cleanPodPolicy, and
        # with None they keep running.
        return role != LAUNCHER

    def replaces_failed_pod(self, role: str) -> bool:
        # The launcher Job's controller replaces a failed launcher pod. mpi-operator v0.8.2
        # (pkg/controller/mpi_job_controller.go) never replaces a failed worker (getOrCreateWorker creates
        # only missing pods) nor fails the MPIJob for it (updateMPIJobStatus: only evicted workers do):
        # the job runs on until mpirun on the launcher loses the rank and fails.
        return role == LAUNCHER

    # Ending a ruled MPIJob --------------------------------------------------------------------------
    # The verdict's write changes no spec of an MPIJob (ending_spec is empty): mpi-operator copies
    # runPolicy.activeDeadlineSeconds into the launcher Job only when it creates it (newLauncherJob), so
    # a deadline written on the MPIJob later ends nothing. It is ended by the writes below instead.

    def _verdict(self, job: Mapping[str, Any]) -> str | None:
        return mapping(job, "metadata", "annotations").get(labels.VERDICT)

    def ruled_but_running(self, job: Mapping[str, Any]) -> bool:
        """Carries a failing verdict of the product (a cancel's too) but still runs: its launcher Job has
        yet to be ended, for example because the process that ruled stopped between the two writes."""
        return not self.is_suspended(job) and bool(self._verdict(job)) and not self.is_finished(job)

    def ruled_while_queued(self, job: Mapping[str, Any]) -> bool:
        """Ruled failed while queued (suspended), which the cluster does not show ended yet. A cancel
        deletes such a job instead (:meth:`cancel_ending`)."""
        if not self.is_suspended(job) or self.is_finished(job):
            return False
        verdict = self._verdict(job)
        return bool(verdict) and verdict != "Cancelled"

    def queued_failure_patch(self, job: Mapping[str, Any], now: datetime) -> dict[str, Any]:
        """The status write that ends an MPIJob ruled while queued: its ``Failed`` condition (the
        verdict's reason and message) and completion time, conditional on the version read.

        mpi-operator (``pkg/controller/mpi_job_controller.go``, v0.8) has no failed state for a job that
        never started: it fails an MPIJob only from its launcher Job's failure, and resuming the job to
        fail it would create its workers (``getOrCreateWorker`` runs as soon as it is not suspended) and
        run the launcher's pod. But its ``syncHandler`` returns at once, touching nothing, for an MPIJob
        whose status is finished (``isFinished``: a Succeeded or Failed condition) with a completion
        time, so this write is its end: the job stays suspended (no pod is ever created), the operator
        keeps the status as written, and the condition goes last, as the operator's own
        ``setCondition`` puts a new one (the one ``kubectl get mpijobs -o wide`` and ``describe`` read as
        its state). Its Running condition, if any, is set False as ``filterOutCondition`` does when a
        job fails."""
        annotations = mapping(job, "metadata", "annotations")
        stamp = rfc3339(now)
        kept = []
        for condition in dig(job, "status", "conditions") or []:
            if not isinstance(condition, Mapping) or condition.get("type") == "Failed":
                continue
            if condition.get("type") == "Running":
                condition = {**condition, "status": "False"}
            kept.append(dict(condition))
        failed = {
            "type": "Failed",
            "status": "True",
            "reason": annotations.get(labels.VERDICT) or "Failed",
            "message": bounded(annotations.get(labels.VERDICT_MESSAGE) or "ruled failed while queued"),
            "lastUpdateTime": stamp,
            "lastTransitionTime": stamp,
        }
        version = dig(job, "metadata", "resourceVersion")
        return {
            "metadata": {"resourceVersion": version} if version else {},
            "status": {"conditions": [*kept, failed], "completionTime": stamp},
        }

    def ending_writes(self, job: Mapping[str, Any], now: datetime) -> list[EndingWrite]:
        """End an MPIJob the product has ruled failed, so that the cluster shows it failed.

        Running: through its launcher Job, a batch/v1 Job whose deadline may change at any time
        (``BatchJob.ending_spec``). Once the Job controller fails it (DeadlineExceeded, pods deleted),
        ``updateMPIJobFailedStatus`` sets the MPIJob's ``Failed`` condition and completion time, and
        ``cleanPodPolicy: Running`` deletes the workers still running: ``kubectl get jobs`` shows the
        launcher Failed, where suspending would have shown it Suspended, which is how a queued job looks.
        The operator's own updates of the launcher (``suspend`` only) are compare-and-swap writes from
        its informer, so they never put the old deadline back. With no launcher Job yet (an operator
        that waits for its workers before creating it) the MPIJob is suspended instead, which frees its
        GPUs at once; a cancelled one is deleted with its pods, since a suspended MPIJob never finishes
        and so no TTL would ever remove it.

        Queued or stopped: it stays suspended and gets its ``Failed`` condition from the product
        (:meth:`queued_failure_patch`); a 404 or 409 there (gone, or changed since it was read: resumed,
        finished, ruled again) leaves the next look at the new version to decide afresh. Then its
        launcher Job, created suspended with the MPIJob, is ended as a queued batch Job is: resumed with
        no pod and a deadline that has passed, so the Job controller fails it and ``kubectl get jobs``
        never shows it Suspended. Only after the status write: the operator re-suspends the launcher of
        a suspended MPIJob (``syncHandler``: ``suspend`` aligned with the MPIJob's), except once the
        MPIJob is finished, when it returns before that.
        """
        name = str(dig(job, "metadata", "name") or "")
        launcher = self.launcher_name(job)
        if self.ruled_while_queued(job):
            return [
                EndingWrite(
                    MPIJOBS,
                    name,
                    self.queued_failure_patch(job, now),
                    subresource="status",
                    then=Then.NEXT,
                    if_absent=Then.STOP,
                    if_conflict=Then.STOP,
                ),
                EndingWrite(
                    JOBS,
                    launcher,
                    {
                        "spec": {
                            "activeDeadlineSeconds": ENDING_DEADLINE_SECONDS,
                            "suspend": False,
                            "parallelism": 0,
                        }
                    },
                ),
            ]
        if not self.ruled_but_running(job):
            return []
        by_launcher = EndingWrite(
            JOBS, launcher, {"spec": {"activeDeadlineSeconds": ENDING_DEADLINE_SECONDS}}, if_absent=Then.NEXT
        )
        if self._verdict(job) == "Cancelled":
            return [by_launcher, EndingWrite(MPIJOBS, name, None, if_absent=None)]
        return [by_launcher, EndingWrite(MPIJOBS, name, {"spec": self.suspend_patch(True)})]


def worker_host(job: str, index: int | str, namespace: str) -> str:
    """The DNS name of MPI worker ``index``, as the MPI operator publishes it and writes it in the hostfile.

    kubeflow/mpi-operator ``pkg/controller/mpi_job_controller.go`` (v0.5.0 .. v0.8.0): worker pods get
    ``hostname: <job>-worker-<i>`` and ``subdomain: <job>``, the name of the headless Service
    ``newJobService`` creates; ``newConfigMap`` writes ``<job>-worker-<i>.<job>.<ns>.svc``. (Before
    v0.5 the Service was ``<job>-worker``: a name that no longer resolves.) Shell variables may stand
    for the parts, which is how the ``wait-for-workers`` script uses this one rule.
    """
    return f"{job}-worker-{index}.{job}.{namespace}.svc"


def launcher_works(spec: JobSpec) -> bool:
    """An MPI job's launcher with GPUs also runs ranks: mpi-operator hides GPUs from a launcher unless
    ``runLauncherAsWorker`` is set, and with it lists the launcher first in the hostfile
    (``newConfigMap``) and gives it replica index 0, the workers 1..N (``workerReplicaIndexLabel``,
    kubeflow/mpi-operator ``pkg/controller/mpi_job_controller.go``, v0.7.0 and v0.8.0)."""
    return spec.launcher_gpus > 0


def world_size(spec: JobSpec) -> int:
    """Hosts of an MPI job that run ranks: the workers, plus a launcher that works (see :func:`launcher_works`)."""
    return spec.workers + (1 if launcher_works(spec) else 0)


def _wait_script(workers: int) -> str:
    host = worker_host("$JOB_NAME", "$i", "$JOB_NAMESPACE")
    return f"""\
if command -v getent >/dev/null 2>&1; then resolve() {{ getent hosts "$1"; }}
elif command -v nslookup >/dev/null 2>&1; then resolve() {{ nslookup "$1"; }}
else echo "wait-for-workers: the image has neither getent nor nslookup; set wait_for_workers=False" >&2; exit 1
fi
i=0
while [ "$i" -lt {workers} ]; do
  host="{host}"
  if ! resolve "$host" >/dev/null 2>&1; then
    echo "waiting for $host"
    until resolve "$host" >/dev/null 2>&1; do sleep {_WAIT_SLEEP_SECONDS}; done
  fi
  i=$((i + 1))
done
echo "all {workers} workers resolve"
"""


def _wait_for_workers_container(spec: JobSpec, env: list[dict]) -> dict:
    container: dict[str, Any] = {
        "name": WAIT_FOR_WORKERS_CONTAINER,
        "image": spec.image,
        "command": ["sh", "-c", _wait_script(spec.workers)],
        "env": [dict(e) for e in env]
        + [{"name": "JOB_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
        "resources": {
            "requests": dict(WAIT_FOR_WORKERS_RESOURCES),
            "limits": dict(WAIT_FOR_WORKERS_RESOURCES),
        },
        # A loop of name lookups needs no privilege; this much the restricted Pod Security level asks of
        # every container (check_allowPrivilegeEscalation.go, check_capabilities_restricted.go, kubernetes
        # v1.36.3), so a namespace run at restricted refuses no pod for the product's own container.
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    if spec.image_pull_policy:
        container["imagePullPolicy"] = spec.image_pull_policy
    return container


MPI_JOB = MPIJob()
