"""Role-based access control as kube-apiserver's RBAC authorizer decides it (off by default).

Pure: requests and RBAC objects in, a decision out; the server (``server.py``) is the shell that asks.
The rules follow kubernetes/kubernetes v1.32:

- ``plugin/pkg/auth/authorizer/rbac/rbac.go`` (``Authorize``, ``RulesAllow``, ``RuleAllows``): a request
  is allowed when any rule of any role bound to the user allows it, through a ClusterRoleBinding (any
  namespace, and cluster-scoped resources) or a RoleBinding of the request's namespace (which may point
  at a Role of that namespace or at a ClusterRole). Nothing ever denies: no rule means no.
- ``pkg/apis/rbac/v1/evaluation_helpers.go``: verbs, API groups and resources match exactly or through
  ``*``; a subresource is asked for as ``resource/subresource`` (``pods/log``), which ``*/log`` and
  ``*`` also match; ``resourceNames`` restrict the rule to named objects, so such a rule never allows a
  request without a name (list, watch, create, deletecollection); ``nonResourceURLs`` match a path
  exactly or by a trailing ``*`` prefix.
- ``plugin/pkg/auth/authorizer/rbac/subject_locator.go`` / ``appliesTo``: a subject is a User (by
  name), a Group (by name), or a ServiceAccount (``system:serviceaccount:<namespace>:<name>``; a
  RoleBinding's subject without a namespace takes the binding's).
- The ``system:masters`` group is allowed everything before any authorizer is asked
  (``staging/src/k8s.io/apiserver/pkg/authorization/authorizerfactory/builtin.go``,
  ``privilegedGroupAuthorizer``); the bootstrap policy's ``system:discovery`` ClusterRole lets every
  authenticated user read discovery (``plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go``).

A refusal is kube-apiserver's 403 Status, worded as ``responsewriters/errors.go`` ``forbiddenMessage``
(staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters, v1.32).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

GROUP = "rbac.authorization.k8s.io"
MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
# The bootstrap policy's system:discovery and system:public-info-viewer paths.
DISCOVERY_PATHS = (
    "/api",
    "/api/*",
    "/apis",
    "/apis/*",
    "/version",
    "/openapi/*",
    "/healthz",
    "/livez",
    "/readyz",
)


@dataclass(frozen=True)
class User:
    """Who a request is from (what authentication established)."""

    name: str
    groups: tuple[str, ...] = ()

    @classmethod
    def service_account(cls, namespace: str, name: str) -> User:
        return cls(
            f"system:serviceaccount:{namespace}:{name}",
            ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHENTICATED),
        )


# Who the request being served is from; the simulator's own controllers write as the controller manager.
CONTROLLERS = User("system:kube-controller-manager", ("system:authenticated",))
CALLER: ContextVar[User] = ContextVar("sim_caller", default=CONTROLLERS)


@dataclass(frozen=True)
class Request:
    """The attributes the authorizer reads (``authorizer.Attributes``)."""

    verb: str
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""  # a non-resource request's path (``/version``)

    @property
    def is_resource(self) -> bool:
        return bool(self.resource)


@dataclass(frozen=True)
class Policy:
    """The RBAC objects of the cluster, as the store holds them (plain dicts)."""

    roles: Mapping[tuple[str, str], Mapping[str, Any]] = field(default_factory=dict)  # (namespace, name)
    cluster_roles: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    role_bindings: Sequence[Mapping[str, Any]] = ()
    cluster_role_bindings: Sequence[Mapping[str, Any]] = ()


def _has(values: Iterable[str] | None, wanted: str) -> bool:
    values = list(values or ())
    return "*" in values or wanted in values


def _resource_matches(resources: Iterable[str] | None, resource: str, subresource: str) -> bool:
    wanted = f"{resource}/{subresource}" if subresource else resource
    for candidate in resources or ():
        if candidate in ("*", wanted):
            return True
        # "*/log" matches every resource's log subresource (evaluation_helpers.go ResourceMatches).
        if subresource and candidate == f"*/{subresource}":
            return True
    return False


def _non_resource_matches(urls: Iterable[str] | None, path: str) -> bool:
    for url in urls or ():
        if url == "*" or url == path or (url.endswith("*") and path.startswith(url[:-1])):
            return True
    return False


def rule_allows(rule: Mapping[str, Any], request: Request) -> bool:
    """``RuleAllows``: whether one PolicyRule allows ``request``."""
    if not _has(rule.get("verbs"), request.verb):
        return False
    if not request.is_resource:
        return _non_resource_matches(rule.get("nonResourceURLs"), request.path)
    if not _has(rule.get("apiGroups"), request.api_group):
        return False
    if not _resource_matches(rule.get("resources"), request.resource, request.subresource):
        return False
    names = rule.get("resourceNames") or ()
    return not names or request.name in names


def _applies(subject: Mapping[str, Any], user: User, binding_namespace: str) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return name == user.name
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return user.name == f"system:serviceaccount:{namespace}:{name}"
    return False


def _bound(binding: Mapping[str, Any], user: User) -> bool:
    namespace = (binding.get("metadata") or {}).get("namespace") or ""
    return any(_applies(s, user, namespace) for s in binding.get("subjects") or ())


def _rules_of(policy: Policy, ref: Mapping[str, Any], namespace: str) -> list[Mapping[str, Any]]:
    if ref.get("kind") == "ClusterRole":
        role = policy.cluster_roles.get(ref.get("name") or "")
    else:
        role = policy.roles.get((namespace, ref.get("name") or ""))
    return list((role or {}).get("rules") or ())


def allowed(policy: Policy, user: User, request: Request) -> bool:
    """``Authorize``: allowed when some rule reachable from a binding of ``user`` allows ``request``."""
    if MASTERS in user.groups:
        return True
    if not request.is_resource and request.verb == "get":
        if AUTHENTICATED in user.groups and _non_resource_matches(DISCOVERY_PATHS, request.path):
            return True
    for binding in policy.cluster_role_bindings:
        if _bound(binding, user) and any(
            rule_allows(r, request) for r in _rules_of(policy, binding.get("roleRef") or {}, "")
        ):
            return True
    if not request.namespace:
        return False
    for binding in policy.role_bindings:
        namespace = (binding.get("metadata") or {}).get("namespace") or ""
        if namespace != request.namespace or not _bound(binding, user):
            continue
        if any(rule_allows(r, request) for r in _rules_of(policy, binding.get("roleRef") or {}, namespace)):
            return True
    return False


def forbidden_message(user: User, request: Request) -> str:
    """The reason kube-apiserver gives (``forbiddenMessage``), before ``NewForbidden`` wraps it."""
    if not request.is_resource:
        return f'User "{user.name}" cannot {request.verb} path "{request.path}"'
    resource = f"{request.resource}/{request.subresource}" if request.subresource else request.resource
    where = f'in the namespace "{request.namespace}"' if request.namespace else "at the cluster scope"
    return f'User "{user.name}" cannot {request.verb} resource "{resource}" in API group "{request.api_group}" {where}'
