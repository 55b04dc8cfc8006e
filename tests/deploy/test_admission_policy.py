"""helm-values/admission-policy.yaml: the API server refuses a job that skips the GPU quota pool.

The policies' CEL expressions are evaluated here with cel-python, the way the API server evaluates a
ValidatingAdmissionPolicy (kubernetes/kubernetes v1.30,
staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/validating: matchConstraints select the request,
every matchCondition must hold, variables are evaluated in order under ``variables``, and each
validation that is false refuses the request with its message; ``oldObject`` is null on CREATE). The
requests are the product's own: its manifests (``manifests.build_manifest``), the admission's unsuspend
patch and the cancel's verdict patch, applied as the API server applies a merge patch (RFC 7386).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from airflow_jobs_plugin import labels
from airflow_jobs_plugin.manifests import build_manifest
from airflow_jobs_plugin.quota.ledger import unsuspend_patch, verdict_patch
from airflow_jobs_plugin.quota.ledger_model import ledger_name
from airflow_jobs_plugin.sim.admission_policy import AdmissionRequest
from airflow_jobs_plugin.sim.admission_policy import refusals as policy_refusals
from airflow_jobs_plugin.sim.patch import merge_patch
from airflow_jobs_plugin.spec import JobSpec, TaskIdentity

HELM = Path(__file__).resolve().parents[2] / "helm-values"
WORKER = "system:serviceaccount:airflow:airflow-worker"
TRIGGERER = "system:serviceaccount:airflow:airflow-triggerer"
API_SERVER = "system:serviceaccount:airflow:airflow-api-server"
RESOURCES = {"Job": ("batch", "jobs"), "MPIJob": ("kubeflow.org", "mpijobs"), "ConfigMap": ("", "configmaps")}


@dataclass(frozen=True)
class Request:
    username: str
    operation: str  # CREATE / UPDATE
    object: dict
    old_object: dict | None = None

    @property
    def group_resource(self) -> tuple[str, str]:
        return RESOURCES[self.object["kind"]]


def policies() -> list[dict]:
    return [
        d
        for d in yaml.safe_load_all((HELM / "admission-policy.yaml").read_text())
        if d["kind"] == "ValidatingAdmissionPolicy"
    ]


def refusals(request: Request) -> list[str]:
    """The messages of every validation the request fails, over all policies that select it, evaluated
    by the simulator's ValidatingAdmissionPolicy (``sim/admission_policy.py``, cel-python)."""
    group, resource = request.group_resource
    attributes = AdmissionRequest(
        operation=request.operation,
        group=group,
        resource=resource,
        namespace="airflow",
        name=request.object["metadata"].get("name") or "",
        username=request.username,
        groups=(),
        object=request.object,
        old_object=request.old_object,
    )
    return [message for policy in policies() for _reason, message in policy_refusals(policy, attributes)]


# --- the product's real requests ---

TASK = TaskIdentity(dag_id="retrain", task_id="train", run_id="manual__1", try_number=1)
QUEUED_AT = datetime(2026, 1, 1, tzinfo=timezone.utc)


def manifest(workers: int = 1) -> dict:
    spec = JobSpec.build(image="trainer:1", group="vision", user="retraining-bot", gpus=2, workers=workers)
    return build_manifest(spec, name=TASK.job_name(1), task=TASK, attempt=1, queued_at=QUEUED_AT)


def patched(job: dict, patch: dict) -> dict:
    """The object the API server validates after a merge patch (metadata preconditions aside)."""
    body = copy.deepcopy(patch)
    body.get("metadata", {}).pop("resourceVersion", None)
    return merge_patch(job, body)


def created(job: dict) -> dict:
    """What the API server then stores: what the next UPDATE's oldObject is."""
    return {**job, "metadata": {**job["metadata"], "uid": "u-1", "resourceVersion": "7"}}


@pytest.fixture(params=[1, 2], ids=["Job", "MPIJob"])
def job(request) -> dict:
    return manifest(workers=request.param)


def set_suspend(job: dict, value: bool | None) -> dict:
    job = copy.deepcopy(job)
    holder = job["spec"]["runPolicy"] if job["kind"] == "MPIJob" else job["spec"]
    if value is None:
        holder.pop("suspend")
    else:
        holder["suspend"] = value
    return job


# --- allowed ---


def test_the_operator_s_job_as_built_is_admitted_from_a_worker(job):
    assert refusals(Request(WORKER, "CREATE", job)) == []


def test_the_triggerer_s_admission_unsuspends(job):
    old = created(job)
    assert refusals(Request(TRIGGERER, "UPDATE", patched(old, unsuspend_patch(old, QUEUED_AT)), old)) == []


def test_the_ui_s_cancel_passes_and_the_triggerer_ends_a_job_it_ruled_failed(job):
    queued = created(job)
    running = patched(queued, unsuspend_patch(queued, QUEUED_AT))
    cancel = {"metadata": {"annotations": {labels.VERDICT: "Cancelled", labels.CANCELLED_BY: "admin"}}}
    for old in (queued, running):
        assert refusals(Request(API_SERVER, "UPDATE", patched(old, cancel), old)) == []
        # A job ruled failed is ended through its own deadline; a queued one is released with
        # parallelism 0 for that (quota.ledger.verdict_patch): only the triggerers rule.
        assert refusals(Request(TRIGGERER, "UPDATE", patched(old, verdict_patch(old, "X", "y")), old)) == []
    assert (
        refusals(Request(API_SERVER, "UPDATE", patched(running, verdict_patch(running, "X", "y")), running))
        == []
    )


