"""PyTorch distributed training of a language model on 2 nodes of 4 GPUs, with torchrun.

``train`` runs an Indexed Job of 2 pods and a headless Service (no training operator on the cluster):
every node starts together once the ``llm`` group's quota admits all 8 GPUs, ``torchrun`` finds its
rendezvous in the environment, each node's log streams into the task log (``[node-0]``,
``[node-1]``), and global rank 0's metrics come back as the task's XCom ``result``, which ``report``
reads.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pendulum
from airflow.sdk import DAG, task
from example_settings import (
    NAMESPACE,
    POD_SCENARIO_ANNOTATION,
    PYTHON,
    QUOTA_CONFIGMAP,
    TRAIN_SECONDS,
    TRAINER_IMAGE,
    script,
)

from airflow_jobs_plugin import JobOperator

with DAG(
    dag_id="gpu_ddp_training",
    description="PyTorch DDP on 2 nodes x 4 GPUs with torchrun; metrics as XCom",
    schedule=None,
    start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"owner": "llm-team"},
    tags=["gpu", "example", "torchrun"],
    doc_md=__doc__,
):
    train = JobOperator(
        task_id="train",
        image=TRAINER_IMAGE,
        group="llm",
        user="alice",
        namespace=NAMESPACE,
        quota_configmap=QUOTA_CONFIGMAP,
        framework="torchrun",
        workers=2,
        gpus=4,
        cpu="16",
        memory="64Gi",
        command=[PYTHON, script("train_ddp.py"), "--epochs", "3", "--result", "/dev/termination-log"],
        # Where no command runs (a cluster whose pods follow their scenario: kwok's nodes on the real
        # control plane), each node still logs its last epoch and ends with the metrics rank 0 writes.
        job_annotations={
            POD_SCENARIO_ANNOTATION: json.dumps(
                {
                    "main": {
                        "run": TRAIN_SECONDS,
                        "logs": ["train_ddp: epoch 3/3 loss=0.5463"],
                        "message": json.dumps({"loss": 0.5463, "epochs": 3, "world_size": 8}),
                    }
                }
            )
        },
        max_attempts=2,
        active_deadline=timedelta(hours=12),
    )

    @task(task_id="report")
    def report(metrics: dict) -> float:
        """The final loss of the run, from rank 0's metrics."""
        print(
            f"final loss {metrics['loss']} after {metrics['epochs']} epochs on {metrics['world_size']} GPUs"
        )
        return float(metrics["loss"])

    report(train.output["result"])
