"""Properties of the admission rule and the ledger protocol over random policies, queues and crashes."""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from dataclasses import dataclass
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
    without,
)
from airflow_jobs_plugin.queueing.quota.model import (
    GroupQuota,
    QueuedJob,
    QuotaPolicy,
    Reservation,
    Verdict,
)
from airflow_jobs_plugin.queueing.quota.policy import decide, queue_order
from airflow_jobs_plugin.queueing.quota.requeue import Requeue, RequeueSettings, requeue_decision
from tests.examples_budget import examples

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=timezone.utc)
NOW = T0 + timedelta(hours=1)
GROUPS = ("a", "b", "c")
USERS = ("u1", "u2", "u3", "u4")

small = st.integers(min_value=0, max_value=10)


@st.composite
def group_quotas(draw, name: str) -> GroupQuota:
    overrides = draw(st.dictionaries(st.sampled_from(USERS), small, max_size=3))
    return GroupQuota(
        name=name,
        gpus=draw(st.integers(min_value=0, max_value=12)),
        user_gpus=draw(st.none() | small),
        users=overrides,
        max_running_jobs_per_user=draw(st.none() | st.integers(min_value=1, max_value=3)),
    )


@st.composite
def policies(draw) -> QuotaPolicy:
    names = draw(st.lists(st.sampled_from(GROUPS), min_size=1, max_size=3, unique=True))
    timeout = draw(st.none() | st.sampled_from([timedelta(minutes=30), timedelta(hours=2)]))
    return QuotaPolicy(
        groups={n: draw(group_quotas(n)) for n in names},
        requeue=RequeueSettings(queue_timeout=timeout),
    )


@st.composite
def queues(draw) -> list[QueuedJob]:
    count = draw(st.integers(min_value=0, max_value=14))
    jobs = []
    for i in range(count):
        not_before = draw(
            st.none() | st.sampled_from([NOW - timedelta(seconds=1), NOW + timedelta(minutes=1)])
        )
        jobs.append(
            QueuedJob(
                name=f"job{i}",
                group=draw(st.sampled_from((*GROUPS, "unknown"))),
                user=draw(st.sampled_from(USERS)),
                gpus=draw(small),
                priority=draw(st.integers(min_value=-1, max_value=1)),
                queued_at=T0 + timedelta(minutes=draw(st.integers(min_value=0, max_value=59))),
                not_before=not_before,
                uid=f"q{i}",
                requeue_count=1 if not_before else 0,
            )
        )
    return jobs


@st.composite
def reservation_lists(draw) -> list[Reservation]:
    count = draw(st.integers(min_value=0, max_value=8))
    return [
        Reservation(
            job=f"held{i}",
            group=draw(st.sampled_from(GROUPS)),
            user=draw(st.sampled_from(USERS)),
            gpus=draw(st.integers(min_value=0, max_value=6)),
            uid=f"r{i}",
            admitted_at=T0,
        )
        for i in range(count)
    ]


def _tally(items) -> tuple[Counter, Counter, Counter]:
    group_gpus, user_gpus, user_jobs = Counter(), Counter(), Counter()
    for group, user, gpus in items:
        group_gpus[group] += gpus
        user_gpus[group, user] += gpus
        user_jobs[group, user] += 1
    return group_gpus, user_gpus, user_jobs


@settings(max_examples=examples(300), deadline=None)
@given(policies(), queues(), reservation_lists())
def test_admissions_never_exceed_any_quota(policy, queue, reservations):
    decisions = decide(policy, queue, reservations, NOW)
    admitted = [d.job for d in decisions if d.verdict is Verdict.ADMIT]
    before = _tally((r.group, r.user, r.gpus) for r in reservations)
    after = _tally(
        [(r.group, r.user, r.gpus) for r in reservations] + [(j.group, j.user, j.gpus) for j in admitted]
    )
    for job in admitted:
        quota = policy.groups[job.group]
        # Never above the quota; a group already over it (a policy cut) only gets zero-GPU jobs.
        assert after[0][job.group] <= max(quota.gpus, before[0][job.group])
        assert after[1][job.group, job.user] <= max(
            quota.user_limit(job.user), before[1][job.group, job.user]
        )
        if quota.max_running_jobs_per_user is not None:
            assert after[2][job.group, job.user] <= max(
                quota.max_running_jobs_per_user, before[2][job.group, job.user]
            )


@settings(max_examples=examples(300), deadline=None)
@given(policies(), queues(), reservation_lists())
def test_fifo_nothing_is_admitted_behind_a_group_quota_block(policy, queue, reservations):
    decisions = decide(policy, queue, reservations, NOW)
    by_group = defaultdict(list)
    for d in decisions:
        by_group[d.job.group].append(d)
    for group_decisions in by_group.values():
        ordered = sorted(group_decisions, key=lambda d: queue_order(d.job))
        assert [d.job.uid for d in ordered] == [d.job.uid for d in group_decisions]
        blocked = False
        for d in ordered:
            if blocked:
                assert d.verdict not in (Verdict.ADMIT, Verdict.GROUP_QUOTA)
            blocked = blocked or d.verdict is Verdict.GROUP_QUOTA
            if d.verdict is Verdict.BEHIND_HEAD:
                assert blocked


