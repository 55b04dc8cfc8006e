"""Stop, resume and cancel on the simulated cluster, through the same functions the page and the CLI call.

Each scenario is what a user meets: a running job, the action, then what the cluster shows (pods, the
quota ledger, the job's spec and annotations, the state every reader computes). No admission pass runs
while a job is stopped here: keeping admission away from stopped jobs is the quota pool's rule, tested
with it; these tests show what the action itself leaves on the cluster.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone

import pytest
from airflow_jobs_sim import ClusterConfig, SimCluster
from controller_fixture import ControllerThread

from airflow_jobs_plugin.cluster.kube import CONFIGMAPS, JOBS, PODS, KubeClient
from airflow_jobs_plugin.cluster.objects import condition_true
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.kinds.mpi import MPIJOBS
from airflow_jobs_plugin.jobs.manifests import build_manifest
from airflow_jobs_plugin.jobs.spec import WAIT_FOR_WORKERS_CONTAINER, TaskIdentity, validate
from airflow_jobs_plugin.queueing import quota
from airflow_jobs_plugin.queueing.pools import POLICY_LABELS
from airflow_jobs_plugin.queueing.quota.ledger import admission_pass, read_ledger, unsuspend_patch
from airflow_jobs_plugin.queueing.quota.ledger_model import UNSUSPEND_GRACE
from airflow_jobs_plugin.readmodel.inspect import (
    JobNotFound,
    Target,
    cancel,
    find_job,
    read_job,
    resume,
    stop,
)
from airflow_jobs_plugin.readmodel.views import job_detail

NAMESPACE = "default"
POLICY = "groups:\n  vision: {gpus: 4, user_gpus: 4}\n"
SCENARIO = "sim.airflow-jobs.io/scenario"
QUOTA = Target(namespace=NAMESPACE)
NO_QUOTA = Target(namespace=NAMESPACE, quota_configmap=None)


@pytest.fixture
def cluster():
    # The tests drive the quota pool's passes themselves (Cluster.admit), to act between two of them: no
    # admission controller beside them but where a test starts one.
    with SimCluster(ClusterConfig(nodes=2, gpus_per_node=8, time_scale=0.02)) as sim:
        yield sim


def manifest(task: str, *, user: str = "alice", gpus: int = 4, workers: int = 1) -> dict:
    identity = TaskIdentity("nightly", task, "manual__1", -1, 1)
    spec = validate(
        image="registry.example/trainer:1",
        group="vision",
        user=user,
        gpus=gpus,
        workers=workers,
        ttl_after_finished=None,
        annotations={SCENARIO: json.dumps({"*": {"run": None}})},
    )
    body = build_manifest(
        spec,
        name=identity.job_name(1),
        task=identity,
        attempt=1,
        queued_at=datetime.now(timezone.utc),
    )
    if body["kind"] == "MPIJob":
        launcher = body["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]
        own = {WAIT_FOR_WORKERS_CONTAINER: {"run": 1}, "*": {"run": None}}
        launcher["metadata"].setdefault("annotations", {})[SCENARIO] = json.dumps(own)
    return body


async def until(check: Callable[[], Awaitable[object]], timeout: float = 30) -> object:
    """Poll ``check`` until it answers something truthy (the bound only catches a hang)."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout}s: {check.__name__}")
        await asyncio.sleep(0.05)


