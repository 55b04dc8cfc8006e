"""GPU flavors: a group's quota per kind of GPU node; a job is charged against the flavor its node
selector picks, waits in that flavor's line, and a job naming no flavor is kept off flavored nodes."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.manifests import build_manifest, with_charge
from airflow_jobs_plugin.jobs.spec import TaskIdentity, validate
from airflow_jobs_plugin.queueing.quota import ledger_model
from airflow_jobs_plugin.queueing.quota.flavors import FlavorError, charge, with_avoidance
from airflow_jobs_plugin.queueing.quota.model import QueuedJob, Verdict
from airflow_jobs_plugin.queueing.quota.parse import PolicyError, parse_policy
from airflow_jobs_plugin.queueing.quota.policy import decide

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=timezone.utc)
NOW = T0 + timedelta(hours=1)
PRODUCT = "nvidia.com/gpu.product"
A100 = {PRODUCT: "NVIDIA-A100-SXM4-80GB"}
H100 = {PRODUCT: "NVIDIA-H100-80GB-HBM3"}

POLICY = parse_policy(
    f"""
flavors:
  a100: {{node_labels: {{{PRODUCT}: NVIDIA-A100-SXM4-80GB}}}}
  h100: {{node_labels: {{{PRODUCT}: NVIDIA-H100-80GB-HBM3}}}}
groups:
  vision: {{gpus: 0, flavors: {{a100: 16, h100: 8}}}}
  nlp: {{gpus: 4, flavors: {{a100: 8}}}}
