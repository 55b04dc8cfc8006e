"""Each Role shipped in helm-values/ grants exactly what its component uses: no more, no less.

What the product uses is not written down by hand: every path it has runs against a simulated cluster
that enforces RBAC and the admission policies as kube-apiserver does (sim/rbac.py,
sim/admission_policy.py), with the shipped layout applied as docs/deploying.md says, and each component
calling with its own service account's token: the worker's execute and poke, the triggerer's triggers and
kill requests, the api-server's reads, cancels, answers to kill requests and sweeps, and the admission
controller as its own process, elected on its Lease and admitting in every namespace labelled for it. The
simulator records every request by who sent it, in RBAC's own vocabulary, so each component's requests
are checked against the Roles bound to its account: none refused, and no verb granted that none of them
sent."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml
from airflow.sdk.exceptions import TaskDeferred
from airflow_jobs_sim import ClusterConfig, SimCluster
from airflow_jobs_sim.config import Identity
from task_doubles import task_context, the_api_server_answers_kills

from airflow_jobs_plugin.airflow.operators import JobOperator
from airflow_jobs_plugin.airflow.sensors import JobSensor
from airflow_jobs_plugin.cluster import watch as shared
from airflow_jobs_plugin.cluster.kube import CONFIGMAPS, JOBS, KubeClient
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.naming import attempt_name
from airflow_jobs_plugin.plugin.sweep import delete_expired_records
from airflow_jobs_plugin.queueing.engines.pool import shutdown as admission_shutdown
from airflow_jobs_plugin.queueing.quota import ledger as ledger_io
from airflow_jobs_plugin.queueing.quota import ledger_model
from airflow_jobs_plugin.queueing.quota.model import Reservation
from airflow_jobs_plugin.readmodel import inspect
from tests.patience import Deadline, stretch

HELM = Path(__file__).resolve().parents[2] / "helm-values"
ROLE = HELM / "rbac.yaml"
CONTROLLER_MANIFESTS = HELM / "admission-controller.yaml"
KUEUE_ROLES = HELM / "rbac-kueue.yaml"
KUEUE_CONFIG_ROLES = HELM / "rbac-kueue-config.yaml"
POLICY = HELM / "admission-policy.yaml"
# The jobs' namespace's Pod Security labels and the rule pod-security's parameter (without it every job
# is refused).
POD_SECURITY = HELM / "pod-security.yaml"
SCENARIO = "sim.airflow-jobs.io/scenario"

# The layout the shipped manifests name (docs/deploying.md, "Layout"): Airflow's own namespace, where its
# service accounts are; the jobs' namespace; the admission controller's.
AIRFLOW_NAMESPACE = "airflow"
NAMESPACE = "airflow-jobs"
CONTROLLER_NAMESPACE = "airflow-jobs-system"
# The label the shipped controller could select its namespaces by (--namespace-selector): the tests run
# it so, which is how a platform with several teams' namespaces runs it.
MANAGED_SELECTOR = "airflow-jobs.io/managed=true"

# Airflow's components and the values.yaml service account each runs as, in Airflow's namespace.
COMPONENTS = {
    "worker": "airflow-worker",
    "triggerer": "airflow-triggerer",
    "api-server": "airflow-api-server",
}
# The admission controller's own account (admission-controller.yaml), in its own namespace.
CONTROLLER_ACCOUNT = "airflow-jobs-controller"
CONTROLLER_USER = f"system:serviceaccount:{CONTROLLER_NAMESPACE}:{CONTROLLER_ACCOUNT}"
CONTROLLER_TOKEN = "controller-token"
USERS = {
    **{c: f"system:serviceaccount:{AIRFLOW_NAMESPACE}:{a}" for c, a in COMPONENTS.items()},
    "controller": CONTROLLER_USER,
}


def identities() -> tuple[Identity, ...]:
    """The deployment's service accounts, each known to the simulated API server by its token (as a
    projected service-account token is): Airflow's components and the admission controller."""
    return (
        *(Identity.service_account(AIRFLOW_NAMESPACE, a, f"{c}-token") for c, a in COMPONENTS.items()),
        Identity.service_account(CONTROLLER_NAMESPACE, CONTROLLER_ACCOUNT, CONTROLLER_TOKEN),
    )


# Verbs a component needs on paths the simulator cannot drive, each with the path.
# Karpenter's NodePools: the simulator serves no Karpenter API, so the controller's LIST of them
# (engines.door.Door._read_autoscaling, where Karpenter runs) is answered 404 before it is authorized.
# The delete of a job: the controller finishes a person's cancel of a running MPIJob whose process
# stopped after its verdict, by deleting it where its launcher Job is gone (jobs/kinds/mpi.py
# ending_writes: the launcher's deadline ends it where it is there, the case driven below).
NOT_DRIVEN: dict[str, dict[tuple[str, str], set[str]]] = {
    "controller": {
        ("karpenter.sh", "nodepools"): {"list"},
        ("batch", "jobs"): {"delete"},
        ("kubeflow.org", "mpijobs"): {"delete"},
    }
}
# What only a cluster with Kueue drives, checked by the Kueue scenario: a Kueue that takes every job reads
# the labels of the job's namespace (queueing/kueue_cluster.py).
DRIVEN_WITH_KUEUE: dict[str, dict[tuple[str, str], set[str]]] = {
    "controller": {("", "namespaces"): {"get"}},
}

_PLURALS = {
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
    "ConfigMap": "configmaps",
}
# What the simulator does not serve: a service account is its token here (``identities``), and the
# controller's Deployment is the process the tests start themselves (``controller_process``).
_NOT_SERVED = ("ServiceAccount", "Deployment", "PodDisruptionBudget")


