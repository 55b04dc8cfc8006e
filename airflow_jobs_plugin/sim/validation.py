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
        for key in ("data", "binaryData"):
            data = obj.get(key)
            if data is not None and not isinstance(data, dict):
                out.append(errors.invalid_value(key, str(data), "must be a map"))
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
