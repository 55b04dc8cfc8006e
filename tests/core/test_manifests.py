"""Manifests: a suspended batch/v1 Job for one worker, a suspended MPIJob for more, both API-valid."""

from __future__ import annotations

import re
import subprocess
from datetime import datetime, timedelta, timezone

import jsonschema
import pytest
from kubernetes.client import ApiClient

from airflow_jobs_plugin.cluster.objects import parse_rfc3339
from airflow_jobs_plugin.jobs import labels as keys
from airflow_jobs_plugin.jobs.kinds import LAUNCHER_RANK
from airflow_jobs_plugin.jobs.kinds.mpi import worker_host
from airflow_jobs_plugin.jobs.manifests import build_manifest, pod_role_and_rank, rfc3339
from airflow_jobs_plugin.jobs.spec import TaskIdentity, label_value, validate

TASK = TaskIdentity("nightly_retrain", "train", "scheduled__2024-05-01T00:00:00+00:00", -1, 1)
QUEUED_AT = datetime(2024, 5, 1, 0, 5, 7, 123456, tzinfo=timezone.utc)
BASE = {"image": "ghcr.io/org/train:1.2", "group": "vision", "user": "alice@example.com"}
SHARED = {"name": "shared", "persistentVolumeClaim": {"claimName": "vision-shared"}}
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
PRODUCT_ENV = ("JOB_USER", "JOB_GROUP", "JOB_NAME", "JOB_ATTEMPT", "JOB_ROLE", "JOB_RANK", "JOB_WORLD_SIZE")


def manifest(attempt: int = 1, **overrides) -> dict:
    spec = validate(**{**BASE, **overrides})
    return build_manifest(spec, name=TASK.job_name(attempt), task=TASK, attempt=attempt, queued_at=QUEUED_AT)


def deserialize(data: dict, klass: str):
    client = ApiClient()
    obj = client._ApiClient__deserialize(data, klass)
    # Unknown keys are silently dropped by deserialization; a round trip that loses nothing proves
    # every key is a real field of the API type (no typo such as "restartpolicy").
    assert client.sanitize_for_serialization(obj) == data
    return obj


