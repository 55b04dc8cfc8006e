"""The product on a cluster that runs Kueue (the simulator's, kubernetes-sigs/kueue v0.19.2 rules): a job
that names a LocalQueue is Kueue's to admit. The trigger never unsuspends, suspends or requeues it; it
logs what Kueue says while the job waits, follows it when Kueue admits it, and shows a preemption as one."""

from __future__ import annotations

import asyncio

import pytest
from airflow_jobs_sim.cluster import SimCluster
from airflow_jobs_sim.config import ClusterConfig, KueueConfig
from airflow_jobs_sim.controllers.kueue import workload_name
from controller_fixture import ControllerThread
from sim_fixtures import real_cluster_kubeconfig

from airflow_jobs_plugin.airflow.triggers import JobTrigger
from airflow_jobs_plugin.cluster.kube import CONFIGMAPS, JOBS
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.manifests import kueue_handoff
from airflow_jobs_plugin.queueing import kueue
from airflow_jobs_plugin.queueing.pools import POLICY_LABELS
from tests.patience import Deadline

from .conftest import job_manifest, task_identity

pytestmark = pytest.mark.skipif(
    real_cluster_kubeconfig() is not None, reason="creates Kueue ClusterQueues: the simulator's Kueue only"
)
GPU = "nvidia.com/gpu"


@pytest.fixture(scope="module")
def cluster():
    with (
        SimCluster(ClusterConfig(nodes=2, gpus_per_node=8, time_scale=0.01, kueue=KueueConfig())) as sim,
        ControllerThread(sim.kubeconfig_path),
    ):
        sim.store.create("resourceflavors", {"metadata": {"name": "default-flavor"}})
        yield sim


def make_queue(cluster, name: str, gpus: int, *, preempt: bool = False) -> None:
    spec: dict = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": [GPU],
                "flavors": [{"name": "default-flavor", "resources": [{"name": GPU, "nominalQuota": gpus}]}],
            }
        ],
    }
    if preempt:
        spec["preemption"] = {"withinClusterQueue": "LowerPriority"}
    cluster.store.create("clusterqueues", {"metadata": {"name": name}, "spec": spec})
    cluster.store.create(
        "localqueues", {"metadata": {"name": name, "namespace": "default"}, "spec": {"clusterQueue": name}}
    )


def job_events(cluster, name: str) -> list[tuple[str, str]]:
    return [
        (e["reason"], e["message"])
        for e in cluster.store.list("events", namespace="default")
        if e["involvedObject"].get("name") == name
    ]


