"""Which job of an earlier try a new try may follow instead of submitting one (pure, no I/O).

Job names and task keys are predictable from a DAG's identifiers, and every DAG's code runs with the
same worker identity, so a job found under a task's name or task key may have been planted by another
DAG. A try adopts a job only if it is the one this task would have submitted:

* the job carries the digest of this task instance and of the rendered spec this try submits
  (:func:`spec_fingerprint`, the annotation :data:`~airflow_jobs_plugin.jobs.labels.SPEC_FINGERPRINT`,
  stamped at submit and recomputed by every later try), and
* what its pods run is what this try's manifest runs: the same containers and init containers, by name,
  with the same image, command and args, and the same service account (the server defaults none of
  these), so a digest copied onto a job that runs something else does not pass.

A job that fails either check is never adopted and never deleted: the try fails naming it.

A cancel stays a cancel: a job of an earlier try of the same run of the task that carries the Cancelled
verdict ends this try as cancelled (:func:`cancelled_in_run`), even when the try that saw the cancel died
before recording it in the task's state store. A cancel that deleted the job leaves its record instead
(:mod:`airflow_jobs_plugin.jobs.cancel_record`), which the submission reads.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_jobs_plugin.jobs import kinds, labels
from airflow_jobs_plugin.jobs.cancel_record import cancelled_message
from airflow_jobs_plugin.jobs.jobview import JobView
from airflow_jobs_plugin.jobs.naming import TaskIdentity
from airflow_jobs_plugin.jobs.outcome import same_run_of_task
from airflow_jobs_plugin.jobs.spec import JobSpec

# Bumped when what the digest covers changes, so a digest of another version never matches by chance.
_FINGERPRINT_VERSION = "1"


def spec_fingerprint(spec: JobSpec, task: TaskIdentity) -> str:
    """The digest of the task instance (not the try) and the rendered spec, as stamped at submit."""
    document = {
        "v": _FINGERPRINT_VERSION,
        "task": task.instance_key(),
        "kind": spec.kind,
        "spec": spec.to_dict(),
    }
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _runs(job: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """What a job's pods run, per pod template (role), in an order that does not depend on the API."""
    out: list[tuple[str, Any]] = []
    for pod_set in kinds.kind_of(job).pod_sets(job):
        pod = (pod_set.template or {}).get("spec") or {}
        containers = {
            kind: sorted(
                (
                    str(c.get("name")),
                    str(c.get("image")),
                    list(c.get("command") or []),
                    list(c.get("args") or []),
                )
                for c in pod.get(kind) or []
                if isinstance(c, Mapping)
            )
            for kind in ("initContainers", "containers")
        }
        account = pod.get("serviceAccountName") or pod.get("serviceAccount") or "default"
        out.append((pod_set.role, {"containers": containers, "serviceAccountName": account}))
    return sorted(out, key=lambda item: item[0])


def _differences(job: Mapping[str, Any], expected: Mapping[str, Any]) -> list[str]:
    found, wanted = dict(_runs(job)), dict(_runs(expected))
    problems: list[str] = []
    if sorted(found) != sorted(wanted):
        problems.append(f"runs pods of roles {sorted(found)} instead of {sorted(wanted)}")
        return problems
    for role, runs in wanted.items():
        seen = found[role]
        if seen["serviceAccountName"] != runs["serviceAccountName"]:
            problems.append(
                f"{role} pods run as service account {seen['serviceAccountName']!r}, not "
                f"{runs['serviceAccountName']!r}"
            )
        for kind in ("initContainers", "containers"):
            if seen["containers"][kind] != runs["containers"][kind]:
                images = sorted({c[1] for c in seen["containers"][kind]})
                problems.append(
                    f"{role} {kind} differ from this task's (images {', '.join(images) or 'none'})"
                )
    return problems


def foreign_problem(job: Mapping[str, Any], fingerprint: str, expected: Mapping[str, Any]) -> str | None:
    """Why ``job`` is not the job this try would have submitted (None: it is), in one sentence.

    ``fingerprint`` is :func:`spec_fingerprint` of this try's spec; ``expected`` the manifest this try
    would create (its pod templates are compared with ``job``'s)."""
    meta = JobView(job)
    ref = f"{meta.kind.resource.kind} {meta.namespace}/{meta.name}"
    stamped = meta.annotations.get(labels.SPEC_FINGERPRINT)
    problems = []
    if stamped is None:
        problems.append(f"it carries no {labels.SPEC_FINGERPRINT} annotation")
    elif stamped != fingerprint:
        problems.append(f"its {labels.SPEC_FINGERPRINT} is not this task's spec's")
    problems.extend(_differences(job, expected))
    if not problems:
        return None
    return (
        f"{ref} holds this task's name or task key but is not the job this task would submit: "
        f"{'; '.join(problems)}. It was submitted by another DAG, or this task's arguments changed since "
        f"an earlier try: it was left alone. Cancel it (airflow-jobs cancel {meta.namespace}/{meta.name}) "
        f"or delete it, then clear the task"
    )


def cancelled_in_run(
    jobs: Iterable[Mapping[str, Any]], *, try_number: int, max_tries: int | None, retries: int
) -> str | None:
    """The message to end this try with as cancelled, or None: a job of an earlier try of the same run of
    the task (no clear between) was cancelled; after a clear the task runs again."""
    for job in jobs:
        view = JobView(job)
        annotations = view.annotations
        if view.verdict != "Cancelled":
            continue
        try:
            earlier = int(view.labels.get(labels.TRY) or "")
        except ValueError:
            continue
        if not same_run_of_task(earlier, try_number=try_number, max_tries=max_tries, retries=retries):
            continue
        return cancelled_message(
            earlier, view.name, annotations.get(labels.CANCELLED_BY), annotations.get(labels.CANCELLED_AT)
        )
    return None