def test_the_ui_s_cancel_of_a_queued_job_resumes_it_with_no_pod_to_end_it():
    """Parallelism 0 starts nothing (actions.cancel ends a queued Job so, to keep it listed until its TTL);
    a later raise of it would, and is refused. (A queued MPIJob is deleted by its cancel.)"""
    queued = created(manifest(workers=1))
    cancelled = patched(queued, verdict_patch(queued, "Cancelled", "cancelled by admin"))
    assert refusals(Request(API_SERVER, "UPDATE", cancelled, queued)) == []
    (message,) = refusals(
        Request(API_SERVER, "UPDATE", patched(cancelled, {"spec": {"parallelism": 1}}), cancelled)
    )
    assert message.startswith("airflow-jobs rule admission-by-triggerer: this identity may not raise")


def test_an_unsuspend_that_keeps_the_job_s_pods_stays_the_triggerer_s_alone():
    queued = created(manifest(workers=1))
    (message,) = refusals(
        Request(API_SERVER, "UPDATE", patched(queued, {"spec": {"suspend": False, "parallelism": 1}}), queued)
    )
    assert message.startswith("airflow-jobs rule admission-by-triggerer: only the triggerer's admission")


@pytest.mark.parametrize("who", [WORKER, API_SERVER], ids=["worker", "api-server"])
def test_raising_a_running_job_s_parallelism_is_refused(who):
    running = created(manifest(workers=1))
    running = patched(running, unsuspend_patch(running, QUEUED_AT))
    (message,) = refusals(Request(who, "UPDATE", patched(running, {"spec": {"parallelism": 8}}), running))
    assert message.startswith("airflow-jobs rule admission-by-triggerer: this identity may not raise")


def test_the_triggerer_opens_a_group_ledger():
    ledger = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": ledger_name("vision")}}
    assert refusals(Request(TRIGGERER, "CREATE", ledger)) == []


# --- refused, with the rule named ---


@pytest.mark.parametrize("value", [False, None], ids=["suspend false", "suspend absent"])
def test_a_worker_creating_an_unsuspended_job_is_refused(job, value):
    (message,) = refusals(Request(WORKER, "CREATE", set_suspend(job, value)))
    assert message.startswith("airflow-jobs rule suspended-submission: a job must be created suspended")


@pytest.mark.parametrize(
    "label",
    [labels.MANAGED_BY, labels.GROUP, labels.USER, labels.TASK_KEY],
    ids=lambda name: name.split("/")[-1],
)
def test_a_worker_creating_a_job_without_the_product_s_labels_is_refused(job, label):
    unlabelled = copy.deepcopy(job)
    del unlabelled["metadata"]["labels"][label]
    (message,) = refusals(Request(WORKER, "CREATE", unlabelled))
    assert "airflow-jobs rule suspended-submission: a job must carry the product's labels" in message


def test_a_worker_creating_a_job_labelled_admitted_is_refused(job):
    """``status`` reads every job without the label as one that may wait in the queue; a job created
    with it would hide there (inspect._jobs_for_page)."""
    early = copy.deepcopy(job)
    early["metadata"]["labels"][labels.ADMITTED] = labels.ADMITTED_VALUE
    (message,) = refusals(Request(WORKER, "CREATE", early))
    assert "created waiting for the GPU quota pool, so without the label airflow-jobs.io/admitted" in message


def test_a_job_with_no_labels_and_no_suspend_is_refused_on_both_counts():
    bare = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "sneak"}, "spec": {"template": {}}}
    assert len(refusals(Request(WORKER, "CREATE", bare))) == 2


@pytest.mark.parametrize("who", [WORKER, API_SERVER], ids=["worker", "api-server"])
def test_unsuspending_behind_the_pool_is_refused(job, who):
    old = created(job)
    (message,) = refusals(Request(who, "UPDATE", patched(old, unsuspend_patch(old, QUEUED_AT)), old))
    assert message.startswith("airflow-jobs rule admission-by-triggerer: only the triggerer's admission")


@pytest.mark.parametrize("name", ["airflow-jobs-quota-policy", "airflow-config", "sneaky"])
def test_the_triggerer_creates_no_configmap_but_a_ledger(name):
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}
    (message,) = refusals(Request(TRIGGERER, "CREATE", configmap))
    assert message.startswith("airflow-jobs rule ledger-names")


# --- the policy file agrees with rbac.yaml and values.yaml ---


def test_the_bindings_deny_in_the_namespace_and_name_the_identities_rbac_binds():
    docs = list(yaml.safe_load_all((HELM / "admission-policy.yaml").read_text()))
    names = {d["metadata"]["name"] for d in docs if d["kind"] == "ValidatingAdmissionPolicy"}
    bindings = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert {b["spec"]["policyName"] for b in bindings} == names
    rbac = [d for d in yaml.safe_load_all((HELM / "rbac.yaml").read_text()) if d["kind"] == "RoleBinding"]
    subjects = {f"system:serviceaccount:{s['namespace']}:{s['name']}" for b in rbac for s in b["subjects"]}
    assert subjects == {WORKER, TRIGGERER, API_SERVER}
    namespaces = {s["namespace"] for b in rbac for s in b["subjects"]}
    for binding in bindings:
        assert binding["apiVersion"] == "admissionregistration.k8s.io/v1"
        assert binding["spec"]["validationActions"] == ["Deny"]
        selector = binding["spec"]["matchResources"]["namespaceSelector"]["matchLabels"]
        assert {selector["kubernetes.io/metadata.name"]} == namespaces
    for policy in policies():
        assert policy["apiVersion"] == "admissionregistration.k8s.io/v1"
        assert policy["spec"]["failurePolicy"] == "Fail"
