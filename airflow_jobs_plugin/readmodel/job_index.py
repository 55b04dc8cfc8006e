"""The GPU Jobs UI's read model: a compact index of every job, kept current by small reads. No I/O.

At 51,000 jobs the namespace's objects are 540 MB of JSON and several GB decoded; the page shows 100
rows, the pools and the queues. So the API server keeps, per job, only what a row, a pool's chart and
the refresh's window read (:class:`IndexRow`: the job's page row, :class:`views.JobRow`, a named tuple
of interned strings, numbers and times, beside the index's own few fields), and whole objects only for
the jobs the pool's queue rule reads (the waiting ones) and the pods of the jobs still running
(:attr:`JobIndex.kept`). Named tuples stay tracked by the garbage collector (CPython untracks only
exact tuples), so the shell freezes the index once filled (``plugin/reads.py``).

How it stays current (the shell is ``plugin/reads.py``, the reads ``readmodel/inspect.py``):

- **fill**: once per process, the jobs are read whole in pages of 500 with their own pods, each page
  turned into rows (:func:`rows_of`) and dropped, so the heap never holds the namespace (the shell
  defers Python's full garbage collections meanwhile: ``plugin/reads.py``);
- **refresh**: every few seconds while pages are read, only the jobs that can still change are read
  again, by their ``created`` label: every job created since the oldest job that is unfinished or
  holds a ledger reservation (:func:`refresh_since`), which also brings the new ones; a job of that
  window no longer listed was deleted (:func:`refreshed`). Finished jobs older than it do not change;
- **sweep**: now and then the namespace's metadata alone (names), to drop finished jobs deleted since
  (:func:`without_deleted`);
- **action**: cancel, stop and resume patch the index with the job they touched (:func:`with_change`).

Where it lives, and why there: docs/ui.md ("The read model").
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, NamedTuple

from airflow_jobs_plugin.cluster.objects import Meta
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.lifecycle import JobSnapshot, JobState
from airflow_jobs_plugin.readmodel import listing, views

Key = tuple[str, str]
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _i(value: str | None) -> str | None:
    """The one copy of a short, repeated string (a state, a group, a DAG id, a message)."""
    return None if value is None else sys.intern(value)


class IndexRow(NamedTuple):
    """One job of the index: its page row (:class:`views.JobRow`, its strings interned) and what the
    index itself needs (``uid``, ``created_label``, ``terminal``, ``held``). The row's ``age_seconds``
    is not kept: a page gives its own (:func:`job_row`)."""

    row: views.JobRow
    uid: str
    # The ``created`` label (epoch seconds, the creating process's clock): what the refresh selects by.
    created_label: int | None
    terminal: bool
    # When it held its GPUs, for the charts: (admitted, ended or None while it holds them, GPUs).
    held: tuple[datetime, datetime | None, int] | None

    @property
    def key(self) -> Key:
        return (self.row.namespace, self.row.name)


def index_row(job: Mapping[str, Any], snap: JobSnapshot, row: views.JobRow) -> IndexRow:
    """The index's record of ``job``, from its snapshot and its page row (:func:`views.job_row`)."""
    meta = Meta(job)
    label = str(meta.labels.get(labels.CREATED) or "")
    held = None
    if snap.admitted_at is not None and snap.gpus > 0 and snap.state != JobState.QUEUED:
        # As views.gpu_intervals: a finished job held them until it finished, a live one until now.
        end = (snap.finished_at or snap.admitted_at) if snap.is_terminal else None
        held = (snap.admitted_at, max(end, snap.admitted_at) if end else None, snap.gpus)
    kept = row._replace(
        namespace=sys.intern(row.namespace),
        kind=sys.intern(row.kind),
        state=sys.intern(row.state),
        reason=sys.intern(row.reason),
        message=sys.intern(row.message),
        group=sys.intern(row.group),
        user=sys.intern(row.user),
        device=sys.intern(row.device),
        age_seconds=None,  # a page's own (job_row): not a float per job kept for nothing
        dag_id=_i(row.dag_id),
        task_id=_i(row.task_id),
        run_id=_i(row.run_id),
        kueue_queue=_i(row.kueue_queue),
        cluster_queue=_i(row.cluster_queue),
    )
    return IndexRow(
        row=kept,
        uid=meta.uid,
        created_label=int(label) if label.isdigit() else None,
        terminal=snap.is_terminal,
        held=held,
    )


