"""helm-values/admission-policy.yaml: the API server lets only the admission controller start or charge a
GPU job, whoever else writes it.

The policies' CEL expressions are evaluated here with cel-python, the way the API server evaluates a
ValidatingAdmissionPolicy (kubernetes/kubernetes v1.36.3,
staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/validating: matchConstraints select the request,
every matchCondition must hold, variables are evaluated in order under ``variables``, and each
validation that is false refuses the request with its message; ``oldObject`` is null on CREATE). The
requests are the product's own, each as its identity sends it: the worker's submission
(``manifests.submitted_body``), the triggerer's next attempt (``attempts.next_attempt``) and kill request,
the admission controller's admission, hand-over, verdict, requeue, preemption, ending and expiry patches
and its ledger and board writes, the api-server's cancel, stop, resume and answer to a kill request,
Kueue's admission of a job handed to it and the MPI operator's launcher Job, applied as the API server
applies a merge patch (RFC 7386); and the cheats of each identity, refused naming their rule.
"""

from __future__ import annotations

import copy
import functools
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml
from airflow_jobs_sim.admission_policy import AdmissionRequest
from airflow_jobs_sim.admission_policy import refusals as policy_refusals
from airflow_jobs_sim.patch import merge_patch

from airflow_jobs_plugin.jobs import attempts, kinds, labels, manifests
from airflow_jobs_plugin.jobs.manifests import submitted_body
from airflow_jobs_plugin.jobs.spec import JobSpec, TaskIdentity
from airflow_jobs_plugin.queueing import board, kueue
from airflow_jobs_plugin.queueing.quota.ledger import (
    ENDING_DEADLINE_SECONDS,
    handoff_patch,
    preempt_patch,
    queued_job,
    requeue_patch,
    unsuspend_patch,
    verdict_only_patch,
    verdict_patch,
)
from airflow_jobs_plugin.queueing.quota.ledger_model import ledger_name
from airflow_jobs_plugin.queueing.quota.model import Reservation
from airflow_jobs_plugin.queueing.quota.requeue import Requeue
from airflow_jobs_plugin.usecases.actions import RESUME_PATCH, stop_patch

HELM = Path(__file__).resolve().parents[2] / "helm-values"
# The jobs' namespace of the shipped layout (pod-security.yaml's Namespace, the bindings' selector).
NAMESPACE = "airflow-jobs"
WORKER = "system:serviceaccount:airflow:airflow-worker"
TRIGGERER = "system:serviceaccount:airflow:airflow-triggerer"
API_SERVER = "system:serviceaccount:airflow:airflow-api-server"
CONTROLLER = "system:serviceaccount:airflow-jobs-system:airflow-jobs-controller"
# Kubeflow's manifests (deploy/v2beta1/mpi-operator.yaml) and Kueue's (config/default) deploy these.
MPI_OPERATOR = "system:serviceaccount:mpi-operator:mpi-operator"
KUEUE = "system:serviceaccount:kueue-system:kueue-controller-manager"
ADMIN = "kubernetes-admin"  # a cluster administrator's certificate (system:masters): no exemption
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

SUBMISSION = "airflow-jobs rule suspended-submission"
ADMISSION = "airflow-jobs rule admission-by-controller"
KILL = "airflow-jobs rule kill-request-only"
KUEUE_RULE = "airflow-jobs rule kueue-after-handoff"
CONTROLLER_CONFIGMAPS = "airflow-jobs rule controller-configmaps"
LEDGERS = "airflow-jobs rule ledgers-and-boards"


@dataclass(frozen=True)
class Request:
    username: str
    operation: str  # CREATE / UPDATE / DELETE
    object: dict | None
    old_object: dict | None = None

    @property
    def group_resource(self) -> tuple[str, str]:
        return RESOURCES[(self.object or self.old_object or {})["kind"]]


@functools.cache
def shipped_policy_file() -> tuple[dict, ...]:
    """admission-policy.yaml's documents, read once (the tests only read them)."""
    return tuple(yaml.safe_load_all((HELM / "admission-policy.yaml").read_text()))


def policies() -> list[dict]:
    return [d for d in shipped_policy_file() if d["kind"] == "ValidatingAdmissionPolicy"]


