"""What the scenario tests of the real control plane share: the cluster as the tests see it, a task run
the way a worker and a triggerer run it, its task log, and objects applied from the shipped manifests.

Every job carries the scenario annotation (``sim.airflow-jobs.io/scenario``) that the simulator's kubelet
and the plane's kwok Stages both play (scripts/realplane/player.py), so a test asserts the same outcome
on either cluster; a test that can only run on one says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from airflow.sdk.exceptions import TaskDeferred

from airflow_jobs_plugin.airflow.operators import JobOperator
from airflow_jobs_plugin.cluster import watch as shared
from airflow_jobs_plugin.cluster.kube import KubeClient, KubeError
from airflow_jobs_plugin.cluster.resources import Resource
from airflow_jobs_plugin.queueing.engines.pool import shutdown as admission_shutdown
from airflow_jobs_plugin.readmodel import inspect
from airflow_jobs_plugin.readmodel.views import job_detail

ROOT = Path(__file__).resolve().parents[2]
HELM = ROOT / "helm-values"
SCENARIO = "sim.airflow-jobs.io/scenario"
# Generous: the plane's processes share two cores with whatever else runs on the machine.
DEADLINE = 300.0
# A namespace labelled so runs its own admission controllers (a test's, as the shipped layout or a
# failover runs them); the real tier's own controller (scripts/test) admits in every other namespace.
OWN_CONTROLLER = "airflow-jobs.io/own-controller"

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
# The kinds of the shipped manifests (helm-values/rbac.yaml, admission-controller.yaml,
# admission-policy.yaml, pod-security.yaml), by kind.
KINDS = {
    r.kind: r
    for r in (
        NAMESPACES,
        Resource("", "v1", "serviceaccounts", "ServiceAccount"),
        Resource("apps", "v1", "deployments", "Deployment"),
        Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget"),
        Resource("", "v1", "configmaps", "ConfigMap"),
        Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim"),
        Resource("", "v1", "persistentvolumes", "PersistentVolume", namespaced=False),
        Resource("rbac.authorization.k8s.io", "v1", "roles", "Role"),
        Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
        Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False),
        Resource(
            "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False
        ),
        Resource(
            "admissionregistration.k8s.io",
            "v1",
            "validatingadmissionpolicies",
            "ValidatingAdmissionPolicy",
            namespaced=False,
        ),
        Resource(
            "admissionregistration.k8s.io",
            "v1",
            "validatingadmissionpolicybindings",
            "ValidatingAdmissionPolicyBinding",
            namespaced=False,
        ),
    )
}


def scenario(**containers: dict) -> dict[str, str]:
    """The pod annotation both clusters play: what each named container does."""
    return {SCENARIO: json.dumps(containers)}


@contextlib.asynccontextmanager
async def kube(kubeconfig: str) -> AsyncIterator[KubeClient]:
    client = await KubeClient.from_kubeconfig(kubeconfig)
    try:
        yield client
    finally:
        await client.close()


def on_cluster(kubeconfig: str, work: Callable[[KubeClient], Awaitable[Any]]) -> Any:
    """Run ``work(client)`` on a fresh loop with a client of ``kubeconfig``."""

    async def go() -> Any:
        async with kube(kubeconfig) as client:
            return await work(client)

    return asyncio.run(go())


async def create_or_replace(
    client: KubeClient, body: dict, namespace: str = "", replace: bool = True
) -> dict:
    """Create ``body`` (in the namespace it names, else ``namespace``, as ``kubectl apply -n`` does); if it
    exists, replace it (or, with ``replace=False``, keep it: a bound claim's spec is immutable)."""
    resource = KINDS[body["kind"]]
    where = (body["metadata"].get("namespace") or namespace) if resource.namespaced else ""
    try:
        return await client.create(resource, where, body)
    except KubeError as exc:
        if exc.status != 409:
            raise
    for _ in range(10):
        current = await client.get(resource, where, body["metadata"]["name"])
        if not replace:
            return current
        version = current["metadata"]["resourceVersion"]
        try:
            return await client.replace(
                resource, where, {**body, "metadata": {**body["metadata"], "resourceVersion": version}}
            )
        except KubeError as exc:
            # Its controller wrote its status since it was read (a Deployment's, a budget's): read again.
            if exc.status != 409:
                raise
    raise AssertionError(f"{body['kind']} {body['metadata']['name']} kept changing under the replace")


async def ensure_namespace(client: KubeClient, name: str) -> None:
    try:
        await client.create(NAMESPACES, "", {"metadata": {"name": name}})
    except KubeError as exc:
        if exc.status != 409:
            raise


def shipped(name: str) -> list[dict]:
    """The documents of one of helm-values/'s manifests."""
    return [d for d in yaml.safe_load_all((HELM / name).read_text()) if d]


# --- a task, run as Airflow runs it -------------------------------------------------------------------


def defer(op: JobOperator, context: dict) -> Any:
    """``execute`` as the worker runs it, to its deferral; the trigger it defers to."""
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    return deferred.value.trigger


async def _first_event(trigger: Any) -> dict:
    async for event in trigger.run():
        return event.payload
    raise AssertionError("the trigger ended without an event")


def follow(trigger: Any, during: Callable[[str], Awaitable[None]] | None = None) -> dict:
    """Run the trigger as the triggerer does, to its one event; ``during(job_name)`` runs beside it (a
    user acting on the job)."""

    async def go() -> dict:
        try:
            event = asyncio.ensure_future(_first_event(trigger))
            if during is not None:
                await during(trigger.job_name)
            return await event
        finally:
            await admission_shutdown()
            await shared.shutdown()

    return asyncio.run(asyncio.wait_for(go(), DEADLINE))


class TaskLog:
    """The lines the task log gets from the product: the trigger's states and the pods' logs, as Airflow's
    log handlers receive them (written to the captured stdout here: ``<time> [<level>] <message> [<logger>]
    loc=<where>``)."""

    LINE = re.compile(r"^\S+ \[\s*\w+\s*\] (?P<message>.*?)\s+\[airflow_jobs_plugin[\w.]*\] loc=\S+$")

    def __init__(self, capsys: pytest.CaptureFixture[str]):
        self.capsys = capsys
        self.seen: list[str] = []

    @property
    def lines(self) -> list[str]:
        for line in self.capsys.readouterr().out.splitlines():
            if match := self.LINE.match(line):
                self.seen.append(match["message"])
        return self.seen

    def first(self, pattern: str) -> int:
        """The index of the first line matching ``pattern`` (re.search), or -1."""
        return next((i for i, line in enumerate(self.lines) if re.search(pattern, line)), -1)

    def __repr__(self) -> str:
        return "task log:\n" + "\n".join(self.lines)


# --- what a user sees --------------------------------------------------------------------------------


async def state_of(client: KubeClient, namespace: str, name: str) -> str:
    """The job's state as the CLI's describe and the GPU Jobs page read it."""
    cluster_state, job = await inspect.read_job(client, inspect.Target(namespace=namespace), name)
    return job_detail(cluster_state, job).job.state


async def until_state(client: KubeClient, namespace: str, name: str, *states: str) -> str:
    deadline = asyncio.get_running_loop().time() + DEADLINE
    while (state := await state_of(client, namespace, name)) not in states:
        assert asyncio.get_running_loop().time() < deadline, f"{name} is {state}, not one of {states}"
        await asyncio.sleep(0.3)
    return state
