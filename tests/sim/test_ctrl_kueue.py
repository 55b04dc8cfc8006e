"""The simulated Kueue (kubernetes-sigs/kueue v0.19.2), scenario by scenario, as Kueue's documentation tells
them: a job queued on a LocalQueue is suspended and admitted within its ClusterQueue's quota; a job
unsuspended behind Kueue's back is suspended again; StrictFIFO vs BestEffortFIFO; borrowing in a cohort;
preemption by priority; the waitForPodsReady timeout. Off by default: a cluster without Kueue serves no
kueue.x-k8s.io API and leaves labelled jobs alone."""

from __future__ import annotations

import json
import uuid

import pytest
from airflow_jobs_sim.cluster import SimCluster
from airflow_jobs_sim.config import ClusterConfig, KueueConfig
from airflow_jobs_sim.controllers.kueue import (
    QUEUE_NAME_LABEL,
    Candidate,
    QueueView,
    assign_flavor,
    available,
    choose_victims,
    job_pods_ready,
    pods_ready_condition,
    pods_ready_deadline,
    requeue_backoff,
    workload_name,
)
from airflow_jobs_sim.errors import ApiError
from airflow_jobs_sim.scenarios import ANNOTATION
from sim_waiting import wait_for

GPU = "nvidia.com/gpu"


@pytest.fixture(scope="module")
def cluster():
    config = ClusterConfig(nodes=2, gpus_per_node=8, time_scale=0.02, kueue=KueueConfig())
    with SimCluster(config) as c:
        yield c


@pytest.fixture
def ns(cluster):
    name = f"kq-{uuid.uuid4().hex[:6]}"
    cluster.store.create("namespaces", {"metadata": {"name": name}})
    return name


def flavor(cluster, name: str = "default-flavor") -> None:
    try:
        cluster.store.create("resourceflavors", {"metadata": {"name": name}})
    except ApiError as exc:
        assert exc.code == 409


def cluster_queue(
    cluster, name: str, gpus: int, *, strategy=None, cohort=None, borrowing=None, preempt=False
):
    flavor(cluster)
    resource = {"name": GPU, "nominalQuota": gpus}
    if borrowing is not None:
        resource["borrowingLimit"] = borrowing
    spec: dict = {
        "namespaceSelector": {},
        "resourceGroups": [
            {"coveredResources": [GPU], "flavors": [{"name": "default-flavor", "resources": [resource]}]}
        ],
    }
    if strategy:
        spec["queueingStrategy"] = strategy
    if cohort:
        spec["cohortName"] = cohort
    if preempt:
        spec["preemption"] = {"withinClusterQueue": "LowerPriority"}
    cluster.store.create("clusterqueues", {"metadata": {"name": name}, "spec": spec})


def local_queue(cluster, ns: str, name: str, cq: str) -> None:
    cluster.store.create(
        "localqueues", {"metadata": {"name": name, "namespace": ns}, "spec": {"clusterQueue": cq}}
    )


def job(
    cluster,
    ns: str,
    name: str,
    gpus: int,
    queue: str | None = "team",
    run: float = 30.0,
    priority=None,
    **extra,
):
    labels = {QUEUE_NAME_LABEL: queue} if queue else {}
    if priority:
        labels["kueue.x-k8s.io/priority-class"] = priority
    scenario = {"main": {"pull": 0.5, "run": run, **extra}}
    body = {
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "suspend": False,
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {ANNOTATION: json.dumps(scenario)}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "main", "image": "trainer:1", "resources": {"limits": {GPU: str(gpus)}}}
                    ],
                },
            },
        },
    }
    return cluster.store.create("jobs", body, namespace=ns)


def get(cluster, ns, name):
    return cluster.store.get("jobs", name, namespace=ns)


def workload(cluster, ns, name) -> dict:
    """The job's Workload ({} until Kueue has created it)."""
    obj = get(cluster, ns, name)
    try:
        return cluster.store.get("workloads", workload_name("jobs", obj), namespace=ns)
    except ApiError:
        return {}


def condition(wl: dict, type_: str) -> dict:
    return next((c for c in (wl.get("status") or {}).get("conditions") or () if c["type"] == type_), {})


