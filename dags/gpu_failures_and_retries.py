"""Failures and retries: the three retry levels, and the failures that are never retried.

Run it by hand. Each task shows one behaviour; the run ends **failed on purpose** (two tasks cannot
succeed), and every task's log says why it did what it did.

* ``pod_restart_in_job``: the first pod exits 1; the Job controller starts a new pod inside the same
  job (``backoff_limit``) and it succeeds. Level 1: pod restarts.
* ``job_resubmitted``: exit code 75 is declared retryable; the first attempt fails and a new attempt
  of the job is submitted after a back-off, through the quota queue, and succeeds. Level 2: job-level
  attempts.
* ``task_retry``: fails both of its job attempts; the task fails as retryable, Airflow retries it
  (``retries=2``, one of them spare) and the new try's job succeeds. Level 3: Airflow task retries.
* ``fatal_exit_code``: exit code 3 is declared fatal (a bad configuration): the task fails at once and
  Airflow does not retry it, although ``retries=2``.
* ``missing_image``: the image tag does not exist: the job is stopped as soon as the registry's answer
  is known to be permanent, and the task fails without retries.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG
from example_settings import (
    ARTIFACT_MOUNTS,
    ARTIFACT_VOLUMES,
    ARTIFACTS_DIR,
    NAMESPACE,
    PYTHON,
    QUOTA_CONFIGMAP,
    TRAINER_IMAGE,
    script,
)

from airflow_jobs_plugin import JobOperator

# Counts the runs of one task's script across pods, attempts and tries of one DAG run.
STATE_FILE = (
    ARTIFACTS_DIR
    + "/failure-demo/{{ run_id | replace(':', '-') | replace('+', '_') }}/{{ task.task_id }}.runs"
)
EX_TEMPFAIL = 75  # "try again later" in sysexits.h: what the training script exits with on a flaky input
EX_CONFIG = 3


def flaky(fail_times: int, exit_code: int) -> list[str]:
    """The command of a job whose first ``fail_times`` runs exit with ``exit_code``."""
    return [
        PYTHON,
        script("flaky.py"),
        "--state",
        STATE_FILE,
        "--fail-times",
        str(fail_times),
        "--exit-code",
        str(exit_code),
    ]


with DAG(
    dag_id="gpu_failures_and_retries",
    description="pod restarts, job-level attempts, task retries, and failures that are never retried",
    schedule=None,
    start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"owner": "ml-platform", "retries": 1, "retry_delay": timedelta(seconds=15)},
    tags=["gpu", "retries", "example"],
    doc_md=__doc__,
):
    job_defaults = {
        "image": TRAINER_IMAGE,
        "gpus": 1,
        "group": "vision",
        "user": "alice",
        "namespace": NAMESPACE,
        "quota_configmap": QUOTA_CONFIGMAP,
        "volumes": ARTIFACT_VOLUMES,
        "volume_mounts": ARTIFACT_MOUNTS,
    }

    JobOperator(
        task_id="pod_restart_in_job",
        command=flaky(fail_times=1, exit_code=1),
        backoff_limit=2,
        **job_defaults,
    )

    JobOperator(
        task_id="job_resubmitted",
        command=flaky(fail_times=1, exit_code=EX_TEMPFAIL),
        retryable_exit_codes=[EX_TEMPFAIL],
        max_attempts=3,
        retry_backoff=timedelta(seconds=10),
        **job_defaults,
    )

    JobOperator(
        task_id="task_retry",
        command=flaky(fail_times=2, exit_code=EX_TEMPFAIL),
        retryable_exit_codes=[EX_TEMPFAIL],
        max_attempts=2,
        retry_backoff=timedelta(seconds=5),
        # One retry runs the job again; the second is spare. Airflow 3.3.2's scheduler can fail a try
        # whose job ends seconds after the deferral, on the stale executor event of the deferral exit
        # (apache/airflow#67287): the spare try then returns that job's success without running it again.
        retries=2,
        **job_defaults,
    )

    JobOperator(
        task_id="fatal_exit_code",
        command=flaky(fail_times=99, exit_code=EX_CONFIG),
        fatal_exit_codes=[EX_CONFIG],
        retries=2,
        **job_defaults,
    )

    JobOperator(
        task_id="missing_image",
        command=[PYTHON, script("train.py"), "--run-dir", STATE_FILE + ".d"],
        retries=2,
        **{**job_defaults, "image": TRAINER_IMAGE.rsplit(":", 1)[0] + ":not-found"},
    )
