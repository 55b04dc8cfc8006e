"""A triggerer-like process: N triggers on one asyncio loop, each following one job to its final event.

Run by the benchmark drivers: ``python tracker.py --kind ours|cncf --names names.json --namespace ns
--out result.json``. The ``kubernetes_default`` connection comes from ``AIRFLOW_CONN_KUBERNETES_DEFAULT``,
as in a triggerer.

- ``ours``: :class:`~airflow_jobs_plugin.airflow.triggers.JobTrigger` as ``JobOperator`` defers to it.
- ``cncf``: the cncf provider's ``KubernetesJobTrigger`` as its ``KubernetesJobOperator`` defers to it
  in deferrable mode (default ``job_poll_interval`` of 10 s, ``get_logs`` on, no XCom sidecar).

Each trigger's logger is replaced by a recorder that formats every line as a logger would and keeps the
time each lifecycle state was first logged; the time of each trigger's final event is kept too. For
``ours`` a listener on the shared watch also records when the process *received* each job's Complete
condition and first Running pod, which splits a latency into delivery and reaction.

Prints ``@bench {"ready": t}`` once imports are done and the triggers are about to start; ``ours`` also
prints ``@bench {"received_all_running": t}`` the moment its watch has received a Running pod of every
job (the driver opens its steady-state window from there). Writes the results (times, CPU samples, peak
memory, the container log lines each task log got, the log markers each final event left to the worker)
to ``--out`` when every trigger has fired, at ``--cap`` seconds, or once ``--stop-file`` exists,
whichever comes first.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import json
import math
import os
import resource
import signal
import sys
import time
import tracemalloc
import types
from array import array
from collections import Counter
from typing import Any

SAMPLE_SECONDS = 0.5
# Line latency histogram: 10 ms bins up to 300 s, the last bin holds everything above.
LATENCY_BIN = 0.01
LATENCY_BINS = 30000
SETTLED_AFTER = 20.0  # seconds after every job's pod runs: the allocators are read a second time
MARK = "@bench "  # protocol lines start with it: imports may print to stdout too


def announce(**message: Any) -> None:
    """One protocol line to the driver, written at once (other output shares stdout)."""
    sys.stdout.write(MARK + json.dumps(message) + "\n")
    sys.stdout.flush()


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def memory_kb() -> tuple[int, int]:
    """(current RSS, peak RSS) of this process in kB, from /proc/self/status."""
    rss = hwm = 0
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
                elif line.startswith("VmHWM:"):
                    hwm = int(line.split()[1])
    except OSError:
        hwm = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss, hwm


def request_key(method: str, url: str, query: Any = None) -> str:
    """``"verb resource[/subresource]"`` of one API request, as the simulator's server counts it
    (``simulator/airflow_jobs_sim/server.py`` ``_verb``): list, watch, get, create, patch, update, delete."""
    from urllib.parse import parse_qs, urlsplit

    parts = urlsplit(url)
    path = [p for p in parts.path.split("/") if p]
    # /api/v1/... or /apis/<group>/<version>/...; then [namespaces/<ns>/]<plural>[/<name>[/<sub>]]
    rest = path[2:] if path[:1] == ["api"] else path[3:]
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) != 2:
        rest = rest[2:]
    plural = rest[0] if rest else "-"
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    method = method.upper()
    if method == "GET":
        # kubernetes_asyncio passes the query apart from the URL (``query_params``: pairs or a dict).
        pairs = list(parse_qs(parts.query).items()) + list(
            (query.items() if isinstance(query, dict) else query) or []
        )
        watching = any(k == "watch" and str(v).strip("[]'").lower() in ("true", "1") for k, v in pairs)
        verb = "get" if name else "watch" if watching else "list"
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method, method)
    return f"{verb} {plural}/{sub}" if sub else f"{verb} {plural}"


class Requests:
    """Every API request this process sends, counted on the client side by ``"verb resource"``: wraps
    ``kubernetes_asyncio``'s ``RESTClientObject.request``, through which both the product's
    ``KubeClient`` (``call_api``) and the cncf provider's hook send everything, watches and log streams
    included. The same count on the simulator and on a real API server (whose own counters,
    ``apiserver_request_total``, do not say which client sent a request)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.samples: list[tuple[float, dict[str, int]]] = []
        self.announce_at: dict[str, int] = {}  # key -> count: announce ``requests_<key>`` once reached

    def install(self) -> None:
        from kubernetes_asyncio.client import rest

        original = rest.RESTClientObject.request
        counts = self.counts
        wanted = self.announce_at

        @functools.wraps(original)
        async def counted(client: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            key = request_key(method, url, kwargs.get("query_params", args[0] if args else None))
            counts[key] += 1
            if key in wanted and counts[key] >= wanted[key]:
                del wanted[key]
                announce(**{f"requests_{key}": time.time()})
            return await original(client, method, url, *args, **kwargs)

        rest.RESTClientObject.request = counted  # type: ignore[method-assign]

    def sample(self) -> None:
        self.samples.append((time.time(), dict(self.counts)))


REQUESTS = Requests()


class LineClock:
    """How soon each container line reached its task log: the writer (the plane's player, or the
    stand-in's ticker) puts its wall time in the line (``tick K due=T wrote=W``); the line's latency is
    the time it was logged minus ``W``, and the writer's own lag is ``W - T``. Counted in histograms of
    10 ms bins (a few hundred KB whatever the number of lines), apart by what its container held when
    the line was written, not by the path that brought it:

    - ``streamed``: its container held a follow stream at ``W`` (opened at or before it): the budget's
      promise, whichever read delivered the line (an ended run's last read too);
    - ``polled``: it held none, and a read in turn brought the line;
    - ``handed_over``: it held none, and a stream it got later brought the line (the backlog a new
      stream delivers from the cursor): a polled line too, reported apart;
    - ``worker``: the worker's ``execute_complete`` (``logtail``) printed it.

    A container's streams are the follow requests the hub sent for its pod: from the moment the request
    is sent to the moment the stream ends (its generator closes)."""

    CLASSES = ("streamed", "polled", "handed_over", "worker")

    def __init__(self) -> None:
        self.source = "read"  # set by the wrapped log calls just before the lines they return are taken
        self.pod = ""  # the pod of those lines, set with ``source``
        self.worker = False  # the worker's path (execute_complete) is reading
        # Each pod's streams: [opened, closed or None], in order (a pod has one or a few).
        self.streams: dict[str, list[list[float | None]]] = {}
        self.hist = {s: array("l", bytes(8 * (LATENCY_BINS + 1))) for s in self.CLASSES}
        self.writer_lag = array("l", bytes(8 * (LATENCY_BINS + 1)))
        self.ticks = 0

    def install(self) -> None:
        from airflow_jobs_plugin.cluster.kube import KubeClient

        clock = self
        follow_log, read_log = KubeClient.follow_log, KubeClient.read_log

        @functools.wraps(follow_log)
        async def following(client: Any, namespace: str, pod: str, *args: Any, **kwargs: Any) -> Any:
            held: list[float | None] = [time.time(), None]
            clock.streams.setdefault(pod, []).append(held)
            try:
                async for line in follow_log(client, namespace, pod, *args, **kwargs):
                    # The hub takes the line synchronously after this yield: nothing else runs between.
                    clock.source, clock.pod = "stream", pod
                    yield line
            finally:
                held[1] = time.time()

        @functools.wraps(read_log)
        async def reading(client: Any, namespace: str, pod: str, *args: Any, **kwargs: Any) -> Any:
            body = await read_log(client, namespace, pod, *args, **kwargs)
            clock.source, clock.pod = ("worker" if clock.worker else "read"), pod
            return body

        KubeClient.follow_log = following  # type: ignore[method-assign]
        KubeClient.read_log = reading  # type: ignore[method-assign]

    @staticmethod
    def _bin(seconds: float) -> int:
        return min(LATENCY_BINS, max(0, int(seconds / LATENCY_BIN)))

    def held_stream(self, pod: str, wrote: float) -> bool:
        """Whether ``pod`` held a stream at ``wrote`` (one opened by then and not yet ended)."""
        return any(
            opened is not None and opened <= wrote and (closed is None or wrote <= closed)
            for opened, closed in self.streams.get(pod, ())
        )

    def classify(self, source: str, pod: str, wrote: float) -> str:
        if source == "worker":
            return "worker"
        if self.held_stream(pod, wrote):
            return "streamed"
        return "handed_over" if source == "stream" else "polled"

    def line(self, text: str, now: float) -> None:
        at = text.find(" wrote=")
        if at < 0:
            return
        try:
            wrote = float(text[at + 7 :].split()[0])
            due = float(text[text.index(" due=") + 5 :].split()[0])
        except (ValueError, IndexError):
            return
        self.ticks += 1
        self.hist[self.classify(self.source, self.pod, wrote)][self._bin(now - wrote)] += 1
        self.writer_lag[self._bin(wrote - due)] += 1

    @staticmethod
    def stats(hist: array) -> dict[str, Any]:
        total = sum(hist)
        out: dict[str, Any] = {"count": total}
        if not total:
            return {**out, "p50": None, "p99": None, "max": None}
        for q in (50, 99):
            rank, seen = max(1, math.ceil(q / 100 * total)), 0
            for i, c in enumerate(hist):
                seen += c
                if seen >= rank:
                    out[f"p{q}"] = round((i + 1) * LATENCY_BIN, 3)  # the bin's upper edge
                    break
        top = max(i for i, c in enumerate(hist) if c)
        out["max"] = (
            round((top + 1) * LATENCY_BIN, 3) if top < LATENCY_BINS else f">{LATENCY_BINS * LATENCY_BIN:g}"
        )
        return out

    @staticmethod
    def merged(*hists: array) -> array:
        every = array("l", bytes(8 * (LATENCY_BINS + 1)))
        for hist in hists:
            for i, c in enumerate(hist):
                if c:
                    every[i] += c
        return every

    def figures(self) -> dict[str, Any]:
        h = self.hist
        return {
            "ticks": self.ticks,
            # By what the container held when the line was written; "polled" counts the handed-over
            # lines too (they waited as polled lines do), and "handed_over" is that part alone.
            "by_class": {
                "streamed": self.stats(h["streamed"]),
                "polled": self.stats(self.merged(h["polled"], h["handed_over"])),
                "handed_over": self.stats(h["handed_over"]),
                "worker": self.stats(h["worker"]),
            },
            "all": self.stats(self.merged(*h.values())),
            "writer_lag": self.stats(self.writer_lag),
        }


LINES = LineClock()


class PeakClock:
    """The RSS peak per sample interval: each read resets the kernel's high-water mark (``VmHWM``, by
    writing 5 to ``/proc/self/clear_refs``, Linux 4.0+), so a sample's peak is the highest the RSS rose
    since the sample before, even between two samples; ``overall`` is the process's peak. Where the
    reset is refused, each read is the peak since the process started, as ``VmHWM`` always was."""

    def __init__(self) -> None:
        self.overall = 0

    def read(self) -> tuple[int, int]:
        """(current RSS, peak since the last read) in kB."""
        rss, hwm = memory_kb()
        self.overall = max(self.overall, hwm)
        try:
            with open("/proc/self/clear_refs", "w") as clear:
                clear.write("5")
        except OSError:
            pass
        return rss, hwm


PEAKS = PeakClock()


class Book:
    """Everything the process observed, by job name.

    The book lives in the measured process, so it is kept in flat arrays indexed by job (about 60
    bytes per job) rather than a dict of times per job (about 860 bytes per job with the log lines: 17
    MB at 20,000 jobs, counted in the RSS as if the triggers held it). :meth:`figures` turns it into
    the per-job dicts the drivers read, after the peak RSS has been read."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.index = {name: i for i, name in enumerate(names)}
        n = len(names)
        self._states: dict[str, array] = {}  # state -> first time it was logged, per job (NaN: never)
        self._received: dict[str, array] = {}  # "running" / "finished" -> first time received, per job
        self._others: dict[str, dict[str, float]] = {}
        # Each trigger's final event: when, its status and state, the log markers it left to the worker.
        self._event_t = array("d", [math.nan]) * n
        self._event_status: list[str | None] = [None] * n  # a few distinct strings: pointers only
        self._event_state: list[str | None] = [None] * n
        self._event_markers = array("l", bytes(8 * n))
        self.markers: dict[str, list] = {}  # job -> its final event's log markers (JSON), the few left
        self.lines = 0
        self.errors: list[str] = []
        # Container log lines (``[replica] text``) per job, and when the first one reached its task log.
        self._log_lines = array("l", bytes(8 * n))
        self._first_log_line = array("d", [math.nan]) * n
        self._last_log_line: list[str | None] = [None] * n
        self.running_received = 0  # jobs whose Running pod the watch delivered
        # With a quota policy (trace_admission): [start, end, group, conflicts, admitted, stale] of each
        # pass, [start, end, group, "pass"|"release", won] of each ledger write, [start, end, who] of
        # each back-off after a lost compare-and-swap.
        self.passes: list[list] = []
        self.writes: list[list] = []
        self.backoffs: list[list] = []

    def _first(self, table: dict[str, array], what: str, i: int) -> bool:
        times = table.get(what)
        if times is None:
            times = table[what] = array("d", [math.nan]) * len(self.names)
        if not math.isnan(times[i]):
            return False
        times[i] = time.time()
        return True

    def state(self, i: int, state: str) -> None:
        self._first(self._states, state, i)

    def receive(self, job: str, what: str) -> bool:
        """Note the first time ``what`` of ``job`` was received; True if this is that first time."""
        i = self.index.get(job)
        if i is None:  # another process's job (the admission benchmark reads when each process saw it)
            seen = self._others.setdefault(job, {})
            if what in seen:
                return False
            seen[what] = time.time()
            return True
        if not self._first(self._received, what, i):
            return False
        if what == "running":
            self.running_received += 1
        return True

    def log_line(self, i: int, text: str) -> None:
        self._log_lines[i] += 1
        if math.isnan(self._first_log_line[i]):
            self._first_log_line[i] = time.time()
        self._last_log_line[i] = text

    def event(self, job: str, status: str | None, state: str | None, markers: int) -> None:
        i = self.index[job]
        self._event_t[i] = time.time()
        self._event_status[i] = None if status is None else sys.intern(status)
        self._event_state[i] = None if state is None else sys.intern(state)
        self._event_markers[i] = markers

    def figures(self) -> dict[str, Any]:
        """The book as the drivers read it: per job name."""

        def by_job(table: dict[str, array]) -> dict[str, dict[str, float]]:
            out: dict[str, dict[str, float]] = {}
            for what, times in table.items():
                for name, t in zip(self.names, times, strict=True):
                    if not math.isnan(t):
                        out.setdefault(name, {})[what] = t
            return out

        named = list(zip(self.names, self._log_lines, self._first_log_line, self._last_log_line, strict=True))
        events = zip(
            self.names, self._event_t, self._event_status, self._event_state, self._event_markers, strict=True
        )
        return {
            "events": {
                name: {"t": t, "status": status, "state": state, "log_markers": markers}
                for name, t, status, state, markers in events
                if not math.isnan(t)
            },
            "states": by_job(self._states),
            "received": {**self._others, **by_job(self._received)},
            "container_log_lines": {name: count for name, count, _, _ in named if count},
            "first_log_line": {name: t for name, _, t, _ in named if not math.isnan(t)},
            "last_log_line": {name: text for name, _, _, text in named if text is not None},
        }


class TaskLog:
    """Stands in for a trigger's task logger. Formats each line (the cost a real logger pays at least)
    and notes the first time each state of its job was logged (``"<Kind> <job>: <STATE> ..."``)."""

    __slots__ = ("book", "job", "i")

    def __init__(self, book: Book, job: str):
        self.book = book
        self.job = job
        self.i = book.index[job]

    def _line(self, msg: Any, *args: Any, **_: Any) -> None:
        text = str(msg) % args if args else str(msg)
        self.book.lines += 1
        if text.startswith("["):
            self.book.log_line(self.i, text)
            LINES.line(text, time.time())
        at = text.find(self.job)
        end = at + len(self.job)
        if 0 < at <= 10 and text[at - 1] == " " and text.startswith(": ", end):
            words = text[end + 2 :].split()
            if words:
                self.book.state(self.i, words[0].rstrip(":"))

    debug = info = warning = error = exception = critical = _line

    def isEnabledFor(self, _level: int) -> bool:  # noqa: N802 - the logging API's name
        return True


def _complete(obj: dict) -> bool:
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


def build_triggers(kind: str, names: list[str], namespace: str, args: argparse.Namespace, book: Book) -> list:
    if kind == "ours":
        from airflow_jobs_plugin.airflow.triggers import JobTrigger

        triggers = [
            JobTrigger(
                job_name=name,
                namespace=namespace,
                stream_logs=args.stream_logs,
                quota_configmap=args.quota_configmap,
                quota_namespace=namespace if args.quota_configmap else None,
            )
            for name in names
        ]
    else:
        from airflow.providers.cncf.kubernetes.triggers.job import KubernetesJobTrigger

        pods: dict[str, str] = {}
        if args.pods:
            with open(args.pods) as f:
                pods = json.load(f)
        triggers = []
        for name in names:
            trigger = KubernetesJobTrigger(
                job_name=name,
                job_namespace=namespace,
                pod_names=[pods.get(name) or f"{name}-pod"],
                pod_namespace=namespace,
                base_container_name="main",
                kubernetes_conn_id="kubernetes_default",
                poll_interval=args.poll_interval,
                get_logs=True,
                do_xcom_push=False,
            )
            trigger.hook._log = TaskLog(book, name)  # noqa: SLF001 - the hook logs every poll
            triggers.append(trigger)
    for trigger, name in zip(triggers, names, strict=True):
        trigger._log = TaskLog(book, name)  # noqa: SLF001 - LoggingMixin's cached logger
    return triggers


async def follow(trigger: Any, name: str, book: Book) -> None:
    try:
        async for event in trigger.run():
            payload = event.payload
            # Logs the trigger had not finished printing: the worker prints the rest.
            book.event(
                name, payload.get("status"), payload.get("state"), len(payload.get("log_markers") or ())
            )
            if payload.get("log_markers"):
                book.markers[name] = payload["log_markers"]
            break
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a trigger that dies is a result too
        book.errors.append(f"{name}: {type(exc).__name__}: {exc}")
        book.event(name, "crashed", None, 0)


async def worker_path(book: Book, namespace: str) -> dict[str, Any]:
    """What ``execute_complete`` prints on the worker for the final events that left log markers: each
    marked run read once from its cursor (``logtail.print_missing``, the operator's own call), after
    every trigger ended (as a worker would, later and elsewhere). Its lines are counted apart from the
    trigger's, and its requests too (the requests counted after this start are the worker's)."""
    if not book.markers:
        return {"jobs": 0, "lines": 0, "jobs_with_last_line": 0, "requests": 0}
    from airflow_jobs_plugin.cluster.kube import KubeClient
    from airflow_jobs_plugin.logs.logcursor import LogMarker
    from airflow_jobs_plugin.logs.logtail import print_missing

    class Sink:
        def info(self, message: Any, *args: Any) -> None:
            text = str(message) % args if args else str(message)
            LINES.line(text, time.time())

    before = sum(REQUESTS.counts.values())
    LINES.worker = True
    client = await KubeClient.from_connection("kubernetes_default")
    lines = 0
    last = 0
    try:
        for raw in book.markers.values():
            markers = [LogMarker.from_json(m) for m in raw]
            printed = await print_missing(client, namespace, markers, Sink())
            lines += len(printed)
            last += any(line.split("] ", 1)[-1].startswith("done") for line in printed)
    finally:
        LINES.worker = False
        await client.close()
    return {
        "jobs": len(book.markers),
        "lines": lines,
        "jobs_with_last_line": last,
        "requests": sum(REQUESTS.counts.values()) - before,
    }


def trace_admission(book: Book) -> None:
    """Record every admission pass and every ledger write of this process, with their times, so the
    driver can split an admission's latency (delivery of the end, the pass, its retries, the
    unsuspend). Wraps the ledger module's functions; the product's code is unchanged."""
    import contextvars

    from airflow_jobs_plugin.queueing.quota import ledger

    who = contextvars.ContextVar("who", default="release")
    admission_pass, write_ledger, sleep_before_retry = (
        ledger.admission_pass,
        ledger.write_ledger,
        ledger._sleep_before_retry,  # noqa: SLF001
    )

    async def traced_pass(*args: Any, **kwargs: Any) -> Any:
        token = who.set("pass")
        started = time.time()
        try:
            outcome = await admission_pass(*args, **kwargs)
        finally:
            who.reset(token)
        book.passes.append(
            [
                started,
                time.time(),
                kwargs.get("group"),
                outcome.conflicts,
                list(outcome.admitted),
                outcome.stale,
            ]
        )
        return outcome

    async def traced_write(client: Any, namespace: str, stored: Any, new: Any) -> Any:
        started = time.time()
        try:
            written = await write_ledger(client, namespace, stored, new)
        except ledger.LedgerConflict:
            book.writes.append([started, time.time(), new.group, who.get(), False])
            raise
        book.writes.append([started, time.time(), new.group, who.get(), True])
        return written

    async def traced_sleep(attempt: int, rng: Any) -> None:
        started = time.time()
        await sleep_before_retry(attempt, rng)
        book.backoffs.append([started, time.time(), who.get()])

    ledger.admission_pass = traced_pass
    ledger.write_ledger = traced_write
    ledger._sleep_before_retry = traced_sleep  # noqa: SLF001


def admissions() -> list:
    """The process's admissions (shared by every trigger of a namespace and policy): not walked."""
    try:
        from airflow_jobs_plugin.queueing.engines.pool import Admission

        return [a for per_watch in Admission._registry.values() for a in per_watch.values()]  # noqa: SLF001
    except (ImportError, AttributeError):
        return []