def refusals(request: Request, params: dict[str, dict] | None = None) -> list[str]:
    """The messages of every validation the request fails, over all policies that select it, evaluated
    by the simulator's ValidatingAdmissionPolicy (``sim/admission_policy.py``, cel-python). A policy with
    a parameter reads the ConfigMap rbac.yaml ships for it, or ``params[policy]``."""
    group, resource = request.group_resource
    attributes = AdmissionRequest(
        operation=request.operation,
        group=group,
        resource=resource,
        namespace=NAMESPACE,
        name=(request.object or request.old_object or {})["metadata"].get("name") or "",
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


def rules_of(messages: list[str]) -> set[str]:
    """The rules the messages name (``airflow-jobs rule <name>: ...``)."""
    return {m.split(":")[0] for m in messages}


def shipped_configmap(file: str, name: str) -> dict:
    """A ConfigMap a shipped file holds (a policy's parameter)."""
    (found,) = [
        d
        for d in yaml.safe_load_all((HELM / file).read_text())
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == name
    ]
    return found


def _shipped_parameter(name: str) -> dict:
    """A policy's parameter ConfigMap, from whichever shipped file holds it."""
    for file in ("rbac.yaml", "pod-security.yaml"):
        for d in yaml.safe_load_all((HELM / file).read_text()):
            if d and d["kind"] == "ConfigMap" and d["metadata"]["name"] == name:
                return d
    raise AssertionError(f"no shipped ConfigMap {name}")


# The policies' parameters as shipped: rbac.yaml's accounts jobs may run as (rule job-accounts) and
# priority classes per group (rule priority-classes), pod-security.yaml's RuntimeClasses (rule pod-security).
JOB_ACCOUNTS = shipped_configmap("rbac.yaml", "airflow-jobs-job-accounts")
RUNTIME_CLASSES = shipped_configmap("pod-security.yaml", "airflow-jobs-runtime-classes")
# Each parameterised policy's parameter as shipped: the ConfigMap its binding's paramRef names.
PARAMS = {
    d["spec"]["policyName"]: _shipped_parameter(d["spec"]["paramRef"]["name"])
    for d in shipped_policy_file()
    if d["kind"] == "ValidatingAdmissionPolicyBinding" and d["spec"].get("paramRef")
}


def shipped_params(policy: dict) -> dict | None:
    """The parameter the policy's binding names (``paramRef``), as shipped; None for a policy without."""
    return PARAMS.get(policy["metadata"]["name"]) if policy["spec"].get("paramKind") else None


# --- the product's real requests ---

TASK = TaskIdentity(dag_id="retrain", task_id="train", run_id="manual__1", try_number=1)
QUEUED_AT = datetime(2026, 1, 1, tzinfo=timezone.utc)


def built(kueue_queue: str | None = None, **args) -> dict:
    """What the worker creates for ``args`` (JobOperator's): ``submitted_body``, suspended and behind the
    pool's gate, a LocalQueue it names only asked for."""
    spec = JobSpec.build(
        image="trainer:1", group="vision", user="retraining-bot", kueue_queue=kueue_queue, **args
    )
    return submitted_body(spec, task=TASK, charge=None, fingerprint="digest", queued_at=QUEUED_AT)


def manifest(workers: int = 1) -> dict:
    return built(gpus=2, workers=workers)


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


def _admitted(job: dict) -> dict:
    """A created job as the controller admits it (unsuspended; its gate stays: no Kueue takes it)."""
    queued = created(job)
    return patched(queued, unsuspend_patch(queued, QUEUED_AT))


def _handed_over(job: dict) -> dict:
    """A created job as the controller hands it to Kueue (its LocalQueue named, the gate lifted)."""
    queued = created(job)
    return patched(queued, handoff_patch(queued, QUEUED_AT))


def _kill_request(try_number: str = "1") -> dict:
    """The triggerer's one write (JobTrigger.on_kill)."""
    return {"metadata": {"labels": {labels.KILL_REQUESTED: try_number}}}


# --- what each identity really sends passes ---


def test_the_workers_submission_passes(job):
    assert refusals(Request(WORKER, "CREATE", job)) == []
    # Naming a LocalQueue it only asks for it (kueue_handoff): no label, the annotation.
    asked = built(gpus=2, kueue_queue="team")
    assert kueue.QUEUE_NAME_LABEL not in asked["metadata"]["labels"]
    assert refusals(Request(WORKER, "CREATE", asked)) == []


def test_a_job_kueues_webhook_gave_its_default_queue_passes_behind_the_gate(job):
    """Kueue's mutating webhook gives a job naming no queue the LocalQueue ``default`` where the namespace
    has one (kubernetes-sigs/kueue v0.19.2 pkg/controller/jobframework/defaults.go), before validation:
    the job still waits behind the pool's gate, so it passes; without the gate it would not."""
    defaulted = copy.deepcopy(job)
    defaulted["metadata"]["labels"][kueue.QUEUE_NAME_LABEL] = kueue.DEFAULT_LOCAL_QUEUE
    assert refusals(Request(WORKER, "CREATE", defaulted)) == []
    del defaulted["metadata"]["annotations"][kueue.ADMISSION_GATE_ANNOTATION]
    (message,) = refusals(Request(WORKER, "CREATE", defaulted))
    assert message.startswith(f"{SUBMISSION}: a job must be created behind the GPU quota pool's gate")


@pytest.mark.parametrize(
    "gates", ["airflow-jobs.io/quota-pool", "example.com/a, airflow-jobs.io/quota-pool ,x.io/b"]
)
def test_the_gate_is_read_as_kueue_reads_its_list(gates):
    """Kueue trims each name of the comma-separated list (pkg/util/csv Parse)."""
    job = manifest()
    job["metadata"]["annotations"][kueue.ADMISSION_GATE_ANNOTATION] = gates
    assert refusals(Request(WORKER, "CREATE", job)) == []
    job["metadata"]["annotations"][kueue.ADMISSION_GATE_ANNOTATION] = "airflow-jobs.io/quota-pool-x"
    assert rules_of(refusals(Request(WORKER, "CREATE", job))) == {SUBMISSION}


def test_every_admission_the_controller_writes_passes(job):
    queued = created(job)
    running = _admitted(job)
    reservation = Reservation.for_job(queued_job(running), QUEUED_AT)
    writes = {
        "unsuspend": (queued, unsuspend_patch(queued, QUEUED_AT)),
        "hand-over": (queued, handoff_patch(queued, QUEUED_AT)),
        "verdict while queued": (queued, verdict_patch(queued, "QueueTimeout", "waited too long")),
        "verdict only": (queued, verdict_only_patch(queued, "OverQuota", "never fits")),
        "verdict while running": (running, verdict_patch(running, "ImagePull", "no such image")),
        "requeue": (running, requeue_patch(running, Requeue(1, QUEUED_AT, timedelta(minutes=1), "stuck"))),
        "preemption": (running, preempt_patch(running, reservation)),
        "expiry": (running, {"metadata": {"annotations": {labels.DELETE_AFTER: "2026-01-02T00:00:00Z"}}}),
    }
    for name, (old, patch) in writes.items():
        assert refusals(Request(CONTROLLER, "UPDATE", patched(old, patch), old)) == [], name


def _mpi_launcher(suspended: bool = False) -> dict:
    """The launcher Job the MPI operator creates for an MPIJob (kubeflow/mpi-operator v0.8.2
    pkg/controller/mpi_job_controller.go newLauncherJob): no product labels, no gate."""
    return created(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": f"{TASK.job_name(1)}-launcher",
                "labels": {labels.MPI_JOB_NAME: TASK.job_name(1)},
            },
            "spec": {
                "suspend": suspended,
                "backoffLimit": 6,
                "template": {"spec": {"containers": [{"name": "l", "image": "x"}]}},
            },
        }
    )


