"""The pools of the GPU Jobs page, ``/api/pools`` and ``airflow-jobs status``: a cohort's groups with
what they borrowed, lent and may hold; a fair_share group's users with their recent usage; and the
preemption reasons in the queues. Built from plain cluster objects (no cluster, no Airflow)."""

from __future__ import annotations

import dataclasses
import math
from datetime import timedelta

import pytest

from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.plugin import html
from airflow_jobs_plugin.queueing import quota
from airflow_jobs_plugin.queueing.quota.fair_share import UsageHistory
from airflow_jobs_plugin.readmodel import schema, text, views
from tests.lifecycle.factories import NAMESPACE, at, batch_job, ts

NOW = at(600)
HOUR = timedelta(hours=1)

RESEARCH = quota.parse_policy(
    """
groups:
  vision: {gpus: 8, cohort: research}
  nlp: {gpus: 8, cohort: research, borrowing_limit: 2}
  infra: {gpus: 4}
"""
)
FAIR = quota.parse_policy("groups:\n  nlp: {gpus: 4, ordering: fair_share, fair_share_half_life: 1h}\n")


def product_job(
    name: str, group: str, user: str, gpus: int, *, queued_s: float, suspend: bool, **annotations
):
    job = batch_job(
        name,
        suspend=suspend,
        annotations={
            labels.GROUP_NAME: group,
            labels.USER_NAME: user,
            labels.GPUS: str(gpus),
            labels.QUEUED_AT: ts(queued_s),
            **annotations,
        },
    )
    job["metadata"]["labels"].update({labels.GROUP: group, labels.USER: user})
    return job


def reservation(job: dict, admitted_s: float, **extra) -> quota.Reservation:
    a = job["metadata"]["annotations"]
    return quota.Reservation(
        job=job["metadata"]["name"],
        group=a[labels.GROUP_NAME],
        user=a[labels.USER_NAME],
        gpus=int(a[labels.GPUS]),
        uid=job["metadata"]["uid"],
        admitted_at=at(admitted_s),
        namespace=NAMESPACE,
        **extra,
    )


def ledgers(*reservations: quota.Reservation) -> dict[str, quota.Ledger]:
    """By group, as ``inspect.read_ledgers`` splits a cohort's one ledger."""
    groups = sorted({r.group for r in reservations})
    return {g: quota.Ledger(g, tuple(r for r in reservations if r.group == g)) for g in groups}


def cohort_state() -> views.ClusterState:
    """vision holds 12 GPUs: 4 borrowed from nlp, which has queued a job of 6."""
    big = product_job("big", "vision", "ann", 12, queued_s=-300, suspend=False)
    waiting = product_job("wants", "nlp", "bob", 6, queued_s=-60, suspend=True)
    return views.ClusterState(
        jobs=(big, waiting),
        pods=(),
        events=(),
        now=NOW,
        policy=RESEARCH,
        ledgers=ledgers(reservation(big, 0)),
    )


def test_a_cohort_group_row_shows_its_cohort_borrowed_lent_and_most():
    pools = {p.group: p for p in views.overview(cohort_state()).pools}
    vision, nlp, infra = pools["vision"], pools["nlp"], pools["infra"]
    assert (vision.cohort, vision.quota, vision.used, vision.borrowed, vision.lent, vision.most) == (
        "research",
        8,
        12,
        4,
        0,
        16,
    )
    # nlp may borrow 2 at most: 10; it lent 4 of its 8, so only 4 are free for its waiting job of 6.
    assert (nlp.cohort, nlp.borrowed, nlp.lent, nlp.most, nlp.free, nlp.queued_gpus) == (
        "research",
        0,
        4,
        10,
        4,
        6,
    )
    assert (infra.cohort, infra.most, infra.free) == (None, 4, 4)


def test_status_shows_the_cohort_columns_when_a_group_is_in_a_cohort():
    lines = text.status_text(views.overview(cohort_state())).splitlines()
    header = lines[1].split()
    assert header[:6] == ["GROUP", "USER", "DEVICE", "QUOTA", "MOST", "USED"]
    assert ["COHORT", "BORROWED", "LENT"] == header[7:10]
    vision = next(line for line in lines if line.startswith("vision"))
    assert vision.split() == [
        "vision",
        "<none>",
        "nvidia.com/gpu",
        "8",
        "16",
        "12",
        "4",
        "research",
        "4",
        "0",
        "0",
        "0",
    ]
    nlp = next(line for line in lines if line.startswith("nlp"))
    assert nlp.split() == [
        "nlp",
        "<none>",
        "nvidia.com/gpu",
        "8",
        "10",
        "0",
        "4",
        "research",
        "0",
        "4",
        "1",
        "6",
    ]


