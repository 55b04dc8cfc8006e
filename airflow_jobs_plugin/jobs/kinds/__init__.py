"""One adapter per kind of job: everything that differs between a batch/v1 Job, a kubeflow MPIJob and
a torchrun Indexed Job is answered here, and the rest of the product asks the adapter.

    >>> kind_of({"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob"}).name
    'MPIJob'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_jobs_plugin.cluster.objects import Meta, items, mapping
from airflow_jobs_plugin.cluster.resources import Resource
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.kinds.base import (
    COMPLETION_INDEX,
    LAUNCHER,
    LAUNCHER_RANK,
    TERMINAL_CONDITIONS,
    WORKER,
    Ending,
    EndingWrite,
    JobKind,
    PodSet,
    Then,
)
from airflow_jobs_plugin.jobs.kinds.batch import BATCH_JOB, ENDING_DEADLINE_SECONDS, BatchJob
from airflow_jobs_plugin.jobs.kinds.mpi import LAUNCHER_SUFFIX, MPI_JOB, MPIJob
from airflow_jobs_plugin.jobs.kinds.torchrun import TORCHRUN, TorchrunJob

if TYPE_CHECKING:
    from airflow_jobs_plugin.jobs.spec import JobSpec

# Most specific first: a torchrun Job is also a batch/v1 Job.
KINDS: tuple[JobKind, ...] = (MPI_JOB, TORCHRUN, BATCH_JOB)
# The kind of a job nothing says otherwise of: what kind_of falls back to, and a trigger's or sensor's
# kind when none is given.
DEFAULT_KIND: JobKind = BATCH_JOB
# The values of the author's ``framework`` argument, each the choice of one kind.
FRAMEWORKS = tuple(kind.framework for kind in KINDS if kind.framework is not None)
# The kinds by the product's word for them (what a trigger or sensor is told to follow).
BY_NAME: dict[str, JobKind] = {kind.name: kind for kind in KINDS}
# The ``kind`` the API gives the objects of every kind.
API_KINDS = frozenset(kind.resource.kind for kind in KINDS)
# The API resources the kinds' objects are, each once (a torchrun job is a batch/v1 Job): what a LIST
# of every product job, or a search for one by name, goes through. Those always served first; then the
# ones whose definition may be absent (no MPI operator installed).
RESOURCES = tuple(dict.fromkeys(k.resource for k in sorted(KINDS, key=lambda k: k.resource_may_be_absent)))
# The API kinds by resource plural (what a watch event names), and the adapter that reads a pod's or a
# cached object's kind when only its API kind is known: the least specific of the kinds sharing it.
_RESOURCE_KINDS = {k.resource.plural: k for k in reversed(KINDS)}


def kind_of(job: Mapping[str, Any]) -> JobKind:
    """The adapter for ``job``. List responses omit ``kind`` for built-in types, so the shape decides too."""
    for kind in KINDS:
        if kind.recognises(job):
            return kind
    return DEFAULT_KIND


def for_name(kind: str) -> JobKind:
    """The adapter named ``kind`` (``Job``, ``MPIJob`` or ``torchrun``), before any object is read."""
    try:
        return BY_NAME[kind]
    except KeyError:
        raise ValueError(
            f"kind: must be one of {', '.join(repr(k) for k in BY_NAME)}, got {kind!r}"
        ) from None


def for_choice(framework: str, workers: int) -> JobKind:
    """The kind a job of the author's ``framework`` and ``workers`` runs as: the most specific that
    takes it (an MPIJob needs framework ``mpi`` and two workers or more; ``torchrun`` any number)."""
    for kind in KINDS:
        if kind.takes(framework, workers):
            return kind
    return DEFAULT_KIND


def for_spec(spec: JobSpec) -> JobKind:
    """The kind ``spec`` runs as (``JobSpec.kind`` names it)."""
    return for_choice(spec.framework, spec.workers)


def may_be_absent(resource: Resource) -> bool:
    """Whether a cluster may not serve ``resource`` (a 404 on it means "no such jobs here")."""
    return any(kind.resource_may_be_absent for kind in KINDS if kind.resource == resource)


def is_job_resource(plural: str) -> bool:
    """Whether ``plural`` (a watch event's resource) is one the kinds' objects are."""
    return plural in _RESOURCE_KINDS


def for_api_kind(api_kind: str) -> JobKind | None:
    """The least specific adapter whose objects are of API kind ``api_kind`` (``None``: no job's)."""
    for kind in reversed(KINDS):
        if kind.resource.kind == api_kind:
            return kind
    return None


def made_for_another_job(job: Mapping[str, Any]) -> bool:
    """Whether ``job`` is an object another kind's controller created for its own job (mpi-operator's
    launcher Job of an MPIJob), not a job the product submitted: it carries the job-name label that
    kind's controller puts on what it creates, or is owned by an object of that kind."""
    own = kind_of(job).resource
    job_labels = mapping(job, "metadata", "labels")
    owners = {
        ref.get("kind") for ref in items(job, "metadata", "ownerReferences") if isinstance(ref, Mapping)
    }
    return any(
        kind.resource != own and (kind.pod_job_label in job_labels or kind.resource.kind in owners)
        for kind in KINDS
    )


__all__ = [
    "API_KINDS",
    "ENDING_DEADLINE_SECONDS",
    "BATCH_JOB",
    "BY_NAME",
    "COMPLETION_INDEX",
    "DEFAULT_KIND",
    "FRAMEWORKS",
    "RESOURCES",
    "KINDS",
    "LAUNCHER",
    "LAUNCHER_RANK",
    "LAUNCHER_SUFFIX",
    "MPI_JOB",
    "TERMINAL_CONDITIONS",
    "TORCHRUN",
    "WORKER",
    "BatchJob",
    "Ending",
    "EndingWrite",
    "JobKind",
    "MPIJob",
    "PodSet",
    "Then",
    "TorchrunJob",
    "for_api_kind",
    "for_choice",
    "for_spec",
    "for_name",
    "is_job_resource",
    "kind_of",
    "may_be_absent",
    "made_for_another_job",
]


def job_key(obj: Mapping[str, Any]) -> str | None:
    """The name of the product job an object belongs to: the job itself, or the Job/MPIJob owning a pod.

    MPI pods (and the launcher Job the operator creates) carry the MPIJob's name in the kubeflow label;
    batch Job pods carry their Job's name in the Job controller's labels.
    """
    meta = Meta(obj)
    lbl = meta.labels
    if obj.get("kind") in API_KINDS and labels.MANAGED_BY in lbl and labels.MPI_JOB_NAME not in lbl:
        return meta.name or None
    return (
        lbl.get(labels.MPI_JOB_NAME)
        or lbl.get(labels.BATCH_JOB_NAME)
        or lbl.get(labels.LEGACY_JOB_NAME)
        or ((meta.name or None) if obj.get("kind") in API_KINDS else None)
    )
