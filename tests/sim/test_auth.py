"""Bearer tokens that expire on the simulated API server, and the product's client living through them.

The server half (``sim/auth.py``) is checked as kube-apiserver behaves: a 401 Status for a missing,
forged or expired token. The client half is the product's ``KubeClient`` with the real exec plugin
(``python -m airflow_jobs_sim.mint_token``), a service-account token file rotated on disk, and an
identity revoked and restored under a shared watch.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import aiohttp
import pytest
from airflow_jobs_sim import ClusterConfig, SimCluster, auth
from airflow_jobs_sim import kubeconfig as kubeconfig_file
from airflow_jobs_sim.mint_token import main as mint_main
from kubernetes_asyncio import client as k8s_client

from airflow_jobs_plugin.cluster.kube import (
    PODS,
    Credentials,
    KubeClient,
    KubeError,
    token_file_source,
)
from airflow_jobs_plugin.cluster.watch import Scope, SharedWatch

SECRET = "sim-signing-secret"
TTL = 2.0


async def eventually(check, timeout: float = 30.0) -> None:
    """Poll ``check`` until it holds (an outcome, not a speed: the timeout only ends a hung test)."""
    for _ in range(int(timeout / 0.05)):
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{check} never held")


# --- the server's rule ---


def test_a_static_token_is_compared_as_is():
    config = ClusterConfig(token="abc")
    assert auth.accepts(config, "Bearer abc", time.time())
    assert not auth.accepts(config, "Bearer abd", time.time())
    assert not auth.accepts(config, "", time.time())


def test_a_minted_token_is_accepted_until_it_expires():
    config = ClusterConfig(token=SECRET, token_ttl=10)
    token, expires = auth.mint(SECRET, 10, now=1000.0)
    assert expires == 1010
    assert auth.accepts(config, f"Bearer {token}", 1000.0)
    assert auth.accepts(config, f"Bearer {token}", 1009.9)
    assert not auth.accepts(config, f"Bearer {token}", 1010.0)


def test_a_token_signed_with_another_secret_or_tampered_with_is_refused():
    config = ClusterConfig(token=SECRET, token_ttl=10)
    forged, _ = auth.mint("another-secret", 10, now=1000.0)
    assert not auth.accepts(config, f"Bearer {forged}", 1000.0)
    token, expires = auth.mint(SECRET, 10, now=1000.0)
    stretched = token.replace(f".{expires}.", f".{expires + 3600}.")
    assert not auth.accepts(config, f"Bearer {stretched}", 1000.0)


def test_with_expiring_tokens_the_secret_itself_is_no_token():
    assert not auth.accepts(ClusterConfig(token=SECRET, token_ttl=10), f"Bearer {SECRET}", time.time())


def test_a_token_claiming_to_live_longer_than_the_servers_ttl_is_refused():
    long_lived, _ = auth.mint(SECRET, 3600, now=1000.0)
    assert not auth.accepts(ClusterConfig(token=SECRET, token_ttl=10), f"Bearer {long_lived}", 1000.0)


def test_the_exec_plugin_prints_a_v1_exec_credential_with_its_expiry(monkeypatch, capsys):
    monkeypatch.setenv(auth.SECRET_ENV, SECRET)
    monkeypatch.setenv("KUBERNETES_EXEC_INFO", json.dumps({"apiVersion": auth.EXEC_API_VERSION}))
    assert mint_main(["--ttl", "10"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["apiVersion"] == "client.authentication.k8s.io/v1" and doc["kind"] == "ExecCredential"
    assert doc["status"]["expirationTimestamp"].endswith("Z")
    assert auth.accepts(
        ClusterConfig(token=SECRET, token_ttl=10), f"Bearer {doc['status']['token']}", time.time()
    )


def test_the_exec_plugin_refuses_an_exec_credential_version_it_does_not_speak(monkeypatch, capsys):
    monkeypatch.setenv(auth.SECRET_ENV, SECRET)
    monkeypatch.setenv(
        "KUBERNETES_EXEC_INFO", json.dumps({"apiVersion": "client.authentication.k8s.io/v1alpha1"})
    )
    assert mint_main(["--ttl", "10"]) == 1
    assert "only client.authentication.k8s.io/v1" in capsys.readouterr().err


# --- a live server ---


@pytest.fixture(scope="module")
def expiring():
    """A cluster whose tokens live two seconds; its kubeconfig runs the exec plugin."""
    with SimCluster(ClusterConfig(token=SECRET, token_ttl=TTL, time_scale=0.01), controllers=False) as sim:
        yield sim


def fresh_namespace(sim) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    sim.store.create("namespaces", {"metadata": {"name": name}})
    return name


async def test_an_anonymous_request_gets_the_api_servers_401_status(expiring):
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{expiring.url}/api/v1/namespaces/default/pods") as response:
            assert response.status == 401
            body = await response.json()
    assert body["kind"] == "Status" and body["reason"] == "Unauthorized" and body["code"] == 401


@pytest.mark.slow
async def test_the_client_renews_through_several_expiries_without_a_refusal(expiring):
    client = await KubeClient.from_kubeconfig(expiring.kubeconfig_path)
    try:
        assert client.credentials is not None
        first = client.credentials.credential
        # Requests until the third token is in use: every one answered, none refused.
        while client.credentials.credential.generation < 3:
            await client.list(PODS, "default")
            await asyncio.sleep(0.1)
        assert client.credentials.credential.expires_at > first.expires_at
        assert client.credentials.renewals == 3
    finally:
        await client.close()


async def test_a_service_account_token_rotated_on_disk_is_reread_after_a_refusal(expiring, tmp_path):
    token_file = tmp_path / "token"

    def kubelet_projects() -> None:
        token, _ = auth.mint(SECRET, TTL, time.time())
        token_file.write_text(token)

    kubelet_projects()
    configuration = k8s_client.Configuration(host=expiring.url)
    creds = await Credentials.start("in-cluster service account", token_file_source(str(token_file)))
    client = KubeClient(k8s_client.ApiClient(configuration=configuration), creds)
    try:
        await client.list(PODS, "default")
        first = creds.credential
        # The token in memory expires; the kubelet has put a new one on disk meanwhile.
        await eventually(lambda: time.time() > first.obtained_at.timestamp() + TTL + 0.5)
        kubelet_projects()
        await client.list(PODS, "default")
        assert creds.renewals == 1 and creds.credential.header != first.header
    finally:
        await client.close()


@pytest.mark.slow
async def test_a_revoked_identity_is_an_error_naming_the_connection_and_the_watch_resumes_when_restored(
    expiring, tmp_path
):
    namespace = fresh_namespace(expiring)
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET)
    kubeconfig = kubeconfig_file.write_user_kubeconfig(
        str(tmp_path / "kubeconfig"), expiring.url, auth.exec_user(TTL, secret_file=str(secret_file))
    )
    client = await KubeClient.from_kubeconfig(kubeconfig)
    watch = SharedWatch(
        client,
        namespace,
        resources=(PODS,),
        scope=Scope(job_labels=None, pod_labels=None),
        watch_timeout=1,
        max_backoff=0.5,
    )
    watch.start()
    try:
        assert await watch.wait_synced(timeout=30)
        # The cloud identity behind the exec plugin loses access: its new tokens are refused.
        secret_file.write_text("revoked")
        deadline = time.time() + 30
        with pytest.raises(KubeError) as caught:
            while time.time() < deadline:
                await client.list(PODS, namespace)
                await asyncio.sleep(0.2)
        assert caught.value.status == 401
        assert f"kubeconfig {kubeconfig!r}" in caught.value.message
        assert "refused freshly obtained" in caught.value.message
        await eventually(lambda: watch.refusals > 0)
        # Access restored: the watch resumes by itself and sees what happened meanwhile.
        expiring.store.create(
            "pods",
            {
                "metadata": {"name": "made-while-revoked", "namespace": namespace},
                "spec": {"containers": [{"name": "main", "image": "x"}]},
            },
        )
        secret_file.write_text(SECRET)
        await eventually(lambda: watch.get(PODS, "made-while-revoked") is not None)
        await client.list(PODS, namespace)
    finally:
        await watch.stop()
        await client.close()


@pytest.mark.slow
def test_airflow_jobs_sim_with_a_token_ttl_writes_a_kubeconfig_whose_exec_plugin_other_clients_run(tmp_path):
    import signal
    import subprocess
    import sys
    import urllib.error
    import urllib.request

    from kubernetes import client as sync_client
    from kubernetes import config as sync_config

    kubeconfig = tmp_path / "sim.yaml"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "airflow_jobs_sim",
            "--token-ttl",
            "5",
            "--kubeconfig",
            str(kubeconfig),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = proc.stdout.readline().rsplit(" ", 1)[1].strip()
        proc.stdout.readline()
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{url}/api/v1/nodes", timeout=10)
        assert refused.value.code == 401
        user = json.loads(kubeconfig.read_text())["users"][0]["user"]
        assert user["exec"]["apiVersion"] == "client.authentication.k8s.io/v1"
        assert "token" not in user  # the signing secret is never a usable token
        # The official synchronous client runs the same exec plugin.
        api = sync_config.new_client_from_config(config_file=str(kubeconfig))
        try:
            nodes = sync_client.CoreV1Api(api).list_node().items
        finally:
            api.close()
        assert len(nodes) == 2
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0
