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

The rule is :func:`airflow_jobs_plugin.orphans.judge`; a verdict to cancel goes through
:func:`airflow_jobs_plugin.actions.cancel` with ``by="orphan sweep"``, like every other cancel.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from airflow_jobs_plugin import actions, config, inspect
from airflow_jobs_plugin.kube import KubeClient
from airflow_jobs_plugin.orphans import JobRecord, TaskRecord, TaskRef, Verdict, job_record, judge
from airflow_jobs_plugin.quota.ledger import is_finished

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
                ti.dag_id, ti.task_id, ti.run_id, ti.map_index, ti.state, ti.try_number, ti.end_date
            ).where(ti.dag_id.in_(dag_ids), ti.run_id.in_(run_ids))
        )
        found = {
            TaskRef(dag_id, task_id, run_id, map_index): TaskRecord(
                None if state is None else str(getattr(state, "value", state)), int(try_number or 0), end_date
            )
            for dag_id, task_id, run_id, map_index, state, try_number, end_date in rows
        }
    return known, {r: found[r] for r in refs if r in found}


async def sweep(
    client: KubeClient,
    target: inspect.Target,
    read_tasks: TaskReader,
    *,
    now: datetime | None = None,
    grace: timedelta,
) -> list[Swept]:
    """Judge every live product job of the namespace and cancel the orphans; what was judged."""
    now = now or datetime.now(timezone.utc)
    live: list[tuple[dict, JobRecord]] = []
    for job in await inspect.read_jobs(client, target.namespace):
        record = job_record(job, finished=is_finished(job))
        if record.live and record.task is not None:
            live.append((dict(job), record))
    if not live:
        return []
    refs = {record.task for _, record in live if record.task is not None}
    known, tasks = await asyncio.to_thread(read_tasks, refs)
    swept = []
    for job, record in live:
        assert record.task is not None
        verdict = judge(
            record, tasks.get(record.task), dag_known=record.task.dag_id in known, now=now, grace=grace
        )
        if not verdict.cancel:
            swept.append(Swept(record.name, verdict))
            continue
        outcome = await actions.cancel(client, target.namespace, job, BY)
        log.warning("orphan sweep: %s: %s", outcome.message, verdict.reason)
        swept.append(Swept(record.name, verdict, outcome.message))
    return swept


def _seconds(option: str) -> int:
    try:
        return max(0, int(config.get(option)))
    except ValueError:
        log.error("[%s] %s must be a whole number of seconds; using its default", config.SECTION, option)
        return int(config.BY_NAME[option].default or 0)


async def run_periodically(
    connect: Callable[[], Awaitable[tuple[KubeClient, inspect.Target]]],
    read_tasks: TaskReader = read_task_instances,
    *,
    interval: float | None = None,
    grace: timedelta | None = None,
) -> None:
    """Sweep every ``interval`` seconds (jittered) until cancelled; a failed sweep is logged, not fatal."""
    interval = _seconds("orphan_sweep_interval") if interval is None else interval
    grace = timedelta(seconds=_seconds("orphan_grace_period")) if grace is None else grace
    if interval <= 0:
        return
    while True:
        await asyncio.sleep(interval * random.uniform(0.5, 1.5))
        try:
            client, target = await connect()
        except Exception:
            log.exception("orphan sweep: cannot reach the cluster")
            continue
        try:
            await sweep(client, target, read_tasks, grace=grace)
        except Exception:
            log.exception("orphan sweep failed; the next one tries again")
        finally:
            await client.close()
