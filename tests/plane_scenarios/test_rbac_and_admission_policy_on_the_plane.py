"""The RBAC split (helm-values/rbac.yaml) and the ValidatingAdmissionPolicy (helm-values/admission-policy.yaml)
as shipped, applied to a real control plane and enforced by the real kube-apiserver for the real
service-account identities of a deployment (``system:serviceaccount:airflow:airflow-worker``, ...).

Each identity's kubeconfig carries a token the API server issued for that service account (the
TokenRequest API, what a pod's projected token is), so every request is authenticated, authorized and
admitted exactly as it would be from the component's pod. The simulator's version of these checks is
tests/reliability/test_rbac_least_privilege.py (its RBAC and policies are sim/rbac.py and
sim/admission_policy.py); this module checks the same rules against the real API server.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from task_doubles import task_context

from airflow_jobs_plugin.airflow.operators import JobOperator
from airflow_jobs_plugin.cluster.kube import JOBS, KubeClient, KubeError
from airflow_jobs_plugin.jobs.kinds.mpi import MPIJOBS
from airflow_jobs_plugin.jobs.manifests import build_manifest
from airflow_jobs_plugin.jobs.spec import TaskIdentity, validate

from .plane import (
    KINDS,
    create_or_replace,
    defer,
    ensure_namespace,
    follow,
    kube,
    on_cluster,
    scenario,
    shipped,
)

pytestmark = [pytest.mark.real_cluster, pytest.mark.timeout(900)]

# The namespace and service accounts the shipped bindings name (helm-values/values.yaml's release).
NAMESPACE = "airflow"
ACCOUNTS = {"worker": "airflow-worker", "triggerer": "airflow-triggerer", "api-server": "airflow-api-server"}
POLICY_CONFIGMAP = "airflow-jobs-quota-policy"
RUN_ID = f"manual__{datetime.now(timezone.utc).isoformat()}"
QUICK = scenario(main={"run": 1, "logs": ["epoch 1"]})


@pytest.fixture(scope="module")
def identities(cluster, tmp_path_factory) -> dict[str, str]:
    """Apply the shipped RBAC and policies; a kubeconfig per component, holding its account's token."""
    if getattr(cluster, "simulated", True) is not False:
        pytest.skip(
            "the real API server's RBAC and admission: on the simulator, tests/reliability/"
            "test_rbac_least_privilege.py checks the same rules"
        )
    admin = yaml.safe_load(Path(cluster.kubeconfig_path).read_text())
    folder = tmp_path_factory.mktemp("identities")

    async def set_up(client: KubeClient) -> dict[str, dict]:
        await ensure_namespace(client, NAMESPACE)
        for account in ACCOUNTS.values():
            await create_or_replace(
                client,
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}},
                NAMESPACE,
            )
        shipped_docs = shipped("rbac.yaml") + shipped("pod-security.yaml") + shipped("quota-policy.yaml")
        for doc in shipped_docs + shipped("admission-policy.yaml"):
            await create_or_replace(client, doc, NAMESPACE)
        configs = {}
        for component, account in ACCOUNTS.items():
            token = await client._request(
                "POST",
                f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{account}/token",
                body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
            )
            config = {
                **admin,
                "users": [{"name": account, "user": {"token": token["status"]["token"]}}],
                "contexts": [
                    {"name": component, "context": {"cluster": admin["clusters"][0]["name"], "user": account}}
                ],
                "current-context": component,
            }
            configs[component] = config
        return configs

    paths = {}
    for component, config in on_cluster(cluster.kubeconfig_path, set_up).items():
        paths[component] = str(folder / f"{component}.kubeconfig")
        Path(paths[component]).write_text(yaml.safe_dump(config))
    until_the_policy_is_in_force(paths["worker"], cluster.kubeconfig_path)
    yield paths

    async def tear_down(client: KubeClient) -> None:
        for doc in shipped("admission-policy.yaml"):
            await client.delete(KINDS[doc["kind"]], "", doc["metadata"]["name"])

    on_cluster(cluster.kubeconfig_path, tear_down)


