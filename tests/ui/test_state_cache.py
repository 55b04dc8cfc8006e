"""The API server's copy of the overview: one build at a time, kept a few seconds, served stale while a
fresh one builds, dropped when an action's job cannot be read again, and built off the event loop
(patching the copy after an action: ``test_job_change.py``)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from airflow_jobs_plugin.plugin.state_cache import BuildCache


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def on_this_loop(build):
    return await build()


def cache(clock: Clock) -> BuildCache:
    return BuildCache(fresh_seconds=3, stale_seconds=30, clock=clock, runner=on_this_loop)


def test_concurrent_readers_share_one_build():
    async def scenario():
        builds = 0
        gate = asyncio.Event()

        async def build():
            nonlocal builds
            builds += 1
            await gate.wait()
            return f"state {builds}"

        c = cache(Clock())
        readers = [asyncio.create_task(c.get("ns", build)) for _ in range(5)]
        await asyncio.sleep(0)
        gate.set()
        answers = await asyncio.gather(*readers)
        return builds, answers

    builds, answers = asyncio.run(scenario())
    assert builds == 1
    assert answers == ["state 1"] * 5


def test_a_fresh_copy_is_served_then_a_stale_one_while_the_next_build_runs():
    async def scenario():
        clock = Clock()
        c = cache(clock)
        count = 0
        gate = asyncio.Event()
        gate.set()
        second_started = asyncio.Event()

        async def build():
            nonlocal count
            count += 1
            if count == 2:
                second_started.set()
            await gate.wait()
            return count

        first = await c.get("ns", build)
        clock.now = 2  # fresh: no build
        again = await c.get("ns", build)
        clock.now = 10  # stale: served at once, a build starts behind it
        gate.clear()
        stale = await c.get("ns", build)
        await second_started.wait()
        still_stale = await c.get("ns", build)  # the build under way is not started twice
        refresh = c._building["ns"]  # noqa: SLF001 - the build behind the stale copy
        gate.set()
        await refresh
        clock.now = 11
        fresh = await c.get("ns", build)
        return first, again, stale, still_stale, fresh, count

    assert asyncio.run(scenario()) == (1, 1, 1, 1, 2, 2)


def test_past_the_stale_window_readers_wait_for_the_new_build():
    async def scenario():
        clock = Clock()
        c = cache(clock)
        values = iter(["old", "new"])

        async def build():
            return next(values)

        await c.get("ns", build)
        clock.now = 31
        return await c.get("ns", build)

    assert asyncio.run(scenario()) == "new"


def test_invalidating_drops_the_copy_and_a_build_read_before_it():
    async def scenario():
        c = cache(Clock())
        reads = []
        gate = asyncio.Event()

        async def build():
            reads.append(len(reads) + 1)
            number = len(reads)
            if number == 1:
                await gate.wait()
            return f"read {number}"

        before = asyncio.create_task(c.get("ns", build))
        await asyncio.sleep(0)
        c.invalidate()  # e.g. a cancel went through while read 1 was under way, and its job cannot be read
        after = await c.get("ns", build)
        gate.set()
        return await before, after, await c.get("ns", build)

    before, after, kept = asyncio.run(scenario())
    assert before == "read 1"
    assert after == "read 2"
    assert kept == "read 2"  # read 1 ended after the action: never kept


def test_a_failed_build_is_not_kept_and_its_error_reaches_the_reader():
    async def scenario():
        c = cache(Clock())
        outcomes = iter([RuntimeError("the cluster answered 500"), "ok"])

        async def build():
            outcome = next(outcomes)
            if isinstance(outcome, Exception):
                raise outcome
            return outcome

        with pytest.raises(RuntimeError, match="500"):
            await c.get("ns", build)
        return await c.get("ns", build)

    assert asyncio.run(scenario()) == "ok"


def test_by_default_the_build_runs_in_another_thread_on_its_own_loop():
    async def scenario():
        c = BuildCache()
        here = threading.get_ident(), asyncio.get_running_loop()

        async def build():
            return threading.get_ident(), asyncio.get_running_loop()

        there = await c.get("ns", build)
        return here, there

    (here_thread, here_loop), (there_thread, there_loop) = asyncio.run(scenario())
    assert here_thread != there_thread
    assert here_loop is not there_loop


def test_a_costly_build_is_kept_longer_so_refreshes_do_not_run_back_to_back():
    async def scenario():
        clock = Clock()
        c = cache(clock)
        builds = 0

        async def build():
            nonlocal builds
            builds += 1
            clock.now += 40  # this build took 40 s
            return builds

        await c.get("ns", build)  # built at 0, done at 40
        clock.now = 75  # 75 s after it started: within twice its cost, still fresh
        kept = await c.get("ns", build)
        clock.now = 150  # past twice its cost, within five times: served, refreshed behind
        stale = await c.get("ns", build)
        await c._building["ns"]  # noqa: SLF001 - the refresh behind the stale copy
        return kept, stale, builds

    assert asyncio.run(scenario()) == (1, 1, 2)


def test_kept_answers_without_waiting_and_starts_the_build_only_when_asked():
    async def scenario():
        clock = Clock()
        c = cache(clock)
        gate = asyncio.Event()
        builds = 0

        async def build():
            nonlocal builds
            builds += 1
            await gate.wait()
            return f"read {builds}"

        nothing_yet = c.kept("ns", build, start=False)
        started_none = builds == 0 and not c.holds("ns")
        still_nothing = c.kept("ns", build)  # now the build starts behind
        await asyncio.sleep(0)
        gate.set()
        first = await c.get("ns", build)
        clock.now = 10  # stale: served at once, refreshed behind even when not asked to start
        stale = c.kept("ns", build, start=False)
        await asyncio.sleep(0)
        return nothing_yet, started_none, still_nothing, first, stale, builds

    nothing_yet, started_none, still_nothing, first, stale, builds = asyncio.run(scenario())
    assert (nothing_yet, started_none, still_nothing) == (None, True, None)
    assert (first, stale) == ("read 1", "read 1")
    assert builds == 2
