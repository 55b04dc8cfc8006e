"""Tracking benchmark: N jobs deferred at once in one triggerer-like process, ours against the cncf trigger.

Run: ``.venv/bin/python tests/benchmarks/bench_tracking.py --n 100 1000 [--out results.json]``
(``scripts/bench`` runs it with every size and writes ``docs/benchmarks.md``).

For each N, on one simulated cluster in its own process:

1. N jobs are created suspended from real manifests, with staggered run times (scenario annotation
   ``{"main": {"run": S, "logs": ["starting", "done"]}}``): every job runs long enough for the whole
   cluster to be running before the first one ends, then they end spread over 20 s to 12 minutes (at
   most about 28 a second).
2. The admission controller starts in a process of its own (no pool in the namespace: it lets every job
   go), and a triggerer-like process starts N ``JobTrigger``\\ s as ``JobOperator`` defers them, with
   its default ``stream_logs=True`` (``--no-stream-logs`` turns it off). They follow their jobs.
3. Window A: ``SETTLE`` seconds after that process has *received* (its shared watch delivered) a
   Running pod of every job, the API requests per second and the tracker's CPU use are measured over
   ``--window`` seconds with nothing changing in the cluster but the containers' log lines: the tracking
   cost, and the log reads' rate apart.
4. A second process starts cncf ``KubernetesJobTrigger``\\ s (default poll interval 10 s) on the first
   ``--cncf-max`` jobs (default 1,000: Airflow's ``[triggerer] capacity``, what one triggerer runs), as
   its ``KubernetesJobOperator`` defers in deferrable mode. Window B opens once it is polling and is
   ``--cncf-windows`` consecutive windows of ``--window`` seconds: its rate and CPU vary a lot from one
   window to the next, so they are reported as a range. Its requests are told apart by their path
   (``GET .../jobs/<name>/status``, which ours never calls).
5. The jobs end. Latencies per job, against the moment the simulator wrote the change: pod Running to
   the trigger logging RUNNING; the job's Complete condition to our watch receiving it, to the trigger
   logging SUCCEEDED and to its final event. Above ``--cncf-full-max`` followed jobs the cncf process is
   stopped when window B closes (its polling cannot keep up and would only take the CPU from the rest):
   its rate is reported, not its latency. Container log lines that reached each task log and the log
   markers each final event left to the worker are counted.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import sys
import time
from typing import Any

from benchlib import (
    AdmissionController,
    RealCluster,
    SimProcess,
    TrackerProcess,
    cpu_in_window,
    latency_stats,
    machine,
    window_rate,
)

CNCF_KEYS = ("get jobs/status",)  # what the cncf trigger calls, and nothing else does
LOG_KEYS = ("get pods/log",)  # our log streams and reads (the cncf trigger reads no log)
SETTLE = 3.0  # seconds after our tracker received the last pod Running before window A opens
CNCF_START = 45.0  # seconds the cncf process takes to import and start polling, with a margin
CNCF_START_PER_JOB = 0.07  # plus this per trigger: it builds an API client (an SSL context) per poll
# Airflow's [triggerer] capacity (named default_capacity before Airflow 3.0): the triggers one triggerer
# runs at once by default (apache-airflow 3.3, airflow/config_templates/config.yml).
TRIGGERER_CAPACITY = 1000
CNCF_WINDOWS = 3  # consecutive windows of the cncf trigger's rate and CPU
END_RATE = 5000 / 180  # jobs ending per second at most (the rate of the 5,000-job run): sets the spread
JOB_LOGS = ("starting",)  # each job's listed container line; then it talks (below)
# The workload: while it runs, every job's container writes a line a second; a few loud ones ten a
# second; each writes ``done`` just before it ends, the line every task log needs. On the plane the
# scenario player appends them to the CRI log files kwok serves; on the stand-in a ticker thread of
# the simulator appends them to its log store. Each line carries the wall time it was written.
QUIET_EVERY = 1.0
LOUD_EVERY = 0.1
LOUD_SHARE = 0.02
LAST_LINE = "done"
TALK_ANNOTATION = "plane.airflow-jobs.io/log-every"  # realplane/player.py TALK_ANNOTATION
ADMISSION_VERBS = ("create", "patch", "update", "delete")  # unsuspend, ledger writes; the rest reads


def startup_estimate(n: int, history: dict[int, float] | None = None, real: bool = False) -> float:
    """Real seconds until our tracker has received a Running pod of each of ``n`` jobs, with a margin.

    A conservative default, linear in ``n`` (measured on 2 cores: 1-2 s at 100 jobs, 5-9 s at 1,000 on
    an idle machine and 20 s with a load average of 4-10; the simulator alone starts 20,000 pods in
    about 70 s, our tracker's admissions and log streams come on top);
    with measurements of smaller runs, at least a power law through the last two (exponent between 1.2
    and 2.2: start-up grows a little faster than linearly, as every write also feeds the watches of every
    client). Planning long costs only waiting; planning short lets jobs end inside the windows."""
    # The real plane creates pods through the Job controller, the scheduler, kwok and the player (two
    # writes per pod), each at its client's rate limit: slower than the simulator's store writes.
    default = 30 + 0.06 * n if real else 20 + 0.025 * n
    points = sorted((history or {}).items())
    if len(points) >= 2:
        (n1, s1), (n2, s2) = points[-2], points[-1]
        k = math.log(max(s2, 1.0) / max(s1, 1.0)) / math.log(n2 / n1) if n2 > n1 else 1.0
        k = min(2.2, max(1.2, k))
        return max(default, 10 + 1.2 * s2 * (n / n2) ** k)
    return default


# Started beside a real plane this run starts: a cluster that runs MPI jobs runs the MPI operator, so
# the MPIJob resource is served and the shared watch holds a watch on it (without it, the watch checks
# every 5 minutes whether the resource has appeared, or at once when a trigger follows one of its jobs).
PLANE_WITH = "mpi-operator"


def run_tracking(
    n: int,
    *,
    time_scale: float = 0.5,
    window: float = 30.0,
    spread: float | None = None,
    cncf: bool = True,
    cncf_full_max: int = 100,
    cncf_max: int = TRIGGERER_CAPACITY,
    cncf_windows: int = CNCF_WINDOWS,
    poll_interval: float = 10.0,
    stream_logs: bool = True,
    heap: bool = False,
    tracemalloc: int = 0,
    startup: float | None = None,
    cluster: str = "sim",
    kubeconfig: str | None = None,
    gc_freeze: bool = True,
    log_streams: int | None = None,
    poll_rate: float | None = None,
    plane_with: str = PLANE_WITH,
    say: Any = print,
) -> dict[str, Any]:
    """One tracking run of ``n`` jobs on the stand-in (``cluster="sim"``) or on the real control plane
    (``"real"``: started here, or the one ``kubeconfig`` names); returns the figures (see the module
    docstring)."""
    real = cluster == "real"
    spread = spread if spread is not None else max(20.0, n / END_RATE)
    startup = startup if startup is not None else startup_estimate(n, real=real)
    cncf_windows = max(1, cncf_windows)
    followed = min(n, cncf_max) if cncf else 0  # jobs the cncf tracker follows: one triggerer's worth
    cncf_start = CNCF_START + CNCF_START_PER_JOB * followed
    lead = startup + SETTLE + window + ((cncf_start + cncf_windows * window) if cncf else 0.0) + 10.0
    rng = random.Random(n)
    runs = [(lead + spread * rng.random()) / time_scale for _ in range(n)]
    talk = [LOUD_EVERY if rng.random() < LOUD_SHARE else QUIET_EVERY for _ in range(n)]
    # On a plane that is already up, a namespace of its own (an earlier run's jobs may still be there).
    namespace = f"track-{n}-{int(time.time()) % 100000}" if real else f"track-{n}"
    nodes = n // 100 + 2  # 110 pods per node
    say(
        f"[tracking n={n}] {cluster} cluster, {nodes} nodes, time scale {time_scale},"
        f" start-up planned {startup:.0f}s, jobs run"
        f" {lead:.0f}-{lead + spread:.0f}s, logs {'followed' if stream_logs else 'off'}"
        + (f", cncf follows {followed:,} of {n:,}" if cncf else "")
    )
    load = os.getloadavg()  # the machine is shared: what else ran when this one started
    plane: RealCluster | SimProcess = (
        RealCluster(nodes=nodes, kubeconfig=kubeconfig, time_scale=time_scale, with_=plane_with)
        if real
        else SimProcess(nodes=nodes, time_scale=time_scale)
    )
    with plane as sim:
        t0 = time.time()
        specs = [{"run": r, "logs": list(JOB_LOGS), "every": e} for r, e in zip(runs, talk, strict=True)]
        if isinstance(sim, RealCluster):
            names = sim.create_jobs(namespace, f"t{n}", specs, talk_annotation=TALK_ANNOTATION)
        else:
            names = sim.cmd("create_jobs", namespace=namespace, prefix=f"t{n}", jobs=specs)
            sim.cmd(
                "ticks",
                namespace=namespace,
                jobs={
                    name: {"every": e, "end": r * time_scale}
                    for name, r, e in zip(names, runs, talk, strict=True)
                },
            )
        created = time.time()
        cap = lead + spread + 600
        extra = (
            (["--stream-logs"] if stream_logs else [])
            + (["--heap"] if heap else [])
            + (["--tracemalloc", str(tracemalloc)] if tracemalloc else [])
            + ([] if gc_freeze else ["--no-gc-freeze"])
            + (["--log-streams", str(log_streams)] if log_streams is not None else [])
            + (["--poll-rate", str(poll_rate)] if poll_rate is not None else [])
        )
        # The jobs start once the admission controller lets them (no pool in the namespace: at once); it
        # runs beside the trackers as its own process, as deployed, and its requests are not theirs.
        controller = AdmissionController(sim.kubeconfig, namespace)
        ours = TrackerProcess(sim, "ours", names, namespace, cap=cap, extra=extra)
        theirs: TrackerProcess | None = None
        try:
            # Window A opens once our tracker has *received* the last change of the start-up burst (its
            # watch delivered a Running pod of every job), not when the simulator wrote it.
            received = float(ours.wait_announced("received_all_running", timeout=lead * 2))
            say(
                f"[tracking n={n}] a Running pod of all {n} jobs received by our tracker"
                f" {received - ours.ready:.1f}s after the triggers started"
            )
            if received - ours.ready > startup:
                say(
                    f"[tracking n={n}] WARNING: start-up took {received - ours.ready:.0f}s, {startup:.0f}s planned:"
                    f" the last window may close after the first jobs end (plan with --startup {n}=SECONDS)"
                )
            window_a = (received + SETTLE, received + SETTLE + window)
            time.sleep(max(0.0, window_a[1] - time.time()) + 0.6)
            windows_b: list[tuple[float, float]] = []
            if cncf:
                # Its operator defers once the job's pods exist; the trigger itself only ever reads the Job.
                theirs = TrackerProcess(
                    sim,
                    "cncf",
                    names[:followed],
                    namespace,
                    cap=cap,
                    extra=[
                        "--poll-interval",
                        str(poll_interval),
                        "--announce-requests",
                        f"{CNCF_KEYS[0]}={min(followed, 100)}",
                    ],
                )
                # Its window opens once it is polling (the first polls of a large set take minutes).
                polling = float(theirs.wait_announced(f"requests_{CNCF_KEYS[0]}", timeout=lead * 2))
                windows_b = [(polling + i * window, polling + (i + 1) * window) for i in range(cncf_windows)]
                time.sleep(max(0.0, windows_b[-1][1] - time.time()) + 0.6)
                if followed > cncf_full_max:
                    theirs.stop()
            ours_result = ours.result(timeout=cap + 300)
            theirs_result = theirs.result(timeout=cap + 300) if theirs is not None else None
        finally:
            # A run that failed midway leaves no tracker behind following the jobs until its cap.
            for tracker in (ours, theirs):
                if tracker is not None:
                    tracker.close()
            controller.stop()
        transitions = sim.cmd("transitions", namespace=namespace)
        samples = [(t, c) for t, c in sim.cmd("samples", since=t0)]
        simulator = sim.cmd("resources")
        ticker = sim.cmd("ticker")
    result = summarize(
        n,
        transitions,
        samples,
        ours_result,
        theirs_result,
        window_a,
        windows_b,
        ready=ours.ready,
        received_all_running=received,
        create_seconds=created - t0,
    )
    result["load_at_start"] = [round(x, 2) for x in load]
    result["load_at_end"] = [round(x, 2) for x in os.getloadavg()]
    result["cluster"] = cluster
    result["writer"] = ticker[0] if ticker else None
    late = (result["writer"] or {}).get("late_last_lines") or {}
    logs = result["ours"].get("logs") or {}
    if late and "jobs_without_last_line" in logs:
        # A job's pods are named after it plus a suffix the Job controller adds.
        late_jobs = {pod.rsplit("-", 1)[0] for pod in late}
        logs["jobs_missing_late_last_line"] = [j for j in logs["jobs_without_last_line"] if j in late_jobs]
    if isinstance(plane, RealCluster):
        # The plane's processes: CPU seconds over the run, RSS (the apiserver's and etcd's for n jobs).
        result["plane"] = {"processes": simulator, "up_seconds": round(plane.up_seconds, 1)}
    result["simulator"] = (
        None
        if real
        else {
            "cpu_seconds": round(simulator["cpu_seconds"], 1),
            "peak_rss_mb": round(simulator["peak_rss_kb"] / 1024, 1),
            # Its sampler reads the counters inside the simulator's loop every half second: a long gap
            # between two samples is a stall of that loop (every watch event it sends waits for it too).
            "loop_lag_max": max_gap(samples),
            "loop_stalls": stalls(samples),
        }
    )
    result["setup"] = {
        "time_scale": time_scale,
        "nodes": nodes,
        "window": window,
        "settle": SETTLE,
        "spread": spread,
        "startup_planned": round(startup, 1),
        "run_seconds_real": [round(lead, 1), round(lead + spread, 1)],
        "run_seconds_simulated": [round(min(runs), 1), round(max(runs), 1)],
        "stream_logs": stream_logs,
        "job_logs": list(JOB_LOGS),
        "talk": {"quiet_every": QUIET_EVERY, "loud_every": LOUD_EVERY, "loud_jobs": talk.count(LOUD_EVERY)},
        "gc_freeze": gc_freeze,
        "plane_with": plane_with if real and kubeconfig is None else None,
        "log_streams": log_streams,
        "poll_rate": poll_rate,
        "heap": heap,
        "tracemalloc": tracemalloc,
        "poll_interval": poll_interval,
        "cncf_max": cncf_max,
        "cncf_followed": followed,
        "cncf_windows": cncf_windows if cncf else 0,
        "cncf_capped_after_window": bool(cncf and followed > cncf_full_max),
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


def rss_phases(ours: dict, all_running: float, first_end: float | None) -> dict[str, Any]:
    """When the tracker's RSS peaked, from its half-second samples: the most above the import while
    the jobs started, while all ran, and once they ended (MB), and how long after the triggers started
    the highest sample came. The peak (``VmHWM``) may fall between two samples."""
    start = ours["rss_start_kb"]
    phases: dict[str, list[float]] = {"starting": [], "running": [], "ending": []}
    top = (0.0, 0.0)
    peak_seen: tuple[float, float] | None = None  # (time, RSS) of the first sample that saw the peak
    for t, _cpu, rss, hwm in ours["samples"]:
        phase = (
            "starting" if t < all_running else "running" if first_end is None or t < first_end else "ending"
        )
        phases[phase].append(rss)
        top = max(top, (rss, t))
        if peak_seen is None and hwm >= ours["peak_rss_kb"]:
            peak_seen = (t, rss)
    return {
        **{f"{k}_max_mb": round((max(v) - start) / 1024, 1) if v else None for k, v in phases.items()},
        "highest_sample_after_s": round(top[1] - ours["started"], 1) if top[1] else None,
        # The peak between two samples: seen by the sample at this time (None: after the last sample,
        # as the tracker ended), whose own RSS was this much lower.
        "peak_seen_after_s": round(peak_seen[0] - ours["started"], 1) if peak_seen else None,
        "peak_above_that_sample_mb": round((ours["peak_rss_kb"] - peak_seen[1]) / 1024, 1)
        if peak_seen
        else None,
    }


def summarize(
    n: int,
    transitions: dict[str, dict],
    samples: list,
    ours: dict,
    theirs: dict | None,
    window_a: tuple[float, float],
    windows_b: list[tuple[float, float]],
    *,
    ready: float,
    received_all_running: float,
    create_seconds: float,
) -> dict[str, Any]:
    finished = [e["finished"] for e in transitions.values() if "finished" in e]
    first_end = min(finished) if finished else None
    running = [e["running"] for e in transitions.values() if "running" in e]
    written_all_running = max(running) if len(running) >= n else None
    window_b = (windows_b[0][0], windows_b[-1][1]) if windows_b else None
    # Requests as each tracker's client sent them (tracker.Requests): the same count on both clusters.
    ours_req = ours.get("requests") or samples
    events = {k: {"final": v["t"]} for k, v in ours["events"].items()}
    statuses: dict[str, int] = {}
    for v in ours["events"].values():
        statuses[v["status"]] = statuses.get(v["status"], 0) + 1
    ours_fig = {
        "jobs": n,
        "events": len(ours["events"]),
        "statuses": statuses,
        # Every request of ours in window A; the same without the log streams and reads (the tracking
        # itself); the log streams and reads alone (bounded by the log hub's read rate).
        "steady": window_rate(ours_req, *window_a, exclude=CNCF_KEYS),
        "steady_tracking": window_rate(ours_req, *window_a, exclude=CNCF_KEYS + LOG_KEYS),
        "steady_log_reads": window_rate(ours_req, *window_a, include=LOG_KEYS),
        "steady_beside_cncf": window_rate(ours_req, *window_b, exclude=CNCF_KEYS) if window_b else None,
        "lifetime": window_rate(ours_req, ours["started"], ours["ended"], exclude=CNCF_KEYS, covering=True),
        "cpu_steady": cpu_in_window(ours["samples"], *window_a),
        "cpu_seconds": ours["cpu_seconds"],
        "rss_start_mb": ours["rss_start_kb"] / 1024,
        "peak_rss_mb": ours["peak_rss_kb"] / 1024,
        # What following N jobs costs in memory: the peak above the process's size just before its
        # first trigger ran (Airflow and the client imported, the triggers built), in all and per job,
        # and the shared watch's cache as JSON bytes.
        "rss_above_import_mb": (ours["peak_rss_kb"] - ours["rss_start_kb"]) / 1024,
        "peak_rss_per_job_kb": (ours["peak_rss_kb"] - ours["rss_start_kb"]) / n,
        "rss_phases": rss_phases(ours, received_all_running, first_end),
        "peak_rss_before_end_figures_mb": (ours.get("peak_rss_before_end_figures_kb") or 0) / 1024,
        "sharing_sweeps": [
            (round(t - ours["started"], 1), before, after)
            for t, before, after in ours.get("sharing_sweeps") or []
        ],
        # The five half-second intervals whose RSS rose highest above the sample that closed them.
        "rss_spikes": sorted(
            (
                (
                    round((hwm - rss) / 1024, 1),
                    round(t - ours["started"], 1),
                    round((hwm - ours["rss_start_kb"]) / 1024, 1),
                )
                for t, _cpu, rss, hwm in ours["samples"]
            ),
            reverse=True,
        )[:5],
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
        "loop_stalls": stalls(ours["samples"]),
        # Garbage collections: their time per generation, and the slow ones (tracker.GcClock).
        "gc": ours.get("gc"),
        # pymalloc's blocks and glibc's free memory before the triggers and with every job running.
        "allocators": ours.get("allocators"),
        "log_lines": ours["log_lines"],
        "logs": container_logs(ours, transitions),
        "requests": requests_whole(
            ours_req, window_a, ours["started"], ours["ended"], ours.get("worker_path")
        ),
        "line_latency": ours.get("line_latency"),
        "gc_frozen_after_s": round(ours["gc_frozen_at"] - ours["started"], 1)
        if ours.get("gc_frozen_at")
        else None,
        "watch_relists": ours.get("watch_relists"),
        "errors": ours["errors"][:5],
        "capped": ours["capped"],
    }
    result: dict[str, Any] = {
        "n": n,
        "create_seconds": round(create_seconds, 1),
        # Seconds after the triggers started: until our tracker received a Running pod of every job
        # (what the run's schedule is planned on), and until the simulator wrote the last of them.
        "startup_seconds": round(received_all_running - ready, 1),
        "all_running": {
            "received": round(received_all_running - ready, 2),
            "written": round(written_all_running - ready, 2) if written_all_running is not None else None,
            "received_at": received_all_running,
            "written_at": written_all_running,
        },
        "window_a": [round(w, 2) for w in window_a],
        "window_b": [round(w, 2) for w in window_b] if window_b else None,
        "windows_b": [[round(a, 2), round(b, 2)] for a, b in windows_b],
        "first_end": first_end,
        "windows_before_first_end": first_end is None
        or max(window_a[1], (window_b or window_a)[1]) <= first_end,
        "ours": ours_fig,
        "cncf": None,
    }
    if theirs is not None and window_b is not None:
        followed = theirs["n"]
        theirs_req = theirs.get("requests") or samples
        # A trigger that crashed (the cncf one times out when its loop stalls) has no final event.
        cevents = {k: {"final": v["t"]} for k, v in theirs["events"].items() if v["status"] != "crashed"}
        cstatuses: dict[str, int] = {}
        for v in theirs["events"].values():
            cstatuses[v["status"]] = cstatuses.get(v["status"], 0) + 1
        steady = window_rate(theirs_req, *window_b, include=CNCF_KEYS)
        windows = []
        for start, end in windows_b:
            rate = window_rate(theirs_req, start, end, include=CNCF_KEYS)
            windows.append(
                {
                    **rate,
                    "polls_per_job_per_second": (rate["per_second"] or 0) / followed,
                    "cpu": cpu_in_window(theirs["samples"], start, end),
                }
            )
        result["cncf"] = {
            "jobs": followed,
            "of": n,
            "events": len(theirs["events"]),
            "statuses": cstatuses,
            "steady": steady,
            "windows": windows,
            "ranges": {
                "per_second": span(w["per_second"] for w in windows),
                "polls_per_job_per_second": span(w["polls_per_job_per_second"] for w in windows),
                "cpu": span(w["cpu"] for w in windows),
            },
            "lifetime": window_rate(
                theirs_req, theirs["started"], theirs["ended"], include=CNCF_KEYS, covering=True
            ),
            "polls_per_job_per_second": (steady["per_second"] or 0) / followed,
            "cpu_steady": cpu_in_window(theirs["samples"], *window_b),
            "loop_lag_max": max_gap(theirs["samples"]),
            "cpu_seconds": theirs["cpu_seconds"],
            "rss_start_mb": theirs["rss_start_kb"] / 1024,
            "peak_rss_mb": theirs["peak_rss_kb"] / 1024,
            "rss_above_import_mb": (theirs["peak_rss_kb"] - theirs["rss_start_kb"]) / 1024,
            "latency": {"final_event": latency_stats(_latencies(transitions, cevents, "finished", "final"))},
            "log_lines": theirs["log_lines"],
            "requests": requests_whole(theirs_req, window_b, theirs["started"], theirs["ended"], None),
            "errors": theirs["errors"][:5],
            "capped": theirs["capped"],
            "ran_seconds": round(theirs["ended"] - theirs["started"], 1),
        }
        # Against our tracking requests (the cncf trigger follows no log), and against every request of
        # ours, log reads included. The cncf trigger's rate is that of its ``followed`` jobs, ours of n.
        result["ratio_requests"] = measured_ratio(ours_fig["steady_tracking"], result["cncf"])
        result["ratio_requests_range"] = ratio_range(ours_fig["steady_tracking"], windows)
        result["ratio_requests_with_log_reads"] = measured_ratio(ours_fig["steady"], result["cncf"])
        result["ratio_requests_with_log_reads_range"] = ratio_range(ours_fig["steady"], windows)
    return result


def requests_whole(
    req: list, window: tuple[float, float], started: float, ended: float, worker: dict | None
) -> dict[str, Any]:
    """Every request a tracker sent, split three ways: tracking (lists, watches, gets), log reads and
    streams (``get pods/log``), admission (writes: the unsuspend, quota ledger writes); each per second
    in the steady window and in total over the tracker's life (the worker's ``execute_complete`` reads
    apart)."""

    def split(rate: dict) -> dict[str, Any]:
        keys = rate.get("by_key") or {}
        seconds = rate.get("seconds") or 0.0
        parts = {"tracking": 0, "log_reads": 0, "admission": 0}
        for key, count in keys.items():
            verb = key.split(" ", 1)[0]
            part = "log_reads" if key in LOG_KEYS else "admission" if verb in ADMISSION_VERBS else "tracking"
            parts[part] += count
        out: dict[str, Any] = {
            part: {"requests": count, "per_second": round(count / seconds, 3) if seconds else None}
            for part, count in parts.items()
        }
        out["all"] = {"requests": sum(parts.values()), "per_second": rate.get("per_second")}
        out["seconds"] = seconds
        return out

    return {
        "window": split(window_rate(req, *window)),
        "lifetime": split(window_rate(req, started, ended, covering=True)),
        "worker_path": (worker or {}).get("requests"),
    }


def span(values: Any) -> list[float] | None:
    """[min, max] of the values that are not None; None if there is none."""
    known = [v for v in values if v is not None]
    return [min(known), max(known)] if known else None


def ratio_range(ours: dict, windows: list[dict]) -> dict[str, Any]:
    """The request ratio in each of the cncf trigger's windows against ours in window A, as [min, max]
    over the windows in which it sent requests (``empty``: the windows in which it sent none)."""
    ratios = [request_ratio(ours, w) for w in windows]
    values = [r["value"] for r in ratios if r["value"] is not None]
    return {
        "range": [min(values), max(values)] if values else None,
        "lower_bound": any(r["lower_bound"] for r in ratios),
        "empty": sum(1 for w in windows if not w["requests"]),
    }


def windows_ratio(ours: dict, windows: list[dict]) -> dict[str, Any]:
    """The request ratio against the cncf trigger's rate over all its windows together. Its rate swings
    from window to window (a window in which its loop stalled sends few requests, which says nothing
    in its favour), and while ours sends none the ratio of one 30 s window is only a lower bound, so the
    target is judged on its rate over the windows together; the table keeps the window-by-window range."""
    seconds = sum(w.get("seconds") or 0 for w in windows)
    if not seconds:
        return {"value": None, "lower_bound": False}
    requests = sum(w.get("requests") or 0 for w in windows)
    return request_ratio(ours, {"per_second": requests / seconds})


def container_logs(ours: dict, transitions: dict[str, dict]) -> dict[str, Any]:
    """Container logs in the task logs: jobs whose first line came while the job still ran (before its
    Complete condition: a live log), lines per job, jobs whose last line (``JOB_LOGS[-1]``) reached the
    task log from the trigger, jobs whose final event left log markers to the worker (which prints the
    rest in ``execute_complete``; not run here), and the log hub's streams and reads."""
    first = ours.get("first_log_line") or {}
    lines = ours.get("container_log_lines") or {}
    last = ours.get("last_log_line") or {}
    live = sum(
        1
        for name, entry in transitions.items()
        if name in first and entry.get("finished") is not None and first[name] < entry["finished"]
    )
    jobs = list(transitions)
    counts = sorted(lines.get(name, 0) for name in jobs)
    with_last = {name for name, text in last.items() if text.split("] ", 1)[-1].startswith(LAST_LINE)}
    markers = {name: e.get("log_markers") or 0 for name, e in (ours.get("events") or {}).items()}
    with_markers = {name for name, count in markers.items() if count}
    return {
        "jobs_with_live_log": live,
        "jobs_with_log": len(first),
        "lines": sum(lines.values()),
        "lines_expected": None,  # the talking containers' lines depend on their runs: see writer
        "lines_per_job_min_max": [counts[0], counts[-1]] if counts else None,
        "jobs_with_last_line": len(with_last),
        "jobs_with_markers": len(with_markers),
        "markers": sum(markers.values()),
        # The last line printed by the trigger, or left to the worker by a marker.
        "jobs_last_line_accounted": len(with_last | with_markers),
        # Neither printed by the trigger nor left to the worker: what the table counts as missing.
        "jobs_without_last_line": sorted(set(jobs) - with_last - with_markers),
        # The markers' runs read on the worker (tracker.worker_path): jobs whose last line came so.
        "worker_path": ours.get("worker_path") or {},
        "hub": ours.get("log_hub") or {},
    }


