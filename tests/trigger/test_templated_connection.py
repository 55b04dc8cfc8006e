"""``kubernetes_conn_id`` and ``stream_logs`` are templated, as KubernetesPodOperator's
``kubernetes_conn_id`` is (cncf provider 10.25.0, ``airflow/operators/pod.py`` ``template_fields``): a literal
value is still checked when the DAG is parsed, a template once Airflow has rendered it, and a rendered
value that is wrong fails the task with the argument named and no retry spent on it.
"""

from __future__ import annotations

import re

import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException
from sim_fixtures import connection_env
from task_doubles import FakeTI, StateStore

from airflow_jobs_plugin.airflow.operators import JobOperator
from airflow_jobs_plugin.airflow.sensors import JobSensor
from airflow_jobs_plugin.jobs.spec import JobSpecError

from .test_operator import deferral

PARAMS = {"cluster": "gpu_cluster", "stream": False}


def templated(**overrides) -> JobOperator:
    with DAG("templated_connection", schedule=None, params={**PARAMS, **overrides}):
        return JobOperator(
            task_id="train",
            image="registry.example/trainer:1",
            group="vision",
            user="alice",
            gpus=1,
            kubernetes_conn_id="{{ params.cluster }}",
            stream_logs="{{ params.stream }}",
        )


def rendered(op, run_id: str) -> dict:
    context = {
        "ti": FakeTI(op.dag.dag_id, op.task_id, run_id),
        "task_state_store": StateStore(),
        "params": dict(op.dag.params),
        "run_id": run_id,
    }
    op.render_template_fields(context)
    return context


def test_both_are_template_fields_of_the_operator_and_the_connection_of_the_sensor():
    assert {"kubernetes_conn_id", "stream_logs"} <= set(JobOperator.template_fields)
    assert "kubernetes_conn_id" in JobSensor.template_fields


def test_templated_connection_and_stream_logs_are_rendered_before_the_job_is_submitted(cluster, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_GPU_CLUSTER", connection_env(cluster))
    op = templated()
    context = rendered(op, "run-conn-1")
    assert (op.kubernetes_conn_id, op.stream_logs) == ("gpu_cluster", "False")  # Jinja renders text
    trigger = deferral(op, context).trigger
    assert trigger.kubernetes_conn_id == "gpu_cluster"
    assert trigger.stream_logs is False


def test_literal_values_are_still_checked_when_the_dag_is_parsed():
    base = {"task_id": "t", "image": "registry.example/trainer:1", "group": "vision"}
    with pytest.raises(JobSpecError, match=r"^kubernetes_conn_id: must be the id of an Airflow Kubernetes"):
        JobOperator(**base, kubernetes_conn_id="my cluster")
    with pytest.raises(JobSpecError, match=r"^kubernetes_conn_id: .*got int 7$"):
        JobOperator(**base, kubernetes_conn_id=7)
    with pytest.raises(JobSpecError, match=r"^stream_logs: must be True or False; got str 'yes'$"):
        JobOperator(**base, stream_logs="yes")
    with pytest.raises(JobSpecError, match=r"^kubernetes_conn_id: must be the id"):
        JobSensor(task_id="w", job_name="train-a1", kubernetes_conn_id="")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"cluster": "no such cluster"},
            r"kubernetes_conn_id: must be the id of an Airflow Kubernetes connection",
        ),
        (
            {"stream": "maybe"},
            r"stream_logs: must be True or False; got str 'maybe' \(as rendered from its template",
        ),
    ],
)
def test_a_bad_rendered_value_fails_the_task_naming_the_argument(overrides, message):
    op = templated(**overrides)
    context = rendered(op, "run-conn-2")
    with pytest.raises(
        AirflowFailException, match=r"invalid rendered value of .*no retry can fix this"
    ) as info:
        op.execute(context)
    assert re.search(message, str(info.value)), info.value


def test_a_sensors_bad_rendered_connection_fails_its_task_naming_the_argument():
    with DAG("templated_sensor", schedule=None, params={"cluster": "not/valid id"}):
        sensor = JobSensor(task_id="w", job_name="train-a1", kubernetes_conn_id="{{ params.cluster }}")
    context = rendered(sensor, "run-conn-3")
    with pytest.raises(AirflowFailException, match=r"kubernetes_conn_id: must be the id .*as rendered"):
        sensor.execute(context)
