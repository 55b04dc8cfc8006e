"""The page data of the GPU Jobs UI and CLI, built from plain cluster objects (no cluster, no Airflow)."""

from __future__ import annotations

import dataclasses
import re
from datetime import datetime, timedelta, timezone

import pytest

from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.lifecycle import JobState, snapshot
from airflow_jobs_plugin.plugin import html, svg
from airflow_jobs_plugin.queueing import kueue, quota
from airflow_jobs_plugin.readmodel import display, schema, text, views
from tests.lifecycle.factories import (
    NAMESPACE,
    at,
    batch_job,
    event,
    job_condition,
    job_pod,
    launcher_pod,
    mpi_job,
    running,
    terminated,
    ts,
    uid,
    worker_pod,
)

NOW = at(600)
PHUSERS = quota.parse_policy("groups:\n  phusers: {gpus: 4, user_gpus: 4}\n")


def product_job(
    name: str, user: str, gpus: int, *, queued_s: float, suspend: bool, group: str = "phusers", **kw
):
    job = batch_job(
        name,
        suspend=suspend,
        annotations={
            labels.GROUP_NAME: group,
            labels.USER_NAME: user,
            labels.GPUS: str(gpus),
            labels.QUEUED_AT: ts(queued_s),
            labels.DAG_ID: "nightly",
            labels.TASK_ID: f"train_{name}",
            labels.RUN_ID: "scheduled__2026-03-02T00:00:00+00:00",
            labels.MAP_INDEX: "-1",
            **kw.pop("annotations", {}),
        },
        **kw,
    )
    job["metadata"]["labels"].update({labels.GROUP: group, labels.USER: user})
    return job


def reservation(job: dict, admitted_s: float) -> quota.Reservation:
    meta = job["metadata"]
    return quota.Reservation(
        job=meta["name"],
        group=meta["annotations"][labels.GROUP_NAME],
        user=meta["annotations"][labels.USER_NAME],
        gpus=int(meta["annotations"][labels.GPUS]),
        uid=meta["uid"],
        admitted_at=at(admitted_s),
        namespace=NAMESPACE,
    )


def primehub_example_1() -> views.ClusterState:
    """Group phusers (quota 4): A (bob, 2) runs; B (pan, 4) waits for the group; C (lin, 2) behind it."""
    a = product_job("a", "bob", 2, queued_s=-60, suspend=False)
    b = product_job("b", "pan", 4, queued_s=-50, suspend=True)
    c = product_job("c", "lin", 2, queued_s=-40, suspend=True)
    pod_a = job_pod("a", phase="Running", statuses=[running("main", ready=True)], ready=True)
    ledger = quota.Ledger("phusers", (reservation(a, 0),))
    return views.ClusterState(
        jobs=(a, b, c), pods=(pod_a,), events=(), now=NOW, policy=PHUSERS, ledgers={"phusers": ledger}
    )


# --- queues and pools --------------------------------------------------------------------------------


def test_queue_shows_positions_and_the_pools_reasons_in_order():
    ov = views.overview(primehub_example_1())
    (queue,) = ov.queues
    assert queue.group == "phusers"
    assert [(e.name, e.position, e.reason) for e in queue.entries] == [
        ("b", 1, "GroupQuota"),
        ("c", 2, "BehindHead"),
    ]
    assert queue.entries[0].message == "group phusers uses 2 of 4 GPUs; this job needs 4"
    assert queue.entries[0].detail_url == f"/airflow-jobs/jobs/{NAMESPACE}/b"


def test_pool_counts_held_and_queued_gpus_per_group_and_user():
    (pool,) = views.overview(primehub_example_1()).pools
    assert (pool.group, pool.quota, pool.used, pool.free, pool.queued_jobs, pool.queued_gpus) == (
        "phusers",
        4,
        2,
        2,
        2,
        6,
    )
    assert [(u.user, u.gpus, u.jobs, u.limit, u.queued_jobs, u.queued_gpus) for u in pool.users] == [
        ("bob", 2, 1, 4, 0, 0),
        ("lin", 0, 0, 4, 1, 2),
        ("pan", 0, 0, 4, 1, 4),
    ]


def test_job_list_carries_state_reason_position_and_gpus_of_each_job():
    rows = {r.name: r for r in views.overview(primehub_example_1()).jobs}
    assert (rows["a"].state, rows["a"].reason, rows["a"].gpus) == ("RUNNING", "Running", 2)
    assert (rows["b"].state, rows["b"].reason, rows["b"].queue_position) == ("QUEUED", "GroupQuota", 1)
    assert (rows["c"].state, rows["c"].reason, rows["c"].queue_position) == ("QUEUED", "BehindHead", 2)
    assert (rows["b"].group, rows["b"].user, rows["b"].age_seconds) == ("phusers", "pan", 660.0)
    assert display.age(rows["b"].age_seconds) == "11m"  # what the page and the CLI table print


