"""Priority classes by the platform's leave (queueing/quota/priority_classes.py): a group's jobs name only
the classes its ``priority_classes`` list, never a ``system-*`` one; the rule at parse, at submit and in
the pool's admission, with its words."""

from __future__ import annotations

import copy
from datetime import datetime, timezone

import pytest

from airflow_jobs_plugin.jobs.manifests import build_manifest
from airflow_jobs_plugin.jobs.spec import JobSpec, JobSpecError, TaskIdentity
from airflow_jobs_plugin.queueing.quota.ledger_model import queued_job_of
from airflow_jobs_plugin.queueing.quota.model import QueuedJob, Verdict
from airflow_jobs_plugin.queueing.quota.parse import PolicyError, parse_policy
from airflow_jobs_plugin.queueing.quota.policy import decide
from airflow_jobs_plugin.queueing.quota.priority_classes import (
    named_by_job,
    named_by_spec,
    priority_class_problem,
)
from airflow_jobs_plugin.queueing.quota.submit_check import submit_charge

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
TASK = TaskIdentity("nightly", "train", "run-1", -1, 1)
KUEUE = "kueue.x-k8s.io/priority-class"

POLICY = parse_policy(
    """
defaults: {priority_classes: [training-low]}
groups:
  vision: {gpus: 8, priority_classes: [training-low, training-high]}
  nlp: {gpus: 8}
  sandbox: {gpus: 2, priority_classes: []}
"""
)


# --- the rule ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("group", "priority_class", "problem"),
    [
        ("vision", "training-high", None),
        ("vision", "training-low", None),
        ("nlp", "training-low", None),  # the policy's default list
        (
            "nlp",
            "training-high",
            "priority class 'training-high' is not allowed for group 'nlp' (allowed: training-low); "
            "name one of those, or none for the cluster's default, or ask a platform admin to add it "
            "to groups.nlp.priority_classes in the quota policy",
        ),
        ("sandbox", "training-low", "is not allowed for group 'sandbox' (allowed: none)"),
        ("vision", "system-node-critical", "is one of the cluster's own (system-*)"),
        ("vision", "system-cluster-critical", "no job may use it, whatever the quota policy lists"),
        ("speech", "training-low", "group 'speech' is not in the quota policy"),
    ],
)
def test_priority_class_problem(group, priority_class, problem):
    found = priority_class_problem(POLICY, group, priority_class)
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found, found


def test_a_system_class_is_refused_even_where_the_policy_could_list_it():
    """The policy cannot list one (a parse error, below); a model built by hand that does is still refused."""
    from dataclasses import replace

    group = replace(POLICY.groups["vision"], priority_classes=frozenset({"system-node-critical"}))
    policy = replace(POLICY, groups={**POLICY.groups, "vision": group})
    assert "cluster's own" in (priority_class_problem(policy, "vision", "system-node-critical") or "")


# --- the policy's key, validated like the rest ---------------------------------------------------


def test_a_group_inherits_the_default_list_unless_it_gives_its_own():
    assert POLICY.groups["vision"].priority_classes == {"training-low", "training-high"}
    assert POLICY.groups["nlp"].priority_classes == {"training-low"}
    assert POLICY.groups["sandbox"].priority_classes == frozenset()
    assert parse_policy("groups: {nlp: {gpus: 8}}").groups["nlp"].priority_classes == frozenset()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "groups: {vision: {gpus: 8, priority_classes: training-high}}",
            "groups.vision.priority_classes: must be a list of priority class names",
        ),
        (
            "groups: {vision: {gpus: 8, priority_classes: [Training High]}}",
            "groups.vision.priority_classes[0]: 'Training High' is not a priority class name",
        ),
        (
            "groups: {vision: {gpus: 8, priority_classes: [system-node-critical]}}",
            "groups.vision.priority_classes[0]: 'system-node-critical': the system-* classes are the "
            "cluster's own",
        ),
        (
            "groups: {vision: {gpus: 8, priority_classes: [a, b, a]}}",
            "groups.vision.priority_classes[2]: 'a' is listed twice",
        ),
        (
            "groups: {vision: {gpus: 8, priority_classes: [yes]}}",
            "groups.vision.priority_classes[0]: priority class name must be a string, got true",
        ),
        ("groups: {}\ndefaults: {priority_classes: {a: 1}}", "defaults.priority_classes: must be a list"),
        (
            "groups: {vision: {gpus: 8, priority_class: [a]}}",
            "groups.vision.priority_class: unknown key; did you mean 'priority_classes'?",
        ),
    ],
)
def test_a_bad_priority_classes_entry_names_its_key(text, expected):
    with pytest.raises(PolicyError) as raised:
        parse_policy(text)
    assert any(expected in e for e in raised.value.errors), raised.value.errors


