"""A task adopts only its own job, and a cancel stays a cancel: what a new try finds on the cluster under
its task's name and key decides whether it follows it, fails naming it, or ends as cancelled.

The planted jobs are what a hostile DAG author can make with the worker's identity: the victim's job to
the letter (name, labels, digest: all computable from what any DAG author reads), but for one field."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import pytest
from airflow.sdk.exceptions import AirflowFailException
from task_doubles import StateStore

from airflow_jobs_plugin.cluster.kube import JOBS, KubeClient
from airflow_jobs_plugin.jobs import adoption, attempts, kinds, labels
from airflow_jobs_plugin.jobs.manifests import build_manifest
from airflow_jobs_plugin.jobs.naming import attempt_name
from airflow_jobs_plugin.jobs.spec import TaskIdentity, validate
from airflow_jobs_plugin.usecases import actions

from .conftest import RUNS
from .test_operator import context_for, deferral, jobs_of, operator, run_to_event

_runs = RUNS  # shared with the package's other modules (conftest.py says why)
LONG = {"sim.airflow-jobs.io/scenario": '{"main": {"run": 100000}}'}


def _on_cluster(cluster, work):
    async def go():
        client = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
        try:
            return await work(client)
        finally:
            await client.close()

    return asyncio.run(go())


def _plant(cluster, victim: TaskIdentity, *, copy_fingerprint_of=None) -> dict:
    """Another DAG's code (the same worker identity) creates a job under the victim's name and task key:
    suspended and labelled as the admission policy wants, running its own image."""
    evil = validate(image="mallory/evil:1", group="vision", user="mallory", gpus=1)
    body = build_manifest(
        evil, name=victim.job_name(1), task=victim, attempt=1, queued_at=datetime.now(timezone.utc)
    )
    if copy_fingerprint_of is not None:
        body["metadata"]["annotations"][labels.SPEC_FINGERPRINT] = adoption.spec_fingerprint(
            copy_fingerprint_of, victim
        )
    return _on_cluster(cluster, lambda client: client.create(JOBS, "default", body))


@pytest.mark.parametrize("forged", [False, True], ids=["unstamped", "with-the-victims-fingerprint"])
def test_a_job_another_dag_planted_under_the_tasks_name_is_refused_named_and_left_alone(cluster, forged):
    op = operator(job_annotations=LONG)
    run_id = f"run-{next(_runs)}"
    victim = TaskIdentity("nightly", op.task_id, run_id, -1, 1)
    planted = _plant(cluster, victim, copy_fingerprint_of=op._spec(templated=False) if forged else None)
    name = planted["metadata"]["name"]
    with pytest.raises(
        AirflowFailException, match=rf"Job default/{name} .*not the job this task would submit"
    ):
        op.execute(context_for(op, run_id, 1, StateStore()))
    (still,) = jobs_of(cluster, op, run_id)
    assert still["metadata"]["uid"] == planted["metadata"]["uid"]
    assert still["spec"]["template"]["spec"]["containers"][0]["image"] == "mallory/evil:1"


def test_a_retry_reattaches_to_the_job_its_own_earlier_try_submitted(cluster):
    op = operator(job_annotations=LONG, retries=2)
    run_id = f"run-{next(_runs)}"
    store = StateStore()
    first = deferral(op, context_for(op, run_id, 1, store, max_tries=2))
    (job,) = jobs_of(cluster, op, run_id)
    assert job["metadata"]["annotations"][labels.SPEC_FINGERPRINT]
    second = deferral(op, context_for(op, run_id, 2, store, max_tries=2))
    assert second.trigger.job_name == first.trigger.job_name
    assert len(jobs_of(cluster, op, run_id)) == 1
    _on_cluster(cluster, lambda client: actions.cancel(client, "default", job, by="test"))


def test_a_retry_of_a_task_whose_arguments_changed_does_not_adopt_the_earlier_job(cluster):
    op = operator(job_annotations=LONG, retries=2)
    run_id = f"run-{next(_runs)}"
    store = StateStore()
    deferral(op, context_for(op, run_id, 1, store, max_tries=2))
    changed = operator(job_annotations=LONG, retries=2, image="registry.example/trainer:2")
    with pytest.raises(AirflowFailException, match="image.*registry.example/trainer:1|trainer:1"):
        changed.execute(context_for(changed, run_id, 2, store, max_tries=2))
    (job,) = jobs_of(cluster, op, run_id)
    _on_cluster(cluster, lambda client: actions.cancel(client, "default", job, by="test"))


def test_a_cancel_stays_a_cancel_when_the_worker_died_before_recording_it(cluster):
    op = operator(job_annotations=LONG, retries=2)
    run_id = f"run-{next(_runs)}"
    store = StateStore()
    deferred = deferral(op, context_for(op, run_id, 1, store, max_tries=2))
    (job,) = jobs_of(cluster, op, run_id)
    _on_cluster(cluster, lambda client: actions.cancel(client, "default", job, by="alice"))
    event = run_to_event(deferred)
    assert event["state"] == "CANCELLED"
    # The worker resuming try 1 dies here: execute_complete never records the cancel, and Airflow
    # retries the task.
    with pytest.raises(AirflowFailException, match=r"try 1 of this task was cancelled .*by alice"):
        op.execute(context_for(op, run_id, 2, store, max_tries=2))
    assert len(jobs_of(cluster, op, run_id)) == 1
    assert store.get(labels.TASK_STATE_FATAL)["cancelled"] is True


def test_a_task_cleared_after_a_cancel_runs_its_job_again(cluster):
    op = operator(job_annotations=LONG, retries=2)
    run_id = f"run-{next(_runs)}"
    store = StateStore()
    deferral(op, context_for(op, run_id, 1, store, max_tries=2))
    (job,) = jobs_of(cluster, op, run_id)
    _on_cluster(cluster, lambda client: actions.cancel(client, "default", job, by="alice"))
    # The clear after try 1 set max_tries to 1 + retries: a new run of the task.
    again = deferral(op, context_for(op, run_id, 2, store, max_tries=3))
    assert len(jobs_of(cluster, op, run_id)) == 2
    (new,) = [j for j in jobs_of(cluster, op, run_id) if j["metadata"]["name"] == again.trigger.job_name]
    _on_cluster(cluster, lambda client: actions.cancel(client, "default", new, by="test"))


# --- a planted job that differs from the victim's in one field --------------------------------------

SCENARIO = "sim.airflow-jobs.io/scenario"
TEMPLATE = "spec.template.spec"


def _victim(**kwargs):
    return operator(
        job_annotations=LONG,
        retries=2,
        volumes=[{"name": "data", "emptyDir": {}}],
        volume_mounts=[{"name": "data", "mount_path": "/data"}],
        **kwargs,
    )


def _the_victims_job(op, victim: TaskIdentity) -> dict:
    """What the victim's try would create, computed as any DAG author can: from its arguments."""
    spec = op._spec(templated=False)
    sub = adoption.Submission(spec, victim, None, adoption.spec_fingerprint(spec, victim))
    return sub.body()


