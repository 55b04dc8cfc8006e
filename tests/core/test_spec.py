"""JobSpec validation: every bad argument is named in the error (job naming: test_naming.py)."""

from __future__ import annotations

import copy
import json
import pickle
import re
from datetime import timedelta
from pathlib import Path

import pytest
from kubernetes.client import V1PersistentVolumeClaimVolumeSource, V1Toleration, V1Volume, V1VolumeMount

from airflow_jobs_plugin.jobs.spec import (
    MAX_ATTEMPTS,
    MAX_WORKERS,
    FrozenMap,
    JobSpec,
    JobSpecError,
    TaskIdentity,
    Toleration,
    VolumeMount,
    image_problem,
    total_gpus,
    validate,
)

BASE = {"image": "ghcr.io/org/train:1.2", "group": "vision", "user": "alice", "gpus": 1}
SHARED = {"name": "shared", "persistentVolumeClaim": {"claimName": "vision-shared"}}
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


# The platform's accounts in tests that name one ([airflow_jobs] job_service_accounts).
ALLOWED_ACCOUNTS = ("default", "trainer")


def build(**overrides):
    return validate(**{**BASE, **overrides})


# --- one row per invalid argument: (field named in the error, arguments that break it) -------------

INVALID = [
    ("image", {"image": None}),
    ("image", {"image": "ghcr.io/Org/train:1"}),
    ("image", {"image": "train model:1"}),
    ("image", {"image": "train:-latest"}),
    ("image", {"image": "train@sha256:1234"}),
    ("image", {"image": "registry.local:50x0/train"}),
    ("image", {"image": "org//train"}),
    ("command", {"command": 42}),
    ("command", {"command": "   "}),
    ("command[1]", {"command": ["python", 3]}),
    ("args", {"args": "--epochs 3"}),
    ("args[0]", {"args": [3]}),
    ("env", {"env": ["EPOCHS=3"]}),
    ("env.EPOCHS", {"env": {"EPOCHS": 3}}),
    ("env.1BAD", {"env": {"1BAD": "x"}}),
    ("env.JOB_USER", {"env": {"JOB_USER": "bob"}}),
    ("env.NVIDIA_VISIBLE_DEVICES", {"env": {"NVIDIA_VISIBLE_DEVICES": "all"}}),
    ("env.TOKEN", {"env": {"TOKEN": {"secretRef": {"name": "s"}}}}),
    ("gpus", {"gpus": -2}),
    ("gpus", {"gpus": 65}),
    ("gpus", {"gpus": "4"}),
    ("gpus", {"gpus": 1.5}),
    ("gpus", {"gpus": True}),
    ("workers", {"workers": 0}),
    ("workers", {"workers": MAX_WORKERS + 1}),
    ("cpu", {"cpu": "four"}),
    ("cpu", {"cpu": 0}),
    ("cpu", {"cpu": [1]}),
    ("memory", {"memory": "512m"}),
    ("memory", {"memory": "16GB"}),
    ("memory", {"memory": 4096}),
    ("node_selector.gpu-type", {"node_selector": {"gpu-type": "A100 80GB"}}),
    ("node_selector.Bad Key", {"node_selector": {"Bad Key": "x"}}),
    ("node_selector", {"node_selector": "gpu=a100"}),
    ("tolerations", {"tolerations": {"key": "gpu"}}),
    ("tolerations[0]", {"tolerations": ["gpu"]}),
    (
        "tolerations[0].effect",
        {"tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoScheduled"}]},
    ),
    ("tolerations[0].value", {"tolerations": [{"key": "gpu", "operator": "Exists", "value": "x"}]}),
    ("tolerations[0].operator", {"tolerations": [{"key": "gpu", "operator": "In"}]}),
    ("tolerations[0].operator", {"tolerations": [{"value": "x"}]}),
    (
        "tolerations[0].tolerationSeconds",
        {"tolerations": [{"key": "k", "effect": "NoSchedule", "tolerationSeconds": 3}]},
    ),
    ("tolerations[0].tolerance", {"tolerations": [{"key": "k", "tolerance": 3}]}),
    ("volumes[0].name", {"volumes": [{"name": "Shared_Data", "emptyDir": {}}]}),
    ("volumes[0].name", {"volumes": [{"name": "ssh-auth", "emptyDir": {}}]}),
    ("volumes[0]", {"volumes": [{"name": "shared"}]}),
    ("volumes[0]", {"volumes": [{"name": "shared", "pvc": {"claimName": "x"}}]}),
    ("volumes[1].name", {"volumes": [SHARED, SHARED]}),
    (
        "volume_mounts[0].name",
        {"volumes": [SHARED], "volume_mounts": [{"name": "other", "mountPath": "/data"}]},
    ),
    (
        "volume_mounts[0].mountPath",
        {"volumes": [SHARED], "volume_mounts": [{"name": "shared", "mountPath": "data"}]},
    ),
    (
        "volume_mounts[0].subPath",
        {"volumes": [SHARED], "volume_mounts": [{"name": "shared", "mountPath": "/d", "subPath": "../x"}]},
    ),
    ("group", {"group": ""}),
    ("group", {"group": None}),
    ("user", {"user": 7}),
    ("user", {"user": " alice"}),
    ("user", {"user": "alice\n"}),
    ("namespace", {"namespace": "ML_Team"}),
    ("namespace", {"namespace": "x" * 64}),
    ("labels.airflow-jobs.io/group", {"labels": {"airflow-jobs.io/group": "x"}}),
    ("labels.app.kubernetes.io/managed-by", {"labels": {"app.kubernetes.io/managed-by": "me"}}),
    ("labels.team", {"labels": {"team": "x" * 64}}),
    ("labels.team", {"labels": {"team": 5}}),
    ("labels.team", {"labels": {"team": "-vision"}}),
    ("annotations.Example.com/x", {"annotations": {"Example.com/x": "v"}}),
    ("annotations.note", {"annotations": {"note": 1}}),
    ("annotations.training.kubeflow.org/job-name", {"annotations": {"training.kubeflow.org/job-name": "x"}}),
    ("priority", {"priority": "urgent"}),
    ("priority", {"priority": 5000}),
    ("backoff_limit", {"backoff_limit": -1}),
    ("max_attempts", {"max_attempts": 0}),
    ("max_attempts", {"max_attempts": MAX_ATTEMPTS + 1}),
    ("retry_backoff", {"retry_backoff": timedelta(minutes=20)}),
    ("retry_backoff_max", {"retry_backoff_max": "10m"}),
    ("queue_timeout", {"queue_timeout": 0}),
    ("queue_timeout", {"queue_timeout": timedelta(seconds=-5)}),
    ("queue_timeout", {"queue_timeout": float("inf")}),
    ("schedule_timeout", {"schedule_timeout": timedelta(days=2)}),
    ("schedule_timeout", {"schedule_timeout": None}),
    ("active_deadline", {"active_deadline": 0}),
    ("ttl_after_finished", {"ttl_after_finished": 10}),
    ("requeue_limit", {"requeue_limit": -1}),
    ("retryable_exit_codes[0]", {"retryable_exit_codes": [0]}),
    ("fatal_exit_codes[1]", {"fatal_exit_codes": [1, 256]}),
    ("fatal_exit_codes", {"fatal_exit_codes": [2], "retryable_exit_codes": [2, 3]}),
    ("fatal_exit_codes", {"fatal_exit_codes": "1"}),
    ("launcher_gpus", {"launcher_gpus": 1}),
    ("launcher_gpus", {"workers": 2, "gpus": 4, "launcher_gpus": 2}),
    ("launcher_cpu", {"launcher_cpu": "1"}),
    ("worker_command", {"worker_command": ["/usr/sbin/sshd", "-De"]}),
    ("launcher_memory", {"workers": 2, "launcher_memory": "1m"}),
    ("launcher_creation_policy", {"workers": 2, "launcher_creation_policy": "waitforworkersready"}),
    ("mpi_implementation", {"workers": 2, "mpi_implementation": "MVAPICH"}),
    ("wait_for_workers", {"workers": 2, "wait_for_workers": "yes"}),
    ("init_containers[0].name", {"init_containers": [{"name": "main", "image": "busybox"}]}),
    ("init_containers[0].image", {"init_containers": [{"name": "fetch", "image": "Bad Image"}]}),
    (
        "init_containers[0].volumeMounts[0].name",
        {
            "init_containers": [
                {"name": "fetch", "image": "busybox", "volumeMounts": [{"name": "nope", "mountPath": "/x"}]}
            ]
        },
    ),
    (
        "init_containers[1].name",
        {"init_containers": [{"name": "a", "image": "busybox"}, {"name": "a", "image": "busybox"}]},
    ),
    ("image_pull_policy", {"image_pull_policy": "always"}),
    ("image_pull_secrets[0]", {"image_pull_secrets": ["Reg_Cred"]}),
    ("service_account", {"service_account": "Trainer"}),
]


