"""Decoding of ``application/vnd.kubernetes.protobuf`` request bodies into the JSON form of the object.

Why the server needs it: client-go's typed clients for built-in kinds are generated with
``--prefers-protobuf`` (client-go v0.32 ``gentype/type.go`` ``PrefersProtobuf``), and
``rest/request.go`` ``UseProtobufAsDefault`` then sends every body as protobuf unless the caller set a
content type. Nothing the server advertises changes that choice, and unlike CBOR there is no fallback to
JSON on ``415``. So ``kubectl create configmap|secret|service|namespace`` always send protobuf, and a
server that wants them must read it, as a real one does. The answer may still be JSON: those requests
accept ``application/vnd.kubernetes.protobuf,application/json``.

The envelope (apimachinery v0.32 ``pkg/runtime/serializer/protobuf/protobuf.go``): the 4 magic bytes
``k8s\\0``, then a ``runtime.Unknown`` message (typeMeta=1 {apiVersion=1, kind=2}, raw=2,
contentEncoding=3, contentType=4) whose ``raw`` is the object's own message. The field numbers come from
the upstream ``generated.proto`` files (k8s.io/api and k8s.io/apimachinery, release-1.32), parsed by
``build_table`` into ``k8s_proto.json`` beside this module; regenerate it with
``python -m airflow_jobs_sim.protobuf <dir of .proto files> <source note>``. Only the kinds in
``KINDS`` are decoded; any other is refused with 415 naming the kind, never half-decoded.
"""

from __future__ import annotations

import base64
import json
import re
from datetime import datetime, timezone
from functools import cache
from pathlib import Path

MAGIC = b"k8s\x00"
CONTENT_TYPE = "application/vnd.kubernetes.protobuf"


class ProtobufError(ValueError):
    """A body that is not a well-formed Kubernetes protobuf envelope of a kind described here."""


TABLE_FILE = Path(__file__).with_name("k8s_proto.json")
# The kinds served whose typed clients may send protobuf, and their message (package-qualified).
KINDS = {
    ("v1", "ConfigMap"): "k8s.io.api.core.v1.ConfigMap",
    ("v1", "Secret"): "k8s.io.api.core.v1.Secret",
    ("v1", "Service"): "k8s.io.api.core.v1.Service",
    ("v1", "Namespace"): "k8s.io.api.core.v1.Namespace",
    ("v1", "Pod"): "k8s.io.api.core.v1.Pod",
    ("v1", "Node"): "k8s.io.api.core.v1.Node",
    ("v1", "Event"): "k8s.io.api.core.v1.Event",
    ("batch/v1", "Job"): "k8s.io.api.batch.v1.Job",
}
# Fields that are Go pointers in k8s.io/api types.go (release-1.32) of the kinds above: their explicit
# zero (backoffLimit: 0, suspend: false, optional: false) is a value, not "unset". The .proto files do
# not say which fields are pointers, so the names are listed here.
POINTER_FIELDS = frozenset(
    {
        "activeDeadlineSeconds",
        "allocateLoadBalancerNodePorts",
        "allowPrivilegeEscalation",
        "automountServiceAccountToken",
        "backoffLimit",
        "backoffLimitPerIndex",
        "blockOwnerDeletion",
        "completions",
        "controller",
        "defaultMode",
        "deletionGracePeriodSeconds",
        "enableServiceLinks",
        "fsGroup",
        "hostUsers",
        "immutable",
        "manualSelector",
        "maxFailedIndexes",
        "mode",
        "optional",
        "parallelism",
        "priority",
        "privileged",
        "readOnlyRootFilesystem",
        "runAsGroup",
        "runAsNonRoot",
        "runAsUser",
        "setHostnameAsFQDN",
        "shareProcessNamespace",
        "suspend",
        "terminationGracePeriodSeconds",
        "tolerationSeconds",
        "ttlSecondsAfterFinished",
    }
)
_META = "k8s.io.apimachinery.pkg.apis.meta.v1."
QUANTITY = "k8s.io.apimachinery.pkg.api.resource.Quantity"
INT_OR_STRING = "k8s.io.apimachinery.pkg.util.intstr.IntOrString"
RAW_EXTENSION = "k8s.io.apimachinery.pkg.runtime.RawExtension"
TIMES = {_META + "Time", _META + "MicroTime"}
_SCALARS = {"string", "bytes", "bool", "int32", "int64", "uint32", "uint64", "double", "float"}
_FIELD_LINE = re.compile(r"^\s*(optional|repeated)\s+([\w.]+)\s+(\w+)\s*=\s*(\d+)")
_MAP_LINE = re.compile(r"^\s*map<\s*(\w+)\s*,\s*([\w.]+)\s*>\s+(\w+)\s*=\s*(\d+)")


