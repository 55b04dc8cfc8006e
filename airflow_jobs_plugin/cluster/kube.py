"""Async Kubernetes access: the resources the product touches, as raw dicts over one REST client.

The shell around the pure core. Bodies stay plain dicts (the core works on the API's JSON), which also
keeps Jobs and kubeflow MPIJobs (a custom resource without generated models) on one code path. The
client is built from the cncf provider's Kubernetes connection (``kubernetes_default``), so every
authentication mode that connection supports works here too, and its credentials are renewed for as long
as the process lives (:class:`Credentials`, rules in :mod:`airflow_jobs_plugin.cluster.credentials`).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, TypeVar

from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

from airflow_jobs_plugin import DEFAULT_CONN_ID  # noqa: E402,F401  (re-exported)
from airflow_jobs_plugin.cluster import credentials as rules
from airflow_jobs_plugin.cluster.credentials import Credential, Kind
from airflow_jobs_plugin.cluster.objects import Meta
from airflow_jobs_plugin.cluster.resources import (  # noqa: F401  (re-exported)
    CONFIGMAPS,
    EVENTS,
    JOBS,
    LEASES,
    NODEPOOLS,
    NODES,
    PODS,
    Resource,
)

log = logging.getLogger(__name__)


# Kueue's Workloads (kubernetes-sigs/kueue v0.19.2, apis/kueue/v1beta2): served only where Kueue runs.
WORKLOADS = Resource("kueue.x-k8s.io", "v1beta2", "workloads", "Workload")
LOCAL_QUEUES = Resource("kueue.x-k8s.io", "v1beta2", "localqueues", "LocalQueue")
# Kueue's visibility API (v0.19.2 apis/visibility/v1beta2, pkg/visibility): a LocalQueue's pending
# Workloads and their positions, through the subresource ``pendingworkloads``. Served where Kueue's
# visibility server runs (its APIService), which clusters may leave out.
PENDING_IN_LOCAL_QUEUES = Resource("visibility.kueue.x-k8s.io", "v1beta2", "localqueues", "LocalQueue")


class KubeError(Exception):
    """An API call failed. ``status`` is the HTTP code (0 for a transport error), ``reason`` the
    Status reason (NotFound, AlreadyExists, Conflict, Expired, ...)."""

    def __init__(self, status: int, reason: str, message: str, body: Mapping[str, Any] | None = None):
        super().__init__(f"{status} {reason}: {message}" if status else f"{reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = dict(body or {})

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409 and self.reason != "AlreadyExists"

    @property
    def already_exists(self) -> bool:
        return self.status == 409 and self.reason == "AlreadyExists"

    @property
    def gone(self) -> bool:
        return self.status == 410

    @property
    def invalid(self) -> bool:
        """The API server's validation refused the object (422 Invalid): sending it again changes nothing."""
        return self.status == 422

    def field_causes(self, limit: int = 5) -> list[str]:
        """``field: message`` for each cause in the Status' ``details.causes`` (the field paths
        ``field.ErrorList`` names, k8s.io/apimachinery pkg/api/errors ``NewInvalid``), at most ``limit``."""
        details = self.body.get("details")
        causes = details.get("causes") if isinstance(details, Mapping) else None
        found = [
            f"{cause.get('field') or '<object>'}: {cause.get('message') or cause.get('reason') or ''}"
            for cause in (causes if isinstance(causes, list) else ())
            if isinstance(cause, Mapping)
        ]
        if len(found) > limit:
            found = [*found[:limit], f"and {len(found) - limit} more"]
        return found

    @property
    def transient(self) -> bool:
        """Worth retrying after a back-off: throttling, server trouble, or no answer at all."""
        return self.status in (0, 429, 500, 502, 503, 504)

    @classmethod
    def from_status(cls, status: int, payload: Any) -> KubeError:
        if isinstance(payload, Mapping) and payload.get("kind") == "Status":
            return cls(
                int(payload.get("code") or status),
                str(payload.get("reason") or "Unknown"),
                str(payload.get("message") or ""),
                payload,
            )
        return cls(status, "Unknown", str(payload)[:500])


