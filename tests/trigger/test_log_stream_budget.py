"""Log follows have a connection pool of their own: however many containers a process follows, the
shared watch's reconnects, the admission's writes and the triggers' reads still get a connection."""

from __future__ import annotations

import asyncio
import contextlib

from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

from airflow_jobs_plugin.cluster import kube
from airflow_jobs_plugin.cluster.kube import JOBS, PODS, KubeClient

from .conftest import job_manifest, task_identity


async def test_followed_logs_never_take_the_connections_the_calls_need(cluster, client, monkeypatch):
    # The calls' pool holds two connections and the log follows' five: four containers are followed at
    # once (each follow holds its connection while its container runs), and a GET still answers.
    monkeypatch.setattr(kube, "LOG_STREAM_CONNECTIONS", 5)
    names = []
    for i in range(4):
        body = job_manifest(
            task_identity(f"follow{i}"), scenario={"main": {"run": None, "logs": ["epoch 1"]}}
        )
        body["spec"]["suspend"] = False
        await client.create(JOBS, "default", body)
        names.append(body["metadata"]["name"])
    pods: list[str] = []
    for _ in range(400):
        listed = (await client.list(PODS, "default"))["items"]
        pods = [
            p["metadata"]["name"]
            for p in listed
            if any(p["metadata"]["name"].startswith(n) for n in names)
            and p["status"].get("phase") == "Running"
        ]
        if len(pods) == 4:
            break
        await asyncio.sleep(0.05)
    assert len(pods) == 4

    configuration = k8s_client.Configuration()
    await k8s_config.load_kube_config(
        config_file=cluster.kubeconfig_path, client_configuration=configuration, persist_config=False
    )
    configuration.connection_pool_maxsize = 2
    small = KubeClient(k8s_client.ApiClient(configuration=configuration))
    first_lines: list[str] = []

    async def follow(pod: str) -> None:
        async for line in small.follow_log("default", pod):
            first_lines.append(line)

    followers = [asyncio.create_task(follow(p)) for p in pods]
    try:
        for _ in range(400):
            if len(first_lines) >= 4:
                break
            await asyncio.sleep(0.05)
        assert len(first_lines) >= 4  # every follow is open and holding its connection
        # With one shared pool of two connections this would wait until a followed container ended.
        job = await asyncio.wait_for(small.get(JOBS, "default", names[0]), 60)
        assert job["metadata"]["name"] == names[0]
    finally:
        for task in followers:
            task.cancel()
        for task in followers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await small.close()
        for name in names:
            await client.delete(JOBS, "default", name)


async def test_calls_past_the_pools_connections_wait_unbuilt(cluster, monkeypatch):
    """Thousands of triggers asking at once (a triggerer starting) build at most as many requests as
    the calls' pool has connections: aiohttp builds a request before it waits for a connection, so
    the rest wait before that, and every call is still answered."""
    configuration = k8s_client.Configuration()
    await k8s_config.load_kube_config(
        config_file=cluster.kubeconfig_path, client_configuration=configuration, persist_config=False
    )
    configuration.connection_pool_maxsize = 3
    small = KubeClient(k8s_client.ApiClient(configuration=configuration))
    building = most = 0
    real = small._api.call_api

    async def counted(*args, **kwargs):
        nonlocal building, most
        building += 1
        most = max(most, building)
        try:
            return await real(*args, **kwargs)
        finally:
            building -= 1

    monkeypatch.setattr(small._api, "call_api", counted)
    try:
        answers = await asyncio.gather(
            *(small.get_or_none(JOBS, "default", f"absent-{i}") for i in range(60))
        )
    finally:
        await small.close()
    assert answers == [None] * 60
    assert most == 3
