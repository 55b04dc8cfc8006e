"""What every queueing engine does on the cluster for a job it does not admit: read the nodes a ruling
needs, write the product's verdict, and finish ending a job ruled on.

One :class:`Door` per engine (its node cache is that engine's): the pool, Kueue and unmanaged engines
and, through them, the trigger reach a job's verdict and the ledger's rules by this door only.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from airflow_jobs_plugin.cluster.kube import CONFIGMAPS, NODEPOOLS, NODES, KubeClient, KubeError
from airflow_jobs_plugin.cluster.objects import Meta
from airflow_jobs_plugin.cluster.single_flight import SingleFlight
from airflow_jobs_plugin.cluster.watch import SharedWatch
from airflow_jobs_plugin.jobs import kinds
from airflow_jobs_plugin.queueing.engines.ruling import Ruling, ruling_before_queue
from airflow_jobs_plugin.queueing.quota import ledger, placement

log = logging.getLogger(__name__)
_T = TypeVar("_T")

# How long an engine waits for the read (a pass, the Workloads' list) that judges a job it has not seen.
ENSURE_WAIT_SECONDS = 10.0

# How long the nodes' GPU capacities read for placement are reused (nodes join and leave rarely).
NODES_TTL_SECONDS = 30.0
# The ConfigMap the cluster-autoscaler writes its status to (kubernetes/autoscaler cluster-autoscaler
# FAQ, --write-status-configmap, default true): its presence says the cluster can add nodes.
CLUSTER_AUTOSCALER_STATUS = "cluster-autoscaler-status"


def detached() -> contextvars.Context:
    """An empty context for an engine's background work (passes, timers, shared reads): whichever
    trigger's call starts it, its lines are no task's (the pool's ``job_log`` routes a job's own)."""
    return contextvars.Context()


def spawn(coro: Coroutine[Any, Any, _T], name: str) -> asyncio.Task[_T]:
    """A task of the engine's own, in an empty context (a task copies the context it is created in;
    ``create_task``'s ``context`` argument is Python 3.11+)."""
    return detached().run(asyncio.create_task, coro, name=name)


class ThroughTheDoor:
    """The verdict writes every engine offers its trigger, each through the engine's :class:`Door`."""

    door: Door

    async def fail(self, job: dict, reason: str, message: str) -> None:
        await self.door.fail(job, reason, message)

    def ruled_unended(self, job: dict, *, running_too: bool) -> bool:
        return self.door.ruled_unended(job, running_too=running_too)

    async def end_ruled(self, job: dict) -> None:
        await self.door.end_ruled(job)


