"""The checker of a DAG author's job arguments: :func:`validate` turns them into a :class:`JobSpec`.

Pure (stdlib only, no I/O) so that a DAG fails at parse time, with a message naming the offending
argument, instead of minutes later on the cluster. Every problem is collected, none raised early, so the
author fixes them all in one round; each message names the field (``env.EPOCHS``,
``tolerations[0].effect``), the value and the fix. The rules across arguments run only over arguments
valid on their own, and a template not rendered yet is checked once it is.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Mapping, Sequence
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from airflow_jobs_plugin.jobs import kinds, pod_security
from airflow_jobs_plugin.jobs import labels as keys
from airflow_jobs_plugin.jobs.naming import (
    DNS_LABEL,
    DNS_LABEL_MAX,
    DNS_SUBDOMAIN,
    LABEL_VALUE,
    MAX_ATTEMPTS,
    MAX_WORKERS,
    QUALIFIED_NAME,
)
from airflow_jobs_plugin.jobs.spec import (
    ARGUMENTS,
    DEFAULT_JOB_SERVICE_ACCOUNT,
    DEFAULT_SHM_SIZE,
    DEVICE_PLUGIN_ENV,
    GPU_RESOURCE_PREFIXES,
    IMAGE_PULL_POLICIES,
    LAUNCHER_CREATION_POLICIES,
    MAIN_CONTAINER,
    MAX_BACKOFF_LIMIT,
    MAX_GPUS_PER_WORKER,
    MAX_PRIORITY,
    MIN_TTL_AFTER_FINISHED,
    MPI_IMPLEMENTATIONS,
    PRIORITY_NAMES,
    PRODUCT_ENV,
    REQUEUE_LIMIT_FROM_POLICY,
    SCHEDULE_TIMEOUT_FROM_POLICY,
    SHM_AUTO,
    SYSTEM_PRIORITY_CLASS_PREFIX,
    TOLERATION_EFFECTS,
    TOLERATION_OPERATORS,
    WAIT_FOR_WORKERS_CONTAINER,
    FrozenMap,
    JobSpec,
    JobSpecError,
    Reading,
    Toleration,
    VolumeMount,
    freeze,
)

AFFINITY_KEYS = ("nodeAffinity", "podAffinity", "podAntiAffinity")
POD_SECURITY_CONTEXT_KEYS = (
    "appArmorProfile",
    "fsGroup",
    "fsGroupChangePolicy",
    "runAsGroup",
    "runAsNonRoot",
    "runAsUser",
    "seLinuxChangePolicy",
    "seLinuxOptions",
    "seccompProfile",
    "supplementalGroups",
    "supplementalGroupsPolicy",
    "sysctls",
    "windowsOptions",
)
CONTAINER_SECURITY_CONTEXT_KEYS = (
    "allowPrivilegeEscalation",
    "appArmorProfile",
    "capabilities",
    "privileged",
    "procMount",
    "readOnlyRootFilesystem",
    "runAsGroup",
    "runAsNonRoot",
    "runAsUser",
    "seLinuxOptions",
    "seccompProfile",
    "windowsOptions",
)
ENV_FROM_SOURCES = ("secretRef", "configMapRef")

# Volume names the MPI operator adds to every MPI pod; a second volume with the same name is rejected.
MPI_OPERATOR_VOLUMES = ("ssh-auth", "mpi-job-config")

VOLUME_SOURCES = frozenset(
    {
        "awsElasticBlockStore",
        "azureDisk",
        "azureFile",
        "cephfs",
        "cinder",
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "fc",
        "flexVolume",
        "flocker",
        "gcePersistentDisk",
        "gitRepo",
        "glusterfs",
        "hostPath",
        "image",
        "iscsi",
        "nfs",
        "persistentVolumeClaim",
        "photonPersistentDisk",
        "portworxVolume",
        "projected",
        "quobyte",
        "rbd",
        "scaleIO",
        "secret",
        "storageos",
        "vsphereVolume",
    }
)
ENV_VALUE_FROM = ("secretKeyRef", "configMapKeyRef", "fieldRef", "resourceFieldRef")

_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+))(?P<suffix>[eE][+-]?\d+|[KMGTPE]i|[numkMGTPE])?$",
    re.ASCII,
)
_QUANTITY_FACTORS = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
# Image reference grammar of the container distribution spec.
_IMG_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_IMG_DOMAIN = re.compile(
    rf"^(?:{_IMG_DOMAIN_COMPONENT}(?:\.{_IMG_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:.]+\])(?::[0-9]+)?$"
)
_IMG_PATH_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_IMG_TAG = re.compile(r"^[\w][\w.-]{0,127}$", re.ASCII)
_IMG_DIGEST = re.compile(r"^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]{32,}$")
_IMG_NAME_MAX = 255

_MISSING: Any = object()


class _Problems:
    """Collects every problem so the author fixes them all in one round."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def add(self, field: str, message: str) -> Any:
        self.items.append((field, message))
        return _MISSING

    def raise_if_any(self) -> None:
        if self.items:
            field, message = self.items[0]
            raise JobSpecError(field, message, tuple(self.items))


def _plain(value: Any) -> Any:
    """Turn Kubernetes client model objects (V1Volume, V1Toleration, ...) into their JSON dict form.

    Duck-typed on the generated models' ``attribute_map`` so the package does not import the client.
    """
    if hasattr(value, "attribute_map") and hasattr(value, "openapi_types"):
        out = {}
        for attr in value.openapi_types:
            v = getattr(value, attr)
            if v is not None:
                out[value.attribute_map[attr]] = _plain(v)
        return out
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


# --- field checks ------------------------------------------------------------------------------------


