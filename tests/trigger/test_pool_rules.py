"""The pool's opt-in rules as users meet them: two tasks of one group, the real operator (``execute``
defers), the real trigger following each job on the simulated cluster, the admission passes the
triggers run, and what each task log and the job objects (``kubectl get jobs -o yaml``) then show."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from airflow.sdk.exceptions import TaskDeferred
from task_doubles import FakeTI, StateStore

from airflow_jobs_plugin.airflow.operators import JobOperator
from airflow_jobs_plugin.cluster import watch as shared
from airflow_jobs_plugin.cluster.kube import CONFIGMAPS, JOBS, PODS, KubeClient
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.queueing.engines import pool as admission
from airflow_jobs_plugin.queueing.pools import POLICY_LABELS
from tests.patience import stretch

SCENARIO = "sim.airflow-jobs.io/scenario"


def task(
    task_id: str, group: str, policy: str, *, gpus: int, priority: int, run: float, owner: str = "alice"
) -> TaskDeferred:
    op = JobOperator(
        task_id=task_id,
        image="registry.example/trainer:1",
        group=group,
        gpus=gpus,
        priority=priority,
        owner=owner,
        quota_configmap=policy,
        quota_namespace="default",
        job_annotations={SCENARIO: f'{{"main": {{"run": {run}, "logs": ["{task_id} epoch 1"]}}}}'},
    )
    ti = FakeTI("retrain", task_id, f"run-{uuid.uuid4().hex[:6]}", -1, 1, 0)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute({"ti": ti, "task_state_store": StateStore()})
    return deferred.value


async def put_policy(client: KubeClient, text: str) -> str:
    name = f"policy-{uuid.uuid4().hex[:6]}"
    await client.create(
        CONFIGMAPS,
        "default",
        {"metadata": {"name": name, "labels": POLICY_LABELS}, "data": {"policy.yaml": text}},
    )
    return name


async def until_running(client: KubeClient, job: str) -> None:
    for _ in range(1500):
        pods = (await client.list(PODS, "default", label_selector=f"batch.kubernetes.io/job-name={job}"))[
            "items"
        ]
        if any((p.get("status") or {}).get("phase") == "Running" for p in pods):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{job} never ran")


async def events_of(trigger) -> dict:
    (event,) = [e.payload async for e in trigger.run()]
    return event


def lines_of(log: str, job: str) -> list[str]:
    return [line.split(f"Job {job}: ", 1)[1] for line in log.splitlines() if f"Job {job}: " in line]


def test_a_high_priority_job_preempts_a_low_priority_one_which_is_requeued_and_finishes_later(
    cluster, capsys
):
    group = f"pre-{uuid.uuid4().hex[:5]}"

    async def go():
        client = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
        try:
            policy = await put_policy(
                client, f"groups:\n  {group}: {{gpus: 8, preemption: {{within_group: lower_priority}}}}\n"
            )
            # execute() runs its own event loop, as on a worker: call it off this one.
            sweep = await asyncio.to_thread(task, "sweep", group, policy, gpus=8, priority=0, run=200)
            sweep_event = asyncio.ensure_future(events_of(sweep.trigger))
            await until_running(client, sweep.trigger.job_name)
            queued_at = (await client.get(JOBS, "default", sweep.trigger.job_name))["metadata"][
                "annotations"
            ][labels.QUEUED_AT]
            # The urgent job runs long enough (stretched with the machine's load) for the sweep's task
            # to see it wait, preempted: the admission controller acts between the trigger's looks.
            urgent_run = 100 * stretch()
            urgent = await asyncio.to_thread(
                task, "urgent", group, policy, gpus=8, priority=100, run=urgent_run
            )
            urgent_event = await asyncio.wait_for(events_of(urgent.trigger), 120)
            # The sweep is back in the queue; it runs again once the urgent job is done.
            swept = await asyncio.wait_for(sweep_event, 120)
            jobs = {
                name: await client.get(JOBS, "default", name)
                for name in (sweep.trigger.job_name, urgent.trigger.job_name)
            }
            return sweep.trigger.job_name, urgent.trigger.job_name, urgent_event, swept, jobs, queued_at
        finally:
            await client.close()
            await admission.shutdown()
            await shared.shutdown()

    sweep, urgent, urgent_event, sweep_event, jobs, queued_at = asyncio.run(go())
    log = capsys.readouterr().out

    assert urgent_event["status"] == "success", urgent_event
    assert sweep_event["status"] == "success", sweep_event  # preempted, not failed
    sweep_lines = lines_of(log, sweep)
    # The victim's task log says it was preempted and by whom (while its pods stop, and while it waits).
    assert any(
        line.startswith(("TERMINATING (Preempted):", "QUEUED (Preempted):", "PREEMPTED:"))
        and f"preempted by default/{urgent}, priority 100 in group {group}" in line
        for line in sweep_lines
    ), sweep_lines
    states = [line.split()[0].rstrip(":") for line in sweep_lines]
    first_preempted = next((i for i, line in enumerate(sweep_lines) if "(Preempted)" in line), None)
    assert first_preempted is not None, "\n".join(sweep_lines)
    assert "RUNNING" in states[:first_preempted] and "RUNNING" in states[first_preempted:], states
    assert "QUEUED" in states[first_preempted:], states
    # What kubectl shows on the job: one preemption, requeued at its original position, not a stuck start.
    annotations = jobs[sweep]["metadata"]["annotations"]
    assert annotations[labels.PREEMPTIONS] == "1"
    assert annotations[labels.REQUEUE_COUNT] == "1"
    assert annotations[labels.QUEUED_AT] == queued_at
    assert labels.VERDICT not in annotations
    # The urgent job started only once the sweep's pods were gone: never 16 GPUs of an 8-GPU group.
    urgent_admitted = jobs[urgent]["metadata"]["annotations"][labels.ADMITTED_AT]
    sweep_readmitted = annotations[labels.ADMITTED_AT]
    assert urgent_admitted < sweep_readmitted


def test_fair_share_lets_a_second_user_start_beside_one_who_queued_the_whole_group_first(cluster, capsys):
    group = f"fair-{uuid.uuid4().hex[:5]}"

    async def go():
        client = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
        try:
            policy = await put_policy(client, f"groups:\n  {group}: {{gpus: 8, ordering: fair_share}}\n")
            # carl's job holds the whole group while ann queues four 2-GPU jobs, then bob one: all five
            # wait for the pass that follows carl's end (the admission controller admits a job as soon
            # as it fits, so without carl ann's four would fill the group before bob's came).
            carl = await asyncio.to_thread(
                task, "carl", group, policy, gpus=8, priority=0, run=100 * stretch(), owner="carl"
            )
            await until_running(client, carl.trigger.job_name)
            tasks = [
                await asyncio.to_thread(
                    task, f"ann{i}", group, policy, gpus=2, priority=0, run=100, owner="ann"
                )
                for i in range(4)
            ]
            tasks.append(
                await asyncio.to_thread(task, "bob0", group, policy, gpus=2, priority=0, run=100, owner="bob")
            )
            events = await asyncio.wait_for(asyncio.gather(*(events_of(t.trigger) for t in tasks)), 120)
            names = [t.trigger.job_name for t in tasks]
            jobs = [await client.get(JOBS, "default", name) for name in names]
            return names, events, jobs
        finally:
            await client.close()
            await admission.shutdown()
            await shared.shutdown()

    names, events, jobs = asyncio.run(go())
    log = capsys.readouterr().out

    assert [e["status"] for e in events] == ["success"] * 5, events
    admitted = {
        name: job["metadata"]["annotations"][labels.ADMITTED_AT]
        for name, job in zip(names, jobs, strict=True)
    }
    ann, bob = names[:4], names[4]
    # bob starts beside ann's first three, though he queued last; ann's fourth waits for the group.
    assert admitted[bob] < admitted[ann[3]]
    assert admitted[bob] <= max(admitted[a] for a in ann[:3])
    assert any(
        line.startswith(f"QUEUED (GroupQuota): group {group} uses 8 of 8 GPUs; this job needs 2")
        for line in lines_of(log, ann[3])
    ), lines_of(log, ann[3])


def test_a_group_takes_back_the_gpus_its_cohort_borrowed_and_the_borrower_runs_later(cluster, capsys):
    owner, borrower, cohort = (f"{p}-{uuid.uuid4().hex[:5]}" for p in ("own", "bor", "coh"))

    async def go():
        client = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
        try:
            policy = await put_policy(
                client,
                f"groups:\n"
                f"  {owner}: {{gpus: 8, cohort: {cohort}, preemption: {{reclaim_within_cohort: any}}}}\n"
                f"  {borrower}: {{gpus: 8, cohort: {cohort}}}\n",
            )
            # The borrowing group fills the cluster: its own 8 GPUs, then the 8 its idle neighbour lends.
            own = await asyncio.to_thread(task, "mine", borrower, policy, gpus=8, priority=0, run=200)
            events = [asyncio.ensure_future(events_of(own.trigger))]
            await until_running(client, own.trigger.job_name)
            lent = await asyncio.to_thread(task, "borrowed", borrower, policy, gpus=8, priority=0, run=200)
            events.append(asyncio.ensure_future(events_of(lent.trigger)))
            await until_running(client, lent.trigger.job_name)
            back = await asyncio.to_thread(
                task, "back", owner, policy, gpus=8, priority=0, run=1, owner="bob"
            )
            events.append(asyncio.ensure_future(events_of(back.trigger)))
            done = await asyncio.wait_for(asyncio.gather(*events), 120)
            names = [t.trigger.job_name for t in (own, lent, back)]
            jobs = {n: await client.get(JOBS, "default", n) for n in names}
            return names, done, jobs
        finally:
            await client.close()
            await admission.shutdown()
            await shared.shutdown()

    (own, lent, back), done, jobs = asyncio.run(go())
    log = capsys.readouterr().out

    assert [e["status"] for e in done] == ["success"] * 3, done
    assert any(
        ("(Preempted): preempted by default/" in line or line.startswith("PREEMPTED: preempted by default/"))
        and f"reclaiming for group {owner}" in line
        for line in lines_of(log, lent)
    ), lines_of(log, lent)
    # The job within its group's own quota was never touched; the borrowed one went back to the queue.
    assert labels.PREEMPTIONS not in jobs[own]["metadata"]["annotations"]
    assert jobs[lent]["metadata"]["annotations"][labels.PREEMPTIONS] == "1"
    # Never before the owner's job: one pass stamps every job it admits with its own time, so the
    # borrower let in again by the pass that admitted the owner's job (the reclaimed GPUs and those the
    # owner's finished job left were enough for both) carries the same time.
    assert (
        jobs[back]["metadata"]["annotations"][labels.ADMITTED_AT]
        <= jobs[lent]["metadata"]["annotations"][labels.ADMITTED_AT]
    )
