"""The quota policy's YAML (and the charging map beside it in the ConfigMap) into the model.

Every bound on what a policy may hold (its size, its nesting, how many groups, how many problems one
error lists) and every error that names the key and the fix live here. Pure: stdlib and PyYAML only,
no I/O; the shell reads the ConfigMap and calls :func:`policy_from_configmap_data`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import timedelta
from enum import Enum
from typing import Any

import yaml

from airflow_jobs_plugin.jobs.bounded import (
    EXCERPT_LIMIT,
    MAX_YAML_DEPTH,
    MESSAGE_LIMIT,
    BoundedSafeLoader,
    YamlTooDeepError,
    bounded,
    excerpt,
)
from airflow_jobs_plugin.jobs.labels import GPU_RESOURCE as DEFAULT_RESOURCE
from airflow_jobs_plugin.jobs.naming import DNS_SUBDOMAIN
from airflow_jobs_plugin.jobs.spec import GPU_RESOURCE_PREFIXES, SYSTEM_PRIORITY_CLASS_PREFIX
from airflow_jobs_plugin.queueing.charging import ChargingError, parse_charging
from airflow_jobs_plugin.queueing.quota.flavors import Flavor
from airflow_jobs_plugin.queueing.quota.model import (
    CHARGING_KEY,
    DEFAULT_HALF_LIFE,
    POLICY_KEY,
    GroupQuota,
    Ordering,
    QuotaPolicy,
    Reclaim,
    WithinGroup,
    did_you_mean,
)
from airflow_jobs_plugin.queueing.quota.requeue import (
    DEFAULT_BACKOFF_BASE,
    DEFAULT_BACKOFF_CAP,
    DEFAULT_REQUEUE_LIMIT,
    DEFAULT_SCHEDULE_TIMEOUT,
    RequeueSettings,
    format_duration,
)

# Group names end up in labels and in the ledger ConfigMap's name, so they must be DNS-1123 labels.
_GROUP_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


# The most problems one PolicyError lists (the rest are counted): a policy of garbage has a problem
# per line, and every waiting task logs the message.
MAX_LISTED_ERRORS = 20
# The longest line one problem takes (its key path first, then the problem and the fix).
ERROR_LINE_LIMIT = 500
# The largest policy.yaml read. PyYAML's pure-Python parser (the one that can refuse duplicate keys
# and bound nesting) reads about 100 KB a second, and a ConfigMap may hold up to 1 MiB; 256 KiB is read
# in about 2 s, off the event loop (docs/benchmarks.md, "Bad policies"), and holds more than MAX_GROUPS.
MAX_POLICY_BYTES = 256 * 1024
# The most groups a policy defines: every group has a ledger and an admission pass of its own.
MAX_GROUPS = 5_000


class PolicyError(ValueError):
    """The policy YAML is invalid. ``errors`` holds one ``"key.path: problem"`` line per problem (at
    most :data:`MAX_LISTED_ERRORS` of them, each at most :data:`ERROR_LINE_LIMIT` characters, and no
    more than fit in :data:`~airflow_jobs_plugin.jobs.bounded.MESSAGE_LIMIT`; the rest are counted)."""

    def __init__(self, errors: Sequence[str]):
        every = [bounded(str(e), ERROR_LINE_LIMIT) for e in errors]
        lines: list[str] = []
        for line in every:
            if (
                len(lines) == MAX_LISTED_ERRORS
                or sum(len(x) + 5 for x in lines) + len(line) > MESSAGE_LIMIT - 100
            ):
                break
            lines.append(line)
        lines = lines or every[:1]
        if len(lines) < len(every):
            lines.append(f"... and {len(every) - len(lines):,} more problems; fix these first")
        self.errors = tuple(lines)
        if len(self.errors) == 1:
            text = f"invalid quota policy: {self.errors[0]}"
        else:
            text = "invalid quota policy:\n" + "\n".join(f"  - {e}" for e in self.errors)
        super().__init__(text)


# --------------------------------------------------------------------------------------------------
# Parsing and validation
# --------------------------------------------------------------------------------------------------


class _StrictLoader(BoundedSafeLoader):
    """SafeLoader that rejects duplicate keys instead of silently keeping the last one, and YAML
    nested deeper than :data:`~airflow_jobs_plugin.jobs.bounded.MAX_YAML_DEPTH` levels."""


def _construct_strict_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict:
    loader.flatten_mapping(node)
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.get(key)
        except TypeError:
            continue  # unhashable key: construct_mapping below reports it
        if first is not None:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"duplicate key {excerpt(key)} (first given on line {first + 1})",
                key_node.start_mark,
            )
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_strict_mapping)

_TOP_KEYS = {
    "groups": "the quota of every group",
    "defaults": "per-user settings every group inherits",
    "priorities": "named priority classes",
    "default_priority": "priority of jobs that ask for none",
    "schedule_timeout": "how long an admitted job may wait for its pods to be scheduled",
    "requeue_limit": "how often a job may be requeued",
    "requeue_backoff": "back-off between requeues",
    "queue_timeout": "how long a job may wait in the queue",
    "flavors": "kinds of GPU nodes with quotas of their own, e.g. {h100: {node_labels: {...}}}",
}
_FLAVOR_KEYS = {
    "node_labels": "the labels of the flavor's nodes",
    "resource": "the GPU resource the flavor's nodes offer (default nvidia.com/gpu)",
}
_GROUP_KEYS = {
    "gpus": "the group's GPU quota",
    "user_gpus": "default per-user GPU limit",
    "users": "per-user GPU limits",
    "max_running_jobs_per_user": "admitted jobs a user may hold at once",
    "members": "the users who may submit to the group (absent: anyone)",
    "opt_out": "whether the group's tasks may run outside the pool (quota_configmap='')",
    "devices": "quotas of other GPU devices by resource name, e.g. {nvidia.com/mig-1g.10gb: 14}",
    "preemption": "whether queued jobs may preempt admitted ones, e.g. {within_group: lower_priority}",
    "ordering": "fifo (default) or fair_share: who goes first among jobs of equal priority",
    "fair_share_half_life": "how fast past usage is forgotten under fair_share (default 1d)",
    "cohort": "a cohort name: groups of one cohort lend each other unused whole GPUs",
    "lending_limit": "the most of its unused GPUs the group lends to its cohort (default: all)",
    "borrowing_limit": "the most GPUs the group may hold above its own quota (default: no limit)",
    "flavors": "quotas per GPU flavor (see the top-level flavors), e.g. {h100: 8}",
    "max_priority": "the highest priority its jobs are queued at, a class name or an integer "
    "(default: the highest class under priorities)",
    "priority_classes": "the PriorityClasses and Kueue WorkloadPriorityClasses its jobs may name, e.g. "
    "[training-low, training-high] (default: none)",
}
_PREEMPTION_KEYS = {
    "within_group": "never (default) or lower_priority",
    "reclaim_within_cohort": "never (default), lower_priority or any",
}
_DEFAULTS_KEYS = {
    k: v
    for k, v in _GROUP_KEYS.items()
    if k in ("user_gpus", "max_running_jobs_per_user", "priority_classes")
}
_BACKOFF_KEYS = {"base": "first back-off", "cap": "longest back-off"}


class _Errors:
    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, path: str, problem: str) -> None:
        self.items.append(f"{path}: {problem}")


def _join(path: str, key: object) -> str:
    text = str(key)
    if len(text) > EXCERPT_LIMIT:
        text = text[: EXCERPT_LIMIT - 3] + "..."
    if not text or re.search(r"[.\s\"']", text):
        text = f'"{text}"'
    return f"{path}.{text}" if path else text


def _describe(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return excerpt(value)
    return f"{excerpt(value)} ({type(value).__name__})"


def _mapping(value: object, path: str, errors: _Errors, *, what: str) -> dict | None:
    if isinstance(value, dict):
        return value
    errors.add(path, f"must be a mapping of {what}, got {_describe(value)}")
    return None


def _check_keys(mapping: dict, allowed: Mapping[str, str], path: str, errors: _Errors) -> None:
    for key in mapping:
        if key in allowed:
            continue
        where = _join(path, key)
        if not isinstance(key, str):
            errors.add(where, f"unknown key {excerpt(key)}; allowed keys: {', '.join(allowed)}")
            continue
        errors.add(where, f"unknown key{did_you_mean(key, allowed)} (allowed: {', '.join(allowed)})")


def _non_negative_int(value: object, path: str, errors: _Errors, *, minimum: int = 0) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= minimum:
        return value
    kind = "a non-negative integer" if minimum == 0 else f"an integer >= {minimum}"
    fix = " (remove the key to use the default)" if value is None else ""
    errors.add(path, f"must be {kind}, got {_describe(value)}{fix}")
    return None


def _string_key(key: object, path: str, errors: _Errors, *, what: str) -> str | None:
    if isinstance(key, str) and key.strip():
        return key
    if isinstance(key, str):
        errors.add(path, f"{what} must not be empty")
    else:
        # YAML 1.1 reads unquoted yes/no/on/off as booleans and digits as numbers.
        errors.add(
            path,
            f"{what} must be a string, got {_describe(key)}; quote it in the YAML (unquoted yes/no/on/off/"
            "true/false read as booleans and bare digits as numbers)",
        )
    return None


def parse_duration(value: object) -> timedelta:
    """A duration from the policy: seconds as an integer, or a string like ``90s``, ``3m``, ``1h30m``, ``2d``."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return timedelta(seconds=value)
    if isinstance(value, str):
        match = _DURATION.fullmatch(value.replace(" ", ""))
        if match and any(match.groups()):
            days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
            return timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    raise ValueError(
        f"must be a duration: seconds as an integer or a string like '90s', '3m', '1h30m', got {_describe(value)}"
    )


