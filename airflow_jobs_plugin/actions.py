"""What a person does to a job on purpose: cancel it (and, later in this module, stop and resume it).

One implementation for every door a user comes through: the GPU Jobs page and the CLI (through
:mod:`airflow_jobs_plugin.inspect`) and Airflow's own mark failed / mark success / clear (through
``JobTrigger.on_kill``). The action is always taken on the newest attempt of the task try the named job
belongs to, so an earlier attempt's name, as printed in an old log line, still finds the live job.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from airflow_jobs_plugin import attempts, labels
from airflow_jobs_plugin.kube import JOBS, MPIJOBS, KubeClient, KubeError, Resource
from airflow_jobs_plugin.quota.ledger import is_finished, release


@dataclass(frozen=True)
class CancelOutcome:
    """What cancelling did: the job (latest attempt) it ruled on and whether the object was deleted."""

    namespace: str
    name: str
    kind: str
    deleted: bool
    already_finished: bool


def resource_of(job: Mapping[str, Any]) -> Resource:
    return MPIJOBS if job.get("kind") == "MPIJob" else JOBS


async def newest_attempt(client: KubeClient, namespace: str, job: Mapping[str, Any]) -> dict:
    """The newest job-level attempt of the task try ``job`` belongs to (``job`` itself if it is alone)."""
    resource = resource_of(job)
    meta_labels = (job.get("metadata") or {}).get("labels") or {}
    if not meta_labels.get(labels.TASK_KEY):
        return dict(job)
    selector = f"{labels.TASK_KEY}={meta_labels[labels.TASK_KEY]}"
    if meta_labels.get(labels.TRY):
        selector += f",{labels.TRY}={meta_labels[labels.TRY]}"
    listing = await client.list(resource, namespace, label_selector=selector)
    latest = dict(attempts.latest_attempt(listing.get("items") or []) or job)
    latest.setdefault("kind", resource.kind)
    return latest


async def cancel(
    client: KubeClient,
    namespace: str,
    job: Mapping[str, Any],
    by: str,
    ledger_namespace: str | None,
) -> CancelOutcome:
    """Cancel ``job``'s newest attempt: rule it Cancelled, free its quota, delete it.

    The verdict goes on first, so every reader (the task's trigger above all) reports CANCELLED even
    while the pods stop; the reservation is released (``ledger_namespace`` None: no quota pool), then
    the object is deleted with Background propagation so its pods go with it. A job that already
    finished is left alone.
    """
    job = await newest_attempt(client, namespace, job)
    resource = resource_of(job)
    meta = job["metadata"]
    name = meta["name"]
    if is_finished(job):
        return CancelOutcome(namespace, name, resource.kind, False, True)
    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    with contextlib.suppress(KubeError):
        await client.merge_patch(
            resource,
            namespace,
            name,
            {
                "metadata": {
                    "annotations": {
                        labels.VERDICT: "Cancelled",
                        labels.CANCELLED_BY: by,
                        labels.CANCELLED_AT: when,
                    }
                }
            },
        )
    meta_labels = meta.get("labels") or {}
    group = (meta.get("annotations") or {}).get(labels.GROUP_NAME) or meta_labels.get(labels.GROUP)
    if ledger_namespace and group and meta.get("uid"):
        with contextlib.suppress(KubeError):
            await release(client, ledger_namespace, group, meta["uid"])
    deleted = await client.delete(resource, namespace, name, propagation_policy="Background")
    return CancelOutcome(namespace, name, resource.kind, deleted, False)