# --- what a job names --------------------------------------------------------------------------------


def built(**args) -> dict:
    spec = JobSpec.build(image="trainer:1", group="vision", user="alice", gpus=1, **args)
    job = build_manifest(spec, name="train-a1", task=TASK, attempt=1, queued_at=T0)
    job["metadata"].update(uid="u-1", namespace="ml", creationTimestamp="2026-03-01T09:00:00Z")
    return job


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ({}, ()),
        ({"priority_class_name": "training-high"}, ("training-high",)),
        ({"pod_template": {"spec": {"priorityClassName": "training-low"}}}, ("training-low",)),
        (
            {"priority_class_name": "training-high", "pod_template": {"spec": {"priorityClassName": "x"}}},
            ("training-high",),  # the argument wins the merge: the template's never reaches a pod
        ),
        ({"workers": 3, "priority_class_name": "training-high"}, ("training-high",)),
        ({"workers": 2, "framework": "torchrun", "priority_class_name": "a"}, ("a",)),
        ({"labels": {KUEUE: "urgent"}}, ("urgent",)),
        ({"priority_class_name": "a", "labels": {KUEUE: "b"}}, ("a", "b")),
    ],
    ids=["none", "argument", "pod-template", "argument-wins", "mpi", "torchrun", "kueue", "both"],
)
def test_the_spec_names_what_its_job_names(args, named):
    spec = JobSpec.build(image="trainer:1", group="vision", user="alice", gpus=1, **args)
    assert named_by_spec(spec) == named
    assert named_by_job(built(**args)) == named


def test_a_raw_mpijob_names_its_gang_class_and_every_templates():
    job = built(workers=2)
    job["spec"]["runPolicy"]["schedulingPolicy"] = {"priorityClass": "gang-high"}
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["priorityClassName"] = "system-node-critical"
    assert named_by_job(job) == ("gang-high", "system-node-critical")


def test_a_template_not_rendered_yet_is_left_to_the_submit():
    spec = JobSpec.build(
        image="trainer:1",
        group="vision",
        user="alice",
        priority_class_name="{{ params.klass }}",
        labels={KUEUE: "{{ params.wpc }}", "team": "a"},
        templated=True,
    )
    assert named_by_spec(spec) == ()


# --- at parse time: system-* always ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"priority_class_name": "system-node-critical"}, "priority_class_name"),
        ({"pod_template": {"spec": {"priorityClassName": "system-cluster-critical"}}}, "pod_template"),
        ({"labels": {KUEUE: "system-node-critical"}}, "labels"),
    ],
)
def test_a_system_class_fails_the_dag_at_parse_time_naming_the_argument(args, field):
    with pytest.raises(JobSpecError) as refused:
        JobSpec.build(image="trainer:1", group="vision", user="alice", **args)
    assert refused.value.field.startswith(field)
    assert "one of the cluster's own priority classes (system-*)" in str(refused.value)


# --- at submit, from the policy the worker read -----------------------------------------------------


def test_the_submit_refuses_a_class_the_group_may_not_use_naming_group_class_and_allowed():
    with pytest.raises(ValueError) as refused:
        submit_charge(POLICY, "nlp", "alice", 1, priority_classes=("training-high",))
    message = str(refused.value)
    assert "'training-high'" in message and "group 'nlp'" in message and "allowed: training-low" in message
    submit_charge(POLICY, "vision", "alice", 1, priority_classes=("training-high",))


# --- in the pool's admission: never admitted -----------------------------------------------------------


def test_the_pool_never_admits_a_job_naming_a_class_its_group_may_not_use():
    honest = queued_job_of(built(priority_class_name="training-high"))
    cheat = copy.deepcopy(built(priority_class_name="training-high"))
    cheat["metadata"].update(name="cheat", uid="u-2")
    cheat["spec"]["template"]["spec"]["priorityClassName"] = "system-node-critical"
    decisions = {d.job.name: d for d in decide(POLICY, [honest, queued_job_of(cheat)], [], T0)}
    assert decisions["train-a1"].verdict is Verdict.ADMIT
    assert decisions["cheat"].verdict is Verdict.INADMISSIBLE
    assert decisions["cheat"].message.startswith("never admitted: priority class 'system-node-critical'")
    assert decisions["cheat"].position == 1


def test_an_inadmissible_class_holds_back_nobody_behind_it():
    blocked = QueuedJob(
        name="first", group="nlp", user="alice", gpus=1, queued_at=T0, uid="u-1", priority_classes=("x",)
    )
    after = QueuedJob(name="second", group="nlp", user="bob", gpus=1, queued_at=T0, uid="u-2")
    decisions = {d.job.name: d.verdict for d in decide(POLICY, [blocked, after], [], T0)}
    assert decisions == {"first": Verdict.INADMISSIBLE, "second": Verdict.ADMIT}
