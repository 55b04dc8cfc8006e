"""Fixtures shared by the test packages that run the product against a simulated cluster.

A package's ``conftest.py`` builds its own from these, e.g. ``cluster = cluster_fixture(nodes=4)``, so
each package chooses its cluster's size while the product still reads the ``kubernetes_default``
connection exactly as in production (the cncf provider's hook); only the kubeconfig it names differs.
"""

from __future__ import annotations

import json

import pytest

from airflow_jobs_plugin.sim import ClusterConfig, SimCluster

CONNECTION_ENV = "AIRFLOW_CONN_KUBERNETES_DEFAULT"


def cluster_fixture(nodes: int, gpus_per_node: int = 8, time_scale: float = 0.01):
    """A module-scoped simulated cluster of ``nodes`` GPU nodes."""

    @pytest.fixture(scope="module")
    def cluster():
        with SimCluster(
            ClusterConfig(nodes=nodes, gpus_per_node=gpus_per_node, time_scale=time_scale)
        ) as sim:
            yield sim

    return cluster


def connection_env(cluster) -> str:
    """The ``kubernetes_default`` connection, as Airflow reads it from the environment, for ``cluster``."""
    return json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": cluster.kubeconfig_path}})


def connection_fixture(autouse: bool = True):
    """Point ``kubernetes_default`` at the module's ``cluster`` for each test."""

    @pytest.fixture(autouse=autouse)
    def connection(cluster, monkeypatch):
        monkeypatch.setenv(CONNECTION_ENV, connection_env(cluster))

    return connection
