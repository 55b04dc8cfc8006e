"""A real browser on the GPU Jobs pages served by a real Airflow API server, against the simulated cluster.

Headless Chromium loads the pages with Airflow's session cookie (a JWT from Airflow's token endpoint),
the DOM is checked, and screenshots land in ``test-artifacts/``. Without Chromium the test is skipped
(``.ci/run`` installs it, so CI always runs it).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path

import pytest

from airflow_jobs_plugin.cluster.kube import CONFIGMAPS, KubeClient
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.plugin import theme
from airflow_jobs_plugin.queueing import quota
from airflow_jobs_plugin.queueing.quota.ledger import read_ledger
from airflow_jobs_plugin.readmodel.inspect import JobNotFound, find_job
from tests.ui.browser import Browser, chromium_binary, in_ci
from tests.ui.conftest import NAMESPACE, POLICY

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
  cancel: !!document.querySelector('details.confirm[data-action=cancel]'),
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

            # The overview: pools, queues, usage charts and jobs in several states. On a server that has
            # not built its whole view yet the first page is the newest page, without charts; the page's
            # own refresh brings them once the view is built.
            await browser.open(f"{api_server.url}/airflow-jobs/")
            await browser.wait_for("document.querySelectorAll('svg.usage-chart').length === 2", timeout=90)
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

            # Hovering a step of a chart shows its value and time beside the pointer at once.
            box = await browser.evaluate(
                "(() => { const r = document.querySelector('svg.usage-chart g.point rect').getBoundingClientRect();"
                " return [r.x + r.width / 2, r.y + r.height / 2]; })()"
            )
            await browser.send("Input.dispatchMouseEvent", type="mouseMoved", x=box[0], y=box[1])
            tip = await browser.wait_for(
                "(() => { const t = document.querySelector('#chart-tip');"
                " return t && t.style.display === 'block' && t.textContent; })()"
            )
            assert re.fullmatch(r"\d\d:\d\d:\d\d-\d\d:\d\d:\d\d UTC: \d+ GPUs? held \(quota \d+\)", tip), tip
            await browser.send("Input.dispatchMouseEvent", type="mouseMoved", x=2, y=2)
            await browser.wait_for("document.querySelector('#chart-tip').style.display === 'none'")

            # The page refreshes itself: its <main> is replaced by a freshly fetched one.
            await browser.evaluate(
                "delete document.body.dataset.refreshed; document.querySelector('main').dataset.stale = 'yes'"
            )
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

            # Airflow's frame is narrower than the window: its charts still share a row, two by two, at
            # the width of a laptop's browser too.
            two_in_a_row = (
                "(() => { const d = document.querySelector('iframe[title=\"GPU Jobs\"]').contentDocument;"
                " const f = [...d.querySelectorAll('#usage figure')].map(e => e.getBoundingClientRect());"
                " return f.length === 2 && f[0].top === f[1].top && f[0].width > 300"
                " && f[1].left > f[0].right; })()"
            )
            await browser.wait_for(two_in_a_row, timeout=30)
            await browser.send(
                "Emulation.setDeviceMetricsOverride",
                width=1100,
                height=900,
                deviceScaleFactor=1,
                mobile=False,
            )
            try:
                await browser.wait_for(two_in_a_row, timeout=30)
            finally:
                await browser.send("Emulation.clearDeviceMetricsOverride")

            # The node view, reached by its link inside Airflow's frame.
            inside = "document.querySelector('iframe[title=\"GPU Jobs\"]').contentDocument"
            await browser.evaluate(f"{inside}.querySelector('header a[href$=\"/nodes\"]').click()")
            await browser.wait_for(
                f"(() => {{ const d = {inside}; return !!(d && d.querySelector('#totals')); }})()", timeout=30
            )
            nodes = await browser.evaluate(
                f"(() => {{ const d = {inside}; return {{"
                "totals: d.querySelector('#totals').textContent,"
                "nodes: [...d.querySelectorAll('tr.node')].map(r => r.dataset.node),"
                "products: [...d.querySelectorAll('tr.node')].map(r => r.dataset.product),"
                "holders: [...d.querySelectorAll('tr.holder')].map(r => r.dataset.job)}; })()"
            )
            assert nodes["totals"].split(" nvidia.com/gpu in use")[0].endswith(" of 16"), nodes["totals"]
            assert nodes["totals"].endswith(" free, on 2 nodes"), nodes["totals"]
            assert len(nodes["nodes"]) == 2 and names["runner"] in nodes["holders"]
            assert len(set(nodes["nodes"])) == 2  # a node once, whatever devices it offers
            assert sorted(nodes["products"]) == ["", "NVIDIA-H100-80GB-HBM3"]
            await browser.screenshot(ARTIFACTS / "ui-nodes-in-airflow.png")

    asyncio.run(scenario())
    assert (ARTIFACTS / "ui-overview.png").stat().st_size > 10_000


COHORT_POLICY = POLICY.replace("vision: {gpus: 4,", "vision: {gpus: 4, cohort: research,").replace(
    "nlp: {gpus: 12,", "nlp: {gpus: 12, cohort: research,"
)
POOL_ROW = (
    "(() => {{ const r = document.querySelector('tr.pool[data-group=\"{group}\"]');"
    " return r && r.dataset.cohort === '{cohort}' && [...r.querySelectorAll('td')].map(c => c.textContent); }})()"
)


def test_a_cohort_row_on_the_pools_page(api_server, population, tmp_path):
    """Once the policy puts both groups in a cohort, their rows name it with what each borrowed and lent."""
    if BINARY is None:
        pytest.fail("CI must run the browser test: chromium is missing")
    token = api_server.token("admin")

    async def set_policy(text: str) -> None:
        client = await KubeClient.from_kubeconfig(population.kubeconfig)
        try:
            body = await client.get(CONFIGMAPS, NAMESPACE, quota.DEFAULT_POLICY_CONFIGMAP)
            body["data"] = {quota.POLICY_KEY: text}
            await client.replace(CONFIGMAPS, NAMESPACE, body)
        finally:
            await client.close()

    async def scenario() -> None:
        async with Browser(BINARY, tmp_path / "profile") as browser:
            await browser.set_cookie(api_server.url, "_token", token)
            await set_policy(COHORT_POLICY)
            try:
                await browser.open(f"{api_server.url}/airflow-jobs/")
                # The page refreshes itself; the server's copy of the cluster may be a few seconds old.
                vision = await browser.wait_for(
                    POOL_ROW.format(group="vision", cohort="research"), timeout=90
                )
                nlp = await browser.evaluate(POOL_ROW.format(group="nlp", cohort="research"))
                head = await browser.evaluate(
                    "[...document.querySelectorAll('#pools th')].map(h => h.textContent)"
                )
                assert head[:9] == [
                    "group",
                    "user",
                    "device",
                    "quota",
                    "most",
                    "used GPUs",
                    "free",
                    "cohort",
                    "borrowed",
                ]
                assert head[9] == "lent"
                # group, user, device, quota, most (4 + the 12 nlp lends), used, free, cohort, borrowed, lent
                assert vision[0] == "vision" and vision[2:5] == ["nvidia.com/gpu", "4", "16"]
                assert vision[7] == "research"
                assert nlp[0] == "nlp" and nlp[2:5] == ["nvidia.com/gpu", "12", "16"] and nlp[7] == "research"
                assert int(vision[8]) == max(0, int(vision[5]) - 4)  # borrowed: held above its quota
                assert int(nlp[9]) == int(vision[8])  # the only lender lent all vision borrowed
                await browser.screenshot(ARTIFACTS / "ui-pools-cohort.png")
            finally:
                await set_policy(POLICY)
            # Back to separate groups for the tests after this one.
            await browser.wait_for(POOL_ROW.format(group="vision", cohort=""), timeout=90)

    asyncio.run(scenario())


FRAME = "document.querySelector('iframe[title=\"GPU Jobs\"]')"


async def frame(expression: str, browser: Browser):
    """``expression`` evaluated with ``doc`` the document of the GPU Jobs page inside Airflow's frame."""
    return await browser.evaluate(
        f"(() => {{ const doc = {FRAME}.contentDocument; return {expression}; }})()"
    )


