"""Server-rendered HTML of the GPU Jobs pages: inline CSS, inline SVG, two small inline scripts.

Pure functions from view models to strings; every value is escaped. Links are given relative to
Airflow's root and prefixed with ``base`` (Airflow's base URL path, empty by default). The pages refresh
themselves: the script fetches the page again every few seconds and swaps its ``<main>``, keeping the
scroll position; without scripts (a sandboxed frame) the page is simply static. They look like Airflow 3's
own UI and follow its light or dark mode (``theme.py``: the colours as CSS custom properties, and the
script in ``<head>`` that reads Airflow's setting before the page is painted). The values are printed
for people here (``display.py``: ``19s``, kubectl's ``1/2``); the JSON API keeps them typed.

Actions that destroy or pause work (Stop, Cancel) ask for confirmation in the page itself, with a
``<details>`` element that opens a second button: Airflow shows plugin pages in an ``<iframe>`` whose
sandbox has no ``allow-modals`` (``allow-scripts allow-same-origin allow-forms allow-downloads`` in
Airflow 3.3's ``ui/src/pages/Iframe.tsx`` caller), so ``confirm()`` returns false at once there and a
form guarded by it would never post. ``<details>`` needs no script at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from html import escape

from airflow_jobs_plugin.jobs.labels import GPU_RESOURCE
from airflow_jobs_plugin.plugin import svg, theme
from airflow_jobs_plugin.readmodel import display, views
from airflow_jobs_plugin.readmodel.listing import queue_query
from airflow_jobs_plugin.readmodel.nodes import HIDDEN, NodeView, node_lines, totals_line
from airflow_jobs_plugin.readmodel.views import PREFIX, JobDetail, JobRow, Overview

REFRESH_SECONDS = 5
NOTICE_MAX = 300  # characters of an action's one-line answer carried back to the job page

_CSS = (
    theme.css()
    + """
body { font: 14px/1.5 var(--font-body); margin: 0; padding: 12px 20px; background: var(--bg); color: var(--fg); }
a { color: var(--fg-info); }
header { display: flex; gap: 16px; align-items: baseline; border-bottom: 1px solid var(--border); }
header h1 { font-size: 18px; font-weight: 600; margin: 4px 0 8px; }
header a, header span { color: var(--fg-muted); font-size: 12px; }
h2 { font-size: 16px; font-weight: 600; margin: 24px 0 8px; }
h3 { font-size: 14px; font-weight: 600; margin: 12px 0 4px; }
table { border-collapse: collapse; width: 100%; margin-bottom: 4px; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--border); vertical-align: top; }
th { font-size: 12px; color: var(--fg-muted); font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.user td:first-child { padding-left: 24px; color: var(--fg-muted); }
.badge { display: inline-block; padding: 0 8px; border-radius: 9999px; color: var(--on-solid); font-size: 12px;
  font-weight: 500; background: var(--state-none); }
.msg { color: var(--fg-muted); font-size: 12px; }
.problem { background: var(--bg-warning); padding: 4px 8px; border-radius: 6px; margin: 4px 0; }
/* Two charts a row wherever two fit at 400 px (Airflow's frame on a laptop), one below; never three, so
   four groups read as a square and two fill the row. */
.charts { display: grid; gap: 16px;
  grid-template-columns: repeat(auto-fit, minmax(max(min(100%, 400px), calc((100% - 16px) / 2)), 1fr)); }
.charts figure { margin: 0; min-width: 0; }
.charts figcaption { font-size: 12px; color: var(--fg-muted); }
.charts svg { display: block; width: 100%; height: auto; }
.chart-placeholder .box { aspect-ratio: 640 / 180; border-radius: 6px; display: flex; align-items: center;
  justify-content: center; font-size: 12px; color: var(--fg-muted);
  background: linear-gradient(90deg, var(--bg-muted) 30%, var(--bg-subtle) 50%, var(--bg-muted) 70%);
  background-size: 300% 100%; animation: shimmer 1.6s linear infinite; }
@keyframes shimmer { from { background-position: 100% 0; } to { background-position: 0 0; } }
@media (prefers-reduced-motion: reduce) { .chart-placeholder .box { animation: none; } }
#chart-tip { position: fixed; z-index: 10; pointer-events: none; padding: 4px 8px; border-radius: 6px;
  font-size: 12px; background: var(--fg); color: var(--bg); white-space: nowrap; display: none; }