@pytest.mark.parametrize(
    ("field", "overrides"), INVALID, ids=[f"{f}-{i}" for i, (f, _) in enumerate(INVALID)]
)
def test_invalid_argument_is_named_in_the_error(field, overrides):
    with pytest.raises(JobSpecError) as caught:
        build(**overrides)
    error = caught.value
    assert error.field == field
    assert [f for f, _ in error.errors] == [field], error.errors
    assert str(error).startswith(f"{field}: ")
    assert isinstance(error, ValueError)


def test_the_invalid_table_covers_at_least_thirty_distinct_arguments():
    assert len({field.split(".")[0].split("[")[0] for field, _ in INVALID}) >= 30


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"gpus": -2}, "gpus: must be a whole number from 0 to 64, got -2"),
        ({"env": {"EPOCHS": 3}}, "env.EPOCHS: value must be a string, got int 3 -- quote it"),
        ({"gpus": "4"}, "pass a number, not a string"),
        ({"memory": "512m"}, "did you mean '512Mi'?"),
        ({"image": "ghcr.io/Org/train:1"}, "use 'ghcr.io/org/train:1'"),
        ({"args": "--epochs 3"}, "['--epochs', '3']"),
        ({"image_pull_policy": "always"}, "did you mean 'Always'?"),
        ({"volumes": [SHARED], "volume_mounts": [{"name": "data", "mountPath": "/d"}]}, "declared: 'shared'"),
        ({"schedule_timeout": timedelta(days=2)}, "shorter than active_deadline"),
    ],
)
def test_error_message_says_what_is_wrong_and_how_to_fix_it(overrides, expected):
    with pytest.raises(JobSpecError, match=re.escape(expected)):
        build(**overrides)


