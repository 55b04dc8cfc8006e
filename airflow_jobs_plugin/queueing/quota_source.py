"""Which quota pool a task's job is under: the task's own choice, or the deployment's default. Pure.

A deployment names its pool once (``[airflow_jobs] quota_configmap`` / ``quota_namespace``, declared in
:mod:`airflow_jobs_plugin.config`); every :class:`~airflow_jobs_plugin.airflow.operators.JobOperator` that names
none is under it, so a DAG written without a thought for quotas (the README's quick start) still waits
its turn. A task names another pool with ``quota_configmap="<name>"``, or leaves the pool with
``quota_configmap=""``, which the pool's policy must allow for the task's group (``opt_out: true``).

A pool someone named (on the task, or a deployment setting other than the shipped name) must exist: a
mistyped name fails the task at submit time instead of leaving the job Inadmissible forever. The shipped
name (``airflow-jobs-quota-policy``) not found means the cluster has no pool installed: no quota.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from airflow_jobs_plugin.queueing.pools import Route, Way
from airflow_jobs_plugin.queueing.quota.model import DEFAULT_POLICY_CONFIGMAP, QuotaPolicy

OPT_OUT = ""  # quota_configmap="" on a task: run outside the deployment's pool


@dataclass(frozen=True)
class QuotaSource:
    """The pool a task asked for. ``configmap`` None: no pool; ``opted_out``: the task left the
    deployment's pool ``deployed`` (which must allow it); ``named_by`` says who chose the name."""

    configmap: str | None
    namespace: str | None
    named_by: str = ""
    must_exist: bool = False
    opted_out: bool = False
    deployed: str | None = None


def choose(
    task_configmap: str | None, task_namespace: str | None, deployed_configmap: str, deployed_namespace: str
) -> QuotaSource:
    """The pool of a task given its arguments (None: not set) and the deployment's options ("": unset)."""
    namespace = task_namespace or deployed_namespace or None
    if task_configmap == OPT_OUT:
        return QuotaSource(
            None, namespace, opted_out=bool(deployed_configmap), deployed=deployed_configmap or None
        )
    if task_configmap is not None:
        return QuotaSource(task_configmap, namespace, "the task's quota_configmap", must_exist=True)
    if not deployed_configmap:
        return QuotaSource(None, None)
    return QuotaSource(
        deployed_configmap,
        namespace,
        "[airflow_jobs] quota_configmap",
        must_exist=deployed_configmap != DEFAULT_POLICY_CONFIGMAP,
    )


def opt_out_problem(
    source: QuotaSource, policy: QuotaPolicy | None, group: str, namespace: str
) -> str | None:
    """Why the task may not leave the deployment's pool, or None if it may (the pool's policy allows
    it for ``group``, or the deployment's pool is not installed)."""
    if not source.opted_out:
        return None
    where = f"the quota pool {source.deployed!r} (namespace {namespace!r})"
    if policy is None:
        return None
    quota = policy.groups.get(group)
    if quota is not None and quota.opt_out:
        return None
    return (
        f"quota_configmap='': group {group!r} may not run outside {where}; remove quota_configmap='' to "
        f"queue for its GPUs, or ask the platform admin to set 'opt_out: true' for the group in the policy"
    )


def route_problem(
    source: QuotaSource, route: Route, group: str, namespace: str, policies: tuple[str, ...]
) -> str | None:
    """Why a task's submit fails against where the admission controller will route its job
    (queueing/pools.py), or ``None``: its group is in no pool of a namespace that has pools (it could
    never run), or the task named a pool, or none, other than the platform's choice."""
    where = f"namespace {namespace!r}"
    if route.unknown_group:
        return route.message
    if source.opted_out and route.way is Way.POOL:
        return (
            f"quota_configmap='': group {group!r} is under the quota pool {route.policy!r} of {where}, and "
            "only the platform decides which groups run outside it ('opt_out: true' for the group in the "
            "policy); remove quota_configmap=''"
        )
    named = source.configmap if source.must_exist else None
    if named is None or named == route.policy or (route.way is Way.HOLD and route.policy is None):
        # A group two policies name is the platform's to fix: the job waits, saying so.
        return None
    if named not in policies:
        close = difflib.get_close_matches(named, policies, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return (
            f"quota_configmap: the quota policy ConfigMap {named!r} (named by {source.named_by}) does not exist "
            f"in namespace {namespace!r}{hint} (policies there: {', '.join(policies) or 'none'}); the cluster "
            "chooses a group's pool, so remove quota_configmap, or fix the name"
        )
    actual = f"the quota pool {route.policy!r}" if route.policy else "no quota pool"
    fix = (
        f"remove quota_configmap, or set it to {route.policy!r}" if route.policy else "remove quota_configmap"
    )
    return (
        f"quota_configmap: {named!r} (named by {source.named_by}) is not the pool of group {group!r}: the "
        f"platform puts it under {actual} "
        f"in {where} (policies there: {', '.join(policies) or 'none'}); {fix}"
    )
