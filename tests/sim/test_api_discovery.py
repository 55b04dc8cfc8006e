"""Discovery, /version and OpenAPI as clients ask for them."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"


def get(url: str, accept: str = "application/json") -> tuple[str, dict]:
    with urllib.request.urlopen(urllib.request.Request(url, headers={"Accept": accept}), timeout=10) as resp:
        return resp.headers["Content-Type"], json.loads(resp.read())


def test_version_reports_1_32(sim):
    _, version = get(f"{sim.url}/version")
    assert (version["major"], version["minor"], version["gitVersion"]) == ("1", "32", "v1.32.0")


def test_plain_discovery_lists_groups_and_resources(sim):
    assert get(f"{sim.url}/api")[1]["versions"] == ["v1"]
    groups = {g["name"]: g["preferredVersion"]["groupVersion"] for g in get(f"{sim.url}/apis")[1]["groups"]}
    assert groups == {
        "batch": "batch/v1",
        "kubeflow.org": "kubeflow.org/v2beta1",
        "rbac.authorization.k8s.io": "rbac.authorization.k8s.io/v1",
        "admissionregistration.k8s.io": "admissionregistration.k8s.io/v1",
        "scheduling.k8s.io": "scheduling.k8s.io/v1",
        "coordination.k8s.io": "coordination.k8s.io/v1",
    }
    core = {r["name"]: r for r in get(f"{sim.url}/api/v1")[1]["resources"]}
    assert core["pods"]["shortNames"] == ["po"] and core["pods"]["categories"] == ["all"]
    assert {"pods/status", "pods/log", "namespaces", "nodes", "events", "configmaps"} <= set(core)
    assert [core[n]["shortNames"] for n in ("configmaps", "events", "nodes", "namespaces")] == [
        ["cm"],
        ["ev"],
        ["no"],
        ["ns"],
    ]
    assert core["pods/log"]["verbs"] == ["get"]
    jobs = get(f"{sim.url}/apis/batch/v1")[1]["resources"][0]
    assert (jobs["name"], jobs["namespaced"], "watch" in jobs["verbs"]) == ("jobs", True, True)


@pytest.mark.parametrize(
    ("path", "names"),
    [
        ("/api", [""]),
        (
            "/apis",
            [
                "batch",
                "kubeflow.org",
                "rbac.authorization.k8s.io",
                "admissionregistration.k8s.io",
                "scheduling.k8s.io",
                "coordination.k8s.io",
            ],
        ),
    ],
)
def test_aggregated_discovery_answers_with_its_content_type(sim, path, names):
    content_type, body = get(sim.url + path, AGGREGATED)
    assert content_type == "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    assert body["kind"] == "APIGroupDiscoveryList"
    assert [item["metadata"]["name"] for item in body["items"]] == names
    resources = [r for item in body["items"] for v in item["versions"] for r in v["resources"]]
    assert all(r["scope"] in ("Namespaced", "Cluster") and r["verbs"] for r in resources)


def test_openapi_v3_names_the_patch_operations_that_accept_field_validation(sim):
    _, root = get(f"{sim.url}/openapi/v3")
    _, doc = get(sim.url + root["paths"]["apis/batch/v1"]["serverRelativeURL"])
    patch = doc["paths"]["/apis/batch/v1/namespaces/{namespace}/jobs/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {"group": "batch", "version": "v1", "kind": "Job"}
    assert "fieldValidation" in [p["name"] for p in patch["parameters"]]


def test_unknown_paths_are_not_found_status(sim):
    with pytest.raises(urllib.error.HTTPError) as exc:
        get(f"{sim.url}/apis/apps/v1/deployments")
    assert exc.value.code == 404 and json.loads(exc.value.read())["kind"] == "Status"
