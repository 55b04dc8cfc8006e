"""The failover tests' DAGs: jobs that stream numbered lines long enough for a triggerer to die under them.

Settings come from the environment the test's stack gives every component (tests/e2e/test_triggerer_failover.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import pendulum
from airflow.sdk import DAG

from airflow_jobs_plugin import JobOperator

TICKER = str(Path(__file__).with_name("ticker.py"))
LINES = os.environ.get("FAILOVER_TICK_LINES", "120")
EVERY = os.environ.get("FAILOVER_TICK_EVERY", "0.5")
BURST = int(os.environ.get("FAILOVER_BURST_JOBS", "200"))
QUOTA = "airflow-jobs-quota-policy"


def _dag(dag_id: str) -> DAG:
    return DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
        catchup=False,
        # A failover must not cost a try: a second try would hide a lost or doubled job.
        default_args={"retries": 0},
        max_active_tasks=BURST,
    )


ticker = ["python3", TICKER, "--lines", LINES, "--every", EVERY]

with _dag("failover_mpijob"):
    JobOperator(
        task_id="train",
        image="trainer:1.0",
        group="llm",
        user="alice",
        quota_configmap=QUOTA,
        workers=2,
        gpus=1,
        cpu="2",
        memory="4Gi",
        command=ticker,
        max_attempts=1,
        backoff_limit=0,
    )

with _dag("failover_torchrun"):
    JobOperator(
        task_id="train",
        image="trainer:1.0",
        group="llm",
        user="alice",
        quota_configmap=QUOTA,
        framework="torchrun",
        workers=2,
        gpus=1,
        cpu="2",
        memory="4Gi",
        command=ticker,
        max_attempts=1,
        backoff_limit=0,
    )

with _dag("failover_burst"):
    # Many jobs through the quota pool (a policy of their own, tests/e2e/test_triggerer_failover.py, lets
    # every one run at once) that run two simulated minutes with no process behind them (the image tag is
    # the simulator's scenario), to put many triggers on both triggerers at once.
    JobOperator.partial(
        task_id="job",
        image="trainer:run-1200s",
        group="burst",
        user="alice",
        quota_configmap="failover-burst-policy",
        gpus=0,
        cpu="10m",
        memory="16Mi",
        max_attempts=1,
        backoff_limit=0,
    ).expand(env=[{"BURST_INDEX": str(n)} for n in range(BURST)])
