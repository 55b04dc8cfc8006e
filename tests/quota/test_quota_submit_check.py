"""The submit-time rule, pure: what the worker refuses before it creates a job, from the policy alone."""

from __future__ import annotations

import pytest

from airflow_jobs_plugin.queueing.quota.model import UnknownGroupError
from airflow_jobs_plugin.queueing.quota.parse import parse_policy
from airflow_jobs_plugin.queueing.quota.submit_check import (
    OverQuotaError,
    policy_configmap_names,
    policy_not_found,
    submit_charge,
)

POLICY = parse_policy("groups:\n  vision: {gpus: 8, user_gpus: 4}\n  nlp: {gpus: 16, members: [zoe]}\n")


def test_a_job_that_fits_is_charged_whole_gpus():
    charged = submit_charge(POLICY, "vision", "ann", 4)
    assert (charged.key, charged.flavor, dict(charged.avoid)) == ("nvidia.com/gpu", None, {})


def test_an_unknown_group_is_refused_naming_the_known_groups():
    with pytest.raises(UnknownGroupError, match="known groups: nlp, vision"):
        submit_charge(POLICY, "visoin", "ann", 1)


def test_a_non_member_is_refused():
    with pytest.raises(ValueError, match="'ann' is not a member of group 'nlp'"):
        submit_charge(POLICY, "nlp", "ann", 1)


def test_more_than_the_user_may_ever_hold_is_refused():
    with pytest.raises(OverQuotaError, match="user ann may hold at most 4"):
        submit_charge(POLICY, "vision", "ann", 5)


def test_more_than_the_whole_group_is_refused():
    with pytest.raises(OverQuotaError, match="whole quota of group vision is 8"):
        submit_charge(POLICY, "vision", "zed", 9)


def test_a_job_handed_to_kueue_is_not_held_to_its_groups_whole_quota_but_to_its_users_limit():
    # The group's quota is its ClusterQueue's: only the user's limit speaks.
    with pytest.raises(OverQuotaError, match="user ann may hold at most 4 in group vision"):
        submit_charge(POLICY, "vision", "ann", 9, kueue_queue="team-a")


def test_a_missing_policy_names_the_policies_that_exist_and_the_closest():
    names = policy_configmap_names(
        [
            {"metadata": {"name": "team-policy"}, "data": {"policy.yaml": "groups: {}"}},
            {"metadata": {"name": "other"}, "data": {"unrelated": "x"}},
        ]
    )
    assert names == ["team-policy"]
    text = policy_not_found("team-policyx", "ml", names)
    assert text.startswith(
        "quota_configmap: no ConfigMap 'team-policyx' in namespace ml; did you mean 'team-policy'?"
    )
    assert "(quota policy ConfigMaps there: team-policy)" in text
