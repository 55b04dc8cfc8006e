"""Rules priority-classes and services (helm-values/admission-policy.yaml) enforced by the real
kube-apiserver for the deployment's real service-account identities, as shipped (rbac.yaml's parameter
ConfigMaps included): with the worker's token, a DAG's own code may not create a Service that claims an
external IP (CVE-2020-8554) or opens Airflow's api-server on a node port, nor a job of the
``system-node-critical`` class or of one its group is not given; the torchrun job the product submits
creates its headless Service and runs to its end. The simulator's version:
tests/reliability/test_priority_classes_and_services_on_the_simulator.py."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timezone

import pytest
from task_doubles import task_context

from airflow_jobs_plugin.airflow.operators import JobOperator
from airflow_jobs_plugin.cluster.kube import JOBS, KubeError
from airflow_jobs_plugin.cluster.resources import SERVICES
from airflow_jobs_plugin.jobs import labels

from .plane import defer, follow, kube, on_cluster, scenario
from .test_rbac_and_admission_policy_on_the_plane import (  # noqa: F401 - identities is a fixture
    NAMESPACE,
    POLICY_CONFIGMAP,
    as_identity,
    identities,
    manifest,
)

pytestmark = [pytest.mark.real_cluster, pytest.mark.timeout(900)]

RUN_ID = f"manual__{datetime.now(timezone.utc).isoformat()}"
PORT = [{"name": "http", "port": 8080, "protocol": "TCP"}]


def intercepting() -> dict:
    """A Service claiming an address outside the cluster (TEST-NET-1), selecting a job's pods."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "intercept"},
        "spec": {
            "selector": {labels.BATCH_JOB_NAME: "some-job"},
            "ports": PORT,
            "externalIPs": ["192.0.2.10"],
        },
    }


def opening_airflow() -> dict:
    """A NodePort Service selecting the pods of Airflow's api-server (the official chart's labels)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "open-airflow"},
        "spec": {
            "type": "NodePort",
            "selector": {"component": "api-server", "release": "airflow"},
            "ports": PORT,
        },
    }


def of_class(priority_class: str) -> dict:
    """The product's own manifest (suspended, behind the gate) naming ``priority_class``."""
    body = manifest()
    body["spec"]["template"]["spec"]["priorityClassName"] = priority_class
    return body


# Each policy's probe: refused by that policy alone once it is in force (the API server loads each policy,
# binding and parameter through informers of their own), and harmless should it be let through.
PROBES = {
    "airflow-jobs-services": (SERVICES, intercepting),
    "airflow-jobs-priority-classes": (JOBS, lambda: of_class("system-node-critical")),
}


@pytest.fixture(scope="module")
def in_force(identities, cluster):  # noqa: F811 - the fixture imported above
    """The identities, once the two rules refuse their probes."""

    async def go() -> None:
        deadline = asyncio.get_running_loop().time() + 120
        async with kube(identities["worker"]) as as_worker, kube(cluster.kubeconfig_path) as as_admin:
            for policy, (resource, probe) in PROBES.items():
                while True:
                    body = probe()
                    try:
                        await as_worker.create(resource, NAMESPACE, body)
                    except KubeError as exc:
                        if exc.status == 403 and f"ValidatingAdmissionPolicy '{policy}'" in str(exc):
                            break
                        raise
                    await as_admin.delete(resource, NAMESPACE, body["metadata"]["name"])
                    assert asyncio.get_running_loop().time() < deadline, f"{policy} never came into force"
                    await asyncio.sleep(1)

    asyncio.run(go())
    return identities


@pytest.mark.parametrize(
    ("cheat", "said"),
    [
        (intercepting, "airflow-jobs rule services: spec.externalIPs lets a Service take traffic"),
        (opening_airflow, "airflow-jobs rule services: only a job's headless Service may be created"),
    ],
    ids=["external-ips", "nodeport-on-the-api-server"],
)
def test_a_workers_service_other_than_a_jobs_own_is_refused_naming_the_rule(in_force, cluster, cheat, said):
    body = cheat()

    refused = as_identity(in_force["worker"], lambda c: c.create(SERVICES, NAMESPACE, body))

    assert isinstance(refused, KubeError) and refused.status == 403, refused
    assert "ValidatingAdmissionPolicy 'airflow-jobs-services'" in str(refused), refused
    assert said in str(refused), refused
    found = as_identity(
        cluster.kubeconfig_path, lambda c: c.get_or_none(SERVICES, NAMESPACE, body["metadata"]["name"])
    )
    assert found is None


@pytest.mark.parametrize(
    ("priority_class", "said"),
    [
        (
            "system-node-critical",
            "priority class system-node-critical is one of the cluster's own (system-*)",
        ),
        ("training-high", "group vision may not use priority class training-high (allowed: none;"),
    ],
)
def test_a_workers_job_of_a_class_its_group_is_not_given_is_refused_naming_it(in_force, priority_class, said):
    body = of_class(priority_class)

    refused = as_identity(in_force["worker"], lambda c: c.create(JOBS, NAMESPACE, body))

    assert isinstance(refused, KubeError) and refused.status == 403, refused
    assert "ValidatingAdmissionPolicy 'airflow-jobs-priority-classes'" in str(refused), refused
    assert f"airflow-jobs rule priority-classes: {said}" in str(refused), refused


def test_the_honest_torchrun_job_creates_its_service_and_runs(in_force, cluster, monkeypatch):
    def run_as(component: str) -> None:
        connection = {"conn_type": "kubernetes", "extra": {"kube_config_path": in_force[component]}}
        monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(connection))

    op = JobOperator(
        task_id="ddp",
        image="registry.example/trainer:1",
        group="vision",
        user="alice",
        gpus=1,
        workers=2,
        framework="torchrun",
        namespace=NAMESPACE,
        quota_configmap=POLICY_CONFIGMAP,
        job_annotations=scenario(main={"run": 1, "logs": ["epoch 1"]}),
    )
    run_as("worker")
    trigger = defer(op, task_context("plane_services", "ddp", run_id=RUN_ID))
    service = as_identity(cluster.kubeconfig_path, lambda c: c.get(SERVICES, NAMESPACE, trigger.job_name))
    run_as("triggerer")

    event = follow(trigger)

    assert event["status"] == "success" and event["state"] == "SUCCEEDED", event
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {labels.BATCH_JOB_NAME: trigger.job_name}
    (owner,) = service["metadata"]["ownerReferences"]
    job = on_cluster(cluster.kubeconfig_path, lambda c: c.get(JOBS, NAMESPACE, trigger.job_name))
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Job", trigger.job_name, job["metadata"]["uid"])
