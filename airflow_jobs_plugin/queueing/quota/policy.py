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

Pure: stdlib only, no I/O. The data it decides on is :mod:`.model`'s and the policy is read by
:mod:`.parse`; the shell reads the policy ConfigMap and the ledger, calls :func:`decide`, and writes
the outcome back.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from functools import partial

from airflow_jobs_plugin.jobs.bounded import excerpt
from airflow_jobs_plugin.jobs.labels import GPU_RESOURCE as DEFAULT_RESOURCE
from airflow_jobs_plugin.queueing.quota import cohort as cohorts
from airflow_jobs_plugin.queueing.quota.fair_share import UsageHistory, fair_order, recent_by_group
from airflow_jobs_plugin.queueing.quota.model import (
    Decision,
    DeviceUsage,
    GroupQuota,
    GroupUsage,
    Limits,
    Ordering,
    QueuedJob,
    QuotaPolicy,
    Reclaim,
    Reservation,
    UserUsage,
    Verdict,
    WithinGroup,
    did_you_mean,
    known_names,
)
from airflow_jobs_plugin.queueing.quota.preemption import Placement, plan_preemption, preemptor_key
from airflow_jobs_plugin.queueing.quota.priority_classes import priority_classes_problem
from airflow_jobs_plugin.queueing.quota.requeue import format_duration, queue_timed_out


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
    recent usage in GPUs (queueing/quota/fair_share.py), which orders the queue of a ``fair_share`` group.
    ``placement`` (the nodes, where admitted jobs' pods are, what queued jobs' pods ask for) makes a
    preemption choose victims that free room where the preemptor's pods can be placed
    (queueing/quota/preemption.py). The result depends only on the arguments, not on their order.
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
            f"group {excerpt(job.group)} is not in the quota policy{did_you_mean(job.group, policy.group_names)} "
            f"(known groups: {known}); the job waits until an admin adds it",
            None,
        )
    if isinstance(job.gpus, bool) or not isinstance(job.gpus, int) or job.gpus < 0:
        return (Verdict.INADMISSIBLE, f"the job asks for {job.gpus!r} GPUs, which is not a GPU count", None)
    refused = policy.charge_problem(job.group, job.user) or priority_classes_problem(
        policy, job.group, job.priority_classes
    )
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
        # Two things set a back-off: a requeue (the count goes up) and a new attempt after the last one
        # failed with a retryable exit (jobs/attempts.next_attempt starts the count again at 0).
        why = (
            f"requeued {_plural(job.requeue_count, 'time')} after its pods could not be scheduled"
            if job.requeue_count
            else "a new attempt after its last attempt failed"
        )
        return (
            Verdict.BACKING_OFF,
            f"{why}; back-off until {_utc(job.not_before)} ({format_duration(job.not_before - now)} "
            "left), then it competes again at its original position",
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
