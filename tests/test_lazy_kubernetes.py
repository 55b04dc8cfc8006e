"""The command line starts without kubernetes_asyncio's generated classes, and the library stays whole
for any code that asks for more than the product uses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sim_fixtures import cluster_fixture

ROOT = Path(__file__).parent.parent

cluster = cluster_fixture(nodes=1)

PROBE = textwrap.dedent(
    """
    import json, sys
    from airflow_jobs_plugin.cluster.lazy_kubernetes import defer_generated_classes
    deferred = defer_generated_classes()
    from airflow_jobs_plugin.cluster import (  # what the product imports: ApiClient, Configuration, the loader
        kube,
    )
    after_product = sorted(m for m in sys.modules if m.startswith("kubernetes_asyncio.client.models."))
    import kubernetes_asyncio
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client import CoreV1Api, V1Pod  # names the product never asks for
    decoded = V1Pod(metadata=client.V1ObjectMeta(name="p")).metadata.name
    print(json.dumps({
        "deferred": deferred,
        "models_after_product": len(after_product),
        "version": kubernetes_asyncio.__version__,
        "core": CoreV1Api.__name__,
        "pod": decoded,
        "model_class": client.models.V1Pod is V1Pod,
        "again": defer_generated_classes(),
    }))
    """
)


def _users_environment() -> dict[str, str]:
    """Not Airflow's unit-test mode (set by the suite's conftest), in which the options come from Airflow."""
    return {k: v for k, v in os.environ.items() if k != "AIRFLOW__CORE__UNIT_TEST_MODE"}


@pytest.mark.slow
def test_the_product_imports_none_of_the_generated_models_and_the_rest_loads_on_demand():
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env=_users_environment(),
    )
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["deferred"] is True
    assert seen["models_after_product"] == 0
    assert seen["version"] and seen["core"] == "CoreV1Api" and seen["model_class"]
    assert seen["pod"] == "p"
    assert seen["again"] is False  # already imported: nothing to defer


RUN_AS_PROGRAM = textwrap.dedent(
    """
    import json, sys
    from airflow_jobs_plugin.airflow import cli
    sys.argv = ["airflow-jobs", *sys.argv[1:]]
    code = cli.main()  # no argv: as the console script calls it
    print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
    """
)


@pytest.mark.slow
def test_the_command_run_as_a_program_reads_the_cluster_without_the_generated_models(cluster):
    done = subprocess.run(
        [sys.executable, "-c", RUN_AS_PROGRAM, "status", "--kubeconfig", cluster.kubeconfig_path, "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_users_environment(),
    )
    ran = json.loads(done.stderr.strip().splitlines()[-1])
    assert ran["code"] == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["jobs_total"] == 0
    assert "kubernetes_asyncio.client.api_client" in ran["modules"]
    assert not [m for m in ran["modules"] if m.startswith("kubernetes_asyncio.client.models.")]
    assert "airflow.configuration" not in ran["modules"]
