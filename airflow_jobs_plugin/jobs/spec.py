"""The job a DAG author asks for: :class:`JobSpec`, its limits and defaults, and the one list of the
author's arguments. The checker that turns arguments into a JobSpec, at parse time and once rendered, is
:mod:`airflow_jobs_plugin.jobs.spec_checks`; job naming is :mod:`airflow_jobs_plugin.jobs.naming`. Pure (stdlib
only, no I/O).

Decisions worth knowing:

* ``command`` given as one string runs through ``sh -c`` (pipes and ``$VARS`` work as typed); give a
  list to bypass the shell. ``args`` must be a list: a single string there is nearly always a command
  line that would reach the program as one argument.
* The kind of job is the registry's choice (:mod:`airflow_jobs_plugin.jobs.kinds`, ``for_spec``):
  ``workers == 1`` builds a ``batch/v1`` Job; ``workers > 1`` an MPIJob with one launcher and that many
  workers, or with ``framework='torchrun'`` an Indexed Job of that many nodes and a headless Service.
  An MPI job without GPUs (``gpus=0``) is accepted: it is legal on Kubernetes and useful for smoke
  tests, although the product is meant for GPU jobs.
* The launcher gets GPUs only as a full extra MPI worker: ``launcher_gpus`` is 0 or equal to ``gpus``
  (the MPI operator hides GPUs from a launcher that is not also a worker).
* Every job argument may be a Jinja template or an XComArg: at parse time (``templated=True``) the
  checker sets aside what it cannot read yet and checks the rest; once rendered it checks everything,
  reading each rendered text as its argument's :class:`Reading` says.
* ``group`` and ``user`` are free text. Labels carry a sanitized slug (:func:`label_value`); the exact
  value lives in annotations and in the ``JOB_GROUP`` / ``JOB_USER`` environment variables.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from datetime import timedelta
from enum import Enum
from typing import TYPE_CHECKING, Any

# Job naming lives in naming.py; its names are importable from here too.
from airflow_jobs_plugin.jobs.naming import (  # noqa: F401
    ATTEMPT_SUFFIX_MAX,
    DNS_LABEL_MAX,
    HASH_LEN,
    MAX_ATTEMPTS,
    MAX_WORKERS,
    NAME_MAX,
    SLUG_MAX,
    TASK_KEY_MAX,
    TaskIdentity,
    attempt_name,
    instance_key,
    is_dns_label,
    job_name,
    label_value,
    split_attempt,
    task_key,
)

# --- limits and defaults -------------------------------------------------------------------------

MAX_GPUS_PER_WORKER = 64
MAX_BACKOFF_LIMIT = 100
MAX_PRIORITY = 1000
PRIORITY_NAMES: Mapping[str, int] = {"low": -100, "normal": 0, "high": 100}

DEFAULT_BACKOFF_LIMIT = 1  # one pod-level retry absorbs a flaky crash; more repeat deterministic ones on GPUs
DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_RETRY_BACKOFF = timedelta(seconds=30)
DEFAULT_RETRY_BACKOFF_MAX = timedelta(minutes=10)
DEFAULT_SCHEDULE_TIMEOUT = timedelta(minutes=3)
# schedule_timeout left out: the quota policy's applies (its own default is DEFAULT_SCHEDULE_TIMEOUT). Any
# value the author writes, the policy's default included, is the job's own and wins for it.
SCHEDULE_TIMEOUT_FROM_POLICY = "policy"
# requeue_limit left out: the job carries no limit of its own and the quota policy's requeue_limit
# applies (the manifest writes the annotation only for a limit the author chose, any value included).
REQUEUE_LIMIT_FROM_POLICY = "policy"
DEFAULT_REQUEUE_LIMIT = REQUEUE_LIMIT_FROM_POLICY
DEFAULT_ACTIVE_DEADLINE = timedelta(days=1)
DEFAULT_TTL_AFTER_FINISHED = timedelta(days=7)
# A shorter TTL lets Kubernetes delete a finished job before the trigger has read its final state.
MIN_TTL_AFTER_FINISHED = timedelta(seconds=60)

# The account a job's pods run as when the task names none, and the only one a job may run as unless the
# platform allows others ([airflow_jobs] job_service_accounts, and the admission policy's parameter, the
# ConfigMap airflow-jobs-job-accounts): the namespace's own `default` account, which every namespace has,
# with its token never mounted (automountServiceAccountToken false, no projected token), so whatever
# rights it may hold are out of the pods' reach. A job's pods never carry the token of an Airflow
# component (the worker's, the triggerer's).
DEFAULT_JOB_SERVICE_ACCOUNT = "default"

# The prefix Kubernetes reserves for its own PriorityClasses (system-node-critical, system-cluster-critical:
# kubernetes/kubernetes v1.36 pkg/apis/scheduling/types.go, SystemPriorityClassPrefix; only those two may
# carry it). A pod of such a class preempts any other pod of its node, whoever's, so no job of the product
# may name one, whatever the quota policy's priority_classes say.
SYSTEM_PRIORITY_CLASS_PREFIX = "system-"

LAUNCHER_CREATION_POLICIES = ("AtStartup", "WaitForWorkersReady")
MPI_IMPLEMENTATIONS = ("OpenMPI", "Intel", "MPICH")
IMAGE_PULL_POLICIES = ("Always", "IfNotPresent", "Never")
TOLERATION_OPERATORS = ("Equal", "Exists")
TOLERATION_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")

# GPUs: the extended resource the job asks for. MIG slices (nvidia.com/mig-1g.10gb) and other vendors'
# devices (amd.com/gpu) are whole-number extended resources too; the quota counts them per name.
DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
# Resource names that are GPUs whatever the job's gpu_resource: only the gpus argument may ask for them,
# so a container_resources entry or a pod_template cannot take GPUs the quota does not charge.
GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-", "amd.com/gpu", "gpu.intel.com/")

# /dev/shm: Docker's and containerd's 64 MiB default starves PyTorch DataLoader workers, which pass
# batches through shared memory. "auto" mounts a memory-backed emptyDir of 8Gi, or half of `memory`
# when that is set lower (tmpfs pages count against the container's memory limit).
SHM_AUTO = "auto"
DEFAULT_SHM_SIZE = "8Gi"
SHM_VOLUME = "dshm"
SHM_PATH = "/dev/shm"

# Results: the container writes a small JSON document here; Kubernetes copies it into the pod status.
TERMINATION_MESSAGE_PATH = "/dev/termination-log"


MAIN_CONTAINER = "main"
WAIT_FOR_WORKERS_CONTAINER = "wait-for-workers"

# Environment variables the product sets in every container (see pod_template.py).
ENV_USER = "JOB_USER"
ENV_GROUP = "JOB_GROUP"
ENV_NAME = "JOB_NAME"
ENV_ATTEMPT = "JOB_ATTEMPT"
ENV_ROLE = "JOB_ROLE"
ENV_RANK = "JOB_RANK"
ENV_WORLD_SIZE = "JOB_WORLD_SIZE"
PRODUCT_ENV = (ENV_USER, ENV_GROUP, ENV_NAME, ENV_ATTEMPT, ENV_ROLE, ENV_RANK, ENV_WORLD_SIZE)
# Set by the GPU device plugin from the gpus argument; an author value could expose GPUs not charged.
DEVICE_PLUGIN_ENV = ("NVIDIA_VISIBLE_DEVICES",)


# --- the job arguments ---------------------------------------------------------------------------


class Reading(Enum):
    """How an argument given as a template is read once rendered: Jinja renders every value to text, and
    ``gpus="{{ params.gpus }}"`` renders to ``"4"``."""

    TEXT = "text"  # kept as written ("None" is None where None is the default)
    WHOLE = "a whole number"
    WHOLE_LIST = "a list of whole numbers"  # each item that is text
    BOOLEAN = "true or false"  # in any case
    DURATION = "a number of seconds"  # or "None"


@dataclass(frozen=True)
class Argument:
    """One argument of the DAG author's that describes the job (a JobOperator parameter)."""

    name: str  # the operator's parameter
    default: Any  # what leaving it out means, before it is checked (None for image and group: required)
    reading: Reading = Reading.TEXT
    field: str = ""  # the JobSpec field and validate()'s keyword, where it is not ``name``

    @property
    def spec_field(self) -> str:
        return self.field or self.name


