"""The ledger's ConfigMap encoding, reconcile, and the planned admission pass including crash repair."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.queueing.quota.ledger_model import (
    UNSUSPEND_GRACE,
    DropReason,
    Ledger,
    ObservedJob,
    adopt,
    cas_retry_delay,
    decode,
    encode,
    entry_key,
    ledger_name,
    observed_job,
    pending_unsuspend,
    plan_admission,
    queued_job_from_metadata,
    reconcile,
    reconcile_drops,
    with_admitted,
    without,
)
from airflow_jobs_plugin.queueing.quota.model import QueuedJob, Reservation, Verdict
from airflow_jobs_plugin.queueing.quota.parse import parse_policy
from airflow_jobs_plugin.queueing.quota.policy import decide

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=timezone.utc)
NOW = T0 + timedelta(minutes=10)
POLICY = parse_policy("groups: {vision: {gpus: 8, user_gpus: 4}, nlp: {gpus: 4}}")


def res(name: str, gpus: int = 2, user: str = "bob", *, group: str = "vision", **extra) -> Reservation:
    return Reservation(
        job=name,
        group=group,
        user=user,
        gpus=gpus,
        uid=f"uid-{name}",
        admitted_at=extra.pop("admitted_at", T0),
        namespace=extra.pop("namespace", "ml"),
        **extra,
    )


def queued(name: str, gpus: int = 2, user: str = "bob", *, minute: int = 0, **extra) -> QueuedJob:
    return QueuedJob(
        name=name,
        group=extra.pop("group", "vision"),
        user=user,
        gpus=gpus,
        queued_at=T0 + timedelta(minutes=minute),
        uid=f"uid-{name}",
        namespace="ml",
        **extra,
    )


# --- encoding ------------------------------------------------------------------------------------


def test_ledger_name_is_derived_from_the_group():
    assert ledger_name("vision") == "airflow-jobs-quota-vision"


def test_encode_writes_one_readable_json_entry_per_job():
    ledger = Ledger("vision", (res("train-a", 4, "alice", requeue_count=1),))
    data = encode(ledger)
    assert list(data) == ["ml.train-a"]
    assert json.loads(data["ml.train-a"]) == {
        "v": 1,
        "job": "train-a",
        "namespace": "ml",
        "group": "vision",
        "user": "alice",
        "gpus": 4,
        "uid": "uid-train-a",
        "admitted_at": "2025-03-01T09:00:00.000000Z",
        "requeue_count": 1,
    }


def test_encode_then_decode_round_trips():
    ledger = Ledger(
        "vision",
        (
            res("a", 4, "alice", admitted_at=T0 + timedelta(microseconds=123)),
            res("b", 1, "bob", namespace=""),
            res("c", 0, "carol", requeue_count=3),
        ),
    )
    assert decode("vision", encode(ledger)) == ledger


def test_same_job_name_twice_keeps_both_entries():
    first = res("job")
    second = Reservation(
        job="job", group="vision", user="bob", gpus=1, uid="uid-new", admitted_at=NOW, namespace="ml"
    )
    data = encode(Ledger("vision", (first, second)))
    assert sorted(data) == ["ml.job", "ml.job.uid-new"]
    assert decode("vision", data).reservations == (first, second)


def test_entry_key_without_namespace_is_the_job_name():
    assert entry_key(res("j", namespace="")) == "j"


GOOD = json.dumps(
    {"v": 1, "job": "ok", "user": "bob", "gpus": 2, "uid": "u-ok", "admitted_at": "2025-03-01T09:00:00Z"}
)


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"v": 2, "job": "x"}', "unknown entry format v=2"),
        ('{"job": "x"}', "unknown entry format v=None"),
        (
            '{"v": 1, "job": "x", "user": "u", "uid": "u1", "admitted_at": "2025-03-01T09:00:00Z"}',
            "missing field(s): gpus",
        ),
        (
            '{"v": 1, "job": "x", "user": "u", "gpus": -1, "uid": "u1", "admitted_at": "2025-03-01T09:00:00Z"}',
            "gpus must be a non-negative integer",
        ),
        (
            '{"v": 1, "job": "x", "user": "u", "gpus": "2", "uid": "u1", "admitted_at": "2025-03-01T09:00:00Z"}',
            "gpus must be a non-negative integer",
        ),
        (
            '{"v": 1, "job": "", "user": "u", "gpus": 2, "uid": "u1", "admitted_at": "2025-03-01T09:00:00Z"}',
            "job must be a non-empty string",
        ),
        (
            '{"v": 1, "job": "x", "user": "u", "gpus": 2, "uid": "u1", "admitted_at": "yesterday"}',
            "Invalid isoformat",
        ),
        (
            '{"v": 1, "job": "x", "user": "u", "gpus": 2, "uid": "u1", "admitted_at": "2025-03-01T09:00:00"}',
            "must carry a time zone",
        ),
        ('{"v": 1, "job": "x", "user": "u", "gpus": 2, "uid": "u1", "admitted_at": 5}', "RFC 3339 string"),
        (
            '{"v": 1, "job": "x", "group": "nlp", "user": "u", "gpus": 2, "uid": "u1", "admitted_at": "2025-03-01T09:00:00Z"}',
            "belongs to group 'nlp'",
        ),
        (
            '{"v": 1, "job": "x", "user": "u", "gpus": 2, "uid": "u1", "admitted_at": "2025-03-01T09:00:00Z", "requeue_count": -1}',
            "requeue_count must be",
        ),
    ],
)
def test_junk_entries_are_skipped_reported_and_kept_verbatim(raw, problem):
    ledger = decode("vision", {"ml.ok": GOOD, "junk": raw})

    assert [r.job for r in ledger.reservations] == ["ok"]
    assert [e.key for e in ledger.unreadable] == ["junk"]
    assert problem in ledger.unreadable[0].problem
    assert ledger.problems[0].startswith("airflow-jobs-quota-vision data.junk: ")
    # Written back untouched: it may belong to a newer release sharing the cluster.
    assert encode(ledger)["junk"] == raw
    assert ledger.used_gpus == 2


def test_non_string_values_are_unreadable_not_a_crash():
    ledger = decode("vision", {"a": 5, "b": None})
    assert ledger.reservations == ()
    assert {e.key for e in ledger.unreadable} == {"a", "b"}


def test_missing_or_empty_data_is_an_empty_ledger():
    assert decode("vision", None) == Ledger("vision")
    assert decode("vision", {}) == Ledger("vision")


def test_duplicate_uid_is_counted_once():
    twin = json.dumps({**json.loads(GOOD), "job": "ok-copy"})
    ledger = decode("vision", {"ml.ok": GOOD, "ml.ok-copy": twin})
    assert [r.uid for r in ledger.reservations] == ["u-ok"]
    assert ledger.used_gpus == 2


# --- reconcile -----------------------------------------------------------------------------------

LEDGER = Ledger(
    "vision", (res("gone"), res("done"), res("requeued"), res("running"), res("unseen"), res("waiting"))
)
OBSERVED = {
    "uid-gone": ObservedJob.gone(),
    "uid-done": ObservedJob(terminal=True),
    "uid-requeued": ObservedJob(suspended=True, requeue_count=1),
    "uid-running": ObservedJob(),
    "uid-waiting": ObservedJob(suspended=True),
}


def test_reconcile_drops_jobs_gone_finished_or_requeued():
    drops = {d.reservation.job: d.reason for d in reconcile_drops(LEDGER, OBSERVED)}
    assert drops == {"gone": DropReason.GONE, "done": DropReason.FINISHED, "requeued": DropReason.REQUEUED}
    assert [r.job for r in reconcile(LEDGER, OBSERVED).reservations] == ["running", "unseen", "waiting"]


def test_reconcile_keeps_jobs_it_did_not_observe():
    assert reconcile(LEDGER, {}) == LEDGER


def test_drop_message_names_job_and_gpus():
    (drop,) = reconcile_drops(Ledger("vision", (res("gone"),)), {"uid-gone": ObservedJob.gone()})
    assert (
        drop.message
        == "released 2 GPU(s) of group vision held by ml.gone (user bob): the job no longer exists"
    )


def test_job_being_deleted_still_holds_its_reservation():
    # Its pods may still hold GPUs until the object is gone.
    ledger = Ledger("vision", (res("deleting"),))
    assert reconcile(ledger, {"uid-deleting": ObservedJob(exists=True)}) == ledger


def test_reserved_job_still_suspended_is_unsuspended_again():
    assert [r.job for r in pending_unsuspend(LEDGER, OBSERVED)] == ["waiting"]


def test_adopt_charges_running_jobs_the_ledger_lost():
    ledger = Ledger("vision", (res("known"),))
    adopted = adopt(ledger, [res("known", 7), res("stray", 3), res("other-group", 1, group="nlp")])
    assert [(r.job, r.gpus) for r in adopted.reservations] == [("known", 2), ("stray", 3)]


# --- admit and release ---------------------------------------------------------------------------


def test_with_admitted_adds_reservations_for_admitted_jobs_of_the_group_only():
    jobs = [queued("a", 2), queued("b", 8, "alice", minute=1), queued("n", 1, group="nlp")]
    decisions = decide(POLICY, jobs, [], NOW)
    ledger = with_admitted(Ledger("vision"), decisions, NOW)
    assert [(r.job, r.gpus, r.admitted_at) for r in ledger.reservations] == [("a", 2, NOW)]
    # Applying the same decisions again changes nothing.
    assert with_admitted(ledger, decisions, NOW + timedelta(seconds=5)) == ledger


def test_without_releases_one_job():
    ledger = Ledger("vision", (res("a"), res("b")))
    assert [r.job for r in without(ledger, "uid-a").reservations] == ["b"]
    assert without(ledger, "uid-missing") is ledger


# --- a planned pass and every crash point --------------------------------------------------------


def test_pass_admits_writes_and_unsuspends():
    plan = plan_admission(
        POLICY, Ledger("vision"), [queued("a", 4), queued("b", 4, "alice", minute=1)], {}, NOW
    )
    assert plan.ledger_changed
    assert [r.job for r in plan.ledger.reservations] == ["a", "b"]
    assert [r.job for r in plan.unsuspend] == ["a", "b"]
    assert [d.verdict for d in plan.decisions] == [Verdict.ADMIT, Verdict.ADMIT]


def test_pass_with_nothing_to_do_does_not_write():
    ledger = Ledger("vision", (res("a", 8, "alice"),))
    plan = plan_admission(POLICY, ledger, [queued("b", 1)], {"uid-a": ObservedJob()}, NOW)
    assert not plan.ledger_changed
    assert plan.unsuspend == ()
    assert plan.decisions[0].verdict is Verdict.GROUP_QUOTA


def test_pass_fails_jobs_that_can_never_fit():
    plan = plan_admission(POLICY, Ledger("vision"), [queued("huge", 16)], {}, NOW)
    assert [d.job.name for d in plan.fail] == ["huge"]
    assert not plan.ledger_changed


def test_crash_after_cas_before_unsuspend_is_repaired_by_the_next_pass():
    first = plan_admission(POLICY, Ledger("vision"), [queued("a", 4)], {}, NOW)
    # The ledger was written, the unsuspend never happened: the job is still suspended and queued.
    later = NOW + timedelta(minutes=1)
    second = plan_admission(
        POLICY,
        first.ledger,
        [queued("a", 4), queued("b", 4, "alice", minute=1), queued("c", 1, "carol", minute=2)],
        {"uid-a": ObservedJob(suspended=True)},
        later,
    )
    assert [r.job for r in second.unsuspend] == ["a", "b"]
    assert second.ledger.find("uid-a").admitted_at == NOW  # not charged twice, original admission kept
    assert second.ledger.used_gpus == 8
    assert {d.job.name: d.verdict for d in second.decisions}["c"] is Verdict.GROUP_QUOTA


def _pass_after_another_reserved_a(at: datetime):
    """Another process's pass over the ledger a first pass wrote, job a reserved but still suspended."""
    first = plan_admission(POLICY, Ledger("vision"), [queued("a", 4)], {}, NOW)
    return plan_admission(
        POLICY,
        first.ledger,
        [queued("a", 4)],
        {"uid-a": ObservedJob(suspended=True)},
        at,
        unsuspend_grace=UNSUSPEND_GRACE,
    )


