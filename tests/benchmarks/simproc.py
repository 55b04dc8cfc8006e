"""The simulated cluster of a benchmark, in a process of its own, driven over stdin/stdout.

Run by the benchmark drivers, not by hand: ``python simproc.py --nodes 60 --time-scale 0.5``. It starts a
:class:`~airflow_jobs_sim.SimCluster`, prints one JSON line with the kubeconfig path, then answers
one JSON line per command line read from stdin (answers start with ``@bench ``) (``{"op": ...}``).

Keeping the cluster out of the process under test means that process's CPU time and memory are its own.
While it runs, the process records two things a client cannot see:

- the moment (``time.time()``) of every state change that matters to a benchmark, taken inside the
  store write that makes it: a job unsuspended, its first pod Running, its first pod's end, its Complete/Failed condition;
- the API server's request counters, sampled twice a second, so a driver can compute request rates
  over any window afterwards.

Jobs are built from real manifests (``spec.validate`` + ``manifests.build_manifest``, exactly what
``JobOperator`` submits) and written straight into the store rather than POSTed: creating 5,000 jobs over
HTTP would only measure the API server, and the objects are the same.
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import sys
import threading
import time
from datetime import datetime, timezone
from typing import Any

from airflow_jobs_sim import ClusterConfig, SimCluster

from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.manifests import build_manifest
from airflow_jobs_plugin.jobs.spec import TaskIdentity, validate
from airflow_jobs_plugin.queueing import quota

SCENARIO = "sim.airflow-jobs.io/scenario"
SAMPLE_SECONDS = 0.5
LOGS = ("starting", "done")  # what each job's container prints, at a third and two thirds of its run
MARK = "@bench "  # protocol lines start with it: imports may print to stdout too


def _complete(obj: dict) -> str | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return cond["type"]
    return None


class Recorder:
    """Timestamps of the state changes of every product job, by namespace and job name.

    Registered as a store watcher: called inside each write with the new object and the previous one,
    so the times are when the cluster changed, not when anyone looked.
    """

    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, dict[str, Any]]] = {}

    def __call__(self, rv: int, event_type: str, resource: str, obj: dict, prev: dict | None) -> None:
        if resource not in ("jobs", "pods") or event_type == "DELETED":
            return
        meta = obj.get("metadata") or {}
        lbl = meta.get("labels") or {}
        if lbl.get(labels.MANAGED_BY) != labels.MANAGED_BY_VALUE:
            return
        now = time.time()
        if resource == "jobs":
            entry = self._entry(meta.get("namespace", ""), meta["name"])
            entry.setdefault("group", (meta.get("annotations") or {}).get(labels.GROUP_NAME))
            suspended = bool((obj.get("spec") or {}).get("suspend"))
            if not suspended and "unsuspended" not in entry:
                entry["unsuspended"] = now
            done = _complete(obj)
            if done and "finished" not in entry:
                entry["finished"] = now
                entry["outcome"] = done
            return
        job = lbl.get(labels.LEGACY_JOB_NAME)
        if not job:
            return
        phase = (obj.get("status") or {}).get("phase")
        before = ((prev or {}).get("status") or {}).get("phase")
        entry = self._entry(meta.get("namespace", ""), job)
        entry.setdefault("pod", meta["name"])
        if phase == "Running" and before != "Running" and "running" not in entry:
            entry["running"] = now
        if phase in ("Succeeded", "Failed") and before not in ("Succeeded", "Failed"):
            entry.setdefault("pod_ended", now)

    def _entry(self, namespace: str, name: str) -> dict[str, Any]:
        return self.jobs.setdefault(namespace, {}).setdefault(name, {})

    def summary(self, namespace: str) -> dict[str, int]:
        entries = self.jobs.get(namespace, {}).values()
        return {
            "jobs": len(entries),
            "unsuspended": sum(1 for e in entries if "unsuspended" in e),
            "running": sum(1 for e in entries if "running" in e),
            "finished": sum(1 for e in entries if "finished" in e),
        }


class Sampler(threading.Thread):
    """The API server's counters every half second: ``(time, {"verb resource": count})``."""

    def __init__(self, cluster: SimCluster):
        super().__init__(name="bench-sampler", daemon=True)
        self.cluster = cluster
        self.samples: list[tuple[float, dict[str, int]]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            counts = self.cluster.call(lambda: dict(self.cluster._server.counters))  # noqa: SLF001
            self.samples.append((time.time(), {f"{v} {r}": n for (v, r), n in counts.items()}))
            self.stopping.wait(SAMPLE_SECONDS)


def job_manifest(
    namespace: str,
    index: int,
    run: float,
    *,
    group: str,
    user: str,
    gpus: int,
    prefix: str,
    logs: list[str] | tuple[str, ...] = LOGS,
) -> dict:
    """The manifest JobOperator would submit for task ``prefix`` of run ``index``."""
    scenario = {"main": {"pull": 1, "run": run, "logs": list(logs)}}
    spec = validate(
        image="registry.example/trainer:1",
        group=group,
        user=user,
        gpus=gpus,
        namespace=namespace,
        annotations={SCENARIO: json.dumps(scenario)},
    )
    task = TaskIdentity("bench", prefix, f"run-{index}", -1, 1)
    return build_manifest(
        spec, name=task.job_name(1), task=task, attempt=1, queued_at=datetime.now(timezone.utc)
    )


def resources() -> dict[str, float]:
    """This process's CPU seconds (user + system), RSS and peak RSS (``VmHWM``) in kB."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    figures = {"cpu_seconds": usage.ru_utime + usage.ru_stime, "rss_kb": 0.0, "peak_rss_kb": 0.0}
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    figures["rss_kb"] = float(line.split()[1])
                elif line.startswith("VmHWM:"):
                    figures["peak_rss_kb"] = float(line.split()[1])
    except OSError:
        figures["peak_rss_kb"] = float(usage.ru_maxrss)
    return figures


def tick_line(k: int, due: float, wrote: float) -> str:
    """A line of a talking container: its number, when it was due and when it was written (wall
    clock), so whoever prints it can tell how late it is. The plane's player writes the same."""
    return f"tick {k} due={due:.3f} wrote={wrote:.3f}"


def done_line(due: float, wrote: float) -> str:
    """A talking container's last line, written just before it ends."""
    return f"done due={due:.3f} wrote={wrote:.3f}"


DONE_MARGIN = 1.0  # seconds before its end a talking container writes its last line


class Ticker(threading.Thread):
    """The stand-in's talking containers: from the moment a job's pod runs, a line every ``every``
    seconds into its ``main`` container's log (:func:`tick_line`), then :func:`done_line` ``DONE_MARGIN``
    seconds before the end its scenario gives it (``run`` seconds of its time scale), as the plane's
    player does with the CRI log files kwok serves. Appends in the cluster's own loop, five times a
    second, so a line is never written after the kubelet closed its container's log."""

    def __init__(self, cluster: SimCluster, recorder: Recorder, namespace: str, jobs: dict[str, dict]):
        super().__init__(name="bench-ticker", daemon=True)
        self.cluster = cluster
        self.recorder = recorder
        self.namespace = namespace
        self.jobs = jobs  # name -> {"every": s, "end": real seconds after Running}
        self.plan: dict[str, tuple[float, float, int]] = {}  # name -> (next due, end, next k)
        self.written = 0
        self.done = 0
        self.lag_max = 0.0
        self.finished: set[str] = set()
        self.stopping = threading.Event()

    def step(self) -> None:
        entries = self.recorder.jobs.get(self.namespace, {})
        now = time.time()
        for name, job in self.jobs.items():
            entry = entries.get(name)
            if entry is None or "running" not in entry or "pod_ended" in entry or name in self.finished:
                continue
            due, end, k = self.plan.get(name) or (entry["running"], entry["running"] + job["end"], 0)
            while due <= now and due < end - DONE_MARGIN:
                self.cluster.logs.append(self.namespace, entry["pod"], "main", tick_line(k, due, now))
                self.lag_max = max(self.lag_max, now - due)
                self.written += 1
                due, k = due + job["every"], k + 1
            if now >= end - DONE_MARGIN:
                self.cluster.logs.append(
                    self.namespace, entry["pod"], "main", done_line(end - DONE_MARGIN, now)
                )
                self.done += 1
                self.finished.add(name)
                continue
            self.plan[name] = (due, end, k)

    def run(self) -> None:
        while not self.stopping.wait(0.2):
            self.cluster.call(self.step)

    def figures(self) -> dict[str, Any]:
        return {"lines": self.written, "done_lines": self.done, "lag_max": round(self.lag_max, 3)}


class Server:
    """The command loop."""

    def __init__(self, cluster: SimCluster):
        self.cluster = cluster
        self.recorder = Recorder()
        self.sampler = Sampler(cluster)
        self.tickers: list[Ticker] = []

    def handle(self, cmd: dict) -> Any:
        op = cmd["op"]
        store = self.cluster.store
        if op == "create_jobs":
            return self.create_jobs(cmd)
        if op == "summary":
            return self.cluster.call(self.recorder.summary, cmd["namespace"])
        if op == "transitions":
            return self.cluster.call(lambda: dict(self.recorder.jobs.get(cmd["namespace"], {})))
        if op == "samples":
            since = float(cmd.get("since") or 0)
            return [s for s in list(self.sampler.samples) if s[0] >= since]
        if op == "counters":
            return {f"{v} {r}": n for (v, r), n in self.cluster.counters().items()}
        if op == "resources":
            return resources()
        if op == "put_configmap":
            body = {"metadata": {"name": cmd["name"], "labels": cmd.get("labels") or {}}, "data": cmd["data"]}
            return self.cluster.call(store.create, "configmaps", body, cmd["namespace"])["metadata"]["name"]
        if op == "ticks":  # {"namespace", "jobs": {name: {"every": s, "end": s}}}
            ticker = Ticker(self.cluster, self.recorder, cmd["namespace"], cmd["jobs"])
            ticker.start()
            self.tickers.append(ticker)
            return len(cmd["jobs"])
        if op == "ticker":
            return [t.figures() for t in self.tickers]
        if op == "stop":
            for ticker in self.tickers:
                ticker.stopping.set()
            return "bye"
        raise ValueError(f"unknown op {op!r}")

    def create_jobs(self, cmd: dict) -> list[str]:
        """Create jobs (suspended, as the operator does, unless ``suspended`` is false)."""
        namespace = cmd["namespace"]
        specs = cmd["jobs"]  # [{"run": s, "group": g, "user": u, "gpus": n, "logs": [line, ...]}]
        manifests = [
            job_manifest(
                namespace,
                i,
                s["run"],
                group=s.get("group", "bench"),
                user=s.get("user", "bench"),
                gpus=int(s.get("gpus", 0)),
                prefix=cmd.get("prefix", "track"),
                logs=s.get("logs", LOGS),
            )
            for i, s in enumerate(specs)
        ]
        if not cmd.get("suspended", True):
            for m in manifests:
                m["spec"]["suspend"] = False
        store = self.cluster.store

        # In batches, so the cluster's loop keeps serving requests meanwhile.
        names: list[str] = []
        for start in range(0, len(manifests), 250):
            chunk = manifests[start : start + 250]

            def create_chunk(chunk: list[dict] = chunk) -> list[str]:
                if not any(n["metadata"]["name"] == namespace for n in store.list("namespaces")):
                    store.create("namespaces", {"metadata": {"name": namespace}})
                return [store.create("jobs", m, namespace)["metadata"]["name"] for m in chunk]

            names.extend(self.cluster.call(create_chunk))
        return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--time-scale", type=float, default=0.1)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    cluster = SimCluster(
        ClusterConfig(
            nodes=args.nodes,
            gpus_per_node=args.gpus_per_node,
            time_scale=args.time_scale,
            watch_history=20000,
        )
    ).start()
    server = Server(cluster)
    cluster.call(lambda: cluster.store.watch("jobs", cluster.store.current_rv(), server.recorder))
    server.sampler.start()
    out = sys.stdout
    out.write(
        MARK
        + json.dumps(
            {"kubeconfig": cluster.kubeconfig_path, "url": cluster.url, "policy_key": quota.POLICY_KEY}
        )
        + "\n"
    )
    out.flush()
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            cmd = json.loads(line)
            try:
                reply = {"ok": True, "result": server.handle(cmd)}
            except Exception as exc:  # report, keep serving
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            out.write(MARK + json.dumps(reply) + "\n")
            out.flush()
            if cmd.get("op") == "stop":
                break
    finally:
        server.sampler.stopping.set()
        cluster.stop()


if __name__ == "__main__":
    main()
