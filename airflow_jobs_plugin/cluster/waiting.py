"""The product's one way to wait for an ``asyncio.Event`` with a timeout.

Not ``asyncio.wait_for(event.wait(), timeout)``: before Python 3.12 it can swallow a cancellation that
arrives as the event is set (CPython bpo-42130; 3.12 reimplemented ``wait_for`` on
``asyncio.timeout``), and a task that misses its cancellation never stops: a trigger Airflow cancels,
an admission worker at shutdown. ``asyncio.wait`` returns on the timeout without cancelling anything
and lets a cancellation of the caller through.
"""

from __future__ import annotations

import asyncio


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait for ``event`` up to ``timeout`` seconds (``None``: for ever); True if it was set."""
    if event.is_set():
        return True
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({waiter}, timeout=timeout)
    finally:
        waiter.cancel()
    return event.is_set()
