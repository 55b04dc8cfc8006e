"""Fixtures shared by the test packages that run the product against a simulated cluster.

A package's ``conftest.py`` builds its own from these, e.g. ``cluster = cluster_fixture(nodes=4)``, so
each package chooses its cluster's size while the product still reads the ``kubernetes_default``
connection exactly as in production (the cncf provider's hook); only the kubeconfig it names differs.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import pytest
from airflow_jobs_sim import ClusterConfig, SimCluster
from controller_fixture import CONTROLLER, CONTROLLER_TOKEN, ControllerThread

from airflow_jobs_plugin.cluster.objects import rfc3339
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.queueing.pools import POLICY_LABEL, POLICY_LABEL_VALUE
from tests.patience import stretch

CONNECTION_ENV = "AIRFLOW_CONN_KUBERNETES_DEFAULT"
# A kubeconfig of a real cluster: the tests marked ``real_cluster`` run there instead of on the simulator
# (docs/deploying.md, "Acceptance on a real cluster"); the others skip, saying why (tests/conftest.py).
REAL_CLUSTER_ENV = "AIRFLOW_JOBS_TEST_KUBECONFIG"


@dataclass(frozen=True)
class RealCluster:
    """A real cluster as a test sees it: only its kubeconfig (no fault injection, no counters)."""

    kubeconfig_path: str
    simulated: bool = False


def real_cluster_kubeconfig() -> str | None:
    return os.environ.get(REAL_CLUSTER_ENV) or None


def cluster_fixture(
    nodes: int, gpus_per_node: int = 8, time_scale: float = 0.01, *, controller: bool = True, **config
):
    """A module-scoped simulated cluster of ``nodes`` GPU nodes (``config``: more ClusterConfig fields),
    with its admission controller running beside it (``controller=False``: none, for tests that drive
    the quota pool's engine themselves). On a real cluster the tier's own controller process admits."""

    @pytest.fixture(scope="module")
    def cluster():
        real = real_cluster_kubeconfig()
        if real is not None:
            yield RealCluster(real)
            return
        identities = (
            (*config.pop("identities", ()), CONTROLLER) if controller else config.pop("identities", ())
        )
        with SimCluster(
            ClusterConfig(
                nodes=nodes,
                gpus_per_node=gpus_per_node,
                time_scale=time_scale,
                identities=identities,
                **config,
            )
        ) as sim:
            if not controller:
                yield sim
                return
            with ControllerThread(sim.kubeconfig_path, token=CONTROLLER_TOKEN):
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


def policies_removed_fixture():
    """An autouse fixture: the quota policies a test installed on the module's simulated cluster go with
    it. A group belongs to one pool of its namespace (queueing/pools.py), so the next test's pool of the
    same group is then the only one."""

    @pytest.fixture(autouse=True)
    def policies_removed(cluster):
        yield
        store = getattr(cluster, "store", None)
        if store is None:
            return
        for item in store.list("configmaps", label_selector=f"{POLICY_LABEL}={POLICY_LABEL_VALUE}"):
            store.delete("configmaps", item["metadata"]["name"], item["metadata"]["namespace"])

    return policies_removed


def held_back(manifest: dict, seconds: float = 3.0) -> dict:
    """``manifest`` held in its queue for ``seconds`` (stretched with the machine's load) by a retry
    back-off: the admission controller lets a job without a pool go at once, so a test that must see its
    trigger log it QUEUED first holds it until the trigger surely follows it."""
    until = datetime.now(timezone.utc) + timedelta(seconds=seconds * stretch())
    manifest["metadata"].setdefault("annotations", {})[labels.REQUEUE_NOT_BEFORE] = rfc3339(until)
    return manifest
