"""Cohorts: groups that lend each other the whole GPUs they do not use.

Opt-in per group (``cohort: research`` in the policy; defaults keep every group hard-capped). The
vocabulary and the arithmetic are Kueue's (kubernetes-sigs/kueue v0.19.2: a ClusterQueue's
``nominalQuota``, ``borrowingLimit`` and ``lendingLimit`` in ``apis/kueue/v1beta2/clusterqueue_types.go``,
the available quota of ``pkg/cache/scheduler/resource_node.go``):

* a group's **nominal** quota is its ``gpus``;
* it lends at most ``lending_limit`` of it to the cohort (absent: all of it), so ``nominal -
  lending_limit`` is **guaranteed**: only the group itself ever uses it;
* the cohort's **shared** capacity is the sum of what its groups lend; every GPU a group uses above its
  guaranteed part comes out of it, its own lendable part included;
* a group may hold at most ``borrowing_limit`` GPUs above its nominal (absent: as many as the cohort
  has free).

So a cohort never holds more than the sum of its groups' nominal quotas, and a group in a cohort of
one behaves exactly as a hard-capped group. Borrowing applies to whole GPUs (``nvidia.com/gpu``); the
quotas of other devices (``devices:``) stay each group's own.

When a group needs GPUs of its nominal quota that others borrowed, it waits for them to finish, or,
with ``preemption: {reclaim_within_cohort: any | lower_priority}``, takes them back: the jobs of groups
above their nominal quota are preempted, lowest priority and then newest first (Kueue's
``reclaimWithinCohort``, candidates ordered by ``pkg/scheduler/preemption/common/ordering.go``), never
bringing a group below its nominal, and only for a job that fits its own group's nominal quota.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from airflow_jobs_plugin.queueing.quota.model import (
    Limits,
    QueuedJob,
    Reclaim,
    Reservation,
    most,
    shared_capacity,
)

__all__ = ["Limits", "Reclaim", "most", "shared_capacity"]  # the policy's words, kept in the model


def shared_used(limits: Mapping[str, Limits], used: Mapping[str, int]) -> int:
    """How much of the shared capacity the groups use: whatever each uses above its guaranteed part."""
    return sum(max(0, used.get(g, 0) - lim.guaranteed) for g, lim in limits.items())


def fits(group: str, gpus: int, limits: Mapping[str, Limits], used: Mapping[str, int]) -> bool:
    """Whether ``group`` may take ``gpus`` more whole GPUs now."""
    lim = limits[group]
    mine = used.get(group, 0)
    if lim.ceiling is not None and mine + gpus > lim.ceiling:
        return False
    extra = max(0, mine + gpus - lim.guaranteed) - max(0, mine - lim.guaranteed)
    return shared_used(limits, used) + extra <= shared_capacity(limits)


def room(group: str, limits: Mapping[str, Limits], used: Mapping[str, int]) -> int:
    """The most whole GPUs ``group`` may take now: what is left of its guaranteed part plus what the
    cohort has left to lend, within its borrowing limit (the largest ``gpus`` :func:`fits` allows)."""
    lim = limits[group]
    mine = used.get(group, 0)
    left = max(0, lim.guaranteed - mine) + max(0, shared_capacity(limits) - shared_used(limits, used))
    if lim.ceiling is not None:
        left = min(left, lim.ceiling - mine)
    return max(0, left)


def borrowed(group: str, limits: Mapping[str, Limits], used: Mapping[str, int]) -> int:
    """GPUs ``group`` holds above its nominal quota."""
    return max(0, used.get(group, 0) - limits[group].nominal)


def lent(group: str, limits: Mapping[str, Limits], used: Mapping[str, int]) -> int:
    """GPUs of ``group``'s nominal quota in use by other groups right now.

    What the borrowers hold is attributed to the lenders in proportion to the part of their lendable
    quota each leaves unused (largest remainder, ties by name), which is one honest reading: Kueue
    keeps the pool's total, not who lent it.
    """
    total = sum(borrowed(g, limits, used) for g in limits)
    idle = {g: max(0, min(lim.lendable, lim.nominal - used.get(g, 0))) for g, lim in limits.items()}
    pool = sum(idle.values())
    if total == 0 or pool == 0:
        return 0
    shares = {g: total * idle[g] / pool for g in limits}
    floors = {g: int(shares[g]) for g in limits}
    left = total - sum(floors.values())
    for g in sorted(limits, key=lambda g: (-(shares[g] - floors[g]), g))[:left]:
        floors[g] += 1
    return floors[group]


def reclaim(
    preemptor: QueuedJob,
    limits: Mapping[str, Limits],
    used: Mapping[str, int],
    freeing: Mapping[str, int],
    held: Sequence[Reservation],
    *,
    lower_priority_only: bool,
) -> tuple[Reservation, ...] | None:
    """The other groups' jobs whose preemption gives ``preemptor`` room within its own nominal quota
    (``None``: not possible). Only jobs of groups above their nominal quota are taken, lowest priority
    and then newest first, and never one that would bring its group below its nominal; GPUs already on
    their way back
    (``freeing``, per group) count first."""
    group = preemptor.group
    if used.get(group, 0) + preemptor.gpus > limits[group].nominal:
        return None  # only the group's own nominal quota is reclaimed, never more borrowing
    after = {g: used.get(g, 0) - freeing.get(g, 0) for g in limits}
    if fits(group, preemptor.gpus, limits, after):
        return ()
    eligible = sorted(
        (
            r
            for r in held
            if r.group != group
            and r.group in limits
            and not r.kueue
            and r.preempted_by is None
            and r.priority is not None
            and (not lower_priority_only or r.priority < preemptor.priority)
        ),
        # Kueue's order (pkg/scheduler/preemption/common/ordering.go): lowest priority, then newest.
        key=lambda r: (r.priority, -r.admitted_at.timestamp(), r.uid),
    )
    chosen: list[Reservation] = []
    for candidate in eligible:
        # Taking it must not bring its group below its nominal quota.
        if after[candidate.group] - candidate.gpus < limits[candidate.group].nominal:
            continue
        chosen.append(candidate)
        after[candidate.group] -= candidate.gpus
        if fits(group, preemptor.gpus, limits, after):
            break
    else:
        return None
    for candidate in reversed(chosen[:-1]):
        after[candidate.group] += candidate.gpus
        if fits(group, preemptor.gpus, limits, after):
            chosen.remove(candidate)
        else:
            after[candidate.group] -= candidate.gpus
    return tuple(chosen)
