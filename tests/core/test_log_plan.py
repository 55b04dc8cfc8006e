"""Which containers get a log stream and which are read in turn: the stream budget shared fairly
between jobs, and a ring of incremental reads at a bounded rate."""

from __future__ import annotations

import pytest

from airflow_jobs_plugin.logs.logplan import PollRing, Waiting, grant_streams


@pytest.mark.parametrize(
    ("waiting", "held", "free", "granted"),
    [
        # Oldest first when every job holds as many streams.
        ([("a0", "a", 2), ("b0", "b", 1)], {}, 1, ["b0"]),
        # A job's first container before any job's second, however long the second has waited.
        ([("a1", "a", 0), ("b0", "b", 5)], {"a": 1}, 1, ["b0"]),
        # Counts move as streams are granted: one each before a second for anyone.
        ([("a1", "a", 0), ("a2", "a", 1), ("b0", "b", 2)], {}, 2, ["a1", "b0"]),
        ([("a1", "a", 0)], {}, 0, []),
        ([], {}, 3, []),
    ],
)
def test_a_free_stream_goes_to_the_job_holding_fewest_then_to_the_longest_waiting(
    waiting, held, free, granted
):
    assert grant_streams([Waiting(k, j, s) for k, j, s in waiting], held, free) == granted


def test_polled_containers_are_read_in_turn_each_once_per_round():
    ring: PollRing[str] = PollRing(rate=10.0, min_interval=0.0)
    for key in "abc":
        ring.add(key, 0.0)
    order = []
    now = 0.0
    while len(order) < 6:
        key, wait = ring.next_due(now)
        if key is None:
            now += wait or 0.0
            continue
        order.append(key)
        ring.read(key, now)
        now += 0.1  # the overall rate: one read per 1/rate seconds
    assert order == ["a", "b", "c", "a", "b", "c"]


@pytest.mark.parametrize(
    ("polled", "rate", "min_interval", "interval"),
    [
        (19_500, 20.0, 5.0, 975.0),  # 20,000 jobs, 500 streams: each read every ~16 minutes
        (500, 20.0, 5.0, 25.0),
        (3, 20.0, 5.0, 5.0),  # a handful: never read more often than min_interval
    ],
)
def test_a_polled_container_is_read_again_after_a_full_turn_of_the_ring(polled, rate, min_interval, interval):
    ring: PollRing[int] = PollRing(rate=rate, min_interval=min_interval)
    for key in range(polled):
        ring.add(key, 0.0)
    assert ring.interval() == interval


def test_an_ended_container_is_read_ahead_of_every_overdue_one():
    # A saturated ring (every read overdue) must not hold back the last read a final event waits for.
    ring: PollRing[str] = PollRing(rate=1.0, min_interval=10.0)
    ring.add("overdue-1", 0.0)
    ring.add("overdue-2", 0.5)
    ring.add("ended", float("-inf"))
    assert ring.next_due(30.0) == ("ended", None)
    assert ring.next_due(30.0) == ("overdue-1", None)


def test_a_read_in_flight_is_not_handed_out_twice_and_a_removed_key_never_comes_back():
    ring: PollRing[str] = PollRing(rate=1.0, min_interval=1.0)
    ring.add("a", 0.0)
    ring.add("b", 0.0)
    assert ring.next_due(0.0) == ("a", None)
    assert ring.next_due(0.0) == ("b", None)
    assert ring.next_due(0.0)[0] is None
    ring.remove("a")
    ring.read("a", 0.0)  # a read that ends after its key was dropped does not put it back
    ring.read("b", 0.0)
    assert ring.next_due(100.0) == ("b", None)
    assert ring.next_due(100.0)[0] is None and "a" not in ring
