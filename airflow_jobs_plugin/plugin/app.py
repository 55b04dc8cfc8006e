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
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from http import HTTPStatus
from typing import Annotated, Any, Literal, TypeVar
from urllib.parse import urlencode

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import AccessView, DagAccessEntity, DagDetails
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag, requires_access_view
from fastapi import Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.exception_handlers import http_exception_handler, request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from airflow_jobs_plugin.cluster.kube import DEFAULT_CONN_ID, KubeClient, KubeError
from airflow_jobs_plugin.cluster.resources import name_problem
from airflow_jobs_plugin.jobs import actions, labels
from airflow_jobs_plugin.plugin import html, origin, sweep
from airflow_jobs_plugin.plugin.state_cache import BuildCache, full_collections_deferred
from airflow_jobs_plugin.queueing import quota
from airflow_jobs_plugin.readmodel import inspect, job_index, listing, nodes, schema, views

URL_PREFIX = "/airflow-jobs"
CONFIG_SECTION = "airflow_jobs"
T = TypeVar("T")
# What the plugin asks the auth manager about a DAG's task instances: reading them, or editing them.
DagMethod = Literal["GET", "PUT"]
Outcome = TypeVar("Outcome", actions.CancelOutcome, actions.ActionOutcome)
# inspect.cancel, inspect.stop, inspect.resume: (client, target, job name, by whom) -> what it did.
Door = Callable[[KubeClient, inspect.Target, str, str], Awaitable[Outcome]]


@dataclass(frozen=True)
class Settings:
    """Where the plugin reads the cluster: Airflow config section ``[airflow_jobs]``."""

    kubernetes_conn_id: str = DEFAULT_CONN_ID
    namespace: str = "default"
    quota_configmap: str | None = quota.DEFAULT_POLICY_CONFIGMAP
    quota_namespace: str | None = None
    # Every namespace to show, ``namespace`` first ([airflow_jobs] namespaces adds more).
    namespaces: tuple[str, ...] = ("default",)

    @classmethod
    def from_airflow_config(cls) -> Settings:
        from airflow_jobs_plugin import config

        namespace = config.get("namespace") or "default"
        return cls(
            kubernetes_conn_id=config.get("kubernetes_conn_id") or DEFAULT_CONN_ID,
            namespace=namespace,
            quota_configmap=config.get("quota_configmap") or None,
            quota_namespace=config.get("quota_namespace") or None,
            namespaces=config.namespaces(namespace, config.get("namespaces")),
        )

    def target(self, namespace: str | None = None) -> inspect.Target:
        """Where to read: ``namespace`` alone, or (by default) every configured namespace."""
        return inspect.Target(
            namespace=namespace or self.namespace,
            quota_configmap=self.quota_configmap,
            quota_namespace=self.quota_namespace or self.namespace,
            also=() if namespace else self.namespaces,
        )


def _require_names(namespace: str, name: str) -> None:
    """A URL's namespace and job name must be names Kubernetes could hold: ``/api/jobs/%2e%2e/x``
    would otherwise address another path of the API server (resources.segment refuses it too)."""
    problem = name_problem(namespace, name)
    if problem:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, problem)


def _settings() -> Settings:
    return Settings.from_airflow_config()


SettingsDep = Annotated[Settings, Depends(_settings)]


async def _with_cluster(settings: Settings, work: Callable[[KubeClient], Awaitable[T]]) -> T:
    """Run ``work`` on a client for the configured connection; cluster trouble becomes 404 / 502."""
    try:
        client = await KubeClient.from_connection(settings.kubernetes_conn_id)
    except Exception as exc:
        raise HTTPException(status.HTTP_502_BAD_GATEWAY, f"cannot reach the cluster: {exc}") from exc
    try:
        return await work(client)
    except inspect.JobNotFound as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, exc.args[0]) from exc
    except KubeError as exc:
        raise HTTPException(status.HTTP_502_BAD_GATEWAY, f"the cluster answered {exc}") from exc
    finally:
        await client.close()


# --- authorization on a job's DAG (the DAG is known only once the job is read) ---


def _team(dag_id: str | None) -> str | None:
    if not dag_id:
        return None
    from airflow.models.dag import DagModel

    return DagModel.get_team_name(dag_id)


