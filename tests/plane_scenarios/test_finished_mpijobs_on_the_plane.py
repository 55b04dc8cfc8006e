"""A finished MPIJob stays readable until its ``ttl_after_finished`` runs out, then the product deletes it.

The MPI operator (kubeflow/mpi-operator v0.5-v0.8; v0.8.0 pkg/controller/mpi_job_controller.go,
``newLauncherJob``) copies ``runPolicy.ttlSecondsAfterFinished`` only onto the launcher Job, whose TTL the
Job controller applies, and never deletes the MPIJob: ``kubectl get mpijobs`` would keep every finished
one. So the trigger that sees it finish marks when its TTL ends (``airflow-jobs.io/delete-after``) and the
orphan sweep deletes it then. Both clusters run the same operator behaviour: the plane the real
operator, the simulator its model of it.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import pytest
from task_doubles import task_context

from airflow_jobs_plugin.airflow.operators import JobOperator
from airflow_jobs_plugin.cluster.kube import JOBS, KubeClient
from airflow_jobs_plugin.cluster.objects import parse_time
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.kinds.mpi import MPIJOBS
from airflow_jobs_plugin.plugin.sweep import delete_expired_mpijobs
from airflow_jobs_plugin.readmodel import inspect

from .plane import DEADLINE, defer, ensure_namespace, follow, on_cluster, scenario

pytestmark = [pytest.mark.real_cluster, pytest.mark.timeout(900)]

NAMESPACE = "plane-finished"
RUN_ID = f"manual__{datetime.now(timezone.utc).isoformat()}"


@pytest.fixture(scope="module", autouse=True)
def namespace(cluster):
    on_cluster(cluster.kubeconfig_path, lambda client: ensure_namespace(client, NAMESPACE))


async def until_gone(client: KubeClient, resource, name: str) -> None:
    deadline = asyncio.get_running_loop().time() + DEADLINE
    while await client.get_or_none(resource, NAMESPACE, name) is not None:
        assert asyncio.get_running_loop().time() < deadline, f"{resource.kind} {name} is still there"
        await asyncio.sleep(0.3)


def test_a_finished_mpijob_is_readable_until_its_ttl_then_deleted_by_the_product(cluster):
    op = JobOperator(
        task_id="mpi_ttl",
        image="registry.example/trainer:1",
        group="vision",
        user="alice",
        namespace=NAMESPACE,
        workers=2,
        gpus=1,
        ttl_after_finished=60,
        job_annotations=scenario(main={"run": 1, "logs": ["done"]}),
    )
    context = task_context("plane_finished", "mpi_ttl", run_id=RUN_ID)

    event = follow(defer(op, context))
    assert event["status"] == "success", event
    name = event["job_name"]

    async def check(client: KubeClient) -> None:
        # The operator's TTL takes the launcher Job; the MPIJob stays, finished and readable.
        await until_gone(client, JOBS, f"{name}-launcher")
        mpijob = await client.get(MPIJOBS, NAMESPACE, name)
        _, seen = await inspect.read_job(client, inspect.Target(namespace=NAMESPACE), name)
        assert seen["metadata"]["uid"] == mpijob["metadata"]["uid"]
        delete_after = parse_time(mpijob["metadata"]["annotations"][labels.DELETE_AFTER])
        assert delete_after is not None

        # A sweep before its TTL leaves it; the first sweep at its TTL deletes it, a second finds it gone.
        metadata = await inspect.read_job_metadata(client, NAMESPACE)
        await delete_expired_mpijobs(client, NAMESPACE, metadata, delete_after.replace(year=2000))
        assert await client.get_or_none(MPIJOBS, NAMESPACE, name) is not None
        await delete_expired_mpijobs(client, NAMESPACE, metadata, delete_after)
        await delete_expired_mpijobs(client, NAMESPACE, metadata, delete_after)
        await until_gone(client, MPIJOBS, name)

    on_cluster(cluster.kubeconfig_path, check)
