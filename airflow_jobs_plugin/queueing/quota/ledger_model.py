"""The reservation ledger as data: its ConfigMap encoding and the pure steps of an admission pass.

Each group has one ledger ConfigMap whose ``data`` holds one entry per admitted job (key
``<namespace>.<job>``, value a small JSON object), so ``kubectl get configmap -o yaml`` shows who holds
what. The cluster I/O around it (read, compare-and-swap on ``resourceVersion``, unsuspend) lives in the
shell; everything here is pure, so every step of the protocol in ``docs/quota.md`` can be tested alone.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from enum import Enum
from typing import Any

from airflow_jobs_plugin.cluster.objects import Meta, parse_rfc3339
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.jobview import JobView
from airflow_jobs_plugin.jobs.kinds.charge import job_charge
from airflow_jobs_plugin.queueing import queue_clock
from airflow_jobs_plugin.queueing.quota.fair_share import (
    Ordering,
    UsageHistory,
    recent_by_group,
    with_released,
)
from airflow_jobs_plugin.queueing.quota.model import (
    Decision,
    QueuedJob,
    QuotaPolicy,
    Reservation,
    Verdict,
)
from airflow_jobs_plugin.queueing.quota.policy import decide
from airflow_jobs_plugin.queueing.quota.preemption import Placement, preemptor_key
from airflow_jobs_plugin.queueing.quota.priority_classes import named_by_job

LEDGER_FORMAT = 1
LEDGER_NAME_PREFIX = "airflow-jobs-quota-"
_REQUIRED = ("job", "user", "gpus", "uid", "admitted_at")
# The data key of a fair-share group's usage history. Entry keys are "<namespace>.<job>", DNS-1123
# names that never start with "_", so it cannot collide with one.
USAGE_KEY = "_usage"


def ledger_name(group: str) -> str:
    """Name of the ledger ConfigMap of a group, or of a cohort (``QuotaPolicy.ledger_of``): the names
    are DNS-1123 labels, so this is valid, and the policy keeps cohort and group names apart."""
    return f"{LEDGER_NAME_PREFIX}{group}"


@dataclass(frozen=True)
class UnreadableEntry:
    """A ledger entry this version cannot read: not counted, reported, and written back untouched.

    Kept verbatim because it may come from a newer release sharing the cluster: dropping it could free
    GPUs another process still relies on. An admin deletes it with ``kubectl edit`` once understood.
    """

    key: str
    raw: str
    problem: str


@dataclass(frozen=True)
class Ledger:
    """One group's reservations (sorted by admission time, then uid) plus entries it could not read."""

    group: str
    reservations: tuple[Reservation, ...] = ()
    unreadable: tuple[UnreadableEntry, ...] = ()
    # Decayed GPU-seconds per user of released reservations (fair_share groups only).
    usage: UsageHistory = UsageHistory()

    def __post_init__(self) -> None:
        object.__setattr__(self, "reservations", _canonical(self.reservations))

    @property
    def used_gpus(self) -> int:
        return sum(r.gpus for r in self.reservations)

    def find(self, uid: str) -> Reservation | None:
        """The reservation of the job with this uid, if any."""
        return next((r for r in self.reservations if r.uid == uid), None)

    @property
    def problems(self) -> tuple[str, ...]:
        """One line per unreadable entry, for a log line or an event."""
        return tuple(f"{ledger_name(self.group)} data.{e.key}: {e.problem}" for e in self.unreadable)


def _canonical(reservations: Iterable[Reservation]) -> tuple[Reservation, ...]:
    return tuple(sorted(reservations, key=lambda r: (r.admitted_at, r.uid)))


def _rfc3339(value: datetime) -> str:
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def entry_key(reservation: Reservation) -> str:
    """The ConfigMap data key of a reservation: ``<namespace>.<job>`` (just ``<job>`` without namespace).

    Namespaces and job names are DNS-1123 labels, neither contains a dot, so the key is unambiguous and
    a valid ConfigMap key.
    """
    return f"{reservation.namespace}.{reservation.job}" if reservation.namespace else reservation.job


