"""Request counters, fault injection and the admin endpoint of the simulated API server."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest
from airflow_jobs_sim import ClusterConfig, SimCluster
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException


@pytest.fixture(autouse=True)
def no_faults_left(sim):
    yield
    sim.faults.clear()


def http(
    method: str, url: str, body: dict | None = None, headers: dict | None = None
) -> tuple[int, dict, dict]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, dict(resp.headers), json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), json.loads(exc.read() or b"{}")


def test_counters_count_requests_per_verb_and_resource(sim, sync_client, namespace, manifests):
    core = client.CoreV1Api(sync_client)
    before = sim.counters()
    core.create_namespaced_pod(namespace, manifests.pod("counted", nodeName="sim-node-0"))
    sim.logs.append(namespace, "counted", "main", "hello")
    core.read_namespaced_pod("counted", namespace)
    core.list_namespaced_pod(namespace)
    core.list_namespaced_pod(namespace)
    core.patch_namespaced_pod_status("counted", namespace, {"status": {"phase": "Running"}})
    core.read_namespaced_pod_log("counted", namespace, _preload_content=False)
    list(watch.Watch().stream(core.list_namespaced_pod, namespace, timeout_seconds=1))
    after = sim.counters()

    def delta(key):
        return after.get(key, 0) - before.get(key, 0)

    assert delta(("create", "pods")) == 1
    assert delta(("get", "pods")) == 1
    assert delta(("list", "pods")) == 2
    assert delta(("patch", "pods/status")) == 1
    assert delta(("get", "pods/log")) == 1
    assert delta(("watch", "pods")) == 1


@pytest.mark.parametrize(
    ("code", "reason"), [(429, "TooManyRequests"), (500, "InternalError"), (503, "ServiceUnavailable")]
)
def test_injected_errors_are_status_bodies_for_the_chosen_verb_and_resource(sim, namespace, code, reason):
    sim.faults.add_error(rate=1.0, code=code, verb="list", resource="configmaps", retry_after=2)
    status, headers, body = http("GET", f"{sim.url}/api/v1/namespaces/{namespace}/configmaps")
    assert (status, body["kind"], body["reason"], body["code"]) == (code, "Status", reason, code)
    if code in (429, 503):
        assert headers["Retry-After"] == "2"
    assert http("GET", f"{sim.url}/api/v1/namespaces/{namespace}/pods")[0] == 200
    assert http("GET", f"{sim.url}/api/v1/namespaces/{namespace}/configmaps/nothing")[0] == 404
    sim.faults.clear()
    assert http("GET", f"{sim.url}/api/v1/namespaces/{namespace}/configmaps")[0] == 200


def test_error_rate_fails_a_share_of_requests(sim, namespace):
    sim.faults.add_error(rate=0.5, code=500, resource="configmaps")
    codes = [http("GET", f"{sim.url}/api/v1/namespaces/{namespace}/configmaps")[0] for _ in range(60)]
    assert 0 < codes.count(500) < 60
    assert set(codes) == {200, 500}


def test_sync_client_sees_injected_429_as_api_exception(sim, sync_client, namespace):
    sim.faults.add_error(rate=1.0, code=429, verb="create", resource="jobs")
    with pytest.raises(ApiException) as exc:
        client.BatchV1Api(sync_client).create_namespaced_job(
            namespace, {"metadata": {"name": "x"}, "spec": {}}
        )
    assert exc.value.status == 429
    assert exc.value.headers["Retry-After"] == "1"


def test_added_latency_delays_matching_requests(sim, namespace):
    sim.faults.set_latency(0.3, verb="get", resource="namespaces")
    started = time.monotonic()
    assert http("GET", f"{sim.url}/api/v1/namespaces/{namespace}")[0] == 200
    assert time.monotonic() - started >= 0.3


def test_periodic_watch_drop_ends_streams_without_timeout(sim, sync_client, namespace):
    core = client.CoreV1Api(sync_client)
    sim.faults.drop_watches_every(0.3)
    resp = core.list_namespaced_pod(namespace, watch=True, _preload_content=False)
    assert resp.read() == b""  # the server closed the stream; no timeoutSeconds was given
    resp.release_conn()


def test_admin_endpoint_sets_and_clears_faults_and_reports_counters(sim, namespace):
    status, _, snapshot = http(
        "POST",
        f"{sim.url}/_sim/faults",
        {"errors": [{"rate": 1, "code": 503, "verb": "get", "resource": "pods"}], "force_gone": 1},
    )
    assert status == 200 and snapshot["errors"][0]["code"] == 503 and snapshot["force_gone"] == 1
    assert http("GET", f"{sim.url}/api/v1/namespaces/{namespace}/pods/x")[0] == 503
    with urllib.request.urlopen(
        f"{sim.url}/api/v1/namespaces/{namespace}/pods?watch=1&resourceVersion=1", timeout=10
    ) as resp:
        event = json.loads(resp.readline())
    assert event["type"] == "ERROR" and event["object"]["code"] == 410
    assert event["object"]["message"].startswith("too old resource version: 1 (")
    assert http("DELETE", f"{sim.url}/_sim/faults")[2]["errors"] == []
    counters = http("GET", f"{sim.url}/_sim/counters")[2]["counters"]
    assert {"verb": "watch", "resource": "pods"} in [
        {k: c[k] for k in ("verb", "resource")} for c in counters
    ]


def test_node_loss_through_admin_endpoint_needs_controllers(sim):
    status, _, body = http("POST", f"{sim.url}/_sim/nodes/sim-node-0/lose")
    assert status == 503 and body["kind"] == "Status"
    assert http("POST", f"{sim.url}/_sim/nodes/no-such-node/lose")[0] == 404


def test_bearer_token_is_required_when_configured(tmp_path):
    from kubernetes import config

    with SimCluster(
        ClusterConfig(nodes=1, token="s3cret"), kubeconfig_path=str(tmp_path / "kc.yaml"), controllers=False
    ) as cluster:
        status, _, body = http("GET", f"{cluster.url}/api/v1/namespaces")
        assert (status, body["reason"]) == (401, "Unauthorized")
        api = config.new_client_from_config(config_file=cluster.kubeconfig_path)
        try:
            names = [n.metadata.name for n in client.CoreV1Api(api).list_namespace().items]
        finally:
            api.close()
        assert "default" in names


def test_admin_api_sits_behind_the_token_too(tmp_path):
    with SimCluster(
        ClusterConfig(nodes=1, token="s3cret"), kubeconfig_path=str(tmp_path / "kc.yaml"), controllers=False
    ) as cluster:
        status, _, body = http("POST", f"{cluster.url}/_sim/faults", {"error_rate": 1.0})
        assert (status, body["reason"]) == (401, "Unauthorized")
        assert http("GET", f"{cluster.url}/_sim/counters")[0] == 401
        good = {"Authorization": "Bearer s3cret"}
        assert http("GET", f"{cluster.url}/_sim/counters", headers=good)[0] == 200
        with urllib.request.urlopen(f"{cluster.url}/healthz", timeout=10) as resp:
            assert resp.status == 200  # health probes stay anonymous, as on kube-apiserver