# The one list of job arguments, in the order validate() takes them. Everything else follows from it:
# JOB_ARGUMENTS, the operator's template_fields (every job argument may be Jinja or an XComArg) and its
# names for validate()'s keywords, validate()'s keywords and defaults, and how each rendered template is
# read. What Python cannot derive is checked against it by tests: JobOperator.__init__ (explicit for IDEs
# and for Airflow, which reads its signature), its docstring and docs/operator.md, and JobSpec's fields.
ARGUMENTS: tuple[Argument, ...] = (
    Argument("image", None),
    Argument("group", None),
    Argument("user", None),
    Argument("command", None),
    Argument("args", None),
    Argument("env", None),
    Argument("env_from", None),
    Argument("gpus", 0, Reading.WHOLE),
    Argument("gpu_resource", DEFAULT_GPU_RESOURCE),
    Argument("workers", 1, Reading.WHOLE),
    Argument("framework", "mpi"),
    Argument("cpu", None),
    Argument("memory", None),
    Argument("container_resources", None),
    Argument("shm_size", SHM_AUTO),
    Argument("node_selector", None),
    Argument("affinity", None),
    Argument("tolerations", None),
    Argument("volumes", None),
    Argument("volume_mounts", None),
    Argument("namespace", None),
    Argument("priority_class_name", None),
    Argument("scheduler_name", None),
    Argument("security_context", None),
    Argument("container_security_context", None),
    Argument("pod_template", None),
    Argument("backoff_limit", DEFAULT_BACKOFF_LIMIT, Reading.WHOLE),
    Argument("max_attempts", DEFAULT_MAX_ATTEMPTS, Reading.WHOLE),
    Argument("retry_backoff", DEFAULT_RETRY_BACKOFF, Reading.DURATION),
    Argument("retry_backoff_max", DEFAULT_RETRY_BACKOFF_MAX, Reading.DURATION),
    Argument("retryable_exit_codes", (), Reading.WHOLE_LIST),
    Argument("fatal_exit_codes", (), Reading.WHOLE_LIST),
    Argument("queue_timeout", None, Reading.DURATION),
    Argument("schedule_timeout", SCHEDULE_TIMEOUT_FROM_POLICY, Reading.DURATION),
    Argument("requeue_limit", DEFAULT_REQUEUE_LIMIT, Reading.WHOLE),
    Argument("active_deadline", DEFAULT_ACTIVE_DEADLINE, Reading.DURATION),
    Argument("ttl_after_finished", DEFAULT_TTL_AFTER_FINISHED, Reading.DURATION),
    Argument("job_labels", None, field="labels"),
    Argument("job_annotations", None, field="annotations"),
    Argument("priority", 0, Reading.WHOLE),
    Argument("launcher_gpus", 0, Reading.WHOLE),
    Argument("launcher_cpu", None),
    Argument("launcher_memory", None),
    Argument("worker_command", None),
    Argument("wait_for_workers", True, Reading.BOOLEAN),
    Argument("launcher_creation_policy", "WaitForWorkersReady"),
    Argument("mpi_implementation", "OpenMPI"),
    Argument("init_containers", None),
    Argument("image_pull_policy", None),
    Argument("image_pull_secrets", None),
    Argument("service_account", None),
    Argument("kueue_queue", None),
)
JOB_ARGUMENTS = tuple(argument.name for argument in ARGUMENTS)
# The operator's parameter -> the JobSpec field and validate()'s keyword (job_labels -> labels).
SPEC_FIELDS: Mapping[str, str] = {argument.name: argument.spec_field for argument in ARGUMENTS}