async def until_frame(expression: str, browser: Browser, timeout: float = 60):
    """Wait until ``expression`` holds on the loaded page inside Airflow's frame; its value."""
    return await browser.wait_for(
        f"(() => {{ const f = {FRAME}; const doc = f && f.contentDocument;"
        f" return !!doc && doc.readyState === 'complete' && ({expression}); }})()",
        timeout=timeout,
    )


def test_stop_resume_and_cancel_clicked_inside_airflows_ui(api_server, population, tmp_path):
    """The buttons work inside Airflow's own page, whose frame forbids modal dialogs."""
    if BINARY is None:
        pytest.fail("CI must run the browser test: chromium is missing")
    name = population.names["framed"]
    token = api_server.token("admin")

    async def cluster() -> tuple[dict | None, set[str]]:
        client = await KubeClient.from_kubeconfig(population.kubeconfig)
        try:
            try:
                job = await find_job(client, "default", name)
            except JobNotFound:
                job = None
            held = {r.job for r in (await read_ledger(client, "default", "nlp")).ledger.reservations}
            return job, held
        finally:
            await client.close()

    async def scenario() -> None:
        async with Browser(BINARY, tmp_path / "profile") as browser:
            await browser.set_cookie(api_server.url, "_token", token)
            await browser.open(f"{api_server.url}/plugin/gpu-jobs")
            await until_frame(f"!!doc.querySelector('tr.job[data-job=\"{name}\"] a')", browser)
            # Why the page cannot ask with confirm(): Airflow's frame has no allow-modals.
            assert "allow-modals" not in await browser.evaluate(f"{FRAME}.getAttribute('sandbox')")
            assert await frame("doc.defaultView.confirm('Cancel this job?')", browser) is False

            await frame(f"doc.querySelector('tr.job[data-job=\"{name}\"] a').click()", browser)
            await until_frame("!!doc.querySelector('details.confirm[data-action=stop] summary')", browser)

            # Stop: open the in-page confirmation, then confirm.
            await frame("doc.querySelector('details.confirm[data-action=stop] summary').click()", browser)
            assert await frame("doc.querySelector('details.confirm[data-action=stop]').open", browser)
            await frame("doc.querySelector('button[data-confirm=stop]').click()", browser)
            await until_frame("!!doc.querySelector('#notice')", browser)
            assert (await frame("doc.querySelector('#notice').textContent", browser)).startswith(
                f"job/{name} stopped"
            )
            job, held = await cluster()
            assert job is not None and job["spec"]["suspend"] is True
            assert job["metadata"]["annotations"][labels.STOPPED_BY] == "admin"
            await until_frame(
                # The page refreshes itself while the pod stops (TERMINATING, then STOPPED).
                "doc.querySelector('dd[data-field=state] .badge').dataset.state === 'STOPPED'",
                browser,
            )
            await asyncio.to_thread(population.admit)  # the admitting triggerer's pass
            _, held = await cluster()
            assert name not in held  # its quota is free again
            await browser.screenshot(ARTIFACTS / "ui-stopped-in-airflow.png")

            # Resume: one click; the job waits in its queue again.
            await until_frame("!!doc.querySelector('button[data-action=resume]')", browser)
            await frame("doc.querySelector('button[data-action=resume]').click()", browser)
            await until_frame(
                "!!doc.querySelector('#notice') && doc.querySelector('#notice').textContent.includes('resumed')",
                browser,
            )
            job, _ = await cluster()
            assert job is not None and labels.STOPPED_AT not in job["metadata"]["annotations"]
            assert (
                await frame("doc.querySelector('dd[data-field=state] .badge').dataset.state", browser)
                == "QUEUED"
            )

            # Cancel: confirm in the page; the job stays on its page, CANCELLED, and holds no quota.
            await frame("doc.querySelector('details.confirm[data-action=cancel] summary').click()", browser)
            await frame("doc.querySelector('button[data-confirm=cancel]').click()", browser)
            await until_frame(
                "!!doc.querySelector('#notice') && doc.querySelector('#notice').textContent.includes('cancelled')",
                browser,
            )
            assert await frame("doc.querySelector('#notice').textContent", browser) == (
                f"job/{name} cancelled: its pods are stopped and it stays listed as cancelled until it is deleted"
            )
            await until_frame(
                "doc.querySelector('dd[data-field=state] .badge').dataset.state === 'CANCELLED'", browser
            )
            assert not await frame("!!doc.querySelector('details.confirm[data-action=cancel]')", browser)
            await browser.screenshot(ARTIFACTS / "ui-cancelled-in-airflow.png")
            job, _ = await cluster()
            assert job is not None and job["metadata"]["annotations"][labels.CANCELLED_BY] == "admin"
            await asyncio.to_thread(population.admit)
            _, held = await cluster()
            assert name not in held

    asyncio.run(scenario())


