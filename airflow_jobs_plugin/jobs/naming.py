"""Kubernetes names and the product's job names: deterministic, so a retried task finds its job.

Pure (stdlib only). A job's name is ``<dag>-<task>-<hash>-a<attempt>``: a readable slug of the task plus a
hash over every identifier of the task try, sized so that every name the MPI operator derives from it stays
a valid DNS label. :func:`label_value` makes any text a label value (the exact text lives in annotations).
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

# A job has at most MAX_WORKERS workers and MAX_ATTEMPTS job-level attempts (validate() holds the DAG
# author to both): they live here because they size every name the product and the MPI operator derive.
MAX_WORKERS = 1024
MAX_ATTEMPTS = 100

# The MPI operator derives names from the MPIJob name: the launcher Job "<name>-launcher" (also the
# batch.kubernetes.io/job-name label value on its pod), the worker Service "<name>-worker" and worker
# pod hostnames "<name>-worker-<index>". Hostnames and label values are DNS-1123 labels (<= 63), so the
# longest worker hostname, with the highest index MAX_WORKERS - 1, bounds the name. The Service name is
# a DNS-1035 label, which is why a job name always starts with a letter.
DNS_LABEL_MAX = 63
NAME_MAX = DNS_LABEL_MAX - len(f"-worker-{MAX_WORKERS - 1}")  # 51
ATTEMPT_SUFFIX_MAX = len(f"-a{MAX_ATTEMPTS}")
TASK_KEY_MAX = NAME_MAX - ATTEMPT_SUFFIX_MAX
HASH_LEN = 10  # 40 bits: collisions need ~1e6 tasks alive at once, and the slug must match too
SLUG_MAX = TASK_KEY_MAX - HASH_LEN - 1

# Kubernetes name grammars (kubernetes apimachinery pkg/util/validation/validation.go).
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
QUALIFIED_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


@dataclass(frozen=True)
class TaskIdentity:
    """The Airflow task instance a job belongs to. ``map_index`` is -1 for an unmapped task."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int = -1
    try_number: int = 1

    def task_key(self) -> str:
        """See :func:`task_key`."""
        return task_key(self)

    def instance_key(self) -> str:
        """See :func:`instance_key`."""
        return instance_key(self)

    def job_name(self, attempt: int = 1) -> str:
        """See :func:`job_name`."""
        return job_name(self, attempt=attempt)


def _slug(text: str) -> str:
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii").lower()
    return re.sub(r"[^a-z0-9]+", "-", folded).strip("-")


