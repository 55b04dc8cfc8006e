"""JobSpec -> the Kubernetes object to create: a ``batch/v1`` Job or a ``kubeflow.org/v2beta1`` MPIJob.

Pure: returns plain JSON-shaped dicts, ready for the API. Decisions worth knowing:

* **Always suspended** (``spec.suspend`` / ``spec.runPolicy.suspend``): the job waits in the cluster for
  the quota pool to admit it, and admission is just unsuspending it. While suspended, Kubernetes does
  not run ``activeDeadlineSeconds``, so queueing time never counts against ``active_deadline``.
* **Pod failure policy** (single Job): the author's fatal *and* retryable exit codes fail the Job at
  once (``FailJob``) instead of burning pod retries; the product then tells them apart by exit code
  (fatal: stop; retryable: new attempt after back-off). A pod with the ``DisruptionTarget`` condition
  (preemption, node drain, node lost, kubelet eviction) also fails the Job at once: recreating the pod
  inside the same Job would keep the GPU reservation while the cluster is short of capacity, whereas a
  failed attempt releases it and the product resubmits a new attempt through the queue with back-off
  (bounded by ``max_attempts``). Every other non-zero exit counts against ``backoff_limit``.
  The MPIJob API has no pod failure policy: for MPI jobs the product applies these exit-code rules
  to the launcher's exit code itself.
* **Environment** in every container (init containers too): ``JOB_USER``, ``JOB_GROUP`` (exact values),
  ``JOB_NAME`` (this attempt's job name), ``JOB_ATTEMPT``, ``JOB_ROLE`` (``worker`` or ``launcher``),
  ``JOB_RANK`` and ``JOB_WORLD_SIZE`` (hosts that run ranks). A single-pod job is worker 0 of 1. MPI
  workers read their rank from the MPI operator's replica-index label through the downward API. The
  launcher's ``JOB_RANK`` is ``-1``: always set and always an integer, so ``int(os.environ["JOB_RANK"])``
  works everywhere, and never a valid worker index. A launcher with GPUs is itself the first host
  (:func:`launcher_works`): it is rank 0, the workers 1..N, and ``JOB_WORLD_SIZE`` is N+1, the
  numbering mpi-operator's hostfile and replica-index labels use then. A container without GPUs gets
  ``NVIDIA_VISIBLE_DEVICES=void`` so a CUDA base image on a GPU node cannot use GPUs it was not charged for.
* **Labels**: MANAGED_BY, GROUP, USER, TASK_KEY, ATTEMPT (plus the author's) on the job and every pod
  template; ROLE and RANK only on pod templates, where they describe a replica. MPI worker pods share
  one template, so their RANK comes from the operator's ``training.kubeflow.org/replica-index`` label
  (see :func:`pod_role_and_rank`); the launcher has no RANK label (``-1`` is not a valid label value).
* **Annotations**: the exact Airflow identifiers, exact group/user and the author's on the job and
  pods; GPUS, PRIORITY, QUEUED_AT and REQUEUE_COUNT only on the job, because they change over the
  job's life and a pod copy would go stale.
* **MPI**: ``slotsPerWorker`` = GPUs per worker (at least 1); the launcher pod uses
  ``restartPolicy: Never`` (every try keeps its own pod, log and exit code, bounded by
  ``backoff_limit``), workers ``OnFailure`` (a crashed ``sshd`` comes back in place; the job shows it
  as degraded).
* **The launcher waits for the names the operator publishes**: the operator's headless Service is
  named after the MPIJob and each worker pod gets ``hostname: <job>-worker-<i>``, ``subdomain: <job>``
  (kubeflow/mpi-operator ``pkg/controller/mpi_job_controller.go``, ``newJobService`` / ``newWorker``,
  v0.5.0 through v0.8.0), so a worker is reachable as :func:`worker_host` once it is Ready (the Service
  does not ``publishNotReadyAddresses`` unless ``runLauncherAsWorker``). ``launcherCreationPolicy``
  defaults to ``WaitForWorkersReady``, but that policy is only checked when the operator *creates* the
  launcher Job, and for an MPIJob created suspended (always, here) the operator creates it at its first
  sync, suspended, because no worker exists yet and ``countReadyWorkerPods(worker) == len(worker)``
  reads ``0 == 0``; on resume the existing launcher is simply unsuspended with the workers
  (kubeflow/mpi-operator issue #615, open at v0.8.0). So the launcher also runs a ``wait-for-workers``
  init container (the launcher image, a ``sh`` loop over ``getent hosts`` / ``nslookup``) that waits
  for exactly the names of :func:`worker_host`: the launcher shows ``Init:N/M``, ``PodInitializing``,
  then ``Running``. The author's ``init_containers`` (a data fetch, say) run first, in every replica.
* **cleanPodPolicy: Running**: when the launcher ends, the operator deletes the workers that are
  still Running or Pending (``deleteWorkerPods``), so an ``sshd`` that never exits gives its GPUs back
  at once; workers that already ended stay, with their logs, until the MPIJob's TTL. The v2beta1
  default is ``None`` (``setDefaultsRunPolicy`` in ``pkg/apis/kubeflow/v2beta1/default.go``), which
  would leave every worker holding its GPUs until the TTL deletes the job. Nothing of the ranks is
  lost: their output reaches ``mpirun``, i.e. the launcher's log, which the operator never cleans (a
  worker pod's own log is its ``sshd``'s); ``airflow-jobs logs JOB --rank N`` reads rank N's lines
  there once the worker is gone (:mod:`airflow_jobs_plugin.logs.rank_log`).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from airflow_jobs_plugin.cluster.objects import rfc3339 as rfc3339
from airflow_jobs_plugin.jobs import kinds
from airflow_jobs_plugin.jobs import labels as keys
from airflow_jobs_plugin.jobs.kinds import torchrun as torchrun_kind
from airflow_jobs_plugin.jobs.spec import (
    DEFAULT_JOB_SERVICE_ACCOUNT,
    DEFAULT_REQUEUE_LIMIT,
    ENV_ATTEMPT,
    ENV_GROUP,
    ENV_NAME,
    ENV_RANK,
    ENV_ROLE,
    ENV_USER,
    ENV_WORLD_SIZE,
    MAIN_CONTAINER,
    PRODUCT_ENV,
    SHM_PATH,
    SHM_VOLUME,
    TERMINATION_MESSAGE_PATH,
    TORCHRUN_PORT,
    WAIT_FOR_WORKERS_CONTAINER,
    JobSpec,
    TaskIdentity,
    freeze,
    label_value,
    thaw,
    total_gpus,
)
from airflow_jobs_plugin.queueing import kueue
from airflow_jobs_plugin.queueing.quota.flavors import Charge, with_avoidance

JOB_API_VERSION = "batch/v1"
JOB_KIND = "Job"
MPIJOB_API_VERSION = "kubeflow.org/v2beta1"
MPIJOB_KIND = "MPIJob"

ROLE_WORKER = "worker"
ROLE_LAUNCHER = "launcher"
LAUNCHER_RANK = -1
DEFAULT_WORKER_COMMAND = ("/usr/sbin/sshd", "-De")
WAIT_FOR_WORKERS_RESOURCES = {"cpu": "100m", "memory": "64Mi"}
# Sleep between DNS checks; the launcher waits at most as long as the workers take to become Ready.
_WAIT_SLEEP_SECONDS = 2


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
    """An MPI launcher with GPUs also runs ranks: mpi-operator hides GPUs from a launcher unless
    ``runLauncherAsWorker`` is set, and with it lists the launcher first in the hostfile
    (``newConfigMap``) and gives it replica index 0, the workers 1..N (``workerReplicaIndexLabel``,
    kubeflow/mpi-operator ``pkg/controller/mpi_job_controller.go``, v0.7.0 and v0.8.0)."""
    return spec.is_mpi and spec.launcher_gpus > 0


def world_size(spec: JobSpec) -> int:
    """Hosts that run ranks: the workers, plus a launcher that works (see :func:`launcher_works`)."""
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


def parse_rfc3339(text: str) -> datetime:
    """Inverse of :func:`rfc3339` (also accepts offsets and no fraction); returns an aware datetime."""
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError(f"timestamp has no timezone: {text!r}")
    return parsed


def _seconds(delta: timedelta) -> int:
    # Kubernetes takes whole seconds; rounding up never cuts a deadline short.
    return math.ceil(delta.total_seconds())


def pod_role_and_rank(pod_labels: Mapping[str, str]) -> tuple[str | None, int | None]:
    """Role and rank of a pod of this product from its labels: ('worker', 0), ('launcher', None), ...

    Single-pod jobs carry ROLE and RANK; MPI pods carry ROLE, and workers get their index from the
    MPI operator's replica-index label; torchrun nodes from the Job controller's completion-index label.
    """
    role = pod_labels.get(keys.ROLE) or pod_labels.get(keys.MPI_JOB_ROLE)
    raw = pod_labels.get(keys.RANK)
    if raw is None:
        # Workers, and a launcher that runs ranks itself (only then does it carry an index).
        raw = pod_labels.get(keys.MPI_REPLICA_INDEX)
    if raw is None:
        raw = pod_labels.get(COMPLETION_INDEX)
    try:
        rank = int(raw) if raw is not None else None
    except ValueError:
        rank = None
    return role, rank


def object_labels(spec: JobSpec, task: TaskIdentity, attempt: int) -> dict[str, str]:
    """Labels on the Job / MPIJob object itself (author's first, the product's win on no conflict)."""
    return {
        **spec.labels,
        keys.MANAGED_BY: keys.MANAGED_BY_VALUE,
        keys.GROUP: label_value(spec.group),
        keys.USER: label_value(spec.user),
        keys.TASK_KEY: task.instance_key(),
        keys.TRY: str(task.try_number),
        keys.ATTEMPT: str(attempt),
        # Kueue admits a job that names its LocalQueue; the product's pool then leaves it alone.
        **({kueue.QUEUE_NAME_LABEL: spec.kueue_queue} if spec.kueue_queue else {}),
    }


def _identity_annotations(spec: JobSpec, task: TaskIdentity) -> dict[str, str]:
    return {
        **spec.annotations,
        keys.DAG_ID: task.dag_id,
        keys.TASK_ID: task.task_id,
        keys.RUN_ID: task.run_id,
        keys.MAP_INDEX: str(task.map_index),
        keys.TRY_NUMBER: str(task.try_number),
        keys.GROUP_NAME: spec.group,
        keys.USER_NAME: spec.user,
    }


def object_annotations(spec: JobSpec, task: TaskIdentity, queued_at: datetime) -> dict[str, str]:
    """Annotations on the Job / MPIJob object: identity plus what the quota pool reads and updates."""
    return {
        **_identity_annotations(spec, task),
        keys.GPUS: str(total_gpus(spec)),
        **({keys.GPU_DEVICE: spec.gpu_resource} if spec.gpu_resource != keys.GPU_RESOURCE else {}),
        keys.PRIORITY: str(spec.priority),
        keys.QUEUED_AT: rfc3339(queued_at),
        keys.REQUEUE_COUNT: "0",
        # The job's own limits travel with it: any process may run the admission pass that applies them.
        **_quota_limits(spec),
    }


def _quota_limits(spec: JobSpec) -> dict[str, str]:
    """The task's own quota-pool limits, only where the author chose one: a task that keeps the
    defaults follows the quota policy's values, which the platform admin sets for everyone."""
    limits: dict[str, str] = {}
    if spec.requeue_limit != DEFAULT_REQUEUE_LIMIT:
        limits[keys.REQUEUE_LIMIT] = "none" if spec.requeue_limit is None else str(spec.requeue_limit)
    if isinstance(spec.schedule_timeout, timedelta):
        limits[keys.SCHEDULE_TIMEOUT] = f"{spec.schedule_timeout.total_seconds():g}"
    if spec.queue_timeout is not None:
        limits[keys.QUEUE_TIMEOUT] = f"{spec.queue_timeout.total_seconds():g}"
    return limits


