"""Leader election on a ``coordination.k8s.io/v1`` Lease: the rules, over plain data, with no I/O.

Two replicas of the admission controller must never both admit, so one Lease names the replica that
leads. The rules are client-go's (kubernetes v1.36.3, ``staging/src/k8s.io/client-go/tools/
leaderelection/leaderelection.go``: ``tryAcquireOrRenew``, ``renew``, ``release``, ``isLeaseValid``;
``resourcelock/leaselock.go``: the Lease's spec as the election record), the ones Kueue's manager runs
through controller-runtime. :mod:`airflow_jobs_plugin.controller.leader` sends what they decide.

1. The Lease's spec is the record: ``holderIdentity`` (``""``: nobody), ``leaseDurationSeconds``,
   ``acquireTime``, ``renewTime``, ``leaseTransitions`` (``LeaderElectionRecordToLeaseSpec``). Its times
   are MicroTime, RFC 3339 in UTC with exactly six fractional digits: the only form the API server
   parses (k8s.io/apimachinery v0.36.3 ``pkg/apis/meta/v1/micro_time.go``, layout ``RFC3339Micro``).
2. Expiry is judged on this candidate's own clock, never on the ``renewTime`` another machine's clock
   wrote: a record stays valid for its ``leaseDurationSeconds`` from the moment this candidate last saw
   it change (client-go's ``observedTime``). Skew between the machines' clocks does not matter; only
   their rates must agree, within ``lease_duration / renew_deadline``.
3. What to do with the Lease as read (:func:`decide`; ``tryAcquireOrRenew`` after its fast path), the
   first match wins:

   a. there is none: create it naming this candidate, ``leaseTransitions`` 0 (:class:`Acquire`);
   b. this candidate leads, and the Lease names another holder or nobody: leadership is lost at once
      (:class:`Lost`). Someone else may have led since, so what this candidate knows is stale;
   c. it names another holder and is valid on this clock: wait until it would expire (:class:`Wait`);
   d. it names this candidate: renew it, keeping ``acquireTime`` and ``leaseTransitions``
      (:class:`Renew`);
   e. otherwise (nobody holds it, or its holder's term ran out on this clock): take it, with
      ``acquireTime`` now and one more ``leaseTransitions`` (:class:`Acquire`).

   Every write is a compare-and-swap on the ``resourceVersion`` read (client-go's ``Update``): of two
   candidates that both decide to take it, one gets 409 and reads it again.
4. The leader renews without reading while its own record is valid on its clock (:func:`fast_renewal`,
   ``tryAcquireOrRenew``'s step 1); a 409 there sends it to the read of rule 3.
5. A leader renews every ``retry_period``; a renewal round that cannot succeed within ``renew_deadline``
   (API errors, a lost race) ends its leadership (:class:`RenewalRound`; ``renew``'s
   ``PollUntilContextTimeout``). Others wait ``lease_duration`` from its last renewal, so it has stopped
   before anyone else can start.
6. On shutdown the leader releases the Lease (client-go's ``ReleaseOnCancel``, :func:`release`):
   ``holderIdentity`` ``""``, ``leaseDurationSeconds`` 1, so a standby takes it at its next attempt
   instead of waiting for it to expire.

Where this is stricter than client-go, each for the same reason, no two leaders at any instant:
rule 3b (client-go keeps leading until its renew deadline even after reading another holder, and takes
over a released Lease without stopping); :func:`release` only when the Lease just read still names this
candidate (client-go checks its older observation, and could overwrite a holder that took over since);
a change of record is told by every field as written, microseconds included (client-go compares its
record marshalled with ``metav1.Time``, in whole seconds, so with sub-second retry periods a standby
may miss a renewal and take over up to a second early); and :class:`Timings` wants ``lease_duration``
greater than ``renew_deadline + retry_period`` (client-go only greater than ``renew_deadline``, which
leaves a leader that starts a failing round just before its term ends leading after it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_jobs_plugin.cluster.objects import as_int, dig, parse_time, rfc3339
from airflow_jobs_plugin.cluster.resources import LEASES

# client-go's JitterFactor: a candidate's attempts are retry_period apart, stretched by up to 1.2 times
# that again at random (wait.JitterUntil), so candidates started together do not ask in step.
JITTER_FACTOR = 1.2
# What a release writes as the term (client-go ``release``): one second, in case a client reads it as
# still held; holderIdentity "" already lets every candidate take it at once.
RELEASED_DURATION_SECONDS = 1


@dataclass(frozen=True)
class Timings:
    """How long a term lasts, how long a leader keeps trying to renew it, how often anyone tries.

    client-go's ``LeaderElectionConfig`` and its defaults (15 s, 10 s, 2 s). ``ValueError`` names every
    value that breaks a rule, with the fix.
    """

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        problems = timing_problems(self.lease_duration, self.renew_deadline, self.retry_period)
        if problems:
            raise ValueError("leader election timings: " + "; ".join(problems))

    @property
    def lease_seconds(self) -> int:
        """``spec.leaseDurationSeconds`` as written (the field is an integer)."""
        return int(self.lease_duration)


def timing_problems(lease_duration: float, renew_deadline: float, retry_period: float) -> list[str]:
    """Why these timings cannot elect one leader at a time (empty: they can)."""
    problems = []
    if lease_duration < 1 or lease_duration != int(lease_duration):
        problems.append(
            f"lease_duration must be a whole number of seconds, at least 1, got {lease_duration!r}: the "
            "Lease holds it as spec.leaseDurationSeconds, an integer, and a fraction cut off there would "
            "let others take the Lease before this leader stops"
        )
    if renew_deadline <= 0:
        problems.append(f"renew_deadline must be greater than 0 seconds, got {renew_deadline!r}")
    if retry_period <= 0:
        problems.append(f"retry_period must be greater than 0 seconds, got {retry_period!r}")
    if problems:
        return problems
    if renew_deadline <= JITTER_FACTOR * retry_period:
        problems.append(
            f"renew_deadline ({renew_deadline:g} s) must be greater than {JITTER_FACTOR} x retry_period "
            f"({JITTER_FACTOR * retry_period:g} s), so a leader tries more than once before it gives up: "
            "raise renew_deadline or lower retry_period"
        )
    if lease_duration <= renew_deadline + retry_period:
        problems.append(
            f"lease_duration ({lease_duration:g} s) must be greater than renew_deadline + retry_period "
            f"({renew_deadline + retry_period:g} s): a leader that cannot renew keeps leading for up to "
            "that long after its last renewal, and others take the Lease lease_duration after it; "
            "raise lease_duration or lower the others"
        )
    return problems


@dataclass(frozen=True)
class Moment:
    """One reading of this candidate's clocks: ``wall`` is written into the Lease (acquireTime,
    renewTime) for people to read; ``tick``, a monotonic clock in seconds, is what every judgement of
    time uses (rule 2)."""

    wall: datetime
    tick: float


@dataclass(frozen=True)
class LeaseRecord:
    """A Lease's spec: who holds it, for how long, since when (client-go's ``LeaderElectionRecord``).

    ``strategy`` and ``preferredHolder`` belong to coordinated leader election (alpha); they are read so
    a change of them counts as a change of record, and a write of this candidate's drops them, as
    client-go's non-coordinated election does.
    """

    holder: str = ""
    duration_seconds: int = 0
    acquire_time: datetime | None = None
    renew_time: datetime | None = None
    transitions: int = 0
    strategy: str = ""
    preferred_holder: str = ""

    def spec(self) -> dict[str, Any]:
        """The Lease's ``spec`` for this record, times as MicroTime (rule 1)."""
        spec: dict[str, Any] = {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.duration_seconds,
            "leaseTransitions": self.transitions,
        }
        if self.acquire_time is not None:
            spec["acquireTime"] = rfc3339(self.acquire_time)
        if self.renew_time is not None:
            spec["renewTime"] = rfc3339(self.renew_time)
        if self.strategy:
            spec["strategy"] = self.strategy
        if self.preferred_holder:
            spec["preferredHolder"] = self.preferred_holder
        return spec


