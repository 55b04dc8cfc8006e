"""Fair sharing among the users of a group: who goes first among jobs of equal priority.

Opt-in per group (``ordering: fair_share``). Strict FIFO lets one user who queued early take the whole
group; fair sharing orders a group's queue by how much each user has held recently instead, as Slurm's
fair-share factor does with its decayed usage (``PriorityDecayHalfLife``, slurm.conf) and Kueue's
admission fair sharing does with a LocalQueue's decayed usage (kubernetes-sigs/kueue v0.19.2,
``pkg/cache/queue/afs/usage_ledger.go``, and ``AdmissionFairSharing.usageHalfLifeTime`` in
``apis/config/v1beta1/configuration_types.go``).

**Usage.** A user's usage is the GPU-seconds their jobs held, each second weighted by
``2 ** -(age / half_life)``: a GPU held a half-life ago counts half. Expressed in GPUs, the figure
shown and compared is ``recent = ln 2 / half_life * decayed GPU-seconds``, the user's average number of
GPUs held, weighted towards the present: someone who has held 4 GPUs for many half-lives reads 4.0,
and a half-life after they stopped, 2.0. A job is charged from its admission until its reservation is
released (its pods are gone), the time its GPUs were really taken from the others.

**Order.** Within each priority (priority still comes first), the queue is built one job at a time:
next is the oldest queued job of the user whose usage -- recent usage plus the GPUs of their jobs
already placed ahead in this order -- is lowest (ties: the earlier job). So two users who queue at the
same time alternate, and a user who held the group yesterday goes after one who did not. Each user's
own jobs keep their FIFO order. The group's rules then walk this order exactly as they walk FIFO: a
job over its user's quota blocks nobody, a job over the group's quota blocks everything after it.

Pure: no I/O. The ledger keeps the decayed GPU-seconds per user and when they were last brought up to
date (``UsageHistory``); a pass adds a reservation's GPU-seconds when it releases it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import groupby

from airflow_jobs_plugin.queueing.quota.model import (
    DEFAULT_HALF_LIFE,
    Ordering,
    QueuedJob,
    QuotaPolicy,
    Reservation,
)

__all__ = ["DEFAULT_HALF_LIFE", "Ordering"]  # the policy's words, kept in the model

# Usage below this many GPU-seconds is forgotten, so the ledger does not keep every user ever seen.
FORGET_BELOW = 1.0


@dataclass(frozen=True)
class UsageHistory:
    """Decayed GPU-seconds per user of released reservations, as of ``at`` (None: the group keeps no
    history), decaying with ``half_life`` (the group's when last written, so that a release outside an
    admission pass charges the same way)."""

    at: datetime | None = None
    gpu_seconds: Mapping[str, float] = field(default_factory=dict, hash=False)
    half_life: timedelta = DEFAULT_HALF_LIFE

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, UsageHistory):
            return NotImplemented
        return (self.at, self.half_life, dict(self.gpu_seconds)) == (
            other.at,
            other.half_life,
            dict(other.gpu_seconds),
        )

    def __hash__(self) -> int:
        return hash((self.at, self.half_life))


def _weight(age: timedelta, half_life: timedelta) -> float:
    return 2.0 ** -(max(age, timedelta(0)) / half_life)


def decayed(history: UsageHistory, now: datetime, half_life: timedelta) -> dict[str, float]:
    """``history``'s GPU-seconds per user, decayed to ``now``."""
    if history.at is None:
        return {}
    factor = _weight(now - history.at, half_life)
    return {user: seconds * factor for user, seconds in history.gpu_seconds.items()}


def held_seconds(gpus: int, start: datetime, end: datetime, now: datetime, half_life: timedelta) -> float:
    """Decayed GPU-seconds, as of ``now``, of ``gpus`` held from ``start`` to ``end``.

    The integral of ``gpus * 2 ** -((now - t) / half_life)`` over ``[start, end]``.
    """
    if end <= start or gpus <= 0:
        return 0.0
    scale = half_life.total_seconds() / math.log(2)
    return gpus * scale * (_weight(now - end, half_life) - _weight(now - start, half_life))


def with_released(
    history: UsageHistory, released: Iterable[Reservation], now: datetime, half_life: timedelta
) -> UsageHistory:
    """``history`` brought to ``now`` with the GPU-seconds of ``released`` reservations added (each
    charged from its admission until ``now``, when its release is written)."""
    totals = decayed(history, now, half_life)
    for r in released:
        if r.kueue:  # Kueue charged it to its ClusterQueue, not to the pool
            continue
        totals[r.user] = totals.get(r.user, 0.0) + held_seconds(r.gpus, r.admitted_at, now, now, half_life)
    kept = {user: seconds for user, seconds in sorted(totals.items()) if seconds >= FORGET_BELOW}
    return UsageHistory(at=now, gpu_seconds=kept, half_life=half_life)


def recent_gpus(
    history: UsageHistory, held: Iterable[Reservation], now: datetime, half_life: timedelta
) -> dict[str, float]:
    """Each user's recent usage in GPUs: released work from ``history`` plus what ``held`` (the
    reservations still standing) has held so far."""
    seconds = decayed(history, now, half_life)
    for r in held:
        if r.kueue:
            continue
        seconds[r.user] = seconds.get(r.user, 0.0) + held_seconds(r.gpus, r.admitted_at, now, now, half_life)
    scale = math.log(2) / half_life.total_seconds()
    return {user: value * scale for user, value in seconds.items()}


def recent_by_group(
    policy: QuotaPolicy,
    histories: Mapping[str, UsageHistory],
    reservations: Iterable[Reservation],
    now: datetime,
    groups: Collection[str] | None = None,
) -> dict[str, dict[str, float]]:
    """Per ``fair_share`` group (of ``groups``, else of the whole policy), each user's recent usage in
    GPUs: the history its ledger keeps (``histories`` by ledger name, ``QuotaPolicy.ledger_of``; a
    cohort's groups share one) plus the group's own standing ``reservations``. This is what an
    admission pass orders the group's queue by, and what the pools views show next to the GPUs held."""
    held = list(reservations)
    recent: dict[str, dict[str, float]] = {}
    for name in sorted(policy.groups if groups is None else groups):
        quota = policy.groups.get(name)
        if quota is None or quota.ordering is not Ordering.FAIR_SHARE:
            continue
        history = histories.get(policy.ledger_of(name), UsageHistory())
        mine = [r for r in held if r.group == name]
        recent[name] = recent_gpus(history, mine, now, quota.fair_share_half_life)
    return recent


def fair_order(
    jobs: Sequence[QueuedJob], recent: Mapping[str, float], fifo_key: Callable[[QueuedJob], tuple]
) -> list[QueuedJob]:
    """``jobs`` (one group's) in fair-share order; ``fifo_key`` is the group's FIFO sort key, which
    orders by priority first and keeps each user's own jobs in their order."""
    ordered: list[QueuedJob] = []
    for _priority, level in groupby(sorted(jobs, key=fifo_key), key=lambda j: j.priority):
        pending: dict[str, list[QueuedJob]] = {}
        for job in level:
            pending.setdefault(job.user, []).append(job)
        score = {user: recent.get(user, 0.0) for user in pending}
        while pending:
            user = min(pending, key=lambda u: (score[u], fifo_key(pending[u][0])))
            job = pending[user].pop(0)
            ordered.append(job)
            score[user] += job.gpus
            if not pending[user]:
                del pending[user]
    return ordered
