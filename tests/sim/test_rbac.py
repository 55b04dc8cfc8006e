"""The simulator's RBAC authorizer, rule by rule as kubernetes/kubernetes v1.32 decides
(``plugin/pkg/auth/authorizer/rbac/rbac.go``, ``pkg/apis/rbac/v1/evaluation_helpers.go``), and a
cluster that enforces it answering a refused request as kube-apiserver does."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from airflow_jobs_sim import rbac
from airflow_jobs_sim.cluster import SimCluster
from airflow_jobs_sim.config import ClusterConfig, Identity
from airflow_jobs_sim.rbac import Policy, Request, User, allowed, rule_allows

WORKER = User.service_account("airflow", "airflow-worker")
ROLE = {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list", "create"]}


def binding(kind: str, role: str, subject: dict, namespace: str = "") -> dict:
    meta = {"name": role, **({"namespace": namespace} if namespace else {})}
    return {
        "metadata": meta,
        "roleRef": {"apiGroup": rbac.GROUP, "kind": kind, "name": role},
        "subjects": [subject],
    }


def test_a_rule_allows_its_verbs_groups_and_resources_only():
    assert rule_allows(ROLE, Request("create", "batch", "jobs", namespace="ml"))
    assert not rule_allows(ROLE, Request("patch", "batch", "jobs", namespace="ml"))
    assert not rule_allows(ROLE, Request("get", "kubeflow.org", "jobs", namespace="ml"))
    assert not rule_allows(ROLE, Request("get", "batch", "cronjobs", namespace="ml"))


def test_resource_names_restrict_a_rule_to_named_requests_so_it_never_allows_list_or_create():
    rule = {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["ledger"], "verbs": ["*"]}
    assert rule_allows(rule, Request("update", "", "configmaps", namespace="ml", name="ledger"))
    assert not rule_allows(rule, Request("update", "", "configmaps", namespace="ml", name="airflow-config"))
    assert not rule_allows(rule, Request("list", "", "configmaps", namespace="ml"))
    assert not rule_allows(rule, Request("create", "", "configmaps", namespace="ml"))


def test_a_subresource_is_its_own_resource_matched_by_name_or_by_star_slash():
    logs = Request("get", "", "pods", "log", namespace="ml", name="p")
    assert not rule_allows({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}, logs)
    assert rule_allows({"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}, logs)
    assert rule_allows({"apiGroups": [""], "resources": ["*/log"], "verbs": ["get"]}, logs)
    assert rule_allows({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}, logs)


def test_a_role_binding_grants_only_in_its_namespace_even_for_a_cluster_role():
    policy = Policy(
        cluster_roles={"submit": {"rules": [ROLE]}},
        role_bindings=[
            binding("ClusterRole", "submit", {"kind": "ServiceAccount", "name": "airflow-worker"}, "airflow")
        ],
    )
    # The subject's namespace defaults to the binding's: airflow's worker, not another namespace's.
    assert allowed(policy, WORKER, Request("create", "batch", "jobs", namespace="airflow"))
    assert not allowed(policy, WORKER, Request("create", "batch", "jobs", namespace="default"))
    assert not allowed(
        policy,
        User.service_account("other", "airflow-worker"),
        Request("create", "batch", "jobs", namespace="airflow"),
    )


def test_a_cluster_role_binding_grants_everywhere_and_at_the_cluster_scope():
    nodes = {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}
    policy = Policy(
        cluster_roles={"nodes": {"rules": [nodes]}},
        cluster_role_bindings=[
            binding(
                "ClusterRole",
                "nodes",
                {"kind": "ServiceAccount", "name": "airflow-worker", "namespace": "airflow"},
            )
        ],
    )
    assert allowed(policy, WORKER, Request("list", "", "nodes"))
    assert not allowed(policy, WORKER, Request("delete", "", "nodes", name="n1"))


def test_groups_and_users_are_subjects_and_system_masters_may_do_anything():
    policy = Policy(
        roles={("ml", "r"): {"rules": [ROLE]}},
        role_bindings=[binding("Role", "r", {"kind": "Group", "name": "ml-team"}, "ml")],
    )
    assert allowed(policy, User("alice", ("ml-team",)), Request("get", "batch", "jobs", namespace="ml"))
    assert not allowed(policy, User("bob", ("other",)), Request("get", "batch", "jobs", namespace="ml"))
    assert allowed(Policy(), User("admin", (rbac.MASTERS,)), Request("delete", "", "nodes", name="n1"))


def test_the_refusal_reads_as_kube_apiservers():
    assert rbac.forbidden_message(WORKER, Request("patch", "batch", "jobs", namespace="ml", name="j")) == (
        'User "system:serviceaccount:airflow:airflow-worker" cannot patch resource "jobs" in API group '
        '"batch" in the namespace "ml"'
    )
    assert rbac.forbidden_message(WORKER, Request("list", "", "nodes")) == (
        'User "system:serviceaccount:airflow:airflow-worker" cannot list resource "nodes" in API group "" '
        "at the cluster scope"
    )


@pytest.fixture(scope="module")
def enforcing():
    config = ClusterConfig(
        nodes=1,
        token="admin-token",
        rbac=True,
        identities=(Identity.service_account("airflow", "airflow-worker", "worker-token"),),
    )
    with SimCluster(config) as sim:
        sim.store.create(
            "roles",
            {"metadata": {"name": "submit"}, "rules": [ROLE]},
            "default",
        )
        sim.store.create(
            "rolebindings",
            binding(
                "Role", "submit", {"kind": "ServiceAccount", "name": "airflow-worker", "namespace": "airflow"}
            ),
            "default",
        )
        yield sim


def call(sim, token: str, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(sim.url + path, data=data, method=method)
    request.add_header("Authorization", f"Bearer {token}")
    request.add_header(
        "Content-Type", "application/merge-patch+json" if method == "PATCH" else "application/json"
    )
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_an_enforcing_cluster_serves_what_a_role_grants_and_refuses_the_rest(enforcing):
    status, _ = call(enforcing, "worker-token", "GET", "/apis/batch/v1/namespaces/default/jobs")
    assert status == 200
    status, body = call(enforcing, "worker-token", "GET", "/api/v1/namespaces/default/configmaps")
    assert (status, body["reason"]) == (403, "Forbidden")
    assert body["message"] == (
        'configmaps is forbidden: User "system:serviceaccount:airflow:airflow-worker" cannot list resource '
        '"configmaps" in API group "" in the namespace "default"'
    )
    status, body = call(
        enforcing,
        "worker-token",
        "PATCH",
        "/apis/batch/v1/namespaces/default/jobs/train",
        {"spec": {"suspend": False}},
    )
    assert status == 403
    assert body["message"].startswith(
        'jobs.batch "train" is forbidden: User "system:serviceaccount:airflow:airflow-worker" cannot patch'
    )
    assert body["details"] == {"name": "train", "group": "batch", "kind": "jobs"}
    # The admin token is system:masters; the simulator's admin API is the admin's only.
    assert call(enforcing, "admin-token", "GET", "/api/v1/namespaces/default/configmaps")[0] == 200
    assert call(enforcing, "worker-token", "GET", "/_sim/state")[0] == 403


def test_a_binding_cannot_change_the_role_it_grants():
    from airflow_jobs_sim.config import resource_type
    from airflow_jobs_sim.validation import validate, validate_update

    old = binding("Role", "submit", {"kind": "User", "name": "alice"}, "ml")
    new = binding("ClusterRole", "admin", {"kind": "User", "name": "alice"}, "ml")
    causes = validate_update(resource_type("rolebindings"), new, old)
    assert [c.field for c in causes] == ["roleRef"] and "cannot change roleRef" in causes[0].message
    bad = {"metadata": {"name": "r", "namespace": "ml"}, "rules": [{"resources": ["jobs"], "verbs": []}]}
    fields = sorted(c.field for c in validate(resource_type("roles"), bad))
    assert fields == ["rules[0].apiGroups", "rules[0].verbs"]
