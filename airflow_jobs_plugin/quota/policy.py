"""The GPU quota policy and the admission rule: which queued jobs may start now, and why the others wait.

The rule is PrimeHub's (and Slurm's default): every group is one queue, ordered by priority and then by
enqueue time. Walking a group's queue in that order:

* a job that can never fit (it needs more GPUs than its user may ever hold in the group, or more than
  the whole group quota) fails fast with ``OverQuota`` instead of waiting forever;
* a job over its *user's* remaining quota is skipped (``UserQuota``) and blocks nobody: one user who
  queued too much must not stall their colleagues;
* a job over the *group's* remaining quota stops the group (``GroupQuota``): everything behind it waits
  (``BehindHead``), otherwise a stream of small jobs would starve a large one forever;
* everything else is admitted, and counts against the quotas of the jobs after it in the same pass.

Pure: stdlib and PyYAML only, no I/O. The shell reads the policy ConfigMap and the ledger, calls
:func:`parse_policy` and :func:`decide`, and writes the outcome back.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from enum import Enum
from functools import partial
from typing import Any

import yaml

from ..bounded import (
    EXCERPT_LIMIT,
    MAX_YAML_DEPTH,
    MESSAGE_LIMIT,
    BoundedSafeLoader,
    YamlTooDeepError,
    bounded,
    excerpt,
)
from ..charging import ChargingError, ChargingMap, parse_charging
from ..labels import GPU_RESOURCE as DEFAULT_RESOURCE
from ..spec import GPU_RESOURCE_PREFIXES
from . import cohort as cohorts
from .cohort import Limits, Reclaim
from .fair_share import DEFAULT_HALF_LIFE, Ordering, UsageHistory, fair_order, recent_by_group
from .flavors import Flavor
from .preemption import Placement, WithinGroup, plan_preemption, preemptor_key
from .requeue import (
    DEFAULT_BACKOFF_BASE,
    DEFAULT_BACKOFF_CAP,
    DEFAULT_REQUEUE_LIMIT,
    DEFAULT_SCHEDULE_TIMEOUT,
    RequeueSettings,
    format_duration,
    queue_timed_out,
    waited_for_quota,
)

# Key of the policy YAML inside the policy ConfigMap's ``data``.
POLICY_KEY = "policy.yaml"
# The platform's charging map (charging.py), beside the policy in the same ConfigMap.
CHARGING_KEY = "charging.yaml"
DEFAULT_POLICY_CONFIGMAP = "airflow-jobs-quota-policy"

# Group names end up in labels and in the ledger ConfigMap's name, so they must be DNS-1123 labels.
_GROUP_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


# --------------------------------------------------------------------------------------------------
# Policy model
# --------------------------------------------------------------------------------------------------


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
    more than fit in :data:`~airflow_jobs_plugin.bounded.MESSAGE_LIMIT`; the rest are counted)."""

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


def known_names(names: Iterable[str], limit: int = 20) -> str:
    """``a, b, c`` for a message, at most ``limit`` names and the count of the rest."""
    listed = sorted(names)
    if not listed:
        return "none"
    if len(listed) <= limit:
        return ", ".join(listed)
    return ", ".join(listed[:limit]) + f" and {len(listed) - limit:,} more"


class UnknownGroupError(ValueError):
    """A job names a group the policy does not define."""


class UnknownPriorityError(ValueError):
    """A job asks for a priority class the policy does not define."""


@dataclass(frozen=True)
class GroupQuota:
    """One group's GPU quota and the per-user limits inside it.

    ``user_gpus`` is the default per-user limit (``None``: only the group quota limits a user) and
    ``users`` overrides it per user. A per-user limit above the group quota is allowed (a policy-wide
    default often exceeds a small group's quota) and simply means the group quota is the limit.
    """

    name: str
    gpus: int
    user_gpus: int | None = None
    users: Mapping[str, int] = field(default_factory=dict, hash=False)
    max_running_jobs_per_user: int | None = None
    # Who may submit to the group; None leaves it open to anyone. Users with a per-user override are
    # members too, so listing a user twice is never needed.
    members: frozenset[str] | None = None
    # Whether the group's tasks may run outside the pool (``JobOperator(quota_configmap="")``).
    opt_out: bool = False
    # Quotas of GPU devices other than whole NVIDIA GPUs, by extended-resource name (MIG profiles such as
    # nvidia.com/mig-1g.10gb, amd.com/gpu): a job is charged against the device it asks for, never
    # another's, as Kueue charges a ClusterQueue's quota per (flavor, resource) (kubernetes-sigs/kueue
    # v0.19.2 pkg/scheduler/flavorassigner/flavorassigner.go). ``gpus`` is nvidia.com/gpu's.
    devices: Mapping[str, int] = field(default_factory=dict, hash=False)
    # Whether the head of the group's queue may preempt admitted jobs of lower priority (quota/preemption.py).
    within_group: WithinGroup = WithinGroup.NEVER
    # FIFO, or fair sharing among the group's users with this half-life (quota/fair_share.py).
    ordering: Ordering = Ordering.FIFO
    fair_share_half_life: timedelta = DEFAULT_HALF_LIFE
    # The cohort whose groups lend each other unused whole GPUs (quota/cohort.py), and its limits.
    cohort: str | None = None
    lending_limit: int | None = None
    borrowing_limit: int | None = None
    reclaim: Reclaim = Reclaim.NEVER
    # Quotas per GPU flavor (quota/flavors.py), by the flavor's name in the policy's ``flavors``.
    flavors: Mapping[str, int] = field(default_factory=dict, hash=False)
    # The highest priority a job of the group is queued at (None: the policy's highest class).
    max_priority: int | None = None

    @property
    def limits(self) -> Limits:
        return Limits(self.gpus, self.lending_limit, self.borrowing_limit)

    def quota_of(self, resource: str = DEFAULT_RESOURCE) -> int:
        """The group's quota of ``resource``: a resource name or a flavor's name (0 for one the policy
        gives it none of)."""
        if resource == DEFAULT_RESOURCE:
            return self.gpus
        if resource in self.flavors:
            return self.flavors[resource]
        return self.devices.get(resource, 0)

    def is_member(self, user: str) -> bool:
        """Whether ``user`` may submit jobs to this group."""
        return self.members is None or user in self.members or user in self.users

    def configured_user_limit(self, user: str) -> int:
        """The per-user GPU limit as written in the policy (may exceed the group quota)."""
        if user in self.users:
            return self.users[user]
        return self.gpus if self.user_gpus is None else self.user_gpus

    def user_limit(self, user: str, resource: str = DEFAULT_RESOURCE) -> int:
        """The most of ``resource`` ``user`` can ever hold in this group at once: the user's limit
        applies to each device separately, within the group's quota of it (no limit set: that quota)."""
        configured = self.users.get(user, self.user_gpus)
        capacity = self.quota_of(resource)
        return capacity if configured is None else min(configured, capacity)


