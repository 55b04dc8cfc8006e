"""Container logs that recover by themselves and reach the task log once: a read or stream the API
server refuses for a while (credentials being renewed, an API server restarting) is tried again with
doubling waits, a stream the server closed under a running container resumes from its cursor, the
containers past the stream budget are read in turn, and a sealed streamer prints nothing more."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from types import SimpleNamespace
from typing import Any

from airflow_jobs_plugin.cluster.kube import KubeError
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.logs import logstream
from airflow_jobs_plugin.logs.logcursor import parse_stamp
from airflow_jobs_plugin.logs.logstream import LogHub, LogStreamer

T0 = parse_stamp("2026-01-01T00:00:00Z") or 0


def stamp(ns: int) -> str:
    seconds, fraction = divmod(ns, 1_000_000_000)
    base = f"2026-01-01T00:00:{seconds - T0 // 1_000_000_000:02d}"
    return f"{base}.{fraction:09d}Z"


class FakeLogs:
    """``follow_log`` and ``read_log`` as the API server answers them with ``timestamps=true``: lines
    at or after ``sinceTime`` (whole seconds). ``refuse`` makes the next requests fail with that many
    401s; ``close_after`` ends a follow after that many lines although the container runs."""

    def __init__(self) -> None:
        self.logs: dict[str, list[tuple[int, str]]] = {}
        self.refuse = 0
        self.close_after: int | None = None
        self.follows = 0
        self.reads = 0
        self.arrived: dict[str, asyncio.Event] = {}

    def write(self, pod: str, *texts: str, at: float | None = None) -> None:
        lines = self.logs.setdefault(pod, [])
        for text in texts:
            ns = T0 + int((at if at is not None else len(lines)) * 1_000_000_000)
            lines.append((ns, text))
        self.arrived.setdefault(pod, asyncio.Event()).set()

    def _since(self, pod: str, since_time: str | None) -> list[str]:
        cut = (parse_stamp(since_time) or 0) if since_time else 0
        return [f"{stamp(ns)} {text}" for ns, text in self.logs.get(pod, []) if ns >= cut]

    def _refused(self) -> None:
        if self.refuse > 0:
            self.refuse -= 1
            raise KubeError(401, "Unauthorized", "refused freshly obtained credentials of connection 'k'")

    async def follow_log(self, namespace, pod, *, container=None, since_time=None, timestamps=False):
        self.follows += 1
        self._refused()
        for n, line in enumerate(self._since(pod, since_time)):
            if self.close_after is not None and n >= self.close_after:
                return
            yield line

    async def read_log(self, namespace, pod, *, since_time=None, **_: Any) -> str:
        self.reads += 1
        self._refused()
        return "".join(f"{line}\n" for line in self._since(pod, since_time))


# The streamer reads only a snapshot's replicas, to name pods without product labels.
NO_REPLICAS: Any = SimpleNamespace(replicas=())


def pod(
    name: str = "train-0", *, running: bool = False, uid: str = "", created: str = "", rank: str = ""
) -> dict:
    state: dict = {"running": {}} if running else {"terminated": {"exitCode": 0}}
    meta: dict = {"name": name, "uid": uid or name, "labels": {}}
    if created:
        meta["creationTimestamp"] = created
    if rank:
        meta["labels"] = {labels.ROLE: "worker", labels.RANK: rank}
    return {
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [{"name": "main"}]},
        "status": {"containerStatuses": [{"name": "main", "restartCount": 0, "state": state}]},
    }


def streamer_for(client: FakeLogs, *, streams: int = 10) -> tuple[LogStreamer, deque[str], LogHub]:
    tail: deque[str] = deque(maxlen=50)
    hub = LogHub(client, streams=streams, rate=1000.0, min_interval=0.01)  # type: ignore[arg-type]
    return LogStreamer(client, "default", logging.getLogger("test"), tail, hub=hub), tail, hub  # type: ignore[arg-type]


async def test_refused_requests_are_waited_out_and_no_line_is_shown_twice(monkeypatch):
    monkeypatch.setattr(logstream, "RESUME_FIRST_WAIT", 0.001)
    client = FakeLogs()
    client.write("train-0", "epoch 1", "epoch 2", "done")
    client.refuse = 3
    streamer, tail, hub = streamer_for(client)
    streamer.follow(NO_REPLICAS, [pod()])
    await streamer.drain(timeout=30)
    assert list(tail) == ["[train-0] epoch 1", "[train-0] epoch 2", "[train-0] done"]
    await hub.close()


async def test_a_run_refused_past_its_resumes_is_given_up_without_raising(monkeypatch):
    monkeypatch.setattr(logstream, "RESUME_FIRST_WAIT", 0.001)
    client = FakeLogs()
    client.write("train-0", "epoch 1")
    client.refuse = 100
    streamer, tail, hub = streamer_for(client)
    streamer.follow(NO_REPLICAS, [pod()])
    await streamer.drain(timeout=30)
    assert client.reads == logstream.RESUMES
    # Never silently: the task log says the log stops there, and why.
    assert list(tail) == [
        f"[train-0] (the rest of this log cannot be read: {logstream.RESUMES} reads in a row failed)"
    ]
    assert streamer.seal() == ()  # given up: no marker the worker could read either
    await hub.close()


async def test_a_stream_the_server_closed_under_a_running_container_resumes_from_its_cursor():
    client = FakeLogs()
    client.write("train-0", "epoch 1", "epoch 2", "epoch 3")
    client.close_after = 1
    streamer, tail, hub = streamer_for(client)
    streamer.follow(NO_REPLICAS, [pod(running=True)])
    for _ in range(200):
        if len(tail) == 3:
            break
        await asyncio.sleep(0.01)
    assert list(tail) == ["[train-0] epoch 1", "[train-0] epoch 2", "[train-0] epoch 3"]
    await hub.close()


async def test_an_ended_containers_run_is_read_once_more_and_is_then_complete():
    client = FakeLogs()
    client.write("train-0", "epoch 1")
    streamer, tail, hub = streamer_for(client, streams=0)  # no stream: read in turn
    streamer.follow(NO_REPLICAS, [pod(running=True)])
    for _ in range(200):
        if tail:
            break
        await asyncio.sleep(0.01)
    client.write("train-0", "done")
    streamer.follow(NO_REPLICAS, [pod(running=False)])
    await streamer.drain(timeout=30)
    assert list(tail) == ["[train-0] epoch 1", "[train-0] done"]
    assert streamer.seal() == ()
    await hub.close()


async def test_containers_past_the_stream_budget_are_read_in_turn_and_every_line_is_printed_once():
    client = FakeLogs()
    pods = [pod(f"train-{i}", running=True) for i in range(3)]
    for i in range(3):
        client.write(f"train-{i}", f"pod {i} line 1", at=0.1)
    streamer, tail, hub = streamer_for(client, streams=1)
    streamer.follow(NO_REPLICAS, pods)
    for _ in range(300):
        if len(tail) == 3:
            break
        await asyncio.sleep(0.01)
    for i in range(3):
        client.write(f"train-{i}", f"pod {i} line 2", at=0.2)
    for _ in range(300):
        if len(tail) == 5:  # the streamed pod's follow already ended with its first line
            break
        await asyncio.sleep(0.01)
    streamer.follow(NO_REPLICAS, [pod(f"train-{i}") for i in range(3)])
    await streamer.drain(timeout=30)
    assert sorted(tail) == sorted(f"[train-{i}] pod {i} line {k}" for i in range(3) for k in (1, 2))
    assert hub.most_streams == 1 and hub.reads > 0
    await hub.close()


async def test_a_sealed_streamer_prints_nothing_more_and_its_markers_say_where_it_stopped():
    client = FakeLogs()
    client.write("train-0", "epoch 1", at=0.5)
    streamer, tail, hub = streamer_for(client, streams=0)
    streamer.follow(NO_REPLICAS, [pod(running=True)])
    for _ in range(200):
        if tail:
            break
        await asyncio.sleep(0.01)
    (marker,) = streamer.seal()
    client.write("train-0", "epoch 2", at=0.7)
    await asyncio.sleep(0.1)
    assert list(tail) == ["[train-0] epoch 1"]
    assert (marker.pod, marker.label, marker.cursor.lines) == ("train-0", "train-0", 1)
    assert marker.cursor.at == T0 + 500_000_000 and marker.cursor.same == 1
    await hub.close()


class SlowFirstPod(FakeLogs):
    """The first pod's log arrives late (a slow node), the replacement's at once."""

    async def read_log(self, namespace, pod, **kwargs: Any) -> str:
        if pod == "train-a1-first":
            await asyncio.sleep(0.2)
        return await super().read_log(namespace, pod, **kwargs)


async def test_a_replicas_earlier_pod_is_printed_before_the_pod_that_replaced_it():
    # Both pods of worker 0 show up in one look (the first failed and was replaced in between): the
    # task log reads in the order they ran, whichever log the API server delivers first.
    client = SlowFirstPod()
    client.write("train-a1-first", "flaky: run 1", "exit 1")
    client.write("train-a1-second", "flaky: run 2")
    first = pod("train-a1-first", created="2026-01-01T00:00:00Z", rank="0")
    second = pod("train-a1-second", created="2026-01-01T00:00:05Z", rank="0")
    streamer, tail, hub = streamer_for(client, streams=0)
    streamer.follow(NO_REPLICAS, [second, first])
    await streamer.drain(timeout=30)
    assert list(tail) == ["[worker-0] flaky: run 1", "[worker-0] exit 1", "[worker-0] flaky: run 2"]
    await hub.close()


class DeletedPod(FakeLogs):
    """The pod is deleted after its first lines (an MPI worker once its launcher ended)."""

    deleted = False

    async def read_log(self, namespace, pod, **kwargs: Any) -> str:
        if self.deleted:
            self.reads += 1
            raise KubeError(404, "NotFound", f'pods "{pod}" not found')
        return await super().read_log(namespace, pod, **kwargs)


async def test_a_run_whose_pod_is_gone_is_read_once_more_and_leaves_no_marker():
    client = DeletedPod()
    client.write("train-0", "Server listening on 0.0.0.0 port 22.")
    streamer, tail, hub = streamer_for(client, streams=0)
    streamer.follow(NO_REPLICAS, [pod(running=True)])
    for _ in range(200):
        if tail:
            break
        await asyncio.sleep(0.01)
    client.deleted = True
    streamer.follow(NO_REPLICAS, [])  # the next look: the pod is no longer there
    await streamer.drain(timeout=30)
    assert streamer.seal() == ()  # nothing left the worker could read: no marker, no note
    assert list(tail) == ["[train-0] Server listening on 0.0.0.0 port 22."]
    await hub.close()


class RefusedFirstFollow(FakeLogs):
    """The first follow is refused (400: the container is not ready to be read yet), every later one
    is served and then hangs as a follow of a running container does."""

    async def follow_log(self, namespace, pod, *, container=None, since_time=None, timestamps=False):
        self.follows += 1
        if self.follows == 1:
            raise KubeError(400, "BadRequest", 'container "main" in pod "train-0" is waiting to start')
        for line in self._since(pod, since_time):
            yield line
        await asyncio.Event().wait()


async def test_a_run_whose_stream_was_refused_gets_a_stream_again_once_it_may():
    client = RefusedFirstFollow()
    client.write("train-0", "epoch 1", at=0.1)
    streamer, tail, hub = streamer_for(client, streams=1)
    streamer.follow(NO_REPLICAS, [pod(running=True)])
    # Read in turn meanwhile; once its wait after the refusal is over, the free stream is its again.
    for _ in range(500):
        if client.follows == 2 and tail:
            break
        await asyncio.sleep(0.01)
    assert client.follows == 2  # before: read in turn for ever, the stream left unused
    assert list(tail) == ["[train-0] epoch 1"]
    await hub.close()
