"""Validation as the API server does it: pure functions from an object to its field errors (``Cause``).

Every rule here models one in kubernetes/kubernetes release-1.32, mostly
``pkg/apis/core/validation/validation.go`` (pods, pod templates, services, secrets, config maps),
``pkg/apis/batch/validation/validation.go`` (Jobs) and
``staging/src/k8s.io/apimachinery/pkg/api/validation/objectmeta.go`` (names, labels, annotations).
The messages are the upstream ones, so clients and people see what a real cluster would say.
"""

from __future__ import annotations

import re
from functools import lru_cache

from airflow_jobs_sim import errors
from airflow_jobs_sim.config import ResourceType
from airflow_jobs_sim.errors import Cause
from airflow_jobs_sim.schema import QUANTITY_MSG, is_quantity

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
    out += annotation_errors(f"{path}.annotations", meta.get("annotations"))
    return out


TOTAL_ANNOTATION_BYTES = 256 * 1024  # apimachinery objectmeta.go TotalAnnotationSizeLimitB


def _qualified_name_errors(path: str, key: str) -> list[Cause]:
    """IsQualifiedName: an optional DNS-subdomain prefix and a 63-character name part."""
    out = []
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        out.append(errors.invalid_value(path, key, "prefix part " + SUBDOMAIN_MSG))
    if not name or len(name) > 63 or not _QUALIFIED_NAME.match(name):
        detail = "name part must be no more than 63 characters" if len(name) > 63 else NAME_PART_MSG
        out.append(errors.invalid_value(path, key, detail))
    return out


def annotation_errors(path: str, annotations: object) -> list[Cause]:
    """ValidateAnnotations: qualified-name keys (lower-cased), at most 256 KiB of keys and values."""
    if annotations is None:
        return []
    if not isinstance(annotations, dict) or any(not isinstance(v, str) for v in annotations.values()):
        return [errors.invalid_value(path, str(annotations), "must be a map of strings")]
    out: list[Cause] = []
    for key in annotations:
        out += _qualified_name_errors(path, key.lower())
    size = sum(len(k) + len(v) for k, v in annotations.items())
    if size > TOTAL_ANNOTATION_BYTES:
        out.append(
            Cause(path, "FieldValueTooLong", f"Too long: must have at most {TOTAL_ANNOTATION_BYTES} bytes")
        )
    return out


def _container_errors(
    path: str, containers: object, required: bool, seen: set[str], volumes: set[str] | None = None
) -> list[Cause]:
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
        out += resource_errors(f"{cpath}.resources", c.get("resources"))
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            if c.get(probe) is not None:
                out += probe_errors(f"{cpath}.{probe}", c[probe], probe != "readinessProbe")
        out += env_errors(f"{cpath}.env", c.get("env"))
        out += env_from_errors(f"{cpath}.envFrom", c.get("envFrom"))
        message_policy = c.get("terminationMessagePolicy")
        if message_policy is not None and message_policy not in _TERMINATION_MESSAGE_POLICIES:
            # validateContainers: File or FallbackToLogsOnError.
            out.append(
                errors.not_supported(
                    f"{cpath}.terminationMessagePolicy", message_policy, list(_TERMINATION_MESSAGE_POLICIES)
                )
            )
        for j, mount in enumerate(c.get("volumeMounts") or []):
            mpath = f"{cpath}.volumeMounts[{j}]"
            if not isinstance(mount, dict):
                continue
            if not mount.get("name"):
                out.append(errors.required(f"{mpath}.name"))
            elif volumes is not None and mount["name"] not in volumes:
                out.append(Cause(f"{mpath}.name", "FieldValueNotFound", f'Not found: "{mount["name"]}"'))
            if not mount.get("mountPath"):
                out.append(errors.required(f"{mpath}.mountPath"))
    return out


