"""The cross-site request forgery guard of cancel, stop and resume, one case per rule.

The rule (``plugin/origin.py``): a POST authenticated by Airflow's session cookie acts only when its
``Origin`` (or ``Referer``) is this Airflow's own; a Bearer token skips the check, any other
``Authorization`` does not; ``X-Forwarded-Host`` names an own origin only on an API server started with
``--proxy-headers``. The plugin's app is served in-process with Airflow's authentication stubbed (the
user is whoever the cookie or token named) and a stop that records what it was asked to do;
``test_api.py`` checks the Basic case against a real API server.
"""

from __future__ import annotations

import asyncio
import sys

import httpx
import pytest
from fastapi import FastAPI

from airflow_jobs_plugin.jobs import actions
from airflow_jobs_plugin.plugin import app as plugin_app
from airflow_jobs_plugin.plugin import origin
from airflow_jobs_plugin.plugin import reads as plugin_reads
from airflow_jobs_plugin.readmodel import inspect

AIRFLOW = "http://airflow.internal:8080"
PUBLIC = "https://airflow.corp.example"
STOP = f"{plugin_app.URL_PREFIX}/api/jobs/ml-team/train-1/stop"


@pytest.fixture
def stopped(monkeypatch) -> list[str]:
    """The jobs the app stopped, in order."""
    done: list[str] = []

    async def find_job(client, namespace, name):
        return {"metadata": {"name": name, "namespace": namespace, "labels": {}}}

    async def stop(client, target, name, by):
        done.append(name)
        return actions.ActionOutcome("stop", target.namespace, name, "Job", True, f"job/{name} stopped")

    async def no_client(settings, work):
        return await work(None)

    async def read_change(client, target, namespace, name):
        raise AssertionError("no cached view to patch: nothing was read before the action")

    monkeypatch.setattr(inspect, "find_job", find_job)
    monkeypatch.setattr(inspect, "read_change", read_change)
    monkeypatch.setattr(inspect, "stop", stop)
    monkeypatch.setattr(plugin_reads, "_with_cluster", no_client)
    return done


@pytest.fixture
def root(stopped, mounted_app: FastAPI) -> FastAPI:
    return mounted_app


def post(root: FastAPI, headers: dict[str, str]) -> httpx.Response:
    async def scenario() -> httpx.Response:
        transport = httpx.ASGITransport(app=root)
        async with httpx.AsyncClient(transport=transport, base_url=AIRFLOW) as client:
            return await client.post(STOP, headers=headers, cookies={"_token": "session"})

    return asyncio.run(scenario())


def test_a_bearer_token_skips_the_origin_check(root, stopped):
    response = post(root, {"Authorization": "Bearer a.jwt.token", "Origin": "https://evil.example"})
    assert response.status_code == 200, response.text
    assert stopped == ["train-1"]


@pytest.mark.parametrize(
    "authorization", ["Basic YWRtaW46YWRtaW4=", "Digest username=admin", "Bearer", "Bearer   ", "token"]
)
def test_any_other_authorization_is_checked_like_the_cookie_alone(root, stopped, authorization):
    response = post(root, {"Authorization": authorization, "Origin": "https://evil.example"})
    assert response.status_code == 403
    assert "Origin https://evil.example is not this Airflow" in response.json()["detail"]
    assert stopped == []


def test_the_cookie_from_airflows_own_origin_acts(root, stopped):
    assert post(root, {"Origin": AIRFLOW}).status_code == 200
    assert stopped == ["train-1"]


def test_x_forwarded_host_is_not_an_own_origin_where_airflow_does_not_trust_proxies(root, stopped):
    response = post(
        root, {"Origin": PUBLIC, "X-Forwarded-Host": "airflow.corp.example", "X-Forwarded-Proto": "https"}
    )
    assert response.status_code == 403
    assert f"Origin {PUBLIC} is not this Airflow (http://airflow.internal:8080)" in response.json()["detail"]
    assert stopped == []


def test_x_forwarded_host_is_an_own_origin_where_the_api_server_trusts_proxies(root, stopped, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["airflow", "api-server", "--proxy-headers", "--port", "8080"])
    headers = {"Origin": PUBLIC, "X-Forwarded-Host": "airflow.corp.example", "X-Forwarded-Proto": "https"}
    assert post(root, headers).status_code == 200
    assert stopped == ["train-1"]
    # Trusting the proxy does not make every origin its own.
    assert post(root, {**headers, "Origin": "https://evil.example"}).status_code == 403
    assert stopped == ["train-1"]


# --- the pure rules ---


@pytest.mark.parametrize(
    ("authorization", "bearer"),
    [
        ("Bearer a.b.c", True),
        ("bearer a.b.c", True),
        ("  BEARER a.b.c ", True),
        ("Bearer", False),
        ("Bearer  ", False),
        ("Basic YWRtaW46YWRtaW4=", False),
        ("Bearera.b.c", False),
        ("", False),
        (None, False),
    ],
)
def test_only_a_bearer_token_is_a_credential_of_its_own(authorization, bearer):
    assert origin.carries_bearer(authorization) is bearer


@pytest.mark.parametrize(
    ("argv", "trusted"),
    [
        (["airflow", "api-server", "--proxy-headers"], True),
        (["airflow", "api-server", "-p", "8080", "--proxy-headers", "--workers", "4"], True),
        (["airflow", "api-server"], False),
        (["airflow", "api-server", "--apps", "all"], False),
    ],
)
def test_proxies_are_trusted_only_where_the_api_server_was_started_with_proxy_headers(argv, trusted):
    assert origin.trusts_proxies(argv) is trusted


def test_a_trusted_proxys_first_hop_and_the_base_url_are_own_origins():
    assert origin.own_origins(
        "http",
        "10.0.0.7:8080",
        forwarded_host="airflow.corp.example, inner.proxy",
        forwarded_proto="https, http",
        base_url="https://airflow.example/base",
        trust_proxies=True,
    ) == ["http://10.0.0.7:8080", "https://airflow.corp.example", "https://airflow.example/base"]
    assert origin.own_origins(
        "http",
        "10.0.0.7:8080",
        forwarded_host="airflow.corp.example",
        forwarded_proto="https",
        base_url=None,
        trust_proxies=False,
    ) == ["http://10.0.0.7:8080"]
