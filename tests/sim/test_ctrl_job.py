"""The simulated batch/v1 Job controller: decisions (pure) and whole Job lifecycles in a running cluster."""

from __future__ import annotations

import json
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from airflow_jobs_sim.cluster import SimCluster
from airflow_jobs_sim.config import ClusterConfig
from airflow_jobs_sim.controllers.job import (
    JOB_TRACKING_FINALIZER,
    CreatePod,
    DeleteJob,
    DeletePod,
    JobMemory,
    ReleasePod,
    match_pod_failure_policy,
    plan_job,
    pod_backoff,
)
from airflow_jobs_sim.scenarios import ANNOTATION
from sim_waiting import wait_for

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def job(suspend: bool = False, status: dict | None = None, **spec) -> dict:
    return {
        "metadata": {"name": "train", "namespace": "default", "uid": "job-uid"},
        "spec": {
            "completions": 1,
            "parallelism": 1,
            "backoffLimit": spec.pop("backoffLimit", 6),
            "suspend": suspend,
            "template": {
                "metadata": {"labels": {"app": "train"}, "annotations": {"note": "x"}},
                "spec": {
                    "restartPolicy": spec.pop("restartPolicy", "Never"),
                    "containers": [{"name": "main", "image": "t:1"}],
                },
            },
            **spec,
        },
        "status": status or {},
    }


def job_pod(
    name: str,
    phase: str = "Running",
    exit_code: int | None = None,
    finalizer: bool = True,
    deleting: bool = False,
    conditions: list | None = None,
) -> dict:
    meta: dict = {
        "name": name,
        "namespace": "default",
        "uid": f"uid-{name}",
        "creationTimestamp": "2026-01-01T00:00:00Z",
        "ownerReferences": [{"kind": "Job", "name": "train", "uid": "job-uid", "controller": True}],
    }
    if finalizer:
        meta["finalizers"] = [JOB_TRACKING_FINALIZER]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:30Z"
    status: dict = {"phase": phase, "conditions": conditions or []}
    if exit_code is not None:
        status["containerStatuses"] = [
            {"name": "main", "state": {"terminated": {"exitCode": exit_code}}, "restartCount": 0}
        ]
    return {"metadata": meta, "status": status}


def cond(plan_or_status, type_: str) -> dict | None:
    status = getattr(plan_or_status, "status", plan_or_status)
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), None)


def test_a_new_job_creates_one_pod_named_labelled_and_owned_like_the_real_controller():
    plan = plan_job(job(), [], T0, suffix=lambda: "abcde")
    [create] = [a for a in plan.actions if isinstance(a, CreatePod)]
    meta = create.pod["metadata"]
    assert meta["name"] == "train-abcde" and meta["generateName"] == "train-"
    assert meta["labels"] == {
        "app": "train",
        "batch.kubernetes.io/job-name": "train",
        "job-name": "train",
        "batch.kubernetes.io/controller-uid": "job-uid",
        "controller-uid": "job-uid",
    }
    assert meta["annotations"] == {"note": "x"}
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "train",
            "uid": "job-uid",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert meta["finalizers"] == [JOB_TRACKING_FINALIZER]
    assert plan.status["startTime"] == "2026-01-01T00:00:00Z" and plan.status["active"] == 1
    assert [(e.reason, e.message) for e in plan.events] == [("SuccessfulCreate", "Created pod: train-abcde")]


def test_a_new_pod_keeps_the_finalizers_of_the_job_template_besides_job_tracking():
    with_finalizer = job()
    with_finalizer["spec"]["template"]["metadata"]["finalizers"] = ["example.com/keep"]
    [create] = [a for a in plan_job(with_finalizer, [], T0).actions if isinstance(a, CreatePod)]
    assert create.pod["metadata"]["finalizers"] == ["example.com/keep", JOB_TRACKING_FINALIZER]


def test_a_job_created_suspended_has_no_pod_no_start_time_and_a_suspended_condition():
    plan = plan_job(job(suspend=True), [], T0)
    assert not [a for a in plan.actions if isinstance(a, CreatePod)]
    assert "startTime" not in plan.status
    c = cond(plan, "Suspended")
    assert (c["status"], c["reason"], c["message"]) == ("True", "JobSuspended", "Job suspended")
    assert [e.reason for e in plan.events] == ["Suspended"]


