"""Which quota pool a task is under: its own choice, or the deployment's (``[airflow_jobs]``)."""

from __future__ import annotations

from airflow_jobs_plugin.queueing.quota import parse_policy
from airflow_jobs_plugin.queueing.quota_source import QuotaSource, choose, opt_out_problem

SHIPPED = "airflow-jobs-quota-policy"


def test_a_task_that_names_no_pool_is_under_the_deployments():
    assert choose(None, None, "gpu-pool", "quota") == QuotaSource(
        "gpu-pool", "quota", "[airflow_jobs] quota_configmap", must_exist=True
    )


def test_the_shipped_pool_name_not_found_means_no_pool_is_installed():
    assert choose(None, None, SHIPPED, "").must_exist is False


def test_a_pool_the_task_names_must_exist():
    source = choose("team-pool", None, SHIPPED, "")
    assert (source.configmap, source.must_exist) == ("team-pool", True)


def test_a_deployment_without_a_pool_puts_no_task_under_one():
    assert choose(None, None, "", "") == QuotaSource(None, None)
    assert choose("", None, "", "").opted_out is False  # nothing to leave


def test_leaving_the_pool_needs_the_groups_opt_out():
    source = choose("", None, "gpu-pool", "")
    assert source.opted_out and source.configmap is None
    policy = parse_policy("groups:\n  vision: {gpus: 8}\n  speech: {gpus: 4, opt_out: true}\n")
    assert "'vision' may not run outside the quota pool 'gpu-pool'" in (
        opt_out_problem(source, policy, "vision", "default") or ""
    )
    assert opt_out_problem(source, policy, "speech", "default") is None
    assert opt_out_problem(source, None, "vision", "default") is None  # the pool is not installed
