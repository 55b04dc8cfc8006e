"""What a job's pods may not do on their node: the Pod Security Standards' **baseline** level, and the
RuntimeClasses the platform allows.

A pod that shares the node's network or processes, mounts a directory of the node, adds capabilities or
unmasks /proc reaches the node and every pod on it (their service-account tokens live under
``/var/lib/kubelet/pods``). Whoever creates a job in the jobs' namespace (every DAG, with the worker's
token) would hold that reach. The cluster refuses it three times: Pod Security admission refuses such a
pod in a namespace labelled ``pod-security.kubernetes.io/enforce: baseline`` (helm-values/pod-security.yaml),
the admission policy's rule ``pod-security`` refuses a Job or MPIJob whose pod templates ask for it
(Pod Security admission only warns about a workload's template; the pods would fail to be created one
by one), and :func:`~airflow_jobs_plugin.jobs.spec_checks.validate` refuses the argument that asks for
it when the DAG is parsed, with the field and the fix.

The checks are baseline's at its latest version, as kubernetes/kubernetes v1.36.3 writes them in
``staging/src/k8s.io/pod-security-admission/policy/``; each function below names its file. A check
there that changed across versions (sysctls, seLinuxOptions, procMount) is taken in its newest form.
Restricted-level checks (``runAsNonRoot``, ``allowPrivilegeEscalation``, dropping ``ALL``, volume types)
are not baseline's and are not refused here: docs/deploying.md says how to run the namespace at
``restricted``.

Every function reads plain JSON-shaped data, tolerates any shape (a wrong type is the checker's or the
API server's to report) and returns :class:`Refusal` s; none raises. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_jobs_plugin.cluster.objects import Meta

LEVEL = "baseline"

# check_capabilities_baseline.go (capabilities_allowed_1_0): the container runtime's default set. NET_RAW
# is not in it: baseline refuses adding it back.
BASELINE_CAPABILITIES = (
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
)
# check_sysctls.go (sysctlsAllowedV1Dot32, the newest list): namespaced sysctls isolated from other pods.
SAFE_SYSCTLS = (
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
)
# check_seLinuxOptions.go (selinuxAllowedTypes1_31): the empty type is the runtime's default.
SELINUX_TYPES = ("", "container_t", "container_init_t", "container_kvm_t", "container_engine_t")
# check_seccompProfile_baseline.go (validSeccomp, v1.19+) and check_appArmorProfile.go (allowedProfileType):
# the runtime's default profile or one installed on the node; never Unconfined.
SECCOMP_TYPES = ("RuntimeDefault", "Localhost")
APPARMOR_TYPES = ("RuntimeDefault", "Localhost")
# check_appArmorProfile.go (allowedAnnotationValue): the annotations the fields replaced, still read.
APPARMOR_ANNOTATION_PREFIX = "container.apparmor.security.beta.kubernetes.io/"
APPARMOR_ANNOTATION_VALUES = ("", "runtime/default")
APPARMOR_ANNOTATION_LOCALHOST = "localhost/"
# check_procMount_baseline.go: the masked /proc.
DEFAULT_PROC_MOUNT = "Default"

# Every container of a pod, as visitContainers (policy/visitor.go) walks them.
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
LIFECYCLE_HANDLERS = ("postStart", "preStop")

# Why each baseline check refuses, and the fix, in the words every message uses; keyed by the check's
# ``ID`` in policy/check_*.go.
_WHY = {
    "hostNamespaces": "a pod sharing the node's network, processes or IPC reaches the node and every "
    "pod on it -- remove it (a job's pods reach each other over the pod network)",
    "privileged": "a privileged container holds every device and capability of the node -- remove it "
    "and add only the capabilities the program needs",
    "capabilities_baseline": "only the container runtime's default capabilities may be added ("
    + ", ".join(BASELINE_CAPABILITIES)
    + ") -- remove the others",
    "hostPathVolumes": "it opens the node's own files to the job (every pod's token under "
    "/var/lib/kubelet, the node's devices under /dev) -- use a persistentVolumeClaim, nfs, emptyDir or "
    "configMap volume",
    "hostPorts": "a host port binds the node's own address -- remove hostPort (containerPort alone "
    "serves the pod's address)",
    "procMount": "an unmasked /proc shows the node's kernel settings -- remove procMount, or run the "
    "pod in a user namespace (hostUsers: false)",
    "sysctls": "a sysctl not isolated from other pods changes the node's kernel for all of them -- remove "
    "it, or set only " + ", ".join(SAFE_SYSCTLS),
    "seLinuxOptions": "only the SELinux types "
    + ", ".join(repr(t) for t in SELINUX_TYPES if t)
    + " may be set, and no user or role -- remove it",
    "seccompProfile": "only RuntimeDefault or Localhost profiles may be set -- use "
    "{'type': 'RuntimeDefault'} or remove it",
    "appArmorProfile": "only RuntimeDefault or Localhost profiles may be set -- use "
    "{'type': 'RuntimeDefault'} or remove it",
    "windowsHostProcess": "a Windows host process runs on the node itself -- remove it",
    "hostProbesAndHostLifecycle": "a probe or hook with a host reaches another address than the pod's "
    "-- remove host (the pod's own address is the default)",
}


@dataclass(frozen=True)
class Refusal:
    """One field of a pod that baseline refuses (or a RuntimeClass the platform does not allow).

    ``field`` is its path under the argument or template it was found in (``volumes[0].hostPath``),
    ``check`` the Pod Security Standards check (``hostPathVolumes``) or ``runtimeClass``, ``what`` the
    value refused, in words (``hostPath volume 'dev' (/dev)``)."""

    field: str
    check: str
    what: str
    message: str

    @property
    def problem(self) -> tuple[str, str]:
        """``(field, message)``, as :class:`~airflow_jobs_plugin.jobs.spec.JobSpecError` lists them."""
        return self.field, self.message


def _refused(field: str, check: str, what: str, why: str = "") -> Refusal:
    return Refusal(
        field,
        check,
        what,
        f"{what} is refused by the cluster's pod security ({LEVEL}, {check}): {why or _WHY[check]}",
    )


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _items(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list | tuple) else ()


def _text(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)


# --- volumes ------------------------------------------------------------------------------------------


def hostpath_refusal(volume: Any, where: str) -> Refusal | None:
    """``check_hostPathVolumes.go``: a ``hostPath`` volume, whatever its path (``where``: the volume)."""
    volume = _mapping(volume)
    if volume.get("hostPath") is None:
        return None
    path = _mapping(volume["hostPath"]).get("path")
    shown = f" ({_text(path)})" if path is not None else ""
    return _refused(
        f"{where}.hostPath", "hostPathVolumes", f"hostPath volume {_text(volume.get('name'))!r}{shown}"
    )


def volume_refusals(volumes: Any, where: str) -> list[Refusal]:
    """Every ``hostPath`` volume of a pod's ``volumes`` (``where``: the list)."""
    found = [hostpath_refusal(volume, f"{where}[{i}]") for i, volume in enumerate(_items(volumes))]
    return [refusal for refusal in found if refusal is not None]