def test_the_controller_ends_an_mpijob_ruled_while_queued_through_its_launcher():
    """The launcher Job the MPI operator made, ended by the controller (jobs/kinds/mpi.py ending_writes:
    resumed with no pod and a deadline that has passed); and the operator's own resume of it."""
    mpijob = created(manifest(workers=2))
    ruled = patched(mpijob, verdict_patch(mpijob, "QueueTimeout", "waited too long"))
    _status, end_launcher = kinds.kind_of(ruled).ending_writes(ruled, QUEUED_AT)
    launcher = _mpi_launcher(suspended=True)
    ended = patched(launcher, dict(end_launcher.patch or {}))
    assert refusals(Request(CONTROLLER, "UPDATE", ended, launcher)) == []
    assert refusals(Request(MPI_OPERATOR, "UPDATE", set_suspend(launcher, False), launcher)) == []


def test_the_controller_writes_its_ledgers_and_boards():
    ledger = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": ledger_name("vision")}}
    writes = [ledger, board.configmap(board.Board("", QUEUED_AT, "c-0", {}), NAMESPACE)]
    writes.append(board.configmap(board.Board("vision", QUEUED_AT, "c-0", {}), NAMESPACE))
    for configmap in writes:
        assert refusals(Request(CONTROLLER, "CREATE", configmap)) == [], configmap["metadata"]["name"]
        stored = created(configmap)
        changed = {**stored, "data": {"x": "y"}}
        assert refusals(Request(CONTROLLER, "UPDATE", changed, stored)) == [], configmap["metadata"]["name"]


def test_the_triggerers_next_attempt_passes(job):
    """A retry's next attempt, cloned from the failed one (attempts.next_attempt) behind the gate
    (JobTrigger._create_adopting): from an attempt the pool admitted, one it handed to the LocalQueue the
    task asked for, and one Kueue gave its `default` queue at creation."""
    asked = built(gpus=2, workers=2 if job["kind"] == "MPIJob" else 1, kueue_queue="team")
    defaulted = copy.deepcopy(job)
    defaulted["metadata"]["labels"][kueue.QUEUE_NAME_LABEL] = kueue.DEFAULT_LOCAL_QUEUE
    for failed in (_admitted(job), _handed_over(asked), _handed_over(defaulted)):
        failed = patched(failed, verdict_patch(failed, "Error", "exit 3"))
        name = f"{TASK.job_name(1)[:-1]}2"
        body = manifests.pool_gate(
            attempts.next_attempt(failed, name=name, attempt=2, not_before=QUEUED_AT, now=QUEUED_AT)
        )
        assert refusals(Request(TRIGGERER, "CREATE", body)) == [], failed["metadata"].get("labels")


@pytest.mark.parametrize("try_number", ["1", "12", "0"])
def test_the_triggerers_kill_request_passes_and_the_api_server_takes_it_off(job, try_number):
    for old in (created(job), _admitted(job)):
        asked = patched(old, _kill_request(try_number))
        assert refusals(Request(TRIGGERER, "UPDATE", asked, old)) == []
        answered = patched(asked, {"metadata": {"labels": {labels.KILL_REQUESTED: None}}})
        assert refusals(Request(API_SERVER, "UPDATE", answered, asked)) == []


def test_kueue_admits_a_job_handed_to_it(job):
    """Kueue resumes a job it admitted and writes its flavor's node selector into its pod template
    (kubernetes-sigs/kueue v0.19.2 jobframework reconciler, RunWithPodSetsInfo)."""
    handed = _handed_over(job)
    started = set_suspend(handed, False)
    template = (started["spec"]["mpiReplicaSpecs"]["Worker"] if job["kind"] == "MPIJob" else started["spec"])[
        "template"
    ]
    template["spec"]["nodeSelector"] = {"cloud.example.com/gpu": "a100"}
    assert refusals(Request(KUEUE, "UPDATE", started, handed)) == []
    assert refusals(Request(KUEUE, "UPDATE", handed, started)) == []  # and suspends it again


def test_the_mpi_operators_launcher_job_is_its_own():
    launcher = _mpi_launcher(suspended=False)
    assert refusals(Request(MPI_OPERATOR, "CREATE", launcher)) == []


# --- the cheats, refused naming their rule ---


@pytest.mark.parametrize("who", [WORKER, TRIGGERER, ADMIN], ids=["worker", "triggerer", "admin"])
@pytest.mark.parametrize("value", [False, None], ids=["suspend false", "suspend absent"])
def test_a_raw_unsuspended_job_is_refused(job, who, value):
    messages = refusals(Request(who, "CREATE", set_suspend(job, value)))
    assert messages == [
        f"{SUBMISSION}: a job must be created suspended (spec.suspend, or spec.runPolicy.suspend for an MPIJob) so that only the admission controller starts it, once the GPU quota pool admits it; use JobOperator"
    ]


@pytest.mark.parametrize("who", [WORKER, TRIGGERER, ADMIN], ids=["worker", "triggerer", "admin"])
def test_a_job_created_without_the_pools_gate_is_refused(job, who):
    """A platform user's ``kubectl apply`` too: held and charged like any other job."""
    ungated = copy.deepcopy(job)
    del ungated["metadata"]["annotations"][kueue.ADMISSION_GATE_ANNOTATION]
    (message,) = refusals(Request(who, "CREATE", ungated))
    assert message.startswith(f"{SUBMISSION}: a job must be created behind the GPU quota pool's gate")


@pytest.mark.parametrize("who", [WORKER, TRIGGERER, ADMIN], ids=["worker", "triggerer", "admin"])
@pytest.mark.parametrize("queue", ["team-b", "team", ""])
def test_a_job_created_naming_a_localqueue_is_refused(job, who, queue):
    named = copy.deepcopy(job)
    named["metadata"]["labels"][kueue.QUEUE_NAME_LABEL] = queue
    (message,) = refusals(Request(who, "CREATE", named))
    assert message.startswith(f"{SUBMISSION}: a job is created naming no Kueue LocalQueue")


@pytest.mark.parametrize(
    "label", [labels.MANAGED_BY, labels.GROUP, labels.USER], ids=lambda name: name.split("/")[-1]
)
def test_a_job_created_without_the_products_labels_is_refused(job, label):
    unlabelled = copy.deepcopy(job)
    del unlabelled["metadata"]["labels"][label]
    (message,) = refusals(Request(ADMIN, "CREATE", unlabelled))
    assert message.startswith(f"{SUBMISSION}: a job must carry the product's labels")


