"""Suite-wide set-up: every test runs against a throw-away AIRFLOW_HOME, never ~/airflow."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest
from hypothesis import settings

from tests.examples_budget import FULL
from tests.patience import stretch

# Set before anything imports airflow, so its config and SQLite DB land in a private directory.
_home = tempfile.mkdtemp(prefix="ajp-airflow-home-")
os.environ.setdefault("AIRFLOW_HOME", _home)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "True")
# Triggers driven in this process have no scheduler whose stale executor event they could race
# (jobs/stale_event.py): they report at once. The Airflow the e2e tests start keeps the default.
os.environ.setdefault("AIRFLOW__AIRFLOW_JOBS__RESUME_SETTLE_SECONDS", "0")

# Hypothesis: `full` draws each property test's own count; `fast` (scripts/test --fast) a tenth of it
# (tests/examples_budget.py). No deadline: a loaded machine must not fail a correct rule.
settings.register_profile("full", max_examples=FULL, deadline=None)
settings.register_profile("fast", max_examples=FULL // 10, deadline=None)
settings.load_profile(os.environ.get("AJP_HYPOTHESIS_PROFILE", "full"))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Remove the throw-away AIRFLOW_HOME this run made (each run used to leave one in the temp dir)."""
    if os.environ.get("AIRFLOW_HOME") == _home and not hasattr(session.config, "workerinput"):
        shutil.rmtree(_home, ignore_errors=True)


# pytest-timeout ends a test that hangs: its 300 s (pyproject) are a quiet machine's, stretched by the
# machine's load at collection (tests/patience.py), so a loaded machine fails no correct test.
DEFAULT_TIMEOUT = 300


def _stretch_timeouts(items: list[pytest.Item]) -> None:
    factor = stretch()
    for item in items:
        marker = item.get_closest_marker("timeout")
        seconds = marker.args[0] if marker is not None and marker.args else DEFAULT_TIMEOUT
        if factor > 1.0:
            item.add_marker(pytest.mark.timeout(seconds * factor), append=False)


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
    _stretch_timeouts(items)
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


@pytest.fixture(autouse=True)
def _policies_left_on_the_plane(request: pytest.FixtureRequest):
    """On the real plane the tests share its namespaces, and the admission controller routes every job of
    a namespace by all the quota policies there: a policy a test put in ``default`` and left would hold
    the next tests' jobs of other groups. Each real_cluster test takes away the policies it added there."""
    kubeconfig = os.environ.get("AIRFLOW_JOBS_TEST_KUBECONFIG")
    if not kubeconfig or request.node.get_closest_marker("real_cluster") is None:
        yield
        return
    import asyncio
    import contextlib

    from airflow_jobs_plugin.cluster.kube import CONFIGMAPS, KubeClient, KubeError
    from airflow_jobs_plugin.queueing.pools import is_policy

    async def policies() -> set[str]:
        client = await KubeClient.from_kubeconfig(kubeconfig)
        try:
            listed = await client.list(CONFIGMAPS, "default")
            return {
                c["metadata"]["name"]
                for c in listed["items"]
                if is_policy(c["metadata"]["name"], c["metadata"].get("labels") or {})
            }
        finally:
            await client.close()

    async def remove(names: set[str]) -> None:
        client = await KubeClient.from_kubeconfig(kubeconfig)
        try:
            for name in names:
                with contextlib.suppress(KubeError):
                    await client.delete(CONFIGMAPS, "default", name)
        finally:
            await client.close()

    before = asyncio.run(policies())
    yield
    left = asyncio.run(policies()) - before
    if left:
        asyncio.run(remove(left))
