"""Filtering, sorting and paging the overview on the server: what the page, the JSON routes and
``airflow-jobs status`` accept as query parameters, and what a reader may see."""

from __future__ import annotations

import dataclasses

import pytest

from airflow_jobs_plugin.queueing import quota
from airflow_jobs_plugin.readmodel import listing, views
from tests.ui.test_views import NOW, PHUSERS, product_job, reservation

from .test_views import job_pod, running


def population() -> views.Overview:
    """Five jobs of two groups, three users and two DAGs: two running, three queued."""
    jobs = []
    for i, (user, group, suspend, dag) in enumerate(
        [
            ("bob", "phusers", False, "nightly"),
            ("pan", "phusers", True, "nightly"),
            ("lin", "phusers", True, "adhoc"),
            ("bob", "other", False, "adhoc"),
            ("lin", "other", True, "nightly"),
        ]
    ):
        job = product_job(f"j{i}", user, 1, queued_s=-60 + i, suspend=suspend, group=group)
        job["metadata"]["annotations"]["airflow-jobs.io/dag-id"] = dag
        job["metadata"]["creationTimestamp"] = f"2026-03-02T00:00:0{i}Z"
        jobs.append(job)
    pods = (
        job_pod("j0", phase="Running", statuses=[running("main", ready=True)], ready=True),
        job_pod("j3", phase="Running", statuses=[running("main", ready=True)], ready=True),
    )
    from airflow_jobs_plugin.queueing import quota

    ledgers = {"phusers": quota.Ledger("phusers", (reservation(jobs[0], 0),))}
    state = views.ClusterState(
        jobs=tuple(jobs), pods=pods, events=(), now=NOW, policy=PHUSERS, ledgers=ledgers
    )
    return views.overview(state)


OV = population()


def names(ov: views.Overview) -> list[str]:
    return [r.name for r in ov.jobs]


def test_without_parameters_every_job_newest_first_in_one_page():
    ov, page = listing.page_of(listing.narrow(OV, listing.parse_query()), listing.parse_query())
    assert names(ov) == ["j4", "j3", "j2", "j1", "j0"]
    assert (page.total, page.offset, page.limit, page.next_offset) == (5, 0, 100, None)


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"group": ["other"]}, ["j4", "j3"]),
        ({"user": ["bob,lin"]}, ["j4", "j3", "j2", "j0"]),
        ({"user": ["bob"], "group": ["phusers"]}, ["j0"]),
        ({"state": ["running"]}, ["j3", "j0"]),
        ({"state": ["RUNNING", "QUEUED"]}, ["j4", "j3", "j2", "j1", "j0"]),
        ({"dag": ["adhoc"]}, ["j3", "j2"]),
        ({"sort": "name"}, ["j0", "j1", "j2", "j3", "j4"]),
        ({"sort": "-user"}, ["j1", "j2", "j4", "j0", "j3"]),
    ],
)
def test_filters_and_sort(params, expected):
    query = listing.parse_query(**params)
    assert names(listing.narrow(OV, query)) == expected


def test_filters_narrow_the_queues_and_the_group_filter_the_pools_too():
    narrowed = listing.narrow(OV, listing.parse_query(group=["other"]))
    assert {p.group for p in narrowed.pools} <= {"other"}
    assert {q.group for q in narrowed.queues} <= {"other"}
    assert [e.name for q in OV.queues for e in q.entries] == ["j4"]
    assert listing.narrow(OV, listing.parse_query(user=["bob"])).queues == ()
    assert listing.narrow(OV, listing.parse_query(user=["bob"])).pools == OV.pools


def test_pages_walk_the_whole_list_once():
    seen = []
    offset = 0
    while offset is not None:
        query = listing.parse_query(limit=2, offset=offset, sort="name")
        ov, page = listing.page_of(listing.narrow(OV, query), query)
        seen.extend(names(ov))
        assert page.total == 5
        offset = page.next_offset
    assert seen == ["j0", "j1", "j2", "j3", "j4"]


def test_a_page_past_the_end_is_empty_and_points_back():
    query = listing.parse_query(limit=2, offset=10)
    ov, page = listing.page_of(listing.narrow(OV, query), query)
    assert (ov.jobs, page.total, page.previous_offset) == ((), 5, 8)


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"state": ["RUNING"]}, "state: RUNING is not a job state"),
        ({"sort": "size"}, "sort: 'size' is not a column"),
        ({"limit": 0}, "limit: 0 is out of range; use 1 to 1000"),
        ({"limit": 5000}, "limit: 5000 is out of range"),
        ({"offset": -1}, "offset: -1 is negative"),
    ],
)
def test_unusable_parameters_are_refused_naming_the_parameter_and_the_fix(params, named):
    with pytest.raises(listing.QueryError, match=named.replace("(", r"\(")):
        listing.parse_query(**params)


def test_a_reader_sees_only_jobs_of_dags_they_may_read_but_every_pool():
    asked = []

    def may_read(dag_id):
        asked.append(dag_id)
        return dag_id == "nightly"

    seen = listing.for_reader(OV, may_read)
    assert names(seen) == ["j4", "j1", "j0"]
    assert [e.name for q in seen.queues for e in q.entries] == ["j4"]
    assert listing.for_reader(OV, lambda dag_id: dag_id == "adhoc").queues == ()
    assert seen.pools == OV.pools and seen.charts == OV.charts
    assert sorted(asked) == ["adhoc", "nightly"]  # once per DAG, not once per job