@pytest.mark.parametrize(
    "field",
    [
        ("labels", labels.ADMITTED, labels.ADMITTED_VALUE),
        ("annotations", labels.ADMITTED_AT, "2026-01-01T00:00:00Z"),
        ("annotations", labels.VERDICT, "Succeeded"),
        ("annotations", labels.VERDICT_MESSAGE, "done"),
    ],
    ids=lambda f: f[1].split("/")[-1],
)
def test_a_job_created_with_what_only_admission_writes_is_refused(job, field):
    """``status`` reads every job without the admitted label as one that may wait in the queue; a job
    created with it would hide there (inspect._jobs_for_page); a verdict would end it as ruled."""
    part, key, value = field
    early = copy.deepcopy(job)
    early["metadata"][part][key] = value
    (message,) = refusals(Request(WORKER, "CREATE", early))
    assert message.startswith(
        f"{SUBMISSION}: a job is created waiting for the GPU quota pool, so without what only"
    )


def test_a_job_with_no_labels_no_suspend_no_gate_and_no_charge_is_refused_on_every_count():
    bare = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "sneak"}, "spec": {"template": {}}}
    found = refusals(Request(WORKER, "CREATE", bare))
    assert [m.split(":")[0] for m in found] == [SUBMISSION] * 3 + ["airflow-jobs rule charge-the-spec"]


@pytest.mark.parametrize(
    "who", [WORKER, TRIGGERER, API_SERVER, ADMIN], ids=["worker", "triggerer", "api-server", "admin"]
)
def test_only_the_controller_unsuspends(job, who):
    old = created(job)
    messages = refusals(Request(who, "UPDATE", patched(old, unsuspend_patch(old, QUEUED_AT)), old))
    assert (
        f"{ADMISSION}: only the admission controller unsuspends a job; this identity may not start one behind the GPU quota pool"
        in messages
    )
    assert rules_of(messages) <= {ADMISSION, KILL}


@pytest.mark.parametrize(
    "who", [WORKER, TRIGGERER, API_SERVER, ADMIN], ids=["worker", "triggerer", "api-server", "admin"]
)
def test_only_the_controller_lifts_the_gate_or_hands_a_job_to_kueue(job, who):
    queued = created(job)
    for patch, said in (
        (
            {"metadata": {"annotations": {kueue.ADMISSION_GATE_ANNOTATION: None}}},
            "only the admission controller lifts",
        ),
        (
            {"metadata": {"annotations": {kueue.ADMISSION_GATE_ANNOTATION: "example.com/other"}}},
            "only the admission controller lifts",
        ),
        (
            {"metadata": {"labels": {kueue.QUEUE_NAME_LABEL: "team-b"}}},
            "only the admission controller hands a job",
        ),
        (handoff_patch(queued, QUEUED_AT), "only the admission controller"),
    ):
        messages = refusals(Request(who, "UPDATE", patched(queued, patch), queued))
        assert any(m.startswith(f"{ADMISSION}: {said}") for m in messages), (patch, messages)
    # A job Kueue's webhook gave `default` keeps it; changing it is handing it over.
    defaulted = copy.deepcopy(job)
    defaulted["metadata"]["labels"][kueue.QUEUE_NAME_LABEL] = kueue.DEFAULT_LOCAL_QUEUE
    defaulted = created(defaulted)
    moved = patched(defaulted, {"metadata": {"labels": {kueue.QUEUE_NAME_LABEL: "team-b"}}})
    assert any(
        m.startswith(f"{ADMISSION}: only the admission controller hands")
        for m in refusals(Request(who, "UPDATE", moved, defaulted))
    )


@pytest.mark.parametrize(
    "patch",
    [
        {"spec": {"suspend": False}},
        {"metadata": {"annotations": {labels.VERDICT: "Succeeded", labels.VERDICT_MESSAGE: "done"}}},
        {"metadata": {"labels": {labels.KILL_REQUESTED: "1", labels.ROLE: "x"}}},
        {"metadata": {"labels": {labels.ADMITTED: labels.ADMITTED_VALUE}}},
        {"metadata": {"annotations": {labels.DELETE_AFTER: "2026-01-01T00:00:00Z"}}},
        {
            "metadata": {
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "u"}]
            }
        },
        {"metadata": {"finalizers": ["example.com/keep"]}},
    ],
    ids=["unsuspend", "verdict", "another label", "admitted", "expiry", "owner", "finalizer"],
)
def test_the_triggerer_writes_the_kill_request_and_nothing_else(job, patch):
    for old in (created(job), _admitted(job)):
        changed = patched(old, patch)
        if changed == old:  # an unsuspend of a running job writes nothing
            continue
        messages = refusals(Request(TRIGGERER, "UPDATE", changed, old))
        assert (
            f"{KILL}: the triggerer may only ask for a job's end, with the label airflow-jobs.io/kill-requested; it may not change the job's spec (suspend, parallelism), its other labels or annotations (a verdict, the pool's gate, a Kueue queue), its owners or its finalizers"
            in messages
        ), messages


@pytest.mark.parametrize("value", ["", "abc", "-1", "1.5", "9999999999"])
def test_the_kill_request_holds_a_try_number(job, value):
    old = created(job)
    (message,) = refusals(Request(TRIGGERER, "UPDATE", patched(old, _kill_request(value)), old))
    assert message.startswith(
        f"{KILL}: the label airflow-jobs.io/kill-requested holds the Airflow try number"
    )


def test_the_triggerer_does_not_take_a_kill_request_off(job):
    asked = patched(created(job), _kill_request())
    (message,) = refusals(
        Request(
            TRIGGERER,
            "UPDATE",
            patched(asked, {"metadata": {"labels": {labels.KILL_REQUESTED: None}}}),
            asked,
        )
    )
    assert message.startswith(f"{KILL}: the label airflow-jobs.io/kill-requested holds")


