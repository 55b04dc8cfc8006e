"""The product beside the real Kueue (v0.19.2, scripts/realplane/pins.toml) on the real control plane.

What a platform team meets on a cluster whose Kueue was installed before the product: a LocalQueue named
``default`` that Kueue gives to every unlabelled job of its namespace (Kueue's webhook,
``pkg/controller/jobframework/defaults.go``), a Kueue that manages every job
(``manageJobsWithoutQueueName``), a Workload an admin deactivates. The simulator's Kueue does not model
these rules; these scenarios run on the plane only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest
from airflow.sdk.exceptions import TaskDeferred
from sim_fixtures import real_cluster_kubeconfig
from task_doubles import task_context

from airflow_jobs_plugin.airflow import cli
from airflow_jobs_plugin.airflow.operators import JobOperator
from airflow_jobs_plugin.cluster import watch as shared
from airflow_jobs_plugin.cluster.kube import CONFIGMAPS, JOBS, KubeClient, KubeError, Resource
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.queueing import kueue, quota
from airflow_jobs_plugin.queueing.engines.pool import shutdown as admission_shutdown
from airflow_jobs_plugin.queueing.pools import POLICY_LABELS

pytestmark = [
    pytest.mark.real_cluster,
    pytest.mark.skipif(
        real_cluster_kubeconfig() is None,
        reason="needs the real Kueue (scripts/cluster --with kueue): the simulator's Kueue has no default-"
        "LocalQueue rule, no manageJobsWithoutQueueName webhook and no admission gates",
    ),
]

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = "sim.airflow-jobs.io/scenario"
GPU = "nvidia.com/gpu"
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
FLAVORS = Resource(kueue.GROUP, kueue.VERSION, "resourceflavors", "ResourceFlavor", namespaced=False)
CLUSTER_QUEUES = Resource(kueue.GROUP, kueue.VERSION, "clusterqueues", "ClusterQueue", namespaced=False)
LOCAL_QUEUES = Resource(kueue.GROUP, kueue.VERSION, "localqueues", "LocalQueue")
WORKLOADS = Resource(kueue.GROUP, kueue.VERSION, "workloads", "Workload")
EVENTS = Resource("", "v1", "events", "Event")
POLICY = "kueue-plane-policy"


@pytest.fixture(scope="module")
def kubeconfig() -> str:
    path = real_cluster_kubeconfig()
    assert path is not None
    return path


def run(coro):
    return asyncio.run(coro)


async def _client(kubeconfig: str) -> KubeClient:
    return await KubeClient.from_kubeconfig(kubeconfig)


@pytest.fixture
def namespace(kubeconfig, monkeypatch):
    """A namespace of its own, with the kubernetes_default connection pointing at the plane."""
    name = f"kq-{uuid.uuid4().hex[:6]}"
    monkeypatch.setenv(
        "AIRFLOW_CONN_KUBERNETES_DEFAULT",
        json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": kubeconfig}}),
    )
    monkeypatch.setenv("AIRFLOW__AIRFLOW_JOBS__QUOTA_CONFIGMAP", "")

    async def create() -> None:
        client = await _client(kubeconfig)
        try:
            await client.create(NAMESPACES, "", {"metadata": {"name": name}})
            # Pods need the namespace's `default` ServiceAccount, which the controller manager creates.
            for _ in range(100):
                try:
                    await client.get(SERVICE_ACCOUNTS, name, "default")
                    return
                except KubeError:
                    await asyncio.sleep(0.1)
        finally:
            await client.close()

    run(create())
    yield name

    async def delete() -> None:
        client = await _client(kubeconfig)
        try:
            await client.delete(NAMESPACES, "", name)
        finally:
            await client.close()

    run(delete())


def _object(resource: Resource, body: dict) -> dict:
    # A custom resource's body must name its kind: the API server's CRD handler refuses one without
    # ("Object 'Kind' is missing"), where built-in types take it from the path.
    return {"apiVersion": resource.api_version, "kind": resource.kind, **body}


def queues(kubeconfig: str, namespace: str, *, local: str, gpus: int) -> None:
    """A ClusterQueue of ``gpus`` GPUs for ``namespace`` and a LocalQueue ``local`` pointing at it."""
    cq = f"cq-{namespace}"

    async def create() -> None:
        client = await _client(kubeconfig)
        try:
            with contextlib.suppress(KubeError):
                await client.create(FLAVORS, "", _object(FLAVORS, {"metadata": {"name": "default-flavor"}}))
            spec = {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", GPU],
                        "flavors": [
                            {
                                "name": "default-flavor",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": 64},
                                    {"name": "memory", "nominalQuota": "512Gi"},
                                    {"name": GPU, "nominalQuota": gpus},
                                ],
                            }
                        ],
                    }
                ],
            }
            await client.create(
                CLUSTER_QUEUES, "", _object(CLUSTER_QUEUES, {"metadata": {"name": cq}, "spec": spec})
            )
            await client.create(
                LOCAL_QUEUES,
                namespace,
                _object(LOCAL_QUEUES, {"metadata": {"name": local}, "spec": {"clusterQueue": cq}}),
            )
        finally:
            await client.close()

    run(create())


def pool(kubeconfig: str, namespace: str, policy: str) -> None:
    async def create() -> None:
        client = await _client(kubeconfig)
        try:
            await client.create(
                CONFIGMAPS,
                namespace,
                {"metadata": {"name": POLICY, "labels": POLICY_LABELS}, "data": {quota.POLICY_KEY: policy}},
            )
        finally:
            await client.close()

    run(create())


@contextlib.contextmanager
def kueue_configuration(kubeconfig: str, overrides: dict):
    """Restart the plane's Kueue with ``overrides`` merged over its shipped configuration, and restore it."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as fh:
        json.dump(overrides, fh)
    cluster = [str(ROOT / "scripts" / "cluster"), "kueue", "--kubeconfig", kubeconfig]
    subprocess.run([*cluster, "--kueue-config", fh.name], check=True, capture_output=True)
    try:
        yield
    finally:
        subprocess.run(cluster, check=True, capture_output=True)
        os.unlink(fh.name)


