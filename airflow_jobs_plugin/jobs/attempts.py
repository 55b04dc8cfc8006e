"""Job-level attempts: the next attempt of a job is a copy of the previous one's cluster object.

When a job fails for a retryable reason (node lost, evicted, preempted, transient image pull), the
trigger submits a new attempt. It clones the failed attempt's object from the cluster instead of
rebuilding it from the DAG's arguments, so no manifest (whose env may hold secrets) ever travels
through trigger kwargs, and a trigger rebuilt after a restart needs nothing but cluster state.
Pure functions, no I/O.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, cast

from airflow_jobs_plugin.cluster.objects import Meta, rfc3339
from airflow_jobs_plugin.jobs import kinds, labels
from airflow_jobs_plugin.jobs.pod_template import created_label, merge_under
from airflow_jobs_plugin.queueing import queue_clock

# Keys the API server or a controller writes; a new object must not carry them over.
_SERVER_METADATA = (
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "generation",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "ownerReferences",
    "finalizers",
)
# The Job controller adds these to a Job's selector and pod template; a new Job gets its own.
_CONTROLLER_LABELS = (
    labels.LEGACY_CONTROLLER_UID,
    labels.CONTROLLER_UID,
    labels.BATCH_JOB_NAME,
    labels.LEGACY_JOB_NAME,
)
# Per-attempt bookkeeping the admission and trigger write; the next attempt starts without it.
_ATTEMPT_ANNOTATIONS = (labels.ADMITTED_AT, labels.VERDICT, labels.VERDICT_MESSAGE, labels.CANCELLED_BY)


def attempt_of(obj: Mapping[str, Any]) -> int:
    """The job-level attempt number recorded on a job object (1 if absent)."""
    value = Meta(obj).labels.get(labels.ATTEMPT, "1")
    try:
        return max(1, int(value))
    except ValueError:
        return 1


def latest_attempt(objects: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The object with the highest attempt number among the attempts of one task try."""
    best = None
    for obj in objects:
        if best is None or attempt_of(obj) > attempt_of(best):
            best = obj
    return best


def next_attempt(
    previous: Mapping[str, Any], *, name: str, attempt: int, not_before: datetime, now: datetime
) -> dict:
    """A new suspended job object for ``attempt``, cloned from the ``previous`` attempt's object.

    It keeps the original queue position (queued-at) and carries the time before which admission must
    not start it (the exponential back-off), so the wait survives a triggerer restart.
    """
    obj = copy.deepcopy(dict(previous))
    obj.pop("status", None)
    meta = obj.setdefault("metadata", {})
    for key in _SERVER_METADATA:
        meta.pop(key, None)
    meta["name"] = name
    meta.pop("generateName", None)
    meta_labels = meta.setdefault("labels", {})
    for key in _CONTROLLER_LABELS:
        meta_labels.pop(key, None)
    meta_labels[labels.ATTEMPT] = str(attempt)
    meta_labels[labels.CREATED] = created_label(now)
    meta_labels.pop(labels.ADMITTED, None)
    annotations = meta.setdefault("annotations", {})
    if annotations.get(labels.KUEUE_HANDOFF):
        # A job the pool hands to Kueue: the new attempt waits for its user's limit again before the
        # pool gives it its LocalQueue (quota.ledger.handoff_patch).
        meta_labels.pop(labels.KUEUE_QUEUE_NAME, None)
    # The ended attempt's run is off the queue clock: the wait before its admission is banked and the
    # new attempt's wait starts now (read before admitted-at goes below).
    annotations.update(queue_clock.leave_queue(annotations, now, rejoin=True))
    for key in _ATTEMPT_ANNOTATIONS:
        annotations.pop(key, None)
    ended = annotations.pop(labels.ENDED_SPEC, None)
    annotations[labels.REQUEUE_COUNT] = "0"
    annotations[labels.REQUEUE_NOT_BEFORE] = rfc3339(not_before)
    annotations.setdefault(labels.QUEUED_AT, rfc3339(now))

    spec = obj.setdefault("spec", {})
    kind = kinds.kind_of(obj)
    obj["spec"] = spec = merge_under(spec, kind.suspend_patch(True))
    kind.clear_run(spec, _ended_fields(ended))
    # The adapter's pod sets hand back the templates inside ``obj`` itself, changed in place below.
    templates = [cast(dict, pod_set.template) for pod_set in kind.pod_sets(obj) if pod_set.template]
    for template in templates:
        tmeta = template.setdefault("metadata", {})
        tlabels = tmeta.setdefault("labels", {})
        for key in _CONTROLLER_LABELS:
            tlabels.pop(key, None)
        tlabels[labels.ATTEMPT] = str(attempt)
        for container in (template.get("spec") or {}).get("containers") or []:
            for env in container.get("env") or []:
                if env.get("name") == "JOB_ATTEMPT":
                    env["value"] = str(attempt)
                if env.get("name") == "JOB_NAME":
                    env["value"] = name
    return obj


def _ended_fields(recorded: str | None) -> dict[str, Any]:
    if not recorded:
        return {}
    try:
        fields = json.loads(recorded)
    except ValueError:
        return {}
    return fields if isinstance(fields, dict) else {}
