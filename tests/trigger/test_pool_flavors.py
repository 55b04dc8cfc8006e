"""GPU flavors as users meet them: a cluster of A100 and H100 nodes, a group with a quota of each; the
real operator submits, the real trigger follows, and each job runs on its flavor's nodes, waits in its
flavor's line, or is refused at submission with the node selector to use."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from airflow.exceptions import AirflowFailException
from airflow.sdk.exceptions import TaskDeferred
from sim_fixtures import cluster_fixture
from task_doubles import FakeTI, StateStore

from airflow_jobs_plugin.airflow.operators import JobOperator
from airflow_jobs_plugin.cluster import watch as shared
from airflow_jobs_plugin.cluster.kube import CONFIGMAPS, JOBS, NODES, PODS, KubeClient
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.queueing.engines import pool as admission
from airflow_jobs_plugin.queueing.pools import POLICY_LABELS
from tests.patience import stretch

PRODUCT = "nvidia.com/gpu.product"
A100, H100 = "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3"
cluster = cluster_fixture(nodes=2, time_scale=0.01, node_labels=(((PRODUCT, A100),), ((PRODUCT, H100),)))


def operator(task_id: str, policy: str, *, gpus: int, run: float, node_selector=None) -> JobOperator:
    return JobOperator(
        task_id=task_id,
        image="registry.example/trainer:1",
        group="vision",
        gpus=gpus,
        owner="alice",
        node_selector=node_selector,
        quota_configmap=policy,
        quota_namespace="default",
        job_annotations={"sim.airflow-jobs.io/scenario": f'{{"main": {{"run": {run}}}}}'},
    )


def execute(op: JobOperator):
    ti = FakeTI("retrain", op.task_id, f"run-{uuid.uuid4().hex[:6]}", -1, 1, 0)
    return op.execute({"ti": ti, "task_state_store": StateStore()})


async def put_policy(client: KubeClient) -> str:
    name = f"policy-{uuid.uuid4().hex[:6]}"
    text = (
        "flavors:\n"
        f"  a100: {{node_labels: {{{PRODUCT}: {A100}}}}}\n"
        f"  h100: {{node_labels: {{{PRODUCT}: {H100}}}}}\n"
        "groups:\n"
        "  vision: {gpus: 0, flavors: {a100: 8, h100: 8}}\n"
    )
    await client.create(
        CONFIGMAPS,
        "default",
        {"metadata": {"name": name, "labels": POLICY_LABELS}, "data": {"policy.yaml": text}},
    )
    return name


def deferred(op: JobOperator) -> TaskDeferred:
    with pytest.raises(TaskDeferred) as info:
        execute(op)
    return info.value


def lines_of(log: str, job: str) -> list[str]:
    return [line.split(f"Job {job}: ", 1)[1] for line in log.splitlines() if f"Job {job}: " in line]


def test_each_job_runs_on_its_flavors_nodes_and_waits_in_its_flavors_line(cluster, capsys):
    slow = stretch()

    async def go():
        client = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
        try:
            policy = await put_policy(client)
            h1, h2, a1 = [
                await asyncio.to_thread(
                    deferred, operator(t, policy, gpus=8, run=r, node_selector={PRODUCT: p})
                )
                # The first H100 job runs long enough, stretched with the load, for the second's trigger
                # to follow it while it waits: at load 20 a fixed 1.5 s ended before it looked.
                for t, r, p in (("h1", 150 * slow, H100), ("h2", 20, H100), ("a1", 150, A100))
            ]
            events = await asyncio.wait_for(
                asyncio.gather(*(_events(d.trigger) for d in (h1, h2, a1))), 120 * slow
            )
            nodes = {
                n["metadata"]["name"]: n["metadata"]["labels"][PRODUCT]
                for n in (await client.list(NODES, ""))["items"]
            }
            placed = {}
            for d in (h1, h2, a1):
                pods = (
                    await client.list(
                        PODS, "default", label_selector=f"batch.kubernetes.io/job-name={d.trigger.job_name}"
                    )
                )["items"]
                placed[d.trigger.job_name] = {nodes[p["spec"]["nodeName"]] for p in pods}
            jobs = {
                d.trigger.job_name: await client.get(JOBS, "default", d.trigger.job_name)
                for d in (h1, h2, a1)
            }
            return [d.trigger.job_name for d in (h1, h2, a1)], events, placed, jobs
        finally:
            await client.close()
            await admission.shutdown()
            await shared.shutdown()

    (h1, h2, a1), events, placed, jobs = asyncio.run(go())
    log = capsys.readouterr().out

    assert [e["status"] for e in events] == ["success"] * 3, events
    assert placed == {h1: {H100}, h2: {H100}, a1: {A100}}
    assert {n: j["metadata"]["annotations"][labels.GPU_FLAVOR] for n, j in jobs.items()} == {
        h1: "h100",
        h2: "h100",
        a1: "a100",
    }
    # The second H100 job waited for the H100 quota while the A100 job started beside the first.
    assert any(
        line.startswith("QUEUED (") and "uses 8 of 8 h100 GPUs" in line and "this job needs 8" in line
        for line in lines_of(log, h2)
    ), lines_of(log, h2)
    assert not any(line.startswith("QUEUED (") for line in lines_of(log, a1)), lines_of(log, a1)


async def _events(trigger) -> list[dict]:
    (event,) = [e.payload async for e in trigger.run()]
    return event


def test_a_job_that_picks_no_flavor_in_a_group_with_only_flavors_is_refused_with_the_selectors_to_use(
    cluster,
):
    async def policy() -> str:
        client = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
        try:
            return await put_policy(client)
        finally:
            await client.close()

    name = asyncio.run(policy())
    with pytest.raises(AirflowFailException) as err:
        execute(operator("anywhere", name, gpus=4, run=1))
    text = str(err.value)
    assert "group vision has quota for nvidia.com/gpu only per GPU flavor" in text
    assert f"a100: node_selector={{'{PRODUCT}': '{A100}'}}" in text