@dataclass(frozen=True)
class QuotaPolicy:
    """The whole policy: groups, named priority classes and the requeue/timeout settings."""

    groups: Mapping[str, GroupQuota] = field(hash=False)
    priorities: Mapping[str, int] = field(default_factory=dict, hash=False)
    default_priority: int = 0
    requeue: RequeueSettings = RequeueSettings()
    flavors: Mapping[str, Flavor] = field(default_factory=dict, hash=False)
    # The platform's charging map (charging.py) when the policy ConfigMap holds one (CHARGING_KEY).
    charging: ChargingMap | None = field(default=None, hash=False)

    def charge_problem(self, group: str, user: str) -> str | None:
        """Why the charging rule forbids a job of ``group`` charged to ``user`` (None: it allows it).

        Checked where a job is admitted, whoever created it and whatever its task did at run time:
        the group's ``members`` must include the user, and where the platform keeps a charging map,
        some DAG folder must be allowed to charge that group as that user.
        """
        quota = self.groups.get(group)
        if quota is not None and not quota.is_member(user):
            return (
                f"charging rule groups.{group}.members: user {user!r} is not a member of group {group!r}, "
                "so no job may charge it as them; submit as a member, or ask a platform admin to add "
                f"the user to groups.{group}.members in the quota policy"
            )
        if self.charging is not None and not self.charging.allows_anywhere(group, user):
            return (
                f"charging rule {CHARGING_KEY}: no DAG folder may charge group {group!r} as user {user!r}; "
                "charge a group and user your DAG folder is allowed, or ask a platform admin to allow "
                f"them in {CHARGING_KEY} of the quota policy ConfigMap"
            )
        return None

    @property
    def group_names(self) -> tuple[str, ...]:
        return tuple(sorted(self.groups))

    def require_group(self, name: str) -> GroupQuota:
        """The group's quota, or :class:`UnknownGroupError` naming the known groups (submit-time check)."""
        quota = self.groups.get(name)
        if quota is not None:
            return quota
        known = known_names(self.group_names)
        hint = _did_you_mean(name, self.group_names)
        raise UnknownGroupError(
            f"unknown quota group {excerpt(name)}{hint}; known groups: {known}. "
            "Pick one of them, or ask a platform admin to add the group under 'groups:' in the quota policy."
        )

    def user_limit(self, group: str, user: str) -> int:
        """The most GPUs ``user`` can ever hold in ``group`` (raises for an unknown group)."""
        return self.require_group(group).user_limit(user)

    def ledger_of(self, group: str) -> str:
        """Whose ledger holds ``group``'s reservations: its cohort's (one compare-and-swap decides for
        every group that shares the lent GPUs), else its own."""
        quota = self.groups.get(group)
        return quota.cohort if quota is not None and quota.cohort else group

    def members(self, unit: str) -> tuple[str, ...]:
        """The groups whose reservations the ledger ``unit`` holds (a cohort's groups, or the group)."""
        found = tuple(sorted(g for g, q in self.groups.items() if q.cohort == unit))
        return found or (unit,)

    def cohort_limits(self, cohort: str) -> dict[str, Limits]:
        return {g: q.limits for g, q in self.groups.items() if q.cohort == cohort}

    def capacity(self, group: str, resource: str = DEFAULT_RESOURCE) -> int:
        """The most of ``resource`` (a resource or a flavor) ``group`` can ever hold: its quota, or in
        a cohort, for whole GPUs, what it may borrow on top (raises for an unknown group)."""
        quota = self.require_group(group)
        if quota.cohort and resource == DEFAULT_RESOURCE:
            return cohorts.most(group, self.cohort_limits(quota.cohort))
        return quota.quota_of(resource)

    def user_capacity(self, group: str, user: str, resource: str = DEFAULT_RESOURCE) -> int:
        """The most of ``resource`` ``user`` can ever hold in ``group``: their limit within the group's
        capacity (no per-user limit set: the capacity)."""
        quota = self.require_group(group)
        capacity = self.capacity(group, resource)
        if quota.cohort and resource == DEFAULT_RESOURCE:
            configured = quota.users.get(user, quota.user_gpus)
            return capacity if configured is None else min(configured, capacity)
        return quota.user_limit(user, resource)

    def priority_of(self, priority: str | int | None) -> int:
        """Resolve a job's requested priority to the integer the queue orders by.

        ``None`` gives the policy's default; an integer (or its decimal string, as stored in the
        priority annotation) is taken as is; any other string must name a class under ``priorities``.
        Resolve once at submit time and store the integer on the job, so that later policy edits do
        not reorder jobs already queued.
        """
        if priority is None:
            return self.default_priority
        if isinstance(priority, bool):
            raise UnknownPriorityError(f"priority must be a class name or an integer, got {priority!r}")
        if isinstance(priority, int):
            return priority
        if priority in self.priorities:
            return self.priorities[priority]
        if re.fullmatch(r"[-+]?\d+", priority.strip()):
            return int(priority)
        known = ", ".join(f"{k} ({v})" for k, v in sorted(self.priorities.items(), key=lambda kv: -kv[1]))
        hint = _did_you_mean(priority, tuple(self.priorities))
        raise UnknownPriorityError(
            f"unknown priority class {priority!r}{hint}; known classes: {known or 'none'} (or give an integer)"
        )

    def priority_ceiling(self, group: str) -> int | None:
        """The highest priority a job of ``group`` is queued at: the group's ``max_priority``, else the
        policy's highest class; None where the policy names neither (any priority then)."""
        quota = self.groups.get(group)
        if quota is not None and quota.max_priority is not None:
            return quota.max_priority
        return max(self.priorities.values(), default=None)

    def charged_priority(self, group: str, asked: int) -> int:
        """The priority the queue orders a job of ``group`` by: what it asked for, at most the ceiling
        the platform set. A priority is a claim on others' GPUs (it reorders and preempts them), so it
        comes from the policy, never from a number a DAG may write."""
        ceiling = self.priority_ceiling(group)
        return asked if ceiling is None else min(asked, ceiling)


