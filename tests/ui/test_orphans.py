"""The orphan sweep's rule, table-driven, and one sweep on the simulated cluster."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from datetime import datetime, timedelta, timezone

import pytest
from airflow_jobs_sim import ClusterConfig, SimCluster
from controller_fixture import ControllerThread

from airflow_jobs_plugin.cluster.kube import CONFIGMAPS, EVENTS, JOBS, LEASES, PODS, KubeClient
from airflow_jobs_plugin.cluster.watch import MANAGED_SELECTOR as MANAGED
from airflow_jobs_plugin.jobs import cancel_record, labels
from airflow_jobs_plugin.jobs.cancel_record import CancelRecord
from airflow_jobs_plugin.jobs.manifests import build_manifest
from airflow_jobs_plugin.jobs.orphans import JobRecord, TaskRecord, TaskRef, job_record, judge
from airflow_jobs_plugin.jobs.spec import TaskIdentity, validate
from airflow_jobs_plugin.jobs.timeouts import TIMEOUT_CANCEL_BY
from airflow_jobs_plugin.plugin.sweep import BY, Memory, run_periodically, sweep
from airflow_jobs_plugin.queueing import quota
from airflow_jobs_plugin.queueing.quota.ledger import admission_pass, is_finished, read_ledger
from airflow_jobs_plugin.readmodel import inspect
from airflow_jobs_plugin.readmodel.inspect import Target, find_job

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=timezone.utc)
GRACE = timedelta(minutes=10)
TASK = TaskRef("nightly", "train", "scheduled__2026-03-02", -1)


def job(*, age_min: float = 60, live: bool = True, task: TaskRef | None = TASK) -> JobRecord:
    return JobRecord("train-job", task, 1, NOW - timedelta(minutes=age_min), live)


def ti(state: str | None, ended_min_ago: float | None = None) -> TaskRecord:
    end = NOW - timedelta(minutes=ended_min_ago) if ended_min_ago is not None else None
    return TaskRecord(state, 1, end)


@pytest.mark.parametrize(
    ("record", "task", "dag_known", "cancel", "reason"),
    [
        (job(live=False), ti("failed", 60), True, False, "finished or being deleted"),
        (job(task=None), None, True, False, "not submitted by an Airflow task"),
        (
            job(age_min=3),
            ti("failed", 60),
            True,
            False,
            "younger than 10m00s: its task may not have deferred yet",
        ),
        (job(), None, False, False, "DAG nightly is not in this Airflow: another deployment may own it"),
        (
            job(),
            None,
            True,
            True,
            "task instance nightly.train of run scheduled__2026-03-02 no longer exists",
        ),
        (job(), ti("running"), True, False, "task instance is running"),
        (job(), ti("deferred"), True, False, "task instance is deferred"),
        (job(), ti("up_for_retry", 1), True, False, "task instance is up_for_retry"),
        (job(), ti("queued"), True, False, "task instance is queued"),
        (job(), ti("scheduled"), True, False, "task instance is scheduled"),
        (job(), ti("restarting"), True, False, "task instance is restarting"),
        (job(), ti(None), True, False, "task instance is waiting for a state"),
        (job(), ti("failed", 2), True, False, "task instance ended 2m00s ago (failed)"),
        (
            job(),
            ti("failed", 30),
            True,
            True,
            "task instance nightly.train of run scheduled__2026-03-02 is failed since "
            "2026-03-02T11:30:00+00:00 (try 1): no try follows the job",
        ),
        (job(), ti("success", 30), True, True, None),
        (job(), ti("upstream_failed"), True, True, None),
        (job(), ti("skipped", 45), True, True, None),
    ],
)
def test_an_orphan_is_a_live_job_no_try_of_its_task_will_follow(record, task, dag_known, cancel, reason):
    verdict = judge(record, task, dag_known=dag_known, now=NOW, grace=GRACE)
    assert verdict.cancel is cancel
    if reason is not None:
        assert verdict.reason == reason


@pytest.mark.parametrize(
    ("state", "next_method"),
    [("scheduled", "__fail__"), ("queued", "__fail__"), ("running", "__fail__"), ("up_for_retry", None)],
)
def test_a_job_whose_try_ran_out_of_its_time_is_cancelled_at_once_naming_the_timeout(state, next_method):
    # The triggerer following it died at the deadline: nobody asked for the cancel, and with a retry left
    # the next try runs a job of its own beside this one. The database says enough; no grace applies.
    timed_out = TaskRecord(state, 1, trigger_timeout=NOW - timedelta(seconds=30), next_method=next_method)
    verdict = judge(job(age_min=2), timed_out, dag_known=True, now=NOW, grace=GRACE)
    assert verdict.cancel
    assert verdict.by == TIMEOUT_CANCEL_BY
    assert "ran out of its execution_timeout" in verdict.reason


@pytest.mark.parametrize(
    "task",
    [
        TaskRecord("deferred", 1, trigger_timeout=NOW + timedelta(seconds=30)),  # before the deadline
        TaskRecord(
            "scheduled", 1, trigger_timeout=NOW - timedelta(seconds=30), next_method="execute_complete"
        ),
        TaskRecord("up_for_retry", 2, trigger_timeout=NOW - timedelta(seconds=30)),  # another try's
    ],
)
def test_a_deadline_the_database_does_not_show_passed_for_the_jobs_try_leaves_a_young_job_alone(task):
    verdict = judge(job(age_min=2), task, dag_known=True, now=NOW, grace=GRACE)
    assert not verdict.cancel
    assert verdict.by is None


def test_the_timeout_rule_is_not_applied_to_a_dag_this_airflow_does_not_have():
    timed_out = TaskRecord("up_for_retry", 1, trigger_timeout=NOW - timedelta(seconds=30))
    assert not judge(job(age_min=2), timed_out, dag_known=False, now=NOW, grace=GRACE).cancel


def test_the_record_comes_from_the_operators_exact_annotations():
    body = {
        "kind": "Job",
        "metadata": {
            "name": "j",
            "creationTimestamp": "2026-03-02T11:00:00Z",
            "annotations": {
                labels.DAG_ID: "nightly",
                labels.TASK_ID: "train",
                labels.RUN_ID: "manual__2026-03-02T10:00:00+00:00",
                labels.MAP_INDEX: "3",
                labels.TRY_NUMBER: "2",
            },
        },
    }
    record = job_record(body, finished=False)
    assert record.task == TaskRef("nightly", "train", "manual__2026-03-02T10:00:00+00:00", 3)
    assert (record.try_number, record.created_at, record.live) == (
        2,
        datetime(2026, 3, 2, 11, tzinfo=timezone.utc),
        True,
    )
    assert not job_record(body, finished=True).live
    assert job_record({"metadata": {"name": "x"}}, finished=False).task is None


# --- one sweep on the simulated cluster --------------------------------------------------------------

POLICY = "groups:\n  vision: {gpus: 8, user_gpus: 8}\n"
SCENARIO = "sim.airflow-jobs.io/scenario"


def submitted(identity: TaskIdentity, run: float | None = None) -> dict:
    spec = validate(
        image="registry.example/trainer:1",
        group="vision",
        user="alice",
        gpus=2,
        ttl_after_finished=None,
        annotations={SCENARIO: json.dumps({"*": {"run": run}})},
    )
    return build_manifest(
        spec, name=identity.job_name(1), task=identity, attempt=1, queued_at=datetime.now(timezone.utc)
    )


def test_the_sweep_cancels_a_running_orphan_and_frees_its_quota_and_keeps_the_rest():
    orphan = TaskIdentity("nightly", "orphan", "manual__1", -1, 1)  # its task failed long ago
    followed = TaskIdentity("nightly", "followed", "manual__1", -1, 1)  # its task is deferred
    foreign = TaskIdentity("elsewhere", "train", "manual__1", -1, 1)  # a DAG of another Airflow
    deleted_run = TaskIdentity("nightly", "train", "manual__gone", -1, 1)  # its DAG run was deleted
    tasks = {
        TaskRef("nightly", "orphan", "manual__1"): TaskRecord(
            "failed", 1, datetime.now(timezone.utc) - timedelta(hours=2)
        ),
        TaskRef("nightly", "followed", "manual__1"): TaskRecord("deferred", 1, None),
    }
    asked: list[set[TaskRef]] = []

    def read_tasks(refs: set[TaskRef]) -> tuple[set[str], dict[TaskRef, TaskRecord]]:
        asked.append(refs)
        return {"nightly"}, {r: tasks[r] for r in refs if r in tasks}

    async def scenario(sim: SimCluster) -> None:
        client = await KubeClient.from_kubeconfig(sim.kubeconfig_path)
        target = Target(namespace="default")
        try:
            await client.create(
                CONFIGMAPS,
                "default",
                {"metadata": {"name": quota.DEFAULT_POLICY_CONFIGMAP}, "data": {quota.POLICY_KEY: POLICY}},
            )
            names = {}
            for identity in (orphan, followed, foreign, deleted_run):
                body = submitted(identity)
                await client.create(JOBS, "default", body)
                names[identity.task_id + identity.run_id] = body["metadata"]["name"]

            async def jobs() -> list[dict]:
                items = (await client.list(JOBS, "default")).get("items") or []
                return [{**i, "kind": "Job"} for i in items]

            async def admit() -> None:
                await admission_pass(
                    client,
                    ledger_namespace="default",
                    group="vision",
                    policy=quota.parse_policy(POLICY),
                    jobs=jobs,
                )

            await admit()
            held = {r.job for r in (await read_ledger(client, "default", "vision")).ledger.reservations}
            assert held == set(names.values())  # all four admitted: the orphan holds 2 GPUs nobody uses

            # Right after submission every job is within the grace period: nothing is swept.
            young = await sweep(client, target, read_tasks, grace=timedelta(minutes=10))
            assert {s.name for s in young if s.outcome} == set()

            # An hour later the orphan and the job of a deleted run are cancelled; the rest is kept.
            later = datetime.now(timezone.utc) + timedelta(hours=1)
            swept = {
                s.name: s
                for s in await sweep(client, target, read_tasks, now=later, grace=timedelta(minutes=10))
            }
            cancelled = {n for n, s in swept.items() if s.outcome}
            assert cancelled == {names["orphanmanual__1"], names["trainmanual__gone"]}
            assert swept[names["followedmanual__1"]].verdict.reason == "task instance is deferred"
            assert "another deployment" in swept[names["trainmanual__1"]].verdict.reason
            assert asked[-1] == {
                TaskRef(i.dag_id, i.task_id, i.run_id) for i in (orphan, followed, foreign, deleted_run)
            }

            for name in cancelled:  # ended through their deadline, kept until their TTL
                job = await find_job(client, "default", name)
                assert job["metadata"]["annotations"][labels.CANCELLED_BY] == BY

            async def pods_gone() -> bool:
                pods = (await client.list(PODS, "default")).get("items") or []
                return not [p for p in pods for n in cancelled if p["metadata"]["name"].startswith(n)]

            for _ in range(400):
                if await pods_gone():
                    break
                await asyncio.sleep(0.05)
            await admit()  # the admitting triggerer's next pass drops the reservations of ended jobs
            held = {r.job for r in (await read_ledger(client, "default", "vision")).ledger.reservations}
            assert held == {names["followedmanual__1"], names["trainmanual__1"]}
            events = (
                await client.list(
                    EVENTS, "default", field_selector=f"involvedObject.name={names['orphanmanual__1']}"
                )
            )["items"]
            assert [e["message"] for e in events if e["reason"] == "Cancelled"] == [f"cancelled by {BY}"]

            # The next sweep finds nothing left to cancel.
            again = await sweep(client, target, read_tasks, now=later, grace=timedelta(minutes=10))
            assert [s.outcome for s in again] == [None, None]
        finally:
            await client.close()

    with (
        SimCluster(ClusterConfig(nodes=1, gpus_per_node=8, time_scale=0.02)) as sim,
        ControllerThread(sim.kubeconfig_path),
    ):
        asyncio.run(scenario(sim))


def test_the_sweep_cancels_the_job_of_a_try_that_timed_out_naming_the_timeout_so_retries_still_run():
    timed_out = TaskIdentity("nightly", "bounded", "manual__1", -1, 1)
    deadline = datetime.now(timezone.utc) - timedelta(seconds=20)
    tasks = {TaskRef("nightly", "bounded", "manual__1"): TaskRecord("up_for_retry", 1, None, deadline, None)}

    def read_tasks(refs: set[TaskRef]) -> tuple[set[str], dict[TaskRef, TaskRecord]]:
        return {"nightly"}, {r: tasks[r] for r in refs if r in tasks}

    async def scenario(sim: SimCluster) -> None:
        client = await KubeClient.from_kubeconfig(sim.kubeconfig_path)
        try:
            body = submitted(timed_out)
            await client.create(JOBS, "default", body)
            # Seconds old, far within the grace: the database's word on the timeout is enough.
            swept = await sweep(client, Target(namespace="default"), read_tasks, grace=timedelta(minutes=10))
            assert [s.name for s in swept if s.outcome] == [body["metadata"]["name"]]
            job = await find_job(client, "default", body["metadata"]["name"])
            assert job["metadata"]["annotations"][labels.CANCELLED_BY] == TIMEOUT_CANCEL_BY
        finally:
            await client.close()

    with SimCluster(ClusterConfig(nodes=1, gpus_per_node=8, time_scale=0.02)) as sim:
        asyncio.run(scenario(sim))


# --- what the sweep reads, and where it runs ---------------------------------------------------------


class Reads:
    """Every LIST and GET a client makes, as (what, label selector, limit, metadata only)."""

    def __init__(self, client: KubeClient) -> None:
        self.calls: list[tuple[str, str | None, int | None, bool]] = []
        real_list, real_get = client.list, client.get_or_none

        async def listing(resource, namespace, **kw):
            self.calls.append(
                (resource.plural, kw.get("label_selector"), kw.get("limit"), kw.get("metadata_only", False))
            )
            return await real_list(resource, namespace, **kw)

        async def getting(resource, namespace, name):
            self.calls.append((f"GET {resource.plural}", None, None, False))
            return await real_get(resource, namespace, name)

        client.list = listing  # type: ignore[method-assign]
        client.get_or_none = getting  # type: ignore[method-assign]

    def whole_lists(self) -> list[str | None]:
        """The whole LISTs of jobs (a cancel also lists its job's own pods, by the job's name, to record
        the run it ends; the sweep lists the cancel records, small Leases, to delete the expired ones)."""
        return [
            selector
            for what, selector, _, meta in self.calls
            if not meta and not what.startswith("GET") and what not in ("pods", "leases")
        ]


def test_the_sweep_reads_metadata_in_pages_and_whole_only_the_jobs_it_would_cancel_once():
    finished = TaskIdentity("nightly", "finished", "manual__1", -1, 1)  # succeeded, its task too
    orphan = TaskIdentity("nightly", "orphan", "manual__1", -1, 1)  # running, its task failed
    followed = TaskIdentity("nightly", "followed", "manual__1", -1, 1)  # running, its task deferred
    long_ago = datetime.now(timezone.utc) - timedelta(hours=2)
    tasks = {
        TaskRef("nightly", "finished", "manual__1"): TaskRecord("success", 1, long_ago),
        TaskRef("nightly", "orphan", "manual__1"): TaskRecord("failed", 1, long_ago),
        TaskRef("nightly", "followed", "manual__1"): TaskRecord("deferred", 1, None),
    }

    def read_tasks(refs: set[TaskRef]) -> tuple[set[str], dict[TaskRef, TaskRecord]]:
        return {"nightly"}, {r: tasks[r] for r in refs if r in tasks}

    async def scenario(sim: SimCluster) -> None:
        client = await KubeClient.from_kubeconfig(sim.kubeconfig_path)
        target = Target(namespace="default")
        try:
            await client.create(
                CONFIGMAPS,
                "default",
                {"metadata": {"name": quota.DEFAULT_POLICY_CONFIGMAP}, "data": {quota.POLICY_KEY: POLICY}},
            )
            names = {}
            for identity, run in ((finished, 0.5), (orphan, None), (followed, None)):
                body = submitted(identity, run)
                await client.create(JOBS, "default", body)
                names[identity.task_id] = body["metadata"]["name"]

            async def jobs() -> list[dict]:
                return [{**i, "kind": "Job"} for i in (await client.list(JOBS, "default")).get("items") or []]

            await admission_pass(
                client,
                ledger_namespace="default",
                group="vision",
                policy=quota.parse_policy(POLICY),
                jobs=jobs,
            )
            for _ in range(400):
                if is_finished(await find_job(client, "default", names["finished"])):
                    break
                await asyncio.sleep(0.05)

            reads, memory = Reads(client), Memory()
            later = datetime.now(timezone.utc) + timedelta(hours=1)
            first = {
                s.name: s
                for s in await sweep(client, target, read_tasks, now=later, grace=GRACE, memory=memory)
            }
            assert {n for n, s in first.items() if s.outcome} == {names["orphan"]}
            assert names["finished"] not in first  # read whole once, found finished, remembered
            # No try of an orphan's run follows it: its cancel leaves no record (jobs/cancel_record.py).
            assert (await client.list(LEASES, "default"))["items"] == []
            # Metadata in pages; whole jobs only for the two the rule would cancel, by their task keys.
            sweeps_own = [c for c in reads.calls if (c[1] or "").startswith(MANAGED)]  # not the cancel's
            assert sweeps_own and all(limit == 500 for _, _, limit, _ in sweeps_own)
            assert all(meta for what, selector, _, meta in reads.calls if selector == MANAGED)
            whole = reads.whole_lists()
            assert whole and all(labels.TASK_KEY in (s or "") for s in whole), whole
            assert all(finished.instance_key() in s or orphan.instance_key() in s for s in whole if s)

            reads.calls.clear()
            second = {
                s.name: s
                for s in await sweep(client, target, read_tasks, now=later, grace=GRACE, memory=memory)
            }
            # The finished job is not read whole again, the cancelled one carries its verdict: metadata only.
            assert reads.whole_lists() == []
            assert {n: s.outcome for n, s in second.items()} == {names["followed"]: None}
        finally:
            await client.close()

    with (
        SimCluster(ClusterConfig(nodes=1, gpus_per_node=8, time_scale=0.02)) as sim,
        ControllerThread(sim.kubeconfig_path),
    ):
        asyncio.run(scenario(sim))


def test_the_sweep_deletes_the_cancel_records_whose_time_has_run_out():
    cancelled_at = datetime.now(timezone.utc) - timedelta(days=2)
    old = TaskIdentity("nightly", "train", "manual__old", -1, 1)
    kept = TaskIdentity("nightly", "train", "manual__kept", -1, 1)

    def record(task: TaskIdentity, keep: timedelta) -> dict:
        return cancel_record.lease(CancelRecord(task, "MPIJob", task.job_name(1), "bob", cancelled_at, keep))

    async def scenario(sim: SimCluster) -> list[str]:
        client = await KubeClient.from_kubeconfig(sim.kubeconfig_path)
        try:
            await client.create(LEASES, "default", record(old, timedelta(days=1)))
            await client.create(LEASES, "default", record(kept, timedelta(days=7)))
            # Someone else's Lease in the namespace, however old: not a record, never touched.
            other = {"metadata": {"name": "some-controller"}, "spec": {"leaseDurationSeconds": 1}}
            await client.create(LEASES, "default", other)
            swept = await sweep(client, Target(namespace="default"), lambda refs: (set(), {}), grace=GRACE)
            assert swept == []  # no job at all
            return sorted(i["metadata"]["name"] for i in (await client.list(LEASES, "default"))["items"])
        finally:
            await client.close()

    with SimCluster(ClusterConfig(nodes=1, gpus_per_node=8, time_scale=0.02)) as sim:
        left = asyncio.run(scenario(sim))
    assert left == sorted([cancel_record.record_name(kept), "some-controller"])


def test_each_sweep_runs_on_a_loop_and_thread_of_its_own(monkeypatch):
    """The sweep's reads decode megabytes: on the API server's loop they would stall Airflow's UI."""
    server_loop: asyncio.AbstractEventLoop | None = None
    seen: list[tuple[bool, bool]] = []
    done = asyncio.Event()

    class NoClient:
        async def close(self) -> None:
            pass

    async def connect():
        elsewhere = threading.current_thread() is not threading.main_thread()
        seen.append((elsewhere, asyncio.get_running_loop() is not server_loop))
        return NoClient(), Target(namespace="default")

    async def no_jobs(client, namespace):
        assert server_loop is not None
        server_loop.call_soon_threadsafe(done.set)
        return
        yield

    monkeypatch.setattr(inspect, "job_metadata_pages", no_jobs)

    async def scenario() -> None:
        nonlocal server_loop
        server_loop = asyncio.get_running_loop()
        task = asyncio.create_task(
            run_periodically(connect, lambda refs: (set(), {}), interval=0.01, grace=GRACE)
        )
        await asyncio.wait_for(done.wait(), 30)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert seen[0] == (True, True)


