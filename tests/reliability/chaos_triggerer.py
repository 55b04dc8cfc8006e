"""A triggerer stand-in for the chaos test: one OS process running every deferred trigger on one loop.

It behaves as Airflow's triggerer does towards a trigger: it only ever sees ``serialize()`` output
(classpath and kwargs), imports the class, rebuilds the trigger with ``cls(**kwargs)``, runs it and
keeps its first event. The test kills it with SIGKILL at any moment and starts a new one, which
rebuilds every trigger whose event was not yet recorded.

Files (JSON lines, appended and fsynced so a SIGKILL never leaves half a record behind as the last
complete line):

- the *deferrals* file, written by the test: ``{"task": ..., "classpath": ..., "kwargs": {...}}``;
- the *events* file, written here: ``{"task": ..., "pid": ..., "event": {...}}`` for a trigger's event,
  or ``{"task": ..., "pid": ..., "error": "...", "traceback": "..."}`` when its ``run()`` raised
  (Airflow fails the task then).

Every record carries ``at``, the wall-clock time it was written, for reading a run's timeline afterwards.
The process logs to a file at WARNING (``CHAOS_TRIGGERER_LOG_LEVEL=INFO`` for more): the admission pool's
warnings are what the chaos test counts.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import os
import time
import traceback
from pathlib import Path
from typing import Any


def append_record(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON line and make it durable before returning."""
    line = json.dumps({**record, "at": time.time()}, sort_keys=True) + "\n"
    with path.open("a", encoding="utf-8") as out:
        out.write(line)
        out.flush()
        os.fsync(out.fileno())


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every complete JSON line of ``path`` (a torn last line, from a killed writer, is skipped)."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records


def _rebuild(classpath: str, kwargs: dict[str, Any]) -> Any:
    module, _, name = classpath.rpartition(".")
    return getattr(importlib.import_module(module), name)(**kwargs)


async def _follow(task: str, classpath: str, kwargs: dict[str, Any], events: Path) -> None:
    trigger = _rebuild(classpath, kwargs)
    try:
        async for event in trigger.run():
            append_record(events, {"task": task, "pid": os.getpid(), "event": event.payload})
            return
        append_record(events, {"task": task, "pid": os.getpid(), "error": "run() ended without an event"})
    except Exception as exc:  # the triggerer fails the task when run() raises; record it as such
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        where = traceback.format_exc(limit=-4)
        append_record(events, {"task": task, "pid": os.getpid(), "error": detail, "traceback": where})


async def _serve(deferrals: Path, events: Path, poll: float, ready) -> None:
    done = {r["task"] for r in read_records(events)}
    running: dict[str, asyncio.Task] = {}
    first = True
    while True:
        for record in read_records(deferrals):
            task = record["task"]
            if task in done or task in running:
                continue
            running[task] = asyncio.create_task(
                _follow(task, record["classpath"], record["kwargs"], events), name=task
            )
        for task, handle in list(running.items()):
            if handle.done():
                done.add(task)
                del running[task]
        if first:
            first = False
            ready.set()
        await asyncio.sleep(poll)


def triggerer_main(
    deferrals: str, events: str, log_path: str, connection: str, ready, poll: float = 0.1
) -> None:
    """Entry point of the triggerer process: serve triggers until killed; ``ready`` is set once every
    pending trigger has been rebuilt."""
    # The process may be forked from a server started before the test set the connection: set it here.
    os.environ["AIRFLOW_CONN_KUBERNETES_DEFAULT"] = connection
    import airflow_jobs_plugin.airflow.triggers  # noqa: F401 - Airflow sets up its logging on import; ours goes after

    handler = logging.FileHandler(log_path)
    handler.setFormatter(logging.Formatter(f"%(asctime)s {os.getpid()} %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(os.environ.get("CHAOS_TRIGGERER_LOG_LEVEL", "WARNING"))
    asyncio.run(_serve(Path(deferrals), Path(events), poll, ready))
