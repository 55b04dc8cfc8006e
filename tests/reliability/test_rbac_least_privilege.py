"""Each Role shipped in helm-values/ grants exactly what its component uses: no more, no less.

What the product uses is not written down by hand: every path it has (submit under a quota, follow a job to
its end with its logs, an MPI job, a fail-fast ruling, a job-level retry, a user kill, a sensor, the UI and
CLI reads and cancel) runs against the simulated cluster, whose request counters name each (verb,
resource) it served, in RBAC's own vocabulary. The paths run one component at a time (the worker's
execute and poke, the triggerer's triggers, the api-server's reads and cancel), so each component's
requests are checked against the Role bound to its service account."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml
from airflow.sdk.exceptions import TaskDeferred
from airflow_jobs_sim import ClusterConfig, SimCluster
from task_doubles import task_context

from airflow_jobs_plugin.airflow.operators import JobOperator
from airflow_jobs_plugin.airflow.sensors import JobSensor
from airflow_jobs_plugin.cluster import watch as shared
from airflow_jobs_plugin.cluster.kube import CONFIGMAPS, JOBS, KubeClient
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.plugin.sweep import delete_expired_records
from airflow_jobs_plugin.queueing.engines.pool import shutdown as admission_shutdown
from airflow_jobs_plugin.queueing.quota import ledger as ledger_io
from airflow_jobs_plugin.queueing.quota import ledger_model
from airflow_jobs_plugin.queueing.quota.model import Reservation
from airflow_jobs_plugin.readmodel import inspect
from tests.patience import stretch

ROLE = Path(__file__).resolve().parents[2] / "helm-values" / "rbac.yaml"
# Everything else is the core group "".
RESOURCE_GROUPS = {"jobs": "batch", "mpijobs": "kubeflow.org", "leases": "coordination.k8s.io"}
SCENARIO = "sim.airflow-jobs.io/scenario"


# The component whose requests each path makes, and the values.yaml service account it runs as.
COMPONENTS = {
    "worker": "airflow-worker",
    "triggerer": "airflow-triggerer",
    "api-server": "airflow-api-server",
}


# Verbs a component needs on paths this scenario does not drive (races and lags), each with the path.
# None: the triggerer reads the quota ledger from its ledger watch, and GETs it before a pass acts on
# jobs without writing the ledger (queueing/quota/ledger.py admission_pass: never from a cached ledger), which
# the lost unsuspend below drives.
# Karpenter's NodePools: the simulator serves no Karpenter API, so the triggerer's LIST of them
# (engines.door.Door._read_autoscaling, where Karpenter runs) is answered 404 and never counted.
NOT_DRIVEN: dict[str, dict[tuple[str, str], set[str]]] = {
    "triggerer": {
        ("karpenter.sh", "nodepools"): {"list"},
    }
}


async def _reserve_before_a_crash(job_name: str) -> None:
    """Write a reservation of the queued ``job_name`` into its group's ledger, admitted long enough ago
    that a pass takes the job for one whose unsuspend was lost (ledger_model.pending_unsuspend)."""
    client = await KubeClient.from_connection()
    try:
        job = await client.get(JOBS, "default", job_name)
        queued = ledger_io.queued_job(job)
        admitted = datetime.now(timezone.utc) - ledger_model.UNSUSPEND_GRACE * 5
        reservation = Reservation.for_job(queued, admitted)
        await ledger_io.update_ledger(
            client,
            "default",
            queued.group,
            lambda held: dataclasses.replace(held, reservations=(*held.reservations, reservation)),
        )
    finally:
        await client.close()


def roles_of(service_account: str) -> list[dict]:
    """The Role (exactly one) and any ClusterRoles that rbac.yaml binds to ``service_account``."""
    docs = [d for d in yaml.safe_load_all(ROLE.read_text()) if d]
    roles = {(d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"] in ("Role", "ClusterRole")}
    bound = [
        (d["roleRef"]["kind"], d["roleRef"]["name"])
        for d in docs
        if d["kind"] in ("RoleBinding", "ClusterRoleBinding")
        and any(s["name"] == service_account for s in d["subjects"])
    ]
    assert sum(1 for kind, _ in bound if kind == "Role") == 1, bound
    return [roles[ref] for ref in bound]


def granted(service_account: str) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for rule in (rule for role in roles_of(service_account) for rule in role["rules"]):
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def deferred(op: JobOperator, dag_id: str) -> tuple[TaskDeferred, dict]:
    context = task_context(dag_id)
    with pytest.raises(TaskDeferred) as info:
        op.execute(context)
    return info.value, context


async def collect(trigger, timeout: float = 60) -> dict:
    (event,) = await asyncio.wait_for(_events(trigger), timeout)
    return event


async def _events(trigger) -> list[dict]:
    return [e.payload async for e in trigger.run()]


@pytest.mark.slow
def test_the_role_grants_exactly_the_verbs_the_product_uses(monkeypatch):
    with SimCluster(ClusterConfig(nodes=2, gpus_per_node=8, time_scale=0.01)) as cluster:
        monkeypatch.setenv(
            "AIRFLOW_CONN_KUBERNETES_DEFAULT",
            json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": cluster.kubeconfig_path}}),
        )
        cluster.store.create(
            "configmaps",
            {
                "metadata": {"name": "policy"},
                "data": {"policy.yaml": "groups:\n  vision: {gpus: 8}\n  nlp: {gpus: 8}\n"},
            },
            "default",
        )
        cluster.reset_counters()
        used: dict[str, dict[tuple[str, str], set[str]]] = {c: {} for c in COMPONENTS}

        def charge(component: str) -> None:
            """Book every request served since the last call to ``component``."""
            # A request the product sent just before its client closed may still sit in the simulator's
            # socket buffer: let the simulator's loop turn until it has read and counted it. Each call
            # is one full loop iteration (I/O, then callbacks); a request needs a few to be parsed.
            for _ in range(20):
                cluster.call(lambda: None)
            for (verb, resource), count in cluster.counters().items():
                if count:
                    # A subresource (mpijobs/status) is in its resource's group.
                    group = RESOURCE_GROUPS.get(resource.split("/")[0], "")
                    used[component].setdefault((group, resource), set()).add(verb)
            cluster.reset_counters()

        quick = {SCENARIO: json.dumps({"main": {"run": 2, "logs": ["epoch 1"]}})}

        ok, ok_ctx = deferred(
            JobOperator(
                task_id="train",
                image="t:1",
                group="vision",
                gpus=1,
                quota_configmap="policy",
                job_annotations=quick,
            ),
            "rbac_quota",
        )
        mpi, _ = deferred(
            JobOperator(
                task_id="train", image="t:1", group="vision", gpus=1, workers=2, job_annotations=quick
            ),
            "rbac_mpi",
        )
        stuck, _ = deferred(
            JobOperator(task_id="train", image="t:not-found", group="vision", gpus=1), "rbac_pull"
        )
        # A torchrun job: the worker creates its headless Service beside it; its retry's next attempt
        # gets one from the triggerer.
        ddp, _ = deferred(
            JobOperator(
                task_id="train",
                image="t:1",
                group="vision",
                gpus=1,
                workers=2,
                framework="torchrun",
                backoff_limit=0,
                max_attempts=2,
                retry_backoff=0.05,
                retryable_exit_codes=[3],
                job_annotations={SCENARIO: json.dumps({"main": {"run": 1, "exit": 3}})},
            ),
            "rbac_ddp",
        )
        retried, _ = deferred(
            JobOperator(
                task_id="train",
                image="t:1",
                group="vision",
                gpus=1,
                backoff_limit=0,
                max_attempts=2,
                retry_backoff=0.05,
                retryable_exit_codes=[3],
                job_annotations={SCENARIO: json.dumps({"main": {"run": 1, "exit": 3}})},
            ),
            "rbac_retry",
        )
        killed, _ = deferred(
            JobOperator(
                task_id="train",
                image="t:1",
                group="vision",
                gpus=1,
                workers=2,
                job_annotations={SCENARIO: json.dumps({"main": {"run": None}})},
            ),
            "rbac_kill",
        )

        live, _ = deferred(
            JobOperator(
                task_id="train",
                image="t:1",
                group="vision",
                gpus=1,
                job_annotations={SCENARIO: json.dumps({"main": {"run": None}})},
            ),
            "rbac_cancel",
        )
        # Queued MPIJobs, cancelled before any admission: no controller can end them, so their cancel
        # deletes them (action_rules.cancel_ending), once from Airflow's kill and once from the page.
        queued_kill, _ = deferred(
            JobOperator(task_id="train", image="t:1", group="vision", gpus=1, workers=2), "rbac_kill_queued"
        )
        queued_cancel, _ = deferred(
            JobOperator(task_id="train", image="t:1", group="vision", gpus=1, workers=2), "rbac_cancel_queued"
        )
        # A lost unsuspend: a triggerer reserved this job's GPUs in its group's ledger and stopped before
        # unsuspending it. The pass that finds it repairs it without writing the ledger, so it reads the
        # ledger first. (Its own group: the first group's ledger is still created by a pass.)
        lost, _ = deferred(
            JobOperator(
                task_id="train",
                image="t:1",
                group="nlp",
                gpus=1,
                quota_configmap="policy",
                job_annotations=quick,
            ),
            "rbac_lost_unsuspend",
        )
        # An MPIJob that waits past its queue_timeout: ruled while queued, it ends Failed on the cluster
        # through its status (mpijobs/status), written by the triggerer (jobs/kinds/mpi.py
        # MPIJob.ending_writes). Two workers: a one-worker job, framework "mpi" or not, is a batch/v1 Job
        # (MPIJob.takes), which the verdict's own write ends through its deadline.
        timed_out, _ = deferred(
            JobOperator(
                task_id="train",
                image="t:1",
                group="vision",
                gpus=1,
                workers=2,
                quota_configmap="policy",
                queue_timeout=1,
            ),
            "rbac_queue_timeout",
        )
        # A retry (try 2 of a run with one retry) reads, by name, whether try 1 was cancelled: the record
        # a cancel that deleted its job left (jobs/cancel_record.py).
        retry_context = task_context("rbac_second_try", try_number=2)
        retry_context["ti"].max_tries = 1
        with pytest.raises(TaskDeferred):
            JobOperator(
                task_id="train", image="t:1", group="vision", gpus=1, retries=1, job_annotations=quick
            ).execute(retry_context)
        charge("worker")
        asyncio.run(_reserve_before_a_crash(lost.trigger.job_name))
        cluster.reset_counters()  # the crashed triggerer's write: not this scenario's
        # Its wait counts from its creation (queueing/quota/ledger_model.py queued_job_of: no claimed enqueue time
        # moves it earlier), so it has waited past its one second when the first pass judges it.
        time.sleep(1.5)

        async def triggerer_stops() -> None:
            """The triggerer's shared watch and admission loop end, so their requests are all its own."""
            await admission_shutdown()
            await shared.shutdown()
            charge("triggerer")

        async def everything() -> None:
            try:
                # First, while no trigger runs and so nothing admits them, the queued MPIJobs' cancels.
                client = await KubeClient.from_connection()
                try:
                    target = inspect.Target(namespace="default", quota_configmap="policy")
                    outcome = await inspect.cancel(client, target, queued_cancel.trigger.job_name, by="admin")
                    assert outcome.deleted, outcome
                    # Cancelled again once gone: the record of the first cancel says who did it.
                    again = await inspect.cancel(client, target, queued_cancel.trigger.job_name, by="bob")
                    assert again.already_finished and "already cancelled by admin" in again.message, again
                    # The orphan sweep's clean-up: the records whose time has run out are deleted.
                    later = datetime.now(timezone.utc) + timedelta(days=30)
                    assert await delete_expired_records(client, "default", later) == 1
                finally:
                    await client.close()
                charge("api-server")
                await queued_kill.trigger.on_kill()
                charge("triggerer")
                events = await asyncio.gather(
                    collect(ok.trigger),
                    collect(mpi.trigger),
                    collect(stuck.trigger),
                    collect(retried.trigger),
                    collect(ddp.trigger),
                    collect(lost.trigger),
                    collect(timed_out.trigger),
                )
                assert [e["status"] for e in events] == [
                    "success",
                    "success",
                    "failed",
                    "failed",
                    "failed",
                    "success",
                    "failed",
                ]
                assert events[-1]["reason"] == "QueueTimeout", events[-1]
                kill_run = asyncio.ensure_future(collect(killed.trigger))
                await asyncio.sleep(1)
                kill_run.cancel()
                # Its cancellation (the trigger's finally blocks) must end here, not in the next phase.
                with contextlib.suppress(asyncio.CancelledError):
                    await kill_run
                await killed.trigger.on_kill()
                await triggerer_stops()

                sensor = JobSensor(task_id="wait", job_name=ok.trigger.job_name)
                with pytest.raises(TaskDeferred) as waiting:
                    sensor.execute({})
                charge("worker")
                assert (await collect(waiting.value.trigger))["status"] == "success"
                await triggerer_stops()
                assert await sensor._poke()
                await JobSensor(task_id="wait_mpi", job_name=mpi.trigger.job_name)._poke()  # reads an MPIJob
                charge("worker")

                client = await KubeClient.from_connection()
                try:
                    target = inspect.Target(namespace="default", quota_configmap="policy")
                    state, job = await inspect.read_job(client, target, ok.trigger.job_name)
                    pods = [p for p in state.pods if ok.trigger.job_name in p["metadata"]["name"]]
                    assert await inspect.read_log_tails(client, "default", job, pods)
                    async for _line in inspect.follow_log(
                        client, "default", pods[0]["metadata"]["name"], "main"
                    ):
                        break
                    await inspect.cancel(client, target, live.trigger.job_name, by="admin")
                    await client.get(CONFIGMAPS, "default", "policy")
                    assert (await inspect.read_nodes(client, target)).gpus == 16  # the node view
                finally:
                    await client.close()
                charge("api-server")
            finally:
                await admission_shutdown()
                await shared.shutdown()

        asyncio.run(everything())

    for component, account in COMPONENTS.items():
        grants, uses = granted(account), used[component]
        # Jobs and MPIJobs go through the same code: a verb used on one kind is needed on the other.
        workload = uses.get(("batch", "jobs"), set()) | uses.get(("kubeflow.org", "mpijobs"), set())
        needed = {**uses, ("batch", "jobs"): workload, ("kubeflow.org", "mpijobs"): workload}
        for key, verbs in NOT_DRIVEN.get(component, {}).items():
            needed[key] = needed.get(key, set()) | verbs
        extra = {k: sorted(v - needed.get(k, set())) for k, v in grants.items() if v - needed.get(k, set())}
        missing = {k: sorted(v - grants.get(k, set())) for k, v in uses.items() if v - grants.get(k, set())}
        assert not missing, f"the {component} calls what its Role does not grant: {missing}"
        assert not extra, f"the {component}'s Role grants what none of its paths uses: {extra}"


