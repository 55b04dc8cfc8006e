"""Filtering, sorting and paging an overview on the server: the query parameters of the GPU Jobs page,
``/api/overview|pools|queues|jobs`` and ``airflow-jobs status``. No I/O.

An overview is built once for everyone (it is the costly part, see ``plugin/state_cache.py``); each
request then narrows it here to what its reader may see (:func:`for_reader`) and asked for
(:func:`narrow`), and pages the job list (:func:`page_of`). Pools and charts are never narrowed by the
reader: quota is shared, so they count every job.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlencode

from airflow_jobs_plugin.cluster.objects import Meta
from airflow_jobs_plugin.jobs.jobview import JobView
from airflow_jobs_plugin.jobs.labels import GPU_RESOURCE
from airflow_jobs_plugin.readmodel.views import (
    GroupQueue,
    JobRow,
    Overview,
    PoolRow,
    dag_of,
)

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _text(value: object) -> str:
    return "" if value is None else str(value)


# Sort keys of the job list: each reads a JobRow; ties break by namespace and name, so pages are stable.
SORT_KEYS: dict[str, Callable[[JobRow], Any]] = {
    "created": lambda r: r.created_at or _EPOCH,
    "name": lambda r: r.name,
    "namespace": lambda r: r.namespace,
    "state": lambda r: r.state,
    "group": lambda r: r.group,
    "user": lambda r: r.user,
    "dag": lambda r: _text(r.dag_id),
    # Device by device (whole GPUs first): two MIG slices are not more than one whole GPU.
    "gpus": lambda r: (r.device != GPU_RESOURCE, r.device, r.gpus),
    "attempt": lambda r: r.attempt,
    "position": lambda r: (r.queue_position is None, r.queue_position or 0),
}
DEFAULT_SORT = "-created"

# The same keys read from a job object's metadata (labels, annotations, name, creation time), for a
# page chosen before the jobs are read whole (:func:`pick_page`). The other columns (state, queue
# position, GPUs, attempt) come from each job's snapshot, so sorting by them needs every job whole.
METADATA_SORT_KEYS: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    "created": lambda j: Meta(j).created_at or _EPOCH,
    "name": lambda j: Meta(j).name,
    "namespace": lambda j: Meta(j).namespace,
    "group": lambda j: JobView(j).group or "",
    "user": lambda j: JobView(j).user or "",
    "dag": lambda j: _text(dag_of(j)),
}


class QueryError(ValueError):
    """A query parameter the server cannot use; the message names the parameter and the fix."""


@dataclass(frozen=True)
class JobQuery:
    """What a reader asked for: filters (each empty = any), the sort and the page.

    ``states`` and ``groups`` etc. hold exact values; several values of one filter mean any of them.
    """

    groups: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    states: tuple[str, ...] = ()
    dags: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ()
    sort: str = DEFAULT_SORT
    offset: int = 0
    limit: int = DEFAULT_LIMIT

    def params(self, **changes: object) -> str:
        """This query as a URL query string (with ``changes``), for the page's links."""
        query = dataclasses.replace(self, **changes)  # type: ignore[arg-type]
        pairs: list[tuple[str, str]] = []
        for name, values in (
            ("group", query.groups),
            ("user", query.users),
            ("state", query.states),
            ("dag", query.dags),
            ("namespace", query.namespaces),
        ):
            pairs.extend((name, v) for v in values)
        if query.sort != DEFAULT_SORT:
            pairs.append(("sort", query.sort))
        if query.offset:
            pairs.append(("offset", str(query.offset)))
        if query.limit != DEFAULT_LIMIT:
            pairs.append(("limit", str(query.limit)))
        return urlencode(pairs)


def _values(raw: Iterable[str] | None) -> tuple[str, ...]:
    """Repeated parameters and comma lists alike (``state=RUNNING&state=QUEUED`` = ``state=RUNNING,QUEUED``)."""
    out: list[str] = []
    for item in raw or ():
        for value in item.split(","):
            value = value.strip()
            if value and value not in out:
                out.append(value)
    return tuple(out)