def test_suspending_a_running_job_deletes_its_active_pods_without_counting_failures():
    plan = plan_job(
        job(suspend=True, status={"startTime": "2026-01-01T00:00:00Z", "active": 1}), [job_pod("train-a")], T0
    )
    assert DeletePod("train-a") in plan.actions
    assert plan.status["terminating"] == 1 and "active" not in plan.status
    # The killed pod comes back Failed: it is released without being counted.
    later = plan_job(
        job(suspend=True, status=plan.status), [job_pod("train-a", "Failed", 143)], T0, memory=plan.memory
    )
    assert ReleasePod("train-a") in later.actions and "failed" not in later.status


def test_resuming_sets_suspended_false_and_restarts_the_clock():
    suspended = plan_job(job(suspend=True), [], T0)
    resumed = plan_job(job(suspend=False, status=suspended.status), [], T0 + timedelta(minutes=5))
    c = cond(resumed, "Suspended")
    assert (c["status"], c["reason"], c["message"]) == ("False", "JobResumed", "Job resumed")
    assert resumed.status["startTime"] == "2026-01-01T00:05:00Z"
    assert "Resumed" in [e.reason for e in resumed.events]


def test_a_failed_pod_is_counted_released_and_replaced_after_the_back_off():
    first = plan_job(job(status={"startTime": "2026-01-01T00:00:00Z"}), [job_pod("train-a", "Failed", 1)], T0)
    assert ReleasePod("train-a") in first.actions and first.status["failed"] == 1
    assert not [a for a in first.actions if isinstance(a, CreatePod)]
    assert first.wake_at == T0 + timedelta(seconds=10)
    released = job_pod("train-a", "Failed", 1, finalizer=False)
    second = plan_job(job(status=first.status), [released], T0 + timedelta(seconds=10), memory=first.memory)
    assert [a for a in second.actions if isinstance(a, CreatePod)]


def test_failures_beyond_the_backoff_limit_fail_the_job_with_failuretarget_then_failed():
    status = {"startTime": "2026-01-01T00:00:00Z", "failed": 2}
    failed_pod = job_pod("train-c", "Failed", 1)
    # The sync that finds the limit exceeded writes FailureTarget alone, the pod not yet counted
    # (uncountedTerminatedPods), as the real Job controller of 1.36 does; the next counts it and fails the Job.
    target = plan_job(job(backoffLimit=2, status=status), [failed_pod], T0)
    assert cond(target, "FailureTarget") is not None and cond(target, "Failed") is None
    assert target.status["failed"] == 2
    assert target.status["uncountedTerminatedPods"] == {"failed": ["uid-train-c"]}
    assert ("BackoffLimitExceeded", "Warning") in [(e.reason, e.type) for e in target.events]
    plan = plan_job(job(backoffLimit=2, status=target.status), [failed_pod], T0, memory=target.memory)
    assert plan.status["failed"] == 3 and plan.status["uncountedTerminatedPods"] == {}
    for type_ in ("FailureTarget", "Failed"):
        c = cond(plan, type_)
        assert (c["status"], c["reason"], c["message"]) == (
            "True",
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
        )
    assert "completionTime" not in plan.status


def test_the_failed_condition_waits_until_no_pod_is_left_running():
    status = {"startTime": "2026-01-01T00:00:00Z", "failed": 2}
    pods = [job_pod("train-c", "Failed", 1), job_pod("train-d", "Running")]
    plan = plan_job(job(backoffLimit=2, parallelism=2, completions=2, status=status), pods, T0)
    assert cond(plan, "FailureTarget") is not None and cond(plan, "Failed") is None
    assert DeletePod("train-d") in plan.actions


