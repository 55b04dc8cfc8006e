"""API errors as the real API server reports them: a ``metav1.Status`` with its reason and message."""

from __future__ import annotations

from dataclasses import dataclass


class ApiError(Exception):
    """An API failure carrying the HTTP code, the Status reason and the exact message."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict:
        """The ``metav1.Status`` body the server sends for this error."""
        body: dict = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body

    def __repr__(self) -> str:
        return f"ApiError({self.code}, {self.reason!r}, {self.message!r})"


@dataclass(frozen=True)
class Cause:
    """One field error of an Invalid (422) answer."""

    field: str
    reason: str  # FieldValueRequired, FieldValueInvalid, FieldValueNotSupported, FieldValueForbidden, ...
    message: str  # the text after "<field>: ", e.g. 'Required value' or 'Invalid value: "x": ...'

    def as_dict(self) -> dict:
        """The cause as it appears in ``Status.details.causes``."""
        return {"reason": self.reason, "message": self.message, "field": self.field}


def required(field: str, detail: str = "") -> Cause:
    """A missing required field."""
    return Cause(field, "FieldValueRequired", "Required value" + (f": {detail}" if detail else ""))


def invalid_value(field: str, value: object, detail: str) -> Cause:
    """A field whose value breaks a rule."""
    return Cause(field, "FieldValueInvalid", f"Invalid value: {_go_repr(value)}: {detail}")


def not_supported(field: str, value: object, supported: list[str]) -> Cause:
    """A field whose value is not one of the allowed ones."""
    allowed = ", ".join(f'"{s}"' for s in supported)
    return Cause(
        field, "FieldValueNotSupported", f"Unsupported value: {_go_repr(value)}: supported values: {allowed}"
    )


def forbidden(field: str, detail: str) -> Cause:
    """A field that may not be set or changed."""
    return Cause(field, "FieldValueForbidden", f"Forbidden: {detail}")


def _go_repr(value: object) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value)


def _details(resource: str, name: str, group: str) -> dict:
    # metav1.StatusDetails has `name,omitempty` and `group,omitempty`: the core group is absent, never "".
    return {k: v for k, v in (("name", name), ("group", group), ("kind", resource)) if v}


def _split(group_resource: str) -> tuple[str, str]:
    plural, _, group = group_resource.partition(".")
    return plural, group


def not_found(resource: str, name: str) -> ApiError:
    """404 for ``resource`` given as the group resource ("pods", "jobs.batch")."""
    plural, group = _split(resource)
    return ApiError(404, "NotFound", f'{resource} "{name}" not found', _details(plural, name, group))


def already_exists(resource: str, name: str) -> ApiError:
    """409 AlreadyExists on create."""
    plural, group = _split(resource)
    return ApiError(
        409, "AlreadyExists", f'{resource} "{name}" already exists', _details(plural, name, group)
    )


def conflict(resource: str, name: str, detail: str | None = None) -> ApiError:
    """409 Conflict: a stale resourceVersion or a failed precondition."""
    plural, group = _split(resource)
    why = (
        detail
        or "the object has been modified; please apply your changes to the latest version and try again"
    )
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {resource} "{name}": {why}',
        _details(plural, name, group),
    )


def apply_conflict(resource: str, name: str, message: str, fields: list[tuple[str, str]]) -> ApiError:
    """409 Conflict of a server-side apply: one ``FieldManagerConflict`` cause per contested field."""
    plural, group = _split(resource)
    details = _details(plural, name, group)
    details["causes"] = [
        {"reason": "FieldManagerConflict", "message": f'conflict with "{manager}"', "field": field}
        for manager, field in fields
    ]
    return ApiError(409, "Conflict", message, details)


def invalid(kind: str, name: str, causes: list[Cause], group: str = "") -> ApiError:
    """422 Invalid listing every field error, formatted like the real server."""
    qualified = f"{kind}.{group}" if group else kind
    texts = [f"{c.field}: {c.message}" if c.field else c.message for c in causes]
    summary = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    return ApiError(
        422,
        "Invalid",
        f'{qualified} "{name}" is invalid: {summary}',
        {**_details(kind, name, group), "causes": [c.as_dict() for c in causes]},
    )


def bad_request(message: str) -> ApiError:
    """400 BadRequest."""
    return ApiError(400, "BadRequest", message)


def method_not_allowed() -> ApiError:
    """405: a verb the resource does not support."""
    return ApiError(
        405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
    )


def gone(requested: str, oldest: int) -> ApiError:
    """410 Expired: the requested resourceVersion is older than the kept history."""
    return ApiError(410, "Expired", f"too old resource version: {requested} ({oldest})")


def forbidden_error(resource: str, name: str, why: str) -> ApiError:
    """403 Forbidden, e.g. creating in a namespace that is being deleted."""
    plural, group = _split(resource)
    return ApiError(
        403, "Forbidden", f'{resource} "{name}" is forbidden: {why}', _details(plural, name, group)
    )


def forbidden_request(group_resource: str, name: str, why: str) -> ApiError:
    """403 of an authorizer's refusal, as apimachinery's ``NewForbidden`` words it (``<resource> "<name>"
    is forbidden: ...``, or without a name for list, watch and create)."""
    plural, group = _split(group_resource)
    if not group_resource:  # a non-resource path
        return ApiError(403, "Forbidden", f"forbidden: {why}")
    subject = f'{group_resource} "{name}"' if name else group_resource
    return ApiError(403, "Forbidden", f"{subject} is forbidden: {why}", _details(plural, name, group))


def unauthorized() -> ApiError:
    """401 for a missing or wrong bearer token."""
    return ApiError(401, "Unauthorized", "Unauthorized")


def not_acceptable(message: str) -> ApiError:
    """406 for an Accept header the server cannot satisfy."""
    return ApiError(406, "NotAcceptable", message)


# What kube-apiserver decodes an object from (k8s.io/apiserver pkg/endpoints/handlers/negotiation,
# NegotiateInputSerializerForMediaType, v1.32: an absent Content-Type is the first, JSON).
BODY_TYPES = ("application/json", "application/yaml", "application/vnd.kubernetes.protobuf")


def unsupported_body_type(content_type: str) -> ApiError:
    """415 for an object sent as anything but JSON, YAML or protobuf: a ``text/plain`` POST is what a web
    page may send without a CORS preflight, and a real API server refuses it the same way."""
    return ApiError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        f'{", ".join(BODY_TYPES)} (got "{content_type}")',
    )


def unsupported_media_type(content_type: str, detail: str = "") -> ApiError:
    """415 for a request body type the server does not understand; lists only what it does accept."""
    from airflow_jobs_sim.server import (  # the one list of accepted patch types
        APPLY_TYPE,
        PATCH_TYPES,
    )

    accepted = ", ".join(sorted([*PATCH_TYPES, APPLY_TYPE]))
    message = (
        f"the body of the request was in an unknown format - accepted media types include: {accepted}"
        f' (got "{content_type}")'
    )
    return ApiError(415, "UnsupportedMediaType", f"{message}: {detail}" if detail else message)


def too_many_requests(retry_after: int = 1) -> ApiError:
    """429 as the server's priority-and-fairness filter sends it."""
    return ApiError(
        429,
        "TooManyRequests",
        "Too many requests, please try again later.",
        {"retryAfterSeconds": retry_after},
    )


def internal_error(detail: str) -> ApiError:
    """500 InternalError."""
    return ApiError(
        500, "InternalError", f"Internal error occurred: {detail}", {"causes": [{"message": detail}]}
    )


def service_unavailable(detail: str = "the server is currently unable to handle the request") -> ApiError:
    """503 ServiceUnavailable."""
    return ApiError(503, "ServiceUnavailable", detail)
