"""Every state line comes from one view of the job and its pods at one moment: the rules that piece the
view together (a ruled job's pods read in one list, no pod older than it was seen, a deleted job's pods
still stopping) and the readings that made a line false (a worker stopped after success read as an
error, a lost node's pod named twice, two ways)."""

from __future__ import annotations

import copy

from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.outcome import DELETED_BY_SOMEONE
from airflow_jobs_plugin.lifecycle import JobState, Reason, snapshot, tracking

from .factories import (
    at,
    batch_job,
    job_condition,
    job_pod,
    launcher_pod,
    mpi_job,
    running,
    terminated,
    waiting,
    worker_pod,
)

NOW = at(400)
SUCCEEDED = job_condition("Succeeded", "MPIJobSucceeded", "MPIJob ml-team/dist successfully completed.")


def versioned(pod: dict, version: int, **meta) -> dict:
    pod = copy.deepcopy(pod)
    pod["metadata"]["resourceVersion"] = str(version)
    pod["metadata"].update(meta)
    return pod


def launcher_done() -> dict:
    return launcher_pod(phase="Succeeded", statuses=[terminated()])


def worker_running(index: int) -> dict:
    return worker_pod(index=index, phase="Running", statuses=[running()])


# --- 1. a ruled job's pods are read in one list -----------------------------------------------------


def test_a_finished_job_whose_cached_pods_have_not_ended_has_its_pods_read_in_one_list():
    # The stale pieces a late trigger found: an MPIJob that has Succeeded, its launcher still Pending
    # and a worker still Pending in a cache whose pod stream lags.
    job = mpi_job(conditions=[SUCCEEDED])
    stale = [launcher_pod(phase="Pending", node=None), worker_running(0), worker_pod(index=1)]
    assert tracking.pods_lag_ruling(job, stale)
    # Pods that have all ended agree with the ruling: nothing to read again.
    assert not tracking.pods_lag_ruling(job, [launcher_done()])
    # A job still running reads its pods from the stream as they come.
    assert not tracking.pods_lag_ruling(mpi_job(), stale)


def test_a_job_the_controller_decided_but_not_yet_finished_counts_as_ruled():
    target = job_condition(
        "FailureTarget", "BackoffLimitExceeded", "Job has reached the specified backoff limit"
    )
    job = batch_job(conditions=[target])
    assert tracking.pods_lag_ruling(job, [job_pod(phase="Running", statuses=[running()])])


def test_a_pod_the_newer_list_did_not_have_is_gone_unless_created_after_it():
    listed = frozenset({"dist-launcher-q8zvn"})
    gone = versioned(worker_pod(index=0), 90)  # deleted by the list's version; the stream is late
    created_after = versioned(worker_pod(index=1), 120)
    launcher = versioned(launcher_done(), 95)
    kept = tracking.pods_as_listed([launcher, gone, created_after], listed, "100")
    assert kept == [launcher, created_after]
    # Versions that cannot be compared: only a pod the list had is known to exist.
    assert tracking.pods_as_listed([launcher, gone], listed, None) == [launcher]


def test_a_late_look_at_a_finished_mpijob_reads_the_state_it_finds_not_a_replay():
    # What the one list shows of the job that finished: the launcher done, the workers being stopped.
    job = mpi_job(conditions=[SUCCEEDED])
    stale = [launcher_pod(phase="Pending", node=None), worker_running(0), worker_pod(index=1)]
    assert "launcher Pending" in tracking.state_line(snapshot(job, stale, now=NOW))  # the false line
    listed = [launcher_done(), worker_pod(index=0, phase="Running", statuses=[running()], deleting=True)]
    found = tracking.pods_as_listed(
        [*listed, stale[2]], frozenset(p["metadata"]["name"] for p in listed), "5000"
    )
    line = tracking.state_line(snapshot(job, found, now=NOW))
    assert line == "TERMINATING (launcher Completed, workers 1/2 Terminating, 1/2 <none>)", line


