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
from airflow_jobs_sim.admission_policy import AdmissionRequest
from airflow_jobs_sim.admission_policy import refusals as policy_refusals
from airflow_jobs_sim.patch import merge_patch

from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.actions import RESUME_PATCH, stop_patch
from airflow_jobs_plugin.jobs.manifests import build_manifest
from airflow_jobs_plugin.jobs.spec import JobSpec, TaskIdentity
from airflow_jobs_plugin.queueing.quota.ledger import (
    ENDING_DEADLINE_SECONDS,
    unsuspend_patch,
    verdict_patch,
)
from airflow_jobs_plugin.queueing.quota.ledger_model import ledger_name

HELM = Path(__file__).resolve().parents[2] / "helm-values"
WORKER = "system:serviceaccount:airflow:airflow-worker"
TRIGGERER = "system:serviceaccount:airflow:airflow-triggerer"
API_SERVER = "system:serviceaccount:airflow:airflow-api-server"
RESOURCES = {
    "Job": ("batch", "jobs"),
    "MPIJob": ("kubeflow.org", "mpijobs"),
    "ConfigMap": ("", "configmaps"),
    "Pod": ("", "pods"),
    "Deployment": ("apps", "deployments"),
    "CronJob": ("batch", "cronjobs"),
    "JobSet": ("jobset.x-k8s.io", "jobsets"),
    "Service": ("", "services"),
}


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


def refusals(request: Request, params: dict[str, dict] | None = None) -> list[str]:
    """The messages of every validation the request fails, over all policies that select it, evaluated
    by the simulator's ValidatingAdmissionPolicy (``sim/admission_policy.py``, cel-python). A policy with
    a parameter reads the ConfigMap rbac.yaml ships for it, or ``params[policy]``."""
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
    return [
        message
        for policy in policies()
        for _reason, message in policy_refusals(
            policy, attributes, {**PARAMS, **(params or {})}.get(policy["metadata"]["name"])
        )
    ]


def shipped_configmap(name: str) -> dict:
    """A ConfigMap rbac.yaml ships (a policy's parameter)."""
    (found,) = [
        d
        for d in yaml.safe_load_all((HELM / "rbac.yaml").read_text())
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == name
    ]
    return found


def job_accounts() -> dict:
    """rbac.yaml's parameter of the rule job-accounts: the accounts jobs may run as."""
    return shipped_configmap("airflow-jobs-job-accounts")


JOB_ACCOUNTS = job_accounts()
# Each parameterised policy's parameter as shipped: the ConfigMap its binding's paramRef names.
PARAMS = {
    d["spec"]["policyName"]: shipped_configmap(d["spec"]["paramRef"]["name"])
    for d in yaml.safe_load_all((HELM / "admission-policy.yaml").read_text())
    if d["kind"] == "ValidatingAdmissionPolicyBinding" and d["spec"].get("paramRef")
}


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
    # The API server reports the first validation that fails; the GPUs rule below fails too.
    message = refusals(
        Request(API_SERVER, "UPDATE", patched(cancelled, {"spec": {"parallelism": 1}}), cancelled)
    )[0]
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
    message = refusals(Request(who, "UPDATE", patched(running, {"spec": {"parallelism": 8}}), running))[0]
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


def test_a_job_with_no_labels_no_suspend_and_no_charge_is_refused_on_every_count():
    bare = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "sneak"}, "spec": {"template": {}}}
    found = refusals(Request(WORKER, "CREATE", bare))
    assert [m.split(":")[0] for m in found] == ["airflow-jobs rule suspended-submission"] * 2 + [
        "airflow-jobs rule charge-the-spec"
    ]


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


# --- charge-the-spec: the annotations are what the pods ask for ---

CHARGE = "airflow-jobs rule charge-the-spec"
USER_ACTIONS = "airflow-jobs rule user-actions-only"


def built(**args) -> dict:
    spec = JobSpec.build(image="trainer:1", group="vision", user="retraining-bot", **args)
    return build_manifest(spec, name=TASK.job_name(1), task=TASK, attempt=1, queued_at=QUEUED_AT)


