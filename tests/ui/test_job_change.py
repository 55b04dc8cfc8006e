"""An action patches the cached view with the job it touched: the same pools, queues and rows as a view
built from the whole namespace after the action, without reading the rest of the namespace.

The scenarios build on PrimeHub's example 1 (``test_views.primehub_example_1``: A runs with 2 of the
group's 4 GPUs, B waits at the head for 4, C behind it), with a finished history job beside them.
"""

from __future__ import annotations

import asyncio
import dataclasses

from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.plugin.state_cache import BuildCache
from airflow_jobs_plugin.readmodel import views
from tests.lifecycle.factories import NAMESPACE, job_condition, ts
from tests.ui.index_reads import serve_index_from
from tests.ui.test_state_cache import Clock
from tests.ui.test_views import NOW, primehub_example_1, product_job


def with_history() -> views.ClusterState:
    state = primehub_example_1()
    done = product_job(
        "h",
        "bob",
        1,
        queued_s=-500,
        suspend=False,
        conditions=[job_condition("Complete", "Completed", "", at_s=-400)],
    )
    return dataclasses.replace(state, jobs=(*state.jobs, done))


def kept_of(whole: views.ClusterState) -> views.ClusterState:
    """What the cached view keeps of a build (app.py ``cluster_view``): the waiting jobs only."""
    return dataclasses.replace(whole, jobs=tuple(j for j in whole.jobs if views._is_waiting(j)))


def stopped(job: dict) -> dict:
    """``job`` as ``actions.stop`` leaves it: suspended, marked stopped, no longer admitted."""
    body = product_job("a", "bob", 2, queued_s=-60, suspend=True)
    body["metadata"]["uid"] = job["metadata"]["uid"]
    body["metadata"]["annotations"].update({labels.STOPPED_AT: ts(590), labels.STOPPED_BY: "admin"})
    return body


def change(whole: views.ClusterState, name: str, job: dict | None, pods=()) -> views.JobChange:
    return views.JobChange(
        NAMESPACE, name, job, tuple(pods), NOW, whole.policy, whole.policy_problem, whole.ledgers, {}
    )


def rebuilt(whole: views.ClusterState, name: str, job: dict | None) -> views.Overview:
    """The overview of the whole namespace read after the action."""
    others = tuple(j for j in whole.jobs if j["metadata"]["name"] != name)
    pods = tuple(p for p in whole.pods if not p["metadata"]["name"].startswith(f"{name}-"))
    return views.overview(dataclasses.replace(whole, jobs=others + ((job,) if job else ()), pods=pods))


def same_view(patched: views.Overview, built: views.Overview) -> None:
    assert patched.pools == built.pools
    assert patched.queues == built.queues
    assert [(r.name, r.state, r.reason, r.queue_position) for r in patched.jobs] == [
        (r.name, r.state, r.reason, r.queue_position) for r in built.jobs
    ]


async def on_this_loop(build):
    return await build()


def test_a_patch_changes_the_kept_value_and_a_build_under_way_when_it_lands():
    async def scenario():
        clock = Clock()
        c: BuildCache[list[str]] = BuildCache(
            fresh_seconds=3, stale_seconds=60, clock=clock, runner=on_this_loop
        )
        gate = asyncio.Event()
        builds = 0

        async def build():
            nonlocal builds
            builds += 1
            if builds == 2:
                await gate.wait()  # this build read the cluster before the action below
            return ["read before the action"]

        first = await c.get("ns", build)
        clock.now = 10
        stale = await c.get("ns", build)  # served at once; a second build starts behind it
        await asyncio.sleep(0)
        await c.patch("ns", lambda value: [*value, "patched"])
        patched_at_once = await c.get("ns", build)
        under_way = c._building["ns"]  # noqa: SLF001 - the build behind the stale copy
        gate.set()
        await under_way
        landed = c._entries["ns"].value  # noqa: SLF001 - what the build under way left
        return first, stale, patched_at_once, landed, builds

    first, stale, patched_at_once, landed, builds = asyncio.run(scenario())
    assert first == stale == ["read before the action"]
    assert patched_at_once == ["read before the action", "patched"]
    assert landed == ["read before the action", "patched"]
    assert builds == 2  # the action rebuilt nothing