def test_a_reservation_another_pass_just_made_is_left_to_that_pass_to_unsuspend():
    # Another process's pass runs between that pass's compare-and-swap and its unsuspend.
    racing = _pass_after_another_reserved_a(NOW + timedelta(milliseconds=300))
    assert racing.unsuspend == ()
    assert racing.unsuspend_due == NOW + UNSUSPEND_GRACE  # when it becomes an orphan to repair
    assert not racing.ledger_changed


def test_a_reservation_still_suspended_after_the_grace_is_repaired_by_any_pass():
    repair = _pass_after_another_reserved_a(NOW + UNSUSPEND_GRACE)
    assert [r.job for r in repair.unsuspend] == ["a"]
    assert repair.unsuspend_due is None


def test_a_pass_unsuspends_what_it_admits_itself_at_once_whatever_the_grace():
    plan = plan_admission(
        POLICY, Ledger("vision"), [queued("a", 4)], {}, NOW, unsuspend_grace=UNSUSPEND_GRACE
    )
    assert [r.job for r in plan.unsuspend] == ["a"]
    assert plan.unsuspend_due is None


def test_crash_mid_requeue_after_suspend_before_release_is_repaired():
    ledger = Ledger("vision", (res("stuck", 4, "alice"), res("other", 4, "carol")))
    # The job was suspended again with requeue count 1, then the process died before releasing.
    stuck = queued("stuck", 4, "alice", requeue_count=1, not_before=NOW + timedelta(seconds=30))
    observed = {"uid-stuck": ObservedJob(suspended=True, requeue_count=1), "uid-other": ObservedJob()}
    plan = plan_admission(POLICY, ledger, [stuck, queued("next", 4, minute=1)], observed, NOW)
    assert [d.reason for d in plan.drops] == [DropReason.REQUEUED]
    assert {d.job.name: d.verdict for d in plan.decisions} == {
        "stuck": Verdict.BACKING_OFF,
        "next": Verdict.ADMIT,
    }
    assert [r.job for r in plan.ledger.reservations] == ["other", "next"]
    assert [r.job for r in plan.unsuspend] == ["next"]


