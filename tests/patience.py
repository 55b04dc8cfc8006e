"""How long a test waits for something that takes wall time: its allowance on a quiet machine, stretched
by how loaded the machine is while it waits.

A wait's timeout exists to end a test that hangs, not to judge speed (speed is the benchmarks' job). On
a machine with a load of 10-20 on 2 cores, an Airflow API server takes minutes to start and a simulated
scenario several times its quiet duration; a fixed timeout then fails a correct product. The stretch is
the load average per core (at least 1, at most ``MAX_STRETCH``), the highest seen since the wait began.
"""

from __future__ import annotations

import os
import time

MAX_STRETCH = 10.0


def stretch() -> float:
    """The machine's load per core now: how many times slower than quiet a wait may run."""
    per_core = os.getloadavg()[0] / (os.cpu_count() or 1)
    return max(1.0, min(per_core, MAX_STRETCH))


class Deadline:
    """``seconds`` of a quiet machine from now; ``passed`` answers with the allowance stretched."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.started = time.monotonic()
        self.factor = stretch()

    def passed(self) -> bool:
        self.factor = max(self.factor, stretch())
        return time.monotonic() - self.started > self.seconds * self.factor

    def __str__(self) -> str:
        waited = time.monotonic() - self.started
        return f"{waited:.0f}s ({self.seconds:g}s on a quiet machine, x{self.factor:.1f} for its load)"
