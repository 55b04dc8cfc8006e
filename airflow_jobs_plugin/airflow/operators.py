"""JobOperator: a GPU training job on Kubernetes as one deferrable Airflow task."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from airflow.exceptions import AirflowException
from airflow.sdk import BaseOperator, BaseOperatorLink
from airflow.sdk.exceptions import AirflowFailException

from airflow_jobs_plugin import DEFAULT_CONN_ID
from airflow_jobs_plugin.jobs import spec as spec_defaults
from airflow_jobs_plugin.jobs.labels import (
    TASK_STATE_DELIVERED,
    TASK_STATE_FATAL,
    TASK_STATE_KEY,
    TASK_STATE_TIMED_OUT,
)
from airflow_jobs_plugin.jobs.naming import TaskIdentity
from airflow_jobs_plugin.jobs.outcome import (
    JobEvent,
    TryOutcome,
    delivered_job,
    failure_message,
    headline,
    repeated_fatal_failure,
    summary,
    timed_out_try,
)
from airflow_jobs_plugin.jobs.pod_template import merge_under
from airflow_jobs_plugin.jobs.spec import (
    ARGUMENTS,
    JOB_ARGUMENTS,
    SPEC_FIELDS,
    JobSpec,
    JobSpecError,
)
from airflow_jobs_plugin.jobs.spec_checks import (
    check_conn_id,
    check_stream_logs,
    contains_unrendered,
    validate,
)
from airflow_jobs_plugin.jobs.timeouts import remaining_timeout, timed_out, timeout_message

if TYPE_CHECKING:
    from airflow.sdk import Context

STATE_KEY = TASK_STATE_KEY  # the task_state_store key of the current job
RESULT_XCOM_KEY = "result"  # the XCom key of the JSON the job wrote to /dev/termination-log

# Arguments an earlier version accepted without ever applying them: the quota policy sets these.
POLICY_ONLY = {
    "requeue_backoff": "the back-off between requeues is the quota policy's requeue_backoff.base "
    "(set by the platform admin in the policy ConfigMap): remove this argument",
    "requeue_backoff_max": "the back-off between requeues is capped by the quota policy's "
    "requeue_backoff.cap (set by the platform admin in the policy ConfigMap): remove this argument",
}

# KubernetesPodOperator arguments (apache-airflow-providers-cncf-kubernetes airflow/operators/pod.py, 10.x)
# that JobOperator spells differently or handles another way: the author gets the right name instead
# of Airflow's generic "Invalid arguments were passed".
KPO_NAMES = {
    "cmds": "use command (a list, or one shell string)",
    "arguments": "use args",
    "env_vars": "use env (a mapping of name to value or to a valueFrom mapping)",
    "labels": "use job_labels (they go on the job and on every pod)",
    "annotations": "use job_annotations",
    "service_account_name": "use service_account",
    "get_logs": "use stream_logs",
    "container_logs": "use stream_logs (every container's log is streamed, prefixed by rank)",
    "log_events_on_failure": "remove it: the job's events are always part of its failure message",
    "name": "remove it: the job is named after the DAG, task, run and attempt (deterministic, so a "
    "retried task finds its job)",
    "random_name_suffix": "remove it: job names are deterministic",
    "full_pod_spec": "use pod_template (a dict) or pod_template_file",
    "pod_template_dict": "use pod_template",
    "resources": "use cpu, memory, gpus and container_resources",
    "startup_timeout_seconds": "use schedule_timeout (a timedelta or seconds)",
    "active_deadline_seconds": "use active_deadline (a timedelta or seconds)",
    "on_finish_action": "use ttl_after_finished: the job and its pods are kept that long after it ends",
    "is_delete_operator_pod": "use ttl_after_finished: the job and its pods are kept that long after it ends",
    "reattach_on_restart": "remove it: a retried task always reattaches to its job",
    "in_cluster": "use kubernetes_conn_id (an Airflow Kubernetes connection)",
    "config_file": "use kubernetes_conn_id (an Airflow Kubernetes connection)",
    "cluster_context": "use kubernetes_conn_id (an Airflow Kubernetes connection)",
    "poll_interval": "remove it: the triggerer follows the job through a watch, not by polling",
    "hostnetwork": "remove it: a job's pods may not share the node's network (the cluster's pod security, "
    "baseline); they reach each other over the pod network",
    "dnspolicy": "use pod_template={'spec': {'dnsPolicy': ...}}",
    "termination_grace_period": "use pod_template={'spec': {'terminationGracePeriodSeconds': ...}}",
    "ports": "use pod_template with the main container's ports: {'spec': {'containers': [{'name': 'main', "
    "'ports': [...]}]}}",
    # The rest of KubernetesPodOperator.__init__ in cncf provider 10.25 (airflow/operators/pod.py), every one.
    "schedulername": "use scheduler_name",
    "deferrable": "remove it: JobOperator always waits on the triggerer",
    "configmaps": "use env_from=[{'configMapRef': {'name': ...}}]",
    "hostname": "use pod_template={'spec': {'hostname': ...}}",
    "subdomain": "use pod_template={'spec': {'subdomain': ...}}",
    "dns_config": "use pod_template={'spec': {'dnsConfig': ...}}",
    "host_aliases": "use pod_template={'spec': {'hostAliases': [...]}}",
    "automount_service_account_token": "use pod_template={'spec': {'automountServiceAccountToken': ...}}",
    "termination_message_policy": "remove it: the product reads /dev/termination-log, the main container's "
    "result (docs/operator.md)",
    "base_container_name": "remove it: the product's container is always named main",
    "base_container_status_polling_interval": "remove it: the triggerer follows the job through a watch",
    "on_kill_action": "remove it: killing the task cancels its job (the job's page and events say who)",
    "skip_on_exit_code": "remove it: a job's exit code fails or retries it (retryable_exit_codes, "
    "fatal_exit_codes); it never skips the task",
    "durable": "remove it: a retried task always reattaches to its job",
    "startup_check_interval_seconds": "remove it: the triggerer follows the job through a watch",
    "schedule_timeout_seconds": "use schedule_timeout (a timedelta or seconds)",
    "init_container_logs": "use stream_logs (every container's log is streamed, prefixed by rank)",
    "xcom_sidecar_container_security_context": "remove it: the result comes from /dev/termination-log, "
    "without an XCom sidecar",
    "log_events_on_startup": "remove it: the job's events are in its task log and on its page",
    "log_pod_spec_on_failure": "remove it: the failure message names the job; airflow-jobs describe shows it",
    "pod_runtime_info_envs": "use env with a valueFrom mapping: {'POD_IP': {'fieldRef': {'fieldPath': "
    "'status.podIP'}}}",
    "callbacks": "remove it: the job's states are Airflow task states and its page's timeline",
    "progress_callback": "remove it: the pods' logs stream into the task log (stream_logs)",
    "logging_interval": "remove it: the pods' logs stream into the task log as they are written",
    "trigger_kwargs": "remove it: the trigger is the product's own",
    "container_name_log_prefix_enabled": "remove it: each log line is prefixed by its rank",
    "log_formatter": "remove it: each log line is prefixed by its rank",
}


def _is_kpo_resources(value: Any) -> bool:
    """A V1ResourceRequirements (or its dict form), as KubernetesPodOperator's container_resources takes."""
    if hasattr(value, "attribute_map") and hasattr(value, "openapi_types"):
        return "limits" in value.attribute_map or "requests" in value.attribute_map
    return isinstance(value, Mapping) and bool(value) and set(value) <= {"limits", "requests", "claims"}


