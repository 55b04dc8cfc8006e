"""The leader election's rules (controller/lease.py), each a table of Leases as read and what a candidate
does with them; the numbers in the names are the module docstring's rules (client-go v1.36.3
``tools/leaderelection/leaderelection.go``, ``resourcelock/leaselock.go``)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_jobs_plugin.cluster.objects import rfc3339
from airflow_jobs_plugin.controller import lease
from airflow_jobs_plugin.controller.lease import (
    Acquire,
    LeaseRecord,
    Lost,
    Moment,
    Observation,
    Renew,
    RenewalRound,
    Timings,
    Wait,
)

T = Timings()  # client-go's defaults: 15 s, 10 s, 2 s
BASE = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
ME, OTHER = "controller-0", "controller-1"


def at(tick: float, skew: float = 0.0) -> Moment:
    """This candidate's clocks at ``tick``; ``skew`` moves its wall clock only."""
    return Moment(BASE + timedelta(seconds=tick + skew), tick)


def wall(seconds: float) -> datetime:
    return BASE + timedelta(seconds=seconds)


def lease_of(holder: str | None, *, duration=15, renewed=0.0, acquired=0.0, transitions=3, rv="7", **more):
    spec = {
        "leaseDurationSeconds": duration,
        "acquireTime": rfc3339(wall(acquired)),
        "renewTime": rfc3339(wall(renewed)),
        "leaseTransitions": transitions,
        **more,
    }
    if holder is not None:
        spec["holderIdentity"] = holder
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "admission", "namespace": "airflow-jobs-system", "resourceVersion": rv},
        "spec": spec,
    }


def decide(read, memory=None, now=0.0, *, leading=False, read_at=None):
    return lease.decide(read, memory, ME, at(now), now if read_at is None else read_at, T, leading=leading)


# --- rule 1: the record, MicroTime --------------------------------------------------------------------


@pytest.mark.parametrize(
    "moment, written",
    [
        (datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc), "2026-03-01T12:00:00.000000Z"),
        (datetime(2026, 3, 1, 12, 0, 0, 5, tzinfo=timezone.utc), "2026-03-01T12:00:00.000005Z"),
        (
            datetime(2026, 3, 1, 13, 30, 0, 123456, tzinfo=timezone(timedelta(hours=1, minutes=30))),
            "2026-03-01T12:00:00.123456Z",
        ),
    ],
)
def test_1_times_are_written_as_micro_time_in_utc_with_six_digits(moment, written):
    spec = LeaseRecord(ME, 15, moment, moment, 0).spec()
    assert spec["acquireTime"] == spec["renewTime"] == written


def test_1_the_record_is_the_spec_client_go_writes():
    record = LeaseRecord(ME, 15, wall(0), wall(2), 4)
    assert record.spec() == {
        "holderIdentity": ME,
        "leaseDurationSeconds": 15,
        "acquireTime": "2026-03-01T12:00:00.000000Z",
        "renewTime": "2026-03-01T12:00:02.000000Z",
        "leaseTransitions": 4,
    }
    assert lease.record_of({"spec": record.spec()}) == record


@pytest.mark.parametrize(
    "spec, read",
    [
        ({}, LeaseRecord()),
        ({"holderIdentity": None, "leaseDurationSeconds": None}, LeaseRecord()),
        ({"holderIdentity": 7, "leaseTransitions": "x"}, LeaseRecord()),
        (
            {"holderIdentity": "", "leaseDurationSeconds": 1, "strategy": "OldestEmulationVersion"},
            LeaseRecord("", 1, strategy="OldestEmulationVersion"),
        ),
    ],
)
def test_1_absent_fields_read_as_client_go_reads_a_nil_pointer(spec, read):
    assert lease.record_of({"spec": spec}) == read


def test_1_a_released_lease_is_written_with_an_empty_holder_not_without_one():
    assert LeaseRecord("", 1, wall(0), wall(0), 2).spec()["holderIdentity"] == ""


# --- rule 2: expiry on this candidate's clock ---------------------------------------------------------


