"""Which priority classes a group's jobs may name: the platform's allow-list in the quota policy.

A priority class is a claim on other tenants' GPUs. kube-scheduler preempts running pods of a lower
PriorityClass to place a pod of a higher one (a ``system-node-critical`` training pod evicted another
group's running GPU pod), and Kueue orders and preempts workloads by their WorkloadPriorityClass, or by
their pods' PriorityClass where the job names none (kubernetes-sigs/kueue v0.19.2
``pkg/controller/jobframework/reconciler.go``, ExtractPriority). So a job may name only classes its group
is given:

1. A class named ``system-*`` is never allowed, whatever the policy lists (Kubernetes reserves the
   prefix for its own node- and cluster-critical classes).
2. Otherwise the class must be in the group's ``priority_classes`` (its own list, else the policy's
   ``defaults.priority_classes``; neither: no class at all, and the cluster's default class applies).

One list covers both kinds of class, by name: a PriorityClass and a WorkloadPriorityClass of the same
name are the same grant. A job names classes in its pod templates (``priorityClassName``, from
``priority_class_name`` or a ``pod_template``), an MPIJob in ``runPolicy.schedulingPolicy.priorityClass``
too, and any job in Kueue's label ``kueue.x-k8s.io/priority-class``.

The same rule runs at every door: the DAG's parse (the ``system-`` prefix always, the group's list where
the cluster policy reads the quota policy), the worker's submit (usecases/submission.py), the pool's admission
(queueing/quota/policy.py: such a job waits Inadmissible, never admitted) and the API server (the
admission policy ``airflow-jobs-priority-classes``, its list the ConfigMap of the same name). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from airflow_jobs_plugin.cluster.objects import mapping
from airflow_jobs_plugin.jobs import kinds
from airflow_jobs_plugin.jobs.bounded import excerpt
from airflow_jobs_plugin.jobs.spec import SYSTEM_PRIORITY_CLASS_PREFIX, JobSpec
from airflow_jobs_plugin.queueing.kueue import PRIORITY_CLASS_LABEL
from airflow_jobs_plugin.queueing.quota.model import QuotaPolicy, known_names


def is_system(priority_class: str) -> bool:
    return priority_class.startswith(SYSTEM_PRIORITY_CLASS_PREFIX)


def named_by_job(job: Mapping[str, Any]) -> tuple[str, ...]:
    """Every priority class a job object names (its kind's templates and gang, Kueue's label), each once,
    in the order found."""
    found = list(kinds.kind_of(job).priority_classes(job))
    label = mapping(job, "metadata", "labels").get(PRIORITY_CLASS_LABEL)
    if isinstance(label, str) and label:
        found.append(label)
    return tuple(dict.fromkeys(found))


def named_by_spec(spec: JobSpec) -> tuple[str, ...]:
    """The priority classes a task's arguments name, as its job will (``named_by_job`` of its manifest):
    ``priority_class_name``, else its ``pod_template``'s, and Kueue's label among ``labels``. A value not
    rendered yet (a template at parse time) is left out: it is checked at submit."""
    template = mapping(spec.pod_template, "spec").get("priorityClassName")
    pod = spec.priority_class_name or template
    label = spec.labels.get(PRIORITY_CLASS_LABEL) if isinstance(spec.labels, Mapping) else None
    named = [
        name
        for name in (pod, label)
        if isinstance(name, str) and name and "{{" not in name and "{%" not in name
    ]
    return tuple(dict.fromkeys(named))


def priority_class_problem(policy: QuotaPolicy, group: str, priority_class: str) -> str | None:
    """Why a job of ``group`` may not name ``priority_class`` (None: it may); the message names the group,
    the class, the classes the group may use and the fix."""
    what = f"priority class {excerpt(priority_class)}"
    if is_system(priority_class):
        return (
            f"{what} is one of the cluster's own ({SYSTEM_PRIORITY_CLASS_PREFIX}*), whose pods preempt any "
            "other pod of their node; no job may use it, whatever the quota policy lists -- remove it "
            "(priority_class_name, pod_template or the label "
            f"{PRIORITY_CLASS_LABEL})"
        )
    quota = policy.groups.get(group)
    allowed = quota.priority_classes if quota is not None else frozenset()
    if priority_class in allowed:
        return None
    if quota is None:
        return (
            f"{what}: group {excerpt(group)} is not in the quota policy, so its jobs may use no priority "
            "class"
        )
    return (
        f"{what} is not allowed for group {group!r} (allowed: {known_names(allowed)}); name one of those, "
        "or none for the cluster's default, or ask a platform admin to add it to "
        f"groups.{group}.priority_classes in the quota policy"
    )


def priority_classes_problem(policy: QuotaPolicy, group: str, priority_classes: Iterable[str]) -> str | None:
    """The first problem of the classes a job of ``group`` names (None: its group may use them all)."""
    for name in priority_classes:
        problem = priority_class_problem(policy, group, name)
        if problem is not None:
            return problem
    return None
