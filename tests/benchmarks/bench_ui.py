"""What the GPU Jobs page, its JSON routes and ``airflow-jobs status`` cost on a namespace that keeps
many jobs. A benchmark script, not a test (speed is never asserted in the test suite):

    PYTHONPATH=$PWD .venv/bin/python tests/benchmarks/bench_ui.py --finished 50000 --live 1000

How the namespace is made: the UI tests' population (``tests/ui/conftest.py``: real manifests, run by
the simulator, admitted by real admission passes) is recorded as the simulator answers LISTs of it.
Each job of that recording, with its pods and events, is a template; it is copied with fresh names and
uids into ``--finished`` finished jobs (nine succeeded for each failed) and ``--live`` live ones
(60 % running Jobs, 20 % running MPIJobs with a launcher and two workers, 20 % queued behind the group's
quota), spread over 200 users and 50 DAGs, the finished ones created over 50 days and the live ones over
the last 6 hours (every time in a copy moves with its creation, and it carries the labels the product
writes: ``created``, and ``admitted`` with ``admitted-at``), with one ledger reservation per running job and a policy
whose quotas they exactly fill. Events are kept for every live job and for the ``--finished-events``
newest finished ones only: the API server drops events an hour after their last update
(kube-apiserver ``--event-ttl``, default 1h, cmd/kube-apiserver/app/options/options.go, Kubernetes
1.32), so a namespace's finished history has pods but few events. The copies are served by
``bench_ui_serve.py`` (a static HTTP server in its own process) so that every second measured here is
the product's: the client's requests, decoding the bodies, the lifecycle rules, rendering.

What is measured, in this process unless said otherwise:

- ``read_cluster`` (LISTs and decoding) and ``views.overview`` (every snapshot, pools, queues, charts);
- each route of the plugin's FastAPI app, called through ASGI with Airflow's authentication stubbed
  (every DAG readable): the wall time of the request inside the server. The first request pays for the
  build of the overview; later ones (within the cache's freshness) find it built;
- ``airflow-jobs status`` as a user runs it: a child process, wall time from start to exit, its CPU;
- the loop probe (``measure_loop``): the plugin mounted in a host app next to Airflow's own
  ``/api/v2/version`` route (the real one, ``core_api/routes/public/version.py``), on one event loop as
  the API server runs them, with a probe asking that route every 20 ms through a cold start (the first
  page and ``/api/pools``), the whole view's build (a page sorted by state waits for it), warm pages, an action (Stop, its write stubbed: the static server takes no writes) with the job
  page and the job list after it, and two orphan sweeps (the first after a start reads the finished
  history whole once, the next only metadata); per phase the probe's p50, p99, worst and the count of
  answers over 500 ms, the full garbage collections (how many, the longest, their total), and each
  page's server time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
NAMESPACE = "default"
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
USERS = 200
DAGS = 50
HISTORY_DAYS = 50
LIVE_HOURS = 6


def record() -> tuple[dict[str, dict], dict[str, str]]:
    """The UI tests' population as LIST bodies, and its job names by role."""
    from airflow_jobs_sim import ClusterConfig, SimCluster

    from airflow_jobs_plugin.cluster.kube import EVENTS, JOBS, PODS, KubeClient
    from airflow_jobs_plugin.cluster.watch import MANAGED_SELECTOR
    from airflow_jobs_plugin.jobs.kinds.mpi import MPIJOBS
    from tests.ui.conftest import _populate

    with SimCluster(ClusterConfig(nodes=2, gpus_per_node=8, time_scale=0.02)) as cluster:
        names, _ = asyncio.run(_populate(cluster))

        async def lists() -> dict[str, dict]:
            client = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
            try:
                return {
                    "jobs": await client.list(JOBS, NAMESPACE, label_selector=MANAGED_SELECTOR),
                    "mpijobs": await client.list(MPIJOBS, NAMESPACE, label_selector=MANAGED_SELECTOR),
                    "pods": await client.list(PODS, NAMESPACE, label_selector=MANAGED_SELECTOR),
                    "events": await client.list(EVENTS, NAMESPACE),
                }
            finally:
                await client.close()

        return asyncio.run(lists()), names


