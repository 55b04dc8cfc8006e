"""Tracking benchmark: N jobs deferred at once in one triggerer-like process, ours against the cncf trigger.

Run: ``.venv/bin/python tests/benchmarks/bench_tracking.py --n 100 1000 [--out results.json]``
(``scripts/bench`` runs it with every size and writes ``docs/benchmarks.md``).

For each N, on one simulated cluster in its own process:

1. N jobs are created suspended from real manifests, with staggered run times (scenario annotation
   ``{"main": {"run": S}}``): every job runs long enough for the whole cluster to be running before
   the first one ends, then they end spread over a few dozen seconds to a few minutes.
2. A triggerer-like process starts N ``JobTrigger``\\ s (``stream_logs`` off unless asked: the
   comparison is about tracking, and the cncf trigger does not stream logs either). They admit their
   jobs and follow them.
3. Window A: once every job's pod runs, the API requests per second and the tracker's CPU use are
   measured over ``--window`` seconds with nothing changing in the cluster: the tracking cost.
4. A second process starts N cncf ``KubernetesJobTrigger``\\ s (default poll interval 10 s) on the
   same jobs, as its ``KubernetesJobOperator`` defers in deferrable mode. Window B opens once it is
   polling: both side by side. Its requests are told apart by their path
   (``GET .../jobs/<name>/status``, which ours never calls).
5. The jobs end. Latencies per job, against the moment the simulator wrote the change: pod Running to
   the trigger logging RUNNING; the job's Complete condition to our watch receiving it, to the trigger
   logging SUCCEEDED and to its final event. Above ``--cncf-full-max`` jobs the cncf process is stopped
   when window B closes (its polling cannot keep up and would only take the CPU from the rest): its
   rate is reported, not its latency.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from typing import Any

from benchlib import (
    SimProcess,
    TrackerProcess,
    cpu_in_window,
    latency_stats,
    machine,
    window_rate,
)

CNCF_KEYS = ("get jobs/status",)  # what the cncf trigger calls, and nothing else does
SETTLE = 3.0  # seconds after the last pod starts before window A opens
CNCF_START = 45.0  # seconds the cncf process takes to import and start polling, with a margin
CNCF_START_PER_JOB = 0.07  # plus this per trigger: it builds an API client (an SSL context) per poll


def startup_estimate(n: int, history: dict[int, float] | None = None) -> float:
    """Real seconds until the simulator has ``n`` jobs running, with a margin.

    With measurements of smaller runs, a power law through the last two (exponent between 1.2 and 2.2:
    start-up grows a little faster than linearly, as every write also feeds the watches of every client);
    otherwise a conservative default."""
    points = sorted((history or {}).items())
    if len(points) >= 2:
        (n1, s1), (n2, s2) = points[-2], points[-1]
        k = math.log(max(s2, 1.0) / max(s1, 1.0)) / math.log(n2 / n1) if n2 > n1 else 1.0
        k = min(2.2, max(1.2, k))
        return 10 + 1.2 * s2 * (n / n2) ** k
    return 10 + 0.05 * n + n * n / 50000


def run_tracking(
    n: int,
    *,
    time_scale: float = 0.5,
    window: float = 30.0,
    spread: float | None = None,
    cncf: bool = True,
    cncf_full_max: int = 100,
    poll_interval: float = 10.0,
    stream_logs: bool = False,
    heap: bool = False,
    tracemalloc: int = 0,
    startup: float | None = None,
    say: Any = print,
) -> dict[str, Any]:
    """One tracking run of ``n`` jobs; returns the figures (see the module docstring)."""
    spread = spread if spread is not None else max(20.0, min(180.0, 0.04 * n))
    startup = startup if startup is not None else startup_estimate(n)
    cncf_start = CNCF_START + CNCF_START_PER_JOB * n
    lead = startup + SETTLE + window + ((cncf_start + window) if cncf else 0.0) + 10.0
    rng = random.Random(n)
    runs = [(lead + spread * rng.random()) / time_scale for _ in range(n)]
    namespace = f"track-{n}"
    nodes = n // 100 + 2  # 110 pods per node
    say(f"[tracking n={n}] {nodes} nodes, time scale {time_scale}, jobs run {lead:.0f}-{lead + spread:.0f}s")
    with SimProcess(nodes=nodes, time_scale=time_scale) as sim:
        t0 = time.time()
        names = sim.cmd("create_jobs", namespace=namespace, prefix=f"t{n}", jobs=[{"run": r} for r in runs])
        created = time.time()
        cap = lead + spread + 600
        extra = (
            (["--stream-logs"] if stream_logs else [])
            + (["--heap"] if heap else [])
            + (["--tracemalloc", str(tracemalloc)] if tracemalloc else [])
        )
        ours = TrackerProcess(sim, "ours", names, namespace, cap=cap, extra=extra)
        all_running = sim.wait_for(namespace, "running", n, timeout=lead * 2)
        say(
            f"[tracking n={n}] all {n} jobs running {all_running - ours.ready:.1f}s after the triggers started"
        )
        window_a = (all_running + SETTLE, all_running + SETTLE + window)
        time.sleep(max(0.0, window_a[1] - time.time()) + 0.6)
        theirs = None
        window_b = None
        if cncf:
            # Its operator defers once the job's pods exist; the trigger itself only ever reads the Job.
            theirs = TrackerProcess(
                sim, "cncf", names, namespace, cap=cap, extra=["--poll-interval", str(poll_interval)]
            )
            # Its window opens once it is polling (the first polls of a large set take minutes).
            polling = wait_for_requests(sim, CNCF_KEYS[0], min(n, 100), timeout=lead * 2)
            window_b = (polling, polling + window)
            time.sleep(max(0.0, window_b[1] - time.time()) + 0.6)
            if n > cncf_full_max:
                theirs.stop()
        ours_result = ours.result(timeout=cap + 300)
        theirs_result = theirs.result(timeout=cap + 300) if theirs is not None else None
        transitions = sim.cmd("transitions", namespace=namespace)
        samples = [(t, c) for t, c in sim.cmd("samples", since=t0)]
    result = summarize(
        n,
        transitions,
        samples,
        ours_result,
        theirs_result,
        window_a,
        window_b,
        startup=all_running - ours.ready,
        create_seconds=created - t0,
    )
    result["setup"] = {
        "time_scale": time_scale,
        "nodes": nodes,
        "window": window,
        "spread": spread,
        "run_seconds_real": [round(lead, 1), round(lead + spread, 1)],
        "run_seconds_simulated": [round(min(runs), 1), round(max(runs), 1)],
        "stream_logs": stream_logs,
        "heap": heap,
        "tracemalloc": tracemalloc,
        "poll_interval": poll_interval,
        "cncf_capped_after_window": bool(cncf and n > cncf_full_max),
    }
    return result


def wait_for_requests(sim: SimProcess, key: str, count: int, timeout: float) -> float:
    """Wait until the cluster has served ``count`` requests of ``key`` (``"verb resource"``)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if sim.cmd("counters").get(key, 0) >= count:
            return time.time()
        time.sleep(0.5)
    raise TimeoutError(f"fewer than {count} {key} requests after {timeout:.0f}s")


