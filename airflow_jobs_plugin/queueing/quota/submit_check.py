"""The submit-time check of a job against its quota pool, before the job is created.

The rule the worker applies to the policy it read: whether the group exists and the user may charge
it, whether the group may use the priority classes the job names, which GPU flavor (or flavored nodes to avoid) the job is charged for, and whether the job could
ever fit what its user or its group may hold. The admission passes on the triggerer apply the same
rules (their wording is the model's and :func:`~.policy.claim_problem`'s), so a job refused here
would never have been admitted there. Pure: no I/O; the worker's shell (``usecases/submission.py``) reads the
policy ConfigMap and calls :func:`submit_charge`.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping

from airflow_jobs_plugin.cluster.objects import Meta
from airflow_jobs_plugin.jobs.labels import GPU_RESOURCE
from airflow_jobs_plugin.queueing.quota import flavors
from airflow_jobs_plugin.queueing.quota.model import POLICY_KEY, QuotaPolicy
from airflow_jobs_plugin.queueing.quota.policy import claim_problem
from airflow_jobs_plugin.queueing.quota.priority_classes import priority_classes_problem


class OverQuotaError(ValueError):
    """A job needs more GPUs than its user or its group may ever hold: it could never be admitted."""


class PolicyNotFoundError(ValueError):
    """The ``quota_configmap`` a job names does not exist: it would wait as Inadmissible forever."""


def policy_configmap_names(configmaps: Iterable[Mapping]) -> list[str]:
    """The names of the ConfigMaps of a listing that hold a quota policy (key ``policy.yaml``)."""
    return sorted(Meta(cm).name for cm in configmaps if POLICY_KEY in (cm.get("data") or {}))


def policy_not_found(quota_configmap: str, quota_namespace: str, policies: Iterable[str]) -> str:
    """Why a named policy ConfigMap cannot be used, with the policy ConfigMaps that do exist (and the
    closest of them, for a typo)."""
    known_policies = sorted(policies)
    close = difflib.get_close_matches(quota_configmap, known_policies, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    known = ", ".join(known_policies) or "none"
    return (
        f"quota_configmap: no ConfigMap {quota_configmap!r} in namespace {quota_namespace}{hint} "
        f"(quota policy ConfigMaps there: {known}); fix quota_configmap, or ask a platform admin to create "
        f"the policy (key {POLICY_KEY}) before submitting"
    )


def submit_charge(
    policy: QuotaPolicy,
    group: str,
    user: str,
    gpus: int,
    *,
    kueue_queue: str | None = None,
    resource: str = GPU_RESOURCE,
    node_selector: Mapping[str, str] | None = None,
    priority_classes: Iterable[str] = (),
) -> flavors.Charge:
    """How a job of ``gpus`` (the total over all replicas) in ``group`` charged to ``user`` is
    charged: its GPU flavor, or the flavored nodes it must avoid.

    A job handed to Kueue (``kueue_queue``) is checked against its user's limit only: the group's
    quota is its ClusterQueue's.

    Raises :class:`~.model.UnknownGroupError` (a ValueError) naming the group and the known groups, a
    ValueError if ``user`` is not a member of a group that lists its members (or the charging map
    forbids it), if the group may not use one of the ``priority_classes`` the job names
    (:func:`~.priority_classes.priority_class_problem`) or if ``node_selector`` and the policy's GPU
    flavors disagree, and
    :class:`OverQuotaError` if ``gpus`` exceeds what ``user`` may ever hold in ``group``.
    """
    group_quota = policy.require_group(group)
    problem = (
        claim_problem(policy, owner=user, user=None, group=group)
        or policy.charge_problem(group, user)
        or priority_classes_problem(policy, group, priority_classes)
    )
    if problem:  # the rules and their wording live in the model and the decision, shared with admission
        raise ValueError(problem)
    charged = flavors.charge(
        policy.flavors, group, group_quota.flavors, group_quota.gpus, resource, node_selector
    )
    key = charged.key
    if key == GPU_RESOURCE:
        unit = "GPUs"
    elif charged.flavor is not None:
        unit = f"{key} GPUs"
    else:
        unit = key
    whole = policy.capacity(group, key)
    if gpus > whole and kueue_queue is None:
        hint = (
            "ask for fewer GPUs or a larger group quota"
            if key == GPU_RESOURCE or whole or charged.flavor is not None
            else f"ask a platform admin for groups.{group}.devices.{resource} in the quota policy"
        )
        raise OverQuotaError(
            f"the job needs {gpus} {unit} but the whole quota of group {group} is {whole}: "
            f"it could never start; {hint}"
        )
    limit = policy.user_capacity(group, user, key)
    if gpus > limit:
        raise OverQuotaError(
            f"the job needs {gpus} {unit} but user {user} may hold at most {limit} in group {group}: "
            "it could never start; ask for fewer GPUs or a larger user quota"
        )
    return charged
