"""Filtering, sorting and paging an overview on the server: the query parameters of the GPU Jobs page,
``/api/overview|pools|queues|jobs`` and ``airflow-jobs status``. No I/O.

An overview is built once for everyone (it is the costly part, see ``plugin/state_cache.py``); each
request then narrows it here to what its reader may see (:func:`for_reader`) and asked for
(:func:`narrow`), and pages the job list (:func:`page_of`). Pools and charts are never narrowed by the
reader: quota is shared, so they count every job.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlencode

from .views import GroupQueue, JobRow, Overview

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
    "gpus": lambda r: r.gpus,
    "attempt": lambda r: r.attempt,
    "position": lambda r: (r.queue_position is None, r.queue_position or 0),
}
DEFAULT_SORT = "-created"


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
    total: int
    offset: int
    limit: int

    @property
    def next_offset(self) -> int | None:
        return self.offset + self.limit if self.offset + self.limit < self.total else None

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
    links = [f'<span id="job-count">jobs {first}–{page.offset + len(page.rows)} of {page.total}</span>']
    if page.previous_offset is not None:
        href = escape(f"{path}?{query.params(offset=page.previous_offset)}", quote=True)
        links.append(f'<a rel="prev" id="jobs-prev" href="{href}">previous</a>')
    if page.next_offset is not None:
        href = escape(f"{path}?{query.params(offset=page.next_offset)}", quote=True)
        links.append(f'<a rel="next" id="jobs-next" href="{href}">next</a>')
    return f'<nav class="pager" id="jobs-nav">{form}<p>{" · ".join(links)}</p></nav>'