svg g.point:hover rect { fill: var(--fg-muted) !important; fill-opacity: 0.15; }
svg.state-timeline g[data-state]:hover rect.stretch { stroke: var(--fg); stroke-width: 1; }
svg text { fill: var(--fg-muted); }
pre.log { background: var(--bg-muted); padding: 6px 8px; max-height: 240px; overflow: auto; font: 12px/1.5 var(--font-mono);
  margin: 0; border-radius: 6px; }
.actions { display: flex; gap: 12px; align-items: flex-start; margin: 8px 0; }
.actions form { margin: 0; }
.actions summary { list-style: none; }
.actions summary::-webkit-details-marker { display: none; }
.act { color: var(--on-solid); border: 0; padding: 4px 12px; border-radius: 6px; cursor: pointer; font: inherit;
  font-weight: 500; display: inline-block; }
.act.cancel { background: var(--danger); }
.act.stop { background: var(--warning); }
.act.resume { background: var(--brand); }
.confirm-box { margin-top: 6px; padding: 6px 8px; border: 1px solid var(--border); border-radius: 6px; max-width: 420px;
  background: var(--bg-subtle); }
.confirm-box p { margin: 0 0 6px; }
.notice { background: var(--bg-info); padding: 4px 8px; border-radius: 6px; margin: 8px 0; }
nav.pager { margin: 16px 0 4px; }
nav.pager p { margin: 6px 0 0; font-size: 12px; color: var(--fg-muted); }
form.filters { display: flex; flex-wrap: wrap; gap: 8px 12px; align-items: flex-end; }
form.filters label { display: flex; flex-direction: column; gap: 2px; font-size: 12px; color: var(--fg-muted);
  font-weight: 500; }
form.filters input { font: 14px/1.5 var(--font-body); color: var(--fg); background: var(--bg); padding: 3px 8px;
  border: 1px solid var(--border); border-radius: 6px; width: 12em; }
form.filters input::placeholder { color: var(--fg-muted); opacity: 0.8; }
form.filters input:focus { outline: 2px solid var(--brand); outline-offset: -1px; border-color: var(--brand); }
form.filters button { font: inherit; font-weight: 500; color: var(--on-solid); background: var(--brand); border: 0;
  border-radius: 6px; padding: 4px 14px; cursor: pointer; }
