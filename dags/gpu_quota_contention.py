"""Quota contention: more GPU demand than two groups' quotas, submitted all at once.

Run it by hand and watch the jobs queue and start in the GPU Jobs view or in the task logs. With the
example policy (``helm-values/quota-policy.yaml``: ``research`` 6 GPUs, 4 per user; ``nlp`` 4 GPUs,
2 per user):

* ``research``: alice's and bob's 4-GPU jobs cannot both fit 6 GPUs. Whichever comes second waits at
  the head of the group (``GroupQuota``) and the jobs after it wait behind it (``BehindHead``), even
  carol's 2-GPU job that would fit: jobs of a group start in order. Alice's second job waits for her
  own limit (``UserQuota``) once her first one runs.
* ``nlp``: dave's second job waits for his 2-GPU user limit (``UserQuota``), which blocks nobody:
  erin's job passes it and starts.

Every job trains for a while and succeeds; the queue drains as jobs finish.
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

RUN_DIR = (
    ARTIFACTS_DIR + "/quota-demo/{{ run_id | replace(':', '-') | replace('+', '_') }}/{{ task.task_id }}"
)

# (task id, group, user, GPUs): listed in the order the jobs are meant to be read, not started.
JOBS = [
    ("research_alice_4gpu", "research", "alice", 4),
    ("research_bob_4gpu", "research", "bob", 4),
    ("research_carol_2gpu", "research", "carol", 2),
    ("research_alice_2gpu", "research", "alice", 2),
    ("nlp_dave_2gpu", "nlp", "dave", 2),
    ("nlp_dave_2gpu_again", "nlp", "dave", 2),
    ("nlp_erin_2gpu", "nlp", "erin", 2),
]

with DAG(
    dag_id="gpu_quota_contention",
    description="jobs of several users and groups competing for GPU quota",
    schedule=None,
    start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"owner": "ml-platform", "retries": 1, "retry_delay": timedelta(seconds=10)},
    tags=["gpu", "quota", "example"],
    doc_md=__doc__,
):
    for task_id, group, user, gpus in JOBS:
        JobOperator(
            task_id=task_id,
            image=TRAINER_IMAGE,
            command=[PYTHON, script("train.py"), "--run-dir", RUN_DIR, "--epochs", "30"],
            gpus=gpus,
            group=group,
            user=user,
            namespace=NAMESPACE,
            quota_configmap=QUOTA_CONFIGMAP,
            volumes=ARTIFACT_VOLUMES,
            volume_mounts=ARTIFACT_MOUNTS,
            queue_timeout=timedelta(hours=1),
        )