def kpo_pod_arguments(
    values: Mapping[str, Any], runtime_class_name: str | None, secrets: Sequence[Any] | None
) -> dict[str, Any]:
    """The job arguments with KubernetesPodOperator's ``runtime_class_name`` and ``secrets`` folded in,
    as that operator applies them (``airflow/providers/cncf/kubernetes/secret.py`` ``attach_to_pod``,
    cncf provider 10.25): a Secret deployed as ``env`` with a key is one variable, without a key all of
    its keys (``env_from``), as ``volume`` a read-only volume mounted at its target. An argument still
    a template is left alone; it is folded once rendered. The author's own pod_template wins over
    ``runtime_class_name``."""
    out = dict(values)
    if runtime_class_name and not contains_unrendered(out.get("pod_template")):
        out["pod_template"] = merge_under(
            {"spec": {"runtimeClassName": runtime_class_name}}, out.get("pod_template") or {}
        )
    targets = ("env", "env_from", "volumes", "volume_mounts")
    if not secrets or any(contains_unrendered(out.get(t)) for t in targets):
        return out
    env, env_from = dict(out.get("env") or {}), list(out.get("env_from") or [])
    volumes, mounts = list(out.get("volumes") or []), list(out.get("volume_mounts") or [])
    for i, secret in enumerate(secrets):
        kind, target, name, key = (
            getattr(secret, a, None) for a in ("deploy_type", "deploy_target", "secret", "key")
        )
        if kind == "env" and key is not None:
            env[target] = {"secretKeyRef": {"name": name, "key": key}}
        elif kind == "env":
            env_from.append({"secretRef": {"name": name}})
        elif kind == "volume":
            # Named by place and Secret, not a random suffix as upstream: the manifest is deterministic.
            volume = f"secret-{i}-{name}"[:63].rstrip("-.").lower()
            source: dict[str, Any] = {"secretName": name}
            if getattr(secret, "items", None):
                source["items"] = list(secret.items)
            volumes.append({"name": volume, "secret": source})
            mounts.append({"name": volume, "mountPath": target, "readOnly": True})
        else:
            raise JobSpecError(
                f"secrets[{i}]", "must be a cncf Secret('env' or 'volume', target, secret, key)"
            )
    out.update(
        env=env or None, env_from=env_from or None, volumes=volumes or None, volume_mounts=mounts or None
    )
    return out


