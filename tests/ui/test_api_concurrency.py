"""The API server keeps answering while the GPU Jobs overview of a large namespace is being built.

The plugin's app is mounted in a host app on one event loop, as Airflow's API server mounts it next to
its own routes; Airflow's authentication is stubbed (it is tested against a real API server in
``test_api.py``). The cluster read is replaced by one that works as the real build does until the test
lets it go: Python code holding the GIL, building dicts and strings as decoding LISTs of hundreds of
megabytes and 50,000 snapshots do (and so running the garbage collector), not a thread that sleeps.
Run on the event loop it would stall every other request of the server until it ended; in a worker
thread the loop gets the GIL back at every switch interval (``sys.getswitchinterval``, 5 ms).
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time

import httpx
import pytest
from fastapi import FastAPI

from airflow_jobs_plugin.lifecycle import pods_of
from airflow_jobs_plugin.plugin import app as plugin_app
from airflow_jobs_plugin.plugin import deps as plugin_deps
from airflow_jobs_plugin.plugin import reads as plugin_reads
from airflow_jobs_plugin.readmodel import inspect
from tests.ui.index_reads import serve_index_from
from tests.ui.test_views import primehub_example_1

SAFETY_NET = 120  # seconds; only so that a regression fails instead of hanging the suite


class Reader:
    def get_name(self) -> str:
        return "reader"


def busy_until(release: threading.Event) -> int:
    """CPU and allocation as a build's, without a pause, until ``release`` (or the safety net)."""
    deadline = time.monotonic() + SAFETY_NET
    kept: list[list[dict]] = []
    made = 0
    while not release.is_set() and time.monotonic() < deadline:
        chunk = [
            {
                "metadata": {"name": f"job-{made + i}", "labels": {"group": "vision", "n": str(i)}},
                "gpus": i % 8,
            }
            for i in range(500)
        ]
        kept.append(chunk)
        del kept[:-40]  # a bounded heap: the work is allocation and collection, not growth
        made += len(chunk)
    return made


@pytest.fixture
def host(monkeypatch):
    """Airflow's stand-in: a host app with its own cheap route, the plugin mounted under it."""
    from airflow.api_fastapi.core_api import security

    started, release = threading.Event(), threading.Event()
    reads = []

    async def slow_read(client, target):
        reads.append(target)
        started.set()
        busy_until(release)  # holds whichever thread runs the build
        return primehub_example_1()

    async def no_client(settings, work):
        return await work(None)

    monkeypatch.setattr(inspect, "read_cluster", slow_read)
    serve_index_from(monkeypatch, slow_read)
    monkeypatch.setattr(plugin_reads, "_with_cluster", no_client)
    # A reader of the jobs' DAG, not of every DAG: pages wait for the whole view's build (a reader of
    # every DAG gets the newest page before it: test_api_concurrency.py).
    monkeypatch.setattr(plugin_deps, "_may", lambda user, method, dag_id: dag_id is not None)
    plugin = plugin_app.create_app()
    plugin.dependency_overrides[security.get_user] = Reader
    plugin.dependency_overrides[plugin_deps.ReadAccess.dependency] = lambda: None
    plugin.dependency_overrides[plugin_deps._settings] = lambda: plugin_app.Settings(namespace="ml-team")
    root = FastAPI()

    @root.get("/api/v2/monitor/health")
    async def health() -> dict:
        return {"status": "healthy"}

    root.mount(plugin_app.URL_PREFIX, plugin)
    yield root, started, release, reads
    release.set()