def test_crash_before_release_at_the_end_of_a_job_is_repaired():
    ledger = Ledger("vision", (res("finished", 8, "alice"),))
    plan = plan_admission(
        POLICY, ledger, [queued("next", 4)], {"uid-finished": ObservedJob(terminal=True)}, NOW
    )
    assert [r.job for r in plan.ledger.reservations] == ["next"]


def test_lost_ledger_adopts_running_jobs_before_admitting():
    plan = plan_admission(
        POLICY, Ledger("vision"), [queued("next", 4)], {}, NOW, running=[res("running", 6, "alice")]
    )
    assert {d.job.name: d.verdict for d in plan.decisions} == {"next": Verdict.GROUP_QUOTA}
    assert [r.job for r in plan.ledger.reservations] == ["running"]
    assert plan.ledger_changed


def test_jobs_of_other_groups_are_ignored_by_a_group_pass():
    plan = plan_admission(POLICY, Ledger("vision"), [queued("n", 1, group="nlp")], {}, NOW)
    assert plan.decisions == ()


# --- CAS retry -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attempt", "jitter", "expected"),
    [
        (1, 0.0, timedelta(milliseconds=25)),
        (1, 0.5, timedelta(microseconds=37500)),
        (3, 0.0, timedelta(milliseconds=100)),
        (20, 0.0, timedelta(seconds=1)),
    ],
)
def test_cas_retry_delay_grows_with_jitter(attempt, jitter, expected):
    assert cas_retry_delay(attempt, jitter) == expected