def parse_proto(text: str) -> dict[str, dict[str, list]]:
    """Messages of one generated.proto: qualified name -> {number: [json name, type, label]}.

    ``label`` is ``optional``, ``repeated`` or ``map``; a map's type is its value type. Kubernetes
    names its proto fields after the JSON fields, so the name is the JSON name."""
    package = re.search(r"^package\s+([\w.]+);", text, re.M)
    prefix = package.group(1) + "." if package else ""
    out: dict[str, dict[str, list]] = {}
    current: dict[str, list] | None = None
    for line in text.splitlines():
        start = re.match(r"^message\s+(\w+)\s*\{", line)
        if start:
            current = out.setdefault(prefix + start.group(1), {})
            continue
        if line.startswith("}"):
            current = None
            continue
        if current is None:
            continue
        field = _FIELD_LINE.match(line)
        mapped = _MAP_LINE.match(line)
        if field:
            label, kind, name, number = field.groups()
        elif mapped:
            _, kind, name, number = mapped.groups()
            label = "map"
        else:
            continue
        if kind not in _SCALARS:
            kind = kind[1:] if kind.startswith(".") else prefix + kind
        current[number] = [name, kind, label]
    return out


def build_table(proto_texts: list[str]) -> dict[str, dict[str, list]]:
    """The messages reachable from ``KINDS`` across the given generated.proto files."""
    messages: dict[str, dict[str, list]] = {}
    for text in proto_texts:
        messages.update(parse_proto(text))
    out: dict[str, dict[str, list]] = {}
    todo = list(KINDS.values())
    while todo:
        name = todo.pop()
        if name in out or name not in messages:
            continue
        out[name] = messages[name]
        todo += [kind for _, kind, _ in messages[name].values() if kind in messages]
    return dict(sorted(out.items()))


@cache
def _table() -> dict[str, dict[str, list]]:
    return json.loads(TABLE_FILE.read_text())["messages"]


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result, shift = 0, 0
    while True:
        if pos >= len(data):
            raise ProtobufError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """The (field number, value) pairs of a message: varints as int, length-delimited as bytes."""
    out: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            out.append((number, value))
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise ProtobufError("truncated length-delimited field")
            out.append((number, data[pos : pos + length]))
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ProtobufError(f"unsupported wire type {wire}")
    return out


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _text(value: int | bytes) -> str:
    if not isinstance(value, bytes):
        raise ProtobufError("expected a length-delimited field")
    return value.decode()


def _scalar(kind: str, value: int | bytes) -> object:
    if kind == "string":
        return _text(value)
    if kind == "bytes":
        return base64.b64encode(value if isinstance(value, bytes) else b"").decode()
    if kind == "bool":
        return bool(value)
    if kind in ("double", "float"):
        raise ProtobufError("floating-point fields are not used by the kinds decoded here")
    return _signed(value) if isinstance(value, int) else 0


