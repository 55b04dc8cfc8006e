"""When an admitted job goes back to the queue, how long it waits there, and when it gives up.

An admitted job holds GPUs of its group's quota. If the cluster cannot place its pods (no node has the
free GPUs, a taint, a bad node selector), those GPUs are reserved for nothing while other jobs wait. So
a job whose pods are not all *scheduled* within ``schedule_timeout`` of its admission is suspended
again and re-enters the queue at its original position, after an exponential back-off so that a job
that cannot be placed does not flap. Only scheduling counts: a slow image pull happens after the pod is
placed, it proves the cluster found room, and it must never cost the job its reservation.

Pure functions over datetimes; every datetime is timezone-aware.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

DEFAULT_SCHEDULE_TIMEOUT = timedelta(minutes=3)
DEFAULT_REQUEUE_LIMIT = 3
DEFAULT_BACKOFF_BASE = timedelta(seconds=30)
DEFAULT_BACKOFF_CAP = timedelta(minutes=15)

OVER_REQUEUE_LIMIT = "OverRequeueLimit"
QUEUE_TIMEOUT = "QueueTimeout"


@dataclass(frozen=True)
class RequeueSettings:
    """The requeue and timeout knobs of a quota policy.

    ``requeue_limit`` is how many times a job may go back to the queue; the next stuck start fails it.
    ``queue_timeout`` of ``None`` lets a job wait in the queue forever.
    """

    schedule_timeout: timedelta = DEFAULT_SCHEDULE_TIMEOUT
    requeue_limit: int = DEFAULT_REQUEUE_LIMIT
    backoff_base: timedelta = DEFAULT_BACKOFF_BASE
    backoff_cap: timedelta = DEFAULT_BACKOFF_CAP
    queue_timeout: timedelta | None = None


@dataclass(frozen=True)
class Requeue:
    """Suspend the job again, release its reservation, let it compete again from ``not_before``."""

    requeue_count: int  # the job's count after this requeue: write it back on the job
    not_before: datetime
    backoff: timedelta
    message: str


@dataclass(frozen=True)
class RequeueLimitReached:
    """The job went back to the queue too often: fail it (reason ``OverRequeueLimit``)."""

    requeue_count: int
    message: str
    reason: str = OVER_REQUEUE_LIMIT


def _require_aware(**values: datetime | None) -> None:
    for name, value in values.items():
        if value is not None and value.tzinfo is None:
            raise ValueError(f"{name} must be timezone-aware, got naive {value.isoformat()}")


def schedule_deadline(
    admitted_at: datetime, schedule_timeout: timedelta = DEFAULT_SCHEDULE_TIMEOUT
) -> datetime:
    """When an admitted job must have all its pods scheduled (a trigger sleeps until then)."""
    _require_aware(admitted_at=admitted_at)
    return admitted_at + schedule_timeout


def requeue_backoff(
    count: int, base: timedelta = DEFAULT_BACKOFF_BASE, cap: timedelta = DEFAULT_BACKOFF_CAP
) -> timedelta:
    """How long the ``count``-th requeue (1 for the first) keeps a job out of admission.

    Doubles from ``base`` and never exceeds ``cap``: 30 s, 1 min, 2 min, ... 15 min by default.
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"requeue count must be an integer >= 1, got {count!r}")
    if base <= timedelta(0) or cap < base:
        raise ValueError(f"back-off needs 0 < base <= cap, got base={base}, cap={cap}")
    # Beyond 2**20 the cap has long been reached; bounding the exponent keeps the arithmetic small.
    delay = base * (2 ** min(count - 1, 20))
    return min(delay, cap)


def requeue_decision(
    requeue_count: int, now: datetime, settings: RequeueSettings = RequeueSettings()
) -> Requeue | RequeueLimitReached:
    """What to do with an admitted job whose schedule deadline passed.

    ``requeue_count`` is how many times the job was already requeued. With the default limit of 3 a
    job is requeued three times and fails on its fourth stuck start.
    """
    _require_aware(now=now)
    if requeue_count < 0:
        raise ValueError(f"requeue count must be >= 0, got {requeue_count}")
    timeout = format_duration(settings.schedule_timeout)
    if requeue_count >= settings.requeue_limit:
        return RequeueLimitReached(
            requeue_count=requeue_count,
            message=(
                f"pods were not scheduled within {timeout} after admission, and the job was already "
                f"requeued {requeue_count} time{'s' if requeue_count != 1 else ''} "
                f"(requeue_limit: {settings.requeue_limit})"
            ),
        )
    count = requeue_count + 1
    backoff = requeue_backoff(count, settings.backoff_base, settings.backoff_cap)
    return Requeue(
        requeue_count=count,
        not_before=now + backoff,
        backoff=backoff,
        message=(
            f"pods were not scheduled within {timeout} after admission; requeued "
            f"({count} of {settings.requeue_limit}), back in the queue at its original position "
            f"after {format_duration(backoff)}"
        ),
    )


def queue_timed_out(waited: timedelta, queue_timeout: timedelta | None) -> bool:
    """Whether a job that has ``waited`` for quota (:func:`waited_for_quota`) is past ``queue_timeout``."""
    if queue_timeout is None:
        return False
    return waited >= queue_timeout


def waited_for_quota(
    queued_at: datetime,
    now: datetime,
    *,
    waited_before: timedelta = timedelta(0),
    wait_since: datetime | None = None,
    waiting: bool = True,
) -> timedelta:
    """How long a job has waited for quota: the waits it banked before (``waited_before``, each ended by
    a run or a stop) plus the current one, from ``wait_since`` (its first wait starts at ``queued_at``).

    Only waiting counts, as ``queue_timeout`` promises: a run that ended in a stop, a preemption or a
    failed attempt never counts, so a job that ran for a day and was stopped is not failed at once on its
    resume. Time spent admitted but unplaced before a stuck-start requeue does count (no wait is banked
    then: the current wait goes on), so the limit bounds how long a job may go without starting. A
    stopped job (``waiting`` False) waits for its user, not for quota: only what it banked counts.
    """
    _require_aware(queued_at=queued_at, now=now)
    if not waiting:
        return waited_before
    return waited_before + max(now - (wait_since or queued_at), timedelta(0))


def banked_wait(
    queued_at: datetime,
    *,
    waited_before: timedelta,
    wait_since: datetime | None,
    admitted_at: datetime | None,
    now: datetime,
) -> timedelta:
    """What a job has waited for quota when it leaves the queue's clock (a stop, a preemption, a next
    attempt): its current wait ended at its admission if it was admitted, else now (stopped while
    queued). The caller writes it on the job (labels.QUEUE_WAITED) and clears or restarts the current
    wait (labels.QUEUE_WAIT_SINCE)."""
    start = wait_since or queued_at
    end = admitted_at if admitted_at is not None and admitted_at >= start else now
    return waited_before + max(end - start, timedelta(0))


def format_duration(value: timedelta) -> str:
    """A short human duration: ``45s``, ``3m``, ``1h 30m``, ``2d 4h``."""
    total = int(value.total_seconds())
    if total < 0:
        return "-" + format_duration(-value)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    parts = [f"{n}{unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "m"), (seconds, "s")) if n]
    # Two units are precise enough for a message and stay readable.
    return " ".join(parts[:2]) if parts else "0s"