# --- 2. a job deleted in the background --------------------------------------------------------------


def test_a_deleted_job_whose_pods_still_stop_is_terminating_until_the_last_is_gone():
    # kubectl delete (background propagation): the MPIJob is gone, the garbage collector deletes its
    # workers, which stop within their grace period holding their GPUs.
    last = mpi_job()
    stopping = [
        launcher_pod(phase="Running", statuses=[running()], deleting=True),
        worker_pod(index=0, phase="Running", statuses=[running()], deleting=True),
        worker_running(1),
    ]
    snap, _ = tracking.after_deletion(last, now=NOW, pods=stopping)
    assert (snap.state, snap.reason) == (JobState.TERMINATING, Reason.DELETED)
    assert tracking.state_line(snap).startswith("TERMINATING (Deleted; launcher Terminating, workers ")
    # The last pod gone (or only ended pods left): the deletion was a cancel.
    ended = [worker_pod(index=0, phase="Failed", statuses=[terminated(exit_code=143)], deleting=True)]
    for left in ([], ended):
        snap, annotations = tracking.after_deletion(last, now=NOW, pods=left)
        assert snap.state is JobState.CANCELLED, left
        assert annotations[labels.CANCELLED_BY] == DELETED_BY_SOMEONE


def test_a_cancelled_job_deleted_while_its_pods_stop_says_cancelled_while_terminating():
    last = mpi_job(annotations={labels.VERDICT: "Cancelled", labels.CANCELLED_BY: "bob"})
    pods = [worker_pod(index=0, phase="Running", statuses=[running()], deleting=True)]
    snap, _ = tracking.after_deletion(last, now=NOW, pods=pods)
    assert (snap.state, snap.reason) == (JobState.TERMINATING, Reason.CANCELLED)


def test_pods_on_a_lost_node_do_not_hold_a_deleted_job():
    lost = worker_pod(index=0, phase="Running", statuses=[running()], deleting=True, reason="NodeLost")
    snap, _ = tracking.after_deletion(mpi_job(), now=NOW, pods=[lost])
    assert snap.state is JobState.CANCELLED


# --- 3. lines never step back ---------------------------------------------------------------------


def test_a_pod_never_goes_back_to_a_version_before_its_deletion():
    fresh = versioned(worker_running(0), 200)
    deleting = versioned(worker_running(0), 210, deletionTimestamp="2026-03-02T09:02:00Z")
    older = versioned(worker_running(0), 205)
    other = versioned(worker_running(1), 150)
    assert tracking.newest_pods([fresh, other], [deleting, other]) == [deleting, other]
    assert tracking.newest_pods([deleting, other], [older, other]) == [deleting, other]
    # Versions that cannot be compared: a deletion once seen stays.
    unversioned = versioned(worker_running(0), 0)
    unversioned["metadata"].pop("resourceVersion")
    assert tracking.newest_pods([deleting], [unversioned]) == [deleting]


def test_a_pod_created_again_under_its_name_is_another_pod():
    deleting = versioned(worker_running(0), 210, deletionTimestamp="2026-03-02T09:02:00Z")
    again = versioned(worker_running(0), 300, uid="another-uid")
    assert tracking.newest_pods([deleting], [again]) == [again]


def test_a_terminating_line_does_not_step_back_to_running():
    job = mpi_job()
    launcher = versioned(launcher_pod(phase="Running", statuses=[running()]), 100)
    w0 = versioned(worker_running(0), 200)
    w0_deleting = versioned(w0, 210, deletionTimestamp="2026-03-02T09:02:00Z")
    w1 = versioned(worker_running(1), 150)
    looks = [[launcher, w0_deleting, w1], [launcher, w0, w1]]  # the second look read an older w0
    before: list[dict] = []
    lines = []
    for pods in looks:
        before = tracking.newest_pods(before, pods)
        lines.append(tracking.state_line(snapshot(job, before, now=NOW)))
    assert lines[0] == lines[1], lines
    assert "1/2 Terminating" in lines[1]


