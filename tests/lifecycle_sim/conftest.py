"""Fixtures: one simulated cluster per module, a fresh namespace (and bench) per test."""

from __future__ import annotations

import uuid

import pytest
from airflow_jobs_sim import ClusterConfig, SimCluster
from controller_fixture import ControllerThread

from .bench import Bench


@pytest.fixture(scope="module")
def cluster():
    """A full cluster at 100x speed. Exec mode runs a container's ``command`` as a local process,
    which is how a pod is kept in its termination grace period; containers without a command
    follow their scenario as usual."""
    with (
        SimCluster(
            ClusterConfig(
                nodes=2, gpus_per_node=8, time_scale=0.01, bookmark_interval=0.3, exec_commands=True
            )
        ) as running,
        ControllerThread(running.kubeconfig_path),
    ):
        yield running


@pytest.fixture
def bench(cluster, tmp_path):
    """A bench on a namespace of its own, so no test sees another test's pods."""
    name = f"lc-{uuid.uuid4().hex[:8]}"
    cluster.store.create("namespaces", {"metadata": {"name": name}})
    made = Bench(cluster, name, str(tmp_path))
    yield made
    made.clean_up()
