"""Back-off, attempt budget and exit-code classes for job-level retries."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from airflow_jobs_plugin.jobs.retry import backoff_delay, next_attempt_allowed

S = timedelta(seconds=1)


class FixedDraw:
    """A stand-in generator whose random() always returns one value."""

    def __init__(self, value: float) -> None:
        self.value = value

    def random(self) -> float:
        return self.value


@pytest.mark.parametrize(
    ("attempt", "base", "cap", "expected"),
    [
        (1, 30 * S, 600 * S, 30 * S),
        (2, 30 * S, 600 * S, 60 * S),
        (3, 30 * S, 600 * S, 120 * S),
        (4, 30 * S, 600 * S, 240 * S),
        (5, 30 * S, 600 * S, 480 * S),
        (6, 30 * S, 600 * S, 600 * S),
        (7, 30 * S, 600 * S, 600 * S),
        (1, 60 * S, 30 * S, 30 * S),
        (3, 0 * S, 600 * S, 0 * S),
        (4, 500 * timedelta(milliseconds=1), 600 * S, 4 * S),
        (10_000, 30 * S, 600 * S, 600 * S),
    ],
)
def test_delay_doubles_per_attempt_up_to_the_cap(attempt, base, cap, expected):
    assert backoff_delay(attempt, base, cap) == expected


@pytest.mark.parametrize(("draw", "expected"), [(0.0, 120 * S), (0.5, 90 * S), (1.0, 60 * S)])
def test_jitter_shortens_the_delay_by_up_to_its_fraction(draw, expected):
    assert backoff_delay(3, 30 * S, 600 * S, jitter=0.5, rng=FixedDraw(draw)) == expected


def test_jittered_delays_stay_within_bounds_and_never_exceed_the_cap():
    rng = random.Random(7)
    delays = [backoff_delay(8, 30 * S, 600 * S, jitter=0.25, rng=rng) for _ in range(200)]
    assert all(450 * S <= d <= 600 * S for d in delays)
    assert len(set(delays)) > 1


def test_seeded_generator_gives_reproducible_delays():
    first = [backoff_delay(a, 10 * S, 600 * S, jitter=1.0, rng=random.Random(1)) for a in range(1, 6)]
    again = [backoff_delay(a, 10 * S, 600 * S, jitter=1.0, rng=random.Random(1)) for a in range(1, 6)]
    assert first == again


@pytest.mark.parametrize(
    "kwargs",
    [
        {"attempt": 0},
        {"attempt": -3},
        {"attempt": True},
        {"base": -S},
        {"cap": -S},
        {"jitter": -0.1},
        {"jitter": 1.5},
    ],
)
def test_invalid_backoff_arguments_are_rejected(kwargs):
    args = {"attempt": 1, "base": 30 * S, "cap": 600 * S, **kwargs}
    with pytest.raises(ValueError):
        backoff_delay(**args)


@pytest.mark.parametrize(
    ("attempt", "max_attempts", "allowed"),
    [(1, 1, False), (1, 3, True), (2, 3, True), (3, 3, False), (4, 3, False)],
)
def test_next_attempt_is_allowed_until_the_budget_is_spent(attempt, max_attempts, allowed):
    assert next_attempt_allowed(attempt, max_attempts) is allowed


@pytest.mark.parametrize(("attempt", "max_attempts"), [(0, 3), (1, 0)])
def test_attempt_budget_arguments_must_be_positive(attempt, max_attempts):
    with pytest.raises(ValueError):
        next_attempt_allowed(attempt, max_attempts)
