"""CPU per pod event in the trigger, beside the cost of decoding the event. A benchmark script, not a
test (speed is never asserted in the test suite):

    PYTHONPATH=$PWD .venv/bin/python tests/benchmarks/bench_event_cpu.py --json /tmp/event-cpu.json

The objects are the simulator's. A single-pod Job and an MPIJob with a launcher and 8 workers are built
as the operator builds them (``spec.validate`` + ``manifests.build_manifest``), created unsuspended in an
in-process simulated cluster, and run until every pod is Running. Three watches (pods, jobs, MPIJobs)
record every event line the simulated API server sends meanwhile, byte for byte. ``--save FILE`` keeps
those lines and ``--load FILE`` measures saved ones, so that two versions of the product can be measured
on the very same bytes (the recording depends on the simulator, which is part of the package).

What is measured, per pod event, each on its own:

- **floor**: ``json.loads`` of the event line (what any watch client pays to read it at all);
- **transform**: ``watch_transform.trim`` of the decoded object, what the shared watch keeps of it;
- **look**: what a trigger computes when the event wakes it (``triggers._Follow.look`` minus its I/O and
  logging): the snapshot of the job from the watch's trimmed job and pods, ``who_cancelled``, the
  failure class when the state reports one, the attempt, ``tracking.decide``, the log line's
  ``signature`` and ``state_line``, and ``ledger.ruled_but_running``; with the trigger's
  ``records.ReadMemo`` kept from look to look where the version measured has one (the event's pod is a
  new object at every look, as in the watch's cache, the others are the objects the last look read);
- **look without memo**: the same with every object read afresh (a first look, or a version without
  the memo), only where there is a memo.

Two moments per job: *running*, the event of the last pod to start with every pod Running (the steady
state: a pod event of a job that runs); *start-up*, every pod event from creation to all running
replayed in order, each look on the cache as it stood after that event (pending, scheduled, pulling,
initializing, running), averaged per event.

Each figure is CPU time (``time.process_time``) over ``--iterations`` events, repeated ``--repeats``
times with the measures interleaved within each repeat; the median of the repeats is reported,
in microseconds per event, with the ratio to the floor. Left out: the watch's own bookkeeping (cache,
index, subscriptions), the event loop's wake-up, admission, log streaming and writing the log line.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from airflow_jobs_plugin.cluster.watch_transform import trim
from airflow_jobs_plugin.jobs import attempts
from airflow_jobs_plugin.lifecycle import JobSnapshot, JobState, classify_failure, snapshot, tracking
from airflow_jobs_plugin.queueing.quota import ledger

try:  # a version of the product from before the pod records has no memo: every look reads every pod
    from airflow_jobs_plugin.cluster.records import ReadMemo
except ImportError:  # pragma: no cover - measuring an older version
    ReadMemo = None  # type: ignore[assignment,misc]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
NAMESPACE = "bench"
WORKERS = {"job": 1, "mpijob": 8}  # the two jobs measured, by the name of their task


# --------------------------------------------------------------------------- recording


def _manifest(task_id: str, workers: int) -> dict:
    from airflow_jobs_sim.scenarios import ANNOTATION

    from airflow_jobs_plugin.jobs.manifests import build_manifest
    from airflow_jobs_plugin.jobs.spec import TaskIdentity, validate

    # Pull the image, then run until deleted: the recording stops once every pod runs.
    scenario = {"main": {"pull": 1, "run": None, "logs": ["starting"]}}
    spec = validate(
        image="registry.example/trainer:1",
        group="bench",
        user="bench",
        gpus=1,
        workers=workers,
        namespace=NAMESPACE,
        annotations={ANNOTATION: json.dumps(scenario)},
    )
    task = TaskIdentity("bench", task_id, "run-1", -1, 1)
    manifest = build_manifest(
        spec, name=task.job_name(1), task=task, attempt=1, queued_at=datetime.now(timezone.utc)
    )
    # Admitted at once: the admission is not what is measured.
    if manifest["kind"] == "MPIJob":
        manifest["spec"]["runPolicy"]["suspend"] = False
    else:
        manifest["spec"]["suspend"] = False
    return manifest


def record(timeout: float = 60.0) -> list[dict[str, Any]]:
    """Every watch event line of the two jobs' lives until all their pods run: ``{"watch", "line"}``."""
    from airflow_jobs_sim import ClusterConfig, SimCluster

    with SimCluster(ClusterConfig(nodes=2, gpus_per_node=8, time_scale=0.01)) as cluster:
        cluster.call(cluster.store.create, "namespaces", {"metadata": {"name": NAMESPACE}})
        since = cluster.call(cluster.store.current_rv)
        url = urlparse(cluster.url)
        lines: list[dict[str, Any]] = []
        lock = threading.Lock()
        paths = {
            "pods": f"/api/v1/namespaces/{NAMESPACE}/pods",
            "jobs": f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs",
            "mpijobs": f"/apis/kubeflow.org/v2beta1/namespaces/{NAMESPACE}/mpijobs",
        }
        started = threading.Barrier(len(paths) + 1)

        def follow(watch: str, path: str) -> None:
            conn = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout)
            conn.request("GET", f"{path}?watch=true&resourceVersion={since}&timeoutSeconds={int(timeout)}")
            response = conn.getresponse()
            started.wait(timeout)
            for raw in response:
                with lock:
                    lines.append({"watch": watch, "line": raw.decode()})

        for watch, path in paths.items():
            threading.Thread(target=follow, args=(watch, path), daemon=True).start()
        started.wait(timeout)
        manifests = [_manifest(task_id, workers) for task_id, workers in WORKERS.items()]
        for manifest in manifests:
            plural = "mpijobs" if manifest["kind"] == "MPIJob" else "jobs"
            cluster.call(cluster.store.create, plural, manifest, NAMESPACE)
        expected = sum(workers + (workers > 1) for workers in WORKERS.values())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with lock:
                pods = _latest(lines, "pods")
            running = [p for p in pods.values() if (p.get("status") or {}).get("phase") == "Running"]
            if len(running) == expected and all(_ready(p) for p in running):
                time.sleep(0.5)  # the jobs' own status updates that follow the last pod's
                with lock:
                    return list(lines)
            time.sleep(0.1)
        raise RuntimeError(f"not every pod ran within {timeout} s")


