"""The official Airflow chart rendered with helm-values/values.yaml by Helm's own template engine.

What a platform team checks before rolling out, with the chart version they deploy: the release
jobs' namespace and the provider's defaults reach every Airflow component, and each component runs
under the service account its Role in rbac.yaml is bound to, in the release's namespace. It needs the chart (``helm pull apache-airflow/airflow
--untar``, or ``chart/`` of an apache/airflow checkout) at ``AIRFLOW_JOBS_CHART`` and the
``helm-python-sdk`` package (Helm's Go SDK bound to Python: no ``helm`` binary). Without them it is
skipped, saying which is missing; test_helm_values.py checks the values against the chart's schema and
defaults everywhere.
"""

from __future__ import annotations

import configparser
import os
from pathlib import Path

import pytest
import yaml

from airflow_jobs_plugin import config

ROOT = Path(__file__).resolve().parents[2]
HELM = ROOT / "helm-values"
CHART_ENV = "AIRFLOW_JOBS_CHART"
RELEASE, NAMESPACE = "airflow", "airflow"
# The jobs' namespace (pod-security.yaml's Namespace): not the release's.
JOBS_NAMESPACE = next(
    d["metadata"]["name"]
    for d in yaml.safe_load_all((HELM / "pod-security.yaml").read_text())
    if d and d["kind"] == "Namespace"
)
# The chart labels each workload's pods with its component (chart/templates/*/*-deployment.yaml).
COMPONENTS = {
    "worker": "workers",
    "triggerer": "triggerer",
    "api-server": "apiServer",
    "dag-processor": "dagProcessor",
    "scheduler": "scheduler",
}
WITH_ROLES = ("workers", "triggerer", "apiServer")  # the others never call the GPU cluster

pytestmark = pytest.mark.skipif(
    not os.environ.get(CHART_ENV), reason=f"{CHART_ENV} does not name the official chart (docs/deploying.md)"
)


@pytest.fixture(scope="module")
def rendered() -> list[dict]:
    helm = pytest.importorskip("helm_python", reason="helm-python-sdk renders the chart without helm")
    values = yaml.safe_load((HELM / "values.yaml").read_text())
    with helm.Chart.load(os.environ[CHART_ENV]) as chart:
        manifests = chart.render(values=values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return [doc for text in manifests.values() for doc in yaml.safe_load_all(text) if isinstance(doc, dict)]


def _config_map(rendered: list[dict]) -> dict:
    (found,) = [
        d for d in rendered if d.get("kind") == "ConfigMap" and "airflow.cfg" in (d.get("data") or {})
    ]
    return found


def _workloads(rendered: list[dict]) -> dict[str, dict]:
    """The pod spec of each component's Deployment or StatefulSet, by its values key."""
    found = {}
    for doc in rendered:
        if doc.get("kind") not in ("Deployment", "StatefulSet"):
            continue
        component = (doc["spec"]["template"]["metadata"].get("labels") or {}).get("component")
        if component in COMPONENTS:
            found[COMPONENTS[component]] = doc["spec"]["template"]["spec"]
    return found


def test_airflow_cfg_names_the_jobs_namespace_and_the_shipped_policy(rendered):
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read_string(_config_map(rendered)["data"]["airflow.cfg"])
    section = cfg[config.SECTION]
    assert section["namespace"] == JOBS_NAMESPACE != NAMESPACE
    assert section["quota_namespace"] == JOBS_NAMESPACE
    policy = yaml.safe_load((HELM / "quota-policy.yaml").read_text())
    assert section["quota_configmap"] == policy["metadata"]["name"]
    assert set(section) <= set(config.BY_NAME), "an option the provider does not declare"


def test_every_component_mounts_that_airflow_cfg(rendered):
    name = _config_map(rendered)["metadata"]["name"]
    workloads = _workloads(rendered)
    assert set(workloads) == set(COMPONENTS.values())
    for component, pod in workloads.items():
        volumes = {
            v["name"] for v in pod.get("volumes") or () if (v.get("configMap") or {}).get("name") == name
        }
        assert volumes, f"{component} has no volume of ConfigMap {name}"
        mounts = [
            m
            for c in pod["containers"]
            for m in c.get("volumeMounts") or ()
            if m["name"] in volumes and m.get("subPath") == "airflow.cfg"
        ]
        assert mounts, f"{component} does not mount airflow.cfg"


def test_the_cluster_policy_is_on_in_the_rendered_local_settings(rendered):
    settings = _config_map(rendered)["data"].get("airflow_local_settings.py") or ""
    assert "airflow_jobs_plugin.airflow.cluster_policy import task_policy" in settings


def test_each_component_runs_as_the_account_its_role_is_bound_to(rendered):
    bound = {
        subject["name"]
        for doc in yaml.safe_load_all((HELM / "rbac.yaml").read_text())
        if doc and doc["kind"] in ("RoleBinding", "ClusterRoleBinding")
        for subject in doc["subjects"]
        if subject["namespace"] == NAMESPACE
    }
    workloads = _workloads(rendered)
    values = yaml.safe_load((HELM / "values.yaml").read_text())
    for component in WITH_ROLES:
        account = workloads[component].get("serviceAccountName")
        assert account == values[component]["serviceAccount"]["name"], component
        assert account in bound, f"{component} runs as {account}, which no binding in rbac.yaml names"
    created = {d["metadata"]["name"] for d in rendered if d.get("kind") == "ServiceAccount"}
    assert {workloads[c]["serviceAccountName"] for c in WITH_ROLES} <= created
