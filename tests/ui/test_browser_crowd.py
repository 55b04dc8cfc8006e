"""Stop clicked in a real browser on a job of a crowded namespace: the page comes back with the job stopped.

A namespace holding thousands of jobs is where the page after an action used to wait for the whole view
to be rebuilt (``docs/benchmarks.md``: 71.5 s at 51,000 jobs). Here 3,000 of the product's jobs wait in
the simulated cluster beside one running job; headless Chromium opens the running job's page through a
real Airflow API server, clicks Stop and confirms, and the page it lands on shows the action's answer,
then the job STOPPED, with who stopped it in its timeline. The assertions are on the page, not on time.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from airflow_jobs_sim import ClusterConfig, SimCluster

from airflow_jobs_plugin.cluster.kube import JOBS, KubeClient
from airflow_jobs_plugin.jobs.manifests import build_manifest
from airflow_jobs_plugin.jobs.spec import TaskIdentity, validate
from airflow_jobs_plugin.queueing.quota.ledger import unsuspend_patch
from tests.ui.browser import Browser, chromium_binary, in_ci

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
BINARY = chromium_binary()
NAMESPACE = "crowd"
CROWD = 3_000
SCENARIO = "sim.airflow-jobs.io/scenario"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        BINARY is None and not in_ci(),
        reason="Chromium is not installed (Debian packages chromium and chromium-driver; .ci/run installs them)",
    ),
]


def body(task: str, run: float | None) -> dict:
    identity = TaskIdentity("crowded", task, "manual__1", -1, 1)
    spec = validate(
        image="registry.example/trainer:1",
        group="vision",
        user="alice",
        gpus=1,
        namespace=NAMESPACE,
        ttl_after_finished=None,
        annotations={SCENARIO: json.dumps({"*": {"run": run}})},
    )
    return build_manifest(
        spec, name=identity.job_name(1), task=identity, attempt=1, queued_at=datetime.now(timezone.utc)
    )


async def start_one(kubeconfig: str) -> str:
    """The job the test stops, created and admitted through the API as the product does without a
    quota pool (one write unsuspends it); its name."""
    client = await KubeClient.from_kubeconfig(kubeconfig)
    try:
        created = await client.create(JOBS, NAMESPACE, body("train", None))
        now = datetime.now(timezone.utc)
        name = created["metadata"]["name"]
        await client.merge_patch(JOBS, NAMESPACE, name, unsuspend_patch(created, now, conditional=False))
        return name
    finally:
        await client.close()


def populate(sim: SimCluster) -> str:
    """``CROWD`` waiting jobs, written straight into the simulator's store on its own thread (through
    its object store's create, with the API server's defaults and its controllers watching, without
    3,000 HTTP round trips), then one running job; the running job's name."""
    bodies = [body(f"waiting-{i:04d}", None) for i in range(CROWD)]

    def create_all() -> None:
        sim.store.create("namespaces", {"metadata": {"name": NAMESPACE}})
        for b in bodies:
            sim.store.create("jobs", b, NAMESPACE)

    sim.call(create_all)
    return asyncio.run(start_one(sim.kubeconfig_path))


@pytest.fixture(scope="module")
def crowded(tmp_path_factory):
    """The simulated cluster with the crowd, and an Airflow API server reading its namespace."""
    from tests.ui.server import start

    # No admission controller: the crowd waits as it would while none is admitting (with one and no
    # pool, it would let all 3,000 go and they would take the nodes from the running job).
    with SimCluster(ClusterConfig(nodes=2, gpus_per_node=8, time_scale=0.02)) as sim:
        name = populate(sim)
        server = start(tmp_path_factory.mktemp("airflow-home"), sim.kubeconfig_path, namespace=NAMESPACE)
        try:
            yield server, name
        finally:
            server.stop()


STATE = "document.querySelector('dd[data-field=state] .badge').dataset.state"


def test_stop_clicked_on_a_job_among_thousands_lands_on_its_page_stopped(crowded, tmp_path):
    if BINARY is None:
        pytest.fail("CI must run the browser test: chromium is missing")
    server, name = crowded
    page = f"{server.url}/airflow-jobs/jobs/{NAMESPACE}/{name}"

    async def scenario() -> None:
        async with Browser(BINARY, tmp_path / "profile") as browser:
            await browser.set_cookie(server.url, "_token", server.token("admin"))
            # The overview first, as a user comes: it lists the crowd.
            await browser.open(f"{server.url}/airflow-jobs/")
            await browser.wait_for("document.querySelectorAll('tr.job').length > 0", timeout=120)
            await browser.open(page)
            await browser.wait_for(f"{STATE} === 'RUNNING'", timeout=60)

            await browser.evaluate(
                "document.querySelector('details.confirm[data-action=stop] summary').click()"
            )
            await browser.evaluate("document.querySelector('button[data-confirm=stop]').click()")
            # The form posts and the browser follows the answer back to the job page.
            notice = await browser.wait_for(
                "(() => { const n = document.querySelector('#notice'); return n && n.textContent; })()",
                timeout=60,
            )
            assert notice.startswith(f"job/{name} stopped")
            # While its pod stops it reads TERMINATING; the page's own refresh then shows it STOPPED.
            await browser.wait_for(f"{STATE} === 'STOPPED'", timeout=60)
            facts = await browser.evaluate(
                """({
                  message: document.querySelector('dd[data-field=message]').textContent,
                  timeline: [...document.querySelectorAll('#timeline table tr')].map(r => r.textContent),
                  actions: [...document.querySelectorAll('.actions [data-action]')].map(e => e.dataset.action),
                  stretches: [...document.querySelectorAll('svg.state-timeline g[data-state]')].map(g => g.dataset.state),
                })"""
            )
            assert facts["message"].startswith("stopped by admin at ")
            assert any("STOPPED" in row and "stopped by admin" in row for row in facts["timeline"]), facts
            assert facts["actions"] == ["resume", "cancel"]
            assert facts["stretches"][-1] == "STOPPED"
            await browser.screenshot(ARTIFACTS / "ui-crowd-stopped.png")

    asyncio.run(scenario())