# The docs' screenshots are rewritten only when asked (AIRFLOW_JOBS_DOC_SCREENSHOTS=1): a test run must not
# change tracked files. Otherwise they land with the other artifacts.
SCREENSHOTS = (
    Path(__file__).resolve().parents[2] / "docs" / "screenshots"
    if os.environ.get("AIRFLOW_JOBS_DOC_SCREENSHOTS") == "1"
    else ARTIFACTS / "screenshots"
)
MODE_INDEX = {"light": 0, "dark": 1}

# Computed colours of a page, each beside what the theme says it should be: the expected value is set
# on a probe element, so both go through the browser's own colour parsing. sRGB (via a canvas) for
# the brightness checks.
THEME_FACTS = """(() => {
  const doc = %(doc)s;
  const win = doc.defaultView;
  const computed = (value) => {
    const probe = doc.createElement('div'); probe.style.color = value; doc.body.appendChild(probe);
    const color = win.getComputedStyle(probe).color; probe.remove(); return color;
  };
  const srgb = (color) => {
    const ctx = doc.createElement('canvas').getContext('2d'); ctx.fillStyle = color; ctx.fillRect(0, 0, 1, 1);
    const [r, g, b] = ctx.getImageData(0, 0, 1, 1).data; return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255;
  };
  const body = win.getComputedStyle(doc.body);
  const badge = (state) => {
    const found = doc.querySelector(`.badge[data-state="${state}"]`);
    return found ? win.getComputedStyle(found).backgroundColor : null;
  };
  return {
    mode: doc.documentElement.dataset.theme || null,
    bg: body.backgroundColor, fg: body.color, expectBg: computed(%(bg)s), expectFg: computed(%(fg)s),
    bgLight: srgb(body.backgroundColor), fgLight: srgb(body.color),
    running: badge('RUNNING'), succeeded: badge('SUCCEEDED'), queued: badge('QUEUED'),
    expectRunning: computed(%(running)s), expectSucceeded: computed(%(succeeded)s),
    chart: (() => {
      const p = doc.querySelector('svg path.usage') || doc.querySelector('svg.state-timeline g[data-state=RUNNING] rect');
      return p ? win.getComputedStyle(p).fill : null;
    })(),
  };
})()"""


