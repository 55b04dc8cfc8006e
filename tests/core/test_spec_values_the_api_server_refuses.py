"""Values the API server would refuse with a 422 are refused at DAG parse time, naming the argument's
field and the fix (kubernetes v1.36 pkg/apis/core/validation/validation.go); a 422 that still comes
names the field the API server named and the argument that sets it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_jobs_plugin.cluster.kube import KubeError
from airflow_jobs_plugin.jobs.spec import JobSpecError, validate
from airflow_jobs_plugin.usecases.submission import invalid_problem


def refusal(**arguments) -> str:
    with pytest.raises(JobSpecError) as caught:
        validate(image="registry.example/trainer:1", group="vision", user="ann", **arguments)
    return str(caught.value)


def preferred(part: str, weight: object) -> dict:
    term = (
        {
            "weight": weight,
            "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        }
        if part == "nodeAffinity"
        else {"weight": weight, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}
    )
    return {part: {"preferredDuringSchedulingIgnoredDuringExecution": [term]}}


def test_a_container_resource_without_an_amount_names_the_entry_and_the_fix():
    message = refusal(container_resources={"rdma/ib": None})

    assert "container_resources.rdma/ib: needs an amount, e.g. {'rdma/ib': 1}" in message
    assert "remove the entry" in message


@pytest.mark.parametrize("part", ["nodeAffinity", "podAffinity", "podAntiAffinity"])
@pytest.mark.parametrize("weight", [0, 101, -1, "5", None])
def test_an_affinity_weight_outside_1_to_100_is_refused_at_parse_time(part, weight):
    message = refusal(affinity=preferred(part, weight))

    assert f"affinity.{part}.preferredDuringSchedulingIgnoredDuringExecution[0].weight" in message
    assert "must be a whole number from 1 to 100" in message


def test_affinity_weights_from_1_to_100_are_accepted():
    for weight in (1, 100):
        validate(
            image="registry.example/trainer:1",
            group="vision",
            user="ann",
            affinity=preferred("nodeAffinity", weight),
        )


def test_a_bogus_dns_policy_is_refused_naming_the_policies_and_the_near_miss():
    message = refusal(pod_template={"spec": {"dnsPolicy": "clusterFirst"}})

    assert "pod_template.spec.dnsPolicy: must be one of 'ClusterFirstWithHostNet', 'ClusterFirst'" in message
    assert "did you mean 'ClusterFirst'?" in message


def test_dns_policy_none_needs_a_dns_config():
    assert "pod_template.spec.dnsConfig: is required with dnsPolicy 'None'" in refusal(
        pod_template={"spec": {"dnsPolicy": "None"}}
    )


def test_a_duration_beyond_what_a_timedelta_holds_is_refused_naming_the_argument():
    assert "active_deadline: must be at most 999,999,999 days" in refusal(active_deadline=10**30)
    assert validate(
        image="registry.example/trainer:1", group="vision", user="ann", active_deadline=timedelta(days=3)
    ).active_deadline == timedelta(days=3)


def status_422(*causes: dict) -> KubeError:
    body = {
        "kind": "Status",
        "code": 422,
        "reason": "Invalid",
        "message": "Job.batch is invalid",
        "details": {"causes": list(causes)},
    }
    return KubeError.from_status(422, body)


def test_a_422_names_each_field_and_the_argument_that_sets_it():
    exc = status_422(
        {
            "field": "spec.template.spec.containers[0].resources.limits[rdma/ib]",
            "message": "Invalid value: 0.5",
        },
        {"field": "spec.template.spec.dnsPolicy", "message": 'Unsupported value: "Bogus"'},
    )

    message = invalid_problem("Job", "ml/train-a1", exc)

    assert exc.invalid and not exc.transient
    assert "refused Job ml/train-a1 as invalid (422), which no retry can change" in message
    assert "spec.template.spec.containers[0].resources.limits[rdma/ib]: Invalid value: 0.5" in message
    assert "spec.template.spec.dnsPolicy: Unsupported value" in message
    assert "fix cpu, memory or container_resources / pod_template in the task's arguments" in message


def test_a_422_of_many_causes_lists_five_and_counts_the_rest():
    exc = status_422(*({"field": f"metadata.labels[k{i}]", "message": "Invalid value"} for i in range(9)))

    message = invalid_problem("Job", "ml/train-a1", exc)

    assert "metadata.labels[k4]" in message and "metadata.labels[k5]" not in message
    assert "and 4 more" in message
