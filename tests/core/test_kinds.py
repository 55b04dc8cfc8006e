"""One adapter per kind of job: what each kind answers for itself (kinds/), one rule per test."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from airflow_jobs_plugin.jobs import kinds, labels
from airflow_jobs_plugin.jobs.manifests import build_manifest
from airflow_jobs_plugin.jobs.spec import ARGUMENTS, JobSpecError, TaskIdentity, total_gpus, validate

TASK = TaskIdentity("nightly", "train", "run-1", -1, 1)
NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def manifest(**args) -> dict:
    spec = validate(image="registry.example/trainer:1", group="vision", user="alice", gpus=4, **args)
    return build_manifest(spec, name="train-a1", task=TASK, attempt=1, queued_at=NOW)


def listed(obj: dict) -> dict:
    """As a LIST returns a built-in object: without kind and apiVersion."""
    return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}


JOB = manifest()
MPIJOB = manifest(workers=2)
TORCHRUN = manifest(workers=2, framework="torchrun")


@pytest.mark.parametrize(
    ("obj", "kind"),
    [(JOB, kinds.BATCH_JOB), (MPIJOB, kinds.MPI_JOB), (TORCHRUN, kinds.TORCHRUN)],
    ids=["Job", "MPIJob", "torchrun"],
)
def test_each_object_is_recognised_with_or_without_its_kind(obj, kind):
    assert kinds.kind_of(obj) is kind
    assert kinds.kind_of(listed(obj)) is kind


def test_a_kind_is_found_by_its_name_and_a_wrong_name_lists_the_choices():
    assert kinds.for_name("torchrun") is kinds.TORCHRUN
    with pytest.raises(
        ValueError, match="kind: must be one of 'MPIJob', 'torchrun', 'Job', got 'PyTorchJob'"
    ):
        kinds.for_name("PyTorchJob")


@pytest.mark.parametrize("obj", [JOB, MPIJOB, TORCHRUN], ids=["Job", "MPIJob", "torchrun"])
def test_every_kind_is_created_suspended_and_resumed_by_its_own_patch(obj):
    kind = kinds.kind_of(obj)
    assert kind.is_suspended(obj)
    resumed = {**obj, "spec": {**obj["spec"], **_merged(obj["spec"], kind.suspend_patch(False))}}
    assert not kind.is_suspended(resumed)


def _merged(spec: dict, patch: dict) -> dict:
    out = dict(spec)
    for key, value in patch.items():
        out[key] = _merged(spec.get(key) or {}, value) if isinstance(value, dict) else value
    return out


def test_pod_sets_say_how_many_pods_of_each_template_run_at_once():
    assert [(p.role, p.count) for p in kinds.kind_of(JOB).pod_sets(JOB)] == [("worker", 1)]
    assert [(p.role, p.count) for p in kinds.kind_of(MPIJOB).pod_sets(MPIJOB)] == [
        ("launcher", 1),
        ("worker", 2),
    ]
    assert [(p.role, p.count) for p in kinds.kind_of(TORCHRUN).pod_sets(TORCHRUN)] == [("node", 2)]
    assert [kinds.kind_of(o).expected_pods(o) for o in (JOB, MPIJOB, TORCHRUN)] == [1, 3, 2]


def test_replicas_are_launcher_and_workers_for_mpi_and_one_node_per_index_for_torchrun():
    assert kinds.MPI_JOB.expected_replicas(MPIJOB) == [("launcher", 0), ("worker", 0), ("worker", 1)]
    assert kinds.TORCHRUN.expected_replicas(TORCHRUN) == [("node", 0), ("node", 1)]


def test_a_torchrun_pods_rank_is_its_completion_index():
    pod = {
        "metadata": {
            "labels": {labels.ROLE: "node", kinds.COMPLETION_INDEX: "1"},
            "annotations": {kinds.COMPLETION_INDEX: "1"},
        }
    }
    assert kinds.TORCHRUN.replica_key(pod) == ("node", 1)


def test_an_mpi_pods_rank_is_its_replica_index():
    pod = {"metadata": {"labels": {labels.MPI_JOB_ROLE: "worker", labels.MPI_REPLICA_INDEX: "3"}}}
    assert kinds.MPI_JOB.replica_key(pod) == ("worker", 3)


def test_success_is_each_controllers_own_condition():
    done = {"status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    succeeded = {"status": {"conditions": [{"type": "Succeeded", "status": "True"}]}}
    assert kinds.BATCH_JOB.succeeded(done) and not kinds.MPI_JOB.succeeded(done)
    assert kinds.MPI_JOB.succeeded(succeeded) and not kinds.TORCHRUN.succeeded(succeeded)
    assert all(k.is_finished(done) and k.is_finished(succeeded) for k in kinds.KINDS)


def test_pods_belong_to_a_job_by_owner_or_by_the_kinds_labels():
    job = {**JOB, "metadata": {**JOB["metadata"], "uid": "u1", "namespace": "ml"}}
    mine = {
        "metadata": {
            "namespace": "ml",
            "labels": {labels.BATCH_JOB_NAME: "train-a1", labels.CONTROLLER_UID: "u1"},
        }
    }
    predecessor = {
        "metadata": {
            "namespace": "ml",
            "labels": {labels.BATCH_JOB_NAME: "train-a1", labels.CONTROLLER_UID: "u0"},
        }
    }
    elsewhere = {"metadata": {"namespace": "other", "ownerReferences": [{"uid": "u1"}]}}
    assert kinds.kind_of(job).pods_of(job, [mine, predecessor, elsewhere]) == [mine]
    mpi = {**MPIJOB, "metadata": {**MPIJOB["metadata"], "uid": "u2"}}
    launcher = {"metadata": {"labels": {labels.BATCH_JOB_NAME: "train-a1-launcher"}}}
    worker = {"metadata": {"labels": {labels.MPI_JOB_NAME: "train-a1"}}}
    assert kinds.kind_of(mpi).pods_of(mpi, [launcher, worker, mine]) == [launcher, worker]


def test_only_torchrun_runs_a_companion_its_headless_service_owned_by_the_job():
    created = {**TORCHRUN, "metadata": {**TORCHRUN["metadata"], "uid": "u3", "namespace": "ml"}}
    assert kinds.BATCH_JOB.companions(JOB) == [] and kinds.MPI_JOB.companions(MPIJOB) == []
    ((resource, service),) = kinds.TORCHRUN.companions(created)
    assert resource.plural == "services"
    assert service["metadata"]["name"] == "train-a1" and service["metadata"]["namespace"] == "ml"
    assert service["metadata"]["ownerReferences"][0] == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "train-a1",
        "uid": "u3",
        "controller": True,
        "blockOwnerDeletion": False,
    }
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == {labels.BATCH_JOB_NAME: "train-a1"}


# --- the author's choice of kind ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("framework", "workers", "kind"),
    [
        ("mpi", 1, kinds.BATCH_JOB),
        ("mpi", 2, kinds.MPI_JOB),
        ("torchrun", 1, kinds.TORCHRUN),
        ("torchrun", 4, kinds.TORCHRUN),
    ],
)
def test_the_most_specific_kind_that_takes_the_arguments_is_chosen(framework, workers, kind):
    assert kinds.for_choice(framework, workers) is kind
    spec = validate(image="t:1", group="vision", user="alice", framework=framework, workers=workers)
    assert kinds.for_spec(spec) is kind and spec.kind == kind.name


def test_the_framework_values_are_those_the_kinds_answer_to():
    assert kinds.FRAMEWORKS == ("mpi", "torchrun")
    for framework in kinds.FRAMEWORKS:
        assert kinds.for_choice(framework, 2).framework == framework


@pytest.mark.parametrize(
    ("args", "pods", "gpus"),
    [
        ({}, 1, 4),
        ({"workers": 3}, 4, 12),  # the launcher is a pod without GPUs
        ({"workers": 3, "launcher_gpus": 4}, 4, 16),  # a launcher with GPUs is charged as a worker
        ({"workers": 3, "framework": "torchrun"}, 3, 12),
    ],
)
def test_a_spec_counts_the_pods_and_gpus_its_kind_runs(args, pods, gpus):
    spec = validate(image="t:1", group="vision", user="alice", gpus=4, **args)
    kind = kinds.for_spec(spec)
    assert (kind.pod_count(spec), kind.total_gpus(spec)) == (spec.pod_count, total_gpus(spec)) == (pods, gpus)
    assert build_manifest(spec, name="train-a1", task=TASK, attempt=1, queued_at=NOW)["metadata"][
        "annotations"
    ][labels.GPUS] == str(gpus)


@pytest.mark.parametrize(
    ("args", "refused"),
    [
        ({"workers": 2, "framework": "torchrun", "mpi_implementation": "MPICH"}, "mpi_implementation"),
        ({"workers": 1, "launcher_cpu": "2"}, "launcher_cpu"),
        ({"workers": 2, "launcher_gpus": 2}, "launcher_gpus"),
    ],
)
def test_the_checker_reports_what_the_chosen_kind_refuses(args, refused):
    kind = kinds.for_choice(args.get("framework", "mpi"), args["workers"])
    values = {"gpus": 4, **args}
    problems = kind.argument_problems(values, set(args) - {"workers", "framework"})
    assert [field for field, _ in problems] == [refused]
    with pytest.raises(JobSpecError) as raised:
        validate(image="t:1", group="vision", user="alice", gpus=4, **args)
    assert raised.value.errors == tuple(problems)


def test_a_kind_that_reads_every_argument_refuses_none():
    assert (
        kinds.MPI_JOB.argument_problems(
            {"workers": 2, "gpus": 4, "mpi_implementation": "MPICH"}, {"mpi_implementation"}
        )
        == []
    )


@pytest.mark.parametrize("kind", kinds.KINDS, ids=lambda k: k.name)
def test_every_argument_a_kind_refuses_is_an_argument_of_the_author(kind):
    every = {argument.spec_field for argument in ARGUMENTS if argument.name not in ("framework", "workers")}
    values = {field: object() for field in every}  # no argument at its default: all of them given
    refused = {field for field, _ in kind.argument_problems(values, every)}
    assert refused and refused <= every
