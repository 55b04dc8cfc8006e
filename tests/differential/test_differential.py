"""The differential set: each scenario runs on the real control plane and on a simulator beside it, and
what a client observes must be the same (docs/simulator.md, "The differential set").

Runs where a real cluster is named (``AIRFLOW_JOBS_TEST_KUBECONFIG``, e.g. the plane ``scripts/cluster
up --with mpi-operator,kueue`` starts; ``scripts/test`` does it); skipped, saying so, elsewhere. A
failure lists every observation that differs, the real cluster's value first: each is a simulator bug
to fix in ``simulator/airflow_jobs_sim/`` or to explain in docs/simulator.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import scenarios  # noqa: E402
from airflow_jobs_sim import ClusterConfig, SimCluster  # noqa: E402
from airflow_jobs_sim.config import KueueConfig  # noqa: E402
from harness import Cluster, differences, observe_both  # noqa: E402
from sim_fixtures import real_cluster_kubeconfig  # noqa: E402

pytestmark = [
    pytest.mark.real_cluster,
    pytest.mark.skipif(
        real_cluster_kubeconfig() is None,
        reason="compares the simulator with a real cluster: set AIRFLOW_JOBS_TEST_KUBECONFIG "
        "(scripts/cluster up --kubeconfig PATH --with mpi-operator,kueue)",
    ),
]


@pytest.fixture(scope="module")
def clusters():
    """The real cluster and a simulator shaped like the plane (3 GPU nodes, the MPI operator, Kueue with
    its shipped configuration), at the real cluster's speed, so both play each scenario alike."""
    real = real_cluster_kubeconfig()
    assert real is not None
    with SimCluster(ClusterConfig(nodes=3, time_scale=1.0, kueue=KueueConfig())) as sim:
        yield (
            Cluster(real, "real", serves_accounts=True),
            Cluster(sim.kubeconfig_path, "sim", serves_accounts=False),
        )


# The differences that stay, each explained in docs/simulator.md ("The differential set"), by scenario.
# A scenario must differ in exactly these: a new difference is a simulator bug, and one that went away
# means the simulator was fixed and this list (and the docs) must say so.
KNOWN: dict[str, set[str]] = {
    # The MPIJob CRD's schema and Kueue's MPIJob webhook are not modelled (hand-written rules instead).
    "invalid_mpijob": {"wrong_type", "unknown_field_strict"},
    # batch/v1 Job update validation reports each selector/labels mismatch twice; the simulator once.
    "immutable_job_fields": {"selector_change"},
    # The Orphan policy's `orphan` finalizer: the simulator orphans at once and answers a Status.
    "job_pods_deleted_with_job": {"default_delete_body_kind"},
}


def same(clusters, scenario) -> None:
    real, sim = observe_both(scenario, *clusters)
    assert real, f"{scenario.__name__} observed nothing"
    diffs = differences(real, sim)
    known = KNOWN.get(scenario.__name__, set())
    new = [d for d in diffs if d.split(":", 1)[0] not in known]
    assert not new, f"{scenario.__name__}: {len(new)} of {len(real)} observations differ:\n" + "\n".join(new)
    gone = known - {d.split(":", 1)[0] for d in diffs}
    assert not gone, (
        f"{scenario.__name__}: {sorted(gone)} no longer differ: drop them from KNOWN and the docs"
    )


# --- the API server ---------------------------------------------------------------------------------


def test_invalid_job_spec(clusters):
    same(clusters, scenarios.invalid_job_spec)


def test_invalid_pod_spec(clusters):
    same(clusters, scenarios.invalid_pod_spec)


def test_invalid_mpijob(clusters):
    same(clusters, scenarios.invalid_mpijob)


def test_not_found(clusters):
    same(clusters, scenarios.not_found)


def test_stale_update_conflict(clusters):
    same(clusters, scenarios.stale_update_conflict)


def test_unsupported_media_type(clusters):
    same(clusters, scenarios.unsupported_media_type)


def test_strict_field_validation(clusters):
    same(clusters, scenarios.strict_field_validation)


def test_immutable_job_fields(clusters):
    same(clusters, scenarios.immutable_job_fields)


def test_job_defaults(clusters):
    same(clusters, scenarios.job_defaults)


def test_lease_api(clusters):
    same(clusters, scenarios.lease_api)


# --- the Job controller -----------------------------------------------------------------------------


def test_job_complete_watch(clusters):
    same(clusters, scenarios.job_complete_watch)


def test_job_backoff_limit_exceeded(clusters):
    same(clusters, scenarios.job_backoff_limit_exceeded)


def test_job_deadline_exceeded(clusters):
    same(clusters, scenarios.job_deadline_exceeded)


def test_job_pod_failure_policy(clusters):
    same(clusters, scenarios.job_pod_failure_policy)


def test_job_suspended_then_resumed(clusters):
    same(clusters, scenarios.job_suspended_then_resumed)


# --- pods: the STATUS column ------------------------------------------------------------------------


def test_pod_init_containers_status(clusters):
    same(clusters, scenarios.pod_init_containers_status)


def test_pod_error_exit_status(clusters):
    same(clusters, scenarios.pod_error_exit_status)


def test_pod_oom_killed_status(clusters):
    same(clusters, scenarios.pod_oom_killed_status)


def test_pod_err_image_pull_status(clusters):
    same(clusters, scenarios.pod_err_image_pull_status)


def test_pod_crash_loop_status(clusters):
    same(clusters, scenarios.pod_crash_loop_status)


def test_pod_create_container_config_error_status(clusters):
    same(clusters, scenarios.pod_create_container_config_error_status)


# --- owner references and garbage collection ---------------------------------------------------------


def test_job_pods_deleted_with_job(clusters):
    same(clusters, scenarios.job_pods_deleted_with_job)


def test_job_ttl_after_finished(clusters):
    same(clusters, scenarios.job_ttl_after_finished)


def test_pod_deleted_with_grace_period(clusters):
    same(clusters, scenarios.pod_deleted_with_grace_period)


# --- the MPI operator and Kueue ---------------------------------------------------------------------


def test_mpijob_runs_to_success(clusters):
    same(clusters, scenarios.mpijob_runs_to_success)


def test_mpijob_failed_worker(clusters):
    same(clusters, scenarios.mpijob_failed_worker)


def test_kueue_workload_lifecycle(clusters):
    same(clusters, scenarios.kueue_workload_lifecycle)


def test_kueue_borrowing(clusters):
    same(clusters, scenarios.kueue_borrowing)
