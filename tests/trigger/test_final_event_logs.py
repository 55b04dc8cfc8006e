"""A final event never waits seconds for logs, and the task log still gets every container's last
lines, once: the trigger seals its streamer after a short drain and hands the worker a marker per run
it did not print to its end; ``execute_complete`` reads from there."""

from __future__ import annotations

import asyncio
import contextvars
from collections import deque
from typing import Any

from airflow_jobs_plugin.cluster.kube import KubeError
from airflow_jobs_plugin.logs import logstream
from airflow_jobs_plugin.logs.logcursor import Cursor, LogMarker
from airflow_jobs_plugin.logs.logstream import LogHub, LogStreamer
from airflow_jobs_plugin.logs.logtail import print_missing

from .test_logstream_recovery import NO_REPLICAS, T0, FakeLogs, pod


class StalledStream(FakeLogs):
    """A follow that delivers what is there and then hangs, although the container has ended: as a
    kubelet's does for up to a second after its container stopped, and kwok's for ever."""

    async def follow_log(self, namespace, pod, *, container=None, since_time=None, timestamps=False):
        for line in self._since(pod, since_time):
            yield line
        await asyncio.Event().wait()


class StalledEverything(StalledStream):
    """The stream hangs, and so does every read once ``stall_reads`` is set (a slow API server)."""

    stall_reads = False

    async def read_log(self, namespace, pod, *, since_time=None, **kwargs: Any) -> str:
        if self.stall_reads:
            await asyncio.Event().wait()
        return await super().read_log(namespace, pod, since_time=since_time, **kwargs)


class Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, message: Any, *args: Any) -> None:
        self.lines.append(message % args if args else message)


async def _streaming(client: StalledStream) -> tuple[LogStreamer, LogHub, Lines, deque[str]]:
    client.write("train-0", "epoch 1", at=0.1)
    tail: deque[str] = deque(maxlen=10)
    trigger_log = Lines()
    hub = LogHub(client, streams=10, rate=1000.0, min_interval=10.0)  # type: ignore[arg-type]
    streamer = LogStreamer(client, "default", trigger_log, tail, hub=hub)  # type: ignore[arg-type]
    streamer.follow(NO_REPLICAS, [pod(running=True)])
    for _ in range(200):
        if tail:
            break
        await asyncio.sleep(0.01)
    return streamer, hub, trigger_log, tail


async def test_a_stream_that_outlives_its_container_is_ended_by_one_read_and_leaves_no_marker():
    client = StalledStream()
    streamer, hub, trigger_log, _ = await _streaming(client)
    client.write("train-0", "epoch 2", "done", at=0.1)  # same second, even the same timestamp
    reads = client.reads
    streamer.follow(NO_REPLICAS, [pod(running=False)])
    loop = asyncio.get_running_loop()
    started = loop.time()
    await streamer.drain(timeout=logstream.FINAL_DRAIN)
    assert loop.time() - started < logstream.FINAL_DRAIN  # the read ended it, not the drain's timeout
    assert streamer.seal() == ()
    assert client.reads == reads + 1
    assert trigger_log.lines == ["[train-0] epoch 1", "[train-0] epoch 2", "[train-0] done"]
    assert hub._streaming == {}  # noqa: SLF001 - its stream was closed, its connection freed
    await hub.close()


async def test_a_stalled_stream_and_read_do_not_hold_the_final_event_and_the_worker_prints_the_rest():
    client = StalledEverything()
    streamer, hub, trigger_log, _ = await _streaming(client)
    client.write("train-0", "epoch 2", "done", at=0.1)
    client.stall_reads = True
    streamer.follow(NO_REPLICAS, [pod(running=False)])
    loop = asyncio.get_running_loop()
    started = loop.time()
    await streamer.drain(timeout=logstream.FINAL_DRAIN)
    markers = streamer.seal()
    assert loop.time() - started < 1.0
    assert [m.cursor.lines for m in markers] == [1]
    client.write("train-0", "after the seal", at=0.2)
    await asyncio.sleep(0.05)
    assert trigger_log.lines == ["[train-0] epoch 1"]  # nothing printed once sealed

    client.stall_reads = False
    worker_log = Lines()
    printed = await print_missing(client, "default", markers, worker_log)  # type: ignore[arg-type]
    assert printed == ["[train-0] epoch 2", "[train-0] done", "[train-0] after the seal"]
    assert trigger_log.lines + worker_log.lines == [
        "[train-0] epoch 1",
        "[train-0] epoch 2",
        "[train-0] done",
        "[train-0] after the seal",
    ]
    await hub.close()