def parse_query(
    *,
    group: Iterable[str] | None = None,
    user: Iterable[str] | None = None,
    state: Iterable[str] | None = None,
    dag: Iterable[str] | None = None,
    namespace: Iterable[str] | None = None,
    sort: str | None = None,
    offset: int | None = None,
    limit: int | None = None,
) -> JobQuery:
    """A :class:`JobQuery` from request parameters; :class:`QueryError` names a bad one and its fix."""
    from airflow_jobs_plugin.lifecycle import JobState

    problems = []
    states = tuple(s.upper() for s in _values(state))
    known = {s.value for s in JobState}
    unknown = [s for s in states if s not in known]
    if unknown:
        problems.append(
            f"state: {', '.join(unknown)} is not a job state; use one of {', '.join(sorted(known))}"
        )
    order = sort or DEFAULT_SORT
    if order.lstrip("-") not in SORT_KEYS:
        problems.append(
            f"sort: {order!r} is not a column; use one of {', '.join(sorted(SORT_KEYS))} (prefix '-' to reverse)"
        )
    if offset is not None and offset < 0:
        problems.append(f"offset: {offset} is negative; use 0 or more")
    if limit is not None and not 1 <= limit <= MAX_LIMIT:
        problems.append(f"limit: {limit} is out of range; use 1 to {MAX_LIMIT}")
    if problems:
        raise QueryError("; ".join(problems))
    return JobQuery(
        groups=_values(group),
        users=_values(user),
        states=states,
        dags=_values(dag),
        namespaces=_values(namespace),
        sort=order,
        offset=offset or 0,
        limit=limit or DEFAULT_LIMIT,
    )


@dataclass(frozen=True)
class JobPage:
    """One page of the (filtered, sorted) job list and where it sits in the whole."""

    rows: tuple[JobRow, ...]
    total: int | None  # None: not counted (only the newest jobs were read); older ones may follow
    offset: int
    limit: int
    # Whether the overview beside this page was answered before the index of every job was built (the
    # newest page after a start): its usage charts, which need every job, are still being read.
    charts_pending: bool = False

    @property
    def more(self) -> bool:
        """Whether jobs may follow this page."""
        if self.total is None:
            return len(self.rows) >= self.limit
        return self.offset + self.limit < self.total

    @property
    def next_offset(self) -> int | None:
        return self.offset + self.limit if self.more else None

    @property
    def previous_offset(self) -> int | None:
        return max(0, self.offset - self.limit) if self.offset > 0 else None


def for_reader(ov: Overview, may_read: Callable[[str | None], bool]) -> Overview:
    """``ov`` with only the jobs and queue entries of DAGs the reader may read (``may_read(dag_id)``;
    ``None`` for a job outside any DAG). Pools and charts stay whole: quota is shared."""
    verdicts: dict[str | None, bool] = {}

    def allowed(row: JobRow) -> bool:
        if row.dag_id not in verdicts:
            verdicts[row.dag_id] = may_read(row.dag_id)
        return verdicts[row.dag_id]

    rows = tuple(r for r in ov.jobs if allowed(r))
    return dataclasses.replace(ov, jobs=rows, queues=_queues_of(ov.queues, rows))


def _queues_of(queues: Sequence[GroupQueue], rows: Sequence[JobRow]) -> tuple[GroupQueue, ...]:
    """The queues with only the entries of ``rows`` (empty queues dropped)."""
    keep = {(r.namespace, r.name) for r in rows}
    out = []
    for q in queues:
        entries = tuple(e for e in q.entries if (e.namespace, e.name) in keep)
        if entries:
            out.append(GroupQueue(q.group, entries))
    return tuple(out)


def narrow(ov: Overview, query: JobQuery) -> Overview:
    """``ov`` with the jobs matching ``query``'s filters, sorted, all of them (page with :func:`page_of`).

    Every filter narrows the job list and the queues; the group filter narrows pools and charts too.
    """

    def match(row: JobRow) -> bool:
        return (
            (not query.groups or row.group in query.groups)
            and (not query.users or row.user in query.users)
            and (not query.states or row.state in query.states)
            and (not query.dags or _text(row.dag_id) in query.dags)
            and (not query.namespaces or row.namespace in query.namespaces)
        )

    rows = [r for r in ov.jobs if match(r)]
    key = SORT_KEYS[query.sort.lstrip("-")]
    rows.sort(key=lambda r: (r.namespace, r.name))
    rows.sort(key=key, reverse=query.sort.startswith("-"))  # stable: ties keep namespace/name order
    pools, charts = ov.pools, ov.charts
    if query.groups:
        pools = tuple(p for p in pools if p.group in query.groups)
        charts = tuple(c for c in charts if c.group in query.groups)
    return dataclasses.replace(
        ov, jobs=tuple(rows), queues=_queues_of(ov.queues, rows), pools=pools, charts=charts
    )


