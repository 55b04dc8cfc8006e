"""Deferred jobs followed through several credential expiries: the real trigger path on a simulated
cluster that accepts only short-lived tokens.

The ``kubernetes_default`` connection names a kubeconfig whose exec plugin mints tokens living a few
seconds (as ``aws eks get-token`` mints 15-minute ones). Hundreds of ``JobTrigger.run()`` share one
watch, one client and one set of credentials for longer than several token lifetimes; every job must
end in the state its scenario dictates, with no request refused on the way and no refusal reaching the watch.
Two sizes: ``short`` (80 jobs, 3-second tokens) and ``full`` (300 jobs, 6-second tokens, marked slow).
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass
from pathlib import Path

import pytest
from airflow_jobs_sim import ClusterConfig, SimCluster, auth
from airflow_jobs_sim import kubeconfig as kubeconfig_file
from controller_fixture import ControllerThread
from sim_fixtures import CONNECTION_ENV, connection_env

from airflow_jobs_plugin.airflow.triggers import JobTrigger
from airflow_jobs_plugin.cluster import watch as shared
from airflow_jobs_plugin.cluster.kube import JOBS, PODS, KubeClient, KubeError

from .conftest import job_manifest, task_identity

# Slow (soak: jobs deferred through several token expiries): not in the fast lane.
pytestmark = pytest.mark.slow

SECRET = "soak-signing-secret"
TIME_SCALE = 0.01


@dataclass(frozen=True)
class Soak:
    jobs: int
    ttl: float  # token lifetime, seconds
    longest_run: float  # wall seconds a job may run: several token lifetimes


SHORT = Soak(jobs=80, ttl=3.0, longest_run=12.0)  # about 30 s
FULL = Soak(jobs=300, ttl=6.0, longest_run=30.0)  # about 50 s


@pytest.fixture(
    scope="module", params=[SHORT, pytest.param(FULL, marks=pytest.mark.slow)], ids=["short", "full"]
)
def soak(request) -> Soak:
    return request.param


@pytest.fixture(scope="module")
def cluster(soak):
    with (
        SimCluster(
            ClusterConfig(
                nodes=soak.jobs // 8 + 1,
                gpus_per_node=8,
                time_scale=TIME_SCALE,
                token=SECRET,
                token_ttl=soak.ttl,
            )
        ) as sim,
        ControllerThread(sim.kubeconfig_path),
    ):
        yield sim


@pytest.fixture(autouse=True)
def connection(cluster, monkeypatch):
    monkeypatch.setenv(CONNECTION_ENV, connection_env(cluster))


def scenario(index: int, rng: random.Random, longest_run: float) -> tuple[dict, str]:
    """Every third job fails with exit code 3 (no pod retries); the rest succeed. Run times are spread so
    jobs end all through the soak, across every token's expiry."""
    run = rng.uniform(1.0, longest_run) / TIME_SCALE
    if index % 3 == 2:
        return {"main": {"pull": 50, "run": run, "exit": 3, "logs": [f"job {index} fails"]}}, "FAILED"
    return {"main": {"pull": 50, "run": run, "exit": 0, "logs": [f"job {index} done"]}}, "SUCCEEDED"


async def test_every_deferred_job_ends_in_its_state_through_several_token_expiries(cluster, soak):
    rng = random.Random(14)
    submitter = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
    expected: dict[str, str] = {}
    try:
        for index in range(soak.jobs):
            body, state = scenario(index, rng, soak.longest_run)
            manifest = job_manifest(task_identity(f"soak-{index}"), scenario=body, backoff_limit=0)
            await submitter.create(JOBS, "default", manifest)
            expected[manifest["metadata"]["name"]] = state
    finally:
        await submitter.close()

    async def follow(name: str, index: int) -> dict:
        # Every tenth trigger streams its pod's log, so log streams live through the expiries too.
        trigger = JobTrigger(job_name=name, namespace="default", stream_logs=index % 10 == 0)
        events = [event.payload async for event in trigger.run()]
        assert len(events) == 1, (name, events)
        return events[0]

    try:
        results = await asyncio.wait_for(
            asyncio.gather(*(follow(name, i) for i, name in enumerate(expected))), timeout=240
        )
        client = await shared.client_for()
        watch = await shared.acquire("kubernetes_default", "default")
        try:
            watch_refusals, watch_errors = watch.refusals, watch.errors
        finally:
            shared.release("kubernetes_default", "default")
    finally:
        credentials = client.credentials if "client" in locals() else None
        await shared.shutdown()

    ended = {r["job_name"]: r["state"] for r in results}
    wrong = {name: (ended.get(name), state) for name, state in expected.items() if ended.get(name) != state}
    assert not wrong, f"{len(wrong)} jobs ended wrong (got, expected): {dict(list(wrong.items())[:5])}"
    assert credentials is not None
    # Several lifetimes passed under traffic. Renewal is on demand (a request finds the token due), so
    # the count follows the traffic: 3 in the short soak, 5 in the full one, measured.
    assert credentials.renewals >= 2, credentials.renewals
    # No 401 ever reached the watch (other errors, a connection dropped on a loaded machine, are the
    # watch's ordinary business and not this test's).
    assert watch_refusals == 0, (watch_refusals, watch_errors)
    streamed = [r for r in results if r["job_name"] in list(expected)[::10]]
    for result in streamed:
        index = list(expected).index(result["job_name"])
        assert any(f"job {index} " in line for line in result["log_tail"]), result["log_tail"]


async def test_a_connection_whose_renewed_token_is_refused_fails_with_its_name(
    cluster, soak, tmp_path, monkeypatch
):

    secret_file = tmp_path / "secret"
    secret_file.write_text("not-the-clusters-secret")
    kubeconfig = kubeconfig_file.write_user_kubeconfig(
        str(tmp_path / "kubeconfig"), cluster.url, auth.exec_user(soak.ttl, secret_file=str(secret_file))
    )
    monkeypatch.setenv(
        CONNECTION_ENV, json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": kubeconfig}})
    )
    client = await KubeClient.from_connection()
    try:
        with pytest.raises(KubeError) as caught:
            await client.get_or_none(JOBS, "default", "anything")
    finally:
        await client.close()
    assert caught.value.status == 401
    assert "connection 'kubernetes_default'" in caught.value.message
    assert "exec plugin" in caught.value.message and "refused freshly obtained" in caught.value.message


async def test_a_connection_with_an_inline_kubeconfig_renews_its_exec_token(cluster, soak, monkeypatch):
    inline = await asyncio.to_thread(Path(cluster.kubeconfig_path).read_text)
    monkeypatch.setenv(
        CONNECTION_ENV, json.dumps({"conn_type": "kubernetes", "extra": {"kube_config": inline}})
    )
    client = await KubeClient.from_connection()
    try:
        assert client.credentials is not None
        for _ in range(int(4 * soak.ttl / 0.1)):  # bounded: about four token lifetimes
            if client.credentials.credential.generation >= 2:
                break
            await client.list(PODS, "default")
            await asyncio.sleep(0.1)
        assert client.credentials.credential.generation >= 2
        assert client.credentials.name == "connection 'kubernetes_default'"
    finally:
        await client.close()