class GonePod(FakeLogs):
    async def read_log(self, namespace, pod, **_: Any) -> str:
        raise KubeError(404, "NotFound", f'pods "{pod}" not found')


async def test_a_marker_whose_pod_is_gone_is_noted_and_does_not_fail_the_task():
    log = Lines()
    marker = LogMarker("train-0", "main", "worker-0", Cursor(at=T0, same=1, lines=1))
    assert await print_missing(GonePod(), "default", [marker], log) == []  # type: ignore[arg-type]
    assert log.lines == ["[worker-0] (the last log lines could not be read: its pod is gone)"]


TRIGGER_ID: contextvars.ContextVar[int | None] = contextvars.ContextVar("trigger_id", default=None)


class RoutedLines:
    """A log that records which trigger each line was logged for, as Airflow's triggerer routes it:
    by the ``trigger_id`` bound in the context of the call."""

    def __init__(self) -> None:
        self.lines: list[tuple[int | None, str]] = []

    def info(self, message: Any, *args: Any) -> None:
        self.lines.append((TRIGGER_ID.get(), message % args if args else message))


async def test_each_line_is_logged_in_its_own_triggers_context_whoever_woke_the_reader():
    client = FakeLogs()
    client.write("first-0", "first's line", at=0.1)
    client.write("second-0", "second's line", at=0.1)
    hub = LogHub(client, streams=0, rate=1000.0, min_interval=10.0)  # type: ignore[arg-type]
    log = RoutedLines()

    async def trigger(trigger_id: int, pod_name: str) -> LogStreamer:
        TRIGGER_ID.set(trigger_id)  # what the triggerer's run_trigger binds for each trigger
        streamer = LogStreamer(client, "default", log, deque(maxlen=10), owner=pod_name, hub=hub)  # type: ignore[arg-type]
        streamer.follow(NO_REPLICAS, [pod(name=pod_name, running=False)])
        return streamer

    # The first trigger's task starts the hub's reader; the second's lines are read by it.
    await asyncio.create_task(trigger(1, "first-0"))
    await asyncio.create_task(trigger(2, "second-0"))
    for _ in range(200):
        if len(log.lines) == 2:
            break
        await asyncio.sleep(0.01)
    assert sorted(log.lines) == [(1, "[first-0] first's line"), (2, "[second-0] second's line")]
    await hub.close()


async def test_a_container_whose_pod_is_being_deleted_is_streamed_at_once_beyond_the_budget():
    # The kubelet removes a deleted pod's containers, logs and all, as soon as they stop: the lines a
    # rank prints in its grace period cannot wait for the ring's turn (here never: 1,000 s).
    client = FakeLogs()
    client.write("train-0", "step 1", at=0.1)
    tail: deque[str] = deque(maxlen=10)
    hub = LogHub(client, streams=0, rate=1000.0, min_interval=1000.0)  # type: ignore[arg-type]
    streamer = LogStreamer(client, "default", Lines(), tail, hub=hub)  # type: ignore[arg-type]
    streamer.follow(NO_REPLICAS, [pod(running=True)])
    for _ in range(200):
        if tail:
            break
        await asyncio.sleep(0.01)
    assert client.follows == 0  # no stream to spare: read in turn
    client.write("train-0", "SIGTERM at step 2", "stopped", at=0.2)
    deleting = pod(running=True)
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:30Z"
    streamer.follow(NO_REPLICAS, [deleting])
    for _ in range(200):
        if len(tail) == 3:
            break
        await asyncio.sleep(0.01)
    assert client.follows == 1
    assert list(tail) == ["[train-0] step 1", "[train-0] SIGTERM at step 2", "[train-0] stopped"]
    await hub.close()
