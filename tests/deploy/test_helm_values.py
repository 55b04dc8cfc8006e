"""The deployment files: helm-values/values.yaml over the official chart's defaults, the Roles, the
admission controller's Deployment, the quota policy ConfigMap and the image's Dockerfile."""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from airflow.models.connection import Connection

from airflow_jobs_plugin.queueing import quota

ROOT = Path(__file__).resolve().parents[2]
HELM = ROOT / "helm-values"
# The official chart's schema and default values (no templates; see docs/deploying.md).
CHART = Path(os.environ.get("AIRFLOW_CHART_DIR", ROOT.parent / "shared" / "airflow-chart"))
DEFAULT_POLICY_CONFIGMAP = "airflow-jobs-quota-policy"

# Every verb the Kubernetes API server knows for RBAC on ordinary resources.
KUBERNETES_VERBS = {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
needs_chart = pytest.mark.skipif(
    not (CHART / "values.schema.json").exists(), reason=f"the chart's schema is not at {CHART}"
)


def helm_merge(base: Any, override: Any) -> Any:
    """Helm's coalescing of a values file over the chart's defaults: maps merge key by key, lists and
    scalars replace, and a null in the override removes the key."""
    if not (isinstance(base, dict) and isinstance(override, dict)):
        return copy.deepcopy(override)
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if value is None:
            merged.pop(key, None)
        elif key in merged:
            merged[key] = helm_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def load_documents(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


@pytest.fixture(scope="module")
def ours() -> dict:
    return load_yaml(HELM / "values.yaml")


@pytest.fixture(scope="module")
def merged(ours) -> dict:
    return helm_merge(load_yaml(CHART / "values.yaml"), ours)


def env_of(values: dict) -> dict[str, str]:
    return {item["name"]: item["value"] for item in values.get("env") or []}


# --- the merge itself ---


@pytest.mark.parametrize(
    ("base", "override", "expected"),
    [
        ({"a": {"b": 1, "c": 2}}, {"a": {"b": 3}}, {"a": {"b": 3, "c": 2}}),
        ({"a": [1, 2]}, {"a": [3]}, {"a": [3]}),
        ({"a": {"b": 1}, "d": 4}, {"a": None}, {"d": 4}),
        ({"a": 1}, {"e": {"f": 5}}, {"a": 1, "e": {"f": 5}}),
    ],
    ids=["maps merge", "lists replace", "null removes", "new keys added"],
)
def test_merge_follows_helm_coalescing(base, override, expected):
    assert helm_merge(base, override) == expected


# --- values.yaml ---


@needs_chart
def test_values_merged_over_the_chart_defaults_validate_against_the_chart_schema(merged):
    schema = json.loads((CHART / "values.schema.json").read_text())
    validator = jsonschema.Draft7Validator(schema)
    errors = [
        f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in validator.iter_errors(merged)
    ]
    assert errors == []


@needs_chart
def test_a_broken_value_is_caught_by_the_schema(merged):
    schema = json.loads((CHART / "values.schema.json").read_text())
    broken = helm_merge(merged, {"triggerer": {"replicas": "two"}})
    assert not jsonschema.Draft7Validator(schema).is_valid(broken)


@needs_chart
def test_triggerer_is_enabled_with_at_least_two_replicas(merged):
    assert merged["triggerer"]["enabled"] is True
    assert merged["triggerer"]["replicas"] >= 2


@needs_chart
def test_the_image_is_the_provider_image_for_the_targeted_airflow(merged):
    import airflow

    image = merged["images"]["airflow"]
    assert image["repository"] and image["tag"]
    # The chart renders its templates for airflowVersion: it must be the Airflow the provider targets.
    assert merged["airflowVersion"].split(".")[:2] == airflow.__version__.split(".")[:2]
    dockerfile = (HELM / "Dockerfile").read_text()
    assert re.search(rf"^FROM apache/airflow:{re.escape(merged['airflowVersion'])}\s*$", dockerfile, re.M)
    assert "pip install" in dockerfile and "/tmp/airflow-jobs-plugin" in dockerfile


def test_the_kubernetes_connection_is_in_cluster(ours):
    value = env_of(ours)["AIRFLOW_CONN_KUBERNETES_DEFAULT"]
    connection = Connection.from_json(value, conn_id="kubernetes_default")
    assert connection.conn_type == "kubernetes"
    assert connection.extra_dejson == {"in_cluster": True}


def test_the_quota_policy_setting_names_the_shipped_configmap(ours):
    policy = load_yaml(HELM / "quota-policy.yaml")
    assert env_of(ours)["AIRFLOW_JOBS_QUOTA_CONFIGMAP"] == policy["metadata"]["name"]


def _uncommented_settings(text: str) -> list[str]:
    """Settings (keys with a value) with no comment of their own, none on an earlier sibling of their
    group (siblings not separated by a blank line share a comment) and none on an enclosing key."""
    missing = []
    stack: list[tuple[int, bool]] = []  # (indent, covered) of the enclosing keys
    previous_comment = False
    group: dict[int, bool] = {}  # indent -> covered, for the current run of siblings
    for raw in text.splitlines():
        line = raw.rstrip()
        stripped = line.strip()
        if not stripped:
            previous_comment = False
            group.clear()
            continue
        if stripped.startswith("#"):
            previous_comment = True
            continue
        indent = len(line) - len(line.lstrip())
        match = re.match(r"\s*(- )?([A-Za-z_][\w.-]*):", line)
        if match is None:  # a list item or block-scalar content belongs to its key
            previous_comment = False
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        covered = previous_comment or " #" in line or group.get(indent, False) or any(c for _, c in stack)
        is_setting = bool(line[match.end() :].split(" #")[0].strip())  # a header only opens a block
        if is_setting and not covered:
            missing.append(stripped)
        group = {i: c for i, c in group.items() if i <= indent}
        group[indent] = covered
        stack.append((indent, covered))
        previous_comment = False
    return missing


def test_every_choice_in_the_values_carries_a_comment():
    assert _uncommented_settings((HELM / "values.yaml").read_text()) == []


def test_the_comment_check_spots_an_uncommented_setting():
    text = "# image\nimages:\n  tag: x\n\nexecutor: LocalExecutor\nworkers:\n  replicas: 3\n"
    assert _uncommented_settings(text) == ["executor: LocalExecutor", "replicas: 3"]


# --- rbac.yaml ---


@pytest.fixture(scope="module")
def rbac() -> list[dict]:
    return load_documents(HELM / "rbac.yaml")


RBAC_FILES = ("rbac.yaml", "admission-controller.yaml", "rbac-kueue.yaml", "rbac-kueue-config.yaml")


def test_every_role_is_a_well_formed_role_without_wildcards(rbac):
    assert len([d for d in rbac if d["kind"] == "Role"]) == 3, "one Role per Airflow component"
    roles = [d for f in RBAC_FILES for d in load_documents(HELM / f) if d["kind"] in ("Role", "ClusterRole")]
    for role in roles:
        assert role["apiVersion"] == "rbac.authorization.k8s.io/v1"
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", role["metadata"]["name"])
        assert role["rules"]
        for rule in role["rules"]:
            assert set(rule) <= {"apiGroups", "resources", "verbs", "resourceNames"}
            for key in ("apiGroups", "resources", "verbs"):
                assert isinstance(rule[key], list) and rule[key], f"{key} must be a non-empty list: {rule}"
                assert "*" not in rule[key], f"wildcard in {key}: {rule}"
            assert set(rule["verbs"]) <= KUBERNETES_VERBS, rule
            # RBAC cannot restrict create by name: a create in a named rule would be silently unusable.
            if "resourceNames" in rule:
                assert "create" not in rule["verbs"], rule


def test_each_component_has_its_own_service_account_and_binding(rbac, ours):
    roles = {d["metadata"]["name"] for d in rbac if d["kind"] == "Role"}
    bindings = [d for d in rbac if d["kind"] == "RoleBinding"]
    accounts = [ours[c]["serviceAccount"]["name"] for c in ("workers", "triggerer", "apiServer")]
    assert len(set(accounts)) == 3, "workers, triggerers and the api-server need distinct accounts"
    bound = {}
    for binding in bindings:
        assert binding["roleRef"]["apiGroup"] == "rbac.authorization.k8s.io"
        assert binding["roleRef"]["kind"] == "Role" and binding["roleRef"]["name"] in roles
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount" and subject["namespace"]
            assert subject["name"] not in bound, f"{subject['name']} is bound twice"
            bound[subject["name"]] = binding["roleRef"]["name"]
    # Workers submit, triggerers follow and admit, the api-server serves the UI; nobody else.
    assert set(bound) == set(accounts)
    assert len(set(bound.values())) == 3, "one Role per component"


def _rules(rbac: list[dict], account: str) -> list[dict]:
    (binding,) = [
        d for d in rbac if d["kind"] == "RoleBinding" and account in {s["name"] for s in d["subjects"]}
    ]
    (role,) = [d for d in rbac if d["kind"] == "Role" and d["metadata"]["name"] == binding["roleRef"]["name"]]
    return role["rules"]


def _may(rules: list[dict], verb: str, resource: str, name: str | None = None) -> bool:
    """RBAC's rule: a request is allowed when one rule names its verb and resource and, if the rule has
    resourceNames, the object's name (kubernetes/kubernetes pkg/apis/rbac/v1/evaluation_helpers.go)."""
    return any(
        verb in r["verbs"]
        and resource in r["resources"]
        and (not r.get("resourceNames") or (name is not None and name in r["resourceNames"]))
        for r in rules
    )


def test_workers_cannot_patch_jobs_nor_write_any_configmap(rbac, ours):
    from airflow_jobs_plugin.queueing.quota.ledger_model import ledger_name

    worker = _rules(rbac, ours["workers"]["serviceAccount"]["name"])
    assert _may(worker, "create", "jobs") and _may(worker, "create", "mpijobs")
    for verb in ("patch", "update", "delete"):
        assert not _may(worker, verb, "jobs") and not _may(worker, verb, "mpijobs")
    for name in (DEFAULT_POLICY_CONFIGMAP, ledger_name("vision"), "airflow-jobs-queue", "airflow-config"):
        for verb in ("create", "update", "patch", "delete"):
            assert not _may(worker, verb, "configmaps", name)
    # The policies are read (any ConfigMap labelled as one: queueing/pools.py); the jobs' namespace
    # holds nothing secret in a ConfigMap.
    assert _may(worker, "get", "configmaps", DEFAULT_POLICY_CONFIGMAP) and _may(worker, "list", "configmaps")


def test_every_kind_of_job_is_granted_to_the_components_that_submit_follow_and_show_it(rbac, ours):
    """A new kind (a module in jobs/kinds/) needs its resource in the deployment too: the workers submit
    it, the triggerers follow it, retry it and ask for its kill, the api-server shows and acts on it, the
    admission controller admits, rules on and ends it."""
    from airflow_jobs_plugin.jobs import kinds

    needs = {
        "workers": ("get", "list", "create"),
        "triggerer": ("get", "list", "watch", "create", "patch"),
        "apiServer": ("get", "list", "patch", "delete"),
        "controller": ("get", "list", "watch", "patch", "delete"),
    }
    controller = [
        d
        for d in load_documents(HELM / "admission-controller.yaml")
        if d["kind"] == "Role" and d["metadata"]["name"] == "airflow-jobs-controller"
    ]
    for resource in kinds.RESOURCES:
        for component, verbs in needs.items():
            if component == "controller":
                (role,) = controller
                rules = role["rules"]
            else:
                rules = _rules(rbac, ours[component]["serviceAccount"]["name"])
            for verb in verbs:
                grants = [r for r in rules if resource.plural in r["resources"] and verb in r["verbs"]]
                assert any(resource.group in r["apiGroups"] for r in grants), (
                    f"helm-values/rbac.yaml: {component} may not {verb} {resource.plural}.{resource.group}"
                )


def test_the_admission_policy_matches_every_kind_of_job():
    """The rule that a worker creates jobs only suspended and labelled holds for every kind."""
    from airflow_jobs_plugin.jobs import kinds

    (policy,) = [
        d
        for d in load_documents(HELM / "admission-policy.yaml")
        if d["kind"] == "ValidatingAdmissionPolicy"
        and d["metadata"]["name"] == "airflow-jobs-quota-admission"
    ]
    matched = {
        (group, version, plural)
        for rule in policy["spec"]["matchConstraints"]["resourceRules"]
        for group in rule["apiGroups"]
        for version in rule["apiVersions"]
        for plural in rule["resources"]
        if {"CREATE", "UPDATE"} <= set(rule["operations"])
    }
    for resource in kinds.RESOURCES:
        assert (resource.group, resource.version, resource.plural) in matched, resource


def test_only_the_controller_writes_configmaps_and_the_admission_policy_bounds_the_names(rbac, ours):
    """RBAC cannot grant a create by name, and the ledgers' and boards' names follow the policies'
    groups: the controller's Role grants create and update on ConfigMaps, and admission-policy.yaml's
    rule controller-configmaps limits them to ledgers and boards (tests/deploy/test_admission_policy.py).
    No Airflow component writes any ConfigMap: a cancel or stop from the UI leaves the freeing of its GPUs
    to the controller's pass."""
    from airflow_jobs_plugin.queueing.quota.ledger_model import ledger_name

    for component in ("workers", "triggerer", "apiServer"):
        rules = _rules(rbac, ours[component]["serviceAccount"]["name"])
        for name in (DEFAULT_POLICY_CONFIGMAP, ledger_name("vision"), "airflow-jobs-queue", "airflow-config"):
            for verb in ("create", "update", "patch", "delete"):
                assert not _may(rules, verb, "configmaps", name), (component, verb, name)
    (controller,) = [
        d
        for d in load_documents(HELM / "admission-controller.yaml")
        if d["kind"] == "Role" and d["metadata"]["name"] == "airflow-jobs-controller"
    ]
    assert _may(controller["rules"], "create", "configmaps") and _may(
        controller["rules"], "update", "configmaps"
    )
    for verb in ("patch", "delete"):
        assert not _may(controller["rules"], verb, "configmaps", ledger_name("vision"))
    (policy,) = [
        d
        for d in load_documents(HELM / "admission-policy.yaml")
        if d["kind"] == "ValidatingAdmissionPolicy"
        and d["metadata"]["name"] == "airflow-jobs-quota-configmaps"
    ]
    assert {"CREATE", "UPDATE", "DELETE"} <= set(
        policy["spec"]["matchConstraints"]["resourceRules"][0]["operations"]
    )


# --- admission-controller.yaml: the controller's Deployment ---


def _deployment() -> dict:
    (deployment,) = [
        d for d in load_documents(HELM / "admission-controller.yaml") if d["kind"] == "Deployment"
    ]
    return deployment


def test_the_controller_runs_the_provider_image_as_its_own_account_in_its_own_namespace(ours):
    from airflow_jobs_plugin.controller.main import LEASE_NAME

    docs = load_documents(HELM / "admission-controller.yaml")
    deployment = _deployment()
    namespace = deployment["metadata"]["namespace"]
    (ns,) = [d for d in docs if d["kind"] == "Namespace"]
    assert ns["metadata"]["name"] == namespace == "airflow-jobs-system"
    pod = deployment["spec"]["template"]["spec"]
    (account,) = [d for d in docs if d["kind"] == "ServiceAccount"]
    assert pod["serviceAccountName"] == account["metadata"]["name"] == "airflow-jobs-controller"
    assert account["metadata"]["namespace"] == namespace
    # Every binding of the file names that account, and no other.
    for binding in (d for d in docs if d["kind"].endswith("Binding")):
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "airflow-jobs-controller", "namespace": namespace}
        ], binding["metadata"]["name"]
    (container,) = pod["containers"]
    image = ours["images"]["airflow"]
    assert container["image"] == f"{image['repository']}:{image['tag']}"
    # Replicas elect a leader; each is named in the Lease by its pod's name.
    assert deployment["spec"]["replicas"] == 2
    command = container["command"]
    assert command[:3] == ["airflow-jobs", "admission-controller", "--in-cluster"]
    assert command[command.index("--identity") + 1] == "$(POD_NAME)"
    (pod_name,) = [e for e in container["env"] if e["name"] == "POD_NAME"]
    assert pod_name["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    # The Lease: in its own namespace (the pod's, the default --lease-namespace), by its default name.
    assert "--lease-namespace" not in command and "--lease-name" not in command
    (election,) = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"].endswith("-election")]
    assert election["metadata"]["namespace"] == namespace
    named = [r for r in election["rules"] if r.get("resourceNames")]
    assert named and all(r["resourceNames"] == [LEASE_NAME] for r in named)


def test_the_controller_admits_in_the_jobs_namespace_the_rest_of_the_layout_names(ours):
    """One jobs' namespace, named alike by the controller's command and Role, pod-security.yaml's
    Namespace, the provider's configuration and the admission policies' bindings."""
    (jobs,) = [
        d["metadata"]["name"] for d in load_documents(HELM / "pod-security.yaml") if d["kind"] == "Namespace"
    ]
    command = _deployment()["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--namespace") + 1] == jobs
    (role,) = [
        d
        for d in load_documents(HELM / "admission-controller.yaml")
        if d["kind"] == "Role" and d["metadata"]["name"] == "airflow-jobs-controller"
    ]
    assert role["metadata"]["namespace"] == jobs
    section = ours["config"]["airflow_jobs"]
    assert section["namespace"] == section["quota_namespace"] == jobs
    assert env_of(ours)["AIRFLOW_JOBS_EXAMPLE_NAMESPACE"] == jobs
    for binding in load_documents(HELM / "admission-policy.yaml"):
        if binding["kind"] == "ValidatingAdmissionPolicyBinding":
            assert binding["spec"]["matchResources"]["namespaceSelector"]["matchLabels"] == {
                "kubernetes.io/metadata.name": jobs
            }


