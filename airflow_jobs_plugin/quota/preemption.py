"""Preemption within a group: which admitted jobs a queued job of higher priority may send back.

Opt-in per group (``preemption: {within_group: lower_priority}`` in the policy). The job at the head
of its group's queue for a device (the one the group's quota blocks) preempts jobs of its group; a job
its user's own GPU limit blocks preempts only that user's jobs (and blocks nobody, as before). Victims
are always of the same group, the same device and strictly lower priority: never a job of equal or higher priority,
never a job handed to Kueue (Kueue's own preemption rules it), never a reservation whose priority is
unknown. The rules follow Kueue's classical preemption (kubernetes-sigs/kueue v0.19.2,
``pkg/scheduler/preemption/preemption.go`` ``classicalPreemptions`` and ``fillBackWorkloads``, and
``pkg/scheduler/preemption/common/ordering.go`` ``CandidatesOrdering``):

* GPUs already being freed (jobs preempted, stopped, requeued or finished whose pods still hold their
  GPUs) count first: if they suffice, nobody new is preempted and the preemptor waits for them;
* candidates are taken lowest priority first, then most recently admitted first, until the preemptor
  fits;
* then, in the reverse order of their choice, every candidate whose GPUs turn out not to be needed is
  given back, so the fewest jobs are preempted.

A preempted job is suspended and goes back to the queue at its original position, without back-off and
without counting against ``requeue_limit``; its GPUs stay reserved until its pods are gone, so the
group is never above its quota on the nodes. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .policy import QueuedJob, Reservation


class WithinGroup(str, Enum):
    """Whether a queued job may preempt admitted jobs of its own group (Kueue's withinClusterQueue)."""

    NEVER = "never"
    LOWER_PRIORITY = "lower_priority"


@dataclass(frozen=True)
class PreemptionPlan:
    """What the head of a group's queue needs to start: jobs to preempt now (possibly none, when the
    GPUs being freed already suffice) and how many GPUs are on their way back meanwhile."""

    victims: tuple[Reservation, ...]
    freeing: int  # GPUs of jobs already ending or preempted, counted before any new victim


def candidate_order(reservation: Reservation) -> tuple:
    """Lowest priority first, then the most recently admitted first, then uid (a total order)."""
    return (reservation.priority, -reservation.admitted_at.timestamp(), reservation.uid)


def candidates(preemptor: QueuedJob, held: Iterable[Reservation]) -> list[Reservation]:
    """The reservations ``preemptor`` may preempt, in the order they are taken."""
    eligible = [
        r
        for r in held
        if r.priority is not None
        and r.priority < preemptor.priority
        and r.resource == preemptor.resource
        and not r.kueue
        and r.preempted_by is None
        and r.uid != preemptor.uid
    ]
    return sorted(eligible, key=candidate_order)


def plan_preemption(
    preemptor: QueuedJob,
    free: int,
    freeing: int,
    held: Sequence[Reservation],
    *,
    user_free: int | None = None,
    user_freeing: int = 0,
) -> PreemptionPlan | None:
    """How ``preemptor`` gets its GPUs: ``None`` if preempting every candidate would not free enough.

    ``free`` is what the group's quota of the preemptor's device has left now (its reservations and this
    pass's admissions counted), ``freeing`` the GPUs of reservations already on their way out, ``held``
    the group's other reservations (candidates are chosen among them). ``user_free`` (with
    ``user_freeing``) is what the preemptor's user has left of their own limit when that is what blocks
    it: only the user's own jobs give that back, so only they are taken for it.
    """
    need = preemptor.gpus

    def fits(chosen: Sequence[Reservation]) -> bool:
        group_ok = free + freeing + sum(r.gpus for r in chosen) >= need
        own = sum(r.gpus for r in chosen if r.user == preemptor.user)
        user_ok = user_free is None or user_free + user_freeing + own >= need
        return group_ok and user_ok

    def group_short(chosen: Sequence[Reservation]) -> bool:
        return free + freeing + sum(r.gpus for r in chosen) < need

    if fits(()):
        return PreemptionPlan(victims=(), freeing=freeing)
    chosen: list[Reservation] = []
    for candidate in candidates(preemptor, held):
        # A job of another user helps only with the group's quota, never with the user's own limit.
        if group_short(chosen) or candidate.user == preemptor.user:
            chosen.append(candidate)
        if fits(chosen):
            break
    else:
        return None
    # Give back, last chosen excepted, every victim the preemptor turns out not to need.
    for candidate in reversed(chosen[:-1]):
        rest = [c for c in chosen if c is not candidate]
        if fits(rest):
            chosen = rest
    return PreemptionPlan(victims=tuple(chosen), freeing=freeing)


def preemptor_key(job: QueuedJob) -> str:
    """How a preemptor is named on its victims: ``<namespace>/<job>``."""
    return f"{job.namespace}/{job.name}" if job.namespace else job.name