def theme_facts(browser: Browser, mode: str, doc: str = "document"):
    i = MODE_INDEX[mode]
    values = {
        "doc": doc,
        "bg": json.dumps(theme.MODES["--bg"][i]),
        "fg": json.dumps(theme.MODES["--fg"][i]),
        "running": json.dumps(theme.PALETTE["cyan"][600]),  # Airflow's running
        "succeeded": json.dumps(theme.PALETTE["green"][600]),  # Airflow's success
    }
    return browser.evaluate(THEME_FACTS % values)


def check_theme(facts: dict, mode: str) -> None:
    assert facts["bg"] == facts["expectBg"] and facts["fg"] == facts["expectFg"], facts
    if mode == "light":
        assert facts["bgLight"] > 0.95 and facts["fgLight"] < 0.3, facts
    else:
        assert facts["bgLight"] < 0.3 and facts["fgLight"] > 0.9, facts


def test_the_pages_follow_airflows_light_and_dark_mode(api_server, population, tmp_path):
    """Light and dark as Airflow's UI sets them, Airflow's state colours, and screenshots for the docs."""
    if BINARY is None:
        pytest.fail("CI must run the browser test: chromium is missing")
    token = api_server.token("admin")
    names = population.names
    pages = {
        "overview": f"{api_server.url}/airflow-jobs/",
        "job": f"{api_server.url}/airflow-jobs/jobs/default/{names['mpi']}",
        "nodes": f"{api_server.url}/airflow-jobs/nodes",
    }

    async def scenario() -> dict[str, dict]:
        seen: dict[str, dict] = {}
        async with Browser(BINARY, tmp_path / "profile") as browser:
            await browser.set_cookie(api_server.url, "_token", token)
            for mode in ("light", "dark"):
                # What Airflow 3's UI stores when the user picks a mode (next-themes, key "theme").
                await browser.open(pages["overview"])
                await browser.evaluate(f"localStorage.setItem('theme', '{mode}')")
                for page, url in pages.items():
                    await browser.open(url)
                    facts = await theme_facts(browser, mode)
                    assert facts["mode"] == mode, facts
                    check_theme(facts, mode)
                    seen[f"{page}-{mode}"] = facts
                    await browser.screenshot(SCREENSHOTS / f"{page}-{mode}.png")

            # "system" (Airflow's default) leaves it to the browser's prefers-color-scheme.
            await browser.evaluate("localStorage.setItem('theme', 'system')")
            await browser.send(
                "Emulation.setEmulatedMedia", features=[{"name": "prefers-color-scheme", "value": "dark"}]
            )
            await browser.open(pages["nodes"] + "?system")
            facts = await theme_facts(browser, "dark")
            assert facts["mode"] is None
            check_theme(facts, "dark")
            await browser.send(
                "Emulation.setEmulatedMedia", features=[{"name": "prefers-color-scheme", "value": "light"}]
            )
            check_theme(await theme_facts(browser, "light"), "light")

            # Inside Airflow's own page: switching Airflow's theme repaints the page in its frame.
            await browser.evaluate("localStorage.setItem('theme', 'light')")
            await browser.open(f"{api_server.url}/plugin/gpu-jobs")
            await browser.wait_for(
                f"(() => {{ const d = {FRAME} && {FRAME}.contentDocument;"
                " return !!d && d.querySelectorAll('tr.job').length > 0; })()",
                timeout=30,
            )
            inside = f"{FRAME}.contentDocument"
            check_theme(await theme_facts(browser, "light", inside), "light")
            assert await browser.evaluate("document.documentElement.classList.contains('light')")
            # As another tab of Airflow switching to dark is seen by this one: next-themes follows the
            # storage event and sets its class; the frame follows both.
            await browser.evaluate(
                "localStorage.setItem('theme', 'dark');"
                "window.dispatchEvent(new StorageEvent('storage', {key: 'theme', newValue: 'dark',"
                " storageArea: localStorage}))"
            )
            await browser.wait_for("document.documentElement.classList.contains('dark')")
            await browser.wait_for(f"{inside}.documentElement.dataset.theme === 'dark'")
            check_theme(await theme_facts(browser, "dark", inside), "dark")
            await browser.screenshot(SCREENSHOTS / "in-airflow-dark.png")
        return seen

    seen = asyncio.run(scenario())
    light, dark = seen["overview-light"], seen["overview-dark"]
    assert light["bg"] != dark["bg"] and light["fg"] != dark["fg"]
    for facts in (light, dark):
        # Airflow's state colours: running is cyan, not a second green beside success.
        assert facts["running"] == facts["expectRunning"] != facts["succeeded"] == facts["expectSucceeded"]
        assert facts["queued"] not in (None, facts["running"])
        assert facts["chart"] == facts["expectRunning"]  # the usage chart paints GPUs held as running
    assert seen["job-dark"]["chart"] == seen["job-dark"]["expectRunning"]  # the timeline's running stretch
    for page in ("overview", "job", "nodes"):
        for mode in ("light", "dark"):
            assert (SCREENSHOTS / f"{page}-{mode}.png").stat().st_size > 10_000


