"""Pods and events of a namespace indexed by the job they may belong to, built once: :class:`OwnerIndex`.

:func:`~airflow_jobs_plugin.lifecycle.snapshot` accepts a whole namespace's pods and events and picks
out the job's own with :func:`~airflow_jobs_plugin.lifecycle.pods_of` and
:func:`~airflow_jobs_plugin.lifecycle.events_of`. Doing that for every job of a namespace scans
every pod and event once per job: quadratic (1,000 jobs cost 17 s of CPU). The index hands each job a
small *candidate* list instead, a superset of its own objects in their original order, so the
lifecycle's own rules still make the final choice and their result is unchanged:

- a pod is a candidate of a job when one of its owner references carries the job's uid, or one of
  the job-name labels those rules read (the Job controller's two, the MPI operator's) names the job
  or its launcher Job;
- an event is a candidate when its object's uid is the job's or one of its candidate pods', or its
  object's name is the job's, its launcher's, a candidate pod's, an MPI worker's, the pod the Job's
  pod failure policy names, or a pod the job's ``SuccessfulCreate`` events name.

No I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from airflow_jobs_plugin.cluster.objects import dig, items, mapping
from airflow_jobs_plugin.cluster.resources import JOBS
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.kinds import kind_of
from airflow_jobs_plugin.lifecycle.replicas import _CREATED_POD, disrupted_pod

# Every pod label whose value names the job (or the MPIJob's launcher Job) the pod belongs to.
_NAME_LABELS = (labels.BATCH_JOB_NAME, labels.LEGACY_JOB_NAME, labels.MPI_JOB_NAME)
Obj = Mapping[str, Any]


def _about(event: Obj) -> Obj:
    return event.get("involvedObject") or event.get("regarding") or {}


class OwnerIndex:
    """Candidate pods and events per job, from one pass over a namespace's (or several's) objects."""

    def __init__(self, pods: Iterable[Obj], events: Iterable[Obj]) -> None:
        self._pods: dict[str, list[tuple[int, Obj]]] = {}
        for position, pod in enumerate(pods):
            keys = {
                ref.get("uid")
                for ref in items(pod, "metadata", "ownerReferences")
                if isinstance(ref, Mapping)
            }
            pod_labels = mapping(pod, "metadata", "labels")
            keys |= {f"name:{pod_labels.get(key)}" for key in _NAME_LABELS if pod_labels.get(key)}
            keys.discard(None)
            for key in keys:
                self._pods.setdefault(str(key), []).append((position, pod))
        self._events: dict[str, list[tuple[int, Obj]]] = {}
        for position, event in enumerate(events):
            about = _about(event)
            for key in {f"uid:{about.get('uid')}" if about.get("uid") else None, f"name:{about.get('name')}"}:
                if key is not None:
                    self._events.setdefault(key, []).append((position, event))

    def pods_for(self, job: Obj) -> list[Obj]:
        """A superset of ``job``'s pods, in the order they were given."""
        uid = dig(job, "metadata", "uid")
        found: dict[int, Obj] = {}
        # Pods named by the job's label, or by the label of an object made for it (an MPI launcher Job).
        for key in (uid, *(f"name:{creator}" for creator in kind_of(job).pod_creators(job))):
            for position, pod in self._pods.get(str(key), ()) if key else ():
                found[position] = pod
        return [found[p] for p in sorted(found)]

    def events_for(self, job: Obj, pods: Sequence[Obj]) -> list[Obj]:
        """A superset of the events about ``job`` and ``pods`` (its candidate pods), in the given order."""
        name = dig(job, "metadata", "name")
        names = {name} | {related for _, related in kind_of(job).related_names(job)}
        names |= {dig(pod, "metadata", "name") for pod in pods}
        disrupted = disrupted_pod(job)
        if disrupted:
            names.add(disrupted)
        for own in kind_of(job).pod_creators(job):
            for _, event in self._events.get(f"name:{own}", ()):
                # The Job controller's record of each pod it created (see replicas.events_about).
                if _about(event).get("kind") == JOBS.kind and event.get("reason") == "SuccessfulCreate":
                    created = _CREATED_POD.match(str(event.get("message") or event.get("note") or ""))
                    if created:
                        names.add(created["pod"])
        uids = {dig(job, "metadata", "uid")} | {dig(pod, "metadata", "uid") for pod in pods}
        keys = {f"uid:{u}" for u in uids if u} | {f"name:{n}" for n in names if n}
        found: dict[int, Obj] = {}
        for key in keys:
            for position, event in self._events.get(key, ()):
                found[position] = event
        return [found[p] for p in sorted(found)]
