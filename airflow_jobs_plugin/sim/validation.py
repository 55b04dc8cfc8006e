"""Validation as the API server does it: pure functions from an object to its field errors (``Cause``).

Every rule here models one in kubernetes/kubernetes release-1.32, mostly
``pkg/apis/core/validation/validation.go`` (pods, pod templates, services, secrets, config maps),
``pkg/apis/batch/validation/validation.go`` (Jobs) and
``staging/src/k8s.io/apimachinery/pkg/api/validation/objectmeta.go`` (names, labels, annotations).
The messages are the upstream ones, so clients and people see what a real cluster would say.
"""

from __future__ import annotations

import copy
import re

from . import errors
from .config import ResourceType
from .errors import Cause

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")

LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
    "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "
    "for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
NAME_PART_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)


def dns_label_errors(path: str, value: str) -> list[Cause]:
    """RFC 1123 label rules (63 characters max)."""
    out = []
    if len(value) > 63:
        out.append(errors.invalid_value(path, value, "must be no more than 63 characters"))
    if not _DNS1123_LABEL.match(value):
        out.append(errors.invalid_value(path, value, LABEL_MSG))
    return out


def dns_subdomain_errors(path: str, value: str) -> list[Cause]:
    """RFC 1123 subdomain rules (253 characters max)."""
    out = []
    if len(value) > 253:
        out.append(errors.invalid_value(path, value, "must be no more than 253 characters"))
    if not _DNS1123_SUBDOMAIN.match(value):
        out.append(errors.invalid_value(path, value, SUBDOMAIN_MSG))
    return out


def label_errors(path: str, labels: object) -> list[Cause]:
    """Label keys must be qualified names, values at most 63 characters of the label alphabet."""
    if labels is None:
        return []
    if not isinstance(labels, dict):
        return [errors.invalid_value(path, str(labels), "must be a map of strings")]
    out = []
    for key, value in labels.items():
        prefix, _, name = key.rpartition("/")
        if prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
            out.append(errors.invalid_value(path, key, "prefix part " + SUBDOMAIN_MSG))
        if not name or len(name) > 63 or not _QUALIFIED_NAME.match(name):
            detail = "name part must be no more than 63 characters" if len(name) > 63 else NAME_PART_MSG
            out.append(errors.invalid_value(path, key, detail))
        if not isinstance(value, str):
            out.append(errors.invalid_value(path, str(value), "must be a string"))
            continue
        if len(value) > 63:
            out.append(errors.invalid_value(path, value, "must be no more than 63 characters"))
        if not _LABEL_VALUE.match(value):
            out.append(errors.invalid_value(path, value, LABEL_VALUE_MSG))
    return out


def _meta_errors(rtype: ResourceType, meta: dict, path: str = "metadata") -> list[Cause]:
    out: list[Cause] = []
    name = meta.get("name")
    if path == "metadata":
        if not name:
            if meta.get("generateName"):
                pass
            else:
                out.append(errors.required("metadata.name", "name or generateName is required"))
        elif rtype.plural == "namespaces":
            out += dns_label_errors("metadata.name", name)
        elif rtype.plural != "events":
            out += dns_subdomain_errors("metadata.name", name)
    out += label_errors(f"{path}.labels", meta.get("labels"))
    annotations = meta.get("annotations")
    if annotations is not None and (
        not isinstance(annotations, dict) or any(not isinstance(v, str) for v in annotations.values())
    ):
        out.append(errors.invalid_value(f"{path}.annotations", str(annotations), "must be a map of strings"))
    return out