def test_every_problem_is_reported_at_once():
    with pytest.raises(JobSpecError) as caught:
        build(gpus=-1, workers=0, env={"A": 1}, namespace="Bad")
    fields = [f for f, _ in caught.value.errors]
    assert fields == ["env.A", "gpus", "workers", "namespace"]
    for field in fields:
        assert f"{field}: " in str(caught.value)


# --- valid arguments and normalization ----------------------------------------------------------------


def test_minimal_spec_gets_the_documented_defaults():
    spec = build()
    assert spec.workers == 1 and spec.kind == "Job"
    assert spec.schedule_timeout == "policy"  # the quota policy's (3 minutes unless it says otherwise)
    assert spec.active_deadline == timedelta(days=1)
    assert spec.ttl_after_finished == timedelta(days=7)
    assert spec.queue_timeout is None
    assert spec.launcher_gpus == 0
    assert spec.max_attempts >= 1 and spec.backoff_limit >= 0
    assert spec.retry_backoff <= spec.retry_backoff_max


def test_build_is_the_same_as_validate():
    assert JobSpec.build(**BASE) == validate(**BASE)


def test_string_command_runs_through_the_shell():
    assert build(command="python train.py | tee log").command == ("sh", "-c", "python train.py | tee log")


def test_list_command_and_args_are_kept_as_tuples():
    spec = build(command=["python", "train.py"], args=["--epochs", "3"])
    assert spec.command == ("python", "train.py")
    assert spec.args == ("--epochs", "3")


def test_empty_command_list_means_the_image_entrypoint():
    assert build(command=[]).command is None