def apply_shipped(cluster, path: Path, namespace: str | None = None) -> None:
    """A helm-values/ manifest as ``kubectl apply [-n <namespace>] -f`` would create it: an object that
    names its namespace goes there, a namespaced one that does not goes to ``namespace``."""
    for doc in (d for d in yaml.safe_load_all(path.read_text()) if d):
        if doc["kind"] in _NOT_SERVED:
            continue
        if doc["kind"] == "Namespace":
            name = doc["metadata"]["name"]
            if cluster.store.list("namespaces", field_selector=f"metadata.name={name}"):
                # It exists already (helm's --create-namespace): apply merges its labels.
                cluster.store.patch("namespaces", name, {"metadata": doc["metadata"]}, "merge")
            else:
                cluster.store.create("namespaces", doc)
            continue
        plural = _PLURALS[doc["kind"]]
        namespaced = plural in ("roles", "rolebindings", "configmaps")
        where = (doc["metadata"].get("namespace") or namespace) if namespaced else None
        assert not namespaced or where, f"{path.name}: {doc['kind']} {doc['metadata']['name']} needs -n"
        cluster.store.create(plural, doc, where)


def ensure_namespace(cluster, name: str, labels_: dict[str, str] | None = None) -> None:
    if not cluster.store.list("namespaces", field_selector=f"metadata.name={name}"):
        cluster.store.create("namespaces", {"metadata": {"name": name, "labels": dict(labels_ or {})}})
    elif labels_:
        cluster.store.patch("namespaces", name, {"metadata": {"labels": labels_}}, "merge")


def install(cluster, *, kueue: bool = False) -> None:
    """The shipped layout, as docs/deploying.md installs it: Airflow's namespace (helm's), the jobs'
    namespace with its Pod Security labels and the policies' parameters, the components' Roles, the
    admission controller's namespace and rights, the admission policies; on a Kueue cluster, the Kueue
    Roles. The jobs' namespace is labelled for the controller's --namespace-selector too."""
    ensure_namespace(cluster, AIRFLOW_NAMESPACE)
    apply_shipped(cluster, POD_SECURITY, NAMESPACE)
    ensure_namespace(cluster, NAMESPACE, {MANAGED_SELECTOR.split("=")[0]: "true"})
    apply_shipped(cluster, ROLE, NAMESPACE)
    apply_shipped(cluster, CONTROLLER_MANIFESTS)
    apply_shipped(cluster, POLICY)
    if kueue:
        apply_shipped(cluster, KUEUE_ROLES, NAMESPACE)
        ensure_namespace(cluster, "kueue-system")
        apply_shipped(cluster, KUEUE_CONFIG_ROLES, "kueue-system")


def enforcing(**config) -> ClusterConfig:
    """A simulated cluster that authenticates the deployment's tokens and enforces RBAC."""
    return ClusterConfig(
        nodes=config.pop("nodes", 2),
        gpus_per_node=8,
        time_scale=0.01,
        token="admin",
        rbac=True,
        identities=identities(),
        **config,
    )


def component_runner(cluster, tmp_path: Path, monkeypatch):
    """``run_as(component)``: point ``kubernetes_default`` at a kubeconfig with that component's token."""
    from airflow_jobs_sim.kubeconfig import write_kubeconfig

    kubeconfigs = {
        c: write_kubeconfig(str(tmp_path / f"{c}.yaml"), cluster.url, f"{c}-token") for c in COMPONENTS
    }

    def run_as(component: str) -> None:
        monkeypatch.setenv(
            "AIRFLOW_CONN_KUBERNETES_DEFAULT",
            json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": kubeconfigs[component]}}),
        )

    return run_as


