"""Secrets and Services are served like every core/v1 kind; kubectl's protobuf bodies are read.

Upstream behaviour modelled: pkg/apis/core/validation/validation.go (ValidateSecret, ValidateService,
ValidateConfigMap), pkg/apis/core/v1/defaults.go (SetDefaults_Service, SetDefaults_Secret) and the
printers of pkg/printers/internalversion/printers.go, all release-1.32.
"""

from __future__ import annotations

import base64
import json
import re

import pytest
from airflow_jobs_sim import protobuf
from kubernetes import client
from kubernetes.client.exceptions import ApiException


def rows(output: str) -> list[list[str]]:
    """kubectl's table output split into cells (columns are separated by 2+ spaces)."""
    return [re.split(r"\s{2,}", line.strip()) for line in output.strip().splitlines()]


@pytest.fixture
def core(sync_client):
    return client.CoreV1Api(sync_client)


def causes(exc: ApiException) -> list[tuple[str, str]]:
    body = json.loads(exc.body)
    return [(c["field"], c["reason"]) for c in body["details"]["causes"]]


def test_kubectl_create_configmap_sends_protobuf_and_is_served(kubectl, namespace):
    out = kubectl("create", "configmap", "settings", "--from-literal=a=b", "-n", namespace).stdout
    assert out.strip() == "configmap/settings created"
    stored = json.loads(kubectl("get", "configmap", "settings", "-n", namespace, "-o", "json").stdout)
    assert stored["data"] == {"a": "b"}
    assert "generateName" not in stored["metadata"]  # protobuf zero values read as unset


def test_kubectl_create_secret_and_read_it_back_from_the_store(sim, kubectl, namespace):
    out = kubectl("create", "secret", "generic", "creds", "--from-literal=password=hunter2", "-n", namespace)
    assert out.stdout.strip() == "secret/creds created"
    secret = sim.store.get("secrets", "creds", namespace)
    assert secret["type"] == "Opaque"
    assert base64.b64decode(secret["data"]["password"]) == b"hunter2"
    table = rows(kubectl("get", "secrets", "-n", namespace).stdout)
    assert table[0] == ["NAME", "TYPE", "DATA", "AGE"]
    assert table[1][:3] == ["creds", "Opaque", "1"]


def test_kubectl_create_service_gets_a_cluster_ip_and_prints_like_the_real_printer(kubectl, namespace):
    kubectl("create", "service", "clusterip", "web", "--tcp=80:8080", "-n", namespace)
    table = rows(kubectl("get", "svc", "-n", namespace).stdout)
    assert table[0] == ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"]
    name, kind, ip, external, ports = table[1][:5]
    assert (name, kind, external, ports) == ("web", "ClusterIP", "<none>", "80/TCP")
    assert ip.startswith("10.96.")
    svc = json.loads(kubectl("get", "svc", "web", "-n", namespace, "-o", "json").stdout)
    assert svc["spec"]["ports"] == [{"name": "80-8080", "port": 80, "protocol": "TCP", "targetPort": 8080}]
    assert svc["spec"]["clusterIPs"] == [ip] and svc["spec"]["sessionAffinity"] == "None"


def test_secret_string_data_is_merged_into_data_and_not_stored(core, namespace):
    body = client.V1Secret(
        metadata=client.V1ObjectMeta(name="token"),
        data={"a": base64.b64encode(b"old").decode()},
        string_data={"a": "new", "b": "two"},
    )
    created = core.create_namespaced_secret(namespace, body)
    assert created.string_data is None
    assert {k: base64.b64decode(v) for k, v in created.data.items()} == {"a": b"new", "b": b"two"}


def test_secret_keys_and_type_rules_are_refused_with_causes(core, namespace):
    bad_key = client.V1Secret(metadata=client.V1ObjectMeta(name="k"), string_data={"no/slash": "x"})
    with pytest.raises(ApiException) as err:
        core.create_namespaced_secret(namespace, bad_key)
    assert err.value.status == 422
    assert causes(err.value) == [("data[no/slash]", "FieldValueInvalid")]
    tls = client.V1Secret(metadata=client.V1ObjectMeta(name="t"), type="kubernetes.io/tls", string_data={})
    with pytest.raises(ApiException) as err:
        core.create_namespaced_secret(namespace, tls)
    assert causes(err.value) == [
        ("data[tls.crt]", "FieldValueRequired"),
        ("data[tls.key]", "FieldValueRequired"),
    ]


def test_immutable_secret_refuses_data_changes_and_type_never_changes(core, namespace):
    core.create_namespaced_secret(
        namespace,
        client.V1Secret(metadata=client.V1ObjectMeta(name="frozen"), string_data={"a": "1"}, immutable=True),
    )
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_secret("frozen", namespace, {"stringData": {"a": "2"}})
    assert causes(err.value) == [("data", "FieldValueForbidden")]
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_secret("frozen", namespace, {"type": "kubernetes.io/basic-auth"})
    assert ("type", "FieldValueInvalid") in causes(err.value)


