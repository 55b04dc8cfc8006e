"""``airflow-jobs-sim``: a foreground simulated cluster that stops cleanly on SIGINT/SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request

import pytest
from airflow_jobs_sim.__main__ import build_parser


def test_sim_subcommand_parses_its_options():
    args = build_parser().parse_args(
        [
            "--nodes",
            "3",
            "--gpus-per-node",
            "4",
            "--port",
            "0",
            "--kubeconfig",
            "/tmp/x",
            "--time-scale",
            "0.1",
            "--exec-commands",
        ]
    )
    assert (args.nodes, args.gpus_per_node, args.kubeconfig, args.time_scale, args.exec_commands) == (
        3,
        4,
        "/tmp/x",
        0.1,
        True,
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sim_runs_in_the_foreground_and_stops_on_signal(tmp_path, sig):
    kubeconfig = tmp_path / "sim.yaml"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "airflow_jobs_sim",
            "--nodes",
            "3",
            "--gpus-per-node",
            "4",
            "--kubeconfig",
            str(kubeconfig),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url_line = proc.stdout.readline()
        config_line = proc.stdout.readline()
        assert url_line.startswith("Simulated cluster listening on http://127.0.0.1:")
        assert config_line.strip() == f"kubeconfig: {kubeconfig}"
        url = url_line.rsplit(" ", 1)[1].strip()
        assert json.loads(kubeconfig.read_text())["clusters"][0]["cluster"]["server"] == url
        with urllib.request.urlopen(f"{url}/api/v1/nodes", timeout=10) as resp:
            nodes = json.loads(resp.read())["items"]
        assert [n["status"]["allocatable"]["nvidia.com/gpu"] for n in nodes] == ["4", "4", "4"]
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0
    assert out.strip().endswith("Simulated cluster stopped.")
