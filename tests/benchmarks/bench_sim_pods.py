"""How many pods per second the simulated cluster starts and ends: N single-pod Jobs at once.

A benchmark script, not a test (speed is never asserted in the test suite):

    PYTHONPATH=$PWD .venv/bin/python tests/benchmarks/bench_sim_pods.py --n 1000 5000 [--n 20000]
    PYTHONPATH=/path/to/other/checkout .venv/bin/python tests/benchmarks/bench_sim_pods.py ...  # another version

Per N, on a fresh cluster (time scale 1, N / 100 + 2 nodes, 110 pods each): N batch/v1 Jobs of one pod
(no GPU, no requests) are written straight into the store, unsuspended, in batches of 250 on the
cluster's loop (as ``simproc.py`` does: creating them over HTTP would measure the request path, not the
controllers). Every pod pulls its image for 0 s and runs ``--run`` seconds (default N / 100, at least
20 s: long enough for the start wave to be over before the first pod ends, so the two waves are measured
apart). The simulator runs its controllers (Job controller, scheduler, kubelets, garbage collector) as
always, on one event loop in a thread of this process; the main thread only sleeps and polls.

What is measured, all wall-clock ``time.time()`` readings taken inside the store writes (a store
watcher, as ``simproc.py``'s recorder), so they are the moments the cluster changed:

- **started per second**: N / (last pod ``Running`` - first Job created). Creating the Jobs, the Job
  controller's pod creation, scheduling and the kubelet's start of each pod are all inside it;
- **ended per second**: N / (last pod ``Succeeded`` - first pod ``Succeeded``). Pods come due at the
  rate they started, so this can be no higher than the start rate; the *overrun* (``Succeeded`` minus
  ``Running`` minus the run time, p50 / p99) says how far the end path fell behind the pods' due times;
- **Jobs complete per second** (the Job controller counting the pod, releasing its finalizer and writing
  ``Complete``), likewise from the first to the last;
- with ``--watch`` (the default), a separate process watches the namespace's pods over HTTP, as a
  client does, and notes when it *received* each pod's ``Running``: delivery lag p50 / p99 (both
  processes share the machine's clock);
- the process's CPU seconds (the simulator's, as nothing else runs here).

Writes a JSON file with every figure (``--out``) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from typing import Any

NAMESPACE = "bench"
SCENARIO = "sim.airflow-jobs.io/scenario"
BATCH = 250

# The watching client: a separate process, so that decoding the stream costs this one nothing. It
# prints the time each pod's Running and Succeeded were received, as one JSON line, when told to stop.
WATCHER = textwrap.dedent(
    """
    import http.client, json, sys, threading, time, urllib.parse
    url, rv = sys.argv[1], sys.argv[2]
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=3600)
    conn.request("GET", "/api/v1/namespaces/bench/pods?watch=true&allowWatchBookmarks=true"
                 f"&resourceVersion={rv}&timeoutSeconds=3600")
    resp = conn.getresponse()
    running, ended, events = {}, {}, [0]
    def read():
        for line in resp:
            now = time.time()
            ev = json.loads(line)
            obj = ev["object"]
            if ev["type"] == "BOOKMARK":
                continue
            events[0] += 1
            name, phase = obj["metadata"]["name"], (obj.get("status") or {}).get("phase")
            if phase == "Running":
                running.setdefault(name, now)
            elif phase in ("Succeeded", "Failed"):
                ended.setdefault(name, now)
    threading.Thread(target=read, daemon=True).start()
    print("ready", flush=True)
    sys.stdin.readline()
    print(json.dumps({"running": running, "ended": ended, "events": events[0]}), flush=True)
    """
)


def job_manifest(index: int, run: float) -> dict:
    scenario = {"main": {"pull": 0, "run": run, "logs": ["starting", "done"]}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"job-{index:05d}", "namespace": NAMESPACE},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {SCENARIO: json.dumps(scenario)}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "registry.example/trainer:1"}],
                },
            },
        },
    }


class Recorder:
    """First ``Running`` and first ``Succeeded``/``Failed`` of each pod, ``Complete`` of each Job.

    A store watcher: called inside each write, so the times are when the cluster changed."""

    def __init__(self) -> None:
        self.running: dict[str, float] = {}
        self.ended: dict[str, float] = {}
        self.complete: dict[str, float] = {}
        self.failed = 0

    def __call__(self, rv: int, event_type: str, resource: str, obj: dict, prev: dict | None) -> None:
        if event_type == "DELETED" or resource not in ("pods", "jobs"):
            return
        meta = obj.get("metadata") or {}
        if meta.get("namespace") != NAMESPACE:
            return
        status = obj.get("status") or {}
        if resource == "pods":
            phase = status.get("phase")
            if phase == "Running" and meta["name"] not in self.running:
                self.running[meta["name"]] = time.time()
            elif phase in ("Succeeded", "Failed") and meta["name"] not in self.ended:
                self.ended[meta["name"]] = time.time()
                self.failed += phase == "Failed"
            return
        for cond in status.get("conditions") or []:
            if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
                self.complete.setdefault(meta["name"], time.time())


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_one(n: int, run: float | None, watch: bool, timeout: float) -> dict[str, Any]:
    from airflow_jobs_sim import ClusterConfig, SimCluster

    run = run if run is not None else max(20.0, n / 100)
    nodes = n // 100 + 2
    print(f"[n={n}] {nodes} nodes, pods run {run:.0f} s", flush=True)
    cluster = SimCluster(ClusterConfig(nodes=nodes, time_scale=1.0)).start()
    recorder = Recorder()
    watcher = None
    try:
        store = cluster.store
        cluster.call(lambda: store.create("namespaces", {"metadata": {"name": NAMESPACE}}))
        cluster.call(lambda: store.watch("pods", store.current_rv(), recorder))
        if watch:
            watcher = subprocess.Popen(
                [sys.executable, "-c", WATCHER, cluster.url, str(store.current_rv())],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert watcher.stdout is not None
            watcher.stdout.readline()
        manifests = [job_manifest(i, run) for i in range(n)]
        cpu0, created_at = cpu_seconds(), time.time()
        for start in range(0, n, BATCH):
            chunk = manifests[start : start + BATCH]
            cluster.call(lambda chunk=chunk: [store.create("jobs", m, NAMESPACE) for m in chunk])
        created_done = time.time()
        deadline = created_at + timeout
        last_report = 0.0
        while time.time() < deadline:
            time.sleep(0.5)
            counts = cluster.call(
                lambda: (len(recorder.running), len(recorder.ended), len(recorder.complete))
            )
            if time.time() - last_report > 10:
                last_report = time.time()
                print(
                    f"[n={n}] {time.time() - created_at:5.0f} s: running {counts[0]}, ended {counts[1]}, "
                    f"complete {counts[2]}",
                    flush=True,
                )
            if counts[2] >= n:
                break
        cpu = cpu_seconds() - cpu0
        running, ended, complete = cluster.call(
            lambda: (dict(recorder.running), dict(recorder.ended), dict(recorder.complete))
        )
        received: dict[str, Any] = {}
        if watcher is not None:
            assert watcher.stdin is not None and watcher.stdout is not None
            watcher.stdin.write("\n")
            watcher.stdin.flush()
            received = json.loads(watcher.stdout.readline())
            watcher.wait(timeout=30)
            watcher = None
    finally:
        if watcher is not None:
            watcher.kill()
        cluster.stop()

    def span(times: dict[str, float], start: float | None = None) -> float | None:
        if len(times) < n:
            return None
        first = start if start is not None else min(times.values())
        return max(times.values()) - first

    start_span, end_span, complete_span = span(running, created_at), span(ended), span(complete)
    overrun = [ended[p] - running[p] - run for p in ended if p in running]
    lag = [received["running"][p] - t for p, t in running.items() if p in received.get("running", {})]
    result = {
        "n": n,
        "nodes": nodes,
        "run_seconds": run,
        "create_seconds": created_done - created_at,
        "started": len(running),
        "ended": len(ended),
        "complete": len(complete),
        "failed": recorder.failed,
        "start_seconds": start_span,
        "started_per_second": n / start_span if start_span else None,
        "end_seconds": end_span,
        "ended_per_second": n / end_span if end_span else None,
        "complete_per_second": n / complete_span if complete_span else None,
        "waves_overlap": bool(ended and running and min(ended.values()) < max(running.values())),
        "overrun_p50": percentile(overrun, 50),
        "overrun_p99": percentile(overrun, 99),
        "watch_running_received": len(received.get("running", {})),
        "watch_lag_p50": percentile(lag, 50),
        "watch_lag_p99": percentile(lag, 99),
        "total_seconds": max([*complete.values(), created_at]) - created_at,
        "cpu_seconds": cpu,
    }
    print(f"[n={n}] {json.dumps(result)}", flush=True)
    return result


def _f(value: float | None, digits: int = 0, unit: str = "") -> str:
    return "-" if value is None else f"{value:,.{digits}f}{unit}"


def table(results: list[dict]) -> str:
    rows = [
        "| N | started/s | ended/s | Jobs complete/s | start wave | end overrun p50 / p99 | "
        "watch: Running received p50 / p99 | whole run | CPU s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        rows.append(
            f"| {r['n']:,} | {_f(r['started_per_second'])} | {_f(r['ended_per_second'])} | "
            f"{_f(r['complete_per_second'])} | {_f(r['start_seconds'], 1, ' s')} | "
            f"{_f(r['overrun_p50'], 2, ' s')} / {_f(r['overrun_p99'], 2, ' s')} | "
            f"{_f(r['watch_lag_p50'], 2, ' s')} / {_f(r['watch_lag_p99'], 2, ' s')} | "
            f"{_f(r['total_seconds'], 0, ' s')} | {_f(r['cpu_seconds'], 0)} |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--n", type=int, nargs="+", default=[1000, 5000], help="Jobs per run (e.g. 20000 too)"
    )
    parser.add_argument(
        "--run", type=float, default=None, help="seconds each pod runs (default N / 100, >= 20)"
    )
    parser.add_argument("--no-watch", dest="watch", action="store_false", help="no HTTP watching client")
    parser.add_argument(
        "--timeout", type=float, default=900.0, help="give up on one N after this many seconds"
    )
    parser.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "bench-sim-pods.json"))
    args = parser.parse_args()

    results = [run_one(n, args.run, args.watch, args.timeout) for n in args.n]
    with open(args.out, "w") as f:
        json.dump(
            {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "results": results}, f, indent=1
        )
    print(table(results))
    print(f"raw results: {args.out}")


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    main()
