"""Server-side apply against the simulated API server, with kubectl 1.32 and kubernetes_asyncio.

Modelled on kube-apiserver 1.32's field manager (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/
fieldmanager) and sigs.k8s.io/structured-merge-diff v4: owners per field, 409 on a contested field,
``force`` to take it over, fields left out of a new apply removed.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid

import pytest
from airflow_jobs_sim import schema
from kubernetes_asyncio.client import CoreV1Api
from kubernetes_asyncio.client.exceptions import ApiException


def write(tmp_path, name: str, data: dict) -> str:
    path = tmp_path / f"{uuid.uuid4().hex}.json"
    path.write_text(
        json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
    )
    return str(path)


@pytest.mark.kubectl
def test_kubectl_apply_server_side_owns_fields_conflicts_and_force(kubectl, namespace, tmp_path):
    ns = ("-n", namespace)
    first = write(tmp_path, "settings", {"a": "1", "b": "2"})
    assert (
        kubectl("apply", "--server-side", "-f", first, *ns).stdout.strip()
        == "configmap/settings serverside-applied"
    )
    rival = write(tmp_path, "settings", {"a": "rival"})
    refused = kubectl("apply", "--server-side", "--field-manager=rival", "-f", rival, *ns, check=False)
    assert refused.returncode != 0
    assert 'Apply failed with 1 conflict: conflict with "kubectl": .data.a' in refused.stderr
    kubectl("apply", "--server-side", "--field-manager=rival", "--force-conflicts", "-f", rival, *ns)
    # kubectl's configuration now leaves "a" to the rival and drops "b": b is removed, a stays.
    kubectl("apply", "--server-side", "-f", write(tmp_path, "settings", {"c": "3"}), *ns)
    live = json.loads(kubectl("get", "cm", "settings", "-o", "json", "--show-managed-fields", *ns).stdout)
    assert live["data"] == {"a": "rival", "c": "3"}
    owners = {e["manager"]: e["fieldsV1"] for e in live["metadata"]["managedFields"]}
    assert owners == {"rival": {"f:data": {"f:a": {}}}, "kubectl": {"f:data": {"f:c": {}}}}


@pytest.mark.kubectl
def test_apply_conflicts_with_the_manager_that_created_the_field(kubectl, namespace, tmp_path):
    kubectl("create", "configmap", "made", "--from-literal=a=1", "-n", namespace)
    refused = kubectl(
        "apply", "--server-side", "-f", write(tmp_path, "made", {"a": "2"}), "-n", namespace, check=False
    )
    assert 'conflict with "kubectl-create": .data.a' in refused.stderr


async def test_kubernetes_asyncio_apply_patch_case(async_client, namespace):
    """kubernetes_asyncio's own e2e_test/test_apply_patch.py, against the simulator."""
    api = CoreV1Api(async_client)
    name = "cm-test" + str(uuid.uuid4())
    manifest = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"namespace": namespace, "name": name},
        "data": {"hello": "world!"},
    }
    resp = await api.patch_namespaced_config_map(
        _content_type="application/apply-patch+yaml",
        field_manager="test",
        body=manifest,
        name=name,
        namespace=namespace,
    )
    assert resp.metadata.name == name
    cm = await api.read_namespaced_config_map(name=name, namespace=namespace)
    cm.data["new"] = "value"
    resp = await api.patch_namespaced_config_map(
        field_manager="test", body=cm, name=name, namespace=namespace
    )
    assert resp.data == {"hello": "world!", "new": "value"}
    with pytest.raises(ApiException) as err:
        await api.patch_namespaced_config_map(
            _content_type="application/apply-patch+yaml", body=manifest, name=name, namespace=namespace
        )
    assert err.value.status == 400  # an apply must name its field manager
    await api.delete_namespaced_config_map(name=name, namespace=namespace)


def test_an_unknown_patch_type_is_refused_listing_only_the_served_ones(sim, namespace):
    url = f"{sim.url}/api/v1/namespaces/{namespace}/configmaps/x"
    request = urllib.request.Request(
        url, data=b"{}", method="PATCH", headers={"Content-Type": "application/yaml"}
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=10)
    assert err.value.code == 415
    message = json.loads(err.value.read())["message"]
    assert "application/apply-patch+yaml" in message and '(got "application/yaml")' in message


def test_the_shipped_schema_matches_the_kubernetes_client_models():
    assert json.loads(schema.SCHEMA_FILE.read_text()) == schema.extract()


def pod_config(container: dict) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [container]}}


def test_keyed_lists_merge_per_item_so_two_managers_share_a_container():
    from airflow_jobs_sim import apply as ssa

    first = ssa.apply(None, pod_config({"name": "main", "image": "trainer:1"}), "deployer", False, "t0")
    second = ssa.apply(
        first.obj, pod_config({"name": "main", "env": [{"name": "SEED", "value": "1"}]}), "tuner", False, "t1"
    )
    assert second.conflicts == ()
    assert second.obj["spec"]["containers"] == [
        {"name": "main", "image": "trainer:1", "env": [{"name": "SEED", "value": "1"}]}
    ]
    contested = ssa.apply(
        second.obj, pod_config({"name": "main", "image": "trainer:2"}), "tuner", False, "t2"
    )
    assert [(c.manager, c.field) for c in contested.conflicts] == [
        ("deployer", '.spec.containers[name="main"].image')
    ]


def test_an_update_takes_the_fields_it_changes_from_their_applier():
    from airflow_jobs_sim import apply as ssa

    applied = ssa.apply(None, pod_config({"name": "main", "image": "trainer:1"}), "deployer", False, "t0").obj
    edited = json.loads(json.dumps(applied))
    edited["spec"]["containers"][0]["image"] = "trainer:hotfix"
    fields = ssa.record_update(applied, edited, "kubectl-edit", "t1")
    owners = {e["manager"]: ssa.from_fields_v1(e["fieldsV1"]) for e in fields}
    image = ("f:spec", "f:containers", 'k:{"name":"main"}', "f:image")
    assert image in owners["kubectl-edit"] and image not in owners["deployer"]
