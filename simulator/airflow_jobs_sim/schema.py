"""Decoding a request body the way the API server's JSON decoder does: types checked, unknown fields
pruned (or refused under ``fieldValidation=Strict``), quantities parsed.

The field tree is the official one: the ``kubernetes`` client's models are generated from the OpenAPI
document Kubernetes publishes, and each carries ``openapi_types`` and ``attribute_map``; this module
compiles them once per model into plain dicts (``compiled``, cached) so a pod is checked with one walk.

What a real server answers, modelled here:
- a value of the wrong JSON type is a ``400 BadRequest``, ``Pod in version "v1" cannot be handled as a Pod:
  json: cannot unmarshal array into Go struct field NodeAffinity.spec.affinity.nodeAffinity...`` (the
  decoder of k8s.io/apimachinery ``pkg/runtime/serializer/json``, release-1.32);
- a malformed quantity (``nvidia.com/gpu: "lots"``) is refused by ``resource.Quantity``'s UnmarshalJSON
  (apimachinery ``pkg/api/resource/quantity.go``), also a 400;
- an unknown field is dropped with a ``Warning`` header by default, refused with 400
  ``strict decoding error: unknown field "spec.x"`` under ``fieldValidation=Strict``, dropped silently
  under ``Ignore`` (apiserver ``pkg/endpoints/handlers/rest.go``, KEP-2885).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from airflow_jobs_sim import errors, micro_time
from airflow_jobs_sim.errors import ApiError

# The model of each kind whose schema is known (MPIJob is a custom resource: no model here).
MODELS = {
    "pods": "V1Pod",
    "jobs": "V1Job",
    "configmaps": "V1ConfigMap",
    "secrets": "V1Secret",
    "services": "V1Service",
    "namespaces": "V1Namespace",
    "nodes": "V1Node",
    "events": "CoreV1Event",
    "leases": "V1Lease",
}
# Fields typed ``resource.Quantity`` upstream (the Python models type them as plain strings).
QUANTITY_FIELDS = {
    ("V1ResourceRequirements", "limits"),
    ("V1ResourceRequirements", "requests"),
    ("V1VolumeResourceRequirements", "limits"),
    ("V1VolumeResourceRequirements", "requests"),
    ("V1NodeStatus", "capacity"),
    ("V1NodeStatus", "allocatable"),
    ("V1EmptyDirVolumeSource", "sizeLimit"),
    ("V1PodSpec", "overhead"),
    ("V1ContainerStatus", "allocatedResources"),
}
# Fields typed ``metav1.MicroTime`` upstream (the Python models type them as datetime, as metav1.Time):
# parsed and written back in UTC as the server does (``sim/micro_time.py``).
MICRO_TIME_FIELDS = {("V1LeaseSpec", "acquireTime"), ("V1LeaseSpec", "renewTime")}
# resource.Quantity's parse rule, and the message its UnmarshalJSON returns.
_QUANTITY = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)(([eE][+-]?\d+)|Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")
QUANTITY_MSG = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"


def is_quantity(value: object) -> bool:
    """Whether a JSON value decodes as a resource.Quantity (a number, or a string in its syntax)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return True
    return isinstance(value, str) and _is_quantity_text(value)


@cache
def _is_quantity_text(text: str) -> bool:
    return bool(_QUANTITY.match(text.strip()))


@dataclass(frozen=True)
class Decoded:
    """The decoded object and the unknown fields that were dropped from it."""

    obj: dict
    unknown: tuple[str, ...]


SCHEMA_FILE = Path(__file__).with_name("k8s_schema.json")


def _referenced(kind: str) -> list[str]:
    return re.findall(r"(?:V\d\w*|CoreV1\w*)", kind)


def extract() -> dict[str, dict[str, str]]:
    """Every model reachable from the served kinds, read from the ``kubernetes`` client's models.

    Importing that package costs seconds (it loads every API and model), far too slow for a request
    path or the simulator's start-up, so the result is written to ``k8s_schema.json`` beside this module
    (``python -m airflow_jobs_sim.schema``) and a test checks the file matches the package.
    """
    from kubernetes.client import models

    out: dict[str, dict[str, str]] = {}
    todo = list(MODELS.values())
    while todo:
        name = todo.pop()
        if name in out:
            continue
        cls = getattr(models, name)
        out[name] = {cls.attribute_map[attr]: kind for attr, kind in cls.openapi_types.items()}
        for kind in out[name].values():
            todo += [m for m in _referenced(kind) if hasattr(models, m)]
    return dict(sorted(out.items()))