# --- the sweep's reading of Airflow's metadata database ---------------------------------------------

SWEEP_DAG = """
from airflow.sdk import DAG
from airflow.providers.standard.operators.python import PythonOperator
from controller_fixture import ControllerThread


def boom():
    raise RuntimeError("the task died")


with DAG("{dag_id}", schedule=None) as dag:
    PythonOperator(task_id="ok", python_callable=lambda: None)
    PythonOperator(task_id="boom", python_callable=boom)
"""


@pytest.mark.slow
def test_the_sweep_reads_task_states_and_known_dags_from_airflows_database():
    import importlib.util
    from pathlib import Path

    from airflow.configuration import conf
    from airflow.utils.db import initdb

    from airflow_jobs_plugin.plugin.sweep import read_task_instances

    initdb()
    dag_id = "orphan_sweep_reads_states"
    folder = Path(conf.get("core", "dags_folder"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{dag_id}.py"
    path.write_text(SWEEP_DAG.format(dag_id=dag_id))
    spec = importlib.util.spec_from_file_location(dag_id, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    run = module.dag.test()

    ok, boom = TaskRef(dag_id, "ok", run.run_id), TaskRef(dag_id, "boom", run.run_id)
    missing = TaskRef(dag_id, "never_ran", run.run_id)
    foreign = TaskRef("not_a_dag_here", "train", run.run_id)
    known, tasks = read_task_instances({ok, boom, missing, foreign})
    assert known == {dag_id}
    assert set(tasks) == {ok, boom}
    assert (tasks[ok].state, tasks[ok].try_number) == ("success", 1)
    assert tasks[boom].state == "failed" and tasks[boom].end_date is not None
    assert tasks[boom].end_date.tzinfo is not None
    assert read_task_instances(set()) == (set(), {})


@pytest.mark.parametrize("value", ["0", "0.0", "-5"])
def test_an_orphan_sweep_interval_of_zero_in_any_form_turns_the_sweep_off(monkeypatch, value):
    from airflow_jobs_plugin.plugin import sweep as sweep_module

    options = {"orphan_sweep_interval": value, "orphan_grace_period": "600"}
    monkeypatch.setattr(sweep_module.config, "get", lambda name: options[name])

    async def never(*_args):
        raise AssertionError("the sweep waited for its next turn: it is on")

    monkeypatch.setattr(sweep_module.asyncio, "sleep", never)

    async def connect():
        raise AssertionError("the sweep connected: it is on")

    asyncio.run(run_periodically(connect))