def encode(ledger: Ledger) -> dict[str, str]:
    """The ConfigMap ``data`` for ``ledger``: one human-readable JSON value per reservation."""
    data: dict[str, str] = {}
    for entry in ledger.unreadable:
        data[entry.key] = entry.raw
    if ledger.usage.at is not None:
        data[USAGE_KEY] = json.dumps(
            {
                "v": LEDGER_FORMAT,
                "at": _rfc3339(ledger.usage.at),
                "half_life_seconds": ledger.usage.half_life.total_seconds(),
                "gpu_seconds": {user: round(value, 3) for user, value in ledger.usage.gpu_seconds.items()},
            },
            sort_keys=True,
        )
    for r in ledger.reservations:
        key = entry_key(r)
        # Two jobs can share a name when one was deleted and recreated before a reconcile noticed.
        if key in data:
            key = f"{key}.{r.uid}"
        value = {
            "v": LEDGER_FORMAT,
            "job": r.job,
            "namespace": r.namespace,
            "group": r.group,
            "user": r.user,
            "gpus": r.gpus,
            "uid": r.uid,
            "admitted_at": _rfc3339(r.admitted_at),
            "requeue_count": r.requeue_count,
        }
        if r.kueue:
            value["kueue"] = True
        if r.resource != labels.GPU_RESOURCE:
            value["resource"] = r.resource
        if r.priority is not None:
            value["priority"] = r.priority
        if r.preempted_by is not None:
            value["preempted_by"] = r.preempted_by
        data[key] = json.dumps(value, sort_keys=True)
    return data


def _decode_entry(group: str, raw: object, members: Collection[str] | None = ()) -> Reservation:
    if not isinstance(raw, str):
        raise ValueError(f"value must be a JSON string, got {type(raw).__name__}")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    if value.get("v") != LEDGER_FORMAT:
        raise ValueError(f"unknown entry format v={value.get('v')!r} (this version reads v={LEDGER_FORMAT})")
    missing = [k for k in _REQUIRED if k not in value]
    if missing:
        raise ValueError(f"missing field(s): {', '.join(missing)}")
    owner = value.get("group", group)
    if members is not None and owner != group and owner not in members:
        raise ValueError(f"entry belongs to group {owner!r}, not {group!r}")
    for name in ("job", "user", "uid"):
        if not isinstance(value[name], str) or not value[name]:
            raise ValueError(f"{name} must be a non-empty string, got {value[name]!r}")
    namespace = value.get("namespace", "")
    if not isinstance(namespace, str):
        raise ValueError(f"namespace must be a string, got {namespace!r}")
    resource = value.get("resource", labels.GPU_RESOURCE)
    if not isinstance(resource, str) or not resource:
        raise ValueError(f"resource must be a resource name, got {resource!r}")
    for name, default in (("gpus", None), ("requeue_count", 0)):
        number = value.get(name, default)
        if isinstance(number, bool) or not isinstance(number, int) or number < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {number!r}")
    priority = value.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        raise ValueError(f"priority must be an integer, got {priority!r}")
    preempted_by = value.get("preempted_by")
    if preempted_by is not None and (not isinstance(preempted_by, str) or not preempted_by):
        raise ValueError(f"preempted_by must be a non-empty string, got {preempted_by!r}")
    return Reservation(
        job=value["job"],
        group=owner,
        user=value["user"],
        gpus=value["gpus"],
        uid=value["uid"],
        admitted_at=parse_rfc3339(value["admitted_at"], "admitted_at"),
        namespace=namespace,
        requeue_count=value.get("requeue_count", 0),
        kueue=value.get("kueue") is True,
        resource=resource,
        priority=priority,
        preempted_by=preempted_by,
    )