# --------------------------------------------------------------------------------------------------
# Parsing and validation
# --------------------------------------------------------------------------------------------------


class _StrictLoader(BoundedSafeLoader):
    """SafeLoader that rejects duplicate keys instead of silently keeping the last one, and YAML
    nested deeper than :data:`~airflow_jobs_plugin.bounded.MAX_YAML_DEPTH` levels."""


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
}
_PREEMPTION_KEYS = {
    "within_group": "never (default) or lower_priority",
    "reclaim_within_cohort": "never (default), lower_priority or any",
}
_DEFAULTS_KEYS = {k: v for k, v in _GROUP_KEYS.items() if k in ("user_gpus", "max_running_jobs_per_user")}
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


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    match = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return f"; did you mean {match[0]!r}?" if match else ""


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
        errors.add(where, f"unknown key{_did_you_mean(key, allowed)} (allowed: {', '.join(allowed)})")


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
                f"{_did_you_mean(str(body['ordering']), choices)}",
            )
            ordering = None
    half_life: timedelta | None = DEFAULT_HALF_LIFE
    if "fair_share_half_life" in body:
        half_life = _duration(body["fair_share_half_life"], _join(path, "fair_share_half_life"), errors)
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
    )


def _priority_value(raw: object, path: str, priorities: Mapping[str, int], errors: _Errors) -> int | None:
    """A priority written in the policy: an integer or the name of a class under ``priorities``."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw in priorities:
        return priorities[raw]
    known = ", ".join(priorities) or "none defined"
    hint = _did_you_mean(raw, tuple(priorities)) if isinstance(raw, str) else ""
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
            f"must be one of {', '.join(choices)}, got {_describe(value)}{_did_you_mean(str(value), choices)}",
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
                f"unknown priority class {excerpt(raw_default)}{_did_you_mean(raw_default, priorities)} "
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
            doc["defaults"], "defaults", errors, what="user_gpus / max_running_jobs_per_user"
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
                    f"unknown flavor{_did_you_mean(name, flavors)}; define it under the top-level "
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


# --------------------------------------------------------------------------------------------------
# Jobs, reservations, GPU accounting
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class QueuedJob:
    """A job waiting for admission (created suspended).

    ``queued_at`` is the enqueue time of its first attempt and survives requeues, which is what keeps
    a requeued job at its original position. ``not_before`` is set while a requeued job waits out its
    back-off. ``requeue_count`` tells a fresh admission apart from a stale reservation of an earlier
    one. ``queue_timeout`` overrides the policy's for this job.
    """

    name: str
    group: str
    user: str
    gpus: int
    priority: int = 0
    queued_at: datetime
    not_before: datetime | None = None
    uid: str
    namespace: str = ""
    requeue_count: int = 0
    queue_timeout: timedelta | None = None
    # Set while a user has stopped the job (labels.STOPPED_AT): it is never admitted until a resume,
    # but keeps ``queued_at``, so a resumed job competes again at its original position.
    stopped_at: datetime | None = None
    # The Kueue LocalQueue this job is handed to once admitted (labels.KUEUE_HANDOFF): the pool then
    # applies only its per-user rules, and the group's quota and order are Kueue's ClusterQueue's.
    kueue_queue: str | None = None
    # The GPU device it asks for (its gpu_resource), which it is charged against.
    resource: str = DEFAULT_RESOURCE
    # The queue clock (queue_clock.py): waits banked before the current one, and when that began
    # (None: at ``queued_at``). ``queue_timeout`` measures only waiting, never a run or a stop.
    waited_before: timedelta = timedelta(0)
    wait_since: datetime | None = None

    def waited(self, now: datetime) -> timedelta:
        """How long this job has waited for quota by ``now``."""
        return waited_for_quota(
            self.queued_at,
            now,
            waited_before=self.waited_before,
            wait_since=self.wait_since,
            waiting=self.stopped_at is None,
        )


@dataclass(frozen=True, kw_only=True)
class Reservation:
    """GPUs held for an admitted job, from admission until the job ends or is requeued."""

    job: str
    group: str
    user: str
    gpus: int
    uid: str
    admitted_at: datetime
    namespace: str = ""
    requeue_count: int = 0  # the job's requeue count when it was admitted
    # Handed to Kueue: it counts against its user's limits, not the group's quota (Kueue charges that).
    kueue: bool = False
    resource: str = DEFAULT_RESOURCE
    # The job's priority when admitted; None in entries written before it was recorded, which are never
    # preempted (their priority is unknown).
    priority: int | None = None
    # Set once a pass chose this job as a victim (quota/preemption.py): "<namespace>/<job>, priority P" of
    # the preemptor. The GPUs stay reserved until the job's pods are gone.
    preempted_by: str | None = None

    @classmethod
    def for_job(cls, job: QueuedJob, admitted_at: datetime) -> Reservation:
        """The reservation that admitting ``job`` at ``admitted_at`` creates."""
        return cls(
            job=job.name,
            group=job.group,
            user=job.user,
            gpus=job.gpus,
            uid=job.uid,
            admitted_at=admitted_at,
            namespace=job.namespace,
            requeue_count=job.requeue_count,
            kueue=job.kueue_queue is not None,
            resource=job.resource,
            priority=job.priority,
        )


# --------------------------------------------------------------------------------------------------
# Admission
# --------------------------------------------------------------------------------------------------


class Verdict(str, Enum):
    """The outcome of one admission pass for one queued job; the value is the reason users see."""

    ADMIT = "Admitted"
    USER_QUOTA = "UserQuota"
    GROUP_QUOTA = "GroupQuota"
    BEHIND_HEAD = "BehindHead"
    BACKING_OFF = "BackingOff"
    INADMISSIBLE = "Inadmissible"
    OVER_QUOTA = "OverQuota"
    QUEUE_TIMEOUT = "QueueTimeout"
    STOPPED = "Stopped"
    PREEMPTING = "Preempting"  # the head of its group's queue waits for the jobs it preempted to end

    @property
    def reason(self) -> str:
        return self.value

    @property
    def terminal(self) -> bool:
        """The job fails now instead of waiting (never retried by Airflow for OverQuota)."""
        return self in (Verdict.OVER_QUOTA, Verdict.QUEUE_TIMEOUT)

    @property
    def waiting(self) -> bool:
        """The job stays queued and keeps a queue position."""
        return self is not Verdict.ADMIT and not self.terminal


@dataclass(frozen=True)
class Decision:
    """One queued job's verdict, its 1-based position in its group's queue while waiting, and why."""

    job: QueuedJob
    verdict: Verdict
    position: int | None
    message: str
    blocked_by: str | None = None  # BehindHead: the job at the head of the group
    preempts: tuple[Reservation, ...] = ()  # Preempting: the admitted jobs this pass chose to preempt

    @property
    def reason(self) -> str:
        return self.verdict.reason


@dataclass(frozen=True)
class UserUsage:
    user: str
    gpus: int
    jobs: int
    limit: int


@dataclass(frozen=True)
class DeviceUsage:
    """A group's quota and use of one GPU device other than whole NVIDIA GPUs."""

    resource: str
    quota: int
    used: int


