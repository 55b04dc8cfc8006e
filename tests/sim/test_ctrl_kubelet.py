"""The simulated kubelet in a running cluster: pulls, restarts, logs, deletion, node loss, eviction, exec mode."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import uuid

import pytest
from airflow_jobs_sim.cluster import SimCluster
from airflow_jobs_sim.config import ClusterConfig
from airflow_jobs_sim.controllers.base import Reconciler
from airflow_jobs_sim.scenarios import ANNOTATION
from sim_waiting import wait_for


@pytest.fixture(scope="module")
def cluster():
    with SimCluster(ClusterConfig(nodes=2, gpus_per_node=8, time_scale=0.02)) as c:
        yield c


@pytest.fixture
def ns(cluster):
    name = f"kl-{uuid.uuid4().hex[:6]}"
    cluster.store.create("namespaces", {"metadata": {"name": name}})
    return name


class History:
    """Every status a namespace's pods went through, as the store published them."""

    def __init__(self, cluster, ns: str):
        self.ns = ns
        self.statuses: list[tuple[str, dict]] = []
        self._lock = threading.Lock()
        self._stop = cluster.store.subscribe(self._on_event)

    def _on_event(self, event_type, resource, obj):
        if resource == "pods" and obj["metadata"].get("namespace") == self.ns:
            with self._lock:
                self.statuses.append((obj["metadata"]["name"], obj.get("status") or {}))

    def shown(self, pod: str, container: str = "main", init: bool = False) -> list[str]:
        """Distinct successive states of one container: waiting/terminated reason or Running."""
        key = "initContainerStatuses" if init else "containerStatuses"
        out: list[str] = []
        with self._lock:
            statuses = [s for name, s in self.statuses if name == pod]
        for status in statuses:
            for c in status.get(key) or []:
                if c["name"] != container:
                    continue
                state = c["state"]
                word = (
                    "Running"
                    if "running" in state
                    else (state.get("waiting") or state.get("terminated"))["reason"]
                )
                if not out or out[-1] != word:
                    out.append(word)
        return out

    def close(self):
        self._stop()


def pod_body(
    name: str, scenario: dict | None = None, image: str = "trainer:1.0", restart: str = "Never", **spec
) -> dict:
    meta: dict = {"name": name}
    if scenario is not None:
        meta["annotations"] = {ANNOTATION: json.dumps(scenario)}
    return {
        "metadata": meta,
        "spec": {"restartPolicy": restart, "containers": [{"name": "main", "image": image}], **spec},
    }


def get(cluster, ns: str, name: str) -> dict:
    return cluster.store.get("pods", name, ns)


def phase(cluster, ns: str, name: str) -> str | None:
    return get(cluster, ns, name)["status"].get("phase")


def restarts(cluster, ns: str, name: str) -> int:
    statuses = get(cluster, ns, name)["status"].get("containerStatuses") or [{}]
    return statuses[0].get("restartCount", 0)


def events(cluster, ns: str, name: str) -> list[tuple[str, str, str]]:
    return [
        (e["type"], e["reason"], e["message"])
        for e in cluster.store.list("events", namespace=ns)
        if e["involvedObject"]["name"] == name
    ]


def test_a_pod_runs_to_completion_and_its_log_lines_reach_the_log_store(cluster, ns):
    cluster.store.create("pods", pod_body("hello", {"main": {"logs": ["epoch 1", "epoch 2"]}}), namespace=ns)
    wait_for(lambda: phase(cluster, ns, "hello") == "Succeeded")
    read = cluster.logs.read(ns, "hello", "main", 0)
    assert [line for _, line in read.lines] == ["epoch 1", "epoch 2"] and read.closed
    reasons = [r for _, r, _ in events(cluster, ns, "hello")]
    assert reasons == ["Scheduled", "Pulling", "Pulled", "Created", "Started"]
    assert all(e[0] == "Normal" for e in events(cluster, ns, "hello"))
    kubelet_event = next(e for e in cluster.store.list("events", namespace=ns) if e["reason"] == "Started")
    assert kubelet_event["source"]["component"] == "kubelet" and kubelet_event["source"]["host"].startswith(
        "sim-node-"
    )
    assert kubelet_event["involvedObject"]["fieldPath"] == "spec.containers{main}"


def test_a_pod_with_an_unavailable_image_goes_errimagepull_then_imagepullbackoff(cluster, ns):
    history = History(cluster, ns)
    try:
        cluster.store.create("pods", pod_body("ghost", image="trainer:not-found"), namespace=ns)
        wait_for(lambda: history.shown("ghost")[-3:] == ["ErrImagePull", "ImagePullBackOff", "ErrImagePull"])
    finally:
        history.close()
    assert history.shown("ghost")[:3] == ["ContainerCreating", "ErrImagePull", "ImagePullBackOff"]
    assert phase(cluster, ns, "ghost") == "Pending"
    found = events(cluster, ns, "ghost")
    assert ("Warning", "Failed", "Error: ErrImagePull") in found
    assert ("Warning", "Failed", "Error: ImagePullBackOff") in found
    assert ("Normal", "BackOff", 'Back-off pulling image "trainer:not-found"') in found


