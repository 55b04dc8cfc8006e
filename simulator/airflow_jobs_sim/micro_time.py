"""``metav1.MicroTime`` as the API server's JSON decoder reads it, and as it writes it back.

k8s.io/apimachinery v0.36.3 ``pkg/apis/meta/v1/micro_time.go``: ``UnmarshalJSON`` parses the text with Go's
``time.Parse(RFC3339Micro, ...)``, layout ``2006-01-02T15:04:05.000000Z07:00``, and ``MarshalJSON``
writes ``t.UTC().Format(RFC3339Micro)``. So the server wants exactly six fractional digits (no fewer,
no more, none at all is refused), a ``Z`` or a ``+hh:mm`` offset, and answers the time in UTC.

The errors are Go's ``time.ParseError`` texts (Go's ``src/time/format.go``: ``Parse`` walks the layout's
chunks; a chunk that does not match is ``cannot parse "<rest of the value>" as "<chunk>"``, a number out
of its range is ``<what> out of range``, text after the layout is ``extra text``), which the API server
puts after ``Lease in version "v1" cannot be handled as a Lease:`` in a 400.
"""

from __future__ import annotations

import calendar
from datetime import datetime, timedelta, timezone

LAYOUT = "2006-01-02T15:04:05.000000Z07:00"


class MicroTimeError(ValueError):
    """The text is no MicroTime; the message is Go's."""


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _cannot(value: str, rest: str, chunk: str) -> MicroTimeError:
    return MicroTimeError(
        f"parsing time {_quote(value)} as {_quote(LAYOUT)}: cannot parse {_quote(rest)} as {_quote(chunk)}"
    )


def _out_of_range(value: str, what: str) -> MicroTimeError:
    return MicroTimeError(f"parsing time {_quote(value)}: {what} out of range")


def _digit(text: str, i: int) -> bool:
    return len(text) > i and "0" <= text[i] <= "9"


def _getnum(text: str, fixed: bool) -> tuple[int, str] | None:
    """Go's ``getnum``: one or two leading digits (two when ``fixed``)."""
    if not _digit(text, 0):
        return None
    if not _digit(text, 1):
        return None if fixed else (int(text[0]), text[1:])
    return int(text[:2]), text[2:]


def _atoi(text: str) -> int | None:
    """Go's ``time.atoi``: an optional sign, then digits to the end."""
    sign = -1 if text[:1] == "-" else 1
    digits = text[1:] if text[:1] in ("-", "+") else text
    if not digits.isascii() or not digits.isdigit():
        return None if digits else 0
    return sign * int(digits)


def parse(value: str) -> datetime:
    """The time ``value`` names, as Go's ``time.Parse(RFC3339Micro, value)`` reads it (aware, in the
    offset written); :class:`MicroTimeError` with Go's message otherwise."""
    rest = value
    # 2006: four characters, an optional sign and digits.
    if len(rest) < 4 or _atoi(rest[:4]) is None:
        raise _cannot(value, rest, "2006")
    year, rest = _atoi(rest[:4]) or 0, rest[4:]
    fields = {}
    for literal, chunk, fixed, limit, what in (
        ("-", "01", True, None, "month"),
        ("-", "02", True, None, ""),
        ("T", "15", False, 24, "hour"),
        (":", "04", True, 60, "minute"),
        (":", "05", True, 60, "second"),
    ):
        if not rest.startswith(literal):
            raise _cannot(value, rest, literal)
        rest = rest[len(literal) :]
        got = _getnum(rest, fixed)
        if got is None:
            raise _cannot(value, rest, chunk)
        number, rest = got
        if chunk == "01" and not 1 <= number <= 12 or limit is not None and number >= limit:
            raise _out_of_range(value, what)
        fields[chunk] = number
    # .000000: exactly a period (or comma) and six digits.
    if len(rest) < 7 or rest[0] not in ".,":
        raise _cannot(value, rest, ".000000")
    micros = _atoi(rest[1:7])
    if micros is None:
        raise _cannot(value, rest, ".000000")
    if micros < 0:
        raise _out_of_range(value, "fractional second")
    rest = rest[7:]
    # Z07:00: "Z", or a sign and hh:mm.
    if rest.startswith("Z"):
        offset, rest = 0, rest[1:]
    else:
        if len(rest) < 6 or rest[3] != ":":
            raise _cannot(value, rest, "Z07:00")
        hours, minutes = _getnum(rest[1:3], True), _getnum(rest[4:6], True)
        if hours is None or minutes is None or rest[0] not in "+-":
            raise _cannot(value, rest, "Z07:00")
        if hours[0] > 24:
            raise _out_of_range(value, "time zone offset hour")
        if minutes[0] > 60:
            raise _out_of_range(value, "time zone offset minute")
        offset = (hours[0] * 60 + minutes[0]) * 60 * (1 if rest[0] == "+" else -1)
        rest = rest[6:]
    if rest:
        raise MicroTimeError(f"parsing time {_quote(value)}: extra text: {_quote(rest)}")
    month, day = fields["01"], fields["02"]
    if not 1 <= year <= 9999 or day < 1 or day > calendar.monthrange(year, month)[1]:
        # Go's range is wider (years 0 to 9999 and beyond); the server would take a year 0, this does not.
        raise MicroTimeError(f"parsing time {_quote(value)}: day out of range")
    return datetime(
        year,
        month,
        day,
        fields["15"],
        fields["04"],
        fields["05"],
        micros,
        tzinfo=timezone(timedelta(seconds=offset)),
    )


def normalize(value: str) -> str:
    """``value`` as the server writes it back: UTC, six digits (``MicroTime.MarshalJSON``)."""
    return format_time(parse(value))


def format_time(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
