"""The Kueue engine: a job Kueue admits is Kueue's; the product only says what Kueue says of it.

Kueue suspends and unsuspends the jobs it manages, so the product never does (see ``queueing/kueue.py``: never
fight): this engine reads the job's Workload (one watch of Kueue's Workloads per namespace and process)
and reports its queue status, its position from Kueue's visibility API (one read per LocalQueue and a
few seconds, shared by every trigger of the process), and fails the job with the product's verdict
only when Kueue deactivated its Workload for good. A job that names no LocalQueue is Kueue's too when
Kueue manages every job (its configuration says so, or it made a Workload for the job): unsuspending it
would only make Kueue suspend it again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime, timezone

from airflow_jobs_plugin.cluster.kube import (
    LOCAL_QUEUES,
    PENDING_IN_LOCAL_QUEUES,
    WORKLOADS,
    KubeClient,
    KubeError,
)
from airflow_jobs_plugin.cluster.objects import Meta
from airflow_jobs_plugin.cluster.single_flight import SingleFlight
from airflow_jobs_plugin.cluster.watch import Scope, SharedWatch
from airflow_jobs_plugin.jobs import kinds
from airflow_jobs_plugin.jobs.jobview import JobView
from airflow_jobs_plugin.lifecycle import QueueStatus, Reason
from airflow_jobs_plugin.queueing import kueue, kueue_cluster
from airflow_jobs_plugin.queueing.engines.door import (
    ENSURE_WAIT_SECONDS,
    Door,
    ThroughTheDoor,
    detached,
    spawn,
)
from airflow_jobs_plugin.queueing.engines.ruling import wake_after

log = logging.getLogger(__name__)

# Kueue's visibility API is read once per LocalQueue per this many seconds for every trigger of the
# process; where it is not served (or not granted) it is asked again only after the longer pause.
POSITIONS_TTL_SECONDS = 5.0
POSITIONS_UNSERVED_SECONDS = 300.0
# A Workload change may move every job behind it: the positions of the queues this process follows
# are read again this long after a burst of changes, and the triggers whose position moved look again.
POSITIONS_SETTLE_SECONDS = 1.0
POSITIONS_FORGET_SECONDS = 600.0  # a queue no trigger asked about for this long is no longer re-read
# How long a LocalQueue read to judge a hand-over is trusted (a queue a platform admin just created or
# activated is seen within this long).
LOCAL_QUEUE_TTL_SECONDS = 5.0

# Whether Kueue's Workloads are served, by client and namespace: one probe in flight for every source
# asking (the sources of one namespace's engines, and the triggers that start them together).
_PROBES: SingleFlight[bool] = SingleFlight("kueue-served")


def _owner_name(obj: dict) -> str | None:
    """The name of the job that controls a Workload."""
    for ref in Meta(obj).owner_references:
        if ref.get("controller") and ref.get("name"):
            return str(ref["name"])
    return None


class _WorkloadSource:
    """Kueue's Workloads of one namespace through a watch of their own. A Workload's change wakes the
    trigger of its job (the job itself does not change while Kueue decides)."""

    def __init__(self, client: KubeClient, namespace: str, wake: Callable[[str], None]):
        self.client = client
        self.namespace = namespace
        self.watch = SharedWatch(
            client,
            namespace,
            resources=(WORKLOADS,),
            scope=Scope(job_labels=None, job_fields=None, pod_labels=None),
        )
        self.watch.add_listener(self._on_event)
        self._wake = wake
        self.served: bool | None = None  # whether the cluster serves Kueue's API at all
        # Workload name by its job's uid (Kueue's job-uid label), kept by the watch's events: a look of
        # one trigger reads its own Workload, never a scan of the namespace's.
        self._by_job: dict[str, str] = {}
        # LocalQueue -> (until when it holds, positions by Workload name or None: unknown).
        self._positions: dict[str, tuple[float, dict[str, kueue.PendingPosition] | None]] = {}
        self._asking: dict[str, asyncio.Future] = {}
        self._asked_at: dict[str, float] = {}
        self._said_unserved = False
        self._refresh: asyncio.TimerHandle | None = None
        self._refreshing: asyncio.Future | None = None

    async def start(self) -> bool:
        """Whether Kueue's API is served here (then the Workload watch runs). Every trigger of a
        restarted triggerer asks at once: they share one probe (single_flight), and its answer holds."""
        if self.served is None:
            self.served = await _PROBES.run((id(self.client), self.namespace), self._probe)
        if self.served:
            self.watch.start()
        return self.served

    async def _probe(self) -> bool:
        try:
            await self.client.list(WORKLOADS, self.namespace, label_selector=f"{kueue.JOB_UID_LABEL}=none")
        except KubeError as exc:
            if not exc.not_found:
                raise  # not an answer (a 403, a 500): the next caller probes again
            return False
        return True

    async def stop(self) -> None:
        if self._refresh is not None:
            self._refresh.cancel()
        if self._refreshing is not None:
            self._refreshing.cancel()
        await self.watch.stop()

    def of(self, job: dict) -> dict | None:
        name = self._by_job.get(JobView(job).uid)
        return self.watch.get(WORKLOADS, name) if name else None

    async def positions(self, queue: str) -> dict[str, kueue.PendingPosition] | None:
        """The positions of LocalQueue ``queue``'s pending Workloads, by Workload name, from Kueue's
        visibility API: one read per queue per ``POSITIONS_TTL_SECONDS`` shared by every trigger of the
        process (the triggers of one queue ask together); ``None`` where it did not say."""
        loop = asyncio.get_running_loop()
        self._asked_at[queue] = loop.time()
        cached = self._positions.get(queue)
        if cached is not None and cached[0] > loop.time():
            return cached[1]
        asking = self._asking.get(queue)
        if asking is None:
            asking = spawn(self._read_positions(queue), f"ajp-kueue-positions-{queue}")
            self._asking[queue] = asking
            asking.add_done_callback(self._asked(queue))
        return await asyncio.shield(asking)

    def _asked(self, queue: str) -> Callable[[asyncio.Future], None]:
        def forget(_done: asyncio.Future) -> None:
            self._asking.pop(queue, None)

        return forget

    async def _read_positions(self, queue: str) -> dict[str, kueue.PendingPosition] | None:
        loop = asyncio.get_running_loop()
        try:
            summary = await self.client.get_subresource(
                PENDING_IN_LOCAL_QUEUES, self.namespace, queue, "pendingworkloads"
            )
        except KubeError as exc:
            # 404: no visibility server (or no such LocalQueue, which the job's state already says);
            # 403: not granted. Neither changes soon; anything else may be gone on the next look.
            lasting = exc.not_found or exc.status == 403
            if lasting and not self._said_unserved:
                self._said_unserved = True
                log.info(
                    "Kueue's visibility API gave no positions for LocalQueue %s/%s (%s): queued Kueue jobs "
                    "show no position",
                    self.namespace,
                    queue,
                    exc.message,
                )
            pause = POSITIONS_UNSERVED_SECONDS if lasting else POSITIONS_TTL_SECONDS
            self._positions[queue] = (loop.time() + pause, None)
            return None
        found = kueue.pending_positions(summary)
        self._positions[queue] = (loop.time() + POSITIONS_TTL_SECONDS, found)
        return found

    def _on_event(self, etype: str, plural: str, obj: dict) -> None:
        meta = Meta(obj)
        uid = meta.labels.get(kueue.JOB_UID_LABEL)
        if uid and etype == "DELETED":
            self._by_job.pop(uid, None)
        elif uid:
            self._by_job[uid] = meta.name
        owner = _owner_name(obj)
        if owner:
            self._wake(owner)
        self._refresh_positions_soon()

    def _refresh_positions_soon(self) -> None:
        if not self._asked_at or self._refresh is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._refresh = loop.call_later(POSITIONS_SETTLE_SECONDS, self._start_refresh, context=detached())

    def _start_refresh(self) -> None:
        self._refresh = None
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.ensure_future(self._refresh_positions())

    async def _refresh_positions(self) -> None:
        """Read again the positions of the queues triggers follow; wake those whose position moved."""
        now = asyncio.get_running_loop().time()
        for queue, asked in list(self._asked_at.items()):
            if now - asked > POSITIONS_FORGET_SECONDS:
                self._asked_at.pop(queue, None)
                self._positions.pop(queue, None)
                continue
            until, before = self._positions.get(queue, (0.0, None))
            if before is None and until > now:
                continue  # not served, not granted or failed: its pause holds
            self._positions.pop(queue, None)
            after = await self.positions(queue)
            self._asked_at[queue] = asked  # a refresh is not a trigger asking
            for name, place in (after or {}).items():
                if (before or {}).get(name) != place:
                    owner = _owner_name(self.watch.get(WORKLOADS, name) or {})
                    if owner:
                        self._wake(owner)


class KueueEngine(ThroughTheDoor):
    """The queue of the jobs Kueue admits, for the jobs of one shared watch."""

    direct = True  # ``ensure``'s None: the job left this engine's queue by Kueue's hand or a ruling

    def __init__(self, watch: SharedWatch, door: Door):
        self.watch = watch
        self.client: KubeClient = watch.client
        self.door = door
        self._workloads: _WorkloadSource | None = None
        self._local_queues: dict[str, tuple[float, str | None]] = {}  # name -> (until, problem)
        self._queue_reads: SingleFlight[str | None] = SingleFlight("kueue-local-queue")

    def manages(self, job: dict) -> bool:
        """Whether ``job`` names a LocalQueue of Kueue's (then Kueue admits it, not the product)."""
        return kueue.manages(job)

    async def ensure(self, job: dict) -> QueueStatus | None:
        """What Kueue says of a suspended job (``None`` once it is ruled, and for a job ruled already)."""
        if JobView(job).verdict:
            return None
        return await self._status(job, rule=True)

    async def observe(self, job: dict) -> QueueStatus | None:
        """What Kueue says of a suspended job, read only: a Workload Kueue deactivated for good is
        reported as such (the admission controller rules on it), never ruled here."""
        if JobView(job).verdict:
            return None
        return await self._status(job, rule=False)

    async def queue_problem(self, queue: str) -> str | None:
        """Why a job may not be handed to LocalQueue ``queue`` of this namespace now (``None``: it may),
        read at most every LOCAL_QUEUE_TTL_SECONDS per queue (kueue.local_queue_problem)."""
        cached = self._local_queues.get(queue)
        if cached is not None and cached[0] > asyncio.get_running_loop().time():
            return cached[1]
        # The keepers of a queue's jobs ask together as the controller starts: one read for all.
        return await self._queue_reads.run(queue, lambda: self._read_queue_problem(queue))

    async def _read_queue_problem(self, queue: str) -> str | None:
        loop = asyncio.get_running_loop()
        namespace = self.watch.namespace
        try:
            found = await self.client.get_or_none(LOCAL_QUEUES, namespace, queue)
            problem = kueue.local_queue_problem(found, queue, namespace)
        except KubeError as exc:
            if not exc.not_found:
                raise
            # 404 on the resource itself: no Kueue API is served.
            problem = (
                f"the job is for Kueue LocalQueue {queue!r}, but the cluster serves no Kueue API "
                f"{kueue.GROUP}/{kueue.VERSION}: it stays in the product's queue, charged to no one"
            )
        self._local_queues[queue] = (loop.time() + LOCAL_QUEUE_TTL_SECONDS, problem)
        return problem

    def wake_after(self, job: dict, default: float) -> float:
        return wake_after(job, default, datetime.now(timezone.utc))

    async def release(self, job: dict) -> None:
        """Nothing to give back: Kueue's ClusterQueue holds the quota of the jobs it admits."""

    def reserved_gpus(self, uid: str) -> int | None:
        return None

    async def close(self) -> None:
        """Stop the Workload watch (bounded, as the pool's own watches are); a later look starts it again."""
        if self._workloads is not None:
            await asyncio.wait([asyncio.ensure_future(self._workloads.watch.stop())], timeout=5)
            self._workloads = None

    def _workload_source(self) -> _WorkloadSource:
        if self._workloads is None:
            # A Workload's change wakes the triggers of its job (the job does not change while Kueue decides).
            self._workloads = _WorkloadSource(self.client, self.watch.namespace, self.watch.notify)
        return self._workloads

    async def takes(self, job: dict) -> bool:
        """Whether Kueue manages ``job`` though it names no LocalQueue: its configuration says so, or
        it made a Workload for it (the shared Workload watch first, then the API server)."""
        if kueue.queue_name(job):
            return False
        if await kueue_cluster.configured_to_take(self.client, job):
            return True
        return await self._workload_taking(job) is not None

    async def _workload_taking(self, job: dict) -> dict | None:
        """The Workload of a job that names no LocalQueue -- Kueue took it anyway (manageJobsWithout-
        QueueName) -- or ``None``: none yet, or no Kueue here. The shared Workload watch answers first,
        then the API server, by the job's uid label."""
        source = self._workload_source()
        if not await source.start():
            return None
        await source.watch.wait_synced(timeout=ENSURE_WAIT_SECONDS)
        return source.of(job) or await kueue_cluster.workload_of(self.client, job)

    async def _status(self, job: dict, *, rule: bool) -> QueueStatus | None:
        source = self._workload_source()
        if not await source.start():
            missing = kueue.no_api_status(job)
            return QueueStatus(reason=missing.reason, message=missing.message)
        await source.watch.wait_synced(timeout=ENSURE_WAIT_SECONDS)
        workload = source.of(job)
        if workload is None and not kueue.queue_name(job):
            workload = await self._workload_taking(job)
        ended = kueue.deactivation(workload)
        if ended is not None:
            if not rule:
                return QueueStatus(reason=kueue.INADMISSIBLE, message=f"{ended}; the job is failed for it")
            # Kueue will never admit it: the task ends now instead of waiting for ever. The verdict is
            # written alone; the job's suspend stays Kueue's (see kueue.py).
            await self.door.rule_kueue_job(job, Reason.DEACTIVATED.value, ended)
            return None
        if not kueue.queue_name(job):
            status = kueue.manages_every_job_status(workload)
            return QueueStatus(reason=status.reason, message=status.message)
        if kueue.ignores_gate(job, workload):
            log.warning(
                "%s %s: Kueue took it without the quota pool's admission gate (%s): it does not honour "
                "admission gates (Kueue before %s, or its AdmissionGatedBy feature off), so per-user "
                "limits cannot stand in front of it for jobs it takes at creation",
                kinds.kind_of(job).resource.kind,
                JobView(job).name,
                kueue.ADMISSION_GATE_ANNOTATION,
                kueue.MIN_GATED_VERSION,
            )
        status = kueue.queue_status(job, workload)
        if workload is not None and kueue.waits_in_queue(status):
            view = kueue.workload_view(workload)
            positions = await source.positions(view.queue)
            status = kueue.with_position(status, (positions or {}).get(view.name), view.queue)
        return QueueStatus(
            reason=status.reason,
            position=status.position,
            message=status.message,
            evicted_for=status.evicted_for,
        )