@settings(max_examples=examples(200), deadline=None)
@given(policies(), queues(), reservation_lists(), st.data())
def test_a_job_that_blocks_nobody_changes_nobody_elses_verdict(policy, queue, reservations, data):
    decisions = decide(policy, queue, reservations, NOW)
    skipped = [
        d.job
        for d in decisions
        if d.verdict in (Verdict.USER_QUOTA, Verdict.OVER_QUOTA, Verdict.BACKING_OFF, Verdict.QUEUE_TIMEOUT)
    ]
    if not skipped:
        return
    removed = data.draw(st.sampled_from(skipped))
    others = {d.job.uid: d.verdict for d in decisions if d.job.uid != removed.uid}
    without_it = decide(policy, [j for j in queue if j.uid != removed.uid], reservations, NOW)
    assert {d.job.uid: d.verdict for d in without_it} == others


@settings(max_examples=examples(200), deadline=None)
@given(policies(), queues(), reservation_lists())
def test_every_wait_has_a_true_reason(policy, queue, reservations):
    """Replaying the queue in order, each verdict matches the quotas left at that point."""
    decisions = decide(policy, queue, reservations, NOW)
    group_used, user_used, user_jobs = _tally((r.group, r.user, r.gpus) for r in reservations)
    for d in decisions:
        job = d.job
        quota = policy.groups.get(job.group)
        if d.verdict is Verdict.QUEUE_TIMEOUT:
            assert policy.requeue.queue_timeout is not None
            assert NOW - job.queued_at >= policy.requeue.queue_timeout
            continue
        if d.verdict is Verdict.INADMISSIBLE:
            assert quota is None
            continue
        assert quota is not None
        user_left = max(0, quota.user_limit(job.user) - user_used[job.group, job.user])
        over_user = job.gpus > user_left or (
            quota.max_running_jobs_per_user is not None
            and user_jobs[job.group, job.user] >= quota.max_running_jobs_per_user
        )
        if d.verdict is Verdict.ADMIT:
            assert not over_user and job.gpus <= max(0, quota.gpus - group_used[job.group])
            group_used[job.group] += job.gpus
            user_used[job.group, job.user] += job.gpus
            user_jobs[job.group, job.user] += 1
        elif d.verdict is Verdict.USER_QUOTA:
            assert over_user
        elif d.verdict is Verdict.GROUP_QUOTA:
            assert job.gpus > quota.gpus - group_used[job.group]
        elif d.verdict is Verdict.OVER_QUOTA:
            assert job.gpus > quota.user_limit(job.user)
        elif d.verdict is Verdict.BACKING_OFF:
            assert job.not_before is not None and job.not_before > NOW


@settings(max_examples=examples(200), deadline=None)
@given(policies(), queues(), reservation_lists(), st.randoms(use_true_random=False))
def test_decisions_depend_only_on_the_input_not_its_order(policy, queue, reservations, rng):
    expected = decide(policy, queue, reservations, NOW)
    shuffled_queue, shuffled_reservations = list(queue), list(reservations)
    rng.shuffle(shuffled_queue)
    rng.shuffle(shuffled_reservations)
    assert decide(policy, shuffled_queue, shuffled_reservations, NOW) == expected


@settings(max_examples=examples(200), deadline=None)
@given(policies(), queues(), reservation_lists())
def test_waiting_jobs_have_contiguous_positions_per_group(policy, queue, reservations):
    positions = defaultdict(list)
    for d in decide(policy, queue, reservations, NOW):
        assert (d.position is not None) == d.verdict.waiting
        if d.position is not None:
            positions[d.job.group].append(d.position)
    for group_positions in positions.values():
        assert group_positions == list(range(1, len(group_positions) + 1))


@settings(max_examples=examples(200), deadline=None)
@given(reservation_lists())
def test_ledger_encoding_round_trips(reservations):
    ledger = Ledger("a", tuple(r for r in reservations if r.group == "a"))
    assert decode("a", encode(ledger)) == ledger


# --- the admission protocol under crashes --------------------------------------------------------


@dataclass
class ClusterJob:
    """A job as the cluster holds it: the only truth a pass can read."""

    job: QueuedJob
    suspended: bool = True
    terminal: bool = False
    requeue_count: int = 0
    not_before: datetime | None = None