def test_service_crud_list_watch_and_field_rules(core, namespace):
    svc = client.V1Service(
        metadata=client.V1ObjectMeta(name="api", labels={"app": "api"}),
        spec=client.V1ServiceSpec(selector={"app": "api"}, ports=[client.V1ServicePort(port=443)]),
    )
    created = core.create_namespaced_service(namespace, svc)
    assert created.spec.ports[0].target_port == 443 and created.spec.type == "ClusterIP"
    assert [
        s.metadata.name for s in core.list_namespaced_service(namespace, label_selector="app=api").items
    ] == ["api"]
    patched = core.patch_namespaced_service("api", namespace, {"metadata": {"labels": {"tier": "web"}}})
    assert patched.spec.cluster_ip == created.spec.cluster_ip
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_service("api", namespace, {"spec": {"clusterIP": "10.96.99.99"}})
    assert causes(err.value) == [("spec.clusterIPs[0]", "FieldValueInvalid")]
    two_ports = client.V1Service(
        metadata=client.V1ObjectMeta(name="1st"),
        spec=client.V1ServiceSpec(
            type="Bogus", ports=[client.V1ServicePort(port=1), client.V1ServicePort(port=70000)]
        ),
    )
    with pytest.raises(ApiException) as err:
        core.create_namespaced_service(namespace, two_ports)
    assert set(causes(err.value)) == {
        ("metadata.name", "FieldValueInvalid"),  # a Service name is a DNS-1035 label
        ("spec.type", "FieldValueNotSupported"),
        ("spec.ports[0].name", "FieldValueRequired"),
        ("spec.ports[1].name", "FieldValueRequired"),
        ("spec.ports[1].port", "FieldValueInvalid"),
        ("spec.ports[1].targetPort", "FieldValueInvalid"),  # defaulted from the port
    }
    core.delete_namespaced_service("api", namespace)
    assert core.list_namespaced_service(namespace).items == []


def test_discovery_lists_secrets_and_services(sync_client):
    resources = {r.name: r for r in client.CoreV1Api(sync_client).get_api_resources().resources}
    assert resources["secrets"].namespaced and "watch" in resources["secrets"].verbs
    assert resources["services"].short_names == ["svc"] and "services/status" in resources


def test_protobuf_of_a_kind_not_described_is_refused_naming_it():
    raw = protobuf.MAGIC + bytes([0x0A, 0x0B, 0x0A, 0x02]) + b"v1" + bytes([0x12, 0x05]) + b"Pod12"
    with pytest.raises(protobuf.ProtobufError, match="Pod12"):
        protobuf.decode(raw)


def test_kubectl_create_job_and_namespace_send_protobuf_too(kubectl, namespace):
    kubectl("create", "job", "once", "--image=busybox:1.36", "-n", namespace, "--", "sh", "-c", "true")
    job = json.loads(kubectl("get", "job", "once", "-n", namespace, "-o", "json").stdout)
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["sh", "-c", "true"] and job["spec"]["backoffLimit"] == 6
    assert "stdin" not in container  # a protobuf zero value of a non-pointer field reads as unset
    name = f"{namespace}-extra"
    assert kubectl("create", "namespace", name).stdout.strip() == f"namespace/{name} created"
    kubectl("delete", "namespace", name, "--wait=false")


def test_node_port_services_get_a_node_port(kubectl, namespace):
    kubectl("create", "service", "nodeport", "np", "--tcp=80:8080", "-n", namespace)
    ports = rows(kubectl("get", "svc", "np", "-n", namespace).stdout)[1][4]
    assert ports.startswith("80:3") and ports.endswith("/TCP")


def _field(number: int, payload: bytes | int) -> bytes:
    """One protobuf field: varint for ints, length-delimited for bytes (enough for these tests)."""

    def varint(n: int) -> bytes:
        out = b""
        while True:
            byte, n = n & 0x7F, n >> 7
            out += bytes([byte | (0x80 if n else 0)])
            if not n:
                return out

    if isinstance(payload, int):
        return varint(number << 3) + varint(payload)
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def test_protobuf_pod_decodes_quantity_maps_and_keeps_pointer_zeros():
    limits = _field(1, _field(1, b"nvidia.com/gpu") + _field(2, _field(1, b"1")))  # map entry -> Quantity
    container = _field(1, b"main") + _field(2, b"trainer:1") + _field(8, limits)  # name, image, resources
    spec = _field(2, container) + _field(4, 0)  # containers, terminationGracePeriodSeconds: 0
    pod = _field(1, _field(1, b"p") + _field(3, b"")) + _field(2, spec)  # metadata (empty namespace), spec
    envelope = _field(1, _field(1, b"v1") + _field(2, b"Pod")) + _field(2, pod)
    decoded = protobuf.decode(protobuf.MAGIC + envelope)
    assert decoded == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "containers": [
                {"name": "main", "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ],
            "terminationGracePeriodSeconds": 0,
        },
    }


def test_proto_field_lines_are_parsed_with_their_package():
    text = "package k8s.io.api.core.v1;\nmessage Thing {\n  optional string name = 1;\n  repeated Item items = 2;\n  map<string, string> labels = 3;\n}\n"
    assert protobuf.parse_proto(text) == {
        "k8s.io.api.core.v1.Thing": {
            "1": ["name", "string", "optional"],
            "2": ["items", "k8s.io.api.core.v1.Item", "repeated"],
            "3": ["labels", "string", "map"],
        }
    }