# Rows the overview lists of each group's queue and users (the page, ``/api/overview`` and ``status``):
# 3,000 waiting jobs drew 4,000 px of queue rows above the charts. The rest are counted; the job list
# pages through a queue (:func:`queue_query`).
QUEUE_ROWS = 20
MAX_QUEUE_ROWS = 1000


def bounded(ov: Overview, rows: int = QUEUE_ROWS) -> Overview:
    """``ov`` with the first ``rows`` entries of each queue and ``rows`` users of each pool, each with how
    many it leaves out (``GroupQueue.more``, ``PoolRow.more_users``). The users kept are those holding
    or waiting for the most GPUs (ties by name), listed in name order as before."""
    queues = tuple(
        dataclasses.replace(q, entries=q.entries[:rows], more=q.more + max(0, len(q.entries) - rows))
        for q in ov.queues
    )
    return dataclasses.replace(ov, queues=queues, pools=tuple(_fewer_users(p, rows) for p in ov.pools))


def _fewer_users(pool: PoolRow, rows: int) -> PoolRow:
    if len(pool.users) <= rows:
        return pool
    most = sorted(pool.users, key=lambda u: (-(u.gpus + u.queued_gpus), u.user))[:rows]
    kept = tuple(sorted(most, key=lambda u: u.user))
    return dataclasses.replace(pool, users=kept, more_users=pool.more_users + len(pool.users) - rows)


def queue_query(group: str) -> JobQuery:
    """The job list of ``group``'s waiting jobs in queue order: where a queue's left-out rows are."""
    return JobQuery(groups=(group,), states=("QUEUED",), sort="position")


def by_metadata(query: JobQuery) -> bool:
    """Whether the jobs' metadata alone chooses ``query``'s page: its filters and sort read only labels,
    annotations, names and creation times (a state filter or a sort by state needs every job whole)."""
    return not query.states and query.sort.lstrip("-") in METADATA_SORT_KEYS


def _matches(job: Mapping[str, Any], query: JobQuery) -> bool:
    """Whether a job's metadata passes ``query``'s filters (all but the state)."""
    return (
        (not query.groups or (JobView(job).group or "") in query.groups)
        and (not query.users or (JobView(job).user or "") in query.users)
        and (not query.dags or _text(dag_of(job)) in query.dags)
        and (not query.namespaces or Meta(job).namespace in query.namespaces)
    )


def pick_page(jobs: Iterable[Mapping[str, Any]], query: JobQuery) -> tuple[list[Mapping[str, Any]], int]:
    """The jobs of ``query``'s page, in its order, and how many jobs match its filters, from the jobs'
    metadata (``{"metadata": ...}`` with ``kind``): the page :func:`narrow` and :func:`page_of` give
    from the whole overview, the same filters, order and ties. Only when :func:`by_metadata`."""
    if not by_metadata(query):
        raise ValueError(f"the page of sort {query.sort!r} and states {query.states} needs every job whole")
    found = [j for j in jobs if _matches(j, query)]
    key = METADATA_SORT_KEYS[query.sort.lstrip("-")]
    found.sort(key=lambda j: (Meta(j).namespace, Meta(j).name))
    found.sort(key=key, reverse=query.sort.startswith("-"))  # stable, as narrow's
    return found[query.offset : query.offset + query.limit], len(found)


# --- the newest jobs without the history ---------------------------------------------------------
#
# The default order, newest first, needs only the newest jobs: the product labels each job with its
# creation time (labels.CREATED, whole epoch seconds) and the API server selects a label by integer
# comparison, so ``airflow-jobs status`` reads the namespace window by window back in time and stops once
# the page is decided, instead of reading a history of 50,000 jobs to show the first 100.

# The windows' lower bounds, as ages: the last hour, the last day, week, month, then everything older.
WINDOW_AGES = (3600, 86_400, 7 * 86_400, 30 * 86_400)
# The label is the creating process's clock, the order the API server's creationTimestamp: each window
# reads this much further back than it counts, so a job of either clock's second is never skipped.
CLOCK_MARGIN = 300


