"""``[airflow_jobs]`` options read without importing Airflow (the CLI) give what Airflow's configuration
gives: the environment variable first, then the config file (``AIRFLOW_CONFIG`` or
``$AIRFLOW_HOME/airflow.cfg``), then the declared default."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# Slow (each test starts an interpreter that imports Airflow): not in the fast lane.
pytestmark = pytest.mark.slow

READ = textwrap.dedent(
    """
    import json, sys
    from airflow_jobs_plugin import config
    names = ["namespace", "namespaces", "quota_configmap", "quota_namespace", "kubernetes_conn_id"]
    if sys.argv[1] == "airflow":
        import airflow.configuration  # the reader then defers to Airflow's loaded configuration
    values = {n: config.get(n) for n in names}
    print(json.dumps({"values": values, "airflow_imported": "airflow.configuration" in sys.modules}))
    """
)


def _users_environment() -> dict[str, str]:
    """The environment as a user's shell has it: no option of this section, and not Airflow's unit-test
    mode (which the suite's conftest sets, and in which Airflow reads unit_tests.cfg, not airflow.cfg)."""
    skip = ("AIRFLOW__AIRFLOW_JOBS__", "AIRFLOW_CONFIG", "AIRFLOW__CORE__UNIT_TEST_MODE")
    return {k: v for k, v in os.environ.items() if not k.startswith(skip)}


def _read(env: dict[str, str], how: str) -> dict:
    clean = _users_environment()
    done = subprocess.run(
        [sys.executable, "-c", READ, how],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parent.parent,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_cli_reads_the_options_as_airflow_does_without_importing_it(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "airflow.cfg").write_text(
        "[core]\nload_examples = False\n"
        "[airflow_jobs]\nnamespace = from-file\nquota_namespace = ${QUOTA_SPACE}\nnamespaces = a, b\n"
    )
    env = {
        "AIRFLOW_HOME": str(home),
        "QUOTA_SPACE": "quota-from-env-expansion",
        "AIRFLOW__AIRFLOW_JOBS__NAMESPACE": "from-env",  # beats the file
        "AIRFLOW__AIRFLOW_JOBS__KUBERNETES_CONN_ID": "gpu_cluster",
    }
    light = _read(env, "light")
    assert not light["airflow_imported"]
    assert light["values"] == {
        "namespace": "from-env",
        "namespaces": "a, b",
        "quota_configmap": "airflow-jobs-quota-policy",  # the declared default
        "quota_namespace": "quota-from-env-expansion",
        "kubernetes_conn_id": "gpu_cluster",
    }
    assert _read(env, "airflow")["values"] == light["values"]


def test_airflow_config_names_the_file_to_read(tmp_path):
    elsewhere = tmp_path / "elsewhere.cfg"
    elsewhere.write_text("[airflow_jobs]\nnamespace = from-airflow-config\n")
    env = {"AIRFLOW_HOME": str(tmp_path / "empty-home"), "AIRFLOW_CONFIG": str(elsewhere)}
    assert _read(env, "light")["values"]["namespace"] == "from-airflow-config"


def test_without_a_config_file_the_defaults_apply(tmp_path):
    light = _read({"AIRFLOW_HOME": str(tmp_path / "nothing-here")}, "light")
    assert light["values"]["namespace"] == "default" and not light["airflow_imported"]


def test_a_config_file_it_cannot_parse_is_left_to_airflow_to_report(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "airflow.cfg").write_text("this is not an ini file\n")
    done = subprocess.run(
        [sys.executable, "-c", READ, "light"],
        env={**_users_environment(), "AIRFLOW_HOME": str(home)},
        capture_output=True,
        text=True,
        cwd=Path(__file__).parent.parent,
    )
    assert done.returncode != 0 and "airflow.cfg" in done.stderr


def test_in_airflow_unit_test_mode_airflow_answers(tmp_path):
    assert _read({"AIRFLOW__CORE__UNIT_TEST_MODE": "True"}, "light")["airflow_imported"]