@pytest.mark.parametrize(("attempt", "jitter"), [(0, 0.1), (1, 1.0), (1, -0.1)])
def test_cas_retry_delay_rejects_bad_input(attempt, jitter):
    with pytest.raises(ValueError):
        cas_retry_delay(attempt, jitter)


# --- reading jobs from their metadata ------------------------------------------------------------


def _metadata(**annotations: str) -> dict:
    return {
        "name": "train-1",
        "namespace": "ml",
        "uid": "u-1",
        "creationTimestamp": "2025-03-01T09:05:00Z",
        "labels": {labels.GROUP: "vision", labels.USER: "alice"},
        "annotations": {labels.GPUS: "8", **annotations},
    }


def test_queued_job_from_metadata_reads_the_shared_keys():
    job = queued_job_from_metadata(
        _metadata(
            **{
                labels.PRIORITY: "100",
                labels.QUEUED_AT: "2025-03-01T09:00:00Z",
                labels.REQUEUE_COUNT: "2",
                labels.REQUEUE_NOT_BEFORE: "2025-03-01T09:20:00Z",
            }
        )
    )
    assert job == QueuedJob(
        name="train-1",
        namespace="ml",
        uid="u-1",
        group="vision",
        user="alice",
        gpus=8,
        priority=100,
        queued_at=T0,
        not_before=T0 + timedelta(minutes=20),
        requeue_count=2,
    )


