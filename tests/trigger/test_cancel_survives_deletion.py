"""A cancel is never undone, even when it deletes the job and the cancelled try's worker dies before
recording it (jobs/cancel_record.py).

Each scenario runs the real operator on the simulated cluster (with its Kueue): try 1 submits and
defers, a person cancels the job from the GPU Jobs page or the CLI (``inspect.cancel``), and the job
goes: deleted by the cancel (a queued or a stopped MPIJob, a Job waiting in Kueue) or removed by a short
TTL after the cancel ended it (a Job). Try 1's worker dies before its ``execute_complete`` writes the
cancel into the task's state store (it is never called), so Airflow retries: the retry, with the same
state store, must fail at once, create nothing, and say who cancelled and when. A clear runs it again.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred
from airflow_jobs_sim.cluster import SimCluster
from airflow_jobs_sim.config import ClusterConfig, KueueConfig
from controller_fixture import ControllerThread
from sim_fixtures import real_cluster_kubeconfig
from task_doubles import FakeTI, StateStore

from airflow_jobs_plugin.airflow.operators import JobOperator
from airflow_jobs_plugin.cluster import watch as shared
from airflow_jobs_plugin.cluster.kube import JOBS, LEASES, PODS, KubeClient
from airflow_jobs_plugin.jobs import cancel_record, kinds, labels
from airflow_jobs_plugin.jobs.labels import TASK_STATE_FATAL
from airflow_jobs_plugin.jobs.naming import TaskIdentity
from airflow_jobs_plugin.queueing.engines import pool as admission
from airflow_jobs_plugin.readmodel import inspect

from .conftest import RUNS

pytestmark = pytest.mark.skipif(
    real_cluster_kubeconfig() is not None, reason="creates Kueue queues: the simulator's Kueue only"
)
GPU = "nvidia.com/gpu"
TARGET = inspect.Target(namespace="default", quota_configmap=None)
_runs = RUNS  # shared with the package's other modules (conftest.py says why)


@pytest.fixture(scope="module")
def cluster():
    with SimCluster(ClusterConfig(nodes=2, gpus_per_node=8, time_scale=0.01, kueue=KueueConfig())) as sim:
        sim.store.create("resourceflavors", {"metadata": {"name": "default-flavor"}})
        # A LocalQueue whose ClusterQueue has one GPU: a job asking for two waits in it for good.
        sim.store.create(
            "clusterqueues",
            {
                "metadata": {"name": "tight"},
                "spec": {
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": [GPU],
                            "flavors": [
                                {"name": "default-flavor", "resources": [{"name": GPU, "nominalQuota": 1}]}
                            ],
                        }
                    ],
                },
            },
        )
        sim.store.create(
            "localqueues",
            {"metadata": {"name": "tight", "namespace": "default"}, "spec": {"clusterQueue": "tight"}},
        )
        # No admission controller: a job stays queued, as long as nothing admits it, where a scenario
        # needs it queued; the scenarios that need one admitted run one (ControllerThread).
        yield sim


class TaskRun:
    """One run of one task, try after try, with the state store Airflow keeps across its tries."""

    def __init__(self, **kwargs):
        values = {
            "task_id": "train",
            "image": "registry.example/trainer:1",
            "group": "vision",
            "gpus": 1,
            "owner": "alice",
            "retries": 2,
            "job_annotations": {"sim.airflow-jobs.io/scenario": json.dumps({"main": {"run": None}})},
        }
        values.update(kwargs)
        self.op = JobOperator(**values)
        self.run_id = f"run-{next(_runs)}"
        self.store = StateStore()
        self.max_tries = self.op.retries  # Airflow's budget before any clear

    def context(self, try_number: int) -> dict:
        ti = FakeTI("nightly", self.op.task_id, self.run_id, -1, try_number, self.max_tries)
        return {"ti": ti, "task_state_store": self.store}

    def execute(self, try_number: int) -> TaskDeferred:
        with pytest.raises(TaskDeferred) as info:
            self.op.execute(self.context(try_number))
        return info.value

    def clear(self, last_try: int) -> None:
        """What a clear does to the budget: the next try starts a new run of the task."""
        self.max_tries = last_try + (self.op.retries or 0)

    def try_key(self, try_number: int) -> TaskIdentity:
        return TaskIdentity("nightly", self.op.task_id, self.run_id, -1, try_number)


def run(coroutine_function, cluster):
    """Run ``coroutine_function(client)`` on a client of the cluster, then end what it started."""

    async def go():
        client = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
        try:
            return await coroutine_function(client)
        finally:
            await client.close()
            await admission.shutdown()
            await shared.shutdown()

    return asyncio.run(go())


async def until(check, what: str, timeout: float = 30.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if result := await check():
            return result
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what}: never")


async def jobs_of(client: KubeClient, task: TaskRun) -> list[dict]:
    selector = f"{labels.TASK_KEY}={task.try_key(1).instance_key()}"
    found = []
    for kind in kinds.KINDS:
        found += (await client.list(kind.resource, "default", label_selector=selector))["items"]
    return found


async def _collect(trigger) -> list[dict]:
    return [e.payload async for e in trigger.run()]


async def cancel_from_the_page(client: KubeClient, name: str) -> None:
    await inspect.cancel(client, TARGET, name, "bob")


def cancel_then_gone(task: TaskRun, deferred: TaskDeferred, cluster, *, follow_first=None) -> dict:
    """Cancel try 1's job as bob, wait until its object is gone, and return the record left for try 1.
    ``follow_first(client, name)`` runs first, with the task's trigger following the job."""
    name = deferred.trigger.job_name
    resource = kinds.for_name(deferred.trigger.kind).resource

    async def go(client: KubeClient) -> dict:
        if follow_first is not None:
            follower = asyncio.ensure_future(_collect(deferred.trigger))
            await follow_first(client, name)
        await cancel_from_the_page(client, name)
        if follow_first is not None:
            # The trigger reports the cancel; the worker that would resume from it dies first.
            (event,) = await asyncio.wait_for(follower, 60)
            assert event["state"] == "CANCELLED", event

        async def gone():
            return await client.get_or_none(resource, "default", name) is None

        await until(gone, f"{name} gone")
        record = await client.get(LEASES, "default", cancel_record.record_name(task.try_key(1)))
        assert await jobs_of(client, task) == []
        return record

    return run(go, cluster)


