"""Which lines of a log read are new: the cursor that lets a container move between a stream, polling
and the worker's last read and still print each line once (kubelet timestamps, sinceTime in seconds)."""

from __future__ import annotations

import pytest

from airflow_jobs_plugin.logs.logcursor import (
    Cursor,
    LogMarker,
    advance,
    advance_session,
    complete_lines,
    format_seconds,
    parse_stamp,
    split_line,
)
from airflow_jobs_plugin.logs.logtail import missed_before

S = 1_000_000_000
T = parse_stamp("2026-01-01T10:00:05Z") or 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-01-01T10:00:05Z", T),
        ("2026-01-01T10:00:05.000000001Z", T + 1),
        ("2026-01-01T10:00:05.5Z", T + S // 2),
        ("2026-01-01T12:00:05.25+02:00", T + S // 4),
        ("2026-01-01 10:00:05Z", None),
        ("epoch", None),
    ],
)
def test_a_timestamp_keeps_its_nanoseconds_and_its_offset(text, expected):
    assert parse_stamp(text) == expected


def test_since_time_is_the_cursors_second_rounded_down():
    assert format_seconds(T + 999_999_999) == "2026-01-01T10:00:05Z"
    assert Cursor().since_time() is None
    assert Cursor(at=T + 7, same=1, lines=1).since_time() == "2026-01-01T10:00:05Z"


def test_a_line_without_a_timestamp_is_kept_whole():
    assert split_line("plain text") == (None, "plain text")
    assert split_line("2026-01-01T10:00:05.1Z epoch 1") == (T + S // 10, "epoch 1")


# A read from the cursor's second repeats what that second printed: lines at, before and after it.
READ = [
    "2026-01-01T10:00:05.100000000Z a",
    "2026-01-01T10:00:05.200000000Z b",
    "2026-01-01T10:00:05.200000000Z c",
    "2026-01-01T10:00:05.300000000Z d",
]


@pytest.mark.parametrize(
    ("cursor", "fresh", "after"),
    [
        (Cursor(), ["a", "b", "c", "d"], Cursor(at=T + 3 * S // 10, same=1, lines=4)),
        (Cursor(at=T + S // 10, same=1, lines=1), ["b", "c", "d"], Cursor(T + 3 * S // 10, 1, 4)),
        # Two lines share a timestamp and only the first was printed: the second still is.
        (Cursor(at=T + 2 * S // 10, same=1, lines=2), ["c", "d"], Cursor(T + 3 * S // 10, 1, 4)),
        (Cursor(at=T + 2 * S // 10, same=2, lines=3), ["d"], Cursor(T + 3 * S // 10, 1, 4)),
        (Cursor(at=T + 3 * S // 10, same=1, lines=4), [], Cursor(T + 3 * S // 10, 1, 4)),
    ],
)
def test_a_read_from_the_cursor_prints_only_what_follows_it(cursor, fresh, after):
    assert advance(cursor, READ) == (fresh, after)


def test_lines_at_the_cursors_timestamp_are_counted_across_reads():
    same = ["2026-01-01T10:00:05.2Z x", "2026-01-01T10:00:05.2Z y"]
    printed, cursor = advance(Cursor(), same[:1])
    again, cursor = advance(cursor, same)
    assert printed + again == ["x", "y"]
    assert cursor == Cursor(at=T + 2 * S // 10, same=2, lines=2)


def test_a_read_cut_by_limit_bytes_leaves_its_last_fragment_for_the_next_read():
    assert complete_lines("a\nb\npart", limited=True) == ["a", "b"]
    assert complete_lines("a\nb\nlast", limited=False) == ["a", "b", "last"]
    assert complete_lines("a very long line cut", limited=True) == ["a very long line cut"]
    assert complete_lines("", limited=False) == []


def test_a_marker_survives_the_event_payload():
    marker = LogMarker("p", "main", "worker-1", Cursor(at=T, same=2, lines=9), previous=True)
    assert LogMarker.from_json(marker.to_json()) == marker
    assert marker.query(100) == {
        "container": "main",
        "since_time": "2026-01-01T10:00:05Z",
        "timestamps": True,
        "tail_lines": 100,
        "previous": True,
    }


def test_a_tail_read_that_starts_after_the_cursor_says_lines_were_skipped():
    marker = LogMarker("p", "main", "w", Cursor(at=T, same=1, lines=1))
    later = ["2026-01-01T10:00:09Z x", "2026-01-01T10:00:10Z y"]
    assert missed_before(marker, later, tail_lines=2)
    assert not missed_before(marker, later, tail_lines=3)
    assert not missed_before(marker, ["2026-01-01T10:00:05Z a", *later[:1]], tail_lines=2)


def test_a_stream_delivering_lines_of_one_timestamp_one_by_one_prints_each():
    # A runtime may stamp several lines with the same time; a follow stream brings them one at a time.
    # Each piece continues the same read: the second line at that time is new, not a repeat.
    same = ["2026-01-01T10:00:05.2Z x", "2026-01-01T10:00:05.2Z y", "2026-01-01T10:00:05.2Z z"]
    printed, cursor, repeated = [], Cursor(), 0
    for line in same:
        fresh, cursor, repeated = advance_session(cursor, [line], repeated)
        printed += fresh
    assert printed == ["x", "y", "z"]
    assert cursor == Cursor(at=T + 2 * S // 10, same=3, lines=3)


def test_a_stream_reopened_at_the_cursor_skips_what_the_previous_one_printed():
    same = ["2026-01-01T10:00:05.2Z x", "2026-01-01T10:00:05.2Z y", "2026-01-01T10:00:06Z z"]
    cursor = Cursor(at=T + 2 * S // 10, same=2, lines=2)  # x and y printed by the first stream
    printed, repeated = [], 0
    for line in same:  # the reopened stream starts again at the cursor's second
        fresh, cursor, repeated = advance_session(cursor, [line], repeated)
        printed += fresh
    assert printed == ["z"]
