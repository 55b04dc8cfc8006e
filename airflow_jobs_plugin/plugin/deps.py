"""What every route of the GPU Jobs app depends on: where the cluster is, who may read and act, the
query a list asks for, and Airflow's base path. Each is a FastAPI dependency (or a plain function a
dependency calls), so a route names what it needs in its signature and a test overrides it there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import AccessView, DagAccessEntity, DagDetails
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_view
from fastapi import Depends, HTTPException, Query, Request, status

from airflow_jobs_plugin.cluster.kube import DEFAULT_CONN_ID
from airflow_jobs_plugin.cluster.resources import name_problem
from airflow_jobs_plugin.plugin import origin
from airflow_jobs_plugin.queueing import quota
from airflow_jobs_plugin.readmodel import inspect, listing

URL_PREFIX = "/airflow-jobs"
# What the plugin asks the auth manager about a DAG's task instances: reading them, or editing them.
DagMethod = Literal["GET", "PUT"]


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


def _own_site(request: Request) -> origin.OwnSite:
    """Where this Airflow is reached, by :func:`origin.own_site`: ``[api] base_url`` where it is set."""
    import sys

    from airflow.configuration import conf

    headers = request.headers
    return origin.own_site(
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
    why = origin.refusal(request.headers.get("origin"), request.headers.get("referer"), _own_site(request))
    if why is not None:
        raise HTTPException(status.HTTP_403_FORBIDDEN, why)


SameOrigin = Depends(require_same_origin)
ReadAccess = Depends(requires_access_view(AccessView.CLUSTER_ACTIVITY))


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
# The overview's bound on its queue and pool-user rows, for the page and the JSON alike.
QueueRows = Annotated[
    int,
    Query(
        ge=0,
        le=listing.MAX_QUEUE_ROWS,
        description="entries listed of each queue and users of each pool (the rest are counted: more, "
        "more_users); /api/queues and /api/pools list them all",
    ),
]


def _base(request: Request) -> str:
    """Airflow's own base path (the mount point's parent), so links work under a base URL too."""
    root = str(request.scope.get("root_path") or "")
    return root[: -len(URL_PREFIX)] if root.endswith(URL_PREFIX) else root


def _map_index(raw: str) -> int:
    """The task's map index; Airflow's task view leaves ``{MAP_INDEX}`` unfilled for unmapped tasks."""
    try:
        return int(raw)
    except ValueError:
        return -1