def job_row(r: IndexRow, now: datetime) -> views.JobRow:
    """The page's row of ``r`` at ``now``: what :func:`views.job_row` gives for the same job."""
    created = r.row.created_at
    return r.row._replace(age_seconds=None if created is None else (now - created).total_seconds())


def rows_of(
    state: views.ClusterState,
    jobs: Iterable[Mapping[str, Any]] | None = None,
    decided: tuple[Mapping[str, Any], Mapping[str, str]] | None = None,
) -> list[IndexRow]:
    """Every job of ``state`` (or only ``jobs`` of it) as the index keeps it: its snapshot (the same
    rules as the whole view's, :func:`views.snapshots`; ``decided``: ``views.queue_decisions(state)``
    when already known) and its row."""
    decisions, problems = decided if decided is not None else views.queue_decisions(state)
    out = []
    for job, snap in views.snapshots_of(state, state.jobs if jobs is None else jobs, decisions, problems):
        uid = Meta(job).uid
        out.append(index_row(job, snap, views.job_row(job, snap, state.now, state.workloads.get(uid))))
    return out


@dataclass(frozen=True)
class JobIndex:
    """Every job as an :class:`IndexRow`, the pools, queues and problems of the last read, and ``kept``:
    the waiting jobs whole (the queue rule's input), the pods of the jobs read in the last window, the
    namespaces' events, policy, ledgers and Kueue's Workloads (what a job's page and an action's patch
    read besides the job's own objects)."""

    rows: Mapping[Key, IndexRow]
    kept: views.ClusterState
    pools: tuple[views.PoolRow, ...]
    queues: tuple[views.GroupQueue, ...]
    problems: tuple[str, ...]
    # Whether an unfinished job carries no ``created`` label (made before the label): read those too.
    unlabelled_open: bool = False
    # Seconds the last refresh took: the next one waits at least twice as long (state_cache.py).
    took: float = 0.0
    # When (time.monotonic) deleted finished jobs were last swept out (reads.DELETION_SWEEP_SECONDS).
    swept_at: float = 0.0
    _sorted: dict[str, tuple[IndexRow, ...]] = dataclasses.field(
        default_factory=dict, compare=False, repr=False
    )

    @property
    def now(self) -> datetime:
        return self.kept.now

    def in_order(self, sort: str) -> tuple[IndexRow, ...]:
        """Every row in ``sort``'s order, as :func:`listing.narrow` orders them (ties by namespace and
        name): a total order, so filtering after sorting gives narrow's page. Kept per index."""
        if sort not in self._sorted:
            rows = sorted(self.rows.values(), key=lambda r: r.key)
            key: Callable[[views.JobRow], Any] = listing.SORT_KEYS[sort.lstrip("-")]
            rows.sort(key=lambda r: key(r.row), reverse=sort.startswith("-"))
            self._sorted[sort] = tuple(rows)
        return self._sorted[sort]

    @functools.cached_property
    def charts(self) -> tuple[views.UsageChart, ...]:
        """The groups' GPU charts from the rows' intervals, as :func:`views.charts` draws them."""
        now = self.now
        by_group: dict[str, list[tuple[datetime, datetime, int]]] = {}
        for r in self.rows.values():
            if r.held is not None:
                start, end, gpus = r.held
                by_group.setdefault(r.row.group, []).append(
                    (start, max(now if end is None else end, start), gpus)
                )
        # The span and the groups as views.charts chooses them.
        earliest = min((i[0] for intervals in by_group.values() for i in intervals), default=now)
        margin = (now - earliest) / 10
        start = max(now - views.CHART_WINDOW, min(earliest - margin, now - views.CHART_MIN_SPAN))
        quotas = {p.group: p.quota for p in self.pools}
        return tuple(
            views.UsageChart(g, quotas.get(g), start, now, views.usage_steps(by_group.get(g, ()), start, now))
            for g in sorted(set(by_group) | set(quotas))
        )