def decode(group: str, data: Mapping[str, object] | None, members: Collection[str] | None = ()) -> Ledger:
    """Read a ledger ConfigMap's ``data``; never raises on bad entries. ``group`` names the ledger (a
    group, or a cohort whose ``members`` groups it holds; ``None``: whatever groups its entries name,
    for a reader that only shows them).

    An entry that cannot be read lands in :attr:`Ledger.unreadable` (see :attr:`Ledger.problems`). A
    second entry for a uid already read is dropped: the job holds one reservation, counting it twice
    would only strand GPUs.
    """
    reservations: dict[str, Reservation] = {}
    unreadable: list[UnreadableEntry] = []
    usage = UsageHistory()
    for key in sorted(data or {}):
        raw = (data or {})[key]
        if key == USAGE_KEY:
            try:
                usage = _decode_usage(raw)
            except (ValueError, TypeError) as exc:
                # Unreadable history only makes the order less fair for a while: start afresh.
                unreadable.append(UnreadableEntry(key=key, raw=str(raw), problem=str(exc)))
            continue
        try:
            reservation = _decode_entry(group, raw, members)
        except (ValueError, TypeError, OverflowError) as exc:
            text = raw if isinstance(raw, str) else json.dumps(raw, default=str)
            unreadable.append(UnreadableEntry(key=str(key), raw=text, problem=str(exc)))
            continue
        reservations.setdefault(reservation.uid, reservation)
    return Ledger(
        group=group, reservations=tuple(reservations.values()), unreadable=tuple(unreadable), usage=usage
    )


def _decode_usage(raw: object) -> UsageHistory:
    value = json.loads(raw) if isinstance(raw, str) else None
    if not isinstance(value, dict) or value.get("v") != LEDGER_FORMAT:
        raise ValueError(f"not a usage history of format v={LEDGER_FORMAT}")
    seconds = value.get("gpu_seconds")
    if not isinstance(seconds, dict) or not all(
        isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
        for k, v in seconds.items()
    ):
        raise ValueError("gpu_seconds must map user names to non-negative numbers")
    half_life = value.get("half_life_seconds")
    if not isinstance(half_life, (int, float)) or isinstance(half_life, bool) or half_life <= 0:
        raise ValueError(f"half_life_seconds must be a positive number, got {half_life!r}")
    return UsageHistory(
        at=parse_rfc3339(value.get("at"), "at"),
        gpu_seconds={k: float(v) for k, v in seconds.items()},
        half_life=timedelta(seconds=half_life),
    )


# --------------------------------------------------------------------------------------------------
# Reading jobs
# --------------------------------------------------------------------------------------------------


def place_in_second(created: datetime, claimed: datetime) -> datetime:
    """The job's place in the queue: inside the whole second of its ``creationTimestamp``, where the
    submitter's own ``claimed`` queued-at orders it among the jobs created in that second.

    The claim is mapped into the second by a strictly increasing function (an arctangent), so claims
    keep their order however far they sit from the creation -- jobs a client built a while before
    creating them one after the other still queue in that order -- and no claim, however early, moves a
    job ahead of one created in an earlier second."""
    second = created.replace(microsecond=0)
    offset = (claimed - second).total_seconds()
    fraction = 0.5 + math.atan(offset) / math.pi  # in (0, 1)
    return second + timedelta(microseconds=min(999_999, int(fraction * 1_000_000)))


def _annotation_int(annotations: Mapping[str, str], key: str, default: int) -> int:
    raw = annotations.get(key)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"annotation {key} must be an integer, got {raw!r}") from None