def assert_the_retry_submits_nothing(task: TaskRun, cancelled_job: str, cluster) -> None:
    with pytest.raises(AirflowFailException) as raised:
        task.op.execute(task.context(2))
    message = str(raised.value)
    assert message.startswith(f"try 1 of this task was cancelled (job {cancelled_job}, by bob at 20"), message
    assert message.endswith("not running the job again (clear the task to run it again)"), message
    assert run(lambda client: jobs_of(client, task), cluster) == []
    # The retry remembered it: a later try fails from the state store alone.
    assert task.store.get(TASK_STATE_FATAL)["cancelled"] is True


async def until_running(client: KubeClient, name: str) -> None:
    async def running():
        pods = (await client.list(PODS, "default"))["items"]
        return any(
            name in p["metadata"]["name"] and (p.get("status") or {}).get("phase") == "Running" for p in pods
        )

    await until(running, f"{name} running")


def test_a_queued_mpijob_deleted_by_its_cancel_is_not_submitted_again_by_the_retry(cluster):
    task = TaskRun(workers=2)
    deferred = task.execute(1)
    assert deferred.trigger.kind == "MPIJob"
    # No triggerer runs, so nothing admits it: the cancel finds it queued and deletes it.
    record = cancel_then_gone(task, deferred, cluster)
    assert record["spec"]["holderIdentity"] == "bob"
    assert record["metadata"]["annotations"][labels.CANCELLED_JOB] == f"MPIJob/{deferred.trigger.job_name}"
    assert_the_retry_submits_nothing(task, deferred.trigger.job_name, cluster)


def test_a_stopped_mpijob_deleted_by_its_cancel_is_not_submitted_again_by_the_retry(cluster):
    task = TaskRun(workers=2)
    deferred = task.execute(1)

    async def run_then_stop(client: KubeClient, name: str) -> None:
        await until_running(client, name)
        assert (await inspect.stop(client, TARGET, name, by="alice")).done

        async def stopped():
            job = await client.get(kinds.for_name("MPIJob").resource, "default", name)
            return job["spec"]["runPolicy"]["suspend"] is True

        await until(stopped, f"{name} stopped")

    with ControllerThread(cluster.kubeconfig_path, namespaces=("default",)):
        cancel_then_gone(task, deferred, cluster, follow_first=run_then_stop)
    assert_the_retry_submits_nothing(task, deferred.trigger.job_name, cluster)


