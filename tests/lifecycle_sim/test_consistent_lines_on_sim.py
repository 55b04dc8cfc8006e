"""Every state line a trigger logs comes from one view of the job and its pods at one moment, through
the real trigger on the simulated cluster: a trigger that starts after the job finished reports what it
finds, not a replay of its pods' past; a job deleted by hand stays TERMINATING until its last pod is gone;
a succeeded MPIJob's workers, stopped by the operator, are no error.

The cluster runs containers that have a ``command`` as local processes (exec mode), which is how a
worker is kept in its termination grace period for as long as a test needs.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timezone

import pytest
from sim_fixtures import cluster_fixture, connection_fixture

from airflow_jobs_plugin.airflow.triggers import JobTrigger
from airflow_jobs_plugin.cluster import watch as shared
from airflow_jobs_plugin.cluster.kube import DEFAULT_CONN_ID, PODS, KubeClient
from airflow_jobs_plugin.cluster.objects import condition_true
from airflow_jobs_plugin.jobs.kinds.mpi import MPIJOBS
from airflow_jobs_plugin.jobs.manifests import build_manifest
from airflow_jobs_plugin.jobs.spec import TaskIdentity, validate
from tests.patience import Deadline, stretch

pytestmark = pytest.mark.skipif(
    __import__("sim_fixtures").real_cluster_kubeconfig() is not None,
    reason="drives the simulator's faults, exec mode and store",
)

cluster = cluster_fixture(nodes=2, exec_commands=True)
connection = connection_fixture()

_runs = iter(range(1, 10_000))
HOLD = "test.airflow-jobs.io/hold"


@pytest.fixture
async def client(cluster):
    c = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
    yield c
    cluster.faults.clear()
    for pod in cluster.store.list("pods", namespace="default"):
        if HOLD in (pod["metadata"].get("finalizers") or []):
            cluster.store.patch(
                "pods", pod["metadata"]["name"], {"metadata": {"finalizers": []}}, "merge", "default"
            )
    await c.close()
    await shared.shutdown()


def mpi_manifest(
    *,
    launcher_run: float | None,
    worker_command: list[str] | None = None,
    launcher_command: list[str] | None = None,
) -> dict:
    """A two-worker MPIJob as the operator submits it; the launcher follows its scenario (``run``
    simulated seconds, None: until stopped) or runs ``launcher_command`` locally, the workers run
    ``worker_command`` locally if given."""
    identity = TaskIdentity("consistent", "train", f"run-{next(_runs)}", -1, 1)
    values: dict = {
        "image": "registry.example/trainer:1",
        "group": "vision",
        "user": "alice",
        "gpus": 1,
        "workers": 2,
        "wait_for_workers": False,
    }
    if worker_command is not None:
        values["worker_command"] = worker_command
    if launcher_command is not None:
        values["command"] = launcher_command
    body = build_manifest(
        validate(**values),
        name=identity.job_name(1),
        task=identity,
        attempt=1,
        queued_at=datetime.now(timezone.utc),
    )
    launcher = body["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]
    launcher["metadata"].setdefault("annotations", {})["sim.airflow-jobs.io/scenario"] = json.dumps(
        {"main": {"run": launcher_run, "exit": 0, "logs": ["mpirun: done"]}}
    )
    return body


def lines_of(text: str, name: str) -> list[str]:
    return [line.split(f"MPIJob {name}: ", 1)[1] for line in text.splitlines() if f"MPIJob {name}: " in line]


async def follow(name: str) -> dict:
    async def collect() -> list[dict]:
        return [e.payload async for e in JobTrigger(job_name=name, namespace="default", kind="MPIJob").run()]

    (event,) = await collect()
    return event


async def until(check, what: str, seconds: float = 30.0):
    deadline = Deadline(seconds)
    while not deadline.passed():
        if result := await check():
            return result
        await asyncio.sleep(0.02)
    raise AssertionError(f"{what}: not within {deadline}")


async def pods_of(client: KubeClient, name: str) -> list[dict]:
    return [
        p for p in (await client.list(PODS, "default"))["items"] if p["metadata"]["name"].startswith(name)
    ]


def phase(pod: dict) -> str:
    return (pod.get("status") or {}).get("phase") or ""


async def test_a_trigger_that_starts_after_the_job_finished_reports_what_it_finds_not_a_replay(
    cluster, client, capsys
):
    # A watch of the process already runs (another trigger's), and its pods' stream lags: the MPIJob's
    # Succeeded reaches the cache while the pods are cached as they were seconds before.
    watch = await shared.acquire(DEFAULT_CONN_ID, "default")
    try:
        await watch.wait_synced(timeout=60)
        body = mpi_manifest(launcher_run=150)
        name = body["metadata"]["name"]
        await client.create(MPIJOBS, "default", body)
        await until(lambda: _cached_pods(watch, name, 3), "three pods cached")
        lag = 8.0 * stretch()
        cluster.faults.set_latency(lag, verb="watch", resource="pods")
        cluster.faults.drop_watches()

        async def succeeded_in_cache():
            job = watch.get(MPIJOBS, name)
            return job is not None and condition_true(job, "Succeeded")

        await until(succeeded_in_cache, "the MPIJob's Succeeded in the watch's cache")
        stale = [phase(p) for p in watch.pods_of(name)]
        event = await follow(name)
    finally:
        shared.release(DEFAULT_CONN_ID, "default")
    assert event["state"] == "SUCCEEDED", event
    lines = lines_of(capsys.readouterr().out, name)
    # The job had finished: its launcher had completed and no worker was starting. Every line says so.
    assert lines and all(line.startswith(("TERMINATING", "SUCCEEDED")) for line in lines), (stale, lines)
    wrong = [line for line in lines if "launcher" in line and "launcher Completed" not in line]
    assert not wrong, (stale, lines)
    assert not [line for line in lines if "Pending" in line or "ContainerCreating" in line], (stale, lines)


async def _cached_pods(watch: shared.SharedWatch, name: str, count: int) -> bool:
    return len(watch.pods_of(name)) >= count


# A worker that takes its time to stop: it exits 143 two seconds (stretched) after its SIGTERM.
def slow_to_stop() -> list[str]:
    return ["sh", "-c", f"trap 'sleep {2 * stretch():.1f}; exit 143' TERM; while :; do sleep 0.05; done"]


async def test_a_job_deleted_by_hand_is_terminating_until_its_last_pod_is_gone(cluster, client, capsys):
    body = mpi_manifest(launcher_run=None, worker_command=slow_to_stop())
    for role in ("Launcher", "Worker"):
        body["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]["terminationGracePeriodSeconds"] = 3000
    name = body["metadata"]["name"]
    await client.create(MPIJOBS, "default", body)
    trigger = asyncio.ensure_future(follow(name))
    out = ""
    deadline = Deadline(60)
    while not any(line.startswith("RUNNING") for line in lines_of(out, name)):
        assert not trigger.done() and not deadline.passed(), (out, deadline)
        out += capsys.readouterr().out
        await asyncio.sleep(0.02)
    # kubectl delete mpijob: background propagation; the garbage collector deletes the pods after.
    await client.delete(MPIJOBS, "default", name)
    event = await trigger
    left = [
        p["metadata"]["name"] for p in await pods_of(client, name) if phase(p) not in ("Succeeded", "Failed")
    ]
    assert event["state"] == "CANCELLED", event
    assert not left, left  # CANCELLED only once no pod of it holds a node
    lines = lines_of(out + capsys.readouterr().out, name)
    after = lines[[line.split()[0] for line in lines].index("RUNNING") + 1 :]
    assert after[-1].startswith("CANCELLED") and len(after) >= 2, lines
    assert all(line.startswith("TERMINATING") for line in after[:-1]), lines


async def test_a_succeeded_mpijobs_workers_stopped_by_the_operator_are_no_error(
    cluster, client, capsys, tmp_path
):
    # Workers that exit 143 on the operator's SIGTERM; a finalizer keeps them to be read once they have.
    # The launcher succeeds once the test says so (a file appears).
    go = tmp_path / "go"
    body = mpi_manifest(
        launcher_run=None,
        launcher_command=["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done"],
        worker_command=["sh", "-c", "trap 'exit 143' TERM; while :; do sleep 0.05; done"],
    )
    name = body["metadata"]["name"]
    await client.create(MPIJOBS, "default", body)
    trigger = asyncio.ensure_future(follow(name))

    async def workers_running():
        pods = [p for p in await pods_of(client, name) if "-worker-" in p["metadata"]["name"]]
        return len(pods) == 2 and all(phase(p) == "Running" for p in pods) and pods

    for pod in await until(workers_running, "both workers running"):
        cluster.store.patch(
            "pods", pod["metadata"]["name"], {"metadata": {"finalizers": [HOLD]}}, "merge", "default"
        )
    go.touch()  # the launcher succeeds
    event = await trigger
    assert event["state"] == "SUCCEEDED", event
    workers = [r for r in event["replicas"] if r["role"] == "worker"]
    assert workers and all(r["status"] != "Error" for r in workers), event["replicas"]
    assert set(event["exit_codes"]) <= {"launcher"}, event["exit_codes"]
    lines = lines_of(capsys.readouterr().out, name)
    assert not [line for line in lines if "Error" in line], lines