def _carried(index: JobIndex, rows: Mapping[Key, IndexRow]) -> dict[str, tuple[IndexRow, ...]]:
    """The orders ``index`` keeps, carried over to ``rows`` where that needs no sort: the same jobs, and
    every changed row keeps its value of the sort's key (its place), so each order is the old one with
    the changed rows put in. At 51,000 jobs a sort costs a fifth of a second; an action or a refresh
    changes a few rows, mostly not their creation time (the default order)."""
    if len(rows) != len(index.rows) or not index._sorted:
        return {}
    changed = {k: r for k, r in rows.items() if index.rows.get(k) is not r}
    if any(k not in index.rows for k in changed):
        return {}
    out = {}
    for sort, order in index._sorted.items():
        key: Callable[[views.JobRow], Any] = listing.SORT_KEYS[sort.lstrip("-")]
        if all(key(index.rows[k].row) == key(r.row) for k, r in changed.items()):
            out[sort] = tuple(changed.get(r.key, r) for r in order)
    return out


def empty(now: datetime) -> JobIndex:
    return JobIndex({}, views.ClusterState((), (), (), now), (), (), ())


def filled(rows: Iterable[IndexRow], now: datetime) -> JobIndex:
    """The index of the fill's rows, read from ``now`` on; pools, queues and ``kept`` come with the
    refresh that follows, which reads every job created since ``now`` too."""
    found = {r.key: r for r in rows}
    return dataclasses.replace(
        empty(now),
        rows=found,
        unlabelled_open=any(r.created_label is None and not r.terminal for r in found.values()),
    )


def refresh_since(index: JobIndex, read_at: datetime) -> int:
    """The oldest ``created`` label the refresh reads from: the oldest job that is unfinished or holds
    a reservation (its row may still change), else the last read's time (new jobs only)."""
    reserved = {r.uid for ledger in index.kept.ledgers.values() for r in ledger.reservations}
    labels_open = [
        r.created_label
        for r in index.rows.values()
        if r.created_label is not None and (not r.terminal or r.uid in reserved)
    ]
    return min([*labels_open, int(read_at.timestamp())])


def in_window(row: IndexRow, window: listing.Window, unlabelled: bool) -> bool:
    """Whether the refresh's LIST of ``window`` (and of the unlabelled jobs, if read) lists ``row``'s
    job, if it still exists: the selector's own bounds (:meth:`listing.Window.selector`)."""
    if row.created_label is None:
        return unlabelled
    low = None if window.since is None else window.since - listing.CLOCK_MARGIN - 1
    return (low is None or row.created_label > low) and (
        window.before is None or row.created_label < window.before
    )


def refreshed(
    index: JobIndex, state: views.ClusterState, window: listing.Window, unlabelled: bool, took: float = 0.0
) -> JobIndex:
    """``index`` with the jobs of a refresh (``state``: every job of ``window``'s LIST and, if
    ``unlabelled``, of the unlabelled jobs' LIST, whole, with their pods, the events, ledgers, policy and
    Workloads). A job of the window that the read no longer lists was deleted; rows outside it stay."""
    ov = views.overview(state)
    fresh = {r.key: r for r in rows_of(state)}
    rows = {k: r for k, r in index.rows.items() if k in fresh or not in_window(r, window, unlabelled)}
    rows.update(fresh)
    kept = dataclasses.replace(state, jobs=tuple(j for j in state.jobs if views._is_waiting(j)))
    kept.owners  # noqa: B018 - indexed here, off the event loop, not on the first job page
    return JobIndex(
        rows=rows,
        kept=kept,
        pools=ov.pools,
        queues=ov.queues,
        problems=ov.problems,
        unlabelled_open=any(r.created_label is None and not r.terminal for r in rows.values()),
        took=took,
        _sorted=_carried(index, rows),
    )


def without_deleted(
    index: JobIndex, present: Iterable[Key], complete_before: datetime | None = None
) -> JobIndex:
    """``index`` without the finished jobs that a listing of every job's metadata (``present``) no
    longer names. A job created after ``complete_before`` (the listing's start) may be newer than the
    listing and is kept."""
    there = set(present)
    gone = [
        k
        for k, r in index.rows.items()
        if k not in there
        and r.terminal
        and (complete_before is None or r.row.created_at is None or r.row.created_at < complete_before)
    ]
    if not gone:
        return index
    rows = {k: r for k, r in index.rows.items() if k not in set(gone)}
    return dataclasses.replace(index, rows=rows, _sorted={})


