"""The admission controller reads the events it rules on through a constant number of watches per
namespace, never a LIST per job (controller/runner.py): kube-apiserver keeps no watch cache for events,
so each LIST with an involvedObject field selector is a range read of every event of the namespace in
etcd, and a LIST per stuck pod per look costs the most exactly when many jobs start at once.

Many jobs start together on the simulator, each pulling an image the registry throttles a few times
(ErrImagePull, then ImagePullBackOff with the registry's answer hidden: the controller looks at the
pull events before it may rule, and finds them transient). The API server's request counters say how
many events LISTs the controller sent meanwhile: its event watches' first lists, whatever the number
of jobs; and no job was failed for a throttled pull."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime, timezone

from airflow_jobs_sim import ClusterConfig, SimCluster
from controller_fixture import ControllerThread

from airflow_jobs_plugin.cluster.kube import JOBS, KubeClient
from airflow_jobs_plugin.controller import runner
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.manifests import build_manifest, pool_gate
from airflow_jobs_plugin.jobs.spec import TaskIdentity, validate
from tests.patience import Deadline

JOBS_STARTING = 40
# The controller's event watches in one namespace: the refusals', one per reason, and the pull failures'.
EVENT_WATCHES = len(runner.REFUSAL_REASONS) + 1


def _throttled_job(index: int) -> dict:
    spec = validate(
        image="registry.example/trainer:rate-limited",
        group="vision",
        user="alice",
        gpus=1,
        annotations={"sim.airflow-jobs.io/scenario": json.dumps({"main": {"pull_failures": 3, "run": 1.0}})},
    )
    task = TaskIdentity("herd", f"train-{index}", "run-1", -1, 1)
    return pool_gate(
        build_manifest(
            spec, name=task.job_name(1), task=task, attempt=1, queued_at=datetime.now(timezone.utc)
        )
    )


def test_many_jobs_starting_cost_the_namespace_a_constant_number_of_events_lists():
    with SimCluster(ClusterConfig(nodes=5, gpus_per_node=8, time_scale=0.01)) as sim:
        names: list[str] = []

        async def submit() -> None:
            client = await KubeClient.from_kubeconfig(sim.kubeconfig_path)
            try:
                for index in range(JOBS_STARTING):
                    body = _throttled_job(index)
                    await client.create(JOBS, "default", body)
                    names.append(body["metadata"]["name"])
            finally:
                await client.close()

        asyncio.run(submit())
        before = sim.counters().get(("list", "events"), 0)
        with ControllerThread(sim.kubeconfig_path, namespaces=("default",)):
            deadline = Deadline(120)
            while True:
                jobs = {j["metadata"]["name"]: j for j in sim.store.list("jobs", "default")}
                ended = [n for n in names if _ended(jobs.get(n))]
                if len(ended) == len(names):
                    break
                assert not deadline.passed(), f"{len(ended)} of {len(names)} jobs ended"
                time.sleep(0.1)
        lists = sim.counters().get(("list", "events"), 0) - before
    # Every job went through ImagePullBackOff and was waited out, not ruled on.
    assert all(labels.VERDICT not in (jobs[n]["metadata"].get("annotations") or {}) for n in names)
    assert all(_succeeded(jobs[n]) for n in names), {n: jobs[n].get("status") for n in names}
    # The watches' first lists (a watch that expires lists again: at most once more each here).
    assert EVENT_WATCHES <= lists <= 2 * EVENT_WATCHES, lists


def _conditions(job: dict | None) -> dict[str, str]:
    return {c["type"]: c["status"] for c in ((job or {}).get("status") or {}).get("conditions") or []}


def _ended(job: dict | None) -> bool:
    conditions = _conditions(job)
    return conditions.get("Complete") == "True" or conditions.get("Failed") == "True"


def _succeeded(job: dict) -> bool:
    return _conditions(job).get("Complete") == "True"
