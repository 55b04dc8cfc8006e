"""What a job's pods ask for, read from its own spec: the only thing the quota pool charges.

Annotations are text any author with create rights writes; the pod templates are what the scheduler
places and the kubelet's device plugins allocate. So the pool reads a job's GPUs, its device and its pod
count from the templates, through the job's kind (``JobKind.pod_sets``), by the rules the cluster itself
applies:

1. A container asks for ``requests[r]``, or for ``limits[r]`` where the request is absent (the API server
   defaults one from the other: kubernetes/kubernetes ``pkg/apis/core/v1/defaults.go``, v1.32).
2. A pod asks for what the kubelet and the scheduler count (kubernetes/kubernetes v1.32,
   ``staging/src/k8s.io/component-helpers/resource/helpers.go``, ``aggregateContainerResourcesByFn``;
   before v1.32 ``pkg/api/v1/resource/helpers.go`` ``PodRequests``, sidecars since v1.28): the sum of its
   containers and of its ``restartPolicy: Always`` init containers (sidecars, which keep running), or
   more if one init container needs more while it runs, counted with the sidecars started before it.
   The device manager allocates an init container's devices and hands them on to the app containers
   (``pkg/kubelet/cm/devicemanager/manager.go``), so this maximum is what the pod holds.
3. A job holds its pod sets' counts times those requests (a Job: ``min(parallelism, completions)`` pods
   at once, ``pkg/controller/job/job_controller.go``; an MPIJob: each replica spec's ``replicas``).

Some pod specs reach GPUs no count can charge, and are refused with the field and the fix: a DRA
``resourceClaims`` (a driver allocates what the claim's class says), a ``privileged`` container (it sees
every device of its node), a second accelerator besides the one the job is charged for, ``nodeName``
(which binds the pod without the scheduler), and a ``NVIDIA_VISIBLE_DEVICES`` the device plugin did not
set. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_jobs_plugin.cluster.objects import dig, mapping
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.spec import parse_quantity

# Extended resources that are accelerators: any of them is a device the quota must charge or refuse.
# nvidia.com/ covers whole GPUs, MIG slices and time-sliced shares (nvidia.com/gpu.shared).
ACCELERATOR_PREFIXES = (
    "nvidia.com/",
    "amd.com/gpu",
    "gpu.intel.com/",
    "habana.ai/",
    "aws.amazon.com/neuron",
    "google.com/tpu",
    "xilinx.com/",
)
# What the NVIDIA container toolkit reads to decide which GPUs a container sees: only the device plugin
# may set it (to the devices it allocated). "void" exposes no GPU and no driver, and is what the product
# writes (pod_template.hide_unallocated_gpus); "none" still mounts the driver and its control devices.
# The admission policy's rule charge-the-spec allows "void" alone, one spelling that shows nothing, and so
# does the pool.
VISIBLE_DEVICES_ENV = "NVIDIA_VISIBLE_DEVICES"
HIDDEN_DEVICES = ("void",)
_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


class ChargeRefused(ValueError):
    """The job's pods could reach GPUs the pool cannot charge; ``problems`` name each field and its fix."""

    def __init__(self, job: str, problems: Sequence[str]):
        self.problems = tuple(problems)
        super().__init__(f"job {job} cannot be charged by the GPU quota pool: " + "; ".join(self.problems))


@dataclass(frozen=True)
class PodCharge:
    """``count`` pods of role ``role`` run at once, each holding ``gpus`` of the job's device."""

    role: str
    count: int
    gpus: int
    node_selector: Mapping[str, str]


@dataclass(frozen=True)
class JobCharge:
    """What the pool charges a job: one device (``resource``) and its pods' shapes."""

    resource: str
    pods: tuple[PodCharge, ...]

    @property
    def gpus(self) -> int:
        return sum(pod.count * pod.gpus for pod in self.pods)

    @property
    def pod_count(self) -> int:
        return sum(pod.count for pod in self.pods)