def asked_to_stop(stop_file: str | None) -> bool:
    # A file rather than a signal: a signal reaching a loop this busy can be lost (asyncio's wakeup
    # pipe overflows). One stat every half second does not block.
    return bool(stop_file) and os.path.exists(stop_file)


def cache_figures(watch: Any) -> dict[str, Any]:
    """What the shared watch holds: objects and their bytes as JSON (``json.dumps``), per resource."""
    figures: dict[str, Any] = {"t": time.time(), "objects": {}, "bytes": {}}
    for watched in watch.resources:
        objects = watch.jobs(watched)
        figures["objects"][watched.plural] = len(objects)
        figures["bytes"][watched.plural] = sum(len(json.dumps(o)) for o in objects)
    return figures


# Where a traced allocation is put (``--tracemalloc``): the first frame, newest first, whose file ends
# with one of these.
HEAP_SITES = (
    ("cluster/watch_transform.py", "cache: trimmed objects (watch_transform)"),
    ("json/decoder.py", "decoded JSON kept (interned strings)"),
    ("airflow_jobs_plugin/cluster/watch.py", "watch: index, subscriptions"),
    ("airflow_jobs_plugin/logs/logstream.py", "logs: streamer, runs, hub"),
    ("airflow_jobs_plugin/logs/logplan.py", "logs: streamer, runs, hub"),
    ("airflow_jobs_plugin/logs/logcursor.py", "logs: cursors"),
    ("airflow_jobs_plugin/airflow/triggers.py", "trigger: _Follow, its state and coroutines"),
    ("airflow_jobs_plugin/queueing/engines/pool.py", "admission"),
    ("airflow_jobs_plugin/queueing/quota/", "admission"),
    ("tests/benchmarks/tracker.py", "benchmark: tasks, book"),
    ("asyncio/", "asyncio: tasks, futures, handles"),
    ("aiohttp/", "aiohttp"),
    ("ssl.py", "ssl"),
    ("airflow_jobs_plugin/cluster/kube.py", "client"),
    ("airflow_jobs_plugin/lifecycle/", "lifecycle"),
    ("<frozen importlib", "imports done after the triggers started"),
)


