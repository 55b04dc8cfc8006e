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
import pytest

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


@pytest.mark.slow
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


# --- what get_provider_info() publishes, read back through Airflow itself ---


def _airflow(*args: str, **env: str) -> str:
    """Run the real ``airflow`` CLI of this virtualenv; its output without Airflow's log lines."""
    result = subprocess.run(
        [sys.executable, "-m", "airflow", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=240,
        check=True,
    )
    return result.stdout


def test_provider_info_declares_operators_sensors_triggers_and_the_extra_link():
    info = get_provider_info()
    integration = info["integrations"][0]["integration-name"]
    modules = {key: info[key][0]["python-modules"] for key in ("operators", "sensors", "triggers")}
    assert modules == {
        "operators": ["airflow_jobs_plugin.airflow.operators"],
        "sensors": ["airflow_jobs_plugin.airflow.sensors"],
        "triggers": ["airflow_jobs_plugin.airflow.triggers"],
    }
    assert {info[key][0]["integration-name"] for key in modules} == {integration}
    from airflow_jobs_plugin.airflow.operators import JobLink, JobOperator
    from airflow_jobs_plugin.airflow.sensors import JobSensor
    from airflow_jobs_plugin.airflow.triggers import JobTrigger

    assert (JobOperator.__module__, JobSensor.__module__, JobTrigger.__module__) == (
        "airflow_jobs_plugin.airflow.operators",
        "airflow_jobs_plugin.airflow.sensors",
        "airflow_jobs_plugin.airflow.triggers",
    )
    assert info["extra-links"] == [f"{JobLink.__module__}.{JobLink.__qualname__}"]


def test_the_provider_reuses_the_cncf_kubernetes_connection_instead_of_declaring_one():
    from airflow.providers_manager import ProvidersManager

    # Declaring "kubernetes" a second time would race the cncf provider for the connection form.
    assert "connection-types" not in get_provider_info()
    hooks = ProvidersManager().hooks
    assert hooks["kubernetes"].package_name == "apache-airflow-providers-cncf-kubernetes"
    assert "apache-airflow-providers-cncf-kubernetes" in {r.split(">")[0].split("<")[0] for r in _requires()}


def _requires() -> list[str]:
    from importlib.metadata import requires

    return requires(DIST) or []


@pytest.mark.slow
def test_airflow_providers_triggers_lists_the_job_trigger():
    out = _airflow("providers", "triggers", "--output", "json")
    rows = json.loads(next(line for line in out.splitlines() if line.startswith("[")))
    ours = [r for r in rows if r["package_name"] == DIST]
    assert ours == [
        {
            "package_name": DIST,
            "class": "airflow_jobs_plugin.airflow.triggers",
            "integration_name": "GPU Jobs",
        }
    ]


# Airflow's own `airflow config get-value` command, run for every option in one interpreter: the parser
# and the command are Airflow's (airflow/cli/cli_parser.py, airflow/cli/commands/config_command.py), but
# the interpreter starts once instead of once per option (each start imports Airflow, 5-10 s).
GET_EVERY_VALUE = """
import contextlib, io, json, sys
from airflow.cli.cli_parser import get_parser
answers = {}
for name in sys.argv[2:]:
    out = io.StringIO()
    args = get_parser().parse_args(["config", "get-value", sys.argv[1], name])
    with contextlib.redirect_stdout(out):
        args.func(args)
    answers[name] = out.getvalue()
print("ANSWERS " + json.dumps(answers))
"""


@pytest.mark.slow
def test_airflow_config_get_value_answers_every_option_with_its_default_or_its_setting():
    from airflow_jobs_plugin import config

    # Unset: the declared default, from get_provider_info()'s config (no airflow.cfg entry needed).
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__AIRFLOW_JOBS__")}
    done = subprocess.run(
        [sys.executable, "-c", GET_EVERY_VALUE, config.SECTION, *(o.name for o in config.OPTIONS)],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=True,
    ).stdout
    answers = json.loads(next(line for line in done.splitlines() if line.startswith("ANSWERS "))[8:])
    for option in config.OPTIONS:
        default = answers[option.name]
        assert default.splitlines()[-1:] == [option.default] or (
            option.default == "" and not default.strip()
        ), option.name
    # Set through the environment, as the Helm values do: Airflow's own precedence applies.
    setting = _airflow(
        "config", "get-value", config.SECTION, "namespace", AIRFLOW__AIRFLOW_JOBS__NAMESPACE="gpu-jobs"
    )
    assert setting.strip().splitlines()[-1] == "gpu-jobs"


def test_config_get_reads_the_airflow_configuration(monkeypatch):
    from airflow_jobs_plugin import config

    monkeypatch.setenv("AIRFLOW__AIRFLOW_JOBS__NAMESPACES", "team-a, ,team-b,team-a")
    assert config.namespaces("jobs", config.get("namespaces")) == ("jobs", "team-a", "team-b")
    monkeypatch.delenv("AIRFLOW__AIRFLOW_JOBS__NAMESPACES")
    assert config.namespaces("jobs", config.get("namespaces")) == ("jobs",)


def test_the_ui_settings_read_every_option_through_config_get(monkeypatch):
    from airflow_jobs_plugin.plugin.app import Settings

    for name, value in {
        "KUBERNETES_CONN_ID": "gpu_cluster",
        "NAMESPACE": "ml",
        "NAMESPACES": "ml-2",
        "QUOTA_CONFIGMAP": "pool",
        "QUOTA_NAMESPACE": "gpu-quota",
    }.items():
        monkeypatch.setenv(f"AIRFLOW__AIRFLOW_JOBS__{name}", value)
    assert Settings.from_airflow_config() == Settings(
        kubernetes_conn_id="gpu_cluster",
        namespace="ml",
        quota_configmap="pool",
        quota_namespace="gpu-quota",
        namespaces=("ml", "ml-2"),
    )


def test_the_license_file_is_apache_2_and_the_wheel_declares_it():
    import tomllib

    root = Path(__file__).resolve().parents[1]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    text = (root / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_every_option_is_documented_in_the_deployment_guide():
    from airflow_jobs_plugin import config

    text = (Path(__file__).resolve().parents[1] / "docs" / "deploying.md").read_text()
    for option in config.OPTIONS:
        assert f"| `{option.name}` |" in text, option.name


def test_the_cli_defaults_come_from_the_airflow_configuration(monkeypatch):
    import argparse

    from airflow_jobs_plugin.airflow import cli

    monkeypatch.setenv("AIRFLOW__AIRFLOW_JOBS__NAMESPACE", "ml")
    monkeypatch.setenv("AIRFLOW__AIRFLOW_JOBS__QUOTA_CONFIGMAP", "")
    monkeypatch.setenv("AIRFLOW__AIRFLOW_JOBS__KUBERNETES_CONN_ID", "gpu_cluster")
    unset = argparse.Namespace(
        namespace=None, quota_configmap=None, quota_namespace=None, conn_id=None, kubeconfig=None
    )
    cli._defaults_from_airflow_config(unset)
    assert (unset.namespace, unset.quota_configmap, unset.quota_namespace, unset.conn_id) == (
        "ml",
        "",  # no quota pool
        None,
        "gpu_cluster",
    )
    # What the command line says wins.
    given = argparse.Namespace(
        namespace="other", quota_configmap="pool", quota_namespace="q", conn_id=None, kubeconfig="/k"
    )
    cli._defaults_from_airflow_config(given)
    assert (given.namespace, given.quota_configmap, given.quota_namespace, given.conn_id) == (
        "other",
        "pool",
        "q",
        None,
    )