class Door:
    """The cluster writes and reads the engines of one shared watch share the shape of."""

    def __init__(self, watch: SharedWatch):
        self.watch = watch
        self.client: KubeClient = watch.client
        self._node_capacities: list[placement.NodeCapacity] = []
        self._autoscaling = placement.NO_AUTOSCALING
        self._nodes_read_at: float | None = None
        self._nodes_reads: SingleFlight[None] = SingleFlight("nodes")

    # --- rulings ---

    async def ruling_before_queue(self, job: dict, *, pooled: bool) -> Ruling | None:
        """The pure ruling on a suspended job (engines.ruling), from the nodes as this door read them."""
        nodes = await self.nodes()
        return ruling_before_queue(job, nodes, self._autoscaling, pooled=pooled)

    async def rule(
        self, job: dict, reason: str, message: str, still_wanted: Callable[[dict], bool] = lambda _j: True
    ) -> None:
        """Fail a queued job with the product's verdict (conditional on the version read; a job changed
        meanwhile is re-read once), and fold the result into the shared watch."""
        log.warning("%s %s: %s: %s", kinds.kind_of(job).resource.kind, Meta(job).name, reason, message)
        result, _ = await ledger.settle(
            self.client,
            job,
            lambda j: ledger.verdict_patch(j, reason, message),
            ledger.is_finished,
            still_wanted,
        )
        if result is not None:
            await ledger.end_ruled_job(self.client, result)
        self._absorb(job, result)

    async def rule_kueue_job(self, job: dict, reason: str, message: str) -> None:
        """Fail a Kueue job with the product's verdict, written alone: ending it through a deadline would
        need an unsuspend, which Kueue undoes for a job it has not admitted."""
        log.warning("%s %s: %s: %s", kinds.kind_of(job).resource.kind, Meta(job).name, reason, message)
        result, _ = await ledger.settle(
            self.client, job, lambda j: ledger.verdict_only_patch(j, reason, message), ledger.is_finished
        )
        self._absorb(job, result)

    async def fail(self, job: dict, reason: str, message: str) -> None:
        """Fail a job whose pods can never start (the trigger's ruling): the verdict, written on the
        version read, then the job ended through its own controller so its pods (and GPUs) go now and
        ``kubectl get jobs`` shows it failed (``quota.ledger.verdict_patch``). A job gone or changed since
        it was read is left to the next look."""
        meta = Meta(job)
        try:
            result = await self.client.merge_patch(
                ledger.resource_of(job),
                meta.namespace,
                meta.name,
                ledger.verdict_patch(job, reason, message),
            )
        except KubeError as exc:
            if not (exc.not_found or exc.conflict):
                raise
            return
        await ledger.end_ruled_job(self.client, result)

    @staticmethod
    def ruled_unended(job: dict, *, running_too: bool) -> bool:
        """Whether a verdict on ``job`` was written but the job not ended: its Failed condition missing
        while it was queued, or (``running_too``) an MPIJob's launcher still running."""
        return ledger.ruled_while_queued(job) or (running_too and ledger.ruled_but_running(job))

    async def end_ruled(self, job: dict) -> None:
        """Finish ending a job ruled on (the ruling process stopped between its two writes)."""
        await ledger.end_ruled_job(self.client, job)

    def _absorb(self, job: dict, result: dict | None) -> None:
        meta = Meta(job)
        if result is not None and meta.namespace == self.watch.namespace:
            self.watch.absorb(ledger.resource_of(job), result, replaces=meta.resource_version)

    # --- the nodes ---

    @property
    def autoscaling(self) -> placement.Autoscaling:
        return self._autoscaling

    async def nodes(self) -> list[placement.NodeCapacity]:
        """The cluster's nodes as placement sees them, listed at most every NODES_TTL_SECONDS; empty
        when they cannot be read (no permission to list nodes: nothing is ruled on then)."""
        loop = asyncio.get_running_loop()
        if self._nodes_read_at is not None and loop.time() - self._nodes_read_at < NODES_TTL_SECONDS:
            return self._node_capacities
        # A thousand keepers starting at once share one LIST; one of them cancelled does not end it for
        # the rest (single_flight), as a lock held by the cancelled caller would.
        await self._nodes_reads.run("nodes", lambda: self._read_nodes(loop))
        return self._node_capacities

    async def _read_nodes(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            listing = await self.client.list(NODES, "")
            self._node_capacities = [placement.NodeCapacity.of(n) for n in listing.get("items") or []]
            self._autoscaling = await self._read_autoscaling()
        except KubeError as exc:
            if self._nodes_read_at is None:
                log.warning(
                    "cannot list the cluster's nodes (%s): pods larger than any node are not caught", exc
                )
            self._node_capacities = []
        self._nodes_read_at = loop.time()

    async def _read_autoscaling(self) -> placement.Autoscaling:
        """The nodes the cluster can add: the ``autoscaled_node_shapes`` option, else Karpenter's
        NodePools, else whether a cluster-autoscaler reports its status (then nothing is ruled)."""
        from airflow_jobs_plugin import (  # read when first needed, as the rest of the configuration is
            config,
        )

        try:
            shapes = placement.parse_node_shapes(config.get("autoscaled_node_shapes"))
        except placement.NodeShapesError as exc:
            log.error("%s; no job is ruled larger than any node until it is fixed", exc)
            return placement.Autoscaling(unbounded=str(exc))
        if shapes:
            return placement.Autoscaling(shapes=shapes)
        try:
            pools = (await self.client.list(NODEPOOLS, "")).get("items") or []
        except KubeError:
            pools = []  # no Karpenter (404), or no right to read its NodePools (403)
        if pools:
            bounded = [placement.nodepool_shape(pool) for pool in pools]
            if any(shape is None for shape in bounded):
                return placement.Autoscaling(unbounded="a Karpenter NodePool without a GPU limit")
            return placement.Autoscaling(shapes=tuple(shape for shape in bounded if shape is not None))
        try:
            status = await self.client.get_or_none(CONFIGMAPS, "kube-system", CLUSTER_AUTOSCALER_STATUS)
        except KubeError:
            status = None
        if status is not None:
            return placement.Autoscaling(
                unbounded="a cluster-autoscaler (kube-system/cluster-autoscaler-status)"
            )
        return placement.NO_AUTOSCALING
