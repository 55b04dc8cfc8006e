"""Full pod specs: each field from the DAG argument to the pod, checked at parse time naming the field.

Field names follow the KubernetesPodOperator's (apache-airflow-providers-cncf-kubernetes airflow/operators/pod.py)
where the concept is the same. Every manifest here must survive the kubernetes client's own models: a
key the models do not know (a typo) would be dropped by the round trip and fail it.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from kubernetes.client import ApiClient

from airflow_jobs_plugin.jobs import labels as keys
from airflow_jobs_plugin.jobs.manifests import build_manifest
from airflow_jobs_plugin.jobs.pod_template import merge_under
from airflow_jobs_plugin.jobs.spec import (
    TERMINATION_MESSAGE_PATH,
    JobSpecError,
    TaskIdentity,
    total_gpus,
    validate,
)

TASK = TaskIdentity("nightly_retrain", "train", "scheduled__2024-05-01T00:00:00+00:00", -1, 1)
QUEUED_AT = datetime(2024, 5, 1, 0, 5, 7, tzinfo=timezone.utc)
BASE = {"image": "ghcr.io/org/train:1.2", "group": "vision", "user": "alice", "gpus": 4}


def manifest(**overrides) -> dict:
    spec = validate(**{**BASE, **overrides})
    return build_manifest(spec, name=TASK.job_name(1), task=TASK, attempt=1, queued_at=QUEUED_AT)


def pod_specs(m: dict) -> list[dict]:
    if m["kind"] == "Job":
        return [m["spec"]["template"]["spec"]]
    return [r["template"]["spec"] for r in m["spec"]["mpiReplicaSpecs"].values()]


def main(pod: dict) -> dict:
    return next(c for c in pod["containers"] if c["name"] == "main")


def api_valid(m: dict) -> None:
    client = ApiClient()
    klass = "V1Job" if m["kind"] == "Job" else None
    if klass is None:
        for pod in pod_specs(m):
            assert client.sanitize_for_serialization(client._ApiClient__deserialize(pod, "V1PodSpec")) == pod
        return
    assert client.sanitize_for_serialization(client._ApiClient__deserialize(m, klass)) == m


def errors(**overrides) -> dict[str, str]:
    with pytest.raises(JobSpecError) as raised:
        validate(**{**BASE, **overrides})
    return dict(raised.value.errors)


# --- fields that reach every pod ----------------------------------------------------------------------

AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h100"]}]}
            ]
        }
    }
}


@pytest.mark.parametrize("workers", [1, 2])
def test_affinity_priority_class_scheduler_and_pod_security_context_reach_every_pod(workers):
    m = manifest(
        workers=workers,
        affinity=AFFINITY,
        priority_class_name="training-high",
        scheduler_name="volcano",
        security_context={"runAsUser": 1000, "fsGroup": 1000},
    )
    api_valid(m)
    for pod in pod_specs(m):
        assert pod["affinity"] == AFFINITY
        assert pod["priorityClassName"] == "training-high"
        assert pod["schedulerName"] == "volcano"
        assert pod["securityContext"] == {"runAsUser": 1000, "fsGroup": 1000}


def test_container_security_context_and_env_from_reach_the_main_container():
    m = manifest(
        container_security_context={"capabilities": {"add": ["NET_BIND_SERVICE"]}},
        env_from=[
            {"secretRef": {"name": "wandb"}},
            {"configMapRef": {"name": "train-config"}, "prefix": "CFG_"},
        ],
    )
    api_valid(m)
    container = main(pod_specs(m)[0])
    assert container["securityContext"] == {"capabilities": {"add": ["NET_BIND_SERVICE"]}}
    assert container["envFrom"] == [
        {"secretRef": {"name": "wandb"}},
        {"configMapRef": {"name": "train-config"}, "prefix": "CFG_"},
    ]


def test_extended_resources_are_requested_and_limited_alike_next_to_the_gpus():
    m = manifest(
        cpu="8",
        memory="64Gi",
        container_resources={
            "rdma/hca_shared_devices_a": 1,
            "hugepages-2Mi": "1Gi",
            "ephemeral-storage": "100Gi",
        },
    )
    api_valid(m)
    expected = {
        "cpu": "8",
        "memory": "64Gi",
        "rdma/hca_shared_devices_a": "1",
        "hugepages-2Mi": "1Gi",
        "ephemeral-storage": "100Gi",
        "nvidia.com/gpu": "4",
    }
    assert main(pod_specs(m)[0])["resources"] == {"requests": expected, "limits": expected}


@pytest.mark.parametrize("resource", ["nvidia.com/mig-1g.10gb", "amd.com/gpu"])
def test_gpu_resource_names_the_device_the_pods_ask_for_and_the_quota_charges_its_count(resource):
    spec = validate(**BASE, gpu_resource=resource, workers=2)
    m = build_manifest(spec, name=TASK.job_name(1), task=TASK, attempt=1, queued_at=QUEUED_AT)
    worker = main(m["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"])
    assert worker["resources"]["limits"][resource] == "4"
    assert "nvidia.com/gpu" not in worker["resources"]["limits"]
    assert m["metadata"]["annotations"][keys.GPUS] == str(total_gpus(spec)) == "8"


def test_shm_is_a_memory_backed_volume_of_8gi_by_default_mounted_at_dev_shm():
    pod = pod_specs(manifest())[0]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}} in pod["volumes"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in main(pod)["volumeMounts"]


def test_shm_defaults_to_half_the_memory_when_memory_is_lower_and_can_be_set_or_turned_off():
    assert validate(**BASE, memory="4Gi").shm_size == "2048Mi"
    assert validate(**BASE, memory="64Gi").shm_size == "8Gi"
    assert validate(**BASE, shm_size="32Gi").shm_size == "32Gi"
    pod = pod_specs(manifest(shm_size=None))[0]
    assert "volumes" not in pod and "volumeMounts" not in main(pod)


def test_the_main_container_reports_its_result_through_the_termination_message():
    container = main(pod_specs(manifest())[0])
    assert container["terminationMessagePath"] == TERMINATION_MESSAGE_PATH == "/dev/termination-log"
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"


# --- parse-time errors name the field and the fix -----------------------------------------------------

BAD_FIELDS = [
    ("affinity", {"nodeAfinity": {}}, "affinity.nodeAfinity", "nodeAffinity"),
    ("priority_class_name", "Training High", "priority_class_name", "DNS subdomain"),
    ("scheduler_name", "My_Scheduler", "scheduler_name", "DNS subdomain"),
    ("security_context", {"runAsuser": 1}, "security_context.runAsuser", "runAsUser"),
    ("container_security_context", {"fsGroup": 1}, "container_security_context.fsGroup", "allowed"),
    ("env_from", [{"secret": {"name": "x"}}], "env_from[0]", "secretRef"),
    ("env_from", [{"secretRef": {"name": "Bad_Name"}}], "env_from[0].secretRef.name", "DNS"),
    ("env_from", [{"secretRef": {"name": "x"}, "prefix": "1X"}], "env_from[0].prefix", "prefix"),
    ("gpu_resource", "gpu", "gpu_resource", "nvidia.com/mig-1g.10gb"),
    ("gpu_resource", "kubernetes.io/gpu", "gpu_resource", "extended resource"),
    ("container_resources", {"cpu": "2"}, "container_resources.cpu", "use the cpu argument"),
    ("container_resources", {"nvidia.com/gpu": 2}, "container_resources.nvidia.com/gpu", "use gpus"),
    ("container_resources", {"amd.com/gpu": 2}, "container_resources.amd.com/gpu", "quota charges"),
    ("container_resources", {"rdma/ib": "0.5"}, "container_resources.rdma/ib", "whole number"),
    ("container_resources", {"hugepages-big": "1Gi"}, "container_resources.hugepages-big", "page size"),
    ("container_resources", {"requests": {"rdma/ib": 1}}, "container_resources", "requests and limits"),
    ("shm_size", "16m", "shm_size", "Mi"),
    ("pod_template", {"spek": {}}, "pod_template.spek", "metadata and spec"),
    ("pod_template", {"kind": "Deployment"}, "pod_template.kind", "Pod"),
]


@pytest.mark.parametrize(
    ("arg", "value", "field", "fix"), BAD_FIELDS, ids=[f"{b[0]}-{b[2]}" for b in BAD_FIELDS]
)
def test_a_bad_pod_field_is_named_with_its_fix(arg, value, field, fix):
    problems = errors(**{arg: value})
    assert field in problems, problems
    assert fix in problems[field], problems[field]


def test_hugepages_without_cpu_or_memory_are_refused_as_the_api_server_does():
    assert "cpu or memory" in errors(container_resources={"hugepages-2Mi": "1Gi"})["container_resources"]
    validate(**BASE, memory="4Gi", shm_size=None, container_resources={"hugepages-2Mi": "1Gi"})


def test_shm_larger_than_the_memory_limit_is_refused():
    assert "raise memory" in errors(memory="4Gi", shm_size="8Gi")["shm_size"]


# --- pod_template: merged under the product's fields ---------------------------------------------------

TEMPLATE = {
    "metadata": {"labels": {"team": "vision"}, "annotations": {"sidecar.istio.io/inject": "false"}},
    "spec": {
        "restartPolicy": "Always",
        "shareProcessNamespace": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "terminationGracePeriodSeconds": 120,
        "volumes": [{"name": "cache", "emptyDir": {}}],
        "containers": [
            {"name": "main", "image": "evil/override:1", "ports": [{"containerPort": 29500}]},
            {"name": "metrics", "image": "ghcr.io/org/exporter:1"},
        ],
    },
}


def test_pod_template_adds_what_the_product_does_not_set_and_keeps_sidecars():
    m = manifest(pod_template=TEMPLATE)
    api_valid(m)
    template = m["spec"]["template"]
    pod = template["spec"]
    assert pod["shareProcessNamespace"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert pod["terminationGracePeriodSeconds"] == 120
    assert [c["name"] for c in pod["containers"]] == ["main", "metrics"]
    assert main(pod)["ports"] == [{"containerPort": 29500}]
    assert {"name": "cache", "emptyDir": {}} in pod["volumes"]
    assert template["metadata"]["labels"]["team"] == "vision"
    assert template["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"


def test_a_kubernetes_pod_operator_template_s_base_container_is_the_main_one():
    template = {
        "spec": {"containers": [{"name": "base", "image": "x/y:1", "ports": [{"containerPort": 8080}]}]}
    }
    pod = manifest(pod_template=template)["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["main"]
    assert main(pod)["ports"] == [{"containerPort": 8080}] and main(pod)["image"] == "ghcr.io/org/train:1.2"


def test_pod_template_cannot_override_the_products_fields():
    clean = manifest()
    m = manifest(pod_template=TEMPLATE)
    pod, clean_pod = m["spec"]["template"]["spec"], clean["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"  # podFailurePolicy requires it
    assert main(pod)["image"] == "ghcr.io/org/train:1.2"
    assert main(pod)["resources"] == main(clean_pod)["resources"]
    assert m["spec"]["suspend"] is True
    for key, value in clean["spec"]["template"]["metadata"]["labels"].items():
        assert m["spec"]["template"]["metadata"]["labels"][key] == value


@pytest.mark.parametrize(
    ("template", "field"),
    [
        (
            {"spec": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}},
            "pod_template.spec.containers[0].resources.limits.nvidia.com/gpu",
        ),
        (
            {
                "spec": {
                    "containers": [{"name": "side", "resources": {"requests": {"nvidia.com/mig-1g.10gb": 1}}}]
                }
            },
            "pod_template.spec.containers[0].resources.requests.nvidia.com/mig-1g.10gb",
        ),
        (
            {
                "spec": {
                    "initContainers": [
                        {"name": "x", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}
                    ]
                }
            },
            "pod_template.spec.initContainers[0].env[0]",
        ),
        ({"metadata": {"labels": {keys.GROUP: "nlp"}}}, f"pod_template.metadata.labels.{keys.GROUP}"),
        (
            {"metadata": {"labels": {keys.MANAGED_BY: "me"}}},
            f"pod_template.metadata.labels.{keys.MANAGED_BY}",
        ),
    ],
    ids=["gpus-main", "gpus-sidecar-mig", "device-env", "group-label", "managed-by-label"],
)
def test_pod_template_cannot_take_gpus_or_relabel_the_job_behind_the_quotas_back(template, field):
    assert field in errors(pod_template=template)


def test_a_pod_template_file_is_read_when_the_task_runs_and_merged_under_pod_template(tmp_path):
    from airflow_jobs_plugin.airflow.operators import JobOperator

    path = tmp_path / "pod.yaml"
    path.write_text("spec:\n  shareProcessNamespace: true\n  dnsPolicy: Default\n")
    op = JobOperator(
        task_id="t",
        **BASE,
        pod_template={"spec": {"dnsPolicy": "ClusterFirst"}},
        pod_template_file=str(path),
    )
    spec = op._spec(templated=False)
    assert spec.pod_template["spec"] == {"shareProcessNamespace": True, "dnsPolicy": "ClusterFirst"}
    op.pod_template_file = str(tmp_path / "missing.yaml")
    with pytest.raises(JobSpecError, match=r"^pod_template_file: cannot read"):
        op._spec(templated=False)
    with pytest.raises(JobSpecError, match=r"^pod_template_file: must be a path"):
        JobOperator(task_id="t", **BASE, pod_template_file=3)


def test_merge_under_lays_the_products_mapping_over_the_authors_and_merges_named_lists_by_name():
    base = {"a": 1, "b": {"x": 1, "y": 2}, "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}
    own = {"b": {"y": 3}, "env": [{"name": "B", "value": "9"}, {"name": "C", "value": "3"}], "args": ["z"]}
    assert merge_under(base, own) == {
        "a": 1,
        "b": {"x": 1, "y": 3},
        "env": [{"name": "B", "value": "9"}, {"name": "C", "value": "3"}, {"name": "A", "value": "1"}],
        "args": ["z"],
    }