def _fit(dag: str, task: str, budget: int) -> str:
    """Join dag and task slugs within ``budget``, sharing the room so both stay recognisable."""
    if not dag or not task:
        return (dag or task)[:budget].strip("-")
    if len(dag) + 1 + len(task) <= budget:
        return f"{dag}-{task}"
    room = budget - 1
    dag_room = max(room // 2, room - len(task))
    dag_part = dag[:dag_room].strip("-")
    task_part = task[: room - len(dag_part)].strip("-")
    return f"{dag_part}-{task_part}" if dag_part and task_part else (dag_part or task_part)


def _identity_args(args: tuple, kwargs: dict) -> tuple[str, str, str, int | None, int]:
    """Accept either a TaskIdentity or the separate identifiers (dag_id, task_id, run_id, ...)."""
    if args and isinstance(args[0], TaskIdentity):
        if len(args) > 1 or kwargs:
            raise TypeError("pass a TaskIdentity alone, or the identifiers without one")
        t = args[0]
        return t.dag_id, t.task_id, t.run_id, t.map_index, t.try_number
    names = ("dag_id", "task_id", "run_id", "map_index", "try_number")
    values = dict(zip(names, args, strict=False))
    for key, value in kwargs.items():
        if key not in names or key in values:
            raise TypeError(f"unexpected or repeated argument {key!r}")
        values[key] = value
    missing = [n for n in names[:3] if n not in values]
    if missing:
        raise TypeError(f"missing identifiers: {', '.join(missing)}")
    return (
        values["dag_id"],
        values["task_id"],
        values["run_id"],
        values.get("map_index", -1),
        values.get("try_number", 1),
    )


def task_key(*identity: Any, **named: Any) -> str:
    """Deterministic name of one Airflow task try's job, without the attempt suffix.

    Call as ``task_key(dag_id, task_id, run_id, map_index=-1, try_number=1)`` or
    ``task_key(task_identity)``. ``map_index`` None means unmapped (-1).

    ``<dag>-<task>-<hash>``: a readable slug (ASCII-folded, so unicode ids work) plus ten hex digits of
    a SHA-256 over every identifier, so distinct task instances get distinct keys even when their
    slugs are equal or truncated. Starts with a letter and is at most :data:`TASK_KEY_MAX` characters.
    """
    dag_id, task_id, run_id, map_index, try_number = _identity_args(identity, named)
    index = -1 if map_index is None else int(map_index)
    payload = json.dumps([str(dag_id), str(task_id), str(run_id), index, int(try_number)], ensure_ascii=False)
    digest = hashlib.sha256(payload.encode("utf-8")).hexdigest()[:HASH_LEN]
    slug = _fit(_slug(str(dag_id)), _slug(str(task_id)), SLUG_MAX)
    if not slug:
        slug = "job"
    elif not slug[0].isalpha():
        slug = ("j-" + slug)[:SLUG_MAX].strip("-")
    return f"{slug}-{digest}"


def instance_key(*identity: Any, **named: Any) -> str:
    """Label value naming the Airflow task instance (dag, task, run, map index) across all its tries.

    Unlike :func:`task_key`, the try number is not part of it: a retried task lists jobs by this key
    (the ``TASK_KEY`` label) to find a still-live job of an earlier try and reattach instead of
    submitting a second one. Same shape as :func:`task_key`: readable slug plus a hash.
    """
    dag_id, task_id, run_id, map_index, _try = _identity_args(identity, named)
    return task_key(dag_id, task_id, run_id, map_index=map_index, try_number=0)


def _check_attempt(attempt: Any) -> int:
    if isinstance(attempt, bool) or not isinstance(attempt, int) or not 1 <= attempt <= MAX_ATTEMPTS:
        raise ValueError(f"attempt must be a whole number from 1 to {MAX_ATTEMPTS}, got {attempt!r}")
    return attempt


def job_name(*identity: Any, attempt: int = 1, **named: Any) -> str:
    """Deterministic job name for one attempt: ``<task_key>-a<attempt>``.

    Call as ``job_name(dag_id, task_id, run_id, map_index, try_number, attempt=2)`` or
    ``job_name(task_identity, attempt=2)``; a sixth positional identifier is the attempt.

    A DNS-1123 label starting with a letter, at most :data:`NAME_MAX` (51) characters so that every
    name the MPI operator derives from it (``-launcher``, ``-worker-1023``) stays a valid 63-character
    label. Job-level retries (a new attempt after a node loss, say) get a new name; the Airflow try
    number is part of the hash, so each Airflow try has its own family of attempts.
    """
    if len(identity) == 6 and not isinstance(identity[0], TaskIdentity):
        identity, attempt = identity[:5], int(identity[-1])
    return f"{task_key(*identity, **named)}-a{_check_attempt(attempt)}"


_ATTEMPT_SUFFIX = re.compile(r"^(?P<key>.+)-a(?P<attempt>[1-9][0-9]*)$")


def split_attempt(name: str) -> tuple[str, int]:
    """``('<task_key>', attempt)`` from a name made by :func:`job_name`; ValueError for other names."""
    match = _ATTEMPT_SUFFIX.match(name)
    if not match:
        raise ValueError(f"{name!r} is not a job name of this product (no -a<attempt> suffix)")
    return match.group("key"), int(match.group("attempt"))


def attempt_name(name: str, attempt: int) -> str:
    """The name of attempt ``attempt`` of the same task try as the job called ``name``."""
    key, _ = split_attempt(name)
    return f"{key}-a{_check_attempt(attempt)}"


def label_value(text: str) -> str:
    """A valid Kubernetes label value for ``text``: unchanged when already valid, else a stable slug.

    A lossy slug gets six hex digits of the original's hash appended, so two different inputs (say
    ``a@b`` and ``a-b``) do not end up with the same label value.
    """
    if len(text) <= DNS_LABEL_MAX and LABEL_VALUE.match(text):
        return text
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", folded)
    base = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", base)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:6]
    base = re.sub(r"[^A-Za-z0-9]+$", "", base[: DNS_LABEL_MAX - 7])
    return f"{base}-{digest}" if base else digest


def is_dns_label(text: str) -> bool:
    """True for a DNS-1123 label (lower-case alphanumerics and '-', at most 63 characters)."""
    return len(text) <= DNS_LABEL_MAX and bool(DNS_LABEL.match(text))