def test_a_job_waiting_in_kueue_deleted_by_its_cancel_is_not_submitted_again_by_the_retry(cluster):
    task = TaskRun(gpus=2, kueue_queue="tight")
    deferred = task.execute(1)
    assert deferred.trigger.kind == "Job"

    async def labelled_for_kueue(client: KubeClient, name: str) -> None:
        # The admission controller hands it to its LocalQueue, where it waits for good.
        async def handed() -> bool:
            job = await client.get(JOBS, "default", name)
            return job["metadata"]["labels"].get("kueue.x-k8s.io/queue-name") == "tight"

        await until(handed, f"{name} handed to Kueue")
        assert (await client.get(JOBS, "default", name))["spec"]["suspend"] is True

    with ControllerThread(cluster.kubeconfig_path, namespaces=("default",)):
        run(lambda client: labelled_for_kueue(client, deferred.trigger.job_name), cluster)
    cancel_then_gone(task, deferred, cluster)
    assert_the_retry_submits_nothing(task, deferred.trigger.job_name, cluster)


def test_a_job_its_ttl_removes_after_the_cancel_ended_it_is_not_submitted_again_by_the_retry(cluster):
    # The cancel ends a Job through its controller and keeps it, CANCELLED, until its TTL: a minute
    # here (the shortest the operator accepts; a hundredth of it on this simulated clock).
    task = TaskRun(ttl_after_finished=60)
    deferred = task.execute(1)
    assert deferred.trigger.kind == "Job"
    cancel_then_gone(task, deferred, cluster)
    assert_the_retry_submits_nothing(task, deferred.trigger.job_name, cluster)


def test_clearing_a_task_whose_job_the_cancel_deleted_runs_it_again(cluster):
    task = TaskRun(workers=2)
    deferred = task.execute(1)
    cancel_then_gone(task, deferred, cluster)
    task.clear(last_try=1)
    again = task.execute(2)
    assert again.trigger.job_name == task.try_key(2).job_name(1)
    assert [j["metadata"]["name"] for j in run(lambda client: jobs_of(client, task), cluster)] == [
        again.trigger.job_name
    ]


def test_the_retry_of_a_cleared_run_is_stopped_by_a_cancel_in_that_run_only(cluster):
    task = TaskRun(workers=2)
    cancel_then_gone(task, task.execute(1), cluster)  # a cancel in the first run
    task.clear(last_try=1)
    second = task.execute(2)  # the cleared run's first try runs
    second_job = second.trigger.job_name

    async def cancel_second(client: KubeClient) -> None:
        await cancel_from_the_page(client, second_job)

    run(cancel_second, cluster)
    with pytest.raises(
        AirflowFailException, match=f"try 2 of this task was cancelled \\(job {second_job}, by bob"
    ):
        task.op.execute(task.context(3))


def test_a_job_deleted_with_kubectl_runs_again_if_its_try_died_before_recording_the_cancel(cluster):
    """A hand deletion leaves nothing on the cluster: no verdict, no record (only a product cancel
    writes one; the trigger that saw the deletion may not). Its try records the cancel in the task's
    state store (tests/trigger/test_user_actions.py: the retry then submits nothing); if that try's
    worker dies first, the retry cannot tell the deletion from a job never created, and runs it again."""
    task = TaskRun(workers=2)
    deferred = task.execute(1)

    async def delete_by_hand(client: KubeClient) -> None:
        await client.delete(kinds.for_name("MPIJob").resource, "default", deferred.trigger.job_name)

    run(delete_by_hand, cluster)
    again = task.execute(2)
    assert again.trigger.job_name == task.try_key(2).job_name(1)


def test_a_second_cancel_of_a_job_its_cancel_deleted_says_who_cancelled_it_from_the_record(cluster):
    task = TaskRun(workers=2)
    deferred = task.execute(1)
    cancel_then_gone(task, deferred, cluster)

    async def again(client: KubeClient):
        # Past the Events' hour the record is what still says it: the events are gone here.
        for event in (await client.list(inspect.EVENTS, "default"))["items"]:
            if event["involvedObject"].get("name") == deferred.trigger.job_name:
                await client.delete(inspect.EVENTS, "default", event["metadata"]["name"])
        return await inspect.cancel(client, TARGET, deferred.trigger.job_name, "carol")

    outcome = run(again, cluster)
    assert outcome.already_finished and not outcome.deleted
    assert outcome.message.startswith(
        f"mpijob/{deferred.trigger.job_name} was already cancelled by bob at 20"
    )
