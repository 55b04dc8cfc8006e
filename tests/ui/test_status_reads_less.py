"""``airflow-jobs status`` reads the finished history as metadata only (``inspect.read_status``) and
shows what reading every job whole shows: the same pools, queues, page of jobs and counts."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import datetime, timezone

import pytest

from airflow_jobs_plugin.cluster.kube import KubeClient
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.readmodel import listing
from airflow_jobs_plugin.readmodel.inspect import Target, read_cluster, read_status
from airflow_jobs_plugin.readmodel.views import may_be_waiting, overview

NOW = datetime(2030, 1, 1, tzinfo=timezone.utc)


def both_reads(kubeconfig: str, query: listing.JobQuery):
    async def run():
        client = await KubeClient.from_kubeconfig(kubeconfig)
        try:
            return await read_cluster(client, Target()), await read_status(client, Target(), query)
        finally:
            await client.close()

    whole, less = asyncio.run(run())
    # One clock for both, so ages and waiting times compare.
    full_view, full_page = listing.page_of(
        listing.narrow(overview(dataclasses.replace(whole, now=NOW)), query), query
    )
    view, page = listing.with_page(
        overview(dataclasses.replace(less.state, now=NOW)), query, less.page, less.total
    )
    return (full_view, full_page), (view, page), (whole, less)


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"limit": 3, "offset": 2},
        {"group": ["nlp"]},
        {"user": ["grace,alice"], "sort": "user"},
        {"sort": "name", "limit": 4},
    ],
    ids=["default", "second-page", "group", "users-by-user", "by-name"],
)
def test_status_from_metadata_shows_what_the_whole_read_shows(population, params):
    query = listing.parse_query(**params)
    (full_view, full_page), (view, page), _ = both_reads(population.kubeconfig, query)
    if page.total is None:  # newest first, decided by the newest window: the older jobs go uncounted
        assert query.sort == "-created" and page.more and full_page.total > query.offset + query.limit
    else:
        assert page.total == full_page.total
    assert view.jobs == full_view.jobs
    assert view.pools == full_view.pools
    assert view.queues == full_view.queues
    assert view.problems == full_view.problems


def _pods_of(names: set[str], pods: list[dict]) -> set[str]:
    return {
        p["metadata"]["name"] for p in pods if any(p["metadata"]["name"].startswith(n + "-") for n in names)
    }


# Newest first by a creation time counted in whole seconds: which job shares the page with the queued
# one depends on where the population's second boundaries fell, and earlier tests stop some of them.
# The second query's page is the same in every run: alice's running job and grace's queued one.
@pytest.mark.parametrize(
    "params", [{"limit": 2}, {"limit": 2, "user": ["alice,grace"]}], ids=["newest", "two-users"]
)
def test_status_reads_whole_only_the_page_and_the_jobs_that_may_wait(population, params):
    query = listing.parse_query(**params)
    _, (view, _), (whole, less) = both_reads(population.kubeconfig, query)
    shown = {j.name for j in view.jobs}
    waiting = {j["metadata"]["name"] for j in whole.jobs if may_be_waiting(j)}
    assert {j["metadata"]["name"] for j in less.state.jobs} == shown | waiting
    assert len(less.state.jobs) < len(whole.jobs)
    own = {p["metadata"]["name"] for p in less.state.pods}
    assert own == _pods_of(shown | waiting, whole.pods)
    assert own < {p["metadata"]["name"] for p in whole.pods}
    if "user" in params:
        assert population.names["runner"] in shown and own


def test_a_state_filter_or_sort_needs_every_job_whole():
    assert listing.by_metadata(listing.parse_query())
    assert listing.by_metadata(listing.parse_query(sort="-dag", group=["a"], user=["b"], dag=["c"]))
    assert not listing.by_metadata(listing.parse_query(state=["RUNNING"]))
    assert not listing.by_metadata(listing.parse_query(sort="state"))
    assert not listing.by_metadata(listing.parse_query(sort="position"))
    with pytest.raises(ValueError):
        listing.pick_page([], listing.parse_query(sort="gpus"))


def _job(name: str, created: str, group: str = "g", **annotations: str) -> dict:
    return {
        "kind": "Job",
        "apiVersion": "batch/v1",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "creationTimestamp": created,
            "annotations": {labels.GROUP_NAME: group, **annotations},
        },
    }


def test_pick_page_orders_newest_first_ties_by_ascending_name_and_counts_every_match():
    jobs = [
        _job("b", "2026-01-01T00:00:02Z"),
        _job("a", "2026-01-01T00:00:02Z"),
        _job("c", "2026-01-01T00:00:03Z", group="other"),
        _job("d", "2026-01-01T00:00:01Z"),
    ]
    page, total = listing.pick_page(jobs, listing.parse_query(limit=2))
    assert [j["metadata"]["name"] for j in page] == ["c", "a"]  # reverse sorts keep ties in name order
    assert total == 4
    page, total = listing.pick_page(jobs, listing.parse_query(group=["g"], offset=1))
    assert [j["metadata"]["name"] for j in page] == ["b", "d"]
    assert total == 3


def test_a_job_carrying_admitted_at_is_not_in_the_queue():
    assert may_be_waiting(_job("q", "2026-01-01T00:00:00Z"))
    assert not may_be_waiting(
        _job("r", "2026-01-01T00:00:00Z", **{labels.ADMITTED_AT: "2026-01-01T00:00:05Z"})
    )