def _env(spec: JobSpec, name: str, attempt: int, role: str, rank: int | None, gpus: int) -> list[dict]:
    """Product variables first, then the author's; ``rank=None`` reads the MPI replica index."""
    rank_var: dict[str, Any] = {"name": ENV_RANK}
    if rank is None:
        rank_var["valueFrom"] = {"fieldRef": {"fieldPath": f"metadata.labels['{keys.MPI_REPLICA_INDEX}']"}}
    else:
        rank_var["value"] = str(rank)
    env: list[dict] = [
        {"name": ENV_USER, "value": spec.user},
        {"name": ENV_GROUP, "value": spec.group},
        {"name": ENV_NAME, "value": name},
        {"name": ENV_ATTEMPT, "value": str(attempt)},
        {"name": ENV_ROLE, "value": role},
        rank_var,
        {"name": ENV_WORLD_SIZE, "value": str(world_size(spec))},
    ]
    for key, value in spec.env.items():
        env.append(
            {"name": key, "value": value}
            if isinstance(value, str)
            else {"name": key, "valueFrom": thaw(value)}
        )
    if gpus == 0:
        env.append({"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"})
    return env


def _resources(spec: JobSpec, cpu: str | None, memory: str | None, gpus: int) -> dict:
    # requests == limits: GPUs (extended resources) require it, and Guaranteed QoS keeps a training
    # pod from being the first one the kubelet evicts under memory pressure.
    amounts: dict[str, str] = {}
    if cpu is not None:
        amounts["cpu"] = cpu
    if memory is not None:
        amounts["memory"] = memory
    amounts.update(spec.container_resources)
    if gpus:
        amounts[spec.gpu_resource] = str(gpus)
    return {"requests": dict(amounts), "limits": dict(amounts)} if amounts else {}