# --- security contexts --------------------------------------------------------------------------------


def _profile_refusals(context: Mapping[str, Any], where: str) -> Iterator[Refusal]:
    """``check_seLinuxOptions.go``, ``check_seccompProfile_baseline.go``, ``check_appArmorProfile.go`` and
    ``check_windowsHostProcess.go``: the fields a pod's and a container's securityContext share."""
    selinux = context.get("seLinuxOptions")
    if selinux is not None:
        options = _mapping(selinux)
        kind = options.get("type") or ""
        if kind not in SELINUX_TYPES:
            yield _refused(f"{where}.seLinuxOptions.type", "seLinuxOptions", f"SELinux type {_text(kind)!r}")
        for part in ("user", "role"):
            if options.get(part):
                yield _refused(
                    f"{where}.seLinuxOptions.{part}",
                    "seLinuxOptions",
                    f"SELinux {part} {_text(options[part])!r}",
                )
    for field, check, allowed in (
        ("seccompProfile", "seccompProfile", SECCOMP_TYPES),
        ("appArmorProfile", "appArmorProfile", APPARMOR_TYPES),
    ):
        profile = context.get(field)
        # An absent type is refused too: upstream compares the type, "" included, with the allowed ones.
        if profile is not None and _mapping(profile).get("type") not in allowed:
            kind = _mapping(profile).get("type")
            yield _refused(f"{where}.{field}.type", check, f"{field} type {_text(kind) if kind else 'unset'}")
    if _mapping(context.get("windowsOptions")).get("hostProcess") is True:
        yield _refused(f"{where}.windowsOptions.hostProcess", "windowsHostProcess", "hostProcess true")