@pytest.mark.parametrize(
    ("overrides", "attribute", "expected"),
    [
        ({"cpu": 4}, "cpu", "4"),
        ({"cpu": 0.5}, "cpu", "0.5"),
        ({"cpu": "500m"}, "cpu", "500m"),
        ({"memory": "16Gi"}, "memory", "16Gi"),
        ({"memory": 2**30}, "memory", str(2**30)),
        ({"priority": "high"}, "priority", 100),
        ({"priority": "low"}, "priority", -100),
        ({"priority": -7}, "priority", -7),
        ({"queue_timeout": 600}, "queue_timeout", timedelta(minutes=10)),
        ({"active_deadline": None}, "active_deadline", None),
        ({"ttl_after_finished": None}, "ttl_after_finished", None),
        ({"requeue_limit": None}, "requeue_limit", None),
        ({"fatal_exit_codes": [3, 1, 3]}, "fatal_exit_codes", (1, 3)),
        ({"retryable_exit_codes": (137,)}, "retryable_exit_codes", (137,)),
        ({"image_pull_secrets": "regcred"}, "image_pull_secrets", ("regcred",)),
        ({"image_pull_secrets": [{"name": "regcred"}]}, "image_pull_secrets", ("regcred",)),
        ({"gpus": 2.0}, "gpus", 2),
    ],
)
def test_arguments_are_normalized(overrides, attribute, expected):
    assert getattr(build(**overrides), attribute) == expected


def test_env_accepts_strings_and_value_from_references():
    secret = {"secretKeyRef": {"name": "wandb", "key": "api-key"}}
    spec = build(env={"EPOCHS": "3", "WANDB_API_KEY": secret})
    assert spec.env["EPOCHS"] == "3"
    assert spec.env["WANDB_API_KEY"] == secret


def test_tolerations_accept_dicts_and_kubernetes_models():
    from_dict = build(tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])
    from_model = build(
        tolerations=[V1Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")]
    )
    expected = (Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),)
    assert from_dict.tolerations == from_model.tolerations == expected


def test_toleration_without_key_and_exists_tolerates_everything():
    assert build(tolerations=[{"operator": "Exists"}]).tolerations == (Toleration(operator="Exists"),)


def test_volumes_and_mounts_accept_kubernetes_models_and_snake_case():
    model = V1Volume(
        name="shared", persistent_volume_claim=V1PersistentVolumeClaimVolumeSource(claim_name="vision")
    )
    spec = build(
        volumes=[model],
        volume_mounts=[V1VolumeMount(name="shared", mount_path="/shared", read_only=True)],
    )
    assert spec.volumes == (
        FrozenMap({"name": "shared", "persistentVolumeClaim": FrozenMap({"claimName": "vision"})}),
    )
    assert spec.volume_mounts == (VolumeMount("shared", "/shared", read_only=True),)
    snake = build(
        volumes=[SHARED], volume_mounts=[{"name": "shared", "mount_path": "/s", "sub_path": "runs"}]
    )
    assert snake.volume_mounts == (VolumeMount("shared", "/s", sub_path="runs"),)


def test_init_containers_may_mount_declared_volumes():
    spec = build(
        volumes=[SHARED],
        init_containers=[
            {
                "name": "fetch",
                "image": "busybox:1.36",
                "volumeMounts": [{"name": "shared", "mountPath": "/s"}],
            }
        ],
    )
    assert spec.init_containers[0]["name"] == "fetch"


def test_mpi_job_without_gpus_is_accepted():
    spec = build(gpus=0, workers=4)
    assert spec.kind == "MPIJob" and total_gpus(spec) == 0


def test_launcher_may_have_gpus_equal_to_a_worker():
    spec = build(gpus=8, workers=2, launcher_gpus=8)
    assert total_gpus(spec) == 24


def test_total_gpus_of_a_single_pod_job_is_its_gpus():
    assert total_gpus(build(gpus=4)) == 4


@pytest.mark.parametrize(("workers", "pods"), [(1, 1), (2, 3), (8, 9)])
def test_pod_count_includes_the_mpi_launcher(workers, pods):
    assert build(workers=workers).pod_count == pods


# --- templated fields ---------------------------------------------------------------------------------