def manifest(kind: str = "Job", **args) -> dict:
    """The product's own manifest of a fresh task (suspended, labelled), as JobOperator builds it."""
    values = {"image": "registry.example/trainer:1", "group": "vision", "user": "alice", "gpus": 1}
    values.update(args)
    if kind == "MPIJob":
        values["workers"] = 2
    identity = TaskIdentity("plane_rbac", f"probe_{kind.lower()}", f"{RUN_ID}-{next(_serial)}", -1, 1)
    return build_manifest(
        validate(**values),
        name=identity.job_name(1),
        task=identity,
        attempt=1,
        queued_at=datetime.now(timezone.utc),
    )


_serial = iter(range(1, 1_000_000))


def unsuspended(body: dict) -> dict:
    if body["kind"] == "MPIJob":
        body["spec"]["runPolicy"]["suspend"] = False
    else:
        body["spec"]["suspend"] = False
    return body


def _skips_the_pool() -> dict:
    body = unsuspended(manifest())
    body["spec"]["parallelism"] = 0
    return body


def _mounts_a_token() -> dict:
    body = manifest()  # suspended for the pool: it runs no pod, should it be let through
    body["spec"]["template"]["spec"]["automountServiceAccountToken"] = True
    return body


def _shares_the_hosts_network() -> dict:
    body = manifest()  # suspended for the pool: it runs no pod, should it be let through
    body["spec"]["template"]["spec"]["hostNetwork"] = True
    return body


# One probe per policy the scenarios rely on, each refused by that policy alone once it is in force.
# The API server loads each policy, its binding and its parameter through informers of their own
# (k8s.io/apiserver v0.36 pkg/admission/plugin/policy/generic), so one policy refusing says nothing of
# another: each is probed until it refuses.
POLICY_PROBES = {
    "airflow-jobs-quota-admission": _skips_the_pool,
    "airflow-jobs-job-accounts": _mounts_a_token,
    "airflow-jobs-pod-security": _shares_the_hosts_network,
}


def until_the_policy_is_in_force(worker: str, admin: str) -> None:
    """Probe, as the worker, with a job that only one policy refuses (and runs no pod, should it be let
    through), until every policy the scenarios rely on refuses its probe."""

    async def go() -> None:
        deadline = asyncio.get_running_loop().time() + 120
        async with kube(worker) as as_worker, kube(admin) as as_admin:
            for policy, probe in POLICY_PROBES.items():
                while True:
                    body = probe()
                    try:
                        await as_worker.create(JOBS, NAMESPACE, body)
                    except KubeError as exc:
                        if exc.status == 403 and f"ValidatingAdmissionPolicy '{policy}'" in str(exc):
                            break
                        raise
                    await as_admin.delete(JOBS, NAMESPACE, body["metadata"]["name"])
                    assert asyncio.get_running_loop().time() < deadline, f"{policy} never came into force"
                    await asyncio.sleep(1)

    asyncio.run(go())


def as_identity(kubeconfig: str, call) -> KubeError | dict:
    """What the API server answers ``call(client)`` made as that identity: the object, or the refusal."""

    async def go(client: KubeClient) -> KubeError | dict:
        try:
            return await call(client)
        except KubeError as exc:
            return exc

    return on_cluster(kubeconfig, go)


@pytest.mark.parametrize("kind", ["Job", "MPIJob"])
def test_a_workers_unsuspended_job_is_refused_by_the_api_server_naming_the_rule(identities, kind):
    body = unsuspended(manifest(kind))
    resource = MPIJOBS if kind == "MPIJob" else JOBS

    refused = as_identity(identities["worker"], lambda c: c.create(resource, NAMESPACE, body))

    assert isinstance(refused, KubeError) and refused.status == 403, refused
    assert "ValidatingAdmissionPolicy 'airflow-jobs-quota-admission'" in str(refused), refused
    assert "airflow-jobs rule suspended-submission: a job must be created suspended" in str(refused), refused