@dataclass(frozen=True)
class GroupUsage:
    """What a group holds right now, for pools views: ``quota``/``used`` of whole GPUs
    (nvidia.com/gpu), ``devices`` of every other device it has a quota of or holds.

    In a cohort (quota/cohort.py), ``borrowed`` is what it holds above its quota, ``lent`` what of its
    quota the cohort's other groups hold, ``most`` the most it may ever hold (its guaranteed part plus
    all the cohort lends, within its ``borrowing_limit``) and ``room`` what it may take now. A
    ``fair_share`` group carries its users' recent usage in GPUs (``recent``, quota/fair_share.py):
    everyone with a usage history or GPUs held; anyone else's is 0.
    """

    group: str
    quota: int
    used: int
    users: tuple[UserUsage, ...]
    devices: tuple[DeviceUsage, ...] = ()
    cohort: str | None = None
    borrowed: int = 0
    lent: int = 0
    most: int | None = None  # None: the quota (a group outside any cohort)
    room: int | None = None  # None: what is left of the quota
    recent: Mapping[str, float] | None = field(default=None, hash=False)  # None: not fair_share

    @property
    def free(self) -> int:
        """Whole GPUs the group may take now: in a cohort, what borrowing allows and lending left."""
        return self.room if self.room is not None else max(0, self.quota - self.used)


def queue_order(job: QueuedJob) -> tuple:
    """Sort key of a group's queue: higher priority first, then earlier enqueue, then name and uid."""
    return (-job.priority, job.queued_at, job.name, job.namespace, job.uid)


def _unique_reservations(reservations: Iterable[Reservation]) -> list[Reservation]:
    ordered = sorted(reservations, key=lambda r: (r.admitted_at, r.uid, r.requeue_count))
    seen: set[str] = set()
    unique = []
    for r in ordered:
        if r.uid not in seen:
            seen.add(r.uid)
            unique.append(r)
    return unique


def usage(
    policy: QuotaPolicy,
    reservations: Iterable[Reservation],
    now: datetime | None = None,
    histories: Mapping[str, UsageHistory] | None = None,
) -> tuple[GroupUsage, ...]:
    """GPUs and jobs held per group and per user, for every group of the policy; with ``now``, each
    ``fair_share`` group's recent usage per user from its ledger's usage history (``histories``, by
    ledger name) and its standing reservations, as the admission pass orders its queue by."""
    unique = _unique_reservations(reservations)
    # Kueue charges what it admitted, not the pool.
    charged = [r for r in unique if not r.kueue]
    whole = {
        name: sum(r.gpus for r in charged if r.group == name and r.resource == DEFAULT_RESOURCE)
        for name in policy.group_names
    }
    recent = recent_by_group(policy, histories or {}, unique, now) if now is not None else {}
    result = []
    for name in policy.group_names:
        quota = policy.groups[name]
        held = [r for r in unique if r.group == name]
        per_user: dict[str, list[int]] = {}
        for r in held:
            per_user.setdefault(r.user, [0, 0])
            per_user[r.user][0] += r.gpus
            per_user[r.user][1] += 1
        users = tuple(
            UserUsage(user=u, gpus=g, jobs=n, limit=quota.user_limit(u))
            for u, (g, n) in sorted(per_user.items())
        )
        mine = [r for r in charged if r.group == name]
        devices = tuple(
            DeviceUsage(
                resource=device,
                quota=quota.quota_of(device),
                used=sum(r.gpus for r in mine if r.resource == device),
            )
            for device in sorted(
                set(quota.devices) | set(quota.flavors) | {r.resource for r in mine} - {DEFAULT_RESOURCE}
            )
        )
        borrowed = lent = 0
        most: int | None = None
        room: int | None = None
        if quota.cohort is not None:
            # Borrowing is of whole GPUs only, as admission counts it (_Cohort).
            limits = policy.cohort_limits(quota.cohort)
            borrowed = cohorts.borrowed(name, limits, whole)
            lent = cohorts.lent(name, limits, whole)
            most = cohorts.most(name, limits)
            room = cohorts.room(name, limits, whole)
        result.append(
            GroupUsage(
                group=name,
                quota=quota.gpus,
                used=whole[name],
                users=users,
                devices=devices,
                cohort=quota.cohort,
                borrowed=borrowed,
                lent=lent,
                most=most,
                room=room,
                recent=recent.get(name),
            )
        )
    return tuple(result)


