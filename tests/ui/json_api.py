"""Checks of the JSON API against its own OpenAPI schema, shared by the in-process and real-server tests.

The rules (docs/ui.md, "JSON"): times are ISO 8601 with a zone or null, durations are numbers in fields
ending in ``_seconds``, absent values are null (never ``""``, ``-``, ``<none>`` or ``<unknown>``), and
no value is a display string such as kubectl's ``19s``.
"""

from __future__ import annotations

import re
from typing import Any

import jsonschema

# kubectl's printed ages and durations: 19s, 5m12s, 3h, 2d4h.
DISPLAY_DURATION = re.compile(r"^(\d+[smhdy])+$")
NOT_A_VALUE = {"", "-", "<none>", "<unknown>", "<invalid>"}
ISO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")
TIME_KEYS = {"now", "at", "start", "end", "since"}
# Free text that may be anything, an empty log line included.
FREE_TEXT = {"lines", "last_events"}


def json_routes(spec: dict) -> list[tuple[str, str]]:
    """(method, path) of every JSON route: everything under /api/."""
    return [(m.upper(), p) for p, ops in spec["paths"].items() if p.startswith("/api/") for m in ops]


def response_schema(spec: dict, method: str, path: str, status: str = "200") -> dict:
    return spec["paths"][path][method.lower()]["responses"][status]["content"]["application/json"]["schema"]


def untyped(spec: dict) -> list[str]:
    """What keeps the schema from describing typed responses: a JSON route whose 200 answer is not a
    model (or a list of one), a model without properties, a property without a type or description."""
    problems = []
    seen: set[str] = set()

    def model(ref: str, where: str) -> None:
        name = ref.rsplit("/", 1)[-1]
        if name in seen:
            return
        seen.add(name)
        component = spec["components"]["schemas"][name]
        if "enum" in component:
            return
        if component.get("type") != "object" or not component.get("properties"):
            problems.append(f"{where}: {name} is not an object with properties")
            return
        for field, prop in component["properties"].items():
            if not prop.get("description"):
                problems.append(f"{name}.{field} has no description")
            walk(prop, f"{name}.{field}")

    def walk(node: dict, where: str) -> None:
        if "$ref" in node:
            model(node["$ref"], where)
        elif "anyOf" in node:
            for option in node["anyOf"]:
                walk(option, where)
        elif node.get("type") == "array":
            walk(node.get("items") or {}, where)
        elif node.get("type") == "object" and "additionalProperties" in node:
            walk(node["additionalProperties"], where)
        elif not node.get("type") and "const" not in node and "enum" not in node:
            problems.append(f"{where}: untyped {node}")

    for method, path in json_routes(spec):
        try:
            schema = response_schema(spec, method, path)
        except KeyError:
            problems.append(f"{method} {path}: no JSON 200 response")
            continue
        if schema in ({}, {"type": "object"}):
            problems.append(f"{method} {path}: bare {schema}")
            continue
        walk(schema, f"{method} {path}")
    return problems


def validate(spec: dict, method: str, path: str, body: Any, status: str = "200") -> None:
    """``body`` as the OpenAPI schema describes the route's answer (raises on a mismatch)."""
    schema = {**response_schema(spec, method, path, status), "components": spec["components"]}
    jsonschema.Draft202012Validator(schema).validate(body)


def display_values(value: Any, where: str = "$", key: str = "") -> list[str]:
    """Every value of ``value`` that breaks the typed-values rule, with where it is."""
    found: list[str] = []
    if isinstance(value, dict):
        for k, v in value.items():
            found.extend(display_values(v, f"{where}.{k}", k))
        return found
    if isinstance(value, list):
        if key in FREE_TEXT:
            return found
        for i, v in enumerate(value):
            found.extend(display_values(v, f"{where}[{i}]", key))
        return found
    if key.endswith("_seconds"):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            found.append(f"{where}={value!r}: not a number of seconds")
    elif key.endswith("_at") or key in TIME_KEYS:
        if value is not None and not (isinstance(value, str) and ISO_TIME.match(value)):
            found.append(f"{where}={value!r}: not an ISO 8601 time with a zone")
    elif isinstance(value, str) and (value in NOT_A_VALUE or DISPLAY_DURATION.match(value)):
        found.append(f"{where}={value!r}: a display string, not a value")
    return found