def _container_errors(path: str, containers: object, required: bool, seen: set[str]) -> list[Cause]:
    if containers is None or containers == []:
        return [errors.required(path)] if required else []
    if not isinstance(containers, list):
        return [errors.invalid_value(path, str(containers), "must be a list")]
    out: list[Cause] = []
    for i, c in enumerate(containers):
        cpath = f"{path}[{i}]"
        if not isinstance(c, dict):
            out.append(errors.invalid_value(cpath, str(c), "must be an object"))
            continue
        name = c.get("name")
        if not name:
            out.append(errors.required(f"{cpath}.name"))
        else:
            out += dns_label_errors(f"{cpath}.name", name)
            if name in seen:
                out.append(Cause(f"{cpath}.name", "FieldValueDuplicate", f'Duplicate value: "{name}"'))
            seen.add(name)
        if not c.get("image"):
            out.append(errors.required(f"{cpath}.image"))
        policy = c.get("imagePullPolicy")
        if policy is not None and policy not in ("Always", "IfNotPresent", "Never"):
            out.append(
                errors.not_supported(f"{cpath}.imagePullPolicy", policy, ["Always", "IfNotPresent", "Never"])
            )
        res = c.get("resources") or {}
        for k, limit in (res.get("limits") or {}).items() if isinstance(res, dict) else ():
            request = (res.get("requests") or {}).get(k)
            if k == "nvidia.com/gpu" and request is not None and str(request) != str(limit):
                out.append(
                    errors.invalid_value(
                        f"{cpath}.resources.requests[{k}]",
                        str(request),
                        f"must be equal to {k} limit of {limit}",
                    )
                )
    return out


def pod_spec_errors(
    path: str, spec: object, allowed_restart: tuple[str, ...] = ("Always", "OnFailure", "Never")
) -> list[Cause]:
    """Required fields and enums of a PodSpec."""
    if not isinstance(spec, dict):
        return [errors.required(path)]
    seen: set[str] = set()
    out = _container_errors(f"{path}.containers", spec.get("containers"), True, seen)
    out += _container_errors(f"{path}.initContainers", spec.get("initContainers"), False, seen)
    policy = spec.get("restartPolicy")
    if policy is None:
        out.append(errors.required(f"{path}.restartPolicy"))
    elif policy not in allowed_restart:
        out.append(errors.not_supported(f"{path}.restartPolicy", policy, list(allowed_restart)))
    grace = spec.get("terminationGracePeriodSeconds")
    if isinstance(grace, int) and grace < 0:
        out.append(
            errors.invalid_value(
                f"{path}.terminationGracePeriodSeconds", grace, "must be greater than or equal to 0"
            )
        )
    dns = spec.get("dnsPolicy")
    if dns not in (None, "ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"):
        out.append(
            errors.not_supported(
                f"{path}.dnsPolicy", dns, ["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"]
            )
        )
    return out


def _nonneg(path: str, value: object) -> list[Cause]:
    if value is not None and (not isinstance(value, int) or value < 0):
        return [errors.invalid_value(path, value, "must be greater than or equal to 0")]
    return []


def validate(rtype: ResourceType, obj: dict) -> list[Cause]:
    """Field errors of an object about to be stored (empty when valid)."""
    meta = obj.get("metadata") or {}
    out = _meta_errors(rtype, meta)
    spec = obj.get("spec")
    if rtype.plural == "pods":
        out += pod_spec_errors("spec", spec)
    elif rtype.plural == "jobs":
        if not isinstance(spec, dict):
            return out + [errors.required("spec")]
        template = spec.get("template") or {}
        out += _meta_errors(rtype, template.get("metadata") or {}, "spec.template.metadata")
        tspec = template.get("spec")
        if not isinstance(tspec, dict):
            out.append(errors.required("spec.template.spec"))
        else:
            out += pod_spec_errors("spec.template.spec", tspec, ("OnFailure", "Never"))
        for f in (
            "parallelism",
            "completions",
            "backoffLimit",
            "activeDeadlineSeconds",
            "ttlSecondsAfterFinished",
        ):
            out += _nonneg(f"spec.{f}", spec.get(f))
        if spec.get("completionMode") not in ("NonIndexed", "Indexed"):
            out.append(
                errors.not_supported(
                    "spec.completionMode", spec.get("completionMode"), ["NonIndexed", "Indexed"]
                )
            )
        selector = (spec.get("selector") or {}).get("matchLabels") or {}
        tlabels = (template.get("metadata") or {}).get("labels") or {}
        if not spec.get("selector"):
            out.append(errors.required("spec.selector"))
        elif any(tlabels.get(k) != v for k, v in selector.items()):
            out.append(
                errors.invalid_value(
                    "spec.template.metadata.labels",
                    str(tlabels),
                    "`selector` does not match template `labels`",
                )
            )
    elif rtype.plural == "mpijobs":
        if not isinstance(spec, dict):
            return out + [errors.required("spec")]
        replicas = spec.get("mpiReplicaSpecs")
        if not isinstance(replicas, dict) or not replicas:
            out.append(errors.required("spec.mpiReplicaSpecs"))
        else:
            for role, rs in replicas.items():
                if role not in ("Launcher", "Worker"):
                    out.append(
                        errors.not_supported(f"spec.mpiReplicaSpecs[{role}]", role, ["Launcher", "Worker"])
                    )
                    continue
                if not isinstance(rs, dict):
                    continue
                out += _nonneg(f"spec.mpiReplicaSpecs[{role}].replicas", rs.get("replicas"))
                tspec = (rs.get("template") or {}).get("spec")
                if tspec is not None:
                    out += _container_errors(
                        f"spec.mpiReplicaSpecs[{role}].template.spec.containers",
                        tspec.get("containers"),
                        True,
                        set(),
                    )
            if "Launcher" not in replicas:
                out.append(
                    errors.required("spec.mpiReplicaSpecs[Launcher]", "must have Launcher replica spec")
                )
        impl = spec.get("mpiImplementation")
        if impl not in ("OpenMPI", "Intel", "MPICH"):
            out.append(errors.not_supported("spec.mpiImplementation", impl, ["OpenMPI", "Intel", "MPICH"]))
        out += _nonneg("spec.slotsPerWorker", spec.get("slotsPerWorker"))
    elif rtype.plural == "configmaps":
        out += config_map_errors(obj)
    elif rtype.plural == "secrets":
        out += secret_errors(obj)
    elif rtype.plural == "services":
        out += service_errors(obj)
    elif rtype.plural == "events":
        if not isinstance(obj.get("involvedObject"), dict):
            out.append(errors.required("involvedObject"))
    return out


