"""Deployment settings shared by the example DAGs, read from the environment at parse time.

The DAG files stay the same on the simulated cluster of the demo and on a real cluster: only these
values differ. Defaults describe a real deployment (the training image carries the scripts under
``/opt/ml/scripts`` and every job mounts the ``ml-artifacts`` volume at ``/artifacts``); the demo
points them at the checkout and a local directory instead.
"""

from __future__ import annotations

import os

# The training image. It holds the scripts of dags/scripts/ and a Python 3 interpreter.
TRAINER_IMAGE = os.environ.get("AIRFLOW_JOBS_EXAMPLE_IMAGE", "ghcr.io/example/ml-trainer:1.0")
# Where the scripts live inside the training image (the demo runs them from the checkout).
SCRIPTS_DIR = os.environ.get("AIRFLOW_JOBS_EXAMPLE_SCRIPTS", "/opt/ml/scripts")
# The shared artifact store: candidate models, their metrics and the production model. Jobs mount it at
# this path, and the Airflow task that compares metrics reads it at the same path.
ARTIFACTS_DIR = os.environ.get("AIRFLOW_JOBS_EXAMPLE_ARTIFACTS", "/artifacts")
# The ReadWriteMany volume claim behind ARTIFACTS_DIR.
ARTIFACTS_CLAIM = os.environ.get("AIRFLOW_JOBS_EXAMPLE_ARTIFACTS_CLAIM", "ml-artifacts")
NAMESPACE = os.environ.get("AIRFLOW_JOBS_EXAMPLE_NAMESPACE", "default")
# The quota policy ConfigMap (see docs/quota.md); an empty value admits every job at once.
QUOTA_CONFIGMAP = os.environ.get("AIRFLOW_JOBS_QUOTA_CONFIGMAP", "airflow-jobs-quota-policy") or None
PYTHON = "python3"

# The simulated cluster's per-container scenario (docs/simulator.md); a real cluster ignores it.
POD_SCENARIO_ANNOTATION = "sim.airflow-jobs.io/scenario"
# How long the training job's data fetch (an init container) takes on the simulated cluster, in
# simulated seconds; a real cluster takes what the fetch takes.
FETCH_SECONDS = float(os.environ.get("AIRFLOW_JOBS_EXAMPLE_FETCH_SECONDS", "20"))
# How long a training node runs where its command does not (the scenario's clock, as above).
TRAIN_SECONDS = float(os.environ.get("AIRFLOW_JOBS_EXAMPLE_TRAIN_SECONDS", "5"))

ARTIFACT_VOLUMES = [{"name": "artifacts", "persistentVolumeClaim": {"claimName": ARTIFACTS_CLAIM}}]
ARTIFACT_MOUNTS = [{"name": "artifacts", "mountPath": ARTIFACTS_DIR}]


def script(name: str) -> str:
    """Path of one of the example scripts inside the training image."""
    return f"{SCRIPTS_DIR.rstrip('/')}/{name}"