@pytest.mark.parametrize(
    "renew_time_written, why",
    [
        (-3600.0, "the holder's clock is an hour slow"),
        (0.0, "the clocks agree"),
        (+3600.0, "the holder's clock is an hour fast"),
    ],
)
def test_2_expiry_counts_from_when_this_candidate_saw_the_record_not_from_its_renew_time(
    renew_time_written, why
):
    read = lease_of(OTHER, renewed=renew_time_written)
    first = decide(read, now=100.0)
    assert first.step == Wait(OTHER, 115.0), why
    # Unchanged at 114.9 s: still held. At 115 s on this clock, whatever renewTime says: expired.
    assert decide(read, first.memory, now=114.9).step == Wait(OTHER, 115.0), why
    taken = decide(read, first.memory, now=115.0).step
    assert isinstance(taken, Acquire) and taken.record.holder == ME, why


def test_2_a_record_seen_to_change_restarts_its_term_from_the_read():
    first = decide(lease_of(OTHER, renewed=0.0), now=0.0)
    renewed = decide(lease_of(OTHER, renewed=10.0, rv="8"), first.memory, now=10.0, read_at=10.2)
    assert renewed.step == Wait(OTHER, 25.2)
    assert renewed.memory == Observation(renewed.memory.record, renewed.memory.record, 10.2)


def test_2_a_renewal_within_the_same_second_is_still_a_change():
    """client-go compares the record in whole seconds; a sub-second renewal must still count."""
    first = decide(lease_of(OTHER, renewed=10.1), now=10.2)
    again = decide(lease_of(OTHER, renewed=10.6, rv="8"), first.memory, now=10.7)
    assert again.step == Wait(OTHER, 25.7)


def test_2_a_change_of_metadata_alone_is_no_sign_of_life():
    first = decide(lease_of(OTHER, rv="7"), now=0.0)
    relabelled = lease_of(OTHER, rv="9")
    relabelled["metadata"]["labels"] = {"touched": "yes"}
    assert decide(relabelled, first.memory, now=14.0).step == Wait(OTHER, 15.0)
    assert isinstance(decide(relabelled, first.memory, now=15.0).step, Acquire)


def test_2_the_term_is_the_records_own_duration_not_this_candidates():
    assert decide(lease_of(OTHER, duration=60), now=0.0).step == Wait(OTHER, 60.0)


# --- rule 3: what to do with the Lease as read --------------------------------------------------------


def test_3a_no_lease_is_created_naming_this_candidate_with_no_transitions():
    step = decide(None, now=5.0).step
    assert step == Acquire(LeaseRecord(ME, 15, wall(5.0), wall(5.0), 0), create=True)


def test_3a_a_leader_whose_lease_was_deleted_creates_it_again():
    memory = Observation(LeaseRecord(ME, 15, wall(0), wall(2), 5), None, 2.0)
    step = decide(None, memory, now=4.0, leading=True).step
    assert step == Acquire(LeaseRecord(ME, 15, wall(4.0), wall(4.0), 0), create=True)


@pytest.mark.parametrize(
    "read, why",
    [
        (lease_of(OTHER), "the Lease names 'controller-1' now"),
        (lease_of(""), "the Lease was released"),
        (lease_of(None), "the Lease was released"),
    ],
)
def test_3b_a_leader_that_reads_another_holder_or_none_has_lost_at_once(read, why):
    mine = Observation(LeaseRecord(ME, 15, wall(0), wall(0), 3), None, 0.0)
    assert decide(read, mine, now=1.0, leading=True).step == Lost(read["spec"].get("holderIdentity", ""), why)


def test_3c_a_lease_held_by_another_is_waited_for_until_its_term_ends_on_this_clock():
    first = decide(lease_of(OTHER), now=50.0)
    assert first.step == Wait(OTHER, 65.0)
    assert decide(lease_of(OTHER), first.memory, now=64.0).step == Wait(OTHER, 65.0)


