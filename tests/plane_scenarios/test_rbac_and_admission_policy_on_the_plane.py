"""The shipped layout (helm-values/: the jobs in `airflow-jobs`, Airflow's components' Roles there, the
admission controller in `airflow-jobs-system`, the ValidatingAdmissionPolicies) applied to a real control
plane as docs/deploying.md installs it, and enforced by the real kube-apiserver for the real
service-account identities of a deployment (``system:serviceaccount:airflow:airflow-worker``, ...).

Each identity's kubeconfig carries a token the API server issued for that service account (the
TokenRequest API, what a pod's projected token is), so every request is authenticated, authorized and
admitted exactly as it would be from the component's pod. The admission controller runs as its own
process with its own account's token, as its Deployment runs it; the plane's MPI operator and Kueue call
as their own accounts too (scripts/realplane/plane.py IDENTITIES). The honest paths work, and every
cheat of tests/deploy/cheats.py is refused, for the worker's, the triggerer's, the api-server's and the
admin's credentials, naming its rule. The simulator's version of these checks is
tests/reliability/test_rbac_least_privilege.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from task_doubles import task_context, the_api_server_answers_kills

from airflow_jobs_plugin.airflow.operators import JobOperator
from airflow_jobs_plugin.cluster.kube import CONFIGMAPS, JOBS, PODS, KubeClient, KubeError
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.kinds.mpi import MPIJOBS
from airflow_jobs_plugin.jobs.manifests import build_manifest, pool_gate
from airflow_jobs_plugin.jobs.spec import TaskIdentity, validate
from tests.deploy import cheats

from .plane import (
    KINDS,
    OWN_CONTROLLER,
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

# The layout the shipped manifests name (docs/deploying.md, "Layout").
AIRFLOW_NAMESPACE = "airflow"
NAMESPACE = "airflow-jobs"
CONTROLLER_NAMESPACE = "airflow-jobs-system"
ACCOUNTS = {
    "worker": (AIRFLOW_NAMESPACE, "airflow-worker"),
    "triggerer": (AIRFLOW_NAMESPACE, "airflow-triggerer"),
    "api-server": (AIRFLOW_NAMESPACE, "airflow-api-server"),
    "controller": (CONTROLLER_NAMESPACE, "airflow-jobs-controller"),
}
POLICY_CONFIGMAP = "airflow-jobs-quota-policy"
RUN_ID = f"manual__{datetime.now(timezone.utc).isoformat()}"
QUICK = scenario(main={"run": 1, "logs": ["epoch 1"]})
# A group in no policy: the controller holds its jobs (queueing/pools.py), suspended and behind the gate,
# for the cheats to act on.
HELD = "unlisted"


def install_layout(kueue: bool) -> list[tuple[dict, str]]:
    """Every document docs/deploying.md applies, with the namespace ``kubectl apply -n`` gives it, in
    order (the chart's own service accounts in Airflow's namespace first); on a cluster that runs Kueue
    (the plane started --with kueue), its Roles too."""
    accounts = [
        ({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}, namespace)
        for namespace, name in list(ACCOUNTS.values())[:3]
    ]
    with_kueue = [
        *((d, NAMESPACE) for d in shipped("rbac-kueue.yaml")),
        *((d, "kueue-system") for d in shipped("rbac-kueue-config.yaml")),
    ]
    jobs_namespace = [_own_controller(d) for d in shipped("pod-security.yaml")]
    return [
        *accounts,
        *((d, NAMESPACE) for d in jobs_namespace + shipped("rbac.yaml")),
        *((d, NAMESPACE) for d in shipped("quota-policy.yaml")),
        *((d, AIRFLOW_NAMESPACE) for d in shipped("quota-policy.yaml")),
        *((d, "") for d in shipped("admission-controller.yaml")),
        *(with_kueue if kueue else ()),
        *((d, "") for d in shipped("admission-policy.yaml")),
    ]


def _own_controller(doc: dict) -> dict:
    """The jobs' namespace labelled as the one this module's controller admits in, so the real tier's own
    controller (scripts/test) leaves it to the shipped one running as its own account."""
    if doc["kind"] != "Namespace":
        return doc
    metadata = doc["metadata"]
    return {**doc, "metadata": {**metadata, "labels": {**metadata.get("labels", {}), OWN_CONTROLLER: "true"}}}


@contextlib.contextmanager
def controller_process(kubeconfig: str, log: Path):
    """``airflow-jobs admission-controller`` with its own account's kubeconfig, as its Deployment runs it
    (outside a pod, its Lease's namespace is given: its own); stopped (SIGTERM: it gives the Lease up) on
    the way out."""
    command = [
        sys.executable,
        "-m",
        "airflow_jobs_plugin.airflow.cli",
        "admission-controller",
        "--kubeconfig",
        kubeconfig,
        "--namespace",
        NAMESPACE,
        "--lease-namespace",
        CONTROLLER_NAMESPACE,
        "--identity",
        "plane-controller-0",
    ]
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ))
        try:
            yield process
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture(scope="module")
def identities(cluster, tmp_path_factory) -> dict[str, str]:
    """Apply the shipped layout; a kubeconfig per component, holding its account's token; the admission
    controller running as itself."""
    if getattr(cluster, "simulated", True) is not False:
        pytest.skip(
            "the real API server's RBAC and admission: on the simulator, tests/reliability/"
            "test_rbac_least_privilege.py checks the same rules"
        )
    admin = yaml.safe_load(Path(cluster.kubeconfig_path).read_text())
    folder = tmp_path_factory.mktemp("identities")

    async def set_up(client: KubeClient) -> dict[str, dict]:
        await ensure_namespace(client, AIRFLOW_NAMESPACE)
        kueue = await client.get_or_none(KINDS["Namespace"], "", "kueue-system") is not None
        for doc, namespace in install_layout(kueue):
            await create_or_replace(client, doc, namespace)
        configs = {}
        for component, (namespace, account) in ACCOUNTS.items():
            token = await client._request(
                "POST",
                f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
                body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
            )
            configs[component] = {
                **admin,
                "users": [{"name": account, "user": {"token": token["status"]["token"]}}],
                "contexts": [
                    {"name": component, "context": {"cluster": admin["clusters"][0]["name"], "user": account}}
                ],
                "current-context": component,
            }
        return configs

    paths = {"admin": cluster.kubeconfig_path}
    for component, config in on_cluster(cluster.kubeconfig_path, set_up).items():
        paths[component] = str(folder / f"{component}.kubeconfig")
        Path(paths[component]).write_text(yaml.safe_dump(config))
    until_the_policy_is_in_force(paths["worker"], cluster.kubeconfig_path)
    with controller_process(paths["controller"], folder / "controller.log"):
        yield paths

    async def tear_down(client: KubeClient) -> None:
        for doc in shipped("admission-policy.yaml"):
            await client.delete(KINDS[doc["kind"]], "", doc["metadata"]["name"])
        for doc in shipped("admission-controller.yaml"):
            if doc["kind"] == "Deployment":
                await client.delete(
                    KINDS["Deployment"], doc["metadata"]["namespace"], doc["metadata"]["name"]
                )

    on_cluster(cluster.kubeconfig_path, tear_down)


def manifest(kind: str = "Job", **args) -> dict:
    """The product's own manifest of a fresh task (suspended, behind the gate, labelled), as JobOperator
    builds it."""
    values = {"image": "registry.example/trainer:1", "group": "vision", "user": "alice", "gpus": 1}
    values.update(args)
    if kind == "MPIJob":
        values["workers"] = 2
    identity = TaskIdentity("plane_rbac", f"probe_{kind.lower()}", f"{RUN_ID}-{next(_serial)}", -1, 1)
    return pool_gate(
        build_manifest(
            validate(**values),
            name=identity.job_name(1),
            task=identity,
            attempt=1,
            queued_at=datetime.now(timezone.utc),
        )
    )


_serial = iter(range(1, 1_000_000))


def _skips_the_pool() -> dict:
    body = manifest(group=HELD)
    body["spec"]["suspend"] = False
    body["spec"]["parallelism"] = 0  # it runs no pod, should it be let through
    return body


def _mounts_a_token() -> dict:
    body = manifest(group=HELD)  # held by the controller: it runs no pod, should it be let through
    body["spec"]["template"]["spec"]["automountServiceAccountToken"] = True
    return body


def _shares_the_hosts_network() -> dict:
    body = manifest(group=HELD)
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
    through), until every policy the scenarios rely on refuses its probe; then the ConfigMap rules, as
    the admin."""

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
            probe = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "airflow-jobs-queue-probe"},
            }
            while True:
                try:
                    await as_admin.create(CONFIGMAPS, NAMESPACE, probe)
                except KubeError as exc:
                    if (
                        exc.status == 403
                        and "ValidatingAdmissionPolicy 'airflow-jobs-quota-configmaps'" in str(exc)
                    ):
                        break
                    raise
                await as_admin.delete(CONFIGMAPS, NAMESPACE, probe["metadata"]["name"])
                assert asyncio.get_running_loop().time() < deadline, (
                    "the ConfigMap rules never came into force"
                )
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


