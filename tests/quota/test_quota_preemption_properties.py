"""Properties of preemption within a group over random policies, queues and crashing passes."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from airflow_jobs_plugin.queueing.quota.ledger_model import (
    Ledger,
    ObservedJob,
    decode,
    encode,
    plan_admission,
)
from airflow_jobs_plugin.queueing.quota.model import (
    GroupQuota,
    QueuedJob,
    QuotaPolicy,
    Reservation,
    Verdict,
)
from airflow_jobs_plugin.queueing.quota.policy import decide
from airflow_jobs_plugin.queueing.quota.preemption import WithinGroup
from tests.examples_budget import examples

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=timezone.utc)
NOW = T0 + timedelta(hours=1)
USERS = ("u1", "u2", "u3")
MIG = "nvidia.com/mig-1g.10gb"


@st.composite
def policies(draw) -> QuotaPolicy:
    return QuotaPolicy(
        groups={
            "a": GroupQuota(
                name="a",
                gpus=draw(st.integers(0, 12)),
                user_gpus=draw(st.none() | st.integers(0, 12)),
                devices={MIG: draw(st.integers(0, 7))},
                within_group=draw(st.sampled_from(WithinGroup)),
            )
        }
    )


@st.composite
def queues(draw) -> list[QueuedJob]:
    return [
        QueuedJob(
            name=f"q{i}",
            group="a",
            user=draw(st.sampled_from(USERS)),
            gpus=draw(st.integers(0, 8)),
            priority=draw(st.integers(0, 3)),
            queued_at=T0 + timedelta(minutes=draw(st.integers(0, 59))),
            uid=f"q{i}",
            resource=draw(st.sampled_from(("nvidia.com/gpu", MIG))),
        )
        for i in range(draw(st.integers(0, 8)))
    ]


@st.composite
def holdings(draw) -> tuple[list[Reservation], frozenset[str]]:
    reservations = [
        Reservation(
            job=f"r{i}",
            group="a",
            user=draw(st.sampled_from(USERS)),
            gpus=draw(st.integers(0, 6)),
            uid=f"r{i}",
            admitted_at=T0 + timedelta(minutes=draw(st.integers(0, 30))),
            priority=draw(st.none() | st.integers(0, 3)),
            resource=draw(st.sampled_from(("nvidia.com/gpu", MIG))),
            preempted_by=draw(st.none() | st.just("x/earlier, priority 3")),
        )
        for i in range(draw(st.integers(0, 8)))
    ]
    releasing = frozenset(
        draw(st.sets(st.sampled_from([r.uid for r in reservations]))) if reservations else ()
    )
    return reservations, releasing


def _used(reservations, resource) -> int:
    return sum(r.gpus for r in reservations if r.resource == resource)


@settings(max_examples=examples(400), deadline=None)
@given(policies(), queues(), holdings())
def test_victims_are_always_lower_priority_jobs_of_the_same_device_never_chosen_twice(policy, queue, held):
    reservations, releasing = held
    for d in decide(policy, queue, reservations, NOW, releasing):
        for victim in d.preempts:
            assert victim.priority is not None and victim.priority < d.job.priority
            assert victim.resource == d.job.resource and victim.group == d.job.group
            assert victim.uid not in releasing and victim.preempted_by is None


@settings(max_examples=examples(400), deadline=None)
@given(policies(), queues(), holdings())
def test_the_preemptor_fits_once_its_victims_are_gone_and_no_victim_is_spared(policy, queue, held):
    reservations, releasing = held
    quota = policy.groups["a"]
    decisions = decide(policy, queue, reservations, NOW, releasing)
    for i, d in enumerate(decisions):
        if not d.preempts:
            continue
        job, resource = d.job, d.job.resource
        # What this pass admitted before it counts as used, as reservations do.
        admitted = [
            Reservation(
                job=o.job.name, group="a", user=o.job.user, gpus=o.job.gpus, uid=o.job.uid, admitted_at=NOW
            )
            for o in decisions[:i]
            if o.verdict is Verdict.ADMIT and o.job.resource == resource
        ]
        reservations = [*held[0], *admitted]
        leaving = [
            r
            for r in reservations
            if r.resource == resource and (r.uid in releasing or r.preempted_by is not None)
        ]
        free = max(0, quota.quota_of(resource) - _used(reservations, resource))
        user_free = max(
            0,
            quota.user_limit(job.user, resource)
            - sum(r.gpus for r in reservations if r.user == job.user and r.resource == resource),
        )

        def fits(victims, job=job, leaving=leaving, free=free, user_free=user_free) -> bool:
            back = leaving + list(victims)
            group_ok = free + sum(r.gpus for r in back) >= job.gpus
            user_ok = user_free + sum(r.gpus for r in back if r.user == job.user) >= job.gpus
            return group_ok and user_ok

        assert fits(d.preempts)
        for victim in d.preempts:  # the fewest: every victim is needed
            assert not fits([v for v in d.preempts if v is not victim])


@settings(max_examples=examples(300), deadline=None)
@given(policies(), queues(), holdings())
def test_only_a_group_that_asks_for_it_preempts_and_never_past_a_job_waiting_for_the_group(
    policy, queue, held
):
    reservations, releasing = held
    decisions = decide(policy, queue, reservations, NOW, releasing)
    preempting = [d for d in decisions if d.verdict is Verdict.PREEMPTING]
    if policy.groups["a"].within_group is WithinGroup.NEVER:
        assert not preempting
    for d in preempting:  # nothing of its device ahead of it waits for group quota
        ahead = decisions[: decisions.index(d)]
        assert (
            not any(
                o.verdict in (Verdict.GROUP_QUOTA, Verdict.BEHIND_HEAD, Verdict.PREEMPTING)
                and o.job.resource == d.job.resource
                and o.preempts
                for o in ahead
            )
            or not d.preempts
        )
        if d.preempts and any(v.user != d.job.user for v in d.preempts):
            # Other users' jobs are taken only by the head of the group's queue.
            assert not any(
                o.verdict in (Verdict.GROUP_QUOTA, Verdict.BEHIND_HEAD, Verdict.PREEMPTING)
                and o.job.resource == d.job.resource
                for o in ahead
            )


# --- the protocol: pods hold GPUs until they are gone, passes crash ----------------------------------


@dataclass
class ClusterJob:
    job: QueuedJob
    suspended: bool = True
    terminal: bool = False
    requeue_count: int = 0
    preemptions: int = 0
    holding: bool = False  # its pods are on nodes and hold their GPUs


class PreemptionProtocol(RuleBasedStateMachine):
    """Jobs of three priorities share a preempting group; victims' pods take a while to go.

    Invariants: the GPUs held on the nodes never exceed the group's quota; a job is only ever preempted
    for a job of higher priority; no job is ever failed (a preempted one goes back to the queue); every
    pod-holding job is charged in the ledger.
    """

    POLICY = QuotaPolicy(
        groups={"a": GroupQuota("a", gpus=8, user_gpus=8, within_group=WithinGroup.LOWER_PRIORITY)}
    )

    def __init__(self) -> None:
        super().__init__()
        self.jobs: dict[str, ClusterJob] = {}
        self.data: dict[str, str] = {}
        self.now = T0
        self.serial = 0

    def _tick(self) -> None:
        self.now += timedelta(seconds=20)

    def _observed(self, ledger: Ledger) -> dict[str, ObservedJob]:
        observed = {}
        for r in ledger.reservations:
            cj = self.jobs.get(r.uid)
            observed[r.uid] = (
                ObservedJob.gone()
                if cj is None
                else ObservedJob(
                    terminal=cj.terminal,
                    suspended=cj.suspended,
                    requeue_count=cj.requeue_count,
                    holding_pods=cj.holding,
                )
            )
        return observed

    def _queued(self) -> list[QueuedJob]:
        return [
            replace(cj.job, requeue_count=cj.requeue_count)
            for cj in self.jobs.values()
            if cj.suspended and not cj.terminal
        ]

    @rule(gpus=st.integers(1, 8), user=st.sampled_from(USERS), priority=st.integers(0, 2))
    def submit(self, gpus: int, user: str, priority: int) -> None:
        self._tick()
        self.serial += 1
        uid = f"uid{self.serial}"
        job = QueuedJob(
            name=f"j{self.serial}",
            group="a",
            user=user,
            gpus=gpus,
            priority=priority,
            queued_at=self.now,
            uid=uid,
        )
        self.jobs[uid] = ClusterJob(job)

    @rule(crash=st.sampled_from(["none", "after-cas", "mid-preempt"]), seed=st.integers(0, 99))
    def admission_pass(self, crash: str, seed: int) -> None:
        self._tick()
        ledger = decode("a", self.data)
        plan = plan_admission(self.POLICY, ledger, self._queued(), self._observed(ledger), self.now)
        if plan.ledger_changed:
            self.data = encode(plan.ledger)
        if crash == "after-cas":
            return
        assert not plan.fail, "a job failed, though every job fits the group and nothing times out"
        for r in plan.unsuspend:
            cj = self.jobs[r.uid]
            if cj.suspended and cj.requeue_count == r.requeue_count:
                cj.suspended, cj.holding = False, True
        victims = list(plan.preempt)
        if crash == "mid-preempt":
            victims = victims[: random.Random(seed).randint(0, len(victims))]
        for r in victims:
            cj = self.jobs[r.uid]
            name = r.preempted_by.split(",", 1)[0].rsplit("/", 1)[-1]
            preemptor = next(c for c in self.jobs.values() if c.job.name == name)
            assert preemptor.job.priority > cj.job.priority, "preempted for a job of no higher priority"
            if not cj.suspended and not cj.terminal and cj.requeue_count == r.requeue_count:
                cj.suspended = True
                cj.requeue_count += 1
                cj.preemptions += 1

    @precondition(lambda self: any(cj.holding and (cj.suspended or cj.terminal) for cj in self.jobs.values()))
    @rule(pick=st.integers(0, 99))
    def pods_gone(self, pick: int) -> None:
        self._tick()
        leaving = [cj for cj in self.jobs.values() if cj.holding and (cj.suspended or cj.terminal)]
        leaving[pick % len(leaving)].holding = False

    @precondition(lambda self: any(not cj.suspended and not cj.terminal for cj in self.jobs.values()))
    @rule(pick=st.integers(0, 99))
    def job_finishes(self, pick: int) -> None:
        self._tick()
        running = [cj for cj in self.jobs.values() if not cj.suspended and not cj.terminal]
        running[pick % len(running)].terminal = True

    @invariant()
    def never_above_quota_on_the_nodes(self) -> None:
        on_nodes = sum(cj.job.gpus for cj in self.jobs.values() if cj.holding)
        assert on_nodes <= self.POLICY.groups["a"].gpus

    @invariant()
    def every_job_on_the_nodes_is_charged(self) -> None:
        charged = {r.uid for r in decode("a", self.data).reservations}
        for cj in self.jobs.values():
            if cj.holding:
                assert cj.job.uid in charged, f"{cj.job.name} holds GPUs without a reservation"


PreemptionProtocol.TestCase.settings = settings(
    max_examples=examples(150), stateful_step_count=40, deadline=None
)
test_preemption_protocol_keeps_the_group_within_quota = PreemptionProtocol.TestCase
