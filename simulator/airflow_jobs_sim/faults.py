"""Fault injection for the simulated API server: error rates, latency, dropped watches, forced 410.

Set from Python (``cluster.faults``) or through the admin endpoint (``/_sim/faults``). Thread-safe.
A rule's ``verb``/``resource`` of None matches everything; resource "pods" also matches its
subresources ("pods/status", "pods/log"), "pods/log" only itself. An error rule's ``user`` (the name
authentication gave the caller, with ``ClusterConfig.identities``) fails only that caller's requests,
so one client of the cluster can be cut off while the others go on.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from airflow_jobs_sim import errors
from airflow_jobs_sim.errors import ApiError

VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")


@dataclass(frozen=True)
class ErrorRule:
    """Fail a share of matching requests with an HTTP error."""

    rate: float = 1.0
    code: int = 500  # 429, 500 or 503
    verb: str | None = None
    resource: str | None = None
    retry_after: int = 1  # seconds, sent with 429 and 503
    user: str | None = None


@dataclass(frozen=True)
class LatencyRule:
    """Delay matching requests before serving them."""

    seconds: float
    verb: str | None = None
    resource: str | None = None


def _matches(rule_verb: str | None, rule_resource: str | None, verb: str, resource: str) -> bool:
    if rule_verb is not None and rule_verb != verb:
        return False
    if rule_resource is None:
        return True
    return resource == rule_resource or resource.split("/", 1)[0] == rule_resource


def error_for_code(code: int, retry_after: int) -> ApiError:
    """The Status error the real server sends for an injected code."""
    if code == 429:
        return errors.too_many_requests(retry_after)
    if code == 503:
        return errors.service_unavailable()
    return errors.internal_error("injected fault")


class Faults:
    """The fault settings of one cluster; see the module docstring."""

    def __init__(self, seed: int | None = None):
        self._lock = threading.Lock()
        self._random = random.Random(seed)
        self._errors: list[ErrorRule] = []
        self._latency: list[LatencyRule] = []
        self._gone = 0
        self._drop_every: float | None = None
        self._last_drop = time.monotonic()
        self._watch_closers: set[Callable[[], None]] = set()

    # -- configuration
    def add_error(
        self,
        rate: float = 1.0,
        code: int = 500,
        verb: str | None = None,
        resource: str | None = None,
        retry_after: int = 1,
        user: str | None = None,
    ) -> ErrorRule:
        """Fail ``rate`` (0..1) of matching requests with ``code`` (429, 500 or 503); with ``user``, only
        that caller's."""
        if code not in (429, 500, 503):
            raise ValueError("code must be 429, 500 or 503")
        if verb is not None and verb not in VERBS:
            raise ValueError(f"unknown verb {verb!r}")
        rule = ErrorRule(rate, code, verb, resource, retry_after, user)
        with self._lock:
            self._errors.append(rule)
        return rule

    def set_latency(
        self, seconds: float, verb: str | None = None, resource: str | None = None
    ) -> LatencyRule:
        """Add ``seconds`` of latency to matching requests."""
        rule = LatencyRule(seconds, verb, resource)
        with self._lock:
            self._latency.append(rule)
        return rule

    def force_gone(self, count: int = 1) -> None:
        """The next ``count`` watch requests get an in-stream 410 Expired and close."""
        with self._lock:
            self._gone += count

    def drop_watches(self) -> int:
        """Close every open watch stream now; returns how many were closed."""
        with self._lock:
            closers = list(self._watch_closers)
            self._last_drop = time.monotonic()
        for close in closers:
            close()
        return len(closers)

    def drop_watches_every(self, seconds: float | None) -> None:
        """Close every open watch stream every ``seconds`` (None stops it)."""
        with self._lock:
            self._drop_every = seconds
            self._last_drop = time.monotonic()

    def clear(self) -> None:
        """Remove every fault (open watches stay open)."""
        with self._lock:
            self._errors.clear()
            self._latency.clear()
            self._gone = 0
            self._drop_every = None

    def snapshot(self) -> dict:
        """The current settings as JSON-able data."""
        with self._lock:
            return {
                "errors": [asdict(r) for r in self._errors],
                "latency": [asdict(r) for r in self._latency],
                "force_gone": self._gone,
                "drop_watches_every": self._drop_every,
                "open_watches": len(self._watch_closers),
            }

    def configure(self, body: dict) -> None:
        """Apply admin-endpoint settings: errors, latency, force_gone, drop_watches, drop_watches_every."""
        for e in body.get("errors") or []:
            self.add_error(
                **{k: e[k] for k in ("rate", "code", "verb", "resource", "retry_after", "user") if k in e}
            )
        for item in body.get("latency") or []:
            self.set_latency(**{k: item[k] for k in ("seconds", "verb", "resource") if k in item})
        if body.get("force_gone"):
            self.force_gone(int(body["force_gone"]))
        if "drop_watches_every" in body:
            self.drop_watches_every(body["drop_watches_every"])
        if body.get("drop_watches"):
            self.drop_watches()

    # -- used by the server
    def error_for(self, verb: str, resource: str, user: str = "") -> ApiError | None:
        """The injected error for this request (of ``user``, when known), if one fires."""
        with self._lock:
            for rule in self._errors:
                if rule.user is not None and rule.user != user:
                    continue
                if _matches(rule.verb, rule.resource, verb, resource) and self._random.random() < rule.rate:
                    return error_for_code(rule.code, rule.retry_after)
        return None

    def retry_after(self, verb: str, resource: str, user: str = "") -> int:
        """Retry-After seconds of the first matching rule (1 by default)."""
        with self._lock:
            for rule in self._errors:
                if rule.user is not None and rule.user != user:
                    continue
                if _matches(rule.verb, rule.resource, verb, resource):
                    return rule.retry_after
        return 1

    def latency_for(self, verb: str, resource: str) -> float:
        """Total injected latency for this request, in seconds."""
        with self._lock:
            return sum(r.seconds for r in self._latency if _matches(r.verb, r.resource, verb, resource))

    def take_gone(self) -> bool:
        """Consume one forced 410, if any is pending."""
        with self._lock:
            if self._gone > 0:
                self._gone -= 1
                return True
        return False

    def register_watch(self, close: Callable[[], None]) -> Callable[[], None]:
        """Track an open watch so it can be dropped; returns the function that untracks it."""
        with self._lock:
            self._watch_closers.add(close)

        def unregister() -> None:
            with self._lock:
                self._watch_closers.discard(close)

        return unregister

    def drop_due(self) -> bool:
        """Whether the periodic drop interval has elapsed (then restarts it)."""
        with self._lock:
            if self._drop_every is None or time.monotonic() - self._last_drop < self._drop_every:
                return False
        self.drop_watches()
        return True
