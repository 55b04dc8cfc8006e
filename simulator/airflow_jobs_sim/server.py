"""The HTTP face of the simulated cluster: the Kubernetes REST API over aiohttp.

Serves discovery (plain and aggregated), /version, CRUD, watch, logs, server-side Tables, Status
errors, request counters and fault injection, plus a small JSON admin API under ``/_sim/``.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import hmac
import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import Any

import yaml
from aiohttp import web

from airflow_jobs_sim import apply as ssa
from airflow_jobs_sim import auth, errors, protobuf, rbac, schema, tables
from airflow_jobs_sim.config import ClusterConfig, ResourceType, addons_of, groups
from airflow_jobs_sim.errors import ApiError
from airflow_jobs_sim.exec import serve_exec
from airflow_jobs_sim.faults import Faults
from airflow_jobs_sim.log_options import parse_log_options
from airflow_jobs_sim.logs import LogStore
from airflow_jobs_sim.patch import apply_patch
from airflow_jobs_sim.selectors import Selector, make_selector
from airflow_jobs_sim.store import FrozenDict, Store

# Kueue's visibility API (an aggregated API of Kueue's, not a CRD): served where the Kueue add-on is.
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"

log = logging.getLogger(__name__)

VERSION_INFO = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0",
    "gitCommit": "70d3cc986aa8221cd1dfb1121852688902d3bf53",
    "gitTreeState": "clean",
    "buildDate": "2024-12-11T17:59:15Z",
    "goVersion": "go1.23.3",
    "compiler": "gc",
    "platform": "linux/amd64",
}
TABLE_CONTENT_TYPE = "application/json;as=Table;v=v1;g=meta.k8s.io"
DISCOVERY_CONTENT_TYPE = "application/json;g=apidiscovery.k8s.io;v={v};as=APIGroupDiscoveryList"
PATCH_TYPES = {
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/json-patch+json": "json",
}
APPLY_TYPE = "application/apply-patch+yaml"
DEFAULT_WATCH_TIMEOUT = 1800.0  # the real server's --min-request-timeout


def truthy(value: str | None) -> bool:
    """Query booleans as Go parses them; the Python clients send "True"/"False"."""
    return (value or "").lower() in ("true", "1", "t", "yes")


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _encoded(obj: Any) -> bytes:
    """``_dumps(obj)``, kept on a stored object: it never changes, so every GET, LIST and watch event of
    this version sends the same bytes, encoded once."""
    if type(obj) is FrozenDict:
        try:
            return obj.encoded
        except AttributeError:
            data = obj.encoded = _dumps(obj)
            return data
    return _dumps(obj)


def _json(obj: Any, status: int = 200, content_type: str = "application/json") -> web.Response:
    return web.Response(body=_encoded(obj), status=status, headers={"Content-Type": content_type})


def _list_json(head: dict, items: list) -> web.Response:
    """``_json({**head, "items": items})``, from the items' kept encodings."""
    body = _dumps(head)[:-1] + b',"items":[' + b",".join(_encoded(o) for o in items) + b"]}"
    return web.Response(body=body, headers={"Content-Type": "application/json"})


def _error_response(exc: ApiError, retry_after: int | None = None) -> web.Response:
    resp = _json(exc.status(), exc.code)
    if retry_after is not None and exc.code in (429, 503):
        resp.headers["Retry-After"] = str(retry_after)
    return resp


def _now_text() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _warn(resp: web.Response, warnings: tuple[str, ...]) -> web.Response:
    """Add RFC 7234 ``Warning: 299 - "..."`` headers, as the API server reports dropped fields."""
    for text in warnings:
        resp.headers.add("Warning", '299 - "{}"'.format(text.replace('"', '\\"')))
    return resp


# The body types a create or update may carry, and the answer types an object may be asked in
# (k8s.io/apiserver pkg/endpoints/handlers/negotiation, v1.36.3; "" is an absent header: JSON).
BODY_TYPES = ("", "application/json", "application/yaml", protobuf.CONTENT_TYPE)
ANSWER_TYPES = ("*/*", "application/*", "application/json", "application/yaml", protobuf.CONTENT_TYPE)


def _check_acceptable(request: web.Request) -> None:
    """406 when no media range of the Accept header names a type the server answers in."""
    accept = request.headers.get("Accept", "").strip()
    if not accept:
        return
    if any(part.split(";")[0].strip() in ANSWER_TYPES for part in accept.split(",")):
        return
    raise ApiError(
        406,
        "NotAcceptable",
        "406: Not Acceptable\n\nAvailable representations: " + ", ".join(ANSWER_TYPES[2:]),
        {},
    )


def _wants_table(request: web.Request) -> bool:
    return "as=Table" in request.headers.get("Accept", "")


METADATA_KINDS = ("PartialObjectMetadata", "PartialObjectMetadataList")


def _metadata_target(request: web.Request) -> tuple[str, str] | None:
    """The ``(kind, version)`` of the metadata-only form the Accept header asks for, if it asks for one.

    As kube-apiserver negotiates it (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/response.go,
    ``targetEncodingForTransform``, Kubernetes 1.32): ``as=PartialObjectMetadata`` or
    ``as=PartialObjectMetadataList`` in group ``meta.k8s.io``, version ``v1`` or ``v1beta1``. The first
    media type of the header that the server can serve wins, so a plain ``application/json`` before it
    means the whole objects.
    """
    for part in request.headers.get("Accept", "").split(","):
        _, *params = (p.strip() for p in part.split(";"))
        options = dict(p.split("=", 1) for p in params if "=" in p)
        if "as" not in options:
            return None
        if options["as"] in METADATA_KINDS and options.get("g") == "meta.k8s.io":
            if options.get("v") in ("v1", "v1beta1"):
                return options["as"], options["v"]
    return None


def _metadata_response(
    rtype: ResourceType, target: tuple[str, str], objects: list[dict], list_meta: dict | None
) -> web.Response:
    """``objects`` reduced to their metadata, as kube-apiserver's ``asPartialObjectMetadata(List)``
    (handlers/response.go, Kubernetes 1.32) answers: the whole ``metadata`` of each object (managedFields
    included: ``meta.AsPartialObjectMetadata`` copies the ObjectMeta as it is), nothing of ``spec`` or
    ``status``. Each form is refused (406) for the other shape: a list asked as one object, one object
    asked as a list."""
    kind, version = target
    api_version = f"meta.k8s.io/{version}"
    if list_meta is not None and kind == "PartialObjectMetadata":
        raise errors.not_acceptable(
            "you requested PartialObjectMetadata, but the requested object is a list "
            f"(*{rtype.group or 'core'}.{rtype.kind}List)"
        )
    if list_meta is None and kind == "PartialObjectMetadataList":
        raise errors.not_acceptable(
            "you requested PartialObjectMetadataList, but the requested object is not a list "
            f"(*{rtype.group or 'core'}.{rtype.kind})"
        )
    partial = [
        {"kind": "PartialObjectMetadata", "apiVersion": api_version, "metadata": o["metadata"]}
        for o in objects
    ]
    content_type = f"application/json;as={kind};g=meta.k8s.io;v={version}"
    body = (
        partial[0]
        if list_meta is None
        else {"kind": kind, "apiVersion": api_version, "metadata": list_meta, "items": partial}
    )
    return web.Response(body=_dumps(body), headers={"Content-Type": content_type})