def _heap_site(traceback: tracemalloc.Traceback) -> str:
    for frame in reversed(traceback):  # newest first
        for suffix, what in HEAP_SITES:
            if suffix in frame.filename:
                return what
    return "other"


def _deep(roots: list, seen: set[int]) -> Counter:
    """Bytes (``sys.getsizeof``) of everything reachable from ``roots`` not in ``seen``, by type; code,
    classes, modules and functions are not followed (shared by every job)."""
    sizes: Counter = Counter()
    stack = list(roots)
    skip = (type, types.ModuleType, types.FunctionType, types.CodeType, types.BuiltinFunctionType)
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, skip):
            continue
        sizes[type(obj).__name__] += sys.getsizeof(obj)
        stack.extend(gc.get_referents(obj))
    return sizes


def heap_figures(
    watch: Any, tasks: set | list, stop: list, n: int, traced_before: int | None
) -> dict[str, Any]:
    """Where the memory of the tracked jobs is, per job (``--heap``).

    ``walked``: the objects reachable from each of these, in this order, each object counted once, for
    the first that reaches it (``sys.getsizeof``: without the allocator's own overhead): the watch's
    cached jobs, then its cached pods, the table of shared parts, the watch's index, each trigger's
    task (its coroutines, the trigger, its follow, subscription, log streamer and runs), the log hubs
    (their tables and stream tasks), the admissions (their tables of jobs), the client (its connection pools, the open streams' connections
    and buffers). ``stop`` (the loop, the benchmark's book) is not followed.

    With ``--tracemalloc``: the traced allocations live now, made since just before the triggers
    started, by where they were made."""
    from airflow_jobs_plugin.logs import logstream

    out: dict[str, Any] = {}
    if traced_before is not None:
        snapshot = tracemalloc.take_snapshot()
        by_site: Counter = Counter()
        for trace in snapshot.traces:
            by_site[_heap_site(trace.traceback)] += trace.size
        traced, _ = tracemalloc.get_traced_memory()
        out["traced_bytes_per_job"] = round((traced - traced_before) / n)
        out["traced_by_site_per_job"] = {k: round(v / n) for k, v in by_site.most_common(25)}
        # And by the line of the product (or else the newest frame) that made each allocation.
        by_line: Counter = Counter()
        for trace in snapshot.traces:
            frames = list(reversed(trace.traceback))  # newest first
            mine = next((f for f in frames if "airflow_jobs_plugin" in f.filename), frames[0])
            by_line[
                f"{mine.filename.split('site-packages/')[-1].split('airflow_jobs_plugin/')[-1]}:{mine.lineno}"
            ] += trace.size
        out["traced_by_line_per_job"] = {k: round(v / n) for k, v in by_line.most_common(40)}
        del snapshot
    hubs = list(getattr(logstream, "_HUBS", {}).values())
    pools = admissions()
    seen = {id(o) for o in stop} | {id(watch), id(watch.client), id(watch._cache)}  # noqa: SLF001
    seen |= {id(h) for h in hubs} | {id(a) for a in pools}
    walked: dict[str, Any] = {}
    for name, roots in (
        ("cache: jobs", [o for r in watch.resources if r.plural != "pods" for o in watch.jobs(r)]),
        ("cache: pods", [o for r in watch.resources if r.plural == "pods" for o in watch.jobs(r)]),
        ("cache: table of shared parts", [getattr(watch, "_sharing", None)]),
        ("watch: index by job, deleted names", [watch._by_key, watch._deleted]),  # noqa: SLF001
        ("trigger: task, coroutines, trigger, follow, logs", list(tasks)),
        ("watch: subscriptions, listeners", [watch._subs, watch._listeners]),  # noqa: SLF001
        ("log hub: tables, streams", [vars(h) for h in hubs]),
        ("admission: its tables", [vars(a) for a in pools]),
        ("client: connections, buffers", [vars(watch.client)]),
    ):
        sizes = _deep([r for r in roots if r is not None], seen)
        walked[name] = {
            "bytes_per_job": round(sum(sizes.values()) / n),
            "by_type_per_job": {k: round(v / n) for k, v in sizes.most_common(12)},
        }
    out["walked"] = walked
    out["walked_bytes_per_job"] = sum(w["bytes_per_job"] for w in walked.values())
    return out


