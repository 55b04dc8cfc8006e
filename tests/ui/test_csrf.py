"""The cross-site request forgery guard of cancel, stop and resume, one case per rule.

The rule (``plugin/origin.py``): a POST authenticated by Airflow's session cookie acts only when its
``Origin`` (or ``Referer``) is this Airflow's own: ``[api] base_url``'s where it is set, else the
request's ``Host``; a Bearer token skips the check, any other ``Authorization`` does not;
``X-Forwarded-Host`` names an own origin only on an API server started with ``--proxy-headers`` and
without a ``base_url``. The plugin's app is served in-process with Airflow's authentication stubbed (the
user is whoever the cookie or token named) and a stop that records what it was asked to do;
``test_api.py`` checks the Basic case against a real API server.
"""

from __future__ import annotations

import asyncio
import sys

import httpx
import pytest
from fastapi import FastAPI

from airflow_jobs_plugin.plugin import app as plugin_app
from airflow_jobs_plugin.plugin import origin
from airflow_jobs_plugin.plugin import reads as plugin_reads
from airflow_jobs_plugin.readmodel import inspect
from airflow_jobs_plugin.usecases import actions

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


def site(base_url: str | None, *, host: str = "10.0.0.7:8080", trust_proxies: bool = False) -> origin.OwnSite:
    return origin.own_site(
        "http",
        host,
        forwarded_host="airflow.corp.example, inner.proxy",
        forwarded_proto="https, http",
        base_url=base_url,
        trust_proxies=trust_proxies,
    )


@pytest.mark.parametrize(
    ("base_url", "trust_proxies", "origins", "path", "from_base_url"),
    [
        # Unset: the request's Host, and a trusted proxy's first hop.
        (None, True, ("http://10.0.0.7:8080", "https://airflow.corp.example"), "/", False),
        (None, False, ("http://10.0.0.7:8080",), "/", False),
        ("", False, ("http://10.0.0.7:8080",), "/", False),
        # Set: base_url's origin alone, whatever the Host or a proxy says; its path is Airflow's.
        ("https://airflow.example", True, ("https://airflow.example",), "/", True),
        ("https://Airflow.Example:443/", False, ("https://airflow.example",), "/", True),
        ("https://corp.example/airflow/", True, ("https://corp.example",), "/airflow", True),
        (
            "http://corp.example:8080/tools/airflow",
            False,
            ("http://corp.example:8080",),
            "/tools/airflow",
            True,
        ),
        # A bare path names no host: the Host is the origin, the path still Airflow's.
        ("/airflow", False, ("http://10.0.0.7:8080",), "/airflow", False),
    ],
)
def test_own_site(base_url, trust_proxies, origins, path, from_base_url):
    assert site(base_url, trust_proxies=trust_proxies) == origin.OwnSite(origins, path, from_base_url)


@pytest.mark.parametrize(
    ("base_url", "origin_header", "referer", "refused"),
    [
        ("https://airflow.example", "https://airflow.example", None, None),
        # The Host the request carries is no own origin once base_url names one.
        (
            "https://airflow.example",
            "http://10.0.0.7:8080",
            None,
            "Origin http://10.0.0.7:8080 is not this Airflow (https://airflow.example, its [api] base_url)",
        ),
        (None, "http://10.0.0.7:8080", None, None),
        # With a path prefix an Origin (which has no path) passes on the origin alone ...
        ("https://corp.example/airflow/", "https://corp.example", None, None),
        # ... and a Referer must be a page under the path, as Airflow's is_safe_url rules a URL its own.
        ("https://corp.example/airflow/", None, "https://corp.example/airflow/airflow-jobs/jobs/x", None),
        ("https://corp.example/airflow/", None, "https://corp.example/airflow", None),
        (
            "https://corp.example/airflow/",
            None,
            "https://corp.example/grafana/d/1",
            "Referer https://corp.example/grafana/d/1 is not a page of this Airflow, which is served under "
            "/airflow",
        ),
        (
            "https://corp.example/airflow/",
            None,
            "https://corp.example/airflowx/",
            "is not a page of this Airflow",
        ),
        (
            "https://corp.example/airflow/",
            None,
            "https://corp.example/airflow/../grafana/",
            "is not a page of this Airflow",
        ),
        ("https://corp.example/airflow/", None, "https://evil.example/airflow/", "is not this Airflow"),
        ("/airflow", None, "http://10.0.0.7:8080/airflow/airflow-jobs/", None),
        ("/airflow", None, "http://10.0.0.7:8080/other/", "is not a page of this Airflow"),
    ],
)
def test_refusal_under_a_base_url(base_url, origin_header, referer, refused):
    found = origin.refusal(origin_header, referer, site(base_url))
    if refused is None:
        assert found is None
    else:
        assert found is not None and refused in found, found


def test_the_page_acts_only_from_base_urls_origin_when_it_is_set(root, stopped, monkeypatch):
    """The app's own check, with Airflow's configuration: the request's Host (AIRFLOW) no longer counts."""
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.corp.example/airflow/")
    response = post(root, {"Origin": AIRFLOW})
    assert response.status_code == 403
    assert (
        f"Origin {AIRFLOW} is not this Airflow (https://airflow.corp.example, its [api] base_url)"
        in response.json()["detail"]
    )
    assert post(root, {"Origin": PUBLIC}).status_code == 200
    assert stopped == ["train-1"]
    # Nor does a trusted proxy's forwarded host.
    monkeypatch.setattr(sys, "argv", ["airflow", "api-server", "--proxy-headers"])
    forwarded = {
        "Origin": "https://other.example",
        "X-Forwarded-Host": "other.example",
        "X-Forwarded-Proto": "https",
    }
    assert post(root, forwarded).status_code == 403
    assert stopped == ["train-1"]