def _format_log_time(t: datetime) -> str:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"


# ---------------------------------------------------------------------------- discovery documents


def _resource_entries(rtype: ResourceType) -> list[dict]:
    main = {
        "name": rtype.plural,
        "singularName": rtype.singular,
        "namespaced": rtype.namespaced,
        "kind": rtype.kind,
        "verbs": list(rtype.verbs),
    }
    if rtype.short_names:
        main["shortNames"] = list(rtype.short_names)
    if rtype.categories:
        main["categories"] = list(rtype.categories)
    out = [main]
    for sub in rtype.subresources:
        verbs = ["get"] if sub == "log" else ["get", "patch", "update"]
        out.append(
            {
                "name": f"{rtype.plural}/{sub}",
                "singularName": "",
                "namespaced": rtype.namespaced,
                "kind": rtype.kind,
                "verbs": verbs,
            }
        )
    return out


def resource_list(api_version: str, addons: frozenset[str] = frozenset()) -> dict:
    """The APIResourceList of one group version."""
    resources = [e for r in groups(addons)[api_version] for e in _resource_entries(r)]
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": api_version,
        "resources": resources,
    }


def _aggregated_resource(rtype: ResourceType) -> dict:
    kind = {"group": rtype.group, "version": rtype.version, "kind": rtype.kind}
    entry: dict = {
        "resource": rtype.plural,
        "responseKind": kind,
        "scope": "Namespaced" if rtype.namespaced else "Cluster",
        "singularResource": rtype.singular,
        "verbs": list(rtype.verbs),
    }
    if rtype.short_names:
        entry["shortNames"] = list(rtype.short_names)
    if rtype.categories:
        entry["categories"] = list(rtype.categories)
    if rtype.subresources:
        entry["subresources"] = [
            {
                "subresource": sub,
                "responseKind": kind,
                "verbs": ["get"] if sub == "log" else ["get", "patch", "update"],
            }
            for sub in rtype.subresources
        ]
    return entry


def aggregated_discovery(core: bool, version: str = "v2", addons: frozenset[str] = frozenset()) -> dict:
    """The APIGroupDiscoveryList for /api (core) or /apis (named groups)."""
    items = []
    for api_version, rtypes in groups(addons).items():
        is_core = "/" not in api_version
        if is_core != core:
            continue
        group = rtypes[0].group
        items.append(
            {
                "metadata": {"name": group, "creationTimestamp": None},
                "versions": [
                    {
                        "version": rtypes[0].version,
                        "resources": [_aggregated_resource(r) for r in rtypes],
                        "freshness": "Current",
                    }
                ],
            }
        )
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": f"apidiscovery.k8s.io/{version}",
        "metadata": {},
        "items": items,
    }


def openapi_v3_root(addons: frozenset[str] = frozenset()) -> dict:
    """The /openapi/v3 index: one document per group version."""
    paths = {}
    for api_version in groups(addons):
        prefix = f"apis/{api_version}" if "/" in api_version else f"api/{api_version}"
        paths[prefix] = {"serverRelativeURL": f"/openapi/v3/{prefix}?hash={abs(hash(api_version)):X}"}
    return {"paths": paths}


def openapi_v3_group_version(api_version: str, addons: frozenset[str] = frozenset()) -> dict:
    """A minimal OpenAPI v3 document for one group version.

    It carries no schemas: only the PATCH operations with their group-version-kind and the
    ``fieldValidation`` query parameter, which is what kubectl looks for to hand validation to the server
    (so ``kubectl create -f`` / ``apply -f`` work without ``--validate=false``).
    """
    paths = {}
    for r in groups(addons)[api_version]:
        base = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
        path = (
            f"{base}/namespaces/{{namespace}}/{r.plural}/{{name}}"
            if r.namespaced
            else f"{base}/{r.plural}/{{name}}"
        )
        gvk = {"group": r.group, "version": r.version, "kind": r.kind}
        operation = {
            "operationId": f"patch{r.kind}",
            "parameters": [
                {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
                {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
            ],
            "responses": {"200": {"description": "OK"}},
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": gvk,
        }
        post = dict(operation, operationId=f"create{r.kind}", **{"x-kubernetes-action": "post"})
        paths[path] = {"patch": operation}
        paths[path.rsplit("/", 1)[0]] = {"post": post}
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": VERSION_INFO["gitVersion"]},
        "paths": paths,
        "components": {},
    }


def _served(addons: frozenset[str]) -> list[ResourceType]:
    return [r for rtypes in groups(addons).values() for r in rtypes]


def api_group(group: str, addons: frozenset[str] = frozenset()) -> dict:
    """The APIGroup document of one named group."""
    version = next(r.version for r in _served(addons) if r.group == group)
    gv = {"groupVersion": f"{group}/{version}", "version": version}
    return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": [gv], "preferredVersion": gv}


def api_group_list(addons: frozenset[str] = frozenset()) -> dict:
    """The APIGroupList of /apis."""
    names = []
    for r in _served(addons):
        if r.group and r.group not in names:
            names.append(r.group)
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [
            {k: v for k, v in api_group(g, addons).items() if k not in ("kind", "apiVersion")} for g in names
        ],
    }


# ---------------------------------------------------------------------------- the server