TEMPLATED = {
    "image": "{{ params.image }}",
    "command": ["python", "{{ params.script }}"],
    "args": ["--date", "{{ ds }}"],
    "env": {"RUN": "{{ run_id }}"},
    "worker_command": None,
}


def test_templated_values_pass_in_template_aware_mode():
    spec = build(templated=True, **TEMPLATED)
    assert spec.image == "{{ params.image }}"
    assert spec.env["RUN"] == "{{ run_id }}"


def test_templated_image_fails_the_grammar_check_outside_template_mode():
    with pytest.raises(JobSpecError, match="^image: "):
        build(image="{{ params.image }}")


def test_template_mode_still_checks_types_and_untemplated_values():
    with pytest.raises(JobSpecError) as caught:
        build(templated=True, image="Not Valid", env={"N": 3})
    assert [f for f, _ in caught.value.errors] == ["image", "env.N"]


def test_block_templates_count_as_templates():
    assert build(templated=True, image="{% if x %}a{% else %}b{% endif %}").image.startswith("{%")


# --- immutability and serialization -------------------------------------------------------------------


def test_spec_is_frozen_and_hashable():
    spec = build(env={"A": "1"}, labels={"team": "cv"})
    with pytest.raises(AttributeError):
        spec.gpus = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.env["B"] = "2"  # type: ignore[index]
    assert hash(spec) == hash(build(env={"A": "1"}, labels={"team": "cv"}))


def test_spec_survives_deepcopy_and_pickle():
    spec = build(env={"A": "1"}, volumes=[SHARED], tolerations=[{"operator": "Exists"}])
    assert copy.deepcopy(spec) == spec
    assert pickle.loads(pickle.dumps(spec)) == spec


def test_to_dict_round_trips_through_validate():
    spec = build(
        command="python train.py",
        env={"A": "1", "S": {"secretKeyRef": {"name": "s", "key": "k"}}},
        workers=2,
        gpus=2,
        cpu="4",
        memory="16Gi",
        node_selector={"gpu": "a100"},
        tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}],
        volumes=[SHARED],
        volume_mounts=[{"name": "shared", "mountPath": "/s", "readOnly": True}],
        queue_timeout=timedelta(hours=2),
        labels={"team": "cv"},
        annotations={"note": "hello world"},
        priority="high",
        fatal_exit_codes=[2],
        retryable_exit_codes=[137],
        init_containers=[{"name": "fetch", "image": "busybox"}],
        image_pull_secrets=["regcred"],
        service_account="trainer",
        service_accounts=ALLOWED_ACCOUNTS,
    )
    plain = json.loads(json.dumps(spec.to_dict()))
    assert validate(**plain, service_accounts=ALLOWED_ACCOUNTS) == spec


# --- image grammar ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "image",
    [
        "ubuntu",
        "ubuntu:22.04",
        "library/ubuntu",
        "ghcr.io/org/team/train:v1.2.3",
        "localhost/train",
        "localhost:5000/train:dev",
        "registry.example.com:5000/a/b_c/d-e/f.g:tag",
        "nvcr.io/nvidia/pytorch:24.01-py3",
        "[::1]:5000/train",
        "train@sha256:" + "a" * 64,
        "ghcr.io/org/train:1.2@sha256:" + "0123456789abcdef" * 4,
        "a__b/c---d",
        "MyRegistry.io/org/train",
    ],
)
def test_valid_image_references(image):
    assert image_problem(image) is None


@pytest.mark.parametrize(
    "image",
    [
        "",
        "UBUNTU",
        "ubuntu:",
        "ubuntu:tag:extra",
        "-ubuntu",
        "ubuntu_",
        "a/b/",
        "a..b",
        "train@sha256:" + "A" * 64,
        "x:" + "t" * 129,
    ],
)
def test_invalid_image_references(image):
    assert image_problem(image) is not None


# --- every argument takes effect or does not exist ---