def validate_update(rtype: ResourceType, new: dict, old: dict) -> list[Cause]:
    """Immutability rules checked on update."""
    out: list[Cause] = []
    if rtype.plural == "pods":
        allowed = copy.deepcopy(new.get("spec") or {})
        before = copy.deepcopy(old.get("spec") or {})
        # Only images, activeDeadlineSeconds, added tolerations and removed scheduling gates may change.
        for spec in (allowed, before):
            for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
                if isinstance(c, dict):
                    c.pop("image", None)
            for k in ("activeDeadlineSeconds", "tolerations", "schedulingGates", "nodeName"):
                spec.pop(k, None)
        if allowed != before:
            out.append(
                errors.forbidden(
                    "spec",
                    "pod updates may not change fields other than `spec.containers[*].image`,"
                    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
                    "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
                    "(allow it to be set to 1 if it was previously negative)",
                )
            )
        if (old.get("spec") or {}).get("nodeName") and (new.get("spec") or {}).get("nodeName") != old["spec"][
            "nodeName"
        ]:
            out.append(errors.forbidden("spec.nodeName", "field is immutable"))
    elif rtype.plural in ("configmaps", "secrets"):
        out += _immutable_data_errors(new, old)
    elif rtype.plural == "services":
        old_ip = (old.get("spec") or {}).get("clusterIP")
        new_ip = (new.get("spec") or {}).get("clusterIP")
        if old_ip and new_ip != old_ip:
            out.append(errors.invalid_value("spec.clusterIPs[0]", new_ip, "may not change once set"))
    elif rtype.plural == "jobs":
        nspec, ospec = new.get("spec") or {}, old.get("spec") or {}
        if nspec.get("selector") != ospec.get("selector"):
            out.append(
                errors.invalid_value("spec.selector", str(nspec.get("selector")), "field is immutable")
            )
        if nspec.get("completions") != ospec.get("completions") and nspec.get("completionMode") != "Indexed":
            out.append(
                errors.invalid_value("spec.completions", nspec.get("completions"), "field is immutable")
            )
        if nspec.get("completionMode") != ospec.get("completionMode"):
            out.append(
                errors.invalid_value("spec.completionMode", nspec.get("completionMode"), "field is immutable")
            )
        if nspec.get("template") != ospec.get("template") and not (
            nspec.get("suspend") or ospec.get("suspend")
        ):
            out.append(errors.invalid_value("spec.template", "...", "field is immutable"))
    return out


# --- ConfigMaps and Secrets (ValidateConfigMap, ValidateSecret, ValidateSecretUpdate) -------------

