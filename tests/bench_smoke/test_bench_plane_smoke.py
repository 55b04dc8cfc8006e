"""The tracking benchmark's real-plane mode at a tiny size: our trigger follows jobs on the real control
plane (kube-apiserver, etcd, the Job controller, kwok and the scenario player) to their end, with the
talking containers' lines written into the CRI log files kwok serves.

Proves the mode works (jobs created over the API, the plane's own transitions recorded by a watcher,
requests counted in the tracker's client, every line timed); asserts counts and structure only, never
speed. Runs only on a plane: ``AIRFLOW_JOBS_TEST_KUBECONFIG=/tmp/NAME-plane/kubeconfig`` (started with
``scripts/cluster up``, whose time scale must be 1).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
KUBECONFIG = os.environ.get("AIRFLOW_JOBS_TEST_KUBECONFIG")
N = 4

pytestmark = [
    pytest.mark.real_cluster,
    pytest.mark.timeout(240),
    pytest.mark.skipif(not KUBECONFIG, reason="needs a real plane: AIRFLOW_JOBS_TEST_KUBECONFIG"),
]


@pytest.fixture(scope="module")
def result():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import bench_tracking

        yield bench_tracking.run_tracking(
            N,
            time_scale=1.0,
            window=2.0,
            spread=2.0,
            startup=12.0,
            cncf=False,
            cluster="real",
            kubeconfig=KUBECONFIG,
            say=lambda *_: None,
        )
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_every_job_on_the_plane_ends_with_one_success_event(result):
    assert result["cluster"] == "real"
    assert result["ours"]["statuses"] == {"success": N}
    assert not result["ours"]["errors"]
    # The plane's transitions come from a watcher of the API server: a Complete time for every job.
    assert result["ours"]["latency"]["final_event"]["count"] == N


def test_the_players_lines_reach_the_task_logs_timed_and_every_last_line_is_accounted(result):
    clock = result["ours"]["line_latency"]
    assert clock["ticks"] > 0 and clock["writer_lag"]["count"] == clock["ticks"]
    logs = result["ours"]["logs"]
    assert logs["jobs_with_last_line"] + logs["worker_path"]["jobs_with_last_line"] == N


def test_the_requests_are_counted_in_the_trackers_client_and_the_plane_reports_its_processes(result):
    lifetime = result["ours"]["requests"]["lifetime"]
    # The triggers only observe: the admission controller, a process of its own, unsuspends the jobs.
    assert lifetime["admission"]["requests"] == 0
    assert "patch jobs" not in result["ours"]["lifetime"]["by_key"]
    assert {"kube-apiserver", "etcd", "kwok", "scenario-player"} <= set(result["plane"]["processes"])
    assert result["simulator"] is None
