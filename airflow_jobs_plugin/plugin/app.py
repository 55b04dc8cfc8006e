"""The GPU Jobs FastAPI app, mounted by Airflow's API server under ``/airflow-jobs``.

Every route requires a signed-in Airflow user, through Airflow's own security dependencies (the JWT in
the ``Authorization`` header or Airflow's session cookie, checked by the configured auth manager):

- the overview pages and their JSON need the Cluster Activity view; jobs of DAGs the user may not read
  are left out of lists and queues (pools and charts count every job: quota is shared);
- a job's page needs read access to its DAG's task instances;
- cancelling, stopping and resuming need edit access to its DAG's task instances (what marking the task
  failed needs), and a request authenticated by Airflow's session cookie must come from this Airflow's
  own origin (:mod:`airflow_jobs_plugin.plugin.origin`).

The cluster is read through the Airflow connection named in ``[airflow_jobs] kubernetes_conn_id``, in
``[airflow_jobs] namespace`` and every namespace of ``[airflow_jobs] namespaces``. Pages read one
index of every job for all readers (:mod:`airflow_jobs_plugin.readmodel.job_index`), filled once and
refreshed at most every few seconds by creation window, in a worker thread, never on the API server's
event loop (:mod:`airflow_jobs_plugin.plugin.state_cache`); each request filters, sorts and pages it
(query parameters in ``docs/ui.md``).

What a person waits for after a start, measured at 51,000 jobs on 2 loaded cores (docs/benchmarks.md):

- the first page is the newest page, read as ``airflow-jobs status`` reads it (a few thousand
  objects' metadata by creation window, the page's jobs whole), in chunks of 5,000 so that its requests,
  each waited for before the next, are few; the index fills behind it. Partial-object or table LISTs
  would not shorten the fill much (its pages are the whole jobs the rows are made from), and a snapshot
  of the index on local disk would add a store, its versioning and its invalidation, for a first page
  the newest-page read already answers in about a second of CPU;
- a job's page, the one an action lands on, never waits for the fill: without a kept index it reads
  what it needs around its job;
- the fill runs with Python's full garbage collections deferred (``state_cache.full_collections_deferred``):
  they, not decoding, were what stalled Airflow's event loop during it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from http import HTTPStatus

from airflow.api_fastapi.app import get_auth_manager
from fastapi import FastAPI, Request, status
from fastapi.exception_handlers import http_exception_handler, request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from airflow_jobs_plugin.plugin import html, kills, sweep
from airflow_jobs_plugin.plugin.deps import URL_PREFIX, Settings, _base
from airflow_jobs_plugin.plugin.reads import JobReads, connect
from airflow_jobs_plugin.plugin.routes.api import api_router
from airflow_jobs_plugin.plugin.routes.pages import pages_router
from airflow_jobs_plugin.plugin.state_cache import BuildCache
from airflow_jobs_plugin.readmodel import job_index

__all__ = ["URL_PREFIX", "Settings", "create_app", "lifespan"]


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Run the orphan sweep (``plugin/sweep.py``) and answer kill requests (``plugin/kills.py``) for as
    long as the API server serves the app."""
    tasks = [
        asyncio.create_task(sweep.run_periodically(connect), name="airflow-jobs-orphan-sweep"),
        asyncio.create_task(kills.run_periodically(connect), name="airflow-jobs-kill-requests"),
    ]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


# What a browser is told for an error of a page (the JSON API keeps FastAPI's {"detail": ...}).
ERROR_TITLES = {
    status.HTTP_400_BAD_REQUEST: "Bad request",
    HTTPStatus.UNPROCESSABLE_ENTITY: "Bad query parameter",
    status.HTTP_401_UNAUTHORIZED: "Not signed in",
    status.HTTP_403_FORBIDDEN: "Not allowed",
    status.HTTP_404_NOT_FOUND: "Not found",
    status.HTTP_502_BAD_GATEWAY: "The cluster did not answer",
}


def _wants_page(request: Request) -> bool:
    """A browser's request for a page: not the JSON API, and HTML asked for by name."""
    path = request.url.path
    return "/api/" not in path and "text/html" in request.headers.get("accept", "")


