"""No tenant breaks out of its job's pods onto the node, on a real control plane: helm-values/pod-security.yaml
and admission-policy.yaml applied as docs/deploying.md says, enforced by the real kube-apiserver
(v1.36.3: its Pod Security admission and its ValidatingAdmissionPolicy) for the real service-account
identities of a deployment.

Each breakout a red team ran here before the rule pod-security existed (hostPath /dev, hostPath
/var/lib/kubelet/pods, hostPID with SYS_ADMIN and SYS_PTRACE, capabilities ALL with privilege escalation,
hostNetwork, any runtimeClassName) is refused for the worker's token, naming the rule and the check; the
namespace's own Pod Security refuses such a pod whoever creates it; and the product's own jobs of every
kind, with and without GPUs, are admitted and run to success, their pods created under baseline. The
simulator's version is tests/reliability/test_rbac_least_privilege.py
(``test_on_the_simulator_no_job_breaks_out_of_its_pods_whoever_creates_it``).
"""

from __future__ import annotations

import json

import pytest
from task_doubles import task_context

from airflow_jobs_plugin.airflow.operators import JobOperator
from airflow_jobs_plugin.cluster.kube import JOBS, PODS, KubeClient, KubeError
from airflow_jobs_plugin.jobs.kinds.mpi import MPIJOBS

from .plane import NAMESPACES, defer, follow, on_cluster, scenario
from .test_rbac_and_admission_policy_on_the_plane import (  # noqa: F401 (identities: a fixture)
    HELD,
    NAMESPACE,
    POLICY_CONFIGMAP,
    RUN_ID,
    as_identity,
    identities,
    manifest,
)

pytestmark = [pytest.mark.real_cluster, pytest.mark.timeout(900)]


def _pod(body: dict, template: int = -1) -> dict:
    if body["kind"] == "MPIJob":
        return list(body["spec"]["mpiReplicaSpecs"].values())[template]["template"]["spec"]
    return body["spec"]["template"]["spec"]


def _host_path(path: str):
    def cheat(pod: dict) -> None:
        pod["volumes"].append({"name": "node", "hostPath": {"path": path}})

    return cheat


def _host_pid_and_ptrace(pod: dict) -> None:
    pod["hostPID"] = True
    pod["containers"][0]["securityContext"] = {"capabilities": {"add": ["SYS_ADMIN", "SYS_PTRACE"]}}


def _every_capability(pod: dict) -> None:
    pod["containers"][0]["securityContext"] = {
        "capabilities": {"add": ["ALL"]},
        "allowPrivilegeEscalation": True,
    }


def _host_network(pod: dict) -> None:
    pod["hostNetwork"] = True


def _runtime_class(pod: dict) -> None:
    pod["runtimeClassName"] = "kata"


# The red team's breakouts: what each does to a pod template, and the words of the refusal.
BREAKOUTS = {
    "hostPath /dev": (
        _host_path("/dev"),
        "a hostPath volume is refused (Pod Security baseline, hostPathVolumes)",
    ),
    "hostPath /var/lib/kubelet/pods": (
        _host_path("/var/lib/kubelet/pods"),
        "a hostPath volume is refused (Pod Security baseline, hostPathVolumes)",
    ),
    "hostPID + SYS_ADMIN, SYS_PTRACE": (
        _host_pid_and_ptrace,
        "hostNetwork, hostPID and hostIPC are refused (Pod Security baseline, hostNamespaces)",
    ),
    "capabilities ALL + allowPrivilegeEscalation": (
        _every_capability,
        "adding a capability beyond the container runtime's defaults is refused (Pod Security baseline, "
        "capabilities_baseline",
    ),
    "hostNetwork": (
        _host_network,
        "hostNetwork, hostPID and hostIPC are refused (Pod Security baseline, hostNamespaces)",
    ),
    "runtimeClassName": (_runtime_class, "this runtimeClassName is not one the platform allows"),
}


