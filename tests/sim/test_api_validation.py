"""The simulated API server refuses what a real one refuses, with the same codes and causes.

Rules modelled (kubernetes/kubernetes release-1.32): the JSON decoder (type mismatches, quantities,
unknown fields: apimachinery pkg/runtime/serializer/json, pkg/api/resource/quantity.go, apiserver
pkg/endpoints/handlers/rest.go) and pkg/apis/core/validation/validation.go (ValidateResourceRequirements,
validateAffinity, ValidateTolerations, validateProbe, ValidateVolumes, ValidateEnv, ValidateAnnotations).
"""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException


@pytest.fixture
def core(sync_client):
    return client.CoreV1Api(sync_client)


def pod(name: str, container: dict | None = None, **spec) -> dict:
    main = {"name": "main", "image": "busybox:1.36", **(container or {})}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [main], **spec},
    }


def refused(core, namespace, body, **kwargs) -> ApiException:
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(namespace, body, **kwargs)
    return err.value


def causes(exc: ApiException) -> set[tuple[str, str]]:
    body = json.loads(exc.body)
    assert body["kind"] == "Status" and body["reason"] == "Invalid" and exc.status == 422
    return {(c["field"], c["reason"]) for c in body["details"]["causes"]}


def test_a_gpu_count_that_is_not_a_quantity_is_refused_at_create(core, namespace):
    exc = refused(core, namespace, pod("lots", {"resources": {"limits": {"nvidia.com/gpu": "lots"}}}))
    assert exc.status == 400
    assert "quantities must match the regular expression" in json.loads(exc.body)["message"]
    assert core.list_namespaced_pod(namespace).items == []


def test_weighted_terms_under_required_node_affinity_are_refused_by_the_decoder(core, namespace):
    weighted = [{"weight": 1, "preference": {"matchExpressions": [{"key": "a", "operator": "Exists"}]}}]
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": weighted}}
    exc = refused(core, namespace, pod("weighted", affinity=affinity))
    assert exc.status == 400
    assert (
        "cannot unmarshal array into Go struct field NodeAffinity.spec.affinity.nodeAffinity."
        "requiredDuringSchedulingIgnoredDuringExecution of type v1.NodeSelector"
    ) in json.loads(exc.body)["message"]


def test_weighted_terms_under_required_pod_affinity_lose_their_topology_key(core, namespace):
    term = {"weight": 10, "podAffinityTerm": {"topologyKey": "zone", "labelSelector": {}}}
    affinity = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    exc = refused(core, namespace, pod("weighted-pod", affinity=affinity))
    assert causes(exc) == {
        (
            "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey",
            "FieldValueRequired",
        )
    }


def test_node_affinity_operators_and_values(core, namespace):
    terms = [
        {
            "matchExpressions": [
                {"key": "gpu", "operator": "In"},
                {"key": "x", "operator": "Exists", "values": ["1"]},
            ]
        }
    ]
    affinity = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
    }
    base = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
    assert causes(refused(core, namespace, pod("ops", affinity=affinity))) == {
        (f"{base}.matchExpressions[0].values", "FieldValueRequired"),
        (f"{base}.matchExpressions[1].values", "FieldValueForbidden"),
    }


def test_resources_requests_above_limits_and_fractional_gpus(core, namespace):
    resources = {
        "limits": {"cpu": "1", "nvidia.com/gpu": "1"},
        "requests": {"cpu": "2", "nvidia.com/gpu": "0.5"},
    }
    assert causes(refused(core, namespace, pod("res", {"resources": resources}))) == {
        ("spec.containers[0].resources.requests", "FieldValueInvalid"),
        ("spec.containers[0].resources.requests[nvidia.com/gpu]", "FieldValueInvalid"),
    }


def test_tolerations_probes_volumes_and_env(core, namespace):
    body = pod(
        "many",
        {
            "livenessProbe": {
                "exec": {"command": ["true"]},
                "tcpSocket": {"port": 80},
                "successThreshold": 2,
            },
            "volumeMounts": [{"name": "missing", "mountPath": "/data"}],
            "env": [{"name": "1BAD", "value": "x"}],
        },
        tolerations=[
            {"key": "gpu", "operator": "Exists", "value": "yes"},
            {"effect": "Sometimes", "operator": "Exists"},
        ],
        volumes=[{"name": "two", "emptyDir": {}, "hostPath": {"path": "/x"}}],
    )
    assert causes(refused(core, namespace, body)) == {
        ("spec.tolerations[0].operator", "FieldValueInvalid"),
        ("spec.tolerations[1].effect", "FieldValueNotSupported"),
        ("spec.volumes[0].hostPath", "FieldValueForbidden"),
        ("spec.containers[0].livenessProbe.tcpSocket", "FieldValueForbidden"),
        ("spec.containers[0].livenessProbe.successThreshold", "FieldValueInvalid"),
        ("spec.containers[0].volumeMounts[0].name", "FieldValueNotFound"),
        ("spec.containers[0].env[0].name", "FieldValueInvalid"),
    }


def test_annotation_keys_are_qualified_names(core, namespace):
    body = pod("annotated")
    body["metadata"]["annotations"] = {"bad key!": "v"}
    assert causes(refused(core, namespace, body)) == {("metadata.annotations", "FieldValueInvalid")}


