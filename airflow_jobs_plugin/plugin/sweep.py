"""The orphan sweep: cancel live jobs whose Airflow task instance no longer follows them.

Where it runs, and why: in the API server, as a periodic task of the GPU Jobs app (started by the app's
lifespan, which Airflow 3.3's API server enters for every mounted plugin app, ``api_fastapi/app.py``
``lifespan``). The sweep must read task instance states, and of the processes that see both the
cluster and Airflow only the API server may read the metadata database: workers and triggerers are
refused the ORM by the Task SDK. A maintenance DAG would run on a worker and reach task states only
one run at a time through the execution API, would need a worker slot and a schedule, and would have
to be added by every deployment, while the orphans it is for come from exactly the failures nobody
plans for. Every API server process sweeps (several workers, several replicas): that is safe because a
cancel is idempotent (the second one finds the job finished or gone and does nothing) and cheap (two
LISTs and one query per interval); the start is jittered so processes do not sweep in lockstep.

What it reads, and where: a namespace keeping 50,000 finished jobs holds about 350 MB of them as JSON,
and decoding that on the API server's event loop froze Airflow's own UI and REST API for 20-30 s per
sweep. So each sweep runs in a worker thread on an event loop of its own, with a client of its own,
and reads only what the rule needs:

1. every product job as metadata only (``PartialObjectMetadataList``: labels, annotations, uid,
   creation and deletion times), label-selected, 500 per LIST (``limit``/``continue``), and each page
   is judged and dropped before the next is read (:func:`judge_page`);
2. the task instances of the page's jobs that may be live (no product verdict, not being deleted, not
   already seen finished by an earlier sweep), from Airflow's metadata database;
3. whole, by their TASK_KEY label a hundred task keys per LIST and one LIST chunk at a time, only the
   page's jobs the rule would cancel once their status is known: every job those reads find finished
   is remembered (by uid: a finished Job or MPIJob never runs again) and not read again, nor are the
   other tries of its task found finished with it; the others are judged again, whole, and cancelled.

So a sweep never holds more than one page of metadata and that page's candidates whole: the first
sweep after a start reads the finished history whole once, page by page; later ones read metadata and
the few new candidates. Holding the whole history at once (50,000 jobs, 2.5 GB) made the garbage
collections of that heap stall the API server's loop for seconds, from the sweep's own thread.

The rule is :func:`airflow_jobs_plugin.jobs.orphans.judge`; a verdict to cancel goes through
:func:`airflow_jobs_plugin.usecases.actions.cancel` with ``by="orphan sweep"``, like every other cancel, but
leaves no cancel record (no try of an orphan's run follows it). Each sweep also deletes the cancel records
whose keep time has run out (:func:`delete_expired_records`, rule :func:`~airflow_jobs_plugin.jobs.cancel_record.expired_records`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_jobs_plugin import config
from airflow_jobs_plugin.cluster.kube import LEASES, KubeClient, KubeError, Resource
from airflow_jobs_plugin.cluster.objects import parse_time
from airflow_jobs_plugin.jobs import cancel_record, kinds, labels
from airflow_jobs_plugin.jobs.jobview import JobView
from airflow_jobs_plugin.jobs.orphans import (
    JobRecord,
    TaskRecord,
    TaskRef,
    Verdict,
    job_record,
    judge,
)
from airflow_jobs_plugin.plugin.state_cache import full_collections_deferred
from airflow_jobs_plugin.queueing.quota.ledger import is_finished
from airflow_jobs_plugin.readmodel import inspect
from airflow_jobs_plugin.usecases import actions

log = logging.getLogger(__name__)

BY = "orphan sweep"

# The task instances asked for -> (the DAG ids this Airflow has, the task instances that exist).
TaskReader = Callable[[set[TaskRef]], tuple[set[str], dict[TaskRef, TaskRecord]]]


@dataclass(frozen=True)
class Swept:
    """One live job the sweep judged, and what it did."""

    name: str
    verdict: Verdict
    outcome: str | None = None  # the cancel's one-line answer, when it cancelled


@dataclass
class Memory:
    """What one process's sweeps carry from one to the next: the uids of jobs seen finished."""

    finished: set[str] = field(default_factory=set)


