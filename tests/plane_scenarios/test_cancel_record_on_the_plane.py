"""A cancel is never undone, on a real control plane with the shipped RBAC and admission policies enforced
by the real kube-apiserver for the deployment's service accounts (jobs/cancel_record.py).

The api-server's identity cancels a queued MPIJob, which the cancel deletes after recording it in a Lease;
the worker's next try of the run, its worker having died before recording the cancel, fails at once and
creates nothing; a clear runs the job again. A DAG's code (the worker's and the triggerer's tokens) can
neither write nor delete a record, and the api-server writes no other Lease.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone

import pytest
from airflow.sdk.exceptions import AirflowFailException
from task_doubles import FakeTI, StateStore

from airflow_jobs_plugin.airflow.operators import JobOperator
from airflow_jobs_plugin.cluster.kube import JOBS, LEASES, KubeClient, KubeError
from airflow_jobs_plugin.jobs import cancel_record, labels
from airflow_jobs_plugin.jobs.cancel_record import CancelRecord
from airflow_jobs_plugin.jobs.kinds.mpi import MPIJOBS
from airflow_jobs_plugin.jobs.naming import TaskIdentity
from airflow_jobs_plugin.readmodel import inspect

from .plane import defer, kube, on_cluster, scenario
from .test_rbac_and_admission_policy_on_the_plane import NAMESPACE, RUN_ID, as_identity, identities

__all__ = ["identities"]  # the module-scoped fixture: the shipped RBAC and policies, a token per component

pytestmark = [pytest.mark.real_cluster, pytest.mark.timeout(900)]

TARGET = inspect.Target(namespace=NAMESPACE, quota_configmap=None)
_serial = iter(range(1, 1_000_000))


@pytest.fixture(scope="module")
def in_force(identities) -> dict[str, str]:
    """The rule cancel-records refusing, as the API server loads each policy on its own: probed with a
    Lease the api-server may not create until it is refused by that rule."""

    async def go() -> None:
        deadline = asyncio.get_running_loop().time() + 120
        async with kube(identities["api-server"]) as client:
            while True:
                probe = {"metadata": {"name": f"probe-{next(_serial)}"}, "spec": {}}
                try:
                    await client.create(LEASES, NAMESPACE, probe)
                except KubeError as exc:
                    if exc.status == 403 and "ValidatingAdmissionPolicy 'airflow-jobs-cancel-records'" in str(
                        exc
                    ):
                        return
                    raise
                assert asyncio.get_running_loop().time() < deadline, (
                    "airflow-jobs-cancel-records never came into force"
                )
                await asyncio.sleep(1)

    asyncio.run(go())
    return identities


def run_as(monkeypatch, identities: dict[str, str], component: str) -> None:
    connection = {"conn_type": "kubernetes", "extra": {"kube_config_path": identities[component]}}
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(connection))


def context(run_id: str, try_number: int, store: StateStore, max_tries: int) -> dict:
    return {
        "ti": FakeTI("plane_cancel", "train", run_id, -1, try_number, max_tries),
        "task_state_store": store,
    }


def _admitted(kubeconfig: str, name: str) -> None:
    async def go(client: KubeClient) -> None:
        deadline = asyncio.get_running_loop().time() + 120
        while not ((await client.get(JOBS, NAMESPACE, name))["metadata"].get("annotations") or {}).get(
            labels.ADMITTED_AT
        ):
            assert asyncio.get_running_loop().time() < deadline, f"{name} was never admitted"
            await asyncio.sleep(0.3)

    on_cluster(kubeconfig, go)


def test_a_queued_mpijob_the_api_server_cancelled_is_not_submitted_again_until_cleared(in_force, monkeypatch):
    # nlp lets a user hold 2 GPUs (quota-policy.yaml): alice's blocker holds them, so her MPIJob waits.
    run_as(monkeypatch, in_force, "worker")
    blocker = defer(
        JobOperator(
            task_id="blocker",
            image="registry.example/trainer:1",
            group="nlp",
            user="alice",
            gpus=2,
            namespace=NAMESPACE,
            job_annotations=scenario(main={"run": None}),
        ),
        context(f"{RUN_ID}-blocker-{next(_serial)}", 1, StateStore(), max_tries=0),
    ).job_name
    _admitted(in_force["admin"], blocker)
    op = JobOperator(
        task_id="train",
        image="registry.example/trainer:1",
        group="nlp",
        user="alice",
        gpus=1,
        workers=2,
        retries=1,
        namespace=NAMESPACE,
    )
    run_id, store = f"{RUN_ID}-cancel-{next(_serial)}", StateStore()
    name = defer(op, context(run_id, 1, store, max_tries=1)).job_name

    async def cancel(client: KubeClient) -> None:
        outcome = await inspect.cancel(client, TARGET, name, "bob")
        assert outcome.deleted, outcome  # waiting in its queue (alice's limit), so deleted
        assert await client.get_or_none(MPIJOBS, NAMESPACE, name) is None

    assert not isinstance(as_identity(in_force["api-server"], cancel), KubeError)
    record_name = cancel_record.record_name(TaskIdentity("plane_cancel", "train", run_id, -1, 1))
    record = as_identity(in_force["worker"], lambda c: c.get(LEASES, NAMESPACE, record_name))
    assert record["spec"]["holderIdentity"] == "bob", record

    # Try 1's worker died before recording the cancel: Airflow's retry, with the same state store.
    with pytest.raises(AirflowFailException) as raised:
        op.execute(context(run_id, 2, store, max_tries=1))
    assert str(raised.value).startswith(f"try 1 of this task was cancelled (job {name}, by bob at ")
    key = TaskIdentity("plane_cancel", "train", run_id).instance_key()
    left = as_identity(
        in_force["worker"], lambda c: c.list(MPIJOBS, NAMESPACE, label_selector=f"{labels.TASK_KEY}={key}")
    )
    assert left["items"] == []

    # A clear (max_tries = last try + retries): a new run, which runs the job again.
    again = defer(op, context(run_id, 3, store, max_tries=3))
    assert again.job_name == TaskIdentity("plane_cancel", "train", run_id, -1, 3).job_name(1)

    async def clean_up(client: KubeClient) -> None:
        await inspect.cancel(client, TARGET, again.job_name, "plane test")
        await inspect.cancel(client, TARGET, blocker, "plane test")

    as_identity(in_force["api-server"], clean_up)


def test_a_dag_s_tokens_can_neither_write_nor_delete_a_record_and_the_api_server_writes_no_other_lease(
    in_force,
):
    task = TaskIdentity("victim", "train", f"{RUN_ID}-planted-{next(_serial)}", -1, 1)
    body = cancel_record.lease(
        CancelRecord(task, "Job", task.job_name(1), "mallory", datetime.now(timezone.utc), timedelta(days=1))
    )
    for component in ("worker", "triggerer"):
        refused = as_identity(in_force[component], lambda c: c.create(LEASES, NAMESPACE, body))
        assert isinstance(refused, KubeError) and refused.status == 403, refused
        assert 'cannot create resource "leases"' in str(refused)
    created = as_identity(in_force["api-server"], lambda c: c.create(LEASES, NAMESPACE, body))
    assert not isinstance(created, KubeError), created
    for component in ("worker", "triggerer"):
        refused = as_identity(
            in_force[component], lambda c: c.delete(LEASES, NAMESPACE, body["metadata"]["name"])
        )
        assert isinstance(refused, KubeError) and refused.status == 403, refused
    other = {"metadata": {"name": "some-controller-leader"}, "spec": {}}
    refused = as_identity(in_force["api-server"], lambda c: c.create(LEASES, NAMESPACE, other))
    assert isinstance(refused, KubeError) and refused.status == 403
    assert "airflow-jobs rule cancel-records: the api-server may only create cancel records" in str(refused)
    deleted = as_identity(
        in_force["api-server"], lambda c: c.delete(LEASES, NAMESPACE, body["metadata"]["name"])
    )
    assert deleted is True
