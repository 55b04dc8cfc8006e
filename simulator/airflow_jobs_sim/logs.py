"""Container logs of the simulated kubelet: one append-only, timestamped line list per container run.

Writers (the kubelet, tests) append lines and close a run when its container ends; the API server
reads them with tail/since/previous and follows open runs. Thread-safe.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone

Listener = Callable[[str, str, str], None]


@dataclass
class _Run:
    lines: list[tuple[datetime, str]] = field(default_factory=list)
    closed: bool = False


@dataclass(frozen=True)
class LogRead:
    """A snapshot of one container run's log."""

    lines: tuple[tuple[datetime, str], ...]
    closed: bool


class LogStore:
    """Per (namespace, pod, container, restart) log lines; see the module docstring."""

    def __init__(self, now: Callable[[], datetime] | None = None):
        self._lock = threading.Lock()
        self._runs: dict[tuple[str, str, str, int], _Run] = {}
        self._listeners: list[Listener] = []
        self._now = now or (lambda: datetime.now(timezone.utc))

    def append(self, namespace: str, pod: str, container: str, line: str, restart: int = 0) -> None:
        """Append one line (text with newlines becomes several lines) to a container run."""
        now = self._now()
        parts = line.rstrip("\n").split("\n") if line else [""]
        with self._lock:
            run = self._runs.setdefault((namespace, pod, container, restart), _Run())
            run.lines.extend((now, p) for p in parts)
            listeners = list(self._listeners)
        for fn in listeners:
            fn(namespace, pod, container)

    def close(self, namespace: str, pod: str, container: str, restart: int = 0) -> None:
        """Mark a container run ended: followers of it stop after its last line."""
        with self._lock:
            self._runs.setdefault((namespace, pod, container, restart), _Run()).closed = True
            listeners = list(self._listeners)
        for fn in listeners:
            fn(namespace, pod, container)

    def read(self, namespace: str, pod: str, container: str, restart: int) -> LogRead | None:
        """The lines of one run so far (None if the run never logged nor closed)."""
        with self._lock:
            run = self._runs.get((namespace, pod, container, restart))
            if run is None:
                return None
            return LogRead(tuple(run.lines), run.closed)

    def latest_restart(self, namespace: str, pod: str, container: str) -> int | None:
        """The highest run index recorded for a container (None if it never logged)."""
        with self._lock:
            found = [r for (ns, p, c, r) in self._runs if (ns, p, c) == (namespace, pod, container)]
        return max(found) if found else None

    def forget_pod(self, namespace: str, pod: str) -> None:
        """Drop every log of a pod (after the pod object is gone) and wake its followers."""
        with self._lock:
            keys = [k for k in self._runs if k[:2] == (namespace, pod)]
            for k in keys:
                del self._runs[k]
            listeners = list(self._listeners)
        for fn in listeners:
            fn(namespace, pod, "")

    def listen(self, fn: Listener) -> Callable[[], None]:
        """Call ``fn(namespace, pod, container)`` after every append or close (from the writer's thread)."""
        with self._lock:
            self._listeners.append(fn)

        def unlisten() -> None:
            with self._lock:
                if fn in self._listeners:
                    self._listeners.remove(fn)

        return unlisten
