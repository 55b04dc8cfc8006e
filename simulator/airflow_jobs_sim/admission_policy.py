"""ValidatingAdmissionPolicy as kube-apiserver evaluates it (admissionregistration.k8s.io/v1; off unless
the cluster holds policies and bindings).

kubernetes/kubernetes v1.32, ``staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/validating``
(``dispatcher.go``, ``validator.go``) and ``.../policy/matching``:

- a policy acts only through a binding naming it (``spec.policyName``) whose ``validationActions``
  include ``Deny``, and whose ``matchResources.namespaceSelector`` selects the request's namespace;
- the policy's ``matchConstraints.resourceRules`` select the request (API group, resource, operation,
  ``*`` matching anything), then every ``matchConditions`` expression must be true;
- ``variables`` are evaluated in order, each seeing the ones before it under ``variables``;
- the first ``validations`` expression that is false refuses the request with its ``messageExpression``
  (where it gives a one-line string) or its ``message``, and its ``reason`` (``Forbidden``: 403, ``Invalid``: 422, and Invalid when unset), worded
  ``ValidatingAdmissionPolicy '<policy>' with binding '<binding>' denied request: <message>``;
- an expression that cannot be evaluated refuses under ``failurePolicy: Fail`` (the default) and is
  ignored under ``Ignore``.

The expressions are CEL, evaluated with cel-python (the library the deployment tests use); ``object``
is null on DELETE and ``oldObject`` on CREATE, as upstream.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_jobs_sim import rbac
from airflow_jobs_sim.config import RESOURCES
from airflow_jobs_sim.errors import ApiError
from airflow_jobs_sim.selectors import Requirement

GROUP = "admissionregistration.k8s.io"
_CODES = {"Forbidden": 403, "Invalid": 422, "Unauthorized": 401, "RequestEntityTooLarge": 413}


@dataclass(frozen=True)
class AdmissionRequest:
    """What a policy reads of a request (``request`` in CEL, with the objects)."""

    operation: str  # CREATE / UPDATE / DELETE
    group: str
    resource: str
    namespace: str
    name: str
    username: str
    groups: tuple[str, ...]
    object: Mapping[str, Any] | None
    old_object: Mapping[str, Any] | None
    # A write of a subresource ("status"): a rule selects it only by "<resource>/<subresource>", so the
    # controllers' status writes are no rule's on ``jobs`` (k8s.io/apiserver pkg/admission/plugin/policy/
    # matching, v0.36: the rules match the request's resource and subresource together).
    subresource: str = ""


class _Failed(Exception):
    """An expression that could not be evaluated."""


def _rules_match(rules: Sequence[Mapping[str, Any]], request: AdmissionRequest) -> bool:
    def has(values: Any, wanted: str) -> bool:
        return "*" in (values or ()) or wanted in (values or ())

    resource = f"{request.resource}/{request.subresource}" if request.subresource else request.resource
    return any(
        has(rule.get("apiGroups"), request.group)
        and has(rule.get("resources"), resource)
        and has(rule.get("operations"), request.operation)
        for rule in rules
    )


def _kubernetes_library(celpy: Any) -> dict[str, Any]:
    """The list functions Kubernetes adds to CEL that expressions here use (k8s.io/apiserver
    pkg/cel/library/lists.go, v1.27+): ``sum``, ``min`` and ``max`` of a list of integers; and CEL's own
    ``contains`` of a string made by concatenation."""
    types = celpy.celtypes

    def whole(values: Any) -> list[int]:
        return [int(v) for v in values]

    def at_least_one(values: Any, pick: Any) -> Any:
        if not values:
            raise ValueError("min/max of an empty list")
        return types.IntType(pick(whole(values)))

    def contains(container: Any, item: Any) -> Any:
        # CEL's string contains(), on every string: cel-python's concatenation gives a plain str, which
        # its own contains() cannot take.
        if isinstance(container, str):
            return types.BoolType(str(item) in container)
        return celpy.evaluation.function_contains(container, item)

    return {
        "sum": lambda values: types.IntType(sum(whole(values))),
        "min": lambda values: at_least_one(values, min),
        "max": lambda values: at_least_one(values, max),
        "contains": contains,
    }


@functools.lru_cache(maxsize=1024)
def _program(expression: str) -> Any:
    """``expression`` compiled, once per process: a policy's expressions are few and parsing them is
    most of an evaluation's cost (the API server, too, compiles a policy once, when it loads it)."""
    import celpy  # only clusters that hold a policy need the CEL library

    env = celpy.Environment()
    return env.program(env.compile(expression), functions=_kubernetes_library(celpy))


