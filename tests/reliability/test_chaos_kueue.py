"""Chaos with Kueue as the queueing engine: the chaos run's tasks, submitted to Kueue LocalQueues.

The same faults as the chaos test (10% API errors, watch drops, 410 Gone, evictions, a triggerer
SIGKILLed and restarted, workers dying between creating their job and deferring), on a simulated
cluster running Kueue, with one ClusterQueue per group at the group's quota. The invariants change with
the engine: nothing runs without a Workload Kueue admitted, Kueue never has to stop a job the product
released ("Not admitted by cluster queue"), no group's pods exceed its ClusterQueue, no task ever has
two live jobs, and every task ends as its scenario dictates.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter

import pytest
from airflow_jobs_sim import ClusterConfig, SimCluster
from airflow_jobs_sim.config import KueueConfig
from controller_fixture import ControllerThread
from sim_fixtures import connection_fixture, real_cluster_kubeconfig

from airflow_jobs_plugin.jobs import labels

from .chaos_harness import Chaos, Triggerer, Worker, events_by_task, run_in_thread, task_key
from .chaos_invariants import Invariants
from .chaos_plan import POLICY_NAME, QUOTAS, Task, expected, operator_kwargs, plan
from .test_chaos import inject_api_faults, jobs_by_task
from .test_chaos import prepare as prepare_nodes_and_policy

# Slow (chaos: minutes of faults against whole triggerer processes): not in the fast lane.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        real_cluster_kubeconfig() is not None, reason="fault injection and Kueue are the simulator's"
    ),
]

NAMESPACE = "default"
TASKS = 80
NODES = 6
SEED = 20261124
RESTARTS = 2
RUN_TIMEOUT = 240.0  # the test's budget for every task to get its event, not an assertion
GPU = "nvidia.com/gpu"


@pytest.fixture(scope="module")
def cluster():
    with (
        SimCluster(ClusterConfig(nodes=NODES, gpus_per_node=8, time_scale=0.02, kueue=KueueConfig())) as sim,
        ControllerThread(sim.kubeconfig_path),
    ):
        yield sim


connection = connection_fixture(autouse=False)


def prepare(cluster) -> None:
    """The chaos run's nodes, plus one ClusterQueue and LocalQueue per group at the group's quota. No quota
    policy: the admission controller routes every job of a namespace by its policies, and here Kueue alone
    queues (with a pool in front, the pool would hold the per-user limits and reserve for jobs still
    waiting in Kueue: tests/trigger/test_kueue.py covers that layout)."""
    prepare_nodes_and_policy(cluster)

    def on_loop() -> None:
        cluster.store.delete("configmaps", POLICY_NAME, namespace=NAMESPACE)
        cluster.store.create("resourceflavors", {"metadata": {"name": "default-flavor"}})
        for group, (gpus, _) in QUOTAS.items():
            flavors = [{"name": "default-flavor", "resources": [{"name": GPU, "nominalQuota": gpus}]}]
            spec = {
                "namespaceSelector": {},
                "resourceGroups": [{"coveredResources": [GPU], "flavors": flavors}],
            }
            cluster.store.create("clusterqueues", {"metadata": {"name": group}, "spec": spec})
            cluster.store.create(
                "localqueues", {"metadata": {"name": group}, "spec": {"clusterQueue": group}}, NAMESPACE
            )

    cluster.call(on_loop)


def kueue_kwargs(task: Task) -> dict:
    """The chaos run's operator arguments, submitted to the group's LocalQueue instead of the pool."""
    kwargs = operator_kwargs(task)
    kwargs.pop("quota_configmap")
    return {**kwargs, "kueue_queue": task.group}


def test_jobs_admitted_by_kueue_survive_the_chaos_and_the_product_never_fights_kueue(
    cluster, connection, tmp_path
):
    started = time.monotonic()
    rng = random.Random(SEED)
    tasks = plan(rng, TASKS)
    prepare(cluster)
    deferrals, events, log = (
        tmp_path / "deferrals.jsonl",
        tmp_path / "events.jsonl",
        tmp_path / "triggerer.log",
    )
    invariants = Invariants(NAMESPACE, QUOTAS, kueue=True)
    stop_sampling = threading.Event()

    def sample_forever() -> None:
        while not stop_sampling.is_set():
            cluster.call(invariants.sample, cluster.store)
            time.sleep(0.1)

    worker = Worker(deferrals, kwargs_of=kueue_kwargs)
    triggerer = Triggerer(deferrals, events, log, os.environ["AIRFLOW_CONN_KUBERNETES_DEFAULT"])
    chaos = Chaos(cluster, NAMESPACE, tasks)
    sampler = run_in_thread(sample_forever)
    served = inject_api_faults(cluster)
    triggerer.start()
    submitters = worker.submit_all(tasks, 4)
    kill_due: float | None = None
    evictions = 0
    try:
        while time.monotonic() - started < RUN_TIMEOUT:
            now = time.monotonic() - started
            done = events_by_task(events)
            if len(done) + len(worker.gave_up) == len(tasks):
                break
            if kill_due is None and triggerer.kills < RESTARTS and triggerer.ready.is_set():
                kill_due = now + rng.uniform(1, 6)
            if kill_due is not None and now >= kill_due and len(worker.submissions) > len(done):
                triggerer.restart()
                kill_due = None
            evictions += chaos.evict_running()
            time.sleep(0.2)
        for submitter in submitters:
            submitter.join(timeout=5)
    finally:
        stop_sampling.set()
        sampler.join(timeout=10)
        triggerer.stop()
        cluster.faults.clear()
        cluster.faults.drop_watches_every(None)
    outcomes = events_by_task(events)
    jobs = jobs_by_task(cluster)
    print(
        f"\nkueue chaos: {len(tasks)} tasks, {sum(len(v) for v in jobs.values())} jobs, "
        f"{triggerer.kills} triggerer kills, {evictions} evictions, "
        f"{sum(v for k, v in served.items() if k != 'watch streams dropped')} API errors, "
        f"{invariants.samples} samples, {time.monotonic() - started:.1f} s"
    )

    assert worker.gave_up == [], worker.gave_up
    assert invariants.violations == [], invariants.violations[:20]
    assert invariants.duplicates() == {}
    assert set(outcomes) == {t.task_id for t in tasks}, sorted({t.task_id for t in tasks} - set(outcomes))[
        :20
    ]
    problems = []
    for task in tasks:
        (record,) = outcomes[task.task_id]
        if "error" in record:
            problems.append(f"{task.task_id}: trigger raised {record['error']}")
            continue
        event = record["event"]
        want = expected(task, evicted=task.task_id in chaos.evicted, stranded=False)
        own = jobs[task_key(task)]
        final = next((j for j in own if j["metadata"]["name"] == event["job_name"]), None)
        got_attempt = int((final or {}).get("metadata", {}).get("labels", {}).get(labels.ATTEMPT, 0))
        got = (event["status"], got_attempt, event["exit_codes"].get("worker-0"))
        if got != (want.status, want.attempt, want.exit_code):
            problems.append(
                f"{task.task_id}: got {got}, want {want}; job {event['job_name']}, replicas {event.get('replicas')}"
            )
    assert problems == [], problems[:20]
    assert triggerer.kills == RESTARTS
    # Every job went through Kueue: each has its Workload.
    workloads = cluster.call(lambda: cluster.store.list("workloads", NAMESPACE))
    job_uids = {j["metadata"]["uid"] for own in jobs.values() for j in own}
    counted = Counter((w["metadata"].get("labels") or {}).get("kueue.x-k8s.io/job-uid") for w in workloads)
    assert job_uids <= set(counted), len(job_uids - set(counted))
