"""Live container logs into the task log, each line prefixed by its replica: ``[launcher]``, ``[worker-1]``.

Each trigger's :class:`LogStreamer` names the container runs of its job (pod uid, container, restart) and
hands them to its process's :class:`LogHub`, which follows a budget of them with streams and reads the
rest in turn at a bounded rate (the rules: :mod:`~airflow_jobs_plugin.logs.logplan`). Every read and stream
asks for timestamps and starts at the run's cursor (:mod:`~airflow_jobs_plugin.logs.logcursor`), so a run can
move between a stream and polling and each line is printed once.

The final event never waits long for logs: the trigger gives the runs that have ended a moment
(``FINAL_DRAIN``) to deliver their last lines, then :meth:`LogStreamer.seal` stops printing and hands
back a :class:`~airflow_jobs_plugin.logs.logcursor.LogMarker` for each run not printed to its end; the
operator's ``execute_complete`` reads the rest on the worker (:mod:`~airflow_jobs_plugin.logs.logtail`).

An established stream outlives the token that opened it (the API server authenticates a request once,
when it starts); a read or resume that the API server refuses backs off while the client renews the
connection's credentials.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import weakref
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from airflow_jobs_plugin.cluster import kube
from airflow_jobs_plugin.cluster.kube import KubeClient, KubeError
from airflow_jobs_plugin.cluster.objects import Meta
from airflow_jobs_plugin.cluster.waiting import wait_event
from airflow_jobs_plugin.jobs.manifests import pod_role_and_rank
from airflow_jobs_plugin.lifecycle import JobSnapshot
from airflow_jobs_plugin.logs.logcursor import Cursor, LogMarker, advance_session, complete_lines
from airflow_jobs_plugin.logs.logplan import PollRing, Waiting, grant_streams


class LineSink(Protocol):
    """Where streamed lines go: a ``logging.Logger``, or the trigger's own (structlog) logger."""

    def info(self, message: Any, /, *args: Any) -> Any: ...


class LineTail(Protocol):
    """Where the last lines printed are kept for the final event: a :class:`LogTail` or a deque."""

    def append(self, line: str, /) -> Any: ...


class LogTail:
    """The last ``size`` lines printed, for the final event's tail.

    Every trigger holds one, and most print a few lines or none: a ``deque(maxlen=size)`` would take
    a 64-slot block (760 bytes) per trigger from the start, this takes room only for the lines it got."""

    __slots__ = ("size", "_lines")

    def __init__(self, size: int):
        self.size = max(0, int(size))
        self._lines: list[str] | None = None

    def append(self, line: str) -> None:
        if self.size == 0:
            return
        if self._lines is None:
            self._lines = [line]
            return
        self._lines.append(line)
        if len(self._lines) > 2 * self.size:  # trimmed now and then, not at every line
            del self._lines[: -self.size]

    def __iter__(self) -> Iterator[str]:
        return iter(self._lines[-self.size :] if self._lines else ())

    def __len__(self) -> int:
        return min(self.size, len(self._lines or ()))


def _started_containers(pod: dict) -> Iterable[tuple[str, int, bool]]:
    """(container, restart count, still running) for every container that has produced output."""
    status = pod.get("status") or {}
    for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        state = cs.get("state") or {}
        if "running" in state or "terminated" in state:
            yield cs["name"], int(cs.get("restartCount") or 0), "running" in state


def _replica_name(pod_labels: Mapping[str, Any]) -> str | None:
    """``launcher`` or ``worker-<rank>`` from a product pod's labels."""
    role, rank = pod_role_and_rank(pod_labels)
    if role == "launcher":
        return "launcher"
    if role is not None and rank is not None:
        return f"{role}-{rank}"
    return None


