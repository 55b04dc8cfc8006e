"""The unmodified sync ``kubernetes`` client against the simulated API server."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException


@pytest.fixture
def core(sync_client):
    return client.CoreV1Api(sync_client)


@pytest.fixture
def batch(sync_client):
    return client.BatchV1Api(sync_client)


@pytest.fixture
def custom(sync_client):
    return client.CustomObjectsApi(sync_client)


def status_body(exc: ApiException) -> dict:
    return json.loads(exc.body)


def read_log(core, name, namespace, **kwargs) -> str:
    # kubernetes 36 returns the repr of the bytes from read_namespaced_pod_log (kubernetes-client/python#2596,
    # against real clusters too), so read the raw body.
    return core.read_namespaced_pod_log(name, namespace, _preload_content=False, **kwargs).data.decode()


# --------------------------------------------------------------------------- CRUD per resource


def test_pod_create_get_list_patch_delete(core, namespace, manifests):
    created = core.create_namespaced_pod(namespace, manifests.pod("web", labels={"app": "web"}))
    assert created.metadata.uid and created.status.phase == "Pending"
    assert core.read_namespaced_pod("web", namespace).spec.restart_policy == "Always"
    listed = core.list_namespaced_pod(namespace, label_selector="app=web")
    assert [p.metadata.name for p in listed.items] == ["web"]
    assert int(listed.metadata.resource_version) >= int(created.metadata.resource_version)
    patched = core.patch_namespaced_pod("web", namespace, {"metadata": {"labels": {"extra": "1"}}})
    assert patched.metadata.labels == {"app": "web", "extra": "1"}
    status = core.patch_namespaced_pod_status("web", namespace, {"status": {"phase": "Running"}})
    assert status.status.phase == "Running"
    deleted = core.delete_namespaced_pod("web", namespace)
    assert deleted.metadata.name == "web"
    assert core.list_namespaced_pod(namespace).items == []


def test_job_create_read_status_update_and_delete(batch, namespace, manifests):
    created = batch.create_namespaced_job(namespace, manifests.job("train"))
    assert created.spec.backoff_limit == 6
    assert created.spec.template.metadata.labels["batch.kubernetes.io/job-name"] == "train"
    job = batch.read_namespaced_job("train", namespace)
    job.status.active = 1
    updated = batch.replace_namespaced_job_status("train", namespace, job)
    assert updated.status.active == 1
    suspended = batch.patch_namespaced_job("train", namespace, {"spec": {"suspend": True}})
    assert suspended.spec.suspend is True and suspended.status.active == 1
    result = batch.delete_namespaced_job("train", namespace, propagation_policy="Background")
    assert result.status == "Success"
    with pytest.raises(ApiException) as exc:
        batch.read_namespaced_job("train", namespace)
    assert exc.value.status == 404
    assert status_body(exc.value)["message"] == 'jobs.batch "train" not found'


def test_mpijob_through_custom_objects(custom, namespace, manifests):
    args = ("kubeflow.org", "v2beta1", namespace, "mpijobs")
    created = custom.create_namespaced_custom_object(*args, manifests.mpijob("mpi", workers=2))
    assert created["spec"]["slotsPerWorker"] == 1
    assert custom.get_namespaced_custom_object(*args, "mpi")["metadata"]["uid"] == created["metadata"]["uid"]
    assert [o["metadata"]["name"] for o in custom.list_namespaced_custom_object(*args)["items"]] == ["mpi"]
    patched = custom.patch_namespaced_custom_object(*args, "mpi", {"spec": {"runPolicy": {"suspend": True}}})
    assert patched["spec"]["runPolicy"] == {"cleanPodPolicy": "None", "suspend": True}
    status = {"status": {"conditions": [{"type": "Created", "status": "True"}]}}
    after = custom.patch_namespaced_custom_object_status(*args, "mpi", status)
    assert after["status"]["conditions"][0]["type"] == "Created"
    custom.delete_namespaced_custom_object(*args, "mpi")
    assert custom.list_namespaced_custom_object(*args)["items"] == []


def test_configmap_replace_and_delete_collection(core, namespace):
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "a", "labels": {"g": "1"}}, "data": {"k": "v"}}
    )
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "b", "labels": {"g": "1"}}})
    cm = core.read_namespaced_config_map("a", namespace)
    cm.data = {"k": "w"}
    assert core.replace_namespaced_config_map("a", namespace, cm).data == {"k": "w"}
    core.delete_collection_namespaced_config_map(namespace, label_selector="g=1")
    assert core.list_namespaced_config_map(namespace).items == []


def test_events_with_field_selector_on_involved_object(core, namespace):
    for name in ("p1", "p2"):
        core.create_namespaced_event(
            namespace,
            {
                "metadata": {"generateName": f"{name}."},
                "involvedObject": {"kind": "Pod", "name": name, "namespace": namespace},
                "reason": "Scheduled",
                "message": f"Successfully assigned {namespace}/{name} to sim-node-0",
                "type": "Normal",
                "source": {"component": "default-scheduler"},
            },
        )
    found = core.list_namespaced_event(namespace, field_selector="involvedObject.name=p2,reason=Scheduled")
    assert [e.involved_object.name for e in found.items] == ["p2"]


def test_nodes_and_namespaces(core):
    nodes = core.list_node()
    assert len(nodes.items) == 2
    assert nodes.items[0].status.allocatable["nvidia.com/gpu"] == "8"
    assert core.list_node(field_selector="spec.unschedulable=false").items
    core.patch_node("sim-node-1", {"metadata": {"labels": {"pool": "a"}}})
    assert [n.metadata.name for n in core.list_node(label_selector="pool=a").items] == ["sim-node-1"]
    ns = core.create_namespace({"metadata": {"name": "sync-ns"}})
    assert ns.status.phase == "Active"
    assert core.read_namespace("default").metadata.name == "default"
    core.delete_namespace("sync-ns")


# --------------------------------------------------------------------------- errors


def test_already_exists(core, namespace, manifests):
    core.create_namespaced_pod(namespace, manifests.pod("twice"))
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod(namespace, manifests.pod("twice"))
    body = status_body(exc.value)
    assert (exc.value.status, body["reason"], body["message"]) == (
        409,
        "AlreadyExists",
        'pods "twice" already exists',
    )


def test_stale_update_is_conflict(batch, namespace, manifests):
    batch.create_namespaced_job(namespace, manifests.job("cas"))
    first = batch.read_namespaced_job("cas", namespace)
    second = batch.read_namespaced_job("cas", namespace)
    first.metadata.labels = {"writer": "first"}
    batch.replace_namespaced_job("cas", namespace, first)
    second.metadata.labels = {"writer": "second"}
    with pytest.raises(ApiException) as exc:
        batch.replace_namespaced_job("cas", namespace, second)
    body = status_body(exc.value)
    assert exc.value.status == 409 and body["reason"] == "Conflict"
    assert body["message"] == (
        'Operation cannot be fulfilled on jobs.batch "cas": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )


def test_invalid_body_is_unprocessable(batch, namespace, manifests):
    manifest = manifests.job("bad")
    manifest["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    with pytest.raises(ApiException) as exc:
        batch.create_namespaced_job(namespace, manifest)
    body = status_body(exc.value)
    assert exc.value.status == 422 and body["reason"] == "Invalid"
    assert body["details"]["causes"][0]["field"] == "spec.template.spec.restartPolicy"


def test_unsupported_field_selector_is_bad_request(core, namespace):
    with pytest.raises(ApiException) as exc:
        core.list_namespaced_pod(namespace, field_selector="spec.containers=x")
    assert exc.value.status == 400
    assert status_body(exc.value)["message"] == "field label not supported: spec.containers"


# --------------------------------------------------------------------------- watch


def test_watch_without_version_starts_with_synthetic_added_then_streams(core, namespace, manifests):
    core.create_namespaced_pod(namespace, manifests.pod("before"))
    seen = []
    w = watch.Watch()

    def later():
        time.sleep(0.3)
        core.create_namespaced_pod(namespace, manifests.pod("after"))
        core.delete_namespaced_pod("after", namespace)

    threading.Thread(target=later, daemon=True).start()
    for event in w.stream(core.list_namespaced_pod, namespace, timeout_seconds=5):
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) == 4:
            w.stop()
    # The delete writes the pod's deletionTimestamp (MODIFIED) before removing it, even with grace 0.
    assert seen == [("ADDED", "before"), ("ADDED", "after"), ("MODIFIED", "after"), ("DELETED", "after")]


def test_watch_resumes_after_a_resource_version(core, namespace):
    first = core.create_namespaced_config_map(namespace, {"metadata": {"name": "one"}})
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "two"}})
    core.patch_namespaced_config_map("one", namespace, {"data": {"k": "v"}})
    w = watch.Watch()
    seen = []
    for event in w.stream(
        core.list_namespaced_config_map,
        namespace,
        resource_version=first.metadata.resource_version,
        timeout_seconds=2,
    ):
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) == 2:
            w.stop()
    assert seen == [("ADDED", "two"), ("MODIFIED", "one")]


def test_expired_version_gives_410_then_relist_and_watch_works(sim, core, namespace):
    old = core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "old"}}
    ).metadata.resource_version
    for i in range(sim.config.watch_history // 2 + 1):  # push the old version out of the history
        sim.store.create("configmaps", {"metadata": {"name": f"churn-{i}"}}, namespace)
        sim.store.delete("configmaps", f"churn-{i}", namespace)
    with pytest.raises(ApiException) as exc:
        for _ in watch.Watch().stream(
            core.list_namespaced_config_map, namespace, resource_version=old, timeout_seconds=2
        ):
            pass
    assert exc.value.status == 410 and "too old resource version" in exc.value.reason
    listed = core.list_namespaced_config_map(namespace)
    assert [c.metadata.name for c in listed.items] == ["old"]
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "new"}})
    w = watch.Watch()
    for event in w.stream(
        core.list_namespaced_config_map,
        namespace,
        resource_version=listed.metadata.resource_version,
        timeout_seconds=2,
    ):
        assert (event["type"], event["object"].metadata.name) == ("ADDED", "new")
        w.stop()


def test_watch_with_label_selector_turns_leaving_the_selection_into_deleted(core, namespace):
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "sel", "labels": {"tier": "gpu"}}})
    w = watch.Watch()
    seen = []

    def relabel():
        time.sleep(0.3)
        core.patch_namespaced_config_map("sel", namespace, {"metadata": {"labels": {"tier": "cpu"}}})
        core.patch_namespaced_config_map("sel", namespace, {"metadata": {"labels": {"tier": "gpu"}}})

    threading.Thread(target=relabel, daemon=True).start()
    for event in w.stream(
        core.list_namespaced_config_map, namespace, label_selector="tier=gpu", timeout_seconds=5
    ):
        seen.append(event["type"])
        if len(seen) == 3:
            w.stop()
    assert seen == ["ADDED", "DELETED", "ADDED"]


def test_watch_timeout_ends_the_stream(core, namespace):
    events = list(watch.Watch().stream(core.list_namespaced_pod, namespace, timeout_seconds=1))
    assert events == []


def test_bookmarks_carry_only_the_resource_version(sim, namespace):
    url = f"{sim.url}/api/v1/namespaces/{namespace}/pods?watch=True&allowWatchBookmarks=True&timeoutSeconds=1"
    with urllib.request.urlopen(url, timeout=10) as resp:
        lines = resp.read().decode().splitlines()
    assert lines and all(line.strip() for line in lines)
    bookmark = json.loads(lines[0])
    assert bookmark["type"] == "BOOKMARK"
    assert set(bookmark["object"]["metadata"]) == {"resourceVersion"}
    assert int(bookmark["object"]["metadata"]["resourceVersion"]) >= 1


# --------------------------------------------------------------------------- logs


def test_logs_tail_and_container_choice(sim, core, namespace, manifests):
    containers = [{"name": "main", "image": "a:1"}, {"name": "side", "image": "b:1"}]
    core.create_namespaced_pod(
        namespace, manifests.pod("multi", containers=containers, nodeName="sim-node-0")
    )
    for i in range(5):
        sim.logs.append(namespace, "multi", "main", f"line {i}")
    assert read_log(core, "multi", namespace, container="main", tail_lines=2) == "line 3\nline 4\n"
    with pytest.raises(ApiException) as exc:
        core.read_namespaced_pod_log("multi", namespace)
    assert status_body(exc.value)["message"] == (
        "a container name must be specified for pod multi, choose one of: [main side]"
    )


def test_log_follow_streams_appended_lines_until_the_container_ends(sim, core, namespace, manifests):
    core.create_namespaced_pod(namespace, manifests.pod("follow", nodeName="sim-node-0"))
    sim.logs.append(namespace, "follow", "main", "epoch 1")
    resp = core.read_namespaced_pod_log("follow", namespace, follow=True, _preload_content=False)

    def writer():
        time.sleep(0.3)
        sim.logs.append(namespace, "follow", "main", "epoch 2")
        time.sleep(0.2)
        sim.logs.append(namespace, "follow", "main", "done")
        sim.logs.close(namespace, "follow", "main")

    threading.Thread(target=writer, daemon=True).start()
    text = b"".join(resp.stream(64)).decode()
    assert text == "epoch 1\nepoch 2\ndone\n"


def test_previous_logs_of_a_restarted_container(sim, core, namespace, manifests):
    core.create_namespaced_pod(namespace, manifests.pod("restarted", nodeName="sim-node-0"))
    sim.logs.append(namespace, "restarted", "main", "first run", restart=0)
    sim.logs.close(namespace, "restarted", "main", restart=0)
    sim.logs.append(namespace, "restarted", "main", "second run", restart=1)
    status = {
        "status": {
            "containerStatuses": [
                {
                    "name": "main",
                    "restartCount": 1,
                    "ready": True,
                    "image": "busybox:1.36",
                    "imageID": "",
                    "state": {"running": {}},
                }
            ]
        }
    }
    core.patch_namespaced_pod_status("restarted", namespace, status)
    assert read_log(core, "restarted", namespace) == "second run\n"
    assert read_log(core, "restarted", namespace, previous=True) == "first run\n"


def test_logs_of_a_waiting_container_is_bad_request(core, namespace, manifests):
    core.create_namespaced_pod(namespace, manifests.pod("waiting", nodeName="sim-node-0"))
    waiting = {
        "name": "main",
        "restartCount": 0,
        "ready": False,
        "image": "busybox:1.36",
        "imageID": "",
        "state": {"waiting": {"reason": "ContainerCreating"}},
    }
    core.patch_namespaced_pod_status("waiting", namespace, {"status": {"containerStatuses": [waiting]}})
    with pytest.raises(ApiException) as exc:
        core.read_namespaced_pod_log("waiting", namespace)
    assert (
        status_body(exc.value)["message"]
        == 'container "main" in pod "waiting" is waiting to start: ContainerCreating'
    )


# --------------------------------------------------------------------------- tables


def test_table_answer_for_pods_and_jobs(sim, namespace, manifests, core, batch):
    core.create_namespaced_pod(namespace, manifests.pod("tp"))
    batch.create_namespaced_job(namespace, manifests.job("tj"))
    accept = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}
    for path, header, first in (
        (
            f"/api/v1/namespaces/{namespace}/pods",
            ["Name", "Ready", "Status", "Restarts", "Age"],
            ["tp", "0/1", "Pending", "0"],
        ),
        (
            f"/apis/batch/v1/namespaces/{namespace}/jobs",
            ["Name", "Status", "Completions", "Duration", "Age"],
            ["tj", "Running", "0/1", ""],
        ),
    ):
        with urllib.request.urlopen(
            urllib.request.Request(sim.url + path, headers=accept), timeout=10
        ) as resp:
            body = json.loads(resp.read())
        assert body["kind"] == "Table"
        assert [c["name"] for c in body["columnDefinitions"] if c["priority"] == 0] == header
        assert body["rows"][0]["cells"][: len(first)] == first


def test_list_pages_with_limit_and_continue(core, namespace):
    for name in ("a", "b", "c"):
        core.create_namespaced_config_map(namespace, {"metadata": {"name": name}})
    first = core.list_namespaced_config_map(namespace, limit=2)
    assert [c.metadata.name for c in first.items] == ["a", "b"]
    assert first.metadata.remaining_item_count == 1
    rest = core.list_namespaced_config_map(namespace, limit=2, _continue=first.metadata._continue)
    assert [c.metadata.name for c in rest.items] == ["c"]
    assert rest.metadata._continue is None


def test_unsupported_verb_is_method_not_allowed(sim):
    request = urllib.request.Request(f"{sim.url}/api/v1/namespaces", method="DELETE")
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(request, timeout=10)
    body = json.loads(exc.value.read())
    assert (exc.value.code, body["reason"]) == (405, "MethodNotAllowed")