"""
)


def job(
    name: str, gpus: int, key: str, *, group: str = "vision", minute: int = 0, user: str = "ann"
) -> QueuedJob:
    return QueuedJob(
        name=name,
        group=group,
        user=user,
        gpus=gpus,
        queued_at=T0 + timedelta(minutes=minute),
        uid=f"uid-{name}",
        resource=key,
    )


def verdicts(decisions) -> dict[str, str]:
    return {d.job.name: d.verdict.reason for d in decisions}


# --- the policy ------------------------------------------------------------------------------------------


def test_flavors_are_named_once_and_given_per_group():
    assert POLICY.flavors["h100"].node_labels == H100
    assert POLICY.groups["vision"].quota_of("h100") == 8
    assert POLICY.groups["nlp"].quota_of("h100") == 0


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("groups: {a: {gpus: 1, flavors: {h100: 4}}}", "groups.a.flavors.h100: unknown flavor"),
        ("flavors: {h100: {}}\ngroups: {a: {gpus: 1}}", "flavors.h100.node_labels: required"),
        (
            "flavors: {h100: {node_labels: {x: y}, resource: memory}}\ngroups: {a: {gpus: 1}}",
            "flavors.h100.resource: must be a GPU resource name",
        ),
        ("flavors: {H100: {node_labels: {x: y}}}\ngroups: {a: {gpus: 1}}", "flavors.H100: a flavor's name"),
    ],
)
def test_bad_flavors_name_the_key(text, error):
    with pytest.raises(PolicyError) as err:
        parse_policy(text)
    assert error in str(err.value)


# --- how a job is charged --------------------------------------------------------------------------------


def test_a_job_is_charged_against_the_flavor_its_node_selector_picks():
    picked = charge(POLICY.flavors, "vision", POLICY.groups["vision"].flavors, 0, labels.GPU_RESOURCE, H100)
    assert (picked.key, picked.avoid) == ("h100", {})


def test_a_flavor_the_group_has_no_quota_of_is_refused_naming_its_flavors():
    with pytest.raises(FlavorError, match="group nlp has no quota .*its flavors: a100"):
        charge(POLICY.flavors, "nlp", POLICY.groups["nlp"].flavors, 4, labels.GPU_RESOURCE, H100)


def test_a_job_naming_no_flavor_in_a_group_with_only_flavors_is_told_which_to_pick():
    with pytest.raises(FlavorError) as err:
        charge(POLICY.flavors, "vision", POLICY.groups["vision"].flavors, 0, labels.GPU_RESOURCE, None)
    assert "pick one with node_selector (a100: node_selector={'nvidia.com/gpu.product'" in str(err.value)


def test_a_job_naming_no_flavor_is_charged_plainly_and_kept_off_flavored_nodes():
    plain = charge(POLICY.flavors, "nlp", POLICY.groups["nlp"].flavors, 4, labels.GPU_RESOURCE, {"zone": "a"})
    assert plain.key == labels.GPU_RESOURCE
    assert plain.avoid == {PRODUCT: ("NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3")}


def test_the_avoidance_is_added_to_every_required_term_so_none_bypasses_it():
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                ]
            }
        }
    }
    result = with_avoidance(affinity, {PRODUCT: ("x",)})
    terms = result["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert all({"key": PRODUCT, "operator": "NotIn", "values": ["x"]} in t["matchExpressions"] for t in terms)
    assert affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchExpressions"
    ] == [{"key": "zone", "operator": "In", "values": ["a"]}]  # the caller's mapping is not changed


def test_the_manifest_carries_the_flavor_or_the_avoidance():
    ident = TaskIdentity("d", "t", "r", -1, 1)
    spec = validate(image="trainer:1", group="vision", user="ann", gpus=8, node_selector=H100)
    picked = charge(POLICY.flavors, "vision", POLICY.groups["vision"].flavors, 0, labels.GPU_RESOURCE, H100)
    body = build_manifest(with_charge(spec, picked), name="j", task=ident, attempt=1, queued_at=NOW)
    assert body["metadata"]["annotations"][labels.GPU_FLAVOR] == "h100"
    assert ledger_model.queued_job_from_metadata({**body["metadata"], "uid": "u"}).resource == "h100"

    spec = validate(image="trainer:1", group="nlp", user="ann", gpus=2)
    plain = charge(POLICY.flavors, "nlp", POLICY.groups["nlp"].flavors, 4, labels.GPU_RESOURCE, None)
    body = build_manifest(with_charge(spec, plain), name="j", task=ident, attempt=1, queued_at=NOW)
    pod = body["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms == [
        {
            "matchExpressions": [
                {
                    "key": PRODUCT,
                    "operator": "NotIn",
                    "values": ["NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3"],
                }
            ]
        }
    ]
    assert labels.GPU_FLAVOR not in body["metadata"]["annotations"]


# --- admission -------------------------------------------------------------------------------------------


def test_each_flavor_is_a_line_of_its_own():
    queue = [
        job("h-big", 8, "h100", minute=0),
        job("h-more", 2, "h100", minute=1, user="bob"),
        job("a-job", 8, "a100", minute=2),
    ]

    decisions = decide(POLICY, queue, [], NOW)

    assert verdicts(decisions) == {"h-big": "Admitted", "h-more": "GroupQuota", "a-job": "Admitted"}
    message = {d.job.name: d.message for d in decisions}["h-more"]
    assert message == "group vision uses 8 of 8 h100 GPUs; this job needs 2"


def test_a_job_larger_than_its_flavors_quota_can_never_be_admitted():
    decision = decide(POLICY, [job("too-big", 9, "h100")], [], NOW)[0]
    assert decision.verdict is Verdict.OVER_QUOTA


def test_the_pools_view_counts_each_flavor_of_a_group():
    from airflow_jobs_plugin.queueing.quota.model import Reservation
    from airflow_jobs_plugin.queueing.quota.policy import usage

    held = Reservation(job="h", group="vision", user="ann", gpus=8, uid="u", admitted_at=T0, resource="h100")
    vision = next(u for u in usage(POLICY, [held]) if u.group == "vision")

    assert {(d.resource, d.quota, d.used) for d in vision.devices} == {("a100", 16, 0), ("h100", 8, 8)}
