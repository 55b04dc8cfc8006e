"""``airflow-jobs`` in a fresh shell: nothing configured, or a cluster that is not there.

Each command runs as a user would run it, in a subprocess whose ``HOME`` and ``AIRFLOW_HOME`` are an
empty temporary folder and whose environment has nothing of Airflow's or Kubernetes'. It fails with one
line that says what is missing and how to point it at a cluster, leaves no Airflow home behind, and
waits for no cluster longer than the CLI's reach timeout.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_jobs_plugin.airflow import cli

SCRIPT = str(Path(sys.executable).with_name("airflow-jobs"))


@pytest.fixture
def shell(tmp_path: Path) -> dict[str, str]:
    """A fresh shell's environment: an empty home, no Airflow or Kubernetes variables."""
    home = tmp_path / "home"
    home.mkdir()
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TMPDIR")}
    return {**keep, "HOME": str(home), "AIRFLOW_HOME": str(home / "airflow")}


def airflow_jobs(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    # The bound only catches a hang; the test asserts on what the command says.
    return subprocess.run(
        [SCRIPT, *argv], env=env, capture_output=True, text=True, timeout=120, cwd=env["HOME"], check=False
    )


def kubeconfig(path: Path, server: str) -> str:
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f'clusters: [{{name: c, cluster: {{server: "{server}", insecure-skip-tls-verify: true}}}}]\n'
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
    )
    return str(path)


def test_with_nothing_configured_a_command_says_how_to_point_it_at_a_cluster(shell):
    done = airflow_jobs(shell, "status")
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr  # no warning about a kubeconfig, no traceback
    assert lines[0].startswith("error: no Kubernetes cluster is configured here: no Airflow connection")
    assert "--kubeconfig PATH" in lines[0] and "AIRFLOW_JOBS_KUBECONFIG" in lines[0]
    # Airflow was not loaded to learn that: no Airflow home was created, here or in ~/airflow.
    assert not Path(shell["AIRFLOW_HOME"]).exists()
    assert sorted(os.listdir(shell["HOME"])) == []


def test_a_cluster_that_refuses_the_connection_fails_the_command_in_one_line(shell, tmp_path):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = kubeconfig(tmp_path / "kubeconfig", f"https://127.0.0.1:{port}")
    done = airflow_jobs(shell, "status", "--kubeconfig", config)
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()  # the reads still running when the first failed end quietly
    assert line.startswith(f"error: the Kubernetes API server https://127.0.0.1:{port} (kubeconfig {config})")
    assert "cannot be reached" in line and "is the cluster running?" in line
    assert not Path(shell["AIRFLOW_HOME"]).exists()


def test_a_cluster_that_never_answers_fails_the_command_after_the_reach_timeout(shell, tmp_path):
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        server = f"https://127.0.0.1:{silent.getsockname()[1]}"
        env = {**shell, "AIRFLOW_JOBS_KUBECONFIG": kubeconfig(tmp_path / "kubeconfig", server)}
        done = airflow_jobs(env, "describe", "some-job")
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"error: the Kubernetes API server {server} (kubeconfig ")
    assert f"did not answer within {cli.REACH_SECONDS:g}s" in line


def test_the_default_kubeconfig_is_used_when_no_airflow_knows_the_connection(shell, tmp_path):
    kube = Path(shell["HOME"]) / ".kube"
    kube.mkdir()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = kubeconfig(kube / "config", f"https://127.0.0.1:{port}")
    done = airflow_jobs(shell, "status")
    (line,) = done.stderr.splitlines()
    assert f"(kubeconfig {config})" in line
    assert not Path(shell["AIRFLOW_HOME"]).exists()


DEMO = Path(__file__).resolve().parents[2] / "scripts" / "demo"


def test_the_demo_banners_commands_work_in_a_fresh_shell(shell, population):
    """What the demo's banner tells a user to type in another shell reads the demo's cluster."""
    banner = DEMO.read_text().split("cat <<MSG", 1)[1].split("\nMSG", 1)[0]
    assert 'export PATH="$venv/bin:\\$PATH" AIRFLOW_JOBS_KUBECONFIG=$kubeconfig' in banner
    commands = [
        line.strip().split("  ")[0] for line in banner.splitlines() if line.startswith("   airflow-jobs ")
    ]
    assert commands[:2] == ["airflow-jobs status", "airflow-jobs describe JOB"]
    env = {**shell, "AIRFLOW_JOBS_KUBECONFIG": population.kubeconfig}
    status = airflow_jobs(env, "status")
    assert status.returncode == 0, status.stderr
    assert population.names["runner"] in status.stdout and "QUEUES" in status.stdout
    described = airflow_jobs(env, "describe", population.names["runner"])
    assert described.returncode == 0, described.stderr
    assert "Timeline:" in described.stdout and "STARTED" in described.stdout
    assert not Path(shell["AIRFLOW_HOME"]).exists()
