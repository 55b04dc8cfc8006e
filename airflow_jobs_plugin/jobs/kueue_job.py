"""What Kueue's labels and ownership say about a job object: the LocalQueue it names, whether Kueue owns it.

Facts of Kueue's API read from plain JSON, so that building, comparing and acting on a job needs no
queueing engine; ``queueing.kueue`` re-exports them beside what Kueue's Workloads mean for admission.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_jobs_plugin.cluster.objects import Meta
from airflow_jobs_plugin.jobs import kinds, labels

# The quota pool's gate, a value of Kueue's admission-gated-by annotation (labels.KUEUE_ADMISSION_GATE):
# the pool's admission of a job Kueue took at creation is its removal.
POOL_GATE = "airflow-jobs.io/quota-pool"


def manages(job: Mapping[str, Any]) -> bool:
    """Whether Kueue, not the product's pool, admits ``job``: it names a LocalQueue.

    A Job another kind's controller made for its job (an MPIJob's launcher) belongs to its parent, as
    in Kueue's ``FindAncestorJobManagedByKueue``."""
    meta = Meta(job)
    own = kinds.kind_of(job).resource
    for ref in meta.owner_references:
        if ref.get("controller") and any(
            k.resource.kind == ref.get("kind") and k.resource != own for k in kinds.KINDS
        ):
            return False
    return bool(meta.labels.get(labels.KUEUE_QUEUE_NAME))


def queue_name(job: Mapping[str, Any]) -> str | None:
    return Meta(job).labels.get(labels.KUEUE_QUEUE_NAME)