class Cluster:
    """The test's view of the cluster: one client, the quota policy, reading as the page does."""

    def __init__(self, client: KubeClient, target: Target, policy: str = POLICY, unit: str = "vision"):
        self.client = client
        self.target = target
        self.policy = policy
        self.unit = unit  # the ledger the pass decides: the group's, or its cohort's

    async def create(self, body: dict) -> str:
        await self.client.create(MPIJOBS if body["kind"] == "MPIJob" else JOBS, NAMESPACE, body)
        return body["metadata"]["name"]

    async def admit(self) -> None:
        policy = quota.parse_policy(self.policy)

        async def jobs() -> list[dict]:
            found = []
            for resource in (JOBS, MPIJOBS):
                for item in (await self.client.list(resource, NAMESPACE)).get("items") or []:
                    item.setdefault("kind", resource.kind)
                    found.append(item)
            return found

        # The pods as the admitting triggerer's watch groups them, by the job they belong to: a stopped
        # or cancelled job keeps its reservation while they hold GPUs.
        pods = (await self.client.list(PODS, NAMESPACE)).get("items") or []

        def pods_of(job: dict) -> list[dict]:
            prefix = job["metadata"]["name"] + "-"
            return [p for p in pods if p["metadata"]["name"].startswith(prefix)]

        await admission_pass(
            self.client,
            ledger_namespace=NAMESPACE,
            group=self.unit,
            policy=policy,
            jobs=jobs,
            pods_of=pods_of,
            members=policy.members(self.unit),
        )

    async def state(self, name: str) -> str:
        cluster_state, job = await read_job(self.client, self.target, name)
        return job_detail(cluster_state, job).job.state

    async def reason(self, name: str) -> tuple[str, str, int | None]:
        cluster_state, job = await read_job(self.client, self.target, name)
        row = job_detail(cluster_state, job).job
        return row.state, row.reason, row.queue_position

    async def pods(self, name: str) -> list[str]:
        items = (await self.client.list(PODS, NAMESPACE, label_selector=f"{labels.TASK_KEY}")).get(
            "items"
        ) or []
        return [
            p["metadata"]["name"]
            for p in items
            if p["metadata"]["name"].startswith(name) and not p["metadata"].get("deletionTimestamp")
        ]

    async def all_pods(self, name: str) -> list[str]:
        items = (await self.client.list(PODS, NAMESPACE)).get("items") or []
        return [p["metadata"]["name"] for p in items if p["metadata"]["name"].startswith(name)]

    async def reserved(self) -> set[str]:
        members = quota.parse_policy(self.policy).members(self.unit)
        stored = await read_ledger(self.client, NAMESPACE, self.unit, members)
        return {r.job for r in stored.ledger.reservations}

    async def job(self, name: str) -> dict:
        return await find_job(self.client, NAMESPACE, name)


def scenario(
    target: Target,
    body: Callable[[Cluster], Awaitable[None]],
    sim: SimCluster,
    policy: str = POLICY,
    unit: str = "vision",
) -> None:
    async def run() -> None:
        client = await KubeClient.from_kubeconfig(sim.kubeconfig_path)
        try:
            if target.quota_configmap:
                await client.create(
                    CONFIGMAPS,
                    NAMESPACE,
                    {
                        "metadata": {"name": target.quota_configmap, "labels": POLICY_LABELS},
                        "data": {quota.POLICY_KEY: policy},
                    },
                )
            await body(Cluster(client, target, policy, unit))
        finally:
            await client.close()

    asyncio.run(run())


def suspended(job: dict) -> bool:
    spec = job["spec"]
    return bool(spec["runPolicy"]["suspend"] if job["kind"] == "MPIJob" else spec["suspend"])