def _latest(lines: list[dict[str, Any]], watch: str) -> dict[str, dict]:
    latest: dict[str, dict] = {}
    for entry in lines:
        if entry["watch"] == watch:
            obj = json.loads(entry["line"])["object"]
            latest[obj["metadata"]["name"]] = obj
    return latest


def _ready(pod: Mapping[str, Any]) -> bool:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return bool(statuses) and all(s.get("ready") for s in statuses)


# --------------------------------------------------------------------------- what is measured


_FAILURE_STATES = (JobState.FAILED, JobState.STARTING, JobState.RETRYING, JobState.DEGRADED, JobState.UNKNOWN)
_ZERO = timedelta(0)


def trigger_look(job: dict, pods: list[dict], memo: Any = None) -> JobSnapshot:
    """What ``triggers._Follow.look`` computes when an event wakes it, without its I/O and logging
    (kept in step with it by hand: the trigger module imports Airflow, this benchmark does not).
    ``memo`` is the trigger's ``ReadMemo``, where the version measured has one."""
    now = datetime.now(timezone.utc)
    if memo is not None:
        snap = snapshot(job, pods, [], queue=None, reservation=None, now=now, memo=memo)
    else:
        snap = snapshot(job, pods, [], queue=None, reservation=None, now=now)
    snap, _ = tracking.who_cancelled(snap, job["metadata"].get("annotations") or {}, now=now)
    if snap.state not in tracking.STARTED:
        tracking.interrupted_run(job, None, None, snap, now)
    failure = None
    if snap.state in _FAILURE_STATES:
        try:
            failure = classify_failure(snap)
        except ValueError:
            failure = None
    tracking.decide(
        snap,
        failure,
        attempt=attempts.attempt_of(job),
        max_attempts=1,
        backoff=_ZERO,
        backoff_max=_ZERO,
    )
    tracking.signature(snap)
    tracking.state_line(snap)
    ledger.ruled_but_running(job)
    return snap


class Moment:
    """One pod event and the watch cache it leaves behind: the event's line, the job and its pods
    (the event's own pod a fresh object, as the watch stores it, the others the objects it kept)."""

    def __init__(self, line: str, job: dict, pods: list[dict]):
        self.line = line
        self.obj = json.loads(line)["object"]
        self.job = job
        self.pods = pods

    def again(self) -> Moment:
        """The same event arriving anew: its pod another fresh object (what a look reads afresh)."""
        name = self.obj["metadata"]["name"]
        pods = [trim(self.obj) if p["metadata"]["name"] == name else p for p in self.pods]
        return Moment(self.line, self.job, pods)


def moments(lines: list[dict[str, Any]], task_id: str) -> list[Moment]:
    """Every pod event of the job of ``task_id``, with the cache (trimmed, as the shared watch keeps
    it) after it. The job is matched by its task's name, its pods by the job's name."""
    prefix = f"bench-{task_id}-"
    job: dict | None = None
    pods: dict[str, dict] = {}
    out = []
    decoded = [(entry["watch"], entry["line"], json.loads(entry["line"])) for entry in lines]
    # The three watches' lines arrived on three connections: the API server's own counter orders them.
    decoded.sort(key=lambda d: int(d[2]["object"]["metadata"].get("resourceVersion") or 0))
    for watch, line, event in decoded:
        obj = event["object"]
        name = str(obj["metadata"]["name"])
        if event["type"] == "BOOKMARK" or not name.startswith(prefix):
            continue
        if watch in ("jobs", "mpijobs"):
            if name.endswith("-launcher") and watch == "jobs":
                continue  # the MPIJob's launcher Job: not what the trigger follows
            job = trim(obj)
        elif job is not None:
            if event["type"] == "DELETED":
                pods.pop(name, None)
            else:
                pods[name] = trim(obj)
            out.append(Moment(line, job, list(pods.values())))
    return out