def _template(bodies: dict[str, dict], name: str) -> dict[str, Any]:
    from airflow_jobs_plugin.lifecycle import events_of, pods_of

    jobs = [*bodies["jobs"]["items"], *({**j, "kind": "MPIJob"} for j in bodies["mpijobs"]["items"])]
    job = next(j for j in jobs if j["metadata"]["name"] == name)
    pods = pods_of(job, bodies["pods"]["items"])
    return {"job": job, "pods": pods, "events": events_of(job, pods, bodies["events"]["items"])}


TIME = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z")


def _shifted(text: str, by: timedelta) -> str:
    """``text`` with every RFC 3339 time in it moved by ``by`` (whole seconds keep their form)."""

    def move(m: re.Match) -> str:
        moved = datetime.fromisoformat(m.group(1)).replace(tzinfo=timezone.utc) + by
        return moved.strftime("%Y-%m-%dT%H:%M:%S") + (m.group(2) or "") + "Z"

    return TIME.sub(move, text)


def _copy(template: dict[str, Any], name: str, i: int, created: datetime) -> dict[str, Any]:
    """The template under a new name, fresh uids, another user and DAG, created at ``created``: every
    time in it (the job's, its pods', its events') moves with its creation, and it carries the labels
    the product writes (its creation time; ``admitted`` with ``admitted-at``)."""
    from airflow_jobs_plugin.jobs import labels
    from airflow_jobs_plugin.jobs.pod_template import created_label

    old = template["job"]["metadata"]["name"]
    text = json.dumps(template).replace(old, name)
    fresh: dict[str, str] = {}
    text = UUID.sub(lambda m: fresh.setdefault(m.group(0), str(uuid.uuid4())), text)
    was = datetime.fromisoformat(template["job"]["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
    out = json.loads(_shifted(text, created.replace(microsecond=0) - was))
    meta = out["job"]["metadata"]
    meta["annotations"][labels.USER_NAME] = f"user{i % USERS}"
    meta["labels"][labels.USER] = f"user{i % USERS}"
    meta["annotations"][labels.DAG_ID] = f"dag_{i % DAGS}"
    meta["labels"][labels.CREATED] = created_label(created)
    if labels.ADMITTED_AT in meta["annotations"]:
        meta["labels"][labels.ADMITTED] = labels.ADMITTED_VALUE
    return out


def multiply(bodies: dict[str, dict], names: dict[str, str], finished: int, live: int, finished_events: int):
    """LIST bodies of a namespace with ``finished`` + ``live`` jobs (see the module docstring)."""
    from airflow_jobs_plugin.cluster.objects import parse_rfc3339
    from airflow_jobs_plugin.jobs import labels
    from airflow_jobs_plugin.queueing import quota

    templates = {
        role: _template(bodies, names[role]) for role in ("done", "broken", "runner", "mpi", "waiting")
    }
    # The history spreads over HISTORY_DAYS, one job every so many seconds; the live jobs were created in
    # the last LIVE_HOURS (a long-running one among them may be older than the newest finished ones).
    now = datetime.now(timezone.utc)
    every = timedelta(days=HISTORY_DAYS) / max(1, finished)
    plan = [
        ("done" if i % 10 else "broken", f"hist-{i:06d}-a1", i, now - (finished - i) * every)
        for i in range(finished)
    ]
    for i in range(live):
        role = "runner" if i % 5 < 3 else ("mpi" if i % 5 == 3 else "waiting")
        created = now - timedelta(hours=LIVE_HOURS) * (live - i) / max(1, live)
        plan.append((role, f"live-{role}-{i:05d}-a1", finished + i, created))
    out: dict[str, list] = {"jobs": [], "mpijobs": [], "pods": [], "events": []}
    held: dict[str, list] = {}
    for n, (role, name, i, created) in enumerate(plan):
        obj = _copy(templates[role], name, i, created)
        job = obj["job"]
        (out["mpijobs"] if job.get("kind") == "MPIJob" else out["jobs"]).append(job)
        out["pods"].extend(obj["pods"])
        if n >= finished - finished_events:
            out["events"].extend(obj["events"])
        if role in ("runner", "mpi"):
            ann = job["metadata"]["annotations"]
            held.setdefault(ann[labels.GROUP_NAME], []).append(
                quota.Reservation(
                    job=name,
                    group=ann[labels.GROUP_NAME],
                    user=ann[labels.USER_NAME],
                    gpus=int(ann[labels.GPUS]),
                    uid=job["metadata"]["uid"],
                    admitted_at=parse_rfc3339(ann[labels.ADMITTED_AT]),
                    namespace=NAMESPACE,
                )
            )
    groups = {g: sum(r.gpus for r in rs) for g, rs in held.items()}
    policy = "groups:\n" + "".join(
        f"  {g}: {{gpus: {n}, user_gpus: {n}}}\n" for g, n in sorted(groups.items())
    )
    configmaps = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": quota.DEFAULT_POLICY_CONFIGMAP, "namespace": NAMESPACE},
            "data": {quota.POLICY_KEY: policy},
        }
    ]
    for group, reservations in held.items():
        data = quota.encode(quota.Ledger(group, tuple(reservations)))
        configmaps.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": quota.ledger_name(group),
                    "namespace": NAMESPACE,
                    "resourceVersion": "1",
                },
                "data": data,
            }
        )
    kinds = {"jobs": ("batch/v1", "JobList"), "mpijobs": ("kubeflow.org/v2beta1", "MPIJobList")}
    result = {}
    for key, items in [*out.items(), ("configmaps", configmaps)]:
        api, kind = kinds.get(key, ("v1", f"{key[:-1].capitalize()}List"))
        result[key] = {"apiVersion": api, "kind": kind, "metadata": {"resourceVersion": "1"}, "items": items}
    return result