@pytest.mark.parametrize("limit", [0, 3, 5, None])
def test_a_requeue_limit_the_author_chose_travels_on_the_job_whatever_its_value(limit):
    from datetime import datetime, timezone

    from airflow_jobs_plugin.jobs import labels
    from airflow_jobs_plugin.jobs.manifests import build_manifest

    identity = TaskIdentity("nightly", "train", "run-1")
    spec = validate(image="registry.example/trainer:1", group="vision", user="alice", requeue_limit=limit)
    ann = build_manifest(
        spec, name=identity.job_name(1), task=identity, attempt=1, queued_at=datetime.now(timezone.utc)
    )["metadata"]["annotations"]
    assert ann[labels.REQUEUE_LIMIT] == ("none" if limit is None else str(limit))
    unset = validate(image="registry.example/trainer:1", group="vision", user="alice")
    ann = build_manifest(
        unset, name=identity.job_name(1), task=identity, attempt=1, queued_at=datetime.now(timezone.utc)
    )["metadata"]["annotations"]
    assert labels.REQUEUE_LIMIT not in ann  # left out: the quota policy's requeue_limit applies


@pytest.mark.parametrize("seconds", [30, 180, 600])
def test_a_schedule_timeout_the_author_chose_travels_on_the_job_whatever_its_value(seconds):
    """180 s is also the quota policy's default: written anyway, it keeps the job's own value even where
    the platform admin sets a different one in the policy."""
    from datetime import datetime, timezone

    from airflow_jobs_plugin.jobs import labels
    from airflow_jobs_plugin.jobs.manifests import build_manifest

    identity = TaskIdentity("nightly", "train", "run-1")
    spec = validate(
        image="registry.example/trainer:1", group="vision", user="alice", schedule_timeout=seconds
    )
    ann = build_manifest(
        spec, name=identity.job_name(1), task=identity, attempt=1, queued_at=datetime.now(timezone.utc)
    )["metadata"]["annotations"]
    assert ann[labels.SCHEDULE_TIMEOUT] == str(seconds)
    unset = validate(image="registry.example/trainer:1", group="vision", user="alice")
    ann = build_manifest(
        unset, name=identity.job_name(1), task=identity, attempt=1, queued_at=datetime.now(timezone.utc)
    )["metadata"]["annotations"]
    assert labels.SCHEDULE_TIMEOUT not in ann  # left out: the quota policy's schedule_timeout applies


@pytest.mark.parametrize("argument", ["requeue_backoff", "requeue_backoff_max"])
def test_a_requeue_back_off_is_the_quota_policys_and_the_operator_says_so(argument):
    from airflow_jobs_plugin.airflow.operators import JobOperator

    with pytest.raises(JobSpecError, match=rf"{argument}: .*quota policy"):
        JobOperator(
            task_id="train",
            image="registry.example/trainer:1",
            group="vision",
            **{argument: timedelta(minutes=1)},
        )


def test_framework_is_mpi_or_torchrun():
    with pytest.raises(JobSpecError, match=r"framework: must be one of 'mpi', 'torchrun', got str 'ddp'"):
        validate(image="t:1", group="vision", user="alice", framework="ddp")
    spec = validate(image="t:1", group="vision", user="alice", workers=2, framework="torchrun")
    assert spec.kind == "torchrun" and spec.pod_count == 2


@pytest.mark.parametrize(
    "mpi_only",
    [
        {"launcher_gpus": 1},
        {"launcher_cpu": "1"},
        {"worker_command": ["sshd"]},
        {"wait_for_workers": False},
        {"launcher_creation_policy": "AtStartup"},
        {"mpi_implementation": "MPICH"},
    ],
    ids=lambda d: next(iter(d)),
)
def test_mpi_only_arguments_are_refused_for_torchrun_naming_the_argument(mpi_only):
    (name,) = mpi_only
    with pytest.raises(JobSpecError, match=rf"{name}: only applies to MPI jobs, but framework is 'torchrun'"):
        validate(
            image="t:1", group="vision", user="alice", gpus=1, workers=2, framework="torchrun", **mpi_only
        )


def test_a_wrong_wait_for_workers_under_torchrun_is_named_once_as_wrong_not_as_mpi_only():
    with pytest.raises(JobSpecError) as raised:
        validate(
            image="t:1", group="vision", user="alice", workers=2, framework="torchrun", wait_for_workers="yes"
        )
    assert [f for f, _ in raised.value.errors] == ["wait_for_workers"]
    assert "must be True or False" in raised.value.message