def test_user_over_their_quota_is_skipped_and_the_next_job_is_admitted():
    """PrimeHub example 2: B is bob's second job (over his 4), it blocks nobody; C fits."""
    state = primehub_example_1()
    b = product_job("b", "bob", 4, queued_s=-50, suspend=True)
    state = views.ClusterState(
        jobs=(state.jobs[0], b, state.jobs[2]),
        pods=state.pods,
        events=(),
        now=NOW,
        policy=PHUSERS,
        ledgers=state.ledgers,
    )
    decisions, _ = views.queue_decisions(state)
    assert {d.job.name: d.reason for d in decisions.values()} == {"b": "UserQuota", "c": "Admitted"}
    (queue,) = views.overview(state).queues
    assert [(e.name, e.position, e.reason) for e in queue.entries] == [("b", 1, "UserQuota")]


def test_without_a_policy_waiting_jobs_show_why_and_the_overview_says_so():
    state = views.ClusterState(
        jobs=(product_job("b", "pan", 4, queued_s=-50, suspend=True),),
        pods=(),
        events=(),
        now=NOW,
        policy=None,
        policy_problem="no quota policy: ConfigMap ml-team/airflow-jobs-quota-policy does not exist",
    )
    ov = views.overview(state)
    assert ov.problems == (state.policy_problem,)
    (queue,) = ov.queues
    (entry,) = queue.entries
    assert (entry.name, entry.position, entry.reason, entry.message) == (
        "b",
        None,
        "Inadmissible",
        state.policy_problem,
    )
    assert ov.jobs[0].reason == "Inadmissible"
    assert ov.pools == ()  # no policy and no ledger: no pool to show


def test_unreadable_ledger_entries_are_reported_as_problems():
    ledger = quota.decode("phusers", {"ml-team.x": "not json"})
    state = views.ClusterState(
        jobs=(), pods=(), events=(), now=NOW, policy=PHUSERS, ledgers={"phusers": ledger}
    )
    (problem,) = views.overview(state).problems
    assert problem.startswith("ledger of group phusers:")


@pytest.mark.parametrize(
    ("readable", "all_dags", "expected"),
    [
        (None, False, {"a", "b", "c", "outside"}),  # no restriction
        ({"nightly"}, False, {"a", "b", "c"}),
        (set(), False, set()),
        (set(), True, {"outside"}),  # a reader of every DAG also sees jobs submitted outside Airflow
    ],
)
def test_readers_see_only_jobs_of_dags_they_may_read(readable, all_dags, expected):
    state = primehub_example_1()
    outside = product_job("outside", "ops", 0, queued_s=-10, suspend=False, group="phusers")
    del outside["metadata"]["annotations"][labels.DAG_ID]
    state = views.ClusterState(
        jobs=(*state.jobs, outside),
        pods=state.pods,
        events=(),
        now=NOW,
        policy=PHUSERS,
        ledgers=state.ledgers,
    )
    ov = views.overview(state, views.dag_filter(readable, all_dags=all_dags))
    assert {r.name for r in ov.jobs} == expected
    assert {e.name for q in ov.queues for e in q.entries} == expected & {"b", "c"}
    assert ov.pools[0].used == 2  # quota is shared: pools count every job


# --- links -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("map_index", "task_url"),
    [
        (-1, "/dags/nightly/runs/scheduled__2026-03-02T00%3A00%3A00%2B00%3A00/tasks/train_a"),
        (3, "/dags/nightly/runs/scheduled__2026-03-02T00%3A00%3A00%2B00%3A00/tasks/train_a/mapped/3"),
    ],
)
def test_job_row_links_to_its_dag_run_and_task_in_airflow(map_index, task_url):
    job = product_job(
        "a", "bob", 2, queued_s=-60, suspend=False, annotations={labels.MAP_INDEX: str(map_index)}
    )
    row = views.job_row(job, snapshot(job, (), (), now=NOW), NOW)
    assert row.dag_run_url == "/dags/nightly/runs/scheduled__2026-03-02T00%3A00%3A00%2B00%3A00"
    assert row.task_url == task_url
    assert row.detail_url == f"/airflow-jobs/jobs/{NAMESPACE}/a"


# --- GPU usage over time -----------------------------------------------------------------------------

T = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)


def m(minutes: float) -> datetime:
    return T + timedelta(minutes=minutes)