def is_accelerator(resource: object) -> bool:
    return isinstance(resource, str) and resource.startswith(ACCELERATOR_PREFIXES)


def device_count(value: object) -> int | None:
    """A quantity of devices ("2", 2, "1k") as a whole number; None for what is not one (the API server
    allows only whole numbers of an extended resource, so such a job is refused, never charged 0)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    number = parse_quantity(value.strip()) if isinstance(value, str) else None
    if number is None or number < 0 or number != number.to_integral_value():
        return None
    return int(number)


def container_asks(container: Mapping[str, Any]) -> dict[str, int]:
    """The accelerators one container asks for, by resource name (rule 1)."""
    resources = container.get("resources") or {}
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    asked: dict[str, int] = {}
    for name in {*requests, *limits}:
        if is_accelerator(name):
            asked[str(name)] = device_count(requests[name] if name in requests else limits[name]) or 0
    return asked


def _malformed(container: Mapping[str, Any]) -> list[str]:
    resources = container.get("resources") or {}
    return [
        f"resources.{part}.{name}"
        for part in ("requests", "limits")
        for name, value in (resources.get(part) or {}).items()
        if is_accelerator(name) and device_count(value) is None
    ]


def _is_sidecar(container: Mapping[str, Any]) -> bool:
    return container.get("restartPolicy") == "Always"


def pod_request(pod_spec: Mapping[str, Any], resource: str) -> int:
    """How many of ``resource`` a pod holds: the kubelet's effective request (rule 2)."""
    total = sum(container_asks(c).get(resource, 0) for c in pod_spec.get("containers") or ())
    sidecars = 0
    init_peak = 0
    for container in pod_spec.get("initContainers") or ():
        own = container_asks(container).get(resource, 0)
        if _is_sidecar(container):
            sidecars += own
            total += own
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, own + sidecars)
    return max(total, init_peak)


def _containers(pod_spec: Mapping[str, Any], where: str) -> Iterable[tuple[str, Mapping[str, Any]]]:
    for field in _CONTAINER_LISTS:
        for i, container in enumerate(pod_spec.get(field) or ()):
            if isinstance(container, Mapping):
                yield f"{where}.{field}[{i}]", container


def pod_level_problems(pod_spec: Mapping[str, Any], where: str) -> list[str]:
    """The pod spec's own fields that reach devices past the pool (``nodeName``, ``resourceClaims``)."""
    problems = []
    if pod_spec.get("nodeName"):
        problems.append(
            f"{where}.nodeName: binds the pod to node {pod_spec['nodeName']!r} without the scheduler, past the "
            "quota pool's placement; remove it and choose nodes with node_selector or affinity"
        )
    if pod_spec.get("resourceClaims"):
        problems.append(
            f"{where}.resourceClaims: a DRA claim gets devices from its driver, which the quota pool cannot "
            "count; remove it and ask for GPUs with gpus (and gpu_resource)"
        )
    return problems


def reach_problems(container: Mapping[str, Any], path: str) -> list[str]:
    """A container's ways to devices that no resource count shows: a DRA claim, ``privileged``."""
    problems = []
    if (container.get("resources") or {}).get("claims"):
        problems.append(
            f"{path}.resources.claims: a DRA claim gets devices from its driver, which the quota pool "
            "cannot count; remove it and ask for GPUs with gpus (and gpu_resource)"
        )
    if (container.get("securityContext") or {}).get("privileged") is True:
        problems.append(
            f"{path}.securityContext.privileged: a privileged container sees every GPU of its node, "
            "charged or not; remove it and add only the capabilities the program needs"
        )
    return problems


