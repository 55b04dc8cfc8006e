"""Label and field selectors with the API server's syntax, semantics and allow-lists. Pure functions."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from airflow_jobs_sim.config import ResourceType
from airflow_jobs_sim.errors import bad_request


@dataclass(frozen=True)
class Requirement:
    """One label requirement: ``key <op> values``."""

    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!", "gt", "lt"
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        """Whether a label map satisfies this requirement (absent keys satisfy != and notin)."""
        present = self.key in labels
        value = labels.get(self.key)
        if self.op in ("=", "in"):
            return present and value in self.values
        if self.op in ("!=", "notin"):
            return not present or value not in self.values
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if not present:
            return False
        try:
            have, want = int(value or ""), int(self.values[0])
        except ValueError:
            return False
        return have > want if self.op == "gt" else have < want


_KEY = re.compile(
    r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9](/([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$"
)
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def _check_key(key: str) -> str:
    if not key or not _KEY.match(key):
        raise bad_request(f"unable to parse requirement: invalid label key {key!r}")
    return key


def _check_value(value: str) -> str:
    if len(value) > 63 or not _VALUE.match(value):
        raise bad_request(f"unable to parse requirement: invalid label value: {value!r}")
    return value


_SET_OP = re.compile(r"^\s*(\S+?)\s+(in|notin)\s*\((.*)\)\s*$")
_CMP_OP = re.compile(r"^\s*([^=!<>\s]+)\s*(==|=|!=|>|<)\s*(.*?)\s*$")


def parse_label_selector(text: str | None) -> tuple[Requirement, ...]:
    """Parse a labelSelector string; raises ApiError 400 on syntax errors."""
    if text is None or not text.strip():
        return ()
    reqs: list[Requirement] = []
    for raw in _split_top_level(text):
        part = raw.strip()
        if not part:
            raise bad_request(f"unable to parse requirement: found '', expected: identifier in {text!r}")
        if m := _SET_OP.match(part):
            values = tuple(_check_value(v.strip()) for v in m.group(3).split(",") if v.strip() or m.group(3))
            reqs.append(Requirement(_check_key(m.group(1)), m.group(2), values))
        elif m := _CMP_OP.match(part):
            key, op, value = m.group(1), m.group(2), m.group(3)
            if op in (">", "<"):
                if not re.fullmatch(r"-?\d+", value):
                    raise bad_request(
                        f"unable to parse requirement: for 'gt', 'lt' operators, the value must be an integer: {value!r}"
                    )
                reqs.append(Requirement(_check_key(key), "gt" if op == ">" else "lt", (value,)))
            else:
                reqs.append(Requirement(_check_key(key), "!=" if op == "!=" else "=", (_check_value(value),)))
        elif part.startswith("!"):
            reqs.append(Requirement(_check_key(part[1:].strip()), "!"))
        else:
            reqs.append(Requirement(_check_key(part), "exists"))
    return tuple(reqs)


def labels_match(requirements: tuple[Requirement, ...], labels: dict[str, str] | None) -> bool:
    """Whether a label map satisfies every requirement."""
    labels = labels or {}
    return all(r.matches(labels) for r in requirements)


@dataclass(frozen=True)
class FieldRequirement:
    """One field requirement: ``field = value`` or ``field != value``."""

    field: str
    value: str
    negate: bool


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts, current, escaped = [], [], False
    for ch in text:
        if escaped:
            current.append("\\" + ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def parse_field_selector(text: str | None, rtype: ResourceType) -> tuple[FieldRequirement, ...]:
    """Parse a fieldSelector and check every field against the resource's allow-list (400 otherwise)."""
    if text is None or not text.strip():
        return ()
    allowed = {"metadata.name", "metadata.namespace", *rtype.field_labels}
    reqs: list[FieldRequirement] = []
    for part in _split_unescaped(text, ","):
        if not part:
            continue
        m = re.match(r"^(.*?)(!=|==|=)(.*)$", part)
        if not m:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        field, op, value = m.group(1).strip(), m.group(2), _unescape(m.group(3))
        if field not in allowed:
            raise bad_request(f"field label not supported: {field}")
        reqs.append(FieldRequirement(field, value, op == "!="))
    return tuple(reqs)


def _bool(value: object) -> str:
    return "true" if value else "false"


_SPECIAL: dict[str, Callable[[dict], str]] = {
    "source": lambda o: (o.get("source") or {}).get("component") or "",
    "status.successful": lambda o: str((o.get("status") or {}).get("succeeded") or 0),
    "spec.unschedulable": lambda o: _bool((o.get("spec") or {}).get("unschedulable")),
    "spec.hostNetwork": lambda o: _bool((o.get("spec") or {}).get("hostNetwork")),
    "status.podIPs": lambda o: ",".join(p.get("ip", "") for p in (o.get("status") or {}).get("podIPs") or []),
}


def field_value(obj: dict, field: str) -> str:
    """The string value the server compares a field selector against."""
    if field in _SPECIAL:
        return _SPECIAL[field](obj)
    cur: object = obj
    for part in field.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return _bool(cur)
    return str(cur)


def fields_match(requirements: tuple[FieldRequirement, ...], obj: dict) -> bool:
    """Whether an object satisfies every field requirement."""
    for r in requirements:
        equal = field_value(obj, r.field) == r.value
        if equal == r.negate:
            return False
    return True


@dataclass(frozen=True)
class Selector:
    """A parsed label and field selector pair."""

    labels: tuple[Requirement, ...] = ()
    fields: tuple[FieldRequirement, ...] = ()

    def matches(self, obj: dict) -> bool:
        """Whether the object passes both selectors."""
        return labels_match(self.labels, (obj.get("metadata") or {}).get("labels")) and fields_match(
            self.fields, obj
        )

    @property
    def empty(self) -> bool:
        """True when the selector selects everything."""
        return not self.labels and not self.fields


def make_selector(label_selector: str | None, field_selector: str | None, rtype: ResourceType) -> Selector:
    """Parse both selectors for a resource type; raises ApiError 400 on errors."""
    return Selector(parse_label_selector(label_selector), parse_field_selector(field_selector, rtype))
