"""A test bench joining the simulated cluster and the lifecycle model.

It creates Jobs and MPIJobs from small builders, reads the simulator's own objects (job, pods,
events) in one consistent read, waits for a condition stated on those objects, computes the
lifecycle snapshot from them, and asks the simulator's API server (and kubectl, where installed)
what READY, STATUS and RESTARTS it prints for each pod.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from airflow_jobs_sim import tables
from airflow_jobs_sim.scenarios import ANNOTATION

from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.lifecycle import (
    JobSnapshot,
    JobState,
    Reason,
    pod_ready,
    pod_restarts,
    pod_status,
    snapshot,
)

KUBECTL = shutil.which("kubectl") or ("/usr/bin/kubectl" if os.path.exists("/usr/bin/kubectl") else None)
TABLE_ACCEPT = "application/json;as=Table;v=v1;g=meta.k8s.io"
RESOURCE = {"Job": "jobs", "MPIJob": "mpijobs"}
FOREVER = {"run": None}  # a container scenario: runs until its pod is deleted


# --------------------------------------------------------------------------- manifests


def _template(
    scenario: Mapping[str, Any] | None,
    containers: list[dict],
    *,
    restart: str | None = None,
    init: list[dict] | None = None,
    **pod_spec: Any,
) -> dict:
    meta: dict = {}
    if scenario is not None:
        meta["annotations"] = {ANNOTATION: json.dumps(scenario)}
    spec: dict = {"containers": containers, **pod_spec}
    if restart is not None:
        spec["restartPolicy"] = restart
    if init:
        spec["initContainers"] = init
    return {"metadata": meta, "spec": spec}


def container(image: str = "trainer:1.0", gpus: int = 0, command: list[str] | None = None) -> dict:
    """The ``main`` container, asking for ``gpus`` GPUs."""
    body: dict = {"name": "main", "image": image}
    if gpus:
        body["resources"] = {"limits": {labels.GPU_RESOURCE: str(gpus)}}
    if command:
        body["command"] = command
    return body


def batch_job(
    name: str,
    scenario: Mapping[str, Any] | None = None,
    *,
    image: str = "trainer:1.0",
    gpus: int = 0,
    restart: str = "Never",
    command: list[str] | None = None,
    pod_spec: Mapping[str, Any] | None = None,
    **spec: Any,
) -> dict:
    """A single-pod ``batch/v1`` Job whose ``main`` container follows ``scenario``."""
    template = _template(scenario, [container(image, gpus, command)], restart=restart, **dict(pod_spec or {}))
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"template": template, **spec},
    }


def mpi_job(
    name: str,
    *,
    workers: int = 2,
    launcher: Mapping[str, Any] | None = None,
    worker: Mapping[str, Any] | None = None,
    launcher_image: str = "mpi-launcher:1.0",
    worker_image: str = "mpi-trainer:1.0",
    worker_gpus: int = 0,
    launcher_init: bool = False,
    launcher_restart: str | None = None,
    worker_restart: str | None = None,
    launcher_node: str | None = None,
    worker_node: str | None = None,
    **run_policy: Any,
) -> dict:
    """A ``kubeflow.org/v2beta1`` MPIJob; ``launcher``/``worker`` are the pod templates' scenarios,
    ``launcher_node``/``worker_node`` pin the pods to a node by its hostname label."""
    init = [{"name": "wait-for-workers", "image": "busybox:1.36"}] if launcher_init else None
    launcher_spec: dict = {
        "replicas": 1,
        "template": _template(launcher, [container(launcher_image)], init=init, **_pinned(launcher_node)),
    }
    worker_spec: dict = {
        "replicas": workers,
        "template": _template(worker, [container(worker_image, worker_gpus)], **_pinned(worker_node)),
    }
    # The operator sets the pods' restart policy from the replica spec, not from the pod template.
    if launcher_restart is not None:
        launcher_spec["restartPolicy"] = launcher_restart
    if worker_restart is not None:
        worker_spec["restartPolicy"] = worker_restart
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name},
        "spec": {
            "slotsPerWorker": 1,
            "runPolicy": dict(run_policy),
            "mpiReplicaSpecs": {"Launcher": launcher_spec, "Worker": worker_spec},
        },
    }


def _pinned(node: str | None) -> dict:
    return {"nodeSelector": {"kubernetes.io/hostname": node}} if node else {}


# --------------------------------------------------------------------------- reading objects


@dataclass(frozen=True)
class Seen:
    """The simulator's objects of one job at one moment: what a snapshot is computed from."""

    job: dict | None
    pods: list[dict] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)

    def pod(self, prefix: str = "") -> dict | None:
        """The newest pod whose name starts with ``prefix``."""
        found = [p for p in self.pods if p["metadata"]["name"].startswith(prefix)]
        found.sort(key=lambda p: (p["metadata"].get("creationTimestamp") or "", p["metadata"]["name"]))
        return found[-1] if found else None

    def condition(self, kind: str) -> dict | None:
        """The job's condition ``kind`` when it is True."""
        for cond in ((self.job or {}).get("status") or {}).get("conditions") or []:
            if cond.get("type") == kind and cond.get("status") == "True":
                return cond
        return None