def _container(
    spec: JobSpec,
    *,
    env: list[dict],
    command: tuple[str, ...] | None,
    args: tuple[str, ...] | None,
    resources: dict,
) -> dict:
    container: dict[str, Any] = {"name": MAIN_CONTAINER, "image": spec.image}
    if command:
        container["command"] = list(command)
    if args:
        container["args"] = list(args)
    container["env"] = env
    if spec.env_from:
        container["envFrom"] = thaw(spec.env_from)
    if resources:
        container["resources"] = resources
    mounts = [m.to_k8s() for m in spec.volume_mounts]
    if spec.shm_size:
        mounts.append({"name": SHM_VOLUME, "mountPath": SHM_PATH})
    if mounts:
        container["volumeMounts"] = mounts
    if spec.image_pull_policy:
        container["imagePullPolicy"] = spec.image_pull_policy
    if spec.container_security_context:
        container["securityContext"] = thaw(spec.container_security_context)
    # The job's result: a small JSON document the program writes to this file on success. On a failure
    # without one, the kubelet puts the log's tail there instead (FallbackToLogsOnError), which the
    # failure message can show even after the pod's log is gone.
    container["terminationMessagePath"] = TERMINATION_MESSAGE_PATH
    container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    return container


def _author_init_containers(spec: JobSpec, env: list[dict]) -> list[dict]:
    out = []
    for frozen in spec.init_containers:
        container = thaw(frozen)
        container["env"] = [dict(e) for e in env] + container.get("env", [])
        out.append(container)
    return out


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
    }
    if spec.image_pull_policy:
        container["imagePullPolicy"] = spec.image_pull_policy
    return container