class _Evaluator:
    def __init__(self, request: AdmissionRequest, params: Mapping[str, Any] | None = None):
        import celpy  # only clusters that hold a policy need the CEL library

        self._celpy = celpy
        self.activation: dict[str, Any] = {
            "request": celpy.json_to_cel(
                {
                    "operation": request.operation,
                    "namespace": request.namespace,
                    "name": request.name,
                    "userInfo": {"username": request.username, "groups": list(request.groups)},
                    "resource": {"group": request.group, "resource": request.resource},
                    "subResource": request.subresource,
                }
            ),
            "object": celpy.json_to_cel(None if request.object is None else dict(request.object)),
            "oldObject": celpy.json_to_cel(None if request.old_object is None else dict(request.old_object)),
            "params": celpy.json_to_cel(None if params is None else dict(params)),
        }

    def __call__(self, expression: str, variables: Any = None) -> Any:
        celpy = self._celpy
        try:
            program = _program(expression)
            scope = self.activation if variables is None else {**self.activation, "variables": variables}
            result = program.evaluate(scope)
        except Exception as exc:  # a compile error, a missing field
            raise _Failed(f"expression '{expression}' resulted in error: {exc}") from exc
        if isinstance(result, celpy.CELEvalError):
            raise _Failed(f"expression '{expression}' resulted in error: {result}")
        return result

    def with_variable(self, variables: Any, name: str, value: Any) -> Any:
        types = self._celpy.celtypes
        return types.MapType({**(variables or {}), types.StringType(name): value})


def refusals(
    policy: Mapping[str, Any], request: AdmissionRequest, params: Mapping[str, Any] | None = None
) -> list[tuple[str, str]]:
    """(reason, message) of every validation of ``policy`` that ``request`` fails, in order; empty if it
    passes or the policy does not select it. The API server evaluates them all and reports the first.
    ``params`` is the binding's parameter object (``params`` in CEL), for a policy with a ``paramKind``."""
    spec = policy.get("spec") or {}
    if not _rules_match((spec.get("matchConstraints") or {}).get("resourceRules") or (), request):
        return []
    evaluate = _Evaluator(request, params)
    failing: list[tuple[str, str]] = []
    try:
        if not all(evaluate(c["expression"]) for c in spec.get("matchConditions") or ()):
            return []
        variables = None
        for variable in spec.get("variables") or ():
            variables = evaluate.with_variable(
                variables, variable["name"], evaluate(variable["expression"], variables or {})
            )
        for validation in spec.get("validations") or ():
            if not evaluate(validation["expression"], variables or {}):
                message = _message_of(evaluate, validation, variables or {}) or " ".join(
                    str(validation.get("message") or validation["expression"]).split()
                )
                # An unset reason is Invalid (422): dispatcher.go.
                failing.append((validation.get("reason") or "Invalid", message))
    except _Failed as exc:
        if spec.get("failurePolicy", "Fail") != "Ignore":
            failing.append(("Invalid", str(exc)))
    return failing


# The longest message a messageExpression may give (k8s.io/apiserver pkg/apis/cel/config.go,
# MaxEvaluatedMessageExpressionSizeBytes, v0.36).
_MAX_MESSAGE_EXPRESSION_BYTES = 5 * 1024


def _message_of(evaluate: _Evaluator, validation: Mapping[str, Any], variables: Any) -> str | None:
    """A failed validation's ``messageExpression``, as validator.go (k8s.io/apiserver v0.36) takes it:
    its string trimmed; ``None`` (the static ``message`` then) where there is none, where it fails, gives
    no string, a blank one, one of more than 5 KiB or one of several lines."""
    expression = validation.get("messageExpression")
    if not expression:
        return None
    try:
        value = evaluate(expression, variables)
    except _Failed:
        return None
    if not isinstance(value, str):
        return None
    message = str(value).strip()
    if not message or "\n" in message or len(message.encode()) > _MAX_MESSAGE_EXPRESSION_BYTES:
        return None
    return message


# kube-apiserver's words for a binding whose parameter is missing and whose parameterNotFoundAction is
# Deny (k8s.io/apiserver/pkg/admission/plugin/policy/generic/policy_dispatcher.go, v1.36).
_NO_PARAMS = (
    "failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"
)