# Where kpo_pod_arguments puts runtime_class_name, and where validate() reports a RuntimeClass it refuses.
_RUNTIME_CLASS_FIELD = "pod_template.spec.runtimeClassName"


def runtime_class_named(error: JobSpecError, runtime_class_name: Any, pod_template: Any) -> JobSpecError:
    """``error`` with a refused RuntimeClass that came from ``runtime_class_name`` (folded into the pod
    template) named as that argument, the one the author wrote."""
    spec = pod_template.get("spec") if isinstance(pod_template, Mapping) else None
    folded = spec.get("runtimeClassName") if isinstance(spec, Mapping) else None
    if runtime_class_name is None or folded != runtime_class_name:
        return error
    errors = tuple(
        ("runtime_class_name" if field == _RUNTIME_CLASS_FIELD else field, message)
        for field, message in error.errors
    )
    return JobSpecError(errors[0][0], errors[0][1], errors)


def read_pod_template_file(path: str) -> dict[str, Any]:
    """The pod in a YAML or JSON file (``pod_template_file``), or a JobSpecError naming the argument."""
    import yaml

    try:
        with open(path, encoding="utf-8") as handle:
            loaded = yaml.safe_load(handle)
    except OSError as exc:
        raise JobSpecError("pod_template_file", f"cannot read {path!r}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise JobSpecError("pod_template_file", f"{path!r} is not valid YAML or JSON: {exc}") from exc
    if not isinstance(loaded, dict):
        raise JobSpecError(
            "pod_template_file", f"{path!r} must hold one pod mapping, got {type(loaded).__name__}"
        )
    return loaded


class JobLink(BaseOperatorLink):
    """Operator extra link from the task to its job's page in the GPU Jobs view."""

    name = "GPU Job"

    def get_link(self, operator, *, ti_key) -> str:
        return f"/airflow-jobs/jobs/{ti_key.dag_id}/{ti_key.task_id}/{ti_key.run_id}?map_index={ti_key.map_index}"


class JobOperator(BaseOperator):
    """Run a GPU job on Kubernetes and wait for it on the triggerer.

    ``workers=1`` submits a ``batch/v1`` Job; ``workers>1`` a kubeflow ``MPIJob`` with one launcher and
    that many workers. The job waits for its group's GPU quota, runs, streams its logs into this task's
    log, retries retryable failures with a back-off, and fails with the state, reason, exit codes and last
    log lines. Invalid arguments fail when the DAG is parsed, naming the argument; every job argument may
    be a Jinja template or an XComArg, checked once rendered with the same messages. On success the task
    returns a summary; a JSON document the program wrote to ``/dev/termination-log`` is in it under
    ``result`` and is also pushed as the XCom key ``result``. See docs/operator.md for every argument.

    Example::

        train = JobOperator(
            task_id="train",
            image="ghcr.io/acme/trainer:{{ ds_nodash }}",
            command=["python", "train.py", "--epochs", "10"],
            gpus=4,
            workers=2,
            group="vision",
            env={"DATA": "/project/vision/data"},
            max_attempts=3,
        )

    :param image: container image of every container the job runs (``registry/repo:tag``).
    :param group: the quota group charged for the job's GPUs.
    :param user: the user charged inside the group; the task's ``owner`` when unset.
    :param command: the program: a list (exec form) or one string, run through ``sh -c``.
    :param args: arguments after ``command`` (a list of strings).
    :param env: environment variables: name to a string, or to one ``valueFrom`` mapping such as
        ``{'secretKeyRef': {'name': 'wandb', 'key': 'api-key'}}``.
    :param env_from: whole Secrets or ConfigMaps as variables: ``[{'secretRef': {'name': 'creds'}}]``.
    :param gpus: GPUs per worker (0 to 64); the quota charges workers x gpus (+ the launcher's).
    :param gpu_resource: the extended resource the GPUs are: ``nvidia.com/gpu`` (default), a MIG profile
        such as ``nvidia.com/mig-1g.10gb``, ``amd.com/gpu``.
    :param workers: 1 runs one pod (a Job); more run an MPIJob with that many workers and a launcher,
        or with ``framework='torchrun'`` that many nodes of PyTorch distributed training.
    :param framework: ``'mpi'`` (default) or ``'torchrun'``: an Indexed Job of ``workers`` pods and a
        headless Service, with ``torchrun``'s settings in the environment (``PET_NNODES``,
        ``PET_NPROC_PER_NODE`` = ``gpus``, ``PET_NODE_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``, ...), so
        ``command=['torchrun', 'train.py']`` needs no flags; no operator is needed on the cluster.
    :param cpu: CPU per worker (a quantity: ``'8'``, ``'500m'``); requests equal limits.
    :param memory: memory per worker (``'64Gi'``); requests equal limits.
    :param container_resources: other resources of the main container, e.g. ``{'rdma/ib': 1,
        'hugepages-2Mi': '1Gi', 'ephemeral-storage': '100Gi'}``; requests equal limits.
    :param shm_size: size of the memory-backed ``/dev/shm``: ``'auto'`` (8Gi, or half of ``memory``
        when that is lower), a quantity, or None for the runtime's 64Mi default.
    :param node_selector: node labels the pods require.
    :param affinity: a Kubernetes ``Affinity`` mapping (node, pod, pod anti-affinity).
    :param tolerations: Kubernetes tolerations (mappings or ``V1Toleration``).
    :param volumes: Kubernetes volumes of every pod; no ``hostPath`` (the cluster's pod security, baseline).
    :param volume_mounts: mounts of those volumes in every container.
    :param namespace: namespace of the job.
    :param priority_class_name: the pods' PriorityClass (the scheduler's preemption order).
    :param scheduler_name: the scheduler that places the pods (Volcano, a coscheduling plugin, ...).
    :param security_context: the pods' ``PodSecurityContext`` mapping, within what the cluster's pod
        security (baseline) allows: safe sysctls, RuntimeDefault or Localhost profiles.
    :param container_security_context: the main container's ``SecurityContext`` mapping, e.g.
        ``{'runAsUser': 1000}``; baseline allows adding only the runtime's default capabilities and no
        ``privileged``.
    :param pod_template: a pod (``{'metadata': ..., 'spec': ...}``) the product's pod is laid over: the
        product's fields win where both set one; it may not ask for GPUs, nor for what the cluster's pod
        security (baseline) refuses (host namespaces, ``hostPath``, host ports, ...), nor for a
        ``runtimeClassName`` the platform does not allow.
    :param pod_template_file: a YAML or JSON file holding such a pod, read when the task runs; merged
        under ``pod_template``.
    :param backoff_limit: pod retries inside one attempt.
    :param max_attempts: job-level attempts (new job, through the queue) for retryable failures.
    :param retry_backoff: first back-off between attempts (doubles each time).
    :param retry_backoff_max: longest back-off between attempts.
    :param retryable_exit_codes: exit codes that start a new attempt.
    :param fatal_exit_codes: exit codes that fail the task with no retry at all.
    :param queue_timeout: fail the job if it waits longer than this for quota (None: no limit).
    :param schedule_timeout: requeue an admitted job whose pods are not all placed within this
        (``'policy'``: the quota policy's, 3 minutes unless the policy says otherwise).
    :param requeue_limit: requeues before the job fails (``'policy'``: the quota policy's; None: no limit).
    :param active_deadline: running time limit of one attempt (None: no limit).
    :param ttl_after_finished: how long a finished job and its pods are kept.
    :param job_labels: labels on the job and every pod.
    :param job_annotations: annotations on the job and every pod.
    :param priority: queue order inside the group: -1000..1000 or ``'low'``, ``'normal'``, ``'high'``.
    :param launcher_gpus: MPI only: 0, or ``gpus`` to make the launcher an extra worker.
    :param launcher_cpu: MPI only: the launcher's CPU (default: ``cpu``).
    :param launcher_memory: MPI only: the launcher's memory (default: ``memory``).
    :param worker_command: MPI only: what the workers run (default: ``sshd``).
    :param wait_for_workers: MPI only: the launcher waits until every worker's name resolves.
    :param launcher_creation_policy: MPI only: ``WaitForWorkersReady`` or ``AtStartup``.
    :param mpi_implementation: MPI only: ``OpenMPI``, ``Intel`` or ``MPICH``.
    :param init_containers: containers that run before the main one, in every pod, within the cluster's
        pod security (baseline).
    :param image_pull_policy: ``Always``, ``IfNotPresent`` or ``Never``.
    :param image_pull_secrets: names of Secrets to pull the image with.
    :param service_account: the pods' ServiceAccount.
    :param kueue_queue: the Kueue LocalQueue that admits the job instead of the product's pool (docs/kueue.md);
        default: ``[airflow_jobs] kueue_queue``.
    :param kubernetes_conn_id: the Airflow Kubernetes connection of the cluster.
    :param stream_logs: stream the pods' logs into the task log.
    :param quota_configmap: the quota policy ConfigMap (default: the deployment's configuration).
    :param quota_namespace: the namespace of that ConfigMap.
    :param runtime_class_name: the pods' RuntimeClass, e.g. ``nvidia`` (KubernetesPodOperator's name): one the
        platform allows (``[airflow_jobs] job_runtime_classes``).
    :param secrets: KubernetesPodOperator ``Secret`` objects (cncf ``secret.Secret``): each becomes a variable,
        all of a Secret's keys (``env_from``) or a read-only volume, as that operator mounts them.
    """

    # Every job argument may be Jinja or an XComArg (Airflow resolves XComArgs in template fields).
    # kubernetes_conn_id is templated as KubernetesPodOperator's is (cncf provider 10.25.0,
    # airflow/operators/pod.py template_fields), and stream_logs too (e.g. "{{ params.debug }}").
    template_fields: Sequence[str] = (
        *JOB_ARGUMENTS,
        "pod_template_file",
        "kubernetes_conn_id",
        "stream_logs",
    )
    template_fields_renderers = {
        "env": "json",
        "command": "py",
        "args": "py",
        "pod_template": "json",
        "affinity": "json",
    }
    operator_extra_links = (JobLink(),)
    ui_color = "#7fb2e5"

    def __init__(
        self,
        *,
        image: str,
        group: str,
        user: str | None = None,
        command: Sequence[str] | str | None = None,
        args: Sequence[str] | None = None,
        env: Mapping[str, Any] | None = None,
        env_from: Sequence[Mapping[str, Any]] | None = None,
        gpus: int | str = 0,
        gpu_resource: str = spec_defaults.DEFAULT_GPU_RESOURCE,
        workers: int | str = 1,
        framework: str = "mpi",
        cpu: str | None = None,
        memory: str | None = None,
        container_resources: Mapping[str, Any] | None = None,
        shm_size: str | None = spec_defaults.SHM_AUTO,
        node_selector: Mapping[str, str] | None = None,
        affinity: Mapping[str, Any] | None = None,
        tolerations: Sequence[Mapping[str, Any]] | None = None,
        volumes: Sequence[Mapping[str, Any]] | None = None,
        volume_mounts: Sequence[Mapping[str, Any]] | None = None,
        namespace: str = "default",
        priority_class_name: str | None = None,
        scheduler_name: str | None = None,
        security_context: Mapping[str, Any] | None = None,
        container_security_context: Mapping[str, Any] | None = None,
        pod_template: Mapping[str, Any] | None = None,
        pod_template_file: str | None = None,
        backoff_limit: int | str = spec_defaults.DEFAULT_BACKOFF_LIMIT,
        max_attempts: int | str = spec_defaults.DEFAULT_MAX_ATTEMPTS,
        retry_backoff: timedelta | float | str = spec_defaults.DEFAULT_RETRY_BACKOFF,
        retry_backoff_max: timedelta | float | str = spec_defaults.DEFAULT_RETRY_BACKOFF_MAX,
        retryable_exit_codes: Sequence[int] = (),
        fatal_exit_codes: Sequence[int] = (),
        queue_timeout: timedelta | float | str | None = None,
        schedule_timeout: timedelta | float | str = spec_defaults.SCHEDULE_TIMEOUT_FROM_POLICY,
        requeue_limit: int | str | None = spec_defaults.DEFAULT_REQUEUE_LIMIT,
        active_deadline: timedelta | float | str | None = spec_defaults.DEFAULT_ACTIVE_DEADLINE,
        ttl_after_finished: timedelta | float | str | None = spec_defaults.DEFAULT_TTL_AFTER_FINISHED,
        job_labels: Mapping[str, str] | None = None,
        job_annotations: Mapping[str, str] | None = None,
        priority: int | str = 0,
        launcher_gpus: int | str = 0,
        launcher_cpu: str | None = None,
        launcher_memory: str | None = None,
        worker_command: Sequence[str] | str | None = None,
        wait_for_workers: bool | str = True,
        launcher_creation_policy: str = "WaitForWorkersReady",
        mpi_implementation: str = "OpenMPI",
        init_containers: Sequence[Mapping[str, Any]] | None = None,
        image_pull_policy: str | None = None,
        image_pull_secrets: Sequence[str] | None = None,
        service_account: str | None = None,
        kueue_queue: str | None = None,
        kubernetes_conn_id: str = DEFAULT_CONN_ID,
        stream_logs: bool = True,
        quota_configmap: str | None = None,
        quota_namespace: str | None = None,
        runtime_class_name: str | None = None,
        secrets: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> None:
        for gone in sorted(set(kwargs) & set(POLICY_ONLY)):
            raise JobSpecError(gone, POLICY_ONLY[gone])
        renamed = sorted(set(kwargs) & set(KPO_NAMES))
        if renamed:
            problems = tuple(
                (name, f"is a KubernetesPodOperator argument; JobOperator has no {name} -- {KPO_NAMES[name]}")
                for name in renamed
            )
            raise JobSpecError(*problems[0], problems)
        if _is_kpo_resources(container_resources):
            raise JobSpecError(
                "container_resources",
                "is KubernetesPodOperator's V1ResourceRequirements; JobOperator takes cpu, memory and gpus "
                "(with gpu_resource), and container_resources only for other resources, as names and amounts",
            )
        super().__init__(**kwargs)
        self.image = image
        self.group = group
        self.user = user
        self.command = command
        self.args = args
        self.env = env
        self.env_from = env_from
        self.gpus = gpus
        self.gpu_resource = gpu_resource
        self.workers = workers
        self.framework = framework
        self.cpu = cpu
        self.memory = memory
        self.container_resources = container_resources
        self.shm_size = shm_size
        self.node_selector = node_selector
        self.affinity = affinity
        self.tolerations = tolerations
        self.volumes = volumes
        self.volume_mounts = volume_mounts
        self.namespace = namespace
        self.priority_class_name = priority_class_name
        self.scheduler_name = scheduler_name
        self.security_context = security_context
        self.container_security_context = container_security_context
        self.pod_template = pod_template
        self.pod_template_file = pod_template_file
        self.backoff_limit = backoff_limit
        self.max_attempts = max_attempts
        self.retry_backoff = retry_backoff
        self.retry_backoff_max = retry_backoff_max
        self.retryable_exit_codes = retryable_exit_codes
        self.fatal_exit_codes = fatal_exit_codes
        self.queue_timeout = queue_timeout
        self.schedule_timeout = schedule_timeout
        self.requeue_limit = requeue_limit
        self.active_deadline = active_deadline
        self.ttl_after_finished = ttl_after_finished
        self.job_labels = job_labels
        self.job_annotations = job_annotations
        self.priority = priority
        self.launcher_gpus = launcher_gpus
        self.launcher_cpu = launcher_cpu
        self.launcher_memory = launcher_memory
        self.worker_command = worker_command
        self.wait_for_workers = wait_for_workers
        self.launcher_creation_policy = launcher_creation_policy
        self.mpi_implementation = mpi_implementation
        self.init_containers = init_containers
        self.image_pull_policy = image_pull_policy
        self.image_pull_secrets = image_pull_secrets
        self.service_account = service_account
        self.kueue_queue = kueue_queue
        self.kubernetes_conn_id = kubernetes_conn_id
        self.stream_logs = stream_logs
        self.quota_configmap = quota_configmap
        self.quota_namespace = quota_namespace
        self.runtime_class_name = runtime_class_name
        self.secrets = secrets
        # The arguments Airflow will render or resolve before execute(): their rendered text is read
        # as the type it spells (gpus="{{ params.gpus }}" renders to "4").
        self._from_templates = frozenset(
            name for name in self.template_fields if contains_unrendered(getattr(self, name))
        )
        # Parse-time check: a bad argument fails the DAG import, naming the argument. Templates and
        # XComArgs are checked once rendered, in execute(), with the same messages.
        self._spec(templated=True)
        self._connection(templated=True)

    # --- the spec ---

    def _job_arguments(self) -> dict[str, Any]:
        values = {argument.spec_field: getattr(self, argument.name) for argument in ARGUMENTS}
        if values["user"] is None:
            values["user"] = self.owner
        return kpo_pod_arguments(values, self.runtime_class_name, self.secrets)

    def _spec(self, *, templated: bool) -> JobSpec:
        values = self._job_arguments()
        path = self.pod_template_file
        if path is not None and not contains_unrendered(path) and not isinstance(path, str):
            raise JobSpecError(
                "pod_template_file", f"must be a path to a YAML or JSON file, got {type(path).__name__}"
            )
        if not templated and path:
            values["pod_template"] = merge_under(
                read_pod_template_file(path), dict(values["pod_template"] or {})
            )
        rendered = {SPEC_FIELDS.get(name, name) for name in self._from_templates}
        from airflow_jobs_plugin import config

        try:
            return validate(
                **values,
                templated=templated,
                rendered=rendered,
                service_accounts=config.job_service_accounts(),
                runtime_classes=config.job_runtime_classes(),
            )
        except JobSpecError as exc:
            raise runtime_class_named(exc, self.runtime_class_name, values["pod_template"]) from None

    def _connection(self, *, templated: bool) -> tuple[str, bool]:
        """``kubernetes_conn_id`` and ``stream_logs`` checked: literal values at parse time (templates
        are left for later), every value once rendered."""
        conn_id, stream_logs = self.kubernetes_conn_id, self.stream_logs
        if not (templated and contains_unrendered(conn_id)):
            conn_id = check_conn_id(conn_id, rendered="kubernetes_conn_id" in self._from_templates)
        if not (templated and contains_unrendered(stream_logs)):
            stream_logs = check_stream_logs(stream_logs, rendered="stream_logs" in self._from_templates)
        return conn_id, stream_logs

    # --- execute ---

    def execute(self, context: Context) -> Any:
        try:
            spec = self._spec(templated=False)
            conn_id, stream_logs = self._connection(templated=False)
        except JobSpecError as exc:
            # A value that is only wrong once rendered is as wrong on every retry: do not spend them.
            fields = ", ".join(dict.fromkeys(f for f, _ in exc.errors))
            raise AirflowFailException(
                f"invalid rendered value of {fields} (no retry can fix this; correct the DAG):\n{exc}"
            ) from exc
        ti = context["ti"]
        identity = TaskIdentity(
            dag_id=ti.dag_id,
            task_id=ti.task_id,
            run_id=ti.run_id,
            map_index=ti.map_index if ti.map_index is not None else -1,
            try_number=ti.try_number,
        )
        store = context.get("task_state_store")
        tries: dict[str, Any] = dict(
            try_number=ti.try_number, max_tries=getattr(ti, "max_tries", None), retries=self.retries or 0
        )
        delivered = None  # without a task_state_store nothing says what was returned: adopt no success
        passed_over = None
        if store is not None:
            repeated = repeated_fatal_failure(TryOutcome.from_json(store.get(TASK_STATE_FATAL)), **tries)
            if repeated:
                raise AirflowFailException(repeated)
            delivered = delivered_job(TryOutcome.from_json(store.get(TASK_STATE_DELIVERED)), **tries)
            passed_over = timed_out_try(TryOutcome.from_json(store.get(TASK_STATE_TIMED_OUT)), **tries)
        # The cluster client and the trigger load only here, on the worker: a DAG file that merely
        # parses never pays for them.
        from airflow_jobs_plugin import config
        from airflow_jobs_plugin.airflow.triggers import JobTrigger
        from airflow_jobs_plugin.queueing import kueue, quota_source
        from airflow_jobs_plugin.usecases.submission import (
            SubmissionRefused,
            Tries,
            TryCancelled,
            submit,
        )

        # The group and user as this try submits them, whatever pre_execute or a template made of the
        # ones the DAG was parsed with: the platform's charging rule again (the pool checks the rest).
        refused = _charging_refusal(self, spec.group, spec.user)
        if refused:
            raise AirflowFailException(f"task {self.task_id!r}: {refused}")

        chosen_queue = kueue.choose_queue(
            spec.kueue_queue,
            config.get("kueue_queue"),
            config.get_bool("kueue_manages_all_jobs"),
        )
        if chosen_queue != spec.kueue_queue:
            spec = dataclasses.replace(spec, kueue_queue=chosen_queue)
        # With Kueue as the queueing engine the pool, where there is one, keeps only its per-user
        # limits in front of Kueue: the job is handed to its LocalQueue once its user may run it. Even a
        # Kueue that takes every job at creation (manageJobsWithoutQueueName) waits for the pool: the job
        # is created behind Kueue's admission gate (docs/kueue.md).
        pool = quota_source.choose(
            self.quota_configmap,
            self.quota_namespace,
            config.get("quota_configmap"),
            config.get("quota_namespace"),
        )
        try:
            job = asyncio.run(
                submit(
                    spec,
                    identity,
                    store,
                    delivered=delivered,
                    conn_id=conn_id,
                    pool=pool,
                    log=self.log,
                    tries=Tries(**tries),
                    passed_over=passed_over,
                )
            )
        except TryCancelled as exc:
            self._remember(
                context, TASK_STATE_FATAL, TryOutcome(ti.try_number, message=str(exc), cancelled=True)
            )
            raise AirflowFailException(str(exc)) from exc
        except SubmissionRefused as exc:
            raise AirflowFailException(str(exc)) from exc
        # Airflow 3.3 times a deferred task out only by the timeout given to defer() (task-sdk 1.3
        # BaseOperator.defer, task_runner._run_execute_callable's "TODO: handle timeout in case of
        # deferral"; the cncf KubernetesPodOperator had the same gap, apache/airflow#67227): the try's
        # execution_timeout is passed on, less what the worker already spent of it (jobs/timeouts.py).
        timeout = remaining_timeout(
            self.execution_timeout, getattr(ti, "start_date", None), datetime.now(timezone.utc)
        )
        if timeout is not None:
            self.log.info(
                "%s %s/%s must end within %s (what is left of execution_timeout %s, waiting in the queue "
                "included); then the task fails and the job is cancelled",
                job.kind,
                spec.namespace or "default",
                job.name,
                timedelta(seconds=round(timeout.total_seconds())),
                self.execution_timeout,
            )
        trigger = JobTrigger(
            job_name=job.name,
            namespace=spec.namespace or "default",
            kind=job.kind,
            kubernetes_conn_id=conn_id,
            max_attempts=spec.max_attempts,
            retry_backoff=spec.retry_backoff.total_seconds(),
            retry_backoff_max=spec.retry_backoff_max.total_seconds(),
            retryable_exit_codes=list(spec.retryable_exit_codes),
            fatal_exit_codes=list(spec.fatal_exit_codes),
            stream_logs=stream_logs,
            quota_configmap=job.quota_configmap,
            quota_namespace=job.quota_namespace,
            # The job exists now: its TTL cannot remove it sooner than this plus the TTL.
            deferred_at=datetime.now(timezone.utc).isoformat(),
            ttl_after_finished=(
                spec.ttl_after_finished.total_seconds() if spec.ttl_after_finished is not None else None
            ),
        )
        if job.succeeded:
            # An earlier try's success that no try returned (submission.returned_at_once): read it here,
            # as the trigger would, and return it without a deferral for Airflow's scheduler to race.
            self.log.info(
                "%s %s/%s of an earlier try already succeeded and no try returned it: returning its success "
                "without running it again",
                job.kind,
                spec.namespace or "default",
                job.name,
            )
            # Read here, nothing deferred: no scheduler can race a deferral's exit (jobs/stale_event.py).
            trigger.deferred_at = None
            return self.execute_complete(context, asyncio.run(_first_event(trigger)))
        self.defer(timeout=timeout, trigger=trigger, method_name="execute_complete")

    # --- completion ---

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """Airflow's own resume, but a deferral that ran out of its timeout fails naming the timeout and
        the job, and is recorded so a retry never follows that job."""
        if timed_out(next_method, next_kwargs):
            self._deferral_timed_out(context)
        return super().resume_execution(next_method, next_kwargs, context)

    def _deferral_timed_out(self, context: Context) -> None:
        """Fail the try whose deferral Airflow timed out (scheduler's check_trigger_timeouts, airflow-core
        3.3 jobs/scheduler_job_runner.py). The job is cancelled by the GPU Jobs app in the API server: the
        trigger's cleanup asked for it when the triggerer dropped it (Airflow calls no on_kill for a
        trigger past its timeout), and Airflow's database, which the app reads, confirms the timeout."""
        from airflow.sdk.exceptions import TaskDeferralTimeout

        ti = context["ti"]
        store = context.get("task_state_store")
        current = store.get(STATE_KEY) if store is not None else None
        job = current if isinstance(current, Mapping) else {}
        message = timeout_message(
            execution_timeout=self.execution_timeout,
            job=str(job.get("name") or ""),
            kind=str(job.get("kind") or ""),
            namespace=str(job.get("namespace") or self.namespace or "default"),
            try_number=ti.try_number,
        )
        self._remember(
            context,
            TASK_STATE_TIMED_OUT,
            TryOutcome(ti.try_number, job=str(job.get("name") or ""), message=message),
        )
        self.log.error("%s", message)
        raise TaskDeferralTimeout(message)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        try_number = context["ti"].try_number if "ti" in context else 0
        ended = JobEvent.from_payload(event)
        if ended.log_markers:
            ended = self._print_missing_logs(ended)
        if ended.succeeded:
            result = summary(ended)
            self._remember(context, TASK_STATE_DELIVERED, TryOutcome(try_number, job=result["job_name"]))
            self.log.info(
                "%s %s succeeded after %d attempt(s); %.0f GPU-seconds",
                result["kind"],
                result["job_name"],
                result["attempts"],
                result["gpu_seconds"] or 0,
            )
            if ended.result is not None and "ti" in context:
                # Its own key too, so a downstream task pulls the job's metrics without the summary.
                context["ti"].xcom_push(key=RESULT_XCOM_KEY, value=ended.result)
            return result
        message = failure_message(ended)
        if ended.cancelled:
            # The task log's last lines: cancelled, by whom, when; and no retry will run it again.
            self.log.error("%s; not retried (clear the task to run it again)", headline(ended))
        if ended.fatal:
            self._remember(
                context,
                TASK_STATE_FATAL,
                TryOutcome(try_number, job=ended.job_name, message=message, cancelled=ended.cancelled),
            )
            raise AirflowFailException(message)
        raise AirflowException(message)

    def _print_missing_logs(self, ended: JobEvent) -> JobEvent:
        """Print the last lines the trigger left out (it does not wait for slow logs before its event):
        each container run from the trigger's marker on, so none is missing and none printed twice.
        The task's outcome never depends on it: a read that fails is noted in the log."""
        from airflow_jobs_plugin.cluster.kube import KubeClient
        from airflow_jobs_plugin.logs.logtail import print_missing

        async def read() -> list[str]:
            client = await KubeClient.from_connection(self.kubernetes_conn_id)
            try:
                return await print_missing(client, ended.namespace, ended.log_markers, self.log)
            finally:
                await client.close()

        try:
            printed = asyncio.run(read())
        except Exception as exc:  # the cluster unreachable from the worker: the job's outcome stands
            self.log.warning("could not read the last log lines of %s: %s", ended.job_name, exc)
            return ended
        if not printed:
            return ended
        keep = max(len(ended.log_tail), 1)
        return dataclasses.replace(ended, log_tail=(*ended.log_tail, *printed)[-keep:])

    def _remember(self, context: Context, key: str, outcome: TryOutcome) -> None:
        """Record what this try returned for later tries; a record that cannot be written must not
        change the task's outcome (a fatal failure must stay fatal), so the error is only logged."""
        store = context.get("task_state_store")
        if store is None:
            return
        try:
            store.set(key, outcome.to_json())
        except Exception as exc:  # whatever the state store's backend raises
            self.log.warning("could not record %s in the task state store: %s", key, exc)

    def on_kill(self) -> None:
        """Nothing runs on the worker while the job runs: the trigger's on_kill deletes the job."""


async def _first_event(trigger: Any) -> dict[str, Any]:
    """The payload of ``trigger``'s event, run in this process (the job has ended: it comes at once)."""
    from airflow_jobs_plugin.cluster import watch as shared

    try:
        async for event in trigger.run():
            return dict(event.payload)
    finally:
        await shared.shutdown()
    raise RuntimeError(f"the trigger following {trigger.job_name} ended without an event")


def _charging_refusal(task: BaseOperator, group: str, user: str) -> str | None:
    """Why the platform's charging rule forbids ``task`` to submit as ``user`` in ``group`` (None: it
    allows it); the rule is the cluster policy's (cluster_policy.submit_problem)."""
    from airflow_jobs_plugin.airflow.cluster_policy import submit_problem

    dag = task.dag if task.has_dag() else None
    return submit_problem(str(dag.fileloc) if dag is not None else "", group, user)
