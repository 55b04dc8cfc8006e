"""Bad input, case by case: each gets an error that names the field, when the DAG is parsed where that is
possible; none crashes a trigger or leaves a job or a quota reservation behind."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest
from airflow.exceptions import AirflowException
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred
from airflow_jobs_sim import ClusterConfig, SimCluster
from controller_fixture import ControllerThread
from sim_fixtures import policies_removed_fixture
from task_doubles import task_context

from airflow_jobs_plugin.airflow.job_sensor_trigger import JobSensorTrigger
from airflow_jobs_plugin.airflow.operators import JobOperator
from airflow_jobs_plugin.airflow.triggers import JobTrigger
from airflow_jobs_plugin.cluster import watch as shared
from airflow_jobs_plugin.cluster.kube import CONFIGMAPS, JOBS, KubeClient
from airflow_jobs_plugin.jobs.spec import JobSpecError, TaskIdentity
from airflow_jobs_plugin.queueing.pools import POLICY_LABELS
from airflow_jobs_plugin.queueing.quota import parse_policy

GOOD = {"task_id": "train", "image": "registry.example/trainer:1", "group": "vision", "gpus": 1}

# (case, operator arguments that differ from GOOD, the field the error must name)
PARSE_TIME = [
    ("negative GPUs", {"gpus": -2}, "gpus"),
    ("a huge GPU count", {"gpus": 10_000}, "gpus"),
    ("GPUs as a float", {"gpus": 1.5}, "gpus"),
    ("GPUs as a string", {"gpus": "4"}, "gpus"),
    ("zero workers", {"workers": 0}, "workers"),
    ("negative workers", {"workers": -1}, "workers"),
    ("a huge worker count", {"workers": 100_000}, "workers"),
    ("an image with spaces", {"image": "my registry/trainer:1"}, "image"),
    ("an image with upper-case path", {"image": "registry.example/Trainer:1"}, "image"),
    ("an image with a bad tag", {"image": "trainer:!latest"}, "image"),
    ("an empty image", {"image": ""}, "image"),
    ("a non-string env value", {"env": {"EPOCHS": 3}}, "env.EPOCHS"),
    ("an env name with a space", {"env": {"MY VAR": "1"}}, "env"),
    ("command as a number", {"command": 42}, "command"),
    ("args with a non-string", {"args": ["--lr", 0.1]}, "args"),
    ("an empty group", {"group": ""}, "group"),
    ("a namespace with upper case", {"namespace": "ML-Team"}, "namespace"),
    ("a label value over 63 characters", {"job_labels": {"team": "x" * 64}}, "labels"),
    ("a label key with a bad prefix", {"job_labels": {"-bad/key": "v"}}, "labels"),
    ("a bad cpu quantity", {"cpu": "four"}, "cpu"),
    ("a bad memory quantity", {"memory": "32 gigs"}, "memory"),
    ("a negative backoff limit", {"backoff_limit": -1}, "backoff_limit"),
    ("zero attempts", {"max_attempts": 0}, "max_attempts"),
    (
        "a back-off above its cap",
        {"retry_backoff": timedelta(hours=2), "retry_backoff_max": timedelta(minutes=5)},
        "retry_backoff",
    ),
    (
        "a schedule timeout longer than the deadline",
        {"schedule_timeout": timedelta(hours=2), "active_deadline": timedelta(hours=1)},
        "schedule_timeout",
    ),
    ("a negative queue timeout", {"queue_timeout": timedelta(seconds=-5)}, "queue_timeout"),
    ("an exit code out of range", {"retryable_exit_codes": [300]}, "retryable_exit_codes"),
    (
        "an exit code both fatal and retryable",
        {"retryable_exit_codes": [3], "fatal_exit_codes": [3]},
        "exit_codes",
    ),
    ("an unknown priority class", {"priority": "urgent"}, "priority"),
    (
        "a toleration with a bad operator",
        {"tolerations": [{"key": "gpu", "operator": "Maybe"}]},
        "tolerations",
    ),
    (
        "a mount of an undeclared volume",
        {"volume_mounts": [{"name": "data", "mountPath": "/data"}]},
        "volume_mounts",
    ),
    ("a node selector with a non-string value", {"node_selector": {"gpu": 1}}, "node_selector"),
    ("launcher GPUs on a single-pod job", {"launcher_gpus": 2}, "launcher_gpus"),
]


@pytest.mark.parametrize(("case", "args", "field_name"), PARSE_TIME, ids=[c[0] for c in PARSE_TIME])
def test_bad_operator_arguments_fail_at_parse_time_naming_the_field(case, args, field_name):
    with pytest.raises(JobSpecError) as raised:
        JobOperator(**{**GOOD, **args})
    assert field_name in str(raised.value), str(raised.value)


BAD_POLICIES = [
    ("not a mapping", "- vision\n- nlp\n", "policy"),
    ("YAML syntax error", "groups: {vision: {gpus: 8}\n", "line 2"),
    ("a group without gpus", "groups:\n  vision: {user_gpus: 2}\n", "groups.vision.gpus"),
    ("negative group quota", "groups:\n  vision: {gpus: -8}\n", "groups.vision.gpus"),
    ("a misspelt key", "groups:\n  vision: {gpus: 8, user_gpu: 2}\n", "user_gpu"),
    ("an unquoted boolean user", "groups:\n  vision: {gpus: 8, users: {no: 2}}\n", "groups.vision.users"),
    ("a bad duration", "groups:\n  vision: {gpus: 8}\nschedule_timeout: soon\n", "schedule_timeout"),
    ("a group name with upper case", "groups:\n  Vision: {gpus: 8}\n", "groups.Vision"),
]


@pytest.mark.parametrize(("case", "text", "key"), BAD_POLICIES, ids=[c[0] for c in BAD_POLICIES])
def test_malformed_policy_yaml_is_rejected_naming_the_key(case, text, key):
    with pytest.raises(ValueError) as raised:
        parse_policy(text)
    assert key in str(raised.value), str(raised.value)


def test_templated_values_are_not_rejected_before_rendering():
    JobOperator(
        **{**GOOD, "image": "registry.example/trainer:{{ ds_nodash }}", "env": {"RUN": "{{ run_id }}"}}
    )


def test_a_value_wrong_only_once_rendered_fails_the_task_for_good_naming_the_field():
    # What Airflow leaves in the attribute after rendering "{{ params.tag }}" with a tag that has a space:
    # no retry can cure it, so none is spent (AirflowFailException, not a bare JobSpecError).
    op = JobOperator(**{**GOOD, "image": "registry.example/trainer:{{ params.tag }}"})
    op.image = "registry.example/trainer:v 2"
    with pytest.raises(AirflowFailException, match=r"invalid rendered value of image") as raised:
        op.execute(task_context("rendered_error"))
    assert "image:" in str(raised.value)


@pytest.mark.parametrize(
    "dag_id", ["обучение_модели", "模型训练", "entraînement-été", "🚀-rocket", "a" * 250]
)
def test_any_dag_id_gives_a_valid_job_name(dag_id):
    name = TaskIdentity(dag_id, "train", "manual__2026-11-22T00:00:00+00:00").job_name(1)
    assert len(name) <= 63 and name[0].isalpha()
    assert all(c.islower() or c.isdigit() or c == "-" for c in name)


# --- at run time: nothing crashes, nothing is left behind ---


@pytest.fixture(scope="module")
def cluster():
    with (
        SimCluster(ClusterConfig(nodes=1, gpus_per_node=8, time_scale=0.01)) as sim,
        ControllerThread(sim.kubeconfig_path),
    ):
        yield sim


policies_removed = policies_removed_fixture()


@pytest.fixture(autouse=True)
def connection(cluster, monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_KUBERNETES_DEFAULT",
        json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": cluster.kubeconfig_path}}),
    )


def cluster_objects(cluster) -> tuple[list[dict], list[dict]]:
    jobs = cluster.store.list("jobs", "default")
    ledgers = [
        c
        for c in cluster.store.list("configmaps", "default")
        if c["metadata"]["name"].startswith("airflow-jobs-quota-")
    ]
    return jobs, ledgers


def put_policy(cluster, name: str, text: str) -> None:
    async def go():
        client = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
        try:
            body = {"metadata": {"name": name, "labels": POLICY_LABELS}, "data": {"policy.yaml": text}}
            await client.create(CONFIGMAPS, "default", body)
        finally:
            await client.close()

    asyncio.run(go())


def test_an_unknown_group_at_submit_time_fails_the_task_and_creates_nothing(cluster):
    put_policy(cluster, "policy-unknown", "groups:\n  vision: {gpus: 8}\n  nlp: {gpus: 8}\n")
    before = cluster_objects(cluster)
    op = JobOperator(**{**GOOD, "group": "speech"}, quota_configmap="policy-unknown")
    with pytest.raises(AirflowFailException, match="unknown quota group 'speech'.*nlp, vision"):
        op.execute(task_context("unknown_group"))
    assert cluster_objects(cluster) == before


def test_a_job_that_can_never_fit_fails_at_submit_time_and_creates_nothing(cluster):
    put_policy(cluster, "policy-small", "groups:\n  vision: {gpus: 4}\n")
    before = cluster_objects(cluster)
    op = JobOperator(**{**GOOD, "gpus": 8}, quota_configmap="policy-small")
    with pytest.raises(AirflowFailException, match="could never start"):
        op.execute(task_context("never_fits"))
    assert cluster_objects(cluster) == before


def test_a_priority_class_the_group_may_not_use_fails_at_submit_time_and_creates_nothing(cluster):
    """The group's priority_classes, read by the worker from the policy it submits under; the error
    names the class, the group and the classes it may use."""
    put_policy(cluster, "policy-classes", "groups:\n  vision: {gpus: 8, priority_classes: [training-low]}\n")
    before = cluster_objects(cluster)
    op = JobOperator(**GOOD, priority_class_name="training-high", quota_configmap="policy-classes")
    with pytest.raises(
        AirflowFailException,
        match=r"priority class 'training-high' is not allowed for group 'vision' \(allowed: training-low\)",
    ):
        op.execute(task_context("priority_class"))
    assert cluster_objects(cluster) == before


def run_trigger(trigger: JobTrigger, timeout: float = 30) -> list[dict]:
    async def go():
        try:
            return [e.payload async for e in trigger.run()]
        finally:
            await shared.shutdown()

    return asyncio.run(asyncio.wait_for(go(), timeout))


def test_a_malformed_policy_at_run_time_holds_jobs_inadmissible_without_crashing(cluster, capsys):
    put_policy(cluster, "policy-broken", "groups:\n  vision: {gpus: 8}\n")
    op = JobOperator(
        **GOOD,
        quota_configmap="policy-broken",
        job_annotations={"sim.airflow-jobs.io/scenario": json.dumps({"main": {"run": 1}})},
    )
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(task_context("broken_policy"))
    # An admin breaks the policy after the job was submitted.
    cm = cluster.store.get("configmaps", "policy-broken", "default", copy=True)
    cm["data"]["policy.yaml"] = "groups:\n  vision: {gpus: eight}\n"
    cluster.store.update("configmaps", cm)

    async def go():
        task = asyncio.ensure_future(_collect(deferred.value.trigger))
        for _ in range(200):
            if "Inadmissible" in capsys.readouterr().out:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the job never reported Inadmissible")
        assert not task.done()  # the trigger lives on, waiting for the admin
        fixed = cluster.store.get("configmaps", "policy-broken", "default", copy=True)
        fixed["data"]["policy.yaml"] = "groups:\n  vision: {gpus: 8}\n"
        cluster.store.update("configmaps", fixed)
        try:
            return await asyncio.wait_for(task, 30)
        finally:
            await shared.shutdown()

    (event,) = asyncio.run(go())
    assert event["status"] == "success"
    name = deferred.value.trigger.job_name
    ledger = cluster.store.get("configmaps", "airflow-jobs-quota-vision", "default")
    assert not [k for k in (ledger.get("data") or {}) if name in k and name in ledger["data"][k]]


async def _collect(trigger):
    return [e.payload async for e in trigger.run()]


def test_a_trigger_for_a_job_that_does_not_exist_ends_with_an_error_event(cluster):
    (event,) = run_trigger(JobTrigger(job_name="no-such-job-a1", namespace="default"))
    assert event["status"] == "error" and event["reason"] == "JobDeleted"
    with pytest.raises(AirflowException, match="no-such-job-a1"):
        JobOperator(**GOOD).execute_complete({}, event)


@pytest.mark.parametrize(
    ("trigger", "kwargs", "message"),
    [
        (JobTrigger, {"kind": "PyTorchJob"}, "kind"),
        (JobSensorTrigger, {"kind": "PyTorchJob"}, "kind"),
        (JobSensorTrigger, {"target_states": ["DONE"]}, "DONE"),
        (JobSensorTrigger, {"target_states": ["FAILED"]}, "overlap"),
        (JobSensorTrigger, {"target_states": []}, "at least one"),
    ],
)
def test_bad_trigger_kwargs_fail_at_construction_not_inside_the_triggerer_loop(trigger, kwargs, message):
    with pytest.raises(ValueError, match=message):
        trigger(job_name="x-a1", namespace="default", **kwargs)


def test_a_job_deleted_behind_the_triggers_back_ends_it_cleanly(cluster):
    op = JobOperator(
        **GOOD, job_annotations={"sim.airflow-jobs.io/scenario": json.dumps({"main": {"run": None}})}
    )
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(task_context("deleted_behind"))
    name = deferred.value.trigger.job_name

    async def go():
        task = asyncio.ensure_future(_collect(deferred.value.trigger))
        await asyncio.sleep(1)
        client = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
        try:
            await client.delete(JOBS, "default", name)
            return await asyncio.wait_for(task, 30)
        finally:
            await client.close()
            await shared.shutdown()

    (event,) = asyncio.run(go())
    # Deleting a live job by hand is a cancel: the task fails for good, naming who (as far as known).
    assert (event["status"], event["state"], event["reason"]) == ("failed", "CANCELLED", "Cancelled")
    with pytest.raises(AirflowFailException, match="cancelled by someone who deleted the job object"):
        op.execute_complete(task_context("deleted_behind"), event)
