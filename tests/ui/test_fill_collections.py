"""The index's fill and the orphan sweep run with full garbage collections deferred, young ones as
usual, and the server's thresholds come back after them, whether they ended or failed
(``state_cache.full_collections_deferred``): with the server's heap frozen, CPython ran a full
collection every page or two of a fill at 51,000 jobs, each holding the GIL (docs/benchmarks.md)."""

from __future__ import annotations

import asyncio
import gc

import pytest

from airflow_jobs_plugin.plugin import reads as plugin_reads
from airflow_jobs_plugin.plugin import state_cache
from airflow_jobs_plugin.readmodel import inspect
from tests.ui.test_views import primehub_example_1


@pytest.fixture
def thresholds():
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*saved)


def fill(monkeypatch, seen: list[tuple[int, int, int]], fail: bool = False):
    whole = primehub_example_1()

    async def read_in_pages(client, target):
        seen.append(gc.get_threshold())
        yield whole
        if fail:
            raise inspect.KubeError(500, "InternalError", "the LIST failed")
        seen.append(gc.get_threshold())

    async def read_window(client, target, selector, unlabelled):
        seen.append(gc.get_threshold())
        return whole

    monkeypatch.setattr(inspect, "read_in_pages", read_in_pages)
    monkeypatch.setattr(inspect, "read_window", read_window)
    return asyncio.run(plugin_reads._keep_current(None, inspect.Target(namespace="ml-team"), None))  # type: ignore[arg-type]


def test_a_fill_defers_full_collections_and_the_thresholds_come_back_after_it(thresholds, monkeypatch):
    seen: list[tuple[int, int, int]] = []
    index = fill(monkeypatch, seen)
    assert len(index.rows) == 3
    assert seen == [(700, 10, state_cache.DEFERRED_FULL_COLLECTION_THRESHOLD)] * 3
    assert gc.get_threshold() == (700, 10, 10)


def test_the_thresholds_come_back_after_a_fill_that_failed(thresholds, monkeypatch):
    seen: list[tuple[int, int, int]] = []
    with pytest.raises(inspect.KubeError):
        fill(monkeypatch, seen, fail=True)
    assert seen == [(700, 10, state_cache.DEFERRED_FULL_COLLECTION_THRESHOLD)]
    assert gc.get_threshold() == (700, 10, 10)


def test_a_refresh_leaves_the_thresholds_alone(thresholds, monkeypatch):
    seen: list[tuple[int, int, int]] = []
    index = fill(monkeypatch, seen)
    seen.clear()
    asyncio.run(plugin_reads._keep_current(None, inspect.Target(namespace="ml-team"), index))  # type: ignore[arg-type]
    assert seen == [(700, 10, 10)]


def test_overlapping_fills_restore_the_thresholds_after_the_last():
    saved = gc.get_threshold()
    with state_cache.full_collections_deferred():
        with state_cache.full_collections_deferred():
            assert gc.get_threshold()[2] == state_cache.DEFERRED_FULL_COLLECTION_THRESHOLD
        assert gc.get_threshold()[2] == state_cache.DEFERRED_FULL_COLLECTION_THRESHOLD
    assert gc.get_threshold() == saved


def test_an_orphan_sweep_defers_full_collections_too(thresholds, monkeypatch):
    from datetime import timedelta

    from airflow_jobs_plugin.plugin import sweep

    seen: list[tuple[int, int, int]] = []

    async def job_metadata_pages(client, namespace):
        seen.append(gc.get_threshold())
        return
        yield  # an async generator of no page

    class NoRecords:
        """The client of a namespace without cancel records (the sweep also deletes expired ones)."""

        async def list(self, resource, namespace, **_):
            return {"items": []}

    monkeypatch.setattr(inspect, "job_metadata_pages", job_metadata_pages)
    target = inspect.Target(namespace="ml-team")
    asyncio.run(sweep.sweep(NoRecords(), target, lambda refs: (set(), {}), grace=timedelta(minutes=10)))  # type: ignore[arg-type]
    assert seen == [(700, 10, state_cache.DEFERRED_FULL_COLLECTION_THRESHOLD)]
    assert gc.get_threshold() == (700, 10, 10)