def pod_specs(job: dict) -> list[dict]:
    if job["kind"] == "MPIJob":
        return [r["template"]["spec"] for r in job["spec"]["mpiReplicaSpecs"].values()]
    return [job["spec"]["template"]["spec"]]


@pytest.mark.parametrize(
    "args",
    [
        {"gpus": 1},
        {"gpus": 0},
        {"gpus": 2, "workers": 3},
        {"gpus": 2, "workers": 3, "launcher_gpus": 2},
        {"gpus": 4, "workers": 2, "framework": "torchrun"},
        {"gpus": 3, "gpu_resource": "nvidia.com/mig-1g.10gb"},
        {"gpus": 1, "init_containers": [{"name": "fetch", "image": "x"}]},
    ],
    ids=["1-gpu", "cpu-only", "mpi", "mpi-launcher-gpus", "torchrun", "mig", "init-container"],
)
def test_every_job_the_operator_builds_passes_charge_the_spec(args):
    assert refusals(Request(WORKER, "CREATE", built(**args))) == []


def test_a_job_annotated_fewer_gpus_than_its_pods_ask_for_is_refused():
    forged = built(gpus=8, workers=2, framework="torchrun")
    forged["metadata"]["annotations"][labels.GPUS] = "1"
    (message,) = refusals(Request(WORKER, "CREATE", forged))
    assert message.startswith(f"{CHARGE}: the annotation airflow-jobs.io/gpus must be the GPUs")