def _gaps(samples: list) -> list[tuple[float, float]]:
    """(when, how long beyond the half second) for each pair of consecutive half-second samples."""
    return [(b[0], b[0] - a[0] - 0.5) for a, b in zip(samples, samples[1:], strict=False)]


def max_gap(samples: list) -> float | None:
    """The longest gap between two of a tracker's half-second samples, minus the half second: how long
    its event loop was at worst too busy to run a timer."""
    gaps = _gaps(samples)
    return max(0.0, max(g for _, g in gaps)) if gaps else None


def stalls(samples: list, at_least: float = 0.5) -> list[tuple[float, float]]:
    """Each time the loop was too busy to run the half-second sampler for ``at_least`` seconds more:
    (when the stall ended, how long it was beyond the half second)."""
    return [(round(t, 2), round(g, 3)) for t, g in _gaps(samples) if g >= at_least]


def measured_ratio(ours: dict, cncf: dict) -> dict[str, Any]:
    """The request ratio against the cncf trigger's rate in its window; when its event loop was stalled
    for the whole window (no request at all), against its rate over its whole run instead, marked so."""
    if cncf["steady"]["requests"]:
        return request_ratio(ours, cncf["steady"])
    return {**request_ratio(ours, cncf["lifetime"]), "basis": "its whole run"}