def test_exact_names_from_annotations_win_over_label_slugs():
    metadata = _metadata(**{labels.USER_NAME: "alice@example.com", labels.GROUP_NAME: "vision"})
    metadata["labels"][labels.USER] = "alice-example.com"
    job = queued_job_from_metadata(metadata)
    assert (job.group, job.user) == ("vision", "alice@example.com")


def test_queued_job_without_queued_at_uses_the_creation_time():
    job = queued_job_from_metadata(_metadata())
    assert (job.queued_at, job.priority, job.requeue_count, job.not_before) == (
        T0 + timedelta(minutes=5),
        0,
        0,
        None,
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda m: m["labels"].pop(labels.GROUP),
            "neither a airflow-jobs.io/group-name annotation nor a airflow-jobs.io/group label",
        ),
        (lambda m: m["labels"].pop(labels.USER), "neither a airflow-jobs.io/user-name annotation nor"),
        (lambda m: m["annotations"].update({labels.GPUS: "four"}), "airflow-jobs.io/gpus must be an integer"),
        (lambda m: m["annotations"].update({labels.QUEUED_AT: "noon"}), "queued-at must be an RFC 3339 time"),
        (lambda m: m.pop("uid"), "needs name and uid"),
    ],
)
def test_queued_job_from_bad_metadata_names_the_key(change, message):
    metadata = _metadata()
    change(metadata)
    with pytest.raises(ValueError, match=message):
        queued_job_from_metadata(metadata)


def test_observed_job_from_metadata():
    assert observed_job(None, suspended=False, terminal=False) == ObservedJob.gone()
    requeued = _metadata(**{labels.REQUEUE_COUNT: "1"})
    assert observed_job(requeued, suspended=True, terminal=False) == ObservedJob(
        suspended=True, requeue_count=1
    )
    # A verdict the product wrote (e.g. Cancelled) ends the job even before the controller notices.
    cancelled = _metadata(**{labels.VERDICT: "Cancelled"})
    assert observed_job(cancelled, suspended=False, terminal=False).terminal