def run_as(monkeypatch, identities: dict[str, str], component: str) -> None:
    connection = {"conn_type": "kubernetes", "extra": {"kube_config_path": identities[component]}}
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(connection))


# --- the cheats ---


@pytest.fixture(scope="module")
def held(identities) -> dict:
    """A job the worker created honestly, of a group no policy lists: the controller holds it."""
    return as_identity(
        identities["worker"], lambda c: c.create(JOBS, NAMESPACE, cheats.honest_body(group=HELD))
    )


@pytest.mark.parametrize(
    ("cheat", "who"), cheats.tries(), ids=[f"{c.name} by the {w}" for c, w in cheats.tries()]
)
def test_each_cheat_is_refused_by_the_api_server_naming_its_rule(identities, held, cheat, who):
    assert not isinstance(held, KubeError), held

    answer = on_cluster(identities[who], lambda c: cheats.attempt(c, NAMESPACE, cheat, held))

    cheats.check_refused(cheat, who, answer)


def test_the_held_job_is_still_as_the_worker_created_it(identities, held):
    """After every cheat: suspended, behind the gate, charged as created (the controller holds it)."""
    job = as_identity(identities["admin"], lambda c: c.get(JOBS, NAMESPACE, held["metadata"]["name"]))
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"] == held["metadata"]["labels"]
    for key, value in held["metadata"]["annotations"].items():
        assert job["metadata"]["annotations"].get(key) == value, key


