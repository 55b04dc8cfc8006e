"""A simulated cluster holding GPU jobs in several states, with a quota policy, for the UI and CLI tests.

Jobs are created from the product's real manifests (suspended, as the operator submits them) with
simulator scenarios, then admitted by real admission passes of the quota pool:

| job | group | user | GPUs | behaviour | expected state |
|---|---|---|---|---|---|
| ``runner`` | vision | alice | 2 | runs until deleted | RUNNING |
| ``done`` | vision | bob | 1 | runs briefly, exit 0 | SUCCEEDED |
| ``broken`` | nlp | carol | 1 | exits 3, no pod retry | FAILED |
| ``waiting`` | vision | grace | 4 | never fits next to ``runner`` | QUEUED (GroupQuota, position 1) |
| ``mpi`` | nlp | dave | 2 x 2 | MPI launcher and workers run until deleted | RUNNING |
| ``victim`` | nlp | erin | 1 | runs until deleted; the CLI cancel test cancels it | RUNNING |
| ``doomed`` | nlp | frank | 1 | runs until deleted; the API cancel test cancels it | RUNNING |
| ``paused`` | nlp | heidi | 1 | runs until deleted; the API and browser tests stop and resume it | RUNNING |
| ``halted`` | nlp | ivan | 1 | runs until deleted; the CLI test stops and resumes it | RUNNING |
| ``framed`` | nlp | judy | 1 | runs until deleted; the browser test stops, resumes and cancels it in Airflow's UI | RUNNING |
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from datetime import datetime, timezone

import pytest
from airflow_jobs_sim import ClusterConfig, SimCluster
from fastapi import FastAPI

from airflow_jobs_plugin.cluster.kube import CONFIGMAPS, JOBS, PODS, KubeClient
from airflow_jobs_plugin.jobs.kinds.mpi import MPIJOBS
from airflow_jobs_plugin.jobs.manifests import build_manifest
from airflow_jobs_plugin.jobs.spec import WAIT_FOR_WORKERS_CONTAINER, TaskIdentity, validate
from airflow_jobs_plugin.plugin import app as plugin_app
from airflow_jobs_plugin.plugin import deps as plugin_deps
from airflow_jobs_plugin.queueing import quota
from airflow_jobs_plugin.queueing.quota.ledger import admission_pass
from airflow_jobs_plugin.readmodel.inspect import Target, read_cluster
from airflow_jobs_plugin.readmodel.views import overview

NAMESPACE = "default"
POLICY = """
groups:
  vision: {gpus: 4, user_gpus: 4}
  nlp: {gpus: 12, user_gpus: 4}
"""
SCENARIO = "sim.airflow-jobs.io/scenario"


class Admin:
    """Airflow's user as the stubbed authentication gives it: one who may read and act on every DAG."""

    def get_name(self) -> str:
        return "admin"


@pytest.fixture
def mounted_app(monkeypatch) -> FastAPI:
    """The plugin's app mounted at its prefix in a host app, as Airflow's API server mounts it, for the
    namespace ``ml-team``, with Airflow's authentication stubbed: every request is the admin's, who may
    read and act on every DAG. The cluster is whatever the test puts in ``plugin_reads._with_cluster``."""
    import sys

    from airflow.api_fastapi.core_api import security

    monkeypatch.setattr(plugin_deps, "_may", lambda *args, **kwargs: True)
    monkeypatch.setattr(sys, "argv", ["airflow", "api-server"])
    plugin = plugin_app.create_app()
    plugin.dependency_overrides[security.get_user] = Admin
    plugin.dependency_overrides[plugin_deps._settings] = lambda: plugin_app.Settings(namespace="ml-team")
    host = FastAPI()
    host.mount(plugin_app.URL_PREFIX, plugin)
    return host


@dataclass(frozen=True)
class Population:
    """The populated cluster and the names of its jobs by role in the table above."""

    cluster: SimCluster
    names: dict[str, str]
    identities: dict[str, TaskIdentity]

    @property
    def kubeconfig(self) -> str:
        return self.cluster.kubeconfig_path

    def admit(self) -> None:
        """One admission pass per group, as the admitting triggerer runs after a job or pod changes:
        it frees the GPUs of jobs that are gone, or stopped or ruled with no pod left."""

        async def run() -> None:
            client = await KubeClient.from_kubeconfig(self.kubeconfig)
            try:
                await _admit_all(client, quota.parse_policy(POLICY))
            finally:
                await client.close()

        asyncio.run(run())


