"""The pod log endpoint's query, read and checked as the Kubernetes API server does. Pure.

Upstream (kubernetes/kubernetes, read at the v1.34 series):

* a value that does not decode (``tailLines=x``, a ``sinceTime`` that is not RFC 3339) is a 400 from
  the query's conversion, before the handler runs (``metav1.Time.UnmarshalQueryParameter``:
  ``time.Parse(time.RFC3339, ...)``, which accepts a fraction of a second);
* ``pkg/apis/core/validation/validation.go`` ``ValidatePodLogOptions`` then refuses, with 422 Invalid
  on ``PodLogOptions``: a negative ``tailLines``, ``limitBytes`` below 1, ``sinceSeconds`` below 1, and
  ``sinceTime`` together with ``sinceSeconds``;
* ``pkg/registry/core/pod/strategy.go`` ``LogLocation`` forwards ``sinceTime`` to the kubelet as
  ``SinceTime.Format(time.RFC3339)``: whole seconds, the fraction dropped. The kubelet keeps the lines
  at or after it (``pkg/kubelet/kuberuntime/logs/logs.go``, ``logWriter.write``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

from airflow_jobs_sim import errors

_RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)$")


@dataclass(frozen=True)
class LogOptions:
    """What the kubelet is asked for; ``since`` already cut to whole seconds."""

    tail_lines: int | None = None
    limit_bytes: int | None = None
    since_seconds: int | None = None
    since: datetime | None = None


def _integer(query: Mapping[str, str], key: str) -> int | None:
    raw = query.get(key)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise errors.bad_request(f'strconv.ParseInt: parsing "{raw}": invalid syntax') from None


def _since_time(raw: str | None) -> datetime | None:
    if raw is None or raw in ("", "null"):
        return None
    parsed = None
    if _RFC3339.match(raw):
        head, _, rest = raw.partition(".")
        zone = rest.lstrip("0123456789") if rest else head[19:]
        try:
            parsed = datetime.fromisoformat(head[:19] + ("+00:00" if zone == "Z" else zone))
        except ValueError:
            parsed = None
    if parsed is None:
        raise errors.bad_request(f'parsing time "{raw}" as "2006-01-02T15:04:05Z07:00": cannot parse')
    return parsed.astimezone(timezone.utc)  # whole seconds: the fraction never reaches the kubelet


def parse_log_options(query: Mapping[str, str], pod: str) -> LogOptions:
    """The options of a ``pods/log`` request; raises the ``ApiError`` the API server answers with."""
    tail_lines = _integer(query, "tailLines")
    limit_bytes = _integer(query, "limitBytes")
    since_seconds = _integer(query, "sinceSeconds")
    since = _since_time(query.get("sinceTime"))
    causes = []
    if tail_lines is not None and tail_lines < 0:
        causes.append(errors.invalid_value("tailLines", tail_lines, "must be greater than or equal to 0"))
    if limit_bytes is not None and limit_bytes < 1:
        causes.append(errors.invalid_value("limitBytes", limit_bytes, "must be greater than 0"))
    if since_seconds is not None and since is not None:
        causes.append(errors.forbidden("", "at most one of `sinceTime` or `sinceSeconds` may be specified"))
    elif since_seconds is not None and since_seconds < 1:
        causes.append(errors.invalid_value("sinceSeconds", since_seconds, "must be greater than 0"))
    if causes:
        raise errors.invalid("PodLogOptions", pod, causes)
    return LogOptions(
        tail_lines=tail_lines, limit_bytes=limit_bytes, since_seconds=since_seconds, since=since
    )