def _rfc3339_or_none(raw: object, what: str) -> datetime | None:
    if not raw:
        return None
    try:
        parsed = datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{what} must be an RFC 3339 time, got {raw!r}") from None
    # The API server always writes UTC; a bare time from a hand edit is read the same way.
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def queued_job_from_metadata(metadata: Mapping[str, Any]) -> QueuedJob:
    """A :class:`QueuedJob` from a Job's or MPIJob's ``metadata`` (labels and annotations of labels.py).

    Group and user come from the exact-name annotations, falling back to the (slug) labels.
    The enqueue time falls back to ``creationTimestamp`` when the queued-at annotation is missing.
    Raises ValueError naming the missing or malformed key.
    """
    annotations = metadata.get("annotations") or {}
    name = metadata.get("name")
    uid = metadata.get("uid")
    if not name or not uid:
        raise ValueError("metadata needs name and uid")
    # The annotations carry the exact names the policy is keyed by; labels only hold sanitized slugs.
    view = JobView({"metadata": metadata})
    group, user = view.group, view.user
    if not group:
        raise ValueError(
            f"job {name} has neither a {labels.GROUP_NAME} annotation nor a {labels.GROUP} label"
        )
    if not user:
        raise ValueError(f"job {name} has neither a {labels.USER_NAME} annotation nor a {labels.USER} label")
    queued_at = _rfc3339_or_none(
        annotations.get(labels.QUEUED_AT), f"annotation {labels.QUEUED_AT}"
    ) or _rfc3339_or_none(metadata.get("creationTimestamp"), "metadata.creationTimestamp")
    if queued_at is None:
        raise ValueError(f"job {name} has neither a {labels.QUEUED_AT} annotation nor a creationTimestamp")
    return QueuedJob(
        name=name,
        namespace=metadata.get("namespace") or "",
        uid=uid,
        group=group,
        user=user,
        gpus=_annotation_int(annotations, labels.GPUS, 0),
        priority=_annotation_int(annotations, labels.PRIORITY, 0),
        queued_at=queued_at,
        not_before=_rfc3339_or_none(
            annotations.get(labels.REQUEUE_NOT_BEFORE), f"annotation {labels.REQUEUE_NOT_BEFORE}"
        ),
        requeue_count=_annotation_int(annotations, labels.REQUEUE_COUNT, 0),
        stopped_at=_rfc3339_or_none(annotations.get(labels.STOPPED_AT), f"annotation {labels.STOPPED_AT}"),
        waited_before=queue_clock.waited_before(annotations),
        wait_since=queue_clock.wait_since(annotations),
        kueue_queue=annotations.get(labels.KUEUE_HANDOFF) or None,
        # A flavor is a quota line of its own (queueing/quota/flavors.py); else the device, else whole GPUs.
        resource=annotations.get(labels.GPU_FLAVOR)
        or annotations.get(labels.GPU_DEVICE)
        or labels.GPU_RESOURCE,
    )


def queued_job_of(job: Mapping[str, Any]) -> QueuedJob:
    """The job as the pool charges it: who and how it waits from its metadata, what it holds from its
    spec (jobs/kinds/charge.py), never from annotations a DAG could write.

    Its GPUs, device and pod count come from its pod templates; its place in the queue from
    ``creationTimestamp``, which only the API server writes (a stop or a requeue suspends the same
    object, so it keeps its place). That time has whole seconds (metav1.Time's RFC 3339 encoding,
    k8s.io/apimachinery/pkg/apis/meta/v1/time.go), so the submitter's own finer queued-at orders jobs
    created in the same second (:func:`place_in_second`): no claimed time moves a job ahead of those
    created in an earlier second. Raises ValueError naming what is missing, or
    :class:`~airflow_jobs_plugin.jobs.kinds.charge.ChargeRefused` naming what cannot be charged.
    """
    meta = Meta(job)
    declared = queued_job_from_metadata(meta.fields)
    charge = job_charge(job)
    # The raw value, not Meta.creation_timestamp: a malformed one must fail here, naming the field.
    created = _rfc3339_or_none(meta.fields.get("creationTimestamp"), "metadata.creationTimestamp")
    flavor = meta.annotations.get(labels.GPU_FLAVOR)
    queued_at = declared.queued_at
    if created is not None:
        queued_at = place_in_second(created, queued_at)
    return replace(
        declared,
        gpus=charge.gpus,
        queued_at=queued_at,
        # A flavor is a quota line of its own (queueing/quota/flavors.py), checked against the pods' nodeSelector
        # by the pass, which holds the policy's flavors.
        resource=flavor or charge.resource,
        priority_classes=named_by_job(job),
    )


