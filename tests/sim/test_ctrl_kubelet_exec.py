"""Exec mode runs every container that has a command: init containers in order, then the main ones, with
the kubelet's environment, a working directory and the cluster's DNS names (through ``getent``/``nslookup``)."""

from __future__ import annotations

import base64
import uuid

import pytest
from airflow_jobs_sim.cluster import SimCluster
from airflow_jobs_sim.config import ClusterConfig
from airflow_jobs_sim.dns import cluster_records
from airflow_jobs_sim.scenarios import ANNOTATION
from sim_waiting import wait_for


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


# ----------------------------------------------------------------------------- pods/exec


def test_pods_exec_runs_in_the_container_sees_its_empty_dir_and_stops_it_as_the_cncf_xcom_sidecar_is_stopped(
    cluster, ns
):
    from kubernetes import client, config
    from kubernetes.stream import stream

    loop = 'mkdir -p /airflow/xcom; echo \'{"a": 1}\' > /airflow/xcom/return.json; trap "exit 0" INT; while true; do sleep 1; done'
    pod = {
        "metadata": {"name": "sidecar"},
        "spec": {
            "restartPolicy": "Never",
            "volumes": [{"name": "xcom", "emptyDir": {}}],
            "containers": [sh("main", loop, volumeMounts=[{"name": "xcom", "mountPath": "/airflow/xcom"}])],
        },
    }
    cluster.store.create("pods", pod, namespace=ns)
    wait_for(lambda: phase(cluster, ns, "sidecar") == "Running", timeout=30)
    api = client.CoreV1Api(config.new_client_from_config(config_file=cluster.kubeconfig_path))

    def run(command: list[str], **kwargs):
        return stream(
            api.connect_get_namespaced_pod_exec,
            "sidecar",
            ns,
            container="main",
            command=command,
            stdin=False,
            stdout=True,
            stderr=True,
            tty=False,
            _preload_content=False,
            **kwargs,
        )

    read = "for i in 1 2 3 4 5 6 7 8 9; do [ -s /airflow/xcom/return.json ] && break; sleep 0.2; done; cat /airflow/xcom/return.json"
    resp = run(["/bin/sh", "-c", read])
    resp.run_forever(timeout=20)
    assert resp.returncode == 0  # before read_all(), which empties every channel
    assert resp.read_all().strip() == '{"a": 1}'

    failing = run(["/bin/sh", "-c", "echo oops >&2; exit 3"])
    failing.run_forever(timeout=20)
    assert failing.returncode == 3
    assert failing.read_stderr().strip() == "oops"

    killer = stream(
        api.connect_get_namespaced_pod_exec,
        "sidecar",
        ns,
        container="main",
        command=["/bin/sh"],
        stdin=True,
        stdout=True,
        stderr=True,
        tty=False,
        _preload_content=False,
    )
    killer.write_stdin("kill -2 $(pgrep -u $(id -u) -f 'sh')\n")
    # As in a container, the exec'd shell is among the container's `sh` processes: it stops too, and the
    # session the operator waits on ends.
    for _ in range(60):
        if not killer.is_open():
            break
        killer.update(timeout=1)
    assert not killer.is_open()
    wait_for(lambda: phase(cluster, ns, "sidecar") == "Succeeded", timeout=30)
    term = cluster.store.get("pods", "sidecar", ns)["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 0


def test_pods_exec_into_a_container_without_a_process_is_refused_with_the_reason(cluster, ns):
    import json
    import urllib.error
    import urllib.request

    body = {
        "metadata": {"name": "scenario", "annotations": {ANNOTATION: '{"main": {"run": null}}'}},
        "spec": {"containers": [{"name": "main", "image": "trainer:1"}]},
    }
    cluster.store.create("pods", body, namespace=ns)
    wait_for(lambda: phase(cluster, ns, "scenario") == "Running", timeout=30)
    url = f"{cluster.url}/api/v1/namespaces/{ns}/pods/scenario/exec?command=ls&stdout=1"
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(urllib.request.Request(url, method="POST"))
    status = json.loads(raised.value.read())
    assert raised.value.code == 400 and "runs no local process" in status["message"]


def test_a_container_traps_sigint_even_when_the_simulator_was_started_ignoring_it():
    """A suite or simulator started with ``&`` from a script ignores SIGINT and SIGQUIT; its containers
    must not: the cncf XCom sidecar ends on ``trap "exit 0" INT``, which a shell cannot set for a signal
    ignored on entry, so its pod (and the operator's exec session) would never end."""
    import subprocess
    import sys

    script = (
        "import signal, subprocess, sys\n"
        "from airflow_jobs_sim.processes import with_default_signals\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "argv = ['sh', '-c', 'trap \"exit 7\" INT; kill -INT $$; sleep 5; exit 1']\n"
        "sys.exit(subprocess.run(with_default_signals(argv)).returncode)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], timeout=60)
    assert done.returncode == 7


def test_the_termination_message_is_the_file_the_process_wrote_at_its_termination_message_path(cluster, ns):
    # kubernetes pkg/kubelet/kuberuntime/kuberuntime_container.go (v1.31): the kubelet reads the file on
    # exit, success or not; FallbackToLogsOnError reads the log only when the file is empty.
    store = cluster.store
    pods = {
        "wrote": sh("main", "echo '{\"accuracy\": 0.9}' > /dev/termination-log"),
        "custom": sh("main", "printf done > /tmp/result.json", terminationMessagePath="/tmp/result.json"),
        "fell-back": sh(
            "main", "echo first; echo last words; exit 2", terminationMessagePolicy="FallbackToLogsOnError"
        ),
    }
    for name, container in pods.items():
        store.create(
            "pods",
            {"metadata": {"name": name}, "spec": {"restartPolicy": "Never", "containers": [container]}},
            namespace=ns,
        )
    for name in pods:
        wait_for(lambda name=name: phase(cluster, ns, name) in ("Succeeded", "Failed"), timeout=30)

    def message(name: str) -> str:
        return store.get("pods", name, ns)["status"]["containerStatuses"][0]["state"]["terminated"].get(
            "message", ""
        )

    assert message("wrote") == '{"accuracy": 0.9}\n'
    assert message("custom") == "done"
    assert message("fell-back") == "first\nlast words"
