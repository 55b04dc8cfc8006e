"""What the benchmark drivers share: the simulator process, tracker processes, percentiles, rates."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PYTHON = sys.executable
MARK = "@bench "  # the child processes' protocol lines start with it; anything else is passed through


def read_protocol_line(stream: Any, what: str) -> dict:
    """The next protocol line of a child process, echoing any other output to stderr."""
    while True:
        line = stream.readline()
        if not line:
            raise RuntimeError(f"{what} exited")
        if line.startswith(MARK):
            return json.loads(line[len(MARK) :])
        sys.stderr.write(line)


class SimProcess:
    """The simulated cluster in a child process (``simproc.py``), driven by JSON lines."""

    def __init__(self, *, nodes: int, time_scale: float, gpus_per_node: int = 8):
        self.proc = subprocess.Popen(
            [
                PYTHON,
                str(HERE / "simproc.py"),
                "--nodes",
                str(nodes),
                "--time-scale",
                str(time_scale),
                "--gpus-per-node",
                str(gpus_per_node),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=str(ROOT),
        )
        hello = self._read()
        self.kubeconfig: str = hello["kubeconfig"]
        self.time_scale = time_scale

    def _read(self) -> dict:
        assert self.proc.stdout is not None
        return read_protocol_line(self.proc.stdout, "the simulator process")

    def cmd(self, op: str, **kwargs: Any) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **kwargs}) + "\n")
        self.proc.stdin.flush()
        reply = self._read()
        if not reply["ok"]:
            raise RuntimeError(f"simulator: {op}: {reply['error']}")
        return reply["result"]

    @property
    def connection_env(self) -> dict[str, str]:
        """The environment of a process whose ``kubernetes_default`` connection is this cluster."""
        conn = {"conn_type": "kubernetes", "extra": {"kube_config_path": self.kubeconfig}}
        env = dict(os.environ)
        env["AIRFLOW_CONN_KUBERNETES_DEFAULT"] = json.dumps(conn)
        env.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
        return env

    def wait_for(self, namespace: str, key: str, count: int, timeout: float) -> float:
        """Wait until ``count`` jobs of ``namespace`` reached ``key`` (running, finished, ...)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.cmd("summary", namespace=namespace)[key] >= count:
                return time.time()
            time.sleep(0.5)
        raise TimeoutError(f"{namespace}: fewer than {count} jobs {key} after {timeout:.0f}s")

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.cmd("stop")
            except (RuntimeError, OSError, ValueError):
                pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> SimProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# A namespace labelled so has admission controllers of its own: the real tier's controller (scripts/test)
# leaves it to them (tests/plane_scenarios/plane.py OWN_CONTROLLER).
OWN_CONTROLLER = "airflow-jobs.io/own-controller"