def container_state(pod: Mapping[str, Any] | None, name: str = "main", init: bool = False) -> dict:
    """``state`` of one container of ``pod`` as the kubelet reported it (empty when not reported)."""
    key = "initContainerStatuses" if init else "containerStatuses"
    for status in ((pod or {}).get("status") or {}).get(key) or []:
        if status.get("name") == name:
            return status.get("state") or {}
    return {}


def waiting_reason(pod: Mapping[str, Any] | None, name: str = "main", init: bool = False) -> str | None:
    """The waiting reason the kubelet reports for a container, if it waits."""
    return (container_state(pod, name, init).get("waiting") or {}).get("reason")


def is_running(pod: Mapping[str, Any] | None, name: str = "main", ready: bool = True) -> bool:
    """Whether the container runs (and, with ``ready``, reports ready)."""
    for status in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == name and "running" in (status.get("state") or {}):
            return bool(status.get("ready")) or not ready
    return False


class Bench:
    """One namespace of a running simulated cluster, seen through the lifecycle model."""

    def __init__(self, cluster: Any, namespace: str, home: str):
        self.cluster = cluster
        self.store = cluster.store
        self.namespace = namespace
        self.home = home  # kubectl's HOME and cache, private to the test

    def create(self, manifest: dict) -> str:
        """Create a Job or MPIJob in the bench's namespace; returns its name."""
        self.store.create(
            RESOURCE[manifest["kind"]], json.loads(json.dumps(manifest)), namespace=self.namespace
        )
        return manifest["metadata"]["name"]

    def clean_up(self) -> None:
        """Delete every job of the namespace, so that nothing of a finished test keeps running."""
        for resource in RESOURCE.values():
            for job in self.store.list(resource, namespace=self.namespace):
                try:
                    self.store.delete(
                        resource, job["metadata"]["name"], self.namespace, propagation_policy="Background"
                    )
                except Exception as exc:  # noqa: BLE001 - gone already is fine
                    if getattr(exc, "code", None) != 404:
                        raise

    def patch(self, kind: str, name: str, body: dict) -> None:
        """A merge patch of the job, as a client would send it."""
        self.store.patch(RESOURCE[kind], name, body, "merge", namespace=self.namespace)

    def read(self, kind: str, name: str) -> Seen:
        """The job, every pod and every event of the namespace, read at one instant."""
        with self.store.lock:
            try:
                job = self.store.get(RESOURCE[kind], name, self.namespace)
            except Exception as exc:  # noqa: BLE001 - a deleted job reads as absent
                if getattr(exc, "code", None) != 404:
                    raise
                job = None
            pods = self.store.list("pods", namespace=self.namespace)
            events = self.store.list("events", namespace=self.namespace)
        return Seen(job, pods, events)

    def wait(self, kind: str, name: str, until: Callable[[Seen], object], timeout: float = 20.0) -> Seen:
        """Poll the objects until ``until`` holds on one consistent read, and return that read."""
        deadline = time.monotonic() + timeout
        seen = self.read(kind, name)
        while not until(seen):
            if time.monotonic() > deadline:
                statuses = {p["metadata"]["name"]: pod_status(p) for p in seen.pods}
                raise AssertionError(
                    f"{kind} {self.namespace}/{name} did not get there within {timeout}s; "
                    f"conditions {((seen.job or {}).get('status') or {}).get('conditions')}, pods {statuses}"
                )
            time.sleep(0.02)
            seen = self.read(kind, name)
        return seen

    @staticmethod
    def snapshot(seen: Seen) -> JobSnapshot:
        """The lifecycle's reading of ``seen``."""
        return snapshot(seen.job, seen.pods, seen.events, now=datetime.now(timezone.utc))

    def table(self) -> list[tuple[str, Printed, dict]]:
        """(name, printed columns, the pod itself) for every pod, from the server-side Table."""
        url = f"{self.cluster.url}/api/v1/namespaces/{self.namespace}/pods?includeObject=Object"
        request = urllib.request.Request(url, headers={"Accept": TABLE_ACCEPT})
        with urllib.request.urlopen(request, timeout=10) as response:
            body = json.loads(response.read())
        assert body["kind"] == "Table"
        names = [c["name"] for c in body["columnDefinitions"]]
        rows = []
        for row in body["rows"]:
            cells = dict(zip(names, row["cells"], strict=True))
            printed = Printed(cells["Ready"], cells["Status"], _restart_count(cells["Restarts"]))
            rows.append((row["object"]["metadata"]["name"], printed, row["object"]))
        return rows

    def kubectl(self, attempts: int = 20) -> list[tuple[str, Printed, dict]] | None:
        """(name, kubectl's columns, the pod) read while no pod changed; None without kubectl."""
        if KUBECTL is None:
            return None
        env = dict(os.environ, HOME=self.home, KUBECACHEDIR=os.path.join(self.home, "cache"))
        argv = [KUBECTL, "--kubeconfig", self.cluster.kubeconfig_path, "-n", self.namespace]
        argv += ["get", "pods", "-o", "wide", "--no-headers"]
        for _ in range(attempts):
            before = self._pods_by_name()
            result = subprocess.run(argv, capture_output=True, text=True, timeout=30, env=env)
            after = self._pods_by_name()
            assert result.returncode == 0, result.stderr
            if _versions(before) != _versions(after):
                continue  # a pod changed while kubectl read: its line may be older or newer
            rows = []
            for line in result.stdout.splitlines():
                # NAME, READY and STATUS hold no spaces; RESTARTS may ("2 (3s ago)") but starts with the count.
                name, ready, status, restarts = line.split()[:4]
                rows.append((name, Printed(ready, status, _restart_count(restarts)), after[name]))
            assert len(rows) == len(after), result.stdout
            return rows
        raise AssertionError(f"the pods of {self.namespace} kept changing while kubectl read them")

    def _pods_by_name(self) -> dict[str, dict]:
        return {p["metadata"]["name"]: p for p in self.store.list("pods", namespace=self.namespace)}


