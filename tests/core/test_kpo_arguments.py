"""A DAG author moving from KubernetesPodOperator: every one of its arguments means the same under the
same name, or fails at once in one line naming the JobOperator argument to use; ``runtime_class_name``
and ``secrets``, which GPU clusters need, work as that operator applies them.

KubernetesPodOperator is the installed cncf provider's (10.25, ``airflow/operators/pod.py``); its ``Secret`` is
``secret.py``'s.
"""

from __future__ import annotations

import inspect
import re
from datetime import datetime, timezone

import pytest
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.providers.cncf.kubernetes.secret import Secret
from airflow.sdk import BaseOperator
from kubernetes.client import models as k8s

from airflow_jobs_plugin.airflow.operators import KPO_NAMES, JobOperator
from airflow_jobs_plugin.jobs.manifests import build_manifest
from airflow_jobs_plugin.jobs.spec import JobSpecError, TaskIdentity

TASK = TaskIdentity("nightly", "train", "manual__1", -1, 1)
BASE = {"task_id": "train", "image": "registry.example/trainer:1", "group": "vision", "gpus": 1}


def parameters(cls: type) -> set[str]:
    found = inspect.signature(cls.__init__).parameters.values()
    return {p.name for p in found if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def pod(op: JobOperator) -> dict:
    spec = op._spec(templated=False)
    job = build_manifest(
        spec, name=TASK.job_name(1), task=TASK, attempt=1, queued_at=datetime(2026, 3, 2, tzinfo=timezone.utc)
    )
    return job["spec"]["template"]["spec"]


def main(pod_spec: dict) -> dict:
    return next(c for c in pod_spec["containers"] if c["name"] == "main")


def test_every_kubernetes_pod_operator_argument_has_the_same_name_here_or_a_pointer():
    own = parameters(JobOperator) | parameters(BaseOperator)
    assert sorted(parameters(KubernetesPodOperator) - own - set(KPO_NAMES)) == []


@pytest.mark.parametrize("name", sorted(KPO_NAMES))
def test_a_kubernetes_pod_operator_name_fails_in_one_line_naming_what_to_use(name):
    with pytest.raises(JobSpecError) as raised:
        JobOperator(**BASE, **{name: "x"})
    message = str(raised.value)
    assert "\n" not in message and message.startswith(f"{name}: is a KubernetesPodOperator argument")
    advice = message.split(" -- ", 1)[1]
    assert advice.startswith(("use ", "remove it")), advice
    if advice.startswith("use "):
        named = re.findall(r"\b[a-z_]+\b", advice.split("(")[0].removeprefix("use "))
        assert set(named) & parameters(JobOperator), advice  # it names an argument JobOperator has


def test_container_resources_as_v1_resource_requirements_names_cpu_memory_and_gpus():
    requirements = k8s.V1ResourceRequirements(limits={"cpu": "4", "memory": "16Gi"})
    for value in (requirements, {"limits": {"cpu": "4"}, "requests": {"cpu": "4"}}):
        with pytest.raises(JobSpecError) as raised:
            JobOperator(**BASE, container_resources=value)
        message = str(raised.value)
        assert "\n" not in message and message.startswith("container_resources: is KubernetesPodOperator's")
        assert "cpu, memory and gpus" in message


def test_runtime_class_name_sets_the_pods_runtime_class(monkeypatch):
    monkeypatch.setenv("AIRFLOW__AIRFLOW_JOBS__JOB_RUNTIME_CLASSES", "nvidia,kata")
    assert pod(JobOperator(**BASE, runtime_class_name="nvidia"))["runtimeClassName"] == "nvidia"
    own = JobOperator(
        **BASE, runtime_class_name="nvidia", pod_template={"spec": {"runtimeClassName": "kata"}}
    )
    assert pod(own)["runtimeClassName"] == "kata"  # the author's own pod_template wins
    assert "runtimeClassName" not in pod(JobOperator(**BASE))


def test_a_runtime_class_the_platform_does_not_allow_is_refused_naming_the_argument(monkeypatch):
    """[airflow_jobs] job_runtime_classes (empty by default, as the admission policy's parameter
    airflow-jobs-runtime-classes ships): the error names the argument the author wrote."""
    monkeypatch.setenv("AIRFLOW__AIRFLOW_JOBS__JOB_RUNTIME_CLASSES", "nvidia")
    with pytest.raises(JobSpecError) as info:
        JobOperator(**BASE, runtime_class_name="kata")
    assert info.value.field == "runtime_class_name"
    assert "RuntimeClass 'kata' is not one the platform allows jobs (allowed: 'nvidia'" in info.value.message
    with pytest.raises(JobSpecError) as info:
        JobOperator(**BASE, pod_template={"spec": {"runtimeClassName": "kata"}})
    assert info.value.field == "pod_template.spec.runtimeClassName"
    monkeypatch.delenv("AIRFLOW__AIRFLOW_JOBS__JOB_RUNTIME_CLASSES")
    with pytest.raises(JobSpecError, match=r"allowed: none; \[airflow_jobs\] job_runtime_classes"):
        JobOperator(**BASE, runtime_class_name="nvidia")


def test_secrets_become_a_variable_all_keys_or_a_read_only_volume_as_kubernetes_pod_operator_mounts_them():
    secrets = [
        Secret("env", "WANDB_API_KEY", "wandb", "api-key"),
        Secret("env", None, "s3-creds"),
        Secret("volume", "/etc/certs", "ca-bundle", items=[k8s.V1KeyToPath(key="ca", path="ca.crt")]),
    ]
    spec = pod(JobOperator(**BASE, env={"EPOCHS": "3"}, secrets=secrets))
    container = main(spec)
    env = {e["name"]: e for e in container["env"]}
    assert env["WANDB_API_KEY"]["valueFrom"] == {"secretKeyRef": {"name": "wandb", "key": "api-key"}}
    assert env["EPOCHS"]["value"] == "3"
    assert {"secretRef": {"name": "s3-creds"}} in container["envFrom"]
    (volume,) = [v for v in spec["volumes"] if "secret" in v]
    assert volume["secret"] == {"secretName": "ca-bundle", "items": [{"key": "ca", "path": "ca.crt"}]}
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    assert (mount["mountPath"], mount["readOnly"]) == ("/etc/certs", True)


def test_a_secret_that_is_not_one_names_its_place():
    with pytest.raises(JobSpecError) as raised:
        JobOperator(**BASE, secrets=["wandb"])
    assert str(raised.value).startswith("secrets[0]: must be a cncf Secret")


def test_docs_operator_md_maps_every_kubernetes_pod_operator_argument():
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[2] / "docs" / "operator.md").read_text()
    section = docs.split("## Coming from the KubernetesPodOperator", 1)[1].split("\n## ", 1)[0]
    rows = set(re.findall(r"^\| (\w+) \|", section, re.M))
    assert parameters(KubernetesPodOperator) - parameters(BaseOperator) - rows == set()