def running(cluster, ns, name) -> bool:
    return get(cluster, ns, name)["spec"]["suspend"] is False


def events(cluster, ns, name) -> list[tuple[str, str]]:
    return [
        (e["reason"], e["message"])
        for e in cluster.store.list("events", namespace=ns)
        if e["involvedObject"].get("name") == name
    ]


def test_a_queued_job_is_suspended_on_create_and_started_when_its_workload_is_admitted(cluster, ns):
    cluster_queue(cluster, f"cq-{ns}", 8)
    local_queue(cluster, ns, "team", f"cq-{ns}")
    created = job(cluster, ns, "train", 4)
    assert created["spec"]["suspend"] is True  # the webhook, not the controller: suspended from birth
    wait_for(lambda: running(cluster, ns, "train"))
    wl = workload(cluster, ns, "train")
    assert wl["metadata"]["name"].startswith("job-train-")
    assert condition(wl, "QuotaReserved")["message"] == f"Quota reserved in ClusterQueue cq-{ns}"
    assert condition(wl, "Admitted")["status"] == "True"
    assert wl["status"]["admission"]["podSetAssignments"][0]["flavors"] == {GPU: "default-flavor"}
    # Kueue records the event once the start is written (kueue v0.19.2 pkg/controller/jobframework
    # reconciler.go, startJob), so it may come just after the unsuspend is seen.
    wait_for(lambda: ("Started", f"Admitted by clusterQueue cq-{ns}") in events(cluster, ns, "train"))


def test_a_job_that_does_not_fit_waits_pending_with_kueues_message_and_runs_when_quota_frees(cluster, ns):
    cluster_queue(cluster, f"cq-{ns}", 8)
    local_queue(cluster, ns, "team", f"cq-{ns}")
    job(cluster, ns, "first", 6, run=600.0)
    wait_for(lambda: running(cluster, ns, "first"))
    job(cluster, ns, "second", 6)
    wl = wait_for(
        lambda: (
            condition(workload(cluster, ns, "second"), "QuotaReserved").get("reason") == "Pending"
            and workload(cluster, ns, "second")
        )
    )
    assert condition(wl, "QuotaReserved")["message"] == (
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor "
        "default-flavor, 4 more needed"
    )
    assert get(cluster, ns, "second")["spec"]["suspend"] is True
    # The first job goes (its Workload with it, by owner reference): its quota is the second's.
    cluster.store.delete("jobs", "first", namespace=ns, propagation_policy="Background")
    wait_for(lambda: running(cluster, ns, "second"))


def test_a_job_unsuspended_behind_kueues_back_is_suspended_again(cluster, ns):
    cluster_queue(cluster, f"cq-{ns}", 2)
    local_queue(cluster, ns, "team", f"cq-{ns}")
    job(cluster, ns, "big", 8)
    wait_for(lambda: condition(workload(cluster, ns, "big"), "QuotaReserved").get("reason") == "Pending")
    cluster.store.patch("jobs", "big", {"spec": {"suspend": False}}, "merge", namespace=ns)
    wait_for(lambda: get(cluster, ns, "big")["spec"]["suspend"] is True)
    assert ("Stopped", "Not admitted by cluster queue") in events(cluster, ns, "big")


def test_a_job_on_a_missing_local_queue_is_inadmissible(cluster, ns):
    job(cluster, ns, "lost", 1, queue="nowhere")
    wl = wait_for(
        lambda: (
            condition(workload(cluster, ns, "lost"), "QuotaReserved").get("reason") == "Inadmissible"
            and workload(cluster, ns, "lost")
        )
    )
    assert condition(wl, "QuotaReserved")["message"] == "LocalQueue nowhere doesn't exist"


def test_the_queue_name_of_a_running_job_cannot_change(cluster, ns):
    cluster_queue(cluster, f"cq-{ns}", 8)
    local_queue(cluster, ns, "team", f"cq-{ns}")
    job(cluster, ns, "moving", 1)
    wait_for(lambda: running(cluster, ns, "moving"))
    with pytest.raises(ApiError) as refused:
        cluster.store.patch(
            "jobs", "moving", {"metadata": {"labels": {QUEUE_NAME_LABEL: "other"}}}, "merge", namespace=ns
        )
    assert refused.value.code == 422


