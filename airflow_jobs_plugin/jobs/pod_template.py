"""The pieces of a job's object that every kind shares: the labels and annotations of the object and
its pods, the product's environment variables, the main container, the pod template with the author's
``pod_template`` laid under it, the deadlines and the object's metadata.

Each kind's builder (``JobKind.build``, in ``jobs/kinds/``) assembles its object from these; nothing here
knows which kind it builds for, so a kind's own numbers (its GPU total, its world size, where a pod reads
its rank) are arguments. Pure: returns plain JSON-shaped dicts. The rules the pieces follow are
:mod:`airflow_jobs_plugin.jobs.manifests`' docstring.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from airflow_jobs_plugin.cluster.objects import rfc3339
from airflow_jobs_plugin.jobs import labels as keys
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
    SHM_PATH,
    SHM_VOLUME,
    TERMINATION_MESSAGE_PATH,
    JobSpec,
    TaskIdentity,
    label_value,
    thaw,
)


def seconds(delta: timedelta) -> int:
    """``delta`` in whole seconds, rounded up."""
    # Kubernetes takes whole seconds; rounding up never cuts a deadline short.
    return math.ceil(delta.total_seconds())


def object_labels(spec: JobSpec, task: TaskIdentity, attempt: int) -> dict[str, str]:
    """Labels on the job's object itself (author's first, the product's win on no conflict)."""
    return {
        **spec.labels,
        keys.MANAGED_BY: keys.MANAGED_BY_VALUE,
        keys.GROUP: label_value(spec.group),
        keys.USER: label_value(spec.user),
        keys.TASK_KEY: task.instance_key(),
        keys.TRY: str(task.try_number),
        keys.ATTEMPT: str(attempt),
        # Kueue admits a job that names its LocalQueue; the product's pool then leaves it alone.
        **({keys.KUEUE_QUEUE_NAME: spec.kueue_queue} if spec.kueue_queue else {}),
    }


def identity_annotations(spec: JobSpec, task: TaskIdentity) -> dict[str, str]:
    """The exact Airflow identifiers, group and user (and the author's annotations): on the job and its pods."""
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


