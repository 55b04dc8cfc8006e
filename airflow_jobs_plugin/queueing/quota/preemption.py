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
group is never above its quota on the nodes.

Where the pass knows the nodes (:class:`Placement`), quota is not enough: victims must free GPUs where
the preemptor's pods can be placed. Eight GPUs freed as four on each of two nodes do not place one pod
of eight, and preempting them would only send the preemptor to wait as Unschedulable while its victims
queue behind it. So, as kube-scheduler's default preemption does for one pod (kubernetes v1.36
``pkg/scheduler/framework/preemption/preemption.go`` ``DryRunPreemption`` over candidate nodes, victims
chosen per node by ``SelectVictimsOnNode`` in ``pkg/scheduler/framework/plugins/defaultpreemption/
default_preemption.go``, the node with the fewest and lowest victims picked by ``pickOneNodeForPreemption``),
the candidates are tried concentrated on each node in turn as well as in the plain order; each try takes
candidates until the preemptor fits both its quota and the nodes, gives back those not needed, and the
try with the fewest victims (then the fewest GPUs, then the lowest priorities) wins. A preemptor that
no choice of victims would place preempts nobody. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from airflow_jobs_plugin.queueing.quota.model import QueuedJob, Reservation, WithinGroup

__all__ = ["WithinGroup"]  # the policy's word, kept in the model


@dataclass(frozen=True)
class PreemptionPlan:
    """What the head of a group's queue needs to start: jobs to preempt now (possibly none, when the
    GPUs being freed already suffice) and how many GPUs are on their way back meanwhile."""

    victims: tuple[Reservation, ...]
    freeing: int  # GPUs of jobs already ending or preempted, counted before any new victim


@dataclass(frozen=True)
class NodeRoom:
    """A node as preemption sees it: its labels and, per device, the GPUs its pods leave free now."""

    name: str
    node_labels: Mapping[str, str]
    free: Mapping[str, int]


@dataclass(frozen=True)
class PodsOf:
    """``count`` pods of one of a queued job's pod sets, each asking ``gpus`` on a node whose labels
    include ``node_selector``."""

    count: int
    gpus: int
    node_selector: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Placement:
    """What a pass knows of the nodes: each node's free GPUs, where each admitted job's pods hold GPUs
    (reservation uid -> node -> GPUs), and the pods each queued job asks for (uid -> pod sets). A job or
    reservation it does not know is judged by quota alone."""

    nodes: tuple[NodeRoom, ...]
    held_on: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    pods: Mapping[str, tuple[PodsOf, ...]] = field(default_factory=dict)