@pytest.mark.parametrize("leading", [True, False])
def test_3d_this_candidates_own_lease_is_renewed_keeping_acquire_time_and_transitions(leading):
    step = decide(lease_of(ME, acquired=-30.0, renewed=-2.0, transitions=6), now=0.0, leading=leading).step
    assert step == Renew(LeaseRecord(ME, 15, wall(-30.0), wall(0.0), 6))


@pytest.mark.parametrize(
    "read, transitions_after",
    [
        (lease_of("", duration=1, transitions=4), 5),
        (lease_of(None, transitions=0), 1),
        (lease_of(OTHER, duration=0, transitions=2), 3),
    ],
)
def test_3e_a_released_lease_is_taken_at_once_with_one_more_transition(read, transitions_after):
    assert decide(read, now=9.0).step == Acquire(
        LeaseRecord(ME, 15, wall(9.0), wall(9.0), transitions_after), create=False
    )


def test_3e_an_expired_lease_is_taken_with_one_more_transition():
    first = decide(lease_of(OTHER, transitions=7), now=0.0)
    assert decide(lease_of(OTHER, transitions=7), first.memory, now=15.0).step == Acquire(
        LeaseRecord(ME, 15, wall(15.0), wall(15.0), 8), create=False
    )


def test_3e_a_write_drops_the_coordinated_election_fields():
    read = lease_of("", strategy="OldestEmulationVersion", preferredHolder=OTHER)
    step = decide(read, now=0.0).step
    assert isinstance(step, Acquire)
    assert "strategy" not in step.record.spec() and "preferredHolder" not in step.record.spec()


def test_3_the_write_replaces_the_spec_of_the_lease_as_read_keeping_its_resource_version():
    read = lease_of(OTHER, rv="41")
    record = LeaseRecord(ME, 15, wall(1), wall(1), 4)
    sent = lease.body(record, read, "airflow-jobs-system", "admission")
    assert sent["metadata"] == read["metadata"]
    assert sent["spec"] == record.spec()
    created = lease.body(record, None, "airflow-jobs-system", "admission")
    assert created == {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "admission", "namespace": "airflow-jobs-system"},
        "spec": record.spec(),
    }


# --- rule 4: the leader's renewal without a read -------------------------------------------------------


@pytest.mark.parametrize(
    "memory, now, renewal",
    [
        (None, 0.0, None),
        (Observation(LeaseRecord(OTHER, 15, wall(0), wall(0), 1), None, 0.0), 1.0, None),
        (
            Observation(LeaseRecord(ME, 15, wall(0), wall(8), 2), None, 8.0),
            10.0,
            LeaseRecord(ME, 15, wall(0), wall(10), 2),
        ),
        (
            Observation(LeaseRecord(ME, 15, wall(0), wall(8), 2), None, 8.0),
            22.9,
            LeaseRecord(ME, 15, wall(0), wall(22.9), 2),
        ),
        (Observation(LeaseRecord(ME, 15, wall(0), wall(8), 2), None, 8.0), 23.0, None),
        (Observation(LeaseRecord("", 1, wall(0), wall(0), 2), None, 0.0), 0.5, None),
    ],
    ids=[
        "nothing known",
        "another holds it",
        "own and valid",
        "own, valid to the end",
        "own, ended",
        "released",
    ],
)
def test_4_the_leader_renews_without_reading_only_while_its_own_term_runs_on_its_clock(memory, now, renewal):
    assert lease.fast_renewal(memory, ME, at(now), T) == renewal


def test_4_a_write_is_remembered_as_valid_from_when_it_succeeded():
    seen = LeaseRecord(OTHER, 15, wall(0), wall(0), 1)
    written = LeaseRecord(ME, 15, wall(20), wall(20), 2)
    memory = lease.after_write(Observation(seen, seen, 0.0), written, 20.3)
    assert memory == Observation(written, seen, 20.3)
    assert memory.valid_until() == 35.3