# --- errors ----------------------------------------------------------------------------------------


class JobSpecError(ValueError):
    """An invalid job argument. ``field`` is the argument (``env.EPOCHS``, ``tolerations[0].effect``).

    When several arguments are wrong, ``errors`` lists every problem as ``(field, message)`` pairs and
    the string form shows them all, one per line, the first one being ``field``/``message``.
    """

    def __init__(self, field: str, message: str, errors: tuple[tuple[str, str], ...] = ()) -> None:
        self.field = field
        self.message = message
        self.errors = errors or ((field, message),)
        super().__init__("\n".join(f"{f}: {m}" for f, m in self.errors))


# --- immutable collections ---------------------------------------------------------------------------


class FrozenMap(Mapping):
    """An immutable, hashable, insertion-ordered mapping used for every mapping inside a JobSpec."""

    __slots__ = ("_data",)
    _data: dict[Any, Any]

    def __init__(self, data: Mapping | Any = ()) -> None:
        object.__setattr__(self, "_data", dict(data))

    def __getitem__(self, key: Any) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        return hash(tuple(self._data.items()))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return dict(self.items()) == dict(other.items())
        return NotImplemented

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("FrozenMap is immutable")

    def __reduce__(self) -> tuple:
        # Rebuild through __init__: the default slot-state restore would hit the blocked __setattr__
        # (Airflow deep-copies operators, and with them any spec they hold).
        return (FrozenMap, (self._data,))

    def __repr__(self) -> str:
        return f"FrozenMap({self._data!r})"