def record_of(lease: Mapping[str, Any] | None) -> LeaseRecord | None:
    """The record a Lease object holds (``None``: no Lease). Absent fields read as client-go reads a
    nil pointer: empty, zero."""
    if lease is None:
        return None

    def text(field: str) -> str:
        value = dig(lease, "spec", field)
        return value if isinstance(value, str) else ""

    return LeaseRecord(
        holder=text("holderIdentity"),
        duration_seconds=as_int(dig(lease, "spec", "leaseDurationSeconds"), 0) or 0,
        acquire_time=parse_time(dig(lease, "spec", "acquireTime")),
        renew_time=parse_time(dig(lease, "spec", "renewTime")),
        transitions=as_int(dig(lease, "spec", "leaseTransitions"), 0) or 0,
        strategy=text("strategy"),
        preferred_holder=text("preferredHolder"),
    )


@dataclass(frozen=True)
class Observation:
    """What this candidate knows of the Lease (client-go's ``observedRecord``, ``observedRawRecord``,
    ``observedTime``): ``record``, the one it last wrote or saw change; ``seen``, the one it last read,
    to tell the next read's change; ``at``, the tick ``record`` was set, from which it stays valid."""

    record: LeaseRecord
    seen: LeaseRecord | None
    at: float

    def valid_until(self) -> float:
        """The tick ``record``'s term ends on this candidate's clock (``isLeaseValid``)."""
        return self.at + self.record.duration_seconds


@dataclass(frozen=True)
class Acquire:
    """Write ``record`` to become the holder: create the Lease (``create``) or take it over."""

    record: LeaseRecord
    create: bool


@dataclass(frozen=True)
class Renew:
    """Write ``record``: this candidate holds the Lease and extends its term."""

    record: LeaseRecord


@dataclass(frozen=True)
class Wait:
    """``holder`` holds the Lease; unless it renews, its term ends at tick ``until`` on this clock."""

    holder: str
    until: float


@dataclass(frozen=True)
class Lost:
    """This candidate led and no longer may: ``why``, and who holds the Lease now (``""``: nobody)."""

    holder: str
    why: str


Step = Acquire | Renew | Wait | Lost