def test_restart_policy_onfailure_shows_crashloopbackoff_and_counts_restarts(cluster, ns):
    history = History(cluster, ns)
    try:
        cluster.store.create(
            "pods",
            pod_body("crashy", {"main": {"pull": 0, "run": 0, "exit": 1}}, restart="OnFailure"),
            namespace=ns,
        )
        wait_for(lambda: restarts(cluster, ns, "crashy") >= 2)
    finally:
        history.close()
    assert "CrashLoopBackOff" in history.shown("crashy")
    status = get(cluster, ns, "crashy")["status"]
    assert status["phase"] == "Running"
    last = status["containerStatuses"][0]["lastState"]["terminated"]
    assert (last["exitCode"], last["reason"]) == (1, "Error")
    assert any(
        r == "BackOff" and m.startswith("Back-off restarting failed container main in pod crashy_")
        for _, r, m in events(cluster, ns, "crashy")
    )
    cluster.store.delete("pods", "crashy", namespace=ns)


def test_deleting_a_running_pod_stops_its_container_then_removes_the_pod(cluster, ns):
    history = History(cluster, ns)
    try:
        cluster.store.create("pods", pod_body("server", {"main": {"pull": 0, "run": None}}), namespace=ns)
        wait_for(lambda: phase(cluster, ns, "server") == "Running")
        marked = cluster.store.delete("pods", "server", namespace=ns)
        assert marked["metadata"].get("deletionTimestamp")
        wait_for(lambda: not cluster.store.list("pods", namespace=ns))
    finally:
        history.close()
    final = history.statuses[-1][1]
    term = final["containerStatuses"][0]["state"]["terminated"]
    assert (term["exitCode"], term["reason"], final["phase"]) == (143, "Error", "Failed")
    assert ("Normal", "Killing", "Stopping container main") in events(cluster, ns, "server")


def test_an_evicted_pod_fails_with_reason_evicted_and_a_disruptiontarget_condition(cluster, ns):
    cluster.store.create("pods", pod_body("victim", {"main": {"pull": 0, "run": None}}), namespace=ns)
    wait_for(lambda: phase(cluster, ns, "victim") == "Running")
    cluster.controllers.evict_pod(ns, "victim", "The node was low on resource: memory.")
    wait_for(lambda: phase(cluster, ns, "victim") == "Failed")
    status = get(cluster, ns, "victim")["status"]
    assert (status["reason"], status["message"]) == ("Evicted", "The node was low on resource: memory.")
    target = next(c for c in status["conditions"] if c["type"] == "DisruptionTarget")
    assert (target["status"], target["reason"]) == ("True", "TerminationByKubelet")
    assert "terminated" in status["containerStatuses"][0]["state"]
    assert ("Warning", "Evicted", "The node was low on resource: memory.") in events(cluster, ns, "victim")


