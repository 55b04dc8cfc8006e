"""The cluster policy an admin can enable: no DAG claims another user's or another group's GPU quota."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from airflow.exceptions import AirflowClusterPolicyViolation

from airflow_jobs_plugin.airflow.cluster_policy import task_policy
from airflow_jobs_plugin.airflow.operators import JobOperator
from airflow_jobs_plugin.queueing.quota.parse import parse_policy
from airflow_jobs_plugin.queueing.quota.policy import claim_problem

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


def op(task_id: str = "train", **kwargs) -> JobOperator:
    return JobOperator(task_id=task_id, image="trainer:1", gpus=1, **kwargs)


def test_the_hook_accepts_a_member_submitting_as_themselves(policy_file):
    task_policy(op(group="vision", owner="alice"))


def test_the_hook_stops_a_task_naming_another_user(policy_file):
    with pytest.raises(AirflowClusterPolicyViolation, match="may not submit jobs as 'bob'"):
        task_policy(op(group="vision", owner="alice", user="bob"))


def test_the_hook_stops_a_non_member(policy_file):
    with pytest.raises(AirflowClusterPolicyViolation, match="not a member of group 'nlp'"):
        task_policy(op(group="nlp", owner="alice"))


def test_the_hook_stops_a_priority_class_the_group_may_not_use(policy_file):
    """The group's priority_classes, where the argument is a plain value; a template waits for the submit."""
    policy_file.write_text(
        POLICY.replace("members: [alice, bob]}", "members: [alice, bob], priority_classes: [a]}")
    )
    os.utime(policy_file, ns=(1, 2 * 10**18))
    task_policy(op(group="vision", owner="alice", priority_class_name="a"))
    task_policy(op(task_id="later", group="vision", owner="alice", priority_class_name="{{ params.c }}"))
    with pytest.raises(
        AirflowClusterPolicyViolation, match="priority class 'b' is not allowed for group 'vision'"
    ):
        task_policy(op(group="vision", owner="alice", priority_class_name="b"))
    with pytest.raises(AirflowClusterPolicyViolation, match="allowed: none"):
        task_policy(op(group="sandbox", owner="alice", job_labels={"kueue.x-k8s.io/priority-class": "a"}))


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
        "from airflow_jobs_plugin.airflow.cluster_policy import task_policy  # noqa: F401\n"
    )
    (tmp_path / "policy.yaml").write_text(POLICY)
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "grab.py").write_text(
        textwrap.dedent(
            """
            from datetime import datetime
            from airflow.sdk import DAG
            from airflow_jobs_plugin.airflow.operators import JobOperator

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


# --- the platform's charging map: the DAG's folder decides whom it may charge, not its owner ---

CHARGING = """
folders:
  /dags/vision:
    groups: [vision]
    users: [retraining-bot, alice]
  /dags:
    groups: [sandbox, nlp]
    users: [alice, dave]
"""


@pytest.mark.parametrize(
    ("dag_file", "owner", "user", "group", "problem"),
    [
        ("/dags/vision/retrain.py", "vision-ml", "retraining-bot", "vision", None),
        ("/dags/vision/deep/x.py", "alice", None, "vision", None),  # nested folders inherit
        ("/dags/nlp.py", "dave", None, "nlp", None),
        # The most specific folder decides: vision DAGs may not charge the wider folder's groups.
        ("/dags/vision/retrain.py", "alice", None, "nlp", "may charge groups vision, not 'nlp'"),
        # An owner naming itself a bot gets nothing: the charged user must be listed for the folder.
        ("/dags/grab.py", "retraining-bot", None, "sandbox", "not 'retraining-bot' (the task's owner)"),
        ("/dags/grab.py", "bob-2", None, "sandbox", "not 'bob-2' (the task's owner)"),
        ("/dags/grab.py", "alice", "dave-2", "nlp", "not 'dave-2' (the task's user)"),
        ("/elsewhere/x.py", "alice", None, "nlp", "is under no folder of the platform's charging map"),
        ("/dags-other/x.py", "alice", None, "nlp", "is under no folder"),  # a prefix is not a folder
        ("/dags/x.py", "alice", None, "speech", "unknown group 'speech'"),
    ],
)
def test_the_dag_folder_decides_which_groups_and_users_it_may_charge(dag_file, owner, user, group, problem):
    from airflow_jobs_plugin.queueing.charging import charge_problem, parse_charging

    found = charge_problem(
        parse_charging(CHARGING),
        dag_file=dag_file,
        owner=owner,
        user=user,
        group=group,
        known_groups={"vision", "nlp", "sandbox"},
    )
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("groups: []", "folders: the charging map needs a 'folders:' mapping"),
        ("folders: {dags: {groups: [a], users: [b]}}", "folders.dags: a folder must be an absolute path"),
        ("folders: {/d: {groups: [a]}}", "folders./d: needs exactly 'groups' and 'users'"),
        ("folders: {/d: {groups: a, users: [b]}}", "folders./d.groups: must be a non-empty list"),
        ("folders: {/d: {groups: [a], users: [1]}}", r"folders./d.users[0]: must be a name"),
        ("folders: {}\nteams: {}", "teams: unknown key"),
    ],
)
def test_a_malformed_charging_map_names_the_field(text, message):
    from airflow_jobs_plugin.queueing.charging import ChargingError, parse_charging

    with pytest.raises(ChargingError) as error:
        parse_charging(text)
    assert message in str(error.value)


def test_with_a_charging_map_the_hook_charges_by_folder_not_by_owner(policy_file, tmp_path, monkeypatch):
    from airflow.sdk import DAG

    charging = tmp_path / "charging.yaml"
    charging.write_text(CHARGING.replace("/dags", str(tmp_path / "dags")))
    monkeypatch.setenv("AIRFLOW__AIRFLOW_JOBS__CHARGING_FILE", str(charging))
    allowed = DAG("allowed", schedule=None)
    allowed.fileloc = str(tmp_path / "dags" / "team.py")  # where the DAG processor found the file
    task_policy(op("a", group="sandbox", owner="anyone", user="dave", dag=allowed))
    with pytest.raises(AirflowClusterPolicyViolation, match="may charge users alice, dave, not 'bob-2'"):
        task_policy(op("b", group="sandbox", owner="bob-2", dag=allowed))
    outside = DAG("outside", schedule=None)
    outside.fileloc = str(tmp_path / "other" / "x.py")
    with pytest.raises(AirflowClusterPolicyViolation, match="under no folder"):
        task_policy(op(group="sandbox", owner="alice", dag=outside))
    charging.write_text("folders: 3\n")
    os.utime(charging, ns=(1, 10**18))
    with pytest.raises(AirflowClusterPolicyViolation, match="the charging map .* is invalid: folders:"):
        task_policy(op("c", group="sandbox", owner="alice", dag=allowed))
