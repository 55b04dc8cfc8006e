"""What people did to a job and the runs it had, as recorded on the job itself. No I/O.

A stop deletes a job's pods and drops its ``admitted-at``; a resume removes ``stopped-at`` /
``stopped-by``; a cancel has the controller delete the pods. Read from what is left, a job that ran and
was cancelled never started, and a job stopped and resumed shows one wait across two runs. So each
action (``usecases/actions.py``) appends one entry to the job's ``airflow-jobs.io/history`` annotation, in the
same write that acts: what it did, when and who did it, and for a stop or a cancel the run it ended
(admitted when, first container started when, how many GPUs), read from the pods before they go.

The annotation is a JSON list, oldest first, bounded to the newest :data:`KEEP` entries (an annotation
may not grow without bound: the API server caps a job's annotations at 256 KiB). A value that is not
such a list, or an entry that cannot be read, is skipped: history is shown, never trusted for a
decision.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from airflow_jobs_plugin.cluster.objects import as_int, parse_time
from airflow_jobs_plugin.jobs import labels

# Stop/resume pairs a person can make in a job's life before the oldest are forgotten.
KEEP = 64


class Act(str, Enum):
    """What a person did to the job."""

    STOPPED = "stopped"
    RESUMED = "resumed"
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class Run:
    """A stretch in which the job held GPUs: admitted, its first container started (``None`` if none
    did), ended (``None`` while it lasts)."""

    admitted_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    gpus: int

    def gpu_seconds(self, now: datetime) -> float:
        """GPU-seconds of the run, from its admission to its end (or ``now``)."""
        end = self.ended_at or now
        return max(0.0, (end - self.admitted_at).total_seconds()) * self.gpus


@dataclass(frozen=True)
class Entry:
    """One action: ``act`` at ``at`` by ``by``; ``run`` the run it ended (a stop's or a cancel's)."""

    act: Act
    at: datetime
    by: str
    run: Run | None = None


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat().replace("+00:00", "Z")


def _entry_json(entry: Entry) -> dict[str, object]:
    out: dict[str, object] = {"act": entry.act.value, "at": _iso(entry.at), "by": entry.by}
    if entry.run is not None:
        out["run"] = {
            "admitted": _iso(entry.run.admitted_at),
            "started": _iso(entry.run.started_at),
            "gpus": entry.run.gpus,
        }
    return out


def _entry(raw: object) -> Entry | None:
    if not isinstance(raw, Mapping):
        return None
    act = next((a for a in Act if a.value == raw.get("act")), None)
    at = parse_time(raw.get("at"))
    if act is None or at is None:
        return None
    run = None
    ran = raw.get("run")
    if isinstance(ran, Mapping):
        admitted = parse_time(ran.get("admitted"))
        if admitted is not None:
            run = Run(admitted, parse_time(ran.get("started")), at, as_int(ran.get("gpus")) or 0)
    return Entry(act, at, str(raw.get("by") or "a user"), run)


def entries(annotations: Mapping[str, str]) -> tuple[Entry, ...]:
    """The job's recorded actions, oldest first (none when the annotation is absent or unreadable)."""
    text = annotations.get(labels.HISTORY)
    if not text:
        return ()
    try:
        raw = json.loads(text)
    except ValueError:
        return ()
    if not isinstance(raw, list):
        return ()
    found = (_entry(item) for item in raw)
    return tuple(sorted((e for e in found if e is not None), key=lambda e: e.at))


def appended(annotations: Mapping[str, str], entry: Entry) -> str:
    """The annotation's value with ``entry`` added (the newest :data:`KEEP` kept)."""
    kept = [*entries(annotations), entry][-KEEP:]
    return json.dumps([_entry_json(e) for e in kept], separators=(",", ":"))


def run_ended(admitted_at: datetime | None, started_at: datetime | None, gpus: int) -> Run | None:
    """The run an action ends, as it was when the action read the job and its pods (``None`` for a
    job never admitted: it held no GPUs). A pod start before the admission belongs to an earlier run."""
    if admitted_at is None:
        return None
    if started_at is not None and started_at < admitted_at.replace(microsecond=0):
        started_at = None
    return Run(admitted_at, started_at, None, gpus)


def last(found: Iterable[Entry], act: Act) -> Entry | None:
    """The newest entry of ``act``."""
    return next((e for e in reversed(tuple(found)) if e.act is act), None)