def pod_spec_errors(
    path: str, spec: object, allowed_restart: tuple[str, ...] = ("Always", "OnFailure", "Never")
) -> list[Cause]:
    """Required fields and enums of a PodSpec."""
    if not isinstance(spec, dict):
        return [errors.required(path)]
    seen: set[str] = set()
    volume_errors, volumes = _volume_errors(f"{path}.volumes", spec.get("volumes"))
    out = volume_errors
    out += _container_errors(f"{path}.containers", spec.get("containers"), True, seen, volumes)
    out += _container_errors(f"{path}.initContainers", spec.get("initContainers"), False, seen, volumes)
    if spec.get("affinity") is not None:
        out += affinity_errors(f"{path}.affinity", spec["affinity"])
    # ValidatePodSpec: both name objects the API knows by DNS subdomain names (a PriorityClass, a scheduler
    # profile); an empty value means the default.
    for field in ("schedulerName", "priorityClassName"):
        if isinstance(spec.get(field), str) and spec[field]:
            out += dns_subdomain_errors(f"{path}.{field}", spec[field])
    for i, toleration in enumerate(spec.get("tolerations") or []):
        out += toleration_errors(f"{path}.tolerations[{i}]", toleration)
    node_selector = spec.get("nodeSelector")
    if node_selector is not None:
        out += label_errors(f"{path}.nodeSelector", node_selector)
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
            out += pod_spec_errors("spec.template.spec", tspec)
            # pkg/apis/batch/validation/validation.go validateJobSpec (kubernetes v1.36.3): `Always` (or
            # none) is "Required", any other value not in the two is "NotSupported".
            policy = tspec.get("restartPolicy")
            if policy in ("Always", "", None):
                out = [c for c in out if c.field != "spec.template.spec.restartPolicy"]
                out.append(
                    errors.required("spec.template.spec.restartPolicy", 'valid values: "OnFailure", "Never"')
                )
            elif policy not in ("OnFailure", "Never"):
                out.append(
                    errors.not_supported("spec.template.spec.restartPolicy", policy, ["OnFailure", "Never"])
                )
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
    elif rtype.plural == "leases":
        out += lease_spec_errors(spec)
    elif rtype.plural in ("roles", "clusterroles"):
        out += rbac_rule_errors(obj, namespaced=rtype.plural == "roles")
    elif rtype.plural in ("rolebindings", "clusterrolebindings"):
        out += rbac_binding_errors(obj, namespaced=rtype.plural == "rolebindings")
    return out


def lease_spec_errors(spec: object) -> list[Cause]:
    """``ValidateLeaseSpec`` (pkg/apis/coordination/validation/validation.go, kubernetes v1.36.3): a
    positive term and transitions not negative. Its rules on ``strategy`` and ``preferredHolder`` never
    run here: the server drops both fields first (``prepare_for_create``). The times need no rule: the
    decoder parsed them (``sim/micro_time.py``)."""
    if not isinstance(spec, dict):
        return []
    out: list[Cause] = []
    duration = spec.get("leaseDurationSeconds")
    if isinstance(duration, int) and duration <= 0:
        out.append(errors.invalid_value("spec.leaseDurationSeconds", duration, "must be greater than 0"))
    transitions = spec.get("leaseTransitions")
    if isinstance(transitions, int) and transitions < 0:
        out.append(
            errors.invalid_value("spec.leaseTransitions", transitions, "must be greater than or equal to 0")
        )
    return out


def rbac_rule_errors(role: dict, *, namespaced: bool) -> list[Cause]:
    """``ValidatePolicyRule`` (kubernetes/kubernetes v1.32 ``pkg/apis/rbac/validation/validation.go``)."""
    out: list[Cause] = []
    for i, rule in enumerate(role.get("rules") or []):
        path = f"rules[{i}]"
        if not isinstance(rule, dict):
            out.append(errors.invalid_value(path, rule, "must be an object"))
            continue
        if not rule.get("verbs"):
            out.append(errors.required(f"{path}.verbs", "verbs must contain at least one value"))
        urls = rule.get("nonResourceURLs") or []
        if urls:
            if namespaced:
                out.append(
                    errors.invalid_value(
                        f"{path}.nonResourceURLs", urls, "namespaced rules cannot apply to non-resource URLs"
                    )
                )
            if rule.get("apiGroups") or rule.get("resources") or rule.get("resourceNames"):
                out.append(
                    errors.invalid_value(
                        f"{path}.nonResourceURLs",
                        urls,
                        "rules cannot apply to both regular resources and non-resource URLs",
                    )
                )
            continue
        if not rule.get("apiGroups"):
            out.append(
                errors.required(f"{path}.apiGroups", "resource rules must supply at least one api group")
            )
        if not rule.get("resources"):
            out.append(
                errors.required(f"{path}.resources", "resource rules must supply at least one resource")
            )
    return out


