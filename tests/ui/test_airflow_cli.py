"""``airflow gpu-jobs ...``: the same commands as ``airflow-jobs``, inside Airflow's own CLI through the
provider's ``cli`` hook."""

from __future__ import annotations

import json

import pytest

from airflow_jobs_plugin.airflow import cli
from airflow_jobs_plugin.airflow.airflow_cli import COMMANDS, GROUP


@pytest.fixture(scope="module")
def airflow_parser():
    from airflow.cli import cli_parser

    return cli_parser.get_parser()


def test_the_provider_declares_its_commands_to_airflow():
    from airflow.providers_manager import ProvidersManager

    from airflow_jobs_plugin import get_provider_info
    from airflow_jobs_plugin.airflow import airflow_cli

    assert get_provider_info()["cli"] == ["airflow_jobs_plugin.airflow.airflow_cli.get_cli_commands"]
    assert airflow_cli.get_cli_commands in ProvidersManager().cli_command_functions


@pytest.mark.parametrize(
    "argv",
    [
        ["status", "--json", "--group", "vision", "--state", "RUNNING,QUEUED", "-n", "a", "-n", "b"],
        ["status", "--limit", "5", "--offset", "10", "--kubeconfig", "/k"],
        ["describe", "nightly-train-a1", "--tail", "0", "--json"],
        ["logs", "nightly-train-a1", "--failed", "--tail", "20"],
        ["logs", "nightly-train-a1", "--rank", "-1"],
        ["cancel", "nightly-train-a1", "--by", "ops", "--json"],
        ["stop", "nightly-train-a1", "--by", "ops"],
        ["resume", "nightly-train-a1"],
    ],
)
def test_airflow_parses_each_command_as_airflow_jobs_does(airflow_parser, argv):
    ours = vars(cli.build_parser().parse_args(argv))
    theirs = vars(airflow_parser.parse_args([GROUP, *argv]))
    assert {k: v for k, v in ours.items() if k not in ("command", "handler")} == {
        k: theirs[k] for k in ours if k not in ("command", "handler")
    }


def test_every_cluster_command_is_offered(airflow_parser, capsys):
    with pytest.raises(SystemExit):
        airflow_parser.parse_args([GROUP, "--help"])
    out = capsys.readouterr().out
    assert all(command in out for command in COMMANDS)


def test_airflow_gpu_jobs_status_reads_the_cluster(airflow_parser, population, capsys):
    args = airflow_parser.parse_args([GROUP, "status", "--json", "--kubeconfig", population.kubeconfig])
    args.func(args)
    names = {j["name"] for j in json.loads(capsys.readouterr().out)["jobs"]}
    assert population.names["runner"] in names


def test_a_failing_command_exits_with_its_code(airflow_parser, capsys):
    args = airflow_parser.parse_args([GROUP, "describe", "no-such-job", "--kubeconfig", "/nonexistent"])
    with pytest.raises(SystemExit) as exited:
        args.func(args)
    assert exited.value.code == 1
    assert "cannot reach a Kubernetes cluster" in capsys.readouterr().err
