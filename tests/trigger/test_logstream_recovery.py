"""Log streams that recover by themselves: a resume the API server refuses for a while (credentials being
renewed, an API server restarting) is tried again with doubling waits, a stream the server closed is
reopened while its container runs, and every line is shown once."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from types import SimpleNamespace
from typing import Any

from airflow_jobs_plugin import labels, logstream
from airflow_jobs_plugin.kube import KubeError
from airflow_jobs_plugin.logstream import LogStreamer


class RefusingClient:
    """``follow_log`` as the API server answers it: the log so far, then ``refusals`` 401s, then the
    whole log again (a resumed follow starts from the first line)."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.calls = 0

    async def follow_log(self, namespace, pod, *, container=None):
        self.calls += 1
        if self.calls == 1:
            yield "epoch 1"
            raise KubeError(0, "Unreachable", "stream broke")
        if self.calls <= 1 + self.refusals:
            raise KubeError(401, "Unauthorized", "refused freshly obtained credentials of connection 'k'")
        for line in ("epoch 1", "epoch 2", "done"):
            yield line


# The streamer reads only a snapshot's replicas, to name pods without product labels.
NO_REPLICAS: Any = SimpleNamespace(replicas=())


def running_pod() -> dict:
    return {
        "kind": "Pod",
        "metadata": {"name": "train-0", "uid": "u1", "labels": {}},
        "spec": {"containers": [{"name": "main"}]},
        "status": {"containerStatuses": [{"name": "main", "restartCount": 0, "state": {"running": {}}}]},
    }


async def test_refused_resumes_are_waited_out_and_no_line_is_shown_twice(monkeypatch):
    monkeypatch.setattr(logstream, "RESUME_FIRST_WAIT", 0.001)
    client = RefusingClient(refusals=3)
    tail: deque[str] = deque(maxlen=10)
    streamer = LogStreamer(client, "default", logging.getLogger("test"), tail)
    streamer.follow(NO_REPLICAS, [running_pod()])
    await streamer.drain(timeout=30)
    assert client.calls == 5
    assert list(tail) == ["[train-0] epoch 1", "[train-0] epoch 2", "[train-0] done"]


async def test_a_stream_refused_past_its_resumes_stops_without_raising(monkeypatch):
    monkeypatch.setattr(logstream, "RESUME_FIRST_WAIT", 0.001)
    client = RefusingClient(refusals=100)
    tail: deque[str] = deque(maxlen=10)
    streamer = LogStreamer(client, "default", logging.getLogger("test"), tail)
    streamer.follow(NO_REPLICAS, [running_pod()])
    await streamer.drain(timeout=30)
    assert client.calls == logstream.RESUMES
    assert list(tail) == ["[train-0] epoch 1"]


class ClosingClient:
    """The API server closes the first follow stream after one line (a restart, a dropped connection);
    the next one serves the whole log so far."""

    def __init__(self) -> None:
        self.calls = 0

    async def follow_log(self, namespace, pod, *, container=None):
        self.calls += 1
        lines = ["epoch 1"] if self.calls == 1 else ["epoch 1", "epoch 2", "epoch 3"]
        for line in lines:
            yield line


async def test_a_stream_the_server_closed_is_reopened_at_the_next_look_while_the_container_runs():
    client = ClosingClient()
    tail: deque[str] = deque(maxlen=10)
    streamer = LogStreamer(client, "default", logging.getLogger("test"), tail)
    streamer.follow(NO_REPLICAS, [running_pod()])
    await streamer.drain(timeout=30)
    assert list(tail) == ["[train-0] epoch 1"]
    streamer.follow(NO_REPLICAS, [running_pod()])  # the trigger's next look: still running
    await streamer.drain(timeout=30)
    assert client.calls == 2
    assert list(tail) == ["[train-0] epoch 1", "[train-0] epoch 2", "[train-0] epoch 3"]


async def test_a_finished_containers_ended_stream_is_not_reopened():
    client = ClosingClient()
    tail: deque[str] = deque(maxlen=10)
    streamer = LogStreamer(client, "default", logging.getLogger("test"), tail)
    streamer.follow(NO_REPLICAS, [running_pod()])
    await streamer.drain(timeout=30)
    finished = running_pod()
    finished["status"]["containerStatuses"][0]["state"] = {"terminated": {"exitCode": 0}}
    streamer.follow(NO_REPLICAS, [finished])
    await streamer.drain(timeout=30)
    assert client.calls == 1


class SlowFirstPodClient:
    """The first pod's log arrives late (a slow node), the replacement's at once."""

    async def follow_log(self, namespace, pod, *, container=None):
        if pod == "train-a1-first":
            await asyncio.sleep(0.2)
            for line in ("flaky: run 1", "exit 1"):
                yield line
        else:
            yield "flaky: run 2"


def worker_pod(name: str, uid: str, created: str, state: dict) -> dict:
    return {
        "kind": "Pod",
        "metadata": {
            "name": name,
            "uid": uid,
            "creationTimestamp": created,
            "labels": {labels.ROLE: "worker", labels.RANK: "0"},
        },
        "spec": {"containers": [{"name": "main"}]},
        "status": {"containerStatuses": [{"name": "main", "restartCount": 0, "state": state}]},
    }


async def test_a_replicas_earlier_pod_is_printed_before_the_pod_that_replaced_it():
    # Both pods of worker 0 show up in one look (the first failed and was replaced in between): the
    # task log reads in the order they ran, whichever log the API server delivers first.
    first = worker_pod("train-a1-first", "u1", "2026-01-01T00:00:00Z", {"terminated": {"exitCode": 1}})
    second = worker_pod("train-a1-second", "u2", "2026-01-01T00:00:05Z", {"running": {}})
    tail: deque[str] = deque(maxlen=10)
    streamer = LogStreamer(SlowFirstPodClient(), "default", logging.getLogger("test"), tail)
    streamer.follow(NO_REPLICAS, [second, first])
    await streamer.drain(timeout=30)
    assert list(tail) == ["[worker-0] flaky: run 1", "[worker-0] exit 1", "[worker-0] flaky: run 2"]