def rbac_binding_errors(binding: dict, *, namespaced: bool) -> list[Cause]:
    """``ValidateRoleBinding`` / ``ValidateClusterRoleBinding`` and ``ValidateRoleBindingSubject``
    (``pkg/apis/rbac/validation/validation.go``, v1.32)."""
    out: list[Cause] = []
    ref = binding.get("roleRef")
    if not isinstance(ref, dict):
        return [errors.required("roleRef")]
    if ref.get("apiGroup") != "rbac.authorization.k8s.io":
        out.append(
            errors.not_supported("roleRef.apiGroup", ref.get("apiGroup"), ["rbac.authorization.k8s.io"])
        )
    kinds = ["Role", "ClusterRole"] if namespaced else ["ClusterRole"]
    if ref.get("kind") not in kinds:
        out.append(errors.not_supported("roleRef.kind", ref.get("kind"), kinds))
    if not ref.get("name"):
        out.append(errors.required("roleRef.name"))
    for i, subject in enumerate(binding.get("subjects") or []):
        path = f"subjects[{i}]"
        if not isinstance(subject, dict) or not subject.get("name"):
            out.append(errors.required(f"{path}.name"))
            continue
        if subject.get("kind") not in ("ServiceAccount", "User", "Group"):
            out.append(
                errors.not_supported(f"{path}.kind", subject.get("kind"), ["ServiceAccount", "User", "Group"])
            )
        elif subject["kind"] == "ServiceAccount" and not namespaced and not subject.get("namespace"):
            out.append(errors.required(f"{path}.namespace"))
    return out


_POD_SPEC_MUTABLE = ("activeDeadlineSeconds", "tolerations", "schedulingGates", "nodeName")


def _pod_spec_fixed(spec: dict) -> dict:
    """The part of a pod spec an update may not change: all but the fields above and the images (shallow
    copies only: the specs compared may be the store's immutable ones)."""
    fixed = {k: v for k, v in spec.items() if k not in _POD_SPEC_MUTABLE}
    for key in ("containers", "initContainers"):
        if isinstance(fixed.get(key), list):
            fixed[key] = [
                {k: v for k, v in c.items() if k != "image"} if isinstance(c, dict) else c for c in fixed[key]
            ]
    return fixed


def validate_update(rtype: ResourceType, new: dict, old: dict) -> list[Cause]:
    """Immutability rules checked on update."""
    out: list[Cause] = []
    if rtype.plural == "pods":
        # Only images, activeDeadlineSeconds, added tolerations and removed scheduling gates may change.
        # (A spec shared with the stored version, as in every status write, is unchanged by definition.)
        same = new.get("spec") is old.get("spec")
        if not same and _pod_spec_fixed(new.get("spec") or {}) != _pod_spec_fixed(old.get("spec") or {}):
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
    elif rtype.plural in ("rolebindings", "clusterrolebindings"):
        if new.get("roleRef") != old.get("roleRef"):
            out.append(errors.invalid_value("roleRef", new.get("roleRef"), "cannot change roleRef"))
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


# --- pod spec parts (validation.go: ValidateResourceRequirements, validateAffinity, ValidateTolerations,
# validateProbe, ValidateVolumes, ValidateEnv) -------------------------------------------------------

_STANDARD_CONTAINER_RESOURCES = {"cpu", "memory", "ephemeral-storage"}
_SUFFIX = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
}


def quantity_value(value: object) -> float:
    """The number a quantity stands for (the schema decoder has checked the syntax already)."""
    if isinstance(value, (int, float)):
        return float(value)
    return _quantity_text_value(str(value))


