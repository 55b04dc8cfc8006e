"""Preemption on fragmented nodes: two nodes of 8 GPUs, four jobs of 4 GPUs of low priority spread over
them (two on each), and a job of one 8-GPU pod of high priority. By quota alone the two newest jobs would
be preempted, one on each node, leaving no node with 8 free GPUs: the preemptor would wait Unschedulable,
be requeued and preempt again. By the nodes, two jobs on one node are preempted, once, and the preemptor
runs there (queueing/quota/preemption.py).

Runs on the simulator (two nodes) and on the real plane (``scripts/cluster up``: kube-scheduler binds the
pods, kwok plays them), where the third GPU node is filled first by a job of another group, which no job
of this group may preempt."""

from __future__ import annotations

import pytest
from sim_fixtures import cluster_fixture

from airflow_jobs_plugin.cluster import watch as shared
from airflow_jobs_plugin.cluster.kube import JOBS, NODES, PODS
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.queueing.engines.pool import Admission

from .conftest import NAMESPACE, annotation, create_jobs, job_body, put_policy, unique, wait_for

pytestmark = [pytest.mark.real_cluster]

cluster = cluster_fixture(nodes=2, controller=False)


async def _running_on(client, job: dict) -> set[str]:
    """The nodes of the job's running pods."""
    pods = (await client.list(PODS, NAMESPACE, label_selector=f"job-name={job['metadata']['name']}"))["items"]
    return {p["spec"]["nodeName"] for p in pods if (p.get("status") or {}).get("phase") == "Running"}


async def test_the_preemptor_runs_after_one_preemption_of_two_jobs_on_one_node(client):
    group, other, name = unique("frag"), unique("fill"), unique("policy")
    await put_policy(
        client,
        name,
        f"groups:\n  {group}: {{gpus: 16, preemption: {{within_group: lower_priority}}}}\n  {other}: {{gpus: 64}}\n",
    )
    eight = sorted(
        n["metadata"]["name"]
        for n in (await client.list(NODES, ""))["items"]
        if ((n.get("status") or {}).get("allocatable") or {}).get(labels.GPU_RESOURCE) == "8"
    )
    used = eight[:2]
    watch = await shared.acquire("kubernetes_default", NAMESPACE)
    admission = Admission.for_watch(watch, quota_configmap=name, quota_namespace=NAMESPACE)
    admission.start_group(group)
    admission.start_group(other)
    # Every other 8-GPU node is taken by another group's job, which this group may not preempt.
    fillers = await create_jobs(
        client,
        *(
            job_body(
                other, "cy", 8, run=10_000, task=f"fill{i}", node_selector={"kubernetes.io/hostname": node}
            )
            for i, node in enumerate(eight[2:])
        ),
    )
    small = await create_jobs(
        client,
        *(
            job_body(
                group,
                "ann",
                4,
                run=10_000,
                task=f"small{i}",
                node_selector={"kubernetes.io/hostname": used[i % 2]},
            )
            for i in range(4)
        ),
    )

    async def all_small_running() -> bool:
        return all([await _running_on(client, job) for job in (*small, *fillers)])

    await wait_for(all_small_running, timeout=60)
    (urgent,) = await create_jobs(client, job_body(group, "bob", 8, run=10_000, task="urgent", priority=100))

    async def urgent_running() -> set[str]:
        return await _running_on(client, urgent)

    (node,) = await wait_for(urgent_running, timeout=60)

    current = [await client.get(JOBS, NAMESPACE, job["metadata"]["name"]) for job in small]
    preempted = [job for job in current if annotation(job, labels.PREEMPTIONS)]
    assert len(preempted) == 2
    assert all(annotation(job, labels.PREEMPTIONS) == "1" for job in preempted)
    # Both victims were the two jobs on the node the preemptor now runs on.
    assert {
        job["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/hostname"] for job in preempted
    } == {node}
    assert all(annotation(job, labels.PREEMPTIONS) is None for job in current if job not in preempted)