def _duration(value: object, path: str, errors: _Errors, *, positive: bool = True) -> timedelta | None:
    try:
        result = parse_duration(value)
    except ValueError as exc:
        errors.add(path, str(exc))
        return None
    if positive and result <= timedelta(0):
        errors.add(path, f"must be longer than zero, got {_describe(value)}")
        return None
    return result


def _parse_group(
    name: str,
    raw: object,
    defaults: Mapping[str, Any],
    errors: _Errors,
    priorities: Mapping[str, int] | None = None,
) -> GroupQuota | None:
    path = _join("groups", name)
    body = _mapping(
        raw, path, errors, what="group settings (gpus, user_gpus, users, max_running_jobs_per_user, members)"
    )
    if body is None:
        return None
    ok = True
    if not _GROUP_NAME.match(name):
        errors.add(
            path,
            "group name must be a DNS-1123 label (lowercase letters, digits and '-', at most 63 "
            f"characters, starting and ending with a letter or digit); try {excerpt(_suggest_group_name(name))}",
        )
        ok = False
    _check_keys(body, _GROUP_KEYS, path, errors)
    if "gpus" not in body:
        errors.add(_join(path, "gpus"), "required: the group's GPU quota, a non-negative integer")
        gpus = None
    else:
        gpus = _non_negative_int(body["gpus"], _join(path, "gpus"), errors)
    user_gpus = defaults.get("user_gpus")
    if "user_gpus" in body:
        user_gpus = _non_negative_int(body["user_gpus"], _join(path, "user_gpus"), errors)
        ok = ok and user_gpus is not None
    max_jobs = defaults.get("max_running_jobs_per_user")
    if "max_running_jobs_per_user" in body:
        # Zero would make every job of the group unadmittable: that is a missing group, not a limit.
        max_jobs = _non_negative_int(
            body["max_running_jobs_per_user"], _join(path, "max_running_jobs_per_user"), errors, minimum=1
        )
        ok = ok and max_jobs is not None
    users = _counts(body, "users", path, errors, key_what="user name", what="user name to GPU limit")
    members: frozenset[str] | None = None
    if "members" in body:
        members_path = _join(path, "members")
        raw_members = body["members"]
        if not isinstance(raw_members, list):
            errors.add(members_path, f"must be a list of user names, got {type(raw_members).__name__}")
            ok = False
        else:
            names = set()
            for i, member in enumerate(raw_members):
                key = _string_key(member, f"{members_path}[{i}]", errors, what="user name")
                if key is None:
                    ok = False
                else:
                    names.add(key)
            members = frozenset(names)
    devices = _counts(
        body, "devices", path, errors, key_what="resource name", what="GPU resource name to quota"
    )
    for resource in devices or {}:
        device_path = _join(_join(path, "devices"), resource)
        if resource == DEFAULT_RESOURCE:
            errors.add(device_path, f"{DEFAULT_RESOURCE} is the group's gpus: set gpus instead")
            ok = False
        elif not resource.startswith(GPU_RESOURCE_PREFIXES):
            errors.add(
                device_path,
                f"{excerpt(resource)} is not a GPU resource name (one of {', '.join(GPU_RESOURCE_PREFIXES)}...)",
            )
            ok = False
    opt_out = body.get("opt_out", False)
    if not isinstance(opt_out, bool):
        errors.add(_join(path, "opt_out"), f"must be true or false, got {_describe(opt_out)}")
        ok = False
    flavor_quotas = _counts(
        body, "flavors", path, errors, key_what="flavor name", what="flavor name to quota"
    )
    ok = ok and flavor_quotas is not None
    within_group, reclaim = _parse_preemption(body, path, errors)
    cohort_ok, cohort, lending_limit, borrowing_limit = _parse_cohort(body, path, gpus, reclaim, errors)
    ok = ok and cohort_ok
    ordering: Ordering | None = Ordering.FIFO
    if "ordering" in body:
        try:
            ordering = Ordering(body["ordering"])
        except ValueError:
            choices = [o.value for o in Ordering]
            errors.add(
                _join(path, "ordering"),
                f"must be one of {', '.join(choices)}, got {_describe(body['ordering'])}"
                f"{did_you_mean(str(body['ordering']), choices)}",
            )
            ordering = None
    half_life: timedelta | None = DEFAULT_HALF_LIFE
    if "fair_share_half_life" in body:
        half_life = _duration(body["fair_share_half_life"], _join(path, "fair_share_half_life"), errors)
    priority_classes = defaults.get("priority_classes", frozenset())
    if "priority_classes" in body:
        priority_classes = _priority_classes(
            body["priority_classes"], _join(path, "priority_classes"), errors
        )
        ok = ok and priority_classes is not None
    max_priority: int | None = None
    if "max_priority" in body:
        max_priority = _priority_value(
            body["max_priority"], _join(path, "max_priority"), priorities or {}, errors
        )
        ok = ok and max_priority is not None
    if (
        gpus is None
        or users is None
        or devices is None
        or within_group is None
        or reclaim is None
        or ordering is None
        or half_life is None
        or not ok
    ):
        return None
    return GroupQuota(
        name=name,
        gpus=gpus,
        user_gpus=user_gpus,
        users=users,
        max_running_jobs_per_user=max_jobs,
        members=members,
        opt_out=opt_out,
        devices=devices,
        within_group=within_group,
        ordering=ordering,
        fair_share_half_life=half_life,
        cohort=cohort,
        lending_limit=lending_limit,
        borrowing_limit=borrowing_limit,
        reclaim=reclaim,
        flavors=flavor_quotas or {},
        max_priority=max_priority,
        priority_classes=priority_classes or frozenset(),
    )