def container_problems(container: Mapping[str, Any], path: str, resource: str | None) -> list[str]:
    """Why one container could use GPUs its job is not charged for: :func:`reach_problems`, a device
    other than ``resource`` (None: any accelerator at all), a ``NVIDIA_VISIBLE_DEVICES``."""
    problems = reach_problems(container, path)
    for field in _malformed(container):
        problems.append(f"{path}.{field}: is not a whole number of devices; give a count such as 1 or 8")
    for name in sorted(container_asks(container)):
        if resource is None:
            problems.append(
                f"{path}.resources: asks for {name}; GPUs come only from the gpus argument (and "
                "gpu_resource), which the quota charges -- remove it"
            )
        elif name != resource:
            problems.append(
                f"{path}.resources: asks for {name}, but the job is charged for {resource}; a job "
                f"holds one kind of device -- ask for it with gpus and gpu_resource={name!r}"
            )
    for j, var in enumerate(container.get("env") or ()):
        if not isinstance(var, Mapping) or var.get("name") != VISIBLE_DEVICES_ENV:
            continue
        if "valueFrom" in var or str(var.get("value") or "") not in HIDDEN_DEVICES:
            problems.append(
                f"{path}.env[{j}]: {VISIBLE_DEVICES_ENV} would show GPUs the device plugin did not "
                "allocate to this container; remove it (gpus sets it)"
            )
    return problems


def pod_spec_problems(pod_spec: Mapping[str, Any], where: str, resource: str) -> list[str]:
    """Why a pod spec could use GPUs its job is not charged for (empty: it cannot); each problem names
    the field under ``where`` and the fix. ``resource`` is the device the job is charged for."""
    problems = pod_level_problems(pod_spec, where)
    for path, container in _containers(pod_spec, where):
        problems += container_problems(container, path, resource)
    return problems


def _devices(templates: Iterable[Mapping[str, Any]]) -> list[str]:
    found: set[str] = set()
    for template in templates:
        for _path, container in _containers(mapping(template, "spec"), ""):
            found.update(container_asks(container))
    return sorted(found)


def job_device(templates: Iterable[Mapping[str, Any]]) -> str:
    """The device a job's pod templates ask for (whole NVIDIA GPUs where they ask for none; the first
    by name where they ask for several, which :func:`job_charge` refuses)."""
    return next(iter(_devices(templates)), labels.GPU_RESOURCE)


def job_charge(job: Mapping[str, Any]) -> JobCharge:
    """What ``job`` holds once admitted, from its pod templates (rules 1-3); :class:`ChargeRefused` if
    its pods could reach GPUs no count can charge."""
    from airflow_jobs_plugin.jobs.kinds import kind_of  # the registry imports this module's users

    kind = kind_of(job)
    pod_sets = kind.pod_sets(job)
    devices = _devices(pod_set.template for pod_set in pod_sets)
    name = str(dig(job, "metadata", "name") or "?")
    problems: list[str] = []
    if len(devices) > 1:
        problems.append(
            f"spec: its pods ask for {', '.join(devices)}; a job holds one kind of device, which its "
            "quota is charged for -- split it into one job per device"
        )
    resource = devices[0] if devices else labels.GPU_RESOURCE
    for pod_set in pod_sets:
        if pod_set.count < 0:
            # The API server refuses a Job's negative parallelism; an MPIJob's replicas only its CRD's
            # schema would: counted as none, the job would be charged less than it may come to run.
            problems.append(f"{pod_set.role} count: {pod_set.count} pods; give 0 or more")
        problems += pod_spec_problems(
            mapping(pod_set.template, "spec"), f"{pod_set.role} template spec", resource
        )
    if problems:
        raise ChargeRefused(name, problems)
    return JobCharge(
        resource=resource,
        pods=tuple(
            PodCharge(
                role=pod_set.role,
                count=max(pod_set.count, 0),
                gpus=pod_request(mapping(pod_set.template, "spec"), resource),
                node_selector={
                    str(k): str(v) for k, v in mapping(pod_set.template, "spec", "nodeSelector").items()
                },
            )
            for pod_set in pod_sets
        ),
    )