def test_a_workers_job_without_the_products_labels_is_refused_naming_the_rule(identities):
    body = manifest()
    del body["metadata"]["labels"]["airflow-jobs.io/group"]

    refused = as_identity(identities["worker"], lambda c: c.create(JOBS, NAMESPACE, body))

    assert isinstance(refused, KubeError) and refused.status == 403, refused
    assert "airflow-jobs rule suspended-submission: a job must carry the product's labels" in str(refused)


def test_a_worker_may_not_unsuspend_a_job_and_the_api_server_may_not_either(identities, cluster):
    name = as_identity(identities["worker"], lambda c: c.create(JOBS, NAMESPACE, manifest()))["metadata"][
        "name"
    ]
    start = {"spec": {"suspend": False}}

    by_worker = as_identity(identities["worker"], lambda c: c.merge_patch(JOBS, NAMESPACE, name, start))
    by_api_server = as_identity(
        identities["api-server"], lambda c: c.merge_patch(JOBS, NAMESPACE, name, start)
    )

    # RBAC gives the worker no patch at all; the api-server may patch (to cancel), and the policy refuses
    # the unsuspend, naming the rule.
    assert isinstance(by_worker, KubeError) and by_worker.status == 403, by_worker
    assert f'User "system:serviceaccount:{NAMESPACE}:airflow-worker" cannot patch resource "jobs"' in str(
        by_worker
    )
    assert isinstance(by_api_server, KubeError) and by_api_server.status == 403, by_api_server
    assert "airflow-jobs rule admission-by-triggerer" in str(by_api_server), by_api_server
    job = as_identity(cluster.kubeconfig_path, lambda c: c.get(JOBS, NAMESPACE, name))
    assert job["spec"]["suspend"] is True


@pytest.mark.parametrize("cheat", ["airflow-triggerer", "token-of-default"])
def test_a_workers_job_whose_pods_would_carry_a_token_is_refused_naming_the_rule(identities, cheat):
    """Rule job-accounts, its parameter the ConfigMap airflow-jobs-job-accounts of rbac.yaml: a raw
    create by the worker identity (a DAG's own code) may not run its pods as an Airflow component, nor
    as the namespace's default account with its token mounted."""
    body = manifest()
    pod = body["spec"]["template"]["spec"]
    if cheat == "airflow-triggerer":
        pod["serviceAccountName"] = "airflow-triggerer"
    else:
        pod["automountServiceAccountToken"] = True

    refused = as_identity(identities["worker"], lambda c: c.create(JOBS, NAMESPACE, body))

    assert isinstance(refused, KubeError) and refused.status == 403, refused
    assert "ValidatingAdmissionPolicy 'airflow-jobs-job-accounts'" in str(refused), refused
    assert "airflow-jobs rule job-accounts" in str(refused), refused