def test_restarts_count_against_the_backoff_limit_for_restart_policy_onfailure():
    pod = job_pod("train-a", "Running")
    pod["status"]["containerStatuses"] = [
        {"name": "main", "restartCount": 2, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
    ]
    plan = plan_job(
        job(backoffLimit=2, restartPolicy="OnFailure", status={"startTime": "2026-01-01T00:00:00Z"}),
        [pod],
        T0,
    )
    assert cond(plan, "FailureTarget")["reason"] == "BackoffLimitExceeded"
    assert DeletePod("train-a") in plan.actions


def test_an_active_deadline_fails_the_job_with_deadlineexceeded():
    status = {"startTime": "2026-01-01T00:00:00Z"}
    early = plan_job(
        job(activeDeadlineSeconds=60, status=status), [job_pod("train-a")], T0 + timedelta(seconds=30)
    )
    assert cond(early, "FailureTarget") is None and early.wake_at == T0 + timedelta(seconds=60)
    late = plan_job(
        job(activeDeadlineSeconds=60, status=status), [job_pod("train-a")], T0 + timedelta(seconds=61)
    )
    c = cond(late, "FailureTarget")
    assert (c["reason"], c["message"]) == (
        "DeadlineExceeded",
        "Job was active longer than specified deadline",
    )
    assert DeletePod("train-a") in late.actions


def test_a_succeeded_pod_completes_the_job_with_successcriteriamet_then_complete():
    succeeded = job_pod("train-a", "Succeeded", 0)
    met = plan_job(job(status={"startTime": "2026-01-01T00:00:00Z", "active": 1}), [succeeded], T0)
    assert cond(met, "SuccessCriteriaMet") is not None and cond(met, "Complete") is None
    assert "succeeded" not in met.status and met.status["uncountedTerminatedPods"] == {
        "succeeded": ["uid-train-a"]
    }
    plan = plan_job(job(status=met.status), [succeeded], T0, memory=met.memory)
    for type_ in ("SuccessCriteriaMet", "Complete"):
        c = cond(plan, type_)
        assert (c["status"], c["reason"], c["message"]) == (
            "True",
            "CompletionsReached",
            "Reached expected number of succeeded pods",
        )
    assert plan.status["succeeded"] == 1 and plan.status["completionTime"] == "2026-01-01T00:00:00Z"
    assert ("Completed", "Job completed") in [(e.reason, e.message) for e in plan.events]


def test_a_finished_job_is_deleted_once_its_ttl_expires():
    pods = [job_pod("train-a", "Succeeded", 0)]
    met = plan_job(job(ttlSecondsAfterFinished=100, status={"startTime": "2026-01-01T00:00:00Z"}), pods, T0)
    done = plan_job(job(ttlSecondsAfterFinished=100, status=met.status), pods, T0, memory=met.memory)
    assert done.wake_at == T0 + timedelta(seconds=100) and DeleteJob() not in done.actions
    later = plan_job(
        job(ttlSecondsAfterFinished=100, status=done.status),
        [],
        T0 + timedelta(seconds=100),
        memory=done.memory,
    )
    assert DeleteJob() in later.actions


RULES = {
    "rules": [
        {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
        {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [1]}},
    ]
}


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        (
            job_pod("train-a", "Failed", 42),
            (
                "FailJob",
                "Container main for pod default/train-a failed with exit code 42 matching FailJob rule at index 0",
            ),
        ),
        (
            job_pod("train-a", "Failed", 1, conditions=[{"type": "DisruptionTarget", "status": "True"}]),
            ("Ignore", "Pod default/train-a has condition DisruptionTarget matching Ignore rule at index 1"),
        ),
        (
            job_pod("train-a", "Failed", 7),
            (
                "Count",
                "Container main for pod default/train-a failed with exit code 7 matching Count rule at index 2",
            ),
        ),
        (job_pod("train-a", "Failed", 1), None),
    ],
)
def test_pod_failure_policy_rules_match_in_order(pod, expected):
    assert match_pod_failure_policy(job(podFailurePolicy=RULES), pod) == expected


def test_a_failjob_rule_fails_the_job_with_reason_podfailurepolicy():
    pods = [job_pod("train-a", "Failed", 42)]
    target = plan_job(job(podFailurePolicy=RULES, status={"startTime": "2026-01-01T00:00:00Z"}), pods, T0)
    assert cond(target, "FailureTarget")["reason"] == "PodFailurePolicy" and cond(target, "Failed") is None
    plan = plan_job(job(podFailurePolicy=RULES, status=target.status), pods, T0, memory=target.memory)
    c = cond(plan, "Failed")
    assert (
        c["reason"] == "PodFailurePolicy" and "exit code 42 matching FailJob rule at index 0" in c["message"]
    )


def test_an_ignored_failure_is_not_counted_and_the_pod_is_replaced_at_once():
    pod = job_pod("train-a", "Failed", 137, conditions=[{"type": "DisruptionTarget", "status": "True"}])
    plan = plan_job(job(podFailurePolicy=RULES, status={"startTime": "2026-01-01T00:00:00Z"}), [pod], T0)
    assert "failed" not in plan.status
    assert [a for a in plan.actions if isinstance(a, CreatePod)]


def test_the_pod_back_off_doubles_from_ten_seconds_up_to_six_minutes():
    assert [pod_backoff(n) for n in (0, 1, 2, 3, 7, 20)] == [0, 10, 20, 40, 360, 360]


