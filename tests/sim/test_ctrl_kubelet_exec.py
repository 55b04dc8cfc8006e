"""Exec mode runs every container that has a command: init containers in order, then the main ones, with
the kubelet's environment, a working directory and the cluster's DNS names (through ``getent``/``nslookup``)."""

from __future__ import annotations

import base64
import uuid

import pytest
from sim_waiting import wait_for

from airflow_jobs_plugin.sim.cluster import SimCluster
from airflow_jobs_plugin.sim.config import ClusterConfig
from airflow_jobs_plugin.sim.dns import cluster_records
from airflow_jobs_plugin.sim.scenarios import ANNOTATION


@pytest.fixture(scope="module")
def cluster():
    with SimCluster(ClusterConfig(nodes=1, time_scale=0.02, exec_commands=True)) as c:
        yield c


@pytest.fixture
def ns(cluster):
    name = f"ex-{uuid.uuid4().hex[:6]}"
    cluster.store.create("namespaces", {"metadata": {"name": name}})
    return name


def sh(name: str, script: str, **extra) -> dict:
    return {"name": name, "image": "busybox:1.36", "command": ["sh", "-c", script], **extra}


def log(cluster, ns: str, pod: str, container: str) -> list[str]:
    read = cluster.logs.read(ns, pod, container, 0)
    return [line for _, line in read.lines] if read is not None else []


def phase(cluster, ns: str, name: str) -> str | None:
    return cluster.store.get("pods", name, ns)["status"].get("phase")


def test_init_containers_run_in_order_then_the_main_one_with_configmap_secret_and_downward_env(cluster, ns):
    store = cluster.store
    store.create("configmaps", {"metadata": {"name": "settings"}, "data": {"EPOCHS": "3"}}, namespace=ns)
    secret = {"metadata": {"name": "wandb"}, "data": {"api-key": base64.b64encode(b"s3cret").decode()}}
    store.create("secrets", secret, namespace=ns)
    env = [
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}}},
    ]
    pod = {
        "metadata": {"name": "trainer"},
        "spec": {
            "restartPolicy": "Never",
            "initContainers": [
                sh("first", "echo first > order.txt"),
                sh("second", "echo second >> order.txt; cat order.txt"),
            ],
            "containers": [
                sh(
                    "main",
                    'echo "$POD $NS $KEY epochs=$EPOCHS"; cat order.txt; exit 4',
                    env=env,
                    envFrom=[{"configMapRef": {"name": "settings"}}],
                )
            ],
        },
    }
    store.create("pods", pod, namespace=ns)
    wait_for(lambda: phase(cluster, ns, "trainer") == "Failed", timeout=30)
    assert log(cluster, ns, "trainer", "second") == ["first", "second"]
    assert log(cluster, ns, "trainer", "main") == [f"trainer {ns} s3cret epochs=3", "first", "second"]
    status = store.get("pods", "trainer", ns)["status"]
    assert [s["state"]["terminated"]["exitCode"] for s in status["initContainerStatuses"]] == [0, 0]
    assert status["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 4


def test_a_failing_init_container_stops_the_pod_before_its_main_container(cluster, ns):
    pod = {
        "metadata": {"name": "broken-init"},
        "spec": {
            "restartPolicy": "Never",
            "initContainers": [sh("check", "echo no dataset; exit 1")],
            "containers": [sh("main", "echo should not run")],
        },
    }
    cluster.store.create("pods", pod, namespace=ns)
    wait_for(lambda: phase(cluster, ns, "broken-init") == "Failed", timeout=30)
    assert log(cluster, ns, "broken-init", "check") == ["no dataset"]
    assert log(cluster, ns, "broken-init", "main") == []


def test_a_worker_behind_a_headless_service_resolves_by_its_dns_name_and_a_wrong_name_does_not(cluster, ns):
    store = cluster.store
    service = {
        "metadata": {"name": "train"},
        "spec": {"clusterIP": "None", "selector": {"job": "train"}, "publishNotReadyAddresses": True},
    }
    store.create("services", service, namespace=ns)
    worker = {
        "metadata": {
            "name": "train-worker-0",
            "labels": {"job": "train"},
            "annotations": {ANNOTATION: '{"main": {"run": null}}'},
        },
        "spec": {
            "hostname": "train-worker-0",
            "subdomain": "train",
            "containers": [{"name": "main", "image": "mpi:1", "command": ["/usr/sbin/sshd", "-De"]}],
        },
    }
    store.create("pods", worker, namespace=ns)
    wait_for(lambda: phase(cluster, ns, "train-worker-0") == "Running", timeout=30)
    ip = store.get("pods", "train-worker-0", ns)["status"]["podIP"]
    script = (
        f"getent hosts train-worker-0.train.{ns}.svc; echo good=$?; "
        f"getent hosts train-worker-0.train-worker.{ns}.svc; echo wrong=$?; "
        f"nslookup train-worker-0.train.{ns}.svc.cluster.local >/dev/null; echo ns=$?"
    )
    store.create(
        "pods",
        {
            "metadata": {"name": "launcher"},
            "spec": {"restartPolicy": "Never", "containers": [sh("main", script)]},
        },
        namespace=ns,
    )
    wait_for(lambda: phase(cluster, ns, "launcher") == "Succeeded", timeout=30)
    assert log(cluster, ns, "launcher", "main") == [
        f"{ip}\ttrain-worker-0.train.{ns}.svc.cluster.local",
        "good=0",
        "wrong=2",
        "ns=0",
    ]
    # An sshd worker cannot run unprivileged: it follows its scenario and started no local process.
    assert all(
        key[1] != "main" or key[0] != store.get("pods", "train-worker-0", ns)["metadata"]["uid"]
        for key in cluster.controllers.kubelet._processes
    )  # noqa: SLF001


def test_dns_records_follow_the_specification():
    pods = [
        {
            "metadata": {"name": "w-0", "namespace": "a", "labels": {"app": "w"}},
            "spec": {"hostname": "w-0", "subdomain": "w"},
            "status": {"podIP": "10.244.0.2", "conditions": [{"type": "Ready", "status": "False"}]},
        },
        {
            "metadata": {"name": "w-1", "namespace": "a", "labels": {"app": "w"}},
            "spec": {"hostname": "w-1", "subdomain": "w"},
            "status": {"podIP": "10.244.0.3", "conditions": [{"type": "Ready", "status": "True"}]},
        },
        {
            "metadata": {"name": "orphan", "namespace": "a"},
            "spec": {"hostname": "orphan", "subdomain": "nosvc"},
            "status": {"podIP": "10.244.0.4"},
        },
    ]
    services = [
        {
            "metadata": {"name": "w", "namespace": "a"},
            "spec": {"clusterIP": "None", "selector": {"app": "w"}},
        },
        {"metadata": {"name": "api", "namespace": "a"}, "spec": {"clusterIP": "10.96.0.20"}},
    ]
    assert cluster_records(services, pods) == {
        "api.a.svc.cluster.local": ["10.96.0.20"],
        "w.a.svc.cluster.local": ["10.244.0.3"],  # not-ready pods are not published by default
        "w-1.w.a.svc.cluster.local": ["10.244.0.3"],
    }