def _pod_template(
    spec: JobSpec,
    *,
    labels: dict[str, str],
    annotations: dict[str, str],
    container: dict,
    init_containers: list[dict],
    restart_policy: str | None,
) -> dict:
    pod: dict[str, Any] = {"restartPolicy": restart_policy} if restart_policy else {}
    if init_containers:
        pod["initContainers"] = init_containers
    pod["containers"] = [container]
    if spec.node_selector:
        pod["nodeSelector"] = dict(spec.node_selector)
    if spec.affinity:
        pod["affinity"] = thaw(spec.affinity)
    if spec.tolerations:
        pod["tolerations"] = [t.to_k8s() for t in spec.tolerations]
    volumes = thaw(spec.volumes)
    if spec.shm_size:
        volumes.append({"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": spec.shm_size}})
    if volumes:
        pod["volumes"] = volumes
    if spec.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": s} for s in spec.image_pull_secrets]
    if spec.service_account:
        pod["serviceAccountName"] = spec.service_account
    if spec.service_account == DEFAULT_JOB_SERVICE_ACCOUNT:
        # The namespace's own account: whatever rights it holds stay out of the pods' reach, its token
        # never mounted whatever the author's pod_template says (the product's fields win the merge).
        pod["automountServiceAccountToken"] = False
    if spec.priority_class_name:
        pod["priorityClassName"] = spec.priority_class_name
    if spec.scheduler_name:
        pod["schedulerName"] = spec.scheduler_name
    if spec.security_context:
        pod["securityContext"] = thaw(spec.security_context)
    own = {"metadata": {"labels": labels, "annotations": annotations}, "spec": pod}
    return merge_under(_as_main(thaw(spec.pod_template)), own) if spec.pod_template else own


# The KubernetesPodOperator's pod templates call the container it runs "base"
# (cncf provider airflow/operators/pod.py, BASE_CONTAINER_NAME): here it is the main container.
KPO_BASE_CONTAINER = "base"


