"""Live container logs into the task log, each line prefixed by its replica: ``[launcher]``, ``[worker-1]``.

One follow stream per container instance (pod uid, container, restart); a stream that ends while the
container still runs is opened again at the trigger's next look and skips the lines already shown. An established stream outlives the token
that opened it (the API server authenticates a request once, when it starts); a resume that the API
server refuses backs off while the client renews the connection's credentials.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter, deque
from collections.abc import Iterable
from typing import Any, Protocol

from airflow_jobs_plugin.kube import KubeClient, KubeError
from airflow_jobs_plugin.lifecycle import JobSnapshot
from airflow_jobs_plugin.manifests import pod_role_and_rank


class LineSink(Protocol):
    """Where streamed lines go: a ``logging.Logger``, or the trigger's own (structlog) logger."""

    def info(self, message: Any, /, *args: Any) -> Any: ...


def _started_containers(pod: dict) -> Iterable[tuple[str, int, bool]]:
    """(container, restart count, still running) for every container that has produced output."""
    status = pod.get("status") or {}
    for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        state = cs.get("state") or {}
        if "running" in state or "terminated" in state:
            yield cs["name"], int(cs.get("restartCount") or 0), "running" in state


def _replica_name(pod_labels: dict) -> str | None:
    """``launcher`` or ``worker-<rank>`` from a product pod's labels."""
    role, rank = pod_role_and_rank(pod_labels)
    if role == "launcher":
        return "launcher"
    if role is not None and rank is not None:
        return f"{role}-{rank}"
    return None


RESUMES = 6
REOPENS = 100  # streams of one running container reopened after they ended, at most
RESUME_FIRST_WAIT = 1.0
RESUME_MAX_WAIT = 16.0
# How long a later pod's lines wait for the earlier pod of the same replica to finish printing: an
# earlier pod stuck terminating must not hold the live log back for ever.
EARLIER_POD_WAIT = 30.0


class LogStreamer:
    def __init__(self, client: KubeClient, namespace: str, log: LineSink, tail: deque[str]):
        self.client = client
        self.namespace = namespace
        self.log = log
        self.tail = tail
        self._tasks: dict[tuple[str, str, int], asyncio.Task] = {}
        self._shown: Counter[tuple[str, str, int]] = Counter()  # lines shown per container instance
        self._reopened: Counter[tuple[str, str, int]] = Counter()
        # The newest stream of each replica's container (by its label): a later pod of the same replica
        # (a pod the Job controller created after the previous one failed) prints only once the earlier
        # pod's stream has delivered everything, so run 1's lines never follow run 2's in the task log.
        self._last: dict[str, asyncio.Task] = {}

    def follow(self, snap: JobSnapshot, pods: Iterable[dict]) -> None:
        """Start following every container of every pod of the job that started and is not followed yet,
        and follow again a running container whose stream ended (the API server closed it: a restart, a
        dropped connection); the lines already shown are skipped.

        Every pod, not only each replica's current one: a pod that failed and was replaced between two
        looks still has the log that explains the retry."""
        current = {r.pod: r.name for r in snap.replicas if r.pod}
        # Oldest first: the pods of one replica are followed, and printed, in the order they ran.
        for pod in sorted(pods, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or ""):
            meta = pod.get("metadata") or {}
            name = meta.get("name")
            if not name:  # only a pod the API server has named has a log to follow
                continue
            prefix = _replica_name(meta.get("labels") or {}) or current.get(name) or name
            main = ((pod.get("spec") or {}).get("containers") or [{}])[0].get("name")
            for container, restart, running in _started_containers(pod):
                key = (meta.get("uid") or name, container, restart)
                task = self._tasks.get(key)
                if task is not None and not (task.done() and running and self._reopened[key] < REOPENS):
                    continue
                if task is not None:
                    self._reopened[key] += 1
                label = prefix if container == main else f"{prefix}/{container}"
                earlier = self._last.get(label) if task is None else None
                self._tasks[key] = self._last[label] = asyncio.create_task(
                    self._follow(key, name, container, label, after=earlier)
                )

    async def _follow(
        self,
        key: tuple[str, str, int],
        pod: str,
        container: str,
        label: str,
        after: asyncio.Task | None = None,
    ) -> None:
        if after is not None and not after.done():
            # The earlier pod of this replica has ended (or is ending): its stream finishes on its own.
            with contextlib.suppress(asyncio.CancelledError, asyncio.TimeoutError, Exception):
                await asyncio.wait_for(asyncio.shield(after), EARLIER_POD_WAIT)
        for attempt in range(RESUMES):  # a refused open is tried again; a stream that ends is done
            seen = 0
            try:
                async for line in self.client.follow_log(self.namespace, pod, container=container):
                    seen += 1
                    if seen <= self._shown[key]:
                        continue
                    self._shown[key] = seen
                    text = f"[{label}] {line}"
                    self.tail.append(text)
                    self.log.info("%s", text)
            except KubeError as exc:
                if exc.not_found or exc.status == 400:  # pod gone or container not started yet
                    return
                # Doubling waits (1, 2, 4, ... s) outlast a refused credential's renewal or a restart of
                # the API server, which a fixed one-second wait would exhaust in five seconds.
                await asyncio.sleep(min(RESUME_MAX_WAIT, RESUME_FIRST_WAIT * 2**attempt))
                continue
            return

    async def drain(self, timeout: float) -> None:
        """Let the streams of finished containers deliver their last lines."""
        pending = [t for t in self._tasks.values() if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=timeout)

    async def close(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        for task in self._tasks.values():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