@dataclass
class _Pool:
    """Mutable tally of one group during one pass: reservations plus this pass's admissions."""

    quota: GroupQuota
    used_of: dict[str, int] = field(default_factory=dict)  # per device
    user_of: dict[tuple[str, str], int] = field(default_factory=dict)  # per (user, device)
    user_jobs: dict[str, int] = field(default_factory=dict)  # over every device
    # Reservations on their way out (job ended, stopped, requeued or preempted; pods still live), per
    # device, and the others: what a preemption counts first, and whom it may choose.
    freeing: dict[str, int] = field(default_factory=dict)
    user_freeing: dict[tuple[str, str], int] = field(default_factory=dict)
    held: list[Reservation] = field(default_factory=list)
    freeing_uids: list[str] = field(default_factory=list)  # whose pods' GPUs are on their way back

    def free_later(self, r: Reservation) -> None:
        self.freeing_uids.append(r.uid)
        self.freeing[r.resource] = self.freeing.get(r.resource, 0) + r.gpus
        key = (r.user, r.resource)
        self.user_freeing[key] = self.user_freeing.get(key, 0) + r.gpus

    def at_job_limit(self, user: str) -> bool:
        limit = self.quota.max_running_jobs_per_user
        return limit is not None and self.user_jobs.get(user, 0) >= limit

    def take(self, user: str, gpus: int, resource: str, *, group_quota: bool = True) -> None:
        if group_quota:
            self.used_of[resource] = self.used_of.get(resource, 0) + gpus
        self.user_of[(user, resource)] = self.user_of.get((user, resource), 0) + gpus
        self.user_jobs[user] = self.user_jobs.get(user, 0) + 1

    def used(self, resource: str) -> int:
        return self.used_of.get(resource, 0)

    def user_used(self, user: str, resource: str) -> int:
        return self.user_of.get((user, resource), 0)


def _plural(n: int, word: str) -> str:
    if "/" in word:  # a resource name (nvidia.com/mig-1g.10gb) is counted as it is written
        return f"{n} {word}"
    return f"{n} {word}{'' if n == 1 else 's'}"


def _utc(value: datetime) -> str:
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def decide(
    policy: QuotaPolicy,
    queued: Sequence[QueuedJob],
    reservations: Sequence[Reservation],
    now: datetime,
    releasing: Collection[str] = frozenset(),
    recent: Mapping[str, Mapping[str, float]] | None = None,
    placement: Placement | None = None,
) -> list[Decision]:
    """One decision per queued job (duplicates by uid collapse), grouped by group in queue order.

    ``reservations`` are the GPUs already held (the reconciled ledgers); admissions in this pass count
    against the jobs after them. A queued job that already holds a reservation of its current attempt
    (same uid and requeue count: a crash lost its unsuspend) is admitted again without being charged
    twice. ``releasing`` names (by uid) the reservations of jobs already ending, stopped, requeued or
    preempted whose pods still hold their GPUs: they count as used, and a group that preempts counts
    them as on their way back before it preempts anyone else. ``recent`` gives, per group, each user's
    recent usage in GPUs (quota/fair_share.py), which orders the queue of a ``fair_share`` group.
    ``placement`` (the nodes, where admitted jobs' pods are, what queued jobs' pods ask for) makes a
    preemption choose victims that free room where the preemptor's pods can be placed
    (quota/preemption.py). The result depends only on the arguments, not on their order.
    """
    if now.tzinfo is None:
        raise ValueError(f"now must be timezone-aware, got naive {now.isoformat()}")
    queued = [replace(j, priority=policy.charged_priority(j.group, j.priority)) for j in queued]
    unique: dict[str, QueuedJob] = {}
    for job in sorted(queued, key=lambda j: (j.group, queue_order(j), j.requeue_count)):
        unique.setdefault(job.uid, job)
    held = _unique_reservations(reservations)
    by_group: dict[str, list[QueuedJob]] = {}
    for job in sorted(unique.values(), key=lambda j: (j.group, queue_order(j))):
        by_group.setdefault(job.group, []).append(job)
    units: dict[str, set[str]] = {}
    for group in by_group:
        units.setdefault(policy.ledger_of(group), set()).add(group)
    decisions: list[Decision] = []
    for unit in sorted(units):
        groups = sorted(units[unit] | set(policy.members(unit)) if unit not in policy.groups else units[unit])
        decisions.extend(
            _decide_unit(
                policy,
                unit,
                {
                    g: _ordered(policy.groups.get(g), by_group.get(g, []), (recent or {}).get(g, {}))
                    for g in groups
                },
                [r for r in held if r.group in groups],
                now,
                releasing,
                placement,
            )
        )
    return decisions


def _ordered(quota: GroupQuota | None, jobs: list[QueuedJob], recent: Mapping[str, float]) -> list[QueuedJob]:
    """A group's queue (given in FIFO order) in the order its rules walk it."""
    if quota is None or quota.ordering is not Ordering.FAIR_SHARE:
        return jobs
    return fair_order(jobs, recent, queue_order)


@dataclass
class _Cohort:
    """The groups of one cohort during one pass: their limits and their tallies (whole GPUs)."""

    name: str
    limits: dict[str, Limits]
    pools: dict[str, _Pool]

    def used(self) -> dict[str, int]:
        return {g: p.used(DEFAULT_RESOURCE) for g, p in self.pools.items()}

    def freeing(self) -> dict[str, int]:
        return {g: p.freeing.get(DEFAULT_RESOURCE, 0) for g, p in self.pools.items()}

    def held(self) -> list[Reservation]:
        return [r for p in self.pools.values() for r in p.held if r.resource == DEFAULT_RESOURCE]

    def describe(self, group: str) -> str:
        used = self.used()
        left = cohorts.shared_capacity(self.limits) - cohorts.shared_used(self.limits, used)
        borrowed = cohorts.borrowed(group, self.limits, used)
        return f"{borrowed} borrowed from cohort {self.name}, which has {_plural(max(0, left), 'GPU')} left to lend"


