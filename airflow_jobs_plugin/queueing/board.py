"""The queue board: what the admission controller decided about each waiting job, published for those
who only read. Pure: no I/O.

The admission controller is the only identity that admits (docs/quota.md, "Who admits"); the triggers
that follow jobs, the GPU Jobs page and the CLI only read. What they need to say why a job waits and
where it stands (``QUEUED (GroupQuota): group vision uses 6 of 8 GPUs; this job needs 4 (position 2)``)
is therefore written by the controller, once per queue and change, into a ConfigMap of its own: the
*board* of a queue unit (a group, or the cohort whose ledger holds several groups), and one board per
namespace for the jobs no pool queues (held for a reason the platform must fix, or let go at once).
A board costs one write per pass that changed a status, however many jobs it lists, where a status
written on each job would cost a write per job whose position moved: every job behind an admitted one.

A board's size is bounded: a ConfigMap's data holds at most 1 MiB (kubernetes v1.36.3
``pkg/apis/core/validation/validation.go`` ``ValidateConfigMap``: ``core.MaxSecretSize``), so the
entries are listed in queue order with their messages while they fit ``MAX_BOARD_BYTES``, then without
their messages, then not at all: a job past the listed ones reads "beyond the first N listed".

Whatever a board says was written by the controller, but it is decoded defensively: a reader never
fails on a board it cannot read, it only says that it cannot.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from airflow_jobs_plugin.cluster.objects import parse_rfc3339, rfc3339
from airflow_jobs_plugin.jobs import labels

# Every board carries this label: a reader watches the namespace's boards by it.
BOARD_LABEL = f"{labels.PREFIX}/queue-board"
BOARD_LABEL_VALUE = "true"
BOARD_SELECTOR = f"{BOARD_LABEL}={BOARD_LABEL_VALUE}"
# A unit's board is this prefix and the unit (the ledger of the unit is airflow-jobs-quota-<unit>).
BOARD_PREFIX = "airflow-jobs-queue-"
# The namespace's board: the jobs of no pool unit.
NAMESPACE_BOARD = "airflow-jobs-queue"
BOARD_KEY = "board.json"
FORMAT = 1
# Under the ConfigMap limit (1 MiB), with room for the object's metadata.
MAX_BOARD_BYTES = 900_000
# A message on a board is a line of a task log: bounded as QueueStatus bounds it.
MAX_MESSAGE_CHARS = 500


class BoardError(ValueError):
    """A board that cannot be read (not the product's format, or damaged)."""


@dataclass(frozen=True, slots=True)
class BoardEntry:
    """Why one job waits: the reason, its position in its queue (0 = next; None: not ordered), and the
    line the task log shows."""

    reason: str
    position: int | None = None
    message: str = ""


@dataclass(frozen=True)
class Board:
    """One unit's (or the namespace's: ``unit`` "") decisions as the controller last published them."""

    unit: str
    written_at: datetime
    writer: str
    entries: Mapping[str, BoardEntry] = field(default_factory=dict)  # by the job's uid
    # Entries dropped to fit the size bound, and the positions from which none is listed (None: all are).
    omitted: int = 0
    listed_below: int | None = None

    def entry(self, uid: str) -> BoardEntry | None:
        return self.entries.get(uid)


def board_name(unit: str) -> str:
    """The ConfigMap a unit's board lives in ("" : the namespace's board)."""
    return f"{BOARD_PREFIX}{unit}" if unit else NAMESPACE_BOARD


def _order(item: tuple[str, BoardEntry]) -> tuple[bool, int, str]:
    uid, entry = item
    return (entry.position is None, entry.position or 0, uid)


def encode(board: Board, limit: int = MAX_BOARD_BYTES) -> dict[str, str]:
    """The ConfigMap data of ``board``, its entries in queue order and within ``limit`` bytes."""
    rows: list[list[Any]] = []
    size = 200 + len(board.unit) + len(board.writer)
    omitted = 0
    listed_below: int | None = None
    for uid, entry in sorted(board.entries.items(), key=_order):
        message = entry.message[:MAX_MESSAGE_CHARS]
        row: list[Any] = [uid, entry.reason, entry.position, message]
        cost = len(json.dumps(row)) + 1
        if size + cost > limit:
            row, cost = [uid, entry.reason, entry.position], len(uid) + len(entry.reason) + 16
        if size + cost > limit:
            omitted += 1
            if entry.position is not None and listed_below is None:
                listed_below = entry.position
            continue
        rows.append(row)
        size += cost
    body = {
        "format": FORMAT,
        "unit": board.unit,
        "at": rfc3339(board.written_at),
        "writer": board.writer,
        "omitted": omitted + board.omitted,
        "listedBelow": listed_below if listed_below is not None else board.listed_below,
        "jobs": rows,
    }
    return {BOARD_KEY: json.dumps(body, separators=(",", ":"))}


def decode(data: Mapping[str, Any] | None) -> Board:
    """A board from its ConfigMap data; ``BoardError`` naming what is wrong with it."""
    text = (data or {}).get(BOARD_KEY)
    if not isinstance(text, str):
        raise BoardError(f"no {BOARD_KEY} key")
    try:
        body = json.loads(text)
    except ValueError as exc:
        raise BoardError(f"{BOARD_KEY} is not JSON: {exc}") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise BoardError(f"{BOARD_KEY} is not a board of format {FORMAT}")
    try:
        written_at = parse_rfc3339(str(body.get("at")))
    except ValueError:
        raise BoardError(f"{BOARD_KEY} has no readable time") from None
    entries: dict[str, BoardEntry] = {}
    for row in body.get("jobs") or ():
        entry = _entry(row)
        if entry is not None:
            entries[entry[0]] = entry[1]
    listed_below = body.get("listedBelow")
    omitted = body.get("omitted")
    return Board(
        unit=str(body.get("unit") or ""),
        written_at=written_at,
        writer=str(body.get("writer") or ""),
        entries=entries,
        omitted=omitted if isinstance(omitted, int) and omitted >= 0 else 0,
        listed_below=listed_below if isinstance(listed_below, int) and listed_below >= 0 else None,
    )


def _entry(row: Any) -> tuple[str, BoardEntry] | None:
    if not isinstance(row, list) or len(row) < 3:
        return None
    uid, reason, position = row[0], row[1], row[2]
    message = row[3] if len(row) > 3 else ""
    if not isinstance(uid, str) or not uid or not isinstance(reason, str):
        return None
    if position is not None and (not isinstance(position, int) or isinstance(position, bool) or position < 0):
        return None
    return uid, BoardEntry(reason, position, message[:MAX_MESSAGE_CHARS] if isinstance(message, str) else "")


def configmap(board: Board, namespace: str) -> dict[str, Any]:
    """The whole ConfigMap object of ``board`` (to create, or to replace with a resourceVersion)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": board_name(board.unit),
            "namespace": namespace,
            "labels": {
                BOARD_LABEL: BOARD_LABEL_VALUE,
                labels.MANAGED_BY: labels.MANAGED_BY_VALUE,
            },
        },
        "data": encode(board),
    }


def changed(old: Mapping[str, BoardEntry] | None, new: Mapping[str, BoardEntry]) -> bool:
    """Whether publishing ``new`` over ``old`` changes what any reader is told."""
    return old is None or dict(old) != dict(new)


def merged(boards: Iterable[Board]) -> dict[str, tuple[Board, BoardEntry]]:
    """Every entry of ``boards`` by job uid, with the board it is on (a job is on one board; should two
    list it while the controller moves it from one unit to another, the newer board wins)."""
    found: dict[str, tuple[Board, BoardEntry]] = {}
    for board in sorted(boards, key=lambda b: b.written_at):
        for uid, entry in board.entries.items():
            found[uid] = (board, entry)
    return found
