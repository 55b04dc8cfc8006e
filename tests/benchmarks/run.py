"""Run the benchmarks and write ``docs/benchmarks.md`` (its tables) and the raw figures.

Run: ``scripts/bench`` (or ``.venv/bin/python tests/benchmarks/run.py``). Tracking: ``--cluster real``
starts the real control plane (``scripts/cluster up`` with a kwok node per 100 jobs) for each ``--n`` and
stops it after; ``--cluster sim`` (the default) uses the stand-in. Each run is added to
``docs/bench-results/tracking-<cluster>.json`` (``--keep`` runs per N, the newest) and the workload
section of ``docs/benchmarks.md`` is rewritten from both files, side by side. Other options:
``--log-streams``, ``--poll-rate``, ``--no-gc-freeze``, ``--startup 1000=300``, ``--kubeconfig`` (a plane
already up), ``--window``, ``--cncf-windows``, ``--cncf-max``, ``--no-stream-logs``. The admission
benchmark (``--skip-tracking``; stand-in only) rewrites the results section between its markers, and
``--from results.json`` re-renders a saved admission run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import tempfile
import time
from typing import Any

from bench_admission import run_admission
from bench_tracking import CNCF_WINDOWS, TRIGGERER_CAPACITY, run_tracking, startup_estimate, windows_ratio
from benchlib import ROOT, machine

DOC = ROOT / "docs" / "benchmarks.md"
RESULTS = ROOT / "docs" / "bench-results"  # the raw JSON of the workload runs, tracked
WORKLOAD_START = "<!-- workload:start (written by tests/benchmarks/run.py) -->"
WORKLOAD_END = "<!-- workload:end -->"
SVG = ROOT / "docs" / "benchmarks.svg"
START = "<!-- results:start (written by tests/benchmarks/run.py) -->"
END = "<!-- results:end -->"

TARGET_LATENCY = 1.0
TARGET_RATIO = 100.0
TARGET_RSS_MB = 230.0  # peak RSS above the Airflow import


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


def _range(values: list[float] | None, digits: int = 1, unit: str = "", scale: float = 1.0) -> str:
    """``low–high`` (one figure when they are equal); ``-`` for none."""
    if not values:
        return "-"
    low, high = (v * scale for v in values)
    if f"{low:.{digits}f}" == f"{high:.{digits}f}":
        return f"{low:.{digits}f}{unit}"
    return f"{low:.{digits}f}–{high:.{digits}f}{unit}"


def _times(value: float) -> str:
    """A ratio: whole numbers from 10 up, two significant digits below (ours may send more)."""
    return f"{value:,.0f}" if value >= 10 else f"{value:.2g}"


def _ratio(r: dict | None) -> str:
    if not r or r.get("value") is None:
        return "-"
    basis = f" (against {r['basis']}: no request in its windows)" if r.get("basis") else ""
    return ("≥ " if r.get("lower_bound") else "") + f"{_times(r['value'])}×" + basis


def _ratio_range(r: dict | None, whole: dict | None) -> str:
    """The ratio over the cncf windows as a range; when it sent no request in any window, the ratio
    against its whole run."""
    if not r or not r.get("range"):
        return _ratio(whole)
    low, high = r["range"]
    text = f"{_times(low)}×" if _times(low) == _times(high) else f"{_times(low)}–{_times(high)}×"
    text = ("≥ " if r.get("lower_bound") else "") + text
    if r.get("empty"):
        text += f" (no request in {r['empty']} of its windows)"
    return text


def _tracking(o: dict) -> dict:
    """Our requests in window A without the log reads (older saved runs: every request)."""
    return o.get("steady_tracking") or o["steady"]


def _above_import(side: dict) -> float:
    return side.get("rss_above_import_mb", side["peak_rss_mb"] - side["rss_start_mb"])


def _followed(r: dict) -> int:
    c = r.get("cncf") or {}
    return c.get("jobs") or r["n"]


def _windows(c: dict) -> list[dict]:
    """The cncf trigger's windows (older saved runs: the one window)."""
    return c.get("windows") or [{**c["steady"], "cpu": c.get("cpu_steady")}]


def nominal_ratio(r: dict) -> dict | None:
    """The ratio had the cncf trigger kept its poll interval on every one of the N jobs (N / interval
    requests per second, over as many triggerers as that takes), against our tracking requests."""
    steady = _tracking(r["ours"])
    if not steady.get("seconds"):
        return None
    nominal = r["n"] / r["setup"]["poll_interval"]
    if steady["requests"] == 0:
        return {"value": nominal * steady["seconds"], "lower_bound": True}
    return {"value": nominal / (steady["requests"] / steady["seconds"]), "lower_bound": False}


def _cncf_note(r: dict) -> str:
    c = r["cncf"]
    note = ""
    if _followed(r) < r["n"]:
        note += f", the first {_followed(r):,} of the {r['n']:,} jobs (one triggerer at its default capacity)"
    if r["setup"]["cncf_capped_after_window"]:
        note += ", stopped after its windows"
    crashed = c["statuses"].get("crashed", 0)
    if crashed:
        note += f"; {crashed:,} triggers crashed (TimeoutError)"
    return note