def test_strict_fifo_blocks_behind_the_head_and_best_effort_lets_a_smaller_job_pass(cluster, ns):
    cluster_queue(cluster, f"strict-{ns}", 4, strategy="StrictFIFO")
    cluster_queue(cluster, f"best-{ns}", 4)
    local_queue(cluster, ns, "strict", f"strict-{ns}")
    local_queue(cluster, ns, "best", f"best-{ns}")
    for q in ("strict", "best"):
        job(cluster, ns, f"{q}-holder", 3, queue=q)
        wait_for(lambda q=q: running(cluster, ns, f"{q}-holder"))
        job(cluster, ns, f"{q}-head", 4, queue=q)
        wait_for(
            lambda q=q: (
                condition(workload(cluster, ns, f"{q}-head"), "QuotaReserved").get("reason") == "Pending"
            )
        )
        job(cluster, ns, f"{q}-small", 1, queue=q)
    wait_for(lambda: running(cluster, ns, "best-small"))
    # The strict queue's small job never passes its head, however long it waits.
    assert condition(workload(cluster, ns, "strict-small"), "QuotaReserved").get("status") != "True"
    assert get(cluster, ns, "strict-small")["spec"]["suspend"] is True


def test_a_cluster_queue_borrows_its_cohorts_unused_quota_up_to_its_borrowing_limit(cluster, ns):
    cluster_queue(cluster, f"a-{ns}", 4, cohort=f"co-{ns}", borrowing=2)
    cluster_queue(cluster, f"b-{ns}", 4, cohort=f"co-{ns}")
    local_queue(cluster, ns, "a", f"a-{ns}")
    job(cluster, ns, "borrower", 6, queue="a")
    wait_for(lambda: running(cluster, ns, "borrower"))
    job(cluster, ns, "over-limit", 1, queue="a")
    wl = wait_for(
        lambda: (
            condition(workload(cluster, ns, "over-limit"), "QuotaReserved").get("reason") == "Pending"
            and workload(cluster, ns, "over-limit")
        )
    )
    assert "insufficient unused quota" in condition(wl, "QuotaReserved")["message"]


def test_a_higher_priority_workload_preempts_a_lower_one_which_is_requeued(cluster, ns):
    for name, value in ((f"low-{ns}", 10), (f"high-{ns}", 1000)):
        cluster.store.create("workloadpriorityclasses", {"metadata": {"name": name}, "value": value})
    cluster_queue(cluster, f"cq-{ns}", 8, preempt=True)
    local_queue(cluster, ns, "team", f"cq-{ns}")
    job(cluster, ns, "low", 8, priority=f"low-{ns}", run=600.0)
    wait_for(lambda: running(cluster, ns, "low"))
    job(cluster, ns, "high", 8, priority=f"high-{ns}")
    wait_for(lambda: running(cluster, ns, "high"))
    low = workload(cluster, ns, "low")
    assert condition(low, "Preempted")["reason"] == "InClusterQueue"
    assert condition(low, "Requeued")["status"] == "True"
    assert condition(low, "QuotaReserved")["status"] == "False"
    assert "due to prioritization in the ClusterQueue" in condition(low, "Preempted")["message"]
    assert get(cluster, ns, "low")["spec"]["suspend"] is True


def test_choose_victims_takes_the_fewest_lowest_priority_newest_first():
    from datetime import datetime, timezone

    t = [datetime(2026, 1, 1, 0, i, tzinfo=timezone.utc) for i in range(4)]
    queue = QueueView(
        "cq", "BestEffortFIFO", [("f", {GPU: 8.0}, {GPU: None})], {GPU}, None, True, {("f", GPU): 8.0}
    )
    admitted = [
        Candidate("ns/a", "a", "cq", 1, t[0], {GPU: 4.0}, admitted_at=t[0]),
        Candidate("ns/b", "b", "cq", 1, t[1], {GPU: 2.0}, admitted_at=t[1]),
        Candidate("ns/c", "c", "cq", 5, t[2], {GPU: 2.0}, admitted_at=t[2]),
    ]
    head = Candidate("ns/h", "h", "cq", 5, t[3], {GPU: 4.0})
    victims = choose_victims(queue, "f", head, admitted)
    assert [v.uid for v in victims] == ["b", "a"]  # never c: equal priority is not preempted
    assert choose_victims(queue, "f", Candidate("ns/x", "x", "cq", 1, t[3], {GPU: 2.0}), admitted) is None