def test_status_of_a_policy_without_cohorts_or_fair_share_has_no_cohort_or_recent_columns():
    job = product_job("small", "infra", "ann", 2, queued_s=-60, suspend=False)
    state = views.ClusterState(
        jobs=(job,),
        pods=(),
        events=(),
        now=NOW,
        policy=quota.parse_policy("groups: {infra: {gpus: 4}}"),
        ledgers=ledgers(reservation(job, 0)),
    )
    header = text.status_text(views.overview(state)).splitlines()[1].split()
    assert header == ["GROUP", "USER", "DEVICE", "QUOTA", "USED", "FREE", "QUEUED", "QUEUED", "GPUS"]


def test_the_pools_page_marks_a_cohort_row_with_its_cohort():
    page = html.pools_section(views.overview(cohort_state()))
    assert '<tr class="pool" data-group="vision" data-cohort="research">' in page
    assert '<td class="cohort">research</td><td class="num">4</td><td class="num">0</td>' in page
    assert ">most</th>" in page and ">borrowed</th>" in page and ">lent</th>" in page


def test_api_pools_carry_cohort_borrowed_lent_and_most():
    (vision,) = [p for p in schema.pools(views.overview(cohort_state()).pools) if p.group == "vision"]
    assert (vision.cohort, vision.borrowed, vision.lent, vision.most, vision.free) == (
        "research",
        4,
        0,
        16,
        4,
    )


# --- fair share ------------------------------------------------------------------------------------------


def gpu_seconds(gpus: float) -> float:
    """Decayed GPU-seconds that read as ``gpus`` recent GPUs with a one-hour half-life."""
    return gpus * HOUR.total_seconds() / math.log(2)


def fair_state() -> views.ClusterState:
    """nlp (4 GPUs, fair_share) is full with cat's job; alice held 3 GPUs lately and queued first, bob
    queued after her; dan ran earlier and holds nothing now."""
    running = product_job("cats", "nlp", "cat", 4, queued_s=-500, suspend=False)
    first = product_job("alice-1", "nlp", "alice", 2, queued_s=-120, suspend=True)
    second = product_job("bob-1", "nlp", "bob", 2, queued_s=-60, suspend=True)
    history = UsageHistory(
        at=NOW, gpu_seconds={"alice": gpu_seconds(3.0), "dan": gpu_seconds(0.5)}, half_life=HOUR
    )
    return views.ClusterState(
        jobs=(running, first, second),
        pods=(),
        events=(),
        now=NOW,
        policy=FAIR,
        ledgers=ledgers(reservation(running, 0)),
        usage_histories={"nlp": history},
    )


def test_fair_share_users_show_their_recent_usage_next_to_their_held_gpus():
    (pool,) = views.overview(fair_state()).pools
    users = {u.user: u for u in pool.users}
    assert (users["alice"].gpus, round(users["alice"].recent_gpus or 0, 3)) == (0, 3.0)
    assert (users["bob"].gpus, users["bob"].recent_gpus) == (0, 0.0)
    # cat has held 4 GPUs for 10 minutes of a one-hour half-life.
    assert users["cat"].gpus == 4 and 0.3 < (users["cat"].recent_gpus or 0) < 0.5


def test_a_user_who_ran_lately_but_holds_nothing_is_listed_with_their_usage():
    (pool,) = views.overview(fair_state()).pools
    dan = next(u for u in pool.users if u.user == "dan")
    assert (dan.gpus, dan.queued_jobs, round(dan.recent_gpus or 0, 3)) == (0, 0, 0.5)


def test_the_queue_of_a_fair_share_group_shows_the_order_a_pass_walks():
    (queue,) = views.overview(fair_state()).queues
    # bob queued after alice but used nothing lately: he goes first, as the admission pass orders them.
    assert [(e.name, e.position) for e in queue.entries] == [("bob-1", 1), ("alice-1", 2)]


def test_status_shows_recent_usage_beside_used_for_a_fair_share_group():
    lines = text.status_text(views.overview(fair_state())).splitlines()
    assert lines[1].split()[:7] == ["GROUP", "USER", "DEVICE", "QUOTA", "USED", "RECENT", "FREE"]
    alice = next(line for line in lines if " alice " in line)
    assert alice.split()[:6] == ["nlp", "alice", "<none>", "4", "0", "3.0"]


def test_api_pools_carry_recent_usage_only_for_fair_share_groups():
    (pool,) = schema.pools(views.overview(fair_state()).pools)
    assert {u.user: u.recent_gpus for u in pool.users}["alice"] == pytest.approx(3.0)
    vision = next(p for p in schema.pools(views.overview(cohort_state()).pools) if p.group == "vision")
    assert [(u.user, u.recent_gpus) for u in vision.users] == [("ann", None)]