def job(task_id: str, namespace: str, *, gpus: int, scenario: dict, **kwargs) -> JobOperator:
    kwargs.setdefault("group", "vision")
    return JobOperator(
        task_id=task_id,
        image="ghcr.io/acme/trainer:1",
        command=["python", "train.py"],
        namespace=namespace,
        gpus=gpus,
        job_annotations={SCENARIO: json.dumps({"main": scenario})},
        **kwargs,
    )


def submit(op: JobOperator, dag_id: str):
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(task_context(dag_id, op.task_id))
    return deferred.value.trigger


async def follow(triggers, watcher, seconds: float):
    """Run ``triggers`` as the triggerer does for ``seconds`` (or until all end) beside ``watcher``."""

    async def events(trigger):
        return [e.payload async for e in trigger.run()]

    tasks = [asyncio.ensure_future(events(t)) for t in triggers]
    watching = asyncio.ensure_future(watcher())
    try:
        done, _ = await asyncio.wait(tasks, timeout=seconds)
        return [t.result() if t in done else None for t in tasks]
    finally:
        watching.cancel()
        for t in tasks:
            t.cancel()
        await asyncio.gather(watching, *tasks, return_exceptions=True)
        await admission_shutdown()
        await shared.shutdown()


async def jobs_of(client: KubeClient, namespace: str) -> list[dict]:
    return (await client.list(JOBS, namespace)).get("items") or []


async def kueue_stopped_events(client: KubeClient, namespace: str) -> list[str]:
    """Kueue's own words each time it suspends a running job it never admitted
    (``jobframework/reconciler.go``: event Stopped, "Not admitted by cluster queue")."""
    items = (await client.list(EVENTS, namespace)).get("items") or []
    return [
        e["involvedObject"]["name"]
        for e in items
        if e.get("reason") == "Stopped" and "Not admitted" in (e.get("message") or "")
    ]


def test_a_default_local_queue_lets_no_user_past_the_pool(kubeconfig, namespace, capsys):
    """Two 2-GPU jobs of one user whose pool limit is 2 GPUs, in a namespace where Kueue gives every
    unlabelled job its LocalQueue `default`: one runs, the other waits for its user, at every instant."""
    queues(kubeconfig, namespace, local=kueue.DEFAULT_LOCAL_QUEUE, gpus=8)
    pool(kubeconfig, namespace, "groups:\n  vision: {gpus: 8, user_gpus: 2}\n")
    triggers = [
        submit(
            job(
                f"alice_{i}",
                namespace,
                gpus=2,
                scenario={"run": None},
                group="vision",
                user="alice",
                quota_configmap=POLICY,
            ),
            "kueue_default_lq",
        )
        for i in range(2)
    ]
    peak = 0

    async def watcher():
        nonlocal peak
        client = await _client(kubeconfig)
        try:
            while True:
                running = [j for j in await jobs_of(client, namespace) if j["spec"].get("suspend") is False]
                peak = max(peak, len(running))
                await asyncio.sleep(0.1)
        finally:
            await client.close()

    async def scenario():
        results = await follow(triggers, watcher, 40)
        client = await _client(kubeconfig)
        try:
            return results, await jobs_of(client, namespace)
        finally:
            await client.close()

    results, jobs = run(scenario())
    out = capsys.readouterr().out
    assert peak == 1, f"{peak} of alice's 2-GPU jobs ran at once against her 2-GPU limit:\n{out[-4000:]}"
    assert sorted(j["spec"]["suspend"] for j in jobs) == [False, True]
    assert all(j["metadata"]["labels"].get(kueue.QUEUE_NAME_LABEL) == "default" for j in jobs)
    assert "UserQuota" in out, out[-3000:]
    assert results == [None, None]
    for j in jobs:
        cli.main(["cancel", j["metadata"]["name"], "--namespace", namespace, "--kubeconfig", kubeconfig])


