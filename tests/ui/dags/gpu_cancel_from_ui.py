"""A training task with retries that a user cancels from the GPU Jobs page (tests/ui/test_browser_airflow.py)."""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_jobs_plugin.airflow.operators import JobOperator

with DAG(
    "gpu_cancel_from_ui",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 2, "retry_delay": timedelta(seconds=5)},
) as dag:
    JobOperator(
        task_id="train",
        image="ghcr.io/example/ml-trainer:1.0",
        command=["python3", "-c", "import time; print('training', flush=True); time.sleep(3600)"],
        gpus=2,
        group="vision",
        user="retraining-bot",
        quota_configmap="airflow-jobs-quota-policy",
    )
