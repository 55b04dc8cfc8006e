"""The admission controller in one namespace: every job of the product there, from its creation to its
end, judged from the cluster's state alone.

One :class:`NamespaceController` per managed namespace, built afresh each time the process becomes the
leader (controller/leader.py) and dropped when it stops being it, so nothing survives a change of
leader but what is on the cluster: the jobs, their annotations, the ledgers (Kueue's manager rebuilds
its queues the same way on start). It holds:

- one shared watch of the product's jobs and pods (cluster/watch.py), the one the triggers use too;
- the namespace's quota policies, read through a watch of its ConfigMaps (queueing/pools.py decides
  which pool judges which group), and one quota pool engine per policy (queueing/engines/pool.py), whose
  coalesced passes admit, requeue, preempt and rule;
- the unmanaged engine for the jobs no pool queues, which hands a job to Kueue where Kueue is to take it;
- one :class:`_Keeper` per live job: it asks the job's engine to admit it or say why it waits, rules on
  a released job whose pods cannot start (controller/rulings.py), finishes ending a job ruled on, gives
  back what a job held once it ended, and marks a finished MPIJob for deletion at the end of its TTL;
- the queue boards (queueing/board.py): what each job waits for, for the triggers and the page.

The keepers are the triggers' former admission duties, moved to the one identity that may act on them:
the triggers now only read (docs/quota.md, "Who admits").
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timezone
from typing import Any, TypeVar

from airflow_jobs_plugin.cluster.kube import CONFIGMAPS, EVENTS, PODS, KubeClient, KubeError, patiently
from airflow_jobs_plugin.cluster.objects import Meta, rfc3339
from airflow_jobs_plugin.cluster.resources import NAMESPACES
from airflow_jobs_plugin.cluster.watch import Scope, SharedWatch, job_key
from airflow_jobs_plugin.controller import rulings
from airflow_jobs_plugin.jobs import kinds, labels
from airflow_jobs_plugin.jobs.jobview import JobView
from airflow_jobs_plugin.lifecycle import QueueStatus, snapshot
from airflow_jobs_plugin.queueing import board as boards
from airflow_jobs_plugin.queueing import pools, quota
from airflow_jobs_plugin.queueing.engines.base import QueueEngine
from airflow_jobs_plugin.queueing.engines.pool import Admission
from airflow_jobs_plugin.queueing.engines.unmanaged import UnmanagedEngine
from airflow_jobs_plugin.queueing.quota import ledger

log = logging.getLogger(__name__)
T = TypeVar("T")

# A keeper looks at its job at least this often without a change (timers, a missed event).
RECHECK_SECONDS = 30.0
# A released job missing pods is looked at this often for the API server's refusal of them: in the
# refusal watches' cache, so a look costs no request (a refusal event also wakes its job's keeper).
REFUSAL_LOOK_SECONDS = 5.0
# Boards are written at most this often each: a burst of passes costs one write.
BOARD_FLUSH_SECONDS = 0.5
# The reasons of the events that say the API server refused a job's pods (lifecycle.refused_pods).
REFUSAL_REASONS = ("FailedCreate", "MPIJobFailed")
# The events that carry the registry's answer to a failed image pull: the kubelet records it on the
# pod with reason "Failed" (FailedToPullImage in kubernetes/kubernetes pkg/kubelet/events/event.go;
# its "BackOff" event names only the image). Followed by one watch per namespace, filtered by the API
# server (reason and involvedObject.kind are event fields it selects on: EventToSelectableFields in
# pkg/registry/core/event/strategy.go), instead of a LIST per stuck pod per look: kube-apiserver keeps
# no watch cache for events, so each such LIST was a range read of every event of the namespace.
PULL_FAILURE_FIELDS = "involvedObject.kind=Pod,reason=Failed"
_BY_SUBJECT = "involved-object"
_CONFIGMAP_SCOPE = Scope(job_labels=None, job_fields=None, pod_labels=None)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _status_entry(status: QueueStatus) -> boards.BoardEntry:
    return boards.BoardEntry(status.reason, status.position, status.message)


class _Boards:
    """The namespace's queue boards as this controller last decided them, written when they change."""

    def __init__(self, client: KubeClient, namespace: str, identity: str, configmaps: SharedWatch):
        self.client = client
        self.namespace = namespace
        self.identity = identity
        self.configmaps = configmaps
        self.entries: dict[str, dict[str, boards.BoardEntry]] = {"": {}}
        self.written: dict[str, dict[str, boards.BoardEntry]] = {}
        self._dirty: set[str] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"ajp-boards-{self.namespace}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def unit(self, unit: str, statuses: Mapping[str, QueueStatus]) -> None:
        """A pass's statuses of every job of ``unit`` (a group or a cohort): its board, whole."""
        entries = {uid: _status_entry(status) for uid, status in statuses.items()}
        if self.entries.get(unit) != entries:
            self.entries[unit] = entries
            self._mark(unit)

    def post(self, uid: str, status: QueueStatus | None) -> None:
        """One job's status on the namespace's board (``None``: off it)."""
        own = self.entries[""]
        if status is None:
            if own.pop(uid, None) is not None:
                self._mark("")
            return
        entry = _status_entry(status)
        if own.get(uid) != entry:
            own[uid] = entry
            self._mark("")

    def forget(self, uid: str) -> None:
        """A job that ended or went: off every board."""
        for unit, entries in self.entries.items():
            if entries.pop(uid, None) is not None:
                self._mark(unit)

    def _mark(self, unit: str) -> None:
        self._dirty.add(unit)
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            dirty, self._dirty = self._dirty, set()
            for unit in sorted(dirty):
                try:
                    await self._write(unit)
                except KubeError as exc:
                    log.warning(
                        "cannot write the queue board of %s/%s (%s); retrying", self.namespace, unit, exc
                    )
                    self._dirty.add(unit)
                    self._wake.set()
            await asyncio.sleep(BOARD_FLUSH_SECONDS)

    async def _write(self, unit: str) -> None:
        entries = dict(self.entries.get(unit) or {})
        if self.written.get(unit) == entries:
            return
        body = boards.configmap(boards.Board(unit, _now(), self.identity, entries), self.namespace)
        name = boards.board_name(unit)
        current = self.configmaps.get(CONFIGMAPS, name)
        for _ in range(3):
            try:
                if current is None:
                    await self.client.create(CONFIGMAPS, self.namespace, body)
                else:
                    body["metadata"]["resourceVersion"] = Meta(current).resource_version
                    await self.client.replace(CONFIGMAPS, self.namespace, body)
                self.written[unit] = entries
                return
            except KubeError as exc:
                if not (exc.conflict or exc.already_exists or exc.not_found):
                    raise
                # The leader is the boards' one writer: a conflict is a board written before this
                # leadership (or the cache lagging it); read it and write over it.
                current = await self.client.get_or_none(CONFIGMAPS, self.namespace, name)
        raise KubeError(409, "Conflict", f"the queue board {name} kept changing under its writer")