RESUMES = 6  # refused reads or opens of one run in a row before it is given up
REOPENS = 100  # streams of one running container reopened after they ended, at most
RESUME_FIRST_WAIT = 1.0
RESUME_MAX_WAIT = 16.0
# How long a later pod's lines wait for the earlier pod of the same replica to finish printing: an
# earlier pod stuck terminating must not hold the live log back for ever.
EARLIER_POD_WAIT = 30.0
# Reads per second one process sends for the containers without a stream, whatever their number, and
# the seconds between two reads of one container however few are polled.
POLL_RATE = 20.0
POLL_MIN_INTERVAL = 5.0
POLL_CONCURRENCY = 4  # reads in flight at once (kube.LOG_READ_CONNECTIONS leaves room for them)
READ_BYTES = 256 * 1024  # one read's limitBytes: a chatty container is read in slices, never at once
# How long the final event waits for the runs that have ended to deliver their last lines; what is
# still missing then is read by the worker (logtail).
FINAL_DRAIN = 0.5
# How often a container whose pod is being deleted is read when its stream ended while it still looked
# running: the kubelet removes a deleted pod's containers, and their logs, as soon as they have stopped
# (see LogHub.stopping), so its last lines are read at once, not at the ring's pace.
STOPPING_INTERVAL = 0.5


@dataclass(eq=False, slots=True)  # identity: runs are keys of the hub's tables
class _Run:
    """One container run followed for one trigger."""

    namespace: str
    pod: str
    container: str
    label: str
    owner: str  # the job it belongs to: the hub shares streams fairly between jobs
    streamer: LogStreamer
    running: bool
    after: _Run | None = None  # the earlier pod of the same replica, printed first
    cursor: Cursor = Cursor()
    previous: bool = False  # its container has run again since: read it with previous=true
    stopping: bool = False  # its pod is being deleted: read often until it has stopped (LogHub.stopping)
    gone: bool = False  # cannot be read any more (pod deleted, or run twice since)
    complete: bool = False  # every line printed
    sealed: bool = False  # the final event is out: print nothing more
    failures: int = 0
    reopens: int = 0
    registered: float = 0.0
    not_before: float = 0.0  # refused: no stream nor read before this (loop time)
    # Done once finished, made only when the final event waits for it (drain): most runs never need one.
    done: asyncio.Future[None] | None = None
    then: list[_Run] | None = None  # the runs whose ``after`` this is

    @property
    def finished(self) -> bool:
        return self.complete or self.gone

    def take(self, lines: Iterable[str], repeated: int = 0) -> int:
        """Print the lines of a read or stream not printed yet (none once sealed). ``repeated``: the
        lines at the cursor's timestamp the same read or stream delivered before these (a stream's lines
        come one by one); returns that count for its next lines."""
        if self.sealed or self.finished:
            return repeated
        fresh, self.cursor, repeated = advance_session(self.cursor, lines, repeated)
        for text in fresh:
            self.streamer.emit(self.label, text)
        return repeated

    def finish(self, *, gone: bool = False) -> None:
        if gone:
            self.gone = True
        else:
            self.complete = True
        if self.done is not None and not self.done.done():
            self.done.set_result(None)
        for later in self.then or ():  # the replica's next pod may print now
            later.streamer.hub.unblocked(later)

    def ready(self, now: float) -> bool:
        """Not backing off, and its earlier pod has printed (or has had long enough): it may print now."""
        if now < self.not_before:
            return False
        return self.after is None or self.after.finished or now - self.registered > EARLIER_POD_WAIT

    def ready_at(self) -> float:
        """The loop time by which :meth:`ready` turns true whatever else happens (its earlier pod may
        finish sooner: :meth:`LogHub.unblocked`)."""
        if self.after is not None and not self.after.finished:
            return max(self.not_before, self.registered + EARLIER_POD_WAIT)
        return self.not_before

    def marker(self) -> LogMarker:
        return LogMarker(self.pod, self.container, self.label, self.cursor, self.previous)


