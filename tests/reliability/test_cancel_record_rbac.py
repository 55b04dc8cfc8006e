"""Who may write a cancel's record (jobs/cancel_record.py), on a simulated cluster that enforces the shipped
Roles and admission policies as kube-apiserver does: the api-server records a person's cancel and the
worker's retry reads it; a DAG's code (worker, triggerer) can neither write nor delete a record, even
where the platform grants it rights on Leases; a CLI user who may not record a cancel cancels nothing."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred
from airflow_jobs_sim import ClusterConfig, SimCluster
from airflow_jobs_sim.config import Identity
from airflow_jobs_sim.kubeconfig import write_kubeconfig
from task_doubles import FakeTI, StateStore

from airflow_jobs_plugin.airflow.operators import JobOperator
from airflow_jobs_plugin.cluster.kube import LEASES, KubeClient, KubeError
from airflow_jobs_plugin.jobs import cancel_record, kinds, labels
from airflow_jobs_plugin.jobs.cancel_record import CancelRecord
from airflow_jobs_plugin.jobs.naming import TaskIdentity
from airflow_jobs_plugin.readmodel import inspect
from airflow_jobs_plugin.usecases.actions import CancelNotRecorded
from tests.reliability.test_rbac_least_privilege import (
    COMPONENTS,
    NAMESPACE,
    POD_SECURITY,
    POLICY,
    ROLE,
    apply_shipped,
    component_runner,
)

TARGET = inspect.Target(namespace=NAMESPACE, quota_configmap=None)
MPIJOBS = kinds.for_name("MPIJob").resource
# A CLI user allowed to cancel jobs in the namespace (the api-server's job rights), not to write Leases.
CAROL = "carol"
CAROL_ROLE = {
    "metadata": {"name": "cancels-jobs"},
    "rules": [
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list", "patch", "delete"]},
        {
            "apiGroups": ["kubeflow.org"],
            "resources": ["mpijobs"],
            "verbs": ["get", "list", "patch", "delete"],
        },
        {"apiGroups": [""], "resources": ["pods", "events"], "verbs": ["list", "create"]},
    ],
}
# What a platform might grant workers beside the shipped Role (say, for its own leader elections).
WORKER_LEASES_ROLE = {
    "metadata": {"name": "worker-leases"},
    "rules": [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["create", "update", "delete"],
        }
    ],
}


def binding(name: str, role: str, subject: dict) -> dict:
    return {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
        "subjects": [subject],
    }


def a_record(run_id: str) -> dict:
    task = TaskIdentity("victim", "train", run_id, -1, 1)
    at = datetime.now(timezone.utc)
    return cancel_record.lease(CancelRecord(task, "Job", task.job_name(1), "mallory", at, timedelta(days=7)))


@pytest.fixture
def enforced(monkeypatch, tmp_path):
    identities = (
        *(Identity.service_account("airflow", account, f"{c}-token") for c, account in COMPONENTS.items()),
        Identity("carol-token", CAROL),
    )
    config = ClusterConfig(
        nodes=2, gpus_per_node=8, time_scale=0.01, token="admin", rbac=True, identities=identities
    )
    monkeypatch.setenv("AIRFLOW__AIRFLOW_JOBS__QUOTA_CONFIGMAP", "")
    with SimCluster(config) as cluster:
        if not cluster.store.list("namespaces", field_selector=f"metadata.name={NAMESPACE}"):
            cluster.store.create("namespaces", {"metadata": {"name": NAMESPACE}})
        apply_shipped(cluster, ROLE, NAMESPACE)
        apply_shipped(cluster, POD_SECURITY, NAMESPACE)
        apply_shipped(cluster, POLICY, NAMESPACE)
        cluster.store.create("roles", CAROL_ROLE, NAMESPACE)
        cluster.store.create(
            "rolebindings",
            binding(
                "carol",
                "cancels-jobs",
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": CAROL},
            ),
            NAMESPACE,
        )
        carol = write_kubeconfig(str(tmp_path / "carol.yaml"), cluster.url, "carol-token")
        yield cluster, component_runner(cluster, tmp_path, monkeypatch), carol


def submit(try_number: int, store: StateStore, run_id: str) -> TaskDeferred | AirflowFailException:
    op = JobOperator(
        task_id="train", image="t:1", group="vision", gpus=1, workers=2, retries=1, namespace=NAMESPACE
    )
    ti = FakeTI("cancelled_for_good", "train", run_id, -1, try_number, 1)
    try:
        op.execute({"ti": ti, "task_state_store": store})
    except (TaskDeferred, AirflowFailException) as outcome:
        return outcome
    raise AssertionError("execute neither deferred nor failed")


async def _refused(call) -> KubeError:
    with pytest.raises(KubeError) as info:
        await call()
    return info.value


def test_the_api_server_records_a_cancel_and_the_worker_s_retry_reads_it(enforced):
    _cluster, run_as, _carol = enforced
    store = StateStore()
    run_as("worker")
    first = submit(1, store, "run-1")
    assert isinstance(first, TaskDeferred)
    name = first.trigger.job_name

    async def cancel_as_the_api_server() -> None:
        client = await KubeClient.from_connection()
        try:
            outcome = await inspect.cancel(client, TARGET, name, "bob")
            assert outcome.deleted, outcome  # a queued MPIJob: deleted, after its record was written
            assert await client.get_or_none(MPIJOBS, NAMESPACE, name) is None
        finally:
            await client.close()

    run_as("api-server")
    asyncio.run(cancel_as_the_api_server())
    run_as("worker")
    retry = submit(2, store, "run-1")
    assert isinstance(retry, AirflowFailException), retry
    assert str(retry).startswith(f"try 1 of this task was cancelled (job {name}, by bob at ")


def test_a_dag_s_code_can_neither_write_nor_delete_a_record(enforced):
    cluster, run_as, _carol = enforced
    planted = a_record("run-planted")
    kept = a_record("run-kept")
    cluster.store.create("leases", kept, NAMESPACE)

    async def as_current() -> list[KubeError]:
        client = await KubeClient.from_connection()
        try:
            return [
                await _refused(lambda: client.create(LEASES, NAMESPACE, planted)),
                await _refused(lambda: client.delete(LEASES, NAMESPACE, kept["metadata"]["name"])),
            ]
        finally:
            await client.close()

    for component in ("worker", "triggerer"):
        run_as(component)
        create, delete = asyncio.run(as_current())
        assert (create.status, delete.status) == (403, 403)
        assert 'cannot create resource "leases"' in str(create) and 'cannot delete resource "leases"' in str(
            delete
        )

    # A platform that grants workers Leases for its own use: the admission policy still refuses records.
    cluster.store.create("roles", WORKER_LEASES_ROLE, NAMESPACE)
    worker = {"kind": "ServiceAccount", "name": "airflow-worker", "namespace": "airflow"}
    cluster.store.create("rolebindings", binding("worker-leases", "worker-leases", worker), NAMESPACE)
    run_as("worker")
    create, delete = asyncio.run(as_current())
    for refused in (create, delete):
        assert refused.status == 403, refused
        assert "ValidatingAdmissionPolicy 'airflow-jobs-cancel-records'" in str(refused)
        assert "only a person's cancel (the GPU Jobs page) writes a cancel record" in str(refused)
    assert cluster.store.get("leases", kept["metadata"]["name"], NAMESPACE) is not None


def test_the_api_server_writes_no_other_lease_than_a_record(enforced):
    _cluster, run_as, _carol = enforced
    run_as("api-server")

    async def go() -> KubeError:
        client = await KubeClient.from_connection()
        try:
            return await _refused(
                lambda: client.create(
                    LEASES, NAMESPACE, {"metadata": {"name": "some-controller-leader"}, "spec": {}}
                )
            )
        finally:
            await client.close()

    refused = asyncio.run(go())
    assert (
        refused.status == 403
        and "airflow-jobs rule cancel-records: the api-server may only create" in str(refused)
    )


def test_a_cli_user_who_may_not_record_a_cancel_cancels_nothing(enforced):
    cluster, run_as, carol = enforced
    run_as("worker")
    deferred = submit(1, StateStore(), "run-carol")
    assert isinstance(deferred, TaskDeferred)
    name = deferred.trigger.job_name

    async def cancel_as_carol() -> CancelNotRecorded:
        client = await KubeClient.from_kubeconfig(carol)
        try:
            with pytest.raises(CancelNotRecorded) as info:
                await inspect.cancel(client, TARGET, name, CAROL)
            return info.value
        finally:
            await client.close()

    refused = asyncio.run(cancel_as_carol())
    assert refused.status == 403
    assert str(refused).startswith(
        f"403 Forbidden: mpijob/{name} was not cancelled: its cancel could not be recorded"
    )
    assert "needs create on leases.coordination.k8s.io in namespace airflow" in str(refused)
    job = cluster.store.get("mpijobs", name, NAMESPACE)
    assert job is not None and labels.VERDICT not in (job["metadata"].get("annotations") or {})
    assert cluster.store.list("leases", namespace=NAMESPACE) == []
