"""JobSnapshot: one scenario per state and reason, then the details a snapshot carries."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.lifecycle import (
    NO_POD,
    JobState,
    QueueStatus,
    Reason,
    Reservation,
    snapshot,
)

from .factories import (
    NAMESPACE,
    at,
    batch_job,
    event,
    job_condition,
    job_pod,
    launcher_pod,
    mpi_job,
    mpi_job_parses,
    parses,
    running,
    terminated,
    ts,
    waiting,
    worker_pod,
)
from .scenarios import BY_ID, NOW, SCENARIOS, UNSCHEDULABLE, Scenario


def take(scenario: Scenario):
    return snapshot(
        scenario.job,
        scenario.pods,
        scenario.events,
        queue=scenario.queue,
        reservation=scenario.reservation,
        now=scenario.now,
    )


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.id for s in SCENARIOS])
def test_scenario_reads_as_its_state_and_reason(scenario: Scenario):
    result = take(scenario)
    assert (result.state, result.reason) == (scenario.state, scenario.reason), result.message


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.id for s in SCENARIOS])
def test_scenario_objects_parse_with_the_kubernetes_models(scenario: Scenario):
    if scenario.job is not None:
        if scenario.job["kind"] == "MPIJob":
            assert mpi_job_parses(scenario.job)
        else:
            assert parses(scenario.job, "V1Job")
    for pod in scenario.pods:
        assert parses(pod, "V1Pod"), pod["metadata"]["name"]
    for item in scenario.events:
        assert parses(item, "CoreV1Event")


def test_queued_job_carries_queue_position_and_pool_message():
    result = take(BY_ID["queued-over-user-quota"])
    assert result.queue_position == 3
    assert "alice uses 4 of 4 GPUs" in result.message


def test_queue_position_is_dropped_once_the_job_left_the_queue():
    result = snapshot(batch_job(), [], queue=QueueStatus("GroupQuota", 4), now=NOW)
    assert result.state == JobState.SCHEDULING
    assert result.queue_position is None


def test_unknown_queue_reason_reads_as_pending_and_keeps_the_pools_words():
    result = snapshot(batch_job(suspend=True), [], queue=QueueStatus("PriorityHold", 2), now=NOW)
    assert (result.state, result.reason) == (JobState.QUEUED, Reason.PENDING)
    assert "PriorityHold" in result.message


def test_requeue_back_off_message_says_when_the_job_returns():
    result = take(BY_ID["queued-requeued-during-back-off"])
    assert result.requeue_count == 1
    assert "back in the queue at 2026-03-02 09:10:00 UTC" in result.message


def test_unschedulable_message_is_the_schedulers():
    result = take(BY_ID["scheduling-unschedulable-with-scheduler-message"])
    assert UNSCHEDULABLE in result.message


def test_unschedulable_message_falls_back_to_the_failed_scheduling_event():

    pod = job_pod(node=None, unschedulable_message="")
    pod["status"]["conditions"][0].pop("message")
    events = [event("Pod", pod["metadata"]["name"], "FailedScheduling", UNSCHEDULABLE, at_s=30)]
    result = snapshot(batch_job(active=1), [pod], events, now=NOW)
    assert result.reason == Reason.UNSCHEDULABLE
    assert UNSCHEDULABLE in result.message


def test_mpi_snapshot_lists_launcher_and_every_worker_by_role_and_index():
    result = take(BY_ID["starting-mpi-launcher-init-1-of-2"])
    assert [(r.role, r.index, r.status) for r in result.replicas] == [
        ("launcher", 0, "Init:1/2"),
        ("worker", 0, "Running"),
        ("worker", 1, "Running"),
    ]
    assert [r.name for r in result.replicas] == ["launcher", "worker-0", "worker-1"]
    assert result.replica("launcher").ready == "0/1"
    assert "launcher: Init:1/2" in result.message


def test_mpi_replica_without_pod_is_listed_with_no_status():
    result = take(BY_ID["starting-mpi-launcher-not-created-yet"])
    launcher = result.replica("launcher")
    assert launcher is not None
    assert (launcher.pod, launcher.status) == (None, NO_POD)
    assert "launcher: no pod yet" in result.message


def test_init_crash_loop_of_the_launcher_shows_in_its_replica_status():
    result = take(BY_ID["retrying-mpi-launcher-init-crash-loop-back-off"])
    assert result.replica("launcher").status == "Init:CrashLoopBackOff"
    assert result.replica("launcher").restarts == 4


def test_init_error_of_the_launcher_shows_in_its_replica_status():
    result = take(BY_ID["retrying-mpi-launcher-init-error"])
    assert result.replica("launcher").status == "Init:Error"
    assert result.exit_code == 1


def test_replica_current_pod_is_the_newest_one():
    old = job_pod(suffix="a1", created=0, phase="Failed", statuses=[terminated("main", 1)], ready=False)
    new = job_pod(suffix="b2", created=100, statuses=[waiting()])
    result = snapshot(batch_job(active=1, failed=1), [new, old], now=NOW)
    assert result.replica("worker").pod == "train-b2"
    assert (result.state, result.reason) == (JobState.STARTING, Reason.CONTAINER_CREATING)
    assert result.pod_failures == 1


def test_retrying_carries_exit_code_and_remaining_budget():
    result = take(BY_ID["retrying-after-non-zero-exit"])
    assert result.exit_code == 1
    assert "1 pod failure(s), the job fails at 4" in result.message


def test_failed_backoff_limit_names_the_exit_code():
    result = take(BY_ID["failed-backoff-limit-exceeded"])
    assert result.exit_code == 1
    assert "exited with code 1" in result.message


def test_failed_image_pull_message_is_the_registrys_error():
    result = take(BY_ID["failed-image-pull-after-deadline"])
    assert "not found" in result.message
    assert "deadline" in result.message


def test_oom_killed_failure_carries_exit_code_137():
    assert take(BY_ID["failed-oom-killed"]).exit_code == 137


def test_verdict_message_is_shown():
    result = take(BY_ID["failed-over-quota"])
    assert result.message == "needs 16 GPUs; group vision has 8"


def test_cancelled_without_message_names_who_cancelled():
    assert take(BY_ID["cancelled-by-user"]).message == "cancelled by alice"


def test_unknown_verdict_is_a_failure_that_names_it():
    job = batch_job(suspend=True, annotations={labels.VERDICT: "Vanished"})
    result = snapshot(job, [], now=NOW)
    assert (result.state, result.reason) == (JobState.FAILED, Reason.ERROR)
    assert "Vanished" in result.message


def test_degraded_node_lost_names_the_node():
    result = take(BY_ID["degraded-mpi-worker-on-lost-node"])
    assert result.replica("worker", 1).status == "Unknown"
    assert "gpu-node-7" in result.message


@pytest.mark.parametrize(
    "state", [JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED], ids=lambda s: s.value.lower()
)
def test_terminal_states_are_terminal(state):
    assert state.is_terminal


@pytest.mark.parametrize(
    "state",
    [s for s in JobState if s not in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)],
    ids=lambda s: s.value.lower(),
)
def test_other_states_are_not_terminal(state):
    assert not state.is_terminal


def test_snapshot_terminal_property_follows_state():
    assert take(BY_ID["succeeded-job-complete"]).is_terminal
    assert not take(BY_ID["running-single-pod"]).is_terminal


def test_gpu_seconds_run_from_admission_to_release():
    result = take(BY_ID["succeeded-job-complete"])
    assert result.gpus == 4
    assert result.gpu_seconds == 4 * 330


def test_gpu_seconds_run_until_now_while_the_reservation_is_held():
    result = snapshot(
        batch_job(active=1),
        [job_pod(phase="Running", statuses=[running()])],
        reservation=Reservation(gpus=2, admitted_at=at(0)),
        now=at(100),
    )
    assert result.gpu_seconds == 200


def test_gpu_seconds_are_zero_without_a_reservation():
    result = take(BY_ID["queued-without-queue-status-is-pending"])
    assert result.gpu_seconds == 0
    assert result.gpus == 4  # what the job asks for, from its annotation


def test_timestamps_come_from_annotations_pods_and_conditions():
    job = batch_job(
        annotations={labels.QUEUED_AT: ts(-600), labels.ADMITTED_AT: ts(-30)},
        succeeded=1,
        conditions=[{"type": "Complete", "status": "True", "lastTransitionTime": ts(400)}],
    )
    job["status"].pop("completionTime", None)
    pod = job_pod(phase="Succeeded", statuses=[terminated()], ready=False)
    result = snapshot(job, [pod], now=at(500))
    assert result.queued_at == at(-600)
    assert result.admitted_at == at(-30)
    assert result.started_at == at(30)
    assert result.finished_at == at(400)
    assert result.observed_at == at(500)


def test_queued_at_defaults_to_creation_and_admitted_at_to_the_reservation():
    job = batch_job(suspend=True)
    del job["metadata"]["annotations"][labels.QUEUED_AT]
    result = snapshot(job, [], reservation=Reservation(4, at(-5)), now=NOW)
    assert result.queued_at == at(-60)
    assert result.admitted_at == at(-5)
    assert result.finished_at is None


def test_attempt_and_requeue_count_are_read_from_the_job():
    job = batch_job(suspend=True, attempt=3, annotations={labels.REQUEUE_COUNT: "2"})
    result = snapshot(job, [], now=NOW)
    assert (result.attempt, result.requeue_count) == (3, 2)


def test_attempt_defaults_to_one():
    job = batch_job(suspend=True)
    del job["metadata"]["labels"][labels.ATTEMPT]
    assert snapshot(job, [], now=NOW).attempt == 1


def test_snapshot_picks_its_pods_and_events_out_of_namespace_wide_lists():

    mine = job_pod(phase="Running", statuses=[running()])
    other_job = job_pod("other", phase="Failed", statuses=[terminated("main", 1)], ready=False)
    other_mpi = worker_pod("dist", 0, node=None, unschedulable_message=UNSCHEDULABLE)
    events = [event("Pod", "other-x7k2p", "BackOff", "Back-off restarting failed container")]
    result = snapshot(batch_job(active=1), [other_job, mine, other_mpi], events, now=NOW)
    assert (result.state, result.reason) == (JobState.RUNNING, Reason.RUNNING)
    assert [r.pod for r in result.replicas] == ["train-x7k2p"]


def test_pods_of_a_predecessor_with_the_same_name_are_ignored():
    stale = job_pod(phase="Failed", statuses=[terminated("main", 1)], ready=False)
    stale["metadata"]["ownerReferences"] = []
    stale["metadata"]["labels"][labels.CONTROLLER_UID] = "00000000-0000-0000-0000-000000000000"
    stale["metadata"]["labels"]["controller-uid"] = "00000000-0000-0000-0000-000000000000"
    result = snapshot(batch_job(active=1), [stale], now=NOW)
    assert (result.state, result.reason) == (JobState.SCHEDULING, Reason.CREATING)


def test_pods_in_another_namespace_are_ignored():
    elsewhere = job_pod(phase="Running", statuses=[running()])
    elsewhere["metadata"]["namespace"] = "other-team"
    result = snapshot(batch_job(active=1), [elsewhere], now=NOW)
    assert result.state == JobState.SCHEDULING


def test_job_items_of_a_list_without_kind_are_read_as_jobs():
    result = snapshot(
        batch_job(active=1, listed=True), [job_pod(phase="Running", statuses=[running()])], now=NOW
    )
    assert (result.kind, result.state) == ("Job", JobState.RUNNING)
    assert (result.name, result.namespace) == ("train", NAMESPACE)


def test_mpijob_without_kind_is_recognised_by_its_replica_specs():
    job = mpi_job()
    del job["kind"], job["apiVersion"]
    result = snapshot(job, [launcher_pod(phase="Running", statuses=[running()])], now=NOW)
    assert result.kind == "MPIJob"
    assert [r.name for r in result.replicas] == ["launcher", "worker-0", "worker-1"]


def test_naive_now_is_taken_as_utc():
    result = snapshot(
        batch_job(active=1),
        [],
        reservation=Reservation(1, at(0)),
        now=(at(60)).replace(tzinfo=None),
    )
    assert result.gpu_seconds == 60


def test_missing_job_keeps_the_reservations_account():
    result = snapshot(None, [], reservation=Reservation(2, at(0)), now=at(0) + timedelta(seconds=30))
    assert (result.state, result.reason, result.gpu_seconds) == (JobState.UNKNOWN, Reason.NOT_FOUND, 60)


def test_controller_completion_wins_over_a_later_cancel_verdict():
    scenario = BY_ID["succeeded-job-complete"]
    job = {**scenario.job, "metadata": {**scenario.job["metadata"]}}
    job["metadata"]["annotations"] = {**job["metadata"]["annotations"], labels.VERDICT: "Cancelled"}
    result = snapshot(job, scenario.pods, now=NOW)
    assert (result.state, result.reason) == (JobState.SUCCEEDED, Reason.COMPLETED)


def test_the_json_form_of_a_snapshot_is_plain_json():
    import json

    from airflow_jobs_plugin.readmodel import schema

    data = schema.snapshot(take(BY_ID["starting-mpi-launcher-init-1-of-2"])).model_dump(mode="json")
    assert json.loads(json.dumps(data)) == data
    assert (data["state"], data["reason"], data["is_terminal"]) == ("STARTING", "Initializing", False)
    assert data["replicas"][0]["name"] == "launcher"
    assert data["replicas"][0]["status"] == "Init:1/2"
    assert data["observed_at"] == "2026-03-02T09:04:00Z"


def test_objects_read_through_the_client_models_give_the_same_snapshot():
    from kubernetes.client import ApiClient

    client = ApiClient()
    scenario = BY_ID["retrying-after-non-zero-exit"]
    job = client.sanitize_for_serialization(client._ApiClient__deserialize(scenario.job, "V1Job"))
    pods = [
        client.sanitize_for_serialization(client._ApiClient__deserialize(p, "V1Pod")) for p in scenario.pods
    ]
    assert snapshot(job, pods, now=NOW) == take(scenario)


def test_mpi_replica_without_pod_has_no_ready_column():
    launcher = take(BY_ID["starting-mpi-launcher-not-created-yet"]).replica("launcher")
    assert launcher.ready == NO_POD


@pytest.mark.parametrize("state", list(JobState), ids=lambda s: s.value.lower())
def test_gpus_are_held_from_scheduling_to_the_end_of_terminating(state):
    holding = {
        JobState.SCHEDULING,
        JobState.STARTING,
        JobState.RUNNING,
        JobState.DEGRADED,
        JobState.RETRYING,
        JobState.TERMINATING,
    }
    assert state.holds_gpus is (state in holding)


def test_degraded_message_names_the_replica_and_its_exit_code():
    result = take(BY_ID["degraded-mpi-worker-exited-with-error"])
    assert result.message.startswith("worker-1: Error, exit code 2")
    assert result.exit_code == 2


def test_a_job_failed_by_its_disruption_rule_is_an_infrastructure_failure_not_an_error():
    from airflow_jobs_plugin.lifecycle import FailureClass, classify_failure

    message = "Pod default/train-x7k2p has condition DisruptionTarget matching FailJob rule at index 0"
    job = batch_job(conditions=[job_condition("Failed", "PodFailurePolicy", message)], failed=1)
    snap = snapshot(job, [], now=NOW)
    assert (snap.state, snap.reason, snap.exit_code) == (JobState.FAILED, Reason.EVICTED, None)
    assert classify_failure(snap).failure_class is FailureClass.RETRYABLE


def test_a_disrupted_job_the_product_ruled_node_lost_keeps_that_reason():
    message = "Pod default/train-x7k2p has condition DisruptionTarget matching FailJob rule at index 0"
    job = batch_job(
        annotations={labels.VERDICT: "NodeLost"},
        conditions=[job_condition("Failed", "PodFailurePolicy", message)],
        failed=1,
    )
    assert snapshot(job, [], now=NOW).reason is Reason.NODE_LOST


def test_a_disrupted_job_whose_gone_pod_lost_its_node_is_node_lost():
    # The node came back, the kubelet removed the stranded pod, and the Job controller failed the job:
    # only the node controllers' events on the pod remain to say the node was lost.
    message = "Pod default/train-x7k2p has condition DisruptionTarget matching FailJob rule at index 0"
    job = batch_job(conditions=[job_condition("Failed", "PodFailurePolicy", message)], failed=1)
    events = [
        event("Pod", "train-x7k2p", "NodeNotReady", "Node is not ready"),
        event("Pod", "train-x7k2p", "TaintManagerEviction", "Marking for deletion Pod default/train-x7k2p"),
    ]
    assert snapshot(job, [], events, now=NOW).reason is Reason.NODE_LOST


def test_a_disrupted_job_whose_gone_pod_was_evicted_stays_evicted():
    message = "Pod default/train-x7k2p has condition DisruptionTarget matching FailJob rule at index 0"
    job = batch_job(conditions=[job_condition("Failed", "PodFailurePolicy", message)], failed=1)
    events = [
        event("Pod", "train-x7k2p", "Evicted", "The node was low on resource: memory."),
        event("Pod", "other-pod", "NodeNotReady", "Node is not ready"),  # another pod's node
    ]
    assert snapshot(job, [], events, now=NOW).reason is Reason.EVICTED


def test_a_launcher_that_runs_as_a_worker_shifts_the_workers_indexes_without_a_missing_worker():
    # With runLauncherAsWorker mpi-operator labels the launcher replica 0 and the workers 1..N
    # (workerReplicaIndexLabel, pkg/controller/mpi_job_controller.go v0.7.0+).
    job = mpi_job(workers=2)
    job["spec"]["runLauncherAsWorker"] = True
    pods = [
        launcher_pod(phase="Running"),
        worker_pod(index=1, phase="Running"),
        worker_pod(index=2, phase="Running"),
    ]
    pods[0]["metadata"]["labels"][labels.MPI_REPLICA_INDEX] = "0"
    result = snapshot(job, pods, now=NOW)
    assert [(r.role, r.index, r.status) for r in result.replicas] == [
        ("launcher", 0, "Running"),
        ("worker", 1, "Running"),
        ("worker", 2, "Running"),
    ]


def test_an_mpijob_past_its_launcher_backoff_limit_reads_as_such_without_an_empty_tail():
    """MPI operator v0.8.2 (updateMPIJobFailedStatus) appends the last failed launcher pod's reason and
    message, both empty for a plain non-zero exit: "BackoffLimitExceeded/" and a message ending ": "."""
    job = mpi_job(
        launcher_failed=2,
        backoff_limit=1,
        conditions=[
            job_condition("Failed", "BackoffLimitExceeded/", "Job has reached the specified backoff limit: ")
        ],
    )
    result = snapshot(job, [], [], now=at(400))
    assert (result.state, result.reason) == (JobState.FAILED, Reason.BACKOFF_LIMIT_EXCEEDED)
    assert result.message.startswith("Job has reached the specified backoff limit"), result.message
    assert ": ;" not in result.message and not result.message.rstrip().endswith(":"), result.message


@pytest.mark.parametrize(
    ("evicted_for", "reason"),
    [("Preempted", Reason.PREEMPTED), ("PodsReadyTimeout", Reason.EVICTED), ("Deactivated", Reason.EVICTED)],
)
def test_a_kueue_eviction_is_named_by_its_cause_while_the_pods_stop(evicted_for, reason):
    """Kueue suspends the job of an evicted Workload; only a preemption is logged as one."""
    queue = QueueStatus(
        "Requeued",
        message=f"Kueue: evicted ({evicted_for}): ...; waiting in LocalQueue team",
        evicted_for=evicted_for,
    )
    pod = job_pod(phase="Running", statuses=[running()], deleting=True)
    job = batch_job(suspend=True, annotations={labels.ADMITTED_AT: ts(-30)})
    result = snapshot(job, [pod], [], queue=queue, now=at(400))
    assert (result.state, result.reason) == (JobState.TERMINATING, reason)
    assert f"evicted ({evicted_for})" in result.message


def test_a_launcher_whose_init_container_failed_says_so_not_that_the_launcher_exited():
    """The MPI launcher's wait-for-workers init container exiting 3 is not the program's exit 3."""
    launcher = launcher_pod(
        phase="Failed",
        init_containers=("wait-for-workers",),
        init_statuses=[terminated("wait-for-workers", 3, "Error")],
        statuses=[waiting("main", "PodInitializing")],
    )
    job = mpi_job(
        launcher_failed=1,
        backoff_limit=0,
        conditions=[job_condition("Failed", "MPIJobFailed", "MPIJob ml/dist has failed")],
    )
    result = snapshot(job, [launcher], [], now=at(400))
    assert result.state == JobState.FAILED
    assert "launcher's init container wait-for-workers exited with code 3" in result.message, result.message