class LogHub:
    """A process's log reader for one client: streams within the budget, reads in turn for the rest."""

    def __init__(
        self,
        client: KubeClient,
        *,
        streams: int | None = None,
        rate: float | None = None,
        min_interval: float | None = None,
    ):
        self.client = client
        self.streams = kube.LOG_STREAM_CONNECTIONS if streams is None else streams
        self.ring: PollRing[_Run] = PollRing(
            rate=POLL_RATE if rate is None else rate,
            min_interval=POLL_MIN_INTERVAL if min_interval is None else min_interval,
        )
        self._runs: set[_Run] = set()
        self._waiting: dict[_Run, Waiting[_Run]] = {}
        self._streaming: dict[_Run, asyncio.Task] = {}
        self._final: set[_Run] = set()  # ended runs whose last read is due: first, and not rate-paced
        self._reads: set[asyncio.Task] = set()
        self._slots = asyncio.Semaphore(POLL_CONCURRENCY)
        self._wake = asyncio.Event()
        self._poller: asyncio.Task | None = None
        # Grants the free streams when the first waiting run that is not ready yet (backing off) becomes
        # ready: no other event may come to hand them out (a refused stream's run waits for it).
        self._grant_timer: asyncio.TimerHandle | None = None
        self._order = itertools.count()
        self.loop = asyncio.get_running_loop()
        self.opened = 0  # streams opened, reads sent, streams open at once: for tests and benchmarks
        self.reads = 0
        self.most_streams = 0

    # --- what the streamers tell it ---

    def add(self, run: _Run) -> None:
        now = self._now()
        run.registered = now
        self._runs.add(run)
        if run.running:
            self._waiting[run] = Waiting(run, run.owner, next(self._order))
            self.ring.add(run, now)  # its first lines come from a read at once unless a stream is free
        else:  # seen only once ended: one read, ahead of the ring (see ended)
            self._final.add(run)
            self.ring.add(run, float("-inf"))
        self._grant()
        self._kick()

    def ended(self, run: _Run) -> None:
        """Its container has ended: it is read once more, now, streamed or not.

        A follow does not end when its container does: the kubelet checks whether the container still
        runs only after a second without a new line (k8s.io/cri-client v0.36.3, pkg/logs/logs.go:
        ``waitLogs``, ``logForceCheckPeriod``), and kwok's never ends (kwok v0.8.0,
        pkg/kwok/server/debugging_logs.go: its runtime stub answers Unavailable, which ``ReadLogs``
        takes for running). Waiting for it would hold the final event up to its drain and leave the
        last lines to the worker; one read ends the run now, and its stream is closed."""
        self._waiting.pop(run, None)
        if run in self._streaming and run in self._runs and not run.finished:
            self._final.add(run)
            self.ring.add(run, float("-inf"))
            self.ring.later(run, float("-inf"))
            self._kick()
            return
        if run not in self._streaming and run in self._runs and not run.finished:
            if run.failures == 0:
                # Held back only because its stream had just ended: that was most likely the end.
                run.not_before = 0.0
                # Its last read goes ahead of the ring's turn and outside its rate: there is one per
                # container run, and the job's final event waits for it (up to FINAL_DRAIN).
                self._final.add(run)
                self.ring.add(run, float("-inf"))
                self.ring.later(run, float("-inf"))
            else:
                self.ring.add(run, run.not_before)
            self._kick()

    def stopping(self, run: _Run) -> None:
        """Its pod is being deleted while the container runs: follow it with a stream now, beyond the
        budget, so that every line it prints until it stops reaches the task log.

        A deleted pod's log does not outlive its containers: once they have stopped, the kubelet removes
        them all (kubernetes v1.36, pkg/kubelet/kubelet.go: ``cleanUpContainersInPod`` on the
        ContainerDied event, with ``removeAll`` from pod_workers.go ``ShouldPodContentBeRemoved``, true
        for a terminated pod with a deletion timestamp), and the pod object goes right after. The Job
        controller deletes the surviving ranks of a failed Indexed Job this way (pkg/controller/job/
        job_controller.go: ``deleteActivePods``), so what they print in their grace period (torchrun's
        agent stopping its workers) can be read only while it lasts: a read in turn may come after the
        container is gone, and neither the final event's drain nor the worker's read (logtail) would
        find it. A stream opened before the container stops delivers every line to its end: the kubelet
        follows the log file until its container has ended. Such streams are few and short-lived (the
        ranks of a job being ended, for one grace period), so they are not counted against the budget's
        fairness. One whose stream ends while it still looks running is read every ``STOPPING_INTERVAL``
        seconds until it is seen ended or its pod is gone."""
        if run.stopping or run not in self._runs or run.finished:
            return
        run.stopping = True
        if run in self._streaming:
            return
        self._waiting.pop(run, None)
        self.ring.remove(run)
        run.not_before = 0.0  # a back-off would outlast the grace period
        self._streaming[run] = asyncio.create_task(self._stream(run))
        self.most_streams = max(self.most_streams, len(self._streaming))

    def _read_while_stopping(self, run: _Run) -> None:
        """Read ``run`` now, ahead of the ring and outside its rate, then every ``STOPPING_INTERVAL``
        seconds until it is seen ended or its pod is gone."""
        run.not_before = 0.0
        self._final.add(run)
        self.ring.add(run, float("-inf"))
        self.ring.later(run, float("-inf"))
        self._kick()

    def unblocked(self, run: _Run) -> None:
        """The earlier pod of ``run``'s replica has printed: read or stream ``run`` now."""
        if run in self._runs and not run.finished and run not in self._streaming:
            self.ring.add(run, self._now())
            self.ring.later(run, self._now())
            self._grant()
            self._kick()

    def drop(self, run: _Run) -> None:
        self._runs.discard(run)
        self._final.discard(run)
        self._waiting.pop(run, None)
        self.ring.remove(run)
        task = self._streaming.pop(run, None)
        if task is not None:
            task.cancel()
        if not self._runs:
            self._wake.set()  # the poller ends once nothing is left to read
        self._grant()

    async def close(self) -> None:
        for run in list(self._runs):
            self.drop(run)
        if self._grant_timer is not None:
            self._grant_timer.cancel()
            self._grant_timer = None
        tasks = [t for t in (self._poller, *self._reads) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # --- streams ---

    def _grant(self) -> None:
        free = self.streams - len(self._streaming)
        if free <= 0 or not self._waiting:
            return
        now = self._now()
        held = Counter(run.owner for run in self._streaming)
        ready: list[Waiting[_Run]] = []
        soonest: float | None = None  # when the first waiting run not ready yet becomes ready
        for run, w in self._waiting.items():
            if run.ready(now):
                ready.append(w)
            else:
                at = run.ready_at()
                soonest = at if soonest is None else min(soonest, at)
        granted = grant_streams(ready, held, free)
        for run in granted:
            self._waiting.pop(run, None)
            self.ring.remove(run)
            self._streaming[run] = asyncio.create_task(self._stream(run))
        self.most_streams = max(self.most_streams, len(self._streaming))
        if soonest is not None and len(granted) < free:
            self._grant_at(soonest)

    def _grant_at(self, when: float) -> None:
        timer = self._grant_timer
        if timer is not None and not timer.cancelled() and timer.when() <= when:
            return  # an earlier grant comes anyway, and grants then schedules the next
        if timer is not None:
            timer.cancel()
        self._grant_timer = self.loop.call_at(when, self._grant_due, context=_NO_CONTEXT)

    def _grant_due(self) -> None:
        self._grant_timer = None
        if self._runs:
            self._grant()

    async def _stream(self, run: _Run) -> None:
        self.opened += 1
        refusal: KubeError | None = None
        broken = False
        repeated = 0  # the stream is one read: it repeats the cursor's second once, at its start
        try:
            async for line in self.client.follow_log(
                run.namespace,
                run.pod,
                container=run.container,
                since_time=run.cursor.since_time(),
                timestamps=True,
            ):
                run.failures = 0
                repeated = run.take((line,), repeated)
        except asyncio.CancelledError:
            raise
        except KubeError as exc:
            refusal = exc
        except Exception:  # a broken stream is resumed from the cursor, never kills the hub
            broken = True
        finally:
            if self._streaming.get(run) is asyncio.current_task():
                del self._streaming[run]
        # Handled once the stream is no longer counted as open: a refused run waits for a stream again
        # (``_retry_at`` queues only a run without one), instead of being read in turn for ever.
        if refusal is not None or broken:
            run.reopens += 1  # a run whose streams are always refused ends up read in turn only
            if refusal is not None:
                self._refused(run, refusal)
            else:
                self._backoff(run)
        elif run in self._runs and not run.finished:
            if not run.running:
                # The API server ends a follow once the container has ended and its log is read out.
                run.finish()
            elif run.stopping:  # closed as its pod is deleted: most likely its end, which a read confirms
                self._read_while_stopping(run)
            else:  # closed under a running container (a restart, a dropped connection): resume later
                run.reopens += 1
                run.not_before = self._now() + self.ring.min_interval  # never reopened in a loop
                self.ring.add(run, run.not_before)
                if run.reopens < REOPENS:
                    self._waiting[run] = Waiting(run, run.owner, next(self._order))
                self._kick()
        self._grant()

    # --- reads in turn ---

    def _kick(self) -> None:
        self._wake.set()
        if self._poller is None or self._poller.done():
            self._poller = asyncio.create_task(self._poll())

    async def _poll(self) -> None:
        rate = self.ring.rate
        while self._runs:
            run, wait = self.ring.next_due(self._now())
            if run is None:
                self._wake.clear()
                await wait_event(self._wake, wait)
                continue
            if run not in self._runs or run.finished:
                self.ring.remove(run)
                continue
            if not run.ready(self._now()):
                self.ring.later(run, self._now() + 1.0)
                continue
            await self._slots.acquire()
            task = asyncio.create_task(self._read(run))
            self._reads.add(task)
            task.add_done_callback(self._reads.discard)
            if rate > 0 and run not in self._final:
                await asyncio.sleep(1.0 / rate)

    async def _read(self, run: _Run) -> None:
        try:
            # Only a read that starts after the container was seen ended can be its last.
            last = not run.running
            self.reads += 1
            body = await self.client.read_log(
                run.namespace,
                run.pod,
                container=run.container,
                since_time=run.cursor.since_time(),
                timestamps=True,
                limit_bytes=READ_BYTES,
                previous=run.previous,
                log_pool=True,
            )
            limited = len(body.encode()) >= READ_BYTES
            run.failures = 0
            run.take(complete_lines(body, limited=limited))
            if run not in self._runs or run.finished:
                return
            if run in self._streaming:
                if not last:
                    return
                # The last read of a streamed run (see ended): its stream has nothing more to say.
                self._streaming.pop(run).cancel()
                self._grant()
            if limited:  # more than one read's worth: read on at once
                self.ring.later(run, float("-inf") if run in self._final else self._now())
            elif last:
                self.ring.remove(run)
                self._final.discard(run)
                run.finish()
            elif run.stopping:  # read again soon: its log goes once it has stopped (see stopping)
                self.ring.later(run, self._now() + STOPPING_INTERVAL)
            else:
                self.ring.read(run, self._now())
        except asyncio.CancelledError:
            raise
        except KubeError as exc:
            self._refused(run, exc)
        except Exception:
            self._backoff(run)
        finally:
            self._slots.release()

    def _refused(self, run: _Run, exc: KubeError) -> None:
        if exc.not_found:  # the pod is gone, and its log with it
            # Said only of a run never read: a deleted MPI worker whose lines were printed has nothing
            # more to say, and a note on every such worker would be noise.
            self._give_up(run, "its pod is gone" if run.cursor.lines == 0 else "")
        elif exc.status == 400 and run.running:  # not started yet, or restarting: try again later
            self._retry_at(run, self._now() + self.ring.min_interval)
        elif exc.status == 400:  # an ended run the kubelet no longer has (run twice since)
            self._give_up(run, exc.message or "the kubelet no longer has it")
        else:
            self._backoff(run)

    def _backoff(self, run: _Run) -> None:
        """Doubling waits (1, 2, 4, ... s) outlast a refused credential's renewal or a restart of the
        API server, which a fixed one-second wait would exhaust in five seconds."""
        run.failures += 1
        if run.failures >= RESUMES:
            self._give_up(run, f"{RESUMES} reads in a row failed")
            return
        self._retry_at(run, self._now() + min(RESUME_MAX_WAIT, RESUME_FIRST_WAIT * 2 ** (run.failures - 1)))

    def _retry_at(self, run: _Run, due: float) -> None:
        """Neither read nor stream ``run`` before ``due``; then read it, and let it wait for a stream
        again if it runs (a refused stream is not reopened in a loop)."""
        run.not_before = due
        self.ring.add(run, due)
        self.ring.later(run, due)
        if run.running and run.reopens < REOPENS and run not in self._streaming:
            self._waiting.setdefault(run, Waiting(run, run.owner, next(self._order)))
        self._kick()

    def _give_up(self, run: _Run, why: str = "") -> None:
        self._final.discard(run)
        self._waiting.pop(run, None)
        self.ring.remove(run)
        if why and not run.sealed and not run.finished:
            # Never silently: the task log says which container's lines stop here, and why.
            run.streamer.emit(run.label, f"(the rest of this log cannot be read: {why})")
        run.finish(gone=True)

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()


_HUBS: weakref.WeakKeyDictionary[Any, LogHub] = weakref.WeakKeyDictionary()
# The context the hub's grant timer runs in: the streams it opens print in their runs' own contexts.
_NO_CONTEXT = contextvars.Context()


def hub_for(client: KubeClient) -> LogHub:
    """The process's hub for a client (one per client and event loop)."""
    hub = _HUBS.get(client)
    if hub is None or hub.loop is not asyncio.get_running_loop():
        hub = _HUBS[client] = LogHub(client)
    return hub


class LogStreamer:
    """One trigger's container logs: which runs its job has, printed through its process's hub."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        log: LineSink,
        tail: LineTail,
        *,
        owner: str = "",
        hub: LogHub | None = None,
    ):
        self.client = client
        self.namespace = namespace
        self.log = log
        self.tail = tail
        self.owner = owner or f"streamer-{id(self)}"
        self._hub = hub
        # The context of the trigger that made this streamer: Airflow's triggerer routes a log record
        # to a task's log by the ``trigger_id`` its ``run_trigger`` binds in contextvars (apache-airflow
        # 3.3, airflow/jobs/triggerer_job_runner.py: ``bind_log_contextvars``, read back per record in
        # ``_process_log_messages_from_subprocess``). The hub's reads and streams run in tasks created
        # from whichever trigger woke them first, so lines are printed in this trigger's own context.
        self._context = contextvars.copy_context()
        self._runs: dict[tuple[str, str, int], _Run] = {}
        # The newest run of each replica's container (by its label): a later pod of the same replica
        # (a pod the Job controller created after the previous one failed) prints only once the earlier
        # pod's log is printed, so run 1's lines never follow run 2's in the task log.
        self._last: dict[str, _Run] = {}

    @property
    def hub(self) -> LogHub:
        if self._hub is None:
            self._hub = hub_for(self.client)
        return self._hub

    def emit(self, label: str, text: str) -> None:
        line = f"[{label}] {text}"
        self.tail.append(line)
        self._context.run(self.log.info, "%s", line)

    def follow(self, snap: JobSnapshot, pods: Iterable[dict]) -> None:
        """Follow every container run of every pod of the job that has started, and note the ones that
        have ended (their last read is due).

        Every pod, not only each replica's current one: a pod that failed and was replaced between two
        looks still has the log that explains the retry."""
        current = {r.pod: r.name for r in snap.replicas if r.pod}
        # One view of each pod's metadata, for all three reads below.
        viewed = [(Meta(p), p) for p in pods]
        present = {meta.uid or meta.name for meta, _ in viewed}
        for (uid, _, _), known in self._runs.items():
            if uid not in present and known.running:
                # Its pod is gone (deleted: an MPI worker once its launcher ended) or belongs to an
                # attempt no longer followed: it runs no more, one last read says what it printed.
                known.running = False
                self.hub.ended(known)
        # Oldest first: the pods of one replica are followed, and printed, in the order they ran.
        for meta, pod in sorted(viewed, key=lambda viewed_pod: viewed_pod[0].creation_timestamp):
            name = meta.name
            if not name:  # only a pod the API server has named has a log to follow
                continue
            uid = meta.uid or name
            deleting = meta.deleting
            prefix = _replica_name(meta.labels) or current.get(name) or name
            main = ((pod.get("spec") or {}).get("containers") or [{}])[0].get("name")
            for container, restart, running in _started_containers(pod):
                label = prefix if container == main else f"{prefix}/{container}"
                self._earlier_runs_ended(uid, container, restart)
                run = self._runs.get((uid, container, restart))
                if run is None:
                    run = _Run(
                        namespace=self.namespace,
                        pod=name,
                        container=container,
                        label=label,
                        owner=self.owner,
                        streamer=self,
                        running=running,
                        after=self._last.get(label),
                    )
                    self._runs[(uid, container, restart)] = self._last[label] = run
                    if run.after is not None:
                        if run.after.then is None:
                            run.after.then = []
                        run.after.then.append(run)
                    self.hub.add(run)
                elif run.running and not running:
                    run.running = False
                    self.hub.ended(run)
                if deleting and run.running:
                    self.hub.stopping(run)

    def _earlier_runs_ended(self, uid: str, container: str, restart: int) -> None:
        """The container runs again: its earlier runs have ended; the one just before is read with
        ``previous=true``, older ones the kubelet no longer keeps."""
        for (k_uid, k_container, k_restart), run in self._runs.items():
            if (k_uid, k_container) != (uid, container) or k_restart >= restart or run.finished:
                continue
            run.previous = k_restart == restart - 1
            if not run.previous:
                # The kubelet keeps one earlier run of a container: an older one cannot be read.
                self.hub._give_up(run, "the container ran twice since")  # noqa: SLF001
            elif run.running:
                run.running = False
                self.hub.ended(run)

    async def drain(self, timeout: float) -> None:
        """Let the runs that have ended deliver their last lines, for at most ``timeout`` seconds."""
        pending: list[asyncio.Future[None]] = []
        for run in self._runs.values():
            if not run.running and not run.finished:
                if run.done is None:
                    run.done = asyncio.get_running_loop().create_future()
                pending.append(run.done)
        if pending:
            await asyncio.wait(pending, timeout=timeout)

    def seal(self) -> tuple[LogMarker, ...]:
        """Stop printing, now, and return where each run not printed to its end stands.

        Nothing is printed after this returns, so the markers are exactly what the task log holds:
        the worker's read from them prints every missing line once."""
        markers = []
        for run in self._runs.values():
            run.sealed = True
            if self._hub is not None:
                self._hub.drop(run)
            if not run.finished:
                markers.append(run.marker())
        return tuple(markers)

    async def close(self) -> None:
        self.seal()
        self._runs.clear()
        self._last.clear()
