"""AIRFLOW_JOBS_TEST_KUBECONFIG: on a real cluster the simulator-only tests skip, saying why."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_simulator_only_tests_skip_with_their_reason_when_a_real_cluster_is_named():
    env = {**os.environ, "AIRFLOW_JOBS_TEST_KUBECONFIG": "/nonexistent/kubeconfig"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/e2e",
            "tests/trigger/test_sensor.py",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout[-2000:]
    assert "passed" not in result.stdout.splitlines()[-1], "a simulator-only test ran on the real cluster"
    assert "AIRFLOW_JOBS_TEST_KUBECONFIG is set: runs on the simulator only" in result.stdout