@dataclass(frozen=True)
class Decision:
    """What to do with the Lease as read, and what this candidate knows after reading it."""

    step: Step
    memory: Observation | None


def _own(
    identity: str, timings: Timings, now: Moment, acquired: datetime | None, transitions: int
) -> LeaseRecord:
    return LeaseRecord(
        holder=identity,
        duration_seconds=timings.lease_seconds,
        acquire_time=acquired,
        renew_time=now.wall,
        transitions=transitions,
    )


def fast_renewal(
    memory: Observation | None, identity: str, now: Moment, timings: Timings
) -> LeaseRecord | None:
    """The record the holder writes without reading first (rule 4), onto the Lease it last read or
    wrote; ``None`` when it is not the holder or its term ended on its own clock."""
    if memory is None or memory.record.holder != identity or memory.valid_until() <= now.tick:
        return None
    return _own(identity, timings, now, memory.record.acquire_time, memory.record.transitions)


def decide(
    lease: Mapping[str, Any] | None,
    memory: Observation | None,
    identity: str,
    now: Moment,
    read_at: float,
    timings: Timings,
    *,
    leading: bool,
) -> Decision:
    """Rule 3: what this candidate does with ``lease`` as just read (``None``: there is none).

    ``now`` is taken before the read (its wall time is what a write records, its tick what validity is
    judged at, as client-go takes ``now`` once per attempt); ``read_at`` is the tick the answer came, from
    which a record seen to change stays valid.
    """
    read = record_of(lease)
    if read is None:
        return Decision(Acquire(_own(identity, timings, now, now.wall, 0), create=True), memory)
    if memory is None or memory.seen != read:
        memory = Observation(read, read, read_at)
    if leading and read.holder != identity:
        why = f"the Lease names {read.holder!r} now" if read.holder else "the Lease was released"
        return Decision(Lost(read.holder, why), memory)
    if read.holder and read.holder != identity and memory.valid_until() > now.tick:
        return Decision(Wait(read.holder, memory.valid_until()), memory)
    if read.holder == identity:
        return Decision(Renew(_own(identity, timings, now, read.acquire_time, read.transitions)), memory)
    return Decision(
        Acquire(_own(identity, timings, now, now.wall, read.transitions + 1), create=False), memory
    )


def after_write(memory: Observation | None, record: LeaseRecord, at: float) -> Observation:
    """What this candidate knows once its write of ``record`` succeeded at tick ``at`` (client-go's
    ``setObservedRecord``): the record is its own, valid from ``at``."""
    return Observation(record, memory.seen if memory is not None else None, at)


def release(lease: Mapping[str, Any] | None, identity: str, now: Moment) -> LeaseRecord | None:
    """Rule 6: the record that gives the Lease up, or ``None`` when the Lease just read does not name
    this candidate (nothing of its own to give up; someone else's is never touched)."""
    read = record_of(lease)
    if read is None or read.holder != identity:
        return None
    return LeaseRecord(
        holder="",
        duration_seconds=RELEASED_DURATION_SECONDS,
        acquire_time=now.wall,
        renew_time=now.wall,
        transitions=read.transitions,
    )


def body(record: LeaseRecord, lease: Mapping[str, Any] | None, namespace: str, name: str) -> dict[str, Any]:
    """What to send: a new Lease holding ``record`` when ``lease`` is ``None``, else ``lease`` as read
    with its spec replaced (its ``metadata.resourceVersion`` makes the PUT a compare-and-swap)."""
    if lease is None:
        return {
            "apiVersion": LEASES.api_version,
            "kind": LEASES.kind,
            "metadata": {"name": name, "namespace": namespace},
            "spec": record.spec(),
        }
    return {**lease, "apiVersion": LEASES.api_version, "kind": LEASES.kind, "spec": record.spec()}


@dataclass(frozen=True)
class RenewalRound:
    """One round of renewing (rule 5; ``renew``'s ``PollUntilContextTimeout``): an attempt at ``started``,
    again every ``retry_period`` after the last one began, none at or past ``started + renew_deadline``,
    where an attempt still under way is abandoned."""

    started: float

    def deadline(self, timings: Timings) -> float:
        return self.started + timings.renew_deadline

    def next_attempt(self, last_started: float, timings: Timings) -> float | None:
        """The tick of the next attempt after one that began at ``last_started`` failed; ``None``: none
        fits before the deadline, so leadership is lost now, not at the deadline."""
        due = last_started + timings.retry_period
        return due if due < self.deadline(timings) else None


def campaign_delay(waiting: Wait | None, now: float, timings: Timings, draw: float) -> float:
    """Seconds until a candidate that does not hold the Lease tries again: ``retry_period`` stretched by
    ``draw`` (0 to 1) times ``JITTER_FACTOR`` (client-go's ``wait.Jitter``), and no later than the tick
    the holder's term ends on this clock, so a standby takes over as soon as the rules allow."""
    delay = timings.retry_period * (1.0 + JITTER_FACTOR * min(max(draw, 0.0), 1.0))
    if waiting is not None:
        delay = min(delay, waiting.until - now)
    return max(delay, 0.0)
