"""The simulator's ValidatingAdmissionPolicy, as kube-apiserver v1.32 applies one
(staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/validating/dispatcher.go)."""

from __future__ import annotations

import pytest
from airflow_jobs_sim import rbac
from airflow_jobs_sim.cluster import SimCluster
from airflow_jobs_sim.config import ClusterConfig
from airflow_jobs_sim.errors import ApiError

POLICY = {
    "metadata": {"name": "no-big-configmaps"},
    "spec": {
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": ["configmaps"],
                }
            ]
        },
        "matchConditions": [{"name": "not-admin", "expression": "request.userInfo.username != 'root'"}],
        "validations": [
            {"expression": "!has(object.data) || size(object.data) < 2", "message": "at most one key"},
        ],
    },
}


def binding(name: str, actions: list[str], namespace: str = "default") -> dict:
    return {
        "metadata": {"name": name},
        "spec": {
            "policyName": "no-big-configmaps",
            "validationActions": actions,
            "matchResources": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            },
        },
    }


@pytest.fixture
def cluster():
    with SimCluster(ClusterConfig(nodes=1)) as sim:
        sim.store.create("validatingadmissionpolicies", POLICY)
        yield sim


def create(cluster, name: str, keys: int, user: str = "alice") -> None:
    def on_loop() -> None:
        token = rbac.CALLER.set(rbac.User(user, ("system:authenticated",)))
        try:
            cluster.store.create(
                "configmaps",
                {"metadata": {"name": name}, "data": {f"k{i}": "v" for i in range(keys)}},
                "default",
            )
        finally:
            rbac.CALLER.reset(token)

    cluster.call(on_loop)


def test_a_policy_acts_only_through_a_deny_binding_of_the_namespace(cluster):
    create(cluster, "unbound", 3)  # no binding: nothing is enforced
    cluster.store.create("validatingadmissionpolicybindings", binding("audit-only", ["Audit"]))
    cluster.store.create(
        "validatingadmissionpolicybindings", binding("elsewhere", ["Deny"], namespace="other")
    )
    create(cluster, "still-fine", 3)


def test_a_denied_request_gets_the_first_failing_message_as_invalid_when_no_reason_is_set(cluster):
    cluster.store.create("validatingadmissionpolicybindings", binding("enforce", ["Deny"]))
    create(cluster, "small", 1)
    create(cluster, "by-root", 3, user="root")  # the match condition leaves root out
    with pytest.raises(ApiError) as info:
        create(cluster, "big", 3)
    assert (info.value.code, info.value.reason) == (422, "Invalid")
    assert info.value.message == (
        "configmaps \"big\" is forbidden: ValidatingAdmissionPolicy 'no-big-configmaps' with binding "
        "'enforce' denied request: at most one key"
    )
