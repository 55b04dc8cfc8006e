"""What a pod refers to by name (ConfigMaps, Secrets, PersistentVolumeClaims) and what the kubelet makes of it.

Pure rules over plain data: ``lookup(kind, namespace, name)`` returns the stored object or None. The
wording of every error is the upstream one, so a test or a user reads the message a real cluster shows:

- env and envFrom: kubernetes release-1.32 ``pkg/kubelet/kubelet_pods.go`` ``makeEnvironmentVariables``
  returns the manager's NotFound error as is (``configmap "x" not found``, ``secret "x" not found``: the
  watch-based managers of ``pkg/kubelet/configmap`` and ``pkg/kubelet/secret`` name the resource in the
  singular) and ``couldn't find key K in ConfigMap NS/NAME`` (or ``in Secret``) for a missing key;
  ``optional: true`` skips both. ``kuberuntime_container.go`` turns that error into the waiting reason
  ``CreateContainerConfigError`` with the error as message, and a ``Failed`` event ``Error: <message>``.
- volumes: the configmap and secret volume plugins fail ``SetUp`` with the same NotFound error unless the
  source is optional; the kubelet reports ``FailedMount`` ``MountVolume.SetUp failed for volume "v" :
  <error>`` and starts no container until the volume mounts.
- claims: the scheduler's VolumeBinding plugin (``pkg/scheduler/framework/plugins/volumebinding``) rejects
  a pod whose claim does not exist in PreFilter with ``persistentvolumeclaim "x" not found``
  (UnschedulableAndUnresolvable: preemption cannot help).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from dataclasses import dataclass

Lookup = Callable[[str, str, str], "dict | None"]

CONFIGMAPS = "configmaps"
SECRETS = "secrets"
CLAIMS = "persistentvolumeclaims"


@dataclass(frozen=True)
class PodNetwork:
    """What the downward API reads from the kubelet rather than from the stored pod."""

    node: str = ""
    host_ip: str = ""
    pod_ip: str = ""


class MissingReference(Exception):
    """A reference the kubelet cannot resolve; ``str()`` is the upstream message."""


def _not_found(kind: str, name: str) -> str:
    return f'{"configmap" if kind == CONFIGMAPS else "secret"} "{name}" not found'


def _data(kind: str, obj: dict) -> dict[str, str]:
    """The string values of a ConfigMap (data) or a Secret (base64 data, decoded; stringData as given)."""
    if kind == CONFIGMAPS:
        return {k: str(v) for k, v in (obj.get("data") or {}).items()} | {
            k: "" for k in (obj.get("binaryData") or {}) if k not in (obj.get("data") or {})
        }
    out: dict[str, str] = {}
    for key, value in (obj.get("data") or {}).items():
        try:
            out[key] = base64.b64decode(str(value), validate=True).decode(errors="replace")
        except (binascii.Error, ValueError):
            out[key] = str(value)
    for key, value in (obj.get("stringData") or {}).items():
        out[key] = str(value)
    return out


def _field_value(path: str, pod: dict, net: PodNetwork) -> str:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName") or net.node,
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.hostIP": net.host_ip,
        "status.hostIPs": net.host_ip,
        "status.podIP": net.pod_ip,
        "status.podIPs": net.pod_ip,
    }
    if path in simple:
        return str(simple[path])
    for prefix, values in (
        ("metadata.labels", meta.get("labels")),
        ("metadata.annotations", meta.get("annotations")),
    ):
        if path.startswith(prefix + "['") and path.endswith("']"):
            return str((values or {}).get(path[len(prefix) + 2 : -2], ""))
        if path == prefix:
            return "\n".join(f'{k}="{v}"' for k, v in sorted((values or {}).items()))
    return ""


def container_env(
    container: dict, pod: dict, lookup: Lookup, net: PodNetwork = PodNetwork()
) -> dict[str, str]:
    """The environment the kubelet gives ``container`` (envFrom first, then env, later names winning).

    Raises ``MissingReference`` with the kubelet's message when a required ConfigMap, Secret or key is missing.
    """
    namespace = (pod.get("metadata") or {}).get("namespace") or "default"
    cache: dict[tuple[str, str], dict[str, str] | None] = {}

    def source(kind: str, name: str) -> dict[str, str] | None:
        if (kind, name) not in cache:
            obj = lookup(kind, namespace, name)
            cache[(kind, name)] = None if obj is None else _data(kind, obj)
        return cache[(kind, name)]

    env: dict[str, str] = {}
    for item in container.get("envFrom") or ():
        for kind, field in ((CONFIGMAPS, "configMapRef"), (SECRETS, "secretRef")):
            ref = item.get(field)
            if ref is None:
                continue
            values = source(kind, ref.get("name", ""))
            if values is None:
                if ref.get("optional"):
                    continue
                raise MissingReference(_not_found(kind, ref.get("name", "")))
            prefix = item.get("prefix") or ""
            env.update({prefix + k: v for k, v in values.items()})
    for var in container.get("env") or ():
        name = var.get("name")
        if not name:
            continue
        value_from = var.get("valueFrom")
        if not value_from:
            env[name] = str(var.get("value", ""))
            continue
        if value_from.get("fieldRef"):
            env[name] = _field_value(value_from["fieldRef"].get("fieldPath", ""), pod, net)
            continue
        for kind, field, label in (
            (CONFIGMAPS, "configMapKeyRef", "ConfigMap"),
            (SECRETS, "secretKeyRef", "Secret"),
        ):
            ref = value_from.get(field)
            if ref is None:
                continue
            ref_name, key, optional = ref.get("name", ""), ref.get("key", ""), bool(ref.get("optional"))
            values = source(kind, ref_name)
            if values is None:
                if optional:
                    break
                raise MissingReference(_not_found(kind, ref_name))
            if key not in values:
                if optional:
                    break
                raise MissingReference(f"couldn't find key {key} in {label} {namespace}/{ref_name}")
            env[name] = values[key]
            break
    return env


def mount_failures(pod: dict, lookup: Lookup) -> list[str]:
    """The FailedMount messages of the pod's ConfigMap and Secret volumes that cannot be set up."""
    namespace = (pod.get("metadata") or {}).get("namespace") or "default"
    failures = []
    for volume in (pod.get("spec") or {}).get("volumes") or ():
        refs: list[tuple[str, dict]] = []
        if volume.get("configMap") is not None:
            refs.append((CONFIGMAPS, {**volume["configMap"], "name": volume["configMap"].get("name", "")}))
        if volume.get("secret") is not None:
            refs.append((SECRETS, {**volume["secret"], "name": volume["secret"].get("secretName", "")}))
        for projected in (volume.get("projected") or {}).get("sources") or ():
            if projected.get("configMap") is not None:
                refs.append((CONFIGMAPS, projected["configMap"]))
            if projected.get("secret") is not None:
                refs.append((SECRETS, projected["secret"]))
        for kind, ref in refs:
            if ref.get("optional") or lookup(kind, namespace, ref.get("name", "")) is not None:
                continue
            failures.append(
                f'MountVolume.SetUp failed for volume "{volume.get("name")}" : {_not_found(kind, ref.get("name", ""))}'
            )
            break
    return failures


def missing_claim(pod: dict, lookup: Lookup) -> str | None:
    """The scheduler's PreFilter message for the first claim of the pod that does not exist, if any."""
    namespace = (pod.get("metadata") or {}).get("namespace") or "default"
    for volume in (pod.get("spec") or {}).get("volumes") or ():
        claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
        if claim and lookup(CLAIMS, namespace, claim) is None:
            return f'persistentvolumeclaim "{claim}" not found'
    return None


def refers_to_objects(pod: dict) -> bool:
    """Whether the pod names any ConfigMap, Secret or claim (most pods do not: they skip every lookup)."""
    spec = pod.get("spec") or {}
    if any(
        v.get("configMap") is not None
        or v.get("secret") is not None
        or v.get("projected") is not None
        or v.get("persistentVolumeClaim") is not None
        for v in spec.get("volumes") or ()
    ):
        return True
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        if c.get("envFrom") or any(e.get("valueFrom") for e in c.get("env") or ()):
            return True
    return False