# Back-off between repeats of an API call that failed transiently (429, 5xx, no answer), in seconds.
TRANSIENT_RETRY_FIRST = 0.2
TRANSIENT_RETRY_MAX = 10.0

T = TypeVar("T")


async def patiently(
    call: Callable[..., Awaitable[T]],
    *args: Any,
    log: logging.Logger | Any,
    tries: int | None = None,
) -> T:
    """``call(*args)``, repeated with a doubling back-off while the API answers with a transient error.

    Only for calls that are safe to repeat (reads, idempotent patches, a create whose AlreadyExists the
    caller adopts). ``tries`` bounds the attempts (``None``: until it answers), after which the last
    error propagates: a worker gives up and lets Airflow retry the task, a trigger waits it out.
    """
    delay = TRANSIENT_RETRY_FIRST
    attempt = 0
    while True:
        attempt += 1
        try:
            return await call(*args)
        except KubeError as exc:
            if not exc.transient or (tries is not None and attempt >= tries):
                raise
            log.warning("Kubernetes API: %s; trying again in %.1fs", exc, delay)
            await asyncio.sleep(delay)
            delay = min(TRANSIENT_RETRY_MAX, delay * 2)


# What a credential source yields: its kind, the Authorization header (None for a client certificate)
# and the expiry the source reported (an exec plugin's ``status.expirationTimestamp``).
Obtained = tuple[Kind, str | None, datetime | None]


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


# Connections for container logs, apart from the watch's and the calls' (see KubeClient.__init__): at
# most LOG_STREAM_CONNECTIONS follow streams (logstream.LogHub keeps to it; the containers past it are
# read in turn, logplan), and LOG_READ_CONNECTIONS for those reads, so a read never waits for a stream
# to end.
LOG_STREAM_CONNECTIONS = 500
LOG_READ_CONNECTIONS = 8

# Sends of one request the API server refuses with 401 before its answer stands: the first, a resend
# with renewed credentials, and renewals of credentials that expired in flight.
MAX_SENDS = 4


class Credentials:
    """One connection's credentials, renewed when :func:`~airflow_jobs_plugin.cluster.credentials.due` and
    after a 401, one renewal at a time however many requests ask at once."""

    def __init__(
        self,
        name: str,
        obtain: Callable[[], Awaitable[Obtained]],
        first: Credential,
        clock: Callable[[], datetime] = _utcnow,
    ):
        self.name = name
        self._obtain = obtain
        self._current = first
        self._clock = clock
        self._lock = asyncio.Lock()
        self._quiet_until: datetime | None = None
        self.renewals = 0  # for observability and tests

    @classmethod
    async def start(
        cls, name: str, obtain: Callable[[], Awaitable[Obtained]], clock: Callable[[], datetime] = _utcnow
    ) -> Credentials:
        creds = cls(name, obtain, Credential(Kind.STATIC, None, clock(), None), clock)
        creds._current = await creds._fetch(generation=0)
        return creds

    @property
    def credential(self) -> Credential:
        return self._current

    async def current(self) -> Credential:
        """The credential to send now, renewed first when it is due."""
        seen = self._current
        now = self._clock()
        if not rules.due(seen, now):
            return seen
        expired = seen.expires_at is not None and now >= seen.expires_at
        if not expired and self._quiet_until is not None and now < self._quiet_until:
            return seen  # an early renewal just failed: do not run the plugin for every request
        async with self._lock:
            if self._current is not seen:  # renewed while this request waited for the lock
                return self._current
            try:
                await self._renew()
            except KubeError:
                if seen.expires_at is not None and self._clock() >= seen.expires_at:
                    raise
                # Renewing ahead of time failed (a plugin hiccup): the old one still works for a while.
                self._quiet_until = self._clock() + rules.MIN_RENEW_INTERVAL
                log.warning("renewing the credentials of %s failed; using the current ones", self.name)
        return self._current

    async def refused(
        self, used: Credential, *, retried: bool, server_message: str, last: bool = False
    ) -> Credential:
        """The credential to resend a request refused with 401, or a :class:`KubeError` naming the
        connection when renewing does not help (or the request was ``last`` to be sent)."""
        async with self._lock:
            verdict = rules.after_unauthorized(used, self._current, retried=retried, now=self._clock())
            if last:
                verdict = rules.Verdict.GIVE_UP
            if verdict is rules.Verdict.RESEND:
                return self._current
            if verdict is rules.Verdict.RENEW:
                log.warning("Kubernetes API refused the credentials of %s; renewing them", self.name)
                await self._renew()
                return self._current
            raise KubeError(
                401, "Unauthorized", rules.refused_message(self.name, self._current, server_message)
            )

    async def _renew(self) -> None:
        self._current = await self._fetch(generation=self._current.generation + 1)
        self.renewals += 1

    async def _fetch(self, generation: int) -> Credential:
        try:
            kind, header, reported = await self._obtain()
        except KubeError:
            raise
        except Exception as exc:  # an exec plugin that failed, a token file that vanished
            raise KubeError(
                0, "CredentialsUnavailable", f"obtaining the credentials of {self.name} failed: {exc}"
            ) from exc
        now = self._clock()
        if reported is not None and reported.tzinfo is None:
            reported = reported.replace(tzinfo=timezone.utc)
        return Credential(kind, header, now, rules.expiry_of(kind, now, reported), generation)