def places(
    pods: Sequence[PodsOf], nodes: Sequence[NodeRoom], resource: str, extra: Mapping[str, int]
) -> bool:
    """Whether every pod fits a node it may run on, given each node's free GPUs plus ``extra`` (GPUs
    the plan frees there). Largest pods first, each on the fullest node that still takes it (best fit,
    so a large hole is kept for a large pod); exact when a job's pods are of one size, as they are."""
    room = {n.name: n.free.get(resource, 0) + extra.get(n.name, 0) for n in nodes}
    labels_of = {n.name: n.node_labels for n in nodes}
    wanted = sorted(
        ((p.gpus, p.node_selector) for p in pods for _ in range(max(p.count, 0)) if p.gpus > 0),
        key=lambda pod: -pod[0],
    )
    for gpus, selector in wanted:
        fitting = [
            name
            for name, left in room.items()
            if left >= gpus and all(labels_of[name].get(k) == v for k, v in selector.items())
        ]
        if not fitting:
            return False
        chosen = min(fitting, key=lambda name: (room[name], name))
        room[chosen] -= gpus
    return True


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
    placement: Placement | None = None,
    freeing_uids: Iterable[str] = (),
) -> PreemptionPlan | None:
    """How ``preemptor`` gets its GPUs: ``None`` if preempting every candidate would not free enough.

    ``free`` is what the group's quota of the preemptor's device has left now (its reservations and this
    pass's admissions counted), ``freeing`` the GPUs of reservations already on their way out, ``held``
    the group's other reservations (candidates are chosen among them). ``user_free`` (with
    ``user_freeing``) is what the preemptor's user has left of their own limit when that is what blocks
    it: only the user's own jobs give that back, so only they are taken for it.

    ``placement`` (the nodes, where the candidates' pods are, the preemptor's pods) adds the nodes'
    say: victims must also free room where the preemptor's pods can be placed, GPUs already being freed
    (``freeing_uids``' pods) counted as free there; ``None`` if no choice of victims would place it.
    """
    need = preemptor.gpus
    pods = placement.pods.get(preemptor.uid) if placement is not None else None
    held_on: Mapping[str, Mapping[str, int]] = placement.held_on if placement is not None else {}
    leaving = tuple(freeing_uids)

    def freed_on(chosen: Sequence[Reservation]) -> dict[str, int]:
        extra: dict[str, int] = {}
        for uid in (*leaving, *(r.uid for r in chosen)):
            for node, gpus in held_on.get(uid, {}).items():
                extra[node] = extra.get(node, 0) + gpus
        return extra

    def placed(chosen: Sequence[Reservation]) -> bool:
        if placement is None or pods is None:
            return True
        return places(pods, placement.nodes, preemptor.resource, freed_on(chosen))

    def quota_fits(chosen: Sequence[Reservation]) -> bool:
        group_ok = free + freeing + sum(r.gpus for r in chosen) >= need
        own = sum(r.gpus for r in chosen if r.user == preemptor.user)
        user_ok = user_free is None or user_free + user_freeing + own >= need
        return group_ok and user_ok

    def fits(chosen: Sequence[Reservation]) -> bool:
        return quota_fits(chosen) and placed(chosen)

    def group_short(chosen: Sequence[Reservation]) -> bool:
        return free + freeing + sum(r.gpus for r in chosen) < need

    if fits(()):
        return PreemptionPlan(victims=(), freeing=freeing)
    ordered = candidates(preemptor, held)
    tries = [ordered]
    if placement is not None and pods is not None:
        # Candidates concentrated on one node first (kube-scheduler's per-node dry run), node by node.
        for node in sorted(n.name for n in placement.nodes):
            here = [r for r in ordered if held_on.get(r.uid, {}).get(node, 0) > 0]
            tries.append(here + [r for r in ordered if r not in here])

    def helps(candidate: Reservation, chosen: Sequence[Reservation]) -> bool:
        return group_short(chosen) or candidate.user == preemptor.user or not placed(chosen)

    best: list[Reservation] | None = None
    for order in tries:
        chosen = _choose(
            order,
            fits,
            helps,
        )
        if chosen is not None and (best is None or _plan_key(chosen) < _plan_key(best)):
            best = chosen
    if best is None:
        return None
    return PreemptionPlan(victims=tuple(best), freeing=freeing)


def _choose(
    order: Sequence[Reservation],
    fits: Callable[[Sequence[Reservation]], bool],
    helps: Callable[[Reservation, Sequence[Reservation]], bool],
) -> list[Reservation] | None:
    """Candidates taken in ``order`` while one ``helps``, until the preemptor ``fits``; then, in the
    reverse order of their choice, every victim it turns out not to need is given back (Kueue's
    fillBackWorkloads). ``None`` if taking every candidate would not make it fit."""
    chosen: list[Reservation] = []
    for candidate in order:
        # A job of another user helps only with the group's quota or the nodes, never with the user's
        # own limit.
        if helps(candidate, chosen):
            chosen.append(candidate)
        if fits(chosen):
            break
    else:
        return None
    for candidate in reversed(chosen[:-1]):
        rest = [c for c in chosen if c is not candidate]
        if fits(rest):
            chosen = rest
    return chosen


def _plan_key(victims: Sequence[Reservation]) -> tuple:
    """The better of two plans: fewer victims, fewer GPUs taken, lower priorities, victims admitted
    later (less work lost; kube-scheduler's pickOneNodeForPreemption weighs the same: the fewest and
    lowest victims, then the latest start), then the uids (a total order)."""
    priorities = sorted((r.priority or 0 for r in victims), reverse=True)
    latest_first = sorted(-r.admitted_at.timestamp() for r in victims)
    return (
        len(victims),
        sum(r.gpus for r in victims),
        priorities,
        latest_first,
        sorted(r.uid for r in victims),
    )


def preemptor_key(job: QueuedJob) -> str:
    """How a preemptor is named on its victims: ``<namespace>/<job>``."""
    return f"{job.namespace}/{job.name}" if job.namespace else job.name