def test_the_api_server_stops_resumes_and_cancels_but_changes_nothing_else(identities):
    """Rule user-actions-only: the api-server's identity may write what a stop, a resume and a cancel
    write (actions.py, run here as that identity), and not a queued MPIJob's workers, its Kueue queue,
    its priority or its group."""
    from airflow_jobs_plugin.jobs import actions

    created = as_identity(identities["worker"], lambda c: c.create(MPIJOBS, NAMESPACE, manifest("MPIJob")))
    name = created["metadata"]["name"]
    cheats = {
        "more workers": {"spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 8}}}},
        "more slots": {"spec": {"slotsPerWorker": 64}},
        "another queue": {"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "vip"}}},
        "another priority": {"metadata": {"annotations": {"airflow-jobs.io/priority": "1000"}}},
        "another group": {"metadata": {"labels": {"airflow-jobs.io/group": "llm"}}},
    }
    for cheat, patch in cheats.items():
        refused = as_identity(
            identities["api-server"], lambda c, p=patch: c.merge_patch(MPIJOBS, NAMESPACE, name, p)
        )
        assert isinstance(refused, KubeError) and refused.status == 403, (cheat, refused)
        assert "airflow-jobs rule" in str(refused), (cheat, refused)

    async def act(client: KubeClient) -> list[str]:
        job = await client.get(MPIJOBS, NAMESPACE, name)
        stopped = await actions.stop(client, NAMESPACE, job, "alice")
        resumed = await actions.resume(
            client, NAMESPACE, await client.get(MPIJOBS, NAMESPACE, name), "alice", NAMESPACE
        )
        cancelled = await actions.cancel(
            client, NAMESPACE, await client.get(MPIJOBS, NAMESPACE, name), "alice"
        )
        return [stopped.message, resumed.message, cancelled.message]

    said = on_cluster(identities["api-server"], act)
    assert "stopped" in said[0] and "resumed" in said[1] and "cancel" in said[2], said
    job = as_identity(identities["api-server"], lambda c: c.get_or_none(MPIJOBS, NAMESPACE, name))
    assert job is None or job["metadata"]["annotations"].get("airflow-jobs.io/verdict") == "Cancelled", job


def test_a_job_another_dag_planted_under_a_tasks_name_is_never_adopted(identities, monkeypatch):
    """Job names and task keys are predictable, and every DAG submits with the worker's token: a job
    planted under ``victim.train``'s name passes every admission rule, so the victim's try itself must
    refuse it, naming it, and leave it alone."""
    from airflow.sdk.exceptions import AirflowFailException

    connection = {"conn_type": "kubernetes", "extra": {"kube_config_path": identities["worker"]}}
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(connection))
    run_id = f"{RUN_ID}-planted-{next(_serial)}"
    victim = TaskIdentity("victim", "train", run_id, -1, 1)
    evil = validate(image="mallory/evil:1", group="vision", user="mallory", gpus=1, namespace=NAMESPACE)
    body = build_manifest(
        evil, name=victim.job_name(1), task=victim, attempt=1, queued_at=datetime.now(timezone.utc)
    )
    planted = as_identity(identities["worker"], lambda c: c.create(JOBS, NAMESPACE, body))
    assert not isinstance(planted, KubeError), planted
    op = JobOperator(
        task_id="train",
        image="registry.example/trainer:1",
        group="vision",
        user="alice",
        gpus=1,
        namespace=NAMESPACE,
    )

    with pytest.raises(AirflowFailException, match="not the job this task would submit") as info:
        op.execute(task_context("victim", "train", run_id=run_id))

    assert f"Job {NAMESPACE}/{victim.job_name(1)}" in str(info.value)
    still = as_identity(identities["worker"], lambda c: c.get(JOBS, NAMESPACE, victim.job_name(1)))
    assert still["metadata"]["uid"] == planted["metadata"]["uid"]


def test_an_honest_submission_is_accepted_and_the_triggerers_admission_unsuspends_it(identities, monkeypatch):
    def run_as(component: str) -> None:
        connection = {"conn_type": "kubernetes", "extra": {"kube_config_path": identities[component]}}
        monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(connection))

    op = JobOperator(
        task_id="honest",
        image="registry.example/trainer:1",
        group="vision",
        user="alice",
        gpus=1,
        namespace=NAMESPACE,
        quota_configmap=POLICY_CONFIGMAP,
        job_annotations=QUICK,
    )
    run_as("worker")
    trigger = defer(op, task_context("plane_rbac", "honest", run_id=RUN_ID))
    run_as("triggerer")

    event = follow(trigger)

    assert event["status"] == "success" and event["state"] == "SUCCEEDED", event
    job = as_identity(identities["api-server"], lambda c: c.get(JOBS, NAMESPACE, trigger.job_name))
    assert job["metadata"]["annotations"].get("airflow-jobs.io/admitted-at"), job["metadata"]