@dataclass(frozen=True)
class Printed:
    """The READY, STATUS and RESTARTS (count only: the age of the last restart moves) columns."""

    ready: str
    status: str
    restarts: int

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> Printed:
        """The columns as the lifecycle model prints them."""
        return cls(pod_ready(pod), pod_status(pod), pod_restarts(pod))

    @classmethod
    def printed_by_sim(cls, pod: dict, now: datetime) -> Printed:
        """The columns as the simulator's Table printer computes them."""
        ready, status, restarts, _age = tables.pod_columns(pod, now)
        return cls(ready, status, _restart_count(restarts))


def _restart_count(cell: object) -> int:
    return int(str(cell).split()[0])


def _versions(pods: Mapping[str, dict]) -> dict[str, str]:
    return {name: pod["metadata"]["resourceVersion"] for name, pod in pods.items()}


def check(
    bench: Bench,
    seen: Seen,
    state: JobState,
    reason: Reason,
    replicas: Mapping[str, str],
    exit_code: int | None = None,
) -> JobSnapshot:
    """The snapshot of ``seen`` reads ``state``/``reason`` with these replica STATUSes, and every
    printer agrees with the lifecycle's STATUS of every pod."""
    snap = bench.snapshot(seen)
    statuses = {r.name: r.status for r in snap.replicas}
    told = f"{snap.state.value} ({snap.reason.value}): {snap.message}; replicas {statuses}"
    assert (snap.state, snap.reason) == (state, reason), told
    assert statuses == dict(replicas), told
    if exit_code is not None:
        assert snap.exit_code == exit_code, snap.message
    # The simulator's printer on the very objects the snapshot was computed from...
    now = datetime.now(timezone.utc)
    assert [Printed.of(p) for p in seen.pods] == [Printed.printed_by_sim(p, now) for p in seen.pods]
    # ... what its API server answers as a Table, and what kubectl prints from that Table.
    for rows in (bench.table(), bench.kubectl()):
        if rows is not None:
            assert [(name, Printed.of(pod)) for name, _, pod in rows] == [
                (name, cols) for name, cols, _ in rows
            ]
    return snap
