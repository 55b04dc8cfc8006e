"""The API server with its controllers running: what clients observe of a job's life, and the admin
endpoint's node-loss and eviction hooks."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest
from kubernetes import client, watch


@pytest.fixture
def live(live_sim):
    if live_sim.controllers is None:
        pytest.skip("the simulated controllers are not installed in this checkout")
    return live_sim


def wait_until(predicate, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def scenario(**main) -> dict:
    return {"sim.airflow-jobs.io/scenario": json.dumps({"main": main})}


def post(url: str) -> int:
    request = urllib.request.Request(
        url, data=b"{}", method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        return resp.status


def test_watching_a_job_shows_it_complete_and_its_pod_logs(live, manifests):
    from kubernetes import config

    api = config.new_client_from_config(config_file=live.kubeconfig_path)
    try:
        batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
        manifest = manifests.job("live-ok")
        manifest["spec"]["template"]["metadata"] = {
            "annotations": scenario(pull=1, run=2, exit=0, logs=["epoch 1", "epoch 2"])
        }
        created = batch.create_namespaced_job("default", manifest)
        w = watch.Watch()
        for event in w.stream(
            batch.list_namespaced_job, "default", field_selector="metadata.name=live-ok", timeout_seconds=30
        ):
            conditions = event["object"].status.conditions or []
            if any(c.type == "Complete" and c.status == "True" for c in conditions):
                w.stop()
        pods = core.list_namespaced_pod(
            "default", label_selector=f"batch.kubernetes.io/controller-uid={created.metadata.uid}"
        )
        assert [p.status.phase for p in pods.items] == ["Succeeded"]
        name = pods.items[0].metadata.name
        log = core.read_namespaced_pod_log(name, "default", _preload_content=False).data.decode()
        assert log == "epoch 1\nepoch 2\n"
        batch.delete_namespaced_job("live-ok", "default", propagation_policy="Background")
        wait_until(lambda: not core.list_namespaced_pod("default", label_selector="job-name=live-ok").items)
    finally:
        api.close()


def test_admin_node_loss_marks_the_node_not_ready_and_restore_recovers_it(live):
    assert post(f"{live.url}/_sim/nodes/sim-node-1/lose") == 200

    def ready_status():
        node = live.store.get("nodes", "sim-node-1")
        return next(c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready")

    wait_until(lambda: ready_status() != "True")
    assert post(f"{live.url}/_sim/nodes/sim-node-1/restore") == 200
    wait_until(lambda: ready_status() == "True")


def test_admin_eviction_fails_the_pod_as_evicted(live, manifests):
    manifest = manifests.pod("evictee")
    manifest["metadata"]["annotations"] = scenario(pull=0, run=600)
    manifest["spec"]["restartPolicy"] = "Never"
    live.store.create("pods", manifest, "default")
    wait_until(lambda: live.store.get("pods", "evictee", "default")["status"].get("phase") == "Running")
    assert post(f"{live.url}/_sim/pods/default/evictee/evict") == 200
    pod = wait_until(
        lambda: (p := live.store.get("pods", "evictee", "default"))["status"].get("phase") == "Failed" and p
    )
    assert pod["status"]["reason"] == "Evicted"
    live.store.delete("pods", "evictee", "default", grace_period_seconds=0)


def test_an_unscheduled_pod_being_deleted_is_failed_and_removed_by_pod_gc_despite_its_finalizer(live):
    # pkg/controller/podgc/gc_controller.go (1.32) gcUnscheduledTerminating: no kubelet will finish a pod
    # that was never bound, so pod GC marks it Failed and force-deletes it; a finalizer (here one the
    # test holds) keeps the object until its owner releases it, Failed.
    name = "never-bound"
    live.store.create(
        "pods",
        {
            "metadata": {"name": name, "finalizers": ["example.com/hold"]},
            "spec": {
                "nodeSelector": {"pool": "nowhere"},
                "containers": [{"name": "main", "image": "registry.example/t:1"}],
            },
        },
        namespace="default",
    )
    live.store.delete("pods", name, "default")
    failed = wait_until(
        lambda: (
            (pod := live.store.get("pods", name, namespace="default"))["status"].get("phase") == "Failed"
            and pod
        )
    )
    assert failed["metadata"]["deletionTimestamp"]
    live.store.patch("pods", name, {"metadata": {"finalizers": None}}, "merge", "default")
    wait_until(
        lambda: not any(p["metadata"]["name"] == name for p in live.store.list("pods", namespace="default"))
    )