def measure(
    calls: dict[str, Callable[[], None]], iterations: int, repeats: int
) -> dict[str, dict[str, float]]:
    """Per measure: CPU microseconds per call of each repeat, and their median (interleaved)."""
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for call in calls.values():
        call()  # warm up: imports, caches of the interpreter
    for _ in range(repeats):
        for name, call in calls.items():
            start = time.process_time()
            for _ in range(iterations):
                call()
            samples[name].append((time.process_time() - start) / iterations * 1e6)
    return {name: {"median_us": statistics.median(s), "repeats_us": s} for name, s in samples.items()}


def scenario(events: list[Moment], iterations: int, repeats: int, distinct: int) -> dict[str, Any]:
    """The measures over ``events`` (each call handles every event once), per event; ``distinct`` is
    how many different events they are."""

    def floor() -> None:
        for m in events:
            json.loads(m.line)

    def transform() -> None:
        for m in events:
            trim(m.obj)

    memo = ReadMemo() if ReadMemo is not None else None

    def look() -> None:
        # One trigger's looks in turn, its memo kept from look to look as the trigger keeps it.
        for m in events:
            trigger_look(m.job, m.pods, memo)

    def cold_look() -> None:
        for m in events:
            trigger_look(m.job, m.pods)

    calls = {"floor": floor, "transform": transform, "look": look}
    if memo is not None:
        calls["cold_look"] = cold_look
    per_call = max(1, iterations // len(events))
    figures = measure(calls, per_call, repeats)
    out: dict[str, Any] = {
        "events": distinct,
        "pods": len(events[-1].pods),
        "line_bytes": len(events[-1].line),
    }
    for name, figure in figures.items():
        out[name] = {
            "median_us": figure["median_us"] / len(events),
            "repeats_us": [v / len(events) for v in figure["repeats_us"]],
        }
    floor_us = out["floor"]["median_us"]
    for name in figures:
        out[name]["ratio"] = out[name]["median_us"] / floor_us
    out["state"] = trigger_look(events[-1].job, events[-1].pods).state.value
    return out


def _machine() -> dict[str, Any]:
    model = ""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next(
                (line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), ""
            )
    except OSError:
        pass
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "load_average": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--iterations", type=int, default=2000, help="events handled per repeat and measure")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--save", default=None, help="write the recorded event lines here")
    parser.add_argument("--load", default=None, help="measure these recorded lines instead of recording")
    parser.add_argument("--json", default=None, metavar="OUT", help="write the figures as JSON here")
    args = parser.parse_args()

    import airflow_jobs_plugin

    if args.load:
        lines = json.loads(Path(args.load).read_text())
    else:
        lines = record()
    if args.save:
        Path(args.save).write_text(json.dumps(lines))
    results: dict[str, Any] = {
        "package": os.path.dirname(airflow_jobs_plugin.__file__),
        "machine": _machine(),
        "iterations": args.iterations,
        "repeats": args.repeats,
        "scenarios": {},
    }
    print(f"measuring {results['package']}", file=sys.stderr)
    for task_id, workers in WORKERS.items():
        events = moments(lines, task_id)
        if not events:
            raise RuntimeError(f"no pod event recorded for {task_id}")
        label = "Job, 1 pod" if workers == 1 else f"MPIJob, launcher + {workers} workers"
        # The last event twice, its pod a new object each time: with one look repeated, a memo would
        # find every pod unchanged, which no event leaves.
        running = [events[-1], events[-1].again()]
        for moment, chosen, distinct in (("running", running, 1), ("start-up", events, len(events))):
            figures = scenario(chosen, args.iterations, args.repeats, distinct)
            results["scenarios"][f"{task_id} {moment}"] = {"job": label, "moment": moment, **figures}
    print(
        "| job | moment | events | floor µs | transform µs (× floor) | look µs (× floor) | look without memo µs | last look |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---|")

    def cell(figure: dict | None) -> str:
        return "-" if figure is None else f"{figure['median_us']:.1f} ({figure['ratio']:.1f}×)"

    for figures in results["scenarios"].values():
        print(
            f"| {figures['job']} | {figures['moment']} | {figures['events']} "
            f"| {figures['floor']['median_us']:.1f} | {cell(figures['transform'])} | {cell(figures['look'])} "
            f"| {cell(figures.get('cold_look'))} | {figures['state']} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