@dataclass(frozen=True)
class Window:
    """The jobs whose ``created`` label lies in ``[since, before)`` (``None``: unbounded that way)."""

    since: int | None
    before: int | None

    def selector(self, key: str) -> str:
        """The label selector terms of this window, ``CLOCK_MARGIN`` wider at its old end."""
        terms = []
        if self.since is not None:
            terms.append(f"{key}>{self.since - CLOCK_MARGIN - 1}")
        if self.before is not None:
            terms.append(f"{key}<{self.before}")
        return ",".join(terms)


def creation_windows(now: datetime) -> tuple[Window, ...]:
    """The windows to read, newest first; together they cover every labelled job (the first has no upper
    bound, for a clock ahead of ``now``; the last no lower one)."""
    at = int(now.timestamp())
    bounds = [at - age for age in WINDOW_AGES]
    windows = [Window(bounds[0], None)]
    windows += [Window(since, before) for before, since in itertools.pairwise(bounds)]
    windows.append(Window(None, bounds[-1]))
    return tuple(windows)


def decides_newest_page(
    jobs: Iterable[Mapping[str, Any]], query: JobQuery, since: int | None, key: str
) -> bool:
    """Whether the jobs read so far (every unlabelled job and the windows down to ``since``) decide the
    newest-first page of ``query``: more than ``offset + limit`` of them match its filters and were
    created at or after ``since``, so no job of the older windows can be on the page, and at least one
    job follows it (the page may say so without having counted). Always, past the last window."""
    if since is None:
        return True
    needed = query.offset + query.limit + 1
    count = 0
    for job in jobs:
        value = Meta(job).labels.get(key)
        if value is not None and value.isdigit() and int(value) >= since and _matches(job, query):
            count += 1
            if count >= needed:
                return True
    return False


def with_page(
    ov: Overview, query: JobQuery, page: Sequence[tuple[str, str]], total: int | None
) -> tuple[Overview, JobPage]:
    """``ov`` (built from the page's jobs and the waiting ones) narrowed by ``query``, with the job list
    the page chosen by :func:`pick_page` (``(namespace, name)`` in its order) out of ``total`` jobs
    (``None``: not counted, older jobs may follow the page).

    A job of the page gone before it could be read whole is left out of the rows, not the total.
    """
    narrowed = narrow(ov, query)
    rows = {(r.namespace, r.name): r for r in ov.jobs}
    shown = tuple(rows[key] for key in page if key in rows)
    return dataclasses.replace(narrowed, jobs=shown), JobPage(shown, total, query.offset, query.limit)


def page_of(ov: Overview, query: JobQuery) -> tuple[Overview, JobPage]:
    """``ov`` (already narrowed) with only the requested page of its job list, and the page's place."""
    rows = ov.jobs[query.offset : query.offset + query.limit]
    return dataclasses.replace(ov, jobs=rows), JobPage(rows, len(ov.jobs), query.offset, query.limit)


def pager_html(page: JobPage, query: JobQuery, path: str) -> str:
    """The job list's filter form (GET, so a filtered page is a link) and its previous/next links."""
    from html import escape

    def field(name: str, values: tuple[str, ...], hint: str) -> str:
        value = escape(",".join(values), quote=True)
        return (
            f'<label>{name} <input name="{name}" value="{value}" placeholder="{escape(hint, quote=True)}" '
            f'size="12"></label> '
        )

    form = (
        f'<form class="filters" id="job-filters" method="get" action="{escape(path, quote=True)}">'
        + field("group", query.groups, "any group")
        + field("user", query.users, "any user")
        + field("state", query.states, "e.g. RUNNING,QUEUED")
        + field("dag", query.dags, "any DAG")
        + f'<input type="hidden" name="sort" value="{escape(query.sort, quote=True)}">'
        + '<button type="submit">Filter</button></form>'
    )
    first = page.offset + 1 if page.rows else 0
    of = "" if page.total is None else f" of {page.total}"
    links = [f'<span id="job-count">jobs {first}–{page.offset + len(page.rows)}{of}</span>']
    if page.previous_offset is not None:
        href = escape(f"{path}?{query.params(offset=page.previous_offset)}", quote=True)
        links.append(f'<a rel="prev" id="jobs-prev" href="{href}">previous</a>')
    if page.next_offset is not None:
        href = escape(f"{path}?{query.params(offset=page.next_offset)}", quote=True)
        links.append(f'<a rel="next" id="jobs-next" href="{href}">next</a>')
    return f'<nav class="pager" id="jobs-nav">{form}<p>{" · ".join(links)}</p></nav>'