def env_of(container: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def pod_templates(m: dict) -> dict[str, dict]:
    if m["kind"] == "Job":
        return {"worker": m["spec"]["template"]}
    replicas = m["spec"]["mpiReplicaSpecs"]
    return {"launcher": replicas["Launcher"]["template"], "worker": replicas["Worker"]["template"]}


# --- single-pod Job ---------------------------------------------------------------------------------


def test_one_worker_builds_a_suspended_batch_job_that_the_kubernetes_client_accepts():
    m = manifest(gpus=4, cpu=8, memory="32Gi", command="python train.py")
    job = deserialize(m, "V1Job")
    assert (m["apiVersion"], m["kind"]) == ("batch/v1", "Job")
    assert job.metadata.name == TASK.job_name(1)
    assert job.spec.suspend is True
    assert job.spec.template.spec.restart_policy == "Never"
    assert [c.name for c in job.spec.template.spec.containers] == ["main"]
    assert job.spec.template.spec.containers[0].command == ["sh", "-c", "python train.py"]


def test_job_resources_request_equal_to_limit():
    container = manifest(gpus=4, cpu=8, memory="32Gi")["spec"]["template"]["spec"]["containers"][0]
    expected = {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "4"}
    assert container["resources"] == {"requests": expected, "limits": expected}


def test_job_without_gpus_requests_none_and_hides_the_devices():
    container = manifest(gpus=0, cpu=1)["spec"]["template"]["spec"]["containers"][0]
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    assert env_of(container)["NVIDIA_VISIBLE_DEVICES"] == "void"


@pytest.mark.parametrize(
    "args",
    [
        {"gpus": 1},
        {"gpus": 0},
        {"gpus": 2, "workers": 3},
        {"gpus": 0, "workers": 3},
        {"gpus": 2, "workers": 3, "launcher_gpus": 2},
        {"gpus": 4, "workers": 2, "framework": "torchrun"},
        {"gpus": 0, "workers": 2, "framework": "torchrun"},
    ],
    ids=["1-gpu", "cpu", "mpi", "mpi-cpu", "mpi-launcher-gpus", "torchrun", "torchrun-cpu"],
)
def test_every_container_that_asks_for_no_gpu_hides_them_all(args):
    """NVIDIA_VISIBLE_DEVICES=void in every container, init container and sidecar without a GPU, every
    kind (a CUDA image's ENV would show every GPU of the node); none where the device plugin sets it."""
    sidecars = {
        "init_containers": [{"name": "fetch", "image": "x", "env": [{"name": "A", "value": "1"}]}],
        "pod_template": {
            "spec": {
                "containers": [{"name": "metrics", "image": "exporter:1"}],
                "initContainers": [{"name": "proxy", "image": "p:1", "restartPolicy": "Always"}],
            }
        },
    }
    m = manifest(**args, **sidecars)
    seen = set()
    for template in pod_templates(m).values():
        spec = template["spec"]
        for container in spec.get("initContainers", []) + spec["containers"]:
            asks = "nvidia.com/gpu" in (container.get("resources") or {}).get("limits", {})
            visible = [e for e in container.get("env", []) if e["name"] == "NVIDIA_VISIBLE_DEVICES"]
            assert visible == ([] if asks else [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]), (
                args,
                container["name"],
            )
            seen.add(container["name"])
    assert {"main", "fetch", "metrics", "proxy"} <= seen
    assert ("wait-for-workers" in seen) == (m["kind"] == "MPIJob")


def test_job_with_no_resources_has_no_resources_block():
    container = manifest()["spec"]["template"]["spec"]["containers"][0]
    assert "resources" not in container


def test_default_deadline_is_one_day_and_ttl_seven_days():
    spec = manifest()["spec"]
    assert spec["activeDeadlineSeconds"] == 86400
    assert spec["ttlSecondsAfterFinished"] == 7 * 86400


def test_deadlines_follow_the_spec_and_none_means_unset():
    spec = manifest(active_deadline=timedelta(hours=2), ttl_after_finished=None, backoff_limit=4)["spec"]
    assert spec["activeDeadlineSeconds"] == 7200
    assert "ttlSecondsAfterFinished" not in spec
    assert spec["backoffLimit"] == 4
    assert "activeDeadlineSeconds" not in manifest(active_deadline=None)["spec"]


def test_fractional_deadline_rounds_up_to_whole_seconds():
    assert manifest(active_deadline=90.2, schedule_timeout=30)["spec"]["activeDeadlineSeconds"] == 91


def test_pod_failure_policy_fails_the_job_on_author_exit_codes_and_disruption():
    m = manifest(fatal_exit_codes=[42, 3], retryable_exit_codes=[137])
    rules = deserialize(m, "V1Job").spec.pod_failure_policy.rules
    assert [(r.action, r.on_exit_codes.values) for r in rules if r.on_exit_codes] == [
        ("FailJob", [3, 42]),
        ("FailJob", [137]),
    ]
    assert all(r.on_exit_codes.container_name == "main" for r in rules if r.on_exit_codes)
    disruption = [r for r in rules if r.on_pod_conditions]
    assert len(disruption) == 1 and disruption[0].action == "FailJob"
    assert disruption[0].on_pod_conditions[0].type == "DisruptionTarget"


def test_pod_failure_policy_without_exit_codes_only_handles_disruption():
    rules = manifest()["spec"]["podFailurePolicy"]["rules"]
    assert rules == [
        {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    ]


def test_task_key_label_is_the_same_for_every_try_of_a_task_instance():
    later = TaskIdentity(TASK.dag_id, TASK.task_id, TASK.run_id, TASK.map_index, TASK.try_number + 1)
    spec = validate(**BASE)
    first = build_manifest(spec, name=TASK.job_name(1), task=TASK, attempt=1, queued_at=QUEUED_AT)
    second = build_manifest(spec, name=later.job_name(1), task=later, attempt=1, queued_at=QUEUED_AT)
    assert first["metadata"]["labels"][keys.TASK_KEY] == second["metadata"]["labels"][keys.TASK_KEY]
    assert first["metadata"]["labels"][keys.TRY] == "1" and second["metadata"]["labels"][keys.TRY] == "2"
    assert first["metadata"]["name"] != second["metadata"]["name"]


def test_job_carries_product_labels_on_object_and_pod():
    m = manifest(attempt=3, labels={"team": "cv"})
    expected = {
        keys.MANAGED_BY: keys.MANAGED_BY_VALUE,
        keys.GROUP: "vision",
        keys.USER: label_value("alice@example.com"),
        keys.TASK_KEY: TASK.instance_key(),
        keys.TRY: str(TASK.try_number),
        keys.ATTEMPT: "3",
        "team": "cv",
    }
    # The object alone carries its creation time (whole epoch seconds), for readers that select by age.
    assert m["metadata"]["labels"] == {**expected, keys.CREATED: str(int(QUEUED_AT.timestamp()))}
    assert m["spec"]["template"]["metadata"]["labels"] == {**expected, keys.ROLE: "worker", keys.RANK: "0"}


def test_job_annotations_hold_exact_identifiers_and_queue_data():
    m = manifest(gpus=2, priority="high", annotations={"note": "retrain weekly"})
    annotations = m["metadata"]["annotations"]
    assert annotations[keys.DAG_ID] == TASK.dag_id
    assert annotations[keys.TASK_ID] == TASK.task_id
    assert annotations[keys.RUN_ID] == TASK.run_id
    assert annotations[keys.MAP_INDEX] == "-1"
    assert annotations[keys.TRY_NUMBER] == "1"
    assert annotations[keys.GROUP_NAME] == "vision"
    assert annotations[keys.USER_NAME] == "alice@example.com"
    assert annotations[keys.GPUS] == "2"
    assert annotations[keys.PRIORITY] == "100"
    assert annotations[keys.QUEUED_AT] == "2024-05-01T00:05:07.123456Z"
    assert annotations[keys.REQUEUE_COUNT] == "0"
    assert annotations["note"] == "retrain weekly"
    pod_annotations = m["spec"]["template"]["metadata"]["annotations"]
    assert pod_annotations[keys.DAG_ID] == TASK.dag_id and pod_annotations["note"] == "retrain weekly"
    assert keys.REQUEUE_COUNT not in pod_annotations and keys.QUEUED_AT not in pod_annotations


def test_job_env_identifies_user_group_job_and_attempt():
    m = manifest(attempt=2, env={"EPOCHS": "3", "KEY": {"secretKeyRef": {"name": "s", "key": "k"}}}, gpus=1)
    env = env_of(m["spec"]["template"]["spec"]["containers"][0])
    assert env["JOB_USER"] == "alice@example.com"
    assert env["JOB_GROUP"] == "vision"
    assert env["JOB_NAME"] == TASK.job_name(2) == m["metadata"]["name"]
    assert env["JOB_ATTEMPT"] == "2"
    assert (env["JOB_ROLE"], env["JOB_RANK"], env["JOB_WORLD_SIZE"]) == ("worker", "0", "1")
    assert env["EPOCHS"] == "3"
    assert env["KEY"] == {"secretKeyRef": {"name": "s", "key": "k"}}
    assert "NVIDIA_VISIBLE_DEVICES" not in env


def test_pod_placement_storage_and_pull_settings_reach_the_pod():
    m = manifest(
        node_selector={"gpu-type": "a100"},
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        volumes=[SHARED],
        volume_mounts=[{"name": "shared", "mountPath": "/shared", "readOnly": True}],
        image_pull_policy="IfNotPresent",
        image_pull_secrets=["regcred"],
        service_account="trainer",
        service_accounts=("default", "trainer"),
        namespace="ml",
    )
    job = deserialize(m, "V1Job")
    pod = job.spec.template.spec
    assert job.metadata.namespace == "ml"
    assert pod.node_selector == {"gpu-type": "a100"}
    assert pod.tolerations[0].key == "nvidia.com/gpu" and pod.tolerations[0].operator == "Exists"
    assert pod.volumes[0].persistent_volume_claim.claim_name == "vision-shared"
    mount = pod.containers[0].volume_mounts[0]
    assert (mount.name, mount.mount_path, mount.read_only) == ("shared", "/shared", True)
    assert pod.containers[0].image_pull_policy == "IfNotPresent"
    assert [s.name for s in pod.image_pull_secrets] == ["regcred"]
    assert pod.service_account_name == "trainer"
    # An account the platform allowed keeps its own token setting.
    assert pod.automount_service_account_token is None


def test_a_job_runs_as_the_platforms_account_without_its_token_whatever_the_template_says():
    pod = manifest(pod_template={"spec": {"automountServiceAccountToken": True}})["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "default"
    assert pod["automountServiceAccountToken"] is False


def test_namespace_is_left_to_the_caller_when_unset():
    assert "namespace" not in manifest()["metadata"]


def test_author_init_containers_run_first_and_see_the_product_env():
    m = manifest(
        init_containers=[{"name": "fetch", "image": "busybox:1.36", "env": [{"name": "X", "value": "1"}]}]
    )
    job = deserialize(m, "V1Job")
    init = job.spec.template.spec.init_containers
    assert [c.name for c in init] == ["fetch"]
    names = [e.name for e in init[0].env]
    # The product's variables, the author's, then no GPU (it asks for none: pod_template.hide_unallocated_gpus).
    assert names[: len(PRODUCT_ENV)] == list(PRODUCT_ENV) and names[-2:] == ["X", "NVIDIA_VISIBLE_DEVICES"]
    assert init[0].env[-1].value == "void"


def test_building_is_deterministic():
    assert manifest(gpus=2, workers=3) == manifest(gpus=2, workers=3)
    assert manifest(gpus=2) == manifest(gpus=2)


# --- MPIJob -----------------------------------------------------------------------------------------

QUANTITY = {"type": "string"}
POD_TEMPLATE = {"type": "object", "required": ["metadata", "spec"]}
REPLICA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["replicas", "template"],
    "properties": {
        "replicas": {"type": "integer", "minimum": 0},
        "restartPolicy": {"enum": ["Always", "OnFailure", "Never", "ExitCode"]},
        "template": POD_TEMPLATE,
    },
}
# The parts of the kubeflow.org/v2beta1 MPIJob schema this product writes.
MPIJOB_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "kubeflow.org/v2beta1"},
        "kind": {"const": "MPIJob"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["mpiReplicaSpecs", "runPolicy"],
            "properties": {
                "slotsPerWorker": {"type": "integer", "minimum": 1},
                "mpiImplementation": {"enum": ["OpenMPI", "Intel", "MPICH"]},
                "launcherCreationPolicy": {"enum": ["AtStartup", "WaitForWorkersReady"]},
                "runLauncherAsWorker": {"type": "boolean"},
                "sshAuthMountPath": {"type": "string"},
                "runPolicy": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "suspend": {"type": "boolean"},
                        "cleanPodPolicy": {"enum": ["None", "Running", "All"]},
                        "backoffLimit": {"type": "integer", "minimum": 0},
                        "activeDeadlineSeconds": {"type": "integer", "minimum": 1},
                        "ttlSecondsAfterFinished": {"type": "integer", "minimum": 0},
                    },
                },
                "mpiReplicaSpecs": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["Launcher", "Worker"],
                    "properties": {"Launcher": REPLICA, "Worker": REPLICA},
                },
            },
        },
    },
}