async def until(check, timeout: float = 30.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if result := check():
            return result
        await asyncio.sleep(0.05)
    raise AssertionError("condition not reached")


def states(text: str, name: str) -> list[str]:
    return [line.split(f"Job {name}: ")[1] for line in text.splitlines() if f"Job {name}: " in line]


async def test_a_job_kueue_keeps_suspended_is_never_released_and_runs_when_kueue_admits_it(
    cluster, client, capsys
):
    make_queue(cluster, "small", 2)
    body = job_manifest(task_identity(), gpus=4, kueue_queue="small", scenario={"main": {"run": 2}})
    name = body["metadata"]["name"]
    await client.create(JOBS, "default", body)
    trigger = asyncio.create_task(_collect(JobTrigger(job_name=name, namespace="default")))
    wl_name = workload_name("jobs", cluster.store.get("jobs", name, namespace="default"))
    await until(lambda: "Kueue: couldn't assign flavors" in capsys.readouterr().out or None, timeout=30)
    # Kueue says no: the product has not released the job, so Kueue never had to stop it.
    await asyncio.sleep(1.0)
    assert cluster.store.get("jobs", name, namespace="default")["spec"]["suspend"] is True
    assert ("Stopped", "Not admitted by cluster queue") not in job_events(cluster, name)
    # The platform raises the queue's quota: Kueue admits, starts the job, and the task follows it.
    cq = cluster.store.get("clusterqueues", "small", copy=True)
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = 8
    cluster.store.update("clusterqueues", cq)
    (event,) = await asyncio.wait_for(trigger, 60)
    assert (event["status"], event["state"]) == ("success", "SUCCEEDED")
    assert ("Started", "Admitted by clusterQueue small") in job_events(cluster, name)
    workload = cluster.store.get("workloads", wl_name, namespace="default")
    assert any(c["type"] == "Finished" and c["status"] == "True" for c in workload["status"]["conditions"])


async def test_a_job_waiting_in_kueue_shows_its_position_from_kueues_visibility_api(cluster, client, capsys):
    make_queue(cluster, "lined", 4)
    names = []
    for task, run in (("holder", 1000), ("first", 1000), ("second", 1)):
        body = job_manifest(task_identity(task), gpus=4, kueue_queue="lined", scenario={"main": {"run": run}})
        await client.create(JOBS, "default", body)
        names.append(body["metadata"]["name"])
        if task == "holder":
            await until(
                lambda: cluster.store.get("jobs", names[0], namespace="default")["spec"]["suspend"] is False
            )
    holder, first, second = names
    followers = [asyncio.create_task(_collect(JobTrigger(job_name=n, namespace="default"))) for n in names]
    try:
        seen = ""

        def positions_logged() -> bool:
            nonlocal seen
            seen += capsys.readouterr().out
            return any("position 2" in s for s in states(seen, second)) and any(
                "position 1" in s for s in states(seen, first)
            )

        await until(positions_logged, timeout=30)
        (line,) = {s for s in states(seen, second) if "position 2" in s}
        assert line.startswith("QUEUED: Kueue: couldn't assign flavors"), line
        assert line.split(" [")[0].endswith("4 more needed (2nd in LocalQueue lined) (position 2)"), line
        # The holder goes: the first runs, and the second, whose Workload does not change, moves up.
        await client.delete(JOBS, "default", holder)
        await until(lambda: cluster.store.get("jobs", first, namespace="default")["spec"]["suspend"] is False)

        def moved_up() -> bool:
            nonlocal seen
            seen += capsys.readouterr().out
            return any("(1st in LocalQueue lined) (position 1)" in s for s in states(seen, second))

        await until(moved_up, timeout=30)
    finally:
        for follower in followers:
            follower.cancel()
        await asyncio.gather(*followers, return_exceptions=True)


@pytest.mark.slow
async def test_a_workload_kueue_preempts_waits_again_and_the_task_succeeds_after_readmission(
    cluster, client, capsys
):
    for cls, value in (("batch-low", 10), ("urgent", 1000)):
        cluster.store.create("workloadpriorityclasses", {"metadata": {"name": cls}, "value": value})
    make_queue(cluster, "shared", 8, preempt=True)
    low = job_manifest(task_identity("low"), gpus=8, kueue_queue="shared", scenario={"main": {"run": 1000}})
    low["metadata"]["labels"][kueue.PRIORITY_CLASS_LABEL] = "batch-low"
    await client.create(JOBS, "default", low)
    low_name = low["metadata"]["name"]
    low_trigger = asyncio.create_task(_collect(JobTrigger(job_name=low_name, namespace="default")))
    await until(lambda: cluster.store.get("jobs", low_name, namespace="default")["spec"]["suspend"] is False)
    # The winner runs 3 s, so the preempted job visibly waits in Kueue's queue meanwhile.
    high = job_manifest(task_identity("high"), gpus=8, kueue_queue="shared", scenario={"main": {"run": 300}})
    high["metadata"]["labels"][kueue.PRIORITY_CLASS_LABEL] = "urgent"
    await client.create(JOBS, "default", high)
    (high_event,) = await asyncio.wait_for(
        _collect(JobTrigger(job_name=high["metadata"]["name"], namespace="default")), 60
    )
    assert high_event["state"] == "SUCCEEDED"
    # The preempted job runs again once the quota is back (1,000 simulated seconds = 10 s here: long
    # enough that the high-priority job always arrives while it runs, even on a loaded machine).
    (low_event,) = await asyncio.wait_for(low_trigger, 90)
    assert (low_event["status"], low_event["state"]) == ("success", "SUCCEEDED")
    logged = states(capsys.readouterr().out, low_name)
    preempted = [i for i, line in enumerate(logged) if "Preempted to accommodate a workload" in line]
    assert preempted, logged
    # Both runs are in the task's summary: the preempted one, requeued by Kueue, then the one that ended.
    runs = [(a["attempt"], a["state"], a["reason"]) for a in low_event["attempts"]]
    assert runs == [(1, "REQUEUED", "Requeued"), (1, "SUCCEEDED", "Completed")], low_event["attempts"]
    # When it ended is known; when it started only if a look of the trigger caught it started.
    assert low_event["attempts"][0]["finished_at"]
    assert any(line.startswith("RUNNING") for line in logged[preempted[0] :]), logged


async def test_a_user_over_their_limit_waits_in_front_of_kueue_without_blocking_another_users_job(
    cluster, client, capsys
):
    # Kueue has no per-user limit inside a queue (kubernetes-sigs/kueue issues 752, 2297): the pool
    # keeps it, and hands a job to its LocalQueue only once its user may run it. The group's own
    # quota (2 GPUs here) is Kueue's ClusterQueue's business in front of Kueue, and is not applied.
    make_queue(cluster, "team", 8)
    policy = "kueue-front-policy"
    await client.create(
        CONFIGMAPS,
        "default",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": policy, "labels": POLICY_LABELS},
            "data": {"policy.yaml": "groups:\n  vision: {gpus: 2, user_gpus: 2}\n"},
        },
    )

    def handed(identity: str, user: str, run: float) -> dict:
        body = job_manifest(
            task_identity(identity), gpus=2, user=user, kueue_queue="team", scenario={"main": {"run": run}}
        )
        return kueue_handoff(body)

    first, second, other = (
        handed("alice-1", "alice", 600),
        handed("alice-2", "alice", 50),
        handed("bob", "bob", 50),
    )
    names = [b["metadata"]["name"] for b in (first, second, other)]
    for body in (first, second, other):
        await client.create(JOBS, "default", body)
        await asyncio.sleep(0.05)  # queue order is creation order

    def run(name: str) -> asyncio.Task:
        return asyncio.create_task(
            _collect(
                JobTrigger(job_name=name, namespace="default", quota_configmap=policy, stream_logs=False)
            )
        )

    tasks = [run(n) for n in names]
    # Bob's job, queued after alice's second one, is handed over and Kueue admits it meanwhile.
    (bob_event,) = await asyncio.wait_for(tasks[2], 60)
    assert (bob_event["status"], bob_event["state"]) == ("success", "SUCCEEDED")
    second_job = cluster.store.get("jobs", names[1], namespace="default")
    assert kueue.QUEUE_NAME_LABEL not in second_job["metadata"]["labels"]  # never reached Kueue
    assert second_job["spec"]["suspend"] is True
    # Alice's second trigger says why it waits: its first look may come after bob's short job ended
    # on a loaded machine, so the line is waited for (alice's first job holds her 2 GPUs for 600 s).
    wanted = f"Job {names[1]}: QUEUED (UserQuota): user alice uses 2 of 2 GPUs in group vision"
    text = capsys.readouterr().out
    deadline = Deadline(30)
    while not any(wanted in line for line in text.splitlines()) and not deadline.passed():
        await asyncio.sleep(0.1)
        text += capsys.readouterr().out
    assert any(wanted in line for line in text.splitlines()), f"after {deadline}:\n{text}"
    # Alice's first job ends: her second one is handed over, Kueue admits it, and it runs.
    for (event,) in await asyncio.wait_for(asyncio.gather(*tasks[:2]), 90):
        assert (event["status"], event["state"]) == ("success", "SUCCEEDED"), event
    for name in names:
        job = cluster.store.get("jobs", name, namespace="default")
        assert job["metadata"]["labels"][kueue.QUEUE_NAME_LABEL] == "team"
        assert job["metadata"]["annotations"][labels.KUEUE_HANDOFF] == "team"
        assert ("Started", "Admitted by clusterQueue team") in job_events(cluster, name)
        # Kueue never had to stop a job the pool released: nothing ran without its Workload admitted.
        assert ("Stopped", "Not admitted by cluster queue") not in job_events(cluster, name)


async def _collect(trigger: JobTrigger) -> list[dict]:
    return [e.payload async for e in trigger.run()]