def _glibc_heap() -> dict[str, int]:
    """glibc's own account of its heap (``mallinfo2``, glibc 2.33+): bytes it got from the system with
    sbrk and with mmap, in use by the program, and free inside its heap (freed, not given back). Empty
    where the call is missing."""
    import ctypes

    class _MallInfo2(ctypes.Structure):
        _fields_ = [
            (name, ctypes.c_size_t)
            for name in (
                "arena",
                "ordblks",
                "smblks",
                "hblks",
                "hblkhd",
                "usmblks",
                "fsmblks",
                "uordblks",
                "fordblks",
                "keepcost",
            )
        ]

    try:
        call = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return {}
    call.restype = _MallInfo2
    info = call()
    return {
        "glibc_sbrk": info.arena,
        "glibc_mmap": info.hblkhd,
        "glibc_in_use": info.uordblks,
        "glibc_free": info.fordblks,
    }


@functools.cache
def _interned_address() -> int | None:
    """Where CPython 3.11 keeps its table of interned strings: a file-local of ``Objects/unicodeobject.c``
    (``static PyObject *interned``), found from the interpreter library's symbol table (binutils' ``nm``)
    once per process. None where that is not possible."""
    import ctypes
    import subprocess
    import sysconfig

    if sys.version_info[:2] != (3, 11):
        return None
    library = os.path.join(
        sysconfig.get_config_var("LIBDIR") or "", sysconfig.get_config_var("LDLIBRARY") or ""
    )
    try:
        listing = subprocess.run(["nm", library], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    where = {}
    for line in listing.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] in ("interned", "Py_Initialize"):
            where[parts[2]] = int(parts[0], 16)
    if len(where) != 2:
        return None
    base = ctypes.cast(ctypes.pythonapi.Py_Initialize, ctypes.c_void_p).value or 0
    return base - where["Py_Initialize"] + where["interned"]