def _may(user: Any, method: DagMethod, dag_id: str | None) -> bool:
    """Whether ``user`` may ``method`` (GET/PUT) task instances of ``dag_id``; no DAG means every DAG."""
    details = DagDetails(id=dag_id, team_name=_team(dag_id)) if dag_id else None
    return get_auth_manager().is_authorized_dag(
        method=method, access_entity=DagAccessEntity.TASK_INSTANCE, details=details, user=user
    )


def _require(user: Any, method: DagMethod, dag_id: str | None) -> None:
    if not _may(user, method, dag_id):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "Forbidden")


def may_act(user: Any, dag_id: str | None) -> bool:
    """Who may cancel, stop and resume a job: whoever may edit its DAG's task instances (mark them
    failed or success, clear them). One rule for every action and for showing the buttons."""
    return _may(user, "PUT", dag_id)


def _own_origins(request: Request) -> list[str]:
    """The origins this Airflow is reached at, by :func:`origin.own_origins`."""
    import sys

    from airflow.configuration import conf

    headers = request.headers
    return origin.own_origins(
        request.url.scheme,
        headers.get("host", request.url.netloc),
        forwarded_host=headers.get("x-forwarded-host"),
        forwarded_proto=headers.get("x-forwarded-proto"),
        base_url=conf.get("api", "base_url", fallback=None),
        trust_proxies=origin.trusts_proxies(sys.argv),
    )


def require_same_origin(request: Request, user: GetUserDep) -> None:
    """Refuse (403) a state-changing request sent with Airflow's session cookie from another origin.

    It depends on the signed-in user so that a request without credentials still gets Airflow's 401.
    """
    if origin.carries_bearer(request.headers.get("authorization")):
        return
    why = origin.refusal(request.headers.get("origin"), request.headers.get("referer"), _own_origins(request))
    if why is not None:
        raise HTTPException(status.HTTP_403_FORBIDDEN, why)


SameOrigin = Depends(require_same_origin)


def job_query(
    group: Annotated[list[str] | None, Query(description="only these groups (repeat or comma list)")] = None,
    user: Annotated[list[str] | None, Query(description="only jobs of these users")] = None,
    state: Annotated[
        list[str] | None, Query(description="only jobs in these states, e.g. RUNNING,QUEUED")
    ] = None,
    dag: Annotated[list[str] | None, Query(description="only jobs of these DAG ids")] = None,
    namespace: Annotated[list[str] | None, Query(description="only jobs of these namespaces")] = None,
    sort: Annotated[
        str | None,
        Query(description=f"column to sort jobs by, '-' for descending: {', '.join(listing.SORT_KEYS)}"),
    ] = None,
    offset: Annotated[int | None, Query(description="jobs to skip")] = None,
    limit: Annotated[int | None, Query(description=f"jobs per page, 1 to {listing.MAX_LIMIT}")] = None,
) -> listing.JobQuery:
    """The filter, sort and page a request asks for; 400 naming the parameter when it is unusable."""
    try:
        return listing.parse_query(
            group=group,
            user=user,
            state=state,
            dag=dag,
            namespace=namespace,
            sort=sort,
            offset=offset,
            limit=limit,
        )
    except listing.QueryError as exc:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from exc


JobQueryDep = Annotated[listing.JobQuery, Depends(job_query)]


def _base(request: Request) -> str:
    """Airflow's own base path (the mount point's parent), so links work under a base URL too."""
    root = str(request.scope.get("root_path") or "")
    return root[: -len(URL_PREFIX)] if root.endswith(URL_PREFIX) else root


# How often the index drops the finished jobs deleted since (a metadata-only LIST of every job: at
# 51,000 jobs about as costly as the orphan sweep's, so seldom). Unfinished jobs' deletions are seen
# at every refresh.
DELETION_SWEEP_SECONDS = 600.0


async def _keep_current(
    client: KubeClient, target: inspect.Target, previous: job_index.JobIndex | None
) -> job_index.JobIndex:
    """The index brought up to date: filled page by page when there is none yet, then refreshed by
    creation window (readmodel/job_index.py); now and then swept of deleted finished jobs. Runs in a worker
    thread on a loop of its own (state_cache.py). A fill, to the index frozen, runs with full garbage
    collections deferred (``state_cache.full_collections_deferred``)."""
    if previous is None:
        with full_collections_deferred():
            return await _up_to_date(client, target, None)
    return await _up_to_date(client, target, previous)