def object_annotations(spec: JobSpec, task: TaskIdentity, queued_at: datetime, gpus: int) -> dict[str, str]:
    """Annotations on the job's object: identity plus what the quota pool reads and updates; ``gpus`` is
    what the job holds while it runs (its kind's ``total_gpus``), which the pool charges."""
    return {
        **identity_annotations(spec, task),
        keys.GPUS: str(gpus),
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


def pod_env(
    spec: JobSpec,
    name: str,
    attempt: int,
    *,
    role: str,
    rank: int | Mapping[str, Any],
    world_size: int,
) -> list[dict]:
    """The product's variables (:data:`~airflow_jobs_plugin.jobs.spec.PRODUCT_ENV`, in that order), then
    the author's. ``rank`` is the pod's rank, or where a pod of a shared template reads it (a ``valueFrom``
    source); ``world_size`` the hosts that run ranks. Which containers see no GPU is
    :func:`hide_unallocated_gpus`' to say, once the pod is whole."""
    rank_var: dict[str, Any] = {"name": ENV_RANK}
    if isinstance(rank, Mapping):
        rank_var["valueFrom"] = dict(rank)
    else:
        rank_var["value"] = str(rank)
    env: list[dict] = [
        {"name": ENV_USER, "value": spec.user},
        {"name": ENV_GROUP, "value": spec.group},
        {"name": ENV_NAME, "value": name},
        {"name": ENV_ATTEMPT, "value": str(attempt)},
        {"name": ENV_ROLE, "value": role},
        rank_var,
        {"name": ENV_WORLD_SIZE, "value": str(world_size)},
    ]
    for key, value in spec.env.items():
        env.append(
            {"name": key, "value": value}
            if isinstance(value, str)
            else {"name": key, "valueFrom": thaw(value)}
        )
    return env


# NVIDIA's container toolkit exposes the GPUs NVIDIA_VISIBLE_DEVICES names. A CUDA base image sets it to
# `all` (ENV NVIDIA_VISIBLE_DEVICES=all), and under the toolkit's default configuration
# (accept-nvidia-visible-devices-envvar-when-unprivileged = true) a container that asks for no GPU then
# sees every GPU of its node. `void` is the toolkit's value for "no GPU, no driver" (`none` still mounts
# the driver and its control devices), so every container that asks for no GPU carries it: the main one
# without gpus, every init container and sidecar. The device plugin sets the variable of a container it
# allocated GPUs to. docs/deploying.md names the toolkit settings that make the image's value harmless.
VISIBLE_DEVICES_ENV = "NVIDIA_VISIBLE_DEVICES"
NO_GPU = "void"


def hide_unallocated_gpus(pod: dict, device: str) -> dict:
    """``pod`` (a pod spec) with ``NVIDIA_VISIBLE_DEVICES=void`` in every container, init container and
    sidecar that asks for none of ``device`` (the job's GPUs; the checker refuses any other accelerator),
    whatever value it held."""
    for kind in ("initContainers", "containers"):
        for container in pod.get(kind) or ():
            resources = container.get("resources") or {}
            if any(device in (resources.get(part) or {}) for part in ("requests", "limits")):
                continue
            env = [
                e
                for e in container.get("env") or ()
                if not (isinstance(e, Mapping) and e.get("name") == VISIBLE_DEVICES_ENV)
            ]
            container["env"] = [*env, {"name": VISIBLE_DEVICES_ENV, "value": NO_GPU}]
    return pod


def resource_requirements(spec: JobSpec, cpu: str | None, memory: str | None, gpus: int) -> dict:
    """A container's ``resources``: ``cpu``, ``memory``, the author's other amounts and ``gpus``."""
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


def main_container(
    spec: JobSpec,
    *,
    env: list[dict],
    command: tuple[str, ...] | None,
    args: tuple[str, ...] | None,
    resources: dict,
) -> dict:
    """The job's main container (:data:`~airflow_jobs_plugin.jobs.spec.MAIN_CONTAINER`)."""
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


def author_init_containers(spec: JobSpec, env: list[dict]) -> list[dict]:
    """The author's ``init_containers``, each with the product's variables ahead of its own."""
    out = []
    for frozen in spec.init_containers:
        container = thaw(frozen)
        container["env"] = [dict(e) for e in env] + container.get("env", [])
        out.append(container)
    return out


def build_template(
    spec: JobSpec,
    *,
    labels: dict[str, str],
    annotations: dict[str, str],
    container: dict,
    init_containers: list[dict],
    restart_policy: str | None,
) -> dict:
    """A pod template of the job: ``container`` after ``init_containers``, the spec's scheduling, volumes
    and accounts, and the author's ``pod_template`` laid under it (:func:`merge_under`)."""
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
    template = merge_under(_as_main(thaw(spec.pod_template)), own) if spec.pod_template else own
    hide_unallocated_gpus(template["spec"], spec.gpu_resource)
    return template


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


def metadata(
    spec: JobSpec, name: str, task: TaskIdentity, attempt: int, queued_at: datetime, *, gpus: int
) -> dict:
    """The object's metadata: its name, namespace, labels and annotations (``gpus``: see
    :func:`object_annotations`)."""
    meta: dict[str, Any] = {"name": name}
    if spec.namespace:
        meta["namespace"] = spec.namespace
    # Only the first attempt is built here, so its enqueue time is its creation time.
    meta["labels"] = {**object_labels(spec, task, attempt), keys.CREATED: created_label(queued_at)}
    meta["annotations"] = object_annotations(spec, task, queued_at, gpus)
    return meta


def created_label(when: datetime) -> str:
    """The value of the ``created`` label for an object created at ``when`` (whole epoch seconds)."""
    return str(int(when.timestamp()))


def deadlines(spec: JobSpec) -> dict[str, int]:
    """``backoffLimit``, ``activeDeadlineSeconds`` and ``ttlSecondsAfterFinished`` (a Job's spec, an
    MPIJob's runPolicy)."""
    out: dict[str, int] = {"backoffLimit": spec.backoff_limit}
    if spec.active_deadline is not None:
        out["activeDeadlineSeconds"] = seconds(spec.active_deadline)
    if spec.ttl_after_finished is not None:
        out["ttlSecondsAfterFinished"] = seconds(spec.ttl_after_finished)
    return out