def _priority_classes(raw: object, path: str, errors: _Errors) -> frozenset[str] | None:
    """A list of priority class names (queueing/quota/priority_classes.py); ``None`` once a bad entry is
    reported."""
    if not isinstance(raw, list):
        errors.add(
            path,
            f"must be a list of priority class names, e.g. [training-low, training-high] ([] for none), "
            f"got {_describe(raw)}",
        )
        return None
    names: set[str] = set()
    ok = True
    for i, item in enumerate(raw):
        where = f"{path}[{i}]"
        name = _string_key(item, where, errors, what="priority class name")
        if name is None:
            ok = False
        # A PriorityClass's name is a DNS subdomain (kubernetes/kubernetes v1.36
        # pkg/apis/scheduling/validation/validation.go, ValidatePriorityClass), a WorkloadPriorityClass's too.
        elif len(name) > 253 or not DNS_SUBDOMAIN.match(name):
            errors.add(
                where,
                f"{_describe(name)} is not a priority class name (a DNS subdomain: lower-case letters, "
                "digits, '-' and '.', at most 253 characters)",
            )
            ok = False
        elif name.startswith(SYSTEM_PRIORITY_CLASS_PREFIX):
            errors.add(
                where,
                f"{_describe(name)}: the {SYSTEM_PRIORITY_CLASS_PREFIX}* classes are the cluster's own (their "
                "pods preempt any other pod of a node) and are never given to a job; remove it",
            )
            ok = False
        elif name in names:
            errors.add(where, f"{_describe(name)} is listed twice; remove one")
            ok = False
        else:
            names.add(name)
    return frozenset(names) if ok else None


