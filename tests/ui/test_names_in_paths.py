"""A namespace or job name that could change the path of a request to Kubernetes never reaches it: the
page's routes refuse it (400, naming the rule), and the client refuses it in any path it builds
(``resources.segment``), so ``/api/jobs/%2e%2e/...`` cannot read a list of every namespace's jobs."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from fastapi import FastAPI, HTTPException

from airflow_jobs_plugin.airflow import cli
from airflow_jobs_plugin.cluster.kube import JOBS, PODS
from airflow_jobs_plugin.cluster.resources import UnsafeName, name_problem
from airflow_jobs_plugin.plugin import app as plugin_app
from airflow_jobs_plugin.plugin import reads as plugin_reads
from airflow_jobs_plugin.readmodel import inspect

AIRFLOW = "http://airflow.internal:8080"
API = f"{plugin_app.URL_PREFIX}/api/jobs"


@pytest.fixture
def asked(monkeypatch) -> list[tuple[str, str]]:
    """The namespace and name of every job the app asked the cluster for."""
    done: list[tuple[str, str]] = []

    async def find_job(client, namespace, name):
        done.append((namespace, name))
        raise inspect.JobNotFound(f"no GPU job {namespace}/{name}")

    async def no_client(settings, work):
        try:
            return await work(None)
        except inspect.JobNotFound as exc:  # as _with_cluster answers it
            raise HTTPException(404, exc.args[0]) from exc

    monkeypatch.setattr(inspect, "find_job", find_job)
    monkeypatch.setattr(plugin_reads, "_with_cluster", no_client)
    return done


@pytest.fixture
def root(asked, mounted_app: FastAPI) -> FastAPI:
    return mounted_app


def call(root: FastAPI, method: str, path: str) -> httpx.Response:
    async def scenario() -> httpx.Response:
        transport = httpx.ASGITransport(app=root)
        async with httpx.AsyncClient(transport=transport, base_url=AIRFLOW) as client:
            # The raw path, as a browser or curl --path-as-is sends it: no client-side normalisation.
            request = client.build_request(method, AIRFLOW, headers={"Authorization": "Bearer a.jwt.token"})
            request.url = request.url.copy_with(raw_path=path.encode())
            return await client.send(request)

    return asyncio.run(scenario())


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", f"{API}/%2e%2e/jobs"),
        ("GET", f"{API}/ml-team/%2e%2e"),
        ("GET", f"{API}/ml-team/%2E"),
        ("GET", f"{API}/ML-Team/train-1"),
        ("GET", f"{API}/ml-team/train-1%3Fwatch=1"),
        ("POST", f"{API}/ml-team/%2e%2e/stop"),
        ("POST", f"{API}/%2e%2e/train-1/cancel"),
        ("GET", f"{plugin_app.URL_PREFIX}/jobs/ml-team/%2e%2e"),
    ],
)
def test_a_route_refuses_a_namespace_or_name_kubernetes_could_not_hold(root, asked, method, path):
    response = call(root, method, path)

    assert response.status_code == 400, response.text
    assert "is not a Kubernetes" in response.text
    assert asked == []


def test_a_route_with_a_real_name_asks_the_cluster(root, asked):
    response = call(root, "GET", f"{API}/ml-team/train-1.a2")

    assert response.status_code == 404
    assert asked == [("ml-team", "train-1.a2")]


@pytest.mark.parametrize("name", ["..", ".", "a/b", "%2e%2e", "a\nb"])
def test_the_client_refuses_a_path_segment_that_would_change_the_path(name):
    with pytest.raises(UnsafeName, match="may not be '.', '..' or contain '/' or '%'"):
        JOBS.path("ml-team", name)
    with pytest.raises(UnsafeName):
        PODS.path(name, "p", "log")


def test_the_client_quotes_every_other_character_of_a_segment():
    assert JOBS.path("ml-team", "a?b#c") == "/apis/batch/v1/namespaces/ml-team/jobs/a%3Fb%23c"
    assert (
        PODS.path("ml-team", "train-1-worker-0", "log")
        == "/api/v1/namespaces/ml-team/pods/train-1-worker-0/log"
    )


def test_names_are_dns_1123_where_they_come_in():
    assert name_problem("ml-team", "train-1.a2") is None
    assert "not a Kubernetes namespace" in (name_problem("..", None) or "")
    assert "not a Kubernetes name" in (name_problem(None, "Train") or "")


@pytest.mark.parametrize(
    "argv",
    [
        ["describe", "..", "-n", "ml-team"],
        ["logs", "train-1", "-n", "%2e%2e"],
        ["status", "-n", "ml-team,../x"],
    ],
)
def test_the_cli_refuses_a_name_kubernetes_could_not_hold_before_any_request(argv, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)

    assert exited.value.code == 2
    assert "is not a Kubernetes" in capsys.readouterr().err


def test_a_sensor_of_a_name_kubernetes_could_not_hold_fails_the_dag_import():
    from airflow_jobs_plugin.airflow.sensors import JobSensor

    with pytest.raises(ValueError, match="JobSensor: job name '../x' is not a Kubernetes name"):
        JobSensor(task_id="wait", job_name="../x")
    with pytest.raises(ValueError, match="namespace 'a/b' is not a Kubernetes namespace"):
        JobSensor(task_id="wait", job_name="train", namespace="a/b")
    assert JobSensor(task_id="wait", job_name="{{ ti.xcom_pull('train') }}").job_name.startswith("{{")