def request_ratio(ours: dict, theirs: dict) -> dict[str, Any]:
    """How many times more requests the cncf trigger made in its window than ours in its own: only
    where both sides sent requests. Ours sending none in its window is reported as that (``ours_none``),
    never turned into a ratio against an assumed floor. (``lower_bound`` stays False: kept for the
    results saved before this rule.)"""
    if not ours.get("seconds") or not theirs.get("per_second"):
        return {"value": None, "lower_bound": False}
    if ours["requests"] == 0:
        return {"value": None, "lower_bound": False, "ours_none": True}
    return {"value": theirs["per_second"] / (ours["requests"] / ours["seconds"]), "lower_bound": False}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--time-scale", type=float, default=0.5)
    parser.add_argument("--window", type=float, default=30.0, help="window A and each cncf window (s)")
    parser.add_argument("--spread", type=float, default=None, help="the jobs end over this many seconds")
    parser.add_argument("--no-cncf", action="store_true", help="our trigger only")
    parser.add_argument("--cncf-full-max", type=int, default=100)
    parser.add_argument(
        "--cncf-max",
        type=int,
        default=TRIGGERER_CAPACITY,
        help="the cncf trigger follows the first M jobs (default: one triggerer's default capacity)",
    )
    parser.add_argument("--cncf-windows", type=int, default=CNCF_WINDOWS, help="consecutive cncf windows")
    parser.add_argument("--poll-interval", type=float, default=10.0, help="the cncf trigger's poll interval")
    parser.add_argument(
        "--stream-logs",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="JobTrigger's stream_logs (default on, as the operator's)",
    )
    parser.add_argument(
        "--startup",
        nargs="*",
        default=[],
        metavar="N=SECONDS",
        help="the start-up to plan for at N jobs (default: extrapolated from smaller N)",
    )
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
    parser.add_argument(
        "--cluster",
        choices=("sim", "real"),
        default="sim",
        help="the stand-in (simulator) or the real control plane (started here unless --kubeconfig)",
    )
    parser.add_argument("--kubeconfig", default=None, help="--cluster real: a plane already up")
    parser.add_argument(
        "--plane-with",
        default=PLANE_WITH,
        help=f"--cluster real: components started beside the plane (scripts/cluster up --with; default"
        f" {PLANE_WITH}; '' for none)",
    )
    parser.add_argument(
        "--gc-freeze",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the product's gc.freeze() at its first trigger's start (--no-gc-freeze: off, to compare)",
    )
    parser.add_argument("--log-streams", type=int, default=None, help="our log stream budget (default 500)")
    parser.add_argument("--poll-rate", type=float, default=None, help="our log reads per second (default 20)")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()
    # A run stopped with SIGTERM (a background job ignores SIGINT) still stops its trackers and the
    # plane it started: the exception unwinds through their context managers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    history: dict[int, float] = {}
    planned = {int(k): float(v) for k, v in (item.split("=", 1) for item in args.startup)}
    results = []
    for n in sorted(args.n):
        result = run_tracking(
            n,
            time_scale=args.time_scale,
            window=args.window,
            spread=args.spread,
            cncf=not args.no_cncf,
            cncf_full_max=args.cncf_full_max,
            cncf_max=args.cncf_max,
            cncf_windows=args.cncf_windows,
            poll_interval=args.poll_interval,
            stream_logs=args.stream_logs,
            heap=args.heap,
            tracemalloc=args.tracemalloc,
            startup=planned.get(n) or startup_estimate(n, history, real=args.cluster == "real"),
            cluster=args.cluster,
            kubeconfig=args.kubeconfig,
            gc_freeze=args.gc_freeze,
            log_streams=args.log_streams,
            poll_rate=args.poll_rate,
            plane_with=args.plane_with,
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
        for line in summary_lines(result):
            print(line)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"machine": machine(), "tracking": results}, f, indent=1)