_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
CONFIG_KEY_MSG = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or "
    "'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
)
MAX_SECRET_BYTES = 1024 * 1024  # core.MaxSecretSize; a ConfigMap has the same bound (MaxConfigMapSize)


def config_key_errors(path: str, key: str) -> list[Cause]:
    """IsConfigMapKey (apimachinery util/validation): the key becomes a file name in a volume."""
    out = []
    if len(key) > 253:
        out.append(errors.invalid_value(path, key, "must be no more than 253 characters"))
    if not _CONFIG_KEY.match(key):
        out.append(errors.invalid_value(path, key, CONFIG_KEY_MSG))
    if key in (".", ".."):
        out.append(errors.invalid_value(path, key, "must not be '.' or '..'"))
    elif key.startswith(".."):
        out.append(errors.invalid_value(path, key, "must not start with '..'"))
    return out


def _map_of(obj: dict, field: str) -> tuple[dict, list[Cause]]:
    value = obj.get(field)
    if value is None:
        return {}, []
    if not isinstance(value, dict):
        return {}, [errors.invalid_value(field, str(value), "must be a map")]
    return value, []


def config_map_errors(obj: dict) -> list[Cause]:
    """Keys of ``data`` and ``binaryData`` are config keys, unique across both; 1 MiB in total."""
    data, out = _map_of(obj, "data")
    binary, more = _map_of(obj, "binaryData")
    out += more
    size = 0
    for key, value in data.items():
        out += config_key_errors(f"data[{key}]", key)
        size += len(str(value))
    for key, value in binary.items():
        out += config_key_errors(f"binaryData[{key}]", key)
        if key in data:
            out.append(errors.invalid_value(f"binaryData[{key}]", key, "duplicate of key present in data"))
        size += len(str(value)) * 3 // 4
    if size > MAX_SECRET_BYTES:
        out.append(Cause("", "FieldValueTooLong", f"Too long: must have at most {MAX_SECRET_BYTES} bytes"))
    return out


# Keys each well-known Secret type must carry (ValidateSecret's switch on secret.Type).
_SECRET_REQUIRED_KEYS = {
    "kubernetes.io/dockercfg": (".dockercfg",),
    "kubernetes.io/dockerconfigjson": (".dockerconfigjson",),
    "kubernetes.io/ssh-auth": ("ssh-privatekey",),
    "kubernetes.io/tls": ("tls.crt", "tls.key"),
}


def secret_errors(obj: dict) -> list[Cause]:
    """Config-key data, 1 MiB in total, and the keys each well-known type requires."""
    data, out = _map_of(obj, "data")
    size = 0
    for key, value in data.items():
        out += config_key_errors(f"data[{key}]", key)
        size += len(str(value)) * 3 // 4
    if size > MAX_SECRET_BYTES:
        out.append(
            Cause("data", "FieldValueTooLong", f"Too long: must have at most {MAX_SECRET_BYTES} bytes")
        )
    kind = obj.get("type") or "Opaque"
    for key in _SECRET_REQUIRED_KEYS.get(kind, ()):
        if key not in data:
            out.append(errors.required(f"data[{key}]"))
    if kind == "kubernetes.io/basic-auth" and "username" not in data and "password" not in data:
        out += [errors.required("data[username]"), errors.required("data[password]")]
    if kind == "kubernetes.io/service-account-token":
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        if not annotations.get("kubernetes.io/service-account.name"):
            out.append(errors.required("metadata.annotations[kubernetes.io/service-account.name]"))
    return out


def _immutable_data_errors(new: dict, old: dict) -> list[Cause]:
    """ValidateSecretUpdate / ValidateConfigMapUpdate: ``type`` never changes; once ``immutable`` is
    true neither it nor the data may change."""
    out = []
    if "type" in old and new.get("type") != old.get("type"):
        out.append(errors.invalid_value("type", new.get("type"), "field is immutable"))
    if old.get("immutable"):
        if not new.get("immutable"):
            out.append(errors.forbidden("immutable", "field is immutable when `immutable` is set"))
        for field in ("data", "binaryData"):
            if (new.get(field) or {}) != (old.get(field) or {}):
                out.append(errors.forbidden(field, "field is immutable when `immutable` is set"))
    return out


# --- Services (ValidateService, validateServicePort) -----------------------------------------------

_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1035_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
    "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for "
    "validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
