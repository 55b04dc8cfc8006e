"""Daily retraining of the vision model.

``prepare_data`` (a CPU job) writes the run's dataset, ``train`` runs an MPI job with 2 workers of 2
GPUs each (every replica first stages the dataset in a ``fetch-data`` init container, so the task log
shows the launcher and workers going through ``Init:0/N`` and ``PodInitializing``), ``evaluate`` scores the candidate on 1 GPU and returns its metrics as the task's XCom ``result`` (the
job writes them to its termination message, ``/dev/termination-log``), ``is_better`` compares them with
the production model's, and ``promote`` replaces the production model only if the candidate
is better (otherwise it is skipped).

Every job waits for the ``vision`` group's GPU quota, streams its logs into the task log and keeps its
files in the shared artifact store (``example_settings.ARTIFACTS_DIR``), one directory per DAG run.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pendulum
from airflow.sdk import DAG, task
from example_settings import (
    ARTIFACT_MOUNTS,
    ARTIFACT_VOLUMES,
    ARTIFACTS_DIR,
    FETCH_SECONDS,
    NAMESPACE,
    POD_SCENARIO_ANNOTATION,
    PYTHON,
    QUOTA_CONFIGMAP,
    TRAINER_IMAGE,
    script,
)

from airflow_jobs_plugin import JobOperator

# One directory per DAG run; ':' and '+' of run ids are awkward in paths and object-store keys.
RUN_DIR = ARTIFACTS_DIR + "/runs/{{ run_id | replace(':', '-') | replace('+', '_') }}"
PRODUCTION_DIR = f"{ARTIFACTS_DIR}/production"
# GPUs of each training worker, and so its MPI ranks (train.py --slots).
TRAIN_GPUS = 2

with DAG(
    dag_id="gpu_retraining",
    description="prepare data, train on 2 MPI workers, evaluate, promote if better",
    schedule="@daily",
    start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    # A retry reattaches to a job still running, so retrying a task never trains twice at once.
    default_args={"owner": "vision-ml", "retries": 1, "retry_delay": timedelta(seconds=30)},
    tags=["gpu", "example"],
    doc_md=__doc__,
):
    job_defaults = {
        "image": TRAINER_IMAGE,
        "group": "vision",
        "user": "retraining-bot",
        "namespace": NAMESPACE,
        "quota_configmap": QUOTA_CONFIGMAP,
        "volumes": ARTIFACT_VOLUMES,
        "volume_mounts": ARTIFACT_MOUNTS,
        # A queued job waiting a whole day means today's run is pointless: the next one is due.
        "queue_timeout": timedelta(hours=20),
    }

    prepare_data = JobOperator(
        task_id="prepare_data",
        command=[PYTHON, script("prepare.py"), "--out", RUN_DIR],
        gpus=0,
        cpu="2",
        memory="4Gi",
        **job_defaults,
    )

    train = JobOperator(
        task_id="train",
        # One MPI rank per GPU: 2 workers x 2 GPUs are 4 ranks (the MPI operator's slotsPerWorker is 2).
        command=[
            PYTHON,
            script("train.py"),
            "--run-dir",
            RUN_DIR,
            "--epochs",
            "6",
            "--slots",
            str(TRAIN_GPUS),
        ],
        workers=2,
        gpus=TRAIN_GPUS,
        # Every replica (launcher and workers) stages the data before it starts.
        init_containers=[
            {
                "name": "fetch-data",
                "image": TRAINER_IMAGE,
                "command": [PYTHON, script("fetch_data.py"), "--run-dir", RUN_DIR],
                "volumeMounts": ARTIFACT_MOUNTS,
            }
        ],
        # Read by the simulated cluster only (a real one ignores it): its init containers follow a
        # scenario, so the fetch takes the few seconds the real one would.
        job_annotations={POD_SCENARIO_ANNOTATION: json.dumps({"fetch-data": {"run": FETCH_SECONDS}})},
        cpu="8",
        memory="32Gi",
        # A lost node or an evicted worker is not the model's fault: resubmit up to twice.
        max_attempts=3,
        retry_backoff=timedelta(seconds=30),
        active_deadline=timedelta(hours=6),
        **job_defaults,
    )

    evaluate = JobOperator(
        task_id="evaluate",
        # The metrics come back through the pod status, not the shared volume: the task returns them
        # as its XCom "result".
        command=[PYTHON, script("evaluate.py"), "--run-dir", RUN_DIR, "--result", "/dev/termination-log"],
        gpus=1,
        # Where no command runs (a cluster whose pods follow their scenario: kwok's nodes on the real
        # control plane), the pod still ends with metrics in its termination message, as the script writes.
        job_annotations={
            POD_SCENARIO_ANNOTATION: json.dumps(
                {"main": {"logs": ["METRIC accuracy=0.91"], "message": json.dumps({"accuracy": 0.91})}}
            )
        },
        **job_defaults,
    )

    @task.short_circuit(task_id="is_better")
    def is_better(metrics: dict, production_dir: str) -> bool:
        """True if the candidate's accuracy beats production's (or there is no production model yet)."""
        candidate = metrics["accuracy"]
        current_file = Path(production_dir) / "metrics.json"
        if not current_file.exists():
            print(f"no production model yet: promoting the candidate (accuracy {candidate})")
            return True
        current = json.loads(current_file.read_text())["accuracy"]
        better = candidate > current
        print(
            f"candidate accuracy {candidate} vs production {current}: "
            + ("promoting" if better else "keeping production")
        )
        return better

    promote = JobOperator(
        task_id="promote",
        command=[PYTHON, script("promote.py"), "--run-dir", RUN_DIR, "--production", PRODUCTION_DIR],
        gpus=0,
        **job_defaults,
    )

    # evaluate's XCom "result": the JSON its job wrote to /dev/termination-log.
    prepare_data >> train >> evaluate >> is_better(evaluate.output["result"], PRODUCTION_DIR) >> promote
