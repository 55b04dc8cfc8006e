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
    assert logs["lines"] > 0
    assert logs["jobs_with_last_line"] + logs["jobs_with_markers"] >= logs["jobs_last_line_accounted"]
    # Every job's last line reached its task log from the trigger, or a marker left it to the worker.
    assert logs["jobs_last_line_accounted"] == N
    assert logs["hub"]["poll_rate"] > 0
    reads = result["ours"]["steady_log_reads"]
    assert set(reads["by_key"]) <= {"get pods/log"}
    assert "get pods/log" not in result["ours"]["steady_tracking"]["by_key"]


def test_every_running_job_talks_and_each_line_it_wrote_is_timed_once(result):
    writer = result["writer"]
    assert writer["done_lines"] == N  # every job wrote its last line before it ended
    clock = result["ours"]["line_latency"]
    by_class = clock["by_class"]
    assert set(by_class) == {"streamed", "polled", "handed_over", "worker"}
    # A handed-over line is a polled one (its container held no stream when it was written).
    assert by_class["handed_over"]["count"] <= by_class["polled"]["count"]
    counted = by_class["streamed"]["count"] + by_class["polled"]["count"] + by_class["worker"]["count"]
    assert clock["ticks"] == counted == clock["all"]["count"]
    # Every line the trigger printed was written by the ticker: counted once, never more than written.
    assert 0 < clock["ticks"] <= writer["lines"] + writer["done_lines"]
    assert result["setup"]["talk"]["quiet_every"] == 1.0


def test_the_workers_path_prints_the_last_lines_the_trigger_left_to_it(result):
    logs = result["ours"]["logs"]
    worker = logs["worker_path"]
    assert worker["jobs"] == logs["jobs_with_markers"]
    # Every job's last line reached its task log: from the trigger, or on the worker from a marker.
    assert logs["jobs_with_last_line"] + worker["jobs_with_last_line"] == N


def test_requests_are_reported_whole_tracking_log_reads_and_admission(result):
    for side in ("ours", "cncf"):
        whole = result[side]["requests"]
        for span in ("window", "lifetime"):
            parts = whole[span]
            assert set(parts) == {"tracking", "log_reads", "admission", "all", "seconds"}
            assert parts["all"]["requests"] == sum(
                parts[k]["requests"] for k in ("tracking", "log_reads", "admission")
            )
    ours = result["ours"]["requests"]["lifetime"]
    # The triggers only observe: the admission controller, a process of its own, unsuspends the jobs.
    assert ours["admission"]["requests"] == 0
    assert ours["log_reads"]["requests"] > 0
    assert result["cncf"]["requests"]["lifetime"]["log_reads"]["requests"] == 0


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


def test_our_trigger_writes_nothing_and_reads_its_pods_once_at_the_end(result):
    lifetime = result["ours"]["lifetime"]["by_key"]
    assert "patch jobs" not in lifetime
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


def test_the_report_renders_both_clusters_side_by_side(bench, result):
    _, run = bench
    text = "\n".join(run.workload_tables({"sim": [result], "real": [result]}))
    assert f"| {N:,} | real plane |" in text and f"| {N:,} | stand-in |" in text
    assert "ours: log streams and reads" in text and "lines: polled" in text
    assert "last line in the task log: trigger / worker / missing" in text


def test_a_ratio_is_given_only_where_both_sides_sent_requests(bench):
    bench_tracking, _ = bench
    # One window in which its loop stalled (60 requests) and one in which it polled (1,000).
    windows = [{"requests": 60, "seconds": 30.0}, {"requests": 1000, "seconds": 30.0}]
    # Ours sent none: no ratio against an assumed floor, only that fact.
    none = bench_tracking.windows_ratio({"requests": 0, "seconds": 30.0}, windows)
    assert none["value"] is None and none["ours_none"] is True
    assert bench_tracking.windows_ratio({"requests": 3, "seconds": 30.0}, windows) == {
        "value": pytest.approx(530.0 / 3),
        "lower_bound": False,
    }
    assert bench_tracking.windows_ratio({"requests": 0, "seconds": 30.0}, [])["value"] is None