def test_another_request_is_answered_while_the_overview_is_built(host):
    root, started, release, reads = host

    async def scenario():
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=root), base_url="http://airflow"
        ) as client:
            overview = asyncio.create_task(client.get("/airflow-jobs/api/jobs"))
            await asyncio.to_thread(started.wait, SAFETY_NET)
            assert started.is_set(), "the overview's cluster read never began"
            health = await client.get("/api/v2/monitor/health")
            order = ["health answered"]
            # The build is still held: the overview cannot have been answered yet.
            building = not overview.done()
            second = asyncio.create_task(client.get("/airflow-jobs/api/pools"))
            await asyncio.sleep(0)
            release.set()
            jobs = await overview
            order.append("overview answered")
            pools = await second
            return health, building, order, jobs, pools

    health, building, order, jobs, pools = asyncio.run(scenario())
    assert health.json() == {"status": "healthy"}
    assert building
    assert order == ["health answered", "overview answered"]
    assert sorted(row["name"] for row in jobs.json()) == ["a", "b", "c"]
    assert [p["group"] for p in pools.json()] == ["phusers"]
    assert len(reads) == 1  # the second request waited for the build under way, it did not start one


@pytest.mark.parametrize("name", ["a", "b", "c"])
def test_a_job_page_from_the_kept_copy_equals_the_page_from_the_whole_namespace(host, monkeypatch, name):
    from airflow_jobs_plugin.readmodel import schema, views

    root, _, release, _ = host
    release.set()
    whole = primehub_example_1()
    job = next(j for j in whole.jobs if j["metadata"]["name"] == name)

    async def find_job(client, namespace, wanted):
        return job

    async def no_logs(client, namespace, job, pods, lines=50):
        return ()

    monkeypatch.setattr(inspect, "find_job", find_job)
    monkeypatch.setattr(inspect, "read_log_tails", no_logs)

    async def scenario():
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=root), base_url="http://airflow"
        ) as client:
            await client.get("/airflow-jobs/api/jobs")  # the index, built and kept
            return await client.get(f"/airflow-jobs/api/jobs/ml-team/{name}")

    response = asyncio.run(scenario())
    assert response.status_code == 200
    assert response.json() == schema.job_detail(views.job_detail(whole, job)).model_dump(mode="json")


@pytest.mark.parametrize("name", ["a", "b", "c"])
def test_a_job_page_does_not_wait_for_the_index_being_filled(host, monkeypatch, name):
    """After a start the index fills for tens of seconds at 51,000 jobs; a job's page (the one an action
    lands on) reads what it needs around its job instead, and equals the page from the whole namespace."""
    from airflow_jobs_plugin.readmodel import schema, views

    root, started, release, _ = host
    whole = primehub_example_1()
    job = next(j for j in whole.jobs if j["metadata"]["name"] == name)
    around = []

    async def find_job(client, namespace, wanted):
        return job

    async def no_logs(client, namespace, job, pods, lines=50):
        return ()

    async def read_around_job(client, target, wanted):
        around.append(wanted["metadata"]["name"])
        waiting = tuple(j for j in whole.jobs if views._is_waiting(j))
        return dataclasses.replace(whole, jobs=waiting, pods=tuple(pods_of(wanted, whole.pods)))

    monkeypatch.setattr(inspect, "find_job", find_job)
    monkeypatch.setattr(inspect, "read_log_tails", no_logs)
    monkeypatch.setattr(inspect, "read_around_job", read_around_job)

    async def scenario():
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=root), base_url="http://airflow"
        ) as client:
            overview = asyncio.create_task(client.get("/airflow-jobs/api/jobs"))
            await asyncio.to_thread(started.wait, SAFETY_NET)
            page = await client.get(f"/airflow-jobs/api/jobs/ml-team/{name}")
            filling = not overview.done()  # the fill is still held: the page did not wait for it
            release.set()
            await overview
            return page, filling

    page, filling = asyncio.run(scenario())
    assert filling and around == [name]
    assert page.status_code == 200
    assert page.json() == schema.job_detail(views.job_detail(whole, job)).model_dump(mode="json")