def test_a_job_being_deleted_creates_no_pod():
    doomed = job()
    doomed["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert plan_job(doomed, [], T0).actions == []


def test_a_job_being_deleted_counts_and_releases_every_pod_including_running_ones():
    doomed = job(status={"startTime": "2026-01-01T00:00:00Z"})
    doomed["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:10Z"
    pods = [
        job_pod("train-a", "Failed", 1),
        job_pod("train-b", "Running"),
        job_pod("train-c", "Running", deleting=True),
    ]
    plan = plan_job(doomed, pods, T0)
    assert sorted(a.name for a in plan.actions if isinstance(a, ReleasePod)) == [
        "train-a",
        "train-b",
        "train-c",
    ]
    assert not [a for a in plan.actions if isinstance(a, (CreatePod, DeletePod))]
    # The pod being deleted counts as failed (no podFailurePolicy), the running one is only let go.
    assert plan.status["failed"] == 2


def test_a_suspended_job_being_deleted_leaves_the_deletion_of_its_pods_to_the_garbage_collector():
    doomed = job(suspend=True, status={"startTime": "2026-01-01T00:00:00Z"})
    doomed["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:10Z"
    plan = plan_job(doomed, [job_pod("train-a", "Running")], T0)
    assert [type(a) for a in plan.actions] == [ReleasePod]


def test_memory_is_not_modified_by_planning():
    memory = JobMemory()
    plan_job(
        job(status={"startTime": "2026-01-01T00:00:00Z"}),
        [job_pod("train-a", "Failed", 1)],
        T0,
        memory=memory,
    )
    assert memory == JobMemory()


# ----------------------------------------------------------------------------- through the cluster


@pytest.fixture(scope="module")
def cluster():
    with SimCluster(ClusterConfig(nodes=2, gpus_per_node=8, time_scale=0.03)) as c:
        yield c


@pytest.fixture
def ns(cluster):
    name = f"job-{uuid.uuid4().hex[:6]}"
    cluster.store.create("namespaces", {"metadata": {"name": name}})
    return name


def manifest(name: str, scenario: dict | None = None, restart: str = "Never", **spec) -> dict:
    template_meta = {"annotations": {ANNOTATION: json.dumps(scenario)}} if scenario else {}
    return {
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": template_meta,
                "spec": {"restartPolicy": restart, "containers": [{"name": "main", "image": "trainer:1.0"}]},
            },
            **spec,
        },
    }


def condition(cluster, ns: str, name: str, type_: str) -> dict | None:
    status = cluster.store.get("jobs", name, ns).get("status") or {}
    c = next((c for c in status.get("conditions") or [] if c["type"] == type_), None)
    return c if c and c["status"] == "True" else None


def job_events(cluster, ns: str, name: str) -> list[tuple[str, str]]:
    """Every occurrence (a repeated event is stored once with a count)."""
    return [
        (e["reason"], e["message"])
        for e in cluster.store.list("events", namespace=ns)
        if e["involvedObject"]["name"] == name
        for _ in range(e.get("count") or 1)
    ]


def test_a_job_with_backoff_limit_2_and_an_always_failing_pod_fails_after_3_pods_with_growing_gaps(
    cluster, ns
):
    created: list[float] = []
    lock = threading.Lock()

    def on_event(event_type, resource, obj):
        if event_type == "ADDED" and resource == "pods" and obj["metadata"].get("namespace") == ns:
            with lock:
                created.append(time.monotonic())

    unsubscribe = cluster.store.subscribe(on_event)
    try:
        cluster.store.create(
            "jobs",
            manifest("doomed", {"main": {"pull": 0, "run": 0, "exit": 1}}, backoffLimit=2),
            namespace=ns,
        )
        failed = wait_for(lambda: condition(cluster, ns, "doomed", "Failed"))
    finally:
        unsubscribe()
    assert (failed["reason"], failed["message"]) == (
        "BackoffLimitExceeded",
        "Job has reached the specified backoff limit",
    )
    assert condition(cluster, ns, "doomed", "FailureTarget")["reason"] == "BackoffLimitExceeded"
    status = cluster.store.get("jobs", "doomed", ns)["status"]
    assert status["failed"] == 3 and "active" not in status
    pods = cluster.store.list("pods", namespace=ns, label_selector="batch.kubernetes.io/job-name=doomed")
    assert len(pods) == 3 and {p["status"]["phase"] for p in pods} == {"Failed"}
    assert all(not p["metadata"].get("finalizers") for p in pods)
    assert len(created) == 3 and created[2] - created[1] > created[1] - created[0]
    reasons = [r for r, _ in job_events(cluster, ns, "doomed")]
    assert reasons.count("SuccessfulCreate") == 3 and "BackoffLimitExceeded" in reasons


def test_a_job_created_suspended_starts_only_when_resumed_and_stops_again_when_suspended(cluster, ns):
    cluster.store.create(
        "jobs", manifest("queued", {"main": {"pull": 0, "run": None}}, suspend=True), namespace=ns
    )
    wait_for(lambda: condition(cluster, ns, "queued", "Suspended"))
    assert cluster.store.list("pods", namespace=ns) == []
    assert "startTime" not in cluster.store.get("jobs", "queued", ns)["status"]

    cluster.store.patch("jobs", "queued", {"spec": {"suspend": False}}, "merge", namespace=ns)
    wait_for(lambda: (cluster.store.get("jobs", "queued", ns)["status"].get("ready") or 0) == 1)
    status = cluster.store.get("jobs", "queued", ns)["status"]
    resumed = next(c for c in status["conditions"] if c["type"] == "Suspended")
    assert (resumed["status"], resumed["reason"]) == ("False", "JobResumed") and status["startTime"]

    cluster.store.patch("jobs", "queued", {"spec": {"suspend": True}}, "merge", namespace=ns)
    wait_for(
        lambda: condition(cluster, ns, "queued", "Suspended") and not cluster.store.list("pods", namespace=ns)
    )
    status = cluster.store.get("jobs", "queued", ns)["status"]
    assert "failed" not in status and "active" not in status
    reasons = [r for r, _ in job_events(cluster, ns, "queued")]
    assert reasons.count("Suspended") == 2 and "Resumed" in reasons and "SuccessfulDelete" in reasons


def test_a_job_running_past_its_active_deadline_fails_with_deadlineexceeded(cluster, ns):
    cluster.store.create(
        "jobs", manifest("slow", {"main": {"pull": 0, "run": None}}, activeDeadlineSeconds=3), namespace=ns
    )
    failed = wait_for(lambda: condition(cluster, ns, "slow", "Failed"))
    assert (failed["reason"], failed["message"]) == (
        "DeadlineExceeded",
        "Job was active longer than specified deadline",
    )
    assert ("DeadlineExceeded", "Job was active longer than specified deadline") in job_events(
        cluster, ns, "slow"
    )
    wait_for(lambda: not cluster.store.list("pods", namespace=ns))


def test_a_finished_job_is_deleted_with_its_pods_after_ttl_seconds_after_finished(cluster, ns):
    cluster.store.create(
        "jobs", manifest("brief", {"main": {"pull": 0, "run": 0}}, ttlSecondsAfterFinished=5), namespace=ns
    )
    wait_for(lambda: condition(cluster, ns, "brief", "Complete"))

    def gone():
        return not cluster.store.list("jobs", namespace=ns) and not cluster.store.list("pods", namespace=ns)

    wait_for(gone)


def test_a_pod_failure_policy_failjob_rule_ends_the_job_on_the_first_matching_exit_code(cluster, ns):
    policy = {
        "rules": [
            {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}}
        ]
    }
    cluster.store.create(
        "jobs",
        manifest(
            "fatal", {"main": {"pull": 0, "run": 0, "exit": 42}}, backoffLimit=5, podFailurePolicy=policy
        ),
        namespace=ns,
    )
    failed = wait_for(lambda: condition(cluster, ns, "fatal", "Failed"))
    assert failed["reason"] == "PodFailurePolicy"
    assert failed["message"].endswith("failed with exit code 42 matching FailJob rule at index 0")
    assert len(cluster.store.list("pods", namespace=ns)) == 1


def test_restart_policy_onfailure_counts_container_restarts_against_the_backoff_limit(cluster, ns):
    cluster.store.create(
        "jobs",
        manifest("flaky", {"main": {"pull": 0, "run": 0, "exit": 1}}, restart="OnFailure", backoffLimit=1),
        namespace=ns,
    )
    failed = wait_for(lambda: condition(cluster, ns, "flaky", "Failed"))
    assert failed["reason"] == "BackoffLimitExceeded"
    wait_for(lambda: not cluster.store.list("pods", namespace=ns))