# A kubeconfig user's impersonation (client-go's AuthInfo, k8s.io/client-go v0.36 tools/clientcmd/api/v1/
# types.go: "as", "as-uid", "as-groups", "as-user-extra"), which kubectl and client-go turn into
# Impersonate-* headers. kubernetes_asyncio's loader (36.1.0 config/kube_config.py) reads none of them.
IMPERSONATION_KEYS = ("as", "as-uid", "as-groups", "as-user-extra")


def kubeconfig_source(
    config: str | Mapping[str, Any] | None, context: str | None
) -> Callable[[], Awaitable[Obtained]]:
    """Credentials read afresh from a kubeconfig (a path, a parsed document, or None for the default
    location) by kubernetes_asyncio's own loader each time: a new ``KubeConfigLoader`` has no cached
    exec result, so it runs the exec plugin (``config/exec_provider.py``) and re-reads a ``tokenFile``
    (kubernetes_asyncio 35.0.1 ``config/kube_config.py`` ``load_from_exec_plugin``, ``_load_user_token``)."""

    async def obtain() -> Obtained:
        scratch = k8s_client.Configuration()
        if isinstance(config, Mapping):
            loader = await k8s_config.load_kube_config_from_dict(
                dict(config), context=context, client_configuration=scratch
            )
        else:
            loader = await k8s_config.load_kube_config(
                config_file=config, context=context, client_configuration=scratch, persist_config=False
            )
        # The loader's active user section (a kubernetes_asyncio internal, stable since 2019).
        user = getattr(loader, "_user", None) or {}
        impersonating = [key for key in IMPERSONATION_KEYS if key in user and user[key]]
        if impersonating:
            raise ValueError(
                f"its user impersonates ({', '.join(impersonating)}), which kubernetes_asyncio ignores: every "
                "request would be made as the impersonating identity itself; use a kubeconfig with that "
                "identity's own credentials (a service account's token: kubectl create token ACCOUNT)"
            )
        if "exec" in user:
            kind = Kind.EXEC
        elif "tokenFile" in user:
            kind = Kind.TOKEN_FILE
        else:
            kind = Kind.STATIC
        return kind, scratch.api_key.get("BearerToken"), getattr(loader, "exec_plugin_expiry", None)

    return obtain


def token_file_source(path: str) -> Callable[[], Awaitable[Obtained]]:
    """The in-cluster service-account token, which the kubelet rotates on disk."""

    async def obtain() -> Obtained:
        token = (await asyncio.to_thread(_read_text, path)).strip()
        if not token:
            raise ValueError(f"the service-account token file {path} is empty")
        return Kind.TOKEN_FILE, f"Bearer {token}", None

    return obtain