def read_task_instances(refs: set[TaskRef]) -> tuple[set[str], dict[TaskRef, TaskRecord]]:
    """The task instances of ``refs`` from Airflow's metadata database (API server only)."""
    from airflow.models.dag import DagModel
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    dag_ids = {r.dag_id for r in refs}
    run_ids = {r.run_id for r in refs}
    if not refs:
        return set(), {}
    ti = TaskInstance
    with create_session() as session:
        known = set(session.scalars(select(DagModel.dag_id).where(DagModel.dag_id.in_(dag_ids))))
        rows = session.execute(
            select(
                ti.dag_id,
                ti.task_id,
                ti.run_id,
                ti.map_index,
                ti.state,
                ti.try_number,
                ti.end_date,
                ti.trigger_timeout,
                ti.next_method,
            ).where(ti.dag_id.in_(dag_ids), ti.run_id.in_(run_ids))
        )
        found = {
            TaskRef(dag_id, task_id, run_id, map_index): TaskRecord(
                None if state is None else str(getattr(state, "value", state)),
                int(try_number or 0),
                end_date,
                trigger_timeout,
                next_method,
            )
            for dag_id, task_id, run_id, map_index, state, try_number, end_date, trigger_timeout, next_method in rows
        }
    return known, {r: found[r] for r in refs if r in found}


def _uid(job: Mapping[str, Any]) -> str:
    return JobView(job).uid


def _task_key(job: Mapping[str, Any]) -> str | None:
    return JobView(job).labels.get(labels.TASK_KEY)


def maybe_live(metadata: Iterable[Mapping[str, Any]], finished: set[str]) -> list[tuple[dict, JobRecord]]:
    """The jobs (as metadata) that may be live and were submitted by an Airflow task: no product
    verdict (a verdict is final), not being deleted, not seen finished by an earlier sweep."""
    found = []
    for job in metadata:
        ended = JobView(job).verdict is not None or _uid(job) in finished
        record = job_record(job, finished=ended)
        if record.live and record.task is not None:
            found.append((dict(job), record))
    return found


@dataclass(frozen=True)
class Doubt:
    """A job the rule would cancel from its metadata alone, which cannot tell a finished job: it is read
    whole (by its task key) before anything is done."""

    uid: str
    record: JobRecord
    task_key: str | None


@dataclass(frozen=True)
class PageDecision:
    """What one page of metadata decided: the jobs left alone, and the doubts to read whole."""

    kept: tuple[Swept, ...]
    doubts: tuple[Doubt, ...]


def judge_page(
    page: Iterable[Mapping[str, Any]],
    finished: set[str],
    tasks: Mapping[TaskRef, TaskRecord],
    known: set[str],
    *,
    now: datetime,
    grace: timedelta,
) -> PageDecision:
    """Judge one page of jobs' metadata against their task instances (``tasks``, ``known`` DAG ids).

    Each job is judged on its own record and its own task instance, so judging page by page decides
    exactly what judging every job at once would: that is what lets the sweep hold one page only."""
    kept: list[Swept] = []
    doubts: list[Doubt] = []
    for job, record in maybe_live(page, finished):
        verdict = _verdict(record, tasks, known, now=now, grace=grace)
        if verdict.cancel:
            doubts.append(Doubt(_uid(job), record, _task_key(job)))
        else:
            kept.append(Swept(record.name, verdict))
    return PageDecision(tuple(kept), tuple(doubts))


def _verdict(
    record: JobRecord,
    tasks: Mapping[TaskRef, TaskRecord],
    known: set[str],
    *,
    now: datetime,
    grace: timedelta,
) -> Verdict:
    assert record.task is not None
    return judge(record, tasks.get(record.task), dag_known=record.task.dag_id in known, now=now, grace=grace)


def refs_of(page: Iterable[Mapping[str, Any]], finished: set[str]) -> set[TaskRef]:
    """The task instances a page's possibly live jobs follow: what the database is asked for."""
    return {record.task for _, record in maybe_live(page, finished) if record.task is not None}