def _is_template(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def is_unrendered(value: Any) -> bool:
    """True for a value Airflow replaces before ``execute``: a Jinja string or an XComArg.

    XComArgs are recognised by shape (``resolve`` and ``iter_references``, Airflow's ``ResolveMixin``)
    so this module stays free of Airflow imports.
    """
    return _is_template(value) or (hasattr(value, "resolve") and hasattr(value, "iter_references"))


def contains_unrendered(value: Any) -> bool:
    """True when ``value`` or anything nested in it (mapping keys and values, list items) is unrendered."""
    if is_unrendered(value):
        return True
    if isinstance(value, Mapping):
        return any(contains_unrendered(k) or contains_unrendered(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(contains_unrendered(v) for v in value)
    return False


def _show(value: Any) -> str:
    """``int 3`` / ``str 'x'``: the type matters as much as the value in these messages."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def image_problem(image: str) -> str | None:
    """What is wrong with a container image reference, or None when it is valid."""
    if not image:
        return "is empty -- give an image such as 'ghcr.io/org/train:1.2'"
    if image != image.strip() or any(c.isspace() for c in image):
        return f"contains whitespace: {image!r}"
    rest, digest = image, None
    if "@" in rest:
        rest, digest = rest.split("@", 1)
        if not _IMG_DIGEST.match(digest):
            return f"digest {digest!r} is not <algorithm>:<hex>, e.g. 'sha256:' and 64 hex digits"
        algorithm, _, hexpart = digest.partition(":")
        if algorithm == "sha256" and not re.fullmatch(r"[a-f0-9]{64}", hexpart):
            return f"sha256 digest must be 64 lower-case hex digits, got {len(hexpart)} characters"
    name, tag = rest, None
    last = rest.rfind(":")
    if last > rest.rfind("/"):
        name, tag = rest[:last], rest[last + 1 :]
        if not _IMG_TAG.match(tag):
            return f"tag {tag!r} is invalid: letters, digits, '_', '.', '-', at most 128, not starting with '.' or '-'"
    if not name:
        return f"has no repository name: {image!r}"
    if len(name) > _IMG_NAME_MAX:
        return f"repository name is longer than {_IMG_NAME_MAX} characters"
    parts = name.split("/")
    first = parts[0]
    domain = ""
    # Upper case does not make a registry here (Docker would): 'MyOrg/train' is far more often a
    # mistyped repository than a registry host called MyOrg.
    if len(parts) > 1 and ("." in first or ":" in first or first == "localhost"):
        if not _IMG_DOMAIN.match(first):
            return f"registry {first!r} is not a valid host[:port]"
        domain, parts = first + "/", parts[1:]
    for part in parts:
        if not part:
            return f"has an empty path component: {image!r}"
        if part != part.lower() and _IMG_PATH_COMPONENT.match(part.lower()):
            fixed = domain + "/".join(p.lower() for p in parts) + image[len(name) :]
            return f"repository path must be lower-case, got {image!r} -- use {fixed!r}"
        if not _IMG_PATH_COMPONENT.match(part):
            return (
                f"repository path component {part!r} is invalid: lower-case letters and digits "
                "separated by '.', '_', '__' or '-'"
            )
    return None


def label_key_problem(key: Any) -> str | None:
    """What is wrong with a label or annotation key (``[prefix/]name``), or None."""
    if not isinstance(key, str):
        return f"key must be a string, got {_show(key)}"
    prefix, _, name = key.rpartition("/")
    if "/" in key and not prefix:
        return f"key {key!r} has an empty prefix before '/'"
    if prefix and (len(prefix) > 253 or not DNS_SUBDOMAIN.match(prefix)):
        return f"key prefix {prefix!r} must be a lower-case DNS subdomain such as 'example.com'"
    if not name or len(name) > DNS_LABEL_MAX or not QUALIFIED_NAME.match(name):
        return (
            f"key {key!r}: the name part must be 1-63 characters of letters, digits, '-', '_', '.', "
            "starting and ending with a letter or digit"
        )
    return None


def label_value_problem(value: Any) -> str | None:
    """What is wrong with a label value, or None."""
    if not isinstance(value, str):
        return f"value must be a string, got {_show(value)} -- quote it"
    if len(value) > DNS_LABEL_MAX:
        return f"value must be at most 63 characters, got {len(value)}"
    if not LABEL_VALUE.match(value):
        return (
            f"value {value!r} may contain only letters, digits, '-', '_', '.' and must start and end "
            "with a letter or digit"
        )
    return None


def _reserved_key(key: str) -> bool:
    return (
        key.startswith(keys.PREFIX + "/")
        or key == keys.MANAGED_BY
        or key.startswith("training.kubeflow.org/")
        or key.startswith("batch.kubernetes.io/")
        or key in (keys.LEGACY_JOB_NAME, keys.LEGACY_CONTROLLER_UID)
    )


def _device_rules() -> Any:
    """jobs/kinds/charge.py, the pool's own rules for what a pod may ask for, imported when first used:
    that module reads quantities with :func:`parse_quantity` from here."""
    from airflow_jobs_plugin.jobs.kinds import charge

    return charge


def parse_quantity(text: str) -> Decimal | None:
    """The numeric value of a Kubernetes quantity ('500m', '16Gi', '1e3'), or None if malformed."""
    match = _QUANTITY.match(text)
    if not match:
        return None
    try:
        number = Decimal(match.group("num"))
    except InvalidOperation:
        return None
    suffix = match.group("suffix") or ""
    if suffix[:1] in ("e", "E"):
        return number * (Decimal(10) ** int(suffix[1:]))
    return number * _QUANTITY_FACTORS[suffix]


class _Checker:
    """Field-by-field parsing into normalized values; every problem is recorded, none raised early."""

    def __init__(
        self, templated: bool, runtime_classes: tuple[str, ...] = (), user_namespace: bool = False
    ) -> None:
        self.templated = templated
        self.problems = _Problems()
        # The RuntimeClasses the platform allows ([airflow_jobs] job_runtime_classes), and whether the
        # pods run in a user namespace (pod_template's hostUsers: false), where baseline allows any
        # procMount: the container checks read both.
        self.runtime_classes = runtime_classes
        self.user_namespace = user_namespace

    def add(self, field: str, message: str) -> Any:
        return self.problems.add(field, message)

    def refuse(self, refusals: list[pod_security.Refusal]) -> None:
        """The cluster's pod security refusals, each a problem of its field; a field the GPU rules
        already refused (a privileged container) keeps that one message."""
        known = {field for field, _ in self.problems.items}
        for refusal in refusals:
            if refusal.field not in known:
                self.add(*refusal.problem)

    # scalars

    def whole(self, field: str, value: Any, lo: int, hi: int | None, hint: str = "") -> Any:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                extra = " -- pass a number, not a string" if isinstance(value, str) else ""
                return self.add(field, f"must be a whole number{_range(lo, hi)}, got {_show(value)}{extra}")
        if value < lo or (hi is not None and value > hi):
            return self.add(field, f"must be a whole number{_range(lo, hi)}, got {value}{hint}")
        return value

    def duration(self, field: str, value: Any, *, optional: bool, minimum: timedelta) -> Any:
        if value is None:
            if optional:
                return None
            return self.add(field, "is required -- give a timedelta or a number of seconds")
        if isinstance(value, bool) or not isinstance(value, timedelta | int | float):
            return self.add(field, f"must be a timedelta or a number of seconds, got {_show(value)}")
        if not isinstance(value, timedelta):
            if not math.isfinite(value):
                return self.add(field, f"must be a finite number of seconds, got {value}")
            try:
                value = timedelta(seconds=value)
            except OverflowError:
                # timedelta holds at most 999,999,999 days; no deadline of the product needs more.
                return self.add(
                    field, f"must be at most {timedelta.max.days:,} days, got {value:.3g} seconds"
                )
        if value < minimum:
            none = " (or None for no limit)" if optional else ""
            return self.add(field, f"must be at least {_human(minimum)}{none}, got {_human(value)}")
        return value

    def text(self, field: str, value: Any, *, max_len: int = 253) -> Any:
        if value is None:
            return self.add(field, "is required")
        if not isinstance(value, str):
            return self.add(field, f"must be a string, got {_show(value)}")
        if not value.strip():
            return self.add(field, "must not be empty")
        if value != value.strip():
            return self.add(field, f"has leading or trailing whitespace: {value!r}")
        if any(not c.isprintable() for c in value):
            return self.add(field, f"contains control characters: {value!r}")
        if len(value) > max_len:
            return self.add(field, f"must be at most {max_len} characters, got {len(value)}")
        return value

    def dns_name(self, field: str, value: Any, *, subdomain: bool) -> Any:
        if not isinstance(value, str):
            return self.add(field, f"must be a string, got {_show(value)}")
        ok = (
            len(value) <= 253 and DNS_SUBDOMAIN.match(value)
            if subdomain
            else len(value) <= DNS_LABEL_MAX and DNS_LABEL.match(value)
        )
        if not ok:
            what = "DNS subdomain (at most 253" if subdomain else "DNS-1123 label (at most 63"
            return self.add(
                field,
                f"{value!r} is not a valid {what} lower-case letters, digits and '-', "
                "starting and ending with a letter or digit)",
            )
        return value

    def choice(self, field: str, value: Any, options: tuple[str, ...], optional: bool = False) -> Any:
        if value is None and optional:
            return None
        if value not in options:
            match = [o for o in options if isinstance(value, str) and o.lower() == value.lower()]
            hint = f" -- did you mean {match[0]!r}?" if match else ""
            return self.add(
                field, f"must be one of {', '.join(map(repr, options))}, got {_show(value)}{hint}"
            )
        return value

    def quantity(self, field: str, value: Any, *, memory: bool) -> Any:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            return self.add(field, f"must be a Kubernetes quantity such as '4' or '16Gi', got {_show(value)}")
        if isinstance(value, float) and not math.isfinite(value):
            return self.add(field, f"must be a finite quantity, got {value}")
        text = value if isinstance(value, str) else format(Decimal(str(value)).normalize(), "f")
        amount = parse_quantity(text)
        if amount is None:
            example = "'16Gi' or '512Mi'" if memory else "'4' or '500m'"
            return self.add(field, f"{text!r} is not a Kubernetes quantity such as {example}")
        if amount <= 0:
            return self.add(field, f"must be greater than zero, got {text!r}")
        if memory and text.endswith("m"):
            return self.add(
                field, f"{text!r} means {amount} bytes (m is milli) -- did you mean '{text[:-1]}Mi'?"
            )
        if memory and amount < 2**20:
            return self.add(
                field, f"{text!r} is {amount} bytes, less than 1Mi -- add a unit, e.g. '{text}Gi'"
            )
        return text

    # collections

    def command(self, field: str, value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, str):
            if not value.strip():
                return self.add(field, "is an empty string -- give a command or leave it unset")
            return ("sh", "-c", value)
        if isinstance(value, list | tuple):
            out = []
            for i, item in enumerate(value):
                if not isinstance(item, str):
                    self.add(f"{field}[{i}]", f"must be a string, got {_show(item)} -- quote it")
                else:
                    out.append(item)
            if len(out) != len(value):
                return _MISSING
            return tuple(out) or None
        return self.add(field, f"must be a list of strings or one shell command string, got {_show(value)}")

    def args(self, field: str, value: Any) -> Any:
        if isinstance(value, str):
            return self.add(
                field,
                f"must be a list of strings, got the string {value!r} -- split it, e.g. "
                "['--epochs', '3'], or put the whole line in command",
            )
        return self.command(field, value)

    def mapping(self, field: str, value: Any) -> Any:
        if value is None:
            return {}
        value = _plain(value)
        if not isinstance(value, Mapping):
            return self.add(field, f"must be a mapping, got {_show(value)}")
        return value

    def sequence(self, field: str, value: Any) -> Any:
        if value is None:
            return []
        if isinstance(value, str | bytes) or not isinstance(value, list | tuple):
            return self.add(field, f"must be a list, got {_show(value)}")
        return [_plain(v) for v in value]

    def env(self, value: Any) -> Any:
        raw = self.mapping("env", value)
        if raw is _MISSING:
            return raw
        out: dict[str, Any] = {}
        for name, item in raw.items():
            where = f"env.{name}"
            if not isinstance(name, str) or not _ENV_NAME.match(name):
                self.add(
                    where,
                    "is not a valid variable name: letters, digits, '_', '-', '.', not starting with a digit",
                )
                continue
            if name in PRODUCT_ENV:
                self.add(where, "is reserved: the product sets it in every container")
                continue
            if name in DEVICE_PLUGIN_ENV:
                self.add(where, "is reserved: the GPU device plugin sets it from the gpus argument")
                continue
            if isinstance(item, Mapping):
                ref_keys = list(item)
                if (
                    len(ref_keys) == 1
                    and ref_keys[0] in ENV_VALUE_FROM
                    and isinstance(item[ref_keys[0]], Mapping)
                ):
                    out[name] = freeze(dict(item))
                else:
                    self.add(
                        where,
                        f"a mapping value must be exactly one of {', '.join(ENV_VALUE_FROM)}, e.g. "
                        "{'secretKeyRef': {'name': 'wandb', 'key': 'api-key'}}",
                    )
                continue
            if not isinstance(item, str):
                self.add(where, f"value must be a string, got {_show(item)} -- quote it: '{item}'")
                continue
            out[name] = item
        return FrozenMap(out)

    def string_map(self, field: str, value: Any, *, label_values: bool, reserved_ok: bool) -> Any:
        raw = self.mapping(field, value)
        if raw is _MISSING:
            return raw
        out: dict[str, str] = {}
        size = 0
        for key, item in raw.items():
            where = f"{field}.{key}"
            problem = label_key_problem(key)
            if problem:
                self.add(where, problem)
                continue
            if not reserved_ok and _reserved_key(key):
                self.add(where, "is reserved: the product or its controllers set this key")
                continue
            problem = (
                label_value_problem(item)
                if label_values
                else (
                    None
                    if isinstance(item, str)
                    else f"value must be a string, got {_show(item)} -- quote it"
                )
            )
            if problem:
                self.add(where, problem)
                continue
            size += len(key) + len(item)
            out[key] = item
        if size > 256 * 1024:
            self.add(field, f"total size must be at most 256 KiB, got {size} bytes")
        return FrozenMap(out)

    def tolerations(self, value: Any) -> Any:
        items = self.sequence("tolerations", value)
        if items is _MISSING:
            return items
        out = []
        ok = True
        for i, item in enumerate(items):
            where = f"tolerations[{i}]"
            if not isinstance(item, Mapping):
                self.add(
                    where, f"must be a mapping like {{'key': 'gpu', 'operator': 'Exists'}}, got {_show(item)}"
                )
                ok = False
                continue
            known = {"key", "operator", "value", "effect", "tolerationSeconds"}
            unknown = sorted(set(item) - known)
            if unknown:
                self.add(
                    f"{where}.{unknown[0]}", f"unknown toleration field; allowed: {', '.join(sorted(known))}"
                )
                ok = False
                continue
            key = item.get("key") or ""
            operator = item.get("operator") or "Equal"
            val = item.get("value") or ""
            effect = item.get("effect") or ""
            seconds = item.get("tolerationSeconds")
            before = len(self.problems.items)
            key_problem = label_key_problem(key) if key else None
            if key_problem:
                self.add(f"{where}.key", key_problem)
            self.choice(f"{where}.operator", operator, TOLERATION_OPERATORS)
            self.choice(f"{where}.effect", effect, TOLERATION_EFFECTS)
            if not isinstance(val, str):
                self.add(f"{where}.value", f"must be a string, got {_show(val)} -- quote it")
            elif operator == "Exists" and val:
                self.add(f"{where}.value", "must be empty when operator is 'Exists'")
            elif val and (value_problem := label_value_problem(val)):
                self.add(f"{where}.value", value_problem)
            if not key and operator != "Exists":
                self.add(f"{where}.operator", "must be 'Exists' when key is empty (tolerate every taint)")
            if seconds is not None:
                if effect != "NoExecute":
                    self.add(f"{where}.tolerationSeconds", "only applies to effect 'NoExecute'")
                else:
                    self.whole(f"{where}.tolerationSeconds", seconds, 0, None)
            if len(self.problems.items) != before:
                ok = False
                continue
            out.append(Toleration(key, operator, val, effect, None if seconds is None else int(seconds)))
        return tuple(out) if ok else _MISSING

    def volumes(self, value: Any) -> Any:
        items = self.sequence("volumes", value)
        if items is _MISSING:
            return items
        out = []
        seen: set[str] = set()
        ok = True
        for i, item in enumerate(items):
            where = f"volumes[{i}]"
            if not isinstance(item, Mapping):
                self.add(
                    where,
                    "must be a Kubernetes volume mapping like "
                    f"{{'name': 'shared', 'persistentVolumeClaim': {{'claimName': 'vision-data'}}}}, got {_show(item)}",
                )
                ok = False
                continue
            name = item.get("name")
            if self.dns_name(f"{where}.name", name, subdomain=False) is _MISSING:
                ok = False
                continue
            if name in seen:
                self.add(f"{where}.name", f"{name!r} is declared twice")
                ok = False
                continue
            if name in MPI_OPERATOR_VOLUMES:
                self.add(
                    f"{where}.name", f"{name!r} is reserved: the MPI operator adds a volume of that name"
                )
                ok = False
                continue
            seen.add(str(name))
            sources = [k for k in item if k != "name"]
            if len(sources) != 1 or sources[0] not in VOLUME_SOURCES:
                self.add(
                    where,
                    f"must have exactly one volume source (e.g. persistentVolumeClaim, nfs, emptyDir), got {sources}",
                )
                ok = False
                continue
            host_path = pod_security.hostpath_refusal(item, where)
            if host_path is not None:
                self.refuse([host_path])
                ok = False
                continue
            out.append(freeze(dict(item)))
        return tuple(out) if ok else _MISSING

    def volume_mounts(self, value: Any, field: str = "volume_mounts") -> Any:
        items = self.sequence(field, value)
        if items is _MISSING:
            return items
        out = []
        paths: set[str] = set()
        ok = True
        aliases = {"mount_path": "mountPath", "read_only": "readOnly", "sub_path": "subPath"}
        for i, item in enumerate(items):
            where = f"{field}[{i}]"
            if not isinstance(item, Mapping):
                self.add(
                    where,
                    f"must be a mapping like {{'name': 'shared', 'mountPath': '/data'}}, got {_show(item)}",
                )
                ok = False
                continue
            item = {aliases.get(k, k): v for k, v in item.items()}
            before = len(self.problems.items)
            name = item.get("name")
            path = item.get("mountPath")
            sub = item.get("subPath") or ""
            read_only = item.get("readOnly", False)
            if not isinstance(name, str) or not name:
                self.add(f"{where}.name", f"must name a declared volume, got {_show(name)}")
            if not isinstance(path, str) or not path.startswith("/") or ":" in path:
                self.add(f"{where}.mountPath", f"must be an absolute path without ':', got {_show(path)}")
            elif path in paths:
                self.add(f"{where}.mountPath", f"{path!r} is mounted twice")
            if not isinstance(sub, str) or sub.startswith("/") or ".." in sub.split("/"):
                self.add(f"{where}.subPath", f"must be a relative path without '..', got {_show(sub)}")
            if not isinstance(read_only, bool):
                self.add(f"{where}.readOnly", f"must be true or false, got {_show(read_only)}")
            if len(self.problems.items) != before:
                ok = False
                continue
            paths.add(str(path))
            out.append(VolumeMount(str(name), str(path), read_only, sub))
        return tuple(out) if ok else _MISSING

    def exit_codes(self, field: str, value: Any) -> Any:
        items = self.sequence(field, value)
        if items is _MISSING:
            return items
        out = set()
        ok = True
        for i, code in enumerate(items):
            parsed = self.whole(f"{field}[{i}]", code, 1, 255, " -- exit codes are 1..255 (0 is success)")
            if parsed is _MISSING:
                ok = False
            else:
                out.add(parsed)
        return tuple(sorted(out)) if ok else _MISSING

    def image(self, field: str, value: Any) -> Any:
        if value is None:
            return self.add(field, "is required -- give a container image such as 'ghcr.io/org/train:1.2'")
        if not isinstance(value, str):
            return self.add(field, f"must be a string, got {_show(value)}")
        if self.templated and _is_template(value):
            return value
        problem = image_problem(value)
        return self.add(field, problem) if problem else value

    def init_containers(self, value: Any, volume_names: set[str] | None) -> Any:
        items = self.sequence("init_containers", value)
        if items is _MISSING:
            return items
        out = []
        seen: set[str] = set()
        ok = True
        for i, item in enumerate(items):
            where = f"init_containers[{i}]"
            if not isinstance(item, Mapping):
                self.add(
                    where, f"must be a Kubernetes container mapping with name and image, got {_show(item)}"
                )
                ok = False
                continue
            before = len(self.problems.items)
            name = item.get("name")
            if self.dns_name(f"{where}.name", name, subdomain=False) is not _MISSING:
                if name in seen:
                    self.add(f"{where}.name", f"{name!r} is used twice")
                elif name in (MAIN_CONTAINER, WAIT_FOR_WORKERS_CONTAINER):
                    self.add(f"{where}.name", f"{name!r} is reserved for the product's own containers")
                seen.add(str(name))
            self.image(f"{where}.image", item.get("image"))
            for problem in _device_rules().container_problems(item, where, None):
                self.add(*problem.split(": ", 1))
            self.refuse(pod_security.container_refusals(item, where, user_namespace=self.user_namespace))
            mounts = self.volume_mounts(item.get("volumeMounts"), f"{where}.volumeMounts")
            if mounts is not _MISSING and volume_names is not None:
                for j, mount in enumerate(mounts):
                    if mount.name not in volume_names:
                        self.add(f"{where}.volumeMounts[{j}].name", _undeclared(mount.name, volume_names))
            if len(self.problems.items) != before:
                ok = False
                continue
            out.append(freeze(dict(item)))
        return tuple(out) if ok else _MISSING

    def pull_secrets(self, value: Any) -> Any:
        if isinstance(value, str):
            value = [value]
        items = self.sequence("image_pull_secrets", value)
        if items is _MISSING:
            return items
        out = []
        for i, item in enumerate(items):
            name = item.get("name") if isinstance(item, Mapping) else item
            parsed = self.dns_name(f"image_pull_secrets[{i}]", name, subdomain=True)
            if parsed is not _MISSING:
                out.append(parsed)
        return tuple(out) if len(out) == len(items) else _MISSING

    def known_keys(self, field: str, value: Any, allowed: tuple[str, ...], example: str) -> Any:
        """A Kubernetes object given as a mapping whose top-level keys must be among ``allowed``."""
        raw = self.mapping(field, value)
        if raw is _MISSING:
            return raw
        ok = True
        for key in raw:
            if key not in allowed:
                match = [a for a in allowed if isinstance(key, str) and a.lower() == key.lower()]
                hint = f" -- did you mean {match[0]!r}?" if match else f"; allowed: {', '.join(allowed)}"
                self.add(f"{field}.{key}", f"is not a field of {example}{hint}")
                ok = False
        return freeze(dict(raw)) if ok else _MISSING

    def affinity_weights(self, value: Any) -> Any:
        """The weights of an affinity's preferred terms, which the API server takes only from 1 to 100
        (kubernetes v1.36 pkg/apis/core/validation/validation.go: ValidatePreferredSchedulingTerms and
        validateWeightedPodAffinityTerms, "must be in the range 1-100"): found here, not on the cluster."""
        if not isinstance(value, Mapping):
            return value
        ok = True
        for part in ("nodeAffinity", "podAffinity", "podAntiAffinity"):
            body = value.get(part)
            terms = (
                body.get("preferredDuringSchedulingIgnoredDuringExecution")
                if isinstance(body, Mapping)
                else None
            )
            for i, term in enumerate(terms if isinstance(terms, list | tuple) else ()):
                weight = term.get("weight") if isinstance(term, Mapping) else None
                if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
                    self.add(
                        f"affinity.{part}.preferredDuringSchedulingIgnoredDuringExecution[{i}].weight",
                        f"must be a whole number from 1 to 100 (how much the scheduler prefers the term), "
                        f"got {_show(weight)}",
                    )
                    ok = False
        return value if ok else _MISSING

    def env_from(self, value: Any) -> Any:
        items = self.sequence("env_from", value)
        if items is _MISSING:
            return items
        out = []
        ok = True
        for i, item in enumerate(items):
            where = f"env_from[{i}]"
            example = "{'secretRef': {'name': 'wandb'}} or {'configMapRef': {'name': 'train-config'}}"
            if not isinstance(item, Mapping):
                self.add(where, f"must be a mapping like {example}, got {_show(item)}")
                ok = False
                continue
            sources = [k for k in item if k != "prefix"]
            if len(sources) != 1 or sources[0] not in ENV_FROM_SOURCES:
                self.add(
                    where,
                    f"must have exactly one of secretRef, configMapRef (and an optional prefix), e.g. {example}",
                )
                ok = False
                continue
            before = len(self.problems.items)
            ref = item[sources[0]]
            if not isinstance(ref, Mapping):
                self.add(f"{where}.{sources[0]}", f"must be a mapping with a name, got {_show(ref)}")
            else:
                self.dns_name(f"{where}.{sources[0]}.name", ref.get("name"), subdomain=True)
                extra = sorted(set(ref) - {"name", "optional"})
                if extra:
                    self.add(f"{where}.{sources[0]}.{extra[0]}", "unknown field; allowed: name, optional")
                if not isinstance(ref.get("optional", False), bool):
                    self.add(f"{where}.{sources[0]}.optional", "must be true or false")
            prefix = item.get("prefix", "")
            if not isinstance(prefix, str) or (prefix and not _ENV_NAME.match(prefix)):
                self.add(f"{where}.prefix", f"must be a valid variable-name prefix, got {_show(prefix)}")
            if len(self.problems.items) != before:
                ok = False
                continue
            out.append(freeze(dict(item)))
        return tuple(out) if ok else _MISSING

    def resource_name(self, field: str, value: Any) -> Any:
        if not isinstance(value, str):
            return self.add(field, f"must be a string such as 'nvidia.com/gpu', got {_show(value)}")
        prefix, _, name = value.partition("/")
        if (
            not name
            or label_key_problem(value)
            or prefix.endswith("kubernetes.io")
            or prefix.endswith("k8s.io")
        ):
            return self.add(
                field,
                f"{value!r} is not an extended resource name: '<vendor domain>/<name>' such as "
                "'nvidia.com/gpu', 'nvidia.com/mig-1g.10gb' or 'amd.com/gpu'",
            )
        return value

    def container_resources(self, value: Any, gpu_resource: Any) -> Any:
        raw = self.mapping("container_resources", value)
        if raw is _MISSING:
            return raw
        if set(raw) & {"requests", "limits"}:
            return self.add(
                "container_resources",
                "takes resource names and amounts, e.g. {'rdma/ib': 1, 'hugepages-2Mi': '1Gi'}; requests "
                "and limits are both set to them (GPUs and extended resources require it)",
            )
        out: dict[str, str] = {}
        for name, amount in raw.items():
            where = f"container_resources.{name}"
            if name in ("cpu", "memory"):
                self.add(where, f"use the {name} argument")
                continue
            if name == gpu_resource or (isinstance(name, str) and name.startswith(GPU_RESOURCE_PREFIXES)):
                self.add(where, "is a GPU resource: use gpus (and gpu_resource), which the quota charges")
                continue
            standard = name == "ephemeral-storage" or (
                isinstance(name, str) and name.startswith("hugepages-")
            )
            if not standard and self.resource_name(where, name) is _MISSING:
                continue
            if isinstance(name, str) and name.startswith("hugepages-") and parse_quantity(name[10:]) is None:
                self.add(
                    where, "hugepages resources are named by page size, e.g. 'hugepages-2Mi', 'hugepages-1Gi'"
                )
                continue
            if amount is None:
                # quantity() reads None as "not set", which an entry of this mapping cannot mean.
                self.add(
                    where,
                    f"needs an amount, e.g. {{{name!r}: 1}}; remove the entry to ask for none of {name}",
                )
                continue
            parsed = self.quantity(where, amount, memory=False)
            if parsed is _MISSING:
                continue
            # Extended resources are whole devices: the API server refuses fractions
            # (kubernetes pkg/apis/core/validation/validation.go, validateResourceQuantityValue, v1.31).
            number = parse_quantity(parsed)
            if not standard and number is not None and number != number.to_integral_value():
                self.add(where, f"must be a whole number of devices, got {parsed!r}")
                continue
            out[name] = parsed
        return FrozenMap(out)

    def shm_size(self, value: Any, memory: Any) -> Any:
        if value is None or value is False:
            return None
        if value == SHM_AUTO:
            if isinstance(memory, str):
                limit = parse_quantity(memory)
                if limit is not None and limit < 2 * parse_quantity(DEFAULT_SHM_SIZE):  # type: ignore[operator]
                    return f"{int(limit / 2 / 2**20)}Mi"
            return DEFAULT_SHM_SIZE
        parsed = self.quantity("shm_size", value, memory=True)
        if parsed is _MISSING or not isinstance(memory, str):
            return parsed
        size, limit = parse_quantity(parsed), parse_quantity(memory)
        if size is not None and limit is not None and size > limit:
            return self.add(
                "shm_size",
                f"{parsed!r} is more than memory {memory!r}: /dev/shm pages count against the container's "
                "memory limit -- lower shm_size or raise memory",
            )
        return parsed

    def pod_template(self, value: Any, gpu_resource: Any) -> Any:
        raw = self.mapping("pod_template", value)
        if raw is _MISSING or not raw:
            return raw if raw is _MISSING else FrozenMap()
        before = len(self.problems.items)
        for key in raw:
            if key not in ("apiVersion", "kind", "metadata", "spec"):
                self.add(f"pod_template.{key}", "unknown field; a pod template has metadata and spec")
        if raw.get("kind", "Pod") != "Pod":
            self.add("pod_template.kind", f"must be 'Pod', got {_show(raw.get('kind'))}")
        meta = raw.get("metadata") or {}
        if not isinstance(meta, Mapping):
            self.add("pod_template.metadata", f"must be a mapping, got {_show(meta)}")
        else:
            self.string_map(
                "pod_template.metadata.labels", meta.get("labels"), label_values=True, reserved_ok=False
            )
            self.string_map(
                "pod_template.metadata.annotations",
                meta.get("annotations"),
                label_values=False,
                reserved_ok=False,
            )
        pod = raw.get("spec") or {}
        if not isinstance(pod, Mapping):
            self.add("pod_template.spec", f"must be a mapping, got {_show(pod)}")
            pod = {}
        self.not_system_class("pod_template.spec.priorityClassName", pod.get("priorityClassName"))
        for key in ("serviceAccountName", "serviceAccount"):
            if key in pod:
                self.add(
                    f"pod_template.spec.{key}",
                    "the account a job's pods run as is the service_account argument, limited to the "
                    "accounts the platform allows -- remove it and set service_account",
                )
        for problem in _device_rules().pod_level_problems(pod, "pod_template.spec"):
            self.add(*problem.split(": ", 1))
        dns = pod.get("dnsPolicy")
        if dns is not None and dns not in DNS_POLICIES:
            # kubernetes v1.36 pkg/apis/core/validation/validation.go validateDNSPolicy: a NotSupported 422.
            self.add(
                "pod_template.spec.dnsPolicy",
                f"must be one of {', '.join(map(repr, DNS_POLICIES))}, got {_show(dns)}"
                f"{_close(dns, DNS_POLICIES)}",
            )
        elif dns == "None" and not pod.get("dnsConfig"):
            self.add(
                "pod_template.spec.dnsConfig", "is required with dnsPolicy 'None' (the pod's nameservers)"
            )
        for kind in ("containers", "initContainers"):
            containers = pod.get(kind) or []
            if not isinstance(containers, list | tuple):
                self.add(f"pod_template.spec.{kind}", f"must be a list, got {_show(containers)}")
                continue
            for i, container in enumerate(containers):
                where = f"pod_template.spec.{kind}[{i}]"
                if not isinstance(container, Mapping):
                    self.add(where, f"must be a container mapping, got {_show(container)}")
                    continue
                resources = container.get("resources") or {}
                for part in ("requests", "limits"):
                    for name in (resources.get(part) or {}) if isinstance(resources, Mapping) else ():
                        if name == gpu_resource or str(name).startswith(GPU_RESOURCE_PREFIXES):
                            self.add(
                                f"{where}.resources.{part}.{name}",
                                "GPUs come only from the gpus argument, which the quota charges -- remove it",
                            )
                for j, var in enumerate(container.get("env") or []):
                    if isinstance(var, Mapping) and var.get("name") in (*PRODUCT_ENV, *DEVICE_PLUGIN_ENV):
                        self.add(f"{where}.env[{j}]", f"{var.get('name')} is set by the product -- remove it")
                for problem in _device_rules().reach_problems(container, where):
                    self.add(*problem.split(": ", 1))
        self.refuse(pod_security.template_refusals(raw, "pod_template", self.runtime_classes))
        if len(self.problems.items) != before:
            return _MISSING
        return freeze(dict(raw))

    def service_account(self, value: Any, allowed: tuple[str, ...]) -> Any:
        allowed = allowed or (DEFAULT_JOB_SERVICE_ACCOUNT,)
        if value is None:
            return allowed[0]
        name = self.dns_name("service_account", value, subdomain=True)
        if name is _MISSING or name in allowed:
            return name
        return self.add(
            "service_account",
            f"{name!r} is not an account jobs may run as (a job's pods would carry its token and rights); "
            f"allowed: {', '.join(map(repr, allowed))} ([airflow_jobs] job_service_accounts) -- remove it to "
            f"run as {allowed[0]!r}, or ask the platform to allow the account",
        )

    def not_system_class(self, field: str, value: Any) -> Any:
        """``value`` unless it names one of the cluster's own priority classes (``system-*``), which no
        job may use whatever its group is allowed (queueing/quota/priority_classes.py)."""
        if isinstance(value, str) and value.startswith(SYSTEM_PRIORITY_CLASS_PREFIX):
            return self.add(
                field,
                f"{value!r} is one of the cluster's own priority classes ({SYSTEM_PRIORITY_CLASS_PREFIX}*), "
                "whose pods preempt any other pod of their node; no job may use it -- name a class the "
                "platform allows your group (groups.<group>.priority_classes in the quota policy), or "
                "none for the cluster's default",
            )
        return value

    def priority(self, value: Any) -> Any:
        if isinstance(value, str):
            if value in PRIORITY_NAMES:
                return PRIORITY_NAMES[value]
            return self.add(
                "priority",
                f"must be a whole number from -{MAX_PRIORITY} to {MAX_PRIORITY} or one of "
                f"{', '.join(map(repr, PRIORITY_NAMES))}, got {_show(value)}",
            )
        return self.whole("priority", value, -MAX_PRIORITY, MAX_PRIORITY, " (higher runs first)")


# The pod DNS policies the API server accepts (kubernetes v1.36 pkg/apis/core/validation/validation.go,
# validateDNSPolicy).
DNS_POLICIES = ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None")


def _close(word: Any, choices: tuple[str, ...]) -> str:
    match = [c for c in choices if isinstance(word, str) and c.lower() == word.lower()]
    return f" -- did you mean {match[0]!r}?" if match else ""


def _range(lo: int, hi: int | None) -> str:
    return f" >= {lo}" if hi is None else f" from {lo} to {hi}"


def _human(delta: timedelta) -> str:
    seconds = delta.total_seconds()
    return f"{seconds:g}s"


def _undeclared(name: str, declared: set[str]) -> str:
    known = ", ".join(sorted(map(repr, declared))) or "none"
    return f"{name!r} is not a declared volume (declared: {known}) -- add it to volumes"


def validate(
    *,
    templated: bool = False,
    rendered: frozenset[str] | set[str] = frozenset(),
    service_accounts: Sequence[str] = (DEFAULT_JOB_SERVICE_ACCOUNT,),
    runtime_classes: Sequence[str] = (),
    **arguments: Any,
) -> JobSpec:
    """Check DAG-author arguments and return the normalized :class:`JobSpec`.

    The arguments are :data:`~airflow_jobs_plugin.jobs.spec.ARGUMENTS`, by their JobSpec field names
    (``labels``, not the operator's ``job_labels``); one left out has its default there.

    Raises :class:`JobSpecError` naming every wrong argument (``gpus: must be a whole number from 0
    to 64, got -2``).

    With ``templated=True`` (parse time, before rendering) an argument that is a Jinja string or an
    XComArg, or a list holding one, is not checked (its default stands in for it in the returned spec and
    in the rules across arguments); in a mapping (``env``, ``labels``, ...) only the entries that hold one
    are skipped. Validate again after rendering with ``templated=False`` and ``rendered`` naming the
    arguments that were templates: a number, boolean or duration rendered from Jinja arrives as text
    ("4", "True", "600") and is read as what it spells.

    ``service_accounts`` are the accounts the platform lets jobs run as (``[airflow_jobs]
    job_service_accounts``); a job that names none runs as the first. ``runtime_classes`` are the
    RuntimeClasses a ``pod_template`` may name (``[airflow_jobs] job_runtime_classes``). What the
    cluster's Pod Security (baseline) refuses of a pod is refused in every argument that can ask for it
    (:mod:`~airflow_jobs_plugin.jobs.pod_security`).

    Accepted shapes: durations as ``timedelta`` or seconds; ``command`` as a list or one shell string;
    ``env`` values as strings or one ``valueFrom`` mapping (``{'secretKeyRef': {...}}``);
    ``tolerations``, ``volumes``, ``volume_mounts``, ``init_containers`` as Kubernetes JSON mappings
    or Kubernetes client model objects; ``priority`` as an int or 'low' / 'normal' / 'high'.
    """
    unknown = [name for name in arguments if name not in _DEFAULTS]
    if unknown:
        raise TypeError(f"validate() got an unexpected keyword argument {unknown[0]!r}")
    given = {name: arguments.get(name, default) for name, default in _DEFAULTS.items()}
    a = _settle(given, templated=templated, rendered=frozenset(rendered))
    deferred = {name for name in given if a[name] is _DEFERRED}
    partial = {name for name, value in given.items() if a[name] is not value and isinstance(value, Mapping)}
    partial = {name for name in partial if templated and contains_unrendered(given[name])}
    for name in deferred:
        a[name] = _DEFAULTS[name]
    # Baseline allows any procMount in a user namespace: a pod_template still to be rendered may ask for
    # one, so a procMount waits for it.
    template = _plain(a["pod_template"])
    user_namespace = pod_security.in_user_namespace(
        template.get("spec") if isinstance(template, Mapping) else None
    ) or (templated and contains_unrendered(given["pod_template"]))
    c = _Checker(templated, tuple(runtime_classes), user_namespace)
    v: dict[str, Any] = {}
    v["image"] = c.image("image", a["image"])
    v["group"] = c.text("group", a["group"])
    v["user"] = c.text("user", a["user"])
    v["command"] = c.command("command", a["command"])
    v["args"] = c.args("args", a["args"])
    v["env"] = c.env(a["env"])
    v["env_from"] = c.env_from(a["env_from"])
    v["gpus"] = c.whole("gpus", a["gpus"], 0, MAX_GPUS_PER_WORKER, " (GPUs per worker)")
    v["gpu_resource"] = c.resource_name("gpu_resource", a["gpu_resource"])
    v["workers"] = c.whole("workers", a["workers"], 1, MAX_WORKERS, " (1 runs a single pod, more an MPI job)")
    v["cpu"] = c.quantity("cpu", a["cpu"], memory=False)
    v["memory"] = c.quantity("memory", a["memory"], memory=True)
    v["container_resources"] = c.container_resources(a["container_resources"], v["gpu_resource"])
    v["shm_size"] = c.shm_size(a["shm_size"], v["memory"])
    v["node_selector"] = c.string_map(
        "node_selector", a["node_selector"], label_values=True, reserved_ok=True
    )
    v["affinity"] = c.affinity_weights(c.known_keys("affinity", a["affinity"], AFFINITY_KEYS, "Affinity"))
    v["tolerations"] = c.tolerations(a["tolerations"])
    v["volumes"] = c.volumes(a["volumes"])
    v["volume_mounts"] = c.volume_mounts(a["volume_mounts"])
    namespace = a["namespace"]
    v["namespace"] = None if namespace is None else c.dns_name("namespace", namespace, subdomain=False)
    for name in ("priority_class_name", "scheduler_name"):
        # Both are DNS subdomains (kubernetes pkg/apis/core/validation/validation.go, ValidatePodSpec, v1.31).
        v[name] = None if a[name] is None else c.dns_name(name, a[name], subdomain=True)
    v["priority_class_name"] = c.not_system_class("priority_class_name", v["priority_class_name"])
    v["security_context"] = c.known_keys(
        "security_context", a["security_context"], POD_SECURITY_CONTEXT_KEYS, "PodSecurityContext"
    )
    c.refuse(pod_security.pod_security_context_refusals(_plain(a["security_context"]), "security_context"))
    if isinstance(a["container_security_context"], Mapping) and (
        a["container_security_context"].get("privileged") is True
    ):
        c.add(
            "container_security_context.privileged",
            "a privileged container sees every GPU of its node, charged or not; remove it and add only the "
            "capabilities the program needs",
        )
    v["container_security_context"] = c.known_keys(
        "container_security_context",
        a["container_security_context"],
        CONTAINER_SECURITY_CONTEXT_KEYS,
        "SecurityContext (a container's)",
    )
    c.refuse(
        pod_security.container_security_context_refusals(
            _plain(a["container_security_context"]),
            "container_security_context",
            user_namespace=c.user_namespace,
        )
    )
    v["pod_template"] = c.pod_template(a["pod_template"], v["gpu_resource"])
    v["backoff_limit"] = c.whole(
        "backoff_limit", a["backoff_limit"], 0, MAX_BACKOFF_LIMIT, " (pod retries inside one attempt)"
    )
    v["max_attempts"] = c.whole(
        "max_attempts", a["max_attempts"], 1, MAX_ATTEMPTS, " (1 means no job-level retry)"
    )
    one_second = timedelta(seconds=1)
    v["retry_backoff"] = c.duration("retry_backoff", a["retry_backoff"], optional=False, minimum=timedelta(0))
    v["retry_backoff_max"] = c.duration(
        "retry_backoff_max", a["retry_backoff_max"], optional=False, minimum=timedelta(0)
    )
    v["retryable_exit_codes"] = c.exit_codes("retryable_exit_codes", a["retryable_exit_codes"])
    v["fatal_exit_codes"] = c.exit_codes("fatal_exit_codes", a["fatal_exit_codes"])
    v["queue_timeout"] = c.duration("queue_timeout", a["queue_timeout"], optional=True, minimum=one_second)
    if a["schedule_timeout"] == SCHEDULE_TIMEOUT_FROM_POLICY:
        v["schedule_timeout"] = SCHEDULE_TIMEOUT_FROM_POLICY
    else:
        v["schedule_timeout"] = c.duration(
            "schedule_timeout", a["schedule_timeout"], optional=False, minimum=one_second
        )
    requeue_limit = a["requeue_limit"]
    if requeue_limit is None or requeue_limit == REQUEUE_LIMIT_FROM_POLICY:
        v["requeue_limit"] = requeue_limit
    else:
        v["requeue_limit"] = c.whole("requeue_limit", requeue_limit, 0, None)
    v["active_deadline"] = c.duration(
        "active_deadline", a["active_deadline"], optional=True, minimum=one_second
    )
    v["ttl_after_finished"] = c.duration(
        "ttl_after_finished", a["ttl_after_finished"], optional=True, minimum=MIN_TTL_AFTER_FINISHED
    )
    v["labels"] = c.string_map("labels", a["labels"], label_values=True, reserved_ok=False)
    if v["labels"] is not _MISSING:
        # Kueue's WorkloadPriorityClass is a priority class the DAG chooses too.
        c.not_system_class(f"labels.{keys.KUEUE_PRIORITY_CLASS}", v["labels"].get(keys.KUEUE_PRIORITY_CLASS))
    v["annotations"] = c.string_map("annotations", a["annotations"], label_values=False, reserved_ok=False)
    # The job's annotations are its pods' too (pod_template.identity_annotations).
    c.refuse(pod_security.annotation_refusals(_plain(a["annotations"]), "annotations"))
    v["priority"] = c.priority(a["priority"])
    v["launcher_gpus"] = c.whole("launcher_gpus", a["launcher_gpus"], 0, MAX_GPUS_PER_WORKER)
    v["launcher_cpu"] = c.quantity("launcher_cpu", a["launcher_cpu"], memory=False)
    v["launcher_memory"] = c.quantity("launcher_memory", a["launcher_memory"], memory=True)
    v["worker_command"] = c.command("worker_command", a["worker_command"])
    wait_for_workers = a["wait_for_workers"]
    if not isinstance(wait_for_workers, bool):
        wait_for_workers = c.add("wait_for_workers", f"must be True or False, got {_show(wait_for_workers)}")
    v["wait_for_workers"] = wait_for_workers
    v["launcher_creation_policy"] = c.choice(
        "launcher_creation_policy", a["launcher_creation_policy"], LAUNCHER_CREATION_POLICIES
    )
    v["mpi_implementation"] = c.choice("mpi_implementation", a["mpi_implementation"], MPI_IMPLEMENTATIONS)
    v["framework"] = c.choice("framework", a["framework"], kinds.FRAMEWORKS)
    volume_names = None if v["volumes"] is _MISSING else {vol["name"] for vol in v["volumes"]}
    v["init_containers"] = c.init_containers(a["init_containers"], volume_names)
    v["image_pull_policy"] = c.choice(
        "image_pull_policy", a["image_pull_policy"], IMAGE_PULL_POLICIES, optional=True
    )
    v["image_pull_secrets"] = c.pull_secrets(a["image_pull_secrets"])
    v["service_account"] = c.service_account(a["service_account"], tuple(service_accounts))
    # Kueue's webhook takes the queue-name label as a LocalQueue name (a DNS-1123 subdomain).
    v["kueue_queue"] = (
        None if a["kueue_queue"] is None else c.dns_name("kueue_queue", a["kueue_queue"], subdomain=True)
    )
    # An argument not known yet (a template) has no problem of its own, and the rules across arguments
    # skip it as they skip wrong ones. The parse-time spec keeps the template itself.
    c.problems.items = [(f, m) for f, m in c.problems.items if _argument_of(f) not in deferred]
    checked = {name: (_MISSING if _argument_of(name) in deferred else value) for name, value in v.items()}
    _check_consistency(c, checked, volume_names)
    c.problems.raise_if_any()
    for name in deferred:
        v[name] = given[name]
    for name in partial:
        v[name] = freeze(dict(given[name]))
    return JobSpec(**v)


def _argument_of(field: str) -> str:
    """``env.EPOCHS`` -> ``env``; ``tolerations[0].effect`` -> ``tolerations``."""
    return re.split(r"[.\[]", field, maxsplit=1)[0]


# What a parse-time check puts in place of a template it cannot read yet.
_DEFERRED: Any = object()
# Every argument's default, by JobSpec field, in the order of ARGUMENTS.
_DEFAULTS: Mapping[str, Any] = {argument.spec_field: argument.default for argument in ARGUMENTS}
_READINGS: Mapping[str, Reading] = {argument.spec_field: argument.reading for argument in ARGUMENTS}


def _settle(given: dict[str, Any], *, templated: bool, rendered: frozenset[str]) -> dict[str, Any]:
    """The arguments as the checks should see them: templates set aside at parse time, rendered
    text read as the type it spells afterwards."""
    out: dict[str, Any] = {}
    for name, value in given.items():
        if templated and contains_unrendered(value):
            if isinstance(value, Mapping) and not is_unrendered(value):
                # Check what is known already: the entries that hold no template.
                value = {
                    k: v for k, v in value.items() if not (contains_unrendered(k) or contains_unrendered(v))
                }
            else:
                value = _DEFERRED
        elif name in rendered and isinstance(value, str):
            value = _from_text(name, value)
        elif name in rendered and _READINGS[name] is Reading.WHOLE_LIST and isinstance(value, list | tuple):
            value = [_whole_from_text(item) if isinstance(item, str) else item for item in value]
        out[name] = value
    return out


def _from_text(name: str, text: str) -> Any:
    """A rendered template's text as the type the argument takes; unchanged when it spells none, so
    the usual check reports it."""
    stripped = text.strip()
    reading = _READINGS[name]
    if reading is Reading.WHOLE:
        return _whole_from_text(text)
    if reading is Reading.BOOLEAN and stripped.lower() in ("true", "false"):
        return stripped.lower() == "true"
    if reading is Reading.DURATION:
        if stripped.lower() == "none":
            return None
        try:
            return float(stripped)
        except ValueError:
            return text
    if stripped == "None" and _DEFAULTS.get(name, "") is None:
        return None
    return text


def _whole_from_text(text: str) -> Any:
    stripped = text.strip()
    return int(stripped) if re.fullmatch(r"[+-]?\d+", stripped) else text


# validate()'s signature as introspection shows it (help(), inspect.signature): ARGUMENTS by their JobSpec
# field names, keyword-only, each with its default, then how to check them.
validate.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation="Any")
        for name, default in _DEFAULTS.items()
    ]
    + [
        parameter
        for parameter in inspect.signature(validate).parameters.values()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    ],
    return_annotation="JobSpec",
)


def _check_consistency(c: _Checker, v: dict[str, Any], volume_names: set[str] | None) -> None:
    """Rules across arguments; each runs only when the arguments it reads are valid on their own."""

    def ok(*names: str) -> bool:
        return all(v[n] is not _MISSING for n in names)

    if ok("volume_mounts") and volume_names is not None:
        for i, mount in enumerate(v["volume_mounts"]):
            if mount.name not in volume_names:
                c.add(f"volume_mounts[{i}].name", _undeclared(mount.name, volume_names))
    if (
        ok("container_resources", "cpu", "memory")
        and any(name.startswith("hugepages-") for name in v["container_resources"])
        and v["cpu"] is None
        and v["memory"] is None
    ):
        # kubernetes pkg/apis/core/validation/validation.go (v1.31), ValidateResourceRequirements:
        # "HugePages require cpu or memory".
        c.add(
            "container_resources", "hugepages need cpu or memory set too (the API server refuses them alone)"
        )
    if ok("kueue_queue", "priority") and v["kueue_queue"] is not None and v["priority"] != 0:
        # Kueue orders a ClusterQueue by its Workloads' priority, which comes from a WorkloadPriorityClass
        # (the job's kueue.x-k8s.io/priority-class label) or the pods' PriorityClass (kubernetes-sigs/kueue
        # v0.19.2 pkg/util/priority), never from the product's own priority.
        c.add(
            "priority",
            f"{v['priority']} has no effect on a job Kueue admits (kueue_queue={v['kueue_queue']!r}): Kueue orders "
            "its queues by WorkloadPriorityClass -- drop priority and set "
            "job_labels={'kueue.x-k8s.io/priority-class': '<a WorkloadPriorityClass>'}",
        )
    if (
        ok("service_account", "volumes", "pod_template")
        and v["service_account"] == DEFAULT_JOB_SERVICE_ACCOUNT
    ):
        template_volumes = (v["pod_template"].get("spec") or {}).get("volumes") or ()
        for where, found in (("volumes", v["volumes"]), ("pod_template.spec.volumes", template_volumes)):
            for i, volume in enumerate(found):
                sources = (
                    (volume.get("projected") or {}).get("sources") if isinstance(volume, Mapping) else None
                )
                if any(isinstance(x, Mapping) and "serviceAccountToken" in x for x in sources or ()):
                    c.add(
                        f"{where}[{i}].projected",
                        f"a token of the {DEFAULT_JOB_SERVICE_ACCOUNT!r} account, which stays off a job's pods "
                        "-- remove it, or run as an account the platform allows (service_account)",
                    )
    if ok("retry_backoff", "retry_backoff_max") and v["retry_backoff"] > v["retry_backoff_max"]:
        c.add(
            "retry_backoff",
            f"{_human(v['retry_backoff'])} is longer than retry_backoff_max {_human(v['retry_backoff_max'])} "
            "-- lower it or raise retry_backoff_max",
        )
    if (
        ok("schedule_timeout", "active_deadline")
        and isinstance(v["schedule_timeout"], timedelta)
        and v["active_deadline"] is not None
        and v["schedule_timeout"] >= v["active_deadline"]
    ):
        c.add(
            "schedule_timeout",
            f"{_human(v['schedule_timeout'])} must be shorter than active_deadline "
            f"{_human(v['active_deadline'])}, or the job times out before a requeue can happen",
        )
    if ok("retryable_exit_codes", "fatal_exit_codes"):
        both = sorted(set(v["retryable_exit_codes"]) & set(v["fatal_exit_codes"]))
        if both:
            c.add(
                "fatal_exit_codes",
                f"{both} also listed in retryable_exit_codes -- an exit code is either fatal or retryable",
            )
    _kind_refusals(c, v)


def _kind_refusals(c: _Checker, v: dict[str, Any]) -> None:
    """The arguments the kind of job refuses (an MPI-only one on a torchrun job, say), each adapter
    saying which (``JobKind.argument_problems``). Where ``framework`` or ``workers`` is not known yet (a
    template at parse time, or wrong), every kind they could still choose is asked, and an argument is
    refused only when each of those kinds refuses it, in the words of the kind their defaults choose."""
    frameworks = kinds.FRAMEWORKS if v["framework"] is _MISSING else (v["framework"],)
    counts = range(1, MAX_WORKERS + 1) if v["workers"] is _MISSING else (v["workers"],)
    candidates = {kinds.for_choice(framework, workers) for framework in frameworks for workers in counts}
    chosen = kinds.for_choice(
        _DEFAULTS["framework"] if v["framework"] is _MISSING else v["framework"],
        _DEFAULTS["workers"] if v["workers"] is _MISSING else v["workers"],
    )
    # An argument is given when it is valid and not its default.
    valid = {name: value for name, value in v.items() if value is not _MISSING}
    given = {name for name, value in valid.items() if name in _DEFAULTS and value != _DEFAULTS[name]}
    refused = [{field for field, _ in kind.argument_problems(valid, given)} for kind in candidates]
    for field, message in chosen.argument_problems(valid, given):
        if all(field in fields for fields in refused):
            c.add(field, message)


# --------------------------------------------------------------------------------------------------
# The connection arguments: which cluster, and whether the task log follows the pods
# --------------------------------------------------------------------------------------------------

# Airflow 3.3's rule for a connection id (airflow/models/connection.py: RE_SANITIZE_CONN_ID, at most
# CONN_ID_MAX_LEN characters): an id outside it can name no connection.
_CONN_ID = re.compile(r"[\w#!()\-.:/\\]{1,250}")


def check_conn_id(value: Any, field: str = "kubernetes_conn_id", *, rendered: bool = False) -> str:
    """``value`` as an Airflow connection id, or a :class:`JobSpecError` naming ``field`` and the fix.
    ``rendered``: the value came out of a template (the message says so: the DAG is right, the render
    is not)."""
    if isinstance(value, str) and _CONN_ID.fullmatch(value):
        return value
    came = " (as rendered from its template)" if rendered else ""
    raise JobSpecError(
        field,
        f"must be the id of an Airflow Kubernetes connection: letters, digits and _ - . : / \\ # ! ( ), "
        f"e.g. 'kubernetes_default'; got {_show(value)}{came}",
    )


def check_stream_logs(value: Any, *, rendered: bool = False) -> bool:
    """``stream_logs`` as a boolean: True or False, or a template's text ``true`` / ``false`` (any case:
    Jinja renders ``{{ params.debug }}`` to ``"True"``)."""
    if isinstance(value, bool):
        return value
    if rendered and isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    came = " (as rendered from its template: it must render to true or false)" if rendered else ""
    raise JobSpecError("stream_logs", f"must be True or False; got {_show(value)}{came}")