class NamespaceController:
    """The admission controller of one namespace while this process leads."""

    def __init__(self, client: KubeClient, namespace: str, identity: str):
        self.client = client
        self.namespace = namespace
        self.identity = identity
        self.watch = SharedWatch(client, namespace)
        self.configmaps = SharedWatch(client, namespace, resources=(CONFIGMAPS,), scope=_CONFIGMAP_SCOPE)
        self.refusals = [
            SharedWatch(
                client,
                namespace,
                resources=(EVENTS,),
                scope=Scope(job_labels=None, job_fields=f"reason={reason}", pod_labels=None),
            )
            for reason in REFUSAL_REASONS
        ]
        self.pull_failures = SharedWatch(
            client,
            namespace,
            resources=(EVENTS,),
            scope=Scope(job_labels=None, job_fields=PULL_FAILURE_FIELDS, pod_labels=None),
        )
        # A stuck pod's pull events are read by its name, never by a scan of the namespace's.
        self.pull_failures.add_index(_BY_SUBJECT, lambda _plural, event: rulings.event_subject(event)[1])
        self.boards = _Boards(client, namespace, identity, self.configmaps)
        self.pools = pools.index(namespace, ())
        self._parsed: dict[str, tuple[str, pools.PolicyDoc]] = {}  # name -> (resourceVersion, doc)
        self._keepers: dict[str, asyncio.Task] = {}
        self._admissions: dict[str, Admission] = {}
        self._unmanaged: UnmanagedEngine | None = None
        self._policies_changed = asyncio.Event()
        self.ready = asyncio.Event()

    # --- life ---

    async def run(self) -> None:
        """Run until cancelled (the process stops, or stops being the leader)."""
        self.configmaps.add_listener(self._on_configmap)
        self.watch.add_listener(self._on_job_event)
        for watch in self.event_watches:
            watch.add_listener(self._on_event_about)
        for watch in (self.watch, self.configmaps, *self.event_watches):
            watch.start()
        try:
            await self.configmaps.wait_synced(timeout=None)
            await self._read_policies()
            await self.watch.wait_synced(timeout=None)
            self.boards.start()
            self.ready.set()
            for resource in kinds.RESOURCES:
                for job in self.watch.jobs(resource):
                    self._keep(job)
            self._pass_every_group()
            log.info(
                "admission controller: following namespace %s (%d jobs)", self.namespace, len(self._keepers)
            )
            while True:
                await self._policies_changed.wait()
                self._policies_changed.clear()
                await self._read_policies()
                # Every waiting job may now be another pool's: its keeper routes it again.
                for key in list(self._keepers):
                    self.watch.notify(key)
        finally:
            await self._close()

    async def _close(self) -> None:
        keepers = list(self._keepers.values())
        for task in keepers:
            task.cancel()
        if keepers:
            await asyncio.wait(keepers, timeout=5)
        self._keepers.clear()
        await self.boards.stop()
        for admission in self._admissions.values():
            await admission.close()
        if self._unmanaged is not None:
            await self._unmanaged.close()
        for watch in (self.watch, self.configmaps, *self.event_watches):
            await watch.stop()

    def _pass_every_group(self) -> None:
        """One admission pass of every group now. A job that ended while no controller led (its leader
        killed between the job's end and its release) gets no keeper, since nothing is left to do for a
        finished job, and no event of it will come: its reservation would stay in the ledger until a
        pass of its group, and a group none of whose jobs wait has none. A pass reconciles the ledger
        with the jobs, dropping what ended."""
        for doc in self.pools.docs:
            if doc.policy is None:
                continue
            for group in doc.policy.groups:
                engine = self.engine(pools.route(self.pools, group))
                if isinstance(engine, Admission):
                    engine.start_group(group)

    # --- routing ---

    def route(self, job: Mapping[str, object]) -> pools.Route:
        return pools.route(self.pools, JobView(job).group)

    def engine(self, route: pools.Route) -> QueueEngine:
        """The engine of a routed job: its pool's, or the unmanaged one (which leaves a job Kueue takes
        to Kueue)."""
        if route.way is pools.Way.POOL and route.policy is not None:
            admission = self._admissions.get(route.policy)
            if admission is None:
                admission = Admission.for_watch(
                    self.watch, quota_configmap=route.policy, quota_namespace=self.namespace
                )
                admission.board_sink = self.boards.unit
                self._admissions[route.policy] = admission
            return admission
        if self._unmanaged is None:
            self._unmanaged = UnmanagedEngine.for_watch(self.watch)
        return self._unmanaged

    @property
    def event_watches(self) -> tuple[SharedWatch, ...]:
        """The namespace's event watches: a constant number, whatever the number of jobs."""
        return (*self.refusals, self.pull_failures)

    def pull_events(self, pod_names: list[str]) -> list[dict] | None:
        """The pull-failure events of these pods, from the watch's cache; ``None`` until it has listed
        them once (a transient answer not yet seen must not let a job be ruled)."""
        if not self.pull_failures.synced:
            return None
        return [e for pod in pod_names for e in self.pull_failures.by_index(_BY_SUBJECT, pod)]

    def refusal_events(self) -> list[dict]:
        found: list[dict] = []
        for watch in self.refusals:
            found.extend(watch.jobs(EVENTS))
        return found

    async def _read_policies(self) -> None:
        docs: list[pools.PolicyDoc] = []
        for configmap in self.configmaps.jobs(CONFIGMAPS):
            meta = Meta(configmap)
            if not pools.is_policy(meta.name, meta.labels):
                continue
            cached = self._parsed.get(meta.name)
            if cached is not None and cached[0] == meta.resource_version:
                docs.append(cached[1])
                continue
            try:
                # In a thread: a policy near its size limit takes seconds to parse (quota.parse).
                policy = await asyncio.to_thread(quota.policy_from_configmap_data, configmap.get("data"))
                doc = pools.PolicyDoc(meta.name, policy)
            except quota.PolicyError as exc:
                doc = pools.PolicyDoc(meta.name, None, str(exc))
                log.error("the quota policy ConfigMap %s/%s is invalid: %s", self.namespace, meta.name, exc)
            self._parsed[meta.name] = (meta.resource_version or "", doc)
            docs.append(doc)
        self.pools = pools.index(self.namespace, docs)
        for group, names in self.pools.clashes.items():
            log.error("quota group %s is named by several policies of %s: %s", group, self.namespace, names)

    def _on_configmap(self, etype: str, plural: str, obj: dict) -> None:
        meta = Meta(obj)
        if pools.is_policy(meta.name, meta.labels) or meta.name in self._parsed:
            self._policies_changed.set()

    # --- keepers ---

    def _on_event_about(self, etype: str, plural: str, event: dict) -> None:
        """An event the keepers rule on arrived: wake the keeper of the job it is about (of the job
        itself, of an MPIJob's launcher Job, of one of its pods), which looks in the cache at once."""
        if etype == "DELETED":
            return
        kind, name = rulings.event_subject(event)
        for resource in (*kinds.RESOURCES, PODS):
            if resource.kind == kind and name:
                subject = self.watch.get(resource, name)
                key = job_key(subject) if subject is not None else None
                if key:
                    self.watch.notify(key)

    def _on_job_event(self, etype: str, plural: str, obj: dict) -> None:
        if etype != "DELETED" and kinds.is_job_resource(plural):
            self._keep(obj)

    def _keep(self, job: Mapping[str, object]) -> None:
        """Start keeping ``job`` unless it is kept already or needs nothing more. Not before the
        namespace's policies are read: a job routed on no policy would be let go without quota."""
        name = Meta(job).name
        if not self.ready.is_set() or not name or name in self._keepers or not needs_keeping(job):
            return
        task = asyncio.create_task(_Keeper(self, name).run(), name=f"ajp-keep-{self.namespace}-{name}")
        self._keepers[name] = task
        task.add_done_callback(functools.partial(self._kept, name))

    def _kept(self, name: str, task: asyncio.Task) -> None:
        if self._keepers.get(name) is task:
            del self._keepers[name]
        if not task.cancelled() and task.exception() is not None:
            log.error("keeping job %s/%s failed", self.namespace, name, exc_info=task.exception())
            # The next event of the job starts a new keeper; one comes at least with the next resync.


