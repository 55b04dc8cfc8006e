"""Reading plain Kubernetes objects (dicts as the API server returns them in JSON).

Lists return items without ``kind``/``apiVersion`` for built-in types and many fields are omitted
when empty, so every accessor here tolerates missing keys and ``None`` values.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TypeVar

_M = TypeVar("_M", bound=Mapping[str, Any])

_RFC3339 = re.compile(
    r"^(?P<date>\d{4}-\d{2}-\d{2})[Tt ](?P<time>\d{2}:\d{2}:\d{2})(?:\.(?P<frac>\d+))?"
    r"(?P<tz>[Zz]|[+-]\d{2}:\d{2})?$"
)


def dig(obj: Mapping[str, Any] | None, *path: str) -> Any:
    """Follow ``path`` through nested mappings, returning ``None`` where anything is missing."""
    current: Any = obj
    for key in path:
        # Decoded JSON is plain dicts: ``type() is dict`` costs a seventh of the ABC check, which other
        # mappings still get. A snapshot digs a few hundred times.
        if type(current) is not dict and not isinstance(current, Mapping):
            return None
        current = current.get(key)
    return current


def items(obj: Mapping[str, Any] | None, *path: str) -> list[Any]:
    """A list field that may be absent or ``null``."""
    value = dig(obj, *path)
    return list(value) if isinstance(value, list) else []


def mapping(obj: Mapping[str, Any] | None, *path: str) -> Mapping[str, Any]:
    """A map field (labels, annotations, ...) that may be absent or ``null``."""
    value = dig(obj, *path)
    return value if type(value) is dict or isinstance(value, Mapping) else {}


def parse_time(value: Any) -> datetime | None:
    """Parse an RFC 3339 timestamp (``metav1.Time`` or ``MicroTime``) into an aware UTC datetime.

    Accepts a datetime as well (objects built in tests or by other clients); naive ones are UTC.
    Anything unparseable reads as absent rather than failing the whole snapshot.
    """
    if isinstance(value, datetime):
        return as_utc(value)
    if not isinstance(value, str):
        return None
    return _parse_rfc3339(value)


def time_text(moment: datetime | str | None) -> str:
    """A moment as the pages, the CLI and the messages print it for a person: ``2026-12-05 06:59:38 UTC``.

    A message carries one time format whatever wrote the moment (an annotation's RFC 3339, a history
    entry's microseconds): the page's tables print the same, under a "(UTC)" heading. Text that does not
    parse as a time is printed as it is."""
    parsed = parse_time(moment)
    if parsed is None:
        return "" if moment is None else str(moment)
    return parsed.strftime("%Y-%m-%d %H:%M:%S") + " UTC"


# The same few timestamps (a pod's creation, its conditions' transitions) are read again at every look
# at a job; a datetime is immutable, so the parse of each string is done once.
@functools.lru_cache(maxsize=8192)
def _parse_rfc3339(value: str) -> datetime | None:
    match = _RFC3339.match(value.strip())
    if not match:
        return None
    # Python 3.10's fromisoformat accepts only 3 or 6 fractional digits; the API uses 0 to 9.
    frac = (match.group("frac") or "")[:6].ljust(6, "0")
    tz = match.group("tz") or "Z"
    tz = "+00:00" if tz in ("Z", "z") else tz
    try:
        parsed = datetime.fromisoformat(f"{match.group('date')}T{match.group('time')}.{frac}{tz}")
    except ValueError:
        return None
    return parsed.astimezone(timezone.utc)


def parse_rfc3339(value: object, what: str = "timestamp") -> datetime:
    """``value`` as an aware datetime, strictly: what the product itself wrote (a ledger entry, a time it
    round-trips), where a malformed time is an error to report, naming ``what``, not an absent one
    (:func:`parse_time` is the lenient reader of the API's objects)."""
    if not isinstance(value, str):
        raise ValueError(f"{what} must be an RFC 3339 string, got {value!r}")
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError(f"{what} must carry a time zone, got {value!r}")
    return parsed


def rfc3339(moment: datetime) -> str:
    """UTC RFC 3339 with microseconds ('2024-05-01T12:00:00.000123Z'): the one form of every time the
    product writes. Microseconds keep two jobs queued within the same second in their true order. A
    naive datetime is refused: the product computes times aware, and a naive one is a local time
    whose zone nobody knows."""
    if moment.tzinfo is None:
        raise ValueError(f"timestamp must be timezone-aware, got naive {moment!r}")
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def as_utc(moment: datetime) -> datetime:
    """An aware UTC datetime; naive input is taken to be UTC already."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc)


def condition(obj: Mapping[str, Any] | None, kind: str) -> Mapping[str, Any] | None:
    """The first status condition of type ``kind`` (what the API's own helpers look at)."""
    for cond in items(obj, "status", "conditions"):
        if (type(cond) is dict or isinstance(cond, Mapping)) and cond.get("type") == kind:
            return cond
    return None


def condition_true(obj: Mapping[str, Any] | None, kind: str) -> bool:
    """Whether the first condition of type ``kind`` has status ``"True"``."""
    cond = condition(obj, kind)
    return cond is not None and cond.get("status") == "True"


def as_int(value: Any, default: int | None = None) -> int | None:
    """An integer from a number or a numeric string (annotations are strings), else ``default``."""
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return default
    return default


def latest(objs: Iterable[_M], when: Callable[[_M], datetime | None]) -> _M | None:
    """The object with the greatest timestamp according to ``when(obj)`` (ties: the later in order; no
    timestamp: the earliest)."""
    best: _M | None = None
    best_time: datetime | None = None
    for obj in objs:
        moment = when(obj) or datetime.min.replace(tzinfo=timezone.utc)
        if best is None or best_time is None or moment >= best_time:
            best, best_time = obj, moment
    return best


@dataclass(frozen=True, slots=True)
class Meta:
    """A read-only view of any object's ``metadata`` (a pod, a node, a ConfigMap, a Workload, a list):
    the one walk of it, where an absent or ``null`` field reads as empty. Modelled on kopf's
    ``bodies.Meta`` (nolar/kopf ``kopf/_cogs/structs/bodies.py``); ``jobs.jobview.JobView`` extends it
    with what the product reads of a job.

        >>> Meta({"metadata": {"name": "p", "labels": None}}).name, Meta({}).labels
        ('p', {})
    """

    obj: Mapping[str, Any] | None

    @property
    def fields(self) -> Mapping[str, Any]:
        """The ``metadata`` mapping itself (empty when absent)."""
        return mapping(self.obj, "metadata")

    @property
    def name(self) -> str:
        return str(self.fields.get("name") or "")

    @property
    def namespace(self) -> str:
        return str(self.fields.get("namespace") or "")

    @property
    def uid(self) -> str:
        return str(self.fields.get("uid") or "")

    @property
    def resource_version(self) -> str | None:
        """The version the server gave (``None`` for an object not read from it)."""
        value = self.fields.get("resourceVersion")
        return str(value) if value else None

    @property
    def labels(self) -> Mapping[str, Any]:
        return mapping(self.obj, "metadata", "labels")

    @property
    def annotations(self) -> Mapping[str, Any]:
        return mapping(self.obj, "metadata", "annotations")

    @property
    def owner_references(self) -> list[Any]:
        return items(self.obj, "metadata", "ownerReferences")

    @property
    def creation_timestamp(self) -> str:
        """As written (RFC 3339 orders as text, the sort key of "newest first"); ``""`` when absent."""
        value = self.fields.get("creationTimestamp")
        return (
            value if isinstance(value, str) else rfc3339(as_utc(value)) if isinstance(value, datetime) else ""
        )

    @property
    def created_at(self) -> datetime | None:
        return parse_time(self.fields.get("creationTimestamp"))

    @property
    def deleting(self) -> bool:
        """A deletion is under way (a ``deletionTimestamp`` is set): the object is on its way out."""
        return bool(self.fields.get("deletionTimestamp"))

    @property
    def deletion_time(self) -> datetime | None:
        """When a graceful deletion is due: the server sets ``deletionTimestamp`` to the time the object
        will be removed once its grace period ends (``ObjectMeta.DeletionTimestamp``, kubernetes v1.36.3
        ``staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/types.go``); ``None`` if no deletion is under
        way or the time does not parse."""
        return parse_time(self.fields.get("deletionTimestamp"))

    @property
    def continue_token(self) -> str | None:
        """A list's ``metadata.continue``: the next page's token, ``None`` on the last page."""
        return self.fields.get("continue") or None
