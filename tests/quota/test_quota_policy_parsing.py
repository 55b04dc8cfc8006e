"""The policy YAML: a valid policy parses to the model; every mistake is an error naming its key."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_jobs_plugin.queueing.quota.model import (
    POLICY_KEY,
    GroupQuota,
    UnknownGroupError,
    UnknownPriorityError,
)
from airflow_jobs_plugin.queueing.quota.parse import (
    PolicyError,
    parse_duration,
    parse_policy,
    policy_from_configmap_data,
)
from airflow_jobs_plugin.queueing.quota.requeue import RequeueSettings

FULL = """
defaults:
  user_gpus: 2
  max_running_jobs_per_user: 5
groups:
  vision:
    gpus: 8
    user_gpus: 4
    users: {alice: 6}
    max_running_jobs_per_user: 3
  nlp:
    gpus: 16
  research: {gpus: 4, users: {"no": 1, "1234": 2, alice@example.com: 3}}
priorities: {high: 100, normal: 0, low: -100}
default_priority: normal
schedule_timeout: 5m
requeue_limit: 2
requeue_backoff: {base: 10s, cap: 1h}
queue_timeout: 1d
"""


def test_full_policy_parses_to_the_model():
    policy = parse_policy(FULL)

    assert policy.groups["vision"] == GroupQuota(
        name="vision", gpus=8, user_gpus=4, users={"alice": 6}, max_running_jobs_per_user=3
    )
    # Groups inherit the defaults they do not override.
    assert policy.groups["nlp"] == GroupQuota(name="nlp", gpus=16, user_gpus=2, max_running_jobs_per_user=5)
    assert policy.groups["research"].users == {"no": 1, "1234": 2, "alice@example.com": 3}
    assert policy.group_names == ("nlp", "research", "vision")
    assert policy.priorities == {"high": 100, "normal": 0, "low": -100}
    assert policy.default_priority == 0
    assert policy.requeue == RequeueSettings(
        schedule_timeout=timedelta(minutes=5),
        requeue_limit=2,
        backoff_base=timedelta(seconds=10),
        backoff_cap=timedelta(hours=1),
        queue_timeout=timedelta(days=1),
    )


def test_minimal_policy_uses_the_defaults():
    policy = parse_policy("groups: {vision: {gpus: 8}}")
    assert policy.requeue == RequeueSettings()
    assert policy.requeue.schedule_timeout == timedelta(minutes=3)
    assert policy.requeue.queue_timeout is None
    assert policy.default_priority == 0
    # Without user_gpus only the group quota limits a user.
    assert policy.user_limit("vision", "anyone") == 8


@pytest.mark.parametrize(
    ("user", "limit"),
    [("alice", 6), ("bob", 4)],
)
def test_user_limit_uses_the_override_then_the_group_default(user, limit):
    assert parse_policy(FULL).user_limit("vision", user) == limit


def test_empty_groups_mapping_is_a_valid_policy_that_admits_nothing():
    assert parse_policy("groups: {}").groups == {}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "groups: {vision: {gpus: 8, user_gpus: -1}}",
            "groups.vision.user_gpus: must be a non-negative integer, got -1",
        ),
        ("groups: {vision: {gpus: -8}}", "groups.vision.gpus: must be a non-negative integer, got -8"),
        (
            "groups: {vision: {gpus: 2.5}}",
            "groups.vision.gpus: must be a non-negative integer, got 2.5 (float)",
        ),
        ("groups: {vision: {gpus: '8'}}", "groups.vision.gpus: must be a non-negative integer, got '8'"),
        (
            "groups: {vision: {gpus: yes}}",
            "groups.vision.gpus: must be a non-negative integer, got true (a boolean)",
        ),
        (
            "groups: {vision: {gpus: null}}",
            "groups.vision.gpus: must be a non-negative integer, got null (remove",
        ),
        ("groups: {vision: {user_gpus: 2}}", "groups.vision.gpus: required"),
        (
            "groups: {vision: {gpus: 8, user_gpu: 2}}",
            "groups.vision.user_gpu: unknown key; did you mean 'user_gpus'?",
        ),
        (
            "groups: {vision: {gpus: 8, users: {alice: -2}}}",
            "groups.vision.users.alice: must be a non-negative integer, got -2",
        ),
        (
            "groups: {vision: {gpus: 8, users: [alice]}}",
            "groups.vision.users: must be a mapping of user name to GPU limit, got a list",
        ),
        (
            "groups: {vision: {gpus: 8, users: {no: 2}}}",
            "groups.vision.users.False: user name must be a string, got false",
        ),
        (
            "groups: {vision: {gpus: 8, users: {1234: 2}}}",
            "groups.vision.users.1234: user name must be a string, got 1234 (int); quote it",
        ),
        (
            "groups: {vision: {gpus: 8, users: {a.b: x}}}",
            'groups.vision.users."a.b": must be a non-negative integer',
        ),
        (
            "groups: {vision: {gpus: 8, max_running_jobs_per_user: 0}}",
            "groups.vision.max_running_jobs_per_user: must be an integer >= 1, got 0",
        ),
        ("groups: {Vision: {gpus: 8}}", "groups.Vision: group name must be a DNS-1123 label"),
        ("groups: {my_team: {gpus: 8}}", "try 'my-team'"),
        ("groups: {vision: 8}", "groups.vision: must be a mapping of group settings"),
        ("groups: [vision]", "groups: must be a mapping of group name to group settings, got a list"),
        ("gropus: {vision: {gpus: 8}}", "gropus: unknown key; did you mean 'groups'?"),
        ("gropus: {vision: {gpus: 8}}", "groups: required"),
        (
            "groups: {}\ndefaults: {user_gpus: -1}",
            "defaults.user_gpus: must be a non-negative integer, got -1",
        ),
        ("groups: {}\ndefaults: {gpus: 4}", "defaults.gpus: unknown key"),
        (
            "groups: {}\npriorities: {high: high}",
            "priorities.high: must be an integer (higher runs first), got 'high'",
        ),
        ("groups: {}\npriorities: [high]", "priorities: must be a mapping of priority class name to integer"),
        (
            "groups: {}\npriorities: {high: 1}\ndefault_priority: hihg",
            "default_priority: unknown priority class 'hihg'; did you mean 'high'?",
        ),
        (
            "groups: {}\ndefault_priority: 1.5",
            "default_priority: must be a priority class name or an integer",
        ),
        ("groups: {}\nschedule_timeout: soon", "schedule_timeout: must be a duration"),
        ("groups: {}\nschedule_timeout: 0", "schedule_timeout: must be longer than zero, got 0"),
        ("groups: {}\nrequeue_limit: -1", "requeue_limit: must be a non-negative integer, got -1"),
        (
            "groups: {}\nrequeue_backoff: {base: 1m, cap: 30s}",
            "requeue_backoff.cap: must be at least requeue_backoff.base (1m), got 30s",
        ),
        (
            "groups: {}\nrequeue_backoff: {bsae: 1m}",
            "requeue_backoff.bsae: unknown key; did you mean 'base'?",
        ),
        ("groups: {}\nqueue_timeout: 5x", "queue_timeout: must be a duration"),
    ],
)
def test_invalid_policy_error_names_the_key(text, expected):
    with pytest.raises(PolicyError) as raised:
        parse_policy(text)
    assert any(e.startswith(expected) or expected in e for e in raised.value.errors), raised.value.errors
    assert expected in str(raised.value)


def test_every_problem_is_reported_at_once():
    with pytest.raises(PolicyError) as raised:
        parse_policy("groups: {vision: {gpus: -1, user_gpus: x}, nlp: {gpu: 2}}\nrequeue_limit: no")
    paths = [e.split(":")[0] for e in raised.value.errors]
    assert paths == [
        "groups.vision.gpus",
        "groups.vision.user_gpus",
        "groups.nlp.gpu",
        "groups.nlp.gpus",
        "requeue_limit",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "the policy is empty"),
        ("- a\n- b", "<root>: must be a mapping"),
        ("groups: {vision: {gpus: 8}", "<yaml> (line"),
        (
            "groups:\n  vision: {gpus: 8}\n  vision: {gpus: 4}\n",
            "duplicate key 'vision' (first given on line 2)",
        ),
        ("groups: {vision: {gpus: 8, gpus: 4}}", "duplicate key 'gpus'"),
    ],
)
def test_unreadable_documents_are_policy_errors(text, expected):
    with pytest.raises(PolicyError, match=r"invalid quota policy") as raised:
        parse_policy(text)
    assert expected in str(raised.value)


def test_queue_timeout_null_means_no_timeout():
    assert parse_policy("groups: {}\nqueue_timeout: null").requeue.queue_timeout is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (90, timedelta(seconds=90)),
        ("90s", timedelta(seconds=90)),
        ("3m", timedelta(minutes=3)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1h 30m", timedelta(hours=1, minutes=30)),
        ("2d", timedelta(days=2)),
        ("1d2h3m4s", timedelta(days=1, hours=2, minutes=3, seconds=4)),
    ],
)
def test_durations(value, expected):
    assert parse_duration(value) == expected


@pytest.mark.parametrize("value", ["", "m", "3 minutes", "-5s", "1.5h", True, None, -3, "3m1h"])
def test_bad_durations(value):
    with pytest.raises(ValueError, match="must be a duration"):
        parse_duration(value)


def test_unknown_group_at_submit_names_the_known_groups():
    policy = parse_policy(FULL)
    with pytest.raises(UnknownGroupError) as raised:
        policy.require_group("visoin")
    text = str(raised.value)
    assert "unknown quota group 'visoin'; did you mean 'vision'?" in text
    assert "known groups: nlp, research, vision" in text


def test_known_group_is_returned():
    assert parse_policy(FULL).require_group("nlp").gpus == 16


@pytest.mark.parametrize(
    ("requested", "expected"),
    [(None, 0), ("high", 100), ("low", -100), (42, 42), ("-7", -7), ("15", 15)],
)
def test_priority_resolution(requested, expected):
    assert parse_policy(FULL).priority_of(requested) == expected


def test_default_priority_may_be_an_integer():
    assert parse_policy("groups: {}\ndefault_priority: -5").priority_of(None) == -5


def test_unknown_priority_class_names_the_classes():
    with pytest.raises(
        UnknownPriorityError, match=r"'hgih'; did you mean 'high'\?; known classes: high \(100\)"
    ):
        parse_policy(FULL).priority_of("hgih")


def test_policy_from_configmap_data_reads_the_policy_key():
    assert policy_from_configmap_data({POLICY_KEY: "groups: {g: {gpus: 1}}"}).groups["g"].gpus == 1


def test_policy_configmap_without_the_key_is_an_error_naming_it():
    with pytest.raises(
        PolicyError, match=r"data\.policy\.yaml: missing from the policy ConfigMap \(keys present: other\)"
    ):
        policy_from_configmap_data({"other": "x"})