def _latencies(changes: dict[str, dict], seen: dict[str, dict], change: str, noticed: str) -> list[float]:
    out = []
    for name, entry in changes.items():
        at = entry.get(change)
        got = (seen.get(name) or {}).get(noticed)
        if at is not None and got is not None:
            out.append(got - at)
    return out


def summarize(
    n: int,
    transitions: dict[str, dict],
    samples: list,
    ours: dict,
    theirs: dict | None,
    window_a: tuple[float, float],
    window_b: tuple[float, float] | None,
    *,
    startup: float,
    create_seconds: float,
) -> dict[str, Any]:
    finished = [e["finished"] for e in transitions.values() if "finished" in e]
    first_end = min(finished) if finished else None
    events = {k: {"final": v["t"]} for k, v in ours["events"].items()}
    statuses: dict[str, int] = {}
    for v in ours["events"].values():
        statuses[v["status"]] = statuses.get(v["status"], 0) + 1
    ours_fig = {
        "jobs": n,
        "events": len(ours["events"]),
        "statuses": statuses,
        "steady": window_rate(samples, *window_a, exclude=CNCF_KEYS),
        "steady_beside_cncf": window_rate(samples, *window_b, exclude=CNCF_KEYS) if window_b else None,
        "lifetime": window_rate(samples, ours["started"], ours["ended"], exclude=CNCF_KEYS, covering=True),
        "cpu_steady": cpu_in_window(ours["samples"], *window_a),
        "cpu_seconds": ours["cpu_seconds"],
        "rss_start_mb": ours["rss_start_kb"] / 1024,
        "peak_rss_mb": ours["peak_rss_kb"] / 1024,
        # What following one job costs in memory: the peak above the process's size before its first
        # trigger ran (Airflow, the client), and the shared watch's cache as JSON bytes.
        "peak_rss_per_job_kb": (ours["peak_rss_kb"] - ours["rss_start_kb"]) / n,
        "cache": {
            when: {**figures, "bytes_per_job": sum(figures["bytes"].values()) / n}
            for when, figures in (ours.get("cache") or {}).items()
        },
        # With --heap: where the memory is when every job's pod runs (tracker.heap_figures).
        "heap": ours.get("heap") or None,
        "latency": {
            "running_noticed": latency_stats(_latencies(transitions, ours["states"], "running", "RUNNING")),
            "running_delivered": latency_stats(
                _latencies(transitions, ours["received"], "running", "running")
            ),
            "complete_delivered": latency_stats(
                _latencies(transitions, ours["received"], "finished", "finished")
            ),
            "complete_noticed": latency_stats(
                _latencies(transitions, ours["states"], "finished", "SUCCEEDED")
            ),
            "final_event": latency_stats(_latencies(transitions, events, "finished", "final")),
        },
        "loop_lag_max": max_gap(ours["samples"]),
        "log_lines": ours["log_lines"],
        "logs": container_logs(ours, transitions),
        "errors": ours["errors"][:5],
        "capped": ours["capped"],
    }
    result: dict[str, Any] = {
        "n": n,
        "create_seconds": round(create_seconds, 1),
        "startup_seconds": round(startup, 1),
        "window_a": [round(w, 2) for w in window_a],
        "window_b": [round(w, 2) for w in window_b] if window_b else None,
        "first_end": first_end,
        "windows_before_first_end": first_end is None
        or max(window_a[1], (window_b or window_a)[1]) <= first_end,
        "ours": ours_fig,
        "cncf": None,
    }
    if theirs is not None and window_b is not None:
        # A trigger that crashed (the cncf one times out when its loop stalls) has no final event.
        cevents = {k: {"final": v["t"]} for k, v in theirs["events"].items() if v["status"] != "crashed"}
        cstatuses: dict[str, int] = {}
        for v in theirs["events"].values():
            cstatuses[v["status"]] = cstatuses.get(v["status"], 0) + 1
        steady = window_rate(samples, *window_b, include=CNCF_KEYS)
        result["cncf"] = {
            "jobs": n,
            "events": len(theirs["events"]),
            "statuses": cstatuses,
            "steady": steady,
            "lifetime": window_rate(
                samples, theirs["started"], theirs["ended"], include=CNCF_KEYS, covering=True
            ),
            "polls_per_job_per_second": (steady["per_second"] or 0) / n,
            "cpu_steady": cpu_in_window(theirs["samples"], *window_b),
            "loop_lag_max": max_gap(theirs["samples"]),
            "cpu_seconds": theirs["cpu_seconds"],
            "rss_start_mb": theirs["rss_start_kb"] / 1024,
            "peak_rss_mb": theirs["peak_rss_kb"] / 1024,
            "latency": {"final_event": latency_stats(_latencies(transitions, cevents, "finished", "final"))},
            "log_lines": theirs["log_lines"],
            "errors": theirs["errors"][:5],
            "capped": theirs["capped"],
            "ran_seconds": round(theirs["ended"] - theirs["started"], 1),
        }
        result["ratio_requests"] = measured_ratio(ours_fig["steady"], result["cncf"])
    return result