@pytest.mark.parametrize(
    ("intervals", "expected"),
    [
        pytest.param([], [(0, 0)], id="nothing-held"),
        pytest.param([(10, 20, 4)], [(0, 0), (10, 4), (20, 0)], id="one-job-inside-the-window"),
        pytest.param([(-30, 20, 2)], [(0, 2), (20, 0)], id="straddles-the-window-start"),
        pytest.param([(50, 90, 2)], [(0, 0), (50, 2)], id="still-running-at-the-end"),
        pytest.param([(-90, -70, 8), (70, 80, 8)], [(0, 0)], id="outside-the-window"),
        pytest.param(
            [(10, 40, 2), (20, 30, 4)], [(0, 0), (10, 2), (20, 6), (30, 2), (40, 0)], id="overlapping-jobs"
        ),
        pytest.param([(10, 20, 2), (20, 30, 2)], [(0, 0), (10, 2), (30, 0)], id="hand-over-at-one-instant"),
    ],
)
def test_usage_steps(intervals, expected):
    points = views.usage_steps([(m(a), m(b), g) for a, b, g in intervals], m(0), m(60))
    assert [((p.at - T).total_seconds() / 60, p.gpus) for p in points] == expected


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("queued", None),
        ("running", (0, 600, 2)),
        ("finished", (0, 300, 4)),
    ],
)
def test_a_job_holds_gpus_from_admission_to_its_end(state, expected):
    if state == "queued":
        job = product_job("q", "pan", 4, queued_s=-50, suspend=True)
    elif state == "running":
        job = product_job("r", "bob", 2, queued_s=-60, suspend=False, annotations={labels.ADMITTED_AT: ts(0)})
    else:
        job = product_job(
            "f",
            "bob",
            4,
            queued_s=-60,
            suspend=False,
            annotations={labels.ADMITTED_AT: ts(0)},
            conditions=[job_condition("Complete", "CompletionsReached", at_s=300)],
        )
    interval = views.gpu_intervals(snapshot(job, (), (), now=NOW), NOW)
    if expected is None:
        assert interval is None
    else:
        start, end, gpus = interval
        assert ((start - at(0)).total_seconds(), (end - at(0)).total_seconds(), gpus) == expected


def running_since(name: str, group: str, admitted_s: float) -> dict:
    annotations = {labels.ADMITTED_AT: ts(admitted_s)}
    return product_job(
        name, "bob", 2, queued_s=admitted_s, suspend=False, group=group, annotations=annotations
    )


@pytest.mark.parametrize(
    ("admitted_s", "span"),
    [
        pytest.param(590, views.CHART_MIN_SPAN, id="young-jobs-get-the-minimum-span"),
        pytest.param(-1200, timedelta(minutes=33), id="older-jobs-with-a-tenth-of-margin"),
        pytest.param(-86400, views.CHART_WINDOW, id="never-more-than-the-window"),
    ],
)
def test_every_group_gets_a_chart_over_one_span_fitted_to_its_jobs(admitted_s, span):
    policy = quota.parse_policy("groups:\n  phusers: {gpus: 4}\n  idle: {gpus: 2}\n")
    job = running_since("r", "phusers", admitted_s)
    state = views.ClusterState(jobs=(job,), pods=(), events=(), now=NOW, policy=policy)
    charts = views.overview(state).charts
    assert [(c.group, c.quota, c.end - c.start) for c in charts] == [("idle", 2, span), ("phusers", 4, span)]


# --- job detail --------------------------------------------------------------------------------------


def mpi_state() -> tuple[views.ClusterState, dict]:
    job = mpi_job(
        "dist",
        workers=2,
        annotations={labels.GROUP_NAME: "phusers", labels.USER_NAME: "bob", labels.ADMITTED_AT: ts(0)},
    )
    pods = (
        launcher_pod("dist", phase="Running", statuses=[running("main", ready=True)], ready=True),
        worker_pod("dist", 0, phase="Running", statuses=[running("main", ready=True)], ready=True),
        worker_pod(
            "dist",
            1,
            phase="Running",
            statuses=[terminated("main", 1, restarts=2)],
            ready=False,
        ),
    )
    events = (
        event("Pod", "dist-worker-1", "BackOff", "Back-off restarting failed container main", at_s=500),
    )
    return views.ClusterState(jobs=(job,), pods=pods, events=events, now=NOW, policy=PHUSERS), job


def test_job_detail_lists_launcher_then_workers_by_rank_with_kubectl_status():
    state, job = mpi_state()
    detail = views.job_detail(state, job)
    assert [(r.replica, r.rank, r.status) for r in detail.replicas] == [
        ("launcher", -1, "Running"),
        ("worker-0", 0, "Running"),
        ("worker-1", 1, "Error"),
    ]
    assert detail.job.state == JobState.DEGRADED.value
    assert [(e.type, e.reason, e.object) for e in detail.events] == [
        ("Warning", "BackOff", "pod/dist-worker-1")
    ]
    assert detail.actions == ("stop", "cancel")


def test_log_targets_are_each_replicas_main_container_launcher_first():
    state, job = mpi_state()
    targets = views.log_targets(job, state.pods)
    assert [(name, rank, pod, container) for name, rank, pod, container in targets] == [
        ("launcher", -1, "dist-launcher-q8zvn", "main"),
        ("worker-0", 0, "dist-worker-0", "main"),
        ("worker-1", 1, "dist-worker-1", "main"),
    ]


