"""``coordination.k8s.io/v1`` Leases served as kube-apiserver v1.36.3 serves them: discovery, CRUD, list and
watch, compare-and-swap on the resourceVersion, MicroTime parsed as ``metav1.MicroTime`` parses it
(``sim/micro_time.py``), ``ValidateLeaseSpec``, coordinated election's fields dropped, the lease strategy's create-on-update and its refusal of
an unconditional update, ``kubectl get`` columns, RBAC and fault injection like any other resource."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid

import pytest
from airflow_jobs_sim import ClusterConfig, SimCluster
from airflow_jobs_sim.config import Identity
from airflow_jobs_sim.micro_time import MicroTimeError, parse

GROUP = "/apis/coordination.k8s.io/v1"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def call(
    base: str, method: str, path: str, body: dict | None = None, token: str | None = None, accept: str = ""
) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(base + path, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if accept:
        request.add_header("Accept", accept)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def leases(ns: str, name: str = "") -> str:
    return f"{GROUP}/namespaces/{ns}/leases" + (f"/{name}" if name else "")


def lease(name: str, **spec) -> dict:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name}, "spec": spec}


HELD = {
    "holderIdentity": "controller-0",
    "leaseDurationSeconds": 15,
    "acquireTime": "2026-03-01T12:00:00.000000Z",
    "renewTime": "2026-03-01T12:00:02.500001Z",
    "leaseTransitions": 0,
}


def test_discovery_serves_the_coordination_group_and_its_leases(sim):
    _, groups = call(sim.url, "GET", "/apis")
    named = {g["name"]: g["preferredVersion"]["groupVersion"] for g in groups["groups"]}
    assert named["coordination.k8s.io"] == "coordination.k8s.io/v1"
    _, resources = call(sim.url, "GET", GROUP)
    (entry,) = resources["resources"]
    assert (entry["name"], entry["singularName"], entry["kind"], entry["namespaced"]) == (
        "leases",
        "lease",
        "Lease",
        True,
    )
    assert sorted(entry["verbs"]) == [
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    ]


def test_a_lease_is_created_read_listed_and_deleted_with_its_micro_times_kept(sim, namespace):
    status, created = call(sim.url, "POST", leases(namespace), lease("admission", **HELD))
    assert status == 201
    assert created["spec"] == HELD
    assert created["metadata"]["namespace"] == namespace and created["metadata"]["resourceVersion"]
    assert call(sim.url, "GET", leases(namespace, "admission"))[1]["spec"] == HELD
    _, listed = call(sim.url, "GET", leases(namespace))
    assert listed["kind"] == "LeaseList" and [i["metadata"]["name"] for i in listed["items"]] == ["admission"]
    assert call(sim.url, "DELETE", leases(namespace, "admission"))[0] == 200
    assert call(sim.url, "GET", leases(namespace, "admission"))[1]["reason"] == "NotFound"


def test_a_released_lease_keeps_its_empty_holder(sim, namespace):
    _, created = call(
        sim.url, "POST", leases(namespace), lease("released", holderIdentity="", leaseDurationSeconds=1)
    )
    assert created["spec"] == {"holderIdentity": "", "leaseDurationSeconds": 1}


@pytest.mark.parametrize(
    "written, answered",
    [
        ("2026-03-01T13:30:00.000250+01:30", "2026-03-01T12:00:00.000250Z"),
        ("2026-03-01T00:00:00.000000-05:00", "2026-03-01T05:00:00.000000Z"),
        ("2026-03-01T12:00:00,123456Z", "2026-03-01T12:00:00.123456Z"),
        ("2026-03-01T7:00:00.000000Z", "2026-03-01T07:00:00.000000Z"),
    ],
)
def test_a_micro_time_is_answered_in_utc_with_six_digits(sim, namespace, written, answered):
    name = f"t-{uuid.uuid4().hex[:6]}"
    status, created = call(sim.url, "POST", leases(namespace), lease(name, renewTime=written))
    assert status == 201, created
    assert created["spec"]["renewTime"] == answered


LAYOUT = '"2006-01-02T15:04:05.000000Z07:00"'


@pytest.mark.parametrize(
    "written, why",
    [
        ("2026-03-01T12:00:00Z", f'as {LAYOUT}: cannot parse "Z" as ".000000"'),
        ("2026-03-01T12:00:00.123Z", f'as {LAYOUT}: cannot parse ".123Z" as ".000000"'),
        ("2026-03-01T12:00:00.123456789Z", f'as {LAYOUT}: cannot parse "789Z" as "Z07:00"'),
        ("2026-03-01 12:00:00.000000Z", f'as {LAYOUT}: cannot parse " 12:00:00.000000Z" as "T"'),
        ("2026-03-01T12:00:00.000000z", f'as {LAYOUT}: cannot parse "z" as "Z07:00"'),
        ("2026-03-01T12:00:00.000000", f'as {LAYOUT}: cannot parse "" as "Z07:00"'),
        ("2026-13-01T12:00:00.000000Z", ": month out of range"),
        ("2026-02-30T12:00:00.000000Z", ": day out of range"),
        ("2026-03-01T24:00:00.000000Z", ": hour out of range"),
        ("2026-03-01T12:00:00.000000Z trailing", ': extra text: " trailing"'),
        ("yesterday", f'as {LAYOUT}: cannot parse "yesterday" as "2006"'),
    ],
)
def test_a_time_that_is_no_micro_time_is_a_400_with_gos_parse_error(sim, namespace, written, why):
    status, body = call(sim.url, "POST", leases(namespace), lease("bad", acquireTime=written))
    assert (status, body["reason"]) == (400, "BadRequest")
    assert body["message"] == (
        f'Lease in version "v1" cannot be handled as a Lease: parsing time "{written}"{" " if why.startswith("as") else ""}{why}'
    )


def test_the_micro_time_parser_reads_what_go_reads():
    assert parse("2026-03-01T12:00:00.000001+00:00").microsecond == 1
    with pytest.raises(MicroTimeError):
        parse("2026-03-01T12:00:00.00000Z")


def test_an_update_is_a_compare_and_swap_on_the_resource_version(sim, namespace):
    _, created = call(sim.url, "POST", leases(namespace), lease("cas", **HELD))
    mine = {**created, "spec": {**HELD, "renewTime": "2026-03-01T12:00:04.000000Z"}}
    status, renewed = call(sim.url, "PUT", leases(namespace, "cas"), mine)
    assert status == 200 and renewed["spec"]["renewTime"] == "2026-03-01T12:00:04.000000Z"
    assert renewed["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"]
    theirs = {**created, "spec": {**HELD, "holderIdentity": "controller-1"}}
    status, body = call(sim.url, "PUT", leases(namespace, "cas"), theirs)
    assert (status, body["reason"]) == (409, "Conflict")
    assert body["message"] == (
        'Operation cannot be fulfilled on leases.coordination.k8s.io "cas": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    assert body["details"] == {"name": "cas", "group": "coordination.k8s.io", "kind": "leases"}


def test_an_update_without_a_resource_version_is_refused_unlike_a_config_maps(sim, namespace):
    call(sim.url, "POST", leases(namespace), lease("unconditional", **HELD))
    status, body = call(sim.url, "PUT", leases(namespace, "unconditional"), lease("unconditional", **HELD))
    assert (status, body["reason"]) == (422, "Invalid")
    assert body["message"] == (
        'leases.coordination.k8s.io "unconditional" is invalid: metadata.resourceVersion: Invalid value: 0: '
        "must be specified for an update"
    )
    assert body["details"]["kind"] == "leases"
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": "Invalid value: 0: must be specified for an update",
            "field": "metadata.resourceVersion",
        }
    ]


def test_a_put_of_a_missing_lease_creates_it(sim, namespace):
    status, created = call(sim.url, "PUT", leases(namespace, "put-created"), lease("put-created", **HELD))
    assert status == 201 and created["spec"] == HELD and created["metadata"]["uid"]
    assert call(sim.url, "GET", leases(namespace, "put-created"))[0] == 200


@pytest.mark.parametrize(
    "spec, causes",
    [
        (
            {"leaseDurationSeconds": 0},
            [("spec.leaseDurationSeconds", "FieldValueInvalid", "Invalid value: 0: must be greater than 0")],
        ),
        (
            {"leaseDurationSeconds": -3},
            [("spec.leaseDurationSeconds", "FieldValueInvalid", "Invalid value: -3: must be greater than 0")],
        ),
        (
            {"leaseTransitions": -1},
            [
                (
                    "spec.leaseTransitions",
                    "FieldValueInvalid",
                    "Invalid value: -1: must be greater than or equal to 0",
                )
            ],
        ),
    ],
)
def test_the_spec_is_validated_as_validate_lease_spec_does(sim, namespace, spec, causes):
    status, body = call(sim.url, "POST", leases(namespace), lease("invalid", **spec))
    assert (status, body["reason"]) == (422, "Invalid")
    assert [(c["field"], c["reason"], c["message"]) for c in body["details"]["causes"]] == causes
    assert body["details"]["group"] == "coordination.k8s.io" and body["details"]["kind"] == "Lease"


@pytest.mark.parametrize(
    "spec",
    [
        {"strategy": "OldestEmulationVersion", "preferredHolder": "controller-1"},
        {"preferredHolder": "controller-1"},
        {"strategy": "Youngest"},
    ],
)
def test_coordinated_election_fields_are_dropped_as_with_its_feature_gate_off(sim, namespace, spec):
    name = f"c-{uuid.uuid4().hex[:6]}"
    status, created = call(sim.url, "POST", leases(namespace), lease(name, holderIdentity="a", **spec))
    assert (status, created["spec"]) == (201, {"holderIdentity": "a"})
    status, updated = call(
        sim.url, "PUT", leases(namespace, name), {**created, "spec": {"holderIdentity": "b", **spec}}
    )
    assert (status, updated["spec"]) == (200, {"holderIdentity": "b"})


def test_a_watch_sees_a_lease_added_renewed_and_deleted(sim, namespace):
    _, created = call(sim.url, "POST", leases(namespace), lease("watched", **HELD))
    since = created["metadata"]["resourceVersion"]
    call(sim.url, "PUT", leases(namespace, "watched"), {**created, "spec": {**HELD, "leaseTransitions": 1}})
    call(sim.url, "DELETE", leases(namespace, "watched"))
    url = f"{sim.url}{leases(namespace)}?watch=1&resourceVersion={since}&timeoutSeconds=1"
    with urllib.request.urlopen(url, timeout=10) as response:
        after = [json.loads(line) for line in response]
    assert [(e["type"], e["object"]["spec"]["leaseTransitions"]) for e in after] == [
        ("MODIFIED", 1),
        ("DELETED", 1),
    ]


def test_kubectl_get_leases_shows_the_holder(sim, namespace):
    call(sim.url, "POST", leases(namespace), lease("shown", **HELD))
    _, table = call(sim.url, "GET", leases(namespace), accept=TABLE)
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Holder", "Age"]
    assert [row["cells"][:2] for row in table["rows"]] == [["shown", "controller-0"]]


@pytest.fixture(scope="module")
def with_identities():
    """A cluster that knows two callers apart by their tokens, and authorizes them by RBAC."""
    config = ClusterConfig(
        nodes=1,
        token="admin-token",
        rbac=True,
        identities=(
            Identity.service_account("airflow-jobs-system", "airflow-jobs-controller", "controller-token"),
            Identity.service_account("airflow", "airflow-worker", "worker-token"),
        ),
    )
    with SimCluster(config, controllers=False) as cluster:
        cluster.store.create("namespaces", {"metadata": {"name": "airflow-jobs-system"}})
        cluster.store.create(
            "roles",
            {
                "metadata": {"name": "leader-election"},
                "rules": [
                    {
                        "apiGroups": ["coordination.k8s.io"],
                        "resources": ["leases"],
                        "verbs": ["get", "create", "update"],
                    }
                ],
            },
            "airflow-jobs-system",
        )
        cluster.store.create(
            "rolebindings",
            {
                "metadata": {"name": "leader-election"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "leader-election",
                },
                "subjects": [
                    {
                        "kind": "ServiceAccount",
                        "name": "airflow-jobs-controller",
                        "namespace": "airflow-jobs-system",
                    }
                ],
            },
            "airflow-jobs-system",
        )
        yield cluster


def test_rbac_grants_and_refuses_leases_like_any_other_resource(with_identities):
    sim = with_identities
    path = leases("airflow-jobs-system")
    assert call(sim.url, "POST", path, lease("admission", **HELD), token="controller-token")[0] == 201
    assert call(sim.url, "GET", f"{path}/admission", token="controller-token")[0] == 200
    status, body = call(sim.url, "GET", f"{path}/admission", token="worker-token")
    assert status == 403
    assert body["message"] == (
        'leases.coordination.k8s.io "admission" is forbidden: User "system:serviceaccount:airflow:airflow-worker" '
        'cannot get resource "leases" in API group "coordination.k8s.io" in the namespace "airflow-jobs-system"'
    )
    # The role grants no delete.
    assert call(sim.url, "DELETE", f"{path}/admission", token="controller-token")[0] == 403


def test_an_injected_error_may_fail_one_callers_requests_only(with_identities):
    sim = with_identities
    path = leases("airflow-jobs-system")
    call(sim.url, "POST", path, lease("faulty", **HELD), token="admin-token")
    sim.faults.add_error(
        rate=1.0,
        code=503,
        resource="leases",
        user="system:serviceaccount:airflow-jobs-system:airflow-jobs-controller",
    )
    try:
        assert call(sim.url, "GET", f"{path}/faulty", token="controller-token")[0] == 503
        assert call(sim.url, "GET", f"{path}/faulty", token="admin-token")[0] == 200
    finally:
        sim.faults.clear()
    assert call(sim.url, "GET", f"{path}/faulty", token="controller-token")[0] == 200
