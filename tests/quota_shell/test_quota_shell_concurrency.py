"""Several processes admit jobs of the same groups at once against one cluster.

Three OS processes each run this product's admission workers for two groups, driven by their own
watches, while a few hundred jobs of random sizes and durations go through. The simulator's own pod
table is sampled throughout: the GPUs held by the pods of a group, and of a user within it, never
exceed the quota. In the end every job was admitted and ran, and no reservation is left.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import random
import signal
from collections import defaultdict

import pytest
from airflow_jobs_sim.errors import ApiError

from airflow_jobs_plugin.cluster.kube import JOBS, KubeClient
from airflow_jobs_plugin.cluster.watch import SharedWatch
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.queueing.engines.pool import Admission
from airflow_jobs_plugin.queueing.quota import ledger as ledger_io
from airflow_jobs_plugin.queueing.quota.ledger_model import decode, ledger_name

from .conftest import NAMESPACE, annotation, create_jobs, job_body, ledger_of, put_policy, unique, wait_for

# Slow (scenario: several admitting processes over a simulated cluster): not in the fast lane.
pytestmark = pytest.mark.slow

PROCESSES = 3
JOBS_PER_GROUP = 100
USERS = ("ann", "ben", "cid")


def _admission_process(kubeconfig: str, policy: str, groups: list[str], stop) -> None:
    async def serve() -> None:
        client = await KubeClient.from_kubeconfig(kubeconfig)
        watch = SharedWatch(client, NAMESPACE)
        watch.start()
        await watch.wait_synced(timeout=60)
        admission = Admission.for_watch(watch, quota_configmap=policy, quota_namespace=NAMESPACE)
        for group in groups:
            admission.start_group(group)
        await asyncio.to_thread(stop.wait)
        await admission.close()
        await watch.stop()
        await client.close()

    asyncio.run(serve())


def pod_gpus(pod: dict) -> int:
    return sum(
        int(((c.get("resources") or {}).get("limits") or {}).get(labels.GPU_RESOURCE, 0))
        for c in pod["spec"]["containers"]
    )


class Sampler:
    """Reads the simulator's pods and the groups' ledgers, and records every moment a quota was exceeded.

    ``peak`` is the most GPUs a group's pods held at once; ``reserved_peak`` the most the pool had
    reserved for the group at once. Pods run for a fraction of a second here, and on a loaded machine
    admission passes take longer than that, so pods of a group may never overlap much: the reservations
    (held from admission until the pool sees the job end) show that the pool filled the group."""

    def __init__(self, cluster, limits: dict[str, tuple[int, dict[str, int]]]):
        self.cluster = cluster
        self.limits = limits
        self.violations: list[str] = []
        self.peak: dict[str, int] = defaultdict(int)
        self.reserved_peak: dict[str, int] = defaultdict(int)
        self.samples = 0

    def _sample_ledgers(self) -> None:
        for group, (limit, _) in self.limits.items():
            try:
                configmap = self.cluster.store.get("configmaps", ledger_name(group), namespace=NAMESPACE)
            except ApiError as exc:
                if exc.code != 404:  # not written yet, or the group keeps its reservations in a cohort's
                    raise
                continue
            reserved = sum(r.gpus for r in decode(group, configmap.get("data")).reservations)
            self.reserved_peak[group] = max(self.reserved_peak[group], reserved)
            if reserved > limit:
                self.violations.append(f"group {group} ledger reserves {reserved} GPUs > {limit}")

    def sample(self) -> None:
        self._sample_ledgers()
        pods, _ = self.cluster.store.list_with_rv("pods", NAMESPACE, copy=False)
        by_group: dict[str, int] = defaultdict(int)
        by_user: dict[tuple[str, str], int] = defaultdict(int)
        for pod in pods:
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            notes = pod["metadata"].get("annotations") or {}
            group, user = notes.get(labels.GROUP_NAME), notes.get(labels.USER_NAME)
            if group not in self.limits:
                continue
            by_group[group] += pod_gpus(pod)
            by_user[(group, user)] += pod_gpus(pod)
        self.samples += 1
        for group, used in by_group.items():
            self.peak[group] = max(self.peak[group], used)
            if used > self.limits[group][0]:
                self.violations.append(f"group {group} pods hold {used} GPUs > {self.limits[group][0]}")
        for (group, user), used in by_user.items():
            limit = self.limits[group][1].get(user, self.limits[group][0])
            if used > limit:
                self.violations.append(f"user {user} pods hold {used} GPUs in {group} > {limit}")

    async def run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(0.02)


async def test_processes_admitting_concurrently_never_exceed_a_quota_and_admit_every_job(client, cluster):
    big, small, policy = unique("big"), unique("small"), unique("policy")
    await put_policy(
        client,
        policy,
        f"groups:\n  {big}: {{gpus: 16, user_gpus: 8}}\n  {small}: {{gpus: 12, user_gpus: 8, users: {{cid: 4}}}}\n",
    )
    limits = {big: (16, {u: 8 for u in USERS}), small: (12, {"ann": 8, "ben": 8, "cid": 4})}
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    processes = [
        context.Process(target=_admission_process, args=(cluster.kubeconfig_path, policy, [big, small], stop))
        for _ in range(PROCESSES)
    ]
    for process in processes:
        process.start()
    sampler = Sampler(cluster, limits)
    sampling = asyncio.create_task(sampler.run())
    try:
        rng = random.Random(20261122)
        bodies = []
        for group in (big, small):
            for i in range(JOBS_PER_GROUP):
                user = rng.choice(USERS)
                gpus = rng.choice((0, 1, 1, 2, 2, 4))
                bodies.append(job_body(group, user, gpus, run=rng.uniform(2, 30), task=f"t{i}"))
        rng.shuffle(bodies)
        jobs = await create_jobs(client, *bodies)
        names = [j["metadata"]["name"] for j in jobs]

        async def all_finished():
            current = {j["metadata"]["name"]: j for j in (await client.list(JOBS, NAMESPACE))["items"]}
            return all(ledger_io.is_finished(current[n]) for n in names)

        await wait_for(all_finished, timeout=120, interval=0.5)

        async def ledgers_empty():
            return [(await ledger_of(client, g)).reservations for g in (big, small)] == [(), ()]

        await wait_for(ledgers_empty, timeout=30, interval=0.2)
    finally:
        sampling.cancel()
        stop.set()
        for process in processes:
            process.join(timeout=30)

    assert sampler.violations == []
    # The pool filled each group beyond one user's limit: the test exercised the group limits.
    assert sampler.samples > 100 and sampler.reserved_peak[big] > 8 and sampler.reserved_peak[small] > 6
    finished = {j["metadata"]["name"]: j for j in (await client.list(JOBS, NAMESPACE))["items"]}
    for name in names:
        job = finished[name]
        assert annotation(job, labels.ADMITTED_AT), f"{name} was never admitted"
        assert annotation(job, labels.VERDICT) is None
        assert any(c["type"] == "Complete" for c in job["status"].get("conditions") or ()), name
    assert all(p.exitcode == 0 for p in processes)


async def test_processes_preempting_and_borrowing_concurrently_keep_every_limit_and_leak_nothing(
    client, cluster
):
    """Two groups of one cohort, both preempting by priority, one reclaiming what the other borrows:
    three processes, one of them killed midway and replaced, jobs of two priorities; the pods never hold
    more than a group may (its quota plus what it may borrow), nor the cohort more than its groups'
    quotas together; every job, preempted or not, ends Complete; the cohort's ledger ends empty."""
    first, second, cohort, policy = unique("cha"), unique("chb"), unique("coh"), unique("policy")
    await put_policy(
        client,
        policy,
        f"groups:\n"
        f"  {first}: {{gpus: 8, user_gpus: 8, cohort: {cohort}, "
        f"preemption: {{within_group: lower_priority, reclaim_within_cohort: any}}}}\n"
        f"  {second}: {{gpus: 8, user_gpus: 8, cohort: {cohort}, borrowing_limit: 4, "
        f"preemption: {{within_group: lower_priority}}}}\n",
    )
    limits = {first: (16, {u: 8 for u in USERS}), second: (12, {u: 8 for u in USERS})}
    context = multiprocessing.get_context("spawn")
    # One stop event per process: a process killed while waiting on a shared one would leave it
    # expecting a wake-up that never comes (multiprocessing's Condition counts sleepers).
    stops = [context.Event() for _ in range(PROCESSES)]
    processes = [
        context.Process(
            target=_admission_process, args=(cluster.kubeconfig_path, policy, [first, second], stop)
        )
        for stop in stops
    ]
    for process in processes:
        process.start()
    sampler = Sampler(cluster, limits)
    cohort_peak = 0
    cohort_violations: list[str] = []

    async def sample_cohort() -> None:
        nonlocal cohort_peak
        while True:
            pods, _ = cluster.store.list_with_rv("pods", NAMESPACE, copy=False)
            held = sum(
                pod_gpus(p)
                for p in pods
                if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
                and (p["metadata"].get("annotations") or {}).get(labels.GROUP_NAME) in (first, second)
            )
            cohort_peak = max(cohort_peak, held)
            if held > 16:
                cohort_violations.append(f"cohort pods hold {held} GPUs > 16")
            await asyncio.sleep(0.02)

    sampling = [asyncio.create_task(sampler.run()), asyncio.create_task(sample_cohort())]
    try:
        rng = random.Random(20261126)

        def bodies(
            count: int, prefix: str, priority: int, groups: tuple[str, ...], *, gpus=(2, 2, 4), run=(10, 30)
        ) -> list[dict]:
            return [
                job_body(
                    groups[i % len(groups)],
                    rng.choice(USERS),
                    rng.choice(gpus),
                    run=rng.uniform(*run),
                    task=f"{prefix}{i}",
                    priority=priority,
                )
                for i in range(count)
            ]

        # First the second group fills the cohort with low-priority work, borrowing what the first does
        # not use; then high-priority jobs of both groups arrive: they preempt (within the second group)
        # and reclaim (the first group taking back what it lent). The first six low jobs take the second
        # group to its limit (8 + 4 borrowed) and run 15 s (1,500 simulated): still running when the high
        # ones arrive, so those can only start by preempting, however slow a loaded machine makes a pass.
        jobs = await create_jobs(
            client,
            *bodies(6, "long", 0, (second,), gpus=(2,), run=(1500, 1500)),
            *bodies(24, "low", 0, (second,)),
        )

        async def borrowing() -> bool:
            return sampler.peak[second] > 8

        await wait_for(borrowing, timeout=60, interval=0.1)
        jobs += await create_jobs(client, *bodies(20, "high", 100, (first, second)))
        names = [j["metadata"]["name"] for j in jobs]
        # What the pool did after the high-priority jobs arrived, for the message of a failure below.
        arrived = asyncio.get_running_loop().time()
        timeline: list[str] = []

        async def record() -> None:
            while True:
                current = (await client.list(JOBS, NAMESPACE))["items"]
                own = [j for j in current if j["metadata"]["name"] in names]
                timeline.append(
                    f"+{asyncio.get_running_loop().time() - arrived:.1f}s "
                    f"high admitted {sum(1 for j in own if 'high' in j['metadata']['name'] and annotation(j, labels.ADMITTED_AT))}, "
                    f"preemptions {sum(int(annotation(j, labels.PREEMPTIONS) or 0) for j in own)}, "
                    f"long finished {sum(1 for j in own if 'long' in j['metadata']['name'] and ledger_io.is_finished(j))}"
                )
                await asyncio.sleep(0.5)

        sampling.append(asyncio.create_task(record()))
        # A triggerer dies mid-run (SIGKILL: no cleanup, passes cut anywhere) and another takes its place.
        await asyncio.sleep(3)
        os.kill(processes[0].pid, signal.SIGKILL)
        processes[0].join(timeout=10)
        killed = processes.pop(0)
        stops.pop(0)
        stops.append(context.Event())
        replacement = context.Process(
            target=_admission_process, args=(cluster.kubeconfig_path, policy, [first, second], stops[-1])
        )
        replacement.start()
        processes.append(replacement)

        async def all_finished():
            current = {j["metadata"]["name"]: j for j in (await client.list(JOBS, NAMESPACE))["items"]}
            return all(ledger_io.is_finished(current[n]) for n in names)

        try:
            await wait_for(all_finished, timeout=180, interval=0.5)
        except AssertionError:
            current = {j["metadata"]["name"]: j for j in (await client.list(JOBS, NAMESPACE))["items"]}
            stuck = [
                (n, ledger_io.is_suspended(current[n]), current[n]["metadata"].get("annotations"))
                for n in names
                if not ledger_io.is_finished(current[n])
            ]
            held = (await ledger_of(client, cohort)).reservations
            raise AssertionError(f"unfinished: {stuck}\nledger: {held}") from None

        async def ledger_empty():
            return (await ledger_of(client, cohort)).reservations == ()

        await wait_for(ledger_empty, timeout=30, interval=0.2)
    finally:
        for task in sampling:
            task.cancel()
        for stop in stops:
            stop.set()
        for process in processes:
            process.join(timeout=30)

    assert sampler.violations == [] and cohort_violations == []
    assert sampler.peak[second] > 8, "the second group never borrowed"
    finished = {j["metadata"]["name"]: j for j in (await client.list(JOBS, NAMESPACE))["items"]}
    preempted = 0
    for name in names:
        job = finished[name]
        assert annotation(job, labels.VERDICT) is None, (name, annotation(job, labels.VERDICT_MESSAGE))
        assert any(c["type"] == "Complete" for c in job["status"].get("conditions") or ()), name
        preempted += int(annotation(job, labels.PREEMPTIONS) or 0)
    assert preempted > 0, "no job was ever preempted:\n" + "\n".join(timeline[:40])
    assert killed.exitcode == -signal.SIGKILL
    assert all(p.exitcode == 0 for p in processes)