async def sweep(
    client: KubeClient,
    target: inspect.Target,
    read_tasks: TaskReader,
    *,
    now: datetime | None = None,
    grace: timedelta,
    memory: Memory | None = None,
) -> list[Swept]:
    """Judge every live product job of the namespace and cancel the orphans; what was judged.

    One metadata page (:data:`inspect.LIST_CHUNK` jobs) at a time: its task instances are read, it is
    judged (:func:`judge_page`), its doubts are read whole by task key and judged again, and then it is
    dropped before the next page is asked for. So a sweep holds at most one page of metadata and the
    whole bodies of that page's doubts, never the namespace's history: at 50,000 finished jobs the first
    sweep held them all at once (2.5 GB), and the full garbage collections of that heap stalled the API
    server's loop for seconds although the sweep runs in a thread of its own (a collection holds the
    GIL). Between pages it keeps only strings: the uids listed and those seen finished.

    Call it off the API server's event loop (:func:`run_periodically` does): ``read_tasks`` queries
    the database, and the reads decode megabytes."""
    # Its metadata pages live long enough to reach the oldest generation: see
    # state_cache.full_collections_deferred.
    with full_collections_deferred():
        now = now or datetime.now(timezone.utc)
        memory = memory if memory is not None else Memory()
        listed: set[str] = set()
        swept: list[Swept] = []
        async for page in inspect.job_metadata_pages(client, target.namespace):
            listed.update(_uid(j) for j in page)
            await delete_expired_mpijobs(client, target.namespace, page, now)
            refs = refs_of(page, memory.finished)
            known, tasks = read_tasks(refs) if refs else (set(), {})
            decided = judge_page(page, memory.finished, tasks, known, now=now, grace=grace)
            del page  # dropped before its doubts are read whole and before the next page is asked for
            swept.extend(decided.kept)
            if decided.doubts:
                swept.extend(await _settle(client, target, decided.doubts, tasks, known, now, grace, memory))
            del decided, tasks
        # A uid no longer listed is a job deleted: nothing to remember it for.
        memory.finished &= listed
        await delete_expired_records(client, target.namespace, now)
        return swept


async def _settle(
    client: KubeClient,
    target: inspect.Target,
    doubts: tuple[Doubt, ...],
    tasks: Mapping[TaskRef, TaskRecord],
    known: set[str],
    now: datetime,
    grace: timedelta,
    memory: Memory,
) -> list[Swept]:
    """Read one page's doubts whole, a LIST chunk at a time, and cancel those still orphans. Every job
    the reads find finished is remembered (by uid: a finished Job or MPIJob never runs again), a doubt or
    not: the other tries of the same task instances on later pages are then not read again."""
    pending = {d.uid: d for d in doubts}
    keys = {d.task_key for d in doubts if d.task_key}
    swept: list[Swept] = []
    async for page in inspect.jobs_of_tasks_pages(client, target.namespace, keys):
        for found in page:
            uid = _uid(found)
            if is_finished(found):
                memory.finished.add(uid)
                pending.pop(uid, None)
                continue
            doubt = pending.pop(uid, None)
            if doubt is None:  # another try of the task, not judged on this page
                continue
            verdict = _verdict(job_record(found, finished=False), tasks, known, now=now, grace=grace)
            if not verdict.cancel:
                swept.append(Swept(doubt.record.name, verdict))
                continue
            # No record (jobs/cancel_record.py): no try of its run follows an orphan, and a record for a
            # run that does not exist yet would block that run when it comes.
            # A timeout's cancel names the timeout, so the task's retries still run (jobs/orphans.py).
            outcome = await actions.cancel(client, target.namespace, found, verdict.by or BY, record=False)
            log.warning("orphan sweep: %s: %s", outcome.message, verdict.reason)
            swept.append(Swept(doubt.record.name, verdict, outcome.message))
        del page
    # A doubt no read found was deleted since the metadata was read, or lost its TASK_KEY label: not
    # ours to end.
    return swept


def expired_mpijobs(metadata: Iterable[Mapping[str, Any]], now: datetime) -> list[tuple[Resource, str, str]]:
    """(resource, name, uid) of the finished jobs whose TTL has ended (labels.DELETE_AFTER, written only
    on the kinds whose controller outlives it, MPIJobs, by the trigger that saw them finish) and that
    are not being deleted already."""
    found = []
    for job in metadata:
        meta = JobView(job)
        after = parse_time(meta.annotations.get(labels.DELETE_AFTER))
        adapter = kinds.kind_of(job)
        if after is not None and after <= now and not meta.deleting and adapter.outlives_its_ttl:
            found.append((adapter.resource, meta.name, meta.uid))
    return found