@pytest.mark.parametrize("cheat", ["airflow-triggerer", "token-of-default"])
def test_a_workers_job_whose_pods_would_carry_a_token_is_refused_naming_the_rule(identities, cheat):
    """Rule job-accounts, its parameter the ConfigMap airflow-jobs-job-accounts of rbac.yaml: a raw
    create by the worker identity (a DAG's own code) may not run its pods as an Airflow component, nor
    as the namespace's default account with its token mounted."""
    body = manifest(group=HELD)
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
    from airflow_jobs_plugin.usecases import actions

    created = as_identity(
        identities["worker"], lambda c: c.create(MPIJOBS, NAMESPACE, manifest("MPIJob", group=HELD))
    )
    name = created["metadata"]["name"]
    changes = {
        "more workers": {"spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 8}}}},
        "more slots": {"spec": {"slotsPerWorker": 64}},
        "another queue": {"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "vip"}}},
        "another priority": {"metadata": {"annotations": {"airflow-jobs.io/priority": "1000"}}},
        "another group": {"metadata": {"labels": {"airflow-jobs.io/group": "llm"}}},
        "another requeue count": {"metadata": {"annotations": {labels.REQUEUE_COUNT: "7"}}},
    }
    for change, patch in changes.items():
        refused = as_identity(
            identities["api-server"], lambda c, p=patch: c.merge_patch(MPIJOBS, NAMESPACE, name, p)
        )
        assert isinstance(refused, KubeError) and refused.status == 403, (change, refused)
        assert "airflow-jobs rule" in str(refused), (change, refused)

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

    run_as(monkeypatch, identities, "worker")
    run_id = f"{RUN_ID}-planted-{next(_serial)}"
    victim = TaskIdentity("victim", "train", run_id, -1, 1)
    evil = validate(image="mallory/evil:1", group="vision", user="mallory", gpus=1, namespace=NAMESPACE)
    body = pool_gate(
        build_manifest(
            evil, name=victim.job_name(1), task=victim, attempt=1, queued_at=datetime.now(timezone.utc)
        )
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


# --- the honest paths ---


def test_an_honest_submission_is_admitted_by_the_controller_and_followed_by_the_triggerer(
    identities, monkeypatch
):
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
    run_as(monkeypatch, identities, "worker")
    trigger = defer(op, task_context("plane_rbac", "honest", run_id=RUN_ID))
    run_as(monkeypatch, identities, "triggerer")

    event = follow(trigger)

    assert event["status"] == "success" and event["state"] == "SUCCEEDED", event
    job = as_identity(identities["api-server"], lambda c: c.get(JOBS, NAMESPACE, trigger.job_name))
    assert job["metadata"]["annotations"].get("airflow-jobs.io/admitted-at"), job["metadata"]


def test_an_mpijob_runs_its_launcher_the_mpi_operator_creates_as_itself(identities, monkeypatch):
    """The launcher Job of an admitted MPIJob is the MPI operator's create, with no gate and no product
    labels: the policy leaves that identity alone, and only that one."""
    op = JobOperator(
        task_id="honest_mpi",
        image="registry.example/trainer:1",
        group="vision",
        user="alice",
        gpus=1,
        workers=2,
        namespace=NAMESPACE,
        job_annotations=QUICK,
    )
    run_as(monkeypatch, identities, "worker")
    trigger = defer(op, task_context("plane_rbac", "honest_mpi", run_id=RUN_ID))
    run_as(monkeypatch, identities, "triggerer")

    event = follow(trigger)

    assert event["status"] == "success" and event["state"] == "SUCCEEDED", event


def test_a_retry_is_created_by_the_triggerer_and_admitted_by_the_controller(identities, monkeypatch):
    op = JobOperator(
        task_id="retried",
        image="registry.example/trainer:1",
        group="vision",
        user="alice",
        gpus=1,
        namespace=NAMESPACE,
        backoff_limit=0,
        max_attempts=2,
        retry_backoff=0.05,
        retryable_exit_codes=[3],
        job_annotations=scenario(main={"run": 1, "exit": 3}),
    )
    run_as(monkeypatch, identities, "worker")
    trigger = defer(op, task_context("plane_rbac", "retried", run_id=RUN_ID))
    run_as(monkeypatch, identities, "triggerer")

    event = follow(trigger)

    assert event["status"] == "failed" and len(event["attempts"]) == 2, event


def test_a_kill_is_asked_by_the_triggerer_and_carried_out_by_the_api_server(identities, monkeypatch):
    op = JobOperator(
        task_id="killed",
        image="registry.example/trainer:1",
        group="vision",
        user="alice",
        gpus=1,
        namespace=NAMESPACE,
        job_annotations=scenario(main={"run": None}),
    )
    run_as(monkeypatch, identities, "worker")
    context = task_context("plane_rbac", "killed", run_id=RUN_ID)
    trigger = defer(op, context)
    run_as(monkeypatch, identities, "triggerer")
    trigger.task_instance = context["ti"]

    async def kill(name: str) -> None:
        async with kube(identities["admin"]) as admin:
            deadline = asyncio.get_running_loop().time() + 120
            while not (await admin.get(JOBS, NAMESPACE, name))["metadata"]["annotations"].get(
                labels.ADMITTED_AT
            ):
                assert asyncio.get_running_loop().time() < deadline, "never admitted"
                await asyncio.sleep(0.3)
        await trigger.on_kill()
        async with kube(identities["api-server"]) as api_server:
            answered = await the_api_server_answers_kills(api_server, NAMESPACE)
        assert [a.name for a in answered if a.verdict.cancel] == [name], answered

    event = follow(trigger, during=kill)

    assert event["state"] == "CANCELLED", event


def test_a_dag_that_defers_itself_to_a_trigger_naming_no_pool_gets_no_gpu_the_policy_did_not_grant(
    identities, monkeypatch
):
    """The cheat that made the triggerer admit: a DAG's own code creates three honest, suspended 2-GPU
    jobs with the worker's token for dave of nlp (``user_gpus: 2``), then defers itself to the product's
    own ``JobTrigger`` naming no quota pool. The triggerer only observes; the controller routes each job
    by the namespace's policy alone: one runs, the other two wait for dave's quota, on the board."""
    from airflow_jobs_plugin.airflow.triggers import JobTrigger
    from airflow_jobs_plugin.cluster import watch as shared
    from airflow_jobs_plugin.queueing import board
    from airflow_jobs_plugin.queueing.engines.pool import shutdown as admission_shutdown

    bodies = [
        manifest(group="nlp", user="dave", gpus=2, annotations=scenario(main={"run": None})) for _ in range(3)
    ]
    names = [b["metadata"]["name"] for b in bodies]
    for body in bodies:
        created = as_identity(identities["worker"], lambda c, b=body: c.create(JOBS, NAMESPACE, b))
        assert not isinstance(created, KubeError), created
    run_as(monkeypatch, identities, "triggerer")

    async def go() -> tuple[list[dict], dict]:
        triggers = [
            JobTrigger(job_name=n, namespace=NAMESPACE, quota_configmap=None, stream_logs=False)
            for n in names
        ]
        following = [asyncio.ensure_future(t.run().__anext__()) for t in triggers]
        try:
            async with kube(identities["admin"]) as admin:
                deadline = asyncio.get_running_loop().time() + 240
                while True:
                    jobs = [await admin.get(JOBS, NAMESPACE, n) for n in names]
                    boards = (await admin.list(CONFIGMAPS, NAMESPACE, label_selector=board.BOARD_SELECTOR))[
                        "items"
                    ]
                    entries = board.merged(board.decode(cm.get("data")) for cm in boards)
                    admitted = [j for j in jobs if labels.ADMITTED_AT in j["metadata"].get("annotations", {})]
                    waiting = [j for j in jobs if j["metadata"]["uid"] in entries]
                    if len(admitted) == 1 and len(waiting) == 2:
                        return jobs, {
                            j["metadata"]["name"]: entries[j["metadata"]["uid"]][1] for j in waiting
                        }
                    assert asyncio.get_running_loop().time() < deadline, (admitted, entries)
                    await asyncio.sleep(0.5)
        finally:
            for task in following:
                task.cancel()
            await asyncio.gather(*following, return_exceptions=True)
            await admission_shutdown()
            await shared.shutdown()
            async with kube(identities["admin"]) as admin:
                for n in names:
                    with contextlib.suppress(KubeError):
                        await admin.delete(JOBS, NAMESPACE, n)

    jobs, waiting = asyncio.run(go())

    assert [j["spec"]["suspend"] for j in jobs].count(False) == 1, [j["spec"]["suspend"] for j in jobs]
    assert {e.reason for e in waiting.values()} == {"UserQuota"}, waiting
    assert all("dave" in e.message for e in waiting.values()), waiting


def test_a_group_added_to_the_policy_is_admitted_without_any_role_changed(identities, cluster, monkeypatch):
    """The controller's Role names no ledger (admission-policy.yaml's rule controller-configmaps bounds
    the names instead): a group a platform admin adds to the policy gets its ledger at its first job."""
    from airflow_jobs_plugin.queueing.quota import POLICY_KEY, ledger_name
    from airflow_jobs_plugin.queueing.quota.model import CHARGING_KEY

    async def add_group(client: KubeClient) -> None:
        policy = await client.get(CONFIGMAPS, NAMESPACE, POLICY_CONFIGMAP)
        text = policy["data"][POLICY_KEY]
        if "  robotics:" not in text:
            policy["data"][POLICY_KEY] = text.replace("groups:\n", "groups:\n  robotics: {gpus: 4}\n", 1)
            # and the DAG folder's charging entry: the platform allows the DAGs to charge it.
            charging = policy["data"][CHARGING_KEY]
            policy["data"][CHARGING_KEY] = charging.replace("groups: [", "groups: [robotics, ", 1)
            await client.replace(CONFIGMAPS, NAMESPACE, policy)

    on_cluster(cluster.kubeconfig_path, add_group)
    op = JobOperator(
        task_id="robotics",
        image="registry.example/trainer:1",
        group="robotics",
        user="alice",
        gpus=1,
        namespace=NAMESPACE,
        job_annotations=QUICK,
    )
    run_as(monkeypatch, identities, "worker")
    trigger = defer(op, task_context("plane_rbac", "robotics", run_id=RUN_ID))
    run_as(monkeypatch, identities, "triggerer")

    assert follow(trigger)["status"] == "success"
    ledger = as_identity(identities["admin"], lambda c: c.get(CONFIGMAPS, NAMESPACE, ledger_name("robotics")))
    assert not isinstance(ledger, KubeError), ledger


def test_the_controllers_deployment_is_admitted_under_restricted(identities):
    """Its pods meet the restricted level its namespace enforces: the ReplicaSet's pods are created (the
    plane's kwok nodes play them; the controller that admits is the process above)."""

    async def pods(client: KubeClient) -> list[dict]:
        deadline = asyncio.get_running_loop().time() + 120
        while True:
            listing = await client.list(
                PODS,
                CONTROLLER_NAMESPACE,
                label_selector="app.kubernetes.io/name=airflow-jobs-controller",
            )
            if len(listing["items"]) >= 2:
                return listing["items"]
            assert asyncio.get_running_loop().time() < deadline, "the Deployment's pods were never created"
            await asyncio.sleep(1)

    found = on_cluster(identities["admin"], pods)
    assert all(p["spec"]["serviceAccountName"] == "airflow-jobs-controller" for p in found)


def test_a_job_kueues_webhook_gives_its_default_queue_waits_for_the_pool_then_kueue_runs_it(
    identities, monkeypatch
):
    """A LocalQueue ``default`` in the jobs' namespace: Kueue's webhook gives it to a job naming no queue
    (kubernetes-sigs/kueue v0.19.2 pkg/controller/jobframework/defaults.go), before the admission policy
    sees the create, which passes it since the job still waits behind the pool's gate. The controller
    hands it over (the gate lifted); Kueue, as its own account, admits and resumes it: the rule
    kueue-after-handoff lets it act on a job handed to it. Skipped where the plane runs no Kueue."""
    from airflow_jobs_plugin.cluster.kube import LOCAL_QUEUES
    from airflow_jobs_plugin.cluster.resources import Resource
    from airflow_jobs_plugin.queueing import kueue

    flavors = Resource(kueue.GROUP, kueue.VERSION, "resourceflavors", "ResourceFlavor", namespaced=False)
    cluster_queues = Resource(kueue.GROUP, kueue.VERSION, "clusterqueues", "ClusterQueue", namespaced=False)

    def obj(resource: Resource, body: dict) -> dict:
        return {"apiVersion": resource.api_version, "kind": resource.kind, **body}

    async def create_if_absent(client: KubeClient, resource, namespace: str, body: dict) -> None:
        with contextlib.suppress(KubeError):
            await client.create(resource, namespace, body)

    async def queues(client: KubeClient) -> bool:
        if await client.get_or_none(KINDS["Namespace"], "", "kueue-system") is None:
            return False
        with contextlib.suppress(KubeError):
            await client.create(flavors, "", obj(flavors, {"metadata": {"name": "default-flavor"}}))
        gpu = {"name": "nvidia.com/gpu", "nominalQuota": 8}
        spec = {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "default-flavor",
                            "resources": [
                                {"name": "cpu", "nominalQuota": 64},
                                {"name": "memory", "nominalQuota": "512Gi"},
                                gpu,
                            ],
                        }
                    ],
                }
            ],
        }
        await create_if_absent(
            client,
            cluster_queues,
            "",
            obj(cluster_queues, {"metadata": {"name": "plane-rbac"}, "spec": spec}),
        )
        await create_if_absent(
            client,
            LOCAL_QUEUES,
            NAMESPACE,
            obj(
                LOCAL_QUEUES,
                {"metadata": {"name": kueue.DEFAULT_LOCAL_QUEUE}, "spec": {"clusterQueue": "plane-rbac"}},
            ),
        )
        return True

    if not on_cluster(identities["admin"], queues):
        pytest.skip("the plane runs no Kueue (scripts/cluster up --with kueue)")
    try:
        op = JobOperator(
            task_id="defaulted",
            image="registry.example/trainer:1",
            group="vision",
            user="alice",
            gpus=1,
            namespace=NAMESPACE,
            job_annotations=QUICK,
        )
        run_as(monkeypatch, identities, "worker")
        trigger = defer(op, task_context("plane_rbac", "defaulted", run_id=RUN_ID))
        created = as_identity(identities["admin"], lambda c: c.get(JOBS, NAMESPACE, trigger.job_name))
        run_as(monkeypatch, identities, "triggerer")

        event = follow(trigger)

        assert event["status"] == "success" and event["state"] == "SUCCEEDED", event
        job = as_identity(identities["admin"], lambda c: c.get(JOBS, NAMESPACE, trigger.job_name))
        assert job["metadata"]["labels"][kueue.QUEUE_NAME_LABEL] == kueue.DEFAULT_LOCAL_QUEUE
        assert kueue.POOL_GATE not in (job["metadata"].get("annotations") or {}).get(
            kueue.ADMISSION_GATE_ANNOTATION, ""
        )
        # Kueue's webhook gave it its queue at its creation, which the policy let through behind the gate.
        assert created["metadata"]["labels"][kueue.QUEUE_NAME_LABEL] == kueue.DEFAULT_LOCAL_QUEUE
    finally:

        async def remove(client: KubeClient) -> None:
            with contextlib.suppress(KubeError):
                await client.delete(LOCAL_QUEUES, NAMESPACE, kueue.DEFAULT_LOCAL_QUEUE)
            with contextlib.suppress(KubeError):
                await client.delete(cluster_queues, "", "plane-rbac")

        on_cluster(identities["admin"], remove)


def test_a_kubeconfig_that_impersonates_is_refused_rather_than_run_as_its_admin(cluster, tmp_path):
    """kubectl would act as the account a kubeconfig's user impersonates (``as:``); the product's client
    cannot, and without the refusal every request would silently go out with the admin's own rights,
    past the RBAC split and the admission policy meant for that account."""
    config = yaml.safe_load(Path(cluster.kubeconfig_path).read_text())
    for user in config["users"]:
        user["user"]["as"] = f"system:serviceaccount:{AIRFLOW_NAMESPACE}:airflow-worker"
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
