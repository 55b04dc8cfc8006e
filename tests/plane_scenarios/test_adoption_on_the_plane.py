"""A retry follows the job its earlier try created as the API server stored it, and never a planted one.

The comparison (jobs/adoption.py) reads both jobs in the form the API server stores them
(jobs/stored_form.py, ``JobKind.stored_form``), whose defaults are read from kubernetes v1.36.3 and
mpi-operator v0.8.2. On the real control plane the stored form is the real kube-apiserver's own: a Job,
an Indexed Job and an MPIJob created by a try are read back with every default, generated selector and
canonical quantity the server writes, and the next try must still adopt them; a job planted with the
victim's every field plus one environment variable must be refused naming it. On the simulator the same
test checks its model of that defaulting.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from airflow.sdk.exceptions import AirflowFailException
from task_doubles import StateStore, task_context

from airflow_jobs_plugin.airflow.operators import JobOperator
from airflow_jobs_plugin.jobs import adoption, kinds
from airflow_jobs_plugin.jobs.spec import TaskIdentity
from airflow_jobs_plugin.usecases import actions

from .plane import defer, ensure_namespace, on_cluster, scenario

pytestmark = [pytest.mark.real_cluster, pytest.mark.timeout(900)]

NAMESPACE = "plane-adoption"
RUN_ID = f"manual__{datetime.now(timezone.utc).isoformat()}"
LONG = scenario(main={"run": 100000})
_serial = iter(range(1, 10_000))

KINDS = {
    "Job": {},
    "torchrun": {"framework": "torchrun", "workers": 2},
    "MPIJob": {"framework": "mpi", "workers": 2},
}


@pytest.fixture(scope="module", autouse=True)
def namespace(cluster):
    on_cluster(cluster.kubeconfig_path, lambda client: ensure_namespace(client, NAMESPACE))


def victim(task_id: str, **kwargs) -> JobOperator:
    """A task whose job exercises what the server defaults: quantities in a non-canonical form, a
    ConfigMap volume (its defaultMode), a secret reference, a shared-memory volume."""
    return JobOperator(
        task_id=task_id,
        image="registry.example/trainer:1",
        group="vision",
        user="alice",
        gpus=1,
        cpu="1000m",
        memory="1024Mi",
        env={"EPOCHS": "3", "TOKEN": {"secretKeyRef": {"name": "hub", "key": "token"}}},
        volumes=[{"name": "config", "configMap": {"name": "train-config"}}],
        volume_mounts=[{"name": "config", "mount_path": "/config"}],
        namespace=NAMESPACE,
        job_annotations=LONG,
        **kwargs,
    )


def _cancel(cluster, kind: kinds.JobKind, name: str) -> None:
    async def cancel(client):
        job = await client.get(kind.resource, NAMESPACE, name)
        await actions.cancel(client, NAMESPACE, job, by="test")

    on_cluster(cluster.kubeconfig_path, cancel)


@pytest.mark.parametrize("kind", KINDS)
def test_a_retry_adopts_the_job_its_earlier_try_created_as_the_server_stored_it(cluster, kind):
    op = victim(f"honest-{kind.lower()}", **KINDS[kind])
    run_id = f"{RUN_ID}-{next(_serial)}"
    store = StateStore()
    first = defer(op, task_context("plane_adoption", op.task_id, run_id=run_id, store=store))

    second = defer(op, task_context("plane_adoption", op.task_id, run_id=run_id, try_number=2, store=store))

    assert second.job_name == first.job_name
    stored = on_cluster(
        cluster.kubeconfig_path,
        lambda client: client.get(kinds.for_name(kind).resource, NAMESPACE, first.job_name),
    )
    assert kinds.kind_of(stored).name == kind
    _cancel(cluster, kinds.for_name(kind), first.job_name)


def test_a_planted_job_with_one_extra_environment_variable_is_refused_naming_it(cluster):
    op = victim("planted-env")
    run_id = f"{RUN_ID}-{next(_serial)}"
    target = TaskIdentity("plane_adoption", op.task_id, run_id, -1, 1)
    spec = op._spec(templated=False)
    body = adoption.Submission(spec, target, None, adoption.spec_fingerprint(spec, target)).body()
    body["spec"]["template"]["spec"]["containers"][0]["env"].append(
        {"name": "PYTHONPATH", "value": "/mallory"}
    )
    planted = on_cluster(
        cluster.kubeconfig_path, lambda client: client.create(kinds.DEFAULT_KIND.resource, NAMESPACE, body)
    )

    with pytest.raises(AirflowFailException) as refused:
        op.execute(task_context("plane_adoption", op.task_id, run_id=run_id))

    message = str(refused.value)
    assert f"{NAMESPACE}/{target.job_name(1)} holds this task's name or task key" in message, message
    assert "spec.template.spec.containers[0].env[PYTHONPATH]: this task has none" in message, message
    still = on_cluster(
        cluster.kubeconfig_path,
        lambda client: client.get(kinds.DEFAULT_KIND.resource, NAMESPACE, target.job_name(1)),
    )
    assert still["metadata"]["uid"] == planted["metadata"]["uid"]
    _cancel(cluster, kinds.DEFAULT_KIND, target.job_name(1))
