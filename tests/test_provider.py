"""The package is an Airflow provider: Airflow discovers it and its metadata is valid."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import entry_points, version
from pathlib import Path

import airflow
import jsonschema

import airflow_jobs_plugin
from airflow_jobs_plugin import get_provider_info

DIST = "airflow-jobs-plugin"


def test_provider_info_validates_against_airflows_schema():
    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(get_provider_info(), schema)


def test_provider_info_names_the_distribution_and_its_version():
    info = get_provider_info()
    assert info["package-name"] == DIST
    assert info["versions"][0] == version(DIST) == airflow_jobs_plugin.__version__


def test_entry_point_points_at_get_provider_info():
    (ep,) = [e for e in entry_points(group="apache_airflow_provider") if e.dist.name == DIST]
    assert ep.load() is get_provider_info


def test_providers_manager_lists_the_provider_with_its_version():
    from airflow.providers_manager import ProvidersManager

    providers = ProvidersManager().providers
    assert DIST in providers
    assert providers[DIST].version == airflow_jobs_plugin.__version__


def test_airflow_providers_list_cli_shows_the_provider():
    out = subprocess.run(
        [sys.executable, "-m", "airflow", "providers", "list", "--output", "json"],
        capture_output=True,
        text=True,
        env=os.environ,
        timeout=240,
        check=True,
    ).stdout
    # Airflow may print log lines before the JSON document; the array is the line that starts with "[{".
    rows = json.loads(next(line for line in out.splitlines() if line.startswith("[{")))
    assert {"package_name": DIST, "version": airflow_jobs_plugin.__version__}.items() <= next(
        r for r in rows if r["package_name"] == DIST
    ).items()


def test_console_script_reports_its_version():
    exe = Path(sys.executable).with_name("airflow-jobs")
    out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"airflow-jobs {airflow_jobs_plugin.__version__}"