@lru_cache(maxsize=4096)
def _quantity_text_value(text: str) -> float:
    # Cached: a cluster's pods repeat a handful of quantities, and this runs for each on every create.
    m = re.match(r"^([+-]?(?:\d+\.?\d*|\.\d+))(.*)$", text.strip())
    if not m:
        return float("nan")
    number, suffix = float(m.group(1)), m.group(2)
    if suffix in _SUFFIX:
        return number * _SUFFIX[suffix]
    if suffix[:1] in ("e", "E"):
        return number * 10 ** int(suffix[1:])
    return number


def _is_native(name: str) -> bool:
    return (
        "/" not in name
        or name.startswith("kubernetes.io/")
        or name.split("/", 1)[0].endswith(".kubernetes.io")
    )


def resource_errors(path: str, resources: object) -> list[Cause]:
    """Names standard or fully qualified; values not negative; requests at most limits; extended
    resources (e.g. nvidia.com/gpu) whole numbers, not overcommitted: requests equal limits."""
    if not isinstance(resources, dict):
        return []
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}
    out: list[Cause] = []
    for field, values in (("limits", limits), ("requests", requests)):
        if not isinstance(values, dict):
            continue
        for name, value in values.items():
            where = f"{path}.{field}[{name}]"
            if (
                "/" not in name
                and name not in _STANDARD_CONTAINER_RESOURCES
                and not name.startswith("hugepages-")
            ):
                out.append(errors.invalid_value(where, name, "must be a standard resource for containers"))
                continue
            if "/" in name:
                out += _qualified_name_errors(where, name)
            if not is_quantity(value):  # only kinds without a schema (MPIJob templates) get here
                out.append(errors.invalid_value(where, str(value), QUANTITY_MSG))
                continue
            amount = quantity_value(value)
            if amount < 0:
                out.append(errors.invalid_value(where, str(value), "must be greater than or equal to 0"))
            if not _is_native(name) and amount != int(amount):
                out.append(errors.invalid_value(where, str(value), "must be an integer"))
    if not isinstance(limits, dict) or not isinstance(requests, dict):
        return out
    for name, request in requests.items():
        limit = limits.get(name)
        if not is_quantity(request) or (limit is not None and not is_quantity(limit)):
            continue
        extended = "/" in name and not _is_native(name)
        if limit is None:
            if extended:
                out.append(
                    errors.required(f"{path}.limits", "Limit must be set for non overcommitable resources")
                )
            continue
        if extended and quantity_value(request) != quantity_value(limit):
            out.append(
                errors.invalid_value(
                    # The path is the requests map, not its key (pkg/apis/core/validation/validation.go
                    # ValidateContainerResourceRequirements, kubernetes v1.36.3).
                    f"{path}.requests",
                    str(request),
                    f"must be equal to {name} limit of {limit}",
                )
            )
        elif quantity_value(request) > quantity_value(limit):
            out.append(
                errors.invalid_value(
                    f"{path}.requests", str(request), f"must be less than or equal to {name} limit of {limit}"
                )
            )
    return out


_NODE_OPERATORS = ["DoesNotExist", "Exists", "Gt", "In", "Lt", "NotIn"]
_LABEL_OPERATORS = ["DoesNotExist", "Exists", "In", "NotIn"]


def _requirement_errors(path: str, req: object, operators: list[str]) -> list[Cause]:
    if not isinstance(req, dict):
        return [errors.invalid_value(path, str(req), "must be an object")]
    out: list[Cause] = []
    key, op, values = req.get("key") or "", req.get("operator"), req.get("values") or []
    if not key:
        out.append(errors.required(f"{path}.key"))
    else:
        out += _qualified_name_errors(f"{path}.key", key)
    if op in ("In", "NotIn") and not values:
        out.append(errors.required(f"{path}.values", "must be specified when `operator` is 'In' or 'NotIn'"))
    elif op in ("Exists", "DoesNotExist") and values:
        out.append(
            errors.forbidden(
                f"{path}.values", "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
            )
        )
    elif op in ("Gt", "Lt") and len(values) != 1:
        out.append(
            errors.required(
                f"{path}.values", "must be specified single value when `operator` is 'Lt' or 'Gt'"
            )
        )
    elif op not in operators:
        out.append(errors.not_supported(f"{path}.operator", op, operators))
    return out