POLICY = ROLE.parent / "admission-policy.yaml"
# The jobs' namespace's Pod Security labels and the rule pod-security's parameter (without it every job
# is refused).
POD_SECURITY = ROLE.parent / "pod-security.yaml"
NAMESPACE = "airflow"  # the release namespace the shipped bindings and policies name


def apply_shipped(cluster, path: Path, namespace: str) -> None:
    """A helm-values/ manifest as ``kubectl apply -n <namespace> -f`` would create it."""
    plurals = {
        "Role": "roles",
        "RoleBinding": "rolebindings",
        "ClusterRole": "clusterroles",
        "ClusterRoleBinding": "clusterrolebindings",
        "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
        "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
        "ConfigMap": "configmaps",
    }
    for doc in (d for d in yaml.safe_load_all(path.read_text()) if d):
        if doc["kind"] == "Namespace":
            # The namespace exists already (helm's --create-namespace): apply merges its labels.
            cluster.store.patch("namespaces", doc["metadata"]["name"], {"metadata": doc["metadata"]}, "merge")
            continue
        plural = plurals[doc["kind"]]
        namespaced = plural in ("roles", "rolebindings", "configmaps")
        cluster.store.create(plural, doc, namespace if namespaced else None)


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


@pytest.mark.slow
def test_each_component_works_under_its_own_role_and_the_api_server_refuses_the_rest(monkeypatch, tmp_path):
    # Least privilege checked by refusals: the simulated API server enforces the shipped Roles (RBAC as
    # kube-apiserver decides it, sim/rbac.py) and admission policies (sim/admission_policy.py), and each
    # component runs with its own service account's token.
    from airflow_jobs_sim.config import Identity

    from airflow_jobs_plugin.cluster.kube import JOBS, KubeError
    from airflow_jobs_plugin.jobs.manifests import build_manifest
    from airflow_jobs_plugin.jobs.spec import TaskIdentity, validate

    identities = tuple(
        Identity.service_account("airflow", account, f"{component}-token")
        for component, account in COMPONENTS.items()
    )
    config = ClusterConfig(
        nodes=2, gpus_per_node=8, time_scale=0.01, token="admin", rbac=True, identities=identities
    )
    with SimCluster(config) as cluster:
        if not cluster.store.list("namespaces", field_selector=f"metadata.name={NAMESPACE}"):
            cluster.store.create("namespaces", {"metadata": {"name": NAMESPACE}})
        apply_shipped(cluster, ROLE, NAMESPACE)
        apply_shipped(cluster, POD_SECURITY, NAMESPACE)
        apply_shipped(cluster, POLICY, NAMESPACE)
        cluster.store.create(
            "configmaps",
            {
                "metadata": {"name": "airflow-jobs-quota-policy"},
                "data": {"policy.yaml": "groups:\n  vision: {gpus: 8}\n"},
            },
            NAMESPACE,
        )
        run_as = component_runner(cluster, tmp_path, monkeypatch)

        quick = {SCENARIO: json.dumps({"main": {"run": 2, "logs": ["epoch 1"]}})}
        common = {"image": "t:1", "group": "vision", "gpus": 1, "namespace": NAMESPACE}
        run_as("worker")
        ok, _ = deferred(
            JobOperator(
                task_id="train", quota_configmap="airflow-jobs-quota-policy", job_annotations=quick, **common
            ),
            "rbac_enforced",
        )
        live, _ = deferred(
            JobOperator(
                task_id="train",
                quota_configmap="airflow-jobs-quota-policy",
                job_annotations={SCENARIO: json.dumps({"main": {"run": None}})},
                **common,
            ),
            "rbac_enforced_cancel",
        )

        async def as_worker_beyond_its_role() -> list[KubeError]:
            client = await KubeClient.from_connection()
            # A DAG that skips the pool: its own code creates a job that runs at once.
            identity = TaskIdentity("sneaky", "train", "run-1", -1, 1)
            body = build_manifest(
                validate(**common, user="sneaky"),
                name=identity.job_name(1),
                task=identity,
                attempt=1,
                queued_at=datetime.now(timezone.utc),
            )
            body["spec"]["suspend"] = False
            refused = []
            try:
                for call in (
                    lambda: client.merge_patch(
                        JOBS, NAMESPACE, ok.trigger.job_name, {"spec": {"suspend": False}}
                    ),
                    lambda: client.merge_patch(
                        CONFIGMAPS,
                        NAMESPACE,
                        "airflow-jobs-quota-policy",
                        {"data": {"policy.yaml": "groups: {}"}},
                    ),
                    lambda: client.list(CONFIGMAPS, NAMESPACE),
                    lambda: client.create(JOBS, NAMESPACE, body),
                ):
                    with pytest.raises(KubeError) as info:
                        await call()
                    refused.append(info.value)
            finally:
                await client.close()
            return refused

        unsuspend, rewrite, listing, skip_pool = asyncio.run(as_worker_beyond_its_role())
        assert unsuspend.status == 403
        assert 'User "system:serviceaccount:airflow:airflow-worker" cannot patch resource "jobs"' in str(
            unsuspend
        )
        assert rewrite.status == 403 and 'cannot patch resource "configmaps"' in str(rewrite)
        assert listing.status == 403
        # RBAC lets a worker create jobs; the admission policy refuses one that is not suspended, naming its rule.
        assert skip_pool.status == 403, skip_pool
        assert "ValidatingAdmissionPolicy 'airflow-jobs-quota-admission'" in str(skip_pool)
        assert "airflow-jobs rule suspended-submission" in str(skip_pool)

        async def triggerer_and_api_server() -> None:
            try:
                run_as("triggerer")
                event = await collect(ok.trigger)
                assert event["status"] == "success", event
                await admission_shutdown()
                await shared.shutdown()
                run_as("api-server")
                client = await KubeClient.from_connection()
                try:
                    target = inspect.Target(namespace=NAMESPACE, quota_configmap="airflow-jobs-quota-policy")
                    _state, job = await inspect.read_job(client, target, ok.trigger.job_name)
                    assert job is not None
                    await inspect.cancel(client, target, live.trigger.job_name, by="admin")
                    cancelled = await client.get(JOBS, NAMESPACE, live.trigger.job_name)
                    assert cancelled["metadata"]["annotations"][labels.CANCELLED_BY] == "admin"
                    assert cancelled["spec"]["activeDeadlineSeconds"] == 1
                    # The node view: the nodes are granted, the pods of other namespaces are not.
                    nodes = await inspect.read_nodes(client, target)
                    assert nodes.gpus == 16 and "pods outside airflow cannot be read" in (nodes.problem or "")
                    with pytest.raises(KubeError) as info:
                        await client.merge_patch(
                            CONFIGMAPS, NAMESPACE, "airflow-jobs-quota-policy", {"data": {"policy.yaml": "x"}}
                        )
                    assert info.value.status == 403
                finally:
                    await client.close()
            finally:
                await admission_shutdown()
                await shared.shutdown()

        asyncio.run(triggerer_and_api_server())