async def delete_expired_mpijobs(
    client: KubeClient, namespace: str, metadata: Iterable[Mapping[str, Any]], now: datetime
) -> None:
    """Delete the finished MPIJobs whose ``ttl_after_finished`` has run out: the MPI operator (v0.5-v0.8)
    applies it to the launcher Job only. Every API server process sweeps: the delete is conditional on
    the uid (a new MPIJob of the same name is never taken), and a second delete finds it gone (404)."""
    for resource, name, uid in expired_mpijobs(metadata, now):
        try:
            await client.delete(resource, namespace, name, preconditions={"uid": uid})
        except KubeError as exc:
            if not exc.conflict:
                log.warning("could not delete expired MPIJob %s/%s: %s", namespace, name, exc)
            continue
        log.info("deleted MPIJob %s/%s: its ttl_after_finished has run out", namespace, name)


async def delete_expired_records(client: KubeClient, namespace: str, now: datetime) -> int:
    """Delete the cancel records (:mod:`airflow_jobs_plugin.jobs.cancel_record`) of the namespace whose
    keep time has run out; how many. Every API server process sweeps: each delete is conditional on the
    record's uid (a record written again since is never taken), and a second delete finds it gone. A
    record that cannot be listed or deleted now is left for the next sweep."""
    try:
        listing = await client.list(
            LEASES, namespace, label_selector=f"{labels.RECORD}={labels.CANCEL_RECORD_VALUE}"
        )
    except KubeError as exc:
        log.warning("orphan sweep: could not list the cancel records of %s: %s", namespace, exc)
        return 0
    deleted = 0
    for name, uid in cancel_record.expired_records(listing.get("items") or [], now):
        try:
            gone = await client.delete(LEASES, namespace, name, preconditions={"uid": uid})
        except KubeError as exc:
            if not exc.conflict:
                log.warning(
                    "orphan sweep: could not delete expired cancel record %s/%s: %s", namespace, name, exc
                )
            continue
        if gone:
            deleted += 1
            log.info("orphan sweep: deleted cancel record %s/%s: its time has run out", namespace, name)
    return deleted


def _seconds(option: str) -> float:
    """The option's seconds; ``0``, ``0.0`` or less is 0 (for the interval: off). A value that is no
    number (or not finite) logs why and counts as the default: ``0.0`` once did, and the sweep ran."""
    try:
        value = float(config.get(option))
        if not math.isfinite(value):
            raise ValueError(value)
        return max(0.0, value)
    except ValueError:
        log.error("[%s] %s must be a number of seconds; using its default", config.SECTION, option)
        return float(config.BY_NAME[option].default or 0)


def _off_the_loop(work: Callable[[], Awaitable[Any]]) -> Awaitable[Any]:
    """Run the coroutine function ``work`` on a fresh event loop in a worker thread."""
    return asyncio.to_thread(lambda: asyncio.run(work()))  # type: ignore[arg-type]


async def run_periodically(
    connect: Callable[[], Awaitable[tuple[KubeClient, inspect.Target]]],
    read_tasks: TaskReader = read_task_instances,
    *,
    interval: float | None = None,
    grace: timedelta | None = None,
) -> None:
    """Sweep every ``interval`` seconds (jittered) until cancelled, each sweep in a worker thread with
    its own event loop and client (``connect`` is called there); a failed sweep is logged, not fatal."""
    interval = _seconds("orphan_sweep_interval") if interval is None else interval
    grace = timedelta(seconds=_seconds("orphan_grace_period")) if grace is None else grace
    if interval <= 0:
        return
    memory = Memory()

    async def once() -> None:
        try:
            client, target = await connect()
        except Exception:
            log.exception("orphan sweep: cannot reach the cluster")
            return
        try:
            await sweep(client, target, read_tasks, grace=grace, memory=memory)
        except Exception:
            log.exception("orphan sweep failed; the next one tries again")
        finally:
            await client.close()

    while True:
        await asyncio.sleep(interval * random.uniform(0.5, 1.5))
        await _off_the_loop(once)