def test_a_reader_of_every_dag_gets_the_newest_page_at_once_and_the_whole_view_builds_behind_it(
    host, monkeypatch
):
    """After a start (or an idle spell) nothing is built: the page comes from the read ``airflow-jobs
    status`` makes (inspect.read_status: the newest jobs, the waiting ones, the ledgers), without charts
    or a count, and the whole view builds behind it; once built, the pages are the whole view's."""
    from airflow_jobs_plugin.readmodel import listing

    root, started, release, reads = host
    monkeypatch.setattr(plugin_deps, "_may", lambda *args, **kwargs: True)
    whole = primehub_example_1()
    newest_reads = []

    async def read_status(client, target, query, chunk=inspect.LIST_CHUNK):
        newest_reads.append(query.sort)
        page, _ = listing.pick_page(whole.jobs, query)
        keys = tuple((j["metadata"]["namespace"], j["metadata"]["name"]) for j in page)
        return inspect.StatusRead(whole, keys, None)  # None: only the newest windows were read

    monkeypatch.setattr(inspect, "read_status", read_status)

    async def scenario():
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=root), base_url="http://airflow"
        ) as client:
            first = await client.get("/airflow-jobs/api/overview")
            # The whole build starts behind the answer (not beside it: both are CPU under one GIL).
            building = await asyncio.to_thread(started.wait, SAFETY_NET)
            release.set()
            built = await client.get("/airflow-jobs/api/jobs?sort=state")  # a state sort waits for it
            after = await client.get("/airflow-jobs/api/overview")
            return first, building, built, after

    first, building, built, after = asyncio.run(scenario())
    assert building
    body = first.json()
    assert sorted(j["name"] for j in body["jobs"]) == ["a", "b", "c"]
    assert [q["group"] for q in body["queues"]] == ["phusers"] and body["charts"] == []
    assert "X-Total-Count" not in first.headers
    assert newest_reads == ["-created"] and len(reads) == 1
    assert built.status_code == 200
    assert after.headers["X-Total-Count"] == "3" and after.json()["charts"] != []
    assert newest_reads == ["-created"]  # once built, the whole view answers


def test_the_newest_page_shows_placeholders_where_the_charts_come_once_the_whole_view_is_built(
    host, monkeypatch
):
    from airflow_jobs_plugin.readmodel import listing

    root, started, release, reads = host
    monkeypatch.setattr(plugin_deps, "_may", lambda *args, **kwargs: True)
    whole = primehub_example_1()

    async def read_status(client, target, query, chunk=inspect.LIST_CHUNK):
        page, _ = listing.pick_page(whole.jobs, query)
        keys = tuple((j["metadata"]["namespace"], j["metadata"]["name"]) for j in page)
        return inspect.StatusRead(whole, keys, None)

    monkeypatch.setattr(inspect, "read_status", read_status)

    async def scenario():
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=root), base_url="http://airflow"
        ) as client:
            first = await client.get("/airflow-jobs/")
            await asyncio.to_thread(started.wait, SAFETY_NET)
            release.set()
            await client.get("/airflow-jobs/api/jobs?sort=state")  # a state sort waits for the build
            return first, await client.get("/airflow-jobs/")

    first, after = asyncio.run(scenario())
    assert (
        'id="usage-loading"' in first.text and 'class="chart-placeholder" data-group="phusers"' in first.text
    )
    assert 'class="usage-chart"' not in first.text
    assert 'class="chart-placeholder"' not in after.text and 'class="usage-chart"' in after.text


def test_a_reader_of_some_dags_waits_for_the_whole_view(host, monkeypatch):
    """Their page is filtered after it is chosen: the newest page could hold fewer jobs than they may read."""
    root, started, release, reads = host

    async def read_status(client, target, query, chunk=inspect.LIST_CHUNK):
        raise AssertionError("only a reader of every DAG is answered from the newest page")

    monkeypatch.setattr(inspect, "read_status", read_status)
    release.set()

    async def scenario():
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=root), base_url="http://airflow"
        ) as client:
            return await client.get("/airflow-jobs/api/jobs")

    assert sorted(j["name"] for j in asyncio.run(scenario()).json()) == ["a", "b", "c"]