def observed_job(
    metadata: Mapping[str, Any] | None,
    *,
    suspended: bool,
    terminal: bool,
    holding_pods: bool = False,
    released: bool = False,
) -> ObservedJob:
    """What reconcile needs from a job: ``None`` metadata means the job was not found (404)."""
    if metadata is None:
        return ObservedJob.gone()
    annotations = metadata.get("annotations") or {}
    return ObservedJob(
        exists=True,
        terminal=terminal or JobView({"metadata": metadata}).verdict is not None,
        suspended=suspended,
        requeue_count=_annotation_int(annotations, labels.REQUEUE_COUNT, 0),
        stopped=bool(annotations.get(labels.STOPPED_AT)),
        holding_pods=holding_pods,
        released=released,
        deleting=bool(metadata.get("deletionTimestamp")),
    )


# --------------------------------------------------------------------------------------------------
# Reconcile
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ObservedJob:
    """What the cluster says about a reserved job right now.

    ``exists`` is false once the object is gone (a job being deleted still exists: its pods may still
    hold GPUs). ``terminal`` means it finished (Complete or Failed condition, or a product verdict).
    ``requeue_count`` is read from the job's annotation: larger than the reservation's means the job was
    requeued after that reservation was made. ``stopped``: a user stopped it (labels.STOPPED_AT).
    ``holding_pods``: pods of it are still live, so a job that ended or was stopped still holds its
    GPUs (False where its pods are not known). ``released``: the trigger that followed it found it over
    and let its reservation go, whatever its pods still hold (pods stranded on a lost node would hold
    the quota for as long as the node is away, docs/reliability.md).
    """

    exists: bool = True
    terminal: bool = False
    suspended: bool = False
    requeue_count: int = 0
    stopped: bool = False
    holding_pods: bool = False
    released: bool = False
    # Being deleted (``deletionTimestamp``): a foreground deletion keeps the job until its pods are gone.
    deleting: bool = False

    @classmethod
    def gone(cls, holding_pods: bool = False) -> ObservedJob:
        """A job deleted already; ``holding_pods``: pods of it still run or stop on a node (a background
        deletion removes the job first and its pods after, each with its grace period)."""
        return cls(exists=False, holding_pods=holding_pods)


class DropReason(str, Enum):
    GONE = "JobGone"
    RELEASED = "JobReleased"
    FINISHED = "JobFinished"
    REQUEUED = "JobRequeued"
    STOPPED = "JobStopped"


@dataclass(frozen=True)
class Drop:
    """A reservation a reconcile removes, and why (for a log line or an event)."""

    reservation: Reservation
    reason: DropReason

    @property
    def message(self) -> str:
        r = self.reservation
        what = {
            DropReason.GONE: "no longer exists",
            DropReason.RELEASED: "is over (the admission controller saw it end)",
            DropReason.FINISHED: "has finished",
            DropReason.REQUEUED: "was requeued",
            DropReason.STOPPED: "was stopped by a user",
        }[self.reason]
        return f"released {r.gpus} GPU(s) of group {r.group} held by {entry_key(r)} (user {r.user}): the job {what}"


def reconcile_drops(ledger: Ledger, observed: Mapping[str, ObservedJob]) -> tuple[Drop, ...]:
    """The reservations whose jobs are gone, released, finished, stopped or requeued since their admission.

    ``observed`` maps job uid to what the cluster shows. A uid missing from it was not looked at and
    is kept: never free GPUs on a guess. A finished or stopped job whose pods are still live keeps its
    reservation until they are gone: its GPUs are not free yet.
    """
    drops = []
    for r in ledger.reservations:
        seen = observed.get(r.uid)
        if seen is None:
            continue
        if not seen.exists or (seen.deleting and seen.released):
            # A deleted job's GPUs are free only once its pods are gone: `kubectl delete job` removes the
            # job first and the garbage collector its pods after (each stopping within its grace).
            if seen.holding_pods:
                continue
            drops.append(Drop(r, DropReason.GONE))
        elif seen.released:
            drops.append(Drop(r, DropReason.RELEASED))
        elif (seen.terminal or seen.stopped) and seen.holding_pods:
            continue
        elif seen.terminal:
            drops.append(Drop(r, DropReason.FINISHED))
        elif seen.stopped:
            drops.append(Drop(r, DropReason.STOPPED))
        elif seen.requeue_count > r.requeue_count and not seen.holding_pods:
            # A requeued or preempted job's pods hold their GPUs until they are gone, as a stopped one's.
            drops.append(Drop(r, DropReason.REQUEUED))
    return tuple(drops)