def serve(bodies: dict[str, dict] | None, workdir: Path) -> tuple[subprocess.Popen, str]:
    """Start the static server over ``bodies`` (None: over the lists an earlier run wrote in
    ``workdir``); the kubeconfig that points at it."""
    space = workdir / "lists" / NAMESPACE
    if bodies is not None:
        space.mkdir(parents=True)
        for key, body in bodies.items():
            (space / f"{key}.json").write_text(json.dumps(body))
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "bench_ui_serve.py"), str(workdir / "lists")],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    port = json.loads(line.removeprefix("@bench "))["port"]
    kubeconfig = workdir / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "bench", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "bench", "user": {"token": "bench"}}],
                "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench"}}],
                "current-context": "bench",
            }
        )
    )
    return proc, str(kubeconfig)


def _peak_rss_mb(field: str = "VmHWM") -> float:
    """This process's peak resident memory (``VmHWM``) so far, or its current one (``VmRSS``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    value = fn()
    return value, time.perf_counter() - wall, time.process_time() - cpu


def measure_core(kubeconfig: str) -> dict[str, float]:
    from airflow_jobs_plugin.cluster.kube import KubeClient
    from airflow_jobs_plugin.readmodel import views
    from airflow_jobs_plugin.readmodel.inspect import Target, read_cluster

    async def read():
        client = await KubeClient.from_kubeconfig(kubeconfig)
        try:
            return await read_cluster(client, Target(namespace=NAMESPACE))
        finally:
            await client.close()

    state, read_wall, read_cpu = _timed(lambda: asyncio.run(read()))
    ov, build_wall, build_cpu = _timed(lambda: views.overview(state))
    return {
        "jobs": len(state.jobs),
        "pods": len(state.pods),
        "events": len(state.events),
        "read_cluster_s": read_wall,
        "read_cluster_cpu_s": read_cpu,
        "overview_s": build_wall,
        "overview_cpu_s": build_cpu,
        "rows": len(ov.jobs),
        "peak_rss_mb": _peak_rss_mb(),
    }


ROUTES = ["/", "/api/overview", "/api/pools", "/api/queues", "/api/jobs", "/api/jobs?state=RUNNING&sort=user"]


def measure_app() -> dict[str, Any]:
    import httpx
    from airflow.api_fastapi.core_api import security

    from airflow_jobs_plugin.plugin import app as plugin_app
    from airflow_jobs_plugin.plugin import deps as plugin_deps

    class Reader:
        def get_name(self) -> str:
            return "bench"

    plugin_deps._may = lambda *args, **kwargs: True  # every DAG readable: the auth manager is not measured
    app = plugin_app.create_app()
    app.dependency_overrides[security.get_user] = Reader
    app.dependency_overrides[plugin_deps.ReadAccess.dependency] = lambda: None
    app.dependency_overrides[plugin_deps._settings] = lambda: plugin_app.Settings(namespace=NAMESPACE)

    async def run() -> dict[str, Any]:
        transport = httpx.ASGITransport(app=app)
        timings: dict[str, Any] = {}
        async with httpx.AsyncClient(transport=transport, base_url="http://bench", timeout=None) as client:
            for label, path in [("cold /", "/"), *((p, p) for p in ROUTES)]:
                start = time.perf_counter()
                response = await client.get(path)
                elapsed = time.perf_counter() - start
                response.raise_for_status()
                timings[label] = {"s": elapsed, "bytes": len(response.content)}
        timings["peak_rss_mb"] = _peak_rss_mb()
        import gc

        gc.collect()
        # What the server keeps between requests (the kept copy), measured while the app is alive.
        timings["rss_after_mb"] = _peak_rss_mb("VmRSS")
        return timings

    return asyncio.run(run())


def _deep_mb(value: Any) -> float:
    """What ``value`` holds, each object counted once (``sys.getsizeof`` over dicts, lists, tuples,
    sets and dataclass fields): the read model's own size, apart from the rest of the process."""
    import dataclasses as dc

    seen: set[int] = set()
    total = 0
    stack = [value]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        elif dc.is_dataclass(obj) and not isinstance(obj, type):
            stack.extend(getattr(obj, f.name) for f in dc.fields(obj))
            stack.extend(v for k, v in vars(obj).items() if k not in {f.name for f in dc.fields(obj)})
    return total / 2**20