@pytest.mark.parametrize(
    "who", [WORKER, TRIGGERER, API_SERVER, ADMIN], ids=["worker", "triggerer", "api-server", "admin"]
)
def test_nobody_rewrites_who_a_job_is_charged_to(job, who):
    queued = created(job)
    for label in (labels.GROUP, labels.USER):
        messages = refusals(
            Request(who, "UPDATE", patched(queued, {"metadata": {"labels": {label: "llm"}}}), queued)
        )
        assert any(
            m.startswith("airflow-jobs rule charge-the-spec: who a job is charged to") for m in messages
        ), messages


def test_kueue_acts_only_on_a_job_handed_to_it(job):
    queued = created(job)
    for change in (set_suspend(queued, False), patched(queued, {"metadata": {"labels": {"x": "y"}}})):
        (message,) = refusals(Request(KUEUE, "UPDATE", change, queued))
        assert message.startswith(
            f"{KUEUE_RULE}: Kueue acts only on a job the admission controller handed to it"
        )
    # An admitted job the pool let go without Kueue keeps its gate: Kueue may not suspend it either.
    running = _admitted(job)
    (message,) = refusals(Request(KUEUE, "UPDATE", set_suspend(running, True), running))
    assert message.startswith(KUEUE_RULE)


def test_an_unsuspend_that_keeps_the_jobs_pods_is_the_controllers_alone():
    queued = created(manifest(workers=1))
    (message,) = refusals(
        Request(API_SERVER, "UPDATE", patched(queued, {"spec": {"suspend": False, "parallelism": 1}}), queued)
    )
    assert message.startswith(f"{ADMISSION}: only the admission controller unsuspends a job")


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
    assert message.startswith(f"{ADMISSION}: this identity may not raise")


@pytest.mark.parametrize("who", [WORKER, API_SERVER, ADMIN], ids=["worker", "api-server", "admin"])
def test_raising_a_running_job_s_parallelism_is_refused(who):
    running = _admitted(manifest(workers=1))
    message = refusals(Request(who, "UPDATE", patched(running, {"spec": {"parallelism": 8}}), running))[0]
    assert message.startswith(f"{ADMISSION}: this identity may not raise")


# --- the quota's ConfigMaps: ledgers and boards the controller's, policies the platform's ---


def _configmap(name: str, **labels_: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels_},
        "data": {},
    }


@pytest.mark.parametrize(
    "configmap",
    [
        _configmap("airflow-jobs-quota-policy"),
        _configmap("airflow-jobs-quota-research", **{"airflow-jobs.io/quota-policy": "true"}),
        _configmap("airflow-config"),
        _configmap("airflow-jobs-job-accounts"),
        _configmap("sneaky"),
    ],
    ids=lambda c: c["metadata"]["name"],
)
def test_the_controller_writes_no_configmap_but_its_ledgers_and_boards(configmap):
    for request in (
        Request(CONTROLLER, "CREATE", configmap),
        Request(
            CONTROLLER, "UPDATE", {**configmap, "data": {"policy.yaml": "groups: {}"}}, created(configmap)
        ),
        Request(CONTROLLER, "DELETE", None, created(configmap)),
    ):
        (message,) = refusals(request)
        assert message.startswith(f"{CONTROLLER_CONFIGMAPS}: the admission controller writes only"), (
            request.operation
        )


@pytest.mark.parametrize("name", [ledger_name("vision"), "airflow-jobs-queue", "airflow-jobs-queue-vision"])
@pytest.mark.parametrize(
    "who", [WORKER, TRIGGERER, API_SERVER, ADMIN], ids=["worker", "triggerer", "api-server", "admin"]
)
def test_nobody_else_writes_a_ledger_or_a_board(name, who):
    """A worker given create on ConfigMaps (RBAC refuses it first as shipped) still may not forge one; an
    administrator may delete one, the deployment's components may not."""
    forged = _configmap(name)
    for request in (
        Request(who, "CREATE", forged),
        Request(who, "UPDATE", {**forged, "data": {"x": "{}"}}, created(forged)),
    ):
        (message,) = refusals(request)
        assert message.startswith(f"{LEDGERS}: only the admission controller writes the quota ledgers")
    deleted = refusals(Request(who, "DELETE", None, created(forged)))
    if who == ADMIN:
        assert deleted == []
    else:
        (message,) = deleted
        assert message.startswith(f"{LEDGERS}: only the admission controller writes the quota ledgers")


def test_other_configmaps_are_not_these_rules_to_judge():
    for who in (WORKER, ADMIN, "system:serviceaccount:kube-system:namespace-controller"):
        assert refusals(Request(who, "CREATE", _configmap("my-settings"))) == []


# --- the policy file agrees with rbac.yaml, admission-controller.yaml and the layout ---


def test_the_bindings_deny_in_the_jobs_namespace_and_name_the_identities_the_roles_bind():
    docs = list(shipped_policy_file())
    names = {d["metadata"]["name"] for d in docs if d["kind"] == "ValidatingAdmissionPolicy"}
    bindings = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert sorted(b["spec"]["policyName"] for b in bindings) == sorted(names)
    rbac = [d for d in yaml.safe_load_all((HELM / "rbac.yaml").read_text()) if d["kind"] == "RoleBinding"]
    subjects = {f"system:serviceaccount:{s['namespace']}:{s['name']}" for b in rbac for s in b["subjects"]}
    assert subjects == {WORKER, TRIGGERER, API_SERVER}
    controller = [
        d
        for d in yaml.safe_load_all((HELM / "admission-controller.yaml").read_text())
        if d and d["kind"].endswith("Binding")
    ]
    assert {
        f"system:serviceaccount:{s['namespace']}:{s['name']}" for b in controller for s in b["subjects"]
    } == {CONTROLLER}
    (jobs_namespace,) = [
        d["metadata"]["name"]
        for d in yaml.safe_load_all((HELM / "pod-security.yaml").read_text())
        if d["kind"] == "Namespace"
    ]
    assert jobs_namespace == NAMESPACE
    jobs_role = [
        d for d in controller if d["kind"] == "RoleBinding" and d["metadata"]["namespace"] == NAMESPACE
    ]
    assert jobs_role, "the controller's Role is bound in the jobs' namespace"
    for binding in bindings:
        assert binding["apiVersion"] == "admissionregistration.k8s.io/v1"
        assert binding["spec"]["validationActions"] == ["Deny"]
        selector = binding["spec"]["matchResources"]["namespaceSelector"]["matchLabels"]
        assert selector == {"kubernetes.io/metadata.name": NAMESPACE}
    for policy in policies():
        assert policy["apiVersion"] == "admissionregistration.k8s.io/v1"
        assert policy["spec"]["failurePolicy"] == "Fail"
        for condition in policy["spec"].get("matchConditions") or ():
            # Every identity a policy names is one of the layout's.
            named = set(re.findall(r"'(system:serviceaccount:[^']+)'", condition["expression"]))
            assert named <= {WORKER, TRIGGERER, API_SERVER, CONTROLLER, MPI_OPERATOR, KUEUE}, named