def _interned_table() -> dict[str, int]:
    """CPython's table of interned strings (``sys.intern``): how many it holds and its size. A dict that
    never shrinks: a string freed leaves its slot's room behind, and new strings grow it further. Empty
    where it cannot be found (see :func:`_interned_address`)."""
    import ctypes

    where = _interned_address()
    if where is None:
        return {}
    address = ctypes.c_void_p.from_address(where).value
    table = ctypes.cast(address, ctypes.py_object).value if address else None
    if type(table) is not dict:
        return {}
    return {"interned_strings": len(table), "interned_table_bytes": sys.getsizeof(table)}


def allocator_figures(trim: bool = False) -> dict[str, Any]:
    """Where the process's RSS is, as the allocators see it: pymalloc's arenas (``sys._debugmallocstats``,
    objects up to 512 bytes) split into blocks in use, free blocks inside used pools, and unused pools;
    the rest of the RSS is glibc's heap (larger objects, buffers) and the interpreter's own. With
    ``trim``, glibc's ``malloc_trim(0)`` returns its free pages and the RSS after it is noted: how much of
    the RSS was free memory glibc kept."""
    import ctypes
    import tempfile

    figures: dict[str, Any] = {"rss_kb": memory_kb()[0]}
    with tempfile.TemporaryFile(mode="w+") as out:
        saved = os.dup(2)
        sys.stderr.flush()
        os.dup2(out.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        text = out.read()
    keys = {
        "# arenas allocated current": "arenas",
        "# bytes in allocated blocks": "pymalloc_in_use",
        "# bytes in available blocks": "pymalloc_free_blocks",
        "unused pools": "pymalloc_unused_pools",
        "# bytes lost to quantization": "pymalloc_quantization",
    }
    for line in text.splitlines():
        for key, name in keys.items():
            if key in line and "=" in line:
                figures[name] = int(line.split("=")[-1].strip().replace(",", ""))
    figures.update(_glibc_heap())
    figures.update(_interned_table())
    if trim:
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
            figures["rss_after_malloc_trim_kb"] = memory_kb()[0]
        except OSError:
            pass
    return figures


class GcClock:
    """The time each garbage collection took, per generation, from ``gc.callbacks``: a collection of the
    oldest generation walks every container object the process keeps, and stalls the event loop for it."""

    def __init__(self) -> None:
        self.started = 0.0
        self.by_gen: dict[int, list[float]] = {0: [0, 0.0, 0.0], 1: [0, 0.0, 0.0], 2: [0, 0.0, 0.0]}
        self.slow: list[tuple[float, int, float, int]] = []  # (time, generation, seconds, collected)

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self.started = time.perf_counter()
            return
        took = time.perf_counter() - self.started
        figures = self.by_gen[info["generation"]]
        figures[0] += 1
        figures[1] += took
        figures[2] = max(figures[2], took)
        if took >= 0.05 and len(self.slow) < 500:
            self.slow.append((time.time(), info["generation"], took, info.get("collected", 0)))

    def figures(self) -> dict[str, Any]:
        return {
            "by_generation": {
                str(g): {"count": c, "seconds": round(s, 3), "max": round(m, 4)}
                for g, (c, s, m) in self.by_gen.items()
            },
            "slow": self.slow,
            "objects_tracked": len(gc.get_objects()),
        }


async def sample(
    samples: list,
    stop_file: str | None,
    stop: asyncio.Event,
    on_sample: Any = None,
) -> None:
    while True:
        rss, hwm = PEAKS.read()
        samples.append((time.time(), cpu_seconds(), rss, hwm))
        REQUESTS.sample()
        if on_sample is not None:
            on_sample()
        if asked_to_stop(stop_file):
            stop.set()
        await asyncio.sleep(SAMPLE_SECONDS)


async def amain(args: argparse.Namespace, names: list[str]) -> dict:
    book = Book(names)
    froze: list[float] = []
    loop = asyncio.get_running_loop()
    REQUESTS.install()
    for item in args.announce_requests:
        key, _, count = item.rpartition("=")
        REQUESTS.announce_at[key] = int(count)
    if args.kind == "ours":
        LINES.install()
        from airflow_jobs_plugin.cluster import kube
        from airflow_jobs_plugin.logs import logstream

        # The log hub's stream budget and read rate, when the run measures other values than the
        # product's (both are read when the process's hub is made).
        if args.log_streams is not None:
            kube.LOG_STREAM_CONNECTIONS = args.log_streams
        if args.poll_rate is not None:
            logstream.POLL_RATE = args.poll_rate
        from airflow_jobs_plugin.airflow import triggers as product_triggers

        if args.no_gc_freeze:
            # The comparison run: the product's once-per-process freeze counts as done already.
            product_triggers._FROZEN_IN = os.getpid()  # noqa: SLF001
        else:
            # When the product froze its start-up objects (its first trigger's start).
            freeze = product_triggers.freeze_start_up_objects

            def noted_freeze() -> bool:
                frozen = freeze()
                if frozen:
                    froze.append(time.time())
                return frozen

            product_triggers.freeze_start_up_objects = noted_freeze
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    triggers = build_triggers(args.kind, names, args.namespace, args, book)
    if args.kind == "ours" and args.quota_configmap:
        trace_admission(book)

    watch = None
    sweeps: list[tuple[float, int, int]] = []
    if args.kind == "ours":
        from airflow_jobs_plugin.cluster import watch as shared

        watch = await shared.acquire("kubernetes_default", args.namespace)

        def on_event(_etype: str, plural: str, obj: dict) -> None:
            key = shared.job_key(obj)
            if key is None:
                return
            if plural == "pods" and (obj.get("status") or {}).get("phase") == "Running":
                if book.receive(key, "running") and book.running_received == len(names):
                    # Every job's pod runs, as this process sees it: the start-up burst has arrived.
                    announce(received_all_running=time.time())
            elif plural == "jobs" and _complete(obj):
                book.receive(key, "finished")

        watch.add_listener(on_event)
        from airflow_jobs_plugin.cluster import watch_transform

        if hasattr(watch_transform, "Sharing"):
            # When the table of shared parts sweeps itself, and its size before and after: a sweep
            # copies the table, and its copy is a moment's memory.
            sweep = watch_transform.Sharing.sweep

            def traced_sweep(sharing: Any) -> None:
                before = sharing.size
                sweep(sharing)
                sweeps.append((time.time(), before, sharing.size))

            watch_transform.Sharing.sweep = traced_sweep  # type: ignore[method-assign]

    # The cache is measured once, when every job has a running pod (all objects live, the largest they
    # get before they end), and again at the end.
    cache: dict[str, Any] = {}
    heap: dict[str, Any] = {}
    allocators: dict[str, Any] = {}
    # The triggers' tasks still running. A finished one is dropped at once, as Airflow's triggerer drops
    # it (TriggerRunner.cleanup_finished_triggers, airflow/jobs/triggerer_job_runner.py, 3.3): a list of
    # every task (and a gather of them) would keep each finished task and its coroutine, about 0.5 KB
    # per job, in the RSS being measured.
    tasks: set[asyncio.Task] = set()
    every_trigger_done = asyncio.Event()

    def finished(task: asyncio.Task) -> None:
        tasks.discard(task)
        if not tasks:
            every_trigger_done.set()

    def measure_cache() -> None:
        if watch is not None and "running" not in cache and book.running_received >= len(names):
            cache["running"] = cache_figures(watch)
            allocators["running"] = allocator_figures(trim=bool(os.environ.get("BENCH_MALLOC_TRIM")))
            allocators["running"]["t"] = time.time()
            if args.heap:
                heap.update(
                    heap_figures(watch, tasks, [loop, book, stop, *admissions()], len(names), traced_before)
                )
        elif "running" in allocators and "settled" not in allocators:
            # Again once the start-up burst is over (its transient objects freed): the live set.
            if time.time() - allocators["running"]["t"] >= SETTLED_AFTER:
                allocators["settled"] = allocator_figures()

    samples: list = []
    sampler = asyncio.create_task(sample(samples, args.stop_file, stop, measure_cache))
    traced_before = None
    if args.tracemalloc:
        tracemalloc.start(args.tracemalloc)
        traced_before = tracemalloc.get_traced_memory()[0]
    gc_clock = GcClock()
    gc.callbacks.append(gc_clock)
    allocators["start"] = allocator_figures()
    rss0, _ = memory_kb()
    cpu0 = cpu_seconds()
    started = time.time()
    announce(ready=started)
    for trigger, name in zip(triggers, names, strict=True):
        task = asyncio.create_task(follow(trigger, name, book))
        tasks.add(task)
        task.add_done_callback(finished)
    del triggers  # each task holds its own
    everything = asyncio.create_task(every_trigger_done.wait())
    stopper = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait({everything, stopper}, timeout=args.cap, return_when=asyncio.FIRST_COMPLETED)
    capped = everything not in done
    ended = time.time()
    REQUESTS.sample()  # the counts at the end: the requests since the last half-second sample too
    # Once every trigger has ended: what the finished jobs leave behind (the cache keeps them).
    PEAKS.read()
    hwm_before_figures = PEAKS.overall
    allocators["end"] = allocator_figures()
    cpu1 = cpu_seconds()
    everything.cancel()
    left = list(tasks)
    for task in left:
        task.cancel()
    await asyncio.gather(*left, return_exceptions=True)
    stopper.cancel()
    sampler.cancel()
    PEAKS.read()
    hwm = PEAKS.overall
    gc.callbacks.remove(gc_clock)
    if watch is not None:
        cache["end"] = cache_figures(watch)
    worker = await worker_path(book, args.namespace) if args.kind == "ours" else {}
    hubs: dict[str, Any] = {}
    relists = None
    if watch is not None and getattr(watch, "relists", None) is not None:
        # Lists beyond the first of each watched resource: a watch that could not resume (410 Gone).
        relists = watch.relists - len(watch.resources)
    if args.kind == "ours":
        from airflow_jobs_plugin.logs import logstream

        for hub in list(getattr(logstream, "_HUBS", {}).values()):  # an older version has no hub
            hubs = {
                "streams_opened": hub.opened,
                "reads": hub.reads,
                "most_streams": hub.most_streams,
                "stream_budget": hub.streams,
            }
        # The reads' bound: reads per second per process (an older version has none).
        hubs["poll_rate"] = getattr(logstream, "POLL_RATE", None)
    if args.kind == "ours":
        from airflow_jobs_plugin.cluster import watch as shared
        from airflow_jobs_plugin.queueing.engines import pool as admission

        if watch is not None:
            shared.release("kubernetes_default", args.namespace)
        await admission.shutdown()
        await shared.shutdown()
    return {
        "kind": args.kind,
        "n": len(names),
        "pid": os.getpid(),
        "started": started,
        "ended": ended,
        "capped": capped,
        "cpu_seconds": cpu1 - cpu0,
        "rss_start_kb": rss0,
        "peak_rss_kb": hwm,
        # The peak as every trigger ended, before the allocators' figures were read (a check that
        # reading them does not make the peak).
        "peak_rss_before_end_figures_kb": hwm_before_figures,
        "cache": cache,
        "heap": heap,
        "gc": gc_clock.figures(),
        "allocators": allocators,
        "sharing_sweeps": sweeps,
        "samples": samples,
        **book.figures(),
        "log_lines": book.lines,
        "log_hub": hubs,
        "requests": REQUESTS.samples,
        "requests_total": dict(REQUESTS.counts),
        "line_latency": LINES.figures(),
        "worker_path": worker,
        "gc_frozen_at": froze[0] if froze else None,
        "watch_relists": relists,
        "errors": book.errors[:50],
        "admission_trace": {"passes": book.passes, "writes": book.writes, "backoffs": book.backoffs},
        "python": sys.version.split()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kind", choices=("ours", "cncf"), required=True)
    parser.add_argument("--names", required=True, help="JSON file: the job names")
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--cap", type=float, default=3600.0, help="stop after this many seconds")
    parser.add_argument("--stop-file", default=None, help="stop as soon as this file exists")
    parser.add_argument("--stream-logs", action="store_true", help="JobTrigger: follow container logs")
    parser.add_argument("--quota-configmap", default=None, help="JobTrigger: the quota policy ConfigMap")
    parser.add_argument(
        "--heap",
        action="store_true",
        help="once every job's pod runs, walk the objects and write where the memory is (the walk itself"
        " takes memory: not for the RSS figures)",
    )
    parser.add_argument(
        "--tracemalloc",
        type=int,
        default=0,
        metavar="FRAMES",
        help="with --heap, also trace allocations (this many frames) from the triggers' start",
    )
    parser.add_argument("--poll-interval", type=float, default=10.0, help="cncf: job_poll_interval")
    parser.add_argument("--pods", default=None, help="cncf: JSON file {job: pod name}")
    parser.add_argument(
        "--announce-requests",
        nargs="*",
        default=[],
        metavar="KEY=COUNT",
        help='print @bench {"requests_KEY": t} once COUNT requests of KEY ("get jobs/status") were sent',
    )
    parser.add_argument("--log-streams", type=int, default=None, help="ours: the log stream budget")
    parser.add_argument("--poll-rate", type=float, default=None, help="ours: log reads per second")
    parser.add_argument(
        "--no-gc-freeze",
        action="store_true",
        help="turn off the product's gc.freeze() at its first trigger's start (the comparison run)",
    )
    args = parser.parse_args()
    with open(args.names) as f:
        names: list[str] = json.load(f)
    result = asyncio.run(amain(args, names))
    with open(args.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