@pytest.mark.parametrize(
    ("args", "refused"),
    [
        (
            {"framework": "torchrun", "workers": "{{ params.nodes }}", "mpi_implementation": "MPICH"},
            "mpi_implementation",
        ),
        ({"framework": "{{ params.framework }}", "workers": 1, "launcher_cpu": "2"}, "launcher_cpu"),
        ({"framework": "mpi", "workers": "{{ params.n }}", "gpus": 4, "launcher_gpus": 2}, "launcher_gpus"),
    ],
    ids=["torchrun-nodes-templated", "framework-templated", "workers-templated"],
)
def test_an_argument_every_kind_a_template_may_choose_refuses_is_refused_at_parse_time(args, refused):
    with pytest.raises(JobSpecError) as raised:
        validate(image="t:1", group="vision", user="alice", templated=True, **args)
    assert [f for f, _ in raised.value.errors] == [refused]
    assert "-- remove it" in raised.value.message


@pytest.mark.parametrize(
    "args",
    [
        # Right for an MPIJob, which two workers or more make it.
        {"framework": "mpi", "workers": "{{ params.n }}", "gpus": 4, "launcher_gpus": 4},
        # Read by an MPIJob, which framework 'mpi' makes it.
        {"framework": "{{ params.framework }}", "workers": 2, "wait_for_workers": False},
    ],
    ids=["workers-templated", "framework-templated"],
)
def test_an_argument_some_kind_a_template_may_choose_reads_waits_for_the_render(args):
    validate(image="t:1", group="vision", user="alice", templated=True, **args)


def test_a_torchrun_job_is_charged_every_nodes_gpus():
    spec = validate(image="t:1", group="vision", user="alice", gpus=4, workers=2, framework="torchrun")
    assert total_gpus(spec) == 8


# --- the account a job runs as ----------------------------------------------------------------------


def test_a_job_that_names_no_account_runs_as_the_platforms_first():
    assert build().service_account == "default"
    assert build(service_accounts=("runner-b", "runner-c")).service_account == "runner-b"


def test_an_account_the_platform_does_not_allow_is_refused_naming_the_field_and_the_fix():
    with pytest.raises(JobSpecError) as info:
        build(service_account="airflow-triggerer")
    assert info.value.field == "service_account"
    assert "'airflow-triggerer' is not an account jobs may run as" in str(info.value)
    assert "allowed: 'default'" in str(info.value) and "job_service_accounts" in str(info.value)
    assert build(service_account="trainer", service_accounts=ALLOWED_ACCOUNTS).service_account == "trainer"


@pytest.mark.parametrize("key", ["serviceAccountName", "serviceAccount"])
def test_a_pod_template_that_names_an_account_is_refused_pointing_at_service_account(key):
    with pytest.raises(JobSpecError) as info:
        build(pod_template={"spec": {key: "airflow-triggerer"}})
    assert info.value.field == f"pod_template.spec.{key}"
    assert "set service_account" in str(info.value)


@pytest.mark.parametrize("where", ["volumes", "pod_template"])
def test_a_projected_token_of_the_default_account_is_refused(where):
    token = {"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}
    args = {"volumes": [token]} if where == "volumes" else {"pod_template": {"spec": {"volumes": [token]}}}
    with pytest.raises(JobSpecError) as info:
        build(**args)
    assert info.value.field == (
        "volumes[0].projected" if where == "volumes" else "pod_template.spec.volumes[0].projected"
    )
    assert "service_account" in str(info.value)


def test_the_checkers_names_are_importable_from_spec_for_code_and_for_type_checkers():
    import ast

    from airflow_jobs_plugin.jobs import spec, spec_checks

    for name in spec._CHECKER_NAMES:
        assert getattr(spec, name) is getattr(spec_checks, name), name
    # The same names imported under TYPE_CHECKING, so mypy sees their types rather than __getattr__'s Any.
    tree = ast.parse(Path(spec.__file__).read_text())
    typed = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "airflow_jobs_plugin.jobs.spec_checks"
        for alias in node.names
    }
    assert typed == spec._CHECKER_NAMES
    with pytest.raises(AttributeError, match="no_such_name"):
        spec.no_such_name  # noqa: B018