def test_assign_flavor_names_the_missing_quota():
    queue = QueueView(
        "cq", "StrictFIFO", [("f", {GPU: 8.0}, {GPU: None})], {GPU}, None, False, {("f", GPU): 6.0}
    )
    assert assign_flavor(queue, {GPU: 2.0}) == ("f", "")
    assert (
        assign_flavor(queue, {GPU: 3.0})[1]
        == "insufficient unused quota for nvidia.com/gpu in flavor f, 1 more needed"
    )
    assert (
        assign_flavor(queue, {"example.com/fpga": 1.0})[1]
        == "resource example.com/fpga unavailable in ClusterQueue"
    )


def gpu_queue(name: str, nominal: float, used: float, cohort: str | None = "co", limit=None) -> QueueView:
    return QueueView(
        name,
        "BestEffortFIFO",
        [("f", {GPU: nominal}, {GPU: limit})],
        {GPU},
        cohort,
        False,
        {("f", GPU): used},
    )


# Kueue v0.19.2 pkg/cache/scheduler/resource_node.go (``available``): in a cohort a ClusterQueue can take
# the cohort's nominal quota less the cohort's usage, its own usage counted once, capped by its
# borrowingLimit above its own nominal quota.


def test_a_borrower_with_no_nominal_quota_can_take_all_an_idle_lender_has():
    lender = gpu_queue("lender", 4, 0)
    for used in range(4):
        borrower = gpu_queue("borrower", 0, used)
        assert available(borrower, [lender], "f", GPU) == 4 - used
        assert assign_flavor(borrower, {GPU: 1.0}, [lender]) == ("f", "")
    full = gpu_queue("borrower", 0, 4)
    assert assign_flavor(full, {GPU: 1.0}, [lender]) == (
        None,
        "insufficient unused quota for nvidia.com/gpu in flavor f, 1 more needed",
    )


def test_what_another_member_borrows_is_not_free_for_the_rest_of_the_cohort():
    a, b = gpu_queue("a", 4, 0), gpu_queue("b", 4, 6)  # b uses 2 of a's 4
    assert available(gpu_queue("c", 0, 0), [a, b], "f", GPU) == 2


def test_a_borrowing_limit_caps_what_a_queue_takes_above_its_own_nominal_quota():
    lender = gpu_queue("lender", 4, 0)
    assert available(gpu_queue("a", 4, 5, limit=2), [lender], "f", GPU) == 1  # 4 + 2 - 5
    assert available(gpu_queue("a", 4, 0, limit=2), [lender], "f", GPU) == 6
    assert available(gpu_queue("a", 4, 0, limit=2), [gpu_queue("lender", 4, 7)], "f", GPU) == 1


def test_a_queue_outside_a_cohort_borrows_nothing_from_queues_of_another_cohort():
    assert available(gpu_queue("alone", 2, 1, cohort=None), [gpu_queue("other", 8, 0)], "f", GPU) == 1
    assert available(gpu_queue("a", 2, 1, cohort="x"), [gpu_queue("other", 8, 0, cohort="y")], "f", GPU) == 1


