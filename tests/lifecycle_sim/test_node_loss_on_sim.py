"""Jobs on a lost node, read from the simulator's objects: UNKNOWN, DEGRADED and FAILED with NodeLost.

A module of its own, so the cluster whose nodes are lost and restored here is not shared with the
other scenarios.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from airflow_jobs_plugin.lifecycle import JobState, Reason

from .bench import FOREVER, Bench, Seen, batch_job, check, is_running, mpi_job

# Simulated seconds the taint manager waits before it marks a lost node's pods NodeLost.
EVICTION_AFTER = 5


def node_ready(bench: Bench, node: str) -> bool:
    conditions = bench.store.get("nodes", node)["status"]["conditions"]
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


@contextmanager
def lost(bench: Bench, node: str) -> Iterator[None]:
    """``node`` is lost for the block, and Ready again after it."""
    bench.cluster.controllers.lose_node(node, eviction_after=EVICTION_AFTER)
    try:
        yield
    finally:
        bench.cluster.controllers.restore_node(node)
        deadline = time.monotonic() + 10
        while not node_ready(bench, node):
            assert time.monotonic() < deadline, f"{node} did not come back"
            time.sleep(0.02)


def node_lost(seen: Seen, prefix: str = "") -> bool:
    pods = [p for p in seen.pods if p["metadata"]["name"].startswith(prefix)]
    return bool(pods) and all((p.get("status") or {}).get("reason") == "NodeLost" for p in pods)


def test_a_job_whose_only_pod_is_stranded_on_a_lost_node_is_unknown(bench):
    # Replaced only once terminal, which a pod on a lost node never becomes: nothing else runs.
    name = bench.create(batch_job("train", {"main": FOREVER}, podReplacementPolicy="Failed"))
    seen = bench.wait("Job", name, lambda s: is_running(s.pod()))
    with lost(bench, seen.pod()["spec"]["nodeName"]):
        seen = bench.wait("Job", name, node_lost)
        check(bench, seen, JobState.UNKNOWN, Reason.NODE_LOST, {"worker-0": "Unknown"})


def test_a_job_out_of_retries_when_its_node_is_lost_fails_with_nodelost(bench):
    name = bench.create(batch_job("train", {"main": FOREVER}, backoffLimit=0))
    seen = bench.wait("Job", name, lambda s: is_running(s.pod()))
    with lost(bench, seen.pod()["spec"]["nodeName"]):
        seen = bench.wait("Job", name, lambda s: node_lost(s) and s.condition("FailureTarget"))
        check(bench, seen, JobState.FAILED, Reason.NODE_LOST, {"worker-0": "Unknown"})


def test_an_mpi_job_whose_workers_are_on_a_lost_node_is_degraded_while_its_launcher_runs(bench):
    name = bench.create(
        mpi_job("train", launcher={"main": FOREVER}, launcher_node="sim-node-0", worker_node="sim-node-1")
    )
    bench.wait("MPIJob", name, lambda s: len(s.pods) == 3 and all(is_running(p) for p in s.pods))
    with lost(bench, "sim-node-1"):
        seen = bench.wait("MPIJob", name, lambda s: node_lost(s, "train-worker-"))
        check(
            bench,
            seen,
            JobState.DEGRADED,
            Reason.NODE_LOST,
            {"launcher": "Running", "worker-0": "Unknown", "worker-1": "Unknown"},
        )