def _as_main(template: dict) -> dict:
    containers = (template.get("spec") or {}).get("containers") or []
    names = {c.get("name") for c in containers if isinstance(c, dict)}
    if KPO_BASE_CONTAINER in names and MAIN_CONTAINER not in names:
        for container in containers:
            if container.get("name") == KPO_BASE_CONTAINER:
                container["name"] = MAIN_CONTAINER
    return template


def merge_under(base: Any, own: Any) -> Any:
    """The author's ``pod_template`` (``base``) with the product's pod template laid over it.

    The product's fields win wherever both set one: every label and annotation key the product writes,
    ``restartPolicy``, the main container's image, command, env, resources (so its GPU count), and so on.
    Mappings merge key by key; lists of named items (containers, volumes, env, ...) merge item by item
    on ``name``, the author's extra items kept (a sidecar, a volume); other lists are the product's when
    it sets one. ``suspend`` is not reachable from a pod template (it is a Job field), and
    :func:`~airflow_jobs_plugin.jobs.spec.validate` refuses GPU resources and the product's variables in
    the template, so nothing in it can take GPUs the quota did not charge.
    """
    if isinstance(base, dict) and isinstance(own, dict):
        merged = dict(base)
        for key, value in own.items():
            merged[key] = merge_under(base[key], value) if key in base else value
        return merged
    if isinstance(base, list) and isinstance(own, list) and _named(base) and _named(own):
        theirs = {item["name"]: item for item in base}
        mine = {item["name"] for item in own}
        # The product's items first, in its order (the main container stays the default one), each laid
        # over the author's item of the same name; then the author's other items.
        return [merge_under(theirs[o["name"]], o) if o["name"] in theirs else o for o in own] + [
            item for item in base if item["name"] not in mine
        ]
    return own


def _named(items: list) -> bool:
    return all(isinstance(item, dict) and isinstance(item.get("name"), str) for item in items)


def _metadata(spec: JobSpec, name: str, task: TaskIdentity, attempt: int, queued_at: datetime) -> dict:
    meta: dict[str, Any] = {"name": name}
    if spec.namespace:
        meta["namespace"] = spec.namespace
    # Only the first attempt is built here, so its enqueue time is its creation time.
    meta["labels"] = {**object_labels(spec, task, attempt), keys.CREATED: created_label(queued_at)}
    meta["annotations"] = object_annotations(spec, task, queued_at)
    return meta


def created_label(when: datetime) -> str:
    """The value of the ``created`` label for an object created at ``when`` (whole epoch seconds)."""
    return str(int(when.timestamp()))


def _pod_failure_policy(spec: JobSpec) -> dict:
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


def _deadlines(spec: JobSpec) -> dict[str, int]:
    out: dict[str, int] = {"backoffLimit": spec.backoff_limit}
    if spec.active_deadline is not None:
        out["activeDeadlineSeconds"] = _seconds(spec.active_deadline)
    if spec.ttl_after_finished is not None:
        out["ttlSecondsAfterFinished"] = _seconds(spec.ttl_after_finished)
    return out


def _job_pod_template(spec: JobSpec, task: TaskIdentity, pod_labels: dict[str, str], env: list[dict]) -> dict:
    """The pod template of a batch/v1 Job's pods: the main container and the author's init containers,
    never restarted in place (``restartPolicy: Never``, which podFailurePolicy requires)."""
    container = _container(
        spec,
        env=env,
        command=spec.command,
        args=spec.args,
        resources=_resources(spec, spec.cpu, spec.memory, spec.gpus),
    )
    return _pod_template(
        spec,
        labels=pod_labels,
        annotations=_identity_annotations(spec, task),
        container=container,
        init_containers=_author_init_containers(spec, env),
        restart_policy="Never",
    )


def build_job(spec: JobSpec, *, name: str, task: TaskIdentity, attempt: int, queued_at: datetime) -> dict:
    """A suspended ``batch/v1`` Job running one pod (``workers == 1``)."""
    pod_labels = {**object_labels(spec, task, attempt), keys.ROLE: ROLE_WORKER, keys.RANK: "0"}
    template = _job_pod_template(spec, task, pod_labels, _env(spec, name, attempt, ROLE_WORKER, 0, spec.gpus))
    return {
        "apiVersion": JOB_API_VERSION,
        "kind": JOB_KIND,
        "metadata": _metadata(spec, name, task, attempt, queued_at),
        "spec": {
            "suspend": True,
            "parallelism": 1,
            "completions": 1,
            **_deadlines(spec),
            "podFailurePolicy": _pod_failure_policy(spec),
            "template": template,
        },
    }


