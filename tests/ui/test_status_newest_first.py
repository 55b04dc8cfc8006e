"""``airflow-jobs status`` in its default order (newest first) reads the namespace window by window back
in time by the jobs' ``created`` label, and stops once the page is decided: the history behind the page
is not read. What it shows is what reading every job shows, except the count it did not make."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import datetime, timedelta, timezone

import pytest
from sim_fixtures import cluster_fixture

from airflow_jobs_plugin.cluster.kube import JOBS, KubeClient, Resource
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.manifests import build_manifest
from airflow_jobs_plugin.jobs.pod_template import created_label
from airflow_jobs_plugin.jobs.spec import TaskIdentity, validate
from airflow_jobs_plugin.readmodel import inspect, listing
from airflow_jobs_plugin.readmodel.inspect import Target, read_cluster, read_status
from airflow_jobs_plugin.readmodel.views import overview

NAMESPACE = "history"
NOW = datetime.now(timezone.utc)
AGES = {"now": timedelta(0), "hours": timedelta(hours=3), "weeks": timedelta(days=40)}
PER_AGE = 4

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)

# A history of jobs that must stay as written: no admission controller beside it.
cluster = cluster_fixture(nodes=1, controller=False)


def _body(name: str, created: datetime, *, admitted: bool = True, labelled: bool = True) -> dict:
    spec = validate(image="registry.example/trainer:1", group="g", user="u", gpus=1, namespace=NAMESPACE)
    body = build_manifest(
        spec, name=name, task=TaskIdentity("d", name, "r", -1, 1), attempt=1, queued_at=created
    )
    if admitted:  # as the admission leaves a job that ran: not one that may wait in the queue
        body["metadata"]["labels"][labels.ADMITTED] = labels.ADMITTED_VALUE
        body["metadata"]["annotations"][labels.ADMITTED_AT] = created.strftime("%Y-%m-%dT%H:%M:%SZ")
    if not labelled:  # a job created before the product wrote the label
        del body["metadata"]["labels"][labels.CREATED]
    return body


@pytest.fixture(scope="module")
def history(cluster):
    """Four jobs created now, four three hours ago, four forty days ago (the simulated API server's clock
    set back for each create, so creationTimestamp and label agree as on a real cluster)."""

    async def create() -> None:
        client = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
        try:
            await client.create(NAMESPACES, "", {"metadata": {"name": NAMESPACE}})
            for age, delta in reversed(AGES.items()):
                for i in range(PER_AGE):
                    when = NOW - delta + timedelta(seconds=i)
                    cluster.store.now = lambda when=when: when
                    await client.create(JOBS, NAMESPACE, _body(f"{age}-{i}", when))
        finally:
            cluster.store.now = lambda: datetime.now(timezone.utc)
            await client.close()

    asyncio.run(create())
    return cluster


def _reads(
    cluster, query: listing.JobQuery, monkeypatch
) -> tuple[list[str], list[str], int | None, list[str]]:
    """The page's names from reading every job and from ``read_status``, its count, and the selectors
    ``read_status`` listed jobs with."""
    asked: list[str] = []
    real = inspect._jobs_metadata

    async def recording(client, spaces, selector="", chunk=inspect.LIST_CHUNK):
        asked.append(selector)
        return await real(client, spaces, selector, chunk)

    monkeypatch.setattr(inspect, "_jobs_metadata", recording)

    async def run():
        client = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
        try:
            target = Target(namespace=NAMESPACE, quota_configmap=None)
            return await read_cluster(client, target), await read_status(client, target, query)
        finally:
            await client.close()

    whole, less = asyncio.run(run())
    _, full = listing.page_of(listing.narrow(overview(whole), query), query)
    _, page = listing.with_page(overview(dataclasses.replace(less.state)), query, less.page, less.total)
    return [r.name for r in full.rows], [r.name for r in page.rows], less.total, asked


def test_a_page_of_the_newest_jobs_reads_only_the_newest_window(history, monkeypatch):
    full, shown, total, asked = _reads(history, listing.parse_query(limit=3), monkeypatch)
    assert shown == full == ["now-3", "now-2", "now-1"]
    assert total is None  # the older jobs were not read, so not counted
    windows = listing.creation_windows(datetime.now(timezone.utc))
    assert not any(w.since is None and w.selector(labels.CREATED) in asked for w in windows)
    assert len([s for s in asked if labels.CREATED in s and not s.startswith("!")]) == 1


def test_a_page_reaching_into_older_jobs_reads_back_to_them(history, monkeypatch):
    full, shown, total, _ = _reads(history, listing.parse_query(limit=6), monkeypatch)
    assert shown == full == ["now-3", "now-2", "now-1", "now-0", "hours-3", "hours-2"]
    assert total is None


def test_a_page_past_the_newest_windows_reads_everything_and_counts_it(history, monkeypatch):
    full, shown, total, _ = _reads(history, listing.parse_query(offset=10, limit=5), monkeypatch)
    assert shown == full == ["weeks-1", "weeks-0"]
    assert total == 3 * PER_AGE


def test_an_old_job_that_may_wait_is_read_whatever_its_age(history, monkeypatch):
    async def add() -> None:
        client = await KubeClient.from_kubeconfig(history.kubeconfig_path)
        try:
            when = NOW - timedelta(days=50)
            history.store.now = lambda: when
            await client.create(JOBS, NAMESPACE, _body("stopped-long-ago", when, admitted=False))
            history.store.now = lambda: NOW - timedelta(days=60)
            await client.create(
                JOBS, NAMESPACE, _body("unlabelled", NOW - timedelta(days=60), labelled=False)
            )
        finally:
            history.store.now = lambda: datetime.now(timezone.utc)
            await client.close()

    asyncio.run(add())
    try:

        async def read():
            client = await KubeClient.from_kubeconfig(history.kubeconfig_path)
            try:
                target = Target(namespace=NAMESPACE, quota_configmap=None)
                return await read_status(client, target, listing.parse_query(limit=2))
            finally:
                await client.close()

        less = asyncio.run(read())
        read_whole = {j["metadata"]["name"] for j in less.state.jobs}
        assert read_whole == {"now-3", "now-2", "stopped-long-ago"}
        full, shown, total, _ = _reads(history, listing.parse_query(offset=12, limit=5), monkeypatch)
        assert shown == full == ["stopped-long-ago", "unlabelled"]
        assert total == 3 * PER_AGE + 2
    finally:

        async def remove() -> None:
            client = await KubeClient.from_kubeconfig(history.kubeconfig_path)
            try:
                for name in ("stopped-long-ago", "unlabelled"):
                    await client.delete(JOBS, NAMESPACE, name)
            finally:
                await client.close()

        asyncio.run(remove())


def test_the_windows_cover_every_creation_time_once():
    now = datetime(2026, 11, 26, 12, tzinfo=timezone.utc)
    windows = listing.creation_windows(now)
    assert windows[0].before is None and windows[-1].since is None
    at = int(now.timestamp())
    for seconds in (at + 999, at, at - 3600, at - 3601, at - 86_400 * 8, at - 86_400 * 400, 0):
        holding = [
            w
            for w in windows
            if (w.since is None or seconds >= w.since) and (w.before is None or seconds < w.before)
        ]
        assert len(holding) == 1, seconds
    # Each window reads CLOCK_MARGIN further back than it counts, and no further forward.
    assert windows[1].selector("k") == f"k>{at - 86_400 - listing.CLOCK_MARGIN - 1},k<{at - 3600}"


def test_the_newest_page_is_decided_by_enough_matching_jobs_inside_the_windows_read():
    def job(name: str, created: int | None, group: str = "g") -> dict:
        meta_labels = {} if created is None else {labels.CREATED: str(created)}
        return {"metadata": {"name": name, "labels": meta_labels, "annotations": {labels.GROUP_NAME: group}}}

    jobs = [job("a", 1000), job("b", 990), job("c", 500), job("old-unlabelled", None), job("d", 995, "other")]
    query = listing.parse_query(limit=2)
    assert listing.decides_newest_page(jobs, query, 990, labels.CREATED)  # a, b and d: one follows the page
    assert not listing.decides_newest_page(jobs, listing.parse_query(limit=3), 990, labels.CREATED)
    assert not listing.decides_newest_page(
        jobs, listing.parse_query(limit=2, group=["other"]), 990, labels.CREATED
    )
    # An unlabelled job was read but its time is unknown: it never decides the page.
    assert not listing.decides_newest_page(jobs, listing.parse_query(limit=5), 500, labels.CREATED)
    assert listing.decides_newest_page(jobs, listing.parse_query(limit=40), None, labels.CREATED)
    assert created_label(datetime(1970, 1, 1, 0, 1, tzinfo=timezone.utc)) == "60"


def _meta(name: str, created: int) -> dict:
    return {"metadata": {"namespace": NAMESPACE, "name": name, "labels": {labels.CREATED: str(created)}}}


def test_the_pages_newest_jobs_come_in_one_list_unless_their_range_holds_many_others():
    page = [_meta("a", 1000), _meta("b", 990)]
    older = [_meta(f"old-{i}", 900 - i) for i in range(500)]
    assert inspect.page_selector(page, [*page, *older]) == f"{labels.CREATED}>989"
    # A filter leaving out most jobs (another user's created between the page's): each read by name.
    between = [_meta(f"other-{i}", 995) for i in range(inspect.PAGE_LIST_SLACK + 1)]
    assert inspect.page_selector(page, [*page, *between, *older]) is None
    # A page job made before the label existed: by name too.
    assert inspect.page_selector([*page, {"metadata": {"name": "c", "labels": {}}}], [*page, *older]) is None


def test_the_jobs_that_may_wait_come_in_one_list_and_one_admitted_meanwhile_by_name(history, monkeypatch):
    async def add(client) -> None:
        when = NOW - timedelta(days=50)
        history.store.now = lambda: when
        try:
            await client.create(JOBS, NAMESPACE, _body("waits-long", when, admitted=False))
        finally:
            history.store.now = lambda: datetime.now(timezone.utc)

    async def read() -> tuple[set[str], list[str]]:
        client = await KubeClient.from_kubeconfig(history.kubeconfig_path)
        got: list[str] = []
        real = client.get_or_none

        async def counting(resource, namespace, name, *args, **kwargs):
            got.append(name)
            return await real(resource, namespace, name, *args, **kwargs)

        client.get_or_none = counting  # type: ignore[method-assign]
        try:
            target = Target(namespace=NAMESPACE, quota_configmap=None)
            less = await read_status(client, target, listing.parse_query(limit=2))
            return {j["metadata"]["name"] for j in less.state.jobs}, got
        finally:
            await client.close()

    async def setup() -> None:
        client = await KubeClient.from_kubeconfig(history.kubeconfig_path)
        try:
            await add(client)
        finally:
            await client.close()

    asyncio.run(setup())
    try:
        read_whole, by_name = asyncio.run(read())
        assert read_whole == {"now-3", "now-2", "waits-long"}
        # The waiting one came with its list, the page's with the list of the jobs created since the
        # oldest of them: nothing by name.
        assert by_name == []

        # Admitted between the two reads, it has left the list of jobs without the label: read by name.
        async def none_left(client, spaces, selector, chunk=inspect.LIST_CHUNK):
            return []

        monkeypatch.setattr(inspect, "_jobs_whole", none_left)
        read_whole, by_name = asyncio.run(read())
        assert read_whole == {"now-3", "now-2", "waits-long"}
        assert sorted(by_name) == ["now-2", "now-3", "waits-long"]
    finally:

        async def remove() -> None:
            client = await KubeClient.from_kubeconfig(history.kubeconfig_path)
            try:
                await client.delete(JOBS, NAMESPACE, "waits-long")
            finally:
                await client.close()

        asyncio.run(remove())