def test_a_lost_node_marks_its_pods_nodelost_and_the_job_replaces_them_elsewhere(cluster, ns):
    job = {
        "metadata": {"name": "resilient"},
        "spec": {
            "backoffLimit": 3,
            "template": {
                "metadata": {"annotations": {ANNOTATION: json.dumps({"main": {"pull": 0, "run": None}})}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "trainer:1.0"}]},
            },
        },
    }
    cluster.store.create("jobs", job, namespace=ns)
    first = wait_for(
        lambda: [p for p in cluster.store.list("pods", namespace=ns) if p["status"].get("phase") == "Running"]
    )[0]
    node = first["spec"]["nodeName"]
    cluster.controllers.lose_node(node, eviction_after=5)
    try:
        ready = wait_for(
            lambda: (
                next(
                    c
                    for c in cluster.store.get("nodes", node)["status"]["conditions"]
                    if c["type"] == "Ready"
                )["status"]
                == "Unknown"
                and cluster.store.get("nodes", node)
            )
        )
        assert {t["key"] for t in ready["spec"]["taints"]} == {"node.kubernetes.io/unreachable"}

        def marked_lost():
            pod = get(cluster, ns, first["metadata"]["name"])
            return (
                pod["status"].get("reason") == "NodeLost" and pod["metadata"].get("deletionTimestamp") and pod
            )

        lost = wait_for(marked_lost)
        assert next(c for c in lost["status"]["conditions"] if c["type"] == "Ready")["status"] == "False"
        assert (
            lost["status"]["message"]
            == f"Node {node} which was running pod {first['metadata']['name']} is unresponsive"
        )

        def replacement():
            return [
                p
                for p in cluster.store.list("pods", namespace=ns)
                if p["metadata"]["uid"] != first["metadata"]["uid"] and p["status"].get("phase") == "Running"
            ]

        [second] = wait_for(replacement)
        assert second["spec"]["nodeName"] != node
        assert cluster.store.get("jobs", "resilient", ns)["status"]["failed"] == 1
    finally:
        cluster.controllers.restore_node(node)
    wait_for(
        lambda: all(
            p["metadata"]["uid"] != first["metadata"]["uid"] for p in cluster.store.list("pods", namespace=ns)
        )
    )
    ready = next(c for c in cluster.store.get("nodes", node)["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True" and not cluster.store.get("nodes", node)["spec"].get("taints")
    cluster.store.delete("jobs", "resilient", namespace=ns, propagation_policy="Background")


def test_a_malformed_scenario_annotation_gives_an_event_and_the_simulator_keeps_running(cluster, ns):
    cluster.store.create("pods", pod_body("broken", {"main": {"rnu": 5}}), namespace=ns)
    cluster.store.create("pods", pod_body("fine", {"main": {"pull": 0, "run": 0}}), namespace=ns)
    wait_for(lambda: phase(cluster, ns, "fine") == "Succeeded")
    waiting = wait_for(lambda: get(cluster, ns, "broken")["status"].get("containerStatuses"))[0]["state"][
        "waiting"
    ]
    assert waiting["reason"] == "CreateContainerConfigError" and "unknown key 'rnu'" in waiting["message"]
    assert any(t == "Warning" and "unknown key 'rnu'" in m for t, _, m in events(cluster, ns, "broken"))


async def test_a_controller_keeps_working_after_one_object_raises():
    seen: list[str] = []

    class Fragile(Reconciler):
        def reconcile(self, key: str) -> None:
            if key == "bad":
                raise RuntimeError("boom")
            seen.append(key)

    fragile = Fragile()
    task = asyncio.create_task(fragile.run())
    fragile.enqueue("bad")
    fragile.enqueue("good")
    for _ in range(100):
        if seen:
            break
        await asyncio.sleep(0.01)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert seen == ["good"]


# ----------------------------------------------------------------------------- exec mode


@pytest.fixture(scope="module")
def exec_cluster():
    with SimCluster(ClusterConfig(nodes=1, time_scale=0.02, exec_commands=True)) as c:
        yield c


def exec_job(name: str, code: str) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "main", "image": "python:3.11", "command": [sys.executable, "-c", code]}
                    ],
                }
            },
        },
    }


def test_exec_mode_runs_the_command_and_its_output_and_exit_code_are_the_containers(exec_cluster):
    store = exec_cluster.store
    store.create("jobs", exec_job("real", "print('hi'); import sys; sys.exit(3)"), namespace="default")

    def failed_pod():
        pods = store.list("pods", namespace="default", label_selector="job-name=real")
        return pods and pods[0]["status"].get("phase") == "Failed" and pods[0]

    pod = wait_for(failed_pod, timeout=30)
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (term["exitCode"], term["reason"]) == (3, "Error")
    read = exec_cluster.logs.read("default", pod["metadata"]["name"], "main", 0)
    assert [line for _, line in read.lines] == ["hi"] and read.closed
    wait_for(
        lambda: any(
            c["type"] == "Failed" and c["status"] == "True"
            for c in store.get("jobs", "real", "default")["status"].get("conditions") or []
        )
    )


def test_exec_mode_kills_the_process_when_the_pod_is_deleted(exec_cluster):
    store = exec_cluster.store
    store.create(
        "jobs",
        exec_job("sleeper", "import time; print('up', flush=True); time.sleep(60)"),
        namespace="default",
    )

    def running_pod():
        pods = store.list("pods", namespace="default", label_selector="job-name=sleeper")
        if pods and pods[0]["status"].get("phase") == "Running":
            read = exec_cluster.logs.read("default", pods[0]["metadata"]["name"], "main", 0)
            return read is not None and read.lines and pods[0]
        return None

    pod = wait_for(running_pod, timeout=30)
    store.delete("jobs", "sleeper", namespace="default", propagation_policy="Background")
    wait_for(
        lambda: not store.list("pods", namespace="default", label_selector="job-name=sleeper"), timeout=30
    )
    assert not exec_cluster.controllers.kubelet._processes  # noqa: SLF001 - no process left behind
    assert pod["metadata"]["name"]


def test_an_eviction_through_the_eviction_api_marks_the_pod_and_deletes_it_gracefully(cluster, ns):
    history = History(cluster, ns)
    try:
        cluster.store.create("pods", pod_body("evictee", {"main": {"pull": 0, "run": None}}), namespace=ns)
        wait_for(lambda: phase(cluster, ns, "evictee") == "Running")
        cluster.controllers.evict_pod(ns, "evictee", via_api=True)
        wait_for(lambda: not cluster.store.list("pods", namespace=ns))
    finally:
        history.close()
    final = history.statuses[-1][1]
    target = next(c for c in final["conditions"] if c["type"] == "DisruptionTarget")
    assert (target["status"], target["reason"]) == ("True", "EvictionByEvictionAPI")
    assert final["phase"] == "Failed"