def releasing(ledger: Ledger, observed: Mapping[str, ObservedJob]) -> frozenset[str]:
    """Uids of the reservations kept only until their jobs' pods are gone (the job ended, was stopped,
    requeued or preempted), or chosen as a preemption's victims: GPUs on their way back."""
    result = set()
    for r in ledger.reservations:
        seen = observed.get(r.uid)
        if r.preempted_by is not None or (
            seen is not None
            and seen.exists
            and (seen.terminal or seen.stopped or seen.requeue_count > r.requeue_count)
        ):
            result.add(r.uid)
    return frozenset(result)


# How a preemption mark (``Reservation.preempted_by``, stored in the ledger) says its preemptor took back
# GPUs its group had lent: ``<preemptor>, priority <p>, reclaiming for group <g>``.
_RECLAIMING = ", reclaiming for group "


def preemption_mark(preemptor: str, priority: int, *, reclaiming_for: str | None = None) -> str:
    """The ledger's record of who preempted a job (read back by :func:`reclaimed_for`)."""
    mark = f"{preemptor}, priority {priority}"
    return f"{mark}{_RECLAIMING}{reclaiming_for}" if reclaiming_for else mark


def reclaimed_for(mark: str) -> str | None:
    """The group a preemption mark reclaimed GPUs for, or ``None`` for a preemption within a group."""
    _, found, group = mark.partition(_RECLAIMING)
    return group if found else None


def with_preempted(ledger: Ledger, decisions: Iterable[Decision]) -> Ledger:
    """``ledger`` with the victims chosen in ``decisions`` marked with their preemptor.

    Marking them in the ledger, under its compare-and-swap, makes the choice once for every process: a
    pass that raced it re-reads the ledger and finds the victims chosen, instead of choosing others.
    """
    marks: dict[str, str] = {}
    for d in decisions:
        for victim in d.preempts:
            # A victim of another group: a cohort's owner taking back what it lent.
            reclaiming = d.job.group if victim.group != d.job.group else None
            marks.setdefault(
                victim.uid, preemption_mark(preemptor_key(d.job), d.job.priority, reclaiming_for=reclaiming)
            )
    if not marks:
        return ledger
    return replace(
        ledger,
        reservations=tuple(
            replace(r, preempted_by=marks[r.uid]) if r.uid in marks and r.preempted_by is None else r
            for r in ledger.reservations
        ),
    )


def pending_preemption(ledger: Ledger, observed: Mapping[str, ObservedJob]) -> tuple[Reservation, ...]:
    """Victims marked in the ledger whose jobs still run the attempt that was chosen: suspend them
    (again, if the pass that marked them stopped before it did)."""
    result = []
    for r in ledger.reservations:
        seen = observed.get(r.uid)
        if (
            r.preempted_by is not None
            and seen is not None
            and seen.exists
            and not seen.terminal
            and not seen.stopped
            and not seen.suspended
            and seen.requeue_count == r.requeue_count
        ):
            result.append(r)
    return tuple(result)


def reconcile(ledger: Ledger, observed: Mapping[str, ObservedJob]) -> Ledger:
    """``ledger`` without the reservations :func:`reconcile_drops` finds stale."""
    dropped = {d.reservation.uid for d in reconcile_drops(ledger, observed)}
    if not dropped:
        return ledger
    return replace(ledger, reservations=tuple(r for r in ledger.reservations if r.uid not in dropped))


# How long a reservation belongs to the pass that wrote it. That pass unsuspends its job right after
# its compare-and-swap; another process repeating the unsuspend meanwhile only races it into a 409.
UNSUSPEND_GRACE = timedelta(seconds=2)


