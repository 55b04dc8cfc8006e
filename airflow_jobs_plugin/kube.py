"""Async Kubernetes access: the resources the product touches, as raw dicts over one REST client.

The shell around the pure core. Bodies stay plain dicts (the core works on the API's JSON), which also
keeps Jobs and kubeflow MPIJobs (a custom resource without generated models) on one code path. The
client is built from the cncf provider's Kubernetes connection (``kubernetes_default``), so every
authentication mode that connection supports works here too.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

from airflow_jobs_plugin import DEFAULT_CONN_ID  # noqa: E402,F401  (re-exported)


@dataclass(frozen=True)
class Resource:
    """One Kubernetes resource type, addressed by its REST path."""

    group: str  # "" for the core API
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
            if sub:
                base += f"/{sub}"
        return base


JOBS = Resource("batch", "v1", "jobs", "Job")
MPIJOBS = Resource("kubeflow.org", "v2beta1", "mpijobs", "MPIJob")
PODS = Resource("", "v1", "pods", "Pod")
EVENTS = Resource("", "v1", "events", "Event")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")


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


class KubeClient:
    """A thin async REST client over ``kubernetes_asyncio``'s transport, speaking raw dicts.

    One instance is shared by everything in a process that talks to the same cluster (see
    :mod:`airflow_jobs_plugin.watch`), so it holds one connection pool.
    """

    def __init__(self, api: k8s_client.ApiClient):
        self._api = api

    # --- construction ---

    @classmethod
    async def from_connection(cls, conn_id: str = DEFAULT_CONN_ID) -> KubeClient:
        """Build a client from the cncf provider's Kubernetes connection (kube_config_path, kube_config,
        in_cluster, cluster_context, ...). Reads the connection itself: nothing secret passes through
        trigger kwargs."""
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook

        hook = AsyncKubernetesHook(conn_id=conn_id)
        # get_conn() loads the connection's configuration into hook.client_configuration; the client
        # it yields lives only for the block, so a long-lived client is built on the same configuration.
        async with hook.get_conn():
            pass
        return cls(k8s_client.ApiClient(configuration=hook.client_configuration))

    @classmethod
    async def from_kubeconfig(cls, path: str, context: str | None = None) -> KubeClient:
        configuration = k8s_client.Configuration()
        await k8s_config.load_kube_config(
            config_file=path, context=context, client_configuration=configuration
        )
        return cls(k8s_client.ApiClient(configuration=configuration))

    async def close(self) -> None:
        await self._api.close()

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
    ) -> Any:
        response = await self._send(
            method, path, query=query, body=body, content_type=content_type, timeout=timeout
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
    ):
        params = [(k, _query_value(v)) for k, v in query if v is not None]
        try:
            return await self._api.call_api(
                path,
                method,
                query_params=params,
                header_params={"Accept": "application/json", "Content-Type": content_type},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=timeout,
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

    async def create(self, resource: Resource, namespace: str, body: Mapping[str, Any]) -> dict:
        return await self._request("POST", resource.path(namespace), body=dict(body))

    async def get(self, resource: Resource, namespace: str, name: str) -> dict:
        return await self._request("GET", resource.path(namespace, name))

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
    ) -> dict:
        """The whole list object (``items`` and ``metadata.resourceVersion``)."""
        return await self._request(
            "GET",
            resource.path(namespace),
            query=[("labelSelector", label_selector), ("fieldSelector", field_selector)],
        )

    async def replace(self, resource: Resource, namespace: str, body: Mapping[str, Any]) -> dict:
        """PUT: a compare-and-swap when ``body.metadata.resourceVersion`` is set (409 if stale)."""
        name = body["metadata"]["name"]
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
    ) -> bool:
        """Delete; True if it was there. Background propagation so pods go with their job."""
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
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
        previous: bool = False,
    ) -> str:
        response = await self._send(
            "GET",
            PODS.path(namespace, pod, "log"),
            query=[
                ("container", container),
                ("tailLines", tail_lines),
                ("sinceSeconds", since_seconds),
                ("previous", previous or None),
            ],
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
    ) -> AsyncIterator[bytes]:
        """Yield the lines of a streaming response (watch, log follow). Errors before the stream
        starts raise :class:`KubeError`; a broken stream simply ends the iteration."""
        response = await self._send(
            method, path, query=query, timeout=(30.0, read_timeout) if read_timeout else None
        )
        try:
            if not 200 <= response.status <= 299:
                raise KubeError.from_status(response.status, _json_or_text(await response.read()))
            try:
                async for line in response.content:
                    if line.strip():
                        yield line
            except (asyncio.TimeoutError, OSError):
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
        self, namespace: str, pod: str, *, container: str | None = None, since_time_lines: int | None = None
    ) -> AsyncIterator[str]:
        query = [("container", container), ("follow", "true"), ("tailLines", since_time_lines)]
        async for line in self.stream("GET", PODS.path(namespace, pod, "log"), query, read_timeout=None):
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
