"""End to end: a JobOperator's execution_timeout on a real Airflow (scheduler, triggerer, api-server) and
the simulated GPU cluster: a job that would run an hour ends the task at its timeout, the log says why,
and the job's pods are gone and its group's GPUs free within seconds after.

Airflow fails a deferral past its deadline at its scheduler's next check
(``[scheduler] trigger_timeout_check_interval``, 5 s here, 15 s by default), and a worker then resumes the
try only to fail it: the task ends at about the timeout plus that check plus a worker's start.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
import time
from datetime import datetime

import pytest

from tests.e2e.stack import BIN, Stack
from tests.patience import Deadline

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

DAG_ID = "gpu_execution_timeout"
TASK_ID = "train_for_an_hour"
TIMEOUT = 60
CHECK_INTERVAL = 5
DAG = textwrap.dedent(
    f'''
    """A training job that would run an hour, under a 60 s execution_timeout."""
    from datetime import timedelta

    import pendulum
    from airflow.sdk import DAG

    from airflow_jobs_plugin import JobOperator

    with DAG(
        dag_id="{DAG_ID}",
        schedule=None,
        start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
        catchup=False,
        default_args={{"owner": "ml-platform"}},
    ):
        JobOperator(
            task_id="{TASK_ID}",
            image="ghcr.io/example/ml-trainer:1.0",
            command=["sleep", "3600"],
            gpus=2,
            group="vision",
            user="alice",
            namespace="default",
            quota_configmap="airflow-jobs-quota-policy",
            execution_timeout=timedelta(seconds={TIMEOUT}),
        )
    '''
)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    dags = tmp_path_factory.mktemp("dags")
    (dags / f"{DAG_ID}.py").write_text(DAG)
    stack = Stack(
        tmp_path_factory.mktemp("e2e-timeout"),
        dags_folder=dags,
        extra_env={"AIRFLOW__SCHEDULER__TRIGGER_TIMEOUT_CHECK_INTERVAL": str(CHECK_INTERVAL)},
    )
    try:
        stack.start()
        stack.wait_for_dags([DAG_ID], timeout=180)
        yield stack
    finally:
        stack.stop()
    assert stack.alive_groups() == [], "processes left running after the stack stopped"


def _pods_of(stack: Stack, job: str) -> list[str]:
    from kubernetes import client, config

    api = client.CoreV1Api(config.new_client_from_config(str(stack.kubeconfig)))
    return [
        p.metadata.name for p in api.list_namespaced_pod("default").items if p.metadata.name.startswith(job)
    ]


def _status(stack: Stack) -> dict:
    done = subprocess.run(
        [
            str(BIN / "airflow-jobs"),
            "status",
            "--kubeconfig",
            str(stack.kubeconfig),
            "-n",
            "default",
            "--json",
        ],
        env=stack.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)


def _gpus_used_by(status: dict, group: str) -> list[int]:
    """Every ``used`` count the status gives for ``group`` (its pool line and its devices)."""
    found: list[int] = []

    def walk(value):
        if isinstance(value, dict):
            if group in (value.get("group"), value.get("name")) and isinstance(value.get("used"), int):
                found.append(value["used"])
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(status)
    return found


def _when(stack: Stack, sql: str, *params: object) -> datetime | None:
    rows = stack.query(sql, *params)
    return datetime.fromisoformat(str(rows[0][0])) if rows and rows[0][0] else None


def test_an_hour_long_job_ends_failed_at_its_execution_timeout_and_gives_its_gpus_back(stack):
    stack.airflow("dags", "unpause", DAG_ID)
    stack.airflow("dags", "trigger", DAG_ID)
    run_id, state = stack.wait_for_run(DAG_ID, timeout=300)
    ended_at = time.monotonic()
    tries = stack.task_tries(DAG_ID, run_id)
    log = stack.task_log(DAG_ID, run_id, TASK_ID)
    assert state == "failed" and tries[TASK_ID] == ("failed", 1), "\n".join(log)

    started = _when(
        stack, "SELECT start_date FROM task_instance WHERE dag_id = ? AND run_id = ?", DAG_ID, run_id
    )
    ended = _when(stack, "SELECT end_date FROM task_instance WHERE dag_id = ? AND run_id = ?", DAG_ID, run_id)
    assert started and ended
    took = (ended - started).total_seconds()
    # The timeout, plus at most one scheduler check, plus a loaded worker's start-up to fail the try.
    assert TIMEOUT <= took <= TIMEOUT + CHECK_INTERVAL + 60, f"ended after {took:.0f} s\n" + "\n".join(log)

    # The log says why, naming the timeout and the job.
    (line,) = [e for e in log if "ran out of its execution_timeout" in e][:1]
    assert "execution_timeout (0:01:00)" in line and "Job default/" in line, line
    job = line.split("Job default/", 1)[1].split()[0]

    # The job's pods are gone and the group's GPUs free within seconds (the API server's kill round is
    # every 2 s; the Job controller deletes the pods of a cancelled job).
    deadline = Deadline(30)
    while not deadline.passed() and (_pods_of(stack, job) or any(_gpus_used_by(_status(stack), "vision"))):
        time.sleep(1)
    assert _pods_of(stack, job) == [], (
        f"pods of {job} left {time.monotonic() - ended_at:.0f} s after the task ended"
    )
    status = _status(stack)
    used = _gpus_used_by(status, "vision")
    assert used and not any(used), json.dumps(status, indent=1)[:4000]
    print(
        f"task ended {took:.1f} s after it started; pods gone and GPUs free {time.monotonic() - ended_at:.1f} s after"
    )
    api_server = stack.output("api-server")
    assert f"kill request on default/{job}: cancelled" in api_server