def test_the_controller_stops_within_its_grace_and_runs_as_restricted_asks():
    """On SIGTERM it cancels its keepers (5 s each, at once) and gives the Lease up within its renew
    deadline (10 s, controller/leader.py): the grace period covers both. Its pod meets Pod Security's
    restricted level, which its namespace enforces."""
    docs = load_documents(HELM / "admission-controller.yaml")
    (ns,) = [d for d in docs if d["kind"] == "Namespace"]
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    pod = _deployment()["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] >= 5 + 10
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    context = container["securityContext"]
    assert context["allowPrivilegeEscalation"] is False and context["capabilities"] == {"drop": ["ALL"]}
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    assert "cpu" not in container["resources"]["limits"], "a CPU limit would delay the Lease's renewals"


# --- the configuration reaches every component ---


def render_config_value(value: object, namespace: str) -> str:
    """The chart's configmap.yaml renders each ``config`` value with ``tpl`` against the release
    (chart/templates/configmaps/configmap.yaml, apache/airflow): the only template our values use is the
    release namespace, as the chart's own defaults do for [kubernetes_executor] namespace."""
    text = str(value)
    rendered = text.replace("{{ .Release.Namespace }}", namespace)
    assert "{{" not in rendered, f"a template this test cannot render: {text}"
    return rendered


def test_every_provider_option_set_in_the_values_is_a_declared_option(ours):
    from airflow_jobs_plugin import config

    assert set(ours["config"][config.SECTION]) <= set(config.BY_NAME)


def test_the_rendered_airflow_cfg_points_every_component_at_the_jobs_namespace(ours, tmp_path):
    """airflow.cfg as the chart renders it for release namespace ``ml``, read by Airflow's own parser
    through config.get: the jobs' namespace (not the release's: the jobs run in a namespace of their
    own), the policy and its files are the ones the other files use."""
    from airflow.configuration import AirflowConfigParser

    from airflow_jobs_plugin import config

    section = ours["config"][config.SECTION]
    rendered = {key: render_config_value(value, "ml") for key, value in section.items()}
    parser = AirflowConfigParser()
    parser.read_dict({config.SECTION: rendered})
    (jobs,) = [
        d["metadata"]["name"] for d in load_documents(HELM / "pod-security.yaml") if d["kind"] == "Namespace"
    ]
    assert parser.get(config.SECTION, "namespace") == jobs
    assert parser.get(config.SECTION, "quota_namespace") == jobs
    policy = load_yaml(HELM / "quota-policy.yaml")
    assert parser.get(config.SECTION, "quota_configmap") == policy["metadata"]["name"]
    assert parser.get(config.SECTION, "kubernetes_conn_id") == "kubernetes_default"
    assert env_of(ours)["AIRFLOW_JOBS_QUOTA_CONFIGMAP"] == policy["metadata"]["name"]
    # The cluster policy's files are the policy ConfigMap's keys, where the dag-processor mounts it.
    (mount,) = [m for m in ours["dagProcessor"]["extraVolumeMounts"] if m["name"] == "quota-policy"]
    (volume,) = [v for v in ours["dagProcessor"]["extraVolumes"] if v["name"] == "quota-policy"]
    assert volume["configMap"]["name"] == policy["metadata"]["name"]
    for option in ("quota_policy_file", "charging_file"):
        path = Path(parser.get(config.SECTION, option))
        assert str(path.parent) == mount["mountPath"] and path.name in policy["data"], option


@needs_chart
def test_the_provider_options_are_in_the_chart_config_every_component_mounts(merged, ours):
    """Every Airflow component of the chart mounts <release>-config (airflow.cfg from ``config:``) and
    gets ``env``: chart/templates/*/…-deployment.yaml include "airflow_config_mount" and
    "custom_airflow_environment". So the section in the merged values reaches workers, triggerers, the
    api-server and the dag-processor alike; no component-level override may shadow it."""
    from airflow_jobs_plugin import config

    assert merged["config"][config.SECTION] == ours["config"][config.SECTION]
    assert merged["config"]["core"]["load_examples"] == "False"
    for component in ("workers", "triggerer", "apiServer", "dagProcessor", "scheduler"):
        for item in merged.get(component, {}).get("env") or []:
            assert not item["name"].startswith("AIRFLOW__AIRFLOW_JOBS__"), (component, item)
    assert not [e for e in merged["env"] if e["name"].startswith("AIRFLOW__AIRFLOW_JOBS__")]
    # The chart only writes airflow_local_settings.py when the value is set: ours turns the policy on.
    assert "airflow_jobs_plugin.airflow.cluster_policy import task_policy" in merged["airflowLocalSettings"]


# --- quota-policy.yaml ---


def test_the_quota_policy_configmap_is_well_formed_and_its_policy_valid():
    configmap = load_yaml(HELM / "quota-policy.yaml")
    assert configmap["apiVersion"] == "v1" and configmap["kind"] == "ConfigMap"
    assert configmap["metadata"]["name"] == DEFAULT_POLICY_CONFIGMAP
    assert "namespace" not in configmap["metadata"], "applied with -n, in the jobs' namespace"
    assert all(isinstance(v, str) for v in configmap["data"].values())
    policy = quota.policy_from_configmap_data(configmap["data"])
    assert set(policy.groups) >= {"vision", "research", "nlp"}


def test_the_policy_parser_rejects_a_broken_policy_document():
    configmap = load_yaml(HELM / "quota-policy.yaml")
    broken = {"policy.yaml": configmap["data"]["policy.yaml"].replace("gpus: 6", "gpu: 6")}
    with pytest.raises(quota.PolicyError):
        quota.policy_from_configmap_data(broken)
