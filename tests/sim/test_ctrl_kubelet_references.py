"""Pods naming ConfigMaps, Secrets and claims that do not exist, and pods of a deleted node, in a running cluster.

The messages are upstream's: kubernetes release-1.32 ``pkg/kubelet/kubelet_pods.go``
(``makeEnvironmentVariables``), the configmap/secret volume plugins, the scheduler's VolumeBinding
PreFilter and ``pkg/controller/podgc/gc_controller.go`` (``gcOrphaned``).
"""

from __future__ import annotations

import base64
import uuid

import pytest
from airflow_jobs_sim.cluster import SimCluster
from airflow_jobs_sim.config import ClusterConfig
from airflow_jobs_sim.scenarios import ANNOTATION
from sim_waiting import wait_for


@pytest.fixture(scope="module")
def cluster():
    with SimCluster(ClusterConfig(nodes=2, gpus_per_node=8, time_scale=0.02)) as c:
        yield c


@pytest.fixture
def ns(cluster):
    name = f"ref-{uuid.uuid4().hex[:6]}"
    cluster.store.create("namespaces", {"metadata": {"name": name}})
    return name


def pod_body(name: str, main: dict | None = None, **spec) -> dict:
    container = {"name": "main", "image": "trainer:1.0", **(main or {})}
    return {"metadata": {"name": name}, "spec": {"restartPolicy": "Never", "containers": [container], **spec}}


def get(cluster, ns: str, name: str) -> dict:
    return cluster.store.get("pods", name, ns)


def waiting(cluster, ns: str, name: str) -> dict | None:
    statuses = get(cluster, ns, name).get("status", {}).get("containerStatuses") or [{}]
    return statuses[0].get("state", {}).get("waiting")


def events(cluster, ns: str, name: str) -> list[tuple[str, str]]:
    return [
        (e["reason"], e["message"])
        for e in cluster.store.list("events", namespace=ns)
        if e["involvedObject"]["name"] == name
    ]


def secret(name: str, **values: str) -> dict:
    return {
        "metadata": {"name": name},
        "type": "Opaque",
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in values.items()},
    }


def test_env_from_a_missing_configmap_is_create_container_config_error_until_it_exists(cluster, ns):
    cluster.store.create(
        "pods", pod_body("cm", {"envFrom": [{"configMapRef": {"name": "settings"}}]}), namespace=ns
    )
    wait_for(lambda: (waiting(cluster, ns, "cm") or {}).get("reason") == "CreateContainerConfigError")
    assert waiting(cluster, ns, "cm")["message"] == 'configmap "settings" not found'
    assert get(cluster, ns, "cm")["status"]["phase"] == "Pending"
    assert ("Failed", 'Error: configmap "settings" not found') in events(cluster, ns, "cm")
    cluster.store.create("configmaps", {"metadata": {"name": "settings"}, "data": {"A": "1"}}, namespace=ns)
    wait_for(lambda: get(cluster, ns, "cm")["status"].get("phase") == "Succeeded")


def test_a_missing_secret_key_names_the_key_and_the_secret(cluster, ns):
    cluster.store.create("secrets", secret("wandb", other="x"), namespace=ns)
    env = [{"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}}}]
    cluster.store.create("pods", pod_body("sk", {"env": env}), namespace=ns)
    wait_for(lambda: (waiting(cluster, ns, "sk") or {}).get("reason") == "CreateContainerConfigError")
    assert waiting(cluster, ns, "sk")["message"] == f"couldn't find key api-key in Secret {ns}/wandb"


def test_a_missing_secret_and_a_missing_configmap_key(cluster, ns):
    cluster.store.create("configmaps", {"metadata": {"name": "cfg"}, "data": {"a": "1"}}, namespace=ns)
    env = [{"name": "B", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "b"}}}]
    cluster.store.create("pods", pod_body("ck", {"env": env}), namespace=ns)
    cluster.store.create(
        "pods", pod_body("sf", {"envFrom": [{"secretRef": {"name": "creds"}}]}), namespace=ns
    )
    wait_for(lambda: (waiting(cluster, ns, "ck") or {}).get("reason") == "CreateContainerConfigError")
    wait_for(lambda: (waiting(cluster, ns, "sf") or {}).get("reason") == "CreateContainerConfigError")
    assert waiting(cluster, ns, "ck")["message"] == f"couldn't find key b in ConfigMap {ns}/cfg"
    assert waiting(cluster, ns, "sf")["message"] == 'secret "creds" not found'