def needs_keeping(job: Mapping[str, object]) -> bool:
    """Whether the controller still has something to do for ``job``: anything not finished, and a
    job ruled on but not yet ended, and a finished MPIJob not yet marked for deletion."""
    view = JobView(job)
    if not view.finished or ledger.ruled_while_queued(job) or ledger.ruled_but_running(job):
        return True
    return kinds.kind_of(job).outlives_its_ttl and labels.DELETE_AFTER not in view.annotations


class _Keeper:
    """One job, from its creation to its end: the controller's loop for it."""

    def __init__(self, controller: NamespaceController, name: str):
        self.c = controller
        self.name = name
        self.last: dict | None = None
        self.ended_version: str | None = None
        self.ruled_version: str | None = None

    async def run(self) -> None:
        watch = self.c.watch
        sub = watch.subscribe(self.name)
        try:
            while True:
                sub.clear()
                job = self._current()
                if job is None:
                    await self._gone()
                    return
                self.last = job
                wait = await self._step(job)
                if wait is None:
                    return
                await sub.wait(timeout=wait)
        finally:
            watch.unsubscribe(sub)

    def _current(self) -> dict | None:
        for resource in kinds.RESOURCES:
            job = self.c.watch.get(resource, self.name)
            if job is not None:
                return job
        return None

    async def _patiently(self, call: Callable[..., Awaitable[T]], *args: Any) -> T:
        return await patiently(call, *args, log=log)

    async def _gone(self) -> None:
        """Deleted: what it held goes back (a pool's reservation waits for its pods to go)."""
        if self.last is None:
            return
        route = self.c.route(self.last)
        if route.way is not pools.Way.HOLD:
            await self._patiently(self.c.engine(route).release, self.last)
        self.c.boards.forget(JobView(self.last).uid)

    async def _step(self, job: dict) -> float | None:
        view = JobView(job)
        route = self.c.route(job)
        engine = None if route.way is pools.Way.HOLD else self.c.engine(route)
        # The verdict writes are every engine's (engines/door.py): a held job's go through the unmanaged one.
        ender = engine or self.c.engine(pools.Route(pools.Way.LET_GO))
        if view.finished:
            if ender.ruled_unended(job, running_too=True):
                # Ruled by a process that stopped between its writes: end it, and look until it ended.
                await self._end_if_ruled(job, ender)
                return RECHECK_SECONDS
            await self._ended(job, engine)
            return None
        if view.deleting:
            return RECHECK_SECONDS
        if view.suspended and view.verdict is None:
            return await self._queued(job, route, engine)
        self.c.boards.post(view.uid, None)
        if view.verdict is not None:
            await self._end_if_ruled(job, ender)
            return ender.wake_after(job, RECHECK_SECONDS)
        return await self._released(job, ender)

    async def _queued(self, job: dict, route: pools.Route, engine: QueueEngine | None) -> float:
        uid = JobView(job).uid
        if engine is None:
            self.c.boards.post(uid, QueueStatus(reason="Inadmissible", message=route.message))
            return RECHECK_SECONDS
        status = await self._patiently(engine.ensure, job)
        if route.way is not pools.Way.POOL:
            self.c.boards.post(uid, status)
        else:
            self.c.boards.post(uid, None)  # on its unit's board, from the pool's passes
        return engine.wake_after(job, RECHECK_SECONDS)

    async def _released(self, job: dict, engine: QueueEngine) -> float:
        pods = self.c.watch.pods_of(self.name)
        snap = snapshot(job, pods, now=_now())
        wait = engine.wake_after(job, RECHECK_SECONDS)
        look = rulings.look(job, snap)
        ruling: rulings.Ruling | None = None
        if look is rulings.Look.RULE:
            ruling = rulings.ruling_of(snap)
        elif look is rulings.Look.PULL_EVENTS:
            events = self.c.pull_events([Meta(p).name for p in pods])
            if events is None:
                wait = min(wait, REFUSAL_LOOK_SECONDS)  # the pull events' watch has not listed yet
            else:
                ruling = rulings.ruling_of(snapshot(job, pods, events, now=_now()), events)
        elif look is rulings.Look.REFUSALS:
            ruling = rulings.refusal_ruling(job, self.c.refusal_events())
            wait = min(wait, REFUSAL_LOOK_SECONDS)
        version = Meta(job).resource_version
        if ruling is not None and version != self.ruled_version:
            self.ruled_version = version
            log.warning(
                "%s %s/%s cannot start (%s): failing it: %s",
                kinds.kind_of(job).resource.kind,
                self.c.namespace,
                self.name,
                ruling.reason,
                ruling.message,
            )
            await self._patiently(engine.fail, job, ruling.reason, ruling.message)
        return wait

    async def _end_if_ruled(self, job: dict, engine: QueueEngine) -> None:
        """Finish ending a job ruled on whose ruling process stopped between its writes (once a version)."""
        version = Meta(job).resource_version
        if engine.ruled_unended(job, running_too=True) and version != self.ended_version:
            self.ended_version = version
            await self._patiently(engine.end_ruled, job)

    async def _ended(self, job: dict, engine: QueueEngine | None) -> None:
        view = JobView(job)
        if engine is not None:
            await self._patiently(engine.release, job)
        self.c.boards.forget(view.uid)
        pods = self.c.watch.pods_of(self.name)
        expiry = rulings.expiry(job, snapshot(job, pods, now=_now()))
        if expiry is None:
            return
        try:
            await self._patiently(
                self.c.client.merge_patch,
                kinds.kind_of(job).resource,
                self.c.namespace,
                self.name,
                {"metadata": {"annotations": {labels.DELETE_AFTER: rfc3339(expiry)}}},
            )
        except KubeError as exc:
            if not (exc.not_found or exc.conflict):
                raise