def test_a_gpu_init_container_or_sidecar_is_refused(job):
    for sidecar in (False, True):
        cheat = copy.deepcopy(job)
        init = {"name": "warm", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
        if sidecar:
            init["restartPolicy"] = "Always"
        pod_specs(cheat)[-1].setdefault("initContainers", []).append(init)
        (message,) = refusals(Request(WORKER, "CREATE", cheat))
        assert message.startswith(f"{CHARGE}: a job's containers may ask only for the device")


def test_another_accelerator_than_the_charged_device_is_refused(job):
    cheat = copy.deepcopy(job)
    pod_specs(cheat)[-1]["containers"][0]["resources"]["limits"]["habana.ai/gaudi"] = "8"
    (message,) = refusals(Request(WORKER, "CREATE", cheat))
    assert message.startswith(f"{CHARGE}: a job's containers may ask only for the device")


@pytest.mark.parametrize(
    ("field", "value", "rule"),
    [
        ("nodeName", "gpu-node-1", "spec.nodeName (binds a pod past the scheduler)"),
        ("resourceClaims", [{"name": "gpu", "resourceClaimName": "all-gpus"}], "DRA"),
    ],
)
def test_node_name_and_dra_claims_are_refused(job, field, value, rule):
    cheat = copy.deepcopy(job)
    pod_specs(cheat)[-1][field] = value
    (message,) = refusals(Request(WORKER, "CREATE", cheat))
    assert message.startswith(CHARGE) and rule in message


def test_a_privileged_container_and_visible_devices_are_refused(job):
    privileged = copy.deepcopy(job)
    pod_specs(privileged)[-1]["containers"][0]["securityContext"] = {"privileged": True}
    (message,) = refusals(Request(WORKER, "CREATE", privileged))
    assert message.startswith(f"{CHARGE}: a privileged container sees every GPU")
    visible = copy.deepcopy(job)
    pod_specs(visible)[0]["containers"][0]["env"].append({"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"})
    (message,) = refusals(Request(WORKER, "CREATE", visible))
    assert message.startswith(f"{CHARGE}: NVIDIA_VISIBLE_DEVICES is the device plugin's")


def test_the_api_server_may_not_raise_a_queued_or_running_mpijob_s_workers():
    queued = created(manifest(workers=2))
    for old in (queued, patched(queued, unsuspend_patch(queued, QUEUED_AT))):
        more = patched(old, {"spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 8}}}})
        charge, actions_only = refusals(Request(API_SERVER, "UPDATE", more, old))
        assert charge.startswith(f"{CHARGE}: this identity may not raise the GPUs")
        assert actions_only.startswith(f"{USER_ACTIONS}: this identity may only cancel, stop or resume")


@pytest.mark.parametrize(
    "key", [labels.GPUS, labels.PRIORITY, labels.GROUP_NAME, labels.USER_NAME, labels.QUEUED_AT]
)
def test_the_api_server_may_not_rewrite_who_a_queued_job_is_charged_to_or_how(job, key):
    queued = created(job)
    rewrite = patched(queued, {"metadata": {"annotations": {key: "999"}}})
    charge, actions_only = refusals(Request(API_SERVER, "UPDATE", rewrite, queued))
    assert charge.startswith(f"{CHARGE}: who a job is charged to, its GPUs, device, priority and queue time")
    assert actions_only.startswith(f"{USER_ACTIONS}: this identity may write only the annotations")


def test_the_product_s_stop_and_resume_leave_the_charge_alone(job):
    queued = created(job)
    stopped = patched(queued, {"metadata": {"annotations": {labels.STOPPED_AT: "2026-01-01T00:00:00Z"}}})
    assert refusals(Request(API_SERVER, "UPDATE", stopped, queued)) == []
    resumed = patched(stopped, {"metadata": {"annotations": {labels.STOPPED_AT: None}}})
    assert refusals(Request(API_SERVER, "UPDATE", resumed, stopped)) == []


# --- user-actions-only: the api-server's identity changes only what a cancel, a stop, a resume needs ---


def _running(job: dict) -> dict:
    queued = created(job)
    return patched(queued, unsuspend_patch(queued, QUEUED_AT))


def _mpi_launcher() -> dict:
    """The launcher Job the MPI operator creates for an MPIJob (no product labels)."""
    return created(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": f"{TASK.job_name(1)}-launcher",
                "labels": {labels.MPI_JOB_NAME: TASK.job_name(1)},
            },
            "spec": {
                "suspend": False,
                "backoffLimit": 6,
                "template": {"spec": {"containers": [{"name": "l", "image": "x"}]}},
            },
        }
    )


def test_every_cancel_stop_and_resume_the_api_server_makes_passes(job):
    queued, running = created(job), _running(job)
    for old in (queued, running):
        for patch in (verdict_patch(old, "Cancelled", "cancelled by alice"), stop_patch(old, "alice")):
            new = patched(old, patch)
            assert refusals(Request(API_SERVER, "UPDATE", new, old)) == [], patch
    stopped = patched(running, stop_patch(running, "alice"))
    resumed = patched(stopped, dict(RESUME_PATCH))
    assert refusals(Request(API_SERVER, "UPDATE", resumed, stopped)) == []
    launcher = _mpi_launcher()
    ended = patched(launcher, {"spec": {"activeDeadlineSeconds": ENDING_DEADLINE_SECONDS}})
    assert refusals(Request(API_SERVER, "UPDATE", ended, launcher)) == []


CHEATS = {
    "more Job completions": ("Job", {"spec": {"completions": 8}}),
    "another image": (
        "Job",
        {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "mallory/evil:1"}]}}}},
    ),
    "more retries": ("Job", {"spec": {"backoffLimit": 100}}),
    "a longer deadline": ("Job", {"spec": {"activeDeadlineSeconds": 999999}}),
    "more MPIJob workers of no GPU": ("MPIJob", {"spec": {"slotsPerWorker": 64}}),
    "another MPIJob cleanup": ("MPIJob", {"spec": {"runPolicy": {"cleanPodPolicy": "None"}}}),
    "another Kueue queue": ("Job", {"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "vip"}}}),
    "another Kueue priority": ("Job", {"metadata": {"labels": {"kueue.x-k8s.io/priority-class": "urgent"}}}),
    "another task key": ("Job", {"metadata": {"labels": {labels.TASK_KEY: "someone-else"}}}),
    "another requeue count": ("Job", {"metadata": {"annotations": {labels.REQUEUE_COUNT: "7"}}}),
    "no queue timeout": ("Job", {"metadata": {"annotations": {labels.QUEUE_TIMEOUT: "999999"}}}),
}


@pytest.mark.parametrize("cheat", sorted(CHEATS))
def test_the_api_server_may_change_nothing_a_user_action_does_not_need(cheat):
    kind, patch = CHEATS[cheat]
    for old in (
        created(manifest(workers=2 if kind == "MPIJob" else 1)),
        _running(manifest(workers=2 if kind == "MPIJob" else 1)),
    ):
        new = patched(old, patch)
        assert new != old, cheat
        messages = refusals(Request(API_SERVER, "UPDATE", new, old))
        assert any(m.startswith(USER_ACTIONS) for m in messages), (cheat, messages)


# --- job-accounts: a job's pods run as an account the platform chose ---

ACCOUNTS = "airflow-jobs rule job-accounts"


def test_the_operator_s_job_runs_as_the_default_account_without_its_token(job):
    for spec in pod_specs(job):
        assert spec["serviceAccountName"] == "default" and spec["automountServiceAccountToken"] is False
    for who in (WORKER, TRIGGERER, API_SERVER):
        assert refusals(Request(who, "CREATE", job)) == []


@pytest.mark.parametrize("who", [WORKER, TRIGGERER, API_SERVER])
@pytest.mark.parametrize("field", ["serviceAccountName", "serviceAccount"])
def test_a_job_running_as_an_airflow_component_is_refused(job, who, field):
    cheat = copy.deepcopy(job)
    pod_specs(cheat)[-1][field] = "airflow-triggerer"
    messages = refusals(Request(who, "CREATE", cheat))
    assert any(
        m.startswith(f"{ACCOUNTS}: a job's pods run only as an account the platform allows") for m in messages
    )


@pytest.mark.parametrize("cheat", ["mounted", "unset", "projected"])
def test_a_job_running_as_the_default_account_with_its_token_is_refused(job, cheat):
    token = copy.deepcopy(job)
    spec = pod_specs(token)[-1]
    if cheat == "mounted":
        spec["automountServiceAccountToken"] = True
    elif cheat == "unset":
        del spec["automountServiceAccountToken"]
    else:
        spec.setdefault("volumes", []).append(
            {"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}
        )
    (message,) = refusals(Request(WORKER, "CREATE", token))
    assert message.startswith(
        f"{ACCOUNTS}: a job running as the namespace's default account runs without its token"
    )


def test_an_account_the_platform_allowed_runs_with_its_own_token_settings(job):
    allowed = copy.deepcopy(job)
    for spec in pod_specs(allowed):
        spec["serviceAccountName"] = "trainer-s3-reader"
        del spec["automountServiceAccountToken"]
    params = {**JOB_ACCOUNTS, "data": {**JOB_ACCOUNTS["data"], "trainer-s3-reader": "reads the datasets"}}
    (policy,) = [p for p in policies() if p["metadata"]["name"] == "airflow-jobs-job-accounts"]
    attributes = AdmissionRequest(
        "CREATE",
        *Request(WORKER, "CREATE", allowed).group_resource,
        "airflow",
        allowed["metadata"]["name"],
        WORKER,
        (),
        allowed,
        None,
    )
    assert policy_refusals(policy, attributes, params) == []
    assert any(m.startswith(ACCOUNTS) for m in refusals(Request(WORKER, "CREATE", allowed)))


# --- no-uncharged-gpu-workloads: a worker's other rights start no GPU work ---

GPU_POD = {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}
CPU_POD = {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"cpu": "1"}}}]}