class AdmissionController:
    """``airflow-jobs admission-controller`` for one namespace, its own OS process as its Deployment runs
    it: the only identity that admits, so the jobs a benchmark's triggers follow start. Its requests are
    not the trackers': they are the cost of admission, counted on the cluster side."""

    def __init__(self, kubeconfig: str, namespace: str):
        self.log = tempfile.NamedTemporaryFile(prefix="bench-controller-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [
                PYTHON,
                "-m",
                "airflow_jobs_plugin.airflow.cli",
                "admission-controller",
                "--kubeconfig",
                kubeconfig,
                "--namespace",
                namespace,
                "--identity",
                f"bench-{os.getpid()}",
                "--log-level",
                "WARNING",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=str(ROOT),
        )

    def __enter__(self) -> AdmissionController:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class TrackerProcess:
    """A triggerer-like process (``tracker.py``) following ``names``.

    A thread reads its stdout: protocol lines after ``ready`` (``@bench {"received_all_running": t}``)
    are kept in ``announced`` for :meth:`wait_announced`; anything else goes to stderr."""

    def __init__(
        self,
        sim: SimProcess,
        kind: str,
        names: Sequence[str],
        namespace: str,
        *,
        cap: float,
        extra: Sequence[str] = (),
        pods: dict[str, str] | None = None,
        workdir: str | None = None,
    ):
        self.dir = workdir or tempfile.mkdtemp(prefix=f"bench-{kind}-")
        self.names_file = os.path.join(self.dir, f"{kind}-{namespace}-names.json")
        self.out = os.path.join(self.dir, f"{kind}-{namespace}-{os.getpid()}-{id(self)}.json")
        self.stop_file = self.out + ".stop"
        with open(self.names_file, "w") as f:
            json.dump(list(names), f)
        args = [
            PYTHON,
            str(HERE / "tracker.py"),
            "--kind",
            kind,
            "--names",
            self.names_file,
            "--namespace",
            namespace,
            "--out",
            self.out,
            "--cap",
            str(cap),
            "--stop-file",
            self.stop_file,
            *extra,
        ]
        if pods:
            pods_file = os.path.join(self.dir, f"{kind}-{namespace}-pods.json")
            with open(pods_file, "w") as f:
                json.dump(pods, f)
            args += ["--pods", pods_file]
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, text=True, env=sim.connection_env, cwd=str(ROOT)
        )
        assert self.proc.stdout is not None
        self.kind = kind
        self.ready: float = read_protocol_line(self.proc.stdout, f"tracker {kind}")["ready"]
        self.announced: dict[str, Any] = {}
        self._changed = threading.Condition()
        self._closed = False
        # Keep reading: Airflow's logging writes to stdout, and a full pipe would block the tracker.
        threading.Thread(target=self._drain, args=(self.proc.stdout,), daemon=True).start()

    def _drain(self, stream: Any) -> None:
        try:
            for line in stream:
                if line.startswith(MARK):
                    try:
                        message = json.loads(line[len(MARK) :])
                    except ValueError:
                        sys.stderr.write(line)
                        continue
                    with self._changed:
                        self.announced.update(message)
                        self._changed.notify_all()
                else:
                    sys.stderr.write(line)
        finally:
            with self._changed:
                self._closed = True
                self._changed.notify_all()

    def wait_announced(self, key: str, timeout: float) -> Any:
        """The value of the tracker's protocol line ``key``, once it printed it; TimeoutError after
        ``timeout`` seconds, RuntimeError if the tracker's output ends first."""
        deadline = time.time() + timeout
        with self._changed:
            while key not in self.announced:
                if self._closed:
                    raise RuntimeError(f"tracker {self.kind} exited without announcing {key}")
                left = deadline - time.time()
                if left <= 0:
                    raise TimeoutError(f"tracker {self.kind}: no {key} after {timeout:.0f}s")
                self._changed.wait(min(left, 1.0))
            return self.announced[key]

    def stop(self) -> None:
        """Ask the tracker to stop now and write what it has (the cap)."""
        with open(self.stop_file, "w"):
            pass

    def close(self) -> None:
        """End the process if it still runs (a driver that failed midway): ask, then kill."""
        if self.proc.poll() is None:
            self.stop()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def result(self, timeout: float) -> dict:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            self.proc.wait(timeout=300)
        if self.proc.returncode != 0:
            raise RuntimeError(f"tracker exited with {self.proc.returncode}")
        with open(self.out) as f:
            return json.load(f)


# --------------------------------------------------------------------------- statistics


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100), nearest-rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def latency_stats(values: Sequence[float]) -> dict[str, Any]:
    return {
        "count": len(values),
        "p50": percentile(values, 50),
        "p99": percentile(values, 99),
        "max": max(values) if values else None,
    }


def counter_total(
    counts: dict[str, int], include: Iterable[str] | None = None, exclude: Iterable[str] = ()
) -> int:
    """Requests counted under the given ``"verb resource"`` keys (all but ``exclude`` by default)."""
    keys = set(include) if include is not None else None
    skip = set(exclude)
    return sum(n for k, n in counts.items() if (keys is None or k in keys) and k not in skip)


