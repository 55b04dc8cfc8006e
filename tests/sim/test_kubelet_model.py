"""The kubelet's model (``airflow_jobs_sim.kubelet_model``): the pure, public module that both the
simulator's kubelet and the real plane's scenario player step.

What the rules decide is pinned in test_ctrl_kubelet_rules.py; these tests hold the module's shape: it
loads without the simulator's server and event loop, the real plane's tooling uses only its public
names, and the two helpers the player and the kubelet share (what a pod names, the exit codes of a
deletion) read a pod as the kubelet does.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from airflow_jobs_sim import kubelet_model
from airflow_jobs_sim.kubelet_model import (
    NO_REFERENCES,
    PodNetwork,
    References,
    deletion_exit_codes,
    new_pod_run,
    resolve_references,
    step_pod,
)
from airflow_jobs_sim.scenarios import ANNOTATION

ROOT = Path(__file__).resolve().parents[2]
MODEL = "airflow_jobs_sim.kubelet_model"
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
NET = PodNetwork("gpu-node-0", "10.0.0.1", "10.244.0.7")


def pod(
    *, env: list[dict] | None = None, volumes: list[dict] | None = None, scenario: dict | None = None
) -> dict:
    meta: dict = {"name": "p", "namespace": "ml", "uid": "u1"}
    if scenario is not None:
        meta["annotations"] = {ANNOTATION: json.dumps(scenario)}
    return {
        "metadata": meta,
        "spec": {
            "nodeName": NET.node,
            "restartPolicy": "Never",
            "initContainers": [{"name": "fetch", "image": "busybox:1.36"}],
            "containers": [{"name": "main", "image": "trainer:1.0", "env": env or []}],
            "volumes": volumes or [],
        },
    }


def test_the_model_loads_without_the_server_or_an_event_loop():
    # A fresh interpreter: this one has loaded the whole simulator already.
    code = (
        f"import sys, {MODEL}\n"
        "print('\\n'.join(sorted(m for m in sys.modules if m.split('.')[0] in ('asyncio', 'aiohttp')\n"
        "    or m.startswith(('airflow_jobs_sim.controllers', 'airflow_jobs_sim.server', 'airflow_jobs_sim.store')))))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""


def test_the_plane_tooling_imports_only_the_models_public_names():
    imported: dict[str, set[str]] = {}
    for path in sorted((ROOT / "scripts" / "realplane").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("airflow_jobs_sim"):
                imported.setdefault(node.module or "", set()).update(a.name for a in node.names)
            elif isinstance(node, ast.Import):
                assert not any(a.name.startswith("airflow_jobs_sim") for a in node.names), path
    assert set(imported) == {MODEL}, "the plane's tooling reads the simulator through its model only"
    assert imported[MODEL] <= set(kubelet_model.__all__)
    assert all(hasattr(kubelet_model, name) for name in kubelet_model.__all__)


def test_a_pod_that_names_nothing_is_not_looked_up():
    def lookup(kind: str, namespace: str, name: str) -> dict | None:
        raise AssertionError(f"looked up {kind} {namespace}/{name}")

    assert resolve_references(pod(env=[{"name": "A", "value": "1"}]), lookup, NET) is NO_REFERENCES


def test_references_resolve_through_the_lookup_or_say_the_kubelets_error():
    config = {"metadata": {"name": "cfg", "namespace": "ml"}, "data": {"lr": "0.1"}}
    seen: list[tuple[str, str, str]] = []

    def lookup(kind: str, namespace: str, name: str) -> dict | None:
        seen.append((kind, namespace, name))
        return config if (kind, name) == ("configmaps", "cfg") else None

    env = [
        {"name": "LR", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "lr"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ]
    found = resolve_references(pod(env=env), lookup, NET)
    assert found.env[(False, "main")] == {"LR": "0.1", "NODE": NET.node}
    assert found.env[(True, "fetch")] == {}
    assert found.mounts == ()
    assert ("configmaps", "ml", "cfg") in seen

    missing = resolve_references(
        pod(
            env=[{"name": "T", "valueFrom": {"secretKeyRef": {"name": "token", "key": "t"}}}],
            volumes=[{"name": "conf", "configMap": {"name": "absent"}}],
        ),
        lookup,
        NET,
    )
    assert missing.env[(False, "main")] == 'secret "token" not found'
    assert len(missing.mounts) == 1 and 'configmap "absent" not found' in missing.mounts[0]


def test_a_missing_reference_holds_the_container_the_model_steps():
    """The references the caller resolved are what the step reads: no container starts on a missing
    Secret, and the waiting reason is the kubelet's."""
    p = pod(env=[{"name": "T", "valueFrom": {"secretKeyRef": {"name": "token", "key": "t"}}}])
    refs = resolve_references(p, lambda kind, namespace, name: None, NET)
    run = new_pod_run(p, NET.node, NET.host_ip, NET.pod_ip, T0, exec_commands=False)
    now = T0
    for _ in range(20):
        step = step_pod(p, run, now, 0.01, refs=refs)
        run = step.run
        if step.wake_at is None:
            break
        now = step.wake_at
    main = step.status["containerStatuses"][0]
    assert main["state"]["waiting"]["reason"] == "CreateContainerConfigError"
    assert main["state"]["waiting"]["message"] == 'secret "token" not found'
    assert isinstance(refs, References)


def test_deletion_exit_codes_are_each_containers_scenario():
    assert deletion_exit_codes(pod(scenario={"main": {"term_exit": 0}})) == {"fetch": 143, "main": 0}
    assert deletion_exit_codes(pod()) == {"fetch": 143, "main": 143}
    assert deletion_exit_codes(pod(scenario={"main": {"term_exit": "soon"}})) == {}
