"""The benchmark's line latency is classed by what the line's container held when the line was written,
not by the path that brought it: a backlog a new stream delivers is a polled job's wait."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture()
def clock():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import tracker
    finally:
        sys.path.remove(str(BENCHMARKS))
    return tracker.LineClock()


def line(wrote: float) -> str:
    return f"[worker-0] tick 1 due={wrote} wrote={wrote}"


def test_a_line_written_while_its_container_held_a_stream_is_streamed(clock):
    clock.streams["p"] = [[100.0, None]]
    clock.source, clock.pod = "stream", "p"
    clock.line(line(101.0), 101.5)
    assert clock.figures()["by_class"]["streamed"]["count"] == 1


def test_a_backlog_a_new_stream_delivers_is_handed_over_and_counts_as_polled(clock):
    clock.streams["p"] = [[100.0, None]]
    clock.source, clock.pod = "stream", "p"
    clock.line(line(40.0), 100.2)  # written 60 s before the stream opened
    by = clock.figures()["by_class"]
    assert by["streamed"]["count"] == 0
    assert by["handed_over"]["count"] == by["polled"]["count"] == 1
    assert by["polled"]["p50"] == pytest.approx(60.2, abs=0.02)


def test_a_line_read_in_turn_is_polled_unless_its_container_held_a_stream(clock):
    clock.streams["p"] = [[10.0, 20.0]]
    clock.source, clock.pod = "read", "p"
    clock.line(line(25.0), 26.0)  # after the stream ended: polled
    clock.line(line(15.0), 26.0)  # an ended run's last read of a line written while it streamed
    by = clock.figures()["by_class"]
    assert (by["polled"]["count"], by["streamed"]["count"], by["handed_over"]["count"]) == (1, 1, 0)


def test_the_workers_lines_are_apart_whatever_the_container_held(clock):
    clock.streams["p"] = [[0.0, None]]
    clock.source, clock.pod = "worker", "p"
    clock.line(line(5.0), 9.0)
    assert clock.figures()["by_class"]["worker"]["count"] == 1