def container_logs(ours: dict, transitions: dict[str, dict]) -> dict[str, Any]:
    """Container logs in the task logs: jobs whose first line came while the job still ran (before its
    Complete condition: a live log), lines per job, and the log hub's streams and reads."""
    first = ours.get("first_log_line") or {}
    lines = ours.get("container_log_lines") or {}
    live = sum(
        1
        for name, entry in transitions.items()
        if name in first and entry.get("finished") is not None and first[name] < entry["finished"]
    )
    counts = sorted(lines.values())
    return {
        "jobs_with_live_log": live,
        "jobs_with_log": len(first),
        "lines_per_job_min_max": [counts[0], counts[-1]] if counts else None,
        "hub": ours.get("log_hub") or {},
    }


def max_gap(samples: list) -> float | None:
    """The longest gap between two of a tracker's half-second samples, minus the half second: how long
    its event loop was at worst too busy to run a timer."""
    gaps = [b[0] - a[0] for a, b in zip(samples, samples[1:], strict=False)]
    return max(0.0, max(gaps) - 0.5) if gaps else None


def measured_ratio(ours: dict, cncf: dict) -> dict[str, Any]:
    """The request ratio against the cncf trigger's rate in its window; when its event loop was stalled
    for the whole window (no request at all), against its rate over its whole run instead, marked so."""
    if cncf["steady"]["requests"]:
        return request_ratio(ours, cncf["steady"])
    return {**request_ratio(ours, cncf["lifetime"]), "basis": "its whole run"}