def _node_selector_term_errors(path: str, term: object) -> list[Cause]:
    if not isinstance(term, dict):
        return [errors.invalid_value(path, str(term), "must be an object")]
    out: list[Cause] = []
    for i, req in enumerate(term.get("matchExpressions") or []):
        out += _requirement_errors(f"{path}.matchExpressions[{i}]", req, _NODE_OPERATORS)
    for i, req in enumerate(term.get("matchFields") or []):
        out += _requirement_errors(f"{path}.matchFields[{i}]", req, ["In", "NotIn"])
    return out


def _weight_errors(path: str, weight: object) -> list[Cause]:
    if not isinstance(weight, int) or not 1 <= weight <= 100:
        return [errors.invalid_value(path, weight, "must be in the range 1-100")]
    return []


def _pod_affinity_term_errors(path: str, term: object) -> list[Cause]:
    if not isinstance(term, dict):
        return [errors.invalid_value(path, str(term), "must be an object")]
    out: list[Cause] = []
    if not term.get("topologyKey"):
        out.append(errors.required(f"{path}.topologyKey", "can not be empty"))
    else:
        out += _qualified_name_errors(f"{path}.topologyKey", term["topologyKey"])
    selector = term.get("labelSelector")
    if isinstance(selector, dict):
        out += label_errors(f"{path}.labelSelector.matchLabels", selector.get("matchLabels"))
        for i, req in enumerate(selector.get("matchExpressions") or []):
            out += _requirement_errors(f"{path}.labelSelector.matchExpressions[{i}]", req, _LABEL_OPERATORS)
    return out


def affinity_errors(path: str, affinity: object) -> list[Cause]:
    """validateAffinity: node selector terms, pod (anti-)affinity terms and their weights.

    A weighted term put under ``requiredDuringScheduling...`` never gets here as such: for node
    affinity the decoder refuses the list (400); for pod affinity the ``weight``/``podAffinityTerm``
    keys are pruned and the empty term fails ``topologyKey: Required value`` here, as upstream."""
    if not isinstance(affinity, dict):
        return []
    out: list[Cause] = []
    node = affinity.get("nodeAffinity") or {}
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution")
    rpath = f"{path}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    if isinstance(required, dict):
        terms = required.get("nodeSelectorTerms") or []
        if not terms:
            out.append(
                errors.required(f"{rpath}.nodeSelectorTerms", "must have at least one node selector term")
            )
        for i, term in enumerate(terms):
            out += _node_selector_term_errors(f"{rpath}.nodeSelectorTerms[{i}]", term)
    ppath = f"{path}.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"
    for i, term in enumerate(node.get("preferredDuringSchedulingIgnoredDuringExecution") or []):
        if isinstance(term, dict):
            out += _weight_errors(f"{ppath}[{i}].weight", term.get("weight"))
            out += _node_selector_term_errors(f"{ppath}[{i}].preference", term.get("preference") or {})
    for kind in ("podAffinity", "podAntiAffinity"):
        pod = affinity.get(kind) or {}
        base = f"{path}.{kind}"
        for i, term in enumerate(pod.get("requiredDuringSchedulingIgnoredDuringExecution") or []):
            out += _pod_affinity_term_errors(
                f"{base}.requiredDuringSchedulingIgnoredDuringExecution[{i}]", term
            )
        for i, term in enumerate(pod.get("preferredDuringSchedulingIgnoredDuringExecution") or []):
            where = f"{base}.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
            if isinstance(term, dict):
                out += _weight_errors(f"{where}.weight", term.get("weight"))
                out += _pod_affinity_term_errors(f"{where}.podAffinityTerm", term.get("podAffinityTerm"))
    return out


_EFFECTS = ["NoExecute", "NoSchedule", "PreferNoSchedule"]


