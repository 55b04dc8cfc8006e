"""Cancel clicked in a real browser inside Airflow's UI, on the job of a running task with ``retries=2``.

A whole Airflow (API server, scheduler, DAG processor, triggerer) runs next to the simulated cluster;
the DAG ``tests/ui/dags/gpu_cancel_from_ui.py`` starts one JobOperator task whose job runs until it is
stopped. The test opens Airflow's own GPU Jobs page, follows the job's link inside Airflow's frame,
confirms Cancel in the page, and checks what the cluster and Airflow show afterwards.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import pytest

from airflow_jobs_plugin.cluster.kube import JOBS, KubeClient
from airflow_jobs_plugin.cluster.objects import condition_true
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.queueing.quota.ledger import read_ledger
from tests.e2e.stack import Stack
from tests.patience import Deadline
from tests.ui.browser import Browser, chromium_binary, in_ci

DAG_ID = "gpu_cancel_from_ui"
DAGS = Path(__file__).resolve().parent / "dags"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
BINARY = chromium_binary()
FRAME = "document.querySelector('iframe[title=\"GPU Jobs\"]')"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        BINARY is None and not in_ci(),
        reason="Chromium is not installed (Debian packages chromium and chromium-driver; .ci/run installs them)",
    ),
]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    home = tmp_path_factory.mktemp("ui-stack")
    passwords = home / "passwords.json"
    passwords.write_text(json.dumps({"admin": "admin-pw"}))
    stack = Stack(
        home,
        dags_folder=DAGS,
        extra_env={
            "AIRFLOW__CORE__AUTH_MANAGER": (
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
            ),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            # Sweep often, with a short grace, so the orphan test sees a sweep of the real API server.
            "AIRFLOW__AIRFLOW_JOBS__ORPHAN_SWEEP_INTERVAL": "2",
            "AIRFLOW__AIRFLOW_JOBS__ORPHAN_GRACE_PERIOD": "5",
        },
    )
    try:
        stack.start()
        stack.wait_for_dags([DAG_ID], timeout=240)
        stack.airflow("dags", "unpause", DAG_ID)
        stack.airflow("dags", "trigger", DAG_ID)
        yield stack
    finally:
        stack.stop()
    assert stack.alive_groups() == [], "processes left running after the stack stopped"


def api_url(stack: Stack) -> str:
    return f"http://127.0.0.1:{stack.env['AIRFLOW__API__PORT']}"


async def task_jobs(stack: Stack) -> list[dict]:
    client = await KubeClient.from_kubeconfig(str(stack.kubeconfig))
    try:
        items = (await client.list(JOBS, "default")).get("items") or []
        return [j for j in items if (j["metadata"].get("annotations") or {}).get(labels.DAG_ID) == DAG_ID]
    finally:
        await client.close()


async def reserved(stack: Stack) -> set[str]:
    client = await KubeClient.from_kubeconfig(str(stack.kubeconfig))
    try:
        return {r.job for r in (await read_ledger(client, "default", "vision")).ledger.reservations}
    finally:
        await client.close()


def wait(condition, timeout: float, what: str):
    deadline = Deadline(timeout)
    while not deadline.passed():
        value = condition()
        if value:
            return value
        time.sleep(1)
    raise TimeoutError(f"timed out after {deadline} waiting for {what}")


def test_cancel_clicked_in_airflows_ui_ends_the_job_and_frees_its_quota(stack, tmp_path):
    if BINARY is None:
        pytest.fail("CI must run the browser test: chromium is missing")

    def deferred_and_running() -> str | None:
        rows = stack.query(
            "SELECT run_id, state FROM task_instance WHERE dag_id = ? AND task_id = 'train'", DAG_ID
        )
        jobs = asyncio.run(task_jobs(stack))
        if rows and rows[0][1] == "deferred" and jobs and asyncio.run(reserved(stack)):
            return rows[0][0]
        return None

    run_id = wait(deferred_and_running, 300, "the task to defer with its job admitted")
    (job,) = asyncio.run(task_jobs(stack))
    name = job["metadata"]["name"]
    assert name in asyncio.run(reserved(stack))
    token = httpx.post(
        f"{api_url(stack)}/auth/token", json={"username": "admin", "password": "admin-pw"}, timeout=30
    ).json()["access_token"]

    async def scenario() -> None:
        async with Browser(BINARY, tmp_path / "profile") as browser:
            await browser.set_cookie(api_url(stack), "_token", token)

            async def until_frame(expression: str, timeout: float = 60):
                return await browser.wait_for(
                    f"(() => {{ const f = {FRAME}; const doc = f && f.contentDocument;"
                    f" return !!doc && doc.readyState === 'complete' && ({expression}); }})()",
                    timeout=timeout,
                )

            async def frame(expression: str):
                return await browser.evaluate(
                    f"(() => {{ const doc = {FRAME}.contentDocument; return {expression}; }})()"
                )

            await browser.open(f"{api_url(stack)}/plugin/gpu-jobs")
            await until_frame(f"!!doc.querySelector('tr.job[data-job=\"{name}\"] a')")
            await frame(f"doc.querySelector('tr.job[data-job=\"{name}\"] a').click()")
            await until_frame("!!doc.querySelector('details.confirm[data-action=cancel] summary')")
            await frame("doc.querySelector('details.confirm[data-action=cancel] summary').click()")
            await frame("doc.querySelector('button[data-confirm=cancel]').click()")
            await until_frame(
                "!!doc.querySelector('#message, #notice') &&"
                " doc.querySelector('#message, #notice').textContent.includes('cancelled')"
            )
            await browser.screenshot(ARTIFACTS / "ui-cancel-in-airflow-e2e.png")

    asyncio.run(scenario())

    # The cluster: the job is ended by its controller and kept, cancelled by admin, until its TTL; its
    # pod is gone and its GPUs are back in the pool.
    def ended() -> dict | None:
        jobs = {j["metadata"]["name"]: j for j in asyncio.run(task_jobs(stack))}
        job = jobs.get(name)
        failed = job is not None and condition_true(job, "Failed")
        return job if failed and name not in asyncio.run(reserved(stack)) else None

    kept = wait(ended, 60, "the cancelled job to end and its GPUs to be freed")
    assert kept["metadata"]["annotations"][labels.VERDICT] == "Cancelled"
    assert kept["metadata"]["annotations"][labels.CANCELLED_BY] == "admin"

    # Airflow: the task ends with the cancel (a non-retryable failure), and no later try submits a job.
    def settled() -> tuple[str, str, list[str]] | None:
        again = [
            j["metadata"]["name"] for j in asyncio.run(task_jobs(stack)) if j["metadata"]["name"] != name
        ]
        runs = stack.query("SELECT state FROM dag_run WHERE dag_id = ? AND run_id = ?", DAG_ID, run_id)
        state, _ = stack.task_tries(DAG_ID, run_id)["train"]
        if again or (runs and runs[0][0] in ("success", "failed")):
            return runs[0][0] if runs else "", state, again
        return None

    run_state, state, again = wait(settled, 300, "the run to end, or a retry to submit a job")
    events = stack.task_log(DAG_ID, run_id, "train")
    assert not again, f"a later try submitted {again} after the cancel (task {state}): {events[-8:]}"
    assert (run_state, state) == ("failed", "failed"), events[-8:]
    assert any("cancel" in e.lower() for e in events[-10:]), events[-10:]


def test_the_api_server_sweeps_an_orphan_whose_dag_run_no_longer_exists(stack):
    """A job left by a task of a run that is gone: the API server's sweep cancels it after the grace."""
    from datetime import datetime, timezone

    from airflow_jobs_plugin.cluster.kube import EVENTS
    from airflow_jobs_plugin.jobs.manifests import build_manifest
    from airflow_jobs_plugin.jobs.spec import TaskIdentity, validate

    identity = TaskIdentity(DAG_ID, "train", "manual__a_run_that_was_deleted", -1, 1)
    spec = validate(
        image="ghcr.io/example/ml-trainer:1.0",
        command=["python3", "-c", "import time; time.sleep(3600)"],
        gpus=1,
        group="vision",
        user="retraining-bot",
        ttl_after_finished=None,
    )
    body = build_manifest(
        spec, name=identity.job_name(1), task=identity, attempt=1, queued_at=datetime.now(timezone.utc)
    )
    name = body["metadata"]["name"]

    async def create() -> None:
        client = await KubeClient.from_kubeconfig(str(stack.kubeconfig))
        try:
            await client.create(JOBS, "default", body)
        finally:
            await client.close()

    async def cancelled_by() -> list[str]:
        client = await KubeClient.from_kubeconfig(str(stack.kubeconfig))
        try:
            listing = await client.list(EVENTS, "default", field_selector=f"involvedObject.name={name}")
            return [e["message"] for e in listing.get("items") or [] if e.get("reason") == "Cancelled"]
        finally:
            await client.close()

    asyncio.run(create())
    wait(lambda: asyncio.run(cancelled_by()), 180, "the sweep")
    assert asyncio.run(cancelled_by()) == ["cancelled by orphan sweep"]
    (job,) = [j for j in asyncio.run(task_jobs(stack)) if j["metadata"]["name"] == name]
    assert job["metadata"]["annotations"][labels.CANCELLED_BY] == "orphan sweep"
    # The sweep writes no ledger: the admitting triggerer's pass frees the GPUs once it sees the job
    # ruled and its pods gone. No trigger follows an orphan, so that pass is the triggerer's backstop
    # (admission.BACKSTOP_SECONDS), a moment after the cancel.
    wait(lambda: name not in asyncio.run(reserved(stack)), 60, "the orphan's GPUs to be freed")