def workload(kind: str, pod: dict) -> dict:
    template = {"spec": pod}
    spec = {
        "Pod": pod,
        "Deployment": {"template": template},
        "CronJob": {"jobTemplate": {"spec": {"template": template}}},
        "JobSet": {"replicatedJobs": [{"name": "r", "template": {"spec": {"template": template}}}]},
    }[kind]
    return {"kind": kind, "metadata": {"name": "w"}, "spec": spec}


@pytest.mark.parametrize("kind", ["Pod", "Deployment", "CronJob", "JobSet"])
def test_a_worker_creating_gpu_work_outside_the_pool_is_refused(kind):
    (message,) = refusals(Request(WORKER, "CREATE", workload(kind, GPU_POD)))
    assert message.startswith("airflow-jobs rule no-uncharged-gpu-workloads")


def test_a_worker_s_pod_with_a_dra_claim_or_a_privileged_container_is_refused():
    claim = {**CPU_POD, "resourceClaims": [{"name": "gpu", "resourceClaimName": "all"}]}
    privileged = {"containers": [{"name": "c", "image": "x", "securityContext": {"privileged": True}}]}
    for pod in (claim, privileged):
        (message,) = refusals(Request(WORKER, "CREATE", workload("Pod", pod)))
        assert message.startswith("airflow-jobs rule no-uncharged-gpu-workloads")