def test_the_pager_links_keep_the_filters():
    query = listing.parse_query(state=["QUEUED"], limit=1, offset=1)
    _, page = listing.page_of(listing.narrow(OV, query), query)
    html = listing.pager_html(page, query, "/airflow-jobs/")
    assert 'href="/airflow-jobs/?state=QUEUED&amp;limit=1"' in html  # previous: offset 0 is the default
    assert 'href="/airflow-jobs/?state=QUEUED&amp;offset=2&amp;limit=1"' in html
    assert "jobs 2–2 of 3" in html
    assert dataclasses.replace(query, offset=0).params() == "state=QUEUED&limit=1"


# --- the overview's queues and pools, bounded -----------------------------------------------------------


def long_queue(waiting: int) -> views.Overview:
    """Group phusers (quota 4): ``a`` (bob, 2) runs; ``waiting`` jobs of as many users wait behind it."""
    return views.overview(long_queue_state(waiting))


def long_queue_state(waiting: int) -> views.ClusterState:
    a = product_job("a", "bob", 2, queued_s=-600, suspend=False)
    jobs = [a] + [
        product_job(f"w{i:03d}", f"user{i:03d}", 4, queued_s=-500 + i, suspend=True) for i in range(waiting)
    ]
    pod = job_pod("a", phase="Running", statuses=[running("main", ready=True)], ready=True)
    ledger = quota.Ledger("phusers", (reservation(a, 0),))
    return views.ClusterState(
        jobs=tuple(jobs), pods=(pod,), events=(), now=NOW, policy=PHUSERS, ledgers={"phusers": ledger}
    )


def test_each_queue_lists_its_first_rows_and_counts_the_rest():
    ov = listing.bounded(long_queue(30), rows=5)
    (queue,) = ov.queues
    assert [e.position for e in queue.entries] == [1, 2, 3, 4, 5]
    assert queue.more == 25


def test_each_pool_lists_the_users_holding_or_waiting_for_most_in_name_order_and_counts_the_rest():
    whole = long_queue(30)
    (pool,) = listing.bounded(whole, rows=3).pools
    # bob holds 2 GPUs; every other user waits for 4: the first by name of those follow.
    assert [u.user for u in pool.users] == ["user000", "user001", "user002"]
    assert pool.more_users == len(whole.pools[0].users) - 3
    (pool,) = listing.bounded(whole, rows=40).pools
    assert pool.more_users == 0 and len(pool.users) == 31


def test_a_queue_longer_than_the_page_shows_links_to_its_jobs_in_the_job_list():
    from airflow_jobs_plugin.plugin import html

    page = html.queues_section(listing.bounded(long_queue(30), rows=5), base="/base")
    assert page.count('class="queued"') == 5
    assert "+25 more waiting" in page and "30 waiting</span>" in page
    assert "/base/airflow-jobs/?group=phusers&amp;state=QUEUED&amp;sort=position#jobs" in page


def test_status_names_the_group_on_every_user_line_and_counts_the_users_left_out():
    from airflow_jobs_plugin.readmodel import text

    out = text.status_text(listing.bounded(long_queue(30), rows=3))
    pools = out.split("QUEUES")[0].splitlines()[2:]
    assert pools and all(line.split()[0] == "phusers" for line in pools if line.strip())
    assert any("(+28 more)" in line for line in pools)
    assert "phusers: 27 more waiting" in out


def test_the_overview_page_takes_the_same_queue_rows_bound_as_the_json(monkeypatch):
    import sys

    from airflow.api_fastapi.core_api import security
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from airflow_jobs_plugin.plugin import app as plugin_app
    from airflow_jobs_plugin.plugin import deps as plugin_deps
    from airflow_jobs_plugin.plugin import reads as plugin_reads
    from tests.ui.conftest import Admin
    from tests.ui.index_reads import serve_index_from

    async def read_cluster(client, target):
        return long_queue_state(30)

    async def no_client(settings, work):
        return await work(None)

    serve_index_from(monkeypatch, read_cluster)
    monkeypatch.setattr(plugin_reads, "_with_cluster", no_client)
    # A reader of the jobs' DAG: the page is the whole view's (a reader of every DAG may get the newest
    # page first, test_api_concurrency.py).
    monkeypatch.setattr(plugin_deps, "_may", lambda user, method, dag_id: dag_id is not None)
    monkeypatch.setattr(sys, "argv", ["airflow", "api-server"])
    plugin = plugin_app.create_app()
    plugin.dependency_overrides[security.get_user] = Admin
    plugin.dependency_overrides[plugin_deps.ReadAccess.dependency] = lambda: None
    plugin.dependency_overrides[plugin_deps._settings] = lambda: plugin_app.Settings(namespace="ml-team")
    root = FastAPI()
    root.mount(plugin_app.URL_PREFIX, plugin)
    with TestClient(root) as client:
        page = client.get("/airflow-jobs/?queue_rows=5").text
        json = client.get("/airflow-jobs/api/overview?queue_rows=5").json()
        refused = client.get(
            f"/airflow-jobs/?queue_rows={listing.MAX_QUEUE_ROWS + 1}", headers={"Accept": "text/html"}
        )
    assert page.count('class="queued"') == 5 == len(json["queues"][0]["entries"])
    assert "+25 more waiting" in page and json["queues"][0]["more"] == 25
    assert 'data-waiting="30"' in page
    assert refused.status_code == 422 and "queue_rows" in refused.text  # a page naming the parameter
