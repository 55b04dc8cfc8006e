"""A triggerer process moves its start-up objects out of the garbage collector's generations once, when
its first JobTrigger has started, so the full collections that stop every trigger walk only what came
after (``triggers.freeze_start_up_objects``)."""

from __future__ import annotations

import asyncio

import pytest

from airflow_jobs_plugin.airflow import triggers
from airflow_jobs_plugin.airflow.triggers import JobTrigger
from airflow_jobs_plugin.cluster import watch as shared

from .conftest import job_manifest, task_identity
from .test_trigger_scenarios import run_trigger, submit


class Collector:
    """Stands in for the ``gc`` module: notes the calls, and what the process held at the freeze."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.watch_running_at_freeze = False

    def collect(self) -> int:
        self.calls.append("collect")
        return 0

    def freeze(self) -> None:
        self.calls.append("freeze")
        self.watch_running_at_freeze = bool(shared._WATCHES)  # noqa: SLF001


@pytest.fixture
def collector(monkeypatch):
    fake = Collector()
    monkeypatch.setattr(triggers, "gc", fake)
    monkeypatch.setattr(triggers, "_FROZEN_IN", None)
    return fake


async def test_the_first_trigger_of_a_process_freezes_its_start_up_objects_once(client, collector):
    names = []
    for i in range(2):
        body = job_manifest(
            task_identity(f"freeze{i}"), scenario={"main": {"run": 1, "exit": 0, "logs": ["epoch 1"]}}
        )
        names.append(await submit(client, body))
    events = await asyncio.gather(
        *(run_trigger(JobTrigger(job_name=name, namespace="default")) for name in names)
    )
    assert [e[0]["status"] for e in events] == ["success", "success"]
    # One collection clears the start-up's cyclic garbage, then one freeze: not one per trigger.
    assert collector.calls == ["collect", "freeze"]
    # After the first trigger's start: the shared watch and its cache are among what is frozen.
    assert collector.watch_running_at_freeze
    await run_trigger(JobTrigger(job_name=names[0], namespace="default"))
    assert collector.calls == ["collect", "freeze"]  # a later trigger of the same process: nothing


def test_a_process_forked_after_the_freeze_freezes_its_own_start_up(collector, monkeypatch):
    monkeypatch.setattr(triggers.os, "getpid", lambda: 100)
    assert triggers.freeze_start_up_objects() is True
    assert triggers.freeze_start_up_objects() is False
    monkeypatch.setattr(triggers.os, "getpid", lambda: 101)  # the triggerer's runner, forked
    assert triggers.freeze_start_up_objects() is True
    assert collector.calls == ["collect", "freeze", "collect", "freeze"]


def test_the_freeze_moves_live_objects_out_of_the_collectors_reach():
    # What the product relies on, from CPython itself (Python 3.7+, Modules/gcmodule.c): frozen objects
    # are counted apart and no collection walks them until gc.unfreeze().
    import gc

    before = gc.get_freeze_count()
    kept = [[i] for i in range(1000)]
    gc.freeze()
    try:
        assert gc.get_freeze_count() >= before + len(kept)
    finally:
        gc.unfreeze()