def test_a_borrower_with_no_nominal_quota_gets_as_many_jobs_admitted_as_the_idle_lender_has_gpus(cluster, ns):
    cluster_queue(cluster, f"lender-{ns}", 4, cohort=f"co-{ns}")
    cluster_queue(cluster, f"borrower-{ns}", 0, cohort=f"co-{ns}")
    local_queue(cluster, ns, "b", f"borrower-{ns}")
    for i in range(4):
        job(cluster, ns, f"j{i}", 1, queue="b", run=60000.0)
    for i in range(4):
        wait_for(lambda i=i: running(cluster, ns, f"j{i}"))
    job(cluster, ns, "fifth", 1, queue="b", run=60000.0)
    wl = wait_for(
        lambda: (
            condition(workload(cluster, ns, "fifth"), "QuotaReserved").get("reason") == "Pending"
            and workload(cluster, ns, "fifth")
        )
    )
    assert condition(wl, "QuotaReserved")["message"].endswith(
        "insufficient unused quota for nvidia.com/gpu in flavor default-flavor, 1 more needed"
    )
    for i in range(4):
        cluster.store.delete("jobs", f"j{i}", namespace=ns, propagation_policy="Background")


def test_wait_for_pods_ready_is_on_by_default_with_kueues_default_timeouts_and_back_off():
    # Kueue v0.19.2 apis/config/v1beta2/defaults.go: waitForPodsReady always set (so on, short of the
    # DisableWaitForPodsReady gate), timeout 30m, recoveryTimeout = timeout, backoff 60 s up to 3600 s.
    config = KueueConfig()
    assert config.wait_for_pods_ready_seconds == 1800
    assert config.recovery_timeout_seconds is None  # the timeout's value
    assert (config.requeue_backoff_base_seconds, config.requeue_backoff_max_seconds) == (60, 3600)


def test_pods_ready_waits_for_start_until_the_admitted_jobs_pods_are_ready_then_started():
    assert pods_ready_condition(False, None, False) == (
        "False",
        "WaitForStart",
        "Not all pods are ready or succeeded",
    )
    assert (
        pods_ready_condition(True, {"status": "False", "reason": "WaitForStart"}, False)[1] == "WaitForStart"
    )
    assert pods_ready_condition(True, {"status": "False", "reason": "WaitForStart"}, True) == (
        "True",
        "Started",
        "All pods reached readiness and the workload is running",
    )


def test_a_started_workload_whose_pods_stop_being_ready_waits_for_recovery_then_recovers():
    started = {"status": "True", "reason": "Started"}
    waiting = pods_ready_condition(True, started, False)
    assert waiting == ("False", "WaitForRecovery", "At least one pod has failed, waiting for recovery")
    assert pods_ready_condition(True, {"status": "False", "reason": "WaitForRecovery"}, True)[:2] == (
        "True",
        "Recovered",
    )
    # Requeued (no longer admitted), it waits to start again.
    assert pods_ready_condition(False, started, False)[1] == "WaitForStart"


