"""The charging rule again at submit, on the worker, for the group and user a try really submits with:
a ``pre_execute`` (or a template, or a subclass) that switches them after the DAG was parsed is refused
before any job exists, with the rule named."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred
from task_doubles import FakeTI, StateStore

from airflow_jobs_plugin.airflow.operators import JobOperator
from airflow_jobs_plugin.cluster.kube import CONFIGMAPS, JOBS, KubeClient
from airflow_jobs_plugin.queueing import quota
from airflow_jobs_plugin.queueing.pools import POLICY_LABELS

POLICY = "groups:\n  team: {gpus: 4}\n  big: {gpus: 64}\n"
CHARGING = "folders:\n  /dags/team: {groups: [team], users: [alice]}\n"


@pytest.fixture
def charging_files(tmp_path, monkeypatch):
    (tmp_path / "policy.yaml").write_text(POLICY)
    (tmp_path / "charging.yaml").write_text(CHARGING)
    monkeypatch.setenv("AIRFLOW__AIRFLOW_JOBS__QUOTA_POLICY_FILE", str(tmp_path / "policy.yaml"))
    monkeypatch.setenv("AIRFLOW__AIRFLOW_JOBS__CHARGING_FILE", str(tmp_path / "charging.yaml"))


async def put_pool(client: KubeClient, charging: str | None = None) -> str:
    name = f"policy-{uuid.uuid4().hex[:6]}"
    data = {quota.POLICY_KEY: POLICY, **({quota.model.CHARGING_KEY: charging} if charging else {})}
    await client.create(
        CONFIGMAPS, "default", {"metadata": {"name": name, "labels": POLICY_LABELS}, "data": data}
    )
    return name


def operator(policy: str, **args) -> JobOperator:
    with DAG(f"d{uuid.uuid4().hex[:6]}", schedule=None) as dag:
        op = JobOperator(
            task_id="train", image="trainer:1", gpus=1, owner="alice", quota_configmap=policy, **args
        )
    dag.fileloc = "/dags/team/train.py"
    return op


async def run(op: JobOperator) -> None:
    """``execute`` runs its own event loop, as on a worker: off this one."""
    ti = FakeTI(op.dag_id, op.task_id, f"run-{uuid.uuid4().hex[:6]}", -1, 1, 0)
    await asyncio.to_thread(op.execute, {"ti": ti, "task_state_store": StateStore()})


async def jobs_of_group(client: KubeClient, group: str) -> list[dict]:
    return (await client.list(JOBS, "default", label_selector=f"airflow-jobs.io/group={group}"))["items"]


async def test_a_group_switched_at_run_time_is_refused_at_submit(cluster, connection, client, charging_files):
    op = operator(await put_pool(client), group="team")
    op.group = "big"  # what a pre_execute hook or a subclass does after the DAG was parsed
    with pytest.raises(
        AirflowFailException, match=r"charging: DAGs under /dags/team may charge groups team, not 'big'"
    ):
        await run(op)
    assert await jobs_of_group(client, "big") == []


async def test_a_user_switched_at_run_time_is_refused_by_the_pools_charging_map(cluster, connection, client):
    """No charging file on the worker: the map kept in the policy ConfigMap still refuses the pair."""
    op = operator(await put_pool(client, CHARGING), group="team")
    op.user = "mallory"
    with pytest.raises(
        AirflowFailException,
        match=r"charging rule charging.yaml: no DAG folder may charge group 'team' as user 'mallory'",
    ):
        await run(op)


async def test_the_group_and_user_the_dag_was_parsed_with_are_submitted(
    cluster, connection, client, charging_files
):
    op = operator(await put_pool(client, CHARGING), group="team")
    with pytest.raises(TaskDeferred):
        await run(op)