@pytest.mark.parametrize("kind", ["Job", "MPIJob"])
@pytest.mark.parametrize("breakout", sorted(BREAKOUTS))
def test_each_breakout_is_refused_for_the_workers_token_naming_the_rule(identities, kind, breakout):  # noqa: F811
    cheat, words = BREAKOUTS[breakout]
    body = manifest(kind, group=HELD)  # held by the controller: it would run no pod, should it be let through
    cheat(_pod(body))
    resource = MPIJOBS if kind == "MPIJob" else JOBS

    refused = as_identity(identities["worker"], lambda c: c.create(resource, NAMESPACE, body))

    assert isinstance(refused, KubeError) and refused.status == 403, refused
    assert "ValidatingAdmissionPolicy 'airflow-jobs-pod-security'" in str(refused), refused
    assert f"airflow-jobs rule pod-security: {words}" in str(refused), refused


def test_the_namespace_refuses_a_breakout_pod_whoever_creates_it(identities, cluster):  # noqa: F811
    """pod-security.yaml's label: kube-apiserver's Pod Security admission refuses the pod itself, even
    for the cluster's administrator (a pod no job's controller would be let create either)."""
    namespace = as_identity(cluster.kubeconfig_path, lambda c: c.get(NAMESPACES, "", NAMESPACE))
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "breakout"},
        "spec": {
            "containers": [
                {"name": "c", "image": "busybox:1.36", "volumeMounts": [{"name": "pods", "mountPath": "/x"}]}
            ],
            "volumes": [{"name": "pods", "hostPath": {"path": "/var/lib/kubelet/pods"}}],
        },
    }

    refused = as_identity(cluster.kubeconfig_path, lambda c: c.create(PODS, NAMESPACE, pod))

    assert isinstance(refused, KubeError) and refused.status == 403, refused
    assert 'violates PodSecurity "baseline:latest": hostPath volumes (volume "pods")' in str(refused), refused


# The product's own jobs: every kind, with and without GPUs, and a sidecar and an init container.
HONEST = {
    "job": {"gpus": 1},
    "job-cpu": {"gpus": 0, "init_containers": [{"name": "fetch", "image": "registry.example/fetch:1"}]},
    "mpijob": {"gpus": 1, "workers": 2},
    "mpijob-cpu": {"gpus": 0, "workers": 2},
    "torchrun": {
        "gpus": 1,
        "workers": 2,
        "framework": "torchrun",
        "pod_template": {
            "spec": {"containers": [{"name": "exporter", "image": "registry.example/exporter:1"}]}
        },
    },
}


@pytest.mark.parametrize("name", sorted(HONEST))
def test_the_products_own_jobs_pass_every_rule_and_run(identities, monkeypatch, name):  # noqa: F811
    """Submitted with the worker's token, admitted by the admission controller's, their pods created by
    the Job controller and the MPI operator under the namespace's baseline: the job succeeds."""

    def run_as(component: str) -> None:
        connection = {"conn_type": "kubernetes", "extra": {"kube_config_path": identities[component]}}
        monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(connection))

    task_id = f"honest_{name.replace('-', '_')}"
    op = JobOperator(
        task_id=task_id,
        image="registry.example/trainer:1",
        group="vision",
        user="alice",
        namespace=NAMESPACE,
        quota_configmap=POLICY_CONFIGMAP,
        # Every pod's main trains for 1 s, and so does the torchrun case's extra container.
        job_annotations=scenario(
            main={"run": 1, "logs": ["epoch 1"]}, **({"exporter": {"run": 1}} if name == "torchrun" else {})
        ),
        **HONEST[name],
    )
    run_as("worker")
    trigger = defer(op, task_context("plane_pod_security", task_id, run_id=RUN_ID))
    run_as("triggerer")

    event = follow(trigger)

    assert event["status"] == "success" and event["state"] == "SUCCEEDED", event

    async def pods(client: KubeClient) -> list[dict]:
        listed = await client.list(PODS, NAMESPACE)
        return [p for p in listed["items"] if p["metadata"]["name"].startswith(trigger.job_name)]

    created = on_cluster(identities["api-server"], pods)
    assert created, f"{trigger.job_name} ran no pod"
    for pod in created:
        for container in pod["spec"].get("initContainers", []) + pod["spec"]["containers"]:
            asks = "nvidia.com/gpu" in (container.get("resources") or {}).get("limits", {})
            hidden = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"} in container.get("env", [])
            assert asks or hidden, (pod["metadata"]["name"], container["name"])