def toleration_errors(path: str, toleration: object) -> list[Cause]:
    """ValidateTolerations: an empty key needs Exists; Exists takes no value; effect enum;
    tolerationSeconds only with NoExecute."""
    if not isinstance(toleration, dict):
        return [errors.invalid_value(path, str(toleration), "must be an object")]
    out: list[Cause] = []
    key, op = toleration.get("key") or "", toleration.get("operator") or "Equal"
    if key:
        out += _qualified_name_errors(f"{path}.key", key)
    elif op != "Exists":
        out.append(
            errors.invalid_value(
                f"{path}.operator",
                op,
                'operator must be Exists when `key` is empty, which means "match all values and all keys"',
            )
        )
    if op == "Exists" and toleration.get("value"):
        out.append(
            errors.invalid_value(
                f"{path}.operator", toleration["value"], "value must be empty when `operator` is 'Exists'"
            )
        )
    elif op not in ("Equal", "Exists"):
        out.append(errors.not_supported(f"{path}.operator", op, ["Equal", "Exists"]))
    effect = toleration.get("effect")
    if effect and effect not in _EFFECTS:
        out.append(errors.not_supported(f"{path}.effect", effect, _EFFECTS))
    if toleration.get("tolerationSeconds") is not None and effect != "NoExecute":
        out.append(
            errors.invalid_value(
                f"{path}.effect", effect or "", "effect must be 'NoExecute' when `tolerationSeconds` is set"
            )
        )
    return out


_PROBE_HANDLERS = ("exec", "httpGet", "tcpSocket", "grpc")


def probe_errors(path: str, probe: object, single_success: bool) -> list[Cause]:
    """validateProbe: exactly one handler; counts not negative; liveness and startup probes need
    ``successThreshold`` 1."""
    if not isinstance(probe, dict):
        return []
    handlers = [h for h in _PROBE_HANDLERS if probe.get(h) is not None]
    out: list[Cause] = []
    if not handlers:
        out.append(errors.required(path, "must specify a handler type"))
    elif len(handlers) > 1:
        out.append(errors.forbidden(f"{path}.{handlers[1]}", "may not specify more than 1 handler type"))
    for field in (
        "initialDelaySeconds",
        "timeoutSeconds",
        "periodSeconds",
        "successThreshold",
        "failureThreshold",
    ):
        out += _nonneg(f"{path}.{field}", probe.get(field))
    if single_success and probe.get("successThreshold") not in (None, 1):
        out.append(errors.invalid_value(f"{path}.successThreshold", probe["successThreshold"], "must be 1"))
    http = probe.get("httpGet")
    if isinstance(http, dict) and http.get("port") is None:
        out.append(errors.required(f"{path}.httpGet.port"))
    return out


# In the order validateVolumeSource (kubernetes v1.36 pkg/apis/core/validation/validation.go) checks
# them: the second source found is the one named "may not specify more than 1 volume type".
_VOLUME_SOURCES = (
    "emptyDir",
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "persistentVolumeClaim",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "downwardAPI",
    "fc",
    "azureFile",
    "configMap",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "projected",
    "portworxVolume",
    "scaleIO",
    "storageos",
    "csi",
    "ephemeral",
    "image",
)


def _volume_errors(path: str, volumes: object) -> tuple[list[Cause], set[str]]:
    """ValidateVolumes: unique DNS-label names, exactly one source, the source's required fields."""
    names: set[str] = set()
    out: list[Cause] = []
    for i, volume in enumerate(volumes or [] if isinstance(volumes, list) else []):
        vpath = f"{path}[{i}]"
        if not isinstance(volume, dict):
            continue
        name = volume.get("name") or ""
        if not name:
            out.append(errors.required(f"{vpath}.name"))
        else:
            out += dns_label_errors(f"{vpath}.name", name)
            if name in names:
                out.append(Cause(f"{vpath}.name", "FieldValueDuplicate", f'Duplicate value: "{name}"'))
            names.add(name)
        sources = [s for s in _VOLUME_SOURCES if volume.get(s) is not None]
        if not sources:
            out.append(errors.required(vpath, "must specify a volume type"))
        elif len(sources) > 1:
            out.append(errors.forbidden(f"{vpath}.{sources[1]}", "may not specify more than 1 volume type"))
        claim = volume.get("persistentVolumeClaim")
        if isinstance(claim, dict) and not claim.get("claimName"):
            out.append(errors.required(f"{vpath}.persistentVolumeClaim.claimName"))
        secret = volume.get("secret")
        if isinstance(secret, dict) and not secret.get("secretName"):
            out.append(errors.required(f"{vpath}.secret.secretName"))
        config = volume.get("configMap")
        if isinstance(config, dict) and not config.get("name"):
            out.append(errors.required(f"{vpath}.configMap.name"))
    return out, names


