"""The tracking benchmark's harness at a tiny size: both triggers follow jobs to their end.

Proves the harness works (processes, counters, timestamps, figures, the report's tables); asserts counts
and structure only, never speed. The benchmark itself runs with ``scripts/bench``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
N = 20
CNCF_MAX = 15  # below N: the cncf tracker follows the first 15 jobs, as one triggerer at capacity would
CNCF_WINDOWS = 2

# Slow (the benchmark harness end to end): not in the fast lane.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import bench_tracking
        import run

        yield bench_tracking, run
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.fixture(scope="module")
def result(bench):
    bench_tracking, _ = bench
    return bench_tracking.run_tracking(
        N,
        time_scale=0.05,
        window=2.0,
        spread=2.0,
        poll_interval=1.0,
        startup=5.0,
        cncf_max=CNCF_MAX,
        cncf_windows=CNCF_WINDOWS,
        say=lambda *_: None,
    )


def test_every_job_ends_with_one_success_event_from_each_trigger(result):
    assert result["ours"]["events"] == N
    assert result["ours"]["statuses"] == {"success": N}
    assert result["cncf"]["events"] == CNCF_MAX
    assert result["cncf"]["statuses"] == {"success": CNCF_MAX}
    assert not result["ours"]["errors"] and not result["cncf"]["errors"]


def test_the_cncf_tracker_follows_one_triggerers_capacity(result):
    assert result["cncf"]["jobs"] == CNCF_MAX and result["cncf"]["of"] == N
    assert result["setup"]["cncf_followed"] == CNCF_MAX and result["setup"]["cncf_max"] == CNCF_MAX


def test_logs_are_followed_by_default(result):
    assert result["setup"]["stream_logs"] is True
    logs = result["ours"]["logs"]
    lines = len(result["setup"]["job_logs"])
    assert logs["lines_expected"] == N * lines
    assert 0 < logs["lines"] <= N * lines
    assert logs["jobs_with_last_line"] + logs["jobs_with_markers"] >= logs["jobs_last_line_accounted"]
    # Every job's last line reached its task log from the trigger, or a marker left it to the worker.
    assert logs["jobs_last_line_accounted"] == N
    assert logs["hub"]["poll_rate"] > 0
    reads = result["ours"]["steady_log_reads"]
    assert set(reads["by_key"]) <= {"get pods/log"}
    assert "get pods/log" not in result["ours"]["steady_tracking"]["by_key"]


def test_window_a_opens_after_our_tracker_received_every_running_pod(bench, result):
    bench_tracking, _ = bench
    every = result["all_running"]
    assert every["written_at"] <= every["received_at"]
    assert every["written"] <= every["received"] == pytest.approx(result["startup_seconds"], abs=0.06)
    assert result["window_a"][0] == pytest.approx(every["received_at"] + bench_tracking.SETTLE, abs=0.01)


def test_the_cncf_windows_follow_ours_one_after_the_other(result):
    windows = result["windows_b"]
    assert len(windows) == CNCF_WINDOWS == len(result["cncf"]["windows"])
    assert result["window_a"][0] < result["window_a"][1] <= windows[0][0]
    for (a, b), (c, d) in zip(windows, windows[1:], strict=False):
        assert a < b == c < d
    assert result["window_b"] == [windows[0][0], windows[-1][1]]


def test_the_cncf_figures_are_ranges_over_its_windows(result):
    ranges = result["cncf"]["ranges"]
    for key in ("per_second", "polls_per_job_per_second", "cpu"):
        low, high = ranges[key]
        assert low <= high, key
    for key in ("ratio_requests_range", "ratio_requests_with_log_reads_range"):
        assert set(result[key]) == {"range", "lower_bound", "empty"}


def test_every_latency_has_one_measurement_per_job(result):
    for name in ("running_noticed", "complete_delivered", "complete_noticed", "final_event"):
        stats = result["ours"]["latency"][name]
        assert stats["count"] == N, name
        assert stats["p50"] <= stats["p99"] <= stats["max"]
    assert result["cncf"]["latency"]["final_event"]["count"] == CNCF_MAX


def test_our_trigger_admits_each_job_once_and_reads_its_pods_once_at_the_end(result):
    lifetime = result["ours"]["lifetime"]["by_key"]
    assert lifetime.get("patch jobs") == N
    assert lifetime.get("list pods", 0) >= N
    assert "get jobs/status" not in lifetime


def test_the_cncf_trigger_polls_job_status_only(result):
    lifetime = result["cncf"]["lifetime"]
    assert set(lifetime["by_key"]) == {"get jobs/status"}
    assert lifetime["requests"] >= CNCF_MAX  # every job it follows polled at least once


def test_process_resources_are_reported(result):
    for side in ("ours", "cncf"):
        figures = result[side]
        assert figures["cpu_seconds"] > 0
        assert figures["peak_rss_mb"] >= figures["rss_start_mb"] > 0
        assert figures["rss_above_import_mb"] == pytest.approx(
            figures["peak_rss_mb"] - figures["rss_start_mb"]
        )
    assert result["simulator"]["peak_rss_mb"] > 0 and result["simulator"]["cpu_seconds"] > 0


def test_the_report_renders_the_new_figures(bench, result):
    _, run = bench
    data = {
        "machine": {key: "-" for key in ("cpu", "cores", "memory", "os", "python", "load")}
        | {"apache-airflow": "-", "apache-airflow-providers-cncf-kubernetes": "-"}
        | {"kubernetes_asyncio": "-", "airflow-jobs-plugin": "-"},
        "when": "today",
        "command": "scripts/bench",
        "tracking": [result],
        "admission": [],
    }
    text = run.render(data)
    assert f"the first {CNCF_MAX:,} of the {N:,} jobs" in text
    assert "above the Airflow import" in text
    assert "jobs with a live log" in text
    assert "every job's last log lines in its task log" in text
    assert f"{CNCF_WINDOWS} windows of" in text
    assert run.chart([result]).startswith("<svg")


def test_the_request_target_is_judged_on_the_cncf_rate_over_its_windows_together(bench):
    bench_tracking, _ = bench
    ours = {"requests": 0, "seconds": 30.0}
    # One window in which its loop stalled (60 requests) and one in which it polled (1,000).
    windows = [{"requests": 60, "seconds": 30.0}, {"requests": 1000, "seconds": 30.0}]
    # (1,060 / 60 s) against ours counted as one request in 30 s: a lower bound, since ours sent none.
    assert bench_tracking.windows_ratio(ours, windows) == {"value": pytest.approx(530.0), "lower_bound": True}
    assert bench_tracking.windows_ratio({"requests": 3, "seconds": 30.0}, windows) == {
        "value": pytest.approx(530.0 / 3),
        "lower_bound": False,
    }
    assert bench_tracking.windows_ratio(ours, []) == {"value": None, "lower_bound": False}
