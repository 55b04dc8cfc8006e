"""The JSON API's OpenAPI schema describes typed responses, and the answers are what it says.

The plugin's app is served in-process (Airflow's authentication stubbed, the cluster replaced by the
table-driven states of ``test_views.py``); ``test_api.py`` checks the same against a real API server and
the simulated cluster.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI, HTTPException

from airflow_jobs_plugin.plugin import app as plugin_app
from airflow_jobs_plugin.plugin import deps as plugin_deps
from airflow_jobs_plugin.plugin import html
from airflow_jobs_plugin.plugin import reads as plugin_reads
from airflow_jobs_plugin.readmodel import inspect, nodes, schema, views
from airflow_jobs_plugin.usecases import actions
from tests.ui.index_reads import serve_index_from
from tests.ui.json_api import display_values, json_routes, untyped, validate
from tests.ui.test_nodes import node, pod
from tests.ui.test_views import mpi_state, primehub_example_1


class Reader:
    def get_name(self) -> str:
        return "reader"


@pytest.fixture(scope="module")
def spec() -> dict:
    return plugin_app.create_app().openapi()


@pytest.fixture
def root(monkeypatch) -> FastAPI:
    from airflow.api_fastapi.core_api import security

    whole = primehub_example_1()

    async def read_cluster(client, target):
        return whole

    async def find_job(client, namespace, wanted):
        for job in whole.jobs:
            if job["metadata"]["name"] == wanted:
                return job
        raise inspect.JobNotFound(f"no GPU job {namespace}/{wanted}")

    async def no_logs(client, namespace, job, pods, lines=50):
        return ()

    async def read_nodes(client, target):
        return nodes.node_view(
            [node("gpu-a", 8), node("gpu-b", 8, cordoned=True)], [pod("a-0", "gpu-a", 2, job="a")]
        )

    async def cancel(client, target, name, by):
        return actions.CancelOutcome(
            target.namespace, name, "Job", False, True, f"job/{name} already finished"
        )

    async def stop(client, target, name, by):
        return actions.ActionOutcome("stop", target.namespace, name, "Job", True, f"job/{name} stopped")

    async def read_change(client, target, namespace, name):
        job = await find_job(client, namespace, name)
        pods = tuple(whole.owners.pods_for(job))
        return views.JobChange(namespace, name, job, pods, whole.now, whole.policy, None, whole.ledgers, {})

    async def no_client(settings, work):
        try:
            return await work(None)
        except inspect.JobNotFound as exc:  # as the real one answers a job that is not there
            raise HTTPException(404, exc.args[0]) from exc

    for name, stand_in in {
        "read_cluster": read_cluster,
        "find_job": find_job,
        "read_log_tails": no_logs,
        "read_nodes": read_nodes,
        "cancel": cancel,
        "stop": stop,
        "read_change": read_change,
    }.items():
        monkeypatch.setattr(inspect, name, stand_in)
    serve_index_from(monkeypatch, read_cluster)
    monkeypatch.setattr(plugin_reads, "_with_cluster", no_client)
    # A reader of the jobs' DAG, not of every DAG: pages wait for the whole view's build (a reader of
    # every DAG gets the newest page before it: test_api_concurrency.py).
    monkeypatch.setattr(plugin_deps, "_may", lambda user, method, dag_id: dag_id is not None)
    plugin = plugin_app.create_app()
    plugin.dependency_overrides[security.get_user] = Reader
    plugin.dependency_overrides[plugin_deps.ReadAccess.dependency] = lambda: None
    plugin.dependency_overrides[plugin_deps._settings] = lambda: plugin_app.Settings(namespace="ml-team")
    plugin.dependency_overrides[plugin_deps.require_same_origin] = lambda: None
    host = FastAPI()
    host.mount(plugin_app.URL_PREFIX, plugin)
    return host


def ask(root: FastAPI, method: str, url: str) -> httpx.Response:
    async def scenario() -> httpx.Response:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=root), base_url="http://airflow"
        ) as client:
            return await client.request(method, plugin_app.URL_PREFIX + url)

    return asyncio.run(scenario())


def test_every_json_route_has_a_typed_described_200_response(spec):
    routes = json_routes(spec)
    assert {
        ("GET", "/api/overview"),
        ("GET", "/api/pools"),
        ("GET", "/api/queues"),
        ("GET", "/api/jobs"),
        ("GET", "/api/jobs/{namespace}/{name}"),
        ("GET", "/api/tasks/{dag_id}/{task_id}/{run_id}"),
        ("GET", "/api/nodes"),
        ("POST", "/api/jobs/{namespace}/{name}/cancel"),
        ("POST", "/api/jobs/{namespace}/{name}/stop"),
        ("POST", "/api/jobs/{namespace}/{name}/resume"),
    } <= set(routes)
    assert untyped(spec) == []
    created = spec["components"]["schemas"]["Job"]["properties"]["created_at"]
    assert {"type": "string", "format": "date-time"} in created["anyOf"]
    assert "age" not in spec["components"]["schemas"]["Job"]["properties"]
    assert spec["components"]["schemas"]["QueueEntry"]["properties"]["waiting_seconds"]["anyOf"][0] == {
        "type": "number"
    }
    # The page's form posts are not JSON: they answer with a redirect to the job page.
    assert set(spec["paths"]["/jobs/{namespace}/{name}/cancel"]["post"]["responses"]) == {"303", "422"}


@pytest.mark.parametrize(
    ("method", "url", "path"),
    [
        ("GET", "/api/overview", "/api/overview"),
        ("GET", "/api/pools", "/api/pools"),
        ("GET", "/api/queues", "/api/queues"),
        ("GET", "/api/jobs?sort=name", "/api/jobs"),
        ("GET", "/api/jobs/ml-team/a", "/api/jobs/{namespace}/{name}"),
        ("GET", "/api/jobs/ml-team/b", "/api/jobs/{namespace}/{name}"),
        ("GET", "/api/nodes", "/api/nodes"),
        ("POST", "/api/jobs/ml-team/a/cancel", "/api/jobs/{namespace}/{name}/cancel"),
        ("POST", "/api/jobs/ml-team/a/stop", "/api/jobs/{namespace}/{name}/stop"),
    ],
)
def test_answers_validate_against_the_schema_and_carry_no_display_strings(root, spec, method, url, path):
    response = ask(root, method, url)
    assert response.status_code == 200, response.text
    body = response.json()
    validate(spec, method, path, body)
    assert display_values(body) == []


def test_the_overview_carries_times_and_seconds_where_the_page_prints_ages(root):
    body = ask(root, "GET", "/api/overview").json()
    jobs = {j["name"]: j for j in body["jobs"]}
    assert jobs["b"]["created_at"] == "2026-03-02T08:59:00Z" and jobs["b"]["age_seconds"] == 660.0
    assert jobs["b"]["kueue_queue"] is None and jobs["a"]["queue_position"] is None
    entry = body["queues"][0]["entries"][0]
    assert (entry["name"], entry["waiting_seconds"]) == ("b", 650.0)
    assert (body["jobs_total"], body["jobs_offset"], body["jobs_limit"]) == (3, 0, 100)
    # The page keeps kubectl's way of printing the same values.
    page = html.overview_page(views.overview(primehub_example_1()))
    assert "<td>11m</td>" in page


def test_a_job_with_replicas_events_and_a_finished_phase_validates(spec):
    state, job = mpi_state()
    body = schema.job_detail(views.job_detail(state, job)).model_dump(mode="json")
    validate(spec, "GET", "/api/jobs/{namespace}/{name}", body)
    assert display_values(body) == []
    launcher = body["replicas"][0]
    assert (launcher["replica"], launcher["ready_containers"], launcher["containers"]) == ("launcher", 1, 1)
    (event,) = body["events"]
    assert event["at"].endswith("Z") and event["age_seconds"] == 100.0
    assert all(p["duration_seconds"] is None or p["duration_seconds"] >= 0 for p in body["phases"])


def test_errors_keep_fastapis_detail(root, spec):
    response = ask(root, "GET", "/api/jobs/ml-team/nope")
    assert response.status_code == 404
    validate(spec, "GET", "/api/jobs/{namespace}/{name}", response.json(), status="404")


def test_docs_describe_every_model_and_field(spec):
    docs = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    models = {
        name: c["properties"]
        for name, c in spec["components"]["schemas"].items()
        if "properties" in c and name not in ("HTTPValidationError", "ValidationError")
    }
    for name, fields in models.items():
        assert f"**{name}**" in docs, name
        section = docs.split(f"**{name}**", 1)[1].split("\n**", 1)[0]
        missing = [f for f in fields if f"| `{f}` |" not in section]
        assert missing == [], f"docs/api.md: {name} lacks {missing}"