def _special(kind: str, data: bytes) -> object:
    """Messages whose JSON form is not an object (their own MarshalJSON upstream)."""
    fields = dict(_fields(data))
    if kind == QUANTITY:
        return _text(fields.get(1, b""))
    if kind == INT_OR_STRING:
        if fields.get(1) == 1:
            return _text(fields.get(3, b""))
        value = fields.get(2, 0)
        return _signed(value) if isinstance(value, int) else 0
    if kind in TIMES:
        seconds = fields.get(1, 0)
        if not seconds:
            return None  # the zero time marshals as null
        stamp = datetime.fromtimestamp(_signed(seconds) if isinstance(seconds, int) else 0, timezone.utc)
        return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
    raw = fields.get(1, b"")
    return json.loads(raw) if isinstance(raw, bytes) and raw else None  # RawExtension: raw JSON


def _value(kind: str, value: int | bytes) -> object:
    if kind in _SCALARS:
        return _scalar(kind, value)
    if not isinstance(value, bytes):
        raise ProtobufError(f"{kind}: expected a message")
    if kind == QUANTITY or kind == INT_OR_STRING or kind in TIMES or kind == RAW_EXTENSION:
        return _special(kind, value)
    return decode_message(kind, value)


def decode_message(kind: str, data: bytes) -> dict:
    """The JSON object of one message; fields the table does not know are skipped."""
    schema = _table().get(kind)
    if schema is None:
        raise ProtobufError(f"no protobuf description of {kind}")
    obj: dict = {}
    for number, value in _fields(data):
        field = schema.get(str(number))
        if field is None:
            continue
        name, field_kind, label = field
        if label == "map":
            key, item = "", None
            for sub, part in _fields(value if isinstance(value, bytes) else b""):
                if sub == 1:
                    key = _text(part)
                elif sub == 2:
                    item = _value(field_kind, part)
            if item is None:
                item = "" if field_kind in ("string", "bytes", QUANTITY) else {}
            obj.setdefault(name, {})[key] = item
        elif label == "repeated":
            obj.setdefault(name, []).append(_value(field_kind, value))
        else:
            decoded = _value(field_kind, value)
            if decoded == "" or decoded is None:
                # gogo-protobuf writes every non-pointer field; an empty string (or the zero time) is
                # what JSON leaves out with omitempty.
                continue
            if decoded in (0, False) and field_kind in _SCALARS and name not in POINTER_FIELDS:
                continue  # likewise a non-pointer number or boolean at its zero value
            obj[name] = decoded
    return obj


def decode(body: bytes) -> dict:
    """A whole request body (magic + runtime.Unknown) as the JSON object it stands for."""
    if not body.startswith(MAGIC):
        raise ProtobufError("provided object is not a Kubernetes protobuf message (no k8s\\0 prefix)")
    api_version = kind = ""
    raw = b""
    for number, value in _fields(body[len(MAGIC) :]):
        if number == 1 and isinstance(value, bytes):
            for sub, part in _fields(value):
                if sub == 1:
                    api_version = _text(part)
                elif sub == 2:
                    kind = _text(part)
        elif number == 2 and isinstance(value, bytes):
            raw = value
        elif number == 3 and value:
            raise ProtobufError(f"unsupported content encoding {_text(value)!r}")
    message = KINDS.get((api_version, kind))
    if message is None:
        served = ", ".join(f"{v} {k}" for v, k in KINDS)
        raise ProtobufError(
            f"{kind or 'an object'} ({api_version or 'no apiVersion'}) in protobuf is not decoded by the "
            f"simulated API server (only {served}); send it as application/json"
        )
    obj = decode_message(message, raw)
    return {"apiVersion": api_version, "kind": kind, **obj}


def write_table(proto_dir: Path, source: str) -> None:
    """Regenerate ``k8s_proto.json`` from generated.proto files (see the module docstring)."""
    texts = [p.read_text() for p in sorted(proto_dir.glob("*.proto"))]
    body = {"source": source, "messages": build_table(texts)}
    TABLE_FILE.write_text(json.dumps(body, indent=0, sort_keys=True) + "\n")


if __name__ == "__main__":
    import sys

    write_table(Path(sys.argv[1]), sys.argv[2])
