"""One shared watch per process and namespace: the triggerer's eyes on the cluster.

The triggerer runs up to a thousand triggers on one event loop. Polling per trigger would cost one
request per job per interval; instead every trigger in the process subscribes to a single informer that
lists and then watches the product's Jobs, MPIJobs and pods in a namespace (by the managed-by label),
keeps them in memory (only the fields the product reads: :mod:`~airflow_jobs_plugin.cluster.watch_transform`)
and wakes the subscribers of the job an event touched. At steady state that is a
handful of long-lived watch requests per namespace, whatever the number of jobs.

A watch that breaks is resumed from the last resourceVersion; a 410 Expired re-lists; API errors back
off exponentially. Expired credentials are the client's business (:class:`~airflow_jobs_plugin.cluster.kube.
Credentials` renews them ahead of time and after a 401); when the API server keeps refusing them the watch
logs the refusal, which names the connection, and keeps trying with the same back-off, so it resumes by
itself once the connection's credentials are accepted again. Nothing here blocks the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from airflow_jobs_plugin import metrics
from airflow_jobs_plugin.cluster import resource_version
from airflow_jobs_plugin.cluster.kube import DEFAULT_CONN_ID, PODS, KubeClient, KubeError, Resource
from airflow_jobs_plugin.cluster.objects import Meta
from airflow_jobs_plugin.cluster.waiting import wait_event
from airflow_jobs_plugin.cluster.watch_transform import Sharing, trim
from airflow_jobs_plugin.jobs import kinds, labels

# job_key is the kinds' rule (which job an object belongs to), re-exported for the watch's users.
from airflow_jobs_plugin.jobs.kinds import job_key as job_key

log = logging.getLogger(__name__)

MANAGED_SELECTOR = labels.MANAGED_SELECTOR
# Every kind's resource, then the pods.
WATCHED: tuple[Resource, ...] = (*kinds.RESOURCES, PODS)


@dataclass(frozen=True)
class Scope:
    """Which objects a shared watch follows. The product's own jobs and pods share one scope per
    namespace; a sensor waiting for a job submitted by something else gets a scope of its own."""

    job_labels: str | None = MANAGED_SELECTOR
    job_fields: str | None = None
    pod_labels: str | None = MANAGED_SELECTOR

    def selectors(self, resource: Resource) -> tuple[str | None, str | None]:
        if resource is PODS:
            return self.pod_labels, None
        return self.job_labels, self.job_fields

    @classmethod
    def for_job(cls, name: str, kind: str = kinds.DEFAULT_KIND.name) -> Scope:
        """Exactly one job, whoever created it, and the pods its controller made: a Job's pods carry
        the Job controller's job-name label, an MPIJob's launcher and workers the kubeflow label."""
        pod_key = kinds.for_name(kind).pod_job_label
        return cls(job_labels=None, job_fields=f"metadata.name={name}", pod_labels=f"{pod_key}={name}")

    @classmethod
    def for_labels(cls, selector: str) -> Scope:
        """Jobs matching a label selector; their pods are expected to carry the same labels."""
        return cls(job_labels=selector, job_fields=None, pod_labels=selector)


PRODUCT = Scope()


class Subscription:
    """A waiter for changes to one job (its object or any of its pods).

    Every trigger holds one and waits on it most of its life, so it is a flag and, while waited on, a
    future and a timer: an ``asyncio.Event`` waited on with ``asyncio.wait_for`` costs each trigger a
    second task, its coroutines and the event's waiter deque (about 2 KB, docs/benchmarks.md). The wait
    itself is that future, not a coroutine awaiting it, whose frame each waiting trigger would hold
    (272 bytes). Compared by identity.

    The flag says the job changed since the subscriber last read the cache: the subscriber clears it
    (:meth:`clear`) as it starts reading, so a change notified while it reads wakes its next wait."""

    __slots__ = ("key", "_changed", "_waiter", "_timer", "_gone")

    def __init__(self, key: str):
        self.key = key
        self._changed = False
        self._waiter: asyncio.Future[bool] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._gone: tuple[str, dict] | None = None

    def __repr__(self) -> str:
        return f"Subscription(key={self.key!r}, changed={self._changed})"

    def notify(self) -> None:
        self._changed = True
        self._settle(True)

    def clear(self) -> None:
        """Forget the changes notified so far: for a caller about to read the cache, which holds them."""
        self._changed = False

    def gone(self, plural: str, obj: dict) -> None:
        """The watch saw the object named like the key deleted: ``obj`` is it as it was deleted."""
        self._gone = (plural, obj)

    def take_gone(self, plural: str) -> dict | None:
        """The object of ``plural`` named like the key as the watch saw it deleted, once, if it was
        since the last call: what the subscriber of a job reads to tell how it ended."""
        gone = self._gone
        if gone is None or gone[0] != plural:
            return None
        self._gone = None
        return gone[1]

    def wait(self, timeout: float | None = None) -> asyncio.Future[bool]:
        """The next change: a future that turns True once the job changes (at once if it changed since
        the last :meth:`clear`), or False after ``timeout`` seconds. A wait while another is pending
        shares it (and its timeout)."""
        loop = asyncio.get_running_loop()
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            return waiter
        self._settle(False)  # a cancelled wait's timer
        waiter = loop.create_future()
        if self._changed:
            waiter.set_result(True)
            return waiter
        self._waiter = waiter
        if timeout is not None:
            # No context of its own: the timer only settles the future (a copy per timer is 60 bytes).
            self._timer = loop.call_later(max(0.0, timeout), self._settle, False, context=_NO_CONTEXT)
        return waiter

    def _settle(self, changed: bool) -> None:
        """Resolve the pending wait (if any) and drop it and its timer: nothing is held between waits."""
        waiter, timer = self._waiter, self._timer
        self._waiter = self._timer = None
        if timer is not None:
            timer.cancel()
        if waiter is not None and not waiter.done():
            waiter.set_result(changed)


# The context the subscriptions' timers run in: they read no context variable.
_NO_CONTEXT = contextvars.Context()


Listener = Callable[[str, str, dict], None]
# What an index files a cached object under (``None``: not filed): ``fn(plural, obj)``.
IndexFunc = Callable[[str, dict], "str | None"]
MAX_DELETED_REMEMBERED = 10_000
LIST_PAGE = 500  # objects per page of a (re)list: client-go's (k8s.io/client-go/tools/pager)


class SharedWatch:
    """An informer over the product's objects in one namespace."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        *,
        resources: Iterable[Resource] = WATCHED,
        scope: Scope = PRODUCT,
        watch_timeout: int = 300,
        max_backoff: float = 30.0,
        absent_recheck: float = 300.0,
    ):
        self.client = client
        self.namespace = namespace
        self.resources = tuple(resources)
        self.scope = scope
        self.watch_timeout = watch_timeout
        self.max_backoff = max_backoff
        self.absent_recheck = absent_recheck
        # The resources a list answered 404 (a custom resource whose operator is not installed), each
        # with what wakes its next check before ``absent_recheck`` runs out: a subscriber that needs it.
        self._absent: dict[str, asyncio.Event] = {}
        self._cache: dict[str, dict[str, dict]] = {r.plural: {} for r in self.resources}
        # Equal parts of cached objects are one object (watch_transform.Sharing): never change one.
        self._sharing = Sharing()
        # Per job: its objects, its subscriptions. Lists, not sets: a job has a handful of each, and a
        # set of one takes 216 bytes where a list of one takes 64.
        self._by_key: dict[str, list[tuple[str, str]]] = {}
        self._subs: dict[str, list[Subscription]] = {}
        self._listeners: list[Listener] = []
        # Named indexes over the cache (add_index): value -> the (plural, name) of the objects filed
        # under it, kept by every change the cache takes.
        self._indexers: dict[str, IndexFunc] = {}
        self._indices: dict[str, dict[str, dict[tuple[str, str], None]]] = {}
        self._synced = {r.plural: asyncio.Event() for r in self.resources}
        self._all_synced: asyncio.Future | None = None  # the one wait of every wait_synced caller
        # Names the watch saw deleted, with the deletion's version, so a read in flight cannot revive them.
        self._deleted: dict[str, dict[str, str]] = {r.plural: {} for r in self.resources}
        self._tasks: list[asyncio.Task] = []
        self.errors = 0  # API errors seen, for observability and tests
        self.refusals = 0  # of which 401s the client's credential renewal did not cure
        self.relists = 0

    # --- lifecycle ---

    def start(self) -> None:
        if not self._tasks:
            self._tasks = [
                asyncio.create_task(self._run(r), name=f"ajp-watch-{self.namespace}-{r.plural}")
                for r in self.resources
            ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []

    async def wait_synced(self, timeout: float | None = None) -> bool:
        """Wait until every resource has been listed once; False if ``timeout`` passed first.

        Every trigger of a process calls this as it starts, a thousand at once after a restart: they
        share one future (a gather of the watch's events per caller would hold its own tasks and
        coroutines, several kilobytes each, while the lists come in)."""
        if self.synced:
            return True
        if self._all_synced is None or self._all_synced.done():
            self._all_synced = asyncio.get_running_loop().create_future()
        done, _ = await asyncio.wait((self._all_synced,), timeout=timeout)
        return bool(done)

    def _listed(self, resource: Resource) -> None:
        self._synced[resource.plural].set()
        if self.synced and self._all_synced is not None and not self._all_synced.done():
            self._all_synced.set_result(None)

    @property
    def synced(self) -> bool:
        """Every resource has been listed once (the cache may still lag the cluster, as any cache)."""
        return all(e.is_set() for e in self._synced.values())

    # --- reading the cache ---

    def get(self, resource: Resource, name: str) -> dict | None:
        return self._cache.get(resource.plural, {}).get(name)

    def objects_of(self, key: str) -> list[dict]:
        """Every cached object (job, launcher Job, pods) belonging to product job ``key``."""
        out = []
        for plural, name in sorted(self._by_key.get(key, ())):
            obj = self._cache[plural].get(name)
            if obj is not None:
                out.append(obj)
        return out

    def pods_of(self, key: str) -> list[dict]:
        return [o for o in self.objects_of(key) if o.get("kind") == "Pod"]

    def jobs(self, resource: Resource) -> list[dict]:
        return list(self._cache.get(resource.plural, {}).values())

    def add_index(self, name: str, fn: IndexFunc) -> None:
        """Keep an index of the cache: every object filed under ``fn(plural, obj)`` (unless ``None``),
        for :meth:`by_index`. client-go's indexers (``SharedIndexInformer.AddIndexers``, kept by
        ``storeIndex.updateIndices`` in ``tools/cache/thread_safe_store.go``, v0.34.0): a reader that
        wants the objects of one value (the quota pool: one group's jobs) reads those, not the whole
        cache. Adding an index of a name already added does nothing."""
        if name in self._indexers:
            return
        self._indexers[name] = fn
        index: dict[str, dict[tuple[str, str], None]] = {}
        self._indices[name] = index
        for plural, objects in self._cache.items():
            for obj_name, obj in objects.items():
                value = fn(plural, obj)
                if value is not None:
                    index.setdefault(value, {})[(plural, obj_name)] = None

    def by_index(self, name: str, value: str) -> list[dict]:
        """The cached objects index ``name`` files under ``value`` (none for an index not added)."""
        out = []
        for plural, obj_name in self._indices.get(name, {}).get(value, ()):
            obj = self._cache[plural].get(obj_name)
            if obj is not None:
                out.append(obj)
        return out

    def _reindex(self, plural: str, name: str, old: dict | None, new: dict | None) -> None:
        key = (plural, name)
        for index_name, fn in self._indexers.items():
            before = None if old is None else fn(plural, old)
            after = None if new is None else fn(plural, new)
            if before == after:
                continue  # the common case: a change that leaves the object where it was filed
            index = self._indices[index_name]
            if before is not None:
                bucket = index.get(before)
                if bucket is not None:
                    bucket.pop(key, None)
                    if not bucket:  # an empty bucket per value ever seen would grow without bound
                        del index[before]
            if after is not None:
                index.setdefault(after, {})[key] = None

    # --- subscribing ---

    def want(self, resource: Resource) -> None:
        """Someone here follows a job of ``resource``: if the cluster did not serve it at the last
        check, check again now rather than at the next ``absent_recheck``. A trigger follows a job that
        was created, so the resource is served by then (the operator was installed since)."""
        waiting = self._absent.get(resource.plural)
        if waiting is not None:
            waiting.set()

    def subscribe(self, key: str) -> Subscription:
        sub = Subscription(key)
        self._subs.setdefault(key, []).append(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        subs = self._subs.get(sub.key)
        if subs is not None:
            if sub in subs:
                subs.remove(sub)
            if not subs:
                del self._subs[sub.key]

    def followed(self, key: str) -> bool:
        """Whether a subscriber of this process follows job ``key`` (a trigger here waits on it)."""
        return key in self._subs

    def notify(self, key: str) -> None:
        """Wake the subscribers of job ``key`` although none of its objects changed (its queue position
        or reason did: the quota pool decides that outside the job's objects)."""
        for sub in list(self._subs.get(key, ())):
            sub.notify()

    def add_listener(self, fn: Listener) -> Callable[[], None]:
        """Call ``fn(event_type, plural, obj)`` for every change (cheap, non-blocking callbacks only)."""
        self._listeners.append(fn)
        return lambda: self._listeners.remove(fn) if fn in self._listeners else None

    @property
    def subscriber_count(self) -> int:
        return sum(len(s) for s in self._subs.values())

    def absorb(self, resource: Resource, obj: dict, replaces: str | None = None) -> bool:
        """Fold in an object read or written directly, ahead of its watch event; whether it was.

        The cache must only move forward: anything newer still arrives on the watch, in order, so an
        older version put back here would stay until the object next changes. With ``replaces`` (the
        version a write was conditional on) the write's result is folded in only while the cache still
        holds exactly that version. Otherwise a read is refused when the cache holds the same or a newer
        version, or when the watch saw the object deleted at a version the read does not follow;
        versions are compared as the API allows (:mod:`~airflow_jobs_plugin.cluster.resource_version`), and
        where they cannot be, only an exact match is known to be current.
        """
        meta = Meta(obj)
        name, version = meta.name, meta.resource_version
        cached = self._cache.get(resource.plural, {}).get(name)
        cached_version = None if cached is None else Meta(cached).resource_version
        if replaces is not None:
            if cached_version != replaces:
                return False
        elif cached is not None:
            if cached_version == version or resource_version.compare(version, cached_version) == -1:
                return False
        else:
            deleted_at = self._deleted.get(resource.plural, {}).get(name)
            if deleted_at is not None and resource_version.compare(version, deleted_at) != 1:
                return False
        self._apply(resource, "MODIFIED", obj)
        return True

    # --- the informer loop ---

    async def _run(self, resource: Resource) -> None:
        rv: str | None = None
        failures = 0
        while True:
            label_selector, field_selector = self.scope.selectors(resource)
            try:
                if rv is None:
                    rv = await self._relist(resource)
                    self._absent.pop(resource.plural, None)
                async for event in self.client.watch(
                    resource,
                    self.namespace,
                    resource_version=rv,
                    label_selector=label_selector,
                    field_selector=field_selector,
                    timeout_seconds=self.watch_timeout,
                ):
                    etype = str(event.get("type") or "")
                    obj = event.get("object") or {}
                    if etype == "ERROR":
                        raise KubeError.from_status(int(obj.get("code") or 500), obj)
                    new_rv = Meta(obj).resource_version
                    if etype != "BOOKMARK":
                        self._deliver(resource, etype, obj)
                    if new_rv:
                        rv = new_rv
                failures = 0
            except asyncio.CancelledError:
                raise
            except KubeError as exc:
                metrics.emit(metrics.watch_interrupted(self.namespace, resource.plural, exc))
                if exc.gone:
                    rv = None  # history expired: list again
                    continue
                self.errors += 1
                failures += 1
                if exc.not_found and kinds.may_be_absent(resource):
                    # No operator for this kind on this cluster: nothing of it to follow. Check again when a
                    # subscriber needs it (want) or, for readers that subscribe to nothing (the web app's
                    # index), after absent_recheck, so an operator installed later is seen without a
                    # request every few seconds while none is.
                    self._listed(resource)
                    await self._await_demand(resource)
                    continue
                delay = min(self.max_backoff, 0.2 * 2**failures) * (0.5 + random.random() / 2)
                if exc.status == 401:
                    self.refusals += 1
                    log.error(
                        "watch %s/%s: %s; retrying in %.1fs",
                        self.namespace,
                        resource.plural,
                        exc.message,
                        delay,
                    )
                else:
                    log.warning(
                        "watch %s/%s failed (%s); retrying in %.1fs",
                        self.namespace,
                        resource.plural,
                        exc,
                        delay,
                    )
                await asyncio.sleep(delay)
            except Exception as exc:  # never let one bad event kill the watch for every trigger
                metrics.emit(metrics.watch_interrupted(self.namespace, resource.plural, exc))
                self.errors += 1
                failures += 1
                log.exception("watch %s/%s: unexpected error", self.namespace, resource.plural)
                rv = None
                await asyncio.sleep(min(self.max_backoff, 0.2 * 2**failures))

    async def _await_demand(self, resource: Resource) -> None:
        waiting = self._absent.setdefault(resource.plural, asyncio.Event())
        await wait_event(waiting, self.absent_recheck)
        waiting.clear()  # a want() from here on wakes the check after this one

    async def _relist(self, resource: Resource) -> str:
        label_selector, field_selector = self.scope.selectors(resource)
        kind = resource.kind
        fresh: dict[str, dict] = {}
        current = self._cache.get(resource.plural, {})
        listed_at: str | None = None
        token: str | None = None
        # In pages, each trimmed as it arrives: whole objects are held a page at a time, never the whole
        # list (at 1,000 jobs the whole list decoded is several times what the cache keeps of it, and
        # the process keeps its peak). client-go's reflector lists the same way (tools/pager, pages of
        # 500), and takes the list's version from its first page: every page of a list is read at it.
        while True:
            listing = await self.client.list(
                resource,
                self.namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                limit=LIST_PAGE,
                continue_token=token,
            )
            for item in listing.get("items") or []:
                item.setdefault("kind", kind)
                item.setdefault("apiVersion", resource.api_version)
                name = Meta(item).name
                fresh[name] = trim(item, kind, self._sharing, current.get(name))
            page = Meta(listing)
            version, token = page.resource_version or "", page.continue_token
            del listing, page  # the page's items are trimmed into ``fresh``: let the page go
            if listed_at is None:
                listed_at = version
            if token is None:
                break
        self.relists += 1
        old = self._cache[resource.plural]
        # The list was taken before it arrived: a trigger may have folded in a newer read or write of an
        # object meanwhile (absorb). The cache only moves forward, so the list never puts back an older
        # version of it, nor deletes an object first seen after the list's version.
        for name in set(old) - set(fresh):
            seen = Meta(old[name]).resource_version
            if resource_version.compare(seen, listed_at) == 1:
                continue
            self._apply(resource, "DELETED", old[name], trimmed=True)
            if listed_at:  # gone by the list's version, whatever version it was last seen at
                self._deleted[resource.plural][name] = listed_at
        for obj in fresh.values():
            meta = Meta(obj)
            cached = old.get(meta.name)
            if cached is not None and (
                resource_version.compare(meta.resource_version, Meta(cached).resource_version) == -1
            ):
                continue
            self._apply(resource, "MODIFIED" if cached is not None else "ADDED", obj, trimmed=True)
        self._listed(resource)
        return listed_at

    def _deliver(self, resource: Resource, etype: str, obj: dict) -> None:
        """Apply one event of the watch stream, unless the cache is already past it.

        The stream delivers an object's versions in order, but a read folded in meanwhile (``absorb``:
        the trigger's final LIST of a job's pods) can be ahead of it. Applying the stream's older
        version would turn a pod that has ended back to Running until the stream catches up, and a
        final look in that window reports a finished job without its exit codes. A DELETED event older
        than the cached object belongs to an earlier object of that name, created again since.
        """
        meta = Meta(obj)
        cached = self._cache.get(resource.plural, {}).get(meta.name)
        if cached is not None and (
            resource_version.compare(meta.resource_version, Meta(cached).resource_version) == -1
        ):
            return
        self._apply(resource, etype, obj)

    def _apply(self, resource: Resource, etype: str, obj: dict, *, trimmed: bool = False) -> None:
        """``trimmed``: ``obj`` is this watch's own trim already (a relist trims as its pages come)."""
        cache = self._cache[resource.plural]
        if not trimmed:
            obj.setdefault("kind", resource.kind)
            obj.setdefault("apiVersion", resource.api_version)
            # Every way into the cache (list, watch event, absorbed read or write) comes through here or
            # the relist, so the cache and the listeners only ever hold the trimmed copy: client-go's
            # informer transform (SharedIndexInformer.SetTransform), see watch_transform.
            obj = trim(obj, resource.kind, self._sharing, cache.get(Meta(obj).name))
        meta = Meta(obj)
        name = meta.name
        key = job_key(obj)
        deleted = self._deleted.setdefault(resource.plural, {})
        if etype == "DELETED":
            deleted.pop(name, None)
            deleted[name] = meta.resource_version or ""
            if len(deleted) > MAX_DELETED_REMEMBERED:
                del deleted[next(iter(deleted))]
            old = cache.pop(name, None)
            if self._indexers and old is not None:
                self._reindex(resource.plural, name, old, None)
            owned = self._by_key.get(key) if key else None
            if key and owned is not None:
                if (resource.plural, name) in owned:
                    owned.remove((resource.plural, name))
                if not owned:
                    del self._by_key[key]
            if key == name:  # the job itself: its subscribers read how it ended from it
                for sub in self._subs.get(name, ()):
                    sub.gone(resource.plural, obj)
        else:
            deleted.pop(name, None)
            if self._indexers:
                self._reindex(resource.plural, name, cache.get(name), obj)
            cache[name] = obj
            if key:
                owned = self._by_key.get(key)
                if owned is None:
                    self._by_key[key] = [(resource.plural, name)]
                elif (resource.plural, name) not in owned:
                    owned.append((resource.plural, name))
        if key:
            for sub in self._subs.get(key, ()):
                sub.notify()
        for fn in list(self._listeners):
            try:
                fn(etype, resource.plural, obj)
            except Exception:
                log.exception("watch listener failed")


# --- the per-process registry ---


@dataclass
class _Entry:
    watch: SharedWatch
    refs: int = 0
    linger: asyncio.TimerHandle | None = None


_CLIENTS: dict[tuple[int, str], asyncio.Future] = {}
_WATCHES: dict[tuple[int, str, str, Scope], _Entry] = {}
LINGER_SECONDS = 60.0


async def client_for(conn_id: str = DEFAULT_CONN_ID) -> KubeClient:
    """The process's client for a connection (one per event loop, built once)."""
    loop = asyncio.get_running_loop()
    key = (id(loop), conn_id)
    fut = _CLIENTS.get(key)
    if fut is None or (fut.done() and (fut.cancelled() or fut.exception() is not None)):
        # Built in a task of its own: the caller that starts it may be cancelled while it builds (a
        # trigger cancelled as it starts, then asked to on_kill), and every other caller awaits the same
        # client; a caller's cancellation must not end the build for all of them.
        fut = asyncio.ensure_future(KubeClient.from_connection(conn_id))
        _CLIENTS[key] = fut
    return await asyncio.shield(fut)


async def acquire(conn_id: str, namespace: str, scope: Scope = PRODUCT) -> SharedWatch:
    """Join (or start) the shared watch of ``namespace``; pair with :func:`release`."""
    loop = asyncio.get_running_loop()
    key = (id(loop), conn_id, namespace, scope)
    entry = _WATCHES.get(key)
    if entry is None:
        entry = _Entry(SharedWatch(await client_for(conn_id), namespace, scope=scope))
        entry = _WATCHES.setdefault(key, entry)
        entry.watch.start()
    if entry.linger is not None:
        entry.linger.cancel()
        entry.linger = None
    entry.refs += 1
    return entry.watch


def release(conn_id: str, namespace: str, scope: Scope = PRODUCT) -> None:
    """Leave the shared watch; the last one out stops it after a grace period (triggers come and go)."""
    loop = asyncio.get_running_loop()
    key = (id(loop), conn_id, namespace, scope)
    entry = _WATCHES.get(key)
    if entry is None:
        return
    entry.refs = max(0, entry.refs - 1)
    if entry.refs == 0 and entry.linger is None:

        def _stop() -> None:
            if entry.refs == 0 and _WATCHES.get(key) is entry:
                del _WATCHES[key]
                loop.create_task(entry.watch.stop())

        entry.linger = loop.call_later(LINGER_SECONDS, _stop)


async def shutdown() -> None:
    """Stop every watch and close every client of the running loop (tests, CLI, benchmarks)."""
    loop_id = id(asyncio.get_running_loop())
    for key in [k for k in _WATCHES if k[0] == loop_id]:
        entry = _WATCHES.pop(key)
        if entry.linger is not None:
            entry.linger.cancel()
        await entry.watch.stop()
    for client_key in [k for k in _CLIENTS if k[0] == loop_id]:
        fut = _CLIENTS.pop(client_key)
        if not fut.done():
            fut.cancel()
            with contextlib.suppress(BaseException):
                await fut
        elif not fut.cancelled() and fut.exception() is None:
            await fut.result().close()
