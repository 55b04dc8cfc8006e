"""How far a container's log has been printed, and which lines of a fresh read are new. Pure.

Every read of a container log (a follow stream, an incremental GET, the worker's last read after the
final event) asks for ``timestamps=true`` and starts at the cursor's ``sinceTime``, so a container can
move between a stream and polling, or from the triggerer to the worker, and still print each line once.

What the Kubernetes API does with those options (kubernetes/kubernetes, read at the v1.34 series):

* ``timestamps=true`` prefixes every line with the time the runtime recorded it and a space, in
  ``RFC3339NanoFixed`` (``pkg/kubelet/kuberuntime/logs/logs.go``, ``timeFormatOut``).
* ``sinceTime`` keeps the lines *at or after* it (``logWriter.write`` skips only
  ``msg.timestamp.Before(since)``), but the API server forwards it to the kubelet cut to whole
  seconds (``pkg/registry/core/pod/strategy.go`` ``LogLocation``: ``SinceTime.Format(time.RFC3339)``).
  A read from the cursor therefore repeats the lines of the cursor's second that were already printed.
* Several lines can carry the same timestamp. So the cursor keeps the newest timestamp printed and how
  many lines with exactly that timestamp were printed: a read skips every older line and that many of
  the lines at the cursor's timestamp. Lines of one container run arrive in the order they were
  written, and their timestamps never go back, which is all the rule needs.
* ``limitBytes`` may cut the last line of a read short; that fragment is left for the next read.

Timestamps are kept as integer nanoseconds since the epoch: a ``datetime`` keeps microseconds only, and
two lines in the same microsecond would read as one timestamp with the wrong count.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$")
NANO = 1_000_000_000


def parse_stamp(text: str) -> int | None:
    """Nanoseconds since the epoch of an RFC 3339 timestamp (fraction optional, up to 9 digits)."""
    match = _STAMP.match(text)
    if match is None:
        return None
    base, fraction, offset = match.groups()
    try:
        whole = datetime.fromisoformat(base + ("+00:00" if offset == "Z" else offset))
    except ValueError:
        return None
    return int(whole.timestamp()) * NANO + int((fraction or "").ljust(9, "0"))


def format_seconds(ns: int) -> str:
    """``sinceTime`` for a cursor: its second, rounded down (the API server keeps seconds only)."""
    return datetime.fromtimestamp(ns // NANO, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def split_line(line: str) -> tuple[int | None, str]:
    """(timestamp, text) of a line read with ``timestamps=true``; (None, line) when it carries none."""
    stamp, sep, text = line.partition(" ")
    at = parse_stamp(stamp) if sep else None
    return (at, text) if at is not None else (None, line)


def complete_lines(body: str, *, limited: bool) -> list[str]:
    """The lines of a log read's body. A read cut by ``limitBytes`` may end inside a line: that
    fragment is dropped (the next read starts at it), unless it is all there is (a line longer than the
    limit is shown cut rather than never)."""
    lines = body.split("\n")
    tail = lines.pop()  # "" when the body ends with a newline
    if tail and (not limited or not lines):
        lines.append(tail)
    return [line.rstrip("\r") for line in lines]


@dataclass(frozen=True)
class Cursor:
    """What of one container run was printed: the newest timestamp, how many lines carried exactly
    that timestamp, and the lines printed in all."""

    at: int | None = None
    same: int = 0
    lines: int = 0

    def since_time(self) -> str | None:
        """The ``sinceTime`` a read from here asks for; None reads from the first line."""
        return None if self.at is None else format_seconds(self.at)

    def to_json(self) -> dict[str, int | None]:
        return {"at": self.at, "same": self.same, "lines": self.lines}

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Cursor:
        at = value.get("at")
        return cls(
            at=int(at) if at is not None else None,
            same=int(value.get("same") or 0),
            lines=int(value.get("lines") or 0),
        )


def advance(cursor: Cursor, lines: Iterable[str]) -> tuple[list[str], Cursor]:
    """The lines of a read (``timestamps=true``, from ``cursor.since_time()`` or from the start) not
    printed yet, without their timestamps, and the cursor once they are.

    A line without a timestamp (a runtime that wrote none) cannot be placed: it is shown, and does not
    move the cursor."""
    fresh, after, _ = advance_session(cursor, lines)
    return fresh, after


def advance_session(cursor: Cursor, lines: Iterable[str], repeated: int = 0) -> tuple[list[str], Cursor, int]:
    """:func:`advance` for a read that arrives in pieces, such as a follow stream's lines one by one:
    ``repeated`` is how many lines at the cursor's timestamp this read has already delivered (0 for its
    first piece), and the third value is that count for the next piece.

    The count belongs to the read, not to the cursor: a read repeats the printed lines of the cursor's
    second before it brings new ones, so within one read the n-th line at the cursor's timestamp is new
    once n exceeds what was printed, whichever piece brings it."""
    fresh: list[str] = []
    at, same, total = cursor.at, cursor.same, cursor.lines
    for line in lines:
        stamp, text = split_line(line)
        if stamp is None:
            fresh.append(text)
            total += 1
            continue
        if at is not None and stamp < at:
            continue
        if at is not None and stamp == at:
            repeated += 1
            if repeated <= same:
                continue
            same += 1
        else:
            at, same, repeated = stamp, 1, 1
        fresh.append(text)
        total += 1
    return fresh, replace(cursor, at=at, same=same, lines=total), repeated


@dataclass(frozen=True)
class LogMarker:
    """A container run whose last lines the trigger did not print before its final event: where its
    log is, the prefix its lines carry in the task log, and the cursor to read on from.

    ``previous``: the run is the one before the container's current run (``previous=true``)."""

    pod: str
    container: str
    label: str
    cursor: Cursor = Cursor()
    previous: bool = False

    def query(self, tail_lines: int) -> dict[str, Any]:
        """The read that fetches what is missing, bounded to the last ``tail_lines`` lines."""
        return {
            "container": self.container,
            "since_time": self.cursor.since_time(),
            "timestamps": True,
            "tail_lines": tail_lines,
            "previous": self.previous,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "container": self.container,
            "label": self.label,
            "previous": self.previous,
            **self.cursor.to_json(),
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> LogMarker:
        return cls(
            pod=str(value.get("pod") or ""),
            container=str(value.get("container") or ""),
            label=str(value.get("label") or value.get("pod") or ""),
            cursor=Cursor.from_json(value),
            previous=bool(value.get("previous")),
        )
