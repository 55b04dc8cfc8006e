"""Metadata-only reads (``PartialObjectMetadata`` / ``PartialObjectMetadataList``) as kube-apiserver
answers them: staging/src/k8s.io/apiserver/pkg/endpoints/handlers/response.go, Kubernetes 1.32."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

META_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
META_ONE = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"


def get(sim, path: str, accept: str) -> tuple[int, str, dict]:
    request = urllib.request.Request(sim.url + path, headers={"Accept": accept})
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), json.loads(exc.read())


@pytest.fixture
def two_jobs(sim, namespace, manifests):
    for name in ("ja", "jb"):
        sim.store.create("jobs", manifests.job(name, labels={"team": "a"}), namespace)
    return f"/apis/batch/v1/namespaces/{namespace}/jobs"


def test_metadata_only_list_gives_each_objects_whole_metadata_and_nothing_else(sim, two_jobs):
    code, content_type, body = get(sim, two_jobs, META_LIST)
    assert code == 200
    assert content_type.startswith("application/json")
    assert body["kind"] == "PartialObjectMetadataList"
    assert body["apiVersion"] == "meta.k8s.io/v1"
    assert body["metadata"]["resourceVersion"]
    whole = sim.store.get("jobs", "ja", two_jobs.split("/")[5])
    first = body["items"][0]
    assert set(first) == {"kind", "apiVersion", "metadata"}
    assert first["kind"] == "PartialObjectMetadata"
    assert first["metadata"] == whole["metadata"]  # managedFields included, as the server copies it


def test_metadata_only_list_honours_selectors_and_chunks(sim, two_jobs):
    code, _, body = get(sim, two_jobs + "?labelSelector=team%3Da&limit=1", META_LIST)
    assert code == 200
    assert [i["metadata"]["name"] for i in body["items"]] == ["ja"]
    token = body["metadata"]["continue"]
    _, _, rest = get(sim, f"{two_jobs}?labelSelector=team%3Da&limit=1&continue={token}", META_LIST)
    assert [i["metadata"]["name"] for i in rest["items"]] == ["jb"]


def test_metadata_only_get_gives_one_partial_object(sim, two_jobs):
    code, _, body = get(sim, two_jobs + "/ja", META_ONE)
    assert code == 200
    assert body["kind"] == "PartialObjectMetadata"
    assert body["metadata"]["name"] == "ja"
    assert "spec" not in body and "status" not in body


def test_partial_object_metadata_of_a_list_is_refused_not_acceptable(sim, two_jobs):
    code, _, body = get(sim, two_jobs, META_ONE)
    assert code == 406
    assert body["reason"] == "NotAcceptable"
    assert "you requested PartialObjectMetadata, but the requested object is a list" in body["message"]


def test_partial_object_metadata_list_of_one_object_is_refused_not_acceptable(sim, two_jobs):
    code, _, body = get(sim, two_jobs + "/ja", META_LIST)
    assert code == 406
    assert (
        "you requested PartialObjectMetadataList, but the requested object is not a list" in body["message"]
    )


def test_plain_json_first_in_accept_gives_whole_objects(sim, two_jobs):
    code, _, body = get(sim, two_jobs, "application/json, " + META_LIST)
    assert code == 200
    assert body["kind"] == "JobList"
    assert "spec" in body["items"][0]


def test_metadata_only_list_of_a_custom_resource(sim, namespace, manifests):
    sim.store.create("mpijobs", manifests.mpijob("mj"), namespace)
    code, _, body = get(sim, f"/apis/kubeflow.org/v2beta1/namespaces/{namespace}/mpijobs", META_LIST)
    assert code == 200
    assert [(i["kind"], i["metadata"]["name"]) for i in body["items"]] == [("PartialObjectMetadata", "mj")]


def test_watch_asked_for_partial_object_metadata_sends_each_object_as_metadata(sim, namespace, manifests):
    sim.store.create("jobs", manifests.job("jw"), namespace)
    path = f"/apis/batch/v1/namespaces/{namespace}/jobs?watch=true&timeoutSeconds=1&resourceVersion=0"
    request = urllib.request.Request(sim.url + path, headers={"Accept": META_ONE})
    with urllib.request.urlopen(request, timeout=10) as resp:
        first = json.loads(resp.readline())
    assert first["type"] == "ADDED"
    assert first["object"]["kind"] == "PartialObjectMetadata"
    assert first["object"]["metadata"]["name"] == "jw"
    assert "spec" not in first["object"]