def test_a_stopped_job_loses_its_pods_and_reservation_and_resumes_at_its_original_queue_position(cluster):
    async def body(c: Cluster) -> None:
        first = await c.create(manifest("first"))
        second = await c.create(manifest("second", user="bob"))
        await c.admit()

        async def first_runs() -> bool:
            return await c.state(first) == "RUNNING"

        await until(first_runs)
        assert await c.reason(second) == ("QUEUED", "GroupQuota", 1)
        assert await c.reserved() == {first}
        assert (await c.job(first))["metadata"]["labels"][labels.ADMITTED] == labels.ADMITTED_VALUE
        assert labels.ADMITTED not in (await c.job(second))["metadata"]["labels"]

        outcome = await stop(c.client, QUOTA, first, by="alice")
        assert outcome.done and outcome.message.startswith(f"job/{first} stopped")
        job = await c.job(first)
        assert suspended(job)
        assert job["metadata"]["annotations"][labels.STOPPED_BY] == "alice"
        assert labels.ADMITTED_AT not in job["metadata"]["annotations"]
        assert labels.ADMITTED not in job["metadata"]["labels"]  # listed again among those that may wait
        assert await c.reserved() == {first}  # the stop writes no ledger: the admitting pass frees the GPUs

        async def stopped() -> bool:
            return await c.state(first) == "STOPPED" and not await c.all_pods(first)

        await until(stopped)  # the Job controller deleted the pod on suspend
        state, reason, _ = await c.reason(first)
        assert (state, reason) == ("STOPPED", "Stopped")
        await c.admit()  # the pod is gone: its GPUs go to the head of the queue
        assert await c.reserved() == {second}

        # Resumed, it is back at its original position: ahead of a job submitted after the stop.
        third = await c.create(manifest("third", user="carol"))
        again = await resume(c.client, QUOTA, first, by="bob")
        assert again.done
        assert again.message == (
            f"job/{first} resumed: back in group vision's queue at its original position, "
            f"queued since {job['metadata']['annotations'][labels.QUEUED_AT]}"
        )
        resumed = await c.job(first)
        assert suspended(resumed)  # the pool admits it, not the resume
        assert labels.STOPPED_AT not in resumed["metadata"]["annotations"]
        assert (
            resumed["metadata"]["annotations"][labels.QUEUED_AT]
            == job["metadata"]["annotations"][labels.QUEUED_AT]
        )
        await c.admit()
        assert await c.reason(first) == ("QUEUED", "GroupQuota", 1)
        assert (await c.reason(third))[:3] == ("QUEUED", "BehindHead", 2)

        # A cancel frees the GPUs the same way: once its pods are gone, the next pass hands them on.
        assert not (await cancel(c.client, QUOTA, second, by="alice")).already_finished

        async def second_gone() -> bool:
            return not await c.all_pods(second)

        await until(second_gone)
        await c.admit()
        await until(first_runs)
        assert await c.reserved() == {first}
        assert (await c.reason(third))[:3] == ("QUEUED", "GroupQuota", 1)

    scenario(QUOTA, body, cluster)


def test_a_job_resumed_before_the_pool_freed_its_gpus_keeps_them_and_starts_again(cluster):
    async def body(c: Cluster) -> None:
        first = await c.create(manifest("keeper"))
        second = await c.create(manifest("waiter", user="bob"))
        await c.admit()

        async def first_runs() -> bool:
            return await c.state(first) == "RUNNING"

        await until(first_runs)
        assert (await stop(c.client, QUOTA, first, by="alice")).done
        again = await resume(c.client, QUOTA, first, by="alice")  # no pass has run since the stop
        # Why it still holds them depends on whether its controller has deleted the pods yet; the
        # message says which (test_job_history.py has the case of pods long gone).
        assert again.message.startswith(f"job/{first} resumed: it still holds its GPUs (")
        assert again.message.endswith(
            (
                "stopped pod(s) still stopping), so it starts again without queueing",
                "no admission pass has freed them since), so it starts again without queueing",
            )
        )
        assert (await c.reason(first))[:2] == ("SCHEDULING", "QuotaReserved")
        # Past the grace a pass leaves to the pass that reserved, to unsuspend its own job.
        await asyncio.sleep(UNSUSPEND_GRACE.total_seconds() + 0.1)
        await c.admit()
        await until(first_runs)
        stored = await read_ledger(c.client, NAMESPACE, "vision")
        assert [r.job for r in stored.ledger.reservations] == [first]  # booked once, not twice
        assert (await c.reason(second))[:2] == ("QUEUED", "GroupQuota")

    scenario(QUOTA, body, cluster)


COHORT_POLICY = "groups:\n  vision: {gpus: 4, user_gpus: 4, cohort: lab}\n  nlp: {gpus: 4, cohort: lab}\n"


def test_a_job_of_a_cohort_resumed_before_the_pool_freed_its_gpus_is_told_it_keeps_them(cluster):
    """A cohort's groups keep their reservations in the cohort's ledger (QuotaPolicy.ledger_of)."""

    async def body(c: Cluster) -> None:
        name = await c.create(manifest("keeper"))
        await c.admit()

        async def runs() -> bool:
            return await c.state(name) == "RUNNING"

        await until(runs)
        assert await c.reserved() == {name}
        assert (await stop(c.client, QUOTA, name, by="alice")).done
        again = await resume(c.client, QUOTA, name, by="alice")
        assert "it still holds its GPUs" in again.message

    scenario(QUOTA, body, cluster, policy=COHORT_POLICY, unit="lab")