@pytest.mark.parametrize(
    ("rank", "expected"), [(None, "launcher"), (1, "worker-1"), (-1, "launcher"), (7, None)]
)
def test_logs_default_to_the_launcher_and_pick_a_worker_by_rank(rank, expected):
    state, job = mpi_state()
    chosen = views.pick_log_target(views.log_targets(job, state.pods), rank)
    assert (chosen[0] if chosen else None) == expected


def test_single_pod_job_logs_default_to_worker_zero():
    job = product_job("a", "bob", 2, queued_s=-60, suspend=False)
    pod = job_pod("a", phase="Running", statuses=[running("main", ready=True)], ready=True)
    assert views.pick_log_target(views.log_targets(job, [pod]), None)[:2] == ("worker-0", 0)


@pytest.mark.parametrize(
    ("rank", "finished", "expected"),
    [
        (None, True, "job a has no pod to read a log from: its pods are gone (the job has ended)"),
        (None, False, "job a has no pod to read a log from: none of its pods has started yet"),
        (2, True, "job a has no pod of rank 2: its pods are gone (the job has ended)"),
    ],
)
def test_a_job_with_no_pod_says_why_its_log_cannot_be_read(rank, finished, expected):
    assert views.no_log_target("a", rank, [], finished=finished) == expected


def test_a_missing_rank_names_the_ranks_whose_pods_exist():
    state, job = mpi_state()
    message = views.no_log_target("dist", 7, views.log_targets(job, state.pods), finished=False)
    assert message == "job dist has no pod of rank 7 (pods of ranks: -1, 0, 1)"
    assert "None" not in views.no_log_target("dist", None, [], finished=False)


def test_a_finished_job_cannot_be_cancelled():
    job = product_job(
        "f",
        "bob",
        1,
        queued_s=-60,
        suspend=False,
        conditions=[job_condition("Complete", "CompletionsReached")],
    )
    detail = views.job_detail(views.ClusterState(jobs=(job,), pods=(), events=(), now=NOW), job)
    assert detail.job.state == "SUCCEEDED"
    assert detail.actions == ()


def test_phases_of_a_finished_job_run_from_queued_to_its_final_state():
    job = product_job(
        "f",
        "bob",
        1,
        queued_s=-60,
        suspend=False,
        annotations={labels.ADMITTED_AT: ts(0)},
        conditions=[job_condition("Complete", "CompletionsReached", at_s=300)],
    )
    pod = job_pod("f", phase="Succeeded", statuses=[terminated("main", 0)])  # ran from 30s to 90s
    snap = snapshot(job, [pod], (), now=NOW)
    assert [(p.state, p.start, p.end) for p in views.phases(snap)] == [
        ("QUEUED", at(-60), at(0)),
        ("SCHEDULING", at(0), at(30)),
        ("RUNNING", at(30), at(300)),
        ("SUCCEEDED", at(300), None),
    ]


def test_the_time_from_its_pods_placement_to_its_first_container_is_drawn_starting():
    # Admitted at 0s, its pod bound to a node at 5s (the factory's PodScheduled), its container running
    # from 30s: pulling and init containers in between are STARTING, as the task's log says.
    job = product_job("s", "bob", 1, queued_s=-60, suspend=False, annotations={labels.ADMITTED_AT: ts(0)})
    pod = job_pod("s", phase="Running", statuses=[running("main", since=30)])
    state = views.ClusterState(jobs=(job,), pods=(pod,), events=(), now=NOW)
    detail = views.job_detail(state, job)
    assert [(p.state, p.start, p.end) for p in detail.phases] == [
        ("QUEUED", at(-60), at(0)),
        ("SCHEDULING", at(0), at(5)),
        ("STARTING", at(5), at(30)),
        ("RUNNING", at(30), NOW),
    ]
    # A pod not placed yet: the admission's stretch is SCHEDULING still.
    unplaced = job_pod("s", phase="Pending", node=None, unschedulable_message="0/2 nodes are available")
    assert views.placed_at(detail.snapshot, [unplaced]) is None


def test_phases_of_a_live_job_end_in_its_current_state_now():
    job = product_job("q", "pan", 4, queued_s=-60, suspend=True)
    assert [(p.state, p.start, p.end) for p in views.phases(snapshot(job, (), (), now=NOW))] == [
        ("QUEUED", at(-60), NOW)
    ]


def test_timeline_orders_facts_of_one_second_by_the_jobs_life():
    job = product_job(
        "f",
        "bob",
        1,
        queued_s=0.5,
        suspend=False,
        annotations={labels.ADMITTED_AT: ts(0.7)},
        conditions=[job_condition("Suspended", "JobResumed", "Job resumed", status="False", at_s=0)],
    )
    labels_in_order = [e.label for e in views.timeline(job, snapshot(job, (), (), now=NOW))]
    assert labels_in_order == ["QUEUED", "ADMITTED", "Suspended=False"]