def _pool_of(
    quota: GroupQuota | None, reservations: Iterable[Reservation], releasing: Collection[str]
) -> _Pool | None:
    if quota is None:
        return None
    pool = _Pool(quota)
    for r in reservations:
        pool.take(r.user, r.gpus, r.resource, group_quota=not r.kueue)
        if r.kueue:
            continue
        if r.uid in releasing or r.preempted_by is not None:
            pool.free_later(r)
        else:
            pool.held.append(r)
    return pool


def _decide_unit(
    policy: QuotaPolicy,
    unit: str,
    queues: Mapping[str, list[QueuedJob]],
    reservations: list[Reservation],
    now: datetime,
    releasing: Collection[str] = frozenset(),
    placement: Placement | None = None,
) -> list[Decision]:
    """The queues of the groups one ledger holds (a cohort's, or one group's), walked together: each
    group in its own order, the groups interleaved by enqueue time, so a cohort's spare GPUs go to the
    jobs that waited longest whatever their group."""
    pools = {
        g: _pool_of(policy.groups.get(g), [r for r in reservations if r.group == g], releasing)
        for g in queues
    }
    reserved = {(r.uid, r.requeue_count): r for r in reservations}
    cohort = None
    if unit not in policy.groups and policy.cohort_limits(unit):
        cohort = _Cohort(unit, policy.cohort_limits(unit), {g: p for g, p in pools.items() if p is not None})

    # The GroupQuota-blocked job everything behind waits for, per group and device: a job waiting for
    # the group's MIG slices does not hold back a job that asks for whole GPUs, which it could never use.
    heads: dict[str, dict[str, QueuedJob]] = {g: {} for g in queues}
    # The devices a job already preempts for in this pass: one preemptor per ledger (a group, or a
    # cohort's groups together) and device a pass (Kueue's scheduler, too, considers one head per
    # ClusterQueue a cycle). Its victims' GPUs are counted as on their way back, to their group's pool
    # and the cohort's; a second preemptor would count them for itself as well and preempt for GPUs the
    # first one takes. A reclaimer's victims are other groups' jobs, so the whole cohort waits.
    preempting: set[str] = set()
    verdicts: dict[str, list[tuple[QueuedJob, Verdict, str, str | None, tuple[Reservation, ...]]]] = {
        g: [] for g in queues
    }
    for job in _interleaved(queues, lambda j: _borrows(policy, pools, cohort, j)):
        group = job.group
        quota, pool = policy.groups.get(group), pools[group]
        group_heads = heads[group]
        verdict, message, blocked_by = _judge(
            policy, quota, pool, job, reserved, group_heads.get(job.resource), now, cohort
        )
        preempts: tuple[Reservation, ...] = ()
        if verdict is Verdict.GROUP_QUOTA and job.kueue_queue is None:
            group_heads[job.resource] = job
            assert quota is not None and pool is not None  # GroupQuota is only judged in a known group
            if (
                cohort is not None
                and quota.reclaim is not Reclaim.NEVER
                and job.resource == DEFAULT_RESOURCE
                and job.resource not in preempting
            ):
                verdict, message, preempts = _reclaim_for(quota, cohort, job, verdict, message)
            if (
                verdict is Verdict.GROUP_QUOTA
                and quota.within_group is WithinGroup.LOWER_PRIORITY
                and job.resource not in preempting
            ):
                verdict, message, preempts = _preempt_for(
                    quota, pool, job, verdict, message, placement=placement
                )
        elif (
            verdict is Verdict.USER_QUOTA
            and job.kueue_queue is None
            and quota is not None
            and pool is not None
            and quota.within_group is WithinGroup.LOWER_PRIORITY
            and not pool.at_job_limit(job.user)
            and job.resource not in group_heads
            and job.resource not in preempting
        ):
            # Over the user's own GPU limit: only the user's jobs of lower priority can make room, and
            # only while no earlier job waits for the group (the GPUs freed would be that job's).
            verdict, message, preempts = _preempt_for(
                quota, pool, job, verdict, message, own=True, placement=placement
            )
        if preempts:
            preempting.add(job.resource)
        verdicts[group].append((job, verdict, message, blocked_by, preempts))

    decisions = []
    for group in sorted(verdicts):
        position = 0
        for job, verdict, message, blocked_by, preempts in verdicts[group]:
            # A stopped job keeps its enqueue time but takes no place in line until it is resumed.
            placed = verdict.waiting and verdict is not Verdict.STOPPED
            if placed:
                position += 1
            decisions.append(
                Decision(
                    job=job,
                    verdict=verdict,
                    position=position if placed else None,
                    message=message,
                    blocked_by=blocked_by,
                    preempts=preempts,
                )
            )
    return decisions


def _interleaved(
    queues: Mapping[str, list[QueuedJob]], borrows: Callable[[QueuedJob], bool]
) -> Iterator[QueuedJob]:
    """Every group's queue in its own order, merged: the next is the earliest-queued of the groups'
    next jobs, those within their group's quota before those that would borrow (kubernetes-sigs/kueue
    v0.19.2 ``pkg/scheduler/scheduler.go``, ``makeClassicalIterator``: "request under nominal quota
    before borrowing"), so a job sent back so that its group's owner may take back what it lent
    cannot borrow it again first. ``borrows`` is asked afresh at each step: admissions move it."""
    at = {g: 0 for g in queues}
    while True:
        ready = [g for g in queues if at[g] < len(queues[g])]
        if not ready:
            return
        group = min(ready, key=lambda g: (borrows(queues[g][at[g]]), queue_order(queues[g][at[g]]), g))
        yield queues[group][at[group]]
        at[group] += 1


def _borrows(
    policy: QuotaPolicy, pools: Mapping[str, _Pool | None], cohort: _Cohort | None, job: QueuedJob
) -> bool:
    """Whether admitting ``job`` now would take its group above its own quota (only in a cohort)."""
    pool, quota = pools.get(job.group), policy.groups.get(job.group)
    if cohort is None or pool is None or quota is None or job.resource != DEFAULT_RESOURCE:
        return False
    return pool.used(DEFAULT_RESOURCE) + job.gpus > quota.gpus


