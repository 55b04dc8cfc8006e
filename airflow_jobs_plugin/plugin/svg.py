"""Inline SVG charts for the GPU Jobs pages: GPU usage over time per group, a job's state timeline.

Pure string building (no I/O, nothing loaded from elsewhere): the pages embed the result as is. Colours
are the page's CSS custom properties (``theme.py``: Airflow's own palette and task-state colours), so a
chart repaints with the page when Airflow's light or dark mode changes; they are set with ``style``,
where ``var()`` is honoured, not as SVG presentation attributes.

Each chart says what it shows without a second look: a legend, values on its axes, and a ``<title>``
on every step and stretch (``09:05:00-09:12:30 UTC: 6 GPUs held (quota 8)``), which the page's script
shows in a tooltip beside the pointer on hover (``html.py``), and a page without scripts as the
browser's own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timedelta
from html import escape

from airflow_jobs_plugin.plugin.theme import state_var
from airflow_jobs_plugin.readmodel.views import Phase, UsageChart

_LEFT, _RIGHT, _TOP, _BOTTOM = 40, 12, 24, 30
_AXIS = "stroke: var(--border)"
_GRID = "stroke: var(--border); stroke-opacity: 0.6"
_HELD = state_var("RUNNING")  # GPUs held are GPUs of running jobs: the running state's colour
_USAGE = f"fill: {_HELD}; fill-opacity: 0.3; stroke: {_HELD}; stroke-width: 1.5"
_QUOTA = "stroke: var(--fg-error)"
_FONT = 'font-size="10"'
X_TICKS = 5  # time labels along a usage chart's axis, its start and end included


def _clock(moment: datetime) -> str:
    return moment.strftime("%H:%M")


def _time(moment: datetime) -> str:
    return moment.strftime("%H:%M:%S")


def _fmt(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _span(seconds: float) -> str:
    """``56s``, ``4m 10s``, ``2h 5m``: how long a stretch lasted."""
    whole = int(round(seconds))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m {whole % 60}s"
    return f"{whole // 3600}h {whole % 3600 // 60}m"


def _gpus(count: int) -> str:
    return f"{count} GPU" + ("" if count == 1 else "s")


def gpu_ticks(top: int) -> tuple[int, ...]:
    """The GPU counts labelled on a usage chart's axis: 0 to at least ``top`` in steps of 1, 2 or 5
    times a power of ten, at most six labels."""
    top = max(top, 1)
    step = 1
    for power in range(0, 7):
        for base in (1, 2, 5):
            step = base * 10**power
            if math.ceil(top / step) <= 5:
                return tuple(range(0, math.ceil(top / step) * step + 1, step))
    return (0, top)


def usage_chart(chart: UsageChart, width: int = 640, height: int = 180) -> str:
    """A step chart of the GPUs ``chart.group`` held, its quota as a dashed line, GPU and time values
    on the axes, a legend, and each step's values on hover."""
    span = max((chart.end - chart.start).total_seconds(), 1.0)
    ticks = gpu_ticks(max(chart.peak, chart.quota or 0))
    top = ticks[-1]
    inner_w = width - _LEFT - _RIGHT
    inner_h = height - _TOP - _BOTTOM
    right = width - _RIGHT

    def x(moment: datetime) -> float:
        offset = min(max((moment - chart.start).total_seconds(), 0.0), span)
        return _LEFT + inner_w * offset / span

    def y(gpus: float) -> float:
        return _TOP + inner_h * (1 - gpus / top)

    path = [f"M{_fmt(x(chart.start))},{_fmt(y(0))}"]
    for i, point in enumerate(chart.points):
        path.append(f"L{_fmt(x(point.at))},{_fmt(y(chart.points[i - 1].gpus if i else 0))}")
        path.append(f"L{_fmt(x(point.at))},{_fmt(y(point.gpus))}")
    last = chart.points[-1].gpus if chart.points else 0
    path.append(f"L{_fmt(x(chart.end))},{_fmt(y(last))}")
    path.append(f"L{_fmt(x(chart.end))},{_fmt(y(0))}Z")
    group = escape(chart.group)
    quota = "" if chart.quota is None else f" of a quota of {chart.quota}"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="usage-chart" data-group="{group}" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="GPUs held by group {group} over time">',
        f"<title>GPUs held by group {group} from {_clock(chart.start)} to {_clock(chart.end)} UTC, "
        f"peak {chart.peak}{quota}</title>",
    ]
    # The GPU axis: a value and a grid line per tick.
    for tick in ticks:
        parts.append(
            f'<g class="y-tick" data-gpus="{tick}"><line x1="{_LEFT}" y1="{_fmt(y(tick))}" x2="{right}" '
            f'y2="{_fmt(y(tick))}" style="{_GRID if tick else _AXIS}"/>'
            f'<text x="{_LEFT - 4}" y="{_fmt(y(tick) + 3)}" text-anchor="end" {_FONT}>{tick}</text></g>'
        )
    parts.append(f'<text x="{_LEFT - 4}" y="{_TOP - 12}" text-anchor="end" {_FONT}>GPUs</text>')
    # The time axis: evenly spaced clock times, the last one saying the zone.
    parts.append(f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{_fmt(y(0))}" style="{_AXIS}"/>')
    for i in range(X_TICKS):
        moment = chart.start + timedelta(seconds=span * i / (X_TICKS - 1))
        anchor = "start" if i == 0 else "end" if i == X_TICKS - 1 else "middle"
        zone = " UTC" if i == X_TICKS - 1 else ""
        parts.append(
            f'<g class="x-tick"><line x1="{_fmt(x(moment))}" y1="{_fmt(y(0))}" x2="{_fmt(x(moment))}" '
            f'y2="{_fmt(y(0) + 4)}" style="{_AXIS}"/><text x="{_fmt(x(moment))}" y="{_fmt(y(0) + 15)}" '
            f'text-anchor="{anchor}" {_FONT}>{_clock(moment)}{zone}</text></g>'
        )
    parts.append(f'<path class="usage" d="{" ".join(path)}" style="{_USAGE}"/>')
    if chart.quota is not None:
        parts.append(
            f'<line class="quota" x1="{_LEFT}" y1="{_fmt(y(chart.quota))}" x2="{right}" '
            f'y2="{_fmt(y(chart.quota))}" style="{_QUOTA}" stroke-dasharray="4 3"><title>quota: '
            f"{_gpus(chart.quota)}</title></line>"
        )
    # Each step: a band the height of the plot to hover anywhere over it, and a dot where it begins.
    for i, point in enumerate(chart.points):
        until = chart.points[i + 1].at if i + 1 < len(chart.points) else chart.end
        x0, x1 = x(point.at), x(until)
        label = escape(
            f"{_time(point.at)}-{_time(until)} UTC: {_gpus(point.gpus)} held"
            + ("" if chart.quota is None else f" (quota {chart.quota})")
        )
        parts.append(
            f'<g class="point" data-at="{point.at.isoformat()}" data-gpus="{point.gpus}"><title>{label}</title>'
            f'<rect x="{_fmt(x0)}" y="{_TOP}" width="{_fmt(max(x1 - x0, 2.0))}" height="{_fmt(inner_h)}" '
            f'style="fill: transparent"/><circle cx="{_fmt(x0)}" cy="{_fmt(y(point.gpus))}" r="2.5" '
            f'style="fill: {_HELD}"/></g>'
        )
    # The legend, above the plot on the right.
    legend = [
        f'<rect x="0" y="-7" width="12" height="8" style="{_USAGE}"/>'
        f'<text x="16" y="0" {_FONT}>GPUs held (peak {chart.peak})</text>'
    ]
    if chart.quota is not None:
        legend.append(
            f'<line x1="150" y1="-3" x2="166" y2="-3" style="{_QUOTA}" stroke-dasharray="4 3"/>'
            f'<text x="170" y="0" {_FONT} style="fill: var(--fg-error)">quota {chart.quota}</text>'
        )
    parts.append(f'<g class="legend" transform="translate({right - 230},{_TOP - 10})">{"".join(legend)}</g>')
    parts.append("</svg>")
    return "".join(parts)


def state_timeline(phases: Sequence[Phase], now: datetime, width: int = 640, height: int = 64) -> str:
    """A horizontal bar of the job's stretches coloured by state, the final state as a marker, the
    times at its ends, a legend of the states drawn, and each stretch's state, times and detail on
    hover."""
    if not phases:
        return ""
    start = phases[0].start
    # A finished job is drawn on its own span (its final state is a marker at the end); a live one up
    # to now, so it keeps growing.
    finished = phases[-1].end is None
    end = max(([] if finished else [now]) + [p.end or p.start for p in phases])
    span = max((end - start).total_seconds(), 1.0)
    inner_w = width - 2 * 8

    def x(moment: datetime) -> float:
        return 8 + inner_w * max((moment - start).total_seconds(), 0.0) / span

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="state-timeline" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="state timeline">'
    ]
    for phase in phases:
        color = state_var(phase.state)
        if phase.end is None:
            label = escape(f"{phase.state} at {_time(phase.start)} UTC: {phase.detail}")
            cx = x(phase.start)
            parts.append(
                f'<g data-state="{escape(phase.state)}"><title>{label}</title>'
                f'<circle cx="{_fmt(min(cx, width - 8))}" cy="14" r="6" style="fill: {color}"/></g>'
            )
            continue
        lasted = _span((phase.end - phase.start).total_seconds())
        label = escape(
            f"{phase.state} {_time(phase.start)}-{_time(phase.end)} UTC ({lasted}): {phase.detail}"
        )
        x0, x1 = x(phase.start), x(phase.end)
        w = max(x1 - x0, 2.0)
        parts.append(
            f'<g data-state="{escape(phase.state)}"><title>{label}</title>'
            f'<rect class="stretch" x="{_fmt(x0)}" y="6" width="{_fmt(w)}" height="16" rx="2" '
            f'style="fill: {color}"/>'
            + (f'<text x="{_fmt(x0 + 3)}" y="34" {_FONT}>{escape(phase.state)}</text>' if w > 70 else "")
            + "</g>"
        )
    parts.append(
        f'<text class="axis" x="8" y="{height - 18}" {_FONT}>{_time(start)}</text>'
        f'<text class="axis" x="{width - 8}" y="{height - 18}" text-anchor="end" {_FONT}>'
        f"{_time(end)} UTC</text>"
    )
    # The legend: each state drawn, once, in the order the job went through them.
    legend, offset = [], 8.0
    for state in dict.fromkeys(p.state for p in phases):
        legend.append(
            f'<g class="legend-entry" data-legend="{escape(state)}"><rect class="swatch" x="{_fmt(offset)}" '
            f'y="{height - 10}" width="10" height="8" rx="2" style="fill: {state_var(state)}"/>'
            f'<text x="{_fmt(offset + 13)}" y="{height - 3}" {_FONT}>{escape(state)}</text></g>'
        )
        offset += 13 + 6.5 * len(state) + 12
    parts.append(f'<g class="legend">{"".join(legend)}</g>')
    parts.append("</svg>")
    return "".join(parts)