def test_a_condition_is_told_with_its_own_status_and_reason():
    resumed = {"type": "Suspended", "status": "False", "reason": "MPIJobResumed", "message": "MPIJob resumed"}
    assert views.condition_fact(resumed) == ("Suspended=False", "MPIJobResumed: MPIJob resumed")
    running = {
        "type": "Running",
        "status": "True",
        "reason": "MPIJobRunning",
        "message": "MPIJob d/x is running.",
    }
    assert views.condition_fact(running) == ("Running=True", "MPIJobRunning: MPIJob d/x is running.")


def test_a_reason_the_operator_left_from_the_conditions_other_status_is_labelled_stale():
    # mpi-operator v0.8.2 turns Running False when the job succeeds and keeps its reason and message.
    ended = {
        "type": "Running",
        "status": "False",
        "reason": "MPIJobRunning",
        "message": "MPIJob d/x is running.",
    }
    label, detail = views.condition_fact(ended)
    assert label == "Running=False"
    assert "stale" in detail and "MPIJobRunning" in detail and "is running" not in detail
    # Its own reason for turning it False (a suspension) is told as it is.
    suspended = {
        "type": "Running",
        "status": "False",
        "reason": "MPIJobSuspended",
        "message": "MPIJob suspended",
    }
    assert views.condition_fact(suspended) == ("Running=False", "MPIJobSuspended: MPIJob suspended")


# --- JSON, text and SVG ------------------------------------------------------------------------------


def test_the_json_models_carry_typed_values():
    ov = views.overview(primehub_example_1())
    data = schema.overview(ov, total=3, offset=0, limit=100, more=False).model_dump(mode="json")
    assert data["now"] == "2026-03-02T09:10:00Z"
    assert data["jobs"][0]["state"] in {"QUEUED", "RUNNING"}
    assert data["charts"][0]["peak"] == ov.charts[0].peak
    by_name = {j["name"]: j for j in data["jobs"]}
    assert by_name["b"]["age_seconds"] == 660.0 and "age" not in by_name["b"]
    waiting = {e["name"]: e for q in data["queues"] for e in q["entries"]}
    assert waiting["b"]["waiting_seconds"] == 650.0 and waiting["b"]["queued_at"].endswith("Z")
    state, job = mpi_state()
    detail = schema.job_detail(views.job_detail(state, job)).model_dump(mode="json")
    assert detail["snapshot"]["state"] == "DEGRADED"
    assert detail["replicas"][0]["rank"] == -1
    failing = next(r for r in detail["replicas"] if r["replica"] == "worker-1")
    assert (failing["ready_containers"], failing["containers"], failing["restarts"]) == (0, 1, 2)
    assert isinstance(failing["age_seconds"], float)


def test_text_table_pads_columns_and_prints_empty_cells_as_none():
    assert text.table(["name", "gpus"], [["a", 4], ["longer", None]]).splitlines() == [
        "NAME     GPUS",
        "a        4",
        "longer   <none>",
    ]


def test_status_text_has_pools_queues_and_jobs():
    out = text.status_text(views.overview(primehub_example_1()))
    assert out.index("POOLS") < out.index("QUEUES") < out.index("JOBS")
    assert "GroupQuota" in out and "BehindHead" in out


def test_usage_chart_draws_the_quota_line_only_when_there_is_a_quota():
    chart = views.UsageChart(
        "vision", 8, m(0), m(60), (views.UsagePoint(m(0), 2), views.UsagePoint(m(30), 6))
    )
    drawn = svg.usage_chart(chart)
    assert drawn.startswith("<svg") and 'data-group="vision"' in drawn
    assert 'class="quota"' in drawn and "quota 8" in drawn
    assert 'class="quota"' not in svg.usage_chart(views.UsageChart("x", None, m(0), m(60), ()))


def test_usage_chart_has_a_legend_axis_values_and_each_steps_values_on_hover():
    chart = views.UsageChart(
        "vision", 8, m(0), m(60), (views.UsagePoint(m(0), 2), views.UsagePoint(m(30), 6))
    )
    drawn = svg.usage_chart(chart)
    legend = drawn.split('<g class="legend"')[1]
    assert "GPUs held (peak 6)" in legend and "quota 8" in legend
    assert [int(v) for v in re.findall(r'class="y-tick" data-gpus="(\d+)"', drawn)] == [0, 2, 4, 6, 8]
    assert re.findall(r'class="x-tick">.*?>(\d\d:\d\d(?: UTC)?)</text>', drawn) == [
        "09:00",
        "09:15",
        "09:30",
        "09:45",
        "10:00 UTC",
    ]
    assert "<title>09:00:00-09:30:00 UTC: 2 GPUs held (quota 8)</title>" in drawn
    assert "<title>09:30:00-10:00:00 UTC: 6 GPUs held (quota 8)</title>" in drawn