def pod_security_context_refusals(context: Any, where: str) -> list[Refusal]:
    """A pod's ``securityContext`` (JobOperator's ``security_context``): ``check_sysctls.go`` and the
    profiles of :func:`_profile_refusals`."""
    context = _mapping(context)
    found = list(_profile_refusals(context, where))
    for i, sysctl in enumerate(_items(context.get("sysctls"))):
        name = _mapping(sysctl).get("name")
        if name not in SAFE_SYSCTLS:
            found.append(_refused(f"{where}.sysctls[{i}].name", "sysctls", f"sysctl {_text(name)!r}"))
    return found


def container_security_context_refusals(context: Any, where: str, *, user_namespace: bool) -> list[Refusal]:
    """A container's ``securityContext`` (JobOperator's ``container_security_context``):
    ``check_privileged.go``, ``check_capabilities_baseline.go``, ``check_procMount_baseline.go`` (any value
    in a user namespace, ``hostUsers: false``, since v1.35) and the profiles of :func:`_profile_refusals`."""
    context = _mapping(context)
    found = []
    if context.get("privileged") is True:
        found.append(_refused(f"{where}.privileged", "privileged", "privileged true"))
    added = _items(_mapping(context.get("capabilities")).get("add"))
    beyond = [c for c in added if c not in BASELINE_CAPABILITIES]
    if beyond:
        found.append(
            _refused(
                f"{where}.capabilities.add",
                "capabilities_baseline",
                "adding " + ", ".join(_text(c) for c in beyond),
            )
        )
    proc_mount = context.get("procMount")
    if proc_mount is not None and proc_mount != DEFAULT_PROC_MOUNT and not user_namespace:
        found.append(_refused(f"{where}.procMount", "procMount", f"procMount {_text(proc_mount)!r}"))
    found += _profile_refusals(context, where)
    return found


# --- containers ---------------------------------------------------------------------------------------


def container_refusals(container: Any, where: str, *, user_namespace: bool) -> list[Refusal]:
    """One container (an init container, a sidecar, the main one): its ``securityContext``,
    ``check_hostPorts.go`` and ``check_hostProbesAndhostLifecycle.go`` (v1.34+)."""
    container = _mapping(container)
    found = container_security_context_refusals(
        container.get("securityContext"), f"{where}.securityContext", user_namespace=user_namespace
    )
    for i, port in enumerate(_items(container.get("ports"))):
        host_port = _mapping(port).get("hostPort")
        if host_port not in (None, 0):
            found.append(
                _refused(f"{where}.ports[{i}].hostPort", "hostPorts", f"hostPort {_text(host_port)}")
            )
    handlers = [(probe, container.get(probe)) for probe in PROBES]
    lifecycle = _mapping(container.get("lifecycle"))
    handlers += [(f"lifecycle.{hook}", lifecycle.get(hook)) for hook in LIFECYCLE_HANDLERS]
    for path, handler in handlers:
        for action in ("httpGet", "tcpSocket"):
            host = _mapping(_mapping(handler).get(action)).get("host")
            if host:
                found.append(
                    _refused(
                        f"{where}.{path}.{action}.host",
                        "hostProbesAndHostLifecycle",
                        f"{path} host {_text(host)!r}",
                    )
                )
    return found


