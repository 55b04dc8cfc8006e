"""Bad policies are bounded: a short error, naming the field path and the fix, whatever was written."""

from __future__ import annotations

import pytest

from airflow_jobs_plugin.jobs.bounded import MAX_YAML_DEPTH, MESSAGE_LIMIT, bounded, excerpt
from airflow_jobs_plugin.lifecycle import QueueStatus
from airflow_jobs_plugin.queueing.charging import ChargingError, parse_charging
from airflow_jobs_plugin.queueing.quota.model import QuotaPolicy
from airflow_jobs_plugin.queueing.quota.parse import (
    MAX_GROUPS,
    MAX_POLICY_BYTES,
    PolicyError,
    parse_policy,
)
from airflow_jobs_plugin.queueing.quota.policy import claim_problem


def error_of(text: str) -> PolicyError:
    with pytest.raises(PolicyError) as caught:
        parse_policy(text)
    return caught.value


def test_a_megabyte_of_garbage_is_refused_by_its_size_in_one_short_line():
    error = error_of("x" * 1_000_285)

    assert len(str(error)) < 300
    assert "1,000,285 bytes" in str(error)
    assert f"at most {MAX_POLICY_BYTES:,}" in str(error)


def test_garbage_within_the_size_limit_is_quoted_in_short_with_the_field_path_and_the_fix():
    error = error_of("x" * 200_000)

    assert len(str(error)) < 300
    assert "<root>: must be a mapping with a 'groups:' key" in str(error)
    assert "(200,000 characters)" in str(error)


def test_a_long_value_under_a_key_keeps_the_key_path_and_the_problem():
    error = error_of("groups:\n  vision: {gpus: 4, opt_out: '" + "y" * 150_000 + "'}\n")

    assert len(str(error)) < 300
    assert "groups.vision.opt_out: must be true or false, got 'yyy" in str(error)


def test_a_policy_with_thousands_of_problems_lists_the_first_and_counts_the_rest():
    text = "groups:\n" + "".join(f"  g{i}: {{gpus: -1}}\n" for i in range(3_000))

    error = error_of(text)

    assert len(str(error)) <= MESSAGE_LIMIT
    assert str(error).splitlines()[1] == "  - groups.g0.gpus: must be a non-negative integer, got -1 (int)"
    assert "more problems; fix these first" in str(error).splitlines()[-1]


@pytest.mark.parametrize(
    "nested",
    [
        pytest.param("[" * 2_000 + "]" * 2_000, id="flow-sequences"),
        pytest.param("groups: " + "{a: " * 1_000 + "1" + "}" * 1_000, id="flow-mappings"),
        pytest.param("".join(" " * i + f"k{i}:\n" for i in range(60)) + " " * 60 + "v", id="block-mappings"),
    ],
)
def test_nested_yaml_is_a_policy_error_naming_the_depth_limit(nested):
    error = error_of(nested)

    assert f"nested deeper than {MAX_YAML_DEPTH} levels" in str(error)
    assert str(error).startswith("invalid quota policy: <yaml>")


def test_the_deepest_policy_the_product_documents_is_within_the_depth_limit():
    policy = parse_policy(
        "groups:\n  vision:\n    gpus: 8\n    users:\n      alice: 4\n    devices: {nvidia.com/mig-1g.10gb: 2}\n"
    )

    assert policy.groups["vision"].users == {"alice": 4}


def test_a_policy_of_more_groups_than_the_limit_is_refused_naming_the_limit_and_the_fix():
    text = "groups:\n" + "".join(f"  g{i}: {{gpus: 1}}\n" for i in range(MAX_GROUPS + 1))
    assert len(text) < MAX_POLICY_BYTES

    error = error_of(text)

    assert f"groups: {MAX_GROUPS + 1:,} groups; a policy defines at most {MAX_GROUPS:,}" in str(error)
    assert "merge groups" in str(error)


def test_a_charging_map_nested_too_deeply_is_a_charging_error():
    with pytest.raises(ChargingError, match="nested deeper than"):
        parse_charging("[" * 2_000 + "]" * 2_000)


def test_an_unknown_group_among_thousands_names_a_few_and_counts_the_rest():
    policy = parse_policy("groups:\n" + "".join(f"  g{i}: {{gpus: 1}}\n" for i in range(1_000)))

    problem = claim_problem(policy, owner="ann", user=None, group="z" * 10_000)

    assert problem is not None and len(problem) < 500
    assert "and 980 more" in problem


def test_a_waiting_jobs_queue_message_is_bounded_and_keeps_its_head():
    status = QueueStatus(reason="Inadmissible", message="groups.vision: " + "z" * 1_000_000)

    assert len(status.message) == MESSAGE_LIMIT
    assert status.message.startswith("groups.vision: zzz")
    assert status.message.endswith("more characters left out)")


def test_bounded_and_excerpt_leave_short_text_alone():
    assert bounded("groups.vision.gpus: must be 4") == "groups.vision.gpus: must be 4"
    assert excerpt("alice") == "'alice'"
    assert isinstance(parse_policy("groups: {vision: {gpus: 4}}"), QuotaPolicy)