def _reclaim_for(
    quota: GroupQuota, cohort: _Cohort, job: QueuedJob, verdict: Verdict, message: str
) -> tuple[Verdict, str, tuple[Reservation, ...]]:
    """A group that wants back GPUs of its nominal quota other groups borrowed."""
    victims = cohorts.reclaim(
        job,
        cohort.limits,
        cohort.used(),
        cohort.freeing(),
        cohort.held(),
        lower_priority_only=quota.reclaim is Reclaim.LOWER_PRIORITY,
    )
    if victims is None:
        return verdict, message, ()
    if not victims:
        return (
            Verdict.PREEMPTING,
            f"{message}; waiting for GPUs of its own quota being given back by jobs of cohort {cohort.name}",
            (),
        )
    chosen = {r.uid for r in victims}
    for pool in cohort.pools.values():
        pool.held[:] = [r for r in pool.held if r.uid not in chosen]
    for victim in victims:
        cohort.pools[victim.group].free_later(victim)
    names = ", ".join(f"{r.namespace}/{r.job}" if r.namespace else r.job for r in victims)
    return (
        Verdict.PREEMPTING,
        f"{message}; reclaiming its quota from borrowing jobs of cohort {cohort.name}: preempting {names} "
        f"({_plural(sum(r.gpus for r in victims), 'GPU')}) for {preemptor_key(job)}: it starts once their "
        "pods are gone",
        victims,
    )


def _judge(
    policy: QuotaPolicy,
    quota: GroupQuota | None,
    pool: _Pool | None,
    job: QueuedJob,
    reserved: Mapping[tuple[str, int], Reservation],
    head: QueuedJob | None,
    now: datetime,
    cohort: _Cohort | None = None,
) -> tuple[Verdict, str, str | None]:
    timeout = job.queue_timeout if job.queue_timeout is not None else policy.requeue.queue_timeout
    if job.stopped_at is not None:
        # Checked before any reservation: a stopped job is never admitted again, not even by the
        # repair of an unsuspend a crash lost. Its queue clock stands while it is stopped (it waits for
        # its user, not for quota): only the waits it banked before the stop count.
        if timeout is not None and queue_timed_out(job.waited(now), timeout):
            return (
                Verdict.QUEUE_TIMEOUT,
                f"stopped at {_utc(job.stopped_at)} after waiting {format_duration(job.waited(now))} for quota "
                f"in group {job.group}, longer than queue_timeout {format_duration(timeout)}",
                None,
            )
        return (
            Verdict.STOPPED,
            f"stopped at {_utc(job.stopped_at)}; not admitted until resumed, then it competes again at "
            "its original position",
            None,
        )
    existing = reserved.get((job.uid, job.requeue_count))
    if existing is not None:
        return (
            Verdict.ADMIT,
            f"already admitted at {_utc(existing.admitted_at)} with {_plural(existing.gpus, 'GPU')} reserved; resuming it",
            None,
        )
    if timeout is not None and queue_timed_out(job.waited(now), timeout):
        return (
            Verdict.QUEUE_TIMEOUT,
            f"waited {format_duration(job.waited(now))} for quota in the queue of group {job.group}, "
            f"longer than queue_timeout {format_duration(timeout)}",
            None,
        )
    if quota is None or pool is None:
        known = known_names(policy.group_names)
        return (
            Verdict.INADMISSIBLE,
            f"group {excerpt(job.group)} is not in the quota policy{_did_you_mean(job.group, policy.group_names)} "
            f"(known groups: {known}); the job waits until an admin adds it",
            None,
        )
    if isinstance(job.gpus, bool) or not isinstance(job.gpus, int) or job.gpus < 0:
        return (Verdict.INADMISSIBLE, f"the job asks for {job.gpus!r} GPUs, which is not a GPU count", None)
    refused = policy.charge_problem(job.group, job.user)
    if refused is not None:
        return (Verdict.INADMISSIBLE, f"never admitted: {refused}", None)

    resource = job.resource
    unit = _unit(resource)
    group_quota = quota.quota_of(resource)
    user_limit = quota.user_limit(job.user, resource)
    borrowing = cohort is not None and resource == DEFAULT_RESOURCE
    if borrowing:
        # In a cohort the group may hold more than its quota: the most it can ever hold bounds its jobs
        # and, where no per-user limit is set, its users.
        group_quota = policy.capacity(quota.name, resource)
        user_limit = policy.user_capacity(quota.name, job.user, resource)
    if job.gpus > group_quota and job.kueue_queue is None:
        hint = (
            "ask for fewer GPUs or a larger quota"
            if resource == DEFAULT_RESOURCE or group_quota
            else f"ask a platform admin for groups.{quota.name}.devices.{resource} in the quota policy"
        )
        return (
            Verdict.OVER_QUOTA,
            f"this job needs {_plural(job.gpus, unit)} but group {quota.name}'s whole quota is "
            f"{_plural(group_quota, unit)}: it can never be admitted; {hint}",
            None,
        )
    if job.gpus > user_limit:
        return (
            Verdict.OVER_QUOTA,
            f"this job needs {_plural(job.gpus, unit)} but user {job.user} may hold at most "
            f"{_plural(user_limit, unit)} in group {quota.name}: it can never be admitted; ask for fewer "
            "GPUs or a larger user quota",
            None,
        )
    if job.not_before is not None and job.not_before > now:
        return (
            Verdict.BACKING_OFF,
            f"requeued {_plural(job.requeue_count, 'time')} after its pods could not be scheduled; "
            f"back-off until {_utc(job.not_before)} ({format_duration(job.not_before - now)} left), "
            "then it competes again at its original position",
            None,
        )

    user_jobs = pool.user_jobs.get(job.user, 0)
    max_jobs = quota.max_running_jobs_per_user
    if max_jobs is not None and user_jobs >= max_jobs:
        return (
            Verdict.USER_QUOTA,
            f"user {job.user} already holds {_plural(user_jobs, 'admitted job')} in group {quota.name}, "
            f"the most allowed (max_running_jobs_per_user: {max_jobs})",
            None,
        )
    user_used = pool.user_used(job.user, resource)
    if job.gpus > max(0, user_limit - user_used):
        return (
            Verdict.USER_QUOTA,
            f"user {job.user} uses {user_used} of {_plural(user_limit, unit)} in group {quota.name}; "
            f"this job needs {job.gpus}",
            None,
        )
    if job.kueue_queue is not None:
        # In front of Kueue the pool keeps only what Kueue lacks, the per-user limits (kubernetes-sigs/
        # kueue issues 752 and 2297): the group's quota and its order are the ClusterQueue's, so a job
        # handed over neither waits behind the group's head nor blocks the jobs after it.
        pool.take(job.user, job.gpus, resource, group_quota=False)
        return (
            Verdict.ADMIT,
            f"handed to Kueue LocalQueue {job.kueue_queue}: user {job.user} now holds "
            f"{pool.user_used(job.user, resource)} of {_plural(user_limit, unit)} in group {quota.name}",
            None,
        )
    used = pool.used(resource)
    if borrowing:
        group_quota = quota.gpus
    if head is not None:
        return (
            Verdict.BEHIND_HEAD,
            f"waiting behind {head.name}, which needs {_plural(head.gpus, unit)} while group {quota.name} "
            f"uses {used} of {group_quota}; jobs of a group start in order",
            head.name,
        )
    if borrowing:
        assert cohort is not None
        if not cohorts.fits(quota.name, job.gpus, cohort.limits, cohort.used()):
            return (
                Verdict.GROUP_QUOTA,
                f"group {quota.name} uses {used} of {_plural(group_quota, unit)} "
                f"({cohort.describe(quota.name)}); this job needs {job.gpus}",
                None,
            )
    elif job.gpus > max(0, group_quota - used):
        return (
            Verdict.GROUP_QUOTA,
            f"group {quota.name} uses {used} of {_plural(group_quota, unit)}; this job needs {job.gpus}",
            None,
        )
    pool.take(job.user, job.gpus, resource)
    return (
        Verdict.ADMIT,
        f"admitted: group {quota.name} now uses {pool.used(resource)} of {_plural(group_quota, unit)}, "
        f"user {job.user} {pool.user_used(job.user, resource)} of {user_limit}",
        None,
    )


