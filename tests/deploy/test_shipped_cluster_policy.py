"""The cluster policy as the Helm values ship it: the example DAGs import, a quota grab does not.

The values turn the policy on through the chart's ``airflowLocalSettings`` and mount the quota policy
ConfigMap (``policy.yaml`` and the platform's ``charging.yaml``) into the dag-processor; here the same
two documents are read from helm-values/quota-policy.yaml, with the image's DAG folder
(/opt/airflow/dags, helm-values/Dockerfile) mapped to this repository's dags/.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
IMAGE_DAGS = "/opt/airflow/dags"


@pytest.fixture
def shipped_policy(tmp_path, monkeypatch) -> Path:
    """The shipped ConfigMap's two files on disk, the charging map pointed at ``tmp_path/dags``."""
    data = yaml.safe_load((ROOT / "helm-values" / "quota-policy.yaml").read_text())["data"]
    dags = tmp_path / "dags"
    shutil.copytree(ROOT / "dags", dags)
    (tmp_path / "policy.yaml").write_text(data["policy.yaml"])
    (tmp_path / "charging.yaml").write_text(data["charging.yaml"].replace(IMAGE_DAGS, str(dags)))
    monkeypatch.setenv("AIRFLOW__AIRFLOW_JOBS__QUOTA_POLICY_FILE", str(tmp_path / "policy.yaml"))
    monkeypatch.setenv("AIRFLOW__AIRFLOW_JOBS__CHARGING_FILE", str(tmp_path / "charging.yaml"))
    import airflow.settings

    from airflow_jobs_plugin.airflow.cluster_policy import task_policy

    # What airflow_local_settings.py (values.yaml airflowLocalSettings) installs in the dag-processor.
    monkeypatch.setattr(airflow.settings, "task_policy", task_policy)
    monkeypatch.syspath_prepend(str(dags))
    return dags


def _bag(folder: Path):
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(str(folder))


def test_the_values_enable_the_policy_the_example_dags_pass(shipped_policy):
    values = yaml.safe_load((ROOT / "helm-values" / "values.yaml").read_text())
    assert (
        "from airflow_jobs_plugin.airflow.cluster_policy import task_policy" in values["airflowLocalSettings"]
    )
    bag = _bag(shipped_policy)
    assert bag.import_errors == {}
    assert {"gpu_retraining", "gpu_quota_contention", "gpu_failures_and_retries"} <= set(bag.dag_ids)


@pytest.mark.parametrize(
    ("owner", "group", "refusal"),
    [
        # An owner calling itself a bot, or a fresh name for a fresh allowance: not the map's users.
        ("retraining-bot-2", "vision", "not 'retraining-bot-2' (the task's owner)"),
        ("bob-2", "research", "not 'bob-2' (the task's owner)"),
        ("alice", "finance", "unknown group 'finance'"),
    ],
)
def test_a_dag_grabbing_quota_in_the_image_folder_fails_to_import(shipped_policy, owner, group, refusal):
    (shipped_policy / "grab.py").write_text(
        "import pendulum\n"
        "from airflow.sdk import DAG\n"
        "from airflow_jobs_plugin.airflow.operators import JobOperator\n"
        "with DAG('grab', schedule=None, start_date=pendulum.datetime(2026, 1, 1),"
        f" default_args={{'owner': {owner!r}}}):\n"
        f"    JobOperator(task_id='train', image='trainer:1', gpus=8, group={group!r})\n"
    )
    errors = _bag(shipped_policy).import_errors
    (error,) = [message for path, message in errors.items() if path.endswith("grab.py")]
    assert refusal in error