def pending_unsuspend(
    ledger: Ledger,
    observed: Mapping[str, ObservedJob],
    now: datetime | None = None,
    grace: timedelta = timedelta(0),
) -> tuple[Reservation, ...]:
    """Reserved jobs of the current attempt still suspended ``grace`` after their admission: the pass
    that reserved them died before unsuspending (younger ones are still that pass's to unsuspend).

    Unsuspending them again is idempotent and cannot over-admit, since their GPUs are already counted.
    If they still never get scheduled, the schedule timeout requeues them, so nothing leaks.
    """
    result = []
    for r in ledger.reservations:
        seen = observed.get(r.uid)
        if (
            seen is not None
            and seen.exists
            and not seen.terminal
            and not seen.stopped
            and seen.suspended
            and seen.requeue_count == r.requeue_count
            and (now is None or r.admitted_at + grace <= now)
        ):
            result.append(r)
    return tuple(result)


def adopt(ledger: Ledger, running: Iterable[Reservation], members: Collection[str] = ()) -> Ledger:
    """Add reservations for unsuspended, unfinished jobs of the group the ledger does not know.

    A job runs without a reservation only if the ledger was lost (deleted ConfigMap, unreadable entry)
    or someone unsuspended a job by hand. Charging it keeps the quota honest; reconcile frees it when
    the job ends.
    """
    known = {r.uid for r in ledger.reservations}
    mine = {ledger.group, *members}
    added = [r for r in running if r.group in mine and r.uid not in known]
    unique = {r.uid: r for r in reversed(added)}
    if not unique:
        return ledger
    return replace(ledger, reservations=ledger.reservations + tuple(unique.values()))


# --------------------------------------------------------------------------------------------------
# Admit and release
# --------------------------------------------------------------------------------------------------


def with_admitted(
    ledger: Ledger, decisions: Iterable[Decision], now: datetime, members: Collection[str] = ()
) -> Ledger:
    """``ledger`` plus a reservation for every job admitted in ``decisions`` for its group.

    Idempotent: a job that already holds a reservation keeps its original one.
    """
    if now.tzinfo is None:
        raise ValueError(f"now must be timezone-aware, got naive {now.isoformat()}")
    known = {r.uid for r in ledger.reservations}
    mine = {ledger.group, *members}
    added = []
    for d in decisions:
        if d.verdict is Verdict.ADMIT and d.job.group in mine and d.job.uid not in known:
            known.add(d.job.uid)
            added.append(Reservation.for_job(d.job, now))
    if not added:
        return ledger
    return replace(ledger, reservations=ledger.reservations + tuple(added))


def without(ledger: Ledger, uid: str, now: datetime | None = None) -> Ledger:
    """``ledger`` without the reservation of job ``uid`` (release at the end of a job or on requeue).

    A group that keeps a usage history (fair_share) is charged, as of ``now``, what the reservation
    held, in the same write.
    """
    held = ledger.find(uid)
    if held is None:
        return ledger
    usage = ledger.usage
    if usage.at is not None and now is not None:
        usage = with_released(usage, (held,), now, usage.half_life)
    return replace(ledger, reservations=tuple(r for r in ledger.reservations if r.uid != uid), usage=usage)


# --------------------------------------------------------------------------------------------------
# One admission pass, planned
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AdmissionPlan:
    """What one admission pass for one group must write, in this order.

    1. if ``ledger_changed``: compare-and-swap ``encode(ledger)`` against the ``resourceVersion`` read
       (on 409: re-read everything and plan again);
    2. fail the jobs in ``fail`` (write the verdict annotation, then delete or stop them);
    3. unsuspend every job in ``unsuspend`` (idempotent) with the admitted-at annotation in the same patch;
    4. suspend every victim in ``preempt`` with its preemption recorded (idempotent, conditional on the
       attempt the ledger marked).
    """

    ledger: Ledger
    ledger_changed: bool
    decisions: tuple[Decision, ...]
    drops: tuple[Drop, ...]
    unsuspend: tuple[Reservation, ...]
    fail: tuple[Decision, ...]
    unsuspend_due: datetime | None = None  # when a reservation left to its own pass becomes an orphan
    preempt: tuple[Reservation, ...] = ()  # 4. suspend these victims and send them back to the queue