def test_without_a_quota_pool_resume_starts_the_job_again(cluster):
    async def body(c: Cluster) -> None:
        name = await c.create(manifest("solo", gpus=1))
        job = await c.job(name)
        # Admitted as the no-quota admission does it.
        await c.client.merge_patch(
            JOBS, NAMESPACE, name, unsuspend_patch(job, datetime.now(timezone.utc), conditional=False)
        )

        async def runs() -> bool:
            return await c.state(name) == "RUNNING"

        await until(runs)
        running_pods = await c.all_pods(name)
        assert (await stop(c.client, NO_QUOTA, name, by="alice")).done

        async def stopped() -> bool:
            return await c.state(name) == "STOPPED"

        await until(stopped)
        assert not await c.all_pods(name)
        outcome = await resume(c.client, NO_QUOTA, name, by="alice")
        assert (
            outcome.message == f"job/{name} resumed: the admission controller starts it again (no quota pool)"
        )
        # The resume only lifts the stop; the admission controller lets the job go again.
        assert suspended(await c.job(name))
        with ControllerThread(cluster.kubeconfig_path):
            await until(runs)
        # It runs again from the start: a fresh pod, not the one the stop deleted.
        assert set(await c.all_pods(name)).isdisjoint(running_pods)

    scenario(NO_QUOTA, body, cluster)


def test_stopping_an_mpi_job_deletes_its_launcher_and_workers(cluster):
    async def body(c: Cluster) -> None:
        name = await c.create(manifest("dist", gpus=1, workers=2))
        await c.admit()

        async def runs() -> bool:
            return await c.state(name) == "RUNNING"

        await until(runs, timeout=60)
        assert len(await c.pods(name)) == 3  # launcher and two workers
        outcome = await stop(c.client, QUOTA, name, by="alice")
        assert outcome.message.startswith(f"mpijob/{name} stopped")
        assert suspended(await c.job(name))

        async def stopped() -> bool:
            return await c.state(name) == "STOPPED" and not await c.all_pods(name)

        await until(stopped, timeout=60)
        assert await c.reserved() == {name}  # until a pass sees the pods gone
        await c.admit()
        assert await c.reserved() == set()

    scenario(QUOTA, body, cluster)


def test_actions_that_do_not_apply_answer_in_one_line_and_change_nothing(cluster):
    async def body(c: Cluster) -> None:
        name = await c.create(manifest("twice", gpus=2))
        await c.admit()

        async def runs() -> bool:
            return await c.state(name) == "RUNNING"

        await until(runs)
        not_stopped = await resume(c.client, QUOTA, name, by="alice")
        assert (not_stopped.done, not_stopped.message) == (
            False,
            f"job/{name} is not stopped (admitted and holds its GPUs): nothing to resume",
        )
        await stop(c.client, QUOTA, name, by="alice")
        before = (await c.job(name))["metadata"]["resourceVersion"]
        second = await stop(c.client, QUOTA, name, by="bob")
        assert not second.done
        assert second.message.startswith(f"job/{name} is already stopped by alice at ")
        assert (await c.job(name))["metadata"]["resourceVersion"] == before

        # A stopped job can be cancelled; a second cancel says who cancelled it.
        first = await cancel(c.client, QUOTA, name, by="carol")
        assert (first.deleted, first.ended) == (False, True)
        assert first.message == (
            f"job/{name} cancelled: its pods are stopped and it stays listed as cancelled until it is deleted"
        )
        again = await cancel(c.client, QUOTA, name, by="dave")
        assert (again.deleted, again.already_finished) == (False, True)
        assert again.message.startswith(f"job/{name} was already cancelled by carol at ")
        with pytest.raises(JobNotFound):
            await cancel(c.client, QUOTA, "never-existed", by="dave")
        with pytest.raises(JobNotFound):
            await stop(c.client, QUOTA, "never-existed", by="dave")

    scenario(QUOTA, body, cluster)


def ttl(body: dict, seconds: int) -> dict:
    spec = body["spec"]
    (spec["runPolicy"] if body["kind"] == "MPIJob" else spec)["ttlSecondsAfterFinished"] = seconds
    return body


