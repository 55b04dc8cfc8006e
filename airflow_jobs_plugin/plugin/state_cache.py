"""The API server's copy of the cluster's read model (the job index, ``readmodel/job_index.py``): brought
up to date at most once per :data:`FRESH_SECONDS`, by one build at a time, never on the event loop. A
build starts from the kept value (:meth:`BuildCache.peek`): the index's first build fills it, later
ones refresh it, and the windows below stretch with what the value says its last part cost (``cost``),
not with the fill.

Reading a namespace that keeps 50,000 jobs means LISTs of hundreds of megabytes and a snapshot per
job: seconds of CPU. Done per request inside an ``async def`` route it would stall the Airflow API
server (its UI and REST API share the event loop) for that long, every 5 s per open page. So:

- one build serves every request and every reader (each request then narrows it to what its reader
  may see, :mod:`airflow_jobs_plugin.readmodel.listing`);
- the build (the LISTs, decoding their JSON, the snapshots) runs in a worker thread on an event loop
  of its own, so the server's loop only awaits it and keeps answering other requests meanwhile;
- concurrent requests while a build runs wait for that build, not for a second one (single flight);
- a copy older than :data:`FRESH_SECONDS` but younger than :data:`STALE_SECONDS` is served at once
  while a fresh build starts behind it (the page refreshes itself every few seconds anyway); an older
  one, or none, is waited for;
- both windows stretch with the cost of the build (at least twice, and five times, as long as the
  last build took): a namespace whose build takes 40 s of CPU is rebuilt at most every 80 s, not
  back to back, so one open page cannot keep a core of the API server busy;
- a person's action through this server (cancel, stop, resume) patches the copy with the job it
  touched (:meth:`BuildCache.patch`, read again by the action, applied by
  :func:`airflow_jobs_plugin.readmodel.job_index.with_change`): the page that follows shows the action's
  effect at once, and nobody waits for a whole rebuild because someone clicked Stop. A build under way
  when the patch came may have read the cluster before the action: the patch is applied to its value
  too when it lands.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")

FRESH_SECONDS = 3.0
STALE_SECONDS = 30.0


@dataclass(frozen=True)
class _Entry(Generic[T]):
    value: T
    built_at: float
    took: float  # seconds the build took


def _in_thread(build: Callable[[], Coroutine[Any, Any, T]]) -> Awaitable[T]:
    """Run the coroutine function ``build`` to completion on a fresh event loop in a worker thread."""
    return asyncio.to_thread(lambda: asyncio.run(build()))


class BuildCache(Generic[T]):
    """Values by key, each built off the event loop by ``build`` and kept for a few seconds."""

    def __init__(
        self,
        *,
        fresh_seconds: float = FRESH_SECONDS,
        stale_seconds: float = STALE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        runner: Callable[[Callable[[], Coroutine[Any, Any, T]]], Awaitable[T]] = _in_thread,
        cost: Callable[[T, float], float] | None = None,
    ) -> None:
        self._fresh = fresh_seconds
        self._stale = stale_seconds
        self._clock = clock
        self._runner = runner
        # What a build cost, for the windows that stretch with it: by default its wall time; a value
        # that knows better (an index refresh that began with a fill) says so.
        self._cost = cost
        self._entries: dict[Hashable, _Entry[T]] = {}
        self._building: dict[Hashable, asyncio.Task[T]] = {}
        self._generation = 0
        # Patches by key, numbered: a build applies those numbered after the one current at its start.
        self._patches: dict[Hashable, list[tuple[int, Callable[[T], T]]]] = {}
        self._patch_number = 0
        self._started_at_patch: dict[Hashable, int] = {}
        self._patching = asyncio.Lock()

    async def get(self, key: Hashable, build: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """The value of ``key``: the kept one while fresh (or stale, refreshing behind it), else built."""
        entry = self._entries.get(key)
        if entry is not None:
            age = self._clock() - entry.built_at
            if age < max(self._fresh, 2 * entry.took):
                return entry.value
        task = self._building.get(key) or self._start(key, build)
        if entry is not None and age < max(self._stale, 5 * entry.took):
            return entry.value
        # shield: one waiter giving up (a closed connection) must not cancel the build the others await.
        return await asyncio.shield(task)

    def kept(
        self, key: Hashable, build: Callable[[], Coroutine[Any, Any, T]], *, start: bool = True
    ) -> T | None:
        """What :meth:`get` would answer at once, without waiting: the kept value while fresh or stale
        (refreshing behind a stale one as ``get`` does), else ``None``, with a build started (or under
        way) that a later request finds unless ``start`` is false. For a reader that has a quicker answer
        than waiting for a whole build (and may start it once that answer is given)."""
        entry = self._entries.get(key)
        age = self._clock() - entry.built_at if entry is not None else 0.0
        if entry is not None and age < max(self._fresh, 2 * entry.took):
            return entry.value
        stale = entry is not None and age < max(self._stale, 5 * entry.took)
        if key not in self._building and (start or stale):
            self._start(key, build)
        return entry.value if entry is not None and stale else None

    def peek(self, key: Hashable) -> T | None:
        """The kept value of ``key`` whatever its age, without starting anything: what a build that
        only brings a value up to date starts from."""
        entry = self._entries.get(key)
        return entry.value if entry is not None else None

    def invalidate(self) -> None:
        """Forget every kept value; builds already running are neither kept nor handed to later requests
        (they may have read the cluster before the change that called for this)."""
        self._entries.clear()
        self._building.clear()
        self._patches.clear()
        self._generation += 1

    def holds(self, key: Hashable) -> bool:
        """Whether a value of ``key`` is kept or being built: whether a patch would change anything."""
        return key in self._entries or key in self._building

    async def patch(self, key: Hashable, change: Callable[[T], T]) -> None:
        """Apply ``change`` (a pure function, run in a worker thread) to the kept value of ``key``, and
        to the value of a build under way when it lands. The kept value's age is unchanged: the next
        build comes when it would have."""
        async with self._patching:
            self._patch_number += 1
            if key in self._building:
                self._patches.setdefault(key, []).append((self._patch_number, change))
            entry = self._entries.get(key)
            if entry is not None:
                value = await asyncio.to_thread(change, entry.value)
                self._entries[key] = dataclasses.replace(entry, value=value)

    def _start(self, key: Hashable, build: Callable[[], Coroutine[Any, Any, T]]) -> asyncio.Task[T]:
        generation = self._generation
        started = self._clock()
        self._started_at_patch[key] = self._patch_number

        async def run() -> T:
            try:
                value = await self._runner(build)
                async with self._patching:
                    since = self._started_at_patch.get(key, 0)
                    for number, change in self._patches.pop(key, []):
                        if number > since:
                            value = await asyncio.to_thread(change, value)
                    if generation == self._generation:
                        took, read_at = self._clock() - started, started
                        if self._cost is not None:
                            # Its last part read the cluster that long ago (a fill's refresh, at its end).
                            took = self._cost(value, took)
                            read_at = self._clock() - took
                        self._entries[key] = _Entry(value, read_at, took)
                return value
            finally:
                if self._building.get(key) is task:
                    del self._building[key]

        task = asyncio.get_running_loop().create_task(run(), name=f"airflow-jobs-build-{key}")
        self._building[key] = task
        # A refresh behind a stale value may end in an error nobody awaits: retrieve it so it is not
        # reported as "never retrieved"; the next request past the stale window builds (and fails) anew.
        task.add_done_callback(lambda t: None if t.cancelled() else t.exception())
        return task


# Full collections deferred while any fill or sweep runs (a count, under a lock: they may overlap), and the thresholds to restore after the last.
_deferring: list[Any] = [0, None]
_deferring_lock = threading.Lock()
# Gen-1 collections between full ones while a fill or a sweep runs: never, in practice (CPython's default is 10).
DEFERRED_FULL_COLLECTION_THRESHOLD = 1_000_000


@contextlib.contextmanager
def full_collections_deferred() -> Iterator[None]:
    """No full garbage collection while the index fills or the orphan sweep runs, young ones as usual.

    A fill decodes and judges 102 pages of 500 jobs with their pods, each page alive for a second or
    more, so its objects outlive two young collections and reach the oldest generation; with the server's
    own heap frozen, CPython (3.11 ``Modules/gcmodule.c``, ``collect_generations``: a full collection
    once the objects promoted since the last exceed a quarter of those that survived it) then runs a
    full collection every page or two, 122 of them in a fill at 51,000 jobs, up to 0.49 s each, every
    one holding the GIL and so stalling Airflow's event loop. The page's objects are acyclic JSON and
    freed by their reference counts when the page is dropped; what the full collections would find is
    at most the few cycles the rest of the server makes meanwhile, collected by the first full
    collection after the fill. The orphan sweep's metadata pages (``plugin/sweep.py``) are the same
    case: 144 full collections in a sweep at 51,000 jobs, up to 0.15 s each."""
    import gc

    with _deferring_lock:
        if _deferring[0] == 0:
            _deferring[1] = gc.get_threshold()
            young, middle, _ = _deferring[1]
            gc.set_threshold(young, middle, DEFERRED_FULL_COLLECTION_THRESHOLD)
        _deferring[0] += 1
    try:
        yield
    finally:
        with _deferring_lock:
            _deferring[0] -= 1
            if _deferring[0] == 0:
                gc.set_threshold(*_deferring[1])