PROBE_EVERY = 0.02  # seconds between two probe requests
LIVE_JOB = "live-runner-00000-a1"  # a running Job of every namespace multiply() makes


def _spread(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies) or [float("nan")]
    return {
        "n": len(latencies),
        "p50_ms": 1000 * ordered[len(ordered) // 2],
        "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
        "max_ms": 1000 * ordered[-1],
        "over_500ms": sum(1 for x in latencies if x > 0.5),
    }


def measure_loop(kubeconfig: str) -> dict[str, Any]:
    """Airflow's own route on the plugin's event loop through a cold start, warm pages, an action and
    two orphan sweeps (see the module docstring)."""
    import httpx
    from airflow.api_fastapi.core_api import security
    from airflow.api_fastapi.core_api.routes.public.version import version_router
    from fastapi import FastAPI

    from airflow_jobs_plugin.cluster.kube import KubeClient
    from airflow_jobs_plugin.jobs.orphans import TaskRecord
    from airflow_jobs_plugin.plugin import app as plugin_app
    from airflow_jobs_plugin.plugin import deps as plugin_deps
    from airflow_jobs_plugin.plugin import sweep as sweep_module
    from airflow_jobs_plugin.readmodel import inspect
    from airflow_jobs_plugin.readmodel.inspect import Target
    from airflow_jobs_plugin.usecases import actions

    class Reader:
        def get_name(self) -> str:
            return "bench"

    async def stop(client, target, name, by):  # the static server takes no writes: the read path is measured
        return actions.ActionOutcome("stop", target.namespace, name, "Job", True, f"job/{name} stopped")

    inspect.stop = stop
    plugin_deps._may = lambda *args, **kwargs: True
    plugin = plugin_app.create_app()
    plugin.dependency_overrides[security.get_user] = Reader
    plugin.dependency_overrides[plugin_deps.ReadAccess.dependency] = lambda: None
    plugin.dependency_overrides[plugin_deps._settings] = lambda: plugin_app.Settings(namespace=NAMESPACE)
    plugin.dependency_overrides[plugin_deps.require_same_origin] = lambda: None
    host = FastAPI()
    host.include_router(version_router, prefix="/api/v2")
    host.mount(plugin_app.URL_PREFIX, plugin)
    long_ago = datetime.now(timezone.utc) - timedelta(hours=2)

    def read_tasks(refs):
        # The history's tasks ended long ago (every finished job is a candidate the sweep must read
        # whole once); the live jobs' tasks are deferred.
        return {r.dag_id for r in refs}, {
            r: TaskRecord("success", 1, long_ago)
            if "done" in r.task_id or "broken" in r.task_id
            else TaskRecord("deferred", 1, None)
            for r in refs
        }

    async def connect():
        return await KubeClient.from_kubeconfig(kubeconfig), Target(namespace=NAMESPACE)

    phases: dict[str, list[float]] = {}
    pages: dict[str, float] = {}
    rss_before: list[float] = []
    rss_built: list[float] = []
    current = ["idle"]
    # Every full (oldest-generation) garbage collection, by phase: whichever thread triggers one holds
    # the GIL while it walks every container object of the heap, the loop's thread included.
    collections: dict[str, list[float]] = {}
    started_gc: list[float] = []

    def on_gc(stage: str, info: dict) -> None:
        if info.get("generation") != 2:
            return
        if stage == "start":
            started_gc[:] = [time.perf_counter()]
        elif started_gc:
            collections.setdefault(current[0], []).append(time.perf_counter() - started_gc[0])

    import gc

    gc.callbacks.append(on_gc)

    async def run() -> dict[str, Any]:
        transport = httpx.ASGITransport(app=host)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench", timeout=None) as client:
            stop_probe = asyncio.Event()

            async def probe() -> None:
                while not stop_probe.is_set():
                    start = time.perf_counter()
                    (await client.get("/api/v2/version")).raise_for_status()
                    phases.setdefault(current[0], []).append(time.perf_counter() - start)
                    await asyncio.sleep(PROBE_EVERY)

            async def timed(label: str, method: str, path: str) -> None:
                start = time.perf_counter()
                response = await client.request(method, plugin_app.URL_PREFIX + path)
                pages[label] = time.perf_counter() - start
                response.raise_for_status()

            prober = asyncio.create_task(probe())
            await asyncio.sleep(2)
            rss_before[:] = [_peak_rss_mb("VmRSS")]
            current[0] = "cold start"
            await timed("first page", "GET", "/")
            await timed("first /api/pools", "GET", "/api/pools")
            current[0] = "whole build"
            # A sort by state needs the whole view: this waits for the build the first page started.
            await timed("whole view built", "GET", "/api/jobs?sort=state")
            rss_built[:] = [_peak_rss_mb("VmRSS")]  # what the server holds with the view (before the sweeps)
            current[0] = "warm"
            for n in range(3):
                await timed(f"warm / #{n + 1}", "GET", "/")
            await timed("warm /api/jobs", "GET", "/api/jobs")
            current[0] = "action"
            await timed("stop", "POST", f"/api/jobs/{NAMESPACE}/{LIVE_JOB}/stop")
            await timed("job page after the action", "GET", f"/jobs/{NAMESPACE}/{LIVE_JOB}")
            await timed("/api/jobs after the action", "GET", "/api/jobs")
            grace = timedelta(minutes=10)
            if hasattr(sweep_module, "Memory"):  # this version: each sweep off the loop, with its memory
                memory = sweep_module.Memory()
                for n in (1, 2):
                    current[0] = f"sweep {n}"

                    async def once() -> None:
                        sweep_client, target = await connect()
                        try:
                            await sweep_module.sweep(
                                sweep_client, target, read_tasks, grace=grace, memory=memory
                            )
                        finally:
                            await sweep_client.close()

                    start = time.perf_counter()
                    await sweep_module._off_the_loop(once)
                    pages[f"sweep {n}"] = time.perf_counter() - start
            else:  # an earlier version: the sweep ran on the server's loop
                for n in (1, 2):
                    current[0] = f"sweep {n}"
                    sweep_client, target = await connect()
                    start = time.perf_counter()
                    try:
                        await sweep_module.sweep(sweep_client, target, read_tasks, grace=grace)
                    finally:
                        await sweep_client.close()
                    pages[f"sweep {n}"] = time.perf_counter() - start
            current[0] = "after"
            await asyncio.sleep(1)
            stop_probe.set()
            await prober
        gc.callbacks.remove(on_gc)
        gc.collect()
        cache = plugin.state.cluster_cache
        kept = cache.peek(next(iter(cache._entries))) if getattr(cache, "_entries", None) else None
        return {
            "rss_before_mb": rss_before[0] if rss_before else float("nan"),
            "rss_built_mb": rss_built[0] if rss_built else float("nan"),
            "index_mb": _deep_mb(kept) if kept is not None and hasattr(kept, "rows") else None,
            "probe": {phase: _spread(latencies) for phase, latencies in phases.items()},
            "full_collections_s": {
                phase: {"n": len(took), "max": max(took), "total": sum(took)}
                for phase, took in collections.items()
            },
            "pages_s": pages,
            "rss_after_mb": _peak_rss_mb("VmRSS"),
            "peak_rss_mb": _peak_rss_mb(),
        }

    return asyncio.run(run())


def measure_status(kubeconfig: str, runs: int = 3) -> dict[str, float]:
    """``airflow-jobs status`` as a user runs it, from an installed package: Python's bytecode caches
    written (an environment's PYTHONDONTWRITEBYTECODE is dropped, and a first run, not counted, writes
    them), then ``runs`` runs; the fastest and the median of their wall and CPU times."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", str(ROOT))
    walls, cpus, lines = [], [], 0
    for n in range(runs + 1):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "airflow_jobs_plugin.airflow.cli", "status", "--kubeconfig", kubeconfig],
            env=env,
            capture_output=True,
            text=True,
            cwd=Path(kubeconfig).parent,  # not a checkout: "-m" would import the package from the cwd first
        )
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-2000:])
        if n:
            walls.append(wall)
            cpus.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
            lines = done.stdout.count("\n")
    walls.sort()
    cpus.sort()
    return {
        "s": walls[0],
        "s_median": walls[len(walls) // 2],
        "cpu_s": cpus[0],
        "cpu_s_median": cpus[len(cpus) // 2],
        "lines": lines,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--finished", type=int, default=50_000)
    parser.add_argument("--live", type=int, default=1_000)
    parser.add_argument("--finished-events", type=int, default=1_000)
    parser.add_argument("--skip", action="append", default=[], choices=["core", "app", "status", "loop"])
    parser.add_argument("--out", default=None, help="write the figures as JSON here")
    parser.add_argument(
        "--data",
        default=None,
        help="keep the namespace's lists in this directory, and serve the ones an earlier run left "
        "there instead of making them again (--finished, --live are then those of that run)",
    )
    args = parser.parse_args()

    with contextlib.ExitStack() as stack:
        if args.data:
            workdir = Path(args.data)
            workdir.mkdir(parents=True, exist_ok=True)
        else:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-ui-")))
        namespace_bodies = None
        if not (workdir / "lists" / NAMESPACE).exists():
            bodies, names = record()
            namespace_bodies = multiply(bodies, names, args.finished, args.live, args.finished_events)
            del bodies
        proc, kubeconfig = serve(namespace_bodies, workdir)
        del namespace_bodies
        os.environ["AIRFLOW_CONN_KUBERNETES_DEFAULT"] = json.dumps(
            {"conn_type": "kubernetes", "extra": {"kube_config_path": kubeconfig}}
        )
        result: dict[str, Any] = {"finished": args.finished, "live": args.live}
        try:
            if "core" not in args.skip:
                result["core"] = measure_core(kubeconfig)
                print(json.dumps(result["core"]), flush=True)
            if "app" not in args.skip:
                result["app"] = measure_app()
                print(json.dumps(result["app"]), flush=True)
            if "loop" not in args.skip:
                result["loop"] = measure_loop(kubeconfig)
                print(json.dumps(result["loop"]), flush=True)
            if "status" not in args.skip:
                result["status"] = measure_status(kubeconfig)
                print(json.dumps(result["status"]), flush=True)
        finally:
            proc.terminate()
            proc.wait()
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    # The code measured is whatever PYTHONPATH names first (a worktree of the version to measure).
    main()