# --- charge-the-spec: the annotations are what the pods ask for ---

CHARGE = "airflow-jobs rule charge-the-spec"
USER_ACTIONS = "airflow-jobs rule user-actions-only"


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
    charge, pod_security = refusals(Request(WORKER, "CREATE", privileged))
    assert charge.startswith(f"{CHARGE}: a privileged container sees every GPU")
    assert pod_security.startswith("airflow-jobs rule pod-security: a privileged container is refused")
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
    return _admitted(job)


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


# --- no-uncharged-gpu-workloads: the worker's and the triggerer's other rights start no GPU work ---

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
def test_where_dag_code_runs_gpu_work_goes_through_the_pool_and_other_identities_are_not_judged(kind):
    for who in (WORKER, TRIGGERER):
        assert refusals(Request(who, "CREATE", workload(kind, CPU_POD))) == []
        (message,) = refusals(Request(who, "CREATE", workload(kind, GPU_POD)))
        assert message.startswith("airflow-jobs rule no-uncharged-gpu-workloads: where DAG code runs")
    assert refusals(Request(API_SERVER, "CREATE", workload(kind, GPU_POD))) == []


# --- pod-security: no job's pods break out onto their node, whoever creates the job ---

POD_SECURITY = "airflow-jobs rule pod-security"
EVERY_IDENTITY = (WORKER, TRIGGERER, API_SERVER, ADMIN, MPI_OPERATOR, CONTROLLER, KUEUE)


def templates(job: dict) -> list[dict]:
    if job["kind"] == "MPIJob":
        return [r["template"] for r in job["spec"]["mpiReplicaSpecs"].values()]
    return [job["spec"]["template"]]


def _main(spec: dict) -> dict:
    return spec["containers"][0]


def _context(container: dict) -> dict:
    return container.setdefault("securityContext", {})


def _sidecar(spec: dict) -> dict:
    sidecar = {"name": "proxy", "image": "proxy:1", "restartPolicy": "Always"}
    spec.setdefault("initContainers", []).append(sidecar)
    return sidecar


# Each breakout the red team ran, and every other field baseline refuses: what it does to one pod
# template, and the checks (policy/check_*.go IDs) that refuse it. The same table drives the parse-time
# rule's parity test below and tests/core/test_pod_security.py's.
BREAKOUTS = {
    "hostPath /dev": (
        lambda t: t["spec"].setdefault("volumes", []).append({"name": "dev", "hostPath": {"path": "/dev"}}),
        {"hostPathVolumes"},
    ),
    "hostPath /var/lib/kubelet/pods": (
        lambda t: (
            t["spec"]
            .setdefault("volumes", [])
            .append({"name": "pods", "hostPath": {"path": "/var/lib/kubelet/pods", "type": "Directory"}})
        ),
        {"hostPathVolumes"},
    ),
    "hostPID + SYS_ADMIN, SYS_PTRACE": (
        lambda t: (
            t["spec"].update(hostPID=True),
            _context(_main(t["spec"])).update(capabilities={"add": ["SYS_ADMIN", "SYS_PTRACE"]}),
        ),
        {"hostNamespaces", "capabilities_baseline"},
    ),
    "capabilities ALL + allowPrivilegeEscalation": (
        lambda t: _context(_main(t["spec"])).update(
            capabilities={"add": ["ALL"]}, allowPrivilegeEscalation=True
        ),
        {"capabilities_baseline"},
    ),
    "hostNetwork": (lambda t: t["spec"].update(hostNetwork=True), {"hostNamespaces"}),
    "hostIPC": (lambda t: t["spec"].update(hostIPC=True), {"hostNamespaces"}),
    "privileged sidecar": (lambda t: _context(_sidecar(t["spec"])).update(privileged=True), {"privileged"}),
    "NET_RAW in an init container": (
        lambda t: (
            t["spec"]
            .setdefault("initContainers", [])
            .append({"name": "i", "image": "x", "securityContext": {"capabilities": {"add": ["NET_RAW"]}}})
        ),
        {"capabilities_baseline"},
    ),
    "hostPort": (
        lambda t: _main(t["spec"]).update(ports=[{"containerPort": 22, "hostPort": 2222}]),
        {"hostPorts"},
    ),
    "unmasked /proc": (lambda t: _context(_main(t["spec"])).update(procMount="Unmasked"), {"procMount"}),
    "kernel.core_pattern": (
        lambda t: (
            t["spec"]
            .setdefault("securityContext", {})
            .update(sysctls=[{"name": "kernel.core_pattern", "value": "|/tmp/x"}])
        ),
        {"sysctls"},
    ),
    "SELinux spc_t": (
        lambda t: _context(_main(t["spec"])).update(seLinuxOptions={"type": "spc_t"}),
        {"seLinuxOptions"},
    ),
    "SELinux user": (
        lambda t: t["spec"].setdefault("securityContext", {}).update(seLinuxOptions={"user": "system_u"}),
        {"seLinuxOptions"},
    ),
    "seccomp Unconfined": (
        lambda t: t["spec"].setdefault("securityContext", {}).update(seccompProfile={"type": "Unconfined"}),
        {"seccompProfile"},
    ),
    "AppArmor Unconfined": (
        lambda t: _context(_main(t["spec"])).update(appArmorProfile={"type": "Unconfined"}),
        {"appArmorProfile"},
    ),
    "AppArmor annotation unconfined": (
        lambda t: (
            t["metadata"]
            .setdefault("annotations", {})
            .update({"container.apparmor.security.beta.kubernetes.io/main": "unconfined"})
        ),
        {"appArmorProfile"},
    ),
    "Windows hostProcess": (
        lambda t: t["spec"].setdefault("securityContext", {}).update(windowsOptions={"hostProcess": True}),
        {"windowsHostProcess"},
    ),
    "probe host": (
        lambda t: _main(t["spec"]).update(
            livenessProbe={"httpGet": {"host": "169.254.169.254", "path": "/", "port": 80}}
        ),
        {"hostProbesAndHostLifecycle"},
    ),
    "preStop host": (
        lambda t: _main(t["spec"]).update(
            lifecycle={"preStop": {"tcpSocket": {"host": "10.0.0.1", "port": 10250}}}
        ),
        {"hostProbesAndHostLifecycle"},
    ),
    "runtimeClassName not allowed": (lambda t: t["spec"].update(runtimeClassName="kata"), {"runtimeClass"}),
}

