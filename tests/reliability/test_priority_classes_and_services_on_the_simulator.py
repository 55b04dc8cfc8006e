"""Rules priority-classes and services (helm-values/admission-policy.yaml) enforced by the simulated API
server for the deployment's own service-account identities, with the shipped RBAC and policies: a DAG's
own code, holding the worker's token, may not create a Service with externalIPs (CVE-2020-8554) or one
that opens Airflow's api-server on a node port, nor a job of a ``system-*`` priority class or of one its
group is not given; the torchrun job the product submits, with its headless Service (and the Service of
its retry's next attempt, which the triggerer creates), runs as before. The real plane's version:
tests/plane_scenarios/test_priority_classes_and_services_on_the_plane.py."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timezone

import pytest
from airflow_jobs_sim import ClusterConfig, SimCluster

from airflow_jobs_plugin.airflow.operators import JobOperator
from airflow_jobs_plugin.cluster import watch as shared
from airflow_jobs_plugin.cluster.kube import JOBS, KubeClient, KubeError
from airflow_jobs_plugin.cluster.resources import SERVICES
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.manifests import build_manifest
from airflow_jobs_plugin.jobs.spec import TaskIdentity, validate
from airflow_jobs_plugin.queueing.engines.pool import shutdown as admission_shutdown
from tests.reliability.test_rbac_least_privilege import (
    COMPONENTS,
    NAMESPACE,
    POD_SECURITY,
    POLICY,
    ROLE,
    SCENARIO,
    apply_shipped,
    collect,
    component_runner,
    deferred,
)

QUOTA = "airflow-jobs-quota-policy"
# The quota policy gives vision one class; the parameter says the same for the API server.
POLICY_YAML = "groups:\n  vision: {gpus: 16, priority_classes: [training-high]}\n"
GIVEN = {"vision": "training-high"}


def cheat_services(job_name: str) -> dict[str, dict]:
    """Services a DAG's own code might create with the worker's token."""
    base = {"apiVersion": "v1", "kind": "Service"}
    port = [{"name": "http", "port": 8080, "protocol": "TCP"}]
    return {
        "external-ips": {
            **base,
            "metadata": {"name": "intercept"},
            "spec": {
                "selector": {labels.BATCH_JOB_NAME: job_name},
                "ports": port,
                "externalIPs": ["1.1.1.1"],
            },
        },
        "nodeport-on-the-api-server": {
            **base,
            "metadata": {"name": "open-airflow"},
            "spec": {
                "type": "NodePort",
                "selector": {"component": "api-server", "release": "airflow"},
                "ports": port,
            },
        },
    }


def raw_job(priority_class: str) -> dict:
    """The product's own manifest of a fresh task (suspended, labelled) naming ``priority_class``."""
    identity = TaskIdentity("sneaky", "train", f"run-{priority_class}", -1, 1)
    body = build_manifest(
        validate(image="t:1", group="vision", user="mallory", gpus=1),
        name=identity.job_name(1),
        task=identity,
        attempt=1,
        queued_at=datetime.now(timezone.utc),
    )
    body["spec"]["template"]["spec"]["priorityClassName"] = priority_class
    return body


