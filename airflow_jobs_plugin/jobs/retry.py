"""Job-level retry rules: the exponential back-off between attempts and the attempt budget.

Pure functions, applied by :func:`airflow_jobs_plugin.lifecycle.tracking.decide` (``retry_backoff`` /
``retry_backoff_max`` / ``max_attempts``). What an exit code means is the lifecycle's
``classify_failure``; the back-off of requeues after a stuck start is the quota pool's
(``queueing/quota/requeue.py``).
"""

from __future__ import annotations

import math
import random
from datetime import timedelta
from typing import Protocol


class _Random(Protocol):
    def random(self) -> float: ...


def backoff_delay(
    attempt: int,
    base: timedelta,
    cap: timedelta,
    jitter: float = 0.0,
    rng: _Random | None = None,
) -> timedelta:
    """Wait before the attempt after ``attempt`` (1-based): ``base * 2**(attempt - 1)``, at most ``cap``.

    ``jitter`` in [0, 1] shortens the delay by a random fraction up to ``jitter`` (so the result stays
    within [(1 - jitter) * delay, delay] and never exceeds ``cap``), which spreads retries of many
    jobs that failed together (a lost node). Pass ``rng`` (anything with ``random()``) for a
    deterministic result; without it, ``jitter > 0`` uses the module-level generator.
    """
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
        raise ValueError(f"attempt must be a whole number >= 1, got {attempt!r}")
    if base < timedelta(0) or cap < timedelta(0):
        raise ValueError(f"base and cap must not be negative, got base={base}, cap={cap}")
    if not 0.0 <= jitter <= 1.0:
        raise ValueError(f"jitter must be between 0 and 1, got {jitter}")
    cap_s = cap.total_seconds()
    # Any non-zero base (>= 1 microsecond) doubled 128 times exceeds the largest timedelta, so the
    # exponent can be clamped there, keeping float arithmetic far from overflow for huge attempts.
    exponent = min(attempt - 1, 128)
    nominal = min(cap_s, math.ldexp(base.total_seconds(), exponent)) if base else 0.0
    if jitter and nominal:
        draw = (rng or random).random()
        nominal *= 1.0 - jitter * draw
    return timedelta(seconds=nominal)


def next_attempt_allowed(attempt: int, max_attempts: int) -> bool:
    """True when the attempt numbered ``attempt`` (1-based) may be followed by another one."""
    if attempt < 1 or max_attempts < 1:
        raise ValueError(f"attempt and max_attempts must be >= 1, got {attempt} and {max_attempts}")
    return attempt < max_attempts
