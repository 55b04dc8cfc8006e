"""Inline SVG charts for the GPU Jobs pages: GPU usage over time per group, a job's state timeline.

Pure string building (no I/O, nothing loaded from elsewhere): the pages embed the result as is. Colours
are the page's CSS custom properties (``theme.py``), so a chart repaints with the page when Airflow's
light or dark mode changes; they are set with ``style``, where ``var()`` is honoured, not as SVG
presentation attributes.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from html import escape

from .theme import state_var
from .views import Phase, UsageChart

_LEFT, _RIGHT, _TOP, _BOTTOM = 36, 8, 10, 22
_AXIS = "stroke: var(--border)"
_USAGE = f"fill: {state_var('RUNNING')}; fill-opacity: 0.3; stroke: {state_var('RUNNING')}; stroke-width: 1.5"


def _clock(moment: datetime) -> str:
    return moment.strftime("%H:%M")


def _fmt(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def usage_chart(chart: UsageChart, width: int = 640, height: int = 160) -> str:
    """A step chart of the GPUs ``chart.group`` held, with its quota as a dashed line."""
    span = max((chart.end - chart.start).total_seconds(), 1.0)
    top = max(chart.peak, chart.quota or 0, 1)
    inner_w = width - _LEFT - _RIGHT
    inner_h = height - _TOP - _BOTTOM

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
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="usage-chart" data-group="{escape(chart.group)}" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="GPUs held by group {escape(chart.group)} over time">',
        f"<title>GPUs held by group {escape(chart.group)}, peak {chart.peak}</title>",
        f'<line x1="{_LEFT}" y1="{_fmt(y(0))}" x2="{width - _RIGHT}" y2="{_fmt(y(0))}" style="{_AXIS}"/>',
        f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{_fmt(y(0))}" style="{_AXIS}"/>',
        # GPUs held are GPUs of running jobs: the area takes the running state's colour.
        f'<path class="usage" d="{" ".join(path)}" style="{_USAGE}"/>',
        f'<text x="{_LEFT - 4}" y="{_fmt(y(top) + 4)}" text-anchor="end" font-size="10">{top}</text>',
        f'<text x="{_LEFT - 4}" y="{_fmt(y(0))}" text-anchor="end" font-size="10">0</text>',
        f'<text x="{_LEFT}" y="{height - 6}" font-size="10">{_clock(chart.start)}</text>',
        f'<text x="{width - _RIGHT}" y="{height - 6}" text-anchor="end" font-size="10">'
        f"{_clock(chart.end)} UTC</text>",
    ]
    if chart.quota is not None:
        parts.append(
            f'<line class="quota" x1="{_LEFT}" y1="{_fmt(y(chart.quota))}" x2="{width - _RIGHT}" '
            f'y2="{_fmt(y(chart.quota))}" style="stroke: var(--fg-error)" stroke-dasharray="4 3"/>'
            f'<text x="{width - _RIGHT}" y="{_fmt(y(chart.quota) - 3)}" text-anchor="end" font-size="10" '
            f'style="fill: var(--fg-error)">quota {chart.quota}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def state_timeline(phases: Sequence[Phase], now: datetime, width: int = 640, height: int = 44) -> str:
    """A horizontal bar of the job's stretches coloured by state; the final state as a marker."""
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
        label = escape(f"{phase.state} {phase.start.strftime('%H:%M:%S')}: {phase.detail}")
        if phase.end is None:
            cx = x(phase.start)
            parts.append(
                f'<g data-state="{escape(phase.state)}"><title>{label}</title>'
                f'<circle cx="{_fmt(min(cx, width - 8))}" cy="14" r="6" style="fill: {color}"/></g>'
            )
            continue
        x0, x1 = x(phase.start), x(phase.end)
        w = max(x1 - x0, 2.0)
        parts.append(
            f'<g data-state="{escape(phase.state)}"><title>{label}</title>'
            f'<rect x="{_fmt(x0)}" y="6" width="{_fmt(w)}" height="16" rx="2" style="fill: {color}"/>'
            + (
                f'<text x="{_fmt(x0 + 3)}" y="36" font-size="10">{escape(phase.state)}</text>'
                if w > 50
                else ""
            )
            + "</g>"
        )
    parts.append("</svg>")
    return "".join(parts)
