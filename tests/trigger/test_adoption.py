"""A task adopts only its own job, and a cancel stays a cancel: what a new try finds on the cluster under
its task's name and key decides whether it follows it, fails naming it, or ends as cancelled."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import pytest
from airflow.sdk.exceptions import AirflowFailException
from task_doubles import StateStore

from airflow_jobs_plugin.cluster.kube import JOBS, KubeClient
from airflow_jobs_plugin.jobs import actions, adoption, labels
from airflow_jobs_plugin.jobs.manifests import build_manifest
from airflow_jobs_plugin.jobs.spec import TaskIdentity, validate

from .test_operator import context_for, deferral, jobs_of, operator, run_to_event

_runs = iter(range(1, 10_000))
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