def _read_text(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        return fh.read()


async def _connection_source(hook: Any) -> Callable[[], Awaitable[Obtained]]:
    """Where the cncf hook found the connection's credentials, as a source to read them again.

    The same fields and precedence as ``AsyncKubernetesHook._load_config`` (apache-airflow-providers-cncf-
    kubernetes 10.25.0, ``hooks/kubernetes.py``): in_cluster, config_dict, kube_config_path, kube_config,
    else the default kubeconfig; the hook has already refused a connection that sets several.
    """
    from kubernetes_asyncio.config import incluster_config

    if getattr(hook, "_is_in_cluster", False):
        return token_file_source(incluster_config.SERVICE_TOKEN_FILENAME)
    context = hook._coalesce_param(hook.cluster_context, await hook._get_field("cluster_context"))
    if hook.config_dict:
        return kubeconfig_source(hook.config_dict, context)
    path = await hook._get_field("kube_config_path")
    if path:
        return kubeconfig_source(path, context)
    text = await hook._get_field("kube_config")
    if text:
        import yaml

        return kubeconfig_source(text if isinstance(text, Mapping) else yaml.safe_load(text), context)
    return kubeconfig_source(None, context)


# The Accept header of a metadata-only LIST (the media type kubectl and client-go's metadata client send).
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


class KubeClient:
    """A thin async REST client over ``kubernetes_asyncio``'s transport, speaking raw dicts.

    One instance is shared by everything in a process that talks to the same cluster (see
    :mod:`airflow_jobs_plugin.cluster.watch`), so it holds one connection pool.
    """

    def __init__(self, api: k8s_client.ApiClient, credentials: Credentials | None = None):
        self._api = api
        # Log follows get a connection pool of their own (built on first use): kubernetes_asyncio
        # bounds a client's parallel requests by one aiohttp connector of
        # ``connection_pool_maxsize`` connections (client/rest.py RESTClientObject, default 100 in
        # client/configuration.py, v36.1.0), and a follow holds its connection for the container's
        # whole life: sharing one pool, a hundred running jobs would leave the shared watch's
        # reconnect, the admission's writes and every final read waiting for a free connection.
        self._log_api: k8s_client.ApiClient | None = None
        # The calls in flight on the shared pool, at most as many as it has connections. aiohttp builds
        # a request (its URL, headers, body, timers: a few kilobytes) before it waits for a connection
        # (client.py ClientSession._request, aiohttp 3.14: the request is made, then
        # ``self._connector.connect``), so 20,000 triggers asking at once, as they do when a triggerer
        # starts, held 20,000 built requests; past the pool they wait here, holding nothing yet. The
        # log connections are bounded by the log hub instead.
        pool = int(getattr(api.configuration, "connection_pool_maxsize", 0) or 0)
        self._in_flight: asyncio.Semaphore | None = asyncio.Semaphore(pool) if pool > 0 else None
        # None: the configuration's own authentication, never renewed (a client built by hand).
        self.credentials = credentials

    # --- construction ---

    @classmethod
    async def from_connection(cls, conn_id: str = DEFAULT_CONN_ID) -> KubeClient:
        """Build a client from the cncf provider's Kubernetes connection (kube_config_path, kube_config,
        in_cluster, cluster_context, ...). Reads the connection itself: nothing secret passes through
        trigger kwargs."""
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook

        hook = AsyncKubernetesHook(conn_id=conn_id)
        # get_conn() loads the connection's configuration into hook.client_configuration; the client
        # it yields lives only for the block, so a long-lived client is built on the same configuration
        # (server, TLS). Its credentials are read again from the same place whenever they are due.
        async with hook.get_conn():
            pass
        credentials = await Credentials.start(f"connection {conn_id!r}", await _connection_source(hook))
        return cls(k8s_client.ApiClient(configuration=hook.client_configuration), credentials)

    @classmethod
    async def from_kubeconfig(cls, path: str, context: str | None = None) -> KubeClient:
        configuration = k8s_client.Configuration()
        await k8s_config.load_kube_config(
            config_file=path, context=context, client_configuration=configuration, persist_config=False
        )
        credentials = await Credentials.start(f"kubeconfig {path!r}", kubeconfig_source(path, context))
        return cls(k8s_client.ApiClient(configuration=configuration), credentials)

    @classmethod
    async def in_cluster(cls) -> KubeClient:
        """A client for the pod this process runs in: its service account's token (renewed as the
        kubelet rotates the projected file) and the cluster's CA, as client-go's ``rest.InClusterConfig``."""
        from kubernetes_asyncio.config import incluster_config

        configuration = k8s_client.Configuration()
        incluster_config.load_incluster_config(client_configuration=configuration)
        credentials = await Credentials.start(
            "the pod's service account", token_file_source(incluster_config.SERVICE_TOKEN_FILENAME)
        )
        return cls(k8s_client.ApiClient(configuration=configuration), credentials)

    def sibling(self) -> KubeClient:
        """A client of the same cluster, identity and credentials (renewed once for both) on a
        connection pool of its own: for a caller whose requests must never wait behind this client's
        long-lived watches (a leader's Lease renewals; one namespace's watches beside another's)."""
        return KubeClient(k8s_client.ApiClient(configuration=self._api.configuration), self.credentials)

    async def close(self) -> None:
        await self._api.close()
        if self._log_api is not None:
            await self._log_api.close()

    def _log_stream_api(self) -> k8s_client.ApiClient:
        if self._log_api is None:
            configuration = copy.copy(self._api.configuration)
            configuration.connection_pool_maxsize = LOG_STREAM_CONNECTIONS + LOG_READ_CONNECTIONS
            self._log_api = k8s_client.ApiClient(configuration=configuration)
        return self._log_api

    # --- transport ---

    async def _request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, Any]] = (),
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = 30.0,
        accept: str = "application/json",
    ) -> Any:
        response = await self._send(
            method, path, query=query, body=body, content_type=content_type, timeout=timeout, accept=accept
        )
        try:
            raw = await response.read()
        finally:
            response.release()
        try:
            payload = json.loads(raw) if raw else {}
        except ValueError:
            payload = raw.decode("utf-8", "replace")
        if not 200 <= response.status <= 299:
            raise KubeError.from_status(response.status, payload)
        return payload

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, Any]] = (),
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | tuple[float, float] | None = 30.0,
        api: k8s_client.ApiClient | None = None,
        accept: str = "application/json",
    ):
        """The response of the first attempt the API server does not refuse with 401 (see
        :mod:`airflow_jobs_plugin.cluster.credentials` for when a refused request renews and resends)."""
        credentials = self.credentials
        if credentials is None:
            return await self._send_once(method, path, query, body, content_type, timeout, None, api, accept)
        credential = await credentials.current()
        sends = 0
        while True:
            response = await self._send_once(
                method, path, query, body, content_type, timeout, credential, api, accept
            )
            sends += 1
            if response.status != 401:
                return response
            try:
                refusal = _json_or_text(await response.read())
            finally:
                response.release()
            message = refusal.get("message", "") if isinstance(refusal, Mapping) else str(refusal)[:200]
            credential = await credentials.refused(
                credential, retried=sends > 1, server_message=message, last=sends >= MAX_SENDS
            )

    async def _send_once(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, Any]],
        body: Any,
        content_type: str,
        timeout: float | tuple[float, float] | None,
        credential: Credential | None,
        api: k8s_client.ApiClient | None = None,
        accept: str = "application/json",
    ):
        params = [(k, _query_value(v)) for k, v in query if v is not None]
        headers = {"Accept": accept, "Content-Type": content_type}
        auth_settings = ["BearerToken"]
        if credential is not None:
            # The header is set here, not through the configuration's api_key, so a refused request
            # knows exactly which credential it was sent with.
            auth_settings = []
            if credential.header:
                headers["Authorization"] = credential.header
        gate = self._in_flight if api is None or api is self._api else None
        try:
            async with gate if gate is not None else contextlib.nullcontext():
                return await (api or self._api).call_api(
                    path,
                    method,
                    query_params=params,
                    header_params=headers,
                    body=body,
                    auth_settings=auth_settings,
                    _preload_content=False,
                    # kubernetes_asyncio's stub says tuple[float], but its rest client reads a (connect, read) pair.
                    _request_timeout=timeout,  # type: ignore[arg-type]
                )
        except k8s_client.ApiException as exc:  # raised for error statuses on some transports
            try:
                payload = json.loads(exc.body) if exc.body else {}
            except ValueError:
                payload = exc.body
            raise KubeError.from_status(exc.status or 0, payload) from exc
        except (TimeoutError, OSError) as exc:
            raise KubeError(0, "Unreachable", f"{type(exc).__name__}: {exc}") from exc
        except Exception as exc:  # aiohttp.ClientError and friends: the API did not answer
            if type(exc).__module__.startswith("aiohttp"):
                raise KubeError(0, "Unreachable", f"{type(exc).__name__}: {exc}") from exc
            raise

    # --- verbs ---

    async def version(self, timeout: float = 30.0) -> dict:
        """The API server's ``/version``: the cheapest request every API server answers to any
        authenticated or anonymous caller (the ``system:public-info-viewer`` role), so it tells whether
        the server answers at all, within ``timeout`` seconds."""
        return await self._request("GET", "/version", timeout=timeout)

    @property
    def server(self) -> str:
        """The API server's URL, as the configuration names it."""
        return str(self._api.configuration.host or "")

    async def create(self, resource: Resource, namespace: str, body: Mapping[str, Any]) -> dict:
        return await self._request("POST", resource.path(namespace), body=dict(body))

    async def get(self, resource: Resource, namespace: str, name: str) -> dict:
        return await self._request("GET", resource.path(namespace, name))

    async def get_subresource(self, resource: Resource, namespace: str, name: str, sub: str) -> dict:
        return await self._request("GET", resource.path(namespace, name, sub))

    async def get_or_none(self, resource: Resource, namespace: str, name: str) -> dict | None:
        try:
            return await self.get(resource, namespace, name)
        except KubeError as exc:
            if exc.not_found:
                return None
            raise

    async def list(
        self,
        resource: Resource,
        namespace: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        metadata_only: bool = False,
    ) -> dict:
        """The whole list object (``items`` and ``metadata.resourceVersion``); with ``limit``, one chunk
        of it, and ``metadata.continue`` names the next (pass it as ``continue_token``).

        ``metadata_only`` asks for a ``PartialObjectMetadataList``: each item is only its ``metadata``
        (kind ``PartialObjectMetadata``), which the API server serves for every resource, custom ones
        included (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/response.go,
        ``asPartialObjectMetadataList``, Kubernetes 1.32). ``metadata.managedFields`` still come with
        it: the server copies the ObjectMeta whole (``meta.AsPartialObjectMetadata``).
        """
        return await self._request(
            "GET",
            resource.path(namespace),
            query=[
                ("labelSelector", label_selector),
                ("fieldSelector", field_selector),
                ("limit", limit),
                ("continue", continue_token),
            ],
            accept=METADATA_LIST if metadata_only else "application/json",
        )

    async def replace(self, resource: Resource, namespace: str, body: Mapping[str, Any]) -> dict:
        """PUT: a compare-and-swap when ``body.metadata.resourceVersion`` is set (409 if stale)."""
        name = Meta(body).name
        return await self._request("PUT", resource.path(namespace, name), body=dict(body))

    async def merge_patch(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        patch: Mapping[str, Any],
        *,
        sub: str | None = None,
    ) -> dict:
        return await self._request(
            "PATCH",
            resource.path(namespace, name, sub),
            body=dict(patch),
            content_type="application/merge-patch+json",
        )

    async def delete(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        *,
        propagation_policy: str | None = "Background",
        grace_period_seconds: int | None = None,
        preconditions: Mapping[str, str] | None = None,
    ) -> bool:
        """Delete; True if it was there. Background propagation so pods go with their job.
        ``preconditions`` (``uid``, ``resourceVersion``): 409 Conflict unless the object still matches."""
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if preconditions:
            body["preconditions"] = dict(preconditions)
        if propagation_policy:
            body["propagationPolicy"] = propagation_policy
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        try:
            await self._request("DELETE", resource.path(namespace, name), body=body)
        except KubeError as exc:
            if exc.not_found:
                return False
            raise
        return True

    async def read_log(
        self,
        namespace: str,
        pod: str,
        *,
        container: str | None = None,
        tail_lines: int | None = None,
        since_seconds: int | None = None,
        since_time: str | None = None,
        timestamps: bool = False,
        limit_bytes: int | None = None,
        previous: bool = False,
        log_pool: bool = False,
    ) -> str:
        """A container's log so far. ``log_pool``: send it on the log connections (a triggerer's
        incremental reads), never on the ones the watch and the API calls share."""
        response = await self._send(
            "GET",
            PODS.path(namespace, pod, "log"),
            query=[
                ("container", container),
                ("tailLines", tail_lines),
                ("sinceSeconds", since_seconds),
                ("sinceTime", since_time),
                ("timestamps", timestamps or None),
                ("limitBytes", limit_bytes),
                ("previous", previous or None),
            ],
            api=self._log_stream_api() if log_pool else None,
        )
        try:
            raw = await response.read()
        finally:
            response.release()
        if not 200 <= response.status <= 299:
            raise KubeError.from_status(response.status, _json_or_text(raw))
        return raw.decode("utf-8", "replace")

    async def stream(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, Any]],
        *,
        read_timeout: float | None,
        api: k8s_client.ApiClient | None = None,
    ) -> AsyncIterator[bytes]:
        """Yield the lines of a streaming response (watch, log follow). Errors before the stream
        starts raise :class:`KubeError`; a broken stream simply ends the iteration."""
        response = await self._send(
            method, path, query=query, timeout=(30.0, read_timeout) if read_timeout else None, api=api
        )
        try:
            if not 200 <= response.status <= 299:
                raise KubeError.from_status(response.status, _json_or_text(await response.read()))
            try:
                async for line in response.content:
                    if line.strip():
                        yield line
            except (TimeoutError, OSError):
                return
            except Exception as exc:  # aiohttp payload errors: the stream broke, the caller resumes
                if not type(exc).__module__.startswith("aiohttp"):
                    raise
                return
        finally:
            response.release()

    async def watch(
        self,
        resource: Resource,
        namespace: str,
        *,
        resource_version: str | None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> AsyncIterator[dict]:
        """Watch events as dicts (``type``, ``object``). A 410 arrives as an ``ERROR`` event."""
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", resource_version),
            ("labelSelector", label_selector),
            ("fieldSelector", field_selector),
            ("timeoutSeconds", timeout_seconds),
        ]
        async for line in self.stream(
            "GET", resource.path(namespace), query, read_timeout=timeout_seconds + 30
        ):
            try:
                yield json.loads(line)
            except ValueError:
                continue

    async def follow_log(
        self,
        namespace: str,
        pod: str,
        *,
        container: str | None = None,
        since_time: str | None = None,
        timestamps: bool = False,
        tail_lines: int | None = None,
    ) -> AsyncIterator[str]:
        query = [
            ("container", container),
            ("follow", "true"),
            ("sinceTime", since_time),
            ("timestamps", timestamps or None),
            ("tailLines", tail_lines),
        ]
        async for line in self.stream(
            "GET", PODS.path(namespace, pod, "log"), query, read_timeout=None, api=self._log_stream_api()
        ):
            yield line.decode("utf-8", "replace").rstrip("\n")


def _query_value(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def _json_or_text(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")