async def _up_to_date(
    client: KubeClient, target: inspect.Target, previous: job_index.JobIndex | None
) -> job_index.JobIndex:
    started = time.monotonic()
    fill = previous is None
    if previous is None:
        rows: list[job_index.IndexRow] = []
        async for part in inspect.read_in_pages(client, target):
            if not rows:
                # The events, policy and ledgers every page shares are long-lived too.
                _freeze_long_lived()
            rows.extend(job_index.rows_of(part))
            del part
        previous = job_index.filled(
            rows, datetime.fromtimestamp(time.time() - (time.monotonic() - started), timezone.utc)
        )
        del rows
    swept_at = started if fill else previous.swept_at
    if not fill and started - swept_at > DELETION_SWEEP_SECONDS:
        at = datetime.now(timezone.utc)
        keys = await inspect.read_job_keys(client, target)
        previous, swept_at = job_index.without_deleted(previous, keys, at), time.monotonic()
    fresh = time.monotonic()
    window = listing.Window(job_index.refresh_since(previous, previous.now), None)
    unlabelled = previous.unlabelled_open
    state = await inspect.read_window(client, target, window.selector(labels.CREATED), unlabelled)
    took = time.monotonic() - fresh
    index = dataclasses.replace(
        job_index.refreshed(previous, state, window, unlabelled, took), swept_at=swept_at
    )
    if fill:
        _freeze_long_lived()
    return index


def _freeze_long_lived() -> None:
    """Move every object alive now out of the garbage collector's generations (``gc.freeze``): the API
    server's start-up objects (Airflow's modules, its app) before the fill, and the index after it. A
    full collection walks every tracked object holding the GIL, whichever thread triggers it, and
    Airflow's event loop waits that long (1.5 to 4 s over the 2.7 GB the whole view used to hold);
    frozen objects are skipped, and the fill's and the sweep's garbage is collected as before."""
    import gc

    gc.freeze()


def _map_index(raw: str) -> int:
    """The task's map index; Airflow's task view leaves ``{MAP_INDEX}`` unfilled for unmapped tasks."""
    try:
        return int(raw)
    except ValueError:
        return -1


ReadAccess = Depends(requires_access_view(AccessView.CLUSTER_ACTIVITY))


