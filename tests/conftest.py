"""Suite-wide set-up: every test runs against a throw-away AIRFLOW_HOME, never ~/airflow."""

from __future__ import annotations

import os
import tempfile

import pytest

# Set before anything imports airflow, so its config and SQLite DB land in a private directory.
_home = tempfile.mkdtemp(prefix="ajp-airflow-home-")
os.environ.setdefault("AIRFLOW_HOME", _home)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "True")


# --- real-cluster acceptance (docs/deploying.md): AIRFLOW_JOBS_TEST_KUBECONFIG selects a cluster ---

REAL_CLUSTER_ENV = "AIRFLOW_JOBS_TEST_KUBECONFIG"
# The fixtures that stand up a cluster (directly or through others): sim_fixtures.cluster_fixture's, and
# the end-to-end stack (tests/e2e/stack.py), whose example DAGs' jobs the simulator scripts.
CLUSTER_FIXTURES = {"cluster", "stack"}
NOT_PORTABLE = (
    "runs on the simulator only: it scripts pods through the simulator's fault injection "
    "(sim.airflow-jobs.io/scenario, node loss, request counters) or reads its internals"
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a real cluster, run the tests marked real_cluster; skip every other test that uses a cluster,
    with the reason (its fault_injection marker's, else the general one)."""
    if not os.environ.get(REAL_CLUSTER_ENV):
        return
    for item in items:
        injected = item.get_closest_marker("fault_injection")
        if injected is not None:
            reason = injected.args[0] if injected.args else NOT_PORTABLE
            item.add_marker(pytest.mark.skip(reason=f"{REAL_CLUSTER_ENV} is set: {reason}"))
        elif CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ())) and not item.get_closest_marker(
            "real_cluster"
        ):
            item.add_marker(pytest.mark.skip(reason=f"{REAL_CLUSTER_ENV} is set: {NOT_PORTABLE}"))