def test_a_build_started_after_a_patch_is_not_patched_again():
    async def scenario():
        clock = Clock()
        c: BuildCache[list[str]] = BuildCache(
            fresh_seconds=3, stale_seconds=30, clock=clock, runner=on_this_loop
        )

        async def build():
            return ["read after the action"]

        await c.get("ns", build)
        await c.patch("ns", lambda value: [*value, "patched"])
        clock.now = 100  # past the stale window: the next reader waits for a new build
        return await c.get("ns", build)

    assert asyncio.run(scenario()) == ["read after the action"]


def test_nothing_kept_nothing_patched():
    c: BuildCache[list[str]] = BuildCache()
    asyncio.run(c.patch("ns", lambda value: [*value, "patched"]))
    assert not c.holds("ns")


# --- the app: Stop, then the list, with no second read of the namespace ------------------------------


def test_after_stop_the_job_list_shows_the_job_stopped_without_reading_the_namespace_again(monkeypatch):
    import httpx
    from airflow.api_fastapi.core_api import security
    from fastapi import FastAPI

    from airflow_jobs_plugin.plugin import app as plugin_app
    from airflow_jobs_plugin.plugin import deps as plugin_deps
    from airflow_jobs_plugin.plugin import reads as plugin_reads
    from airflow_jobs_plugin.readmodel import inspect
    from airflow_jobs_plugin.usecases import actions

    whole = with_history()
    a = next(j for j in whole.jobs if j["metadata"]["name"] == "a")
    cluster = {"a": a}
    reads: list[str] = []

    async def read_cluster(client, target):
        reads.append("namespace")
        return whole

    async def find_job(client, namespace, name):
        return cluster[name]

    async def stop(client, target, name, by):
        cluster[name] = stopped(cluster[name])
        return actions.ActionOutcome("stop", target.namespace, name, "Job", True, f"job/{name} stopped")

    async def read_change(client, target, namespace, name):
        reads.append(f"job {name}")
        return change(whole, name, cluster[name])

    async def no_client(settings, work):
        return await work(None)

    for name, stand_in in {
        "read_cluster": read_cluster,
        "find_job": find_job,
        "stop": stop,
        "read_change": read_change,
    }.items():
        monkeypatch.setattr(inspect, name, stand_in)
    serve_index_from(monkeypatch, read_cluster)
    monkeypatch.setattr(plugin_reads, "_with_cluster", no_client)
    # A reader of the jobs' DAG, not of every DAG: pages wait for the whole view's build (a reader of
    # every DAG gets the newest page before it: test_api_concurrency.py).
    monkeypatch.setattr(plugin_deps, "_may", lambda user, method, dag_id: dag_id is not None)
    # Fresh for the whole test, however slow the machine: any second read would be the action's doing.
    monkeypatch.setattr(plugin_app, "BuildCache", lambda **kw: BuildCache(fresh_seconds=3600, **kw))
    plugin = plugin_app.create_app()
    plugin.dependency_overrides[security.get_user] = lambda: type(
        "Admin", (), {"get_name": lambda self: "admin"}
    )()
    plugin.dependency_overrides[plugin_deps.ReadAccess.dependency] = lambda: None
    plugin.dependency_overrides[plugin_deps._settings] = lambda: plugin_app.Settings(
        namespace=NAMESPACE, namespaces=(NAMESPACE,)
    )
    plugin.dependency_overrides[plugin_deps.require_same_origin] = lambda: None
    root = FastAPI()
    root.mount(plugin_app.URL_PREFIX, plugin)

    async def scenario():
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=root), base_url="http://airflow"
        ) as client:
            before = (await client.get("/airflow-jobs/api/jobs")).json()
            assert (await client.post(f"/airflow-jobs/api/jobs/{NAMESPACE}/a/stop")).status_code == 200
            after = (await client.get("/airflow-jobs/api/jobs")).json()
            return before, after

    before, after = asyncio.run(scenario())
    assert {r["name"]: r["state"] for r in before}["a"] == "RUNNING"
    assert {r["name"]: r["state"] for r in after}["a"] == "STOPPED"
    assert reads == ["namespace", "job a"]
