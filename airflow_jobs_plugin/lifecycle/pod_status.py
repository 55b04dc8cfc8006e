"""The READY, STATUS and RESTARTS columns of ``kubectl get pods``, computed from a pod dict.

Operators read pod health in kubectl's words, so the product prints exactly what kubectl prints (the
server-side table printer of the API server, which kubectl shows). The rules, in the printer's order:

1. The base is ``status.reason`` if set (``Evicted``, ``NodeLost``, ...), else ``status.phase``.
2. A ``PodScheduled`` condition with reason ``SchedulingGated`` turns it into ``SchedulingGated``.
3. Init containers are read in status order; the first one that has not completed decides:
   a started restartable (sidecar) init container is skipped; a terminated one gives
   ``Init:<reason>``, or ``Init:Signal:<n>`` / ``Init:ExitCode:<n>`` without a reason; a waiting one
   with a reason other than ``PodInitializing`` gives ``Init:<reason>``; otherwise ``Init:<i>/<n>``
   (``i`` init containers done out of ``n`` in the spec).
4. Unless an init container decided (and the pod is not ``Initialized``), regular containers are read
   from last to first, so the first container wins: a waiting reason, a terminated reason,
   ``Signal:<n>`` / ``ExitCode:<n>``; a ``Completed`` pod with a ready running container is ``Running``
   when the pod is Ready, else ``NotReady``.
5. A pod being deleted is ``Unknown`` when its status reason is ``NodeLost``, else ``Terminating``
   unless its phase is already ``Succeeded`` or ``Failed``.

READY counts ready regular containers plus started, ready sidecars over regular containers plus
sidecars. RESTARTS sums init container restarts while initializing, otherwise sidecar and regular
container restarts, and appends ``(<age> ago)`` of the most recent restart when there was one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_jobs_plugin.cluster.objects import as_utc, dig, parse_time
from airflow_jobs_plugin.cluster.records import PodFacts, pod_facts

NODE_LOST = "NodeLost"  # status.reason the node lifecycle controller sets on pods of unreachable nodes
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class PodRow:
    """One line of ``kubectl get pods``: NAME, READY, STATUS, RESTARTS, AGE."""

    name: str
    ready: str
    status: str
    restarts: str
    age: str


@dataclass(frozen=True)
class _Printed:
    ready: int
    total: int
    status: str
    restarts: int
    last_restart: datetime | None


def pod_status(pod: Mapping[str, Any]) -> str:
    """The STATUS column ``kubectl get pods`` prints for ``pod`` (e.g. ``Init:1/2``, ``CrashLoopBackOff``)."""
    return _print(pod_facts(pod)).status


def pod_ready(pod: Mapping[str, Any]) -> str:
    """The READY column, ``<ready>/<total>`` with restartable init containers (sidecars) counted."""
    printed = _print(pod_facts(pod))
    return f"{printed.ready}/{printed.total}"


def pod_restarts(pod: Mapping[str, Any]) -> int:
    """The restart count of the RESTARTS column, without the ``(<age> ago)`` suffix."""
    return _print(pod_facts(pod)).restarts


def columns(pod: PodFacts) -> tuple[str, str, int]:
    """STATUS, READY and the restart count of a pod already read, in one pass."""
    printed = _print(pod)
    return printed.status, f"{printed.ready}/{printed.total}", printed.restarts


def restarts_column(pod: Mapping[str, Any], now: datetime) -> str:
    """The RESTARTS column as printed, e.g. ``3 (42s ago)``, or ``0``."""
    return _restarts_text(_print(pod_facts(pod)), now)


def pod_row(pod: Mapping[str, Any], now: datetime) -> PodRow:
    """The whole ``kubectl get pods`` line for ``pod`` as seen at ``now``."""
    printed = _print(pod_facts(pod))
    return PodRow(
        name=str(dig(pod, "metadata", "name") or ""),
        ready=f"{printed.ready}/{printed.total}",
        status=printed.status,
        restarts=_restarts_text(printed, now),
        age=timestamp_age(dig(pod, "metadata", "creationTimestamp"), now),
    )


def _restarts_text(printed: _Printed, now: datetime) -> str:
    if printed.restarts and printed.last_restart is not None:
        ago = human_duration((as_utc(now) - printed.last_restart).total_seconds())
        return f"{printed.restarts} ({ago} ago)"
    return str(printed.restarts)


def timestamp_age(timestamp: Any, now: datetime) -> str:
    """An AGE cell: ``<unknown>`` without a timestamp, else the human duration since it."""
    moment = parse_time(timestamp)
    if moment is None:
        return "<unknown>"
    return human_duration((as_utc(now) - moment).total_seconds())


def human_duration(seconds: float) -> str:
    """A duration with two or three significant figures, as kubectl prints ages (``5m12s``, ``3d4h``).

    Up to a second of negative skew between clocks reads as ``0s``; more reads as ``<invalid>``.
    """
    # Go converts durations to whole units by truncation towards zero; int() does the same.
    whole = int(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        rest = whole % 60
        return f"{minutes}m" if rest == 0 else f"{minutes}m{rest}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = whole // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h" if rest == 0 else f"{hours}h{rest}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d" if rest == 0 else f"{hours // 24}d{rest}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        rest = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if rest == 0 else f"{hours // 24 // 365}y{rest}d"
    return f"{hours // 24 // 365}y"


def is_restartable_init_container(container: Mapping[str, Any] | None) -> bool:
    """A sidecar: an init container with ``restartPolicy: Always`` that keeps running next to the app."""
    return container is not None and container.get("restartPolicy") == "Always"


def _condition_true(pod: PodFacts, kind: str) -> bool:
    # The printer reads the first condition of the type for Initialized, any true one for Ready.
    for cond in pod.conditions:
        if cond.get("type") == kind:
            if kind != "Ready":
                return cond.get("status") == "True"
            if cond.get("status") == "True":
                return True
    return False


def _terminated_text(terminated: Mapping[str, Any], prefix: str) -> str:
    if terminated.get("reason"):
        return f"{prefix}{terminated['reason']}"
    signal = terminated.get("signal") or 0
    if signal:
        return f"{prefix}Signal:{signal}"
    return f"{prefix}ExitCode:{terminated.get('exitCode') or 0}"


def _later(current: datetime | None, candidate: Any) -> datetime | None:
    moment = parse_time(candidate)
    if moment is None:
        return current
    return moment if current is None or moment > current else current


def _print(pod: PodFacts) -> _Printed:
    spec_init = pod.init_containers
    init_by_name = {c.get("name"): c for c in spec_init} if spec_init else {}
    total = len(pod.containers) + sum(1 for c in spec_init if is_restartable_init_container(c))
    ready = 0
    restarts = 0
    sidecar_restarts = 0
    last_restart: datetime | None = None
    last_sidecar_restart: datetime | None = None

    phase = pod.phase or ""
    reason = pod.reason or phase
    for cond in pod.conditions:
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"

    initializing = False
    for index, status in enumerate(pod.init_container_statuses):
        state = status.get("state") or {}
        restarts += status.get("restartCount") or 0
        finished = dig(status, "lastState", "terminated", "finishedAt")
        last_restart = _later(last_restart, finished)
        sidecar = is_restartable_init_container(init_by_name.get(status.get("name")))
        if sidecar:
            sidecar_restarts += status.get("restartCount") or 0
            last_sidecar_restart = _later(last_sidecar_restart, finished)
        terminated = state.get("terminated")
        waiting = state.get("waiting")
        if terminated is not None and (terminated.get("exitCode") or 0) == 0:
            continue
        if sidecar and status.get("started"):
            if status.get("ready"):
                ready += 1
            continue
        if terminated is not None:
            reason = _terminated_text(terminated, "Init:")
        elif waiting is not None and waiting.get("reason") and waiting.get("reason") != "PodInitializing":
            reason = f"Init:{waiting['reason']}"
        else:
            reason = f"Init:{index}/{len(spec_init)}"
        initializing = True
        break

    if not initializing or _condition_true(pod, "Initialized"):
        restarts = sidecar_restarts
        last_restart = last_sidecar_restart
        has_running = False
        for status in reversed(pod.container_statuses):
            state = status.get("state") or {}
            restarts += status.get("restartCount") or 0
            last_restart = _later(last_restart, dig(status, "lastState", "terminated", "finishedAt"))
            waiting = state.get("waiting")
            terminated = state.get("terminated")
            if waiting is not None and waiting.get("reason"):
                reason = waiting["reason"]
            elif terminated is not None:
                reason = _terminated_text(terminated, "")
            elif status.get("ready") and state.get("running") is not None:
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            reason = "Running" if _condition_true(pod, "Ready") else "NotReady"

    deleting = pod.deleting
    if deleting and pod.reason == NODE_LOST:
        reason = "Unknown"
    elif deleting and phase not in TERMINAL_PHASES:
        reason = "Terminating"

    return _Printed(ready=ready, total=total, status=reason, restarts=restarts, last_restart=last_restart)