def request_ratio(ours: dict, theirs: dict) -> dict[str, Any]:
    """How many times more requests the cncf trigger made in its window than ours in its own. When ours
    made none, the ratio is a lower bound: ours counted as one request over its window."""
    if not ours.get("seconds") or not theirs.get("per_second"):
        return {"value": None, "lower_bound": False}
    ours_rate = ours["requests"] / ours["seconds"]
    if ours["requests"] == 0:
        return {"value": theirs["per_second"] / (1 / ours["seconds"]), "lower_bound": True}
    return {"value": theirs["per_second"] / ours_rate, "lower_bound": False}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--time-scale", type=float, default=0.5)
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--no-cncf", action="store_true", help="our trigger only")
    parser.add_argument("--cncf-full-max", type=int, default=100)
    parser.add_argument("--stream-logs", action="store_true")
    parser.add_argument(
        "--heap",
        action="store_true",
        help="report where the tracker's memory is once every job runs (tracker.heap_figures); the walk"
        " takes memory itself, so the RSS figures of such a run are not comparable",
    )
    parser.add_argument(
        "--tracemalloc",
        type=int,
        default=0,
        metavar="FRAMES",
        help="with --heap, also trace the tracker's allocations (slows it down a lot)",
    )
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()
    history: dict[int, float] = {}
    results = []
    for n in sorted(args.n):
        result = run_tracking(
            n,
            time_scale=args.time_scale,
            window=args.window,
            cncf=not args.no_cncf,
            cncf_full_max=args.cncf_full_max,
            stream_logs=args.stream_logs,
            heap=args.heap,
            tracemalloc=args.tracemalloc,
            startup=startup_estimate(n, history),
        )
        history[n] = result["startup_seconds"]
        results.append(result)
        ours = result["ours"]
        cached = ours["cache"].get("running") or {}
        print(
            f"[tracking n={n}] peak RSS {ours['peak_rss_mb']:.0f} MB ({ours['rss_start_mb']:.0f} MB before the"
            f" triggers), {ours['peak_rss_per_job_kb']:.1f} KB per tracked job; watch cache with every job"
            f" running: {cached.get('bytes_per_job', 0):,.0f} bytes of JSON per job {cached.get('objects')}"
        )
        for what, figures in ((ours.get("heap") or {}).get("walked") or {}).items():
            print(f"[tracking n={n}]   {figures['bytes_per_job']:>6,} bytes per job: {what}")
        print(json.dumps(result, indent=1, default=str))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"machine": machine(), "tracking": results}, f, indent=1)


if __name__ == "__main__":
    main()