def build_mpijob(spec: JobSpec, *, name: str, task: TaskIdentity, attempt: int, queued_at: datetime) -> dict:
    """A suspended ``kubeflow.org/v2beta1`` MPIJob: one launcher and ``spec.workers`` workers."""
    base_labels = object_labels(spec, task, attempt)
    pod_annotations = _identity_annotations(spec, task)

    launcher_rank = 0 if launcher_works(spec) else LAUNCHER_RANK
    launcher_env = _env(spec, name, attempt, ROLE_LAUNCHER, launcher_rank, spec.launcher_gpus)
    launcher_init = _author_init_containers(spec, launcher_env)
    if spec.wait_for_workers:
        launcher_init.append(_wait_for_workers_container(spec, launcher_env))
    launcher_resources = _resources(
        spec,
        spec.launcher_cpu if spec.launcher_cpu is not None else spec.cpu,
        spec.launcher_memory if spec.launcher_memory is not None else spec.memory,
        spec.launcher_gpus,
    )
    launcher = _pod_template(
        spec,
        labels={**base_labels, keys.ROLE: ROLE_LAUNCHER},
        annotations=pod_annotations,
        container=_container(
            spec, env=launcher_env, command=spec.command, args=spec.args, resources=launcher_resources
        ),
        init_containers=launcher_init,
        restart_policy=None,  # set per replica below; the MPI operator warns about one in the template
    )

    worker_env = _env(spec, name, attempt, ROLE_WORKER, None, spec.gpus)
    worker = _pod_template(
        spec,
        labels={**base_labels, keys.ROLE: ROLE_WORKER},
        annotations=dict(pod_annotations),
        container=_container(
            spec,
            env=worker_env,
            command=spec.worker_command or DEFAULT_WORKER_COMMAND,
            args=None,
            resources=_resources(spec, spec.cpu, spec.memory, spec.gpus),
        ),
        init_containers=_author_init_containers(spec, worker_env),
        restart_policy=None,
    )

    mpi_spec: dict[str, Any] = {
        "slotsPerWorker": max(spec.gpus, 1),
        "mpiImplementation": spec.mpi_implementation,
        "launcherCreationPolicy": spec.launcher_creation_policy,
    }
    if launcher_works(spec):
        mpi_spec["runLauncherAsWorker"] = True
    mpi_spec["runPolicy"] = {"suspend": True, "cleanPodPolicy": "Running", **_deadlines(spec)}
    mpi_spec["mpiReplicaSpecs"] = {
        "Launcher": {"replicas": 1, "restartPolicy": "Never", "template": launcher},
        "Worker": {"replicas": spec.workers, "restartPolicy": "OnFailure", "template": worker},
    }
    return {
        "apiVersion": MPIJOB_API_VERSION,
        "kind": MPIJOB_KIND,
        "metadata": _metadata(spec, name, task, attempt, queued_at),
        "spec": mpi_spec,
    }


# kubernetes/kubernetes 1.32 pkg/controller/job/indexed_job_utils.go: the completion index of a pod of an
# Indexed Job, as annotation and (PodIndexLabel) label; the torchrun kind's own words.
COMPLETION_INDEX = kinds.COMPLETION_INDEX
TORCHRUN = kinds.TORCHRUN.name
ROLE_NODE = torchrun_kind.ROLE_NODE


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
    index: dict[str, Any] = {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}}
    env = _env(spec, name, attempt, ROLE_NODE, 0, spec.gpus)
    for var in env:
        if var["name"] == ENV_RANK:
            var.pop("value", None)
            var["valueFrom"] = index
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
    # The product's variables (always _env's first ones), then torchrun's, then the author's.
    return env[: len(PRODUCT_ENV)] + torchrun + env[len(PRODUCT_ENV) :]