dl.fields { display: grid; grid-template-columns: max-content auto; gap: 2px 16px; margin: 8px 0; }
dl.fields dt { color: var(--fg-muted); }
dl.fields dd { margin: 0; }
"""
    + "".join(
        f'.badge[data-state="{state}"] {{ background: {theme.state_var(state)}; }}\n'
        for state in theme.JOB_STATE_AS_AIRFLOW
    )
)

_SCRIPT = """
(function () {
  var seconds = %d;
  function refresh() {
    // Never swap the page under a user who is confirming an action.
    if (document.hidden || document.querySelector("details.confirm[open]")) { return; }
    fetch(window.location.href, {credentials: "same-origin", headers: {"Accept": "text/html"}})
      .then(function (r) { if (!r.ok) { throw new Error(r.status); } return r.text(); })
      .then(function (text) {
        var fresh = new DOMParser().parseFromString(text, "text/html").querySelector("main");
        var main = document.querySelector("main");
        if (fresh && main) { var y = window.scrollY; main.replaceWith(fresh); window.scrollTo(0, y); }
        if (tip) { tip.style.display = "none"; }  // what it described was replaced; the next move shows anew
        document.body.dataset.refreshed = new Date().toISOString();
      })
      .catch(function (e) { document.body.dataset.refreshError = String(e); });
  }
  window.setInterval(refresh, seconds * 1000);
  // A chart's values on hover at once, beside the pointer: the SVG <title> each step and stretch carries
  // (what a page without scripts, or a screen reader, gets) is moved into a tooltip of the page's own,
  // as the browser's native one shows only after a delay and away from the chart.
  var tip = document.createElement("div");
  tip.id = "chart-tip";
  tip.setAttribute("role", "tooltip");
  document.body.appendChild(tip);
  function tipped(target) {
    var g = target.closest && target.closest("svg g.point, svg.state-timeline g[data-state]");
    if (!g) { return null; }
    var title = g.querySelector(":scope > title");
    if (title) { g.dataset.tip = title.textContent; g.setAttribute("aria-label", title.textContent); title.remove(); }
    return g.dataset.tip ? g : null;
  }
  document.addEventListener("mousemove", function (event) {
    var g = tipped(event.target);
    if (!g) { tip.style.display = "none"; return; }
    tip.textContent = g.dataset.tip;
    tip.style.display = "block";
    var x = Math.min(event.clientX + 12, window.innerWidth - tip.offsetWidth - 4);
    var y = event.clientY + 16 + tip.offsetHeight > window.innerHeight ? event.clientY - tip.offsetHeight - 8 : event.clientY + 16;
    tip.style.left = Math.max(x, 4) + "px";
    tip.style.top = y + "px";
  });
  document.documentElement.addEventListener("mouseleave", function () { tip.style.display = "none"; });
  // Links into Airflow's own UI: inside Airflow's frame, let its router navigate the whole page.
  document.addEventListener("click", function (event) {
    var link = event.target.closest && event.target.closest("a.airflow");
    if (!link || window.parent === window) { return; }
    try {
      window.parent.history.pushState({}, "", link.getAttribute("href"));
      window.parent.dispatchEvent(new PopStateEvent("popstate"));
      event.preventDefault();
    } catch (e) { /* a frame of another origin: follow the link here */ }
  });
})();
"""


def _e(value: object) -> str:
    return escape("" if value is None else str(value))


def _cell(value: object) -> str:
    return "<td>&lt;none&gt;</td>" if value is None or value == "" else f"<td>{_e(value)}</td>"


def _num(value: object) -> str:
    return f'<td class="num">{"-" if value is None else _e(value)}</td>'


def badge(state: str) -> str:
    """A job state as a badge in the colour of the Airflow task state it resembles (``theme.py``)."""
    return f'<span class="badge state" data-state="{_e(state)}">{_e(state)}</span>'


def page(title: str, body: str, *, base: str = "", refresh: int | None = REFRESH_SECONDS) -> str:
    """A whole document: header with navigation, ``body`` inside ``<main>``, the refresh script."""
    script = f"<script>{_SCRIPT % refresh}</script>" if refresh else ""
    return (
        "<!DOCTYPE html>"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{_CSS}</style><script>{theme.COLOR_MODE_SCRIPT}</script></head><body>"
        f'<header><h1>{_e(title)}</h1><a href="{_e(base + PREFIX)}/">GPU Jobs overview</a>'
        f'<a href="{_e(base + PREFIX)}/nodes">Nodes</a>'
        f'<a href="{_e(base + PREFIX)}/api/overview">JSON</a></header>'
        f"<main>{body}</main>{script}</body></html>"
    )


def _airflow_link(base: str, href: str | None, text: str) -> str:
    if not href:
        return _e(text) if text else "&lt;none&gt;"
    return f'<a class="airflow" href="{_e(base + href)}">{_e(text)}</a>'


def pools_section(ov: Overview) -> str:
    """Pools: a line per group, then its devices and users. The cohort columns appear only when a
    group is in a cohort, recent usage only for a fair_share group (as in ``text.pools_table``)."""
    cohorts = any(p.cohort for p in ov.pools)
    fair = any(u.recent_gpus is not None for p in ov.pools for u in p.users)
    rows = []

    def cells(
        quota: object, most: object, used: object, recent: str, free: object, lending: str, queued: str
    ) -> str:
        return (
            _num(quota)
            + (_num(most) if cohorts else "")
            + _num(used)
            + (f'<td class="num recent">{_e(recent)}</td>' if fair else "")
            + _num(free)
            + (lending if cohorts else "")
            + queued
        )

    for pool in ov.pools:
        lending = (
            f'<td class="cohort">{_e(pool.cohort)}</td>{_num(pool.borrowed)}{_num(pool.lent)}'
            if pool.cohort
            else "<td></td><td></td><td></td>"
        )
        rows.append(
            f'<tr class="pool" data-group="{_e(pool.group)}" data-cohort="{_e(pool.cohort)}">'
            f"<td><b>{_e(pool.group)}</b></td><td></td><td>{_e(GPU_RESOURCE)}</td>"
            + cells(
                pool.quota,
                pool.most,
                pool.used,
                "",
                pool.free,
                lending,
                f"{_num(pool.queued_jobs)}{_num(pool.queued_gpus)}",
            )
            + "</tr>"
        )
        for device in pool.devices:
            rows.append(
                f'<tr class="device" data-group="{_e(pool.group)}" data-resource="{_e(device.resource)}">'
                f"<td>{_e(pool.group)}</td><td></td><td>{_e(device.resource)}</td>"
                + cells(
                    device.quota,
                    "",
                    device.used,
                    "",
                    device.free,
                    "<td></td><td></td><td></td>",
                    "<td></td><td></td>",
                )
                + "</tr>"
            )
        for user in pool.users:
            rows.append(
                f'<tr class="user" data-group="{_e(pool.group)}" data-user="{_e(user.user)}">'
                f"<td>{_e(pool.group)}</td><td>{_e(user.user)}</td><td></td>"
                + cells(
                    user.limit,
                    "",
                    user.gpus,
                    display.recent_gpus(user.recent_gpus),
                    "",
                    "<td></td><td></td><td></td>",
                    f"{_num(user.queued_jobs)}{_num(user.queued_gpus)}",
                )
                + "</tr>"
            )
        if pool.more_users:
            rows.append(
                f'<tr class="more-users" data-group="{_e(pool.group)}"><td>{_e(pool.group)}</td>'
                f'<td class="msg" colspan="20">+{pool.more_users} more users</td></tr>'
            )
    if not rows:
        return '<section id="pools"><h2>Pools</h2><p class="msg">no quota pools</p></section>'
    head = (
        "<tr><th>group</th><th>user</th><th>device</th><th class=num>quota</th>"
        + (
            '<th class=num title="the most GPUs the group may hold, borrowing included">most</th>'
            if cohorts
            else ""
        )
        + "<th class=num>used GPUs</th>"
        + (
            '<th class=num title="recent usage in GPUs, which orders a fair_share queue">recent GPUs</th>'
            if fair
            else ""
        )
        + "<th class=num>free</th>"
        + (
            '<th>cohort</th><th class=num title="GPUs held above its quota, lent by the cohort">borrowed</th>'
            '<th class=num title="GPUs of its quota that other groups of the cohort hold">lent</th>'
            if cohorts
            else ""
        )
        + "<th class=num>queued jobs</th><th class=num>queued GPUs</th></tr>"
    )
    return f'<section id="pools"><h2>Pools</h2><table>{head}{"".join(rows)}</table></section>'


def queues_section(ov: Overview, base: str = "") -> str:
    parts = ['<section id="queues"><h2>Queues</h2>']
    if not ov.queues:
        parts.append('<p class="msg">no job is waiting</p>')
    for queue in ov.queues:
        # Every waiting job the reader may see, those listed and those left out (listing.bounded).
        waiting = len(queue.entries) + queue.more
        rows = "".join(
            f'<tr class="queued" data-job="{_e(e.name)}" data-reason="{_e(e.reason)}">'
            f'{_num(e.position)}<td><a href="{_e(base + e.detail_url)}">{_e(e.name)}</a></td>'
            f"<td>{_e(e.user)}</td>{_num(e.gpus)}{_num(e.priority)}<td>{_e(e.reason)}</td>"
            f'<td>{_e(display.age(e.waiting_seconds))}</td><td class="msg">{_e(e.message)}</td></tr>'
            for e in queue.entries
        )
        parts.append(
            f'<h3 data-group="{_e(queue.group)}">{_e(queue.group)} <span class="msg count" '
            f'data-waiting="{waiting}">{waiting} waiting</span></h3><table><tr><th class=num>position</th>'
            "<th>job</th><th>user</th><th class=num>GPUs</th><th class=num>priority</th><th>reason</th>"
            f"<th>waiting</th><th>message</th></tr>{rows}</table>"
        )
        if queue.more:
            # The rest of a long queue is a page of the job list away, not thousands of rows above the charts.
            href = f"{base}{PREFIX}/?{queue_query(queue.group).params()}#jobs"
            parts.append(
                f'<p class="msg more" data-group="{_e(queue.group)}">+{queue.more} more waiting: '
                f'<a href="{_e(href)}">the whole queue in the job list</a></p>'
            )
    parts.append("</section>")
    return "".join(parts)


def charts_section(ov: Overview, *, pending: bool = False) -> str:
    """A usage chart per group; while they are still being read (``pending``: the newest page after a
    start, before every job was read), a placeholder per pool in their place, which the page's own
    refresh replaces with the charts."""
    if pending and not ov.charts:
        groups = [p.group for p in ov.pools] or [""]
        figures = "".join(
            f'<figure class="chart-placeholder" data-group="{_e(g)}"><figcaption>'
            f"{_e(g + ': ' if g else '')}GPUs held</figcaption>"
            '<div class="box">reading the jobs&rsquo; GPU time&hellip;</div></figure>'
            for g in groups
        )
        return (
            '<section id="usage" aria-busy="true"><h2>GPU usage</h2><p class="msg" id="usage-loading">'
            "The charts need every job's admission and end: they appear here once those are read, "
            f'in a few seconds.</p><div class="charts">{figures}</div></section>'
        )
    figures = "".join(
        f"<figure><figcaption>{_e(c.group)}: GPUs held since {c.start.strftime('%H:%M')} UTC "
        f"(peak {c.peak})</figcaption>"
        f"{svg.usage_chart(c)}</figure>"
        for c in ov.charts
    )
    empty = "" if figures else '<p class="msg">no group holds or held GPUs</p>'
    return f'<section id="usage"><h2>GPU usage</h2>{empty}<div class="charts">{figures}</div></section>'


def _queue_cell(j: JobRow) -> str:
    """Where the job waits: the product's pool, or Kueue's LocalQueue (and the ClusterQueue that took it)."""
    if not j.kueue_queue:
        return "pool"
    text = f"Kueue {_e(j.kueue_queue)}"
    return text + (f" &rarr; {_e(j.cluster_queue)}" if j.cluster_queue else "")


def _gpus_cell(j: JobRow) -> str:
    """The count, and the device under it unless whole NVIDIA GPUs (the column's header says GPUs)."""
    device = "" if j.device == GPU_RESOURCE else f'<div class="msg device">{_e(j.device)}</div>'
    return f'<td class=num data-device="{_e(j.device)}">{_e(j.gpus)}{device}</td>'


def job_rows(rows: Sequence[JobRow], base: str = "") -> str:
    out = []
    for j in rows:
        task = _airflow_link(base, j.task_url, j.task_id or "")
        run = _airflow_link(base, j.dag_run_url, f"{j.dag_id} / {j.run_id}" if j.dag_id else "")
        out.append(
            f'<tr class="job" data-job="{_e(j.name)}" data-state="{_e(j.state)}">'
            f'<td><a href="{_e(base + j.detail_url)}">{_e(j.name)}</a><div class="msg">{_e(j.kind)}</div></td>'
            f"<td>{badge(j.state)}</td><td>{_e(j.reason)}<div class=msg>{_e(j.message)}</div></td>"
            f"<td>{_e(j.group)}</td><td>{_e(j.user)}</td><td>{_queue_cell(j)}</td>{_gpus_cell(j)}{_num(j.attempt)}"
            f"<td>{_e(display.age(j.age_seconds))}</td>"
            f"<td>{run}</td><td>{task}</td></tr>"
        )
    return "".join(out)


def jobs_section(ov: Overview, base: str = "") -> str:
    if not ov.jobs:
        return '<section id="jobs"><h2>Jobs</h2><p class="msg">no jobs</p></section>'
    head = (
        "<tr><th>job</th><th>state</th><th>reason</th><th>group</th><th>user</th><th>queue</th><th class=num>GPUs</th>"
        "<th class=num>attempt</th><th>age</th><th>DAG run</th><th>task</th></tr>"
    )
    return f'<section id="jobs"><h2>Jobs</h2><table>{head}{job_rows(ov.jobs, base)}</table></section>'


def overview_page(ov: Overview, *, base: str = "", jobs_nav: str = "", charts_pending: bool = False) -> str:
    """The overview: problems, pools, queues, usage charts, jobs (``jobs_nav``: the job list's filter
    form and pager, rendered by :func:`airflow_jobs_plugin.readmodel.listing.pager_html`;
    ``charts_pending``: the charts are still being read, see :func:`charts_section`)."""
    problems = "".join(f'<div class="problem">{_e(p)}</div>' for p in ov.problems)
    body = (
        problems
        + pools_section(ov)
        + queues_section(ov, base)
        + charts_section(ov, pending=charts_pending)
        + jobs_nav
        + jobs_section(ov, base)
    )
    return page("GPU Jobs", body, base=base)


def nodes_page(view: NodeView, *, base: str = "") -> str:
    """The node view: a line per node (its GPU product, and each device it offers: offered, used, free),
    then one per job holding one of its devices."""
    rows = []

    def stacked(values: Sequence[object], num: bool = True) -> str:
        # A node offering two devices (whole GPUs and MIG slices) lists them one under the other, never added.
        cells = "".join(f"<div>{_e(v)}</div>" for v in values)
        return f'<td class="num">{cells}</td>' if num else f"<td>{cells}</td>"

    for node in node_lines(view):
        state = ("Ready" if node.ready else "NotReady") + ("" if node.schedulable else ", SchedulingDisabled")
        devices = node.devices
        rows.append(
            f'<tr class="node" data-node="{_e(node.name)}" data-product="{_e(node.product or "")}" '
            f'data-devices="{_e(" ".join(d.device for d in devices))}">'
            f"<td><b>{_e(node.name)}</b></td><td>{_e(state)}</td>"
            f'<td class="product">{_e(node.product) if node.product else _e(display.NONE)}</td>'
            + stacked([d.device for d in devices], num=False)
            + stacked([d.gpus for d in devices])
            + stacked([d.used for d in devices])
            + stacked([d.free for d in devices])
            + "<td></td><td></td><td></td></tr>"
        )
        for h in (h for d in devices for h in d.holders):
            job = (
                f'<a href="{_e(base + views.job_url(h.namespace, h.job))}">{_e(h.job)}</a>'
                if h.product and h.job != HIDDEN
                else _e(h.job)
                + ("" if h.product else ' <span class="msg">(not a GPU job of this product)</span>')
            )
            rows.append(
                f'<tr class="holder" data-node="{_e(node.name)}" data-device="{_e(h.device)}" '
                f'data-job="{_e(h.job)}"><td></td><td></td><td></td><td class="msg">{_e(h.device)}</td><td></td>'
                f"{_num(h.gpus)}<td></td><td>{_e(h.namespace)}/{job}</td><td>{_e(h.user or '')}</td>"
                f"<td>{_e(h.group or '')}</td></tr>"
            )
    problem = f'<div class="problem">{_e(view.problem)}</div>' if view.problem else ""
    summary = f'<p class="msg" id="totals">{_e(totals_line(view))}</p>'
    head = (
        "<tr><th>node</th><th>status</th><th>GPU product</th><th>device</th><th class=num>offered</th>"
        "<th class=num>used</th><th class=num>free</th><th>job</th><th>user</th><th>group</th></tr>"
    )
    table = f"<table>{head}{''.join(rows)}</table>" if rows else '<p class="msg">no node offers GPUs</p>'
    return page("GPU nodes", f'{problem}<section id="nodes">{summary}{table}</section>', base=base)


_CONFIRM = {
    "stop": (
        "Stop job",
        "Stopping deletes the job's pods and frees its GPUs and its quota. Its task waits (STOPPED) until "
        "you resume the job, which queues it again at its original place and runs it from the start.",
        "Yes, stop it",
    ),
    "cancel": (
        "Cancel job",
        "Cancelling deletes the job and its pods and ends its task as CANCELLED; no retry runs it again "
        "(only clearing the task does).",
        "Yes, cancel it",
    ),
}


def action_buttons(d: JobDetail, base: str) -> str:
    """Stop / Resume / Cancel for the actions that apply now; Stop and Cancel confirm in the page."""
    parts = []
    for action in d.actions:
        url = _e(f"{base}{d.job.detail_url}/{action}")
        if action == "resume":
            parts.append(
                f'<form method="post" action="{url}"><button class="act resume" type="submit" '
                'data-action="resume">Resume job</button></form>'
            )
            continue
        label, warning, confirm = _CONFIRM[action]
        parts.append(
            f'<details class="confirm" data-action="{action}"><summary class="act {action}" '
            f'role="button">{label}</summary><div class="confirm-box"><p>{_e(warning)}</p>'
            f'<form method="post" action="{url}"><button class="act {action}" type="submit" '
            f'data-confirm="{action}">{confirm}</button></form></div></details>'
        )
    return f'<div class="actions">{"".join(parts)}</div>' if parts else ""


def attempts_section(d: JobDetail, base: str = "") -> str:
    """Every attempt of the task try: state, reason, times, exit codes, nodes, GPU-seconds."""
    rows = []
    for a in d.attempts:
        current = ' class="current"' if a.name == d.job.name else ""
        codes = ", ".join(f"{k}={v}" for k, v in sorted(a.exit_codes.items()))
        times = [t.strftime("%Y-%m-%d %H:%M:%S") if t else "-" for t in (a.started_at, a.finished_at)]
        rows.append(
            f'<tr{current} data-attempt="{a.attempt}"><td>{a.attempt}</td>'
            f'<td><a href="{_e(base + a.detail_url)}">{_e(a.name)}</a></td><td>{badge(a.state)}</td>'
            f"<td>{_e(a.reason)}<div class=msg>{_e(a.message)}</div></td><td>{times[0]}</td><td>{times[1]}</td>"
            f"<td>{_e(codes)}</td><td>{_e(', '.join(a.nodes))}</td>{_num(round(a.gpu_seconds))}</tr>"
        )
    return (
        '<section id="attempts"><h2>Attempts</h2><table><tr><th class=num>#</th><th>job</th><th>state</th>'
        "<th>reason</th><th>started (UTC)</th><th>finished (UTC)</th><th>exit codes</th><th>nodes</th>"
        f"<th class=num>GPU-seconds</th></tr>{''.join(rows)}</table></section>"
    )


def job_page(d: JobDetail, *, base: str = "", can_act: bool = False, notice: str | None = None) -> str:
    """A job: what the last action did, fields, Stop / Resume / Cancel, timeline, replicas, events, logs."""
    j = d.job
    fields = [
        ("state", badge(j.state) + f" {_e(j.reason)}"),
        ("message", _e(j.message)),
        ("kind", _e(j.kind)),
        ("namespace", _e(j.namespace)),
        ("group / user", f"{_e(j.group)} / {_e(j.user)}"),
        ("queue", _queue_cell(j)),
        ("GPUs", _e(j.gpus)),
        ("attempt", _e(j.attempt)),
        ("requeues", _e(j.requeue_count)),
        ("pod failures", _e(j.pod_failures)),
        ("queue position", _e(j.queue_position) if j.queue_position is not None else "-"),
        ("age", _e(display.age(j.age_seconds))),
        ("DAG run", _airflow_link(base, j.dag_run_url, f"{j.dag_id} / {j.run_id}" if j.dag_id else "")),
        ("task", _airflow_link(base, j.task_url, j.task_id or "")),
    ]
    parts = [f'<div class="notice" id="notice">{_e(notice)}</div>'] if notice else []
    parts += [
        '<section id="summary"><dl class="fields">',
        "".join(f'<dt>{k}</dt><dd data-field="{k}">{v}</dd>' for k, v in fields),
        "</dl>",
    ]
    if can_act:
        parts.append(action_buttons(d, base))
    parts.append("</section>")
    parts.append(attempts_section(d, base))
    parts.append('<section id="timeline"><h2>Timeline</h2>')
    # A live job's last stretch runs up to when the cluster was read.
    drawn_at = d.snapshot.observed_at or j.created_at or datetime.now(timezone.utc)
    parts.append(svg.state_timeline(d.phases, drawn_at))
    parts.append("<table><tr><th>time (UTC)</th><th>what</th><th>detail</th></tr>")
    parts.extend(
        f"<tr><td>{e.at.strftime('%Y-%m-%d %H:%M:%S')}</td><td>{_e(e.label)}</td><td class=msg>{_e(e.detail)}</td></tr>"
        for e in d.timeline
    )
    parts.append("</table></section>")
    parts.append(
        '<section id="replicas"><h2>Replicas</h2><table><tr><th>replica</th><th class=num>rank</th><th>pod</th>'
        "<th>ready</th><th>status</th><th>restarts</th><th>age</th><th>node</th><th>message</th></tr>"
    )
    parts.extend(
        f'<tr class="replica" data-replica="{_e(r.replica)}" data-status="{_e(r.status or display.NONE)}"><td>{_e(r.replica)}</td>'
        f"{_num(r.rank)}{_cell(r.pod)}<td>{_e(display.ready(r))}</td>{_cell(r.status)}<td>{_e(r.restarts_column)}</td>"
        f"<td>{_e(display.replica_age(r))}</td>{_cell(r.node)}<td class=msg>{_e(r.message)}</td></tr>"
        for r in d.replicas
    )
    parts.append("</table></section>")
    parts.append(
        '<section id="events"><h2>Events</h2><table><tr><th>type</th><th>reason</th><th>age</th>'
        "<th>from</th><th>message</th></tr>"
    )
    parts.extend(
        f'<tr class="event" data-reason="{_e(e.reason)}"><td>{_e(e.type)}</td><td>{_e(e.reason)}</td>'
        f"<td>{_e(display.age(e.age_seconds))}</td><td>{_e(e.object)}</td><td class=msg>{_e(e.message)}</td></tr>"
        for e in d.events
    )
    parts.append("</table></section>")
    parts.append('<section id="logs"><h2>Logs</h2>')
    if not d.logs:
        # A job that ran and was stopped or cancelled has had its pods deleted, and their logs with them.
        ran = any(a.started_at is not None for a in d.attempts if a.name == j.name) or d.snapshot.started_at
        gone = "its pods are gone, and their logs with them (the Timeline shows when it ran)"
        parts.append(f'<p class="msg">{gone if ran else "no pod has started yet"}</p>')
    for tail in d.logs:
        text = _e(f"cannot read the log: {tail.error}") if tail.error else _e("\n".join(tail.lines))
        parts.append(
            f'<h3 data-rank="{tail.rank}">{_e(tail.replica)} (rank {tail.rank}) '
            f'<span class="msg">{_e(tail.pod)}</span></h3><pre class="log" data-rank="{tail.rank}">{text}</pre>'
        )
    parts.append("</section>")
    return page(f"GPU job {j.name}", "".join(parts), base=base)


def message_page(title: str, message: str, *, base: str = "", refresh: int | None = REFRESH_SECONDS) -> str:
    """A page saying one thing (no job for this task yet, not found, not signed in)."""
    return page(title, f'<p class="msg" id="message">{_e(message)}</p>', base=base, refresh=refresh)
