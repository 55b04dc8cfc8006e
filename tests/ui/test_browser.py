"""A real browser on the GPU Jobs pages served by a real Airflow API server, against the simulated cluster.

Headless Chromium loads the pages with Airflow's session cookie (a JWT from Airflow's token endpoint),
the DOM is checked, and screenshots land in ``test-artifacts/``. Without Chromium the test is skipped
(``.ci/run`` installs it, so CI always runs it).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.ui.browser import Browser, chromium_binary, in_ci

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
BINARY = chromium_binary()

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        BINARY is None and not in_ci(),
        reason="Chromium is not installed (Debian packages chromium and chromium-driver; .ci/run installs them)",
    ),
]

OVERVIEW_FACTS = """({
  jobs: Object.fromEntries([...document.querySelectorAll('tr.job')].map(r => [r.dataset.job, r.dataset.state])),
  pools: [...document.querySelectorAll('tr.pool')].map(r => r.dataset.group),
  users: [...document.querySelectorAll('tr.user')].map(r => r.dataset.group + '/' + r.dataset.user),
  queued: [...document.querySelectorAll('tr.queued')].map(r => [r.dataset.job, r.dataset.reason,
           r.querySelector('td').textContent]),
  charts: [...document.querySelectorAll('svg.usage-chart')].map(s => s.dataset.group),
  chartPaths: document.querySelectorAll('svg.usage-chart path.usage').length,
  scripts: [...document.scripts].filter(s => s.src).length,
  stylesheets: document.querySelectorAll('link[rel=stylesheet]').length,
})"""

JOB_FACTS = """({
  title: document.querySelector('h1').textContent,
  state: document.querySelector('dd[data-field=state] .badge').dataset.state,
  replicas: [...document.querySelectorAll('tr.replica')].map(r => [r.dataset.replica, r.dataset.status]),
  timeline: document.querySelectorAll('svg.state-timeline g[data-state]').length,
  events: [...document.querySelectorAll('tr.event')].map(r => r.dataset.reason),
  launcherLog: (document.querySelector('pre.log[data-rank="-1"]') || {}).textContent,
  cancel: !!document.querySelector('button.cancel'),
  dagRun: (document.querySelector('dd[data-field="DAG run"] a') || {}).getAttribute?.call(
    document.querySelector('dd[data-field="DAG run"] a'), 'href'),
})"""


def test_pages_in_a_real_browser(api_server, population, tmp_path):
    if BINARY is None:
        pytest.fail("CI must run the browser test: chromium is missing")
    token = api_server.token("admin")

    async def scenario() -> None:
        async with Browser(BINARY, tmp_path / "profile") as browser:
            await browser.set_cookie(api_server.url, "_token", token)

            # The overview: pools, queues, usage charts and jobs in several states.
            await browser.open(f"{api_server.url}/airflow-jobs/")
            facts = await browser.evaluate(OVERVIEW_FACTS)
            names = population.names
            assert facts["jobs"][names["runner"]] == "RUNNING"
            assert facts["jobs"][names["mpi"]] == "RUNNING"
            assert facts["jobs"][names["done"]] == "SUCCEEDED"
            assert facts["jobs"][names["broken"]] == "FAILED"
            assert facts["jobs"][names["waiting"]] == "QUEUED"
            assert facts["pools"] == ["nlp", "vision"]
            assert "vision/alice" in facts["users"] and "nlp/dave" in facts["users"]
            assert facts["queued"] == [[names["waiting"], "GroupQuota", "1"]]
            assert facts["charts"] == ["nlp", "vision"] and facts["chartPaths"] == 2
            assert (facts["scripts"], facts["stylesheets"]) == (0, 0)  # nothing loaded from elsewhere
            await browser.screenshot(ARTIFACTS / "ui-overview.png")

            # The page refreshes itself: its <main> is replaced by a freshly fetched one.
            await browser.evaluate("document.querySelector('main').dataset.stale = 'yes'")
            await browser.wait_for("document.body.dataset.refreshed", timeout=20)
            assert await browser.evaluate("document.querySelector('main').dataset.stale") is None
            assert await browser.evaluate(
                f"!!document.querySelector('tr.job[data-job=\"{names['runner']}\"]')"
            )

            # A job page: timeline, launcher and workers with kubectl STATUS, events, log tail by rank.
            await browser.open(f"{api_server.url}/airflow-jobs/jobs/default/{names['mpi']}")
            job = await browser.evaluate(JOB_FACTS)
            assert job["title"] == f"GPU job {names['mpi']}"
            assert job["state"] == "RUNNING"
            assert job["replicas"] == [
                ["launcher", "Running"],
                ["worker-0", "Running"],
                ["worker-1", "Running"],
            ]
            assert job["timeline"] >= 3
            assert "MPIJobCreated" in job["events"]
            assert "mpirun started" in job["launcherLog"]
            assert job["cancel"]
            i = population.identities["mpi"]
            assert job["dagRun"] == f"/dags/{i.dag_id}/runs/{i.run_id}"
            await browser.screenshot(ARTIFACTS / "ui-job.png")

            # The task-instance view (the operator's extra link) shows the task's job.
            await browser.open(
                f"{api_server.url}/airflow-jobs/jobs/{i.dag_id}/{i.task_id}/{i.run_id}?map_index=-1"
            )
            assert (
                await browser.evaluate("document.querySelector('h1').textContent")
                == f"GPU job {names['mpi']}"
            )

            # Inside Airflow's own UI: the nav entry's page embeds the plugin page in a frame.
            await browser.open(f"{api_server.url}/plugin/gpu-jobs")
            await browser.wait_for(
                "(() => { const f = document.querySelector('iframe[title=\"GPU Jobs\"]');"
                " return f && f.contentDocument && f.contentDocument.querySelectorAll('tr.job').length; })()",
                timeout=30,
            )
            await browser.screenshot(ARTIFACTS / "ui-in-airflow.png")

    asyncio.run(scenario())
    assert (ARTIFACTS / "ui-overview.png").stat().st_size > 10_000
