"""Run every benchmark and write ``docs/benchmarks.md`` (its results section) and ``docs/benchmarks.svg``.

Run: ``scripts/bench`` (or ``.venv/bin/python tests/benchmarks/run.py``). Options: ``--n 100 1000 5000``
(tracking sizes), ``--skip-admission``, ``--skip-tracking``, ``--startup 5000=600`` (plan for a slower
simulator start-up than extrapolated), ``--raw results.json`` (keep every figure), ``--from results.json``
(rewrite the report from a saved run without measuring again).

The results section of ``docs/benchmarks.md`` lies between two marker comments; the prose around it
(method, findings) is kept as it is.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from typing import Any

from bench_admission import run_admission
from bench_tracking import run_tracking, startup_estimate
from benchlib import ROOT, machine

DOC = ROOT / "docs" / "benchmarks.md"
SVG = ROOT / "docs" / "benchmarks.svg"
START = "<!-- results:start (written by tests/benchmarks/run.py) -->"
END = "<!-- results:end -->"

TARGET_REQUESTS = 2.0
TARGET_LATENCY = 1.0
TARGET_RATIO = 100.0


def _f(value: Any, digits: int = 2, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value != 0 and abs(value) < 10**-digits:
            return f"{value:.1e}{unit}"
        return f"{value:.{digits}f}{unit}"
    return f"{value}{unit}"


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f} s" if value >= 1 else f"{value * 1000:.0f} ms"


def _ratio(r: dict | None) -> str:
    if not r or r.get("value") is None:
        return "-"
    basis = f" (against {r['basis']}: no request in its window)" if r.get("basis") else ""
    return ("≥ " if r.get("lower_bound") else "") + f"{r['value']:,.0f}×" + basis


def nominal_ratio(r: dict) -> dict | None:
    """The ratio had the cncf trigger kept its poll interval (N / interval requests per second)."""
    steady = r["ours"]["steady"]
    if not steady.get("seconds"):
        return None
    nominal = r["n"] / r["setup"]["poll_interval"]
    if steady["requests"] == 0:
        return {"value": nominal * steady["seconds"], "lower_bound": True}
    return {"value": nominal / (steady["requests"] / steady["seconds"]), "lower_bound": False}


def tracking_table(results: list[dict]) -> list[str]:
    rows = [
        "| N | trigger | API requests/s at steady state | CPU at steady state | CPU s (whole run) | peak RSS | "
        "state change → noticed p50 / p99 | Complete → final event p50 / p99 | events |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        o = r["ours"]
        lat = o["latency"]
        rows.append(
            f"| {r['n']:,} | JobTrigger | {_f(o['steady']['per_second'], 3)} "
            f"({o['steady']['requests']} in {o['steady']['seconds']:.0f} s) | "
            f"{_f((o['cpu_steady'] or 0) * 100, 1, ' %')} | {_f(o['cpu_seconds'], 1)} | "
            f"{o['peak_rss_mb']:.0f} MB | {_ms(lat['complete_noticed']['p50'])} / "
            f"{_ms(lat['complete_noticed']['p99'])} | {_ms(lat['final_event']['p50'])} / "
            f"{_ms(lat['final_event']['p99'])} | {o['events']:,}/{r['n']:,}"
            f"{' (stopped)' if o.get('capped') else ''} |"
        )
        c = r.get("cncf")
        if c:
            capped = r["setup"]["cncf_capped_after_window"]
            clat = c["latency"]["final_event"] if not capped else {"p50": None, "p99": None}
            note = " (stopped after its window)" if capped else ""
            crashed = c["statuses"].get("crashed", 0)
            if crashed:
                note += f"; {crashed:,} triggers crashed (TimeoutError)"
            rows.append(
                f"| {r['n']:,} | cncf KubernetesJobTrigger{note} | {_f(c['steady']['per_second'], 1)} "
                f"({c['steady']['requests']:,} in {c['steady']['seconds']:.0f} s) | "
                f"{_f((c['cpu_steady'] or 0) * 100, 1, ' %')} | {_f(c['cpu_seconds'], 1)} | "
                f"{c['peak_rss_mb']:.0f} MB | = final event | "
                f"{_ms(clat['p50'])} / {_ms(clat['p99'])} | {c['events'] - crashed:,}/{r['n']:,} |"
            )
    return rows


def tracking_details(results: list[dict]) -> list[str]:
    rows = [
        "| N | jobs running after | window A (ours alone) | window B (both) | cncf polls per job per s "
        "(nominal 0.1) | requests ratio cncf / ours, measured | at the nominal poll interval | "
        "our requests over the whole run | pod Running → RUNNING logged p50 / p99 | "
        "Complete → received by the watch p50 / p99 |",
        "|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in results:
        o, c = r["ours"], r.get("cncf") or {}
        lat = o["latency"]
        life = o["lifetime"]
        keys = ", ".join(f"{k} {v:,}" for k, v in life["by_key"].items())
        rows.append(
            f"| {r['n']:,} | {r['startup_seconds']:.0f} s | {o['steady']['seconds']:.0f} s | "
            f"{(c.get('steady') or {}).get('seconds', 0):.0f} s | {_f(c.get('polls_per_job_per_second'), 3)} | "
            f"{_ratio(r.get('ratio_requests'))} | {_ratio(nominal_ratio(r))} | {life['requests']:,} ({keys}) | "
            f"{_ms(lat['running_noticed']['p50'])} / {_ms(lat['running_noticed']['p99'])} | "
            f"{_ms(lat['complete_delivered']['p50'])} / {_ms(lat['complete_delivered']['p99'])} |"
        )
    return rows


def admission_table(results: list[dict]) -> list[str]:
    rows = [
        "| admitting processes | jobs admitted | capacity freed → next admission p50 / p99 | admissions/s | "
        "run length | API requests/s (all processes) | over-quota instants | CPU s per process | events |",
        "|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in results:
        rows.append(
            f"| {r['processes']} | {r['admitted']:,}/{r['jobs']:,} | {_ms(r['latency']['p50'])} / "
            f"{_ms(r['latency']['p99'])} | {_f(r['admissions_per_second'], 1)} | {r['makespan_seconds']:.0f} s | "
            f"{_f(r['requests']['per_second'], 1)} | {r['over_quota_instants']} | "
            f"{', '.join(str(x) for x in r['cpu_seconds'])} | {r['events']:,} |"
        )
    return rows


def targets(tracking: list[dict], admission: list[dict]) -> list[str]:
    out = []
    big = max(tracking, key=lambda r: r["n"]) if tracking else None
    if big:
        o = big["ours"]
        rate = o["steady"]["per_second"]
        p99 = o["latency"]["complete_noticed"]["p99"]
        ratio = big.get("ratio_requests") or {}
        out.append(
            f"- {big['n']:,} tracked jobs, at most {TARGET_REQUESTS:g} API requests/s at steady state: "
            f"{_f(rate, 3)}/s, **{'met' if rate is not None and rate <= TARGET_REQUESTS else 'missed'}**."
        )
        out.append(
            f"- {big['n']:,} tracked jobs, p99 state-change latency under {TARGET_LATENCY:g} s: "
            f"{_ms(p99)} (Complete → noticed), {_ms(o['latency']['final_event']['p99'])} (→ final event), "
            f"**{'met' if p99 is not None and p99 < TARGET_LATENCY else 'missed'}**."
        )
        value = ratio.get("value")
        out.append(
            f"- At least {TARGET_RATIO:g}× fewer requests than the cncf trigger at {big['n']:,} jobs: "
            f"{_ratio(ratio)} against what it managed to send, {_ratio(nominal_ratio(big))} against its "
            f"nominal N / {big['setup']['poll_interval']:g} s, "
            f"**{'met' if value is not None and value >= TARGET_RATIO else 'missed'}**."
        )
    for r in admission:
        p99 = r["latency"]["p99"]
        out.append(
            f"- Admission p99 under {TARGET_LATENCY:g} s with {r['processes']} process(es): {_ms(p99)}, "
            f"**{'met' if p99 is not None and p99 < TARGET_LATENCY else 'missed'}**."
        )
    return out


def render(data: dict) -> str:
    m = data["machine"]
    lines = [
        START,
        "",
        f"Measured {data['when']} with `{data['command']}`"
        + (f" (took {data['seconds'] / 60:.0f} min)." if data.get("seconds") else "."),
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory']}, {m['os']}, load average at the start "
        f"{m.get('load', '-')}; Python {m['python']}, "
        f"apache-airflow {m['apache-airflow']}, apache-airflow-providers-cncf-kubernetes "
        f"{m['apache-airflow-providers-cncf-kubernetes']}, kubernetes_asyncio {m['kubernetes_asyncio']}, "
        f"airflow-jobs-plugin {m['airflow-jobs-plugin']}.",
        "",
        "### Targets",
        "",
        *targets(data.get("tracking") or [], data.get("admission") or []),
        "",
    ]
    if data.get("tracking"):
        lines += [
            "### Tracking",
            "",
            *tracking_table(data["tracking"]),
            "",
            *tracking_details(data["tracking"]),
            "",
            "![API requests per second and latency against the number of tracked jobs](benchmarks.svg)",
            "",
        ]
    if data.get("admission"):
        lines += ["### Admission", "", *admission_table(data["admission"]), ""]
    lines.append(END)
    return "\n".join(lines)


def write_doc(data: dict) -> None:
    section = render(data)
    text = DOC.read_text() if DOC.exists() else f"# Benchmarks\n\n{START}\n{END}\n"
    if START in text and END in text:
        head, rest = text.split(START, 1)
        _, tail = rest.split(END, 1)
        text = head + section + tail
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    DOC.write_text(text)


# --------------------------------------------------------------------------- the chart


def chart(tracking: list[dict]) -> str:
    """Two log-log panels: API requests/s against N, and latency p50/p99 against N."""
    width, height, pad = 900, 380, 60
    panel = (width - 3 * pad) / 2

    ns = [r["n"] for r in tracking]
    xmin, xmax = min(ns) / 1.5, max(ns) * 1.5

    def x(n: float, left: float) -> float:
        return left + (math.log10(n) - math.log10(xmin)) / (math.log10(xmax) - math.log10(xmin)) * panel

    def y(v: float, lo: float, hi: float) -> float:
        v = min(max(v, lo), hi)
        return (
            height
            - pad
            - (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)) * (height - 2 * pad)
        )

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
    ]

    def axes(left: float, lo: float, hi: float, title: str, unit: str) -> None:
        parts.append(
            f'<text x="{left + panel / 2}" y="{pad / 2}" text-anchor="middle" font-size="14" '
            f'font-weight="bold">{title}</text>'
        )
        parts.append(
            f'<line x1="{left}" y1="{height - pad}" x2="{left + panel}" y2="{height - pad}" stroke="black"/>'
        )
        parts.append(f'<line x1="{left}" y1="{pad}" x2="{left}" y2="{height - pad}" stroke="black"/>')
        for n in ns:
            parts.append(f'<text x="{x(n, left)}" y="{height - pad + 16}" text-anchor="middle">{n:,}</text>')
        parts.append(
            f'<text x="{left + panel / 2}" y="{height - pad + 34}" text-anchor="middle">tracked jobs (N)</text>'
        )
        exp = math.floor(math.log10(lo))
        while 10**exp <= hi * 1.0001:
            value = 10**exp
            yy = y(value, lo, hi)
            parts.append(
                f'<line x1="{left}" y1="{yy}" x2="{left + panel}" y2="{yy}" stroke="#ddd"/>'
                f'<text x="{left - 6}" y="{yy + 4}" text-anchor="end">{value:g}{unit}</text>'
            )
            exp += 1

    def series(left: float, lo: float, hi: float, points: list, color: str, label: str, row: int, dash=False):
        pts = [(x(n, left), y(v, lo, hi), v) for n, v in points if v is not None]
        if not pts:
            return
        style = ' stroke-dasharray="5,4"' if dash else ""
        parts.append(
            f'<polyline fill="none" stroke="{color}" stroke-width="2"{style} '
            f'points="{" ".join(f"{a:.1f},{b:.1f}" for a, b, _ in pts)}"/>'
        )
        for a, b, v in pts:
            parts.append(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3.5" fill="{color}"/>')
            if v <= lo:
                parts.append(f'<text x="{a + 5:.1f}" y="{b - 5:.1f}" fill="{color}">0</text>')
        ly = pad + 8 + 16 * row
        parts.append(
            f'<line x1="{left + 10}" y1="{ly}" x2="{left + 34}" y2="{ly}" stroke="{color}" '
            f'stroke-width="2"{style}/><text x="{left + 40}" y="{ly + 4}">{label}</text>'
        )

    left = pad
    lo, hi = 0.01, 10 ** math.ceil(math.log10(max(max(ns) / 10, 10)))
    axes(left, lo, hi, "API requests per second at steady state", "")
    series(
        left,
        lo,
        hi,
        [(r["n"], r["cncf"]["steady"]["per_second"]) for r in tracking if r.get("cncf")],
        "#d62728",
        "cncf KubernetesJobTrigger (measured)",
        0,
    )
    series(
        left,
        lo,
        hi,
        [(r["n"], r["n"] / 10) for r in tracking],
        "#d62728",
        "cncf nominal: N / 10 s",
        1,
        dash=True,
    )
    series(
        left,
        lo,
        hi,
        [(r["n"], r["ours"]["steady"]["per_second"]) for r in tracking],
        "#1f77b4",
        "JobTrigger (0 drawn at the floor)",
        2,
    )

    left = 2 * pad + panel
    lo, hi = 0.001, 100.0
    axes(left, lo, hi, "Complete → final event (seconds)", "")
    series(
        left,
        lo,
        hi,
        [(r["n"], r["ours"]["latency"]["final_event"]["p50"]) for r in tracking],
        "#1f77b4",
        "JobTrigger p50",
        0,
    )
    series(
        left,
        lo,
        hi,
        [(r["n"], r["ours"]["latency"]["final_event"]["p99"]) for r in tracking],
        "#1f77b4",
        "JobTrigger p99",
        1,
        dash=True,
    )
    cn = [
        r
        for r in tracking
        if r.get("cncf")
        and not r["setup"]["cncf_capped_after_window"]
        and r["cncf"]["latency"]["final_event"]["count"]
    ]
    series(
        left,
        lo,
        hi,
        [(r["n"], r["cncf"]["latency"]["final_event"]["p50"]) for r in cn],
        "#d62728",
        "cncf p50",
        2,
    )
    series(
        left,
        lo,
        hi,
        [(r["n"], r["cncf"]["latency"]["final_event"]["p99"]) for r in cn],
        "#d62728",
        "cncf p99",
        3,
        dash=True,
    )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, nargs="+", default=[100, 1000, 5000])
    parser.add_argument("--skip-admission", action="store_true")
    parser.add_argument("--skip-tracking", action="store_true")
    parser.add_argument("--raw", default=os.path.join(tempfile.gettempdir(), "airflow-jobs-bench.json"))
    parser.add_argument("--from", dest="source", default=None, help="report a saved run again")
    parser.add_argument(
        "--startup",
        nargs="*",
        default=[],
        metavar="N=SECONDS",
        help="the simulator's start-up time to plan for at N jobs (default: extrapolated from smaller N)",
    )
    args = parser.parse_args()
    if args.source:
        with open(args.source) as f:
            data = json.load(f)
    else:
        started = time.time()
        data: dict[str, Any] = {
            "machine": machine(),
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "command": "scripts/bench " + " ".join(sys.argv[1:]),
            "tracking": [],
            "admission": [],
        }
        history: dict[int, float] = {}
        planned = {int(k): float(v) for k, v in (item.split("=", 1) for item in args.startup)}
        if not args.skip_tracking:
            for n in sorted(args.n):
                result = run_tracking(n, startup=planned.get(n) or startup_estimate(n, history))
                history[n] = result["startup_seconds"]
                data["tracking"].append(result)
                _save(args.raw, data)
        if not args.skip_admission:
            for k in (1, 3):
                data["admission"].append(run_admission(1000, k))
                _save(args.raw, data)
        data["seconds"] = time.time() - started
        _save(args.raw, data)
        print(f"raw results: {args.raw}")
    write_doc(data)
    if data.get("tracking"):
        SVG.write_text(chart(data["tracking"]))
    print(
        f"wrote {DOC.relative_to(ROOT)}" + (f" and {SVG.relative_to(ROOT)}" if data.get("tracking") else "")
    )


def _save(path: str, data: dict) -> None:
    with open(path, "w") as f:
        json.dump(data, f, indent=1, default=str)


if __name__ == "__main__":
    main()