def summary_lines(result: dict[str, Any]) -> list[str]:
    """The run's headline figures, one line each."""
    n = result["n"]
    ours = result["ours"]
    cached = ours["cache"].get("running") or {}
    logs = ours["logs"]
    every = result["all_running"]
    lines = [
        f"[tracking n={n}] every job's pod Running: written {_s(every['written'])}, received by our tracker"
        f" {_s(every['received'])} after the triggers started; window A from {SETTLE:g}s after that",
        f"[tracking n={n}] peak RSS {ours['peak_rss_mb']:.0f} MB, {ours['rss_above_import_mb']:.0f} MB above"
        f" the Airflow import ({ours['rss_start_mb']:.0f} MB before the first trigger),"
        f" {ours['peak_rss_per_job_kb']:.1f} KB per tracked job; watch cache with every job running:"
        f" {cached.get('bytes_per_job', 0):,.0f} bytes of JSON per job {cached.get('objects')}",
        f"[tracking n={n}] window A: {ours['steady_tracking']['requests']} tracking requests,"
        f" {ours['steady_log_reads']['requests']} log streams and reads"
        f" ({_rate(ours['steady_log_reads']['per_second'])}/s, bound {logs['hub'].get('poll_rate')}/s)"
        f" in {ours['steady']['seconds']:.0f}s",
        f"[tracking n={n}] logs: {logs['jobs_with_live_log']:,} jobs with a live log,"
        f" {logs['lines']:,} lines in the task logs from the trigger,"
        f" {logs['jobs_with_last_line']:,} jobs' last line from the trigger,"
        f" {logs['jobs_with_markers']:,} jobs with {logs['markers']:,} markers left to the worker"
        f" ({(logs.get('worker_path') or {}).get('jobs_with_last_line', 0):,} last lines printed there)",
        f"[tracking n={n}] line latency: "
        + ", ".join(
            f"{source} p50 {_s(f['p50'])} p99 {_s(f['p99'])} ({f['count']:,} lines)"
            for source, f in (
                (ours.get("line_latency") or {}).get("by_class")
                or (ours.get("line_latency") or {}).get("by_source")
                or {}
            ).items()
        )
        + f"; writer lag p99 {_s(((ours.get('line_latency') or {}).get('writer_lag') or {}).get('p99'))}",
    ]
    collected = ours.get("gc") or {}
    if collected:
        gens = collected["by_generation"]
        lines.append(
            f"[tracking n={n}] garbage collections: "
            + ", ".join(
                f"generation {g} {f['count']}x {f['seconds']:.1f}s (longest {f['max'] * 1000:.0f} ms)"
                for g, f in gens.items()
            )
            + f"; loop stalls over 0.5 s: {len(ours.get('loop_stalls') or [])}"
        )
    cncf = result.get("cncf")
    if cncf:
        ranges = cncf["ranges"]
        lines.append(
            f"[tracking n={n}] cncf following {cncf['jobs']:,} of {n:,} jobs, {len(cncf['windows'])} windows:"
            f" {_span(ranges['per_second'], 1)} requests/s, {_span(ranges['polls_per_job_per_second'], 3)}"
            f" polls per job per s, CPU {_span(ranges['cpu'], 2)}; ratio to our tracking requests"
            f" {_span((result.get('ratio_requests_range') or {}).get('range'), 0)}"
        )
    if not result["windows_before_first_end"]:
        lines.append(
            f"[tracking n={n}] WARNING: a job ended before the windows closed (plan a longer start-up)"
        )
    return lines


def _s(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f}s"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _span(values: list[float] | None, digits: int) -> str:
    if not values:
        return "-"
    low, high = values
    return f"{low:.{digits}f}-{high:.{digits}f}"


if __name__ == "__main__":
    main()