def _main(job: dict) -> dict:
    return job["spec"]["template"]["spec"]["containers"][0]


def _pod(job: dict) -> dict:
    return job["spec"]["template"]["spec"]


ONE_FIELD = {
    "env": (
        lambda job: _main(job)["env"].append({"name": "PYTHONPATH", "value": "/mallory"}),
        f"{TEMPLATE}.containers[0].env[PYTHONPATH]",
    ),
    "envFrom": (
        lambda job: _main(job).update(envFrom=[{"secretRef": {"name": "mallory"}}]),
        f"{TEMPLATE}.containers[0].envFrom",
    ),
    "volumes": (
        lambda job: _pod(job)["volumes"].append({"name": "mallory", "emptyDir": {"medium": "Memory"}}),
        f"{TEMPLATE}.volumes[mallory]",
    ),
    "volumeMounts": (
        lambda job: _main(job)["volumeMounts"].append({"name": "data", "mountPath": "/root/.ssh"}),
        f"{TEMPLATE}.containers[0].volumeMounts[/root/.ssh]",
    ),
    "resources": (
        lambda job: _main(job)["resources"]["limits"].update(memory="64Gi"),
        f"{TEMPLATE}.containers[0].resources.limits[memory]",
    ),
    "pod securityContext": (
        lambda job: _pod(job).update(securityContext={"runAsUser": 0}),
        f"{TEMPLATE}.securityContext",
    ),
    "container securityContext": (
        lambda job: _main(job).update(securityContext={"allowPrivilegeEscalation": True}),
        f"{TEMPLATE}.containers[0].securityContext",
    ),
    "nodeSelector": (
        lambda job: _pod(job).update(nodeSelector={"pool": "mallory"}),
        f"{TEMPLATE}.nodeSelector",
    ),
    "tolerations": (
        lambda job: _pod(job).update(tolerations=[{"operator": "Exists"}]),
        f"{TEMPLATE}.tolerations",
    ),
    "affinity": (
        lambda job: _pod(job).update(
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Exists"}]}]
                    }
                }
            }
        ),
        f"{TEMPLATE}.affinity",
    ),
    "hostNetwork": (lambda job: _pod(job).update(hostNetwork=True), f"{TEMPLATE}.hostNetwork"),
    "runtimeClassName": (
        lambda job: _pod(job).update(runtimeClassName="unsandboxed"),
        f"{TEMPLATE}.runtimeClassName",
    ),
    "scenario annotation": (
        lambda job: job["spec"]["template"]["metadata"]["annotations"].update(
            {SCENARIO: '{"main": {"run": 1, "logs": ["planted"]}}'}
        ),
        f"spec.template.metadata.annotations[{SCENARIO}]",
    ),
}


