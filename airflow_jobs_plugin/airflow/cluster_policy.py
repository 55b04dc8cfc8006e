"""An Airflow cluster policy that keeps DAGs from spending other people's GPU quota.

Off until an admin turns it on, in ``$AIRFLOW_HOME/config/airflow_local_settings.py``::

    from airflow_jobs_plugin.airflow.cluster_policy import task_policy  # noqa: F401

and points ``[airflow_jobs] quota_policy_file`` (``AIRFLOW__AIRFLOW_JOBS__QUOTA_POLICY_FILE``) at the quota
policy YAML, for example the policy ConfigMap mounted into the dag processor. With it, a DAG whose
JobOperator names another user, an unknown group, a group its owner is not a member of or a priority class
its group may not use fails to import, with the reason in the import error. The rules themselves are
``quota.policy.claim_problem`` and ``quota.priority_classes.priority_class_problem``.

A platform that decides who may charge what sets ``[airflow_jobs] charging_file`` too: the DAG's folder
then decides which groups and users its tasks may charge (``charging.charge_problem``), whatever the
task's self-declared owner; the shipped Helm values do this.
"""

from __future__ import annotations

import logging
import os
from functools import lru_cache

from airflow.exceptions import AirflowClusterPolicyViolation

from airflow_jobs_plugin.queueing.charging import (
    ChargingError,
    ChargingMap,
    charge_problem,
    parse_charging,
)
from airflow_jobs_plugin.queueing.quota.model import QuotaPolicy
from airflow_jobs_plugin.queueing.quota.parse import parse_policy
from airflow_jobs_plugin.queueing.quota.policy import claim_problem
from airflow_jobs_plugin.queueing.quota.priority_classes import named_by_spec, priority_classes_problem

log = logging.getLogger(__name__)

CONFIG_SECTION = "airflow_jobs"
CONFIG_KEY = "quota_policy_file"


def _policy_path() -> str:
    from airflow.configuration import conf

    path = conf.get(CONFIG_SECTION, CONFIG_KEY, fallback=None)
    if not path:
        raise AirflowClusterPolicyViolation(
            f"the airflow-jobs cluster policy is enabled but [{CONFIG_SECTION}] {CONFIG_KEY} is not set: "
            "point it at the quota policy YAML"
        )
    return path


@lru_cache(maxsize=8)
def _text(path: str, mtime_ns: int) -> str:
    # Keyed by modification time: a ConfigMap mounted and updated in place is picked up on the next parse.
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def _read(path: str, what: str) -> str:
    try:
        return _text(path, os.stat(path).st_mtime_ns)
    except OSError as exc:
        raise AirflowClusterPolicyViolation(f"cannot read the {what} {path}: {exc}") from exc


@lru_cache(maxsize=8)
def _policy(text: str) -> QuotaPolicy:
    return parse_policy(text)


@lru_cache(maxsize=8)
def _charging(text: str) -> ChargingMap:
    return parse_charging(text)


def load_policy(path: str) -> QuotaPolicy:
    try:
        return _policy(_read(path, "quota policy"))
    except ValueError as exc:
        raise AirflowClusterPolicyViolation(f"the quota policy {path} is invalid: {exc}") from exc


def load_charging(path: str) -> ChargingMap:
    try:
        return _charging(_read(path, "charging map"))
    except ChargingError as exc:
        raise AirflowClusterPolicyViolation(f"the charging map {path} is invalid: {exc}") from exc


def _charging_path() -> str:
    from airflow_jobs_plugin import config

    return config.get("charging_file")


def task_policy(task) -> None:
    """Airflow's per-task cluster policy hook: checks every JobOperator task as its DAG is parsed."""
    from airflow_jobs_plugin.airflow.operators import JobOperator

    if not isinstance(task, JobOperator):
        return
    where = f"task {task.task_id!r}"
    for field, value in (("group", task.group), ("user", task.user)):
        if isinstance(value, str) and "{{" in value:
            raise AirflowClusterPolicyViolation(
                f"{where}: {field} is a template; with the quota cluster policy on, it must be a plain "
                "value so it can be checked when the DAG is parsed"
            )
    policy = load_policy(_policy_path())
    charging_path = _charging_path()
    if charging_path:
        dag = task.dag if task.has_dag() else None
        problem = charge_problem(
            load_charging(charging_path),
            dag_file=str(dag.fileloc) if dag is not None else "",
            owner=task.owner,
            user=task.user,
            group=task.group,
            known_groups=set(policy.groups),
        )
    else:
        problem = claim_problem(policy, owner=task.owner, user=task.user, group=task.group)
    if not problem:
        # The priority classes the task names, where they are plain values: its group must allow each.
        named = named_by_spec(task._spec(templated=True))
        problem = priority_classes_problem(policy, task.group, named)
    if problem:
        raise AirflowClusterPolicyViolation(f"{where}: {problem}")


def submit_problem(dag_file: str, group: str, user: str) -> str | None:
    """The charging map's folder rule again at submit, on the worker, for the group and user the task
    really submits with: ``pre_execute``, a template or an operator subclass may change them after
    the DAG was parsed. None where the rule allows it, or where this deployment keeps no charging map.

    The worker reads the map where the dag processor does (``[airflow_jobs] charging_file``): a map
    configured but not mounted on the worker leaves the check to admission, which applies the
    group-and-user rule of the map kept in the policy ConfigMap (quota.policy.QuotaPolicy.charge_problem).
    """
    charging_path = _charging_path()
    if not charging_path:
        return None
    if not os.path.exists(charging_path):
        log.warning(
            "[%s] charging_file %s is not on this worker: the DAG folder's charging rule is checked only "
            "at parse time; mount it on workers too (docs/deploying.md)",
            CONFIG_SECTION,
            charging_path,
        )
        return None
    try:
        charging = load_charging(charging_path)
    except AirflowClusterPolicyViolation as exc:
        return str(exc)
    policy_path = conf_policy_path()
    known = set(load_policy(policy_path).groups) if policy_path and os.path.exists(policy_path) else {group}
    return charge_problem(charging, dag_file=dag_file, owner=user, user=user, group=group, known_groups=known)


def conf_policy_path() -> str | None:
    from airflow.configuration import conf

    return conf.get(CONFIG_SECTION, CONFIG_KEY, fallback=None) or None