def test_optional_references_are_skipped_and_the_pod_runs(cluster, ns):
    env = [
        {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "a", "optional": True}}},
        {"name": "B", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "b", "optional": True}}},
    ]
    main = {"env": env, "envFrom": [{"secretRef": {"name": "nope", "optional": True}}]}
    volumes = [{"name": "v", "configMap": {"name": "nope", "optional": True}}]
    cluster.store.create("pods", pod_body("opt", main, volumes=volumes), namespace=ns)
    wait_for(lambda: get(cluster, ns, "opt")["status"].get("phase") == "Succeeded")


def test_a_volume_of_a_missing_secret_stays_container_creating_with_failed_mount(cluster, ns):
    volumes = [{"name": "certs", "secret": {"secretName": "tls"}}]
    cluster.store.create("pods", pod_body("vol", volumes=volumes), namespace=ns)
    expected = ("FailedMount", 'MountVolume.SetUp failed for volume "certs" : secret "tls" not found')
    wait_for(lambda: expected in events(cluster, ns, "vol"))
    assert get(cluster, ns, "vol")["status"]["phase"] == "Pending"
    assert waiting(cluster, ns, "vol") == {"reason": "ContainerCreating"}
    assert not any(reason in ("Pulling", "Created", "Started") for reason, _ in events(cluster, ns, "vol"))
    cluster.store.create("secrets", secret("tls", crt="x"), namespace=ns)
    wait_for(lambda: get(cluster, ns, "vol")["status"].get("phase") == "Succeeded")


def test_a_volume_of_a_missing_configmap_stays_container_creating(cluster, ns):
    volumes = [{"name": "hosts", "configMap": {"name": "hostfile"}}]
    cluster.store.create("pods", pod_body("cmv", volumes=volumes), namespace=ns)
    expected = ("FailedMount", 'MountVolume.SetUp failed for volume "hosts" : configmap "hostfile" not found')
    wait_for(lambda: expected in events(cluster, ns, "cmv"))
    assert waiting(cluster, ns, "cmv") == {"reason": "ContainerCreating"}


def test_a_volume_of_a_missing_claim_leaves_the_pod_pending_unschedulable(cluster, ns):
    volumes = [{"name": "data", "persistentVolumeClaim": {"claimName": "vision-data"}}]
    cluster.store.create("pods", pod_body("pvc", volumes=volumes), namespace=ns)
    message = (
        '0/2 nodes are available: persistentvolumeclaim "vision-data" not found. '
        "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    )
    wait_for(lambda: ("FailedScheduling", message) in events(cluster, ns, "pvc"))
    pod = get(cluster, ns, "pvc")
    assert pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName")
    scheduled = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")
    claim = {
        "metadata": {"name": "vision-data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    cluster.store.create("persistentvolumeclaims", claim, namespace=ns)
    wait_for(lambda: get(cluster, ns, "pvc")["status"].get("phase") == "Succeeded")


def test_deleting_a_node_deletes_its_pods_after_marking_them_failed_by_pod_gc(ns):
    with SimCluster(ClusterConfig(nodes=2, gpus_per_node=8, time_scale=0.02)) as cluster:
        cluster.store.create("namespaces", {"metadata": {"name": ns}})
        seen: list[dict] = []
        cluster.store.subscribe(
            lambda t, r, o: seen.append(o) if r == "pods" and o["metadata"].get("namespace") == ns else None
        )
        body = pod_body("sleeper", nodeName="sim-node-1")
        body["metadata"]["annotations"] = {ANNOTATION: '{"main": {"run": null}}'}
        cluster.store.create("pods", body, namespace=ns)
        wait_for(lambda: get(cluster, ns, "sleeper")["status"].get("phase") == "Running")
        cluster.store.delete("nodes", "sim-node-1")
        wait_for(lambda: not cluster.store.list("pods", namespace=ns))
        last = seen[-1]
        assert last["status"]["phase"] == "Failed"
        target = next(c for c in last["status"]["conditions"] if c["type"] == "DisruptionTarget")
        assert (target["reason"], target["message"]) == ("DeletionByPodGC", "PodGC: node no longer exists")
