"""Which container logs a triggerer follows with a stream, and which it reads in turn. Pure.

A follow stream holds one connection for its container's whole run, so a process opens at most a
budget of them (``kube.LOG_STREAM_CONNECTIONS``). Every other running container is read by incremental
GETs (``sinceTime`` + ``timestamps``: :mod:`~airflow_jobs_plugin.logs.logcursor`), in turn, at a bounded
overall rate: with 20,000 jobs and 500 streams, every job still gets its lines into its task log, later
rather than at once, and the API server sees a fixed number of reads per second, not one per job.

The rules, first match wins:

1. A container that has ended is read once more, ahead of every other read and outside the rate (one
   read per container run, and its job's final event waits for it): that read is its last.
2. A free stream goes to the waiting container whose job holds the fewest streams, then to the one
   that has waited longest: a job's first container streams before any job's second.
3. A polled container is read again after ``max(min_interval, polled / rate)`` seconds: every polled
   container gets the same share of the rate (a ring), and a handful of them are not read in a loop.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Waiting(Generic[K]):
    """A running container without a stream: its key, its job, and when it started waiting (order)."""

    key: K
    job: str
    since: int


def grant_streams(waiting: Iterable[Waiting[K]], held: Mapping[str, int], free: int) -> list[K]:
    """The containers that get the ``free`` streams (rule 2)."""
    if free <= 0:
        return []
    counts = dict(held)
    granted: list[K] = []
    pending = list(waiting)  # one pass per stream granted: usually one is free, a sort would cost more
    while pending and len(granted) < free:
        # Granting one changes its job's count: re-rank the rest by the counts as they now stand.
        pick = min(pending, key=lambda w: (counts.get(w.job, 0), w.since))
        pending.remove(pick)
        granted.append(pick.key)
        counts[pick.job] = counts.get(pick.job, 0) + 1
    return granted


@dataclass
class PollRing(Generic[K]):
    """The containers read by incremental GETs, each with the time its next read is due (rule 1, 3).

    ``rate`` is the reads per second the whole process may send, ``min_interval`` the seconds between
    two reads of one container however few are polled."""

    rate: float
    min_interval: float
    _due: dict[K, float] = field(default_factory=dict)
    _heap: list[tuple[float, int, K]] = field(default_factory=list)
    _seq: itertools.count = field(default_factory=itertools.count)

    def __len__(self) -> int:
        return len(self._due)

    def __contains__(self, key: object) -> bool:
        return key in self._due

    def interval(self) -> float:
        """Seconds between two reads of one container, with as many polled as now."""
        return max(self.min_interval, len(self._due) / self.rate if self.rate > 0 else self.min_interval)

    def add(self, key: K, due: float) -> None:
        """Poll ``key`` from ``due`` on (an earlier due time replaces a later one, never the reverse)."""
        current = self._due.get(key)
        if current is not None and current <= due:
            return
        self._schedule(key, due)

    def read(self, key: K, now: float) -> None:
        """``key`` was just read: its next read comes after a full turn of the ring."""
        if key in self._due:
            self._schedule(key, now + self.interval())

    def later(self, key: K, due: float) -> None:
        """Move ``key``'s next read to ``due`` (a refused read backs off), earlier or later."""
        if key in self._due:
            self._schedule(key, due)

    def remove(self, key: K) -> None:
        self._due.pop(key, None)

    def next_due(self, now: float) -> tuple[K | None, float | None]:
        """The key to read now, if one is due (it stays in the ring until :meth:`read` or
        :meth:`remove`); otherwise None and the seconds until the next one is (None: the ring is empty)."""
        while self._heap:
            due, _, key = self._heap[0]
            if self._due.get(key) != due:  # rescheduled or removed since: a stale entry
                heapq.heappop(self._heap)
                continue
            if due <= now:
                heapq.heappop(self._heap)
                # Parked until read() puts it back: a read in flight is not handed out twice.
                self._due[key] = float("inf")
                return key, None
            return None, due - now
        return None, None

    def _schedule(self, key: K, due: float) -> None:
        self._due[key] = due
        heapq.heappush(self._heap, (due, next(self._seq), key))