def test_the_pods_ready_timeout_runs_from_admission_and_the_recovery_timeout_from_the_loss_of_readiness():
    from datetime import datetime, timedelta, timezone

    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    admitted = {"type": "Admitted", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    waiting = {"type": "PodsReady", "status": "False", "reason": "WaitForStart"}
    assert pods_ready_deadline([admitted, waiting], 1800, 600) == t0 + timedelta(seconds=1800)
    lost = {
        "type": "PodsReady",
        "status": "False",
        "reason": "WaitForRecovery",
        "lastTransitionTime": "2026-01-01T01:00:00Z",
    }
    assert pods_ready_deadline([admitted, lost], 1800, 600) == t0 + timedelta(seconds=3600 + 600)
    assert pods_ready_deadline([admitted, lost], 1800, 0) is None  # "0s" turns recovery checking off
    assert pods_ready_deadline([admitted, {"type": "PodsReady", "status": "True"}], 1800, 600) is None


def test_the_requeue_back_off_doubles_from_its_base_up_to_its_max():
    assert [requeue_backoff(n, 60, 3600) for n in range(1, 9)] == [60, 120, 240, 480, 960, 1920, 3600, 3600]


def test_a_batch_job_is_ready_once_ready_and_succeeded_pods_reach_the_smaller_of_parallelism_and_completions():
    job = {"spec": {"parallelism": 3, "completions": 2}, "status": {"ready": 1, "succeeded": 1}}
    assert job_pods_ready("jobs", job)
    assert not job_pods_ready("jobs", {"spec": {"parallelism": 2}, "status": {"ready": 1}})
    running = {"status": {"conditions": [{"type": "Running", "status": "True"}]}}
    assert job_pods_ready("mpijobs", running) and not job_pods_ready("mpijobs", {"status": {}})


def test_by_default_a_workload_waits_for_start_then_is_started_once_its_pods_are_ready(cluster, ns):
    seen: list[tuple[str, str]] = []

    def on_event(event_type, resource, obj):
        if resource == "workloads" and obj["metadata"].get("namespace") == ns:
            ready = condition(obj, "PodsReady")
            if ready and (not seen or seen[-1] != (ready["status"], ready["reason"])):
                seen.append((ready["status"], ready["reason"]))

    close = cluster.store.subscribe(on_event)
    try:
        cluster_queue(cluster, f"cq-{ns}", 4)
        local_queue(cluster, ns, "team", f"cq-{ns}")
        job(cluster, ns, "ready", 1, run=60000.0)
        wait_for(lambda: condition(workload(cluster, ns, "ready"), "PodsReady").get("reason") == "Started")
    finally:
        close()
    assert seen == [("False", "WaitForStart"), ("True", "Started")]
    cluster.store.delete("jobs", "ready", namespace=ns, propagation_policy="Background")


def test_wait_for_pods_ready_evicts_a_job_whose_pods_never_get_ready_and_backs_off():
    config = ClusterConfig(
        nodes=1,
        time_scale=0.02,
        kueue=KueueConfig(wait_for_pods_ready_seconds=20, requeue_backoff_base_seconds=600),
    )
    with SimCluster(config) as c:
        c.store.create("namespaces", {"metadata": {"name": "w"}})
        cluster_queue(c, "cq", 8)
        local_queue(c, "w", "team", "cq")
        job(c, "w", "stuck", 2, pull_error="not-found")
        wl = wait_for(
            lambda: (
                condition(workload(c, "w", "stuck"), "Requeued").get("status") == "True"
                and workload(c, "w", "stuck")
            )
        )
        assert condition(wl, "Requeued")["reason"] == "PodsReadyTimeout"
        assert condition(wl, "QuotaReserved")["status"] == "False"
        assert wl["status"]["requeueState"]["count"] == 1
        assert get(c, "w", "stuck")["spec"]["suspend"] is True


def test_without_kueue_the_api_is_not_served_and_labelled_jobs_are_left_alone():
    with SimCluster(ClusterConfig(nodes=1, time_scale=0.02)) as c:
        c.store.create("namespaces", {"metadata": {"name": "plain"}})
        created = job(c, "plain", "free", 1)
        assert created["spec"]["suspend"] is False
        import urllib.error
        import urllib.request

        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"{c.url}/apis/kueue.x-k8s.io/v1beta2/clusterqueues")
        assert missing.value.code == 404
        groups = json.load(urllib.request.urlopen(f"{c.url}/apis"))
        assert "kueue.x-k8s.io" not in [g["name"] for g in groups["groups"]]


def test_with_kueue_the_api_is_served(cluster):
    import urllib.request

    groups = json.load(urllib.request.urlopen(f"{cluster.url}/apis"))
    assert "kueue.x-k8s.io" in [g["name"] for g in groups["groups"]]
    body = json.load(urllib.request.urlopen(f"{cluster.url}/apis/kueue.x-k8s.io/v1beta2/clusterqueues"))
    assert body["kind"] == "ClusterQueueList"


def test_a_finished_job_finishes_its_workload_and_gives_its_quota_back(cluster, ns):
    cluster_queue(cluster, f"cq-{ns}", 4)
    local_queue(cluster, ns, "team", f"cq-{ns}")
    job(cluster, ns, "short", 4, run=1.0)
    wl = wait_for(
        lambda: (
            condition(workload(cluster, ns, "short"), "Finished").get("status") == "True"
            and workload(cluster, ns, "short")
        )
    )
    assert condition(wl, "Finished")["reason"] == "Succeeded"
    job(cluster, ns, "next", 4)
    wait_for(lambda: running(cluster, ns, "next"))