# Within baseline (and allowPrivilegeEscalation is restricted's to refuse, not baseline's).
WITHIN_BASELINE = {
    "default capabilities": lambda t: _context(_main(t["spec"])).update(
        capabilities={"add": ["NET_BIND_SERVICE", "CHOWN"], "drop": ["ALL"]}
    ),
    "allowPrivilegeEscalation": lambda t: _context(_main(t["spec"])).update(allowPrivilegeEscalation=True),
    "profiles": lambda t: (
        t["spec"]
        .setdefault("securityContext", {})
        .update(
            seccompProfile={"type": "RuntimeDefault"},
            seLinuxOptions={"type": "container_t", "level": "s0:c1,c2"},
            sysctls=[{"name": "net.ipv4.tcp_keepalive_time", "value": "60"}],
        ),
        _context(_main(t["spec"])).update(appArmorProfile={"type": "Localhost", "localhostProfile": "k8s"}),
        t["metadata"]
        .setdefault("annotations", {})
        .update({"container.apparmor.security.beta.kubernetes.io/main": "localhost/k8s"}),
    ),
    "unmasked /proc in a user namespace": lambda t: (
        t["spec"].update(hostUsers=False),
        _context(_main(t["spec"])).update(procMount="Unmasked"),
    ),
    "containerPort alone, host ports off": lambda t: _main(t["spec"]).update(
        ports=[{"containerPort": 29500, "hostPort": 0}], readinessProbe={"tcpSocket": {"port": 29500}}
    ),
    "persistent and memory volumes": lambda t: t["spec"]["volumes"].append(
        {"name": "data", "persistentVolumeClaim": {"claimName": "vision"}}
    ),
}


def pod_security_checks(messages: list[str]) -> set[str]:
    """The baseline checks (or the RuntimeClass list) the rule pod-security's refusals name."""
    found = set()
    for message in messages:
        if not message.startswith(POD_SECURITY):
            continue
        named = re.search(r"Pod Security baseline, (\w+)", message)
        found.add(named.group(1) if named else "runtimeClass")
    return found


def breakout(job: dict, name: str, template: int = -1) -> dict:
    cheat = copy.deepcopy(job)
    BREAKOUTS[name][0](templates(cheat)[template])
    return cheat


def pod_security_refusals(request: Request) -> list[str]:
    """The messages of the rule pod-security alone (the identity tests ask nothing of the others)."""
    (policy,) = [p for p in policies() if p["metadata"]["name"] == "airflow-jobs-pod-security"]
    group, resource = request.group_resource
    attributes = AdmissionRequest(
        request.operation,
        group,
        resource,
        "airflow",
        request.object["metadata"]["name"],
        request.username,
        (),
        request.object,
        request.old_object,
    )
    return [message for _, message in policy_refusals(policy, attributes, RUNTIME_CLASSES)]


@pytest.mark.parametrize("name", sorted(BREAKOUTS))
def test_every_breakout_is_refused_naming_the_rule_and_the_check(job, name):
    expected = BREAKOUTS[name][1]
    for template in range(len(templates(job))):  # a Job's one, an MPIJob's launcher and workers
        cheat = breakout(job, name, template)
        assert pod_security_checks(refusals(Request(WORKER, "CREATE", cheat))) == expected, template


# What the red team ran on the real control plane (tests/plane_scenarios/test_pod_security_on_the_plane.py).
RED_TEAM = (
    "hostPath /dev",
    "hostPath /var/lib/kubelet/pods",
    "hostPID + SYS_ADMIN, SYS_PTRACE",
    "capabilities ALL + allowPrivilegeEscalation",
    "hostNetwork",
    "runtimeClassName not allowed",
)


@pytest.mark.parametrize("who", EVERY_IDENTITY)
def test_whoever_creates_the_job_its_breakout_is_refused(job, who):
    for name in RED_TEAM:
        cheat = breakout(job, name)
        assert pod_security_checks(pod_security_refusals(Request(who, "CREATE", cheat))) == BREAKOUTS[name][1]


@pytest.mark.parametrize("name", sorted(BREAKOUTS))
def test_the_parse_time_rule_refuses_what_the_policy_refuses(job, name):
    """jobs/pod_security.py and the policy's CEL, over the same templates: the same checks."""
    from airflow_jobs_plugin.jobs import pod_security

    cheat = breakout(job, name)
    allowed = tuple(RUNTIME_CLASSES.get("data") or {})
    parsed = {
        refusal.check
        for i, template in enumerate(templates(cheat))
        for refusal in pod_security.template_refusals(template, f"templates[{i}]", allowed)
    }
    assert parsed == BREAKOUTS[name][1] == pod_security_checks(refusals(Request(TRIGGERER, "CREATE", cheat)))


@pytest.mark.parametrize("name", sorted(WITHIN_BASELINE))
def test_what_baseline_allows_passes_the_policy_and_the_parse_time_rule(job, name):
    from airflow_jobs_plugin.jobs import pod_security

    allowed = copy.deepcopy(job)
    for template in templates(allowed):
        WITHIN_BASELINE[name](template)
    assert refusals(Request(WORKER, "CREATE", allowed)) == []
    for who in EVERY_IDENTITY:
        assert pod_security_refusals(Request(who, "CREATE", allowed)) == [], who
    assert [r for t in templates(allowed) for r in pod_security.template_refusals(t, "t", ())] == []


