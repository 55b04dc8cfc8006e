"""The tracking benchmark's harness at a tiny size: both triggers follow 20 jobs to their end.

Proves the harness works (processes, counters, timestamps, figures); asserts counts and structure only,
never speed. The benchmark itself runs with ``scripts/bench``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"

pytestmark = pytest.mark.timeout(420)


@pytest.fixture(scope="module")
def result():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from bench_tracking import run_tracking

        yield run_tracking(
            20, time_scale=0.05, window=2.0, spread=2.0, poll_interval=1.0, startup=5.0, say=lambda *_: None
        )
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_every_job_ends_with_one_success_event_from_each_trigger(result):
    assert result["ours"]["events"] == 20
    assert result["ours"]["statuses"] == {"success": 20}
    assert result["cncf"]["events"] == 20
    assert result["cncf"]["statuses"] == {"success": 20}
    assert not result["ours"]["errors"] and not result["cncf"]["errors"]


def test_the_cncf_window_follows_ours(result):
    assert result["window_a"][0] < result["window_a"][1] <= result["window_b"][0] < result["window_b"][1]


def test_every_latency_has_one_measurement_per_job(result):
    for name in ("running_noticed", "complete_delivered", "complete_noticed", "final_event"):
        stats = result["ours"]["latency"][name]
        assert stats["count"] == 20, name
        assert stats["p50"] <= stats["p99"] <= stats["max"]
    assert result["cncf"]["latency"]["final_event"]["count"] == 20


def test_our_trigger_admits_each_job_once_and_reads_its_pods_once_at_the_end(result):
    lifetime = result["ours"]["lifetime"]["by_key"]
    assert lifetime.get("patch jobs") == 20
    assert lifetime.get("list pods", 0) >= 20
    assert "get jobs/status" not in lifetime


def test_the_cncf_trigger_polls_job_status_only(result):
    lifetime = result["cncf"]["lifetime"]
    assert set(lifetime["by_key"]) == {"get jobs/status"}
    assert lifetime["requests"] >= 20  # every job polled at least once


def test_process_resources_are_reported(result):
    for side in ("ours", "cncf"):
        figures = result[side]
        assert figures["cpu_seconds"] > 0
        assert figures["peak_rss_mb"] >= figures["rss_start_mb"] > 0