@pytest.mark.parametrize("kind", ["Pod", "Deployment", "CronJob", "JobSet"])
def test_a_worker_s_cpu_work_and_other_identities_gpu_work_pass(kind):
    assert refusals(Request(WORKER, "CREATE", workload(kind, CPU_POD))) == []
    assert refusals(Request(TRIGGERER, "CREATE", workload(kind, GPU_POD))) == []


# --- priority-classes: a job names only the priority classes its group is given ---

CLASSES = "airflow-jobs rule priority-classes"
KUEUE_PRIORITY = "kueue.x-k8s.io/priority-class"
# The parameter a platform writes from its quota policy: vision may use two classes, nlp one.
GIVEN = {
    "airflow-jobs-priority-classes": {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "airflow-jobs-priority-classes"},
        "data": {"vision": "training-low,training-high", "nlp": "training-low"},
    }
}


def naming(job: dict, priority_class: str, where: str = "template") -> dict:
    """``job`` naming ``priority_class`` in its last pod template, its MPIJob gang or Kueue's label."""
    job = copy.deepcopy(job)
    if where == "template":
        pod_specs(job)[-1]["priorityClassName"] = priority_class
    elif where == "gang":
        job["spec"]["runPolicy"]["schedulingPolicy"] = {"priorityClass": priority_class}
    else:
        job["metadata"]["labels"][KUEUE_PRIORITY] = priority_class
    return job


def test_the_shipped_parameter_gives_the_groups_of_the_shipped_policy_what_their_lists_say():
    """rbac.yaml's ConfigMap is the quota policy's priority_classes written for the API server: a key per
    group with a class, the classes comma-separated (a group without one has no key)."""
    from airflow_jobs_plugin.queueing.quota.parse import policy_from_configmap_data

    policy = policy_from_configmap_data(yaml.safe_load((HELM / "quota-policy.yaml").read_text())["data"])
    written = {
        g: ",".join(sorted(q.priority_classes)) for g, q in policy.groups.items() if q.priority_classes
    }
    assert (PARAMS["airflow-jobs-priority-classes"].get("data") or {}) == written


def test_a_job_naming_no_class_passes_whatever_the_parameter(job):
    assert refusals(Request(WORKER, "CREATE", job)) == []
    assert refusals(Request(WORKER, "CREATE", job), GIVEN) == []


@pytest.mark.parametrize("where", ["template", "label"])
@pytest.mark.parametrize("who", [WORKER, TRIGGERER, API_SERVER], ids=["worker", "triggerer", "api-server"])
def test_a_class_the_group_is_given_passes_and_another_is_refused_naming_group_class_and_allowed(
    job, who, where
):
    assert refusals(Request(who, "CREATE", naming(job, "training-high", where)), GIVEN) == []
    (message,) = refusals(Request(who, "CREATE", naming(job, "training-urgent", where)), GIVEN)
    assert message == (
        f"{CLASSES}: group vision may not use priority class training-urgent (allowed: "
        "training-low,training-high; the ConfigMap airflow-jobs-priority-classes, groups.vision.priority_classes "
        "in the quota policy); name one of those, or none for the cluster's default"
    )