def freeze(value: Any) -> Any:
    """Deep-convert dicts to :class:`FrozenMap` and lists to tuples."""
    if isinstance(value, Mapping):
        return FrozenMap((k, freeze(v)) for k, v in value.items())
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """Deep-convert frozen values back to plain dicts and lists (JSON shapes for manifests)."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [thaw(v) for v in value]
    return value


# --- model -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Toleration:
    """One pod toleration, Kubernetes semantics (``operator`` Equal or Exists)."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None

    def to_k8s(self) -> dict:
        """The toleration as Kubernetes JSON."""
        out: dict[str, Any] = {"operator": self.operator}
        if self.key:
            out["key"] = self.key
        if self.value:
            out["value"] = self.value
        if self.effect:
            out["effect"] = self.effect
        if self.toleration_seconds is not None:
            out["tolerationSeconds"] = self.toleration_seconds
        return out


@dataclass(frozen=True)
class VolumeMount:
    """Where a declared volume appears in every container of the job."""

    name: str
    mount_path: str
    read_only: bool = False
    sub_path: str = ""

    def to_k8s(self) -> dict:
        """The mount as Kubernetes JSON."""
        out: dict[str, Any] = {"name": self.name, "mountPath": self.mount_path}
        if self.read_only:
            out["readOnly"] = True
        if self.sub_path:
            out["subPath"] = self.sub_path
        return out


@dataclass(frozen=True)
class JobSpec:
    """A validated job request. Build it with :meth:`build` (or :func:`validate`), never directly.

    Resources (``gpus``, ``cpu``, ``memory``) are per worker. Durations are ``timedelta``; ``None``
    means "no limit" where allowed (``queue_timeout``, ``active_deadline``, ``ttl_after_finished``,
    ``requeue_limit``; its default, :data:`REQUEUE_LIMIT_FROM_POLICY`, takes the quota policy's). ``volumes`` and ``init_containers`` keep their Kubernetes JSON shape, frozen.
    """

    image: str
    group: str
    user: str
    command: tuple[str, ...] | None = None
    args: tuple[str, ...] | None = None
    env: FrozenMap = FrozenMap()
    gpus: int = 0
    workers: int = 1
    framework: str = "mpi"
    cpu: str | None = None
    memory: str | None = None
    node_selector: FrozenMap = FrozenMap()
    tolerations: tuple[Toleration, ...] = ()
    volumes: tuple[FrozenMap, ...] = ()
    volume_mounts: tuple[VolumeMount, ...] = ()
    namespace: str | None = None
    backoff_limit: int = DEFAULT_BACKOFF_LIMIT
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    retry_backoff: timedelta = DEFAULT_RETRY_BACKOFF
    retry_backoff_max: timedelta = DEFAULT_RETRY_BACKOFF_MAX
    retryable_exit_codes: tuple[int, ...] = ()
    fatal_exit_codes: tuple[int, ...] = ()
    queue_timeout: timedelta | None = None
    schedule_timeout: timedelta | str = SCHEDULE_TIMEOUT_FROM_POLICY
    requeue_limit: int | str | None = DEFAULT_REQUEUE_LIMIT
    active_deadline: timedelta | None = DEFAULT_ACTIVE_DEADLINE
    ttl_after_finished: timedelta | None = DEFAULT_TTL_AFTER_FINISHED
    labels: FrozenMap = FrozenMap()
    annotations: FrozenMap = FrozenMap()
    priority: int = 0
    launcher_gpus: int = 0
    launcher_cpu: str | None = None
    launcher_memory: str | None = None
    worker_command: tuple[str, ...] | None = None
    wait_for_workers: bool = True
    launcher_creation_policy: str = "WaitForWorkersReady"
    mpi_implementation: str = "OpenMPI"
    init_containers: tuple[FrozenMap, ...] = ()
    image_pull_policy: str | None = None
    image_pull_secrets: tuple[str, ...] = ()
    service_account: str | None = None
    env_from: tuple[FrozenMap, ...] = ()
    gpu_resource: str = DEFAULT_GPU_RESOURCE
    container_resources: FrozenMap = FrozenMap()
    shm_size: str | None = DEFAULT_SHM_SIZE
    affinity: FrozenMap = FrozenMap()
    priority_class_name: str | None = None
    scheduler_name: str | None = None
    security_context: FrozenMap = FrozenMap()
    container_security_context: FrozenMap = FrozenMap()
    pod_template: FrozenMap = FrozenMap()
    # The Kueue LocalQueue that admits the job instead of the product's pool (see kueue.py).
    kueue_queue: str | None = None

    @classmethod
    def build(cls, **kwargs: Any) -> JobSpec:
        """Validate DAG-author arguments (see :func:`~airflow_jobs_plugin.jobs.spec_checks.validate`) and
        return the spec."""
        from airflow_jobs_plugin.jobs.spec_checks import validate

        return validate(**kwargs)

    @property
    def kind(self) -> str:
        """The kind of job it runs as: the name of the adapter in :mod:`airflow_jobs_plugin.jobs.kinds`
        that takes its ``framework`` and ``workers``."""
        return kind_of_spec(self).name

    @property
    def pod_count(self) -> int:
        """Pods one attempt runs (its kind's count: the workers, plus an MPI job's launcher)."""
        return kind_of_spec(self).pod_count(self)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serializable arguments; ``validate(**spec.to_dict()) == spec``."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, timedelta):
                value = value.total_seconds()
            elif f.name == "tolerations":
                value = [t.to_k8s() for t in value]
            elif f.name == "volume_mounts":
                value = [m.to_k8s() for m in value]
            else:
                value = thaw(value)
            out[f.name] = value
        return out