def build_torchrun(
    spec: JobSpec, *, name: str, task: TaskIdentity, attempt: int, queued_at: datetime
) -> dict:
    """A suspended ``batch/v1`` Indexed Job of ``spec.workers`` nodes for ``torchrun``.

    parallelism = completions = nodes, so every node runs at once, each once; the Job succeeds when every
    index has (jobs/kinds/torchrun.py). Its pods' ``subdomain`` is the headless Service
    :meth:`~airflow_jobs_plugin.jobs.kinds.TorchrunJob.companions` that the submitter creates beside it.
    """
    base_labels = {**object_labels(spec, task, attempt), keys.FRAMEWORK: torchrun_kind.FRAMEWORK_VALUE}
    template = _job_pod_template(
        spec, task, {**base_labels, keys.ROLE: ROLE_NODE}, _torchrun_env(spec, name, attempt)
    )
    template["spec"]["subdomain"] = name
    metadata = _metadata(spec, name, task, attempt, queued_at)
    metadata["labels"][keys.FRAMEWORK] = torchrun_kind.FRAMEWORK_VALUE
    return {
        "apiVersion": JOB_API_VERSION,
        "kind": JOB_KIND,
        "metadata": metadata,
        "spec": {
            "suspend": True,
            "completionMode": "Indexed",
            "parallelism": spec.workers,
            "completions": spec.workers,
            **_deadlines(spec),
            "podFailurePolicy": _pod_failure_policy(spec),
            "template": template,
        },
    }


def pool_gate(body: dict) -> dict:
    """``body`` held back from Kueue until the quota pool admits it (``kueue.POOL_GATE``).

    Harmless where no Kueue runs or where Kueue never takes the job; where it does take it at creation
    (a LocalQueue named ``default`` in the namespace, ``manageJobsWithoutQueueName``), the gate keeps its
    Workload from being admitted before the pool's per-user limits have said yes."""
    out = copy.deepcopy(body)
    annotations = out["metadata"].setdefault("annotations", {})
    present = [g for g in (annotations.get(kueue.ADMISSION_GATE_ANNOTATION) or "").split(",") if g]
    if kueue.POOL_GATE not in present:
        annotations[kueue.ADMISSION_GATE_ANNOTATION] = ",".join([*present, kueue.POOL_GATE])
    return out


def kueue_handoff(body: dict) -> dict:
    """``body`` to be handed to Kueue by the quota pool rather than at once: no queue-name label yet
    (Kueue ignores a job without one, unless it manages every job of the namespace), and the LocalQueue
    it will get in ``labels.KUEUE_HANDOFF``. The pool writes the label once the job's user may run it
    (``quota.ledger.handoff_patch``), so a user over their limit never reaches Kueue's queue."""
    out = copy.deepcopy(body)
    queue = out["metadata"]["labels"].pop(kueue.QUEUE_NAME_LABEL, None)
    if not queue:
        raise ValueError("kueue_handoff: the job names no Kueue LocalQueue")
    out["metadata"].setdefault("annotations", {})[keys.KUEUE_HANDOFF] = queue
    for template in [pod_set.template for pod_set in kinds.kind_of(out).pod_sets(out)]:
        if template:
            ((template.get("metadata") or {}).get("labels") or {}).pop(kueue.QUEUE_NAME_LABEL, None)
    return out


def build_manifest(
    spec: JobSpec, *, name: str, task: TaskIdentity, attempt: int, queued_at: datetime
) -> dict:
    """The object to create for one attempt: a Job when ``spec.workers == 1``, else an MPIJob, or with
    ``framework='torchrun'`` an Indexed Job: the kind's adapter builds it (``JobKind.build``, which
    points at its builder here).

    ``name`` is normally ``task.job_name(attempt)``; ``queued_at`` (timezone-aware) is the enqueue time
    of the task's first attempt, so a resubmitted attempt keeps its place in the queue.
    """
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
        raise ValueError(f"attempt must be a whole number >= 1, got {attempt!r}")
    adapter = kinds.for_name(spec.kind)
    return adapter.build(spec, name=name, task=task, attempt=attempt, queued_at=queued_at)


def with_charge(spec: JobSpec, charge: Charge | None) -> JobSpec:
    """``spec`` as the quota pool charges it: a job on a GPU flavor's nodes carries the flavor's name
    (the quota line it waits in); one that names no flavor of a resource that has some is kept off
    every flavored node, so it never spends a flavor's GPUs uncharged (queueing/quota/flavors.py)."""
    if charge is None:
        return spec
    if charge.flavor is not None:
        return dataclasses.replace(
            spec, annotations=freeze({**spec.annotations, keys.GPU_FLAVOR: charge.flavor.name})
        )
    if charge.avoid:
        return dataclasses.replace(spec, affinity=freeze(with_avoidance(thaw(spec.affinity), charge.avoid)))
    return spec
