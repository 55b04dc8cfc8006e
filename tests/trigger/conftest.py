"""A live simulated cluster and the ``kubernetes_default`` connection pointing at it.

The trigger reads the connection exactly as in production (the cncf provider's hook); the only
difference from a real cluster is the kubeconfig the connection names.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from sim_fixtures import cluster_fixture, connection_fixture, policies_removed_fixture

from airflow_jobs_plugin.cluster import watch as shared
from airflow_jobs_plugin.cluster.kube import KubeClient
from airflow_jobs_plugin.jobs.manifests import build_manifest
from airflow_jobs_plugin.jobs.spec import TaskIdentity, validate
from airflow_jobs_plugin.queueing.engines import observer
from airflow_jobs_plugin.queueing.engines import pool as admission
from airflow_jobs_plugin.queueing.pools import POLICY_LABEL, POLICY_LABEL_VALUE

POLICY_SELECTOR = f"{POLICY_LABEL}={POLICY_LABEL_VALUE}"

cluster = cluster_fixture(nodes=2)
connection = connection_fixture()


@pytest.fixture
async def client(cluster):
    c = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
    yield c
    await c.close()
    await admission.shutdown()  # the quota pools' passes a trigger started, before their watches go
    await observer.close_all()
    await shared.shutdown()


# The one serial of every run id these tests make (``run-<n>``): on the real plane they share one cluster
# and its `default` namespace, and modules that counted apart gave two tests' jobs one name (the first
# MPIJob of one module and of another, 409 AlreadyExists, when `-k` picked both).
RUNS = iter(range(1, 100_000))


def task_identity(task_id: str = "train", try_number: int = 1) -> TaskIdentity:
    """A fresh task instance per call, so tests sharing a cluster never collide."""
    return TaskIdentity("nightly", task_id, f"run-{next(RUNS)}", -1, try_number)


def job_manifest(identity: TaskIdentity, *, scenario: dict | None = None, **args) -> dict:
    values = {"image": "registry.example/trainer:1", "group": "vision", "user": "alice", "gpus": 1}
    values.update(args)
    if scenario is not None:
        values["annotations"] = {"sim.airflow-jobs.io/scenario": json.dumps(scenario)}
    spec = validate(**values)
    return build_manifest(
        spec, name=identity.job_name(1), task=identity, attempt=1, queued_at=datetime.now(timezone.utc)
    )


def set_scenario(manifest: dict, role: str, scenario: dict) -> dict:
    """Give one role's pod template (``launcher``/``worker`` of an MPIJob, ``worker`` of a Job) its own
    simulated behaviour."""
    if manifest["kind"] == "MPIJob":
        key = {"launcher": "Launcher", "worker": "Worker"}[role]
        template = manifest["spec"]["mpiReplicaSpecs"][key]["template"]
    else:
        template = manifest["spec"]["template"]
    template["metadata"].setdefault("annotations", {})["sim.airflow-jobs.io/scenario"] = json.dumps(scenario)
    return manifest


@pytest.fixture(autouse=True)
def cached_objects_are_never_changed(monkeypatch):
    """Every object a shared watch caches shares its equal parts with the others (watch_transform.
    Sharing): a change to one through any reader would change them all. Each test here checks that no
    cached object changed from when it was cached to the test's end."""
    cached: list[tuple[dict, str]] = []
    trim = shared.trim

    def recording_trim(*args, **kwargs):
        out = trim(*args, **kwargs)
        cached.append((out, json.dumps(out)))
        return out

    monkeypatch.setattr(shared, "trim", recording_trim)
    yield
    changed = [
        f"{obj.get('kind')} {obj['metadata'].get('name')}: {was} -> {json.dumps(obj)}"
        for obj, was in cached
        if json.dumps(obj) != was
    ]
    assert not changed, "cached objects changed after they were cached:\n" + "\n".join(changed[:5])


policies_go_with_their_test = policies_removed_fixture()