def total_gpus(spec: JobSpec) -> int:
    """GPUs the job holds while running, what the quota pool charges: workers x gpus, plus an MPI
    job's launcher's (its kind's count)."""
    return kind_of_spec(spec).total_gpus(spec)


def kind_of_spec(spec: JobSpec) -> JobKind:
    """The adapter ``spec`` runs as: the registry's choice (``kinds.for_spec``). The kinds build from
    this module's names (their pod template reads its constants), so the registry is imported when first
    asked, not when this module is."""
    from airflow_jobs_plugin.jobs import kinds

    return kinds.for_spec(spec)


# --- the checker's names ------------------------------------------------------------------------------
# The checker (spec_checks.py) builds a JobSpec, so it imports this module and this module cannot import
# it in turn; its names are importable from here too, loaded when first asked for (PEP 562).
_CHECKER_NAMES = frozenset(
    {
        "AFFINITY_KEYS",
        "CONTAINER_SECURITY_CONTEXT_KEYS",
        "DNS_POLICIES",
        "ENV_FROM_SOURCES",
        "ENV_VALUE_FROM",
        "MPI_OPERATOR_VOLUMES",
        "POD_SECURITY_CONTEXT_KEYS",
        "VOLUME_SOURCES",
        "check_conn_id",
        "check_stream_logs",
        "contains_unrendered",
        "image_problem",
        "is_unrendered",
        "label_key_problem",
        "label_value_problem",
        "parse_quantity",
        "validate",
    }
)

if TYPE_CHECKING:
    from airflow_jobs_plugin.jobs.kinds import JobKind
    from airflow_jobs_plugin.jobs.spec_checks import (  # noqa: F401
        AFFINITY_KEYS,
        CONTAINER_SECURITY_CONTEXT_KEYS,
        DNS_POLICIES,
        ENV_FROM_SOURCES,
        ENV_VALUE_FROM,
        MPI_OPERATOR_VOLUMES,
        POD_SECURITY_CONTEXT_KEYS,
        VOLUME_SOURCES,
        check_conn_id,
        check_stream_logs,
        contains_unrendered,
        image_problem,
        is_unrendered,
        label_key_problem,
        label_value_problem,
        parse_quantity,
        validate,
    )


def __getattr__(name: str) -> Any:
    if name in _CHECKER_NAMES:
        from airflow_jobs_plugin.jobs import spec_checks

        return getattr(spec_checks, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
