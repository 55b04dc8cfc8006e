"""Leader election for the admission controller: campaign for a Lease, lead while holding it, stop at
once when it cannot be renewed, give it up on shutdown.

The shell around :mod:`airflow_jobs_plugin.controller.lease`, which decides every step (client-go's
rules, kubernetes v1.36.3 ``tools/leaderelection``); this module only reads and writes the Lease and
runs the caller's ``lead`` while it holds it. ``lead`` is started afresh at each term, so it rebuilds
what it knows from the cluster each time, as Kueue's manager does on becoming leader.

How it ends: cancelled (the process got SIGTERM), it cancels ``lead``, waits for it to stop, then
releases the Lease so a standby takes over at its next attempt; if ``lead`` returns or raises on its
own, it releases the Lease the same way and returns or raises with it. Losing the Lease is no end: it
cancels ``lead`` and campaigns again.

``lead`` must honour its cancellation promptly: a leader stops at most ``retry_period +
renew_deadline`` after its last renewal, and the margin to ``lease_duration`` (3 s by default) is all
the time ``lead`` has to wind down before another replica may start.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from typing import Any, TypeVar

from airflow_jobs_plugin.cluster.kube import KubeClient, KubeError
from airflow_jobs_plugin.cluster.resources import LEASES
from airflow_jobs_plugin.controller import lease
from airflow_jobs_plugin.controller.lease import Acquire, Lost, Moment, Observation, Renew, RenewalRound, Wait

log = logging.getLogger(__name__)

T = TypeVar("T")


def current_moment() -> Moment:
    return Moment(datetime.now(timezone.utc), time.monotonic())


class _Tried(enum.Enum):
    HELD = "held"  # this candidate holds the Lease: it wrote it just now
    FAILED = "failed"  # the API failed or the race was lost twice; the next attempt reads it again


class LeaderElector:
    """One candidate for the Lease ``namespace/name``, known to the others as ``identity`` (unique per
    process: a pod's name, say). The timings are client-go's (``lease.Timings``; ``ValueError`` if they
    cannot elect one leader at a time)."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock: Callable[[], Moment] = current_moment,
        jitter: Callable[[], float] = random.random,
    ):
        if not identity:
            raise ValueError(
                "identity must name this candidate (a pod's name): with none, its Lease would read as "
                "released and every candidate would take it"
            )
        self.timings = lease.Timings(lease_duration, renew_deadline, retry_period)
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self._client = client
        self._clock = clock
        self._jitter = jitter
        self._memory: Observation | None = None
        # The Lease as last read or written: the base of the next write without a read (rule 4).
        self._lease: dict[str, Any] | None = None
        self._leading = False
        self._renewed_at: datetime | None = None
        self._reported = ""

    @property
    def is_leader(self) -> bool:
        """Whether this candidate leads now: ``lead`` runs, and stops as soon as this turns False."""
        return self._leading

    @property
    def holder(self) -> str:
        """Who holds the Lease, as this candidate last saw it (``""``: nobody, or not read yet)."""
        return self._memory.record.holder if self._memory is not None else ""

    @property
    def renewed_at(self) -> datetime | None:
        """The ``renewTime`` of this candidate's last successful write of its own term (its clock)."""
        return self._renewed_at

    def describe(self) -> str:
        return f"lease {self.namespace}/{self.name}"

    async def run(self, lead: Callable[[], Awaitable[None]]) -> None:
        """Campaign, lead while holding the Lease, campaign again after losing it; see the module."""
        try:
            while True:
                await self._campaign()
                if await self._lead_while_renewing(lead):
                    return
        except asyncio.CancelledError:
            await self._release()
            raise

    # --- the terms ---

    async def _campaign(self) -> None:
        log.info("%s: %s is campaigning", self.describe(), self.identity)
        while True:
            tried = await self._try(leading=False)
            if tried is _Tried.HELD:
                return
            waiting = tried if isinstance(tried, Wait) else None
            delay = lease.campaign_delay(waiting, self._clock().tick, self.timings, self._jitter())
            await asyncio.sleep(delay)

    async def _lead_while_renewing(self, lead: Callable[[], Awaitable[None]]) -> bool:
        """Run ``lead`` and renew every retry period; True when ``lead`` ended on its own (the Lease is
        released then), False when leadership was lost (``lead`` was cancelled and has stopped)."""
        log.info("%s: %s leads", self.describe(), self.identity)
        self._leading = True
        task = asyncio.ensure_future(lead())
        try:
            while True:
                await asyncio.wait({task}, timeout=self.timings.retry_period)
                if task.done():
                    self._leading = False
                    log.info("%s: %s stopped leading on its own; releasing", self.describe(), self.identity)
                    await self._release()
                    task.result()  # its exception, if it raised one
                    return True
                if not await self._renewal_round():
                    self._leading = False
                    log.warning(
                        "%s: %s lost leadership (holder now %r); stopping and campaigning again",
                        self.describe(),
                        self.identity,
                        self.holder,
                    )
                    return False
        finally:
            self._leading = False
            if not task.done():
                task.cancel()
                await asyncio.wait({task})

    async def _renewal_round(self) -> bool:
        """Rule 5: True once renewed; False when no renewal succeeds before the renew deadline."""
        round_ = RenewalRound(self._clock().tick)
        deadline = round_.deadline(self.timings)
        attempt_started = round_.started
        while True:
            finished, tried = await _within(deadline - self._clock().tick, self._try(leading=True))
            if not finished:
                log.warning("%s: no renewal within the renew deadline", self.describe())
                return False
            if tried is _Tried.HELD:
                return True
            if isinstance(tried, Lost):
                log.warning("%s: %s", self.describe(), tried.why)
                return False
            due = round_.next_attempt(attempt_started, self.timings)
            if due is None:
                log.warning("%s: no renewal fits before the renew deadline", self.describe())
                return False
            await asyncio.sleep(max(0.0, due - self._clock().tick))
            attempt_started = due

    # --- one attempt (client-go's tryAcquireOrRenew) ---

    async def _try(self, *, leading: bool) -> _Tried | Wait | Lost:
        now = self._clock()
        record = lease.fast_renewal(self._memory, self.identity, now, self.timings)
        if record is not None and self._lease is not None:
            try:
                written = await self._client.replace(
                    LEASES, self.namespace, lease.body(record, self._lease, self.namespace, self.name)
                )
            except KubeError as exc:
                log.debug("%s: renewing without a read failed (%s); reading it", self.describe(), exc)
            else:
                self._wrote(written, record)
                return _Tried.HELD
        # A lost race (409) is read again at once: the winner's record is what decides the next step.
        for _ in range(2):
            try:
                current = await self._client.get_or_none(LEASES, self.namespace, self.name)
            except KubeError as exc:
                log.warning("%s: reading it failed: %s", self.describe(), exc)
                return _Tried.FAILED
            self._lease = current
            decision = lease.decide(
                current, self._memory, self.identity, now, self._clock().tick, self.timings, leading=leading
            )
            self._observe(decision.memory)
            step = decision.step
            if isinstance(step, (Wait, Lost)):
                return step
            try:
                written = await self._write(step, current)
            except KubeError as exc:
                if exc.conflict or exc.already_exists:
                    log.info("%s: another candidate wrote it first; reading it again", self.describe())
                    now = self._clock()
                    continue
                log.warning("%s: writing it failed: %s", self.describe(), exc)
                return _Tried.FAILED
            self._wrote(written, step.record)
            return _Tried.HELD
        return _Tried.FAILED

    async def _write(self, step: Acquire | Renew, current: dict[str, Any] | None) -> dict[str, Any]:
        sent = lease.body(step.record, current, self.namespace, self.name)
        if isinstance(step, Acquire) and step.create:
            return await self._client.create(LEASES, self.namespace, sent)
        return await self._client.replace(LEASES, self.namespace, sent)

    def _wrote(self, written: dict[str, Any], record: lease.LeaseRecord) -> None:
        self._lease = written
        self._observe(lease.after_write(self._memory, record, self._clock().tick))
        if record.holder == self.identity:
            self._renewed_at = record.renew_time

    def _observe(self, memory: Observation | None) -> None:
        self._memory = memory
        if self.holder != self._reported:  # client-go's OnNewLeader
            self._reported = self.holder
            log.info("%s: held by %s", self.describe(), self.holder or "nobody (released)")

    # --- giving it up ---

    async def _release(self) -> None:
        """Rule 6, within the renew deadline (client-go's ``release``). It runs on the way out (a
        cancellation, ``lead`` ending), so it never raises, whatever went wrong (the client may be closed
        already): the Lease expires on its own if this cannot be written."""
        if self._memory is None or self._memory.record.holder != self.identity:
            return
        try:
            finished, _ = await _within(self.timings.renew_deadline, self._give_up())
        except Exception as exc:  # noqa: BLE001 - see the docstring
            log.warning("%s: releasing it failed (%s); it expires on its own", self.describe(), exc)
            return
        if not finished:
            log.warning("%s: releasing it took too long; it expires on its own", self.describe())

    async def _give_up(self) -> None:
        current = await self._client.get_or_none(LEASES, self.namespace, self.name)
        record = lease.release(current, self.identity, self._clock())
        if record is None:
            return
        written = await self._client.replace(
            LEASES, self.namespace, lease.body(record, current, self.namespace, self.name)
        )
        self._wrote(written, record)
        log.info("%s: %s released it", self.describe(), self.identity)


async def _within(seconds: float, call: Awaitable[T]) -> tuple[bool, T | None]:
    """``call``'s result if it ends within ``seconds`` (``(True, result)``), else ``(False, None)`` with
    the call cancelled, as a context deadline cancels client-go's request in flight. A cancellation of
    the caller cancels the call too."""
    task = asyncio.ensure_future(call)
    try:
        await asyncio.wait({task}, timeout=max(0.0, seconds))
    finally:
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
    if task.cancelled():
        return False, None
    return True, task.result()