def plan_admission(
    policy: QuotaPolicy,
    ledger: Ledger,
    queued: Sequence[QueuedJob],
    observed: Mapping[str, ObservedJob],
    now: datetime,
    running: Iterable[Reservation] = (),
    unsuspend_grace: timedelta = timedelta(0),
    members: Collection[str] = (),
    placement: Placement | None = None,
) -> AdmissionPlan:
    """Reconcile, adopt, decide and admit for ``ledger.group``: the pure core of an admission pass.

    ``queued`` are the group's suspended, unfinished jobs (a reserved job still suspended may be among
    them); ``observed`` covers every job in the ledger; ``running`` are the group's unsuspended,
    unfinished jobs as reservations (for :func:`adopt`). A reservation an earlier pass made is
    unsuspended only once ``unsuspend_grace`` has passed since its admission (:func:`pending_unsuspend`);
    the ones this pass makes, at once. A cohort's ledger decides for all its ``members`` groups at once.
    ``placement`` lets a preemption choose victims by the nodes (queueing/quota/preemption.py).
    """
    mine = {ledger.group, *members}
    drops = reconcile_drops(ledger, observed)
    current = adopt(reconcile(ledger, observed), running, members)
    fair = [
        q
        for g in sorted(mine)
        if (q := policy.groups.get(g)) is not None and q.ordering is Ordering.FAIR_SHARE
    ]
    recent: dict[str, dict[str, float]] = {}
    if not fair and current.usage.at is not None:
        current = replace(current, usage=UsageHistory())  # the groups went back to FIFO: forget it
    if fair:
        # What a released reservation held moves into the history in the write that drops it. A
        # cohort's fair_share groups share one history (and one half-life, as the policy checks).
        half_life = fair[0].fair_share_half_life
        current = replace(
            current, usage=with_released(current.usage, (d.reservation for d in drops), now, half_life)
        )
        recent = recent_by_group(policy, {ledger.group: current.usage}, current.reservations, now, mine)
    decisions = tuple(
        decide(
            policy,
            [j for j in queued if j.group in mine],
            current.reservations,
            now,
            releasing(current, observed),
            recent,
            placement=placement,
        )
    )
    after = with_preempted(with_admitted(current, decisions, now, members), decisions)
    unsuspend = {r.uid: r for r in pending_unsuspend(after, observed, now, unsuspend_grace)}
    for d in decisions:
        if d.verdict is Verdict.ADMIT:
            reservation = after.find(d.job.uid)
            if reservation is not None and (
                current.find(d.job.uid) is None or reservation.admitted_at + unsuspend_grace <= now
            ):
                unsuspend.setdefault(reservation.uid, reservation)
    # Reservations left to the pass that made them: if still suspended after the grace, repair them.
    young = [r for r in pending_unsuspend(after, observed) if r.uid not in unsuspend]
    return AdmissionPlan(
        ledger=after,
        # The usage history alone never warrants a write: it rides along with a release.
        ledger_changed=after.reservations != ledger.reservations,
        decisions=decisions,
        drops=drops,
        unsuspend=_canonical(unsuspend.values()),
        fail=tuple(d for d in decisions if d.verdict.terminal),
        unsuspend_due=min((r.admitted_at + unsuspend_grace for r in young), default=None),
        preempt=pending_preemption(after, observed),
    )


def cas_retry_delay(attempt: int, jitter: float, base: timedelta = timedelta(milliseconds=50)) -> timedelta:
    """Delay before retrying a compare-and-swap that lost (409), attempt 1 first.

    ``jitter`` in [0, 1) comes from the caller's random source; the delay is drawn from
    [half, full] of an exponential step capped at 2 s, so racing passes spread out but never spin.
    """
    if attempt < 1:
        raise ValueError(f"attempt must be >= 1, got {attempt}")
    if not 0.0 <= jitter < 1.0:
        raise ValueError(f"jitter must be in [0, 1), got {jitter}")
    step = min(base * (2 ** min(attempt - 1, 10)), timedelta(seconds=2))
    return step * (0.5 + jitter / 2)