class ClusterController:
    """The admission controller over its namespaces while this process leads: the ones it was given, or
    every namespace matching a label selector (found by a watch of the cluster's Namespaces, so a team's
    namespace labelled for the product is admitted in as soon as it is created)."""

    def __init__(
        self,
        client: KubeClient,
        identity: str,
        *,
        namespaces: tuple[str, ...] = (),
        selector: str | None = None,
    ):
        self.client = client
        self.identity = identity
        self.namespaces = namespaces
        self.selector = selector
        self.controllers: dict[str, NamespaceController] = {}
        self._tasks: dict[str, asyncio.Task] = {}
        self._changed = asyncio.Event()

    async def run(self) -> None:
        try:
            if self.namespaces:
                for namespace in self.namespaces:
                    self._start(namespace)
                await asyncio.gather(*self._tasks.values())
                return
            found = SharedWatch(
                self.client,
                "",
                resources=(NAMESPACES,),
                scope=Scope(job_labels=self.selector or None, job_fields=None, pod_labels=None),
            )
            found.add_listener(lambda *_: self._changed.set())
            found.start()
            try:
                await found.wait_synced(timeout=None)
                while True:
                    live = {
                        Meta(ns).name
                        for ns in found.jobs(NAMESPACES)
                        if not Meta(ns).deleting and Meta(ns).name
                    }
                    for namespace in sorted(live - set(self._tasks)):
                        self._start(namespace)
                    for namespace in sorted(set(self._tasks) - live):
                        await self._stop(namespace)
                    self._changed.clear()
                    await self._changed.wait()
            finally:
                await found.stop()
        finally:
            for namespace in list(self._tasks):
                await self._stop(namespace)

    def _start(self, namespace: str) -> None:
        # Each namespace's watches (its jobs and pods, its ConfigMaps, the refusal events: about six
        # requests held open) on a connection pool of its own: on one shared pool (100 connections,
        # kubernetes_asyncio v36.1.0 client/configuration.py) some fifteen namespaces would hold every
        # connection, and the next namespace's list, every write and every admission would wait for ever.
        client = self.client.sibling() if not self.namespaces or len(self.namespaces) > 1 else self.client
        controller = NamespaceController(client, namespace, self.identity)
        self.controllers[namespace] = controller
        self._tasks[namespace] = asyncio.create_task(
            self._run(controller, client), name=f"ajp-controller-{namespace}"
        )

    async def _run(self, controller: NamespaceController, client: KubeClient) -> None:
        try:
            await controller.run()
        finally:
            if client is not self.client:
                await client.close()

    async def _stop(self, namespace: str) -> None:
        task = self._tasks.pop(namespace, None)
        self.controllers.pop(namespace, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def ready(self, namespace: str, timeout: float) -> bool:
        """Wait until ``namespace`` is followed (its jobs listed and kept); False after ``timeout``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            controller = self.controllers.get(namespace)
            if controller is not None and controller.ready.is_set():
                return True
            await asyncio.sleep(0.05)
        return False