_IANA_SVC_NAME = re.compile(r"^[-a-z0-9]+$")
SERVICE_TYPES = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"]
PROTOCOLS = ["SCTP", "TCP", "UDP"]
_IPV4 = re.compile(r"^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$")


def dns1035_label_errors(path: str, value: str) -> list[Cause]:
    """A Service name is a DNS-1035 label: it becomes a DNS name and environment variable names."""
    out = []
    if len(value) > 63:
        out.append(errors.invalid_value(path, value, "must be no more than 63 characters"))
    if not _DNS1035_LABEL.match(value):
        out.append(errors.invalid_value(path, value, DNS1035_MSG))
    return out


def _port_number_errors(path: str, value: object) -> list[Cause]:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 65535:
        return [errors.invalid_value(path, value, "must be between 1 and 65535, inclusive")]
    return []


def _target_port_errors(path: str, value: object) -> list[Cause]:
    if isinstance(value, int) and not isinstance(value, bool):
        return _port_number_errors(path, value)
    if isinstance(value, str):
        if len(value) > 15:
            return [errors.invalid_value(path, value, "must be no more than 15 characters")]
        if not _IANA_SVC_NAME.match(value) or not re.search(r"[a-z]", value) or "--" in value:
            return [
                errors.invalid_value(
                    path,
                    value,
                    "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-), at least one "
                    "letter (a-z), and no consecutive hyphens",
                )
            ]
    return []


def service_errors(obj: dict) -> list[Cause]:
    """Name, type, ports, selector and cluster IP of a Service."""
    meta = obj.get("metadata") or {}
    out: list[Cause] = []
    if meta.get("name"):
        # ValidateServiceName is NameIsDNS1035Label; the generic subdomain check has run already, so
        # only the label rule is added when the subdomain rule passed.
        if _DNS1123_SUBDOMAIN.match(meta["name"]):
            out += dns1035_label_errors("metadata.name", meta["name"])
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return out + [errors.required("spec")]
    kind = spec.get("type")
    if kind not in SERVICE_TYPES:
        out.append(errors.not_supported("spec.type", kind, SERVICE_TYPES))
    affinity = spec.get("sessionAffinity")
    if affinity not in ("ClientIP", "None"):
        out.append(errors.not_supported("spec.sessionAffinity", affinity, ["ClientIP", "None"]))
    cluster_ip = spec.get("clusterIP")
    headless = cluster_ip == "None"
    if cluster_ip and not headless and not _IPV4.match(str(cluster_ip)):
        out.append(
            errors.invalid_value(
                "spec.clusterIPs[0]", cluster_ip, "must be empty, 'None', or a valid IP address"
            )
        )
    if kind == "ExternalName":
        name = spec.get("externalName")
        if not name:
            out.append(errors.required("spec.externalName"))
        else:
            out += dns_subdomain_errors("spec.externalName", name)
    ports = spec.get("ports") or []
    if not isinstance(ports, list):
        return out + [errors.invalid_value("spec.ports", str(ports), "must be a list")]
    if not ports and not headless and kind != "ExternalName":
        out.append(errors.required("spec.ports"))
    names: set[str] = set()
    for i, port in enumerate(ports):
        path = f"spec.ports[{i}]"
        if not isinstance(port, dict):
            out.append(errors.invalid_value(path, str(port), "must be an object"))
            continue
        name = port.get("name") or ""
        if len(ports) > 1 and not name:
            out.append(errors.required(f"{path}.name"))
        elif name:
            out += dns_label_errors(f"{path}.name", name)
            if name in names:
                out.append(Cause(f"{path}.name", "FieldValueDuplicate", f'Duplicate value: "{name}"'))
            names.add(name)
        out += _port_number_errors(f"{path}.port", port.get("port"))
        if port.get("protocol") not in PROTOCOLS:
            out.append(errors.not_supported(f"{path}.protocol", port.get("protocol"), PROTOCOLS))
        out += _target_port_errors(f"{path}.targetPort", port.get("targetPort"))
        if port.get("nodePort") and kind not in ("NodePort", "LoadBalancer"):
            out.append(errors.forbidden(f"{path}.nodePort", "may not be used when `type` is 'ClusterIP'"))
    selector = spec.get("selector")
    if selector is not None:
        out += label_errors("spec.selector", selector)
    return out