def tracking_table(results: list[dict]) -> list[str]:
    rows = [
        "| N | trigger | API requests/s at steady state, besides log reads | log reads/s (bound) | "
        "CPU at steady state | CPU s (whole run) | peak RSS (above the Airflow import) | "
        "state change → noticed p50 / p99 | Complete → final event p50 / p99 | events |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        o = r["ours"]
        lat = o["latency"]
        steady = _tracking(o)
        reads = o.get("steady_log_reads")
        bound = ((o.get("logs") or {}).get("hub") or {}).get("poll_rate")
        if r["setup"].get("stream_logs") and reads:
            log_reads = f"{_f(reads['per_second'], 1)} ({bound:g}/s)" if bound else _f(reads["per_second"], 1)
        else:
            log_reads = "logs off"
        rows.append(
            f"| {r['n']:,} | JobTrigger | {_f(steady['per_second'], 3)} "
            f"({steady['requests']} in {steady['seconds']:.0f} s) | {log_reads} | "
            f"{_f((o['cpu_steady'] or 0) * 100, 1, ' %')} | {_f(o['cpu_seconds'], 1)} | "
            f"{o['peak_rss_mb']:.0f} MB ({_above_import(o):.0f} MB) | {_ms(lat['complete_noticed']['p50'])} / "
            f"{_ms(lat['complete_noticed']['p99'])} | {_ms(lat['final_event']['p50'])} / "
            f"{_ms(lat['final_event']['p99'])} | {o['events']:,}/{r['n']:,}"
            f"{' (stopped)' if o.get('capped') else ''} |"
        )
        c = r.get("cncf")
        if c:
            capped = r["setup"]["cncf_capped_after_window"]
            clat = c["latency"]["final_event"] if not capped else {"p50": None, "p99": None}
            crashed = c["statuses"].get("crashed", 0)
            windows = _windows(c)
            rates = (c.get("ranges") or {}).get("per_second") or [c["steady"]["per_second"]] * 2
            cpu = (c.get("ranges") or {}).get("cpu") or [c.get("cpu_steady") or 0] * 2
            rows.append(
                f"| {r['n']:,} | cncf KubernetesJobTrigger{_cncf_note(r)} | {_range(rates, 1)} "
                f"({len(windows)} windows of {r['setup']['window']:.0f} s) | - | "
                f"{_range(cpu, 1, ' %', 100)} | {_f(c['cpu_seconds'], 1)} | "
                f"{c['peak_rss_mb']:.0f} MB ({_above_import(c):.0f} MB) | = final event | "
                f"{_ms(clat['p50'])} / {_ms(clat['p99'])} | {c['events'] - crashed:,}/{_followed(r):,} |"
            )
    return rows


def tracking_details(results: list[dict]) -> list[str]:
    rows = [
        "| N | every job's pod Running, s after the triggers started: written / received by ours | "
        "window A (ours alone) | window B (both) | cncf polls per job per s (nominal 0.1) | "
        "requests ratio cncf / ours, measured (ours without its log reads) | with our log reads | "
        "at the nominal poll interval, all N jobs | our requests over the whole run | "
        "pod Running → RUNNING logged p50 / p99 | Complete → received by the watch p50 / p99 | "
        "simulator: peak RSS, CPU s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for r in results:
        o, c = r["ours"], r.get("cncf") or {}
        lat = o["latency"]
        life = o["lifetime"]
        keys = ", ".join(f"{k} {v:,}" for k, v in life["by_key"].items())
        every = r.get("all_running") or {}
        written = every.get("written")
        received = every.get("received", r["startup_seconds"])
        window_b = "-"
        polls = "-"
        if c:
            windows = _windows(c)
            window_b = f"{len(windows)} × {sum(w['seconds'] for w in windows) / len(windows):.0f} s"
            span = (c.get("ranges") or {}).get("polls_per_job_per_second")
            polls = _range(span, 3) if span else _f(c.get("polls_per_job_per_second"), 3)
        sim = r.get("simulator") or {}
        rows.append(
            f"| {r['n']:,} | {_f(written, 1)} / {_f(received, 1)} s | {o['steady']['seconds']:.0f} s | "
            f"{window_b} | {polls} | "
            f"{_ratio_range(r.get('ratio_requests_range'), r.get('ratio_requests'))} | "
            f"{_ratio_range(r.get('ratio_requests_with_log_reads_range'), r.get('ratio_requests_with_log_reads'))} | "
            f"{_ratio(nominal_ratio(r))} | {life['requests']:,} ({keys}) | "
            f"{_ms(lat['running_noticed']['p50'])} / {_ms(lat['running_noticed']['p99'])} | "
            f"{_ms(lat['complete_delivered']['p50'])} / {_ms(lat['complete_delivered']['p99'])} | "
            + (f"{sim['peak_rss_mb']:,.0f} MB, {sim['cpu_seconds']:,.0f} |" if sim else "- |")
        )
    return rows


def logs_table(results: list[dict]) -> list[str]:
    rows = [
        "| N | jobs with a live log | container lines in the task logs | jobs whose last line the trigger "
        "printed | jobs with log markers left to the worker (markers) | log streams opened / reads / most "
        "streams at once | watch lists beyond the first |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        if not r["setup"].get("stream_logs"):
            continue
        o = r["ours"]
        logs = o.get("logs") or {}
        hub = logs.get("hub") or {}
        if "lines" not in logs:
            continue
        rows.append(
            f"| {r['n']:,} | {logs['jobs_with_live_log']:,} | {logs['lines']:,} of {logs['lines_expected']:,} | "
            f"{logs['jobs_with_last_line']:,} | {logs['jobs_with_markers']:,} ({logs['markers']:,}) | "
            f"{hub.get('streams_opened', '-'):,} / {hub.get('reads', '-'):,} / {hub.get('most_streams', '-')} | "
            f"{_f(o.get('watch_relists'))} |"
        )
    return rows if len(rows) > 2 else []


def admission_table(results: list[dict]) -> list[str]:
    rows = [
        "| admitting processes | jobs admitted | capacity freed → next admission p50 / p99 | admissions/s | "
        "run length | API requests/s (all processes) | over-quota instants | CPU s per process | events |",
        "|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in results:
        who = f"{r['processes']}" + (
            f", copy {r['copy']} of 2 at once" if r.get("loaded_by_second_copy") else ""
        )
        rows.append(
            f"| {who} | {r['admitted']:,}/{r['jobs']:,} | {_ms(r['latency']['p50'])} / "
            f"{_ms(r['latency']['p99'])} | {_f(r['admissions_per_second'], 1)} | {r['makespan_seconds']:.0f} s | "
            f"{_f(r['requests']['per_second'], 1)} | {r['over_quota_instants']} | "
            f"{', '.join(str(x) for x in r['cpu_seconds'])} | {r['events']:,} |"
        )
    return rows


def capacity_note(results: list[dict]) -> list[str]:
    """Said whenever a run's cncf trigger followed fewer jobs than ours."""
    capped = [r for r in results if r.get("cncf") and _followed(r) < r["n"]]
    if not capped:
        return []
    sizes = ", ".join(f"{r['n']:,}" for r in capped)
    m = _followed(capped[0])
    return [
        f"At N = {sizes} the cncf trigger follows only the first {m:,} jobs, what one triggerer runs at "
        f"Airflow's default `[triggerer] capacity` ({TRIGGERER_CAPACITY:,}); ours follows all N in one "
        f"process. Its requests/s, CPU and memory there are those of {m:,} jobs, and the measured ratios "
        f"compare ours at N with it at {m:,}; following all N would take N / {m:,} such triggerers. The "
        f"nominal column counts N / 10 s requests per second for all N jobs.",
        "",
    ]


def targets(tracking: list[dict], admission: list[dict]) -> list[str]:
    out = []
    big = max(tracking, key=lambda r: r["n"]) if tracking else None
    if big:
        o = big["ours"]
        n = big["n"]
        steady = _tracking(o)
        reads = o.get("steady_log_reads") or {}
        bound = ((o.get("logs") or {}).get("hub") or {}).get("poll_rate")
        quiet = steady["requests"] == 0 and bool(steady.get("seconds"))
        bounded = (
            not big["setup"].get("stream_logs")
            or reads.get("per_second") is None
            or (bound is not None and reads["per_second"] <= bound)
        )
        out.append(
            f"- {n:,} tracked jobs, no API request at steady state besides the log reads' bounded rate: "
            f"{steady['requests']} in {steady['seconds']:.0f} s"
            + (
                f", log reads {_f(reads.get('per_second'), 1)}/s (bound {bound:g}/s per triggerer)"
                if big["setup"].get("stream_logs") and bound
                else ""
            )
            + f", **{'met' if quiet and bounded else 'missed'}**."
        )
        p99 = o["latency"]["final_event"]["p99"]
        out.append(
            f"- {n:,} tracked jobs, Complete → final event p99 under {TARGET_LATENCY:g} s: {_ms(p99)} "
            f"(→ SUCCEEDED noticed: {_ms(o['latency']['complete_noticed']['p99'])}), "
            f"**{'met' if p99 is not None and p99 < TARGET_LATENCY else 'missed'}**."
        )
        above = _above_import(o)
        out.append(
            f"- {n:,} tracked jobs, peak RSS under {TARGET_RSS_MB:g} MB above the Airflow import: "
            f"{above:.0f} MB ({o['peak_rss_mb']:.0f} MB peak), "
            f"**{'met' if above < TARGET_RSS_MB else 'missed'}**."
        )
        logs = o.get("logs") or {}
        if big["setup"].get("stream_logs") and "jobs_last_line_accounted" in logs:
            done = logs["jobs_last_line_accounted"]
            out.append(
                f"- {n:,} tracked jobs, every job's last log lines in its task log: "
                f"{logs['jobs_with_last_line']:,} printed by the trigger, "
                f"{done - logs['jobs_with_last_line']:,} more left to the worker by a log marker "
                f"(`execute_complete` prints them; not run here), {n - done:,} missing, "
                f"**{'met' if done == n else 'missed'}**."
            )
        if big.get("cncf"):
            r = big.get("ratio_requests_range") or {}
            overall = windows_ratio(_tracking(o), big["cncf"].get("windows") or [])
            verdict = overall.get("value")
            if verdict is None:
                verdict = (big.get("ratio_requests") or {}).get("value")
            m = _followed(big)
            out.append(
                f"- At least {TARGET_RATIO:g}× fewer requests than the cncf trigger (ours at {n:,} jobs, "
                f"without its log reads; the cncf trigger at {m:,}): "
                f"{_ratio(overall)} over its windows together; window by window "
                f"{_ratio_range(r, big.get('ratio_requests'))}; {_ratio(nominal_ratio(big))} against "
                f"its nominal N / {big['setup']['poll_interval']:g} s for all {n:,}; "
                f"**{'met' if verdict is not None and verdict >= TARGET_RATIO else 'missed'}**."
            )
    for r in admission:
        if r.get("loaded_by_second_copy"):
            continue
        p99 = r["latency"]["p99"]
        out.append(
            f"- Admission p99 under {TARGET_LATENCY:g} s with {r['processes']} process(es): {_ms(p99)}, "
            f"**{'met' if p99 is not None and p99 < TARGET_LATENCY else 'missed'}**."
        )
    loaded = [r for r in admission if r.get("loaded_by_second_copy")]
    if loaded:
        worst = max(r["latency"]["p99"] or math.inf for r in loaded)
        out.append(
            f"- Admission p99 under {TARGET_LATENCY:g} s with {loaded[0]['processes']} processes, the machine "
            f"loaded by a second copy of the benchmark: "
            + " and ".join(_ms(r["latency"]["p99"]) for r in loaded)
            + f" (the two copies), **{'met' if worst < TARGET_LATENCY else 'missed'}**."
        )
    return out


def run_admission_loaded(jobs: int = 1000, processes: int = 3) -> list[dict]:
    """The admission run with ``processes`` admitting processes while a second copy of the same run
    (its own simulated cluster and trackers) loads the machine: two copies started together, each
    reported. Each copy's figures are its own; the load is the other's."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=2) as pool:
        copies = [
            pool.submit(run_admission, jobs, processes, say=lambda m, c=c: print(f"[copy {c}] {m}"))
            for c in (1, 2)
        ]
        results = [f.result() for f in copies]
    for copy, result in enumerate(results, start=1):
        result["loaded_by_second_copy"] = True
        result["copy"] = copy
    return results


def _loads(tracking: list[dict]) -> list[str]:
    """The load average (1, 5, 15 min) when each tracking run started: the machine may be shared."""
    known = [r for r in tracking if r.get("load_at_start")]
    if not known:
        return []
    each = "; ".join(f"N = {r['n']:,}: {' '.join(f'{x:.1f}' for x in r['load_at_start'])}" for r in known)
    return [f"Load average at the start of each tracking run: {each}.", ""]


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
        *_loads(data.get("tracking") or []),
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
            *capacity_note(data["tracking"]),
            *tracking_details(data["tracking"]),
            "",
            *logs_table(data["tracking"]),
            *([""] if logs_table(data["tracking"]) else []),
            "![API requests per second and latency against the number of tracked jobs](benchmarks.svg)",
            "",
        ]
    if data.get("admission"):
        lines += ["### Admission", "", *admission_table(data["admission"]), ""]
    lines.append(END)
    return "\n".join(lines)


# --------------------------------------------------------------------------- the talking workload


def _p(stats: dict | None, scale: float = 1.0, digits: int = 2) -> str:
    """``p50 / p99`` of a latency figure, in seconds."""
    if not stats or stats.get("p50") is None:
        return "-"
    return f"{stats['p50'] * scale:.{digits}f} / {stats['p99'] * scale:.{digits}f}"


def _req(part: dict | None) -> str:
    if not part:
        return "-"
    rate = part.get("per_second")
    return f"{rate:.2f}/s ({part['requests']:,})" if rate is not None else f"({part['requests']:,})"


def _gen2(o: dict) -> str:
    """Full collections: count and longest, and whether the product had frozen its start-up objects
    (``gc.freeze`` at its first trigger's start) and how long after the triggers started."""
    gens = (o.get("gc") or {}).get("by_generation") or {}
    g2 = gens.get("2") or {}
    frozen = o.get("gc_frozen_after_s")
    after = f"; frozen at {frozen:.0f} s" if frozen is not None else ""
    return f"{g2.get('count', 0)}× (longest {g2.get('max', 0) * 1000:.0f} ms{after})"


def _load(r: dict) -> str:
    """When the run's steady window opened (UTC), and the 1-minute load average at its start and end."""
    start, end = r.get("load_at_start") or [None], r.get("load_at_end") or [None]
    when = time.strftime("%H:%M", time.gmtime(r["window_a"][0]))
    load = f"{start[0]:.1f} → {end[0]:.1f}" if start[0] is not None and end[0] is not None else "-"
    return f"{when}, {load}"


def _runs(results: dict, cluster: str) -> list[dict]:
    return sorted(results.get(cluster) or [], key=lambda r: (r["n"], r["window_a"][0]))


def workload_tables(results: dict) -> list[str]:
    """The talking workload on the real plane and on the stand-in, side by side: one row per run."""
    rows = [(c, r) for c in ("real", "sim") for r in _runs(results, c)]
    if not rows:
        return ["No run of the talking workload is saved yet (`scripts/bench --cluster real`)."]
    name = {"real": "real plane", "sim": "stand-in"}
    out = [
        "Requests each tracker sent (counted in its own client, per second in its steady window and in"
        " total over its run). Ours: tracking (lists, watches, gets), log streams and reads, admission"
        " (the unsuspend patch, quota reads); the cncf trigger's: its job status polls.",
        "",
        "| N | cluster | window opened (UTC), load (1 min, start → end) | ours: tracking | ours: log streams and reads |"
        " ours: admission | ours: all, whole run | cncf: jobs followed | cncf: status polls |"
        " cncf: all, whole run | ratio cncf / ours (tracking) |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for cluster, r in rows:
        o = r["ours"]
        req = o.get("requests") or {}
        win, life = req.get("window") or {}, req.get("lifetime") or {}
        c = r.get("cncf") or {}
        creq = (c.get("requests") or {}) if c else {}
        cwin, clife = creq.get("window") or {}, creq.get("lifetime") or {}
        ours_track = (win.get("tracking") or {}).get("requests")
        theirs = (cwin.get("all") or {}).get("per_second")
        if not c:
            ratio = "-"
        elif ours_track == 0:
            ratio = "none: ours sent no tracking request"
        elif ours_track and theirs:
            ratio = f"{theirs / win['tracking']['per_second']:,.0f}×"
        else:
            ratio = "-"
        out.append(
            f"| {r['n']:,} | {name[cluster]} | {_load(r)} | {_req(win.get('tracking'))} |"
            f" {_req(win.get('log_reads'))} | {_req(win.get('admission'))} |"
            f" {(life.get('all') or {}).get('requests', 0):,} in {life.get('seconds', 0):.0f} s |"
            f" {c.get('jobs', 0):,} | {_req(cwin.get('all')) if c else '-'} |"
            f" {(clife.get('all') or {}).get('requests', 0):,} | {ratio} |"
        )
    out += [
        "",
        "Latency (seconds, p50 / p99), the task logs, the event loop and memory. A line's latency runs"
        " from the wall time its writer put in it to the moment the tracker logged it. A line is"
        " *streamed* if its container held one of the hub's log streams when the line was written,"
        " *polled* otherwise, whichever path brought it; *handed over* are the polled lines a stream"
        " the container got later delivered (its backlog from the cursor). Rows marked † were measured"
        " before lines were classed so: there a line counts under the path that brought it (a new"
        " stream's backlog as streamed) and no handed-over figure exists. ‡ k: of the jobs missing"
        " their last line, k whose last line the plane's player wrote after their container had ended"
        " (its writer ran late on a loaded machine; no real container writes after it ended, and a"
        " reader that read the log to its end after the end cannot see it).",
        "",
        "| N | cluster | Complete → final event | lines: streamed | lines: polled | of which handed over |"
        " lines: writer's lag |"
        " last line in the task log: trigger / worker / missing | log streams (budget) / reads |"
        " longest loop stall | full GCs | peak RSS above import (per job) | CPU at steady state |",
        "|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---|---:|---:|",
    ]
    for cluster, r in rows:
        o = r["ours"]
        lat = o.get("line_latency") or {}
        if "by_class" in lat:
            classes = lat["by_class"]
            streamed, polled = _p(classes.get("streamed")), _p(classes.get("polled"))
            handed = _p(classes.get("handed_over"))
            handed += f" ({(classes.get('handed_over') or {}).get('count', 0):,} lines)"
        else:  # an older run: by the path that brought the line
            by = lat.get("by_source") or {}
            streamed, polled, handed = f"{_p(by.get('stream'))} †", f"{_p(by.get('read'))} †", "-"
        logs = o.get("logs") or {}
        worker = logs.get("worker_path") or {}
        hub = logs.get("hub") or {}
        trig = logs.get("jobs_with_last_line", 0)
        via_worker = worker.get("jobs_with_last_line", 0)
        missing = r["n"] - trig - via_worker
        late = len(logs.get("jobs_missing_late_last_line") or ())
        missing_text = f"{missing:,}" + (f" (‡ {late:,})" if late else "")
        stall = o.get("loop_lag_max")
        out.append(
            f"| {r['n']:,} | {name[cluster]} | {_p(o['latency']['final_event'])} | {streamed} |"
            f" {polled} | {handed} | {_p(lat.get('writer_lag'))} |"
            f" {trig:,} / {via_worker:,} / {missing_text} |"
            f" {hub.get('streams_opened', 0):,} ({hub.get('stream_budget', '-')}) / {hub.get('reads', 0):,} |"
            f" {_s(stall)} | {_gen2(o)} |"
            f" {_above_import(o):.0f} MB ({o['peak_rss_per_job_kb']:.1f} KB) |"
            f" {_pct(o.get('cpu_steady'))} |"
        )
    slopes = []
    for cluster in ("real", "sim"):
        runs = _runs(results, cluster)
        by_n: dict[int, list[float]] = {}
        for r in runs:
            by_n.setdefault(r["n"], []).append(_above_import(r["ours"]))
        ns = sorted(by_n)
        for a, b in zip(ns, ns[1:], strict=False):
            low = (min(by_n[b]) - max(by_n[a])) * 1024 / (b - a)
            high = (max(by_n[b]) - min(by_n[a])) * 1024 / (b - a)
            span = f"{low:.1f}" if abs(high - low) < 0.05 else f"{low:.1f} to {high:.1f}"
            slopes.append(f"{name[cluster]} {a:,} → {b:,} jobs: {span} KB per added job")
    if slopes:
        out += ["", "Memory slope (peak RSS above the import, between sizes): " + "; ".join(slopes) + "."]
    planes = [r for _, r in rows if r.get("plane")]
    if planes:
        out += ["", "The plane's own processes over each real-plane run (CPU seconds; RSS at the end):", ""]
        for r in planes:
            procs = r["plane"]["processes"]
            out.append(
                f"- N = {r['n']:,}: "
                + ", ".join(
                    f"{k} {v['cpu_seconds']:.0f} s, {v['rss_mb']:.0f} MB" for k, v in sorted(procs.items())
                )
                + "."
            )
    return out


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f} %"


def write_workload(results: dict) -> None:
    section = "\n".join([WORKLOAD_START, "", *workload_tables(results), "", WORKLOAD_END])
    text = DOC.read_text()
    if WORKLOAD_START in text and WORKLOAD_END in text:
        head, rest = text.split(WORKLOAD_START, 1)
        _, tail = rest.split(WORKLOAD_END, 1)
        text = head + section + tail
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    DOC.write_text(text)


def load_results() -> dict[str, list[dict]]:
    """The saved runs of the talking workload, by cluster (``docs/bench-results/tracking-*.json``)."""
    out: dict[str, list[dict]] = {}
    for cluster in ("real", "sim"):
        path = RESULTS / f"tracking-{cluster}.json"
        if path.exists():
            out[cluster] = json.loads(path.read_text())["runs"]
    return out


def save_result(cluster: str, result: dict, keep: int = 2) -> None:
    """Add one run to ``docs/bench-results/tracking-<cluster>.json``; at most ``keep`` runs per N
    (the newest), so the tables show the range over runs."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"tracking-{cluster}.json"
    saved = json.loads(path.read_text()) if path.exists() else {"runs": []}
    same = [r for r in saved["runs"] if r["n"] == result["n"]]
    others = [r for r in saved["runs"] if r["n"] != result["n"]]
    # The raw per-job times are large: the figures keep their percentiles; the samples are dropped.
    slim = {k: v for k, v in result.items() if k != "samples"}
    saved["runs"] = sorted(
        others + same[-(keep - 1) :] + [slim] if keep > 1 else others + [slim], key=lambda r: r["n"]
    )
    saved["machine"] = machine()
    path.write_text(json.dumps(saved, indent=1, default=str))


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
    """Three log-log panels against N: API requests/s at steady state, Complete → final event p50/p99,
    and peak RSS above the Airflow import. The cncf trigger's measured figures are drawn at the number of
    jobs it followed, its requests/s as the range over its windows."""
    width, height, pad = 1320, 380, 60
    panels = 3
    panel = (width - (panels + 1) * pad) / panels

    ns = sorted({r["n"] for r in tracking} | {_followed(r) for r in tracking if r.get("cncf")})
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

    def legend(left: float, color: str, label: str, row: int, style: str = "", line: bool = True) -> None:
        ly = pad + 8 + 16 * row
        mark = (
            f'<line x1="{left + 10}" y1="{ly}" x2="{left + 34}" y2="{ly}" stroke="{color}" '
            f'stroke-width="2"{style}/>'
            if line
            else f'<circle cx="{left + 22}" cy="{ly}" r="3.5" fill="{color}"/>'
        )
        parts.append(f'{mark}<text x="{left + 40}" y="{ly + 4}">{label}</text>')

    def series(left: float, lo: float, hi: float, points: list, color: str, label: str, row: int, dash=""):
        pts = [(x(n, left), y(v, lo, hi), v) for n, v in points if v is not None]
        if not pts:
            return
        style = f' stroke-dasharray="{dash}"' if dash else ""
        parts.append(
            f'<polyline fill="none" stroke="{color}" stroke-width="2"{style} '
            f'points="{" ".join(f"{a:.1f},{b:.1f}" for a, b, _ in pts)}"/>'
        )
        for a, b, v in pts:
            parts.append(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3.5" fill="{color}"/>')
            if v <= lo:
                parts.append(f'<text x="{a + 5:.1f}" y="{b - 5:.1f}" fill="{color}">0</text>')
        legend(left, color, label, row, style)

    def ranges(left: float, lo: float, hi: float, points: list, color: str, label: str, row: int) -> None:
        """Points with a bar from the lowest to the highest value (no line: several runs may have
        measured the same number of followed jobs)."""
        pts = [(n, low, high) for n, low, high in points if low is not None and high is not None]
        if not pts:
            return
        for n, low, high in pts:
            a = x(n, left)
            parts.append(
                f'<line x1="{a:.1f}" y1="{y(low, lo, hi):.1f}" x2="{a:.1f}" y2="{y(high, lo, hi):.1f}" '
                f'stroke="{color}" stroke-width="2"/>'
            )
            for v in {low, high}:
                parts.append(f'<circle cx="{a:.1f}" cy="{y(v, lo, hi):.1f}" r="3.5" fill="{color}"/>')
        legend(left, color, label, row, line=False)

    cncf = [r for r in tracking if r.get("cncf")]

    left = pad
    lo, hi = 0.01, 10 ** math.ceil(math.log10(max(max(ns) / 10, 10)))
    axes(left, lo, hi, "API requests per second at steady state", "")
    ranges(
        left,
        lo,
        hi,
        [
            (
                _followed(r),
                *(
                    (r["cncf"].get("ranges") or {}).get("per_second")
                    or [r["cncf"]["steady"]["per_second"]] * 2
                ),
            )
            for r in cncf
        ],
        "#d62728",
        "cncf KubernetesJobTrigger, measured (range over its windows)",
        0,
    )
    series(
        left,
        lo,
        hi,
        [(r["n"], r["n"] / r["setup"]["poll_interval"]) for r in tracking],
        "#d62728",
        "cncf nominal: N / 10 s",
        1,
        dash="5,4",
    )
    series(
        left,
        lo,
        hi,
        [(r["n"], _tracking(r["ours"])["per_second"]) for r in tracking],
        "#1f77b4",
        "JobTrigger, besides log reads (0 drawn at the floor)",
        2,
    )
    series(
        left,
        lo,
        hi,
        [
            (r["n"], (r["ours"].get("steady_log_reads") or {}).get("per_second"))
            for r in tracking
            if r["setup"].get("stream_logs")
        ],
        "#1f77b4",
        "JobTrigger's log reads (bounded)",
        3,
        dash="2,3",
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
        dash="5,4",
    )
    cn = [
        r
        for r in cncf
        if not r["setup"]["cncf_capped_after_window"] and r["cncf"]["latency"]["final_event"]["count"]
    ]
    series(
        left,
        lo,
        hi,
        [(_followed(r), r["cncf"]["latency"]["final_event"]["p50"]) for r in cn],
        "#d62728",
        "cncf p50",
        2,
    )
    series(
        left,
        lo,
        hi,
        [(_followed(r), r["cncf"]["latency"]["final_event"]["p99"]) for r in cn],
        "#d62728",
        "cncf p99",
        3,
        dash="5,4",
    )

    left = 3 * pad + 2 * panel
    biggest = max([_above_import(r["ours"]) for r in tracking] + [_above_import(r["cncf"]) for r in cncf])
    lo, hi = 1.0, 10 ** math.ceil(math.log10(max(biggest, 10)))
    axes(left, lo, hi, "Peak RSS above the Airflow import (MB)", "")
    series(left, lo, hi, [(r["n"], _above_import(r["ours"])) for r in tracking], "#1f77b4", "JobTrigger", 0)
    ranges(
        left,
        lo,
        hi,
        [(_followed(r), _above_import(r["cncf"]), _above_import(r["cncf"])) for r in cncf],
        "#d62728",
        "cncf KubernetesJobTrigger (at the jobs it followed)",
        1,
    )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument(
        "--cluster",
        choices=("sim", "real"),
        default="sim",
        help="real: start the real control plane (scripts/cluster up, enough kwok nodes) for each N and"
        " run the tracking benchmark on it; sim: the stand-in. Either way the raw figures are added to"
        " docs/bench-results/tracking-<cluster>.json and the tables in docs/benchmarks.md rewritten"
        " (admission runs on the stand-in only)",
    )
    parser.add_argument(
        "--kubeconfig", default=None, help="--cluster real: a plane already up (enough nodes)"
    )
    parser.add_argument(
        "--plane-with",
        default=None,
        help="--cluster real: components started beside the plane (scripts/cluster up --with; default"
        " mpi-operator, as a cluster that runs MPI jobs has; '' for none)",
    )
    parser.add_argument(
        "--log-streams",
        type=int,
        default=None,
        help="our log stream budget (default: the product's); the real plane's kwok serves at most about"
        " 120 follows at once on a machine with fs.inotify.max_user_instances = 128",
    )
    parser.add_argument("--poll-rate", type=float, default=None, help="our log reads per second")
    parser.add_argument(
        "--gc-freeze",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the product's gc.freeze() at its first trigger's start (--no-gc-freeze: off, to compare)",
    )
    parser.add_argument("--keep", type=int, default=2, help="runs kept per N in the results file")
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
    parser.add_argument(
        "--merge",
        default=None,
        metavar="RESULTS.json",
        help="add this run to a saved one: its sizes (and admission runs) replace the saved ones",
    )
    parser.add_argument("--window", type=float, default=30.0, help="window A and each cncf window (s)")
    parser.add_argument("--cncf-windows", type=int, default=CNCF_WINDOWS, help="consecutive cncf windows")
    parser.add_argument(
        "--cncf-max",
        type=int,
        default=TRIGGERER_CAPACITY,
        help="the cncf trigger follows the first M jobs (default: one triggerer's default capacity)",
    )
    parser.add_argument(
        "--stream-logs",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="JobTrigger's stream_logs (default on, as the operator's)",
    )
    args = parser.parse_args()
    # A run stopped with SIGTERM (a background job ignores SIGINT) still stops its trackers and the
    # plane it started: the exception unwinds through their context managers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.source:
        with open(args.source) as f:
            data = json.load(f)
        # A file written by bench_tracking.py --out: tracking only, without when and how.
        data.setdefault("when", "-")
        data.setdefault("command", "tests/benchmarks/bench_tracking.py")
        data.setdefault("admission", [])
    else:
        started = time.time()
        command = "scripts/bench " + " ".join(sys.argv[1:])
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        data: dict[str, Any] = {
            "machine": machine(),
            "when": when,
            "command": command,
            "tracking": [],
            "admission": [],
        }
        if args.merge:
            with open(args.merge) as f:
                data = json.load(f)
            data.setdefault("when", "-")
            data.setdefault("command", "tests/benchmarks/bench_tracking.py")
            data.setdefault("admission", [])
            data["when"] = f"{data['when']}, then {when}"
            data["command"] = f"{data['command']}`, then `{command}"
            data.pop("seconds", None)
        history: dict[int, float] = {r["n"]: r["startup_seconds"] for r in data["tracking"]}
        planned = {int(k): float(v) for k, v in (item.split("=", 1) for item in args.startup)}
        if not args.skip_tracking:
            real = args.cluster == "real"
            for n in sorted(args.n):
                result = run_tracking(
                    n,
                    time_scale=1.0 if real else 0.5,
                    window=args.window,
                    cncf_windows=args.cncf_windows,
                    cncf_max=args.cncf_max,
                    stream_logs=args.stream_logs,
                    startup=planned.get(n)
                    or startup_estimate(n, {k: v for k, v in history.items() if k < n}, real=real),
                    cluster=args.cluster,
                    kubeconfig=args.kubeconfig,
                    gc_freeze=args.gc_freeze,
                    log_streams=args.log_streams,
                    poll_rate=args.poll_rate,
                    **({} if args.plane_with is None else {"plane_with": args.plane_with}),
                )
                history[n] = result["startup_seconds"]
                save_result(args.cluster, result, keep=args.keep)
                write_workload(load_results())
                print(f"saved: {RESULTS.relative_to(ROOT)}/tracking-{args.cluster}.json")
        if args.cluster == "real":
            args.skip_admission = True  # the admission benchmark runs on the stand-in
        if not args.skip_admission:
            for k in (1, 3):
                data["admission"] = [
                    r for r in data["admission"] if r["processes"] != k or r.get("loaded_by_second_copy")
                ]
                data["admission"].append(run_admission(1000, k))
                data["admission"].sort(key=lambda r: (bool(r.get("loaded_by_second_copy")), r["processes"]))
                _save(args.raw, data)
            # The same 3-process run twice at once: each copy's latencies with the machine loaded.
            data["admission"] = [r for r in data["admission"] if not r.get("loaded_by_second_copy")]
            data["admission"].extend(run_admission_loaded(1000, 3))
            _save(args.raw, data)
        if not args.merge:
            data["seconds"] = time.time() - started
        _save(args.raw, data)
        print(f"raw results: {args.raw}")
    if args.source or not args.skip_admission:
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