def _preempt_for(
    quota: GroupQuota,
    pool: _Pool,
    job: QueuedJob,
    verdict: Verdict,
    message: str,
    *,
    own: bool = False,
    placement: Placement | None = None,
) -> tuple[Verdict, str, tuple[Reservation, ...]]:
    """A job of a preempting group that does not fit: the jobs it preempts, or its verdict as is when
    preempting every lower-priority job would still not make room. ``own``: its user's limit blocks it,
    so only the user's own jobs are candidates for that."""
    resource = job.resource
    unit = _unit(resource)
    free = max(0, quota.quota_of(resource) - pool.used(resource))
    user_free = (
        max(0, quota.user_limit(job.user, resource) - pool.user_used(job.user, resource)) if own else None
    )
    plan_for = partial(
        plan_preemption,
        job,
        free,
        pool.freeing.get(resource, 0),
        [r for r in pool.held if r.user == job.user] if own else pool.held,
        user_free=user_free,
        user_freeing=pool.user_freeing.get((job.user, resource), 0),
    )
    plan = plan_for(placement=placement, freeing_uids=pool.freeing_uids)
    if plan is None:
        if own:  # a user's own jobs are a last resort; the user-quota message alone says why it waits
            return verdict, message, ()
        if placement is not None and plan_for() is not None:
            return (
                verdict,
                f"{message}; no choice of admitted jobs of lower priority would free room on nodes where its "
                "pods can be placed, so none is preempted",
                (),
            )
        return verdict, f"{message}; not enough admitted jobs of lower priority to preempt", ()
    if not plan.victims:
        return (
            Verdict.PREEMPTING,
            f"{message}; waiting for {_plural(plan.freeing, unit)} being freed by jobs that ended or were "
            "preempted: it starts once their pods are gone",
            (),
        )
    names = ", ".join(f"{r.namespace}/{r.job}" if r.namespace else r.job for r in plan.victims)
    freed = sum(r.gpus for r in plan.victims)
    # Victims are no longer candidates for anyone after this job in the same pass.
    chosen = {r.uid for r in plan.victims}
    pool.held[:] = [r for r in pool.held if r.uid not in chosen]
    for victim in plan.victims:
        pool.free_later(victim)
    return (
        Verdict.PREEMPTING,
        f"{message}; preempting {names} (lower priority, {_plural(freed, unit)}) for "
        f"{preemptor_key(job)} (priority {job.priority}): it starts once their pods are gone",
        plan.victims,
    )


def _unit(resource: str) -> str:
    """How messages count a quota line: GPUs, a flavor's GPUs (``h100 GPU``), or the device's own name
    (``nvidia.com/mig-1g.10gb``)."""
    if resource == DEFAULT_RESOURCE:
        return "GPU"
    return resource if "/" in resource else f"{resource} GPU"


def claim_problem(policy: QuotaPolicy, *, owner: str, user: str | None, group: str) -> str | None:
    """Why a task of DAG owner ``owner`` may not run jobs as ``user`` in ``group`` (None: it may).

    The user a job is charged to is the DAG's owner: a task may not name somebody else, or it would
    spend their quota. The group must exist and the owner must be one of its members.
    """
    if user is not None and user != owner:
        return (
            f"user: a task owned by {owner!r} may not submit jobs as {user!r} (it would use their quota); "
            "drop the user argument or make the DAG's owner that user"
        )
    known = policy.groups.get(group)
    if known is None:
        return f"group: unknown group {excerpt(group)}; known groups: {known_names(policy.groups)}"
    if not known.is_member(owner):
        return (
            f"group: {owner!r} is not a member of group {group!r}; ask a platform admin to add them to "
            f"groups.{group}.members in the quota policy"
        )
    return None