def window_rate(
    samples: Sequence[tuple[float, dict[str, int]]],
    start: float,
    end: float,
    *,
    include: Iterable[str] | None = None,
    exclude: Iterable[str] = (),
    covering: bool = False,
) -> dict[str, Any]:
    """Requests per second between the first sample at or after ``start`` and the last before ``end``
    (``covering``: the last sample before ``start`` and the first after ``end``, so that nothing in
    between is missed), with the breakdown by verb and resource."""
    if covering:
        before = [s for s in samples if s[0] <= start]
        after = [s for s in samples if s[0] >= end]
        inside = [before[-1] if before else samples[0], after[0] if after else samples[-1]]
    else:
        inside = [s for s in samples if start <= s[0] <= end]
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        return {"seconds": 0.0, "requests": 0, "per_second": None, "by_key": {}}
    (t0, c0), (t1, c1) = inside[0], inside[-1]
    include = list(include) if include is not None else None
    delta = {k: c1.get(k, 0) - c0.get(k, 0) for k in set(c1) | set(c0)}
    delta = {k: n for k, n in delta.items() if n}
    requests = counter_total(delta, include, exclude)
    by_key = {k: n for k, n in delta.items() if (include is None or k in include) and k not in set(exclude)}
    return {
        "seconds": round(t1 - t0, 2),
        "requests": requests,
        "per_second": requests / (t1 - t0) if t1 > t0 else None,
        "by_key": dict(sorted(by_key.items())),
    }


def cpu_in_window(samples: Sequence[Sequence[float]], start: float, end: float) -> float | None:
    """CPU seconds per wall second of a tracker between two moments, from its own samples."""
    inside = [s for s in samples if start <= s[0] <= end]
    if len(inside) < 2:
        return None
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def machine() -> dict[str, str]:
    """The machine and versions a result was measured on."""
    import platform
    from importlib.metadata import version

    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
            mem = f"{kb / 1024 / 1024:.1f} GiB"
    except (OSError, ValueError, IndexError):
        pass

    def ver(dist: str) -> str:
        try:
            return version(dist)
        except Exception:  # noqa: BLE001 - not installed
            return "-"

    load = os.getloadavg()
    return {
        "load": f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}",
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "memory": mem,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "apache-airflow": ver("apache-airflow"),
        "apache-airflow-providers-cncf-kubernetes": ver("apache-airflow-providers-cncf-kubernetes"),
        "kubernetes_asyncio": ver("kubernetes_asyncio"),
        "airflow-jobs-plugin": ver("airflow-jobs-plugin"),
    }


# --------------------------------------------------------------------------- the real control plane