# --- 4. a succeeded job's workers stopped at the end ----------------------------------------------


def stopped_worker(index: int, exit_code: int = 143, reason: str | None = None) -> dict:
    return worker_pod(index=index, phase="Failed", statuses=[terminated(exit_code=exit_code, reason=reason)])


def test_a_worker_stopped_after_the_launcher_succeeded_is_no_error():
    job = mpi_job(conditions=[SUCCEEDED])
    pods = [launcher_done(), stopped_worker(0), stopped_worker(1, 137)]
    snap = snapshot(job, pods, now=NOW)
    assert snap.state is JobState.SUCCEEDED
    assert tracking.state_line(snap) == "SUCCEEDED (launcher Completed, workers 2/2 Completed)"
    assert tracking.exit_codes(snap) == {"launcher": 0}
    assert all(r.reason is None for r in snap.replicas)


def test_a_worker_still_stopping_after_success_shows_no_error_beside_it():
    job = mpi_job(conditions=[SUCCEEDED])
    stopping = worker_pod(index=1, phase="Running", statuses=[running()], deleting=True)
    snap = snapshot(job, [launcher_done(), stopped_worker(0), stopping], now=NOW)
    assert "Error" not in tracking.state_line(snap)
    assert snap.state is JobState.TERMINATING


def test_an_oom_killed_worker_of_a_succeeded_job_keeps_its_reading():
    job = mpi_job(conditions=[SUCCEEDED])
    snap = snapshot(job, [launcher_done(), stopped_worker(0, 137, "OOMKilled"), stopped_worker(1)], now=NOW)
    assert snap.replica("worker", 0).status == "OOMKilled"
    assert snap.replica("worker", 1).status == "Completed"


def test_a_worker_killed_in_a_job_that_did_not_succeed_is_still_an_error():
    failed = job_condition("Failed", "BackoffLimitExceeded", "launcher failed")
    snap = snapshot(mpi_job(conditions=[failed]), [stopped_worker(0)], now=NOW)
    assert snap.replica("worker", 0).status == "Error"


# --- 5. a deleted node ----------------------------------------------------------------------------


def test_a_pod_lost_with_its_deleted_node_ends_the_attempt_with_the_cause_it_showed():
    # The node is deleted: the pod GC marks its pod Failed with DisruptionTarget DeletionByPodGC and
    # force-deletes it; no event says so. The Job controller's pod failure policy then fails the job.
    name = "train-x7k2p"
    pod = job_pod(phase="Failed", statuses=[terminated(exit_code=137)], disruption="DeletionByPodGC")
    retrying = snapshot(batch_job(failed=1), [pod], now=NOW)
    assert (retrying.state, retrying.reason) == (JobState.RETRYING, Reason.NODE_LOST)
    seen = tracking.disruptions_seen(retrying, {})
    assert seen == {name: Reason.NODE_LOST}
    message = f"Pod ml-team/{name} has condition DisruptionTarget matching FailJob rule at index 0"
    failed_job = batch_job(conditions=[job_condition("Failed", "PodFailurePolicy", message)], failed=1)
    ended = snapshot(failed_job, [], now=NOW, disruptions=seen)
    assert (ended.state, ended.reason) == (JobState.FAILED, Reason.NODE_LOST)
    # Without what was seen, the gone pod's disruption is an eviction, as before.
    assert snapshot(failed_job, [], now=NOW).reason is Reason.EVICTED


def test_disruptions_seen_keep_one_mapping_while_nothing_is_new():
    nothing: dict = {}
    quiet = snapshot(batch_job(), [job_pod(phase="Running", statuses=[running()])], now=NOW)
    assert tracking.disruptions_seen(quiet, nothing) is nothing
    waiting_pod = job_pod(statuses=[waiting()])
    assert tracking.disruptions_seen(snapshot(batch_job(), [waiting_pod], now=NOW), nothing) is nothing
