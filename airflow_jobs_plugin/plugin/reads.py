"""What the GPU Jobs app reads and does for a request: the shared index of every job and the reads
around it, a job's page, a task's job, the nodes, and an action with the index patched after it.

One :class:`JobReads` per app, made by ``create_app`` and kept in ``app.state.reads``; the routes
(``plugin/routes/``) get it through the :data:`ReadsDep` dependency. It holds the process's copy of
the index (``plugin/state_cache.py``): the read model itself is ``readmodel/job_index.py``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Coroutine
from datetime import datetime, timezone
from typing import Annotated, Any, TypeVar

from fastapi import Depends, HTTPException, Request, status

from airflow_jobs_plugin.cluster.kube import KubeClient, KubeError
from airflow_jobs_plugin.cluster.objects import Meta
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.plugin import deps
from airflow_jobs_plugin.plugin.deps import Settings, _require, _require_names, _settings, may_act
from airflow_jobs_plugin.plugin.state_cache import BuildCache, full_collections_deferred
from airflow_jobs_plugin.readmodel import inspect, job_index, listing, nodes, views
from airflow_jobs_plugin.usecases import actions

T = TypeVar("T")
Outcome = TypeVar("Outcome", actions.CancelOutcome, actions.ActionOutcome)
# inspect.cancel, inspect.stop, inspect.resume: (client, target, job name, by whom) -> what it did.
Door = Callable[[KubeClient, inspect.Target, str, str], Awaitable[Outcome]]


async def _with_cluster(settings: Settings, work: Callable[[KubeClient], Awaitable[T]]) -> T:
    """Run ``work`` on a client for the configured connection; cluster trouble becomes 404 / 502."""
    try:
        client = await KubeClient.from_connection(settings.kubernetes_conn_id)
    except Exception as exc:
        raise HTTPException(status.HTTP_502_BAD_GATEWAY, f"cannot reach the cluster: {exc}") from exc
    try:
        return await work(client)
    except inspect.JobNotFound as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, exc.args[0]) from exc
    except KubeError as exc:
        raise HTTPException(status.HTTP_502_BAD_GATEWAY, f"the cluster answered {exc}") from exc
    finally:
        await client.close()


# How often the index drops the finished jobs deleted since (a metadata-only LIST of every job: at
# 51,000 jobs about as costly as the orphan sweep's, so seldom). Unfinished jobs' deletions are seen
# at every refresh.
DELETION_SWEEP_SECONDS = 600.0


async def _keep_current(
    client: KubeClient, target: inspect.Target, previous: job_index.JobIndex | None
) -> job_index.JobIndex:
    """The index brought up to date: filled page by page when there is none yet, then refreshed by
    creation window (readmodel/job_index.py); now and then swept of deleted finished jobs. Runs in a worker
    thread on a loop of its own (state_cache.py). A fill, to the index frozen, runs with full garbage
    collections deferred (``state_cache.full_collections_deferred``)."""
    if previous is None:
        with full_collections_deferred():
            return await _up_to_date(client, target, None)
    return await _up_to_date(client, target, previous)


async def _up_to_date(
    client: KubeClient, target: inspect.Target, previous: job_index.JobIndex | None
) -> job_index.JobIndex:
    started = time.monotonic()
    fill = previous is None
    if previous is None:
        rows: list[job_index.IndexRow] = []
        async for part in inspect.read_in_pages(client, target):
            if not rows:
                # The events, policy and ledgers every page shares are long-lived too.
                _freeze_long_lived()
            rows.extend(job_index.rows_of(part))
            del part
        previous = job_index.filled(
            rows, datetime.fromtimestamp(time.time() - (time.monotonic() - started), timezone.utc)
        )
        del rows
    swept_at = started if fill else previous.swept_at
    if not fill and started - swept_at > DELETION_SWEEP_SECONDS:
        at = datetime.now(timezone.utc)
        keys = await inspect.read_job_keys(client, target)
        previous, swept_at = job_index.without_deleted(previous, keys, at), time.monotonic()
    fresh = time.monotonic()
    window = listing.Window(job_index.refresh_since(previous, previous.now), None)
    unlabelled = previous.unlabelled_open
    state = await inspect.read_window(client, target, window.selector(labels.CREATED), unlabelled)
    took = time.monotonic() - fresh
    index = dataclasses.replace(
        job_index.refreshed(previous, state, window, unlabelled, took), swept_at=swept_at
    )
    if fill:
        _freeze_long_lived()
    return index


def _freeze_long_lived() -> None:
    """Move every object alive now out of the garbage collector's generations (``gc.freeze``): the API
    server's start-up objects (Airflow's modules, its app) before the fill, and the index after it. A
    full collection walks every tracked object holding the GIL, whichever thread triggers it, and
    Airflow's event loop waits that long (1.5 to 4 s over the 2.7 GB the whole view used to hold);
    frozen objects are skipped, and the fill's and the sweep's garbage is collected as before."""
    import gc

    gc.freeze()


async def connect() -> tuple[KubeClient, inspect.Target]:
    """A client and the configured namespaces, for the orphan sweep (``plugin/sweep.py``)."""
    settings = _settings()
    return await KubeClient.from_connection(settings.kubernetes_conn_id), settings.target()


class JobReads:
    """The app's reads: ``cache`` holds the index of every configured namespace (all readers), filled
    once, then refreshed by creation window, never rebuilt from the whole namespace."""

    def __init__(self, cache: BuildCache[job_index.JobIndex]) -> None:
        self.cache = cache
        # Whether the process's long-lived objects were frozen before its first cluster read.
        self.frozen = False

    def builder(self, settings: Settings) -> Callable[[], Coroutine[Any, Any, job_index.JobIndex]]:
        target = settings.target()
        key = (settings.kubernetes_conn_id, target)

        async def build() -> job_index.JobIndex:
            previous = self.cache.peek(key)
            return await _with_cluster(settings, lambda c: _keep_current(c, target, previous))

        return build

    async def cluster_view(self, settings: Settings) -> job_index.JobIndex:
        """The index of every configured namespace (all readers), from the cache."""
        return await self.cache.get((settings.kubernetes_conn_id, settings.target()), self.builder(settings))

    async def newest_page(
        self, settings: Settings, query: listing.JobQuery
    ) -> tuple[views.Overview, listing.JobPage]:
        """The page ``airflow-jobs status`` reads (``inspect.read_status``): the page's jobs and the
        waiting ones whole, the rest as metadata of the newest creation windows, with pools and queues
        from the ledgers; no charts (they need every job). In a worker thread on a loop of its own."""
        target = settings.target()

        async def read() -> tuple[views.Overview, listing.JobPage]:
            # In chunks as large as the CLI's: the first page waits for each chunk before the next, and a
            # chunk of 5,000 events or metadata decodes in tens of milliseconds off the loop.
            found = await _with_cluster(
                settings, lambda c: inspect.read_status(c, target, query, chunk=inspect.STATUS_CHUNK)
            )
            view, page = listing.with_page(views.overview(found.state), query, found.page, found.total)
            return dataclasses.replace(view, charts=()), dataclasses.replace(page, charts_pending=True)

        return await asyncio.to_thread(lambda: asyncio.run(read()))

    async def overview_of(
        self, settings: Settings, user: Any, query: listing.JobQuery
    ) -> tuple[views.Overview, listing.JobPage]:
        key, build = (settings.kubernetes_conn_id, settings.target()), self.builder(settings)
        kept = self.cache.kept(key, build, start=False)
        if kept is None:
            if not self.frozen:  # before the process's first cluster read: see _freeze_long_lived
                self.frozen = True
                _freeze_long_lived()
            if listing.by_metadata(query) and await asyncio.to_thread(deps._may, user, "GET", None):
                # Nothing built yet (a start, an idle spell): the newest page answers in seconds, then the
                # whole view builds behind it (not beside it: both are CPU under one GIL). Only for a
                # reader of every DAG, whose page needs no filtering after it was chosen; others wait.
                try:
                    return await self.newest_page(settings, query)
                finally:
                    self.cache.kept(key, build)
            kept = await self.cluster_view(settings)
        index = kept
        # Filtering 51,000 rows and asking the auth manager about each DAG is CPU and database work.
        return await asyncio.to_thread(
            job_index.page, index, query, lambda dag_id: deps._may(user, "GET", dag_id), index.now
        )

    async def state_for(
        self,
        client: KubeClient,
        settings: Settings,
        namespace: str,
        job: dict,
        index: job_index.JobIndex | None,
    ) -> views.ClusterState:
        """What a job's page reads besides the job: its own pods (read afresh, one label-selected LIST)
        and, from the index, the waiting jobs, the events, policy, ledgers and Workloads; without an
        index at hand, those read around the job (``inspect.read_around_job``), never the namespace."""
        if index is None:
            return await inspect.read_around_job(client, settings.target(namespace), job)
        pods = await inspect.pods_of_job(client, job)
        kept = index.kept
        events = kept.owners.events_for(job, pods)
        return dataclasses.replace(kept, pods=tuple(pods), events=tuple(events))

    def index_for(self, settings: Settings, namespace: str) -> job_index.JobIndex | None:
        """The index a job page of ``namespace`` reads from, if one is kept; never waited for. A job page
        waiting for the index's fill (tens of seconds at 51,000 jobs, after a start or an idle spell)
        would make the page after an action wait that long though the job it shows was read afresh: so
        without a kept index the page reads what it needs around its job, and the fill starts (or goes
        on) behind it. None too for a namespace outside the index."""
        target = settings.target()
        if namespace not in target.namespaces:
            return None
        return self.cache.kept((settings.kubernetes_conn_id, target), self.builder(settings))

    async def detail_of(self, settings: Settings, user: Any, namespace: str, name: str) -> views.JobDetail:
        _require_names(namespace, name)

        # The job itself is read afresh (its page must show what an action just did); its pods, events
        # and queue come from the shared index, at most a few seconds old, or are read around the job
        # when none is kept (index_for). A job that is gone or not the reader's answers at once.
        async def read(client: KubeClient) -> views.JobDetail:
            job = await inspect.find_job(client, namespace, name)
            _require(user, "GET", views.dag_of(job))
            return await self._detail(client, settings, namespace, job, self.index_for(settings, namespace))

        return await _with_cluster(settings, read)

    async def _detail(
        self,
        client: KubeClient,
        settings: Settings,
        namespace: str,
        job: dict,
        index: job_index.JobIndex | None,
    ) -> views.JobDetail:
        async def state_and_logs() -> tuple[views.ClusterState, tuple[inspect.LogTail, ...]]:
            state = await self.state_for(client, settings, namespace, job, index)
            # The logs are those of the pods just read: after them, not beside them.
            logs = await inspect.read_log_tails(client, namespace, job, state.owners.pods_for(job))
            return state, logs

        # The cached state keeps only the waiting jobs: the task try's other attempts are read afresh,
        # with one label-selected LIST, beside the pods and logs (they do not depend on each other).
        (state, logs), attempts = await asyncio.gather(
            state_and_logs(), inspect.attempts_of(client, namespace, job)
        )
        state = await self.with_attempts_pods(client, state, job, attempts, index)
        return await asyncio.to_thread(views.job_detail, state, job, logs, attempts)

    async def with_attempts_pods(
        self,
        client: KubeClient,
        state: views.ClusterState,
        job: dict,
        attempts: list[dict],
        index: job_index.JobIndex | None,
    ) -> views.ClusterState:
        """``state`` with the pods (and their events) of the task try's other attempts, read afresh
        beside each other: the Attempts table shows each attempt's exit codes and nodes from its own
        pods, which the index does not keep."""
        own = Meta(job).uid
        others = [a for a in attempts if Meta(a).uid != own]
        if not others:
            return state
        found = await asyncio.gather(*(inspect.pods_of_job(client, a) for a in others))
        pods = [*state.pods, *(p for ps in found for p in ps)]
        events = [*state.events]
        # The state holds the job's own events (from the index, or read around the job): the other
        # attempts' come from the index too, or are read by the names of the objects they are about.
        if index is not None:
            for other, its_pods in zip(others, found, strict=True):
                events.extend(index.kept.owners.events_for(other, its_pods))
        else:
            events.extend(await inspect.events_about(client, others, [p for ps in found for p in ps]))
        return dataclasses.replace(state, pods=tuple(pods), events=tuple(events))

    async def task_detail_of(
        self, settings: Settings, dag_id: str, task_id: str, run_id: str, map_index: int
    ) -> views.JobDetail:
        namespaces = settings.target().namespaces

        async def find(client: KubeClient) -> dict:
            for namespace in namespaces:
                try:
                    return await inspect.find_task_job(client, namespace, dag_id, task_id, run_id, map_index)
                except inspect.JobNotFound:
                    if namespace == namespaces[-1]:
                        raise
            raise AssertionError("unreachable: at least one namespace is configured")

        async def read(client: KubeClient) -> views.JobDetail:
            job = await find(client)
            namespace = Meta(job).namespace or settings.namespace
            return await self._detail(client, settings, namespace, job, self.index_for(settings, namespace))

        return await _with_cluster(settings, read)

    async def act(
        self, settings: Settings, user: Any, namespace: str, name: str, door: Door[Outcome]
    ) -> Outcome:
        """Cancel, stop or resume (``door``: ``inspect.cancel``, ...) a job as ``user``, if they may edit
        its DAG."""
        _require_names(namespace, name)

        async def work(client: KubeClient) -> Outcome:
            target = settings.target(namespace)
            try:
                job = await inspect.find_job(client, target.namespace, name)
            except inspect.JobNotFound:
                job = None
            if job is not None and not may_act(user, views.dag_of(job)):
                raise HTTPException(status.HTTP_403_FORBIDDEN, "Forbidden")
            if job is None and not may_act(user, None):
                # A job already gone: only someone who may act on every DAG learns what happened to it.
                raise HTTPException(status.HTTP_404_NOT_FOUND, f"no GPU job {target.namespace}/{name}")
            try:
                return await door(client, target, name, user.get_name())
            finally:
                # Whatever the action changed, the next page shows it: the job is read again, on the
                # same client, and patched into the kept index (and into a build under way), not the
                # whole namespace rebuilt. The answer waits for the patch; the patch is small
                # (job_index.with_change: the job's row, pools, queues, the rows whose place moved).
                await self.refresh_job(client, settings, namespace, name)

        return await _with_cluster(settings, work)

    async def refresh_job(self, client: KubeClient, settings: Settings, namespace: str, name: str) -> None:
        target = settings.target()
        key = (settings.kubernetes_conn_id, target)
        if namespace not in target.namespaces or not self.cache.holds(key):
            return  # nothing read before the action is kept (another namespace's page reads it uncached)
        try:
            change = await inspect.read_change(client, target, namespace, name)
        except KubeError:
            self.cache.invalidate()  # the job could not be read again: no copy read before the action is kept
            return

        await self.cache.patch(key, lambda index: job_index.with_change(index, change))

    async def nodes_of(self, settings: Settings, user: Any) -> nodes.NodeView:
        view = await _with_cluster(settings, lambda c: inspect.read_nodes(c, settings.target()))
        return await asyncio.to_thread(nodes.for_reader, view, lambda dag_id: deps._may(user, "GET", dag_id))


def _reads(request: Request) -> JobReads:
    reads: JobReads = request.app.state.reads
    return reads


ReadsDep = Annotated[JobReads, Depends(_reads)]
