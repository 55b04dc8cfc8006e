"""One adapter per kind of job: everything that differs between a batch/v1 Job, a kubeflow MPIJob and
a torchrun Indexed Job is answered here, and the rest of the product asks the adapter.

    >>> kind_of({"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob"}).name
    'MPIJob'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import labels
from .base import COMPLETION_INDEX, LAUNCHER, TERMINAL_CONDITIONS, WORKER, JobKind, PodSet
from .batch import BATCH_JOB, BatchJob
from .mpi import LAUNCHER_SUFFIX, MPI_JOB, MPIJob
from .torchrun import TORCHRUN, TorchrunJob

# Most specific first: a torchrun Job is also a batch/v1 Job.
KINDS: tuple[JobKind, ...] = (MPI_JOB, TORCHRUN, BATCH_JOB)
# The kinds by the product's word for them (what a trigger or sensor is told to follow).
BY_NAME: dict[str, JobKind] = {kind.name: kind for kind in KINDS}
# The ``kind`` the API gives the objects of every kind.
API_KINDS = frozenset(kind.resource.kind for kind in KINDS)
# The API resources the kinds' objects are, each once (a torchrun job is a batch/v1 Job): what a LIST
# of every product job, or a search for one by name, goes through. Those always served first; then the
# ones whose definition may be absent (no MPI operator installed).
RESOURCES = tuple(dict.fromkeys(k.resource for k in sorted(KINDS, key=lambda k: k.resource_may_be_absent)))


def kind_of(job: Mapping[str, Any]) -> JobKind:
    """The adapter for ``job``. List responses omit ``kind`` for built-in types, so the shape decides too."""
    for kind in KINDS:
        if kind.recognises(job):
            return kind
    return BATCH_JOB


def for_name(kind: str) -> JobKind:
    """The adapter named ``kind`` (``Job``, ``MPIJob`` or ``torchrun``), before any object is read."""
    try:
        return BY_NAME[kind]
    except KeyError:
        raise ValueError(
            f"kind: must be one of {', '.join(repr(k) for k in BY_NAME)}, got {kind!r}"
        ) from None


def is_mpi(job: Mapping[str, Any]) -> bool:
    return kind_of(job) is MPI_JOB


__all__ = [
    "API_KINDS",
    "BATCH_JOB",
    "BY_NAME",
    "COMPLETION_INDEX",
    "KINDS",
    "LAUNCHER",
    "LAUNCHER_SUFFIX",
    "MPI_JOB",
    "TERMINAL_CONDITIONS",
    "TORCHRUN",
    "WORKER",
    "BatchJob",
    "JobKind",
    "MPIJob",
    "PodSet",
    "TorchrunJob",
    "for_name",
    "is_mpi",
    "kind_of",
]


def job_key(obj: Mapping[str, Any]) -> str | None:
    """The name of the product job an object belongs to: the job itself, or the Job/MPIJob owning a pod.

    MPI pods (and the launcher Job the operator creates) carry the MPIJob's name in the kubeflow label;
    batch Job pods carry their Job's name in the Job controller's labels.
    """
    meta = obj.get("metadata") or {}
    lbl = meta.get("labels") or {}
    if obj.get("kind") in API_KINDS and labels.MANAGED_BY in lbl and labels.MPI_JOB_NAME not in lbl:
        return meta.get("name")
    return (
        lbl.get(labels.MPI_JOB_NAME)
        or lbl.get(labels.BATCH_JOB_NAME)
        or lbl.get(labels.LEGACY_JOB_NAME)
        or (meta.get("name") if obj.get("kind") in API_KINDS else None)
    )