# --- rule 5: a renewal round ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "last_started, next_attempt",
    [(100.0, 102.0), (102.0, 104.0), (106.0, 108.0), (107.9, 109.9), (108.0, None), (109.0, None)],
)
def test_5_a_renewal_round_tries_every_retry_period_and_none_at_or_past_its_deadline(
    last_started, next_attempt
):
    round_ = RenewalRound(100.0)
    assert round_.deadline(T) == 110.0
    assert round_.next_attempt(last_started, T) == next_attempt


def test_5_a_leader_that_cannot_renew_stops_before_anyone_else_may_start():
    """The last renewal succeeded at 0: the next round starts a retry period later and ends at its
    deadline; others take over lease_duration after the renewal at the earliest."""
    last_renewal = 0.0
    round_ = RenewalRound(last_renewal + T.retry_period)
    assert round_.deadline(T) < last_renewal + T.lease_duration


# --- rule 6: release ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "read, released",
    [
        (lease_of(ME, transitions=4), LeaseRecord("", 1, wall(3), wall(3), 4)),
        (lease_of(OTHER), None),
        (lease_of(""), None),
        (None, None),
    ],
    ids=["ours", "taken over since", "released already", "deleted"],
)
def test_6_release_clears_the_holder_only_when_the_lease_just_read_names_this_candidate(read, released):
    assert lease.release(read, ME, at(3.0)) == released


def test_6_a_released_lease_is_taken_by_the_next_candidate_at_once():
    released = LeaseRecord("", 1, wall(3), wall(3), 4).spec()
    step = lease.decide({"spec": released}, None, OTHER, at(3.1), 3.1, T, leading=False).step
    assert isinstance(step, Acquire) and step.record.transitions == 5 and step.record.holder == OTHER


# --- timings and the campaign's pace ------------------------------------------------------------------


@pytest.mark.parametrize(
    "timings, words",
    [
        ((1.5, 0.8, 0.2), ["lease_duration must be a whole number of seconds, at least 1, got 1.5"]),
        ((0.0, 0.5, 0.1), ["lease_duration must be a whole number of seconds, at least 1, got 0.0"]),
        ((15.0, 0.0, 2.0), ["renew_deadline must be greater than 0 seconds, got 0.0"]),
        ((15.0, 10.0, -1.0), ["retry_period must be greater than 0 seconds, got -1.0"]),
        ((15.0, 2.4, 2.0), ["renew_deadline (2.4 s) must be greater than 1.2 x retry_period (2.4 s)"]),
        (
            (11.0, 10.0, 2.0),
            ["lease_duration (11 s) must be greater than renew_deadline + retry_period (12 s)"],
        ),
        (
            (12.0, 10.0, 9.0),
            [
                "renew_deadline (10 s) must be greater than 1.2 x retry_period (10.8 s)",
                "lease_duration (12 s) must be greater than renew_deadline + retry_period (19 s)",
            ],
        ),
    ],
)
def test_timings_that_cannot_elect_one_leader_at_a_time_are_refused_with_every_reason(timings, words):
    with pytest.raises(ValueError) as refused:
        Timings(*timings)
    for word in words:
        assert word in str(refused.value)
    assert str(refused.value).count("must be") == len(words)


def test_client_gos_defaults_and_fast_test_timings_are_accepted():
    assert Timings().lease_seconds == 15
    assert Timings(3.0, 2.0, 0.3).lease_seconds == 3


@pytest.mark.parametrize(
    "waiting, now, draw, delay",
    [
        (None, 0.0, 0.0, 2.0),
        (None, 0.0, 1.0, 2.0 + 1.2 * 2.0),
        (None, 0.0, 0.5, 2.0 + 0.6 * 2.0),
        (Wait(OTHER, 100.0), 99.0, 1.0, 1.0),
        (Wait(OTHER, 100.0), 90.0, 0.0, 2.0),
        (Wait(OTHER, 100.0), 100.5, 0.0, 0.0),
    ],
)
def test_a_candidate_tries_again_a_jittered_retry_period_later_or_when_the_term_ends(
    waiting, now, draw, delay
):
    assert lease.campaign_delay(waiting, now, T, draw) == pytest.approx(delay)