async def gone(c: Cluster, name: str) -> bool:
    try:
        await c.job(name)
    except JobNotFound:
        return True
    return False


def test_a_cancelled_running_job_stops_its_pods_and_stays_listed_cancelled_until_its_ttl(cluster):
    async def body(c: Cluster) -> None:
        # 100 simulated seconds: 2 s here.
        name = await c.create(ttl(manifest("kept"), 100))
        await c.admit()

        async def runs() -> bool:
            return await c.state(name) == "RUNNING"

        await until(runs)
        outcome = await cancel(c.client, QUOTA, name, by="carol")
        assert (outcome.deleted, outcome.ended) == (False, True)
        assert outcome.message.endswith("stays listed as cancelled until its TTL removes it in 100s")

        # The Job controller ends it through its deadline and deletes its pod; the job stays, failed
        # as kubectl shows it, CANCELLED with who did it as the product shows it.
        async def ended() -> bool:
            return condition_true(await c.job(name), "Failed") and not await c.pods(name)

        await until(ended)
        state, reason, _ = await c.reason(name)
        assert (state, reason) == ("CANCELLED", "Cancelled")
        job = await c.job(name)
        assert job["metadata"]["annotations"][labels.CANCELLED_BY] == "carol"
        await c.admit()
        assert await c.reserved() == set()
        # Then its TTL removes it, as it removes any finished job.
        await until(lambda: gone(c, name), timeout=30)

    scenario(QUOTA, body, cluster)


def test_a_cancelled_queued_job_ends_without_ever_getting_a_pod(cluster):
    async def body(c: Cluster) -> None:
        name = await c.create(manifest("waiting"))
        outcome = await cancel(c.client, QUOTA, name, by="carol")
        assert outcome.ended
        job = await c.job(name)
        # Resumed with no pod to run, so the deadline's clock starts (quota.ledger.verdict_patch).
        assert (job["spec"]["suspend"], job["spec"]["parallelism"]) == (False, 0)
        await c.admit()
        assert await c.reserved() == set()

        async def failed() -> bool:
            return condition_true(await c.job(name), "Failed")

        await until(failed)
        # The pool's pass neither admits nor reserves a cancelled job.
        await c.admit()
        assert await c.reserved() == set()
        assert await c.all_pods(name) == []
        assert (await c.reason(name))[:2] == ("CANCELLED", "Cancelled")

    scenario(QUOTA, body, cluster)


def test_a_cancelled_running_mpi_job_ends_through_its_launcher_and_stays_listed(cluster):
    async def body(c: Cluster) -> None:
        name = await c.create(manifest("dist-kept", gpus=1, workers=2))
        await c.admit()

        async def runs() -> bool:
            return await c.state(name) == "RUNNING"

        await until(runs, timeout=60)
        outcome = await cancel(c.client, QUOTA, name, by="carol")
        assert (outcome.deleted, outcome.ended) == (False, True)
        launcher = await c.client.get(JOBS, NAMESPACE, name + "-launcher")
        assert launcher["spec"]["activeDeadlineSeconds"] == 1

        # mpi-operator turns the launcher's failure into the MPIJob's; cleanPodPolicy takes the workers.
        async def ended() -> bool:
            return condition_true(await c.job(name), "Failed") and not await c.pods(name)

        await until(ended, timeout=60)
        assert (await c.reason(name))[:2] == ("CANCELLED", "Cancelled")

    scenario(QUOTA, body, cluster)


def test_a_cancelled_queued_mpi_job_is_deleted_since_it_could_never_finish(cluster):
    async def body(c: Cluster) -> None:
        name = await c.create(manifest("dist-waiting", gpus=1, workers=2))
        outcome = await cancel(c.client, QUOTA, name, by="carol")
        assert (outcome.deleted, outcome.ended) == (True, False)
        assert outcome.message == f"mpijob/{name} cancelled (deleted with its pods)"
        await until(lambda: gone(c, name))
        # Its Cancelled event still answers a second cancel while the cluster keeps events.
        again = await cancel(c.client, QUOTA, name, by="dave")
        assert again.message.startswith(f"mpijob/{name} was already cancelled by carol at ")

    scenario(QUOTA, body, cluster)
