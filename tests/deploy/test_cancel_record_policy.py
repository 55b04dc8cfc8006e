"""helm-values: who may write the record a cancel leaves (jobs/cancel_record.py), RBAC and the
ValidatingAdmissionPolicy rule cancel-records, evaluated with the simulator's CEL evaluator against the
product's own record (``cancel_record.lease``) and the writes a DAG's code would try."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml
from airflow_jobs_sim.admission_policy import AdmissionRequest
from airflow_jobs_sim.admission_policy import refusals as policy_refusals

from airflow_jobs_plugin.jobs import cancel_record, labels
from airflow_jobs_plugin.jobs.cancel_record import CancelRecord
from airflow_jobs_plugin.jobs.naming import TaskIdentity

HELM = Path(__file__).resolve().parents[2] / "helm-values"
WORKER = "system:serviceaccount:airflow:airflow-worker"
TRIGGERER = "system:serviceaccount:airflow:airflow-triggerer"
API_SERVER = "system:serviceaccount:airflow:airflow-api-server"
CONTROLLER = "system:serviceaccount:airflow-jobs-system:airflow-jobs-controller"
RULE = "airflow-jobs rule cancel-records"

TASK = TaskIdentity("nightly", "train", "run-1", -1, 1)
RECORD = cancel_record.lease(
    CancelRecord(
        TASK, "MPIJob", TASK.job_name(1), "bob", datetime(2026, 3, 1, tzinfo=timezone.utc), timedelta(days=7)
    )
)


def refusals(who: str, operation: str, lease: dict) -> list[str]:
    docs = [d for d in yaml.safe_load_all((HELM / "admission-policy.yaml").read_text()) if d]
    request = AdmissionRequest(
        operation=operation,
        group="coordination.k8s.io",
        resource="leases",
        namespace="airflow-jobs",
        name=lease["metadata"]["name"],
        username=who,
        groups=(),
        object=None if operation == "DELETE" else lease,
        old_object=lease if operation != "CREATE" else None,
    )
    return [
        message
        for policy in docs
        if policy["kind"] == "ValidatingAdmissionPolicy"
        for _reason, message in policy_refusals(policy, request)
    ]


def lease_named(name: str, **label_values: str) -> dict:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "labels": dict(label_values)},
        "spec": {"holderIdentity": "someone"},
    }


def test_the_api_server_records_a_cancel_and_the_sweep_deletes_it():
    assert refusals(API_SERVER, "CREATE", RECORD) == []
    assert refusals(API_SERVER, "DELETE", RECORD) == []


@pytest.mark.parametrize("who", [WORKER, TRIGGERER, CONTROLLER])
@pytest.mark.parametrize("operation", ["CREATE", "UPDATE", "DELETE"])
def test_a_dag_s_code_may_not_create_change_or_delete_a_record(who, operation):
    (message,) = refusals(who, operation, RECORD)
    assert message.startswith(f"{RULE}: only a person's cancel")


@pytest.mark.parametrize("who", [WORKER, TRIGGERER])
def test_other_leases_of_the_dag_identities_are_not_this_rule_s(who):
    assert refusals(who, "CREATE", lease_named("my-leader-election")) == []


@pytest.mark.parametrize(
    ("operation", "lease"),
    [
        ("CREATE", lease_named("some-controller-leader")),
        ("DELETE", lease_named("some-controller-leader")),
        # Named as a record but not labelled as one: the sweep would never find it to remove it.
        ("CREATE", lease_named(cancel_record.record_name(TASK))),
        ("CREATE", lease_named(cancel_record.record_name(TASK), **{labels.RECORD: "other"})),
        # A record, once written, is never rewritten (who cancelled and when stay the first cancel's).
        ("UPDATE", RECORD),
    ],
)
def test_the_api_server_writes_no_other_lease_and_never_rewrites_a_record(operation, lease):
    (message,) = refusals(API_SERVER, operation, lease)
    assert message.startswith(f"{RULE}: the api-server may only create cancel records")


def _rules(account: str) -> list[dict]:
    docs = [d for d in yaml.safe_load_all((HELM / "rbac.yaml").read_text()) if d]
    (binding,) = [d for d in docs if d["kind"] == "RoleBinding" and d["subjects"][0]["name"] == account]
    (role,) = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == binding["roleRef"]["name"]]
    return role["rules"]


def _lease_verbs(account: str) -> set[str]:
    return {
        verb
        for rule in _rules(account)
        if "coordination.k8s.io" in rule["apiGroups"] and "leases" in rule["resources"]
        for verb in rule["verbs"]
    }


def test_rbac_lets_workers_read_records_and_only_the_api_server_write_them():
    assert _lease_verbs("airflow-worker") == {"get"}
    assert _lease_verbs("airflow-triggerer") == set()
    assert _lease_verbs("airflow-api-server") == {"get", "list", "create", "delete"}