def with_change(index: JobIndex, change: views.JobChange) -> JobIndex:
    """``index`` with one job as an action left it (``change``: the job read again, ``None`` once
    deleted, with its own pods, the policy and ledgers): its row, the pools, the queues, and the rows
    of the waiting jobs whose place in the queue (or reservation) the change moved; nothing else of the
    namespace is read or computed again.

    The page after the action waits for this patch, so it is small: the pool's decisions over the
    waiting jobs before and after (pure arithmetic over their metadata), and a snapshot only for the
    touched job and the jobs whose queue status or reservation differs (``views.row_inputs``). Among
    3,000 waiting jobs without a pool, a Stop recomputes one row, not 3,000 twice."""
    key = (change.namespace, change.name)
    kept = index.kept
    owners = kept.owners
    stand_in = change.job or {"metadata": {"namespace": change.namespace, "name": change.name}}
    old_pods = {views._identity(p) for p in owners.pods_for(stand_in)}
    others = tuple(j for j in kept.jobs if views._identity(j) != key)
    jobs = others + ((change.job,) if change.job is not None else ())
    pods = tuple(p for p in kept.pods if views._identity(p) not in old_pods) + change.pods
    still = dataclasses.replace(
        kept,
        jobs=tuple(j for j in jobs if views._is_waiting(j)),
        pods=pods,
        now=change.now,
        policy=change.policy,
        policy_problem=change.policy_problem,
        ledgers=change.ledgers,
        usage_histories=change.usage_histories,
    )
    still.owners  # noqa: B018 - indexed in the worker thread the patch runs in, shared with ``state``
    state = still.with_jobs(jobs)
    decisions, problems = views.queue_decisions(state)
    before = views.row_inputs(kept, *views.queue_decisions(kept))
    after = views.row_inputs(state, decisions, problems)
    moved = [
        j
        for j in jobs
        if views._identity(j) == key or before.get(views._uid(j), (None, None)) != after[views._uid(j)]
    ]
    rows = dict(index.rows)
    rows.pop(key, None)
    rows.update((r.key, r) for r in rows_of(state, moved, (decisions, problems)))
    return dataclasses.replace(
        index,
        rows=rows,
        kept=still,
        pools=views.pools(state, decisions.values()),
        queues=views.queues(state, decisions.values(), problems),
        problems=views.problems_of(state),
        _sorted=_carried(index, rows),
    )


def page(
    index: JobIndex, query: listing.JobQuery, may_read: Callable[[str | None], bool], now: datetime
) -> tuple[views.Overview, listing.JobPage]:
    """What ``listing.page_of(listing.narrow(listing.for_reader(overview, may_read), query), query)``
    gives from the whole view, from the index: the reader's rows matching ``query``, in its order, the
    page of them as page rows at ``now``; queues narrowed to those rows; pools and charts narrowed only
    by the group filter (quota is shared)."""
    verdicts: dict[str | None, bool] = {}

    def allowed(r: views.JobRow) -> bool:
        if r.dag_id not in verdicts:
            verdicts[r.dag_id] = may_read(r.dag_id)
        return verdicts[r.dag_id]

    groups, users, states = set(query.groups), set(query.users), set(query.states)
    dags, spaces = set(query.dags), set(query.namespaces)

    def matches(r: views.JobRow) -> bool:
        return (
            (not groups or r.group in groups)
            and (not users or r.user in users)
            and (not states or r.state in states)
            and (not dags or (r.dag_id or "") in dags)
            and (not spaces or r.namespace in spaces)
            and allowed(r)
        )

    matching = [i for i in index.in_order(query.sort) if matches(i.row)]
    shown = tuple(job_row(r, now) for r in matching[query.offset : query.offset + query.limit])
    keep = {r.key for r in matching}
    queues = tuple(
        views.GroupQueue(q.group, entries)
        for q in index.queues
        if (entries := tuple(e for e in q.entries if (e.namespace, e.name) in keep))
    )
    pools, charts = index.pools, index.charts
    if groups:
        pools = tuple(p for p in pools if p.group in groups)
        charts = tuple(c for c in charts if c.group in groups)
    ov = views.Overview(
        now=index.now, pools=pools, queues=queues, jobs=shown, charts=charts, problems=index.problems
    )
    return ov, listing.JobPage(shown, len(matching), query.offset, query.limit)
