"""The pages under ``/airflow-jobs``: the overview, a job, a task's job, the nodes, and the forms of a
job page's buttons, which land back on the job page with the action's answer."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
from fastapi import APIRouter, Depends, HTTPException, Query, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse

from airflow_jobs_plugin.plugin import html
from airflow_jobs_plugin.plugin.deps import (
    URL_PREFIX,
    JobQueryDep,
    QueueRows,
    ReadAccess,
    SameOrigin,
    Settings,
    SettingsDep,
    _base,
    _map_index,
    may_act,
)
from airflow_jobs_plugin.plugin.reads import Door, JobReads, Outcome, ReadsDep
from airflow_jobs_plugin.readmodel import inspect, listing, views

pages_router = APIRouter()

# The page's buttons post a form and land on the job page, which shows the action's one-line answer.
FORM_POST: dict[str, Any] = {
    "status_code": status.HTTP_303_SEE_OTHER,
    "response_class": RedirectResponse,
    "responses": {303: {"description": "to the job page, with the action's answer in ?notice="}},
}


@pages_router.get("/nodes", response_class=HTMLResponse, dependencies=[ReadAccess])
async def nodes_page(
    request: Request, settings: SettingsDep, user: GetUserDep, reads: ReadsDep
) -> HTMLResponse:
    return HTMLResponse(html.nodes_page(await reads.nodes_of(settings, user), base=_base(request)))


@pages_router.get("/", response_class=HTMLResponse, dependencies=[ReadAccess])
async def overview_page(
    request: Request,
    settings: SettingsDep,
    user: GetUserDep,
    query: JobQueryDep,
    reads: ReadsDep,
    queue_rows: QueueRows = listing.QUEUE_ROWS,
) -> HTMLResponse:
    ov, page = await reads.overview_of(settings, user, query)
    base = _base(request)
    nav = listing.pager_html(page, query, f"{base}{URL_PREFIX}/")
    bounded = listing.bounded(ov, queue_rows)
    return HTMLResponse(
        html.overview_page(bounded, base=base, jobs_nav=nav, charts_pending=page.charts_pending)
    )


@pages_router.get("/jobs/{namespace}/{name}", response_class=HTMLResponse)
async def job_page(
    request: Request,
    namespace: str,
    name: str,
    settings: SettingsDep,
    user: GetUserDep,
    reads: ReadsDep,
    notice: str | None = Query(None, max_length=html.NOTICE_MAX),
) -> HTMLResponse:
    base = _base(request)
    try:
        detail = await reads.detail_of(settings, user, namespace, name)
    except HTTPException as exc:
        if exc.status_code != status.HTTP_404_NOT_FOUND:
            raise
        # After a cancel that deleted it the job is gone: say what the action did rather than only "not found".
        return HTMLResponse(
            html.message_page(f"GPU job {name}", notice or str(exc.detail), base=base, refresh=None),
            status_code=status.HTTP_200_OK if notice else status.HTTP_404_NOT_FOUND,
        )
    may = may_act(user, detail.job.dag_id)
    return HTMLResponse(html.job_page(detail, base=base, can_act=may, notice=notice))


@pages_router.get(
    "/jobs/{dag_id}/{task_id}/{run_id}",
    response_class=HTMLResponse,
    dependencies=[Depends(requires_access_dag("GET", DagAccessEntity.TASK_INSTANCE))],
)
async def task_page(
    request: Request,
    dag_id: str,
    task_id: str,
    run_id: str,
    settings: SettingsDep,
    user: GetUserDep,
    reads: ReadsDep,
    map_index: str = Query("-1"),
) -> HTMLResponse:
    base = _base(request)
    try:
        detail = await reads.task_detail_of(settings, dag_id, task_id, run_id, _map_index(map_index))
    except HTTPException as exc:
        if exc.status_code != status.HTTP_404_NOT_FOUND:
            raise
        return HTMLResponse(
            html.message_page("GPU job", f"{exc.detail}: it has not been submitted yet", base=base),
            status_code=status.HTTP_404_NOT_FOUND,
        )
    return HTMLResponse(html.job_page(detail, base=base, can_act=may_act(user, dag_id)))


async def form(
    request: Request,
    reads: JobReads,
    settings: Settings,
    user: Any,
    namespace: str,
    name: str,
    door: Door[Outcome],
) -> RedirectResponse:
    outcome = await reads.act(settings, user, namespace, name, door)
    url = f"{_base(request)}{views.job_url(namespace, name)}?{urlencode({'notice': outcome.message[: html.NOTICE_MAX]})}"
    return RedirectResponse(url, status_code=status.HTTP_303_SEE_OTHER)


@pages_router.post("/jobs/{namespace}/{name}/cancel", dependencies=[SameOrigin], **FORM_POST)
async def cancel_form(
    request: Request, namespace: str, name: str, settings: SettingsDep, user: GetUserDep, reads: ReadsDep
) -> RedirectResponse:
    return await form(request, reads, settings, user, namespace, name, inspect.cancel)


@pages_router.post("/jobs/{namespace}/{name}/stop", dependencies=[SameOrigin], **FORM_POST)
async def stop_form(
    request: Request, namespace: str, name: str, settings: SettingsDep, user: GetUserDep, reads: ReadsDep
) -> RedirectResponse:
    return await form(request, reads, settings, user, namespace, name, inspect.stop)


@pages_router.post("/jobs/{namespace}/{name}/resume", dependencies=[SameOrigin], **FORM_POST)
async def resume_form(
    request: Request, namespace: str, name: str, settings: SettingsDep, user: GetUserDep, reads: ReadsDep
) -> RedirectResponse:
    return await form(request, reads, settings, user, namespace, name, inspect.resume)
