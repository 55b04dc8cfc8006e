"""A job's Job and its pods arrive on two watch streams; when one lags, the task log still shows only
states the job was in, in lifecycle order.

The simulator's latency fault on one resource's ``watch`` verb holds back that stream (every event of
it arrives late, in order, once the delayed watch request starts), which makes the cross-stream skew
of a real cluster deterministic.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timezone

import pytest
from sim_fixtures import cluster_fixture, connection_fixture, held_back

from airflow_jobs_plugin.airflow.triggers import JobTrigger
from airflow_jobs_plugin.cluster import watch as shared
from airflow_jobs_plugin.cluster.kube import JOBS, KubeClient
from airflow_jobs_plugin.jobs.manifests import build_manifest
from airflow_jobs_plugin.jobs.spec import TaskIdentity, validate

cluster = cluster_fixture(nodes=1)
connection = connection_fixture()

ORDER = ["QUEUED", "SCHEDULING", "STARTING", "RUNNING", "SUCCEEDED"]
_runs = iter(range(1, 10_000))


@pytest.fixture
async def client(cluster):
    c = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
    yield c
    await c.close()
    await shared.shutdown()
    cluster.faults.clear()


def manifest(scenario: dict) -> dict:
    identity = TaskIdentity("lagging", "train", f"run-{next(_runs)}", -1, 1)
    spec = validate(
        image="registry.example/trainer:1",
        group="vision",
        user="alice",
        gpus=1,
        annotations={"sim.airflow-jobs.io/scenario": json.dumps(scenario)},
    )
    return build_manifest(
        spec, name=identity.job_name(1), task=identity, attempt=1, queued_at=datetime.now(timezone.utc)
    )


def states_logged(text: str, name: str) -> list[str]:
    return [
        line.split(f"Job {name}: ")[1].split()[0].rstrip(":")
        for line in text.splitlines()
        if f"Job {name}: " in line
    ]


async def follow(name: str) -> dict:
    async def collect() -> list[dict]:
        return [event.payload async for event in JobTrigger(job_name=name, namespace="default").run()]

    (event,) = await asyncio.wait_for(collect(), 60)
    return event


def assert_lifecycle_order(seen: list[str]) -> None:
    assert seen[0] == "QUEUED" and seen[-1] == "SUCCEEDED" and "RUNNING" in seen, seen
    assert set(seen) <= set(ORDER), seen  # never TERMINATING: the job was never stopped
    assert [ORDER.index(s) for s in seen] == sorted(ORDER.index(s) for s in seen), seen


async def test_a_job_whose_own_updates_lag_its_pods_never_reads_as_preempted(cluster, client, capsys):
    # The Job's stream starts a second late: its pods are created, run and finish while the cache
    # still holds the Job as it was before admission.
    cluster.faults.set_latency(1.0, verb="watch", resource="jobs")
    # Held in its queue until the trigger follows it (the admission controller's own watch is older
    # than the fault, so it would let the job go before the trigger's first look).
    body = held_back(manifest({"main": {"pull": 1, "run": 20, "exit": 0, "logs": ["epoch 1"]}}))
    await client.create(JOBS, "default", body)
    event = await follow(body["metadata"]["name"])
    assert event["state"] == "SUCCEEDED", event
    assert_lifecycle_order(states_logged(capsys.readouterr().out, body["metadata"]["name"]))


async def test_a_job_whose_pods_lag_its_own_completion_goes_from_running_to_succeeded(
    cluster, client, capsys
):
    # Once the pod runs, its stream is cut and resumes late: the Job's Complete arrives while the
    # cache still holds the pod Running.
    # It runs 3 s, long enough for a loaded trigger to see it run; the stream resumes 5 s after the cut,
    # after the Job's Complete.
    body = held_back(manifest({"main": {"pull": 1, "run": 300, "exit": 0, "logs": ["epoch 1"]}}))
    name = body["metadata"]["name"]
    await client.create(JOBS, "default", body)
    trigger = asyncio.ensure_future(follow(name))
    # Cut the stream once the trigger has seen the pod run (it logged RUNNING): cut earlier, the pod's
    # Running event can be lost with the stream and, under load, the pod may be done by the time the
    # late stream resumes; the trigger then rightly never reports RUNNING, and the lag this scenario is
    # about (the Job's Complete ahead of the pod's end) is not what happens.
    out = ""
    while "RUNNING" not in states_logged(out, name):
        assert not trigger.done(), (out, trigger.result())
        out += capsys.readouterr().out
        await asyncio.sleep(0.01)
    cluster.faults.set_latency(5.0, verb="watch", resource="pods")
    cluster.faults.drop_watches()
    event = await trigger
    assert event["state"] == "SUCCEEDED", event
    assert_lifecycle_order(states_logged(out + capsys.readouterr().out, name))


def lines_of(text: str, name: str) -> list[str]:
    return [line.split(f"Job {name}: ", 1)[1] for line in text.splitlines() if f"Job {name}: " in line]


async def _running(cluster, client, capsys) -> tuple[str, asyncio.Future, str]:
    """A job followed by its trigger while the Job's own watch stream lags 3 s behind its pods'."""
    body = manifest({"main": {"pull": 1, "run": 100000, "exit": 0, "logs": ["epoch 1"]}})
    name = body["metadata"]["name"]
    await client.create(JOBS, "default", body)
    trigger = asyncio.ensure_future(follow(name))
    out = ""
    while "RUNNING" not in states_logged(out, name):
        assert not trigger.done(), (out, trigger.result())
        out += capsys.readouterr().out
        await asyncio.sleep(0.01)
    cluster.faults.set_latency(3.0, verb="watch", resource="jobs")
    cluster.faults.drop_watches()
    return name, trigger, out


async def test_after_a_stop_the_task_log_names_only_states_the_job_was_in(cluster, client, capsys):
    from airflow_jobs_plugin.usecases import actions

    name, trigger, out = await _running(cluster, client, capsys)
    job = await client.get(JOBS, "default", name)
    done = await actions.stop(client, "default", job, "alice")
    assert done.done, done
    while "STOPPED" not in states_logged(out, name):
        assert not trigger.done(), (out, trigger.result())
        out += capsys.readouterr().out
        await asyncio.sleep(0.01)
    await actions.cancel(client, "default", await client.get(JOBS, "default", name), "alice")
    event = await trigger
    assert event["state"] == "CANCELLED", event
    lines = lines_of(out + capsys.readouterr().out, name)
    after = lines[[line.split()[0].rstrip(":") for line in lines].index("RUNNING") :]
    seen = [line.split()[0].rstrip(":") for line in after]
    assert set(seen) <= {"RUNNING", "TERMINATING", "STOPPED", "CANCELLED"}, after


async def test_after_a_cancel_the_task_log_names_only_states_the_job_was_in(cluster, client, capsys):
    from airflow_jobs_plugin.usecases import actions

    name, trigger, out = await _running(cluster, client, capsys)
    await actions.cancel(client, "default", await client.get(JOBS, "default", name), "alice")
    event = await trigger
    assert event["state"] == "CANCELLED", event
    lines = lines_of(out + capsys.readouterr().out, name)
    after = lines[[line.split()[0].rstrip(":") for line in lines].index("RUNNING") :]
    seen = [line.split()[0].rstrip(":") for line in after]
    assert set(seen) <= {"RUNNING", "TERMINATING", "CANCELLED"}, after
