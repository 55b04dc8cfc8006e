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
contentEncoding=3, contentType=4) whose ``raw`` is the object's own message. The field numbers of the
messages below are those of ``k8s.io/api/core/v1/generated.proto`` and
``k8s.io/apimachinery/pkg/apis/meta/v1/generated.proto`` (release-1.32). Only the kinds the server
serves whose typed clients kubectl uses for writes are described; any other kind is refused with 415
naming the kind, never half-decoded.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

MAGIC = b"k8s\x00"
CONTENT_TYPE = "application/vnd.kubernetes.protobuf"


class ProtobufError(ValueError):
    """A body that is not a well-formed Kubernetes protobuf envelope of a kind described here."""


@dataclass(frozen=True)
class Field:
    """One field of a message: its JSON name and wire type.

    ``kind`` is ``string``, ``bytes`` (base64 in JSON), ``bool``, ``int``, ``map_string``,
    ``map_bytes`` or the name of a nested message; ``repeated`` for lists.
    """

    name: str
    kind: str
    repeated: bool = False


SCHEMAS: dict[str, dict[int, Field]] = {
    "ObjectMeta": {
        1: Field("name", "string"),
        2: Field("generateName", "string"),
        3: Field("namespace", "string"),
        5: Field("uid", "string"),
        6: Field("resourceVersion", "string"),
        7: Field("generation", "int"),
        10: Field("deletionGracePeriodSeconds", "int"),
        11: Field("labels", "map_string"),
        12: Field("annotations", "map_string"),
        13: Field("ownerReferences", "OwnerReference", repeated=True),
        14: Field("finalizers", "string", repeated=True),
    },
    "OwnerReference": {
        1: Field("kind", "string"),
        3: Field("name", "string"),
        4: Field("uid", "string"),
        5: Field("apiVersion", "string"),
        6: Field("controller", "bool"),
        7: Field("blockOwnerDeletion", "bool"),
    },
    "ConfigMap": {
        1: Field("metadata", "ObjectMeta"),
        2: Field("data", "map_string"),
        3: Field("binaryData", "map_bytes"),
        4: Field("immutable", "bool"),
    },
    "Secret": {
        1: Field("metadata", "ObjectMeta"),
        2: Field("data", "map_bytes"),
        3: Field("type", "string"),
        4: Field("stringData", "map_string"),
        5: Field("immutable", "bool"),
    },
    "Namespace": {1: Field("metadata", "ObjectMeta"), 2: Field("spec", "NamespaceSpec")},
    "NamespaceSpec": {1: Field("finalizers", "string", repeated=True)},
    "Service": {1: Field("metadata", "ObjectMeta"), 2: Field("spec", "ServiceSpec")},
    "ServiceSpec": {
        1: Field("ports", "ServicePort", repeated=True),
        2: Field("selector", "map_string"),
        3: Field("clusterIP", "string"),
        4: Field("type", "string"),
        5: Field("externalIPs", "string", repeated=True),
        7: Field("sessionAffinity", "string"),
        10: Field("externalName", "string"),
        11: Field("externalTrafficPolicy", "string"),
        13: Field("publishNotReadyAddresses", "bool"),
        17: Field("ipFamilyPolicy", "string"),
        18: Field("clusterIPs", "string", repeated=True),
        19: Field("ipFamilies", "string", repeated=True),
        22: Field("internalTrafficPolicy", "string"),
    },
    "ServicePort": {
        1: Field("name", "string"),
        2: Field("protocol", "string"),
        3: Field("port", "int"),
        4: Field("targetPort", "IntOrString"),
        5: Field("nodePort", "int"),
        6: Field("appProtocol", "string"),
    },
    # k8s.io/apimachinery/pkg/util/intstr: type=1 (0 int, 1 string), intVal=2, strVal=3.
    "IntOrString": {1: Field("type", "int"), 2: Field("intVal", "int"), 3: Field("strVal", "string")},
}
TOP_LEVEL = {"ConfigMap", "Secret", "Namespace", "Service"}


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


def _map_entry(value: int | bytes, binary: bool) -> tuple[str, str]:
    key, item = "", "" if not binary else b""
    for number, part in _fields(value if isinstance(value, bytes) else b""):
        if number == 1:
            key = _text(part)
        elif number == 2:
            item = part if binary else _text(part)  # type: ignore[assignment]
    if binary:
        return key, base64.b64encode(item if isinstance(item, bytes) else b"").decode()
    return key, str(item)


def decode_message(kind: str, data: bytes) -> dict:
    """The JSON object of one message of a described kind; unknown fields are skipped."""
    schema = SCHEMAS[kind]
    obj: dict = {}
    for number, value in _fields(data):
        field = schema.get(number)
        if field is None:
            continue
        if field.kind in ("map_string", "map_bytes"):
            key, item = _map_entry(value, field.kind == "map_bytes")
            obj.setdefault(field.name, {})[key] = item
            continue
        if field.kind == "string":
            decoded: object = _text(value)
        elif field.kind == "bytes":
            decoded = base64.b64encode(value if isinstance(value, bytes) else b"").decode()
        elif field.kind == "bool":
            decoded = bool(value)
        elif field.kind == "int":
            decoded = _signed(value) if isinstance(value, int) else 0
        else:
            if not isinstance(value, bytes):
                raise ProtobufError(f"field {field.name}: expected a message")
            decoded = decode_message(field.kind, value)
            if field.kind == "IntOrString":
                decoded = decoded.get("strVal", "") if decoded.get("type") == 1 else decoded.get("intVal", 0)
        if field.repeated:
            obj.setdefault(field.name, []).append(decoded)
        elif (
            decoded in ("", 0, False)
            and field.kind in ("string", "int", "bool")
            and field.name != "immutable"
        ):
            # gogo-protobuf writes every non-pointer field, zero values included; their JSON form is
            # ``omitempty`` (``immutable`` is a pointer, kept), so a zero here means "not set".
            continue
        else:
            obj[field.name] = decoded
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
    if kind not in TOP_LEVEL or api_version != "v1":
        raise ProtobufError(
            f"{kind or 'an object'} ({api_version or 'no apiVersion'}) in protobuf is not decoded by the "
            f"simulated API server (only v1 {', '.join(sorted(TOP_LEVEL))}); send it as application/json"
        )
    obj = decode_message(kind, raw)
    return {"apiVersion": api_version, "kind": kind, **obj}
