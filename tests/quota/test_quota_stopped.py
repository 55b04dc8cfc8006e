"""A job a user stopped (labels.STOPPED_AT): never admitted until resumed, its GPUs given back once its
pods are gone, its place in line kept for the resume, and still subject to the queue timeout."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.queueing.quota.ledger_model import (
    DropReason,
    Ledger,
    ObservedJob,
    observed_job,
    plan_admission,
    queued_job_from_metadata,
    reconcile_drops,
)
from airflow_jobs_plugin.queueing.quota.model import QueuedJob, Reservation, Verdict
from airflow_jobs_plugin.queueing.quota.parse import parse_policy
from airflow_jobs_plugin.queueing.quota.policy import decide

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=timezone.utc)
NOW = T0 + timedelta(minutes=10)
POLICY = parse_policy("groups: {vision: {gpus: 4, user_gpus: 4}}")
WITH_TIMEOUT = parse_policy("groups: {vision: {gpus: 4, user_gpus: 4}}\nqueue_timeout: 1h")


def queued(name: str, gpus: int, *, minute: int, stopped: bool = False) -> QueuedJob:
    return QueuedJob(
        name=name,
        group="vision",
        user="bob",
        gpus=gpus,
        queued_at=T0 + timedelta(minutes=minute),
        uid=f"uid-{name}",
        namespace="ml",
        stopped_at=T0 + timedelta(minutes=5) if stopped else None,
    )


def held(name: str, gpus: int) -> Reservation:
    return Reservation(
        job=name, group="vision", user="carol", gpus=gpus, uid=f"uid-{name}", admitted_at=T0, namespace="ml"
    )


def test_a_stopped_job_is_never_admitted_and_takes_no_place_in_line():
    decisions = decide(
        POLICY, [queued("first", 2, minute=0, stopped=True), queued("next", 2, minute=1)], [], NOW
    )
    by_name = {d.job.name: (d.verdict, d.position) for d in decisions}
    assert by_name == {"first": (Verdict.STOPPED, None), "next": (Verdict.ADMIT, None)}


def test_a_stopped_job_does_not_block_its_group_and_waiting_jobs_keep_their_numbers():
    jobs = [
        queued("big", 4, minute=0, stopped=True),
        queued("a", 2, minute=1),
        queued("b", 2, minute=2),
    ]
    decisions = decide(POLICY, jobs, [held("running", 2)], NOW)
    by_name = {d.job.name: (d.verdict, d.position) for d in decisions}
    assert by_name == {
        "big": (Verdict.STOPPED, None),
        "a": (Verdict.ADMIT, None),
        "b": (Verdict.GROUP_QUOTA, 1),
    }


def test_a_resumed_job_returns_to_its_original_position():
    # Stopped while it ran; resumed later: its enqueue time never changed, so it is ahead of jobs that
    # were queued after it, whatever happened meanwhile.
    jobs = [queued("late", 4, minute=3), queued("resumed", 4, minute=0)]
    decisions = decide(POLICY, jobs, [held("running", 2)], NOW)
    by_name = {d.job.name: (d.verdict, d.position) for d in decisions}
    assert by_name == {"resumed": (Verdict.GROUP_QUOTA, 1), "late": (Verdict.BEHIND_HEAD, 2)}


def test_a_stopped_job_that_had_waited_past_its_queue_timeout_fails_as_the_queue_timeout_says():
    stopped = replace(queued("stopped", 2, minute=0, stopped=True), waited_before=timedelta(hours=1))
    (decision,) = decide(WITH_TIMEOUT, [stopped], [], T0 + timedelta(hours=2))
    assert decision.verdict is Verdict.QUEUE_TIMEOUT
    assert "stopped at 2025-03-01T09:05:00Z" in decision.message and "queue_timeout 1h" in decision.message
    assert "after waiting 1h for quota" in decision.message


def test_time_stopped_is_not_on_the_queue_clock():
    # Queued at 09:00 and stopped, it has waited for its user, not for quota, for days.
    stopped = replace(queued("stopped", 2, minute=0, stopped=True), waited_before=timedelta(minutes=5))
    (decision,) = decide(WITH_TIMEOUT, [stopped], [], T0 + timedelta(days=3))
    assert decision.verdict is Verdict.STOPPED


def test_a_resumed_job_that_ran_for_hours_competes_again_on_the_waits_it_had_before():
    # Queued at 09:00, it waited 10 minutes, ran for 5 hours, was stopped and resumed at 14:10.
    resumed = replace(
        queued("resumed", 2, minute=0),
        waited_before=timedelta(minutes=10),
        wait_since=T0 + timedelta(hours=5, minutes=10),
    )
    at = T0 + timedelta(hours=5, minutes=20)
    assert resumed.waited(at) == timedelta(minutes=20)
    (decision,) = decide(WITH_TIMEOUT, [resumed], [], at)
    assert decision.verdict is Verdict.ADMIT
    # Its new wait counts on top of what it banked: 50 more minutes of waiting pass the hour.
    late = T0 + timedelta(hours=6)
    assert resumed.waited(late) == timedelta(hours=1)
    blocked = [held("other", 4)]
    (decision,) = decide(WITH_TIMEOUT, [resumed], blocked, late)
    assert decision.verdict is Verdict.QUEUE_TIMEOUT


def test_a_stopped_job_keeps_no_reservation_once_its_pods_are_gone():
    ledger = Ledger("vision", (held("stopped", 2),))
    stopping = {"uid-stopped": ObservedJob(suspended=True, stopped=True, holding_pods=True)}
    assert reconcile_drops(ledger, stopping) == ()  # its pods still hold the GPUs
    gone = {"uid-stopped": ObservedJob(suspended=True, stopped=True)}
    assert [d.reason for d in reconcile_drops(ledger, gone)] == [DropReason.STOPPED]


def test_a_stopped_job_whose_reservation_remains_is_not_unsuspended_by_the_repair():
    # A crash could leave a reservation of the current attempt on a job a user then stopped: the repair
    # of a lost unsuspend must not release it.
    ledger = Ledger("vision", (held("stopped", 2),))
    plan = plan_admission(
        POLICY,
        ledger,
        [replace(queued("stopped", 2, minute=0, stopped=True), uid="uid-stopped")],
        {"uid-stopped": ObservedJob(suspended=True, stopped=True, holding_pods=True)},
        NOW,
    )
    assert plan.unsuspend == ()
    assert [d.verdict for d in plan.decisions] == [Verdict.STOPPED]


def test_an_ended_job_keeps_its_reservation_while_pods_still_hold_gpus():
    ledger = Ledger("vision", (held("done", 2),))
    assert reconcile_drops(ledger, {"uid-done": ObservedJob(terminal=True, holding_pods=True)}) == ()
    assert [d.reason for d in reconcile_drops(ledger, {"uid-done": ObservedJob(terminal=True)})] == [
        DropReason.FINISHED
    ]


def test_a_job_its_trigger_released_gives_its_gpus_back_whatever_its_pods_still_hold():
    """Pods stranded on a lost node would hold the quota for as long as the node is away: once the
    trigger that followed the job found it over, its reservation goes (docs/reliability.md)."""
    ledger = Ledger("vision", (held("done", 2),))
    released = ObservedJob(terminal=True, holding_pods=True, released=True)
    (drop,) = reconcile_drops(ledger, {"uid-done": released})
    assert drop.reason is DropReason.RELEASED
    assert drop.message.endswith("the job is over (the admission controller saw it end)")


def test_the_stop_annotations_are_read_from_the_job():
    metadata = {
        "name": "train",
        "uid": "u1",
        "labels": {labels.GROUP: "vision", labels.USER: "bob"},
        "annotations": {
            labels.GPUS: "2",
            labels.QUEUED_AT: "2025-03-01T09:00:00Z",
            labels.STOPPED_AT: "2025-03-01T09:05:00Z",
            labels.STOPPED_BY: "bob",
        },
    }
    assert queued_job_from_metadata(metadata).stopped_at == T0 + timedelta(minutes=5)
    assert queued_job_from_metadata(metadata).queued_at == T0
    assert observed_job(metadata, suspended=True, terminal=False).stopped
