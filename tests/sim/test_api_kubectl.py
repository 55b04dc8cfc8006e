"""kubectl 1.32, unmodified, against the simulated API server (skipped where kubectl is absent)."""

from __future__ import annotations

import json
import subprocess
import threading
import time

import pytest

pytestmark = pytest.mark.kubectl


def rows(output: str) -> list[list[str]]:
    """kubectl's table output split into cells (columns are separated by 2+ spaces)."""
    import re

    return [re.split(r"\s{2,}", line.strip()) for line in output.strip().splitlines()]


def set_container_state(sim, namespace, pod, state, phase="Running", restarts=0, ready=False):
    status = {
        "phase": phase,
        "containerStatuses": [
            {
                "name": "main",
                "image": "busybox:1.36",
                "imageID": "",
                "ready": ready,
                "restartCount": restarts,
                "state": state,
            }
        ],
    }
    sim.store.patch("pods", pod, {"status": status}, "merge", namespace, subresource="status")


def test_get_pods_prints_the_server_side_status(sim, kubectl, namespace, manifests):
    for name in ("crashing", "pulling", "done"):
        sim.store.create("pods", manifests.pod(name, nodeName="sim-node-0"), namespace)
    set_container_state(sim, namespace, "crashing", {"waiting": {"reason": "CrashLoopBackOff"}}, restarts=3)
    set_container_state(
        sim, namespace, "pulling", {"waiting": {"reason": "ContainerCreating"}}, phase="Pending"
    )
    set_container_state(
        sim, namespace, "done", {"terminated": {"exitCode": 0, "reason": "Completed"}}, phase="Succeeded"
    )
    out = kubectl("get", "pods", "-n", namespace).stdout
    table = rows(out)
    assert table[0] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    statuses = {r[0]: (r[1], r[2], r[3]) for r in table[1:]}
    assert statuses == {
        "crashing": ("0/1", "CrashLoopBackOff", "3"),
        "done": ("0/1", "Completed", "0"),
        "pulling": ("0/1", "ContainerCreating", "0"),
    }


def test_get_pods_wide_shows_node_and_ip(sim, kubectl, namespace, manifests):
    sim.store.create("pods", manifests.pod("placed", nodeName="sim-node-1"), namespace)
    out = kubectl("get", "pods", "-o", "wide", "-n", namespace).stdout
    header, row = rows(out)
    assert header[-4:] == ["IP", "NODE", "NOMINATED NODE", "READINESS GATES"]
    assert row[0] == "placed" and "sim-node-1" in row


def test_get_jobs_prints_status_completions_duration(sim, kubectl, namespace, manifests):
    sim.store.create("jobs", manifests.job("finished"), namespace)
    sim.store.create("jobs", manifests.job("paused", suspend=True), namespace)
    complete = {
        "status": {
            "succeeded": 1,
            "startTime": "2025-01-01T00:00:00Z",
            "completionTime": "2025-01-01T00:01:05Z",
            "conditions": [{"type": "Complete", "status": "True"}],
        }
    }
    sim.store.patch("jobs", "finished", complete, "merge", namespace, subresource="status")
    suspended = {"status": {"conditions": [{"type": "Suspended", "status": "True"}]}}
    sim.store.patch("jobs", "paused", suspended, "merge", namespace, subresource="status")
    table = rows(kubectl("get", "jobs", "-n", namespace).stdout)
    assert table[0] == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    assert table[1][:4] == ["finished", "Complete", "1/1", "65s"]
    assert table[2][:3] == ["paused", "Suspended", "0/1"]


def test_get_mpijobs_and_short_names(sim, kubectl, namespace, manifests):
    sim.store.create("mpijobs", manifests.mpijob("dist"), namespace)
    sim.store.create("configmaps", {"metadata": {"name": "settings"}, "data": {"a": "1"}}, namespace)
    table = rows(kubectl("get", "mpijobs", "-n", namespace).stdout)
    assert table[0] == ["NAME", "AGE"] and table[1][0] == "dist"
    assert rows(kubectl("get", "cm", "-n", namespace).stdout)[1][:2] == ["settings", "1"]
    assert rows(kubectl("get", "no").stdout)[1][:2] == ["sim-node-0", "Ready"]
    assert "mpijob.kubeflow.org/dist" in kubectl("get", "mpijobs", "-n", namespace, "-o", "name").stdout


def test_logs_and_logs_follow(sim, kubectl, namespace, manifests):
    sim.store.create("pods", manifests.pod("talker", nodeName="sim-node-0"), namespace)
    for line in ("epoch 1", "epoch 2"):
        sim.logs.append(namespace, "talker", "main", line)
    assert kubectl("logs", "talker", "-n", namespace).stdout == "epoch 1\nepoch 2\n"
    assert kubectl("logs", "talker", "-n", namespace, "--tail=1").stdout == "epoch 2\n"

    def finish():
        time.sleep(0.5)
        sim.logs.append(namespace, "talker", "main", "epoch 3")
        sim.logs.close(namespace, "talker", "main")

    threading.Thread(target=finish, daemon=True).start()
    assert kubectl("logs", "-f", "talker", "-n", namespace).stdout == "epoch 1\nepoch 2\nepoch 3\n"


def test_delete_job_returns(sim, kubectl, namespace, manifests):
    sim.store.create("jobs", manifests.job("removable"), namespace)
    result = kubectl("delete", "job", "removable", "-n", namespace)
    assert result.stdout.strip() == 'job.batch "removable" deleted'
    assert "No resources found" in kubectl("get", "jobs", "-n", namespace).stderr


def test_get_pods_watch_streams_changes(sim, kubectl, namespace, manifests):
    sim.store.create("pods", manifests.pod("watched", nodeName="sim-node-0"), namespace)
    proc = subprocess.Popen(
        [kubectl.binary, "--kubeconfig", sim.kubeconfig_path, "get", "pods", "-w", "-n", namespace],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=kubectl.env,
    )
    try:
        lines = [proc.stdout.readline(), proc.stdout.readline()]
        set_container_state(
            sim, namespace, "watched", {"running": {"startedAt": "2025-01-01T00:00:00Z"}}, ready=True
        )
        lines.append(proc.stdout.readline())
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        proc.stdout.close()
        proc.stderr.close()
    header, initial, update = rows("".join(lines))
    assert header == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert initial[:3] == ["watched", "0/1", "Pending"]
    assert update[:3] == ["watched", "1/1", "Running"]


def test_create_and_apply_from_a_file_validate_on_the_server(kubectl, namespace, tmp_path):
    manifest = tmp_path / "pod.json"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "fromfile"},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]},
    }
    manifest.write_text(json.dumps(pod))
    assert kubectl("create", "-f", str(manifest), "-n", namespace).stdout.strip() == "pod/fromfile created"
    pod["metadata"]["labels"] = {"applied": "yes"}
    manifest.write_text(json.dumps(pod))
    assert kubectl("apply", "-f", str(manifest), "-n", namespace).stdout.strip() == "pod/fromfile configured"
    assert rows(kubectl("get", "pods", "-l", "applied=yes", "-n", namespace).stdout)[1][0] == "fromfile"