@pytest.mark.slow
def test_the_worker_creates_no_other_service_and_no_job_of_a_class_its_group_lacks(monkeypatch, tmp_path):
    from airflow_jobs_sim.config import Identity

    identities = tuple(
        Identity.service_account("airflow", account, f"{component}-token")
        for component, account in COMPONENTS.items()
    )
    config = ClusterConfig(
        nodes=2, gpus_per_node=8, time_scale=0.01, token="admin", rbac=True, identities=identities
    )
    with SimCluster(config) as cluster:
        if not cluster.store.list("namespaces", field_selector=f"metadata.name={NAMESPACE}"):
            cluster.store.create("namespaces", {"metadata": {"name": NAMESPACE}})
        apply_shipped(cluster, ROLE, NAMESPACE)
        apply_shipped(cluster, POLICY, NAMESPACE)
        apply_shipped(cluster, POD_SECURITY, NAMESPACE)
        cluster.store.patch(
            "configmaps", "airflow-jobs-priority-classes", {"data": GIVEN}, "merge", namespace=NAMESPACE
        )
        cluster.store.create(
            "configmaps", {"metadata": {"name": QUOTA}, "data": {"policy.yaml": POLICY_YAML}}, NAMESPACE
        )
        for name in ("training-high", "training-urgent"):
            cluster.store.create("priorityclasses", {"metadata": {"name": name}, "value": 1000})
        run_as = component_runner(cluster, tmp_path, monkeypatch)
        common = {"image": "t:1", "group": "vision", "namespace": NAMESPACE, "quota_configmap": QUOTA}
        run_as("worker")
        # The honest torchrun job, of the class vision is given: the worker creates it and its Service.
        ddp, _ = deferred(
            JobOperator(
                task_id="ddp",
                gpus=2,
                workers=2,
                framework="torchrun",
                priority_class_name="training-high",
                job_annotations={SCENARIO: json.dumps({"main": {"run": 2, "logs": ["epoch 1"]}})},
                **common,
            ),
            "policy_ddp",
        )
        # A retried one: its next attempt's Service is the triggerer's to create.
        retried, _ = deferred(
            JobOperator(
                task_id="ddp_retried",
                gpus=1,
                workers=2,
                framework="torchrun",
                backoff_limit=0,
                max_attempts=2,
                retry_backoff=0.05,
                retryable_exit_codes=[3],
                job_annotations={SCENARIO: json.dumps({"main": {"run": 1, "exit": 3}})},
                **common,
            ),
            "policy_ddp_retried",
        )

        async def as_worker() -> dict[str, KubeError]:
            client = await KubeClient.from_connection()
            refused: dict[str, KubeError] = {}
            try:
                for cheat, body in cheat_services(ddp.trigger.job_name).items():
                    with pytest.raises(KubeError) as info:
                        await client.create(SERVICES, NAMESPACE, body)
                    refused[cheat] = info.value
                for priority_class in ("system-node-critical", "training-urgent"):
                    with pytest.raises(KubeError) as info:
                        await client.create(JOBS, NAMESPACE, raw_job(priority_class))
                    refused[priority_class] = info.value
            finally:
                await client.close()
            return refused

        refused = asyncio.run(as_worker())
        for cheat in ("external-ips", "nodeport-on-the-api-server"):
            error = refused[cheat]
            assert error.status == 403, error
            assert "ValidatingAdmissionPolicy 'airflow-jobs-services'" in str(error), error
            assert "airflow-jobs rule services:" in str(error), error
        assert "spec.externalIPs lets a Service take traffic" in str(refused["external-ips"])
        assert "of type ClusterIP: no NodePort" in str(refused["nodeport-on-the-api-server"])
        for priority_class in ("system-node-critical", "training-urgent"):
            error = refused[priority_class]
            assert error.status == 403, error
            assert "ValidatingAdmissionPolicy 'airflow-jobs-priority-classes'" in str(error), error
        assert "priority class system-node-critical is one of the cluster's own" in str(
            refused["system-node-critical"]
        )
        assert "group vision may not use priority class training-urgent (allowed: training-high;" in str(
            refused["training-urgent"]
        )
        assert not cluster.store.list("services", NAMESPACE, field_selector="metadata.name=intercept")

        async def as_triggerer() -> list[dict]:
            try:
                return list(await asyncio.gather(collect(ddp.trigger, 90), collect(retried.trigger, 90)))
            finally:
                await admission_shutdown()
                await shared.shutdown()

        run_as("triggerer")
        done, ended = asyncio.run(as_triggerer())
        assert done["status"] == "success", done
        assert ended["status"] == "failed", ended  # exit 3 on both attempts: it was retried once
        for trigger, attempts in ((ddp.trigger, 1), (retried.trigger, 2)):
            key = cluster.store.get("jobs", trigger.job_name, NAMESPACE)["metadata"]["labels"][
                labels.TASK_KEY
            ]
            selector = f"{labels.TASK_KEY}={key}"
            jobs = {
                j["metadata"]["name"] for j in cluster.store.list("jobs", NAMESPACE, label_selector=selector)
            }
            services = cluster.store.list("services", NAMESPACE, label_selector=selector)
            assert len(jobs) == attempts, jobs
            assert {s["metadata"]["name"] for s in services} == jobs
            assert all(
                s["spec"]["selector"] == {labels.BATCH_JOB_NAME: s["metadata"]["name"]} for s in services
            )