@cache
def _schemas() -> dict[str, dict[str, str]]:
    return json.loads(SCHEMA_FILE.read_text())


def compiled(model: str) -> dict[str, str]:
    """JSON field name -> type string of one model (``str``, ``int``, ``list[V1Container]``, ...)."""
    return _schemas()[model]


def _go_type(kind: str) -> str:
    if kind.startswith("list["):
        return "[]" + _go_type(kind[5:-1])
    if kind.startswith("dict["):
        return "map[string]" + _go_type(kind[5:-1].split(",", 1)[1].strip())
    return {"str": "string", "int": "int32", "bool": "bool", "float": "float64", "datetime": "v1.Time"}.get(
        kind, "v1." + re.sub(r"^(V1|CoreV1|V1beta1)", "", kind)
    )


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


class _Walk:
    def __init__(self, kind_name: str, strict: bool):
        self.kind_name = kind_name
        self.strict = strict
        self.unknown: list[str] = []

    def fail(self, detail: str) -> ApiError:
        return errors.bad_request(
            f'{self.kind_name} in version "v1" cannot be handled as a {self.kind_name}: {detail}'
        )

    def mismatch(self, value: object, struct: str, path: str, kind: str) -> ApiError:
        # encoding/json names the field path without list indices or map keys.
        field = re.sub(r"\[[^\]]*\]", "", path)
        return self.fail(
            f"json: cannot unmarshal {_json_type(value)} into Go struct field {struct}.{field} of type "
            f"{_go_type(kind)}"
        )

    def value(
        self, value: object, kind: str, struct: str, path: str, quantity: bool = False, micro: bool = False
    ) -> object:
        if value is None or kind == "object":
            return value
        if kind.startswith("list["):
            if not isinstance(value, list):
                raise self.mismatch(value, struct, path, kind)
            return [self.value(v, kind[5:-1], struct, f"{path}[{i}]", quantity) for i, v in enumerate(value)]
        if kind.startswith("dict["):
            if not isinstance(value, dict):
                raise self.mismatch(value, struct, path, kind)
            inner = kind[5:-1].split(",", 1)[1].strip()
            return {k: self.value(v, inner, struct, f"{path}[{k}]", quantity) for k, v in value.items()}
        if quantity:
            if not is_quantity(value):
                raise self.fail(QUANTITY_MSG)
            return value
        if kind == "str" or kind == "datetime":
            if not isinstance(value, str):
                raise self.mismatch(value, struct, path, kind)
            if micro:
                try:
                    return micro_time.normalize(value)
                except micro_time.MicroTimeError as exc:
                    raise self.fail(str(exc)) from None
            return value
        if kind == "int":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
                raise self.mismatch(value, struct, path, kind)
            return int(value)
        if kind == "float":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise self.mismatch(value, struct, path, kind)
            return value
        if kind == "bool":
            if not isinstance(value, bool):
                raise self.mismatch(value, struct, path, kind)
            return value
        if not isinstance(value, dict):
            raise self.mismatch(value, struct, path, kind)
        return self.message(value, kind, path)

    def message(self, value: dict, model: str, path: str) -> dict:
        struct = re.sub(r"^(V1|CoreV1)", "", model)
        fields = compiled(model)
        out: dict = {}
        for key, item in value.items():
            where = f"{path}.{key}" if path else key
            kind = fields.get(key)
            if kind is None:
                if key.startswith("$"):  # strategic-merge directives ride along in patches
                    out[key] = item
                    continue
                if self.strict:
                    raise errors.bad_request(f'strict decoding error: unknown field "{where}"')
                self.unknown.append(where)
                continue
            out[key] = self.value(
                item,
                kind,
                struct,
                where,
                (model, key) in QUANTITY_FIELDS,
                (model, key) in MICRO_TIME_FIELDS,
            )
        return out


def decode(resource: str, kind_name: str, body: object, strict: bool = False) -> Decoded:
    """A request body of a kind with a known schema, checked and pruned (others pass unchanged)."""
    model = MODELS.get(resource)
    if model is None or not isinstance(body, dict):
        return Decoded(body if isinstance(body, dict) else {}, ())
    walk = _Walk(kind_name, strict)
    obj = walk.message(body, model, "")  # a body that is not an object fails in the store, as before
    for key in ("apiVersion", "kind"):
        if key in body:
            obj[key] = body[key]
    return Decoded(obj, tuple(walk.unknown))


if __name__ == "__main__":
    SCHEMA_FILE.write_text(json.dumps(extract(), indent=0, sort_keys=True) + "\n")
