"""The quota pool's data: the policy (groups, priorities, flavors, requeue settings), a queued job, a
reservation, a verdict and a decision, and what a group holds.

Frozen data and the questions it answers about itself, nothing more: the YAML that becomes a policy is
read by :mod:`.parse`, and the rule that decides who is admitted is :mod:`.policy`'s. The words the policy
uses for cohorts, fair sharing and preemption (:class:`Limits`, :class:`Reclaim`, :class:`Ordering`,
:class:`WithinGroup`) live here too, so that ``cohort``, ``fair_share`` and ``preemption`` import the
model and the model imports none of them.

Pure: stdlib only, no I/O.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum

from airflow_jobs_plugin.jobs.bounded import excerpt
from airflow_jobs_plugin.jobs.labels import GPU_RESOURCE as DEFAULT_RESOURCE
from airflow_jobs_plugin.queueing.charging import ChargingMap
from airflow_jobs_plugin.queueing.quota.flavors import Flavor
from airflow_jobs_plugin.queueing.quota.requeue import RequeueSettings, waited_for_quota

# Key of the policy YAML inside the policy ConfigMap's ``data``.
POLICY_KEY = "policy.yaml"
# The platform's charging map (charging.py), beside the policy in the same ConfigMap.
CHARGING_KEY = "charging.yaml"
DEFAULT_POLICY_CONFIGMAP = "airflow-jobs-quota-policy"


# The words of cohorts (queueing/quota/cohort.py), fair sharing (queueing/quota/fair_share.py) and preemption
# (queueing/quota/preemption.py) that a group's quota is written in.


class Reclaim(str, Enum):
    """Whether a group takes back, by preemption, the part of its nominal quota others borrowed."""

    NEVER = "never"
    LOWER_PRIORITY = "lower_priority"
    ANY = "any"


@dataclass(frozen=True)
class Limits:
    """One group's share of a cohort: its nominal quota and how much it lends and may borrow."""

    nominal: int
    lending_limit: int | None = None  # None: it lends all of its nominal quota
    borrowing_limit: int | None = None  # None: as much as the cohort has free

    @property
    def lendable(self) -> int:
        return self.nominal if self.lending_limit is None else min(self.lending_limit, self.nominal)

    @property
    def guaranteed(self) -> int:
        return self.nominal - self.lendable

    @property
    def ceiling(self) -> int | None:
        return None if self.borrowing_limit is None else self.nominal + self.borrowing_limit


def shared_capacity(limits: Mapping[str, Limits]) -> int:
    """What the cohort's groups lend, together."""
    return sum(lim.lendable for lim in limits.values())


def most(group: str, limits: Mapping[str, Limits]) -> int:
    """The most ``group`` can ever hold: its guaranteed part plus all the cohort shares, within its
    borrowing limit."""
    lim = limits[group]
    best = lim.guaranteed + shared_capacity(limits)
    return best if lim.ceiling is None else min(best, lim.ceiling)


DEFAULT_HALF_LIFE = timedelta(days=1)


class Ordering(str, Enum):
    """How a group's queue is ordered among jobs of equal priority."""

    FIFO = "fifo"
    FAIR_SHARE = "fair_share"


class WithinGroup(str, Enum):
    """Whether a queued job may preempt admitted jobs of its own group (Kueue's withinClusterQueue)."""

    NEVER = "never"
    LOWER_PRIORITY = "lower_priority"


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


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``; did you mean 'x'?`` for the closest of ``choices``, or nothing."""
    match = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return f"; did you mean {match[0]!r}?" if match else ""


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
    # Whether the head of the group's queue may preempt admitted jobs of lower priority (queueing/quota/preemption.py).
    within_group: WithinGroup = WithinGroup.NEVER
    # FIFO, or fair sharing among the group's users with this half-life (queueing/quota/fair_share.py).
    ordering: Ordering = Ordering.FIFO
    fair_share_half_life: timedelta = DEFAULT_HALF_LIFE
    # The cohort whose groups lend each other unused whole GPUs (queueing/quota/cohort.py), and its limits.
    cohort: str | None = None
    lending_limit: int | None = None
    borrowing_limit: int | None = None
    reclaim: Reclaim = Reclaim.NEVER
    # Quotas per GPU flavor (queueing/quota/flavors.py), by the flavor's name in the policy's ``flavors``.
    flavors: Mapping[str, int] = field(default_factory=dict, hash=False)
    # The highest priority a job of the group is queued at (None: the policy's highest class).
    max_priority: int | None = None
    # The Kubernetes PriorityClasses and Kueue WorkloadPriorityClasses its jobs may name (none: the
    # cluster's default class alone). A class is a claim on other tenants' GPUs (the scheduler preempts
    # running pods for it, Kueue reorders and preempts workloads by it), so the platform hands them out
    # per group (queueing/quota/priority_classes.py).
    priority_classes: frozenset[str] = frozenset()

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
        hint = did_you_mean(name, self.group_names)
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
            return most(group, self.cohort_limits(quota.cohort))
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
        hint = did_you_mean(priority, tuple(self.priorities))
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
    # The priority classes its spec and labels name (queueing/quota/priority_classes.py named_by_job),
    # each of which its group must allow.
    priority_classes: tuple[str, ...] = ()

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
    # Set once a pass chose this job as a victim (queueing/quota/preemption.py): "<namespace>/<job>, priority P" of
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
# Verdicts and decisions
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

    In a cohort (queueing/quota/cohort.py), ``borrowed`` is what it holds above its quota, ``lent`` what of its
    quota the cohort's other groups hold, ``most`` the most it may ever hold (its guaranteed part plus
    all the cohort lends, within its ``borrowing_limit``) and ``room`` what it may take now. A
    ``fair_share`` group carries its users' recent usage in GPUs (``recent``, queueing/quota/fair_share.py):
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