def check(
    policies: Sequence[Mapping[str, Any]],
    bindings: Sequence[Mapping[str, Any]],
    namespace_labels: Mapping[str, str],
    request: AdmissionRequest,
    find_param: Callable[[str, str, str], Mapping[str, Any] | None] | None = None,
) -> None:
    """Raise the API server's refusal of ``request`` if a bound policy denies it.

    A policy with a ``paramKind`` is evaluated with the object its binding's ``paramRef`` names
    (``find_param(kind, namespace, name)``; the namespace is the request's when the ref names none, as
    the API documents for a namespaced kind); a missing one refuses the request unless the ref's
    ``parameterNotFoundAction`` is Allow."""
    by_name = {p["metadata"]["name"]: p for p in policies}
    for binding in bindings:
        spec = binding.get("spec") or {}
        policy = by_name.get(spec.get("policyName") or "")
        if policy is None or "Deny" not in (spec.get("validationActions") or ()):
            continue
        selector = (spec.get("matchResources") or {}).get("namespaceSelector")
        if request.namespace and selector and not _selects(selector, namespace_labels):
            continue
        params = None
        policy_spec = policy.get("spec") or {}
        param_kind = policy_spec.get("paramKind")
        if param_kind and _rules_match(
            (policy_spec.get("matchConstraints") or {}).get("resourceRules") or (), request
        ):
            # Only a request the policy selects looks its parameter up (policy_dispatcher.go).
            ref = spec.get("paramRef") or {}
            where = ref.get("namespace") or request.namespace
            params = (
                None
                if find_param is None
                else find_param(param_kind.get("kind", ""), where, ref.get("name", ""))
            )
            if params is None:
                if ref.get("parameterNotFoundAction", "Deny") == "Allow":
                    continue
                found = [("Forbidden", _NO_PARAMS)]
            else:
                found = refusals(policy, request, params)
        else:
            found = refusals(policy, request)
        if not found:
            continue
        reason, message = found[0]
        cause = (
            f"ValidatingAdmissionPolicy '{policy['metadata']['name']}' with binding "
            f"'{binding['metadata']['name']}' denied request: {message}"
        )
        # admission.NewForbidden wraps it (``<resource>.<group> "<name>" is forbidden: ...``), then the
        # decision's reason and its code replace Forbidden's.
        group_resource = f"{request.resource}.{request.group}" if request.group else request.resource
        subject = f'{group_resource} "{request.name}"' if request.name else group_resource
        details = {
            "name": request.name,
            "group": request.group,
            "kind": request.resource,
            "causes": [{"message": cause}],
        }
        raise ApiError(_CODES.get(reason, 422), reason, f"{subject} is forbidden: {cause}", details)


_OPERATORS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}


def _selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector (matchLabels and matchExpressions) against a namespace's labels."""
    requirements = [Requirement(k, "=", (v,)) for k, v in (selector.get("matchLabels") or {}).items()]
    requirements += [
        Requirement(e["key"], _OPERATORS[e["operator"]], tuple(e.get("values") or ()))
        for e in selector.get("matchExpressions") or ()
    ]
    return all(r.matches(dict(labels)) for r in requirements)


class PolicyAdmission:
    """The store's validating admission: the cluster's policies and bindings, applied to each write
    (``Store.validators``); free while the cluster holds no binding."""

    def __init__(self, store: Any):
        self.store = store

    def admit(
        self, operation: str, resource: str, new: dict | None, old: dict | None, subresource: str = ""
    ) -> None:
        bindings, _ = self.store.list_with_rv("validatingadmissionpolicybindings", copy=False)
        if not bindings or resource.startswith("validatingadmissionpolic"):
            return
        policies, _ = self.store.list_with_rv("validatingadmissionpolicies", copy=False)
        obj = new if new is not None else old or {}
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") or ""
        labels: Mapping[str, str] = {}
        if namespace:
            found = [
                n
                for n in self.store.list_with_rv("namespaces", copy=False)[0]
                if n["metadata"]["name"] == namespace
            ]
            labels = (
                (found[0]["metadata"].get("labels") or {})
                if found
                else {"kubernetes.io/metadata.name": namespace}
            )
        caller = rbac.CALLER.get()

        def find_param(kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
            plural = {"ConfigMap": "configmaps"}.get(kind)
            if plural is None:
                return None
            items = self.store.list_with_rv(plural, copy=False)[0]
            return next(
                (
                    i
                    for i in items
                    if i["metadata"]["name"] == name and (i["metadata"].get("namespace") or "") == namespace
                ),
                None,
            )

        check(
            policies,
            bindings,
            labels,
            AdmissionRequest(
                operation=operation,
                group=RESOURCES[resource].group,
                resource=resource,
                namespace=namespace,
                name=meta.get("name") or "",
                username=caller.name,
                groups=caller.groups,
                object=new,
                old_object=old,
                subresource=subresource,
            ),
            find_param,
        )
