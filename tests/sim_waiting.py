"""Polling the simulated cluster from a test: the tests observe it from outside, as a client would."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(check: Callable[[], T], timeout: float = 15.0) -> T:
    """Call ``check`` until it returns something truthy, and return that; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.02)
    raise AssertionError(f"condition not reached within {timeout}s")
