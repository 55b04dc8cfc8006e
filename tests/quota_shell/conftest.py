"""A simulated cluster, a quota policy ConfigMap and suspended jobs for the quota pool's shell."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import uuid
from datetime import datetime, timezone

import pytest
from sim_fixtures import cluster_fixture, connection_fixture

from airflow_jobs_plugin.cluster import watch as shared
from airflow_jobs_plugin.cluster.kube import CONFIGMAPS, JOBS, KubeClient, Resource
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.kinds.mpi import MPIJOBS
from airflow_jobs_plugin.jobs.manifests import build_manifest
from airflow_jobs_plugin.jobs.spec import TaskIdentity, validate
from airflow_jobs_plugin.queueing import quota
from airflow_jobs_plugin.queueing.engines import pool as admission
from airflow_jobs_plugin.queueing.pools import POLICY_LABEL, POLICY_LABEL_VALUE
from airflow_jobs_plugin.queueing.quota import ledger as ledger_io
from tests.patience import Deadline

NAMESPACE = "default"
SCENARIO = "sim.airflow-jobs.io/scenario"
_CREATED: list[tuple[Resource, str]] = []


# The tests here drive the quota pool's engine themselves: no admission controller beside them.
cluster = cluster_fixture(nodes=4, controller=False)
connection = connection_fixture()


@pytest.fixture
async def client(cluster):
    c = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
    yield c
    await admission.shutdown()
    await shared.shutdown()
    # Jobs still running would hold the simulated nodes' GPUs for the tests after this one.
    created, _CREATED[:] = list(_CREATED), []
    await asyncio.gather(*(c.delete(resource, NAMESPACE, name) for resource, name in created))
    await c.close()


def unique(prefix: str) -> str:
    """A fresh group or ConfigMap name, so tests sharing a cluster never share a queue."""
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def policy_yaml(group: str, gpus: int = 4, user_gpus: int = 4, extra: str = "") -> str:
    return f"groups:\n  {group}: {{gpus: {gpus}, user_gpus: {user_gpus}}}\n{extra}"


async def put_policy(client: KubeClient, name: str, text: str) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        # Labelled as a policy, as a platform installs one: the admission controller finds it by it.
        "metadata": {"name": name, "labels": {POLICY_LABEL: POLICY_LABEL_VALUE}},
        "data": {quota.POLICY_KEY: text},
    }
    await client.create(CONFIGMAPS, NAMESPACE, body)


def job_body(
    group: str,
    user: str,
    gpus: int,
    *,
    run: float = 5,
    task: str = "train",
    node_selector: dict | None = None,
    annotations: dict | None = None,
    **args,
) -> dict:
    """A suspended Job of the product whose container runs ``run`` simulated seconds."""
    ident = TaskIdentity("quota", task, f"run-{uuid.uuid4().hex[:8]}", -1, 1)
    spec = validate(
        image="registry.example/trainer:1",
        group=group,
        user=user,
        gpus=gpus,
        node_selector=node_selector,
        annotations={SCENARIO: json.dumps({"main": {"pull": 0.5, "run": run}})},
        **args,
    )
    body = build_manifest(
        spec, name=ident.job_name(1), task=ident, attempt=1, queued_at=datetime.now(timezone.utc)
    )
    body["metadata"]["annotations"].update(annotations or {})
    return body


async def create_jobs(client: KubeClient, *bodies: dict) -> list[dict]:
    """Create the jobs (Jobs or MPIJobs) one after the other: their queue order is their creation order."""
    created = []
    for body in bodies:
        resource = MPIJOBS if body["kind"] == "MPIJob" else JOBS
        job = await client.create(resource, NAMESPACE, body)
        job.setdefault("kind", body["kind"])
        created.append(job)
        _CREATED.append((resource, body["metadata"]["name"]))
    return created


async def ledger_of(client: KubeClient, group: str) -> quota.Ledger:
    return (await ledger_io.read_ledger(client, NAMESPACE, group)).ledger


async def reservations_once_released(client: KubeClient, group: str) -> tuple:
    """The group's reservations once the admission controller has had time to release its ended jobs'
    (its pass follows their end; the time stretches with the machine's load): () when none is leaked."""

    async def released() -> bool:
        return (await ledger_of(client, group)).reservations == ()

    with contextlib.suppress(AssertionError):  # the caller's assertion shows what is still held
        await wait_for(released, timeout=30)
    return (await ledger_of(client, group)).reservations


def annotation(job: dict, key: str) -> str | None:
    return (job["metadata"].get("annotations") or {}).get(key)


def admitted_at(job: dict) -> datetime:
    value = annotation(job, labels.ADMITTED_AT)
    assert value, f"{job['metadata']['name']} was never admitted"
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


async def list_jobs(client: KubeClient) -> list[dict]:
    """Every Job of the namespace, straight from the API (a pass's job source without a watch)."""
    items = (await client.list(JOBS, NAMESPACE))["items"]
    for item in items:
        item.setdefault("kind", "Job")
    return items


async def wait_for(predicate, timeout: float = 20.0, interval: float = 0.05):
    """Poll an async or plain predicate until it returns something truthy; fail after ``timeout``."""

    deadline = Deadline(timeout)
    while True:
        result = predicate()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        if deadline.passed():
            raise AssertionError(
                f"timed out after {deadline} waiting for {getattr(predicate, '__name__', predicate)}"
            )
        await asyncio.sleep(interval)
