"""The one way to wait for an event with a timeout (airflow_jobs_plugin/cluster/waiting.py)."""

from __future__ import annotations

import asyncio

import pytest

from airflow_jobs_plugin.cluster.waiting import wait_event


async def test_an_event_set_in_time_is_reported_set():
    event = asyncio.Event()
    asyncio.get_running_loop().call_later(0.01, event.set)
    assert await wait_event(event, 5) is True


async def test_an_event_not_set_before_the_timeout_is_reported_unset():
    assert await wait_event(asyncio.Event(), 0.01) is False


async def test_an_event_already_set_returns_at_once_without_a_timeout():
    event = asyncio.Event()
    event.set()
    assert await wait_event(event, None) is True


async def test_a_cancellation_that_arrives_as_the_event_is_set_is_never_swallowed():
    """The waiter is cancelled in the same loop iteration as the event is set: the cancellation wins,
    every time, so a trigger or a worker told to stop always stops."""
    for _ in range(200):
        event = asyncio.Event()
        waiter = asyncio.ensure_future(wait_event(event, 5))
        await asyncio.sleep(0)  # the waiter is now waiting
        event.set()
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter


async def test_the_wait_leaves_no_task_behind():
    before = len(asyncio.all_tasks())
    await wait_event(asyncio.Event(), 0.01)
    await asyncio.sleep(0)
    assert len(asyncio.all_tasks()) == before