def _manifest(identity: TaskIdentity, scenario: dict, **args) -> dict:
    values = {"image": "registry.example/trainer:1", "ttl_after_finished": None, **args}
    values["annotations"] = {SCENARIO: json.dumps(scenario)}
    spec = validate(**values)
    body = build_manifest(
        spec, name=identity.job_name(1), task=identity, attempt=1, queued_at=datetime.now(timezone.utc)
    )
    if body["kind"] == "MPIJob":
        # The launcher's init container waits for the workers; it must end for the launcher to run.
        launcher = body["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]
        own = {WAIT_FOR_WORKERS_CONTAINER: {"run": 1}, **scenario}
        launcher["metadata"].setdefault("annotations", {})[SCENARIO] = json.dumps(own)
    return body


JOBS_TO_CREATE = {
    "runner": ({"*": {"run": None}}, {"group": "vision", "user": "alice", "gpus": 2}),
    "done": ({"*": {"run": 1}}, {"group": "vision", "user": "bob", "gpus": 1}),
    "broken": (
        {"*": {"run": 1, "exit": 3, "logs": ["loading data", "boom: bad shard"]}},
        {"group": "nlp", "user": "carol", "gpus": 1, "backoff_limit": 0},
    ),
    "mpi": (
        {"*": {"run": None, "logs": ["mpirun started", "step 1"]}},
        {"group": "nlp", "user": "dave", "gpus": 2, "workers": 2},
    ),
    "victim": ({"*": {"run": None}}, {"group": "nlp", "user": "erin", "gpus": 1}),
    "doomed": ({"*": {"run": None}}, {"group": "nlp", "user": "frank", "gpus": 1}),
    "paused": ({"*": {"run": None}}, {"group": "nlp", "user": "heidi", "gpus": 1}),
    "halted": ({"*": {"run": None}}, {"group": "nlp", "user": "ivan", "gpus": 1}),
    "framed": ({"*": {"run": None}}, {"group": "nlp", "user": "judy", "gpus": 1}),
}


async def _admit_all(client: KubeClient, policy: quota.QuotaPolicy) -> None:
    async def jobs() -> list[dict]:
        found = []
        for resource in (JOBS, MPIJOBS):
            for item in (await client.list(resource, NAMESPACE)).get("items") or []:
                item.setdefault("kind", resource.kind)
                found.append(item)
        return found

    # The pods as the admitting triggerer's watch groups them by job: a job that ended or was stopped
    # keeps its reservation while they hold GPUs.
    pods = (await client.list(PODS, NAMESPACE)).get("items") or []

    def pods_of(job: dict) -> list[dict]:
        prefix = job["metadata"]["name"] + "-"
        return [p for p in pods if p["metadata"]["name"].startswith(prefix)]

    for group in policy.group_names:
        await admission_pass(
            client, ledger_namespace=NAMESPACE, group=group, policy=policy, jobs=jobs, pods_of=pods_of
        )


async def _populate(cluster: SimCluster) -> tuple[dict[str, str], dict[str, TaskIdentity]]:
    client = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
    try:
        await client.create(
            CONFIGMAPS,
            NAMESPACE,
            {"metadata": {"name": quota.DEFAULT_POLICY_CONFIGMAP}, "data": {quota.POLICY_KEY: POLICY}},
        )
        policy = quota.parse_policy(POLICY)
        names, identities = {}, {}
        for i, (role, (scenario, args)) in enumerate(JOBS_TO_CREATE.items()):
            identity = TaskIdentity(
                "nightly_training", f"train_{role}", f"scheduled__2026-01-{i + 1:02d}", -1, 1
            )
            body = _manifest(identity, scenario, **args)
            await client.create(MPIJOBS if body["kind"] == "MPIJob" else JOBS, NAMESPACE, body)
            names[role], identities[role] = body["metadata"]["name"], identity
        await _admit_all(client, policy)
        # Queued last, so it waits behind the running job's reservation rather than taking its place.
        identity = TaskIdentity("nightly_training", "train_waiting", "scheduled__2026-01-09", -1, 1)
        body = _manifest(identity, {"*": {"run": None}}, group="vision", user="grace", gpus=4)
        await client.create(JOBS, NAMESPACE, body)
        names["waiting"], identities["waiting"] = body["metadata"]["name"], identity
        await _admit_all(client, policy)
        expected = {
            "runner": "RUNNING",
            "done": "SUCCEEDED",
            "broken": "FAILED",
            "waiting": "QUEUED",
            "mpi": "RUNNING",
            "victim": "RUNNING",
            "doomed": "RUNNING",
            "paused": "RUNNING",
            "halted": "RUNNING",
            "framed": "RUNNING",
        }
        deadline = time.monotonic() + 30
        while True:
            view = overview(await read_cluster(client, Target(namespace=NAMESPACE)))
            states = {row.name: row.state for row in view.jobs}
            if all(states.get(names[r]) == s for r, s in expected.items()):
                # Finished jobs release nothing by themselves here (no trigger runs): a pass reconciles.
                await _admit_all(client, policy)
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"jobs did not reach their states: {states}")
            await _admit_all(client, policy)
            await asyncio.sleep(0.2)
        return names, identities
    finally:
        await client.close()


@pytest.fixture(scope="package")
def population():
    # A scene the package's tests read as it was set, admitted by the passes above: no admission
    # controller beside it.
    # The first node carries the GPU model label NVIDIA's GPU Feature Discovery writes; the second none.
    products = ((("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"),),)
    with SimCluster(
        ClusterConfig(nodes=2, gpus_per_node=8, time_scale=0.02, node_labels=products)
    ) as cluster:
        names, identities = asyncio.run(_populate(cluster))
        yield Population(cluster, names, identities)


@pytest.fixture(scope="package")
def api_server(population, tmp_path_factory):
    """A real ``airflow api-server`` with the plugin, reading the populated cluster."""
    from tests.ui.server import start

    server = start(tmp_path_factory.mktemp("airflow-home"), population.kubeconfig)
    yield server
    server.stop()