@pytest.mark.slow
def test_on_a_kueue_cluster_the_kueue_roles_let_each_component_read_what_kueue_says(monkeypatch, tmp_path):
    """rbac-kueue.yaml beside rbac.yaml, enforced on a simulated cluster that runs Kueue: a worker submits
    to a LocalQueue, the triggerer follows Kueue's Workloads and reads the waiting job's position from
    Kueue's visibility API, the api-server shows both; the worker may read neither."""
    from airflow_jobs_sim.config import Identity, KueueConfig

    from airflow_jobs_plugin.cluster.kube import PENDING_IN_LOCAL_QUEUES, WORKLOADS, KubeError
    from airflow_jobs_plugin.readmodel.views import overview

    identities = tuple(
        Identity.service_account("airflow", account, f"{component}-token")
        for component, account in COMPONENTS.items()
    )
    config = ClusterConfig(
        nodes=2,
        gpus_per_node=8,
        time_scale=0.01,
        token="admin",
        rbac=True,
        identities=identities,
        kueue=KueueConfig(),
    )
    monkeypatch.setenv("AIRFLOW__AIRFLOW_JOBS__QUOTA_CONFIGMAP", "")
    with SimCluster(config) as cluster:
        if not cluster.store.list("namespaces", field_selector=f"metadata.name={NAMESPACE}"):
            cluster.store.create("namespaces", {"metadata": {"name": NAMESPACE}})
        apply_shipped(cluster, ROLE, NAMESPACE)
        apply_shipped(cluster, ROLE.parent / "rbac-kueue.yaml", NAMESPACE)
        apply_shipped(cluster, POD_SECURITY, NAMESPACE)
        apply_shipped(cluster, POLICY, NAMESPACE)
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
        run_as = component_runner(cluster, tmp_path, monkeypatch)

        common = {"image": "t:1", "group": "vision", "gpus": 4, "namespace": NAMESPACE, "kueue_queue": "team"}
        # The first runs while the API server's view is read: 15 s of a quiet machine (simulated seconds
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
                task_id="second", job_annotations={SCENARIO: json.dumps({"main": {"run": 1}})}, **common
            ),
            "rbac_kueue_second",
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

        async def triggerer_and_api_server() -> None:
            try:
                run_as("triggerer")
                following = [
                    asyncio.ensure_future(collect(d.trigger, timeout=90 + first_runs * 0.01))
                    for d in (first, second)
                ]
                client = await KubeClient.from_connection()
                try:
                    # The second waits behind the first: Kueue's visibility API tells the triggerer where.
                    for _ in range(300):
                        found = await client.get_subresource(
                            PENDING_IN_LOCAL_QUEUES, NAMESPACE, "team", "pendingworkloads"
                        )
                        if found["items"]:
                            break
                        await asyncio.sleep(0.1)
                    assert found["items"][0]["positionInClusterQueue"] == 0, found
                finally:
                    await client.close()
                run_as("api-server")
                client = await KubeClient.from_connection()
                try:
                    state = await inspect.read_cluster(client, inspect.Target(namespace=NAMESPACE))
                    assert state.workloads_problem is None
                    rows = {r.name: r for r in overview(state).jobs}
                    waiting = rows[second.trigger.job_name]
                    assert (waiting.state, waiting.queue_position) == ("QUEUED", 1), waiting
                    assert "1st in LocalQueue team" in waiting.message, waiting.message
                finally:
                    await client.close()
                run_as("triggerer")
                for event in await asyncio.gather(*following):
                    assert event["status"] == "success", event
            finally:
                await admission_shutdown()
                await shared.shutdown()

        asyncio.run(triggerer_and_api_server())