_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
ENV_NAME_MSG = (
    "a valid environment variable name must consist of alphabetic characters, digits, '_', '-', or '.', and "
    "must not start with a digit (e.g. 'my.env-name',  or 'MY_ENV.NAME',  or 'MyEnvName1', regex used for "
    "validation is '[-._a-zA-Z][-._a-zA-Z0-9]*')"
)
_ENV_SOURCES = ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef")


_TERMINATION_MESSAGE_POLICIES = ("File", "FallbackToLogsOnError")


def env_from_errors(path: str, env_from: object) -> list[Cause]:
    """validateEnvFrom: a valid prefix, exactly one of configMapRef / secretRef, each naming its object."""
    out: list[Cause] = []
    for i, source in enumerate(env_from if isinstance(env_from, list) else []):
        spath = f"{path}[{i}]"
        if not isinstance(source, dict):
            continue
        prefix = source.get("prefix")
        if isinstance(prefix, str) and prefix and not _ENV_NAME.match(prefix):
            out.append(errors.invalid_value(f"{spath}.prefix", prefix, ENV_NAME_MSG))
        kinds = [k for k in ("configMapRef", "secretRef") if source.get(k) is not None]
        if not kinds:
            out.append(errors.invalid_value(path, "", "must specify one of: `configMapRef` or `secretRef`"))
        elif len(kinds) > 1:
            out.append(errors.forbidden(spath, "may not have more than one field specified at a time"))
        for kind in kinds:
            ref = source[kind]
            name = ref.get("name") if isinstance(ref, dict) else None
            if not name:
                out.append(errors.required(f"{spath}.{kind}.name"))
            else:
                out += dns_subdomain_errors(f"{spath}.{kind}.name", name)
    return out


def env_errors(path: str, env: object) -> list[Cause]:
    """ValidateEnv: names, and ``valueFrom`` with exactly one source and no ``value`` beside it."""
    out: list[Cause] = []
    for i, var in enumerate(env or [] if isinstance(env, list) else []):
        vpath = f"{path}[{i}]"
        if not isinstance(var, dict):
            continue
        name = var.get("name") or ""
        if not name:
            out.append(errors.required(f"{vpath}.name"))
        elif not _ENV_NAME.match(name):
            out.append(errors.invalid_value(f"{vpath}.name", name, ENV_NAME_MSG))
        source = var.get("valueFrom")
        if isinstance(source, dict):
            kinds = [k for k in _ENV_SOURCES if source.get(k) is not None]
            if len(kinds) != 1:
                out.append(
                    errors.invalid_value(
                        f"{vpath}.valueFrom",
                        "",
                        "must specify one of: `fieldRef`, `resourceFieldRef`, "
                        "`configMapKeyRef` or `secretKeyRef`"
                        if not kinds
                        else "may not have more than one field specified at a time",
                    )
                )
            if var.get("value"):
                out.append(
                    errors.invalid_value(
                        f"{vpath}.valueFrom", "", "may not be specified when `value` is not empty"
                    )
                )
            for ref in ("configMapKeyRef", "secretKeyRef"):
                key_ref = source.get(ref)
                if isinstance(key_ref, dict):
                    if not key_ref.get("key"):
                        out.append(errors.required(f"{vpath}.valueFrom.{ref}.key"))
                    if not key_ref.get("name"):
                        out.append(errors.required(f"{vpath}.valueFrom.{ref}.name"))
    return out
