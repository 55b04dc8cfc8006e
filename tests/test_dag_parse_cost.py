"""A DAG file that uses the operators parses without loading the cluster client.

The dag processor imports every DAG file again and again, under a timeout; the Kubernetes client is only
needed where a task runs (worker) or waits (triggerer)."""

from __future__ import annotations

import subprocess
import sys

import pytest

# Slow (starts interpreters that import Airflow and the product): not in the fast lane.
pytestmark = pytest.mark.slow


def test_importing_the_operator_and_sensor_does_not_load_the_kubernetes_client():
    code = (
        "import sys, airflow_jobs_plugin.airflow.operators, airflow_jobs_plugin.airflow.sensors; "
        "print(sorted(m for m in sys.modules if m.startswith(('kubernetes_asyncio', 'aiohttp', "
        "'airflow_jobs_plugin.cluster.kube', 'airflow_jobs_plugin.airflow.triggers'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"