@pytest.mark.real_cluster
@pytest.mark.parametrize("field", ONE_FIELD)
def test_a_planted_job_that_differs_in_one_field_is_refused_naming_it_and_left_alone(cluster, field):
    change, path = ONE_FIELD[field]
    op = _victim()
    run_id = f"run-{next(_runs)}"
    victim = TaskIdentity("nightly", op.task_id, run_id, -1, 1)
    body = _the_victims_job(op, victim)
    change(body)
    planted = _on_cluster(cluster, lambda client: client.create(JOBS, "default", body))
    name = planted["metadata"]["name"]

    with pytest.raises(AirflowFailException) as refused:
        op.execute(context_for(op, run_id, 1, StateStore(), max_tries=3))

    message = str(refused.value)
    assert f"Job default/{name} holds this task's name or task key" in message, message
    assert f"{path}: this task has " in message, message
    (still,) = jobs_of(cluster, op, run_id)
    assert still["metadata"]["uid"] == planted["metadata"]["uid"]
    _on_cluster(cluster, lambda client: client.delete(JOBS, "default", name))


@pytest.mark.real_cluster
def test_the_victims_job_to_the_letter_would_be_adopted(cluster):
    """The planting above changes one field of a job the victim adopts: the refusals are that field's."""
    op = _victim()
    run_id = f"run-{next(_runs)}"
    victim = TaskIdentity("nightly", op.task_id, run_id, -1, 1)
    planted = _on_cluster(
        cluster, lambda client: client.create(JOBS, "default", _the_victims_job(op, victim))
    )
    deferred = deferral(op, context_for(op, run_id, 1, StateStore(), max_tries=3))
    assert deferred.trigger.job_name == planted["metadata"]["name"]
    _on_cluster(cluster, lambda client: client.delete(JOBS, "default", planted["metadata"]["name"]))


# --- an honest earlier try's job of every kind is still adopted -------------------------------------

KINDS = {
    "Job": {},
    "MPIJob": {"framework": "mpi", "workers": 2, "gpus": 1},
    "torchrun": {"framework": "torchrun", "workers": 2, "gpus": 1},
}


def _jobs(cluster, op, run_id: str) -> list[dict]:
    resource = kinds.for_spec(op._spec(templated=False)).resource
    key = TaskIdentity("nightly", op.task_id, run_id).instance_key()
    return _on_cluster(
        cluster,
        lambda client: client.list(resource, "default", label_selector=f"{labels.TASK_KEY}={key}"),
    )["items"]


@pytest.mark.real_cluster
@pytest.mark.parametrize("kind", KINDS)
def test_a_retry_adopts_its_earlier_trys_job_of_every_kind(cluster, kind):
    op = _victim(**KINDS[kind])
    run_id = f"run-{next(_runs)}"
    store = StateStore()
    first = deferral(op, context_for(op, run_id, 1, store, max_tries=3))
    second = deferral(op, context_for(op, run_id, 2, store, max_tries=3))
    assert second.trigger.job_name == first.trigger.job_name
    (job,) = _jobs(cluster, op, run_id)
    assert kinds.kind_of(job).name == kind
    _on_cluster(cluster, lambda client: actions.cancel(client, "default", job, by="test"))


@pytest.mark.real_cluster
@pytest.mark.parametrize("kind", KINDS)
def test_a_retry_adopts_a_later_attempt_the_trigger_cloned_and_refuses_a_tampered_one(cluster, kind):
    op = _victim(**KINDS[kind])
    run_id = f"run-{next(_runs)}"
    store = StateStore()
    first = deferral(op, context_for(op, run_id, 1, store, max_tries=3))
    (stored,) = _jobs(cluster, op, run_id)
    resource = kinds.kind_of(stored).resource
    now = datetime.now(timezone.utc)
    name = attempt_name(first.trigger.job_name, 2)
    clone = attempts.next_attempt(stored, name=name, attempt=2, not_before=now, now=now)

    async def replace_attempt(client, body):
        await client.delete(resource, "default", first.trigger.job_name, propagation_policy="Background")
        return await client.create(resource, "default", body)

    _on_cluster(cluster, lambda client: replace_attempt(client, clone))
    second = deferral(op, context_for(op, run_id, 2, store, max_tries=3))
    assert second.trigger.job_name == name

    tampered = attempts.next_attempt(stored, name=attempt_name(name, 3), attempt=3, not_before=now, now=now)
    template = kinds.kind_of(tampered).pod_sets(tampered)[-1].template
    template["spec"]["containers"][0]["env"].append({"name": "PYTHONPATH", "value": "/mallory"})

    async def plant_third(client):
        await client.delete(resource, "default", name, propagation_policy="Background")
        return await client.create(resource, "default", tampered)

    _on_cluster(cluster, lambda client: plant_third(client))
    with pytest.raises(AirflowFailException, match=r"containers\[0\]\.env\[PYTHONPATH\]: this task has none"):
        op.execute(context_for(op, run_id, 2, store, max_tries=3))
    _on_cluster(cluster, lambda client: client.delete(resource, "default", attempt_name(name, 3)))
