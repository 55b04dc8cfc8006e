"""Preemption by the nodes: victims free room where the preemptor's pods can be placed, concentrated on
one node where that suffices, and nobody is preempted for a job no choice of victims would place
(kube-scheduler v1.36 default preemption; queueing/quota/preemption.py)."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_jobs_plugin.queueing.quota.model import (
    GroupQuota,
    QueuedJob,
    QuotaPolicy,
    Reservation,
    Verdict,
)
from airflow_jobs_plugin.queueing.quota.policy import decide
from airflow_jobs_plugin.queueing.quota.preemption import (
    NodeRoom,
    Placement,
    PodsOf,
    WithinGroup,
    candidates,
    places,
    plan_preemption,
)

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
GPU = "nvidia.com/gpu"


def held(uid: str, gpus: int, minute: int, priority: int = 0, user: str = "ann") -> Reservation:
    return Reservation(
        job=uid,
        group="g",
        user=user,
        gpus=gpus,
        uid=uid,
        admitted_at=T0 + timedelta(minutes=minute),
        priority=priority,
    )


def preemptor(gpus: int = 8, priority: int = 100) -> QueuedJob:
    return QueuedJob(name="big", group="g", user="bob", gpus=gpus, priority=priority, queued_at=T0, uid="big")


def nodes(*free: int) -> tuple[NodeRoom, ...]:
    return tuple(NodeRoom(f"n{i}", {}, {GPU: f}) for i, f in enumerate(free))


# Two 8-GPU nodes, four 4-GPU jobs of low priority spread across them: a1 and a3 on n0, a2 and a4 on n1.
FRAGMENTED = Placement(
    nodes=nodes(0, 0),
    held_on={"a1": {"n0": 4}, "a2": {"n1": 4}, "a3": {"n0": 4}, "a4": {"n1": 4}},
    pods={"big": (PodsOf(1, 8),)},
)
SPREAD = [held("a1", 4, 1), held("a2", 4, 2), held("a3", 4, 3), held("a4", 4, 4)]


def test_quota_alone_would_preempt_one_job_on_each_node():
    plan = plan_preemption(preemptor(), 0, 0, SPREAD)
    assert plan is not None and {r.uid for r in plan.victims} == {"a4", "a3"}  # the two newest


def test_by_the_nodes_the_victims_are_two_jobs_on_one_node():
    plan = plan_preemption(preemptor(), 0, 0, SPREAD, placement=FRAGMENTED)

    assert plan is not None
    victims = {r.uid for r in plan.victims}
    assert victims in ({"a1", "a3"}, {"a2", "a4"})
    assert len({node for uid in victims for node in FRAGMENTED.held_on[uid]}) == 1


def test_the_decision_names_the_victims_on_one_node():
    policy = QuotaPolicy(groups={"g": GroupQuota(name="g", gpus=16, within_group=WithinGroup.LOWER_PRIORITY)})

    (decision,) = decide(policy, [preemptor()], SPREAD, T0 + timedelta(hours=1), placement=FRAGMENTED)

    assert decision.verdict is Verdict.PREEMPTING
    assert {r.uid for r in decision.preempts} == {"a2", "a4"}


def test_victims_already_being_freed_count_as_room_on_their_node():
    # The pass after the preemption: a2 and a4 are on their way out; nobody else is preempted.
    rest = [held("a1", 4, 1), held("a3", 4, 3)]
    plan = plan_preemption(preemptor(), 0, 8, rest, placement=FRAGMENTED, freeing_uids=("a2", "a4"))
    assert plan is not None and plan.victims == ()


def test_nobody_is_preempted_for_a_job_no_choice_of_victims_would_place():
    # A pod of 12 GPUs on nodes of 8: quota would allow it, the nodes never will.
    placement = Placement(nodes=FRAGMENTED.nodes, held_on=FRAGMENTED.held_on, pods={"big": (PodsOf(1, 12),)})
    assert plan_preemption(preemptor(gpus=12), 0, 0, SPREAD, placement=placement) is None


def test_the_waiting_message_says_no_victims_would_make_room_on_the_nodes():
    policy = QuotaPolicy(groups={"g": GroupQuota(name="g", gpus=16, within_group=WithinGroup.LOWER_PRIORITY)})
    placement = Placement(nodes=FRAGMENTED.nodes, held_on=FRAGMENTED.held_on, pods={"big": (PodsOf(1, 12),)})

    (decision,) = decide(policy, [preemptor(gpus=12)], SPREAD, T0 + timedelta(hours=1), placement=placement)

    assert decision.verdict is Verdict.GROUP_QUOTA and decision.preempts == ()
    assert "no choice of admitted jobs of lower priority would free room on nodes" in decision.message


def test_pods_are_placed_largest_first_on_the_fullest_node_that_takes_them():
    assert places((PodsOf(2, 4),), nodes(4, 4), GPU, {})
    assert not places((PodsOf(1, 8),), nodes(4, 4), GPU, {})
    assert places((PodsOf(1, 6), PodsOf(1, 2)), nodes(2, 6), GPU, {})
    assert not places((PodsOf(1, 4, {"zone": "b"}),), (NodeRoom("n0", {"zone": "a"}, {GPU: 8}),), GPU, {})


# --- properties over random clusters ----------------------------------------------------------------


@st.composite
def clusters(draw):
    node_count = draw(st.integers(1, 3))
    size = draw(st.sampled_from((4, 8)))
    room = {f"n{i}": size for i in range(node_count)}
    reservations, held_on = [], {}
    for i in range(draw(st.integers(0, 6))):
        gpus = draw(st.sampled_from((1, 2, 4)))
        node = draw(st.sampled_from(sorted(room)))
        if room[node] < gpus:
            continue
        room[node] -= gpus
        uid = f"r{i}"
        reservations.append(
            held(uid, gpus, i, priority=draw(st.integers(0, 2)), user=draw(st.sampled_from(("ann", "bob"))))
        )
        held_on[uid] = {node: gpus}
    pods = draw(st.integers(1, 3))
    per_pod = draw(st.sampled_from((1, 2, 4, 8)))
    job = QueuedJob(
        name="p",
        group="g",
        user="bob",
        gpus=pods * per_pod,
        priority=draw(st.integers(1, 3)),
        queued_at=T0,
        uid="p",
    )
    placement = Placement(
        nodes=tuple(NodeRoom(n, {}, {GPU: free}) for n, free in sorted(room.items())),
        held_on=held_on,
        pods={"p": (PodsOf(pods, per_pod),)},
    )
    free = draw(st.integers(0, 8))
    return job, reservations, placement, free


def _fits(job, free, chosen, placement) -> bool:
    extra: dict[str, int] = {}
    for r in chosen:
        for node, gpus in placement.held_on[r.uid].items():
            extra[node] = extra.get(node, 0) + gpus
    quota_ok = free + sum(r.gpus for r in chosen) >= job.gpus
    return quota_ok and places(placement.pods["p"], placement.nodes, GPU, extra)


@settings(max_examples=300, deadline=None)
@given(clusters())
def test_a_plan_places_the_preemptor_and_frees_its_quota(cluster):
    job, reservations, placement, free = cluster

    plan = plan_preemption(job, free, 0, reservations, placement=placement)

    if plan is not None:
        assert _fits(job, free, plan.victims, placement)
        assert all(r.priority is not None and r.priority < job.priority for r in plan.victims)


@settings(max_examples=300, deadline=None)
@given(clusters())
def test_nobody_is_preempted_when_no_set_of_candidates_would_place_the_preemptor(cluster):
    job, reservations, placement, free = cluster
    pool = candidates(job, reservations)
    possible = any(
        _fits(job, free, chosen, placement)
        for k in range(len(pool) + 1)
        for chosen in itertools.combinations(pool, k)
    )

    plan = plan_preemption(job, free, 0, reservations, placement=placement)

    assert (plan is not None) == possible


@settings(max_examples=300, deadline=None)
@given(clusters())
def test_no_victim_of_a_plan_could_be_spared(cluster):
    job, reservations, placement, free = cluster

    plan = plan_preemption(job, free, 0, reservations, placement=placement)

    if plan is not None and plan.victims:
        for spared in plan.victims:
            assert not _fits(job, free, [r for r in plan.victims if r is not spared], placement)


def test_other_groups_pods_take_room_on_their_nodes():
    """The node a pod of another group fills is not free for the preemptor (placement.preemption_placement)."""
    from airflow_jobs_plugin.queueing.quota.placement import NodeCapacity, preemption_placement

    def pod(node: str, gpus: int) -> dict:
        limits = {"nvidia.com/gpu": str(gpus)}
        return {
            "spec": {"nodeName": node, "containers": [{"name": "m", "resources": {"limits": limits}}]},
            "status": {"phase": "Running"},
        }

    nodes = [NodeCapacity(name=f"n{i}", gpus=8, node_labels={}) for i in range(3)]
    other = pod("n2", 8)

    placement = preemption_placement(nodes, [], lambda job: [], [other, pod("n0", 4)])

    assert placement is not None
    assert {room.name: room.free["nvidia.com/gpu"] for room in placement.nodes} == {"n0": 4, "n1": 8, "n2": 0}
