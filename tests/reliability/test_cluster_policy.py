"""The cluster policy an admin can enable: no DAG claims another user's or another group's GPU quota."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from airflow.exceptions import AirflowClusterPolicyViolation

from airflow_jobs_plugin.cluster_policy import task_policy
from airflow_jobs_plugin.operators import JobOperator
from airflow_jobs_plugin.quota.policy import claim_problem, parse_policy

POLICY = """
groups:
  vision: {gpus: 8, members: [alice, bob]}
  nlp: {gpus: 8, users: {carol: 4}, members: [dave]}
  sandbox: {gpus: 2}
"""


@pytest.mark.parametrize(
    ("owner", "user", "group", "problem"),
    [
        ("alice", None, "vision", None),
        ("alice", "alice", "vision", None),
        ("carol", None, "nlp", None),  # a per-user override makes carol a member
        ("erin", None, "sandbox", None),  # no members list: open to anyone
        ("alice", "bob", "vision", "may not submit jobs as 'bob'"),
        ("alice", None, "nlp", "'alice' is not a member of group 'nlp'"),
        ("alice", None, "speech", "unknown group 'speech'; known groups: nlp, sandbox, vision"),
    ],
)
def test_who_may_claim_which_quota(owner, user, group, problem):
    found = claim_problem(parse_policy(POLICY), owner=owner, user=user, group=group)
    if problem is None:
        assert found is None
    else:
        assert problem in found


def test_members_must_be_a_list_of_names():
    with pytest.raises(ValueError, match=r"groups\.vision\.members: must be a list"):
        parse_policy("groups:\n  vision: {gpus: 8, members: alice}\n")
    with pytest.raises(ValueError, match=r"groups\.vision\.members\[0\]"):
        parse_policy("groups:\n  vision: {gpus: 8, members: [yes]}\n")


@pytest.fixture
def policy_file(tmp_path, monkeypatch):
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    monkeypatch.setenv("AIRFLOW__AIRFLOW_JOBS__QUOTA_POLICY_FILE", str(path))
    return path


def op(**kwargs) -> JobOperator:
    return JobOperator(task_id="train", image="trainer:1", gpus=1, **kwargs)


def test_the_hook_accepts_a_member_submitting_as_themselves(policy_file):
    task_policy(op(group="vision", owner="alice"))


def test_the_hook_stops_a_task_naming_another_user(policy_file):
    with pytest.raises(AirflowClusterPolicyViolation, match="may not submit jobs as 'bob'"):
        task_policy(op(group="vision", owner="alice", user="bob"))


def test_the_hook_stops_a_non_member(policy_file):
    with pytest.raises(AirflowClusterPolicyViolation, match="not a member of group 'nlp'"):
        task_policy(op(group="nlp", owner="alice"))


def test_the_hook_picks_up_a_policy_changed_in_place(policy_file):
    task_policy(op(group="vision", owner="bob"))
    policy_file.write_text(POLICY.replace("[alice, bob]", "[alice]"))
    os.utime(policy_file, ns=(1, 10**18))  # a distinct mtime even on coarse-grained file systems
    with pytest.raises(AirflowClusterPolicyViolation, match="not a member"):
        task_policy(op(group="vision", owner="bob"))


def test_the_hook_ignores_other_operators(policy_file):
    from airflow.providers.standard.operators.empty import EmptyOperator

    task_policy(EmptyOperator(task_id="noop", owner="mallory"))


@pytest.mark.slow
def test_an_admin_enabled_policy_turns_a_quota_grab_into_an_import_error(tmp_path):
    home = tmp_path / "home"
    (home / "config").mkdir(parents=True)
    (home / "config" / "airflow_local_settings.py").write_text(
        "from airflow_jobs_plugin.cluster_policy import task_policy  # noqa: F401\n"
    )
    (tmp_path / "policy.yaml").write_text(POLICY)
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "grab.py").write_text(
        textwrap.dedent(
            """
            from datetime import datetime
            from airflow.sdk import DAG
            from airflow_jobs_plugin.operators import JobOperator

            with DAG("grab", schedule=None, start_date=datetime(2026, 1, 1), default_args={"owner": "alice"}):
                JobOperator(task_id="train", image="trainer:1", gpus=4, group="nlp")
            """
        )
    )
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__AIRFLOW_JOBS__QUOTA_POLICY_FILE": str(tmp_path / "policy.yaml"),
    }
    airflow = [sys.executable, "-m", "airflow"]
    subprocess.run([*airflow, "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)
    out = subprocess.run(
        [*airflow, "dags", "list-import-errors", "--local", "-o", "json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    errors = json.loads(next(line for line in out.splitlines() if line.startswith("[")))
    assert any("not a member of group 'nlp'" in e["error"] for e in errors), errors
