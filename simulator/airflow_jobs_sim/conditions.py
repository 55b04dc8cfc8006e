"""Status conditions over plain object dicts, as the built-in controllers write them.

Pure: the simulated controllers and the kubelet's model (``kubelet_model``) share them.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from airflow_jobs_sim.clock import rfc3339


def get_condition(conditions: Iterable[dict] | None, type_: str) -> dict | None:
    """The condition of type ``type_`` (None when absent)."""
    for cond in conditions or ():
        if cond.get("type") == type_:
            return cond
    return None


def condition_true(conditions: Iterable[dict] | None, type_: str) -> bool:
    """Whether the condition ``type_`` is present with status True."""
    cond = get_condition(conditions, type_)
    return cond is not None and cond.get("status") == "True"


def set_condition(
    conditions: list[dict] | None,
    type_: str,
    status: str,
    now: datetime,
    reason: str | None = None,
    message: str | None = None,
    *,
    style: str = "pod",
) -> list[dict]:
    """A copy of ``conditions`` with ``type_`` set; the transition time moves only when the status changes.

    ``style`` picks the timestamps each kind carries: "pod" (``lastProbeTime: null``), "job" (probe and
    transition times, as the Job controller writes them) or "node" (``lastHeartbeatTime``).
    """
    out = [dict(c) for c in conditions or ()]
    stamp = rfc3339(now)
    cond: dict[str, Any] | None = next((c for c in out if c.get("type") == type_), None)
    if cond is None:
        cond = {"type": type_, "status": status, "lastTransitionTime": stamp}
        out.append(cond)
    elif cond.get("status") != status:
        cond["lastTransitionTime"] = stamp
    cond["status"] = status
    if style == "pod":
        cond.setdefault("lastProbeTime", None)
    elif style == "job":
        cond["lastProbeTime"] = stamp
    elif style == "node":
        cond["lastHeartbeatTime"] = stamp
    _set_text(cond, reason, message)
    return out


def _set_text(cond: dict, reason: str | None, message: str | None) -> None:
    for key, value in (("reason", reason), ("message", message)):
        if value:
            cond[key] = value
        else:
            cond.pop(key, None)
