"""One read in flight per question and process: the callers that ask while it runs share its answer.

A triggerer restarts with hundreds of triggers, and each asks, in its first milliseconds, the same
questions of the cluster: is Kueue's API served here, what does Kueue's configuration say, what are the
nodes. A cache filled by the first answer does not stop the herd: every caller that asks before that
answer arrives sends its own request (200 triggers, 200 identical reads). A :class:`SingleFlight` holds
the read under way for each question; a caller arriving meanwhile awaits that read instead of sending
another (as golang.org/x/sync/singleflight's ``Group.Do`` does).

The read runs in a task of its own, as :func:`~airflow_jobs_plugin.cluster.watch.client_for` builds the
process's client: the caller that starts it may be cancelled (a trigger cancelled as it starts), and the
others still await it, so a caller's cancellation never ends the read for the rest (``asyncio.shield``).
Only the read in flight is shared: once it ends, successful or not, the next caller asks again, so a
failure is never kept; keeping a success is the caller's cache, with the lifetime that answer deserves.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine, Hashable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class SingleFlight(Generic[T]):
    """The reads in flight of one kind, by question (``key``)."""

    def __init__(self, name: str):
        self.name = name
        self._flying: dict[Hashable, asyncio.Task[T]] = {}
        self.started = 0  # reads actually sent, for tests and observability

    async def run(self, key: Hashable, read: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """``read()``'s answer: of the read under way for ``key`` if there is one, else of a new one."""
        task = self._flying.get(key)
        if task is None or task.get_loop() is not asyncio.get_running_loop():
            # An empty context: the read is no caller's (a trigger's log routing is not carried into it).
            task = contextvars.Context().run(asyncio.create_task, read(), name=f"ajp-{self.name}-{key}")
            self.started += 1
            self._flying[key] = task
            task.add_done_callback(lambda done: self._landed(key, done))
        return await asyncio.shield(task)

    def in_flight(self, key: Hashable) -> bool:
        return key in self._flying

    def _landed(self, key: Hashable, task: asyncio.Task[T]) -> None:
        if self._flying.get(key) is task:
            del self._flying[key]
        # Every caller may have been cancelled meanwhile: the failure was then nobody's to read, and
        # asyncio would log it as never retrieved. The next caller asks again and sees its own.
        if not task.cancelled():
            task.exception()