# --- preemption in the queues ----------------------------------------------------------------------------

PREEMPTING = quota.parse_policy(
    """
groups:
  vision: {gpus: 8, preemption: {within_group: lower_priority}}
"""
)


def test_a_head_that_preempts_waits_as_preempting_with_its_victims_named():
    sweep = product_job("sweep", "vision", "ann", 8, queued_s=-300, suspend=False, **{labels.PRIORITY: "0"})
    urgent = product_job("urgent", "vision", "bob", 8, queued_s=-10, suspend=True, **{labels.PRIORITY: "100"})
    state = views.ClusterState(
        jobs=(sweep, urgent),
        pods=(),
        events=(),
        now=NOW,
        policy=PREEMPTING,
        ledgers=ledgers(reservation(sweep, 0, priority=0)),
    )
    ov = views.overview(state)
    (entry,) = ov.queues[0].entries
    assert (entry.name, entry.reason, entry.position) == ("urgent", "Preempting", 1)
    assert f"preempting {NAMESPACE}/sweep" in entry.message
    row = next(j for j in ov.jobs if j.name == "urgent")
    assert (row.state, row.reason) == ("QUEUED", "Preempting")
    assert 'data-reason="Preempting"' in html.queues_section(ov)


def test_a_preempted_job_waits_as_preempted_in_the_queue_as_on_its_job_row():
    why = "preempted by ml/urgent in group vision: its 8 GPU(s) go to that job"
    urgent = product_job(
        "urgent", "vision", "bob", 8, queued_s=-10, suspend=False, **{labels.PRIORITY: "100"}
    )
    sweep = product_job(
        "sweep",
        "vision",
        "ann",
        8,
        queued_s=-300,
        suspend=True,
        **{labels.PRIORITY: "0", labels.PREEMPTION_MESSAGE: why, labels.REQUEUE_COUNT: "1"},
    )
    state = views.ClusterState(
        jobs=(sweep, urgent),
        pods=(),
        events=(),
        now=NOW,
        policy=PREEMPTING,
        ledgers=ledgers(reservation(urgent, 300, priority=100)),
    )
    ov = views.overview(state)
    (entry,) = ov.queues[0].entries
    row = next(j for j in ov.jobs if j.name == "sweep")
    assert (entry.reason, row.reason) == ("Preempted", "Preempted")
    assert entry.message.startswith(why + "; ") and row.message.startswith(why + "; ")
    assert "Preempted" in text.status_text(ov).split("QUEUES", 1)[1].split("JOBS", 1)[0]


def test_a_head_waits_for_gpus_on_their_way_back_before_it_preempts_as_a_pass_does():
    """A job that finished still holds its GPUs while its pod stops: the pass counts them as coming back
    (quota.ledger_model.releasing) and preempts no one for the head; the queue says the same."""
    sweep = product_job("sweep", "vision", "ann", 4, queued_s=-300, suspend=False, **{labels.PRIORITY: "0"})
    done = product_job("done", "vision", "cid", 4, queued_s=-200, suspend=False, **{labels.PRIORITY: "0"})
    done["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    stopping = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "done-pod",
            "namespace": NAMESPACE,
            "uid": "pod-done",
            "labels": {labels.BATCH_JOB_NAME: "done", labels.CONTROLLER_UID: done["metadata"]["uid"]},
            "ownerReferences": [
                {"kind": "Job", "name": "done", "uid": done["metadata"]["uid"], "controller": True}
            ],
        },
        "spec": {"nodeName": "gpu-node-0", "containers": [{"name": "main", "image": "trainer:1"}]},
        "status": {"phase": "Running"},
    }
    urgent = product_job("urgent", "vision", "bob", 4, queued_s=-10, suspend=True, **{labels.PRIORITY: "100"})
    state = views.ClusterState(
        jobs=(sweep, done, urgent),
        pods=(stopping,),
        events=(),
        now=NOW,
        policy=PREEMPTING,
        ledgers=ledgers(reservation(sweep, 0, priority=0), reservation(done, 0, priority=0)),
    )
    (entry,) = views.overview(state).queues[0].entries
    assert (entry.name, entry.reason) == ("urgent", "Preempting")
    assert "waiting for 4 GPUs being freed" in entry.message and "sweep" not in entry.message
    # Once the pod is gone the pass drops the finished job's reservation: the head is admitted.
    gone = dataclasses.replace(state, pods=())
    assert views.overview(gone).queues == () or not views.overview(gone).queues[0].entries
