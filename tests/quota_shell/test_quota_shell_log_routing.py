"""A task's log carries only its own job's lines: what an admission pass says about a job reaches the
log of the trigger that follows that job, whichever trigger's call ran the pass, and never another
DAG's task log."""

from __future__ import annotations

import asyncio
import contextvars
import logging

from airflow_jobs_plugin.cluster.kube import JOBS
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.usecases import actions

from .conftest import NAMESPACE, annotation, create_jobs, job_body, ledger_of, wait_for
from .test_quota_shell_stop import admission_for

# What Airflow's triggerer binds for each trigger's coroutine (apache-airflow 3.3,
# airflow/jobs/triggerer_job_runner.py, ``bind_log_contextvars``) and routes each record by.
TRIGGER_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("trigger_id", default=None)


class RoutedRecords(logging.Handler):
    """Each record with the trigger whose context logged it, as the triggerer routes it to a task log."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[str | None, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((TRIGGER_ID.get(), record.getMessage()))

    def of(self, trigger: str | None) -> list[str]:
        return [line for who, line in self.lines if who == trigger]


def in_trigger(trigger: str, call) -> asyncio.Task:
    """Run ``call`` (a coroutine function) as the trigger ``trigger``'s coroutine: a task of its own, in
    a context that binds its id."""
    context = contextvars.copy_context()
    context.run(TRIGGER_ID.set, trigger)
    return asyncio.get_running_loop().create_task(call(), context=context)


async def test_a_stopped_jobs_release_reaches_its_own_log_and_not_the_log_of_the_trigger_that_ran_the_pass(
    client,
):
    group, admission = await admission_for(client, 2)
    vision, nlp = await create_jobs(
        client,
        job_body(group, "retraining-bot", 2, run=10_000, task="promote"),
        job_body(group, "erin", 2, run=10_000, task="nlp_erin_2gpu"),
    )
    routed = RoutedRecords()
    logger = logging.getLogger("airflow_jobs_plugin.queueing.engines.pool")
    logger.addHandler(routed)
    logger.setLevel(logging.INFO)
    try:
        # Each task's trigger follows its own job; Erin's asks first, so her trigger's call starts the
        # group's passes, though the job queued first is admitted first.
        await in_trigger("nlp", lambda: admission.ensure(nlp))
        await in_trigger("promote", lambda: admission.ensure(vision))
        running = await wait_for(
            lambda: (
                (j := admission.watch.get(JOBS, vision["metadata"]["name"]))
                and annotation(j, labels.ADMITTED_AT)
                and j
            )
        )

        await actions.stop(client, NAMESPACE, running, "retraining-bot")

        # Erin's trigger keeps asking after her queued job: its calls run the passes that free the GPUs.
        async def erin_admitted() -> bool:
            await in_trigger(
                "nlp", lambda: admission.ensure(admission.watch.get(JOBS, nlp["metadata"]["name"]))
            )
            reserved = [r.job for r in (await ledger_of(client, group)).reservations]
            return reserved == [nlp["metadata"]["name"]]

        await wait_for(erin_admitted)
        vision_name = vision["metadata"]["name"]
        # The pass that wrote the ledger says what it released once its write has landed.
        await wait_for(lambda: any("released 2 GPU(s)" in line for _, line in routed.lines))
    finally:
        logger.removeHandler(routed)

    released = [line for line in routed.of("promote") if "released 2 GPU(s)" in line and vision_name in line]
    assert released and "stopped by a user" in released[0]
    assert not [line for line in routed.of("nlp") if vision_name in line or "retraining-bot" in line]