def _proc_figures(pid: int) -> dict[str, float] | None:
    """CPU seconds (user + system, with its waited-for children) and RSS / peak RSS in kB of a process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        cpu = sum(int(x) for x in fields[11:15]) / ticks  # utime stime cutime cstime
        rss = hwm = 0.0
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = float(line.split()[1])
                elif line.startswith("VmHWM:"):
                    hwm = float(line.split()[1])
        return {"cpu_seconds": cpu, "rss_kb": rss, "peak_rss_kb": hwm}
    except (OSError, IndexError, ValueError):
        return None


class RealCluster:
    """The real control plane (``scripts/cluster``: etcd, kube-apiserver, controller-manager, scheduler,
    kwok and its nodes, the scenario player, all processes) in place of the simulator, behind the same
    commands the tracking benchmark sends :class:`SimProcess` (``cmd``).

    Started with enough kwok nodes for the jobs (110 pods each) unless ``kubeconfig`` names a plane
    that is already up, and stopped at :meth:`close` if this started it. A watcher thread records when
    each job and pod changed, as this process received it from the API server (the plane's components
    write the changes; nobody can timestamp them inside etcd): the simulator's ``transitions``."""

    def __init__(
        self, *, nodes: int, kubeconfig: str | None = None, time_scale: float = 1.0, with_: str = ""
    ):
        self.started_here = kubeconfig is None
        self.dir = tempfile.mkdtemp(prefix="bench-plane-") if kubeconfig is None else None
        self.kubeconfig = kubeconfig or os.path.join(self.dir or "", "kubeconfig")
        self.time_scale = time_scale
        self.up_seconds = 0.0
        if self.started_here:
            started = time.time()
            subprocess.run(
                [
                    str(ROOT / "scripts" / "cluster"),
                    "up",
                    "--kubeconfig",
                    self.kubeconfig,
                    "--nodes",
                    str(nodes),
                    "--time-scale",
                    str(time_scale),
                    *(["--with", with_] if with_ else []),
                ],
                check=True,
                stdout=sys.stderr,
            )
            self.up_seconds = time.time() - started
        from kubernetes import client, config

        api = config.new_client_from_config(config_file=self.kubeconfig)
        api.configuration.connection_pool_maxsize = 16
        self.api = api
        self.core = client.CoreV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.jobs: dict[str, dict[str, dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._watching: set[str] = set()
        self._stopping = threading.Event()
        self.processes = self._plane_processes()
        self.start_figures = {name: _proc_figures(pid) for name, pid in self.processes.items()}

    def _plane_processes(self) -> dict[str, int]:
        state = Path(self.kubeconfig + ".plane") / "state.json"
        try:
            data = json.loads(state.read_text())
        except (OSError, ValueError):
            return {}
        return {p["name"]: p["pid"] for p in data.get("processes", [])}

    @property
    def connection_env(self) -> dict[str, str]:
        conn = {"conn_type": "kubernetes", "extra": {"kube_config_path": self.kubeconfig}}
        env = dict(os.environ)
        env["AIRFLOW_CONN_KUBERNETES_DEFAULT"] = json.dumps(conn)
        env.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
        return env

    # --- the simulator's commands ---

    def cmd(self, op: str, **kwargs: Any) -> Any:
        if op == "create_jobs":
            return self.create_jobs(**kwargs)
        if op == "transitions":
            with self._lock:
                return {k: dict(v) for k, v in self.jobs.get(kwargs["namespace"], {}).items()}
        if op == "summary":
            with self._lock:
                entries = list(self.jobs.get(kwargs["namespace"], {}).values())
            return {
                "jobs": len(entries),
                **{k: sum(1 for e in entries if k in e) for k in ("unsuspended", "running", "finished")},
            }
        if op == "ticker":
            return [{"late_last_lines": self.late_last_lines()}]
        if op in ("samples", "counters"):
            return [] if op != "counters" else {}
        if op == "resources":
            return self.resources()
        raise ValueError(f"the real plane has no command {op!r}")

    def late_last_lines(self) -> dict[str, float]:
        """The pods whose last line the plane's player wrote after their container had ended (it says so
        in its log, scripts/realplane/player.py): pod name -> seconds late. A reader that read such a
        container's log to its end after the end could not have seen the line; no real container
        writes after it ended."""
        path = Path(self.kubeconfig + ".plane") / "logs" / "scenario-player.log"
        late: dict[str, float] = {}
        try:
            text = path.read_text(errors="replace")
        except OSError:
            return late
        for match in re.finditer(r"late last line: [^/\s]+/(\S+) ([0-9.]+) s after", text):
            late[match.group(1)] = float(match.group(2))
        return late

    def create_jobs(
        self,
        namespace: str,
        prefix: str,
        jobs: list[dict],
        talk_annotation: str = "",
    ) -> list[str]:
        """Create the jobs (suspended, as JobOperator does) from the manifests the simulator's are
        built from; ``talk`` (seconds between lines) goes into the pod template's annotations."""
        from concurrent.futures import ThreadPoolExecutor

        from simproc import job_manifest

        try:
            self.core.create_namespace({"metadata": {"name": namespace, "labels": {OWN_CONTROLLER: "true"}}})
        except Exception as exc:  # noqa: BLE001 - already there
            if getattr(exc, "status", None) != 409:
                raise
        self._watch(namespace)
        manifests = []
        for i, spec in enumerate(jobs):
            m = job_manifest(
                namespace,
                i,
                spec["run"],
                group="bench",
                user="bench",
                gpus=0,
                prefix=prefix,
                logs=spec["logs"],
            )
            if talk_annotation and spec.get("every"):
                template = m["spec"]["template"]["metadata"].setdefault("annotations", {})
                template[talk_annotation] = str(spec["every"])
            manifests.append(m)

        def create(m: dict) -> str:
            return self.batch.create_namespaced_job(namespace, m).metadata.name

        with ThreadPoolExecutor(8) as pool:
            return list(pool.map(create, manifests))

    def _watch(self, namespace: str) -> None:
        if namespace in self._watching:
            return
        self._watching.add(namespace)
        for what in ("jobs", "pods"):
            threading.Thread(target=self._follow, args=(namespace, what), daemon=True).start()

    def _follow(self, namespace: str, what: str) -> None:
        from kubernetes import watch

        lister = self.batch.list_namespaced_job if what == "jobs" else self.core.list_namespaced_pod
        version = ""
        while not self._stopping.is_set():
            try:
                for event in watch.Watch().stream(
                    lister,
                    namespace,
                    resource_version=version or None,
                    timeout_seconds=60,
                    _preload_content=False,
                ):
                    obj = event["raw_object"]
                    version = (obj.get("metadata") or {}).get("resourceVersion", version)
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self._record(namespace, what, obj)
            except Exception:  # noqa: BLE001 - a dropped watch is listed again (times kept: first seen)
                version = ""
                time.sleep(0.5)

    def _record(self, namespace: str, what: str, obj: dict) -> None:
        now = time.time()
        meta = obj.get("metadata") or {}
        with self._lock:
            if what == "jobs":
                entry = self.jobs.setdefault(namespace, {}).setdefault(meta["name"], {})
                if not (obj.get("spec") or {}).get("suspend"):
                    entry.setdefault("unsuspended", now)
                for cond in (obj.get("status") or {}).get("conditions") or []:
                    if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
                        entry.setdefault("finished", now)
                        entry.setdefault("outcome", cond["type"])
                return
            job = (meta.get("labels") or {}).get("job-name") or (meta.get("labels") or {}).get(
                "batch.kubernetes.io/job-name"
            )
            if not job:
                return
            entry = self.jobs.setdefault(namespace, {}).setdefault(job, {})
            entry.setdefault("pod", meta["name"])
            phase = (obj.get("status") or {}).get("phase")
            if phase == "Running":
                entry.setdefault("running", now)
            elif phase in ("Succeeded", "Failed"):
                entry.setdefault("pod_ended", now)

    def resources(self) -> dict[str, Any]:
        """CPU seconds each plane process used since this was made, and its RSS now and at its peak."""
        out: dict[str, Any] = {}
        for name, pid in self.processes.items():
            now, before = _proc_figures(pid), self.start_figures.get(name)
            if now is None:
                continue
            out[name] = {
                "cpu_seconds": round(now["cpu_seconds"] - (before or {}).get("cpu_seconds", 0.0), 1),
                "rss_mb": round(now["rss_kb"] / 1024, 1),
                "peak_rss_mb": round(now["peak_rss_kb"] / 1024, 1),
            }
        return out

    def close(self) -> None:
        self._stopping.set()
        for namespace in self._watching:  # a plane that stays up is left as it was found
            try:
                self.core.delete_namespace(namespace)
            except Exception:  # noqa: BLE001 - best effort
                pass
        if self.started_here:
            subprocess.run(
                [str(ROOT / "scripts" / "cluster"), "down", "--kubeconfig", self.kubeconfig],
                check=False,
                stdout=sys.stderr,
            )
            # A stopped plane's etcd and pod logs take hundreds of megabytes per run: gone with it,
            # unless asked to keep them for a look (AJP_BENCH_KEEP_PLANE=1).
            if self.dir and not os.environ.get("AJP_BENCH_KEEP_PLANE"):
                shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RealCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