def test_on_the_simulator_a_job_runs_as_an_allowed_account_and_the_api_server_only_acts_for_people(
    monkeypatch, tmp_path
):
    """Rules job-accounts and user-actions-only, with the shipped RBAC, policies and the parameter
    ConfigMap, for the deployment's service-account identities (the real plane's version:
    tests/plane_scenarios/test_rbac_and_admission_policy_on_the_plane.py)."""
    from airflow_jobs_sim.config import Identity

    from airflow_jobs_plugin.cluster.kube import KubeError
    from airflow_jobs_plugin.jobs import actions
    from airflow_jobs_plugin.jobs.kinds.mpi import MPIJOBS
    from airflow_jobs_plugin.jobs.manifests import build_manifest
    from airflow_jobs_plugin.jobs.spec import TaskIdentity, validate

    identities = tuple(
        Identity.service_account("airflow", account, f"{component}-token")
        for component, account in COMPONENTS.items()
    )
    config = ClusterConfig(
        nodes=1, gpus_per_node=8, time_scale=0.01, token="admin", rbac=True, identities=identities
    )
    with SimCluster(config) as cluster:
        if not cluster.store.list("namespaces", field_selector=f"metadata.name={NAMESPACE}"):
            cluster.store.create("namespaces", {"metadata": {"name": NAMESPACE}})
        apply_shipped(cluster, ROLE, NAMESPACE)
        apply_shipped(cluster, POD_SECURITY, NAMESPACE)
        apply_shipped(cluster, POLICY, NAMESPACE)
        run_as = component_runner(cluster, tmp_path, monkeypatch)

        def body(kind: str, **changes) -> dict:
            identity = TaskIdentity("accounts", kind.lower(), "run-1", -1, 1)
            spec = validate(
                image="t:1", group="vision", user="alice", gpus=1, workers=2 if kind == "MPIJob" else 1
            )
            built = build_manifest(
                spec,
                name=identity.job_name(1),
                task=identity,
                attempt=1,
                queued_at=datetime.now(timezone.utc),
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
    from airflow_jobs_sim.config import Identity
    from airflow_jobs_sim.kubeconfig import write_kubeconfig

    from airflow_jobs_plugin.cluster.kube import KubeError
    from airflow_jobs_plugin.jobs.kinds.mpi import MPIJOBS
    from airflow_jobs_plugin.jobs.manifests import build_manifest
    from airflow_jobs_plugin.jobs.spec import TaskIdentity, validate

    identities = tuple(
        Identity.service_account("airflow", account, f"{component}-token")
        for component, account in COMPONENTS.items()
    )
    config = ClusterConfig(
        nodes=1, gpus_per_node=8, time_scale=0.01, token="admin", rbac=True, identities=identities
    )
    serial = iter(range(1, 1000))

    def body(breakout: str | None = None, **args) -> dict:
        identity = TaskIdentity("podsec", "train", f"run-{next(serial)}", -1, 1)
        built = build_manifest(
            validate(image="t:1", group="vision", user="alice", **args),
            name=identity.job_name(1),
            task=identity,
            attempt=1,
            queued_at=datetime.now(timezone.utc),
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
    with SimCluster(config) as cluster:
        if not cluster.store.list("namespaces", field_selector=f"metadata.name={NAMESPACE}"):
            cluster.store.create("namespaces", {"metadata": {"name": NAMESPACE}})
        apply_shipped(cluster, ROLE, NAMESPACE)
        apply_shipped(cluster, POD_SECURITY, NAMESPACE)
        apply_shipped(cluster, POLICY, NAMESPACE)
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