# --- a whole pod --------------------------------------------------------------------------------------


def in_user_namespace(pod_spec: Any) -> bool:
    """A pod that runs in a user namespace (``hostUsers: false``), where baseline allows any procMount
    (``relaxPolicyForUserNamespacePod``, policy/helpers.go)."""
    return _mapping(pod_spec).get("hostUsers") is False


def runtime_class_refusal(name: Any, where: str, allowed: Sequence[str]) -> Refusal | None:
    """A RuntimeClass the platform did not allow (``[airflow_jobs] job_runtime_classes``, the admission
    policy's parameter ``airflow-jobs-runtime-classes``): a RuntimeClass picks the node's low-level
    runtime and its handler's privileges, which no Pod Security check looks at."""
    if name is None or name in allowed:
        return None
    listed = ", ".join(map(repr, allowed)) if allowed else "none"
    return Refusal(
        where,
        "runtimeClass",
        f"RuntimeClass {_text(name)!r}",
        f"RuntimeClass {_text(name)!r} is not one the platform allows jobs (allowed: {listed}; [airflow_jobs] "
        "job_runtime_classes and the ConfigMap airflow-jobs-runtime-classes): it chooses the node's "
        "container runtime and what its handler may do -- remove it to use the cluster's default, or ask "
        "the platform to allow it",
    )


def pod_spec_refusals(pod_spec: Any, where: str, runtime_classes: Sequence[str]) -> list[Refusal]:
    """Every field of a pod spec that baseline refuses, and a RuntimeClass outside ``runtime_classes``:
    ``check_hostNamespaces.go``, the volumes, the pod's securityContext and each container's."""
    spec = _mapping(pod_spec)
    found = [
        _refused(f"{where}.{field}", "hostNamespaces", f"{field} true")
        for field in ("hostNetwork", "hostPID", "hostIPC")
        if spec.get(field) is True
    ]
    found += volume_refusals(spec.get("volumes"), f"{where}.volumes")
    found += pod_security_context_refusals(spec.get("securityContext"), f"{where}.securityContext")
    user_namespace = in_user_namespace(spec)
    for kind in CONTAINER_LISTS:
        for i, container in enumerate(_items(spec.get(kind))):
            found += container_refusals(container, f"{where}.{kind}[{i}]", user_namespace=user_namespace)
    runtime = runtime_class_refusal(
        spec.get("runtimeClassName"), f"{where}.runtimeClassName", runtime_classes
    )
    if runtime is not None:
        found.append(runtime)
    return found


def annotation_refusals(annotations: Any, where: str) -> list[Refusal]:
    """``check_appArmorProfile.go``: a pod's AppArmor annotation other than ``runtime/default`` or a
    ``localhost/`` profile (the job's annotations are its pods' too)."""
    found = []
    for key, value in _mapping(annotations).items():
        if not (isinstance(key, str) and key.startswith(APPARMOR_ANNOTATION_PREFIX)):
            continue
        if value in APPARMOR_ANNOTATION_VALUES or (
            isinstance(value, str) and value.startswith(APPARMOR_ANNOTATION_LOCALHOST)
        ):
            continue
        found.append(
            _refused(
                f"{where}.{key}",
                "appArmorProfile",
                f"AppArmor profile {_text(value)!r}",
                "only runtime/default or a localhost/ profile may be set -- use 'runtime/default' or remove it",
            )
        )
    return found


def template_refusals(template: Any, where: str, runtime_classes: Sequence[str]) -> list[Refusal]:
    """A pod template (``metadata`` and ``spec``), as the rule ``pod-security`` reads each of a job's."""
    template = _mapping(template)
    return annotation_refusals(
        Meta(template).annotations, f"{where}.metadata.annotations"
    ) + pod_spec_refusals(template.get("spec"), f"{where}.spec", runtime_classes)