def test_a_walk_through_inside_airflow_filter_then_a_job_with_three_attempts(
    api_server, population, tmp_path
):
    """From Airflow's page: filter the job list to one user, open the newest attempt of a task that was
    tried three times, and read every attempt with its state, reason and exit codes."""
    if BINARY is None:
        pytest.fail("CI must run the browser test: chromium is missing")
    from datetime import datetime, timezone

    from airflow_jobs_plugin.cluster.kube import JOBS
    from airflow_jobs_plugin.jobs.manifests import build_manifest
    from airflow_jobs_plugin.jobs.spec import TaskIdentity, validate
    from tests.ui.conftest import NAMESPACE, SCENARIO

    identity = TaskIdentity("nightly_training", "train_retried", "scheduled__2026-02-01", -1, 1)
    scenarios = [{"*": {"run": 1, "exit": 75}}, {"*": {"run": 1, "exit": 75}}, {"*": {"run": None}}]
    names = [identity.job_name(n) for n in (1, 2, 3)]

    async def create() -> None:
        client = await KubeClient.from_kubeconfig(population.kubeconfig)
        try:
            for attempt, scenario in enumerate(scenarios, start=1):
                spec = validate(
                    image="registry.example/trainer:1",
                    group="nlp",
                    user="kim",
                    gpus=1,
                    backoff_limit=0,
                    ttl_after_finished=None,
                    annotations={SCENARIO: json.dumps(scenario)},
                )
                body = build_manifest(
                    spec,
                    name=names[attempt - 1],
                    task=identity,
                    attempt=attempt,
                    queued_at=datetime.now(timezone.utc),
                )
                await client.create(JOBS, NAMESPACE, body)
        finally:
            await client.close()

    async def delete() -> None:
        client = await KubeClient.from_kubeconfig(population.kubeconfig)
        try:
            for name in names:
                await client.delete(JOBS, NAMESPACE, name)
        finally:
            await client.close()

    async def scenario() -> None:
        async with Browser(BINARY, tmp_path / "profile") as browser:
            await browser.set_cookie(api_server.url, "_token", api_server.token("admin"))
            await browser.open(f"{api_server.url}/plugin/gpu-jobs")
            await until_frame("!!doc.querySelector('#job-filters')", browser)
            # Filter the job list to kim's jobs: the form is a GET, so the filtered list is a link.
            await frame("doc.querySelector('#job-filters input[name=user]').value = 'kim'", browser)
            await frame("doc.querySelector('#job-filters button[type=submit]').click()", browser)
            await until_frame(
                "doc.location.search.includes('user=kim') && doc.querySelectorAll('tr.job').length === 3",
                browser,
            )
            shown = await frame("[...doc.querySelectorAll('tr.job')].map(r => r.dataset.job).sort()", browser)
            assert shown == sorted(names)
            await until_frame(
                f"doc.querySelector('tr.job[data-job=\"{names[2]}\"]').dataset.state === 'RUNNING'"
                f" && doc.querySelector('tr.job[data-job=\"{names[0]}\"]').dataset.state === 'FAILED'",
                browser,
            )
            await browser.screenshot(ARTIFACTS / "ui-filtered-in-airflow.png")
            await frame(f"doc.querySelector('tr.job[data-job=\"{names[2]}\"] a').click()", browser)
            await until_frame("doc.querySelectorAll('#attempts tr[data-attempt]').length === 3", browser)
            attempts = await frame(
                "[...doc.querySelectorAll('#attempts tr[data-attempt]')].map(r => ({"
                " attempt: r.dataset.attempt, current: r.classList.contains('current'),"
                " state: r.querySelector('.badge').dataset.state, text: r.textContent }))",
                browser,
            )
            assert [(a["attempt"], a["current"], a["state"]) for a in attempts] == [
                ("1", False, "FAILED"),
                ("2", False, "FAILED"),
                ("3", True, "RUNNING"),
            ]
            assert all("worker-0=75" in a["text"] for a in attempts[:2]), attempts
            await browser.screenshot(ARTIFACTS / "ui-attempts-in-airflow.png")

    asyncio.run(create())
    try:
        population.admit()
        asyncio.run(scenario())
    finally:
        asyncio.run(delete())
        population.admit()