def _login_url(request: Request) -> str | None:
    """Airflow's sign-in page, coming back here after (the auth manager's own URL)."""
    try:
        return get_auth_manager().get_url_login(next_url=str(request.url))
    except Exception:  # an auth manager without a login page: the error page says what to do
        return None


async def _error_response(request: Request, exc: StarletteHTTPException) -> Response:
    """Errors of pages as pages: 401 sends a browser's GET to Airflow's sign-in page and back, 403 says
    why, 404 and 502 say what was not found or did not answer. The JSON API, and clients that do not ask
    for HTML, get FastAPI's JSON as before."""
    if not _wants_page(request):
        return await http_exception_handler(request, exc)
    headers = dict(exc.headers or {})
    if exc.status_code == status.HTTP_401_UNAUTHORIZED:
        login = _login_url(request)
        if login and request.method == "GET":
            return RedirectResponse(login, status_code=status.HTTP_303_SEE_OTHER)
        message = "Sign in to Airflow to see GPU jobs" + (f": {login}" if login else ".")
    elif exc.status_code == status.HTTP_403_FORBIDDEN:
        why = str(exc.detail or "")
        message = (
            "Your Airflow role does not allow this: reading GPU jobs needs access to the GPU Jobs view, and "
            "cancel, stop and resume need permission to edit the DAG's task instances."
            if why in ("", "Forbidden")
            else why
        )
    else:
        message = str(exc.detail or ERROR_TITLES.get(exc.status_code, "Error"))
    title = ERROR_TITLES.get(exc.status_code, f"Error {exc.status_code}")
    return HTMLResponse(
        html.message_page(title, message, base=_base(request), refresh=None),
        status_code=exc.status_code,
        headers={k: v for k, v in headers.items() if k.lower() != "content-length"},
    )


def _invalid_parameters(exc: RequestValidationError) -> str:
    """``offset: Input should be a valid integer (got 'ten')``: each parameter FastAPI refused, with why."""
    lines = []
    for error in exc.errors():
        where = [str(part) for part in error.get("loc") or () if part not in ("query", "path", "body")]
        given = error.get("input")
        got = f" (got {given!r})" if isinstance(given, str | int | float) else ""
        lines.append(f"{'.'.join(where) or 'request'}: {error.get('msg') or 'invalid'}{got}")
    return "; ".join(lines) or "a parameter of the request is invalid"


async def _invalid_request(request: Request, exc: RequestValidationError) -> Response:
    """A page asked with a bad query parameter (``?offset=ten``) answers with a page naming it; the
    JSON API keeps FastAPI's 422 JSON."""
    if not _wants_page(request):
        return await request_validation_exception_handler(request, exc)
    status_code = HTTPStatus.UNPROCESSABLE_ENTITY
    return HTMLResponse(
        html.message_page(
            ERROR_TITLES[status_code], _invalid_parameters(exc), base=_base(request), refresh=None
        ),
        status_code=status_code,
    )


def create_app() -> FastAPI:
    """The app the plugin mounts at :data:`URL_PREFIX`: the JSON API's routes (``routes/api.py``), then
    the pages' (``routes/pages.py``), as module-level routers the way Airflow's edge3 provider builds
    its worker API (apache/airflow ``providers/edge3/src/airflow/providers/edge3/worker_api/app.py``).
    What the routes share, the index of every job, is the app's state: ``app.state.reads``."""
    app = FastAPI(
        title="GPU Jobs",
        description="Quota pools, queues and GPU jobs of the airflow-jobs-plugin provider.",
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )

    app.add_exception_handler(StarletteHTTPException, _error_response)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _invalid_request)  # type: ignore[arg-type]

    # The read model (readmodel/job_index.py): one compact index of every job for all readers, filled
    # once, then refreshed by creation window, never rebuilt from the whole namespace.
    cache: BuildCache[job_index.JobIndex] = BuildCache(cost=lambda index, took: index.took)
    app.state.reads = JobReads(cache)
    app.state.cluster_cache = cache

    app.include_router(api_router)
    app.include_router(pages_router)
    return app