@contextlib.contextmanager
def controller_process(cluster, tmp_path: Path, *args: str) -> Iterator[subprocess.Popen]:
    """``airflow-jobs admission-controller`` as the Deployment runs it, with its own service account's
    token (``args``: which namespaces; default: those labelled for it), its Lease in its own namespace;
    stopped (SIGTERM: it gives the Lease up) on the way out."""
    from airflow_jobs_sim.kubeconfig import write_kubeconfig

    kubeconfig = write_kubeconfig(str(tmp_path / "controller.yaml"), cluster.url, CONTROLLER_TOKEN)
    log = (tmp_path / "controller.log").open("w")
    command = [
        sys.executable,
        "-m",
        "airflow_jobs_plugin.airflow.cli",
        "admission-controller",
        "--kubeconfig",
        kubeconfig,
        *(args or ("--namespace-selector", MANAGED_SELECTOR)),
        "--lease-namespace",
        CONTROLLER_NAMESPACE,
        "--identity",
        "airflow-jobs-controller-0",
    ]
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
    try:
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def bindings_of(user: str) -> list[tuple[str, str, str]]:
    """(kind, name, namespace) of every Role and ClusterRole the shipped files bind to ``user``."""
    found = []
    for path in (ROLE, CONTROLLER_MANIFESTS, KUEUE_ROLES, KUEUE_CONFIG_ROLES):
        for doc in (d for d in yaml.safe_load_all(path.read_text()) if d):
            if doc["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
                continue
            for subject in doc["subjects"]:
                if f"system:serviceaccount:{subject['namespace']}:{subject['name']}" == user:
                    ref = doc["roleRef"]
                    found.append((ref["kind"], ref["name"], str(path.name)))
    return found


# The RBAC files of a cluster without Kueue, and those a Kueue cluster adds.
RBAC_FILES = (ROLE, CONTROLLER_MANIFESTS)
KUEUE_RBAC_FILES = (KUEUE_ROLES, KUEUE_CONFIG_ROLES)


def granted(
    user: str, files: tuple[Path, ...] = RBAC_FILES + KUEUE_RBAC_FILES
) -> dict[tuple[str, str], set[str]]:
    """(API group, resource) -> verbs, over every rule of every role ``files`` bind to ``user``."""
    roles = {}
    for path in files:
        for doc in (d for d in yaml.safe_load_all(path.read_text()) if d):
            if doc["kind"] in ("Role", "ClusterRole"):
                roles[(doc["kind"], doc["metadata"]["name"])] = doc
    out: dict[tuple[str, str], set[str]] = {}
    for kind, name, file in bindings_of(user):
        if file not in {p.name for p in files}:
            continue
        for rule in roles[(kind, name)]["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def sent(
    cluster, since: dict | None = None
) -> tuple[dict[str, dict[tuple[str, str], set[str]]], dict[str, list[str]]]:
    """Per component, what it sent ((API group, resource) -> verbs) and what RBAC refused it; with
    ``since`` (an earlier ``cluster.authorized()``), only what was sent after it."""
    names = {user: component for component, user in USERS.items()}
    used: dict[str, dict[tuple[str, str], set[str]]] = {c: {} for c in USERS}
    refused: dict[str, list[str]] = {c: [] for c in USERS}
    for key, count in cluster.authorized().items():
        user, request, allowed = key
        component = names.get(user)
        if component is None or count <= (since or {}).get(key, 0):
            continue
        resource = f"{request.resource}/{request.subresource}" if request.subresource else request.resource
        used[component].setdefault((request.api_group, resource), set()).add(request.verb)
        if not allowed:
            group = f".{request.api_group}" if request.api_group else ""
            refused[component].append(f"{request.verb} {resource}{group} {request.namespace}/{request.name}")
    return used, refused


def check_against_the_roles(
    used, refused, files: tuple[Path, ...] = RBAC_FILES, elsewhere: dict | None = None
) -> None:
    """Each component's requests against the roles ``files`` bind to its account: none refused (but the
    ones ``refused`` leaves out), none beyond them, and every verb they grant sent (or driven
    ``elsewhere``, or not drivable here: NOT_DRIVEN)."""
    for component, user in USERS.items():
        grants, uses = granted(user, files), used[component]
        assert not refused[component], f"the {component} was refused: {sorted(set(refused[component]))}"
        # Jobs and MPIJobs go through the same code: a verb used on one kind is needed on the other.
        workload = uses.get(("batch", "jobs"), set()) | uses.get(("kubeflow.org", "mpijobs"), set())
        needed = {**uses, ("batch", "jobs"): workload, ("kubeflow.org", "mpijobs"): workload}
        for key, verbs in [
            *NOT_DRIVEN.get(component, {}).items(),
            *(elsewhere or {}).get(component, {}).items(),
        ]:
            needed[key] = needed.get(key, set()) | verbs
        extra = {k: sorted(v - needed.get(k, set())) for k, v in grants.items() if v - needed.get(k, set())}
        missing = {k: sorted(v - grants.get(k, set())) for k, v in uses.items() if v - grants.get(k, set())}
        assert not missing, f"the {component} calls what its Roles do not grant: {missing}"
        assert not extra, f"the {component}'s Roles grant what none of its paths uses: {extra}"


def deferred(op: JobOperator, dag_id: str, **context) -> tuple[TaskDeferred, dict]:
    context = task_context(dag_id, **context)
    with pytest.raises(TaskDeferred) as info:
        op.execute(context)
    return info.value, context


async def collect(trigger, timeout: float = 90) -> dict:
    (event,) = await asyncio.wait_for(_events(trigger), timeout * stretch())
    return event


async def _events(trigger) -> list[dict]:
    return [e.payload async for e in trigger.run()]


QUOTA = "airflow-jobs-quota-policy"
# vision runs every job of the paths below at once; nlp is held by a blocker so its jobs wait; cv is the
# group of the lost unsuspend.
POLICY_YAML = "groups:\n  vision: {gpus: 16}\n  nlp: {gpus: 4}\n  cv: {gpus: 2}\n"
# Requests refused as they would be on a real cluster, and handled: the controller looks for Kueue's
# configuration (rbac-kueue-config.yaml is applied only where Kueue runs); the node view asks for every
# pod of the cluster, and counts the jobs' namespace's alone when refused (rbac.yaml: a platform grants
# that list itself).
EXPECTED_REFUSALS = {
    "controller": {"get configmaps kueue-system/kueue-manager-config"},
    "api-server": {"list pods /"},
}


async def _reserve_before_a_crash(controller: str, job_name: str) -> None:
    """Write a reservation of the queued ``job_name`` into its group's ledger, admitted long enough ago
    that a pass takes the job for one whose unsuspend was lost (ledger_model.pending_unsuspend): what a
    controller that stopped between its two writes leaves (written with its token: nobody else may)."""
    client = await KubeClient.from_kubeconfig(controller)
    try:
        job = await client.get(JOBS, NAMESPACE, job_name)
        queued = ledger_io.queued_job(job)
        admitted = datetime.now(timezone.utc) - ledger_model.UNSUSPEND_GRACE * 5
        reservation = Reservation.for_job(queued, admitted)
        await ledger_io.update_ledger(
            client,
            NAMESPACE,
            queued.group,
            lambda held: dataclasses.replace(held, reservations=(*held.reservations, reservation)),
        )
    finally:
        await client.close()


def _running_pod(cluster, job_name: str, timeout: float = 60) -> str:
    """The name of a Running pod of ``job_name`` (the Job controller's job-name label)."""
    deadline = time.monotonic() + timeout * stretch()
    while time.monotonic() < deadline:
        for pod in cluster.store.list("pods", namespace=NAMESPACE):
            pod_labels = pod["metadata"].get("labels") or {}
            if pod_labels.get(labels.BATCH_JOB_NAME) == job_name and pod["status"].get("phase") == "Running":
                return pod["metadata"]["name"]
        time.sleep(0.05)
    raise AssertionError(f"no pod of {job_name} ran within {timeout} s")


def _refusals_beyond(refused: dict[str, list[str]], allowed: dict[str, set[str]]) -> dict[str, list[str]]:
    return {c: [r for r in rs if r not in allowed.get(c, set())] for c, rs in refused.items()}


def _admitted(cluster, resource: str, name: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout * stretch()
    while not (cluster.store.get(resource, name, NAMESPACE)["metadata"].get("annotations") or {}).get(
        labels.ADMITTED_AT
    ):
        assert time.monotonic() < deadline, f"{resource} {name} was never admitted"
        time.sleep(0.05)


@pytest.mark.slow
def test_each_component_sends_exactly_what_its_roles_grant(monkeypatch, tmp_path):
    from airflow_jobs_sim.kubeconfig import write_kubeconfig

    from airflow_jobs_plugin.jobs.kinds.mpi import MPIJOBS
    from airflow_jobs_plugin.queueing.quota.ledger import verdict_only_patch

    with SimCluster(enforcing(nodes=3)) as cluster:
        install(cluster)
        cluster.store.create(
            "configmaps", {"metadata": {"name": QUOTA}, "data": {"policy.yaml": POLICY_YAML}}, NAMESPACE
        )
        api_server = write_kubeconfig(str(tmp_path / "api.yaml"), cluster.url, "api-server-token")
        run_as = component_runner(cluster, tmp_path, monkeypatch)
        quick = {SCENARIO: json.dumps({"main": {"run": 2, "logs": ["epoch 1"]}})}
        forever = {SCENARIO: json.dumps({"main": {"run": None}})}
        common = {"image": "t:1", "gpus": 1, "namespace": NAMESPACE, "quota_configmap": QUOTA}

        def op(group: str = "vision", **args) -> JobOperator:
            return JobOperator(task_id="train", group=group, **{**common, **args})

        with controller_process(cluster, tmp_path):
            run_as("worker")
            # nlp: a blocker holds its quota, so its MPIJobs wait; one is cancelled while queued (deleted,
            # its record kept), one waits past its queue_timeout (ruled while queued: its status Failed).
            blocker, _ = deferred(op("nlp", gpus=4, job_annotations=forever), "rbac_blocker")
            _admitted(cluster, "jobs", blocker.trigger.job_name)
            queued_cancel, _ = deferred(op("nlp", workers=2), "rbac_cancel_queued")
            timed_out, _ = deferred(op("nlp", workers=2, queue_timeout=1), "rbac_queue_timeout")
            ok, _ = deferred(op(job_annotations=quick), "rbac_quota")
            mpi, _ = deferred(op(workers=2, job_annotations=quick), "rbac_mpi")
            # An image the registry does not have: the controller rules on it from its pod's pull events.
            stuck, _ = deferred(op(image="t:not-found"), "rbac_pull")
            # A torchrun job whose first attempt exits retryably: the triggerer creates the next attempt
            # and its headless Service.
            retry = {
                "backoff_limit": 0,
                "max_attempts": 2,
                "retry_backoff": 0.05,
                "retryable_exit_codes": [3],
            }
            fails_once = {SCENARIO: json.dumps({"main": {"run": 1, "exit": 3}})}
            ddp, _ = deferred(
                op(workers=2, framework="torchrun", job_annotations=fails_once, **retry), "rbac_ddp"
            )
            # A job whose pod is evicted: the triggerer reads the disrupted pod's events, then starts the
            # next attempt, which a person cancels while it runs.
            evicted, _ = deferred(
                op(max_attempts=2, retry_backoff=0.05, job_annotations=forever), "rbac_evicted"
            )
            # An MPIJob killed in Airflow: the trigger asks, the api-server answers.
            killed, killed_context = deferred(op(workers=2, job_annotations=forever), "rbac_kill")
            # An MPIJob whose person's cancel stopped after its verdict: the controller ends it (deletes it).
            half_cancelled, _ = deferred(op(workers=2, job_annotations=forever), "rbac_half_cancel")
            # A retry (try 2 of a run with one retry) reads, by name, whether try 1 was cancelled.
            second = task_context("rbac_second_try", try_number=2)
            second["ti"].max_tries = 1
            with pytest.raises(TaskDeferred):
                op(retries=1, job_annotations=quick).execute(second)

            async def everything() -> dict[str, dict]:
                run_as("triggerer")
                client = await KubeClient.from_kubeconfig(api_server)
                target = inspect.Target(namespace=NAMESPACE, quota_configmap=QUOTA)
                try:
                    following = {
                        name: asyncio.ensure_future(collect(d.trigger, 120))
                        for name, d in {
                            "ok": ok,
                            "mpi": mpi,
                            "stuck": stuck,
                            "ddp": ddp,
                            "evicted": evicted,
                            "killed": killed,
                            "half_cancelled": half_cancelled,
                            "blocker": blocker,
                            "timed_out": timed_out,
                        }.items()
                    }
                    # A person's cancel of a queued MPIJob (deleted), then again (its record answers).
                    outcome = await inspect.cancel(client, target, queued_cancel.trigger.job_name, by="admin")
                    assert outcome.deleted, outcome
                    again = await inspect.cancel(client, target, queued_cancel.trigger.job_name, by="bob")
                    assert again.already_finished and "already cancelled by admin" in again.message, again
                    later = datetime.now(timezone.utc) + timedelta(days=30)
                    assert await delete_expired_records(client, NAMESPACE, later) == 1
                    # Evicted while it runs; its next attempt is cancelled running.
                    pod = await asyncio.to_thread(_running_pod, cluster, evicted.trigger.job_name)
                    cluster.call(cluster.controllers.evict_pod, NAMESPACE, pod)
                    second_attempt = attempt_name(evicted.trigger.job_name, 2)
                    await asyncio.to_thread(_running_pod, cluster, second_attempt)
                    await inspect.cancel(client, target, second_attempt, by="admin")
                    # The half cancel: only the verdict of a person's cancel landed.
                    name = half_cancelled.trigger.job_name
                    await asyncio.to_thread(_running_pod, cluster, f"{name}-launcher")
                    verdict = verdict_only_patch(
                        await client.get(MPIJOBS, NAMESPACE, name), "Cancelled", "by admin"
                    )
                    verdict["metadata"]["annotations"][labels.CANCELLED_BY] = "admin"
                    await client.merge_patch(MPIJOBS, NAMESPACE, name, verdict)
                    # The kill: the trigger's on_kill asks, the api-server answers.
                    await asyncio.to_thread(_running_pod, cluster, f"{killed.trigger.job_name}-launcher")
                    killed.trigger.task_instance = killed_context["ti"]
                    await killed.trigger.on_kill()
                    answered = await the_api_server_answers_kills(client, NAMESPACE)
                    assert [a.name for a in answered if a.verdict.cancel] == [killed.trigger.job_name], (
                        answered
                    )
                    # The blocker goes once the queue timeout has ruled.
                    done = await following["timed_out"]
                    await inspect.cancel(client, target, blocker.trigger.job_name, by="admin")
                    events = {name: await future for name, future in following.items()}
                    assert events["timed_out"] is done
                    # The page's reads, with the jobs as they ended.
                    state, job = await inspect.read_job(client, target, ok.trigger.job_name)
                    pods = [p for p in state.pods if ok.trigger.job_name in p["metadata"]["name"]]
                    assert await inspect.read_log_tails(client, NAMESPACE, job, pods)
                    async for _line in inspect.follow_log(
                        client, NAMESPACE, pods[0]["metadata"]["name"], "main"
                    ):
                        break
                    await client.get(CONFIGMAPS, NAMESPACE, QUOTA)
                    assert (await inspect.read_nodes(client, target)).gpus == 24
                    return events
                finally:
                    await client.close()
                    await admission_shutdown()
                    await shared.shutdown()

            events = asyncio.run(everything())
            # The finished MPIJob is marked for deletion at the end of its TTL by the controller.
            deadline = time.monotonic() + 30 * stretch()
            while labels.DELETE_AFTER not in (
                cluster.store.get("mpijobs", mpi.trigger.job_name, NAMESPACE)["metadata"].get("annotations")
                or {}
            ):
                assert time.monotonic() < deadline, "the finished MPIJob was never marked for deletion"
                time.sleep(0.1)

        states = {name: (e["status"], e["state"]) for name, e in events.items()}
        assert states == {
            "ok": ("success", "SUCCEEDED"),
            "mpi": ("success", "SUCCEEDED"),
            "stuck": ("failed", "FAILED"),
            "ddp": ("failed", "FAILED"),
            "evicted": ("failed", "CANCELLED"),
            "killed": ("failed", "CANCELLED"),
            "half_cancelled": ("failed", "CANCELLED"),
            "blocker": ("failed", "CANCELLED"),
            "timed_out": ("failed", "FAILED"),
        }, states
        assert events["timed_out"]["reason"] == "QueueTimeout", events["timed_out"]

        # A controller that stopped between its two writes of an admission: the reservation is in the
        # ledger, the job still suspended. The next controller's pass reads the ledger afresh and repairs
        # it (cv: a group of its own).
        run_as("worker")
        lost, _ = deferred(op("cv", job_annotations=quick), "rbac_lost_unsuspend")
        crashed = write_kubeconfig(str(tmp_path / "crashed.yaml"), cluster.url, CONTROLLER_TOKEN)
        asyncio.run(_reserve_before_a_crash(crashed, lost.trigger.job_name))
        before = cluster.authorized()  # the crashed controller's writes are not the new one's
        with controller_process(cluster, tmp_path):
            run_as("triggerer")

            async def follow_lost() -> dict:
                try:
                    return await collect(lost.trigger, 120)
                finally:
                    await admission_shutdown()
                    await shared.shutdown()

            assert asyncio.run(follow_lost())["status"] == "success"

        run_as("worker")
        assert asyncio.run(
            JobSensor(task_id="wait", job_name=ok.trigger.job_name, namespace=NAMESPACE)._poke()
        )
        mpi_sensor = JobSensor(
            task_id="wait_mpi", job_name=mpi.trigger.job_name, kind="MPIJob", namespace=NAMESPACE
        )
        assert asyncio.run(mpi_sensor._poke())
        used, refused = sent(cluster)
        lost_phase, _ = sent(cluster, before)

    # The GET of a ledger only the repair sends: that one must be the new controller's own.
    assert "get" in lost_phase["controller"].get(("", "configmaps"), set()), lost_phase["controller"]
    check_against_the_roles(used, _refusals_beyond(refused, EXPECTED_REFUSALS), elsewhere=DRIVEN_WITH_KUEUE)


@pytest.mark.slow
def test_on_a_kueue_cluster_each_component_reads_what_kueue_says_under_its_own_roles(monkeypatch, tmp_path):
    """rbac-kueue.yaml and rbac-kueue-config.yaml beside the rest, enforced on a simulated cluster that
    runs Kueue (configured to manage every job): the controller hands the jobs to their LocalQueue
    after reading Kueue's configuration and the namespace's labels, the triggerer follows Kueue's Workloads
    and reads the waiting job's position from Kueue's visibility API, the api-server shows both; the
    worker may read neither; each component sends exactly what its Roles grant."""
    from airflow_jobs_sim.config import KueueConfig
    from airflow_jobs_sim.kubeconfig import write_kubeconfig

    from airflow_jobs_plugin.cluster.kube import PENDING_IN_LOCAL_QUEUES, WORKLOADS, KubeError
    from airflow_jobs_plugin.queueing import kueue
    from airflow_jobs_plugin.readmodel.views import overview

    monkeypatch.setenv("AIRFLOW__AIRFLOW_JOBS__QUOTA_CONFIGMAP", "")
    with SimCluster(enforcing(kueue=KueueConfig())) as cluster:
        install(cluster, kueue=True)
        # Kueue's configuration as the controller reads it says it takes every job: the controller then
        # reads the namespace's labels (kueue.takes_unlabelled_jobs). The simulated Kueue itself takes
        # only labelled jobs (it does not move a Workload to the LocalQueue a job is handed to later),
        # which changes nothing of what the controller sends.
        cluster.store.create(
            "configmaps",
            {
                "metadata": {"name": kueue.CONFIG_MAP},
                "data": {kueue.CONFIG_KEY: "manageJobsWithoutQueueName: true\n"},
            },
            kueue.CONFIG_NAMESPACE,
        )
        gpu = "nvidia.com/gpu"
        cluster.store.create("resourceflavors", {"metadata": {"name": "default-flavor"}})
        flavors = [{"name": "default-flavor", "resources": [{"name": gpu, "nominalQuota": 4}]}]
        cluster.store.create(
            "clusterqueues",
            {
                "metadata": {"name": "team"},
                "spec": {
                    "namespaceSelector": {},
                    "resourceGroups": [{"coveredResources": [gpu], "flavors": flavors}],
                },
            },
        )
        cluster.store.create(
            "localqueues", {"metadata": {"name": "team"}, "spec": {"clusterQueue": "team"}}, NAMESPACE
        )
        api_server = write_kubeconfig(str(tmp_path / "api.yaml"), cluster.url, "api-server-token")
        run_as = component_runner(cluster, tmp_path, monkeypatch)

        common = {"image": "t:1", "group": "vision", "gpus": 4, "namespace": NAMESPACE, "kueue_queue": "team"}
        # Each runs 15 s of a quiet machine while the API server's view is read (simulated seconds
        # at time_scale 0.01), more on a loaded one, where the reads below take longer too.
        first_runs = round(1500 * stretch())
        run_as("worker")
        first, _ = deferred(
            JobOperator(
                task_id="first",
                job_annotations={SCENARIO: json.dumps({"main": {"run": first_runs}})},
                **common,
            ),
            "rbac_kueue_first",
        )
        second, _ = deferred(
            JobOperator(
                task_id="second",
                job_annotations={SCENARIO: json.dumps({"main": {"run": first_runs}})},
                **common,
            ),
            "rbac_kueue_second",
        )
        # Naming no queue, in a namespace Kueue takes every job of: the controller asks Kueue's
        # configuration and the namespace's labels, and would hand it to Kueue's `default` LocalQueue,
        # which this namespace has not: it waits in the product's queue, saying so.
        unqueued, _ = deferred(
            JobOperator(task_id="unqueued", image="t:1", group="vision", gpus=1, namespace=NAMESPACE),
            "rbac_kueue_unqueued",
        )

        async def beyond_the_workers_role() -> list[int]:
            client = await KubeClient.from_connection()
            codes = []
            try:
                for call in (
                    lambda: client.list(WORKLOADS, NAMESPACE),
                    lambda: client.get_subresource(
                        PENDING_IN_LOCAL_QUEUES, NAMESPACE, "team", "pendingworkloads"
                    ),
                ):
                    with pytest.raises(KubeError) as info:
                        await call()
                    codes.append(info.value.status)
            finally:
                await client.close()
            return codes

        assert asyncio.run(beyond_the_workers_role()) == [403, 403]
        before = cluster.authorized()  # the worker's refused reads just now were on purpose

        async def triggerer_and_api_server() -> None:
            try:
                run_as("triggerer")
                following = [
                    asyncio.ensure_future(collect(d.trigger, timeout=90 + 2 * first_runs * 0.01))
                    for d in (first, second)
                ]
                client = await KubeClient.from_kubeconfig(api_server)
                try:
                    # The second waits behind the first: Kueue's visibility API says where.
                    # The controller is a fresh interpreter: its start-up, like the wait, stretches
                    # with the machine's load.
                    deadline = Deadline(30)
                    while True:
                        found = await client.get_subresource(
                            PENDING_IN_LOCAL_QUEUES, NAMESPACE, "team", "pendingworkloads"
                        )
                        if found["items"] or deadline.passed():
                            break
                        await asyncio.sleep(0.1)
                    assert found["items"], f"no workload pending in LocalQueue team after {deadline}"
                    assert found["items"][0]["positionInClusterQueue"] == 0, found
                    state = await inspect.read_cluster(client, inspect.Target(namespace=NAMESPACE))
                    assert state.workloads_problem is None
                    rows = {r.name: r for r in overview(state).jobs}
                    # Both are handed to Kueue within the same second, and Kueue orders Workloads of
                    # one priority by their creation time, to the second: either may be admitted first.
                    # Both run alike, so the other waits whichever it is.
                    pair = [rows[d.trigger.job_name] for d in (first, second)]
                    queued = [row for row in pair if row.state == "QUEUED"]
                    assert len(queued) == 1, pair
                    (waiting,) = queued
                    assert waiting.queue_position == 1, waiting
                    assert "1st in LocalQueue team" in waiting.message, waiting.message
                    for event in await asyncio.gather(*following):
                        assert event["status"] == "success", event
                    # The job naming no queue waits for Kueue's `default` LocalQueue; a person cancels it.
                    await inspect.cancel(
                        client, inspect.Target(namespace=NAMESPACE), unqueued.trigger.job_name, by="admin"
                    )
                    assert (await collect(unqueued.trigger))["state"] == "CANCELLED"
                finally:
                    await client.close()
            finally:
                await admission_shutdown()
                await shared.shutdown()

        with controller_process(cluster, tmp_path, "--namespace", NAMESPACE):
            asyncio.run(triggerer_and_api_server())
        used, refused = sent(cluster, before)

    for component, keys in DRIVEN_WITH_KUEUE.items():
        for key, verbs in keys.items():
            assert verbs <= used[component].get(key, set()), (component, key, used[component])
    # The Kueue Roles grant what was sent here and nothing more; the rest of each component's requests
    # were allowed by its other Roles (RBAC refused none of them).
    refusals = _refusals_beyond(refused, {"api-server": {"list pods /"}})
    assert not any(refusals.values()), refusals
    for component, user in USERS.items():
        grants = granted(user, KUEUE_RBAC_FILES)
        for key, verbs in grants.items():
            assert verbs <= used[component].get(key, set()), (component, key, used[component].get(key))


def test_every_cheat_is_refused_whoever_sends_it(tmp_path):
    """The cheats of tests/deploy/cheats.py, each sent with the worker's, the triggerer's, the
    api-server's and an admin's credentials to a simulated cluster enforcing the shipped RBAC and
    policies: RBAC refuses the ones its Role does not grant, the policies the rest, naming the rule (the
    real plane's version: tests/plane_scenarios/test_rbac_and_admission_policy_on_the_plane.py)."""
    from airflow_jobs_sim.kubeconfig import write_kubeconfig

    from tests.deploy import cheats

    with SimCluster(enforcing(nodes=1)) as cluster:
        install(cluster)
        kubeconfigs = {
            **{
                c: write_kubeconfig(str(tmp_path / f"{c}.yaml"), cluster.url, f"{c}-token")
                for c in COMPONENTS
            },
            "admin": cluster.kubeconfig_path,
        }

        async def go() -> list[tuple[cheats.Cheat, str, object]]:
            clients = {who: await KubeClient.from_kubeconfig(path) for who, path in kubeconfigs.items()}
            try:
                honest = await clients["worker"].create(JOBS, NAMESPACE, cheats.honest_body())
                answers = [
                    (cheat, who, await cheats.attempt(clients[who], NAMESPACE, cheat, honest))
                    for cheat, who in cheats.tries()
                ]
                after = await clients["admin"].get(JOBS, NAMESPACE, honest["metadata"]["name"])
                for part in ("labels", "annotations"):
                    assert after["metadata"][part] == honest["metadata"][part], (part, after["metadata"])
                assert after["spec"] == honest["spec"], after["spec"]
                return answers
            finally:
                for client in clients.values():
                    await client.close()

        answers = asyncio.run(go())
    for cheat, who, answer in answers:
        cheats.check_refused(cheat, who, answer)
    assert {who for _, who, _ in answers} == {"worker", "triggerer", "api-server", "admin"}


def test_on_the_simulator_a_job_runs_as_an_allowed_account_and_the_api_server_only_acts_for_people(
    monkeypatch, tmp_path
):
    """Rules job-accounts and user-actions-only, with the shipped RBAC, policies and the parameter
    ConfigMap, for the deployment's service-account identities (the real plane's version:
    tests/plane_scenarios/test_rbac_and_admission_policy_on_the_plane.py)."""
    from airflow_jobs_plugin.cluster.kube import KubeError
    from airflow_jobs_plugin.jobs.kinds.mpi import MPIJOBS
    from airflow_jobs_plugin.jobs.manifests import build_manifest, pool_gate
    from airflow_jobs_plugin.jobs.spec import TaskIdentity, validate
    from airflow_jobs_plugin.usecases import actions

    with SimCluster(enforcing(nodes=1)) as cluster:
        install(cluster)
        run_as = component_runner(cluster, tmp_path, monkeypatch)

        def body(kind: str, **changes) -> dict:
            identity = TaskIdentity("accounts", kind.lower(), "run-1", -1, 1)
            spec = validate(
                image="t:1", group="vision", user="alice", gpus=1, workers=2 if kind == "MPIJob" else 1
            )
            built = pool_gate(
                build_manifest(
                    spec,
                    name=identity.job_name(1),
                    task=identity,
                    attempt=1,
                    queued_at=datetime.now(timezone.utc),
                )
            )
            pod = (built["spec"]["mpiReplicaSpecs"]["Worker"] if kind == "MPIJob" else built["spec"])[
                "template"
            ]["spec"]
            pod.update(changes)
            return built

        async def as_worker() -> tuple[KubeError, KubeError, dict]:
            client = await KubeClient.from_connection()
            try:
                refused = []
                for cheat in (
                    {"serviceAccountName": "airflow-triggerer"},
                    {"automountServiceAccountToken": True},
                ):
                    with pytest.raises(KubeError) as info:
                        await client.create(JOBS, NAMESPACE, body("Job", **cheat))
                    refused.append(info.value)
                honest = await client.create(MPIJOBS, NAMESPACE, body("MPIJob"))
                return refused[0], refused[1], honest
            finally:
                await client.close()

        run_as("worker")
        as_triggerer, with_token, honest = asyncio.run(as_worker())
        for refused in (as_triggerer, with_token):
            assert refused.status == 403, refused
            assert "ValidatingAdmissionPolicy 'airflow-jobs-job-accounts'" in str(refused), refused
            assert "airflow-jobs rule job-accounts" in str(refused), refused
        name = honest["metadata"]["name"]

        async def as_api_server() -> tuple[list[KubeError], list[str]]:
            client = await KubeClient.from_connection()
            try:
                refused = []
                for patch in (
                    {"spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 8}}}},
                    {"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "vip"}}},
                    {"metadata": {"annotations": {labels.PRIORITY: "1000"}}},
                    # Only the rule user-actions-only refuses it (the requeue count is the controller's).
                    {"metadata": {"annotations": {labels.REQUEUE_COUNT: "7"}}},
                ):
                    with pytest.raises(KubeError) as info:
                        await client.merge_patch(MPIJOBS, NAMESPACE, name, patch)
                    refused.append(info.value)
                stopped = await actions.stop(
                    client, NAMESPACE, await client.get(MPIJOBS, NAMESPACE, name), "alice"
                )
                resumed = await actions.resume(
                    client, NAMESPACE, await client.get(MPIJOBS, NAMESPACE, name), "alice", NAMESPACE
                )
                cancelled = await actions.cancel(
                    client, NAMESPACE, await client.get(MPIJOBS, NAMESPACE, name), "alice"
                )
                return refused, [stopped.message, resumed.message, cancelled.message]
            finally:
                await client.close()

        run_as("api-server")
        refused, said = asyncio.run(as_api_server())
        for error in refused:
            assert error.status == 403 and "airflow-jobs rule" in str(error), error
        assert any("user-actions-only" in str(e) for e in refused), refused
        assert "stopped" in said[0] and "resumed" in said[1] and "cancel" in said[2], said


def test_on_the_simulator_no_job_breaks_out_of_its_pods_whoever_creates_it(monkeypatch, tmp_path):
    """Rule pod-security, with the shipped RBAC, policies and pod-security.yaml (its parameter), for the
    worker's token (a DAG's own code) and the admin's: each breakout the red team ran is refused naming
    the rule and the check, and the product's own jobs of every kind, with and without GPUs, pass (the
    real plane's version: tests/plane_scenarios/test_pod_security_on_the_plane.py)."""
    from airflow_jobs_sim.kubeconfig import write_kubeconfig

    from airflow_jobs_plugin.cluster.kube import KubeError
    from airflow_jobs_plugin.jobs.kinds.mpi import MPIJOBS
    from airflow_jobs_plugin.jobs.manifests import build_manifest, pool_gate
    from airflow_jobs_plugin.jobs.spec import TaskIdentity, validate

    serial = iter(range(1, 1000))

    def body(breakout: str | None = None, **args) -> dict:
        identity = TaskIdentity("podsec", "train", f"run-{next(serial)}", -1, 1)
        built = pool_gate(
            build_manifest(
                validate(image="t:1", group="vision", user="alice", **args),
                name=identity.job_name(1),
                task=identity,
                attempt=1,
                queued_at=datetime.now(timezone.utc),
            )
        )
        replicas = built["spec"].get("mpiReplicaSpecs")
        pod = (replicas["Worker"] if replicas else built["spec"])["template"]["spec"]
        main = pod["containers"][0]
        if breakout == "hostPath /dev":
            pod["volumes"].append({"name": "dev", "hostPath": {"path": "/dev"}})
        elif breakout == "hostPath /var/lib/kubelet/pods":
            pod["volumes"].append({"name": "pods", "hostPath": {"path": "/var/lib/kubelet/pods"}})
        elif breakout == "hostPID + SYS_PTRACE":
            pod["hostPID"] = True
            main["securityContext"] = {"capabilities": {"add": ["SYS_ADMIN", "SYS_PTRACE"]}}
        elif breakout == "capabilities ALL":
            main["securityContext"] = {"capabilities": {"add": ["ALL"]}, "allowPrivilegeEscalation": True}
        elif breakout == "hostNetwork":
            pod["hostNetwork"] = True
        elif breakout == "runtimeClassName":
            pod["runtimeClassName"] = "kata"
        return built

    breakouts = {
        "hostPath /dev": "hostPathVolumes",
        "hostPath /var/lib/kubelet/pods": "hostPathVolumes",
        "hostPID + SYS_PTRACE": "hostNamespaces",
        "capabilities ALL": "capabilities_baseline",
        "hostNetwork": "hostNamespaces",
        "runtimeClassName": "runtimeClassName is not one the platform allows",
    }
    honest = [
        {"gpus": 1},
        {"gpus": 0},
        {"gpus": 2, "workers": 2},
        {"gpus": 0, "workers": 2},
        {"gpus": 1, "workers": 2, "framework": "torchrun"},
    ]
    with SimCluster(enforcing(nodes=1)) as cluster:
        install(cluster)
        (namespace,) = cluster.store.list("namespaces", field_selector=f"metadata.name={NAMESPACE}")
        assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
        run_as = component_runner(cluster, tmp_path, monkeypatch)
        admin = write_kubeconfig(str(tmp_path / "admin.yaml"), cluster.url, "admin")

        async def submit(kubeconfig: str | None, bodies: list[dict]) -> list:
            client = await (
                KubeClient.from_kubeconfig(kubeconfig) if kubeconfig else KubeClient.from_connection()
            )
            answers: list = []
            try:
                for one in bodies:
                    resource = MPIJOBS if one["kind"] == "MPIJob" else JOBS
                    try:
                        answers.append(await client.create(resource, NAMESPACE, one))
                    except KubeError as exc:
                        answers.append(exc)
            finally:
                await client.close()
            return answers

        run_as("worker")
        refused = asyncio.run(submit(None, [body(b, gpus=1) for b in breakouts]))
        by_admin = asyncio.run(submit(admin, [body(b, gpus=2, workers=2) for b in breakouts]))
        for answers in (refused, by_admin):
            for (name, check), answer in zip(breakouts.items(), answers, strict=True):
                assert isinstance(answer, KubeError) and answer.status == 403, (name, answer)
                assert "ValidatingAdmissionPolicy 'airflow-jobs-pod-security'" in str(answer), (name, answer)
                assert "airflow-jobs rule pod-security" in str(answer) and check in str(answer), (
                    name,
                    answer,
                )
        accepted = asyncio.run(submit(None, [body(**args) for args in honest]))
        for args, answer in zip(honest, accepted, strict=True):
            assert not isinstance(answer, KubeError), (args, answer)
