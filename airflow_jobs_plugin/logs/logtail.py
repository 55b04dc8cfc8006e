"""The last lines the trigger did not print: read on the worker, in ``execute_complete``.

The trigger yields its final event without waiting for slow log streams (:mod:`~airflow_jobs_plugin.
logstream`); for each container run it had not printed to its end, the event carries a
:class:`~airflow_jobs_plugin.logs.logcursor.LogMarker`. This reads each run once from its cursor, bounded to
its last ``TAIL_LINES`` lines, and prints only what follows the cursor, so the task log ends with every
run's last lines, each once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from airflow_jobs_plugin.cluster.kube import KubeClient, KubeError
from airflow_jobs_plugin.logs.logcursor import LogMarker, advance, complete_lines, split_line
from airflow_jobs_plugin.logs.logstream import LineSink

TAIL_LINES = 1000  # per run: a run that printed more since its cursor shows its last 1,000 lines
READ_TIMEOUT = 30.0  # per read: a slow API server delays the task's end this long at most


def missed_before(marker: LogMarker, lines: Sequence[str], tail_lines: int) -> bool:
    """Whether the read was cut by ``tail_lines`` before the cursor: it returned that many lines and
    none of them is at or before the cursor, so lines between the two were not read."""
    if len(lines) < tail_lines:
        return False
    first, _ = split_line(lines[0])
    at = marker.cursor.at
    return first is None or at is None or first > at


async def print_missing(
    client: KubeClient,
    namespace: str,
    markers: Sequence[LogMarker],
    log: LineSink,
    *,
    tail_lines: int = TAIL_LINES,
) -> list[str]:
    """Print, prefixed by replica, the lines of each run after its marker; returns them as printed."""
    printed: list[str] = []
    for marker in markers:
        query = marker.query(tail_lines)
        try:
            body = await asyncio.wait_for(client.read_log(namespace, marker.pod, **query), READ_TIMEOUT)
        except (TimeoutError, KubeError) as exc:
            reason = "its pod is gone" if isinstance(exc, KubeError) and exc.not_found else str(exc)
            log.info("[%s] (the last log lines could not be read: %s)", marker.label, reason)
            continue
        lines = complete_lines(body, limited=False)
        if missed_before(marker, lines, tail_lines):
            log.info("[%s] (earlier lines skipped: airflow-jobs logs shows the whole log)", marker.label)
        fresh, _ = advance(marker.cursor, lines)
        for text in fresh:
            line = f"[{marker.label}] {text}"
            log.info("%s", line)
            printed.append(line)
    return printed
