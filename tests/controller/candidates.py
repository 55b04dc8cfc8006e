"""Candidates for one Lease, run as a test runs them: each an elector on a client of its own, whose
``lead`` records when it started and stopped, so a test checks that no two terms overlapped."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime, timezone

from airflow_jobs_plugin.cluster.kube import KubeClient
from airflow_jobs_plugin.cluster.resources import LEASES, Resource
from airflow_jobs_plugin.controller.leader import LeaderElector

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
LEASE = "admission"
# Timings short enough for a test, long enough for a loaded machine: client-go's proportions
# (15/10/2 s), with lease_duration > renew_deadline + retry_period.
TIMINGS = {"lease_duration": 3.0, "renew_deadline": 2.0, "retry_period": 0.3}
# A request's round trip on a loaded two-core machine or the real plane: what a bound derived from the
# timings allows for the reads and writes it involves.
LATENCY = 1.0


@dataclass
class Term:
    """One call of ``lead``: when it started and stopped, on the monotonic and the wall clock."""

    started: float
    started_wall: datetime
    stopped: float | None = None


@dataclass
class Candidate:
    identity: str
    client: KubeClient
    elector: LeaderElector
    terms: list[Term] = field(default_factory=list)
    task: asyncio.Task | None = None

    @property
    def leading(self) -> bool:
        """Its ``lead`` runs now (the elector's ``is_leader`` turns True just before ``lead`` starts)."""
        return bool(self.terms) and self.terms[-1].stopped is None

    async def lead(self) -> None:
        term = Term(time.monotonic(), datetime.now(timezone.utc))
        self.terms.append(term)
        try:
            await asyncio.Event().wait()
        finally:
            term.stopped = time.monotonic()

    def start(self) -> Candidate:
        self.task = asyncio.ensure_future(self.elector.run(self.lead))
        return self

    async def stop(self) -> None:
        """Cancel it, as SIGTERM does: it stops leading and releases the Lease."""
        assert self.task is not None
        self.task.cancel()
        await asyncio.wait({self.task})

    async def kill(self) -> float:
        """End it as a killed process ends: its client is gone, so nothing more reaches the cluster, no
        renewal and no release. The tick it died."""
        assert self.task is not None
        died = time.monotonic()
        await self.client.close()
        self.task.cancel()
        await asyncio.wait({self.task})
        return died


async def until(check, timeout: float, what: str) -> float:
    """Poll ``check()`` until it holds; the tick it first held. Fails naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.1f} s")
        await asyncio.sleep(0.01)
    return time.monotonic()


def overlapping(*candidates: Candidate) -> list[str]:
    """Every two terms of different candidates that overlap in time: two leaders at once."""
    terms = [
        (c.identity, t.started, t.stopped if t.stopped is not None else float("inf"))
        for c in candidates
        for t in c.terms
    ]
    return [
        f"{a[0]} led {a[1]:.3f}-{a[2]:.3f} and {b[0]} {b[1]:.3f}-{b[2]:.3f}"
        for i, a in enumerate(terms)
        for b in terms[i + 1 :]
        if a[0] != b[0] and a[1] < b[2] and b[1] < a[2]
    ]


class Election:
    """A fresh namespace with candidates for its Lease, all closed at the end."""

    def __init__(self, kubeconfig: str, admin: KubeClient, namespace: str):
        self.kubeconfig = kubeconfig
        self.admin = admin
        self.namespace = namespace
        self.candidates: list[Candidate] = []

    async def candidate(self, identity: str, kubeconfig: str | None = None, **timings: float) -> Candidate:
        client = await KubeClient.from_kubeconfig(kubeconfig or self.kubeconfig)
        try:
            elector = LeaderElector(client, self.namespace, LEASE, identity, **{**TIMINGS, **timings})
        except ValueError:
            await client.close()
            raise
        made = Candidate(identity, client, elector)
        self.candidates.append(made)
        return made

    async def lease(self) -> dict | None:
        return await self.admin.get_or_none(LEASES, self.namespace, LEASE)


@contextlib.asynccontextmanager
async def election(kubeconfig: str) -> AsyncIterator[Election]:
    admin = await KubeClient.from_kubeconfig(kubeconfig)
    namespace = f"lease-{uuid.uuid4().hex[:8]}"
    await admin.create(NAMESPACES, "", {"metadata": {"name": namespace}})
    made = Election(kubeconfig, admin, namespace)
    try:
        yield made
    finally:
        for candidate in made.candidates:
            if candidate.task is not None and not candidate.task.done():
                candidate.task.cancel()
                await asyncio.wait({candidate.task})
            with contextlib.suppress(Exception):
                await candidate.client.close()
        with contextlib.suppress(Exception):
            await admin.delete(NAMESPACES, "", namespace)
        await admin.close()