class ApiServer:
    """Request handling over a Store, a LogStore and Faults; build the app with :meth:`app`."""

    def __init__(
        self,
        store: Store,
        logs: LogStore,
        faults: Faults,
        config: ClusterConfig,
        controllers: Callable[[], Any] | None = None,
    ):
        self.store = store
        self.logs = logs
        self.faults = faults
        self.config = config
        self.counters: Counter[tuple[str, str]] = Counter()
        # Under RBAC: every resource request by who sent it, what it asked and whether RBAC allowed it.
        self.authorized: Counter[tuple[str, rbac.Request, bool]] = Counter()
        self._controllers = controllers or (lambda: None)
        self.address = ""
        # Add-on CRDs (Kueue) are served only by a cluster that installs them: elsewhere their paths
        # are 404 and discovery does not list them, as on a cluster without the CRDs.
        self._addons = addons_of(config)

    def now(self) -> datetime:
        """Current wall-clock time (timestamps and ages are real)."""
        return self.store.now()

    def app(self) -> web.Application:
        """The aiohttp application."""
        app = web.Application(middlewares=[self._middleware], client_max_size=64 * 1024 * 1024)
        app.router.add_get("/version", self._version)
        app.router.add_get("/version/", self._version)
        for path in ("/healthz", "/livez", "/readyz"):
            app.router.add_get(path, self._ok)
        app.router.add_get("/api", self._api)
        app.router.add_get("/api/", self._api)
        app.router.add_get("/apis", self._apis)
        app.router.add_get("/apis/", self._apis)
        app.router.add_route("*", "/_sim/{tail:.*}", self._admin)
        app.router.add_get("/openapi/v3", self._openapi_v3)
        app.router.add_get("/openapi/v3/{tail:.*}", self._openapi_v3)
        app.router.add_route("*", "/api/v1", self._group_version)
        app.router.add_route("*", "/api/v1/", self._group_version)
        app.router.add_route("*", "/api/v1/{tail:.*}", self._resource)
        app.router.add_get("/apis/{group}", self._group)
        app.router.add_get("/apis/{group}/", self._group)
        app.router.add_route("*", "/apis/{group}/{version}", self._group_version)
        app.router.add_route("*", "/apis/{group}/{version}/", self._group_version)
        app.router.add_route("*", "/apis/{group}/{version}/{tail:.*}", self._resource)
        app.router.add_route("*", "/{tail:.*}", self._not_found)
        return app

    # -- middleware: auth, errors
    @web.middleware
    async def _middleware(self, request: web.Request, handler):
        try:
            self._authenticate(request)
            return await handler(request)
        except ApiError as exc:
            retry = self.faults.retry_after("", "") if exc.code in (429, 503) else None
            return _error_response(exc, retry)
        except web.HTTPException:
            raise
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as exc:  # a server bug must still answer like an API server
            log.exception("simulated API server error on %s %s", request.method, request.path)
            return _error_response(errors.internal_error(str(exc)))

    def _authenticate(self, request: web.Request) -> None:
        """With a token configured every request must carry it, the ``/_sim/`` admin API included (it
        can create jobs that run commands in exec mode); only the health probes stay open, as
        kube-apiserver leaves ``/healthz``, ``/livez`` and ``/readyz`` to anonymous callers."""
        header = request.headers.get("Authorization", "")
        if not self.config.token:
            # No token required: a caller may still name itself by one of the configured identities (an
            # admission controller beside the tests' admin), as a service account's token does.
            found = auth.identity_of(self.config, header)
            if found is not None:
                request["sim.user"] = rbac.User(*found)
                rbac.CALLER.set(request["sim.user"])
            return
        if request.path in ("/healthz", "/livez", "/readyz"):
            return
        # With short-lived tokens (sim.auth) the configured token is their signing secret: whoever holds
        # it may mint tokens anyway, so the admin API also takes it as is.
        if request.path.startswith("/_sim/") and hmac.compare_digest(header, f"Bearer {self.config.token}"):
            return
        user = auth.authenticate(self.config, header, time.time())
        if user is None:
            raise errors.unauthorized()
        request["sim.user"] = rbac.User(*user)
        rbac.CALLER.set(request["sim.user"])
        if request.path.startswith("/_sim/") and rbac.MASTERS not in user[1]:
            raise errors.forbidden_request(
                "", "", f'User "{user[0]}" cannot {request.method.lower()} path "{request.path}"'
            )

    async def _ok(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _not_found(self, request: web.Request) -> web.Response:
        # /openapi/v2 and /openapi/v3 land here too: kubectl copes with their absence for get/delete/logs.
        return _json(
            ApiError(404, "NotFound", "the server could not find the requested resource").status(), 404
        )

    async def _openapi_v3(self, request: web.Request) -> web.Response:
        tail = request.match_info.get("tail", "")
        if not tail:
            return _json(openapi_v3_root(self._addons))
        api_version = tail.split("/", 1)[1] if "/" in tail else ""
        if not tail.startswith(("api/", "apis/")) or api_version not in groups(self._addons):
            return await self._not_found(request)
        return _json(openapi_v3_group_version(api_version, self._addons))

    async def _version(self, request: web.Request) -> web.Response:
        return _json(VERSION_INFO)

    def _aggregated_version(self, request: web.Request) -> str | None:
        accept = request.headers.get("Accept", "")
        if "as=APIGroupDiscoveryList" not in accept:
            return None
        for part in accept.split(","):
            if "as=APIGroupDiscoveryList" in part:
                if "v=v2beta1" in part:
                    return "v2beta1"
                if "v=v2" in part:
                    return "v2"
        return None

    async def _api(self, request: web.Request) -> web.Response:
        version = self._aggregated_version(request)
        if version:
            return _json(
                aggregated_discovery(True, version, self._addons),
                content_type=DISCOVERY_CONTENT_TYPE.format(v=version),
            )
        return _json(
            {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": self.address}],
            }
        )

    async def _apis(self, request: web.Request) -> web.Response:
        version = self._aggregated_version(request)
        if version:
            return _json(
                aggregated_discovery(False, version, self._addons),
                content_type=DISCOVERY_CONTENT_TYPE.format(v=version),
            )
        return _json(api_group_list(self._addons))

    async def _group(self, request: web.Request) -> web.Response:
        group = request.match_info["group"]
        if not any(r.group == group for r in _served(self._addons)):
            return await self._not_found(request)
        return _json(api_group(group, self._addons))

    async def _group_version(self, request: web.Request) -> web.Response:
        group = request.match_info.get("group", "")
        version = request.match_info.get("version", "v1")
        api_version = f"{group}/{version}" if group else version
        if api_version not in groups(self._addons) or request.method != "GET":
            return await self._not_found(request)
        return _json(resource_list(api_version, self._addons))

    # -- resource routing
    def _route(self, request: web.Request) -> tuple[ResourceType, str | None, str | None, str | None]:
        group = request.match_info.get("group", "")
        version = request.match_info.get("version", "v1")
        api_version = f"{group}/{version}" if group else version
        rtypes = {r.plural: r for r in groups(self._addons).get(api_version, [])}
        parts = [p for p in request.match_info["tail"].split("/") if p]
        if not parts:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        namespace = None
        if (
            parts[0] == "namespaces"
            and len(parts) >= 3
            and parts[2] in rtypes
            and rtypes[parts[2]].namespaced
        ):
            namespace, parts = parts[1], parts[2:]
        rtype = rtypes.get(parts[0])
        if rtype is None or len(parts) > 3:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        name = parts[1] if len(parts) > 1 else None
        sub = parts[2] if len(parts) > 2 else None
        if sub is not None and sub not in rtype.subresources:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return rtype, namespace, name, sub

    def _authorize(self, request: web.Request, attributes: rbac.Request, rtype: ResourceType) -> None:
        """Refuse what the cluster's RBAC objects do not allow the request's user (``sim/rbac.py``)."""
        user = request.get("sim.user") or rbac.User("system:anonymous", ("system:unauthenticated",))
        if rbac.MASTERS in user.groups:
            self.authorized[(user.name, attributes, True)] += 1
            return
        policy = rbac.Policy(
            roles={
                (r["metadata"].get("namespace") or "", r["metadata"]["name"]): r
                for r in self._views("roles")[0]
            },
            cluster_roles={r["metadata"]["name"]: r for r in self._views("clusterroles")[0]},
            role_bindings=self._views("rolebindings")[0],
            cluster_role_bindings=self._views("clusterrolebindings")[0],
        )
        allowed = rbac.allowed(policy, user, attributes)
        self.authorized[(user.name, attributes, allowed)] += 1
        if not allowed:
            raise errors.forbidden_request(
                rtype.group_resource, attributes.name, rbac.forbidden_message(user, attributes)
            )

    def _views(
        self,
        resource: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[list[dict], str]:
        """The stored objects themselves (``copy=False``) and the list's resourceVersion, for readers that
        only inspect or serialize them."""
        # Store.list_with_rv's annotation says `list` inside a class whose `list` method shadows the
        # builtin, which mypy cannot resolve; restated here so callers see the items' types.
        return self.store.list_with_rv(resource, namespace, label_selector, field_selector, copy=False)

    def _verb(self, method: str, name: str | None, query: Any) -> str:
        if method == "GET":
            if name is None:
                return "watch" if truthy(query.get("watch")) else "list"
            return "get"
        return {
            "POST": "create",
            "PUT": "update",
            "PATCH": "patch",
            "DELETE": "delete" if name else "deletecollection",
        }.get(method, "unknown")

    async def _resource(self, request: web.Request) -> web.StreamResponse:
        if request.match_info.get("group") == VISIBILITY_GROUP and "kueue" in self._addons:
            return self._pending_workloads(request)
        rtype, namespace, name, sub = self._route(request)
        query = request.query
        verb = self._verb(request.method, name, query)
        counted = f"{rtype.plural}/{sub}" if sub else rtype.plural
        self.counters[(verb, counted)] += 1
        delay = self.faults.latency_for(verb, counted)
        if delay > 0:
            await asyncio.sleep(delay)
        caller = request.get("sim.user")
        user = caller.name if caller is not None else ""
        injected = self.faults.error_for(verb, counted, user)
        if injected is not None:
            return _error_response(injected, self.faults.retry_after(verb, counted, user))
        if self.config.rbac:
            attributes = rbac.Request(verb, rtype.group, rtype.plural, sub or "", namespace or "", name or "")
            self._authorize(request, attributes, rtype)
        if verb == "unknown" or verb not in rtype.verbs and not (sub and verb in ("get", "update", "patch")):
            raise errors.method_not_allowed()
        if sub == "exec":  # the kubelet's streaming endpoint, served in exec mode (sim/exec.py)
            return await serve_exec(request, self.store, self._controllers(), namespace or "", name or "")
        if sub == "log":
            if verb != "get":
                raise errors.method_not_allowed()
            return await self._logs(request, namespace, name or "")
        if sub is not None and verb not in ("get", "update", "patch"):
            raise errors.method_not_allowed()
        _check_acceptable(request)
        if name is None and verb in ("create",) and rtype.namespaced and namespace is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if verb == "list":
            return self._list(request, rtype, namespace)
        if verb == "watch":
            return await self._watch(request, rtype, namespace)
        if verb == "get":
            obj = self.store.get(rtype.plural, name or "", namespace, copy=False)
            if _wants_table(request):
                return self._table_response(rtype, [obj], obj["metadata"]["resourceVersion"], query)
            target = _metadata_target(request)
            if target is not None:
                return _metadata_response(rtype, target, [obj], None)
            return _json(obj)
        if verb == "create":
            body, warnings = self._decoded(request, rtype, await self._body(request))
            if isinstance(body, dict):
                self._track(request, None, body, None)
            return _warn(_json(self.store.create(rtype.plural, body, namespace), 201), warnings)
        if verb == "update":
            body, warnings = self._decoded(request, rtype, await self._body(request))
            old = self._current(rtype, name or "", namespace)
            # A kind whose strategy allows it is created by a PUT of a missing object (201, as a create).
            creating = old is None and rtype.create_on_update and sub is None
            if isinstance(body, dict) and isinstance(body.get("metadata"), dict):
                if old is not None or creating:
                    self._track(request, old, body, sub)
            meta = body.get("metadata") if isinstance(body, dict) else None
            if not isinstance(meta, dict):
                raise errors.bad_request("the body of the request must be an object with metadata")
            if meta.get("name") and meta["name"] != name:
                raise errors.bad_request("the name of the object does not match the name on the URL")
            meta["name"] = name
            stored = self.store.update(rtype.plural, body, sub, namespace)
            return _warn(_json(stored, 201 if creating else 200), warnings)
        if verb == "patch":
            content_type = request.headers.get("Content-Type", "").split(";")[0].strip()
            if content_type == APPLY_TYPE:
                return await self._apply(request, rtype, namespace, name or "", sub)
            patch_type = PATCH_TYPES.get(content_type)
            if patch_type is None or (patch_type == "strategic" and rtype.group == "kubeflow.org"):
                raise errors.unsupported_media_type(content_type)
            body, warnings = await self._body(request, patch=True), ()
            if patch_type != "json":
                body, warnings = self._decoded(request, rtype, body)
            old = self._current(rtype, name or "", namespace)
            if old is not None:
                try:
                    projected = apply_patch(copy.deepcopy(old), body, patch_type)
                except ApiError:
                    projected = None  # the store answers the same error with the real write
                if isinstance(projected, dict):
                    fields = ssa.record_update(old, projected, self._manager(request), _now_text(), sub)
                    if patch_type == "json" and isinstance(body, list):
                        body = [*body, {"op": "add", "path": "/metadata/managedFields", "value": fields}]
                    elif isinstance(body, dict):
                        body = {**body, "metadata": {**(body.get("metadata") or {}), "managedFields": fields}}
            return _warn(
                _json(self.store.patch(rtype.plural, name or "", body, patch_type, namespace, sub)), warnings
            )
        if verb == "delete":
            return await self._delete(request, rtype, namespace, name or "")
        if verb == "deletecollection":
            options = await self._delete_options(request)
            deleted = self.store.delete_collection(
                rtype.plural,
                namespace,
                query.get("labelSelector"),
                query.get("fieldSelector"),
                options["grace"],
                options["policy"],
            )
            rv = str(self.store.current_rv())
            return _json(
                {
                    "kind": f"{rtype.kind}List",
                    "apiVersion": rtype.api_version,
                    "metadata": {"resourceVersion": rv},
                    "items": deleted,
                }
            )
        raise errors.method_not_allowed()

    # -- field ownership and server-side apply
    def _manager(self, request: web.Request) -> str:
        """The field manager: ``fieldManager``, else the user agent up to its first "/" (as upstream)."""
        manager = request.query.get("fieldManager")
        if manager:
            if len(manager) > 128:
                raise errors.bad_request("fieldManager: Too long: may not be longer than 128 characters")
            return manager
        return request.headers.get("User-Agent", "unknown").split("/", 1)[0] or "unknown"

    def _current(self, rtype: ResourceType, name: str, namespace: str | None) -> dict | None:
        try:
            return self.store.get(rtype.plural, name, namespace, copy=False)
        except ApiError:
            return None

    def _track(self, request: web.Request, old: dict | None, body: dict, sub: str | None) -> None:
        meta = body.setdefault("metadata", {})
        if isinstance(meta, dict):
            meta["managedFields"] = ssa.record_update(old, body, self._manager(request), _now_text(), sub)

    async def _apply(
        self, request: web.Request, rtype: ResourceType, namespace: str | None, name: str, sub: str | None
    ) -> web.Response:
        """PATCH with ``application/apply-patch+yaml``: create or merge, owning the applied fields."""
        if not request.query.get("fieldManager"):
            raise errors.bad_request("PATCH, application/apply-patch+yaml requires fieldManager to be set")
        raw = await request.read()
        try:
            config = yaml.safe_load(raw.decode() or "null")
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise errors.bad_request(f"error decoding YAML: {exc}") from None
        if not isinstance(config, dict):
            raise errors.bad_request("the apply configuration must be an object")
        if (config.get("apiVersion"), config.get("kind")) != (rtype.api_version, rtype.kind):
            raise errors.bad_request(
                f"the apply configuration's apiVersion and kind ({config.get('apiVersion')}, "
                f"{config.get('kind')}) must be {rtype.api_version}, {rtype.kind}"
            )
        config, warnings = self._decoded(request, rtype, config)
        config["apiVersion"], config["kind"] = rtype.api_version, rtype.kind
        meta = config.setdefault("metadata", {})
        if meta.get("name", name) != name:
            raise errors.bad_request("the name of the object does not match the name on the URL")
        meta["name"] = name
        manager, force = request.query["fieldManager"], truthy(request.query.get("force"))
        for _ in range(5):  # another writer between our read and our write: apply again on its result
            live = self._current(rtype, name, namespace)
            result = ssa.apply(
                copy.deepcopy(live) if live else None, config, manager, force, _now_text(), sub
            )
            if result.conflicts:
                raise errors.apply_conflict(
                    rtype.group_resource,
                    name,
                    ssa.conflict_message(result.conflicts),
                    [(c.manager, c.field) for c in result.conflicts],
                )
            try:
                if live is None:
                    if sub:
                        raise errors.not_found(rtype.group_resource, name)
                    return _warn(_json(self.store.create(rtype.plural, result.obj, namespace), 201), warnings)
                result.obj["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
                return _warn(_json(self.store.update(rtype.plural, result.obj, sub, namespace)), warnings)
            except ApiError as exc:
                if exc.code != 409 or exc.reason not in ("Conflict", "AlreadyExists"):
                    raise
        raise errors.conflict(rtype.group_resource, name)

    def _decoded(self, request: web.Request, rtype: ResourceType, body: Any) -> tuple[Any, tuple[str, ...]]:
        """The body as the server's decoder leaves it, and the warnings it owes the client."""
        mode = request.query.get("fieldValidation") or "Warn"
        if mode not in ("Ignore", "Warn", "Strict"):
            # The options are validated as an object of their own (k8s.io/apiserver
            # pkg/endpoints/handlers/create.go, update.go, patch.go, v1.36.3: ValidateCreateOptions ...).
            options = {"POST": "CreateOptions", "PUT": "UpdateOptions"}.get(request.method, "PatchOptions")
            raise errors.invalid(
                options,
                "",
                [errors.not_supported("fieldValidation", mode, ["", "Ignore", "Strict", "Warn"])],
                group="meta.k8s.io",
            )
        decoded = schema.decode(rtype.plural, rtype.kind, body, strict=mode == "Strict")
        warnings = () if mode == "Ignore" else tuple(f'unknown field "{f}"' for f in decoded.unknown)
        return decoded.obj, warnings

    async def _body(self, request: web.Request, patch: bool = False) -> Any:
        raw = await request.read()
        content_type = request.headers.get("Content-Type", "").split(";")[0].strip()
        if not patch and content_type not in BODY_TYPES:
            # k8s.io/apiserver pkg/endpoints/handlers/rest.go negotiation (v1.36.3): a create or update
            # body in another type is 415 (an absent Content-Type reads as JSON).
            raise ApiError(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: "
                + ", ".join(t for t in BODY_TYPES if t),
            )
        if content_type == "application/yaml":
            try:
                return yaml.safe_load(raw.decode() or "null")
            except (yaml.YAMLError, UnicodeDecodeError) as exc:
                raise errors.bad_request(f"couldn't get version/kind; yaml parse error: {exc}") from None
        if content_type == protobuf.CONTENT_TYPE:
            try:
                return protobuf.decode(raw)
            except protobuf.ProtobufError as exc:
                raise errors.unsupported_media_type(protobuf.CONTENT_TYPE, str(exc)) from None
        if content_type == "application/yaml":
            try:
                return yaml.safe_load(raw.decode() or "null")
            except (yaml.YAMLError, UnicodeDecodeError) as exc:
                raise errors.bad_request(f"error decoding YAML: {exc}") from None
        try:
            return json.loads(raw or b"null")
        except ValueError as exc:
            raise errors.bad_request(f"couldn't get version/kind; json parse error: {exc}") from None

    # -- list / table
    def _pending_workloads(self, request: web.Request) -> web.Response:
        """Kueue's visibility API (kubernetes-sigs/kueue v0.19.2, ``apis/visibility/v1beta2/types.go`` and
        ``pkg/visibility/storage/pending_workloads_{lq,cq}.go``), an aggregated API Kueue serves beside
        its CRDs: GET ``.../namespaces/<ns>/localqueues/<name>/pendingworkloads`` and
        ``.../clusterqueues/<name>/pendingworkloads``, with ``limit`` (default 1000, at most 100000) and
        ``offset``. Positions count from 0: in the ClusterQueue over all its pending Workloads, in the
        LocalQueue over that queue's. An unknown LocalQueue is 404; a LocalQueue whose ClusterQueue does
        not exist lists nothing; an unknown ClusterQueue is 404."""
        version = request.match_info.get("version", "")
        parts = [p for p in request.match_info["tail"].split("/") if p]
        namespace = None
        if len(parts) == 5 and parts[0] == "namespaces" and parts[2] == "localqueues":
            namespace, parts = parts[1], parts[2:]
        if (
            version not in ("v1beta1", "v1beta2")
            or len(parts) != 3
            or parts[2] != "pendingworkloads"
            or parts[0] not in ("localqueues", "clusterqueues")
            or (parts[0] == "localqueues") != (namespace is not None)
        ):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        plural, name = parts[0], parts[1]
        rtype = ResourceType(
            plural,
            plural[:-1],
            "LocalQueue" if namespace else "ClusterQueue",
            VISIBILITY_GROUP,
            version,
            namespaced=namespace is not None,
            subresources=("pendingworkloads",),
            verbs=("get",),
        )
        counted = f"{plural}/pendingworkloads"
        self.counters[("get", counted)] += 1
        injected = self.faults.error_for("get", counted)
        if injected is not None:
            return _error_response(injected, self.faults.retry_after("get", counted))
        if self.config.rbac:
            attributes = rbac.Request(
                "get", VISIBILITY_GROUP, plural, "pendingworkloads", namespace or "", name
            )
            self._authorize(request, attributes, rtype)
        if request.method != "GET":
            raise errors.method_not_allowed()
        try:
            limit = int(request.query.get("limit") or 1000)
            offset = int(request.query.get("offset") or 0)
        except ValueError as exc:
            raise errors.bad_request(f"limit and offset must be integers: {exc}") from exc
        limit, offset = min(max(limit, 0), 100_000), max(offset, 0)
        kueue = getattr(self._controllers(), "kueue", None)
        if namespace is not None:
            found = self.store.list("localqueues", namespace, field_selector=f"metadata.name={name}")
            if not found or kueue is None:
                raise errors.not_found(f"localqueue.{VISIBILITY_GROUP}", name)
            cluster_queue = (found[0].get("spec") or {}).get("clusterQueue") or ""
            pending = kueue.pending_workloads(cluster_queue) or []
            mine = [
                (index, wl)
                for index, wl in enumerate(pending)
                if wl["metadata"]["namespace"] == namespace
                and (wl.get("spec") or {}).get("queueName") == name
            ]
            chosen = [(index, offset + i, wl) for i, (index, wl) in enumerate(mine[offset : offset + limit])]
        else:
            pending = kueue.pending_workloads(name) if kueue is not None else None
            if pending is None:
                raise errors.not_found(f"clusterqueue.{VISIBILITY_GROUP}", name)
            seen: Counter[tuple[str, str]] = Counter()
            chosen = []
            for index, wl in enumerate(pending[: offset + limit]):
                queue = (wl["metadata"]["namespace"], (wl.get("spec") or {}).get("queueName") or "")
                if index >= offset:
                    chosen.append((index, seen[queue], wl))
                seen[queue] += 1
        items = [
            {
                "metadata": {
                    "name": wl["metadata"]["name"],
                    "namespace": wl["metadata"]["namespace"],
                    "creationTimestamp": wl["metadata"].get("creationTimestamp"),
                    "ownerReferences": [
                        {k: ref[k] for k in ("apiVersion", "kind", "name", "uid") if k in ref}
                        for ref in wl["metadata"].get("ownerReferences") or ()
                    ],
                },
                "priority": int((wl.get("spec") or {}).get("priority", 0)),
                "localQueueName": (wl.get("spec") or {}).get("queueName") or "",
                "positionInClusterQueue": in_cluster_queue,
                "positionInLocalQueue": in_local_queue,
            }
            for in_cluster_queue, in_local_queue, wl in chosen
        ]
        return _json(
            {
                "kind": "PendingWorkloadsSummary",
                "apiVersion": f"{VISIBILITY_GROUP}/{version}",
                "metadata": {"creationTimestamp": None},
                "items": items,
            }
        )

    def _list(self, request: web.Request, rtype: ResourceType, namespace: str | None) -> web.Response:
        query = request.query
        items, rv = self._views(
            rtype.plural, namespace, query.get("labelSelector"), query.get("fieldSelector")
        )
        meta: dict = {"resourceVersion": rv}
        limit = int(query.get("limit") or 0)
        token = query.get("continue")
        if token:
            try:
                start = json.loads(base64.urlsafe_b64decode(token.encode()))
            except ValueError:
                raise ApiError(400, "BadRequest", "continue key is not valid: illegal base64 data") from None
            items = [
                o
                for o in items
                if [o["metadata"].get("namespace", ""), o["metadata"]["name"]] > start["after"]
            ]
        if limit > 0 and len(items) > limit:
            last = items[limit - 1]["metadata"]
            items, rest = items[:limit], len(items) - limit
            key = {"after": [last.get("namespace", ""), last["name"]], "rv": rv}
            meta["continue"] = base64.urlsafe_b64encode(json.dumps(key).encode()).decode()
            meta["remainingItemCount"] = rest
        if _wants_table(request):
            return self._table_response(rtype, items, rv, query, meta)
        target = _metadata_target(request)
        if target is not None:
            return _metadata_response(rtype, target, items, meta)
        return _list_json(
            {"kind": f"{rtype.kind}List", "apiVersion": rtype.api_version, "metadata": meta}, items
        )

    def _table_response(
        self, rtype: ResourceType, objects: list[dict], rv: str, query: Any, meta: dict | None = None
    ) -> web.Response:
        include = query.get("includeObject") or "PartialObjectMetadata"
        body = tables.table(rtype.plural, objects, self.now(), rv, include)
        if meta:
            body["metadata"].update({k: v for k, v in meta.items() if k != "resourceVersion"})
        return _json(body, content_type=TABLE_CONTENT_TYPE)

    # -- delete
    async def _delete_options(self, request: web.Request) -> dict:
        query = request.query
        body: dict = {}
        if request.can_read_body:
            raw = await request.read()
            if raw.strip():
                try:
                    body = json.loads(raw) or {}
                except ValueError as exc:
                    raise errors.bad_request(f"couldn't get version/kind; json parse error: {exc}") from None
        grace = body.get("gracePeriodSeconds")
        if query.get("gracePeriodSeconds") not in (None, ""):
            grace = int(query["gracePeriodSeconds"])
        policy = body.get("propagationPolicy") or query.get("propagationPolicy") or None
        orphan = body.get("orphanDependents")
        if query.get("orphanDependents") not in (None, ""):
            orphan = truthy(query.get("orphanDependents"))
        if policy is None and orphan is not None:
            policy = "Orphan" if orphan else "Background"
        dry_run = body.get("dryRun") or query.getall("dryRun", [])
        return {
            "grace": grace,
            "policy": policy,
            "preconditions": body.get("preconditions"),
            "dry_run": bool(dry_run),
        }

    async def _delete(
        self, request: web.Request, rtype: ResourceType, namespace: str | None, name: str
    ) -> web.Response:
        options = await self._delete_options(request)
        if options["dry_run"]:
            return _json(self.store.get(rtype.plural, name, namespace))
        obj, gone = self.store.delete_ex(
            rtype.plural, name, namespace, options["grace"], options["policy"], options["preconditions"]
        )
        if not gone or rtype.plural == "pods":
            status = 202 if not gone and options["policy"] == "Foreground" else 200
            return _json(obj, status)
        return _json(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": {
                    "name": name,
                    **({"group": rtype.group} if rtype.group else {}),  # omitempty
                    "kind": rtype.plural,
                    "uid": obj["metadata"]["uid"],
                },
            }
        )

    # -- watch
    async def _watch(
        self, request: web.Request, rtype: ResourceType, namespace: str | None
    ) -> web.StreamResponse:
        query = request.query
        selector = make_selector(query.get("labelSelector"), query.get("fieldSelector"), rtype)
        as_table = _wants_table(request)
        include = query.get("includeObject") or "PartialObjectMetadata"
        timeout = float(query.get("timeoutSeconds") or DEFAULT_WATCH_TIMEOUT)
        bookmarks = truthy(query.get("allowWatchBookmarks"))
        send_initial = truthy(query.get("sendInitialEvents"))
        rv_text = query.get("resourceVersion") or ""
        since = None if rv_text in ("", "0") or send_initial else _parse_rv(rv_text)

        resp = web.StreamResponse(status=200)
        resp.content_type = TABLE_CONTENT_TYPE if as_table else "application/json"
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        writer = _WatchWriter(resp, rtype, as_table, include, self.now)
        target = None if as_table else _metadata_target(request)
        # A watch sends one object per event: kube-apiserver turns each into PartialObjectMetadata when
        # asked; asked for a List, the transform fails per object and the whole object goes out instead
        # (watchEmbeddedEncoder.doEncode in handlers/response.go, Kubernetes 1.32).
        writer.metadata_version = target[1] if target and target[0] == "PartialObjectMetadata" else None

        if self.faults.take_gone():
            await writer.error(errors.gone(rv_text or "0", self.store.current_rv()))
            return resp

        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()

        def on_event(rv: int, event_type: str, resource: str, obj: dict, prev: dict | None) -> None:
            if resource == rtype.plural:
                loop.call_soon_threadsafe(queue.put_nowait, ("event", rv, event_type, obj, prev))

        try:
            replay, start_rv, unregister = self.store.watch(rtype.plural, since, on_event)
        except ApiError as exc:
            await writer.error(exc)
            return resp

        def close() -> None:
            loop.call_soon_threadsafe(queue.put_nowait, ("close",))

        untrack = self.faults.register_watch(close)
        deadline = time.monotonic() + timeout
        next_bookmark = time.monotonic() + self.config.bookmark_interval
        try:
            await writer.events(
                _filtered(event_type, obj, prev, selector, namespace) for _, event_type, obj, prev in replay
            )
            if send_initial:
                await writer.bookmark(start_rv, initial_end=True)
            while True:
                now = time.monotonic()
                if now >= deadline:
                    break
                wait = min(deadline - now, 1.0)
                if bookmarks:
                    wait = max(0.0, min(wait, next_bookmark - now))
                try:
                    # Whatever is queued is sent at once: one write per turn of the loop, not per event, or
                    # a watch falls ever further behind the controllers' writes (measured: 16 s at 5,000
                    # pods starting).
                    item = (
                        queue.get_nowait()
                        if not queue.empty()
                        else await asyncio.wait_for(queue.get(), timeout=wait)
                    )
                except TimeoutError:
                    if request.transport is None or request.transport.is_closing():
                        break
                    if bookmarks and time.monotonic() >= next_bookmark:
                        next_bookmark = time.monotonic() + self.config.bookmark_interval
                        # Read under the store lock: every event up to this version is already queued
                        # ahead of the bookmark, so a client resuming from it misses nothing.
                        rv = self.store.current_rv()
                        loop.call_soon(queue.put_nowait, ("bookmark", rv))
                    continue
                batch = [item]
                while not queue.empty():
                    batch.append(queue.get_nowait())
                lines: list[bytes] = []
                closing = False
                for item in batch:
                    if item[0] == "close":
                        closing = True
                        break
                    if item[0] == "bookmark":
                        lines.append(writer.bookmark_line(item[1]))
                        continue
                    _, rv, event_type, obj, prev = item
                    lines.append(writer.event_line(*_filtered(event_type, obj, prev, selector, namespace)))
                await writer.write(lines)
                if closing:
                    break
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            unregister()
            untrack()
        try:
            await resp.write_eof()
        except (ConnectionResetError, RuntimeError):
            pass
        return resp

    # -- logs
    async def _logs(self, request: web.Request, namespace: str | None, name: str) -> web.StreamResponse:
        query = request.query
        ns = namespace or "default"
        options = parse_log_options(query, name)  # refused before the pod is looked up, as upstream
        pod = self.store.get("pods", name, ns)
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        main = [c["name"] for c in spec.get("containers") or []]
        init = [c["name"] for c in spec.get("initContainers") or []]
        container = query.get("container")
        if not container:
            if len(main) != 1:
                detail = (
                    f"a container name must be specified for pod {name}, choose one of: [{' '.join(main)}]"
                )
                if init:
                    detail += f" or one of the init containers: [{' '.join(init)}]"
                raise errors.bad_request(detail)
            container = main[0]
        elif container not in main and container not in init:
            raise errors.bad_request(f"container {container} is not valid for pod {name}")
        statuses = (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or [])
        cstatus = next((s for s in statuses if s.get("name") == container), None)
        restart = self.logs.latest_restart(ns, name, container)
        if cstatus is not None:
            restart = int(cstatus.get("restartCount") or 0)
        if truthy(query.get("previous")):
            run = self.logs.read(ns, name, container, restart - 1) if restart else None
            if not restart or run is None:
                raise errors.bad_request(
                    f'previous terminated container "{container}" in pod "{name}" not found'
                )
            restart = restart - 1
        else:
            restart = restart or 0
            run = self.logs.read(ns, name, container, restart)
            if run is None:
                if not spec.get("nodeName"):
                    return web.Response(text="", content_type="text/plain")
                waiting = ((cstatus or {}).get("state") or {}).get("waiting") or {}
                if cstatus is None or waiting:
                    why = waiting.get("reason") or (
                        "PodInitializing" if container in main and init else "ContainerCreating"
                    )
                    raise errors.bad_request(
                        f'container "{container}" in pod "{name}" is waiting to start: {why}'
                    )
        lines = list(run.lines) if run else []
        since_cut = None
        if options.since_seconds is not None:
            since_cut = self.now().timestamp() - options.since_seconds
        elif options.since is not None:
            since_cut = options.since.timestamp()
        if since_cut is not None:
            lines = [entry for entry in lines if entry[0].timestamp() >= since_cut]
        if options.tail_lines is not None:
            tail = options.tail_lines
            lines = lines[-tail:] if tail > 0 else []
        stamps = truthy(query.get("timestamps"))
        limit = options.limit_bytes or 0

        def render(entries: list) -> bytes:
            if stamps:
                return "".join(f"{_format_log_time(t)} {text}\n" for t, text in entries).encode()
            return "".join(f"{text}\n" for _, text in entries).encode()

        if not truthy(query.get("follow")):
            data = render(lines)
            return web.Response(body=data[:limit] if limit else data, content_type="text/plain")

        resp = web.StreamResponse(status=200)
        resp.content_type = "text/plain"
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()

        def listener(l_ns: str, l_pod: str, l_container: str) -> None:
            if (l_ns, l_pod) == (ns, name):
                loop.call_soon_threadsafe(wake.set)

        unlisten = self.logs.listen(listener)
        sent = len(run.lines) if run else 0
        written = 0
        uid = pod["metadata"]["uid"]
        try:
            chunk = render(lines)
            if chunk:
                await resp.write(chunk)
                written += len(chunk)
            while not (run and run.closed) and not (limit and written >= limit):
                try:
                    await asyncio.wait_for(wake.wait(), timeout=1.0)
                except TimeoutError:
                    pass
                wake.clear()
                if request.transport is None or request.transport.is_closing():
                    break
                try:
                    current = self.store.get("pods", name, ns)
                except ApiError:
                    break
                if current["metadata"]["uid"] != uid:
                    break
                run = self.logs.read(ns, name, container, restart)
                if run is None:
                    continue
                fresh = list(run.lines[sent:])
                sent = len(run.lines)
                if fresh:
                    chunk = render(fresh)
                    await resp.write(chunk)
                    written += len(chunk)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            unlisten()
        try:
            await resp.write_eof()
        except (ConnectionResetError, RuntimeError):
            pass
        return resp

    # -- admin
    async def _admin(self, request: web.Request) -> web.Response:
        parts = [p for p in request.match_info["tail"].split("/") if p]
        controllers = self._controllers()
        body: dict = {}
        if request.method in ("POST", "PUT") and request.can_read_body:
            content_type = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
            if content_type not in ("", "application/json"):
                raise errors.unsupported_body_type(content_type)
            raw = await request.read()
            body = json.loads(raw) if raw.strip() else {}
        if parts == ["counters"]:
            return _json(
                {
                    "counters": [
                        {"verb": v, "resource": r, "count": n} for (v, r), n in sorted(self.counters.items())
                    ]
                }
            )
        if parts == ["faults"]:
            if request.method == "DELETE":
                self.faults.clear()
            elif request.method in ("POST", "PUT"):
                try:
                    self.faults.configure(body)
                except (TypeError, ValueError) as exc:
                    raise errors.bad_request(str(exc)) from None
            return _json(self.faults.snapshot())
        if parts == ["faults", "drop-watches"] and request.method == "POST":
            return _json({"dropped": self.faults.drop_watches()})
        if (
            len(parts) == 3
            and parts[0] == "nodes"
            and parts[2] in ("lose", "restore")
            and request.method == "POST"
        ):
            self.store.get("nodes", parts[1])
            if controllers is None:
                raise errors.service_unavailable("the simulated cluster runs without controllers")
            getattr(controllers, "lose_node" if parts[2] == "lose" else "restore_node")(parts[1])
            return _json({"node": parts[1], "action": parts[2]})
        if len(parts) == 4 and parts[0] == "pods" and parts[3] == "evict" and request.method == "POST":
            self.store.get("pods", parts[2], parts[1])
            if controllers is None:
                raise errors.service_unavailable("the simulated cluster runs without controllers")
            kwargs = {"message": body["message"]} if body.get("message") else {}
            controllers.evict_pod(parts[1], parts[2], **kwargs)
            return _json({"pod": f"{parts[1]}/{parts[2]}", "action": "evict"})
        return await self._not_found(request)


def _parse_rv(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise errors.bad_request(
            f'resourceVersion: Invalid value: "{text}": strconv.ParseUint: parsing "{text}": invalid syntax'
        ) from None


def _filtered(
    event_type: str, obj: dict, prev: dict | None, selector: Selector, namespace: str | None
) -> tuple[str | None, dict]:
    """The event a selector-filtered watch sends: an object entering the selection is ADDED, one leaving
    it DELETED, like the real watch cache."""

    def matches(o: dict | None) -> bool:
        if o is None:
            return False
        if namespace and o["metadata"].get("namespace") != namespace:
            return False
        return selector.empty or selector.matches(o)

    if event_type == "ADDED":
        return ("ADDED" if matches(obj) else None), obj
    if event_type == "DELETED":
        return ("DELETED" if matches(prev or obj) else None), obj
    now_in, was_in = matches(obj), matches(prev)
    if now_in and was_in:
        return "MODIFIED", obj
    if now_in:
        return "ADDED", obj
    if was_in:
        return "DELETED", obj
    return None, obj


class _WatchWriter:
    """Writes watch events, one JSON object per line, flushed per event."""

    def __init__(self, resp: web.StreamResponse, rtype: ResourceType, as_table: bool, include: str, now):
        self.resp = resp
        self.rtype = rtype
        self.as_table = as_table
        self.include = include
        self.now = now
        self.headers_sent = False
        # Set: each object goes out as PartialObjectMetadata of meta.k8s.io/<this version>.
        self.metadata_version: str | None = None

    async def _send(self, event: dict) -> None:
        await self.resp.write(_dumps(event) + b"\n")

    async def write(self, lines: Iterable[bytes]) -> None:
        """Send several lines in one write (nothing for none)."""
        data = b"".join(lines)
        if data:
            await self.resp.write(data)

    async def events(self, events: Iterable[tuple[str | None, dict]]) -> None:
        await self.write(self.event_line(event_type, obj) for event_type, obj in events)

    def event_line(self, event_type: str | None, obj: dict) -> bytes:
        """The line of one event (empty when the watch does not send it)."""
        if event_type is None:
            return b""
        if self.as_table:
            body = tables.table(
                self.rtype.plural,
                [obj],
                self.now(),
                obj["metadata"]["resourceVersion"],
                self.include,
                not self.headers_sent,
            )
            self.headers_sent = True
            return _dumps({"type": event_type, "object": body}) + b"\n"
        if self.metadata_version is not None:
            partial = {
                "kind": "PartialObjectMetadata",
                "apiVersion": f"meta.k8s.io/{self.metadata_version}",
                "metadata": obj["metadata"],
            }
            return _dumps({"type": event_type, "object": partial}) + b"\n"
        # The bytes of _dumps({"type": ..., "object": obj}), with the object's kept encoding.
        return b'{"type":' + _dumps(event_type) + b',"object":' + _encoded(obj) + b"}\n"

    def bookmark_line(self, rv: int) -> bytes:
        return _dumps({"type": "BOOKMARK", "object": self._bookmark_object(rv, False)}) + b"\n"

    async def bookmark(self, rv: int, initial_end: bool = False) -> None:
        await self._send({"type": "BOOKMARK", "object": self._bookmark_object(rv, initial_end)})

    def _bookmark_object(self, rv: int, initial_end: bool) -> dict:
        meta: dict = {"resourceVersion": str(rv)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        if self.as_table:
            obj = {
                "kind": "Table",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": meta,
                "columnDefinitions": None,
                "rows": None,
            }
        else:
            obj = {"kind": self.rtype.kind, "apiVersion": self.rtype.api_version, "metadata": meta}
        return obj

    async def error(self, exc: ApiError) -> None:
        await self._send({"type": "ERROR", "object": exc.status()})
