"""What the benchmark drivers share: the simulator process, tracker processes, percentiles, rates."""

from __future__ import annotations

import json
import math
import os
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