def test_a_kueue_that_manages_every_job_is_never_fought(kubeconfig, namespace, capsys):
    """Kueue runs with manageJobsWithoutQueueName: a plain job (no queue named, no pool) is Kueue's from
    its creation. The product never unsuspends it nor hands it to a LocalQueue that does not exist (the
    namespace has no ``default``): it says why it waits, and Kueue never has to stop it."""
    with kueue_configuration(kubeconfig, {"manageJobsWithoutQueueName": True}):
        trigger = submit(job("plain", namespace, gpus=1, scenario={"run": 1}), "kueue_manages_all")

        async def watcher():
            await asyncio.sleep(3600)

        async def scenario():
            results = await follow([trigger], watcher, 25)
            client = await _client(kubeconfig)
            try:
                return (
                    results,
                    await jobs_of(client, namespace),
                    await kueue_stopped_events(client, namespace),
                )
            finally:
                await client.close()

        results, jobs, stopped = run(scenario())
    out = capsys.readouterr().out
    assert stopped == [], f"Kueue had to stop jobs the product released: {stopped}"
    (only,) = jobs
    assert only["spec"]["suspend"] is True
    assert labels.ADMITTED not in (only["metadata"].get("labels") or {})
    assert "Kueue LocalQueue 'default' does not exist" in out, out[-3000:]
    assert results == [None]
    cli.main(["cancel", only["metadata"]["name"], "--namespace", namespace, "--kubeconfig", kubeconfig])


def test_a_kueue_that_manages_every_job_runs_it_from_its_default_local_queue(kubeconfig, namespace):
    """The same Kueue, with a LocalQueue `default` in the namespace: the job is Kueue's at creation, Kueue
    admits it, it runs to success, and nobody fought over its `suspend`."""
    queues(kubeconfig, namespace, local=kueue.DEFAULT_LOCAL_QUEUE, gpus=8)
    with kueue_configuration(kubeconfig, {"manageJobsWithoutQueueName": True}):
        trigger = submit(job("plain", namespace, gpus=1, scenario={"run": 1}), "kueue_manages_all_lq")

        async def watcher():
            await asyncio.sleep(3600)

        async def scenario():
            results = await follow([trigger], watcher, 120)
            client = await _client(kubeconfig)
            try:
                return results, await kueue_stopped_events(client, namespace)
            finally:
                await client.close()

        results, stopped = run(scenario())
    assert stopped == []
    ((event,),) = results
    assert (event["status"], event["state"]) == ("success", "SUCCEEDED"), event


def test_a_workload_an_admin_deactivates_ends_the_task(kubeconfig, namespace, capsys):
    """A job waiting in Kueue whose Workload an admin deactivates (spec.active: false, as Kueue itself does
    past its requeuing limit) will never run: the task ends FAILED saying so, instead of waiting for ever."""
    queues(kubeconfig, namespace, local="small", gpus=1)
    trigger = submit(
        job("big", namespace, gpus=2, scenario={"run": 1}, kueue_queue="small"), "kueue_deactivated"
    )

    async def deactivate():
        client = await _client(kubeconfig)
        try:
            for _ in range(300):
                items = (await client.list(WORKLOADS, namespace)).get("items") or []
                if items:
                    name = items[0]["metadata"]["name"]
                    await client.merge_patch(WORKLOADS, namespace, name, {"spec": {"active": False}})
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(3600)
        finally:
            await client.close()

    ((event,),) = run(follow([trigger], deactivate, 120))
    assert (event["status"], event["state"]) == ("failed", "FAILED"), event
    assert "deactivated" in event["message"], event["message"]