def test_with_the_shipped_parameter_no_group_may_name_a_class(job):
    (message,) = refusals(Request(WORKER, "CREATE", naming(job, "training-high")))
    assert message.startswith(
        f"{CLASSES}: group vision may not use priority class training-high (allowed: none;"
    )


@pytest.mark.parametrize("where", ["template", "gang", "label"])
def test_a_system_class_is_refused_even_where_the_parameter_lists_it(where):
    job = manifest(workers=2)
    given = copy.deepcopy(GIVEN)
    given["airflow-jobs-priority-classes"]["data"]["vision"] = "system-node-critical"
    messages = refusals(Request(WORKER, "CREATE", naming(job, "system-node-critical", where)), given)
    assert messages == [
        f"{CLASSES}: priority class system-node-critical is one of the cluster's own (system-*), whose pods "
        "preempt any other pod of their node; no job may name it, whatever its group is allowed; remove it"
    ]


def test_a_raw_mpijob_naming_a_gang_class_its_group_may_not_use_is_refused():
    (message,) = refusals(
        Request(WORKER, "CREATE", naming(manifest(workers=2), "training-high", "gang")),
        {
            "airflow-jobs-priority-classes": {
                **GIVEN["airflow-jobs-priority-classes"],
                "data": {"vision": "x"},
            }
        },
    )
    assert message.startswith(
        f"{CLASSES}: group vision may not use priority class training-high (allowed: x;"
    )


def test_the_group_is_the_exact_name_the_pool_reads_not_the_label():
    """A job labelled vision but annotated nlp is charged to nlp (JobView.group): nlp's list judges it."""
    job = naming(manifest(), "training-high")
    job["metadata"]["annotations"][labels.GROUP_NAME] = "nlp"
    (message,) = refusals(Request(WORKER, "CREATE", job), GIVEN)
    assert message.startswith(
        f"{CLASSES}: group nlp may not use priority class training-high (allowed: training-low;"
    )


def test_an_update_judges_only_the_classes_it_brings(job):
    """A job created before the rule (or by an admin) with a class is still cancelled and stopped; adding
    one on an update is refused like a create."""
    old = created(naming(job, "system-node-critical"))
    for patch in (verdict_patch(old, "Cancelled", "cancelled by alice"), stop_patch(old, "alice")):
        assert not [
            m for m in refusals(Request(API_SERVER, "UPDATE", patched(old, patch), old)) if CLASSES in m
        ]
    queued = created(job)
    relabelled = patched(queued, {"metadata": {"labels": {KUEUE_PRIORITY: "system-node-critical"}}})
    messages = refusals(Request(TRIGGERER, "UPDATE", relabelled, queued))
    assert [m for m in messages if m.startswith(CLASSES)] == [
        f"{CLASSES}: priority class system-node-critical is one of the cluster's own (system-*), whose pods "
        "preempt any other pod of their node; no job may name it, whatever its group is allowed; remove it"
    ]


# --- services: the one Service the product creates, a torchrun job's headless Service ---

SERVICES = "airflow-jobs rule services"


def torchrun_service() -> dict:
    """The Service the submitter creates beside a created torchrun Job (kinds' companions)."""
    from airflow_jobs_plugin.jobs import kinds

    job = created(built(gpus=4, workers=2, framework="torchrun"))
    job["metadata"]["namespace"] = "airflow"
    ((resource, service),) = kinds.kind_of(job).companions(job)
    assert resource.plural == "services"
    return service


@pytest.mark.parametrize("who", [WORKER, TRIGGERER, API_SERVER], ids=["worker", "triggerer", "api-server"])
def test_the_torchrun_jobs_own_service_passes(who):
    service = torchrun_service()
    assert refusals(Request(who, "CREATE", service)) == []
    assert refusals(Request(who, "UPDATE", service, service)) == []


