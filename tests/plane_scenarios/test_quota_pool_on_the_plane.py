"""The GPU quota pool with several admitting processes on a real control plane: two triggerer
processes each follow half of a group's jobs, so two admission passes share the group's ledger (a
compare-and-swap on one ConfigMap through the real API server and etcd).

Every version of every pod and of the ledger the API server served is watched from before the first
job: at no version do the group's pods hold more GPUs than its quota, nor does the ledger reserve more;
in the end every job has run and no reservation is left.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch
from reliability.chaos_harness import Triggerer, events_by_task
from reliability.chaos_triggerer import append_record
from sim_fixtures import connection_env
from task_doubles import task_context

from airflow_jobs_plugin.airflow.operators import JobOperator
from airflow_jobs_plugin.cluster.kube import CONFIGMAPS, KubeClient
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.queueing import quota
from airflow_jobs_plugin.queueing.pools import POLICY_LABELS
from airflow_jobs_plugin.queueing.quota.ledger import read_ledger
from airflow_jobs_plugin.queueing.quota.ledger_model import decode

from .plane import DEADLINE, create_or_replace, defer, ensure_namespace, on_cluster, scenario

pytestmark = [pytest.mark.real_cluster, pytest.mark.timeout(900)]

NAMESPACE = "plane-pool"
POLICY = "plane-pool-quota-policy"
GROUP = "pool"
QUOTA = 4
JOBS = 8  # of 2 GPUs each, by two users: at most two run at once
RUN_ID = f"manual__{datetime.now(timezone.utc).isoformat()}"


@dataclass
class Recorder:
    """Every version of the namespace's pods and of the group's ledger, in the order the API server
    served them, from a watch started before the first job."""

    kubeconfig: str
    pods: list[tuple[str, dict]] = field(default_factory=list)
    ledgers: list[dict] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    ready: threading.Barrier = field(default_factory=lambda: threading.Barrier(3))

    def start(self) -> list[threading.Thread]:
        threads = [
            threading.Thread(target=self._watch, args=("pods", self.pods), daemon=True),
            threading.Thread(target=self._watch, args=("configmaps", self.ledgers), daemon=True),
        ]
        for thread in threads:
            thread.start()
        self.ready.wait(timeout=60)
        return threads

    def _watch(self, what: str, into: list) -> None:
        core = k8s.CoreV1Api(k8s_config.new_client_from_config(self.kubeconfig))
        lister = core.list_namespaced_pod if what == "pods" else core.list_namespaced_config_map
        version = lister(NAMESPACE).metadata.resource_version
        self.ready.wait(timeout=60)
        while not self.stop.is_set():
            stream = k8s_watch.Watch().stream(
                lister, NAMESPACE, resource_version=version, timeout_seconds=5, _preload_content=False
            )
            for event in stream:
                obj = event["raw_object"]
                version = obj["metadata"]["resourceVersion"]
                if what == "pods":
                    into.append((event["type"], obj))
                elif obj["metadata"]["name"] == quota.ledger_name(GROUP) and event["type"] != "DELETED":
                    into.append(obj)


def pod_gpus(pod: dict) -> int:
    return sum(
        int(((c.get("resources") or {}).get("limits") or {}).get(labels.GPU_RESOURCE, 0))
        for c in pod["spec"]["containers"]
    )


def most_gpus_held_by_pods(history: list[tuple[str, dict]]) -> int:
    """The most GPUs the group's pods held at any version: a pod holds its GPUs from its creation until
    it has ended (Succeeded or Failed) or is gone."""
    held: dict[str, int] = {}
    most = 0
    for kind, pod in history:
        if (pod["metadata"].get("labels") or {}).get(labels.GROUP) != GROUP:
            continue
        name = pod["metadata"]["name"]
        if kind == "DELETED" or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            held.pop(name, None)
        else:
            held[name] = pod_gpus(pod)
        most = max(most, sum(held.values()))
    return most


@pytest.fixture(scope="module", autouse=True)
def quota_pool(cluster):
    async def put(client: KubeClient) -> None:
        await ensure_namespace(client, NAMESPACE)
        await client.delete(CONFIGMAPS, NAMESPACE, quota.ledger_name(GROUP))
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": POLICY, "labels": POLICY_LABELS},
            "data": {quota.POLICY_KEY: f"groups:\n  {GROUP}: {{gpus: {QUOTA}, user_gpus: {QUOTA}}}\n"},
        }
        await create_or_replace(client, body, NAMESPACE)

    on_cluster(cluster.kubeconfig_path, put)


@pytest.mark.slow
def test_two_triggerers_admitting_one_group_never_run_it_over_quota_and_leave_no_reservation(
    cluster, tmp_path
):
    recorder = Recorder(cluster.kubeconfig_path)
    watchers = recorder.start()
    triggerers = []
    for index in range(2):
        triggerer = Triggerer(
            tmp_path / f"deferrals-{index}.jsonl",
            tmp_path / f"events-{index}.jsonl",
            tmp_path / f"triggerer-{index}.log",
            connection_env(cluster),
        )
        triggerer.start()
        triggerers.append(triggerer)
    try:
        for number in range(JOBS):
            task_id = f"train_{number}"
            op = JobOperator(
                task_id=task_id,
                image="registry.example/trainer:1",
                group=GROUP,
                user=("ann", "ben")[number % 2],
                gpus=2,
                namespace=NAMESPACE,
                quota_configmap=POLICY,
                job_annotations=scenario(main={"run": 3, "logs": [f"job {number}"]}),
            )
            classpath, kwargs = defer(op, task_context("plane_pool", task_id, run_id=RUN_ID)).serialize()
            record = {"task": task_id, "classpath": classpath, "kwargs": kwargs}
            append_record(tmp_path / f"deferrals-{number % 2}.jsonl", record)

        deadline = time.monotonic() + DEADLINE
        while (done := sum(len(events_by_task(tmp_path / f"events-{i}.jsonl")) for i in range(2))) < JOBS:
            alive = [t.process.is_alive() for t in triggerers if t.process is not None]
            assert all(alive), "a triggerer process died:\n" + "\n".join(
                (tmp_path / f"triggerer-{i}.log").read_text() for i in range(2)
            )
            assert time.monotonic() < deadline, f"{done} of {JOBS} jobs ended"
            time.sleep(0.5)
    finally:
        for triggerer in triggerers:
            triggerer.stop()

    events = {}
    for index in range(2):
        for task, records in events_by_task(tmp_path / f"events-{index}.jsonl").items():
            (events[task],) = records
    assert all("event" in r for r in events.values()), json.dumps(events, indent=1)[:3000]
    assert {task: r["event"]["state"] for task, r in events.items()} == {
        f"train_{n}": "SUCCEEDED" for n in range(JOBS)
    }

    async def leftover(client: KubeClient) -> tuple:
        return (await read_ledger(client, NAMESPACE, GROUP)).ledger.reservations

    # The last release is written before the trigger's event: nothing is left by then.
    assert on_cluster(cluster.kubeconfig_path, leftover) == ()
    recorder.stop.set()
    for watcher in watchers:
        watcher.join(timeout=30)
    most = most_gpus_held_by_pods(recorder.pods)
    assert most <= QUOTA, f"the group's pods held {most} GPUs at once, over its quota of {QUOTA}"
    # Two jobs did run together: the watch saw the pool at work, not an idle queue.
    assert most == QUOTA, most
    reserved = [sum(r.gpus for r in decode(GROUP, c.get("data")).reservations) for c in recorder.ledgers]
    assert reserved and max(reserved) <= QUOTA, reserved
