"""The PrimeHub examples end to end: JobTriggers, the quota pool and the simulated cluster.

Group quota 4 GPUs, user quota 4 GPUs. Example 1: A (2, bob) runs, B (4, pan) waits for the group
(GroupQuota) and C (2, lin) waits behind it (BehindHead). Example 2: B belongs to bob, who already holds
2 of his 4 GPUs, so B waits for its user (UserQuota) without blocking C, which runs next to A.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

from sim_fixtures import cluster_fixture

from airflow_jobs_plugin.airflow.triggers import JobTrigger
from airflow_jobs_plugin.cluster.kube import JOBS

from .conftest import (
    NAMESPACE,
    admitted_at,
    create_jobs,
    job_body,
    policy_yaml,
    put_policy,
    reservations_once_released,
    unique,
)

WAITING = ("(GroupQuota)", "(UserQuota)", "(BehindHead)", "(Inadmissible)")

# Triggers observe; the admission controller beside the cluster admits.
cluster = cluster_fixture(nodes=4)


async def run_triggers(policy: str, *names: str) -> list[dict]:
    async def one(name: str) -> dict:
        trigger = JobTrigger(
            job_name=name,
            namespace=NAMESPACE,
            quota_configmap=policy,
            quota_namespace=NAMESPACE,
            stream_logs=False,
        )
        events = [e.payload async for e in trigger.run()]
        assert len(events) == 1
        return events[0]

    return await asyncio.wait_for(asyncio.gather(*(one(n) for n in names)), 60)


def queued_lines(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if f"Job {name}: QUEUED" in line]


async def finished_at(client, name: str) -> datetime:
    job = await client.get(JOBS, NAMESPACE, name)
    return datetime.fromisoformat(job["status"]["completionTime"].replace("Z", "+00:00"))


async def test_example_1_a_runs_b_waits_for_the_group_and_c_waits_behind_b(client, capsys):
    group, policy = unique("phusers"), unique("policy")
    await put_policy(client, policy, policy_yaml(group, gpus=4, user_gpus=4))
    a, b, c = await create_jobs(
        client,
        job_body(group, "bob", 2, run=100, task="a"),
        job_body(group, "pan", 4, run=30, task="b"),
        job_body(group, "lin", 2, run=30, task="c"),
    )
    names = [j["metadata"]["name"] for j in (a, b, c)]

    events = await run_triggers(policy, *names)

    assert [e["status"] for e in events] == ["success"] * 3
    text = capsys.readouterr().out
    assert not any(why in line for line in queued_lines(text, names[0]) for why in WAITING), text
    assert any(
        f"QUEUED (GroupQuota): group {group} uses 2 of 4 GPUs; this job needs 4 (position 1)" in line
        for line in queued_lines(text, names[1])
    ), text
    assert any(
        f"QUEUED (BehindHead): waiting behind {names[1]}, which needs 4 GPUs while group {group} uses 2 of 4"
        in line
        and "(position 2)" in line
        for line in queued_lines(text, names[2])
    ), text
    jobs = [await client.get(JOBS, NAMESPACE, n) for n in names]
    assert admitted_at(jobs[1]) >= await finished_at(client, names[0])  # B starts once A is done
    assert admitted_at(jobs[2]) >= await finished_at(client, names[1])  # C keeps its turn behind B
    assert await reservations_once_released(client, group) == ()


async def test_example_2_b_waits_for_its_user_and_c_runs_next_to_a(client, capsys):
    group, policy = unique("phusers"), unique("policy")
    await put_policy(client, policy, policy_yaml(group, gpus=4, user_gpus=4))
    a, b, c = await create_jobs(
        client,
        job_body(group, "bob", 2, run=100, task="a"),
        job_body(group, "bob", 4, run=30, task="b"),
        job_body(group, "lin", 2, run=60, task="c"),
    )
    names = [j["metadata"]["name"] for j in (a, b, c)]

    events = await run_triggers(policy, *names)

    assert [e["status"] for e in events] == ["success"] * 3
    text = capsys.readouterr().out
    assert any(
        f"QUEUED (UserQuota): user bob uses 2 of 4 GPUs in group {group}; this job needs 4 (position 1)"
        in line
        for line in queued_lines(text, names[1])
    ), text
    assert not any(why in line for line in queued_lines(text, names[2]) for why in WAITING), text
    jobs = [await client.get(JOBS, NAMESPACE, n) for n in names]
    assert admitted_at(jobs[2]) < await finished_at(client, names[0])  # C runs next to A
    assert admitted_at(jobs[1]) >= await finished_at(client, names[0])  # B waits for bob's GPUs
    assert admitted_at(jobs[1]) >= await finished_at(client, names[2])  # ... and then for the group's
    assert await reservations_once_released(client, group) == ()
