"""Fixtures for the simulated cluster: one cluster per test module, clients pointed at it."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid

import pytest
from airflow_jobs_sim import ClusterConfig, SimCluster

KUBECTL = shutil.which("kubectl") or ("/usr/bin/kubectl" if os.path.exists("/usr/bin/kubectl") else None)


@pytest.fixture(scope="module")
def sim():
    """A cluster serving the API only: no controller changes objects behind the test's back."""
    with SimCluster(
        ClusterConfig(nodes=2, gpus_per_node=8, time_scale=0.01, bookmark_interval=0.3), controllers=False
    ) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def live_sim():
    """A full cluster with its controllers (when they are installed) at 100x speed."""
    with SimCluster(
        ClusterConfig(nodes=2, gpus_per_node=8, time_scale=0.01, bookmark_interval=0.3)
    ) as cluster:
        yield cluster


@pytest.fixture
def namespace(sim):
    """A fresh namespace per test, so tests in one module never see each other's objects."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    sim.store.create("namespaces", {"metadata": {"name": name}})
    return name


@pytest.fixture(scope="module")
def sync_client(sim):
    """A sync ``kubernetes`` ApiClient loaded from the cluster's kubeconfig."""
    from kubernetes import config

    client = config.new_client_from_config(config_file=sim.kubeconfig_path)
    yield client
    client.close()


@pytest.fixture
async def async_client(sim):
    """A ``kubernetes_asyncio`` ApiClient loaded from the cluster's kubeconfig."""
    from kubernetes_asyncio import config

    client = await config.new_client_from_config(config_file=sim.kubeconfig_path)
    yield client
    await client.close()


@pytest.fixture
def kubectl(sim, tmp_path):
    """Run kubectl against the cluster; skipped where the binary is absent."""
    if KUBECTL is None:
        pytest.skip("kubectl is not installed (looked on PATH and at /usr/bin/kubectl)")
    env = dict(os.environ, KUBECACHEDIR=str(tmp_path / "kube-cache"), HOME=str(tmp_path))

    def run(*args: str, timeout: float = 20, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [KUBECTL, "--kubeconfig", sim.kubeconfig_path, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr}")
        return result

    run.binary = KUBECTL  # type: ignore[attr-defined]
    run.env = env  # type: ignore[attr-defined]
    return run


def pod_manifest(name: str, labels: dict | None = None, containers: list | None = None, **spec) -> dict:
    """A minimal valid pod."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": containers or [{"name": "main", "image": "busybox:1.36"}], **spec},
    }


def job_manifest(name: str, labels: dict | None = None, **spec) -> dict:
    """A minimal valid batch/v1 Job."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox:1.36"}]}
            },
            **spec,
        },
    }


def mpijob_manifest(name: str, workers: int = 2) -> dict:
    """A minimal valid kubeflow.org/v2beta1 MPIJob."""
    template = {"spec": {"containers": [{"name": "main", "image": "mpi:1.0"}]}}
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name},
        "spec": {
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": template},
                "Worker": {"replicas": workers, "template": template},
            }
        },
    }


@pytest.fixture(scope="session")
def manifests():
    """Builders of minimal valid manifests: ``manifests.pod(name)``, ``.job(name)``, ``.mpijob(name)``."""
    from types import SimpleNamespace

    return SimpleNamespace(pod=pod_manifest, job=job_manifest, mpijob=mpijob_manifest)
