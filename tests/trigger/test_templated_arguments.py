"""Every job argument may be Jinja or an XComArg: the DAG parses, Airflow renders, the job runs.

The DAG below gives every argument of :data:`JOB_ARGUMENTS` (and ``pod_template_file``) as a template or
a TaskFlow output; Airflow's own ``render_template_fields`` renders it as a worker does before
``execute()``, and the job runs on the simulated cluster through the real trigger.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from airflow.sdk import DAG, task
from airflow.sdk.exceptions import AirflowFailException
from task_doubles import FakeTI, StateStore

from airflow_jobs_plugin.airflow.operators import RESULT_XCOM_KEY, JobOperator
from airflow_jobs_plugin.cluster.kube import KubeClient
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.kinds.mpi import MPIJOBS
from airflow_jobs_plugin.jobs.spec import (
    JOB_ARGUMENTS,
    JobSpecError,
    TaskIdentity,
    contains_unrendered,
)

from .test_operator import deferral, run_to_event

SCENARIO = {
    "main": {"run": 1, "message": json.dumps({"loss": 0.25, "epochs": 3})},
    "wait-for-workers": {"run": 1},
}
PARAMS = {
    "group": "vision",
    "user": "alice",
    "script": "train.py",
    "epochs": "3",
    "config": "train-config",
    "gpus": 1,
    "gpu_resource": "nvidia.com/gpu",
    "workers": 2,
    "framework": "mpi",
    "cpu": "1",
    "memory": "2Gi",
    "shm": "1Gi",
    "effect": "NoSchedule",
    "volume": "scratch",
    "mount": "/scratch",
    "namespace": "default",
    "scheduler": "default-scheduler",
    "team": "vision",
    "backoff_limit": 1,
    "max_attempts": 2,
    "retry_backoff": 0.05,
    "retry_backoff_max": 1,
    "fatal": 7,
    "queue_timeout": 600,
    "schedule_timeout": 180,
    "requeue_limit": 3,
    "active_deadline": 3600,
    "ttl": 600,
    "label": "nightly",
    "scenario": json.dumps(SCENARIO),
    "priority": "high",
    "launcher_gpus": 0,
    "launcher_cpu": "500m",
    "launcher_memory": "1Gi",
    "sshd": "/usr/sbin/sshd",
    "wait": True,
    "creation_policy": "WaitForWorkersReady",
    "mpi": "OpenMPI",
    "fetch_image": "registry.example/fetch:1",
    "pull": "IfNotPresent",
}
# What the TaskFlow tasks upstream return (their XComs).
XCOMS = {
    "pick_image": "registry.example/trainer:1",
    "pick_resources": {},
    "pick_placement": {"kubernetes.io/os": "linux"},
    "pick_affinity": {},
    "pick_priority_class": None,
    "pick_security": {"runAsUser": 1000},
    "pick_container_security": {"capabilities": {"add": ["NET_BIND_SERVICE"]}},
    "pick_retryable": [3],
    "pick_pull_secrets": [],
    "pick_service_account": None,
    "pick_kueue_queue": None,  # no Kueue on this cluster: the product's pool admits the job
}


def templated_dag(pod_template_file: str) -> tuple[DAG, JobOperator]:
    params = {**PARAMS, "pod_template_file": pod_template_file}
    with DAG("templated_everything", schedule=None, params=params) as dag:
        outputs = {}
        for task_id, value in XCOMS.items():
            outputs[task_id] = task(task_id=task_id)(lambda value=value: value)()
        op = JobOperator(
            task_id="train",
            image=outputs["pick_image"],
            group="{{ params.group }}",
            user="{{ params.user }}",
            command=["python", "{{ params.script }}"],
            args=["--epochs", "{{ params.epochs }}"],
            env={"RUN": "{{ run_id }}"},
            env_from=[{"configMapRef": {"name": "{{ params.config }}", "optional": True}}],
            gpus="{{ params.gpus }}",
            gpu_resource="{{ params.gpu_resource }}",
            workers="{{ params.workers }}",
            framework="{{ params.framework }}",
            cpu="{{ params.cpu }}",
            memory="{{ params.memory }}",
            container_resources=outputs["pick_resources"],
            shm_size="{{ params.shm }}",
            node_selector=outputs["pick_placement"],
            affinity=outputs["pick_affinity"],
            tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "{{ params.effect }}"}],
            volumes=[{"name": "{{ params.volume }}", "emptyDir": {}}],
            volume_mounts=[{"name": "scratch", "mountPath": "{{ params.mount }}"}],
            namespace="{{ params.namespace }}",
            priority_class_name=outputs["pick_priority_class"],
            scheduler_name="{{ params.scheduler }}",
            security_context=outputs["pick_security"],
            container_security_context=outputs["pick_container_security"],
            pod_template={"metadata": {"labels": {"team": "{{ params.team }}"}}},
            pod_template_file="{{ params.pod_template_file }}",
            backoff_limit="{{ params.backoff_limit }}",
            max_attempts="{{ params.max_attempts }}",
            retry_backoff="{{ params.retry_backoff }}",
            retry_backoff_max="{{ params.retry_backoff_max }}",
            retryable_exit_codes=outputs["pick_retryable"],
            fatal_exit_codes=["{{ params.fatal }}"],
            queue_timeout="{{ params.queue_timeout }}",
            schedule_timeout="{{ params.schedule_timeout }}",
            requeue_limit="{{ params.requeue_limit }}",
            active_deadline="{{ params.active_deadline }}",
            ttl_after_finished="{{ params.ttl }}",
            job_labels={"run-kind": "{{ params.label }}"},
            job_annotations={"sim.airflow-jobs.io/scenario": "{{ params.scenario }}"},
            priority="{{ params.priority }}",
            launcher_gpus="{{ params.launcher_gpus }}",
            launcher_cpu="{{ params.launcher_cpu }}",
            launcher_memory="{{ params.launcher_memory }}",
            worker_command=["{{ params.sshd }}", "-De"],
            wait_for_workers="{{ params.wait }}",
            launcher_creation_policy="{{ params.creation_policy }}",
            mpi_implementation="{{ params.mpi }}",
            init_containers=[{"name": "fetch", "image": "{{ params.fetch_image }}"}],
            image_pull_policy="{{ params.pull }}",
            image_pull_secrets=outputs["pick_pull_secrets"],
            service_account=outputs["pick_service_account"],
            kueue_queue=outputs["pick_kueue_queue"],
            owner="alice",
        )
    return dag, op


@pytest.fixture
def template_file(tmp_path):
    path = tmp_path / "pod.yaml"
    path.write_text("spec:\n  terminationGracePeriodSeconds: 5\n")
    return str(path)


def mpijobs_of(cluster, run_id: str) -> list[dict]:
    key = TaskIdentity("templated_everything", "train", run_id).instance_key()

    async def go():
        client = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
        try:
            return (await client.list(MPIJOBS, "default", label_selector=f"{labels.TASK_KEY}={key}"))["items"]
        finally:
            await client.close()

    return asyncio.run(go())


def rendered_context(op: JobOperator, run_id: str) -> dict:
    ti = FakeTI("templated_everything", op.task_id, run_id)
    ti.xcoms.update({(task_id, "return_value"): value for task_id, value in XCOMS.items()})
    params = dict(op.dag.params)
    context = {"ti": ti, "task_state_store": StateStore(), "params": params, "run_id": run_id}
    op.render_template_fields(context)
    return context


def test_a_dag_with_every_argument_templated_or_from_xcom_parses_with_its_upstream_tasks(template_file):
    dag, op = templated_dag(template_file)
    for name in (*JOB_ARGUMENTS, "pod_template_file"):
        assert contains_unrendered(getattr(op, name)), f"{name} is neither templated nor an XComArg here"
    assert op.upstream_task_ids == set(XCOMS)


def test_the_rendered_arguments_run_the_job_and_its_result_comes_back_as_xcom(cluster, template_file):
    _, op = templated_dag(template_file)
    context = rendered_context(op, "run-templated-1")
    deferred = deferral(op, context)
    (job,) = mpijobs_of(cluster, "run-templated-1")
    assert job["kind"] == "MPIJob"  # workers rendered from "{{ params.workers }}" to 2
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
    main = worker["spec"]["containers"][0]
    assert (
        main["image"] == "registry.example/trainer:1" and main["resources"]["limits"]["nvidia.com/gpu"] == "1"
    )
    assert main["securityContext"] == {"capabilities": {"add": ["NET_BIND_SERVICE"]}}
    assert worker["spec"]["securityContext"] == {"runAsUser": 1000}
    assert worker["spec"]["terminationGracePeriodSeconds"] == 5  # from pod_template_file
    assert worker["metadata"]["labels"]["team"] == "vision"  # from pod_template
    assert job["metadata"]["labels"]["run-kind"] == "nightly"
    assert job["metadata"]["annotations"][labels.PRIORITY] == "100"  # "high"
    assert job["spec"]["runPolicy"]["backoffLimit"] == 1
    assert deferred.trigger.max_attempts == 2 and tuple(deferred.trigger.fatal_exit_codes) == (7,)
    summary = op.execute_complete(context, run_to_event(deferred))
    assert summary["state"] == "SUCCEEDED"
    assert summary["result"] == {"loss": 0.25, "epochs": 3}
    assert context["ti"].xcoms[("train", RESULT_XCOM_KEY)] == {"loss": 0.25, "epochs": 3}


def test_a_template_that_renders_to_a_bad_value_fails_with_the_parse_time_message(template_file):
    _, op = templated_dag(template_file)
    context = rendered_context(op, "run-templated-2")
    op.gpus = "four"  # what "{{ params.gpus }}" renders to with gpus="four"
    with pytest.raises(AirflowFailException, match=r"gpus: must be a whole number from 0 to 64"):
        op.execute(context)
    with pytest.raises(JobSpecError, match=r"gpus: must be a whole number from 0 to 64"):
        JobOperator(task_id="t", image="registry.example/trainer:1", group="vision", gpus="four")


def test_jinja_in_job_labels_is_checked_once_rendered_and_literal_entries_at_parse_time():
    JobOperator(
        task_id="t", image="registry.example/trainer:1", group="vision", job_labels={"run": "{{ run_id }}"}
    )
    with pytest.raises(JobSpecError, match=r"labels\.bad key"):
        JobOperator(
            task_id="t",
            image="registry.example/trainer:1",
            group="vision",
            job_labels={"run": "{{ run_id }}", "bad key": "x"},
        )


@pytest.mark.parametrize(
    ("kpo", "right"),
    [
        ("cmds", "use command"),
        ("arguments", "use args"),
        ("env_vars", "use env"),
        ("labels", "use job_labels"),
        ("service_account_name", "use service_account"),
        ("get_logs", "use stream_logs"),
        ("full_pod_spec", "use pod_template"),
    ],
)
def test_a_kubernetes_pod_operator_argument_gets_the_right_name(kpo, right):
    with pytest.raises(JobSpecError, match=rf"^{kpo}: is a KubernetesPodOperator argument.*{right}"):
        JobOperator(task_id="t", image="registry.example/trainer:1", group="vision", **{kpo: "x"})
