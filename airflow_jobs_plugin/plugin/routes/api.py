"""The JSON API under ``/airflow-jobs/api``: typed answers (``readmodel/schema.py``), published in the
app's ``/openapi.json``; errors are FastAPI's ``{"detail": ...}``, described per route."""

from __future__ import annotations

from typing import Any

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
from fastapi import APIRouter, Depends, Query, Response

from airflow_jobs_plugin.plugin.deps import (
    JobQueryDep,
    QueueRows,
    ReadAccess,
    SameOrigin,
    SettingsDep,
    _map_index,
)
from airflow_jobs_plugin.plugin.reads import ReadsDep
from airflow_jobs_plugin.readmodel import inspect, listing, schema

api_router = APIRouter(prefix="/api")


# The errors the JSON routes answer, as FastAPI's {"detail": ...}, described in the OpenAPI schema.
def _error(why: str) -> dict[str, Any]:
    return {"model": schema.Problem, "description": why}


READ_ERRORS: dict[int | str, dict[str, Any]] = {
    401: _error("not signed in"),
    403: _error("the user's role may not read this"),
    502: _error("the cluster could not be reached or refused"),
}
JOB_ERRORS: dict[int | str, dict[str, Any]] = {
    **READ_ERRORS,
    403: _error("the user may not read (or, for actions, edit) the task instances of the job's DAG"),
    404: _error("no such GPU job"),
}
QUERY_ERROR = _error("a query parameter is unusable; the message names it and the fix")


def total_count(response: Response, page: listing.JobPage) -> None:
    """The size of the whole filtered job list, for clients paging ``/api/jobs``."""
    if page.total is not None:  # the page's overview counts every job it read
        response.headers["X-Total-Count"] = str(page.total)


@api_router.get(
    "/overview",
    dependencies=[ReadAccess],
    response_model=schema.Overview,
    responses={**READ_ERRORS, 400: QUERY_ERROR},
    summary="Pools, queues, a page of jobs and the GPU usage charts",
)
async def api_overview(
    response: Response,
    settings: SettingsDep,
    user: GetUserDep,
    query: JobQueryDep,
    reads: ReadsDep,
    queue_rows: QueueRows = listing.QUEUE_ROWS,
) -> schema.Overview:
    ov, page = await reads.overview_of(settings, user, query)
    total_count(response, page)
    ov = listing.bounded(ov, queue_rows)
    return schema.overview(ov, total=page.total, offset=page.offset, limit=page.limit, more=page.more)


@api_router.get(
    "/pools",
    dependencies=[ReadAccess],
    response_model=list[schema.Pool],
    responses={**READ_ERRORS, 400: QUERY_ERROR},
    summary="Every group's quota, GPUs used and free, and what waits, per user too",
)
async def api_pools(
    settings: SettingsDep, user: GetUserDep, query: JobQueryDep, reads: ReadsDep
) -> list[schema.Pool]:
    ov, _ = await reads.overview_of(settings, user, query)
    return schema.pools(ov.pools)


@api_router.get(
    "/queues",
    dependencies=[ReadAccess],
    response_model=list[schema.GroupQueue],
    responses={**READ_ERRORS, 400: QUERY_ERROR},
    summary="Each group's waiting jobs in order, with the pool's reason",
)
async def api_queues(
    settings: SettingsDep, user: GetUserDep, query: JobQueryDep, reads: ReadsDep
) -> list[schema.GroupQueue]:
    ov, _ = await reads.overview_of(settings, user, query)
    return schema.queues(ov.queues)


@api_router.get(
    "/jobs",
    dependencies=[ReadAccess],
    response_model=list[schema.Job],
    responses={**READ_ERRORS, 400: QUERY_ERROR},
    summary="A page of jobs; X-Total-Count carries how many match the filters",
)
async def api_jobs(
    response: Response, settings: SettingsDep, user: GetUserDep, query: JobQueryDep, reads: ReadsDep
) -> list[schema.Job]:
    ov, page = await reads.overview_of(settings, user, query)
    total_count(response, page)
    return schema.jobs(ov.jobs)


@api_router.get(
    "/jobs/{namespace}/{name}",
    response_model=schema.JobDetail,
    responses=JOB_ERRORS,
    summary="A job: its state, lifecycle, replicas, events, log tails and the actions that apply",
)
async def api_job(
    namespace: str, name: str, settings: SettingsDep, user: GetUserDep, reads: ReadsDep
) -> schema.JobDetail:
    return schema.job_detail(await reads.detail_of(settings, user, namespace, name))


@api_router.get(
    "/tasks/{dag_id}/{task_id}/{run_id}",
    dependencies=[Depends(requires_access_dag("GET", DagAccessEntity.TASK_INSTANCE))],
    response_model=schema.JobDetail,
    responses=JOB_ERRORS,
    summary="The job of a task instance (its newest try's newest attempt)",
)
async def api_task_job(
    dag_id: str,
    task_id: str,
    run_id: str,
    settings: SettingsDep,
    reads: ReadsDep,
    map_index: str = Query("-1"),
) -> schema.JobDetail:
    index = _map_index(map_index)
    return schema.job_detail(await reads.task_detail_of(settings, dag_id, task_id, run_id, index))


@api_router.post(
    "/jobs/{namespace}/{name}/cancel",
    dependencies=[SameOrigin],
    response_model=schema.CancelResult,
    responses=JOB_ERRORS,
    summary="Cancel the job: rule it Cancelled and delete it with its pods",
)
async def api_cancel(
    namespace: str, name: str, settings: SettingsDep, user: GetUserDep, reads: ReadsDep
) -> schema.CancelResult:
    return schema.cancel_result(await reads.act(settings, user, namespace, name, inspect.cancel))


@api_router.post(
    "/jobs/{namespace}/{name}/stop",
    dependencies=[SameOrigin],
    response_model=schema.ActionResult,
    responses=JOB_ERRORS,
    summary="Stop the job: suspend it, freeing its GPUs, until it is resumed",
)
async def api_stop(
    namespace: str, name: str, settings: SettingsDep, user: GetUserDep, reads: ReadsDep
) -> schema.ActionResult:
    return schema.action_result(await reads.act(settings, user, namespace, name, inspect.stop))


@api_router.post(
    "/jobs/{namespace}/{name}/resume",
    dependencies=[SameOrigin],
    response_model=schema.ActionResult,
    responses=JOB_ERRORS,
    summary="Resume a stopped job: back to its queue at its original place",
)
async def api_resume(
    namespace: str, name: str, settings: SettingsDep, user: GetUserDep, reads: ReadsDep
) -> schema.ActionResult:
    return schema.action_result(await reads.act(settings, user, namespace, name, inspect.resume))


@api_router.get(
    "/nodes",
    dependencies=[ReadAccess],
    response_model=schema.Nodes,
    responses=READ_ERRORS,
    summary="Every node with GPUs: allocatable, used, free, and the jobs holding them",
)
async def api_nodes(settings: SettingsDep, user: GetUserDep, reads: ReadsDep) -> schema.Nodes:
    return schema.node_view(await reads.nodes_of(settings, user))