async def _connect() -> tuple[KubeClient, inspect.Target]:
    settings = _settings()
    return await KubeClient.from_connection(settings.kubernetes_conn_id), settings.target()


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Run the orphan sweep for as long as the API server serves the app (see ``plugin/sweep.py``)."""
    task = asyncio.create_task(sweep.run_periodically(_connect), name="airflow-jobs-orphan-sweep")
    try:
        yield
    finally:
        task.cancel()
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


# The page's buttons post a form and land on the job page, which shows the action's one-line answer.
FORM_POST: dict[str, Any] = {
    "status_code": status.HTTP_303_SEE_OTHER,
    "response_class": RedirectResponse,
    "responses": {303: {"description": "to the job page, with the action's answer in ?notice="}},
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
    """The app the plugin mounts at :data:`URL_PREFIX`."""
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
    frozen: list[bool] = []
    app.state.cluster_cache = cache

    def builder(settings: Settings) -> Callable[[], Coroutine[Any, Any, job_index.JobIndex]]:
        target = settings.target()
        key = (settings.kubernetes_conn_id, target)

        async def build() -> job_index.JobIndex:
            previous = cache.peek(key)
            return await _with_cluster(settings, lambda c: _keep_current(c, target, previous))

        return build

    async def cluster_view(settings: Settings) -> job_index.JobIndex:
        """The index of every configured namespace (all readers), from the cache."""
        return await cache.get((settings.kubernetes_conn_id, settings.target()), builder(settings))

    async def newest_page(
        settings: Settings, query: listing.JobQuery
    ) -> tuple[views.Overview, listing.JobPage]:
        """The page ``airflow-jobs status`` reads (``inspect.read_status``): the page's jobs and the
        waiting ones whole, the rest as metadata of the newest creation windows, with pools and queues
        from the ledgers; no charts (they need every job). In a worker thread on a loop of its own."""
        target = settings.target()

        async def read() -> tuple[views.Overview, listing.JobPage]:
            # In chunks as large as the CLI's: the first page waits for each chunk before the next, and a
            # chunk of 5,000 events or metadata decodes in tens of milliseconds off the loop.
            found = await _with_cluster(
                settings, lambda c: inspect.read_status(c, target, query, chunk=inspect.STATUS_CHUNK)
            )
            view, page = listing.with_page(views.overview(found.state), query, found.page, found.total)
            return dataclasses.replace(view, charts=()), page

        return await asyncio.to_thread(lambda: asyncio.run(read()))

    async def overview_of(
        settings: Settings, user: Any, query: listing.JobQuery
    ) -> tuple[views.Overview, listing.JobPage]:
        key, build = (settings.kubernetes_conn_id, settings.target()), builder(settings)
        kept = cache.kept(key, build, start=False)
        if kept is None:
            if not frozen:  # before the process's first cluster read: see _freeze_long_lived
                frozen.append(True)
                _freeze_long_lived()
            if listing.by_metadata(query) and await asyncio.to_thread(_may, user, "GET", None):
                # Nothing built yet (a start, an idle spell): the newest page answers in seconds, then the
                # whole view builds behind it (not beside it: both are CPU under one GIL). Only for a
                # reader of every DAG, whose page needs no filtering after it was chosen; others wait.
                try:
                    return await newest_page(settings, query)
                finally:
                    cache.kept(key, build)
            kept = await cluster_view(settings)
        index = kept
        # Filtering 51,000 rows and asking the auth manager about each DAG is CPU and database work.
        return await asyncio.to_thread(
            job_index.page, index, query, lambda dag_id: _may(user, "GET", dag_id), index.now
        )

    async def state_for(
        client: KubeClient, settings: Settings, namespace: str, job: dict, index: job_index.JobIndex | None
    ) -> views.ClusterState:
        """What a job's page reads besides the job: its own pods (read afresh, one label-selected LIST)
        and, from the index, the waiting jobs, the events, policy, ledgers and Workloads; without an
        index at hand, those read around the job (``inspect.read_around_job``), never the namespace."""
        if index is None:
            return await inspect.read_around_job(client, settings.target(namespace), job)
        pods = await inspect.pods_of_job(client, job)
        kept = index.kept
        events = kept.owners.events_for(job, pods)
        return dataclasses.replace(kept, pods=tuple(pods), events=tuple(events))

    def index_for(settings: Settings, namespace: str) -> job_index.JobIndex | None:
        """The index a job page of ``namespace`` reads from, if one is kept; never waited for. A job page
        waiting for the index's fill (tens of seconds at 51,000 jobs, after a start or an idle spell)
        would make the page after an action wait that long though the job it shows was read afresh: so
        without a kept index the page reads what it needs around its job, and the fill starts (or goes
        on) behind it. None too for a namespace outside the index."""
        target = settings.target()
        if namespace not in target.namespaces:
            return None
        return cache.kept((settings.kubernetes_conn_id, target), builder(settings))

    async def detail_of(settings: Settings, user: Any, namespace: str, name: str) -> views.JobDetail:
        _require_names(namespace, name)

        # The job itself is read afresh (its page must show what an action just did); its pods, events
        # and queue come from the shared index, at most a few seconds old, or are read around the job
        # when none is kept (index_for). A job that is gone or not the reader's answers at once.
        async def read(client: KubeClient) -> views.JobDetail:
            job = await inspect.find_job(client, namespace, name)
            _require(user, "GET", views.dag_of(job))
            return await _detail(client, settings, namespace, job, index_for(settings, namespace))

        return await _with_cluster(settings, read)

    async def _detail(
        client: KubeClient,
        settings: Settings,
        namespace: str,
        job: dict,
        index: job_index.JobIndex | None,
    ) -> views.JobDetail:
        async def state_and_logs() -> tuple[views.ClusterState, tuple[inspect.LogTail, ...]]:
            state = await state_for(client, settings, namespace, job, index)
            # The logs are those of the pods just read: after them, not beside them.
            logs = await inspect.read_log_tails(client, namespace, job, state.owners.pods_for(job))
            return state, logs

        # The cached state keeps only the waiting jobs: the task try's other attempts are read afresh,
        # with one label-selected LIST, beside the pods and logs (they do not depend on each other).
        (state, logs), attempts = await asyncio.gather(
            state_and_logs(), inspect.attempts_of(client, namespace, job)
        )
        state = await with_attempts_pods(client, state, job, attempts, index)
        return await asyncio.to_thread(views.job_detail, state, job, logs, attempts)

    async def with_attempts_pods(
        client: KubeClient,
        state: views.ClusterState,
        job: dict,
        attempts: list[dict],
        index: job_index.JobIndex | None,
    ) -> views.ClusterState:
        """``state`` with the pods (and their events) of the task try's other attempts, read afresh
        beside each other: the Attempts table shows each attempt's exit codes and nodes from its own
        pods, which the index does not keep."""
        own = (job.get("metadata") or {}).get("uid")
        others = [a for a in attempts if (a.get("metadata") or {}).get("uid") != own]
        if not others:
            return state
        found = await asyncio.gather(*(inspect.pods_of_job(client, a) for a in others))
        pods = [*state.pods, *(p for ps in found for p in ps)]
        events = [*state.events]
        # From the index the state holds the job's own events; read around the job, all of them already.
        if index is not None:
            for other, its_pods in zip(others, found, strict=True):
                events.extend(index.kept.owners.events_for(other, its_pods))
        return dataclasses.replace(state, pods=tuple(pods), events=tuple(events))

    async def task_detail_of(
        settings: Settings, dag_id: str, task_id: str, run_id: str, map_index: int
    ) -> views.JobDetail:
        namespaces = settings.target().namespaces

        async def find(client: KubeClient) -> dict:
            for namespace in namespaces:
                try:
                    return await inspect.find_task_job(client, namespace, dag_id, task_id, run_id, map_index)
                except inspect.JobNotFound:
                    if namespace == namespaces[-1]:
                        raise
            raise AssertionError("unreachable: at least one namespace is configured")

        async def read(client: KubeClient) -> views.JobDetail:
            job = await find(client)
            namespace = str(job["metadata"].get("namespace") or settings.namespace)
            return await _detail(client, settings, namespace, job, index_for(settings, namespace))

        return await _with_cluster(settings, read)

    async def act(settings: Settings, user: Any, namespace: str, name: str, door: Door[Outcome]) -> Outcome:
        """Cancel, stop or resume (``door``: ``inspect.cancel``, ...) a job as ``user``, if they may edit
        its DAG."""
        _require_names(namespace, name)

        async def work(client: KubeClient) -> Outcome:
            target = settings.target(namespace)
            try:
                job = await inspect.find_job(client, target.namespace, name)
            except inspect.JobNotFound:
                job = None
            if job is not None and not may_act(user, views.dag_of(job)):
                raise HTTPException(status.HTTP_403_FORBIDDEN, "Forbidden")
            if job is None and not may_act(user, None):
                # A job already gone: only someone who may act on every DAG learns what happened to it.
                raise HTTPException(status.HTTP_404_NOT_FOUND, f"no GPU job {target.namespace}/{name}")
            try:
                return await door(client, target, name, user.get_name())
            finally:
                # Whatever the action changed, the next page shows it: the job is read again, on the
                # same client, and patched into the kept index (and into a build under way), not the
                # whole namespace rebuilt. The answer waits for the patch; the patch is small
                # (job_index.with_change: the job's row, pools, queues, the rows whose place moved).
                await refresh_job(client, settings, namespace, name)

        return await _with_cluster(settings, work)

    async def refresh_job(client: KubeClient, settings: Settings, namespace: str, name: str) -> None:
        target = settings.target()
        key = (settings.kubernetes_conn_id, target)
        if namespace not in target.namespaces or not cache.holds(key):
            return  # nothing read before the action is kept (another namespace's page reads it uncached)
        try:
            change = await inspect.read_change(client, target, namespace, name)
        except KubeError:
            cache.invalidate()  # the job could not be read again: no copy read before the action is kept
            return

        await cache.patch(key, lambda index: job_index.with_change(index, change))

    # --- JSON (typed: readmodel/schema.py; the page's formatting stays in plugin/html.py) ---

    def total_count(response: Response, page: listing.JobPage) -> None:
        """The size of the whole filtered job list, for clients paging ``/api/jobs``."""
        if page.total is not None:  # the page's overview counts every job it read
            response.headers["X-Total-Count"] = str(page.total)

    @app.get(
        "/api/overview",
        dependencies=[ReadAccess],
        response_model=schema.Overview,
        responses={**READ_ERRORS, 400: QUERY_ERROR},
        summary="Pools, queues, a page of jobs and the GPU usage charts",
    )
    async def api_overview(
        response: Response, settings: SettingsDep, user: GetUserDep, query: JobQueryDep
    ) -> schema.Overview:
        ov, page = await overview_of(settings, user, query)
        total_count(response, page)
        return schema.overview(ov, total=page.total, offset=page.offset, limit=page.limit, more=page.more)

    @app.get(
        "/api/pools",
        dependencies=[ReadAccess],
        response_model=list[schema.Pool],
        responses={**READ_ERRORS, 400: QUERY_ERROR},
        summary="Every group's quota, GPUs used and free, and what waits, per user too",
    )
    async def api_pools(settings: SettingsDep, user: GetUserDep, query: JobQueryDep) -> list[schema.Pool]:
        ov, _ = await overview_of(settings, user, query)
        return schema.pools(ov.pools)

    @app.get(
        "/api/queues",
        dependencies=[ReadAccess],
        response_model=list[schema.GroupQueue],
        responses={**READ_ERRORS, 400: QUERY_ERROR},
        summary="Each group's waiting jobs in order, with the pool's reason",
    )
    async def api_queues(
        settings: SettingsDep, user: GetUserDep, query: JobQueryDep
    ) -> list[schema.GroupQueue]:
        ov, _ = await overview_of(settings, user, query)
        return schema.queues(ov.queues)

    @app.get(
        "/api/jobs",
        dependencies=[ReadAccess],
        response_model=list[schema.Job],
        responses={**READ_ERRORS, 400: QUERY_ERROR},
        summary="A page of jobs; X-Total-Count carries how many match the filters",
    )
    async def api_jobs(
        response: Response, settings: SettingsDep, user: GetUserDep, query: JobQueryDep
    ) -> list[schema.Job]:
        ov, page = await overview_of(settings, user, query)
        total_count(response, page)
        return schema.jobs(ov.jobs)

    @app.get(
        "/api/jobs/{namespace}/{name}",
        response_model=schema.JobDetail,
        responses=JOB_ERRORS,
        summary="A job: its state, lifecycle, replicas, events, log tails and the actions that apply",
    )
    async def api_job(namespace: str, name: str, settings: SettingsDep, user: GetUserDep) -> schema.JobDetail:
        return schema.job_detail(await detail_of(settings, user, namespace, name))

    @app.get(
        "/api/tasks/{dag_id}/{task_id}/{run_id}",
        dependencies=[Depends(requires_access_dag("GET", DagAccessEntity.TASK_INSTANCE))],
        response_model=schema.JobDetail,
        responses=JOB_ERRORS,
        summary="The job of a task instance (its newest try's newest attempt)",
    )
    async def api_task_job(
        dag_id: str, task_id: str, run_id: str, settings: SettingsDep, map_index: str = Query("-1")
    ) -> schema.JobDetail:
        index = _map_index(map_index)
        return schema.job_detail(await task_detail_of(settings, dag_id, task_id, run_id, index))

    @app.post(
        "/api/jobs/{namespace}/{name}/cancel",
        dependencies=[SameOrigin],
        response_model=schema.CancelResult,
        responses=JOB_ERRORS,
        summary="Cancel the job: rule it Cancelled and delete it with its pods",
    )
    async def api_cancel(
        namespace: str, name: str, settings: SettingsDep, user: GetUserDep
    ) -> schema.CancelResult:
        return schema.cancel_result(await act(settings, user, namespace, name, inspect.cancel))

    @app.post(
        "/api/jobs/{namespace}/{name}/stop",
        dependencies=[SameOrigin],
        response_model=schema.ActionResult,
        responses=JOB_ERRORS,
        summary="Stop the job: suspend it, freeing its GPUs, until it is resumed",
    )
    async def api_stop(
        namespace: str, name: str, settings: SettingsDep, user: GetUserDep
    ) -> schema.ActionResult:
        return schema.action_result(await act(settings, user, namespace, name, inspect.stop))

    @app.post(
        "/api/jobs/{namespace}/{name}/resume",
        dependencies=[SameOrigin],
        response_model=schema.ActionResult,
        responses=JOB_ERRORS,
        summary="Resume a stopped job: back to its queue at its original place",
    )
    async def api_resume(
        namespace: str, name: str, settings: SettingsDep, user: GetUserDep
    ) -> schema.ActionResult:
        return schema.action_result(await act(settings, user, namespace, name, inspect.resume))

    # --- pages ---

    async def nodes_of(settings: Settings, user: Any) -> nodes.NodeView:
        view = await _with_cluster(settings, lambda c: inspect.read_nodes(c, settings.target()))
        return await asyncio.to_thread(nodes.for_reader, view, lambda dag_id: _may(user, "GET", dag_id))

    @app.get(
        "/api/nodes",
        dependencies=[ReadAccess],
        response_model=schema.Nodes,
        responses=READ_ERRORS,
        summary="Every node with GPUs: allocatable, used, free, and the jobs holding them",
    )
    async def api_nodes(settings: SettingsDep, user: GetUserDep) -> schema.Nodes:
        return schema.node_view(await nodes_of(settings, user))

    @app.get("/nodes", response_class=HTMLResponse, dependencies=[ReadAccess])
    async def nodes_page(request: Request, settings: SettingsDep, user: GetUserDep) -> HTMLResponse:
        return HTMLResponse(html.nodes_page(await nodes_of(settings, user), base=_base(request)))

    @app.get("/", response_class=HTMLResponse, dependencies=[ReadAccess])
    async def overview_page(
        request: Request, settings: SettingsDep, user: GetUserDep, query: JobQueryDep
    ) -> HTMLResponse:
        ov, page = await overview_of(settings, user, query)
        base = _base(request)
        nav = listing.pager_html(page, query, f"{base}{URL_PREFIX}/")
        return HTMLResponse(html.overview_page(ov, base=base, jobs_nav=nav))

    @app.get("/jobs/{namespace}/{name}", response_class=HTMLResponse)
    async def job_page(
        request: Request,
        namespace: str,
        name: str,
        settings: SettingsDep,
        user: GetUserDep,
        notice: str | None = Query(None, max_length=html.NOTICE_MAX),
    ) -> HTMLResponse:
        base = _base(request)
        try:
            detail = await detail_of(settings, user, namespace, name)
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

    @app.get(
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
        map_index: str = Query("-1"),
    ) -> HTMLResponse:
        base = _base(request)
        try:
            detail = await task_detail_of(settings, dag_id, task_id, run_id, _map_index(map_index))
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
        settings: Settings,
        user: Any,
        namespace: str,
        name: str,
        door: Door[Outcome],
    ) -> RedirectResponse:
        outcome = await act(settings, user, namespace, name, door)
        url = f"{_base(request)}{views.job_url(namespace, name)}?{urlencode({'notice': outcome.message[: html.NOTICE_MAX]})}"
        return RedirectResponse(url, status_code=status.HTTP_303_SEE_OTHER)

    @app.post("/jobs/{namespace}/{name}/cancel", dependencies=[SameOrigin], **FORM_POST)
    async def cancel_form(
        request: Request, namespace: str, name: str, settings: SettingsDep, user: GetUserDep
    ) -> RedirectResponse:
        return await form(request, settings, user, namespace, name, inspect.cancel)

    @app.post("/jobs/{namespace}/{name}/stop", dependencies=[SameOrigin], **FORM_POST)
    async def stop_form(
        request: Request, namespace: str, name: str, settings: SettingsDep, user: GetUserDep
    ) -> RedirectResponse:
        return await form(request, settings, user, namespace, name, inspect.stop)

    @app.post("/jobs/{namespace}/{name}/resume", dependencies=[SameOrigin], **FORM_POST)
    async def resume_form(
        request: Request, namespace: str, name: str, settings: SettingsDep, user: GetUserDep
    ) -> RedirectResponse:
        return await form(request, settings, user, namespace, name, inspect.resume)

    return app