def test_several_workers_build_a_suspended_mpijob_matching_the_v2beta1_schema():
    m = manifest(gpus=8, workers=4, command=["mpirun", "python", "train.py"])
    jsonschema.validate(m, MPIJOB_SCHEMA)
    assert (m["apiVersion"], m["kind"]) == ("kubeflow.org/v2beta1", "MPIJob")
    assert m["spec"]["runPolicy"]["suspend"] is True
    assert m["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"
    assert m["spec"]["slotsPerWorker"] == 8
    replicas = m["spec"]["mpiReplicaSpecs"]
    assert replicas["Launcher"]["replicas"] == 1
    assert replicas["Worker"]["replicas"] == 4
    for template in pod_templates(m).values():
        deserialize(template, "V1PodTemplateSpec")


def test_mpijob_deadlines_live_in_the_run_policy():
    run_policy = manifest(gpus=1, workers=2, backoff_limit=2)["spec"]["runPolicy"]
    assert run_policy["activeDeadlineSeconds"] == 86400
    assert run_policy["ttlSecondsAfterFinished"] == 7 * 86400
    assert run_policy["backoffLimit"] == 2


def test_mpijob_without_gpus_gets_one_slot_per_worker():
    assert manifest(gpus=0, workers=2)["spec"]["slotsPerWorker"] == 1


def test_restart_policy_is_set_per_replica_not_in_the_pod_templates():
    m = manifest(gpus=1, workers=2)
    replicas = m["spec"]["mpiReplicaSpecs"]
    assert replicas["Launcher"]["restartPolicy"] == "Never"
    assert replicas["Worker"]["restartPolicy"] == "OnFailure"
    assert all("restartPolicy" not in t["spec"] for t in pod_templates(m).values())


def test_launcher_runs_the_author_command_and_workers_run_sshd():
    m = manifest(gpus=1, workers=2, command=["mpirun", "python", "train.py"], args=["--epochs", "3"])
    templates = pod_templates(m)
    launcher = templates["launcher"]["spec"]["containers"][0]
    worker = templates["worker"]["spec"]["containers"][0]
    assert launcher["name"] == worker["name"] == "main"
    assert (launcher["command"], launcher["args"]) == (["mpirun", "python", "train.py"], ["--epochs", "3"])
    assert worker["command"] == ["/usr/sbin/sshd", "-De"] and "args" not in worker


def test_worker_command_can_be_overridden():
    worker = pod_templates(manifest(gpus=1, workers=2, worker_command="exec /opt/start-worker.sh"))["worker"]
    assert worker["spec"]["containers"][0]["command"] == ["sh", "-c", "exec /opt/start-worker.sh"]


def test_mpi_gpus_go_to_workers_and_launcher_gets_none_by_default():
    m = manifest(gpus=4, workers=3, cpu="16", memory="64Gi")
    templates = pod_templates(m)
    worker_limits = templates["worker"]["spec"]["containers"][0]["resources"]["limits"]
    launcher_limits = templates["launcher"]["spec"]["containers"][0]["resources"]["limits"]
    assert worker_limits == {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4"}
    assert launcher_limits == {"cpu": "16", "memory": "64Gi"}
    assert m["metadata"]["annotations"][keys.GPUS] == "12"
    assert "runLauncherAsWorker" not in m["spec"]


def test_launcher_resources_can_differ_from_workers():
    launcher = pod_templates(manifest(gpus=4, workers=2, cpu="16", launcher_cpu="2", launcher_memory="4Gi"))[
        "launcher"
    ]
    assert launcher["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "2", "memory": "4Gi"}


def test_launcher_with_gpus_runs_as_a_worker_and_is_charged():
    m = manifest(gpus=2, workers=2, launcher_gpus=2)
    assert m["spec"]["runLauncherAsWorker"] is True
    launcher = pod_templates(m)["launcher"]["spec"]["containers"][0]
    assert launcher["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert m["metadata"]["annotations"][keys.GPUS] == "6"


def test_a_launcher_with_gpus_is_rank_zero_of_a_world_one_larger():
    # mpi-operator puts such a launcher first in the hostfile and pads the workers' replica index by
    # one (pkg/controller/mpi_job_controller.go, v0.7.0+): the product's numbering is the operator's.
    m = manifest(gpus=2, workers=2, launcher_gpus=2)
    templates = pod_templates(m)
    launcher = env_of(templates["launcher"]["spec"]["containers"][0])
    worker = env_of(templates["worker"]["spec"]["containers"][0])
    assert (launcher["JOB_RANK"], launcher["JOB_WORLD_SIZE"], worker["JOB_WORLD_SIZE"]) == ("0", "3", "3")
    wait = next(c for c in templates["launcher"]["spec"]["initContainers"] if c["name"] == "wait-for-workers")
    assert "-lt 2 ]" in wait["command"][2]  # it waits for the two workers, not for itself


def test_mpi_env_gives_role_rank_and_world_size():
    m = manifest(attempt=2, gpus=1, workers=3)
    templates = pod_templates(m)
    launcher = env_of(templates["launcher"]["spec"]["containers"][0])
    worker = env_of(templates["worker"]["spec"]["containers"][0])
    assert (launcher["JOB_ROLE"], launcher["JOB_RANK"], launcher["JOB_WORLD_SIZE"]) == ("launcher", "-1", "3")
    assert str(LAUNCHER_RANK) == "-1"
    assert worker["JOB_ROLE"] == "worker" and worker["JOB_WORLD_SIZE"] == "3"
    assert worker["JOB_RANK"] == {
        "fieldRef": {"fieldPath": "metadata.labels['training.kubeflow.org/replica-index']"}
    }
    for env in (launcher, worker):
        assert env["JOB_USER"] == "alice@example.com" and env["JOB_GROUP"] == "vision"
        assert env["JOB_NAME"] == m["metadata"]["name"] and env["JOB_ATTEMPT"] == "2"


def test_mpi_pod_templates_carry_role_labels_and_identity_annotations():
    m = manifest(gpus=1, workers=2, labels={"team": "cv"})
    templates = pod_templates(m)
    for role, template in templates.items():
        labels = template["metadata"]["labels"]
        assert labels[keys.ROLE] == role
        assert labels[keys.TASK_KEY] == TASK.instance_key() and labels["team"] == "cv"
        assert keys.RANK not in labels
        assert template["metadata"]["annotations"][keys.RUN_ID] == TASK.run_id
    assert keys.ROLE not in m["metadata"]["labels"]


def test_worker_host_is_the_name_the_mpi_operator_publishes():
    # kubeflow/mpi-operator pkg/controller/mpi_job_controller.go, v0.5.0 and v0.8.0: newWorker sets
    # hostname <job>-worker-<i> and subdomain <job> (the headless Service of newJobService), and
    # newConfigMap writes <job>-worker-<i>.<job>.<ns>.svc into the hostfile. Not <job>-worker (pre-v0.5).
    assert worker_host("train", 1, "ml") == "train-worker-1.train.ml.svc"


def test_launcher_waits_for_the_published_worker_names_in_an_init_container_by_default():
    m = manifest(gpus=1, workers=2, init_containers=[{"name": "fetch", "image": "busybox"}])
    launcher = deserialize(pod_templates(m)["launcher"], "V1PodTemplateSpec")
    init = launcher.spec.init_containers
    assert [c.name for c in init] == ["fetch", "wait-for-workers"]
    wait = init[-1]
    assert wait.image == "ghcr.io/org/train:1.2"
    assert wait.command[:2] == ["sh", "-c"]
    assert f'host="{worker_host("$JOB_NAME", "$i", "$JOB_NAMESPACE")}"' in wait.command[2]
    assert "$JOB_NAME-worker-$i.$JOB_NAME.$JOB_NAMESPACE.svc" in wait.command[2]
    assert {e.name for e in wait.env} >= {"JOB_NAME", "JOB_WORLD_SIZE", "JOB_NAMESPACE"}
    worker_init = pod_templates(m)["worker"]["spec"]["initContainers"]
    assert [c["name"] for c in worker_init] == ["fetch"]


def test_the_wait_script_resolves_each_worker_name_in_turn(tmp_path):
    # Run the script itself with a fake getent that knows only the names the operator publishes.
    m = manifest(gpus=1, workers=2)
    wait = pod_templates(m)["launcher"]["spec"]["initContainers"][-1]
    known = {worker_host("train-1", i, "ml") for i in range(2)}
    getent = tmp_path / "getent"
    getent.write_text(
        '#!/bin/sh\ncase "$2" in ' + "|".join(sorted(known)) + ") echo 10.0.0.1 $2;; *) exit 2;; esac\n"
    )
    getent.chmod(0o755)
    env = {
        "PATH": f"{tmp_path}:/usr/bin:/bin",
        "JOB_NAME": "train-1",
        "JOB_NAMESPACE": "ml",
        "JOB_WORLD_SIZE": "2",
    }
    done = subprocess.run(wait["command"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "all 2 workers resolve"


def test_the_operator_creates_the_launcher_once_every_worker_is_ready_by_default():
    # Effective when the MPIJob is created unsuspended; see the module docstring (mpi-operator #615).
    m = manifest(gpus=1, workers=2)
    assert m["spec"]["launcherCreationPolicy"] == "WaitForWorkersReady"
    assert "initContainers" not in pod_templates(m)["worker"]["spec"]


def test_waiting_for_workers_can_be_turned_off():
    launcher = pod_templates(manifest(gpus=1, workers=2, wait_for_workers=False))["launcher"]
    assert "initContainers" not in launcher["spec"]


def test_author_init_containers_run_in_the_launcher_and_every_worker():
    # What a newcomer sees as Init:0/2 and PodInitializing on every replica: the author's data fetch.
    m = manifest(gpus=1, workers=2, init_containers=[{"name": "fetch", "image": "busybox"}])
    worker_init = pod_templates(m)["worker"]["spec"]["initContainers"]
    assert [c["name"] for c in worker_init] == ["fetch"]
    env = {e["name"]: e for e in worker_init[0]["env"]}
    assert env["JOB_ROLE"]["value"] == "worker" and "valueFrom" in env["JOB_RANK"]


def test_launcher_creation_policy_and_mpi_implementation_are_passed_through():
    m = manifest(gpus=1, workers=2, launcher_creation_policy="AtStartup", mpi_implementation="Intel")
    assert m["spec"]["launcherCreationPolicy"] == "AtStartup"
    assert m["spec"]["mpiImplementation"] == "Intel"


# --- both kinds -------------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 2, 16])
def test_every_label_value_is_valid(workers):
    m = manifest(gpus=1, workers=workers, user="Dr. Ünïcode <ml@corp>", group="vision team")
    label_sets = [m["metadata"]["labels"]] + [t["metadata"]["labels"] for t in pod_templates(m).values()]
    for label_set in label_sets:
        for value in label_set.values():
            assert len(value) <= 63 and LABEL_VALUE.match(value), value


def test_naive_enqueue_time_is_rejected():
    spec = validate(**BASE)
    with pytest.raises(ValueError, match="timezone"):
        build_manifest(spec, name="n-a1", task=TASK, attempt=1, queued_at=datetime(2024, 1, 1))


@pytest.mark.parametrize("attempt", [0, -1, True])
def test_attempt_must_be_positive(attempt):
    spec = validate(**BASE)
    with pytest.raises(ValueError, match="attempt"):
        build_manifest(spec, name="n-a1", task=TASK, attempt=attempt, queued_at=QUEUED_AT)


def test_rfc3339_is_utc_with_microseconds_and_round_trips():
    moment = datetime(2024, 5, 1, 2, 5, 7, 123456, tzinfo=timezone(timedelta(hours=2)))
    text = rfc3339(moment)
    assert text == "2024-05-01T00:05:07.123456Z"
    assert parse_rfc3339(text) == moment


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({keys.ROLE: "worker", keys.RANK: "0"}, ("worker", 0)),
        ({keys.ROLE: "worker", keys.MPI_JOB_ROLE: "worker", keys.MPI_REPLICA_INDEX: "5"}, ("worker", 5)),
        ({keys.ROLE: "launcher", keys.MPI_JOB_ROLE: "launcher"}, ("launcher", None)),
        ({keys.MPI_JOB_ROLE: "worker", keys.MPI_REPLICA_INDEX: "2"}, ("worker", 2)),
        ({keys.ROLE: "worker", keys.RANK: "x"}, ("worker", None)),
        ({}, (None, None)),
    ],
)
def test_pod_role_and_rank_from_labels(labels, expected):
    assert pod_role_and_rank(labels) == expected


def test_the_jobs_own_quota_limits_travel_on_the_object():
    ann = manifest(schedule_timeout=90, queue_timeout=3600, requeue_limit=2)["metadata"]["annotations"]
    assert ann[keys.SCHEDULE_TIMEOUT] == "90"
    assert ann[keys.QUEUE_TIMEOUT] == "3600"
    assert ann[keys.REQUEUE_LIMIT] == "2"
    defaults = manifest()["metadata"]["annotations"]
    # A task that keeps the defaults follows the quota policy's limits.
    assert not {keys.QUEUE_TIMEOUT, keys.SCHEDULE_TIMEOUT, keys.REQUEUE_LIMIT} & set(defaults)


# --- torchrun: an Indexed Job of nodes -----------------------------------------------------------------


def test_torchrun_builds_a_suspended_indexed_job_of_one_pod_per_node_that_the_kubernetes_client_accepts():
    m = manifest(framework="torchrun", workers=2, gpus=4)
    job = deserialize(m, "V1Job")
    assert job.spec.suspend is True and job.spec.completion_mode == "Indexed"
    assert job.spec.parallelism == job.spec.completions == 2  # every node at once, each once
    assert m["metadata"]["labels"][keys.FRAMEWORK] == "torchrun"
    template = m["spec"]["template"]
    assert (
        template["metadata"]["labels"][keys.ROLE] == "node"
        and keys.RANK not in template["metadata"]["labels"]
    )
    # Its pods are <job>-<index> under the headless Service of the job's name.
    assert template["spec"]["subdomain"] == m["metadata"]["name"]
    assert template["spec"]["restartPolicy"] == "Never"
    (main,) = template["spec"]["containers"]
    assert main["resources"]["limits"]["nvidia.com/gpu"] == "4"


def test_torchrun_reads_its_settings_from_the_environment_so_the_command_needs_no_flags():
    m = manifest(framework="torchrun", workers=2, gpus=4, env={"NCCL_DEBUG": "INFO"})
    name = m["metadata"]["name"]
    env = env_of(m["spec"]["template"]["spec"]["containers"][0])
    index = {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}
    assert env["PET_NNODES"] == "2" and env["PET_NPROC_PER_NODE"] == "4"
    assert env["PET_NODE_RANK"] == index and env["NODE_RANK"] == index and env["JOB_RANK"] == index
    assert env["PET_MASTER_ADDR"] == env["MASTER_ADDR"] == f"{name}-0.{name}"
    assert env["PET_MASTER_PORT"] == env["MASTER_PORT"] == "29500"
    assert env["WORLD_SIZE"] == "8" and env["JOB_WORLD_SIZE"] == "2" and env["JOB_ROLE"] == "node"
    names = [e["name"] for e in m["spec"]["template"]["spec"]["containers"][0]["env"]]
    # The product's variables, torchrun's, then the author's (the author's wins on a clash).
    assert names[: len(PRODUCT_ENV)] == list(PRODUCT_ENV) and names[-1] == "NCCL_DEBUG"


def test_torchrun_on_one_node_is_an_indexed_job_too():
    m = manifest(framework="torchrun", workers=1, gpus=8)
    assert m["spec"]["completionMode"] == "Indexed" and m["spec"]["parallelism"] == 1
    assert env_of(m["spec"]["template"]["spec"]["containers"][0])["PET_NPROC_PER_NODE"] == "8"


def test_a_torchrun_nodes_rank_comes_from_its_completion_index_label():
    assert pod_role_and_rank({keys.ROLE: "node", "batch.kubernetes.io/job-completion-index": "1"}) == (
        "node",
        1,
    )