def _priority_value(raw: object, path: str, priorities: Mapping[str, int], errors: _Errors) -> int | None:
    """A priority written in the policy: an integer or the name of a class under ``priorities``."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw in priorities:
        return priorities[raw]
    known = ", ".join(priorities) or "none defined"
    hint = did_you_mean(raw, tuple(priorities)) if isinstance(raw, str) else ""
    errors.add(
        path,
        f"must be a priority class name or an integer, got {_describe(raw)}{hint} "
        f"(classes under 'priorities': {known})",
    )
    return None


def _choice(raw: dict, key: str, enum: type[Enum], default: Enum, path: str, errors: _Errors) -> Any:
    value = raw.get(key, default.value)
    try:
        return enum(value)
    except ValueError:
        choices = [e.value for e in enum]
        errors.add(
            _join(path, key),
            f"must be one of {', '.join(choices)}, got {_describe(value)}{did_you_mean(str(value), choices)}",
        )
        return None


def _parse_preemption(body: dict, path: str, errors: _Errors) -> tuple[WithinGroup | None, Reclaim | None]:
    if "preemption" not in body:
        return WithinGroup.NEVER, Reclaim.NEVER
    preemption_path = _join(path, "preemption")
    raw = _mapping(
        body["preemption"],
        preemption_path,
        errors,
        what="preemption settings (within_group, reclaim_within_cohort)",
    )
    if raw is None:
        return None, None
    _check_keys(raw, _PREEMPTION_KEYS, preemption_path, errors)
    return (
        _choice(raw, "within_group", WithinGroup, WithinGroup.NEVER, preemption_path, errors),
        _choice(raw, "reclaim_within_cohort", Reclaim, Reclaim.NEVER, preemption_path, errors),
    )


def _parse_cohort(
    body: dict, path: str, gpus: int | None, reclaim: Reclaim | None, errors: _Errors
) -> tuple[bool, str | None, int | None, int | None]:
    """``(ok, cohort, lending_limit, borrowing_limit)`` of a group."""
    ok = True
    cohort = body.get("cohort")
    if cohort is not None and (not isinstance(cohort, str) or not _GROUP_NAME.match(cohort)):
        errors.add(
            _join(path, "cohort"),
            f"must be a DNS-1123 label (lowercase letters, digits and '-'), got {_describe(cohort)}",
        )
        ok, cohort = False, None
    limits: list[int | None] = []
    for key in ("lending_limit", "borrowing_limit"):
        value = None
        if key in body:
            value = _non_negative_int(body[key], _join(path, key), errors)
            ok = ok and value is not None
            if value is not None and "cohort" not in body:
                errors.add(
                    _join(path, key),
                    "only means something in a cohort: add 'cohort: <name>' to the group, or remove it",
                )
                ok = False
        limits.append(value)
    lending, borrowing = limits
    if lending is not None and gpus is not None and lending > gpus:
        errors.add(_join(path, "lending_limit"), f"must be at most the group's gpus ({gpus}), got {lending}")
        ok = False
    if reclaim not in (None, Reclaim.NEVER) and "cohort" not in body:
        errors.add(
            _join(_join(path, "preemption"), "reclaim_within_cohort"),
            "only means something in a cohort: add 'cohort: <name>' to the group, or remove it",
        )
        ok = False
    return ok, cohort, lending, borrowing


def _check_cohorts(groups: Mapping[str, GroupQuota], errors: _Errors) -> None:
    """A cohort's groups share one ledger ConfigMap, named as a group's would be."""
    half_lives: dict[str, set[timedelta]] = {}
    for name, quota in groups.items():
        if quota.cohort is None:
            continue
        if quota.cohort in groups:
            errors.add(
                _join(_join("groups", name), "cohort"),
                f"{quota.cohort!r} is also a group's name; name the cohort differently",
            )
        if quota.ordering is Ordering.FAIR_SHARE:
            half_lives.setdefault(quota.cohort, set()).add(quota.fair_share_half_life)
    for cohort, values in sorted(half_lives.items()):
        if len(values) > 1:
            errors.add(
                "groups.*.fair_share_half_life",
                f"the fair_share groups of cohort {cohort} keep one usage history and must share one "
                f"half-life, got {', '.join(format_duration(v) for v in sorted(values))}",
            )


def _counts(
    body: dict, key: str, path: str, errors: _Errors, *, key_what: str, what: str
) -> dict[str, int] | None:
    """``body[key]``, a mapping of names to non-negative integers (``{}`` when absent); ``None`` once
    any bad entry is reported."""
    if key not in body:
        return {}
    map_path = _join(path, key)
    raw = _mapping(body[key], map_path, errors, what=what)
    if raw is None:
        return None
    out: dict[str, int] = {}
    ok = True
    for name, amount in raw.items():
        entry_path = _join(map_path, name)
        parsed = _string_key(name, entry_path, errors, what=key_what)
        value = _non_negative_int(amount, entry_path, errors)
        if parsed is None or value is None:
            ok = False
        else:
            out[parsed] = value
    return out if ok else None


def _suggest_group_name(name: str) -> str:
    slug = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:63].strip("-")
    return slug or "my-group"


def _parse_priorities(doc: dict, errors: _Errors) -> tuple[dict[str, int], int]:
    priorities: dict[str, int] = {}
    if "priorities" in doc:
        raw = _mapping(doc["priorities"], "priorities", errors, what="priority class name to integer")
        for name, value in (raw or {}).items():
            path = _join("priorities", name)
            key = _string_key(name, path, errors, what="priority class name")
            if isinstance(value, int) and not isinstance(value, bool):
                if key is not None:
                    priorities[key] = value
            else:
                errors.add(path, f"must be an integer (higher runs first), got {_describe(value)}")
    default = 0
    if "default_priority" in doc:
        raw_default = doc["default_priority"]
        if isinstance(raw_default, int) and not isinstance(raw_default, bool):
            default = raw_default
        elif isinstance(raw_default, str) and raw_default in priorities:
            default = priorities[raw_default]
        elif isinstance(raw_default, str):
            known = ", ".join(priorities) or "none defined"
            errors.add(
                "default_priority",
                f"unknown priority class {excerpt(raw_default)}{did_you_mean(raw_default, priorities)} "
                f"(classes under 'priorities': {known}); give a class name or an integer",
            )
        else:
            errors.add(
                "default_priority",
                f"must be a priority class name or an integer, got {_describe(raw_default)}",
            )
    return priorities, default


def _parse_requeue(doc: dict, errors: _Errors) -> RequeueSettings:
    schedule_timeout = DEFAULT_SCHEDULE_TIMEOUT
    if "schedule_timeout" in doc:
        schedule_timeout = _duration(doc["schedule_timeout"], "schedule_timeout", errors) or schedule_timeout
    requeue_limit = DEFAULT_REQUEUE_LIMIT
    if "requeue_limit" in doc:
        value = _non_negative_int(doc["requeue_limit"], "requeue_limit", errors)
        requeue_limit = requeue_limit if value is None else value
    base, cap = DEFAULT_BACKOFF_BASE, DEFAULT_BACKOFF_CAP
    if "requeue_backoff" in doc:
        raw = _mapping(doc["requeue_backoff"], "requeue_backoff", errors, what="base and cap durations")
        if raw is not None:
            _check_keys(raw, _BACKOFF_KEYS, "requeue_backoff", errors)
            if "base" in raw:
                base = _duration(raw["base"], "requeue_backoff.base", errors) or base
            if "cap" in raw:
                cap = _duration(raw["cap"], "requeue_backoff.cap", errors) or cap
            if cap < base:
                errors.add(
                    "requeue_backoff.cap",
                    f"must be at least requeue_backoff.base ({format_duration(base)}), got {format_duration(cap)}",
                )
    queue_timeout = None
    if doc.get("queue_timeout") is not None:
        queue_timeout = _duration(doc["queue_timeout"], "queue_timeout", errors)
    return RequeueSettings(
        schedule_timeout=schedule_timeout,
        requeue_limit=requeue_limit,
        backoff_base=base,
        backoff_cap=cap,
        queue_timeout=queue_timeout,
    )


def parse_policy(text: str) -> QuotaPolicy:
    """Parse and strictly validate the policy YAML.

    Raises :class:`PolicyError` listing every problem found, each naming its key path
    (``groups.vision.user_gpus: must be a non-negative integer, got -1``).
    """
    if len(text) > MAX_POLICY_BYTES or len(text.encode("utf-8", "replace")) > MAX_POLICY_BYTES:
        raise PolicyError(
            [
                f"<root>: the policy is {len(text.encode('utf-8', 'replace')):,} bytes; at most "
                f"{MAX_POLICY_BYTES:,} are read (about {MAX_GROUPS:,} groups); merge groups or shorten the "
                "per-user lists"
            ]
        )
    try:
        doc = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except YamlTooDeepError as exc:
        raise PolicyError([f"<yaml>: {exc}"]) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise PolicyError([f"<yaml>{where}: {exc.problem or exc}"]) from None
    except yaml.YAMLError as exc:
        raise PolicyError([f"<yaml>: {exc}"]) from None
    except RecursionError:
        # The depth bound above stops this first; kept so no YAML can ever crash the caller.
        raise PolicyError([f"<yaml>: nested too deeply to read (at most {MAX_YAML_DEPTH} levels)"]) from None
    errors = _Errors()
    if doc is None:
        raise PolicyError(
            ["<root>: the policy is empty; it needs at least 'groups:' with one entry per group"]
        )
    if not isinstance(doc, dict):
        raise PolicyError([f"<root>: must be a mapping with a 'groups:' key, got {_describe(doc)}"])
    _check_keys(doc, _TOP_KEYS, "", errors)

    defaults: dict[str, Any] = {}
    if "defaults" in doc:
        raw_defaults = _mapping(
            doc["defaults"],
            "defaults",
            errors,
            what="user_gpus / max_running_jobs_per_user / priority_classes",
        )
        if raw_defaults is not None:
            _check_keys(raw_defaults, _DEFAULTS_KEYS, "defaults", errors)
            if "user_gpus" in raw_defaults:
                defaults["user_gpus"] = _non_negative_int(
                    raw_defaults["user_gpus"], "defaults.user_gpus", errors
                )
            if "max_running_jobs_per_user" in raw_defaults:
                defaults["max_running_jobs_per_user"] = _non_negative_int(
                    raw_defaults["max_running_jobs_per_user"],
                    "defaults.max_running_jobs_per_user",
                    errors,
                    minimum=1,
                )
            if "priority_classes" in raw_defaults:
                defaults["priority_classes"] = _priority_classes(
                    raw_defaults["priority_classes"], "defaults.priority_classes", errors
                )

    # Classes first: a group's max_priority may name one.
    priorities, default_priority = _parse_priorities(doc, errors)
    groups: dict[str, GroupQuota] = {}
    if "groups" not in doc:
        errors.add(
            "groups", "required: one entry per group, e.g. 'groups: {vision: {gpus: 8, user_gpus: 4}}'"
        )
    else:
        raw_groups = _mapping(doc["groups"], "groups", errors, what="group name to group settings")
        if raw_groups is not None and len(raw_groups) > MAX_GROUPS:
            raise PolicyError(
                [
                    f"groups: {len(raw_groups):,} groups; a policy defines at most {MAX_GROUPS:,} (each has a "
                    "ledger and an admission pass of its own); merge groups, with per-user limits inside them"
                ]
            )
        for name, raw in (raw_groups or {}).items():
            key = _string_key(name, _join("groups", name), errors, what="group name")
            if key is None:
                continue
            group = _parse_group(key, raw, defaults, errors, priorities)
            if group is not None:
                groups[key] = group

    _check_cohorts(groups, errors)
    flavors = _parse_flavors(doc, groups, errors)
    requeue = _parse_requeue(doc, errors)
    if errors.items:
        raise PolicyError(errors.items)
    return QuotaPolicy(
        groups=groups,
        priorities=priorities,
        default_priority=default_priority,
        requeue=requeue,
        flavors=flavors,
    )


def _parse_flavors(doc: dict, groups: Mapping[str, GroupQuota], errors: _Errors) -> dict[str, Flavor]:
    flavors: dict[str, Flavor] = {}
    raw = _mapping(doc.get("flavors", {}), "flavors", errors, what="flavor name to node labels")
    for name, body in (raw or {}).items():
        path = _join("flavors", name)
        if not isinstance(name, str) or not _GROUP_NAME.match(name):
            errors.add(path, "a flavor's name must be a DNS-1123 label (lowercase letters, digits and '-')")
            continue
        settings = _mapping(body, path, errors, what="node_labels and resource")
        if settings is None:
            continue
        _check_keys(settings, _FLAVOR_KEYS, path, errors)
        node_labels = settings.get("node_labels")
        if (
            not isinstance(node_labels, dict)
            or not node_labels
            or not all(isinstance(k, str) and k and isinstance(v, str) for k, v in node_labels.items())
        ):
            errors.add(
                _join(path, "node_labels"),
                "required: a non-empty mapping of node label to value (quote values YAML reads as numbers or "
                "booleans), e.g. {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}",
            )
            continue
        resource = settings.get("resource", DEFAULT_RESOURCE)
        if not isinstance(resource, str) or not resource.startswith(GPU_RESOURCE_PREFIXES):
            errors.add(_join(path, "resource"), f"must be a GPU resource name, got {_describe(resource)}")
            continue
        flavors[name] = Flavor(name=name, node_labels=dict(node_labels), resource=resource)
    for group, quota in groups.items():
        for name in quota.flavors:
            if name not in flavors:
                errors.add(
                    _join(_join(_join("groups", group), "flavors"), name),
                    f"unknown flavor{did_you_mean(name, flavors)}; define it under the top-level "
                    f"'flavors:' (known: {', '.join(sorted(flavors)) or 'none'})",
                )
    return flavors


def policy_from_configmap_data(data: Mapping[str, str] | None, key: str = POLICY_KEY) -> QuotaPolicy:
    """Parse the policy held under ``key`` in a ConfigMap's ``data``."""
    if not data or key not in data:
        present = ", ".join(sorted(data or {})) or "none"
        raise PolicyError([f"data.{key}: missing from the policy ConfigMap (keys present: {present})"])
    policy = parse_policy(data[key])
    if CHARGING_KEY not in data:
        return policy
    try:
        charging = parse_charging(data[CHARGING_KEY])
    except ChargingError as exc:
        raise PolicyError([f"data.{CHARGING_KEY}: {exc}"]) from None
    return replace(policy, charging=charging)