@pytest.mark.parametrize(
    "args",
    PRODUCT_MANIFESTS := [
        {"gpus": 1},
        {"gpus": 0},
        {"gpus": 2, "workers": 3},
        {"gpus": 0, "workers": 3},
        {"gpus": 2, "workers": 3, "launcher_gpus": 2},
        {"gpus": 4, "workers": 2, "framework": "torchrun"},
        {"gpus": 0, "workers": 2, "framework": "torchrun"},
        {
            "gpus": 1,
            "init_containers": [{"name": "fetch", "image": "x"}],
            "pod_template": {"spec": {"containers": [{"name": "metrics", "image": "exporter:1"}]}},
        },
    ],
    ids=["1-gpu", "cpu-only", "mpi", "mpi-cpu", "mpi-launcher-gpus", "torchrun", "torchrun-cpu", "sidecars"],
)
def test_every_job_the_operator_builds_passes_every_rule_for_every_identity_that_submits_it(args):
    job = built(**args)
    for who in (WORKER, TRIGGERER, API_SERVER, ADMIN):
        assert refusals(Request(who, "CREATE", job)) == [], who


def test_the_mpi_operators_launcher_job_passes_pod_security():
    """The launcher Job the MPI operator creates from an MPIJob's launcher template
    (kubeflow/mpi-operator v0.8.2 pkg/controller/mpi_job_controller.go, newLauncherJob): the template
    as the product built it, plus the operator's variables, its empty NVIDIA_VISIBLE_DEVICES and its
    ConfigMap and ssh volumes."""
    mpijob = built(gpus=2, workers=2)
    template = copy.deepcopy(mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"])
    main = template["spec"]["containers"][0]
    main["env"] += [
        {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
        {"name": "NVIDIA_VISIBLE_DEVICES"},
        {"name": "NVIDIA_DRIVER_CAPABILITIES"},
    ]
    template["spec"].setdefault("volumes", []).extend(
        [
            {"name": "mpi-job-config", "configMap": {"name": "x-config"}},
            {"name": "ssh-auth", "secret": {"secretName": "x-ssh", "defaultMode": 0o600}},
        ]
    )
    launcher = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "x-launcher", "labels": {"app": "x"}},
        "spec": {"suspend": True, "template": template},
    }
    assert refusals(Request(MPI_OPERATOR, "CREATE", launcher)) == []


def test_a_runtime_class_the_platform_lists_passes():
    job = breakout(built(gpus=1), "runtimeClassName not allowed")
    (policy,) = [p for p in policies() if p["metadata"]["name"] == "airflow-jobs-pod-security"]
    attributes = AdmissionRequest(
        "CREATE", "batch", "jobs", "airflow", job["metadata"]["name"], WORKER, (), job, None
    )
    listed = {**RUNTIME_CLASSES, "data": {"kata": "microVMs for untrusted code"}}
    assert policy_refusals(policy, attributes, listed) == []
    assert [m for _, m in policy_refusals(policy, attributes, RUNTIME_CLASSES)] == [
        m for m in refusals(Request(WORKER, "CREATE", job)) if m.startswith(POD_SECURITY)
    ]
    assert RUNTIME_CLASSES.get("data") in (None, {}), "shipped empty: jobs name no RuntimeClass"


def test_the_runtime_classes_option_and_the_policys_parameter_ship_equal():
    from airflow_jobs_plugin import config

    shipped = tuple(RUNTIME_CLASSES.get("data") or {})
    assert config.namespaces("", config.BY_NAME["job_runtime_classes"].default or "") == shipped
    assert config.namespaces("", config.BY_NAME["job_service_accounts"].default or "") == tuple(
        JOB_ACCOUNTS["data"]
    )


def test_an_update_is_checked_when_it_changes_a_pod_template():
    """A job created before the rule (its template unchanged) is still admitted and ended; an update
    that writes a breakout into an MPIJob's worker template is refused, whoever sends it."""
    legacy = created(breakout(built(gpus=1, workers=2), "hostPath /dev"))
    admit = patched(legacy, unsuspend_patch(legacy, QUEUED_AT))
    assert refusals(Request(CONTROLLER, "UPDATE", admit, legacy)) == []
    honest = created(built(gpus=1, workers=2))
    rewrite = breakout(honest, "hostNetwork", template=-1)
    for who in (CONTROLLER, KUEUE, ADMIN):
        assert pod_security_checks(refusals(Request(who, "UPDATE", rewrite, honest))) == {"hostNamespaces"}


def test_the_parameter_missing_refuses_every_job():
    """parameterNotFoundAction Deny: a namespace without airflow-jobs-runtime-classes runs no job."""
    (binding,) = [
        d
        for d in yaml.safe_load_all((HELM / "admission-policy.yaml").read_text())
        if d["kind"] == "ValidatingAdmissionPolicyBinding"
        and d["metadata"]["name"] == "airflow-jobs-pod-security"
    ]
    assert binding["spec"]["paramRef"] == {
        "name": "airflow-jobs-runtime-classes",
        "parameterNotFoundAction": "Deny",
    }
    (policy,) = [p for p in policies() if p["metadata"]["name"] == "airflow-jobs-pod-security"]
    assert "matchConditions" not in policy["spec"]


# --- charge-the-spec: NVIDIA_VISIBLE_DEVICES is void or absent ---


@pytest.mark.parametrize("value", ["none", "", "all", "0", "GPU-1234", None])
def test_a_visible_devices_value_other_than_void_is_refused(job, value):
    cheat = copy.deepcopy(job)
    var = (
        {"name": "NVIDIA_VISIBLE_DEVICES"}
        if value is None
        else {"name": "NVIDIA_VISIBLE_DEVICES", "value": value}
    )
    spec = pod_specs(cheat)[-1]
    spec.setdefault("initContainers", []).append({"name": "i", "image": "x", "env": [var]})
    (message,) = refusals(Request(WORKER, "CREATE", cheat))
    assert message.startswith(f"{CHARGE}: NVIDIA_VISIBLE_DEVICES is the device plugin's")


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