class AdmissionProtocol(RuleBasedStateMachine):
    """Jobs come and go, passes run and crash at every step; the ledger must stay honest.

    Invariants: every unsuspended unfinished job holds a reservation of its current attempt (no
    over-admission), the ledger never exceeds the quota, and after a pass that completes, the ledger
    holds nothing for a job that is gone, finished or requeued (no leak).
    """

    POLICY = QuotaPolicy(groups={"a": GroupQuota("a", gpus=8, user_gpus=4, max_running_jobs_per_user=2)})

    def __init__(self) -> None:
        super().__init__()
        self.jobs: dict[str, ClusterJob] = {}
        self.data: dict[str, str] = {}
        self.now = T0
        self.serial = 0
        self.clean = True

    def _tick(self) -> None:
        self.now += timedelta(seconds=20)

    def _observed(self, ledger: Ledger) -> dict[str, ObservedJob]:
        observed = {}
        for r in ledger.reservations:
            cj = self.jobs.get(r.uid)
            observed[r.uid] = (
                ObservedJob.gone()
                if cj is None
                else ObservedJob(terminal=cj.terminal, suspended=cj.suspended, requeue_count=cj.requeue_count)
            )
        return observed

    def _queued(self) -> list[QueuedJob]:
        return [
            QueuedJob(
                **{**cj.job.__dict__, "requeue_count": cj.requeue_count, "not_before": cj.not_before},
            )
            for cj in self.jobs.values()
            if cj.suspended and not cj.terminal
        ]

    @rule(gpus=st.integers(min_value=0, max_value=6), user=st.sampled_from(USERS[:3]))
    def submit(self, gpus: int, user: str) -> None:
        self._tick()
        self.serial += 1
        uid = f"uid{self.serial}"
        job = QueuedJob(name=f"j{self.serial}", group="a", user=user, gpus=gpus, queued_at=self.now, uid=uid)
        self.jobs[uid] = ClusterJob(job)

    @rule(
        crash=st.sampled_from(["none", "before-cas", "after-cas", "mid-unsuspend"]), seed=st.integers(0, 99)
    )
    def admission_pass(self, crash: str, seed: int) -> None:
        self._tick()
        ledger = decode("a", self.data)
        plan = plan_admission(self.POLICY, ledger, self._queued(), self._observed(ledger), self.now)
        if crash == "before-cas":
            self.clean = False
            return
        if plan.ledger_changed:
            self.data = encode(plan.ledger)
        for d in plan.fail:
            self.jobs[d.job.uid].terminal = True
        targets = list(plan.unsuspend)
        if crash == "after-cas":
            self.clean = False
            return
        if crash == "mid-unsuspend":
            self.clean = False
            targets = targets[: random.Random(seed).randint(0, len(targets))]
        for r in targets:
            self.jobs[r.uid].suspended = False
        if crash == "none":
            self.clean = True

    def _running(self) -> list[ClusterJob]:
        return [cj for cj in self.jobs.values() if not cj.suspended and not cj.terminal]

    @precondition(lambda self: any(not cj.suspended and not cj.terminal for cj in self.jobs.values()))
    @rule(pick=st.integers(0, 99), release=st.booleans())
    def job_finishes(self, pick: int, release: bool) -> None:
        self._tick()
        running = self._running()
        cj = running[pick % len(running)]
        cj.terminal = True
        if release:
            self.data = encode(without(decode("a", self.data), cj.job.uid))
        else:
            self.clean = False

    @precondition(lambda self: any(not cj.terminal for cj in self.jobs.values()))
    @rule(pick=st.integers(0, 99))
    def job_deleted(self, pick: int) -> None:
        self._tick()
        alive = [uid for uid, cj in self.jobs.items() if not cj.terminal]
        del self.jobs[alive[pick % len(alive)]]
        self.clean = False

    @precondition(lambda self: any(not cj.suspended and not cj.terminal for cj in self.jobs.values()))
    @rule(pick=st.integers(0, 99), release=st.booleans())
    def stuck_start_requeued(self, pick: int, release: bool) -> None:
        self._tick()
        running = self._running()
        cj = running[pick % len(running)]
        outcome = requeue_decision(cj.requeue_count, self.now, self.POLICY.requeue)
        # One patch: suspend and record the requeue together, then release.
        if isinstance(outcome, Requeue):
            cj.suspended, cj.requeue_count, cj.not_before = True, outcome.requeue_count, outcome.not_before
        else:
            cj.terminal = True
        if release:
            self.data = encode(without(decode("a", self.data), cj.job.uid))
        else:
            self.clean = False

    @invariant()
    def no_over_admission(self) -> None:
        ledger = decode("a", self.data)
        held = {(r.uid, r.requeue_count) for r in ledger.reservations}
        for cj in self._running():
            assert (cj.job.uid, cj.requeue_count) in held, f"{cj.job.name} runs without a reservation"
        quota = self.POLICY.groups["a"]
        assert ledger.used_gpus <= quota.gpus
        per_user = Counter()
        jobs_per_user = Counter()
        for r in ledger.reservations:
            per_user[r.user] += r.gpus
            jobs_per_user[r.user] += 1
        for user, gpus in per_user.items():
            assert gpus <= quota.user_limit(user)
            assert jobs_per_user[user] <= quota.max_running_jobs_per_user

    @invariant()
    def no_leak_after_a_clean_pass(self) -> None:
        if not self.clean:
            return
        for r in decode("a", self.data).reservations:
            cj = self.jobs.get(r.uid)
            assert cj is not None and not cj.terminal and cj.requeue_count == r.requeue_count
            assert not cj.suspended, f"{r.job} holds a reservation but was never unsuspended"


AdmissionProtocol.TestCase.settings = settings(
    max_examples=examples(150), stateful_step_count=30, deadline=None
)
test_admission_protocol_survives_crashes = AdmissionProtocol.TestCase
