"""At DAG parse time, no argument reaches GPUs the quota does not charge (jobs/kinds/charge.py's rules):
each refusal names the argument's field and the fix."""

from __future__ import annotations

import pytest

from airflow_jobs_plugin.jobs.spec import JobSpecError, validate


def problems(**args) -> dict[str, str]:
    with pytest.raises(JobSpecError) as caught:
        validate(image="trainer:1", group="vision", user="alice", gpus=1, **args)
    return dict(caught.value.errors)


def test_a_gpu_init_container_is_refused_at_parse_time():
    found = problems(
        init_containers=[{"name": "warm", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 4}}}]
    )
    assert "GPUs come only from the gpus argument" in found["init_containers[0].resources"]


def test_an_accelerator_of_another_vendor_in_an_init_container_is_refused():
    found = problems(
        init_containers=[{"name": "w", "image": "x", "resources": {"requests": {"habana.ai/gaudi": 1}}}]
    )
    assert "asks for habana.ai/gaudi" in found["init_containers[0].resources"]


def test_a_privileged_container_is_refused_at_parse_time():
    assert (
        "sees every GPU of its node"
        in problems(container_security_context={"privileged": True})["container_security_context.privileged"]
    )
    found = problems(init_containers=[{"name": "w", "image": "x", "securityContext": {"privileged": True}}])
    assert "sees every GPU" in found["init_containers[0].securityContext.privileged"]
    template = {
        "spec": {"initContainers": [{"name": "s", "image": "x", "securityContext": {"privileged": True}}]}
    }
    assert (
        "sees every GPU"
        in problems(pod_template=template)["pod_template.spec.initContainers[0].securityContext.privileged"]
    )


def test_a_dra_claim_in_the_pod_template_is_refused_at_parse_time():
    found = problems(pod_template={"spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "all"}]}})
    assert "a DRA claim gets devices from its driver" in found["pod_template.spec.resourceClaims"]
    template = {"spec": {"containers": [{"name": "main", "resources": {"claims": [{"name": "gpu"}]}}]}}
    assert "DRA claim" in problems(pod_template=template)["pod_template.spec.containers[0].resources.claims"]


def test_a_node_name_in_the_pod_template_is_refused_at_parse_time():
    found = problems(pod_template={"spec": {"nodeName": "gpu-7"}})
    assert "without the scheduler" in found["pod_template.spec.nodeName"]
    assert "node_selector or affinity" in found["pod_template.spec.nodeName"]


def test_visible_devices_in_an_init_container_is_refused():
    found = problems(
        init_containers=[
            {"name": "w", "image": "x", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}
        ]
    )
    assert "NVIDIA_VISIBLE_DEVICES would show GPUs" in found["init_containers[0].env[0]"]


def test_an_honest_init_container_and_template_pass():
    validate(
        image="trainer:1",
        group="vision",
        user="alice",
        gpus=1,
        init_containers=[{"name": "fetch", "image": "x", "resources": {"limits": {"cpu": "1"}}}],
        pod_template={
            "spec": {"initContainers": [{"name": "proxy", "image": "y", "restartPolicy": "Always"}]}
        },
        container_security_context={"privileged": False},
    )
