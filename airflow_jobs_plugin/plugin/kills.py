"""The API server's answer to kill requests: a job whose Airflow task a user killed, or whose try ran
out of its execution_timeout, is cancelled here.

A trigger's ``on_kill`` runs in the triggerer, where DAG authors' code runs, so it only asks (the label
``airflow-jobs.io/kill-requested``); this app, in Airflow's API server, where no DAG code runs and
Airflow's metadata database is read, decides from that database (jobs/kill_request.py) and cancels as
the page's cancel does, naming Airflow's user (or the timeout). A request that the database does not confirm (a DAG that
wrote one on another tenant's job) cancels nothing. Either way the request is then taken off the job.

The requests are listed by their label every ``kill_request_interval`` seconds (a LIST the API server
answers from its watch cache, empty but for the moments after a kill), in a worker thread with an event
loop and a client of its own, as the orphan sweep is (plugin/sweep.py): the API server's own loop never
waits for the cluster or the database here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from airflow_jobs_plugin.cluster.kube import KubeClient, KubeError
from airflow_jobs_plugin.jobs import kinds, labels
from airflow_jobs_plugin.jobs.jobview import JobView
from airflow_jobs_plugin.jobs.kill_request import KILLED_BY, judge_kill
from airflow_jobs_plugin.jobs.orphans import Verdict, job_record
from airflow_jobs_plugin.plugin.sweep import TaskReader, read_task_instances
from airflow_jobs_plugin.readmodel import inspect
from airflow_jobs_plugin.usecases import actions

log = logging.getLogger(__name__)

KILL_REQUEST_SECONDS = 2.0


@dataclass(frozen=True)
class Answered:
    """One kill request and what was done with it."""

    namespace: str
    name: str
    verdict: Verdict
    outcome: str | None = None


async def answer(client: KubeClient, target: inspect.Target, read_tasks: TaskReader) -> list[Answered]:
    """Judge and answer every kill request of the target's namespaces; what was answered. Call it off
    the API server's event loop: ``read_tasks`` queries the database."""
    answered: list[Answered] = []
    for namespace in (target.namespace, *target.also):
        requested: list[dict] = []
        for resource in kinds.RESOURCES:
            try:
                listing = await client.list(resource, namespace, label_selector=labels.KILL_REQUESTED)
            except KubeError as exc:
                if not exc.not_found:  # a kind whose operator is not installed: none of it
                    log.warning("kill requests: cannot list %s in %s: %s", resource.plural, namespace, exc)
                continue
            for item in listing.get("items") or []:
                item.setdefault("kind", resource.kind)
                requested.append(item)
        if not requested:
            continue
        records = [(job, job_record(job, finished=JobView(job).finished)) for job in requested]
        refs = {record.task for _, record in records if record.task is not None}
        known, tasks = await asyncio.to_thread(read_tasks, refs)
        # Airflow's scheduler already judged the deadline (the task instance left deferred); this clock
        # only keeps a deadline the database shows as still ahead from counting.
        now = datetime.now(timezone.utc)
        for job, record in records:
            task = tasks.get(record.task) if record.task is not None else None
            known_dag = record.task is not None and record.task.dag_id in known
            verdict = judge_kill(record, task, dag_known=known_dag, now=now)
            outcome = None
            if verdict.cancel:
                done = await actions.cancel(client, namespace, job, verdict.by or KILLED_BY, record=False)
                outcome = done.message
                log.info(
                    "kill request on %s/%s: cancelled (%s): %s",
                    namespace,
                    record.name,
                    verdict.reason,
                    outcome,
                )
            else:
                log.info("kill request on %s/%s not honoured: %s", namespace, record.name, verdict.reason)
            await _taken_off(client, namespace, job)
            answered.append(Answered(namespace, record.name, verdict, outcome))
    return answered


async def _taken_off(client: KubeClient, namespace: str, job: dict) -> None:
    try:
        await client.merge_patch(
            kinds.kind_of(job).resource,
            namespace,
            JobView(job).name,
            {"metadata": {"labels": {labels.KILL_REQUESTED: None}}},
        )
    except KubeError as exc:
        if not (exc.not_found or exc.conflict):
            log.warning("kill request on %s/%s: could not take it off: %s", namespace, JobView(job).name, exc)


async def run_periodically(
    connect: Callable[[], Awaitable[tuple[KubeClient, inspect.Target]]],
    read_tasks: TaskReader = read_task_instances,
    *,
    interval: float = KILL_REQUEST_SECONDS,
) -> None:
    """Answer the kill requests every ``interval`` seconds until cancelled, each round in a worker thread
    with its own event loop and client; a failed round is logged, not fatal."""

    async def once() -> None:
        try:
            client, target = await connect()
        except Exception:
            log.exception("kill requests: cannot reach the cluster")
            return
        try:
            await answer(client, target, read_tasks)
        except Exception:
            log.exception("kill requests: a round failed; the next one tries again")
        finally:
            await client.close()

    while True:
        await asyncio.sleep(interval)
        await asyncio.to_thread(lambda: asyncio.run(once()))