def test_unknown_fields_are_dropped_with_a_warning_or_refused_when_strict(core, namespace, sync_client):
    body = pod("extra")
    body["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    exc = refused(core, namespace, body, field_validation="Strict")
    assert exc.status == 400
    assert (
        json.loads(exc.body)["message"]
        == 'strict decoding error: unknown field "spec.containers[0].imagePullPolicyy"'
    )
    created = core.create_namespaced_pod(namespace, body, _preload_content=False)
    assert created.headers.get("Warning") == '299 - "unknown field \\"spec.containers[0].imagePullPolicyy\\""'
    stored = core.read_namespaced_pod("extra", namespace, _preload_content=False)
    assert "imagePullPolicyy" not in json.loads(stored.data)["spec"]["containers"][0]


def test_job_template_is_immutable_unless_suspended(sync_client, namespace, manifests):
    batch = client.BatchV1Api(sync_client)
    batch.create_namespaced_job(namespace, manifests.job("fixed"))
    with pytest.raises(ApiException) as err:
        batch.patch_namespaced_job(
            "fixed",
            namespace,
            {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "other:1"}]}}}},
        )
    assert ("spec.template", "FieldValueInvalid") in causes(err.value)


def test_a_pod_naming_a_priority_class_that_does_not_exist_is_forbidden_before_it_is_validated(
    core, namespace
):
    # The Priority admission plugin (plugin/pkg/admission/priority/admission.go) is a mutating one: it
    # runs before the object's validation, so even a name that is no DNS subdomain is refused as missing,
    # naming the pod by its generateName. The real plane (kube-apiserver v1.36) answers exactly this.
    body = pod("x", priorityClassName="High Priority")
    body["metadata"] = {"generateName": "probe-"}
    exc = refused(core, namespace, body)
    assert exc.status == 403 and json.loads(exc.body)["reason"] == "Forbidden"
    assert (
        json.loads(exc.body)["message"]
        == 'pods "probe-" is forbidden: no PriorityClass with name High Priority was found'
    )


def test_pod_spec_fields_of_full_pod_specs_are_validated_as_the_api_server_does(core, namespace, sync_client):
    # ValidatePodSpec (schedulerName, priorityClassName: DNS subdomains), validateEnvFrom, and
    # validateContainers' terminationMessagePolicy (release-1.32). The PriorityClass must exist, or the
    # Priority admission refuses the pod before validation (above): only an object creating one with such
    # a name could get past it, so the validation of the name is checked with a class that exists.
    ensure_priority_class(sync_client, "training-high")
    body = pod(
        "full",
        {
            "envFrom": [
                {"secretRef": {"name": "wandb"}, "configMapRef": {"name": "cfg"}},
                {"prefix": "1X", "configMapRef": {"name": "Bad_Name"}},
                {"prefix": "OK_"},
            ],
            "terminationMessagePolicy": "Always",
        },
        schedulerName="My_Scheduler",
        priorityClassName="training-high",
    )
    assert causes(refused(core, namespace, body)) == {
        ("spec.schedulerName", "FieldValueInvalid"),
        ("spec.containers[0].envFrom[0]", "FieldValueForbidden"),
        ("spec.containers[0].envFrom[1].prefix", "FieldValueInvalid"),
        ("spec.containers[0].envFrom[1].configMapRef.name", "FieldValueInvalid"),
        ("spec.containers[0].envFrom", "FieldValueInvalid"),
        ("spec.containers[0].terminationMessagePolicy", "FieldValueNotSupported"),
    }


def ensure_priority_class(sync_client, name: str) -> None:
    scheduling = client.SchedulingV1Api(sync_client)
    try:
        scheduling.create_priority_class({"metadata": {"name": name}, "value": 1000})
    except ApiException as exc:
        if exc.status != 409:
            raise


def test_a_pod_with_every_field_the_product_writes_is_accepted(core, namespace, sync_client):
    ensure_priority_class(sync_client, "training-high")
    body = pod(
        "accepted",
        {
            "envFrom": [{"secretRef": {"name": "wandb", "optional": True}, "prefix": "W_"}],
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE"]}},
            "resources": {
                "limits": {"cpu": "1", "memory": "2Gi", "rdma/ib": "1", "hugepages-2Mi": "1Gi"},
                "requests": {"cpu": "1", "memory": "2Gi", "rdma/ib": "1", "hugepages-2Mi": "1Gi"},
            },
            "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
        },
        schedulerName="default-scheduler",
        priorityClassName="training-high",
        securityContext={"runAsUser": 1000, "fsGroup": 1000},
        volumes=[{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}}],
    )
    created = core.create_namespaced_pod(namespace, body)
    assert created.spec.containers[0].termination_message_policy == "FallbackToLogsOnError"


def test_a_volume_naming_no_source_is_defaulted_to_an_empty_dir(core, namespace):
    # kubernetes v1.36 pkg/apis/core/v1/defaults.go SetDefaults_Volume; checked on the real plane by
    # tests/plane_scenarios/test_refused_values_on_the_plane.py.
    created = core.create_namespaced_pod(namespace, pod("sourceless", volumes=[{"name": "scratch"}]))

    assert created.spec.volumes[0].empty_dir is not None