def test_the_usage_section_holds_a_placeholder_per_pool_while_the_charts_are_read():
    ov = views.overview(primehub_example_1())
    pending = html.charts_section(dataclasses.replace(ov, charts=()), pending=True)
    assert 'aria-busy="true"' in pending and 'id="usage-loading"' in pending
    assert re.findall(r'class="chart-placeholder" data-group="(\w+)"', pending) == [p.group for p in ov.pools]
    # Once read, the charts take their place; a cluster with nothing to chart says so.
    drawn = html.charts_section(ov, pending=True)
    assert "chart-placeholder" not in drawn and drawn.count('class="usage-chart"') == len(ov.charts)
    nothing = html.charts_section(dataclasses.replace(ov, charts=()))
    assert "chart-placeholder" not in nothing and "no group holds or held GPUs" in nothing


def test_usage_chart_gpu_axis_counts_in_steps_of_one_two_or_five():
    assert svg.gpu_ticks(0) == (0, 1)
    assert svg.gpu_ticks(3) == (0, 1, 2, 3)
    assert svg.gpu_ticks(9) == (0, 2, 4, 6, 8, 10)
    assert svg.gpu_ticks(64) == (0, 20, 40, 60, 80)


def test_state_timeline_draws_one_bar_per_stretch_and_a_marker_for_the_end():
    phases = (
        views.Phase("QUEUED", m(0), m(10), "waiting"),
        views.Phase("RUNNING", m(10), m(50), "running"),
        views.Phase("FAILED", m(50), None, "exit 3"),
    )
    drawn = svg.state_timeline(phases, m(50))
    assert drawn.count('class="stretch"') == 2 and drawn.count("<circle") == 1
    assert 'data-state="FAILED"' in drawn
    assert "<title>RUNNING 09:10:00-09:50:00 UTC (40m 0s): running</title>" in drawn
    assert re.findall(r'data-legend="(\w+)"', drawn) == ["QUEUED", "RUNNING", "FAILED"]
    assert ">09:00:00</text>" in drawn and ">09:50:00 UTC</text>" in drawn


def test_uid_helper_is_stable():
    # The factories' uids tie pods to jobs: a sanity check that the fixtures above are consistent.
    assert mpi_state()[1]["metadata"]["uid"] == uid("dist")


def test_pages_escape_what_the_cluster_says():
    job = product_job(
        "a",
        "<b>bob</b>",
        1,
        queued_s=-60,
        suspend=True,
        annotations={labels.VERDICT: "Cancelled", labels.VERDICT_MESSAGE: "<script>x()</script>"},
    )
    state = views.ClusterState(jobs=(job,), pods=(), events=(), now=NOW, policy=PHUSERS)
    page = html.overview_page(views.overview(state))
    assert "<script>x()" not in page and "&lt;script&gt;x()&lt;/script&gt;" in page
    assert "&lt;b&gt;bob&lt;/b&gt;" in page
    detail = html.job_page(views.job_detail(state, job), can_act=True)
    assert "&lt;script&gt;x()" in detail
    assert "Cancel job" not in detail  # a cancelled job is over