def test_a_kubeconfig_that_impersonates_is_refused_rather_than_run_as_its_admin(cluster, tmp_path):
    """kubectl would act as the account a kubeconfig's user impersonates (``as:``); the product's client
    cannot, and without the refusal every request would silently go out with the admin's own rights,
    past the RBAC split and the admission policy meant for that account."""
    config = yaml.safe_load(Path(cluster.kubeconfig_path).read_text())
    for user in config["users"]:
        user["user"]["as"] = f"system:serviceaccount:{NAMESPACE}:airflow-worker"
    path = tmp_path / "impersonating.kubeconfig"
    path.write_text(yaml.safe_dump(config))

    async def connect() -> KubeError | None:
        try:
            client = await KubeClient.from_kubeconfig(str(path))
        except KubeError as exc:
            return exc
        await client.close()
        return None

    refused = asyncio.run(connect())

    assert refused is not None, "a client was built that would act as the admin"
    assert "its user impersonates (as)" in str(refused) and "kubectl create token" in str(refused), refused


def test_a_group_added_to_the_policy_but_not_to_the_role_waits_naming_the_missing_rbac_entry(
    identities, cluster, monkeypatch
):
    """RBAC cannot grant a ConfigMap's create by name, so the shipped Role lets a triggerer create any
    ledger but update only those it names: a group added to the policy alone would get its first job
    admitted and every later ledger write refused. Admission asks the API server first
    (SelfSubjectAccessReview) and keeps the group's jobs waiting, naming the entry to add."""
    from airflow_jobs_plugin.cluster import watch as shared
    from airflow_jobs_plugin.cluster.kube import CONFIGMAPS
    from airflow_jobs_plugin.queueing.engines.pool import Admission
    from airflow_jobs_plugin.queueing.engines.pool import shutdown as admission_shutdown
    from airflow_jobs_plugin.queueing.quota import POLICY_KEY, ledger_name

    async def add_group(client: KubeClient) -> None:
        policy = await client.get(CONFIGMAPS, NAMESPACE, POLICY_CONFIGMAP)
        text = policy["data"][POLICY_KEY]
        if "  robotics:" not in text:
            policy["data"][POLICY_KEY] = text.replace("groups:\n", "groups:\n  robotics: {gpus: 4}\n", 1)
            await client.replace(CONFIGMAPS, NAMESPACE, policy)

    on_cluster(cluster.kubeconfig_path, add_group)
    body = manifest(group="robotics")
    job = as_identity(identities["worker"], lambda c: c.create(JOBS, NAMESPACE, body))
    connection = {"conn_type": "kubernetes", "extra": {"kube_config_path": identities["triggerer"]}}
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(connection))

    async def ensure() -> object:
        watch = await shared.acquire("kubernetes_default", NAMESPACE)
        try:
            await watch.wait_synced(timeout=60)
            admission = Admission.for_watch(
                watch, quota_configmap=POLICY_CONFIGMAP, quota_namespace=NAMESPACE
            )
            cached = None
            for _ in range(600):
                cached = watch.get(JOBS, job["metadata"]["name"])
                if cached is not None:
                    break
                await asyncio.sleep(0.1)
            return await admission.ensure(cached)
        finally:
            await admission_shutdown()
            await shared.shutdown()

    status = asyncio.run(ensure())

    assert status is not None and status.reason == "Inadmissible", status
    assert (
        f"may not update the ledger ConfigMap {NAMESPACE}/{ledger_name('robotics')} (RBAC)" in status.message
    )
    assert f"add {ledger_name('robotics')!r} to the resourceNames" in status.message
    ledger = as_identity(
        cluster.kubeconfig_path, lambda c: c.get_or_none(CONFIGMAPS, NAMESPACE, ledger_name("robotics"))
    )
    assert ledger is None  # nothing was admitted, so nothing half-written
    current = as_identity(cluster.kubeconfig_path, lambda c: c.get(JOBS, NAMESPACE, job["metadata"]["name"]))
    assert current["spec"]["suspend"] is True