def _service(**changes) -> dict:
    service = copy.deepcopy(torchrun_service())
    for path, value in changes.items():
        holder = service
        *parents, key = path.split(".")
        for parent in parents:
            holder = holder[parent]
        if value is None:
            holder.pop(key, None)
        else:
            holder[key] = value
    return service


API_SERVER_PODS = {"component": "api-server", "release": "airflow"}
SERVICE_CHEATS = {
    # CVE-2020-8554: a Service claiming an address takes the cluster's traffic to it.
    "externalIPs": (_service(**{"spec.externalIPs": ["10.0.0.1"]}), "spec.externalIPs lets a Service take"),
    "a NodePort on Airflow's api-server": (
        _service(
            **{
                "spec.type": "NodePort",
                "spec.clusterIP": None,
                "spec.selector": API_SERVER_PODS,
                "spec.ports": [{"port": 8080, "nodePort": 30080}],
            }
        ),
        "only a job's headless Service may be created, of type ClusterIP",
    ),
    "a LoadBalancer": (
        _service(**{"spec.type": "LoadBalancer", "spec.loadBalancerIP": "1.2.3.4"}),
        "only a job's headless Service may be created",
    ),
    "a load-balancer IP on a ClusterIP": (
        _service(**{"spec.loadBalancerIP": "1.2.3.4"}),
        "no nodePort, externalName or loadBalancer* field",
    ),
    "an ExternalName": (
        _service(
            **{"spec.type": "ExternalName", "spec.externalName": "evil.example", "spec.clusterIP": None}
        ),
        "only a job's headless Service may be created",
    ),
    "a virtual IP": (_service(**{"spec.clusterIP": "10.96.0.77"}), "a job's Service is headless"),
    "no clusterIP": (_service(**{"spec.clusterIP": None}), "a job's Service is headless"),
    "the api-server's pods": (
        _service(**{"spec.selector": API_SERVER_PODS}),
        "spec.selector must be exactly {batch.kubernetes.io/job-name: <the Service's name>}",
    ),
    "another job's pods": (
        _service(**{"spec.selector": {labels.BATCH_JOB_NAME: "someone-elses-job"}}),
        "spec.selector must be exactly",
    ),
    "a wider selector": (
        _service(**{"spec.selector": {labels.MANAGED_BY: labels.MANAGED_BY_VALUE}}),
        "spec.selector must be exactly",
    ),
    "a second selector key": (
        _service(**{"spec.selector": {labels.BATCH_JOB_NAME: TASK.job_name(1), "component": "api-server"}}),
        "spec.selector must be exactly",
    ),
    "no selector": (_service(**{"spec.selector": None}), "spec.selector must be exactly"),
    "no owner": (_service(**{"metadata.ownerReferences": None}), "a job's Service is owned by its Job"),
    "another owner": (
        _service(
            **{
                "metadata.ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "Deployment", "name": "airflow-api-server", "uid": "u"}
                ]
            }
        ),
        "a job's Service is owned by its Job",
    ),
}


@pytest.mark.parametrize("cheat", sorted(SERVICE_CHEATS))
@pytest.mark.parametrize("who", [WORKER, TRIGGERER, API_SERVER], ids=["worker", "triggerer", "api-server"])
def test_every_other_service_is_refused_naming_the_rule_and_the_fix(who, cheat):
    service, said = SERVICE_CHEATS[cheat]
    messages = refusals(Request(who, "CREATE", service))
    assert messages and all(m.startswith(f"{SERVICES}: ") for m in messages), messages
    assert any(said in m for m in messages), messages
    # An update may not turn the job's Service into one either.
    assert refusals(Request(who, "UPDATE", service, torchrun_service())) == messages


def test_services_of_other_identities_are_not_the_rules_to_judge():
    service, _ = SERVICE_CHEATS["a NodePort on Airflow's api-server"]
    assert refusals(Request("system:serviceaccount:kube-system:mpi-operator", "CREATE", service)) == []