def _visibility(cluster, path: str) -> tuple[int, dict]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"{cluster.url}/apis/visibility.kueue.x-k8s.io/v1beta2/{path}") as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def test_the_visibility_api_lists_pending_workloads_with_their_positions(cluster, ns):
    """Kueue's visibility API: a LocalQueue's pending Workloads with their positions in its ClusterQueue
    and in the LocalQueue, from 0, in queue order (priority, then age); a ClusterQueue's across its queues."""
    cq = f"cq-{ns}"
    cluster_queue(cluster, cq, 4, strategy="StrictFIFO")
    local_queue(cluster, ns, "team", cq)
    local_queue(cluster, ns, "other", cq)
    job(cluster, ns, "holder", 4, run=6000.0)
    wait_for(lambda: running(cluster, ns, "holder"))
    for name, queue in (("a", "team"), ("b", "other"), ("c", "team")):
        job(cluster, ns, name, 2, queue=queue)
        wait_for(lambda name=name: workload(cluster, ns, name))  # behind a StrictFIFO head: no condition

    def listed(path: str) -> list[tuple[str, str, int, int]]:
        code, body = _visibility(cluster, path)
        assert code == 200 and body["kind"] == "PendingWorkloadsSummary", body
        return [
            (
                i["metadata"]["ownerReferences"][0]["name"],
                i["localQueueName"],
                i["positionInClusterQueue"],
                i["positionInLocalQueue"],
            )
            for i in body["items"]
        ]

    assert listed(f"namespaces/{ns}/localqueues/team/pendingworkloads") == [
        ("a", "team", 0, 0),
        ("c", "team", 2, 1),
    ]
    assert listed(f"namespaces/{ns}/localqueues/other/pendingworkloads") == [("b", "other", 1, 0)]
    assert listed(f"clusterqueues/{cq}/pendingworkloads") == [
        ("a", "team", 0, 0),
        ("b", "other", 1, 0),
        ("c", "team", 2, 1),
    ]
    assert listed(f"clusterqueues/{cq}/pendingworkloads?offset=1&limit=1") == [("b", "other", 1, 0)]
    code, body = _visibility(cluster, f"namespaces/{ns}/localqueues/nowhere/pendingworkloads")
    assert code == 404 and body["reason"] == "NotFound"
    code, _ = _visibility(cluster, "clusterqueues/no-such-cq/pendingworkloads")
    assert code == 404


def test_a_job_naming_no_queue_gets_the_namespaces_default_local_queue(cluster, ns):
    cluster_queue(cluster, f"cq-{ns}", 8)
    local_queue(cluster, ns, "default", f"cq-{ns}")
    created = job(cluster, ns, "plain", 1, queue=None)
    assert created["metadata"]["labels"][QUEUE_NAME_LABEL] == "default"
    assert created["spec"]["suspend"] is True
    wait_for(lambda: running(cluster, ns, "plain"))


def test_a_gated_job_waits_until_its_last_gate_is_removed(cluster, ns):
    cluster_queue(cluster, f"cq-{ns}", 8)
    local_queue(cluster, ns, "team", f"cq-{ns}")
    gate = "kueue.x-k8s.io/admission-gated-by"
    cluster.store.create(
        "jobs",
        {
            "metadata": {
                "name": "gated",
                "labels": {QUEUE_NAME_LABEL: "team"},
                "annotations": {gate: "example.com/a"},
            },
            "spec": {
                "suspend": True,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [
                            {"name": "main", "image": "trainer:1", "resources": {"limits": {GPU: "1"}}}
                        ],
                    }
                },
            },
        },
        namespace=ns,
    )
    wl = wait_for(
        lambda: (
            condition(workload(cluster, ns, "gated"), "QuotaReserved").get("reason") == "AdmissionGated"
            and workload(cluster, ns, "gated")
        )
    )
    assert condition(wl, "QuotaReserved")["message"] == "Admission is gated by: example.com/a"
    with pytest.raises(ApiError) as refused:
        cluster.store.patch(
            "jobs",
            "gated",
            {"metadata": {"annotations": {gate: "example.com/a,example.com/b"}}},
            "merge",
            namespace=ns,
        )
    assert refused.value.code == 422
    cluster.store.patch("jobs", "gated", {"metadata": {"annotations": {gate: None}}}, "merge", namespace=ns)
    wait_for(lambda: running(cluster, ns, "gated"))
