"""The Role shipped in helm-values/ grants exactly what the product uses: no more, no less.

What the product uses is not written down by hand: every path it has (submit under a quota, follow a job to
its end with its logs, an MPI job, a fail-fast ruling, a job-level retry, a user kill, a sensor, the UI and
CLI reads and cancel) runs against the simulated cluster, whose request counters name each (verb,
resource) it served, in RBAC's own vocabulary."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import yaml
from airflow.sdk.exceptions import TaskDeferred
from task_doubles import task_context

from airflow_jobs_plugin import inspect
from airflow_jobs_plugin import watch as shared
from airflow_jobs_plugin.admission import shutdown as admission_shutdown
from airflow_jobs_plugin.kube import CONFIGMAPS, KubeClient
from airflow_jobs_plugin.operators import JobOperator
from airflow_jobs_plugin.sensors import JobSensor
from airflow_jobs_plugin.sim import ClusterConfig, SimCluster

ROLE = Path(__file__).resolve().parents[2] / "helm-values" / "rbac.yaml"
RESOURCE_GROUPS = {"jobs": "batch", "mpijobs": "kubeflow.org"}  # everything else is the core group ""
SCENARIO = "sim.airflow-jobs.io/scenario"


def granted() -> dict[tuple[str, str], set[str]]:
    roles = [
        d for d in yaml.safe_load_all(ROLE.read_text()) if d and d.get("kind") in ("Role", "ClusterRole")
    ]
    out: dict[tuple[str, str], set[str]] = {}
    for rule in (rule for role in roles for rule in role["rules"]):
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def deferred(op: JobOperator, dag_id: str) -> tuple[TaskDeferred, dict]:
    context = task_context(dag_id)
    with pytest.raises(TaskDeferred) as info:
        op.execute(context)
    return info.value, context


async def collect(trigger, timeout: float = 60) -> dict:
    (event,) = await asyncio.wait_for(_events(trigger), timeout)
    return event


async def _events(trigger) -> list[dict]:
    return [e.payload async for e in trigger.run()]


@pytest.mark.slow
def test_the_role_grants_exactly_the_verbs_the_product_uses(monkeypatch):
    with SimCluster(ClusterConfig(nodes=2, gpus_per_node=8, time_scale=0.01)) as cluster:
        monkeypatch.setenv(
            "AIRFLOW_CONN_KUBERNETES_DEFAULT",
            json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": cluster.kubeconfig_path}}),
        )
        cluster.store.create(
            "configmaps",
            {"metadata": {"name": "policy"}, "data": {"policy.yaml": "groups:\n  vision: {gpus: 8}\n"}},
            "default",
        )
        cluster.reset_counters()
        quick = {SCENARIO: json.dumps({"main": {"run": 2, "logs": ["epoch 1"]}})}

        ok, ok_ctx = deferred(
            JobOperator(
                task_id="train",
                image="t:1",
                group="vision",
                gpus=1,
                quota_configmap="policy",
                job_annotations=quick,
            ),
            "rbac_quota",
        )
        mpi, _ = deferred(
            JobOperator(
                task_id="train", image="t:1", group="vision", gpus=1, workers=2, job_annotations=quick
            ),
            "rbac_mpi",
        )
        stuck, _ = deferred(
            JobOperator(task_id="train", image="t:not-found", group="vision", gpus=1), "rbac_pull"
        )
        retried, _ = deferred(
            JobOperator(
                task_id="train",
                image="t:1",
                group="vision",
                gpus=1,
                backoff_limit=0,
                max_attempts=2,
                retry_backoff=0.05,
                retryable_exit_codes=[3],
                job_annotations={SCENARIO: json.dumps({"main": {"run": 1, "exit": 3}})},
            ),
            "rbac_retry",
        )
        killed, _ = deferred(
            JobOperator(
                task_id="train",
                image="t:1",
                group="vision",
                gpus=1,
                workers=2,
                job_annotations={SCENARIO: json.dumps({"main": {"run": None}})},
            ),
            "rbac_kill",
        )

        live, _ = deferred(
            JobOperator(
                task_id="train",
                image="t:1",
                group="vision",
                gpus=1,
                job_annotations={SCENARIO: json.dumps({"main": {"run": None}})},
            ),
            "rbac_cancel",
        )

        async def everything() -> None:
            try:
                events = await asyncio.gather(
                    collect(ok.trigger),
                    collect(mpi.trigger),
                    collect(stuck.trigger),
                    collect(retried.trigger),
                )
                assert [e["status"] for e in events] == ["success", "success", "failed", "failed"]
                kill_run = asyncio.ensure_future(collect(killed.trigger))
                await asyncio.sleep(1)
                kill_run.cancel()
                await killed.trigger.on_kill()

                sensor = JobSensor(task_id="wait", job_name=ok.trigger.job_name)
                with pytest.raises(TaskDeferred) as waiting:
                    sensor.execute({})
                assert (await collect(waiting.value.trigger))["status"] == "success"
                assert await sensor._poke()

                client = await KubeClient.from_connection()
                try:
                    target = inspect.Target(namespace="default", quota_configmap="policy")
                    state, job = await inspect.read_job(client, target, ok.trigger.job_name)
                    pods = [p for p in state.pods if ok.trigger.job_name in p["metadata"]["name"]]
                    assert await inspect.read_log_tails(client, "default", job, pods)
                    async for _line in inspect.follow_log(
                        client, "default", pods[0]["metadata"]["name"], "main"
                    ):
                        break
                    await inspect.cancel(client, target, live.trigger.job_name, by="admin")
                    await client.get(CONFIGMAPS, "default", "policy")
                finally:
                    await client.close()
            finally:
                await admission_shutdown()
                await shared.shutdown()

        asyncio.run(everything())
        used: dict[tuple[str, str], set[str]] = {}
        for (verb, resource), count in cluster.counters().items():
            if count:
                used.setdefault((RESOURCE_GROUPS.get(resource, ""), resource), set()).add(verb)

    grants = granted()
    extra = {k: sorted(v - used.get(k, set())) for k, v in grants.items() if v - used.get(k, set())}
    missing = {k: sorted(v - grants.get(k, set())) for k, v in used.items() if v - grants.get(k, set())}
    assert not missing, f"the product calls what the Role does not grant: {missing}"
    assert not extra, f"the Role grants what no path of the product uses: {extra}"
