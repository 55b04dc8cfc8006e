"""The simulator runs commands only for its own clients: a cluster started with ``--exec-commands``
requires a token (a random one, in the kubeconfig it writes, when none is given), and an object sent as
anything but JSON, YAML or protobuf is refused with 415, as kube-apiserver refuses it: a ``text/plain``
POST is what any web page may send without a CORS preflight."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from airflow_jobs_sim import ClusterConfig, SimCluster

JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "from-a-web-page"},
    "spec": {
        "suspend": True,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "x", "command": ["true"]}],
            }
        },
    },
}


def post(url: str, body: bytes, content_type: str, token: str | None = None) -> int:
    headers = {"Content-Type": content_type, **({"Authorization": f"Bearer {token}"} if token else {})}
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.fixture(scope="module")
def sim():
    with SimCluster(ClusterConfig(nodes=1, time_scale=0.01)) as cluster:
        yield cluster


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"]
)
def test_an_object_sent_as_a_simple_cors_request_is_refused_415(sim, content_type):
    url = f"{sim.url}/apis/batch/v1/namespaces/default/jobs"
    assert post(url, json.dumps(JOB).encode(), content_type) == 415
    assert post(f"{sim.url}/_sim/faults", b"{}", content_type) == 415


def test_an_object_sent_as_json_or_yaml_is_created(sim):
    url = f"{sim.url}/apis/batch/v1/namespaces/default/jobs"
    assert post(url, json.dumps(JOB).encode(), "application/json") == 201
    yaml_job = json.dumps({**JOB, "metadata": {"name": "as-yaml"}}).encode()  # JSON is YAML
    assert post(url, yaml_job, "application/yaml") == 201


def test_a_cluster_that_runs_commands_requires_a_token_even_when_none_is_given(tmp_path):
    kubeconfig = tmp_path / "sim.yaml"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "airflow_jobs_sim",
            "--nodes",
            "1",
            "--exec-commands",
            "--kubeconfig",
            str(kubeconfig),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = proc.stdout.readline().rsplit(" ", 1)[1].strip()
        proc.stdout.readline()
        token = json.loads(kubeconfig.read_text())["users"][0]["user"]["token"]
        jobs = f"{url}/apis/batch/v1/namespaces/default/jobs"
        assert post(jobs, json.dumps(JOB).encode(), "application/json") == 401
        assert post(jobs, json.dumps(JOB).encode(), "application/json", token) == 201
    finally:
        proc.terminate()
        proc.communicate(timeout=20)