def test_a_job_kueue_admits_shows_kueues_word_and_queues_not_the_pools():
    # A job for a LocalQueue waits in Kueue's queue: the pool neither ranks it nor calls it
    # Inadmissible; the list shows what its Workload says and where it waits, as its task log does.
    waiting = product_job("k", "pan", 4, queued_s=-30, suspend=True)
    waiting["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "team-a"
    admitted = product_job("r", "bob", 2, queued_s=-50, suspend=False)
    admitted["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "team-a"
    workloads = {
        waiting["metadata"]["uid"]: {
            "metadata": {"name": "job-k-1"},
            "spec": {"queueName": "team-a"},
            "status": {
                "conditions": [
                    {
                        "type": "QuotaReserved",
                        "status": "False",
                        "reason": "Pending",
                        "message": "couldn't assign flavors to pod set main: insufficient quota",
                    }
                ]
            },
        },
        admitted["metadata"]["uid"]: {
            "metadata": {"name": "job-r-1"},
            "spec": {"queueName": "team-a"},
            "status": {
                "admission": {"clusterQueue": "gpu-cq"},
                "conditions": [
                    {"type": "QuotaReserved", "status": "True"},
                    {"type": "Admitted", "status": "True"},
                ],
            },
        },
    }
    state = views.ClusterState(
        jobs=(waiting, admitted), pods=(), events=(), now=NOW, policy=PHUSERS, workloads=workloads
    )
    ov = views.overview(state)
    rows = {r.name: r for r in ov.jobs}
    assert (rows["k"].state, rows["k"].reason) == ("QUEUED", "Pending")
    assert rows["k"].message.startswith("Kueue: couldn't assign flavors")
    assert (rows["k"].kueue_queue, rows["k"].cluster_queue) == ("team-a", None)
    assert (rows["r"].kueue_queue, rows["r"].cluster_queue) == ("team-a", "gpu-cq")
    assert not ov.queues  # nothing of it is in the pool's queue
    assert "kueue:team-a/gpu-cq" in text.status_text(ov)
    assert "Kueue team-a &rarr; gpu-cq" in html.job_rows(ov.jobs)


def test_a_job_page_lists_every_attempt_of_its_task_try_with_how_each_went():
    # Attempt 1 failed with a retryable exit code on node-a; attempt 2 runs. Both belong to the same
    # task try (task-key and try labels); a job of another try is not one of its attempts.
    first = product_job(
        "t-a1",
        "bob",
        1,
        queued_s=-120,
        suspend=False,
        attempt=1,
        failed=1,
        conditions=[job_condition("Failed", "PodFailurePolicy", "Container main exited 3", at_s=-60)],
    )
    second = product_job("t-a2", "bob", 1, queued_s=-120, suspend=False, attempt=2, active=1)
    other = product_job("u-a1", "bob", 1, queued_s=-120, suspend=False, active=1)
    for job in (first, second):
        job["metadata"]["labels"].update({labels.TASK_KEY: "nightly.train.run", labels.TRY: "1"})
    other["metadata"]["labels"].update({labels.TASK_KEY: "nightly.other.run", labels.TRY: "1"})
    failed_pod = job_pod("t-a1", phase="Failed", statuses=[terminated("main", 3)], node="node-a", suffix="p1")
    running_pod = job_pod(
        "t-a2", phase="Running", statuses=[running("main", ready=True)], ready=True, suffix="p2"
    )
    state = views.ClusterState(
        jobs=(first, second, other), pods=(failed_pod, running_pod), events=(), now=NOW
    )
    detail = views.job_detail(state, second)
    assert [(a.attempt, a.name, a.state) for a in detail.attempts] == [
        (1, "t-a1", "FAILED"),
        (2, "t-a2", "RUNNING"),
    ]
    assert detail.attempts[0].exit_codes == {"worker-0": 3}
    assert detail.attempts[0].nodes == ("node-a",)
    described = text.describe_text(detail)
    assert "Attempts:" in described and "worker-0=3" in described
    page = html.job_page(detail)
    assert 'id="attempts"' in page and 'data-attempt="1"' in page and 'data-attempt="2"' in page


def test_a_finished_run_is_drawn_on_its_own_span_in_the_order_it_lived():
    # Admitted at 09:00:05.300 (the product's microseconds), started at 09:00:05 (Kubernetes' whole
    # seconds), ran 36 s: RUNNING follows SCHEDULING, and the bar spans the job's life, not up to now.
    snap = snapshot(
        product_job(
            "done",
            "bob",
            1,
            queued_s=0,
            suspend=False,
            annotations={labels.ADMITTED_AT: (at(5.3)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")},
            succeeded=1,
            conditions=[job_condition("Complete", "", "", at_s=41)],
        ),
        [
            job_pod(
                "done",
                phase="Succeeded",
                statuses=[
                    {
                        "name": "main",
                        "ready": False,
                        "restartCount": 0,
                        "state": {
                            "terminated": {
                                "exitCode": 0,
                                "reason": "Completed",
                                "startedAt": ts(5),
                                "finishedAt": ts(41),
                            }
                        },
                    }
                ],
            )
        ],
        now=at(86400),
    )
    phases = views.phases(snap)
    assert [p.state for p in phases] == ["QUEUED", "SCHEDULING", "RUNNING", "SUCCEEDED"]
    assert all(a.start <= b.start for a, b in zip(phases, phases[1:], strict=False))
    drawing = svg.state_timeline(phases, at(86400))
    running = drawing.split('data-state="RUNNING"')[1]
    width = float(running.split('width="')[1].split('"')[0])
    assert width > 300  # most of the 624-pixel bar, not a dot a day wide


def test_a_job_waiting_in_kueue_shows_its_position_where_kueues_visibility_api_told_it():
    waiting = product_job("k", "pan", 4, queued_s=-30, suspend=True)
    waiting["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "team-a"
    pending = {
        "type": "QuotaReserved",
        "status": "False",
        "reason": "Pending",
        "message": "couldn't assign flavors to pod set main: insufficient quota",
    }
    workload = {
        "metadata": {"name": "job-k-1", "namespace": waiting["metadata"]["namespace"]},
        "spec": {"queueName": "team-a"},
        "status": {"conditions": [pending]},
    }
    workloads = {waiting["metadata"]["uid"]: workload}
    ns = waiting["metadata"]["namespace"]
    unknown = views.ClusterState(jobs=(waiting,), pods=(), events=(), now=NOW, workloads=workloads)
    (row,) = views.overview(unknown).jobs
    assert row.queue_position is None
    told = dataclasses.replace(unknown, kueue_positions={(ns, "job-k-1"): kueue.PendingPosition(4, 1)})
    (row,) = views.overview(told).jobs
    assert row.queue_position == 5  # 1-based, in the ClusterQueue: Kueue's admission order
    assert row.message.endswith("insufficient quota (2nd in LocalQueue team-a) (position 5)")


def test_a_groups_other_gpu_devices_show_beside_its_whole_gpus():
    mig = "nvidia.com/mig-1g.10gb"
    policy = quota.parse_policy(f"groups: {{vision: {{gpus: 4, devices: {{{mig}: 7}}}}}}")
    held = quota.Reservation(
        job="slices", group="vision", user="alice", gpus=3, uid="u1", admitted_at=NOW, resource=mig
    )
    state = views.ClusterState(
        jobs=(),
        pods=(),
        events=(),
        now=NOW,
        policy=policy,
        ledgers={"vision": quota.Ledger(group="vision", reservations=(held,))},
    )
    (pool,) = views.pools(state, [])
    assert (pool.quota, pool.used) == (4, 0)
    assert [(d.resource, d.quota, d.used, d.free) for d in pool.devices] == [(mig, 7, 3, 4)]
    overview = views.overview(state)
    device_line = next(line for line in text.status_text(overview).splitlines() if mig in line)
    # In the device column, not the user's.
    assert device_line.split()[:5] == ["vision", "<none>", mig, "7", "3"]
    page = html.pools_section(overview)
    assert f'data-resource="{mig}"><td>vision</td><td></td><td>{mig}</td>' in page
    (shown,) = schema.pools(overview.pools)
    assert shown.devices[0].model_dump() == {"resource": mig, "quota": 7, "used": 3, "free": 4}


def test_a_mig_jobs_row_names_its_device_and_sorting_by_gpus_never_mixes_devices():
    from airflow_jobs_plugin.readmodel import listing

    mig = "nvidia.com/mig-1g.10gb"
    slices = product_job(
        "slices", "alice", 3, queued_s=-60, suspend=True, annotations={labels.GPU_DEVICE: mig}
    )
    whole = product_job("whole", "bob", 2, queued_s=-50, suspend=True)
    eight = product_job("eight", "carol", 8, queued_s=-40, suspend=True)
    state = views.ClusterState(jobs=(slices, whole, eight), pods=(), events=(), now=NOW)
    overview = views.overview(state)
    rows = {r.name: r for r in overview.jobs}
    assert (rows["slices"].gpus, rows["slices"].device) == (3, mig)
    assert rows["whole"].device == labels.GPU_RESOURCE
    assert schema.jobs([rows["slices"]])[0].device == mig
    status_line = next(line for line in text.status_text(overview).splitlines() if line.startswith("slices"))
    assert mig in status_line.split()
    assert f'data-device="{mig}">3<div class="msg device">{mig}</div>' in html.job_rows([rows["slices"]])
    query = listing.parse_query(sort="-gpus")
    ordered = [r.name for r in listing.narrow(overview, query).jobs]
    # Device by device: the 3 MIG slices sort apart from the whole GPUs, never between 8 and 2 of them.
    assert ordered == ["slices", "eight", "whole"]


# --- cost in proportion to the jobs ------------------------------------------------------------------


def crowded_state(jobs: int) -> views.ClusterState:
    """``jobs`` jobs of five users in one group: a tenth running (a pod each, a reservation, an event),
    a fifth waiting, the rest finished."""
    policy = quota.parse_policy("groups:\n  phusers: {gpus: 8, user_gpus: 4}\n")
    made, pods, events, held = [], [], [], []
    for i in range(jobs):
        name, user = f"j{i:05d}", f"u{i % 5}"
        if i % 10 == 0:
            job = product_job(name, user, 1, queued_s=-i, suspend=False)
            job["metadata"]["annotations"][labels.ADMITTED_AT] = ts(-i)
            pods.append(job_pod(name, phase="Running", statuses=[running("main", ready=True)], ready=True))
            events.append(
                event("Job", name, "SuccessfulCreate", f"Created pod: {name}-x7k2p", type_="Normal")
            )
            held.append(reservation(job, -i))
        elif i % 10 < 3:
            job = product_job(name, user, 2, queued_s=-i, suspend=True)
        else:
            job = product_job(name, user, 1, queued_s=-i, suspend=False)
            job["status"] = {"conditions": [job_condition("Complete")]}
        made.append(job)
    ledger = quota.Ledger("phusers", tuple(held))
    return views.ClusterState(
        jobs=tuple(made),
        pods=tuple(pods),
        events=tuple(events),
        now=NOW,
        policy=policy,
        ledgers={"phusers": ledger},
    )


def lines_run(work) -> int:
    """The lines of Python ``work()`` runs (comprehensions' loops included): a measure of its work that,
    unlike a clock, does not depend on the machine or what else runs on it."""
    import sys

    count = 0

    def trace(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
        return trace

    sys.settrace(trace)
    try:
        work()
    finally:
        sys.settrace(None)
    return count


def test_the_overview_of_four_times_the_jobs_runs_at_most_four_times_the_lines():
    small, large = crowded_state(100), crowded_state(400)
    assert lines_run(lambda: views.overview(large)) <= 4.4 * lines_run(lambda: views.overview(small))
