"""The read model's rules (``readmodel/job_index.py``): a refresh updates the rows of the jobs it read and
drops those of its window it no longer lists; an action patches the job it touched; and an index filled
page by page and refreshed gives every page the whole view gives, on any cluster (a property test)."""

from __future__ import annotations

import dataclasses
from datetime import datetime

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.pod_template import created_label
from airflow_jobs_plugin.lifecycle import pods_of
from airflow_jobs_plugin.queueing import quota
from airflow_jobs_plugin.readmodel import job_index, listing, views
from tests.lifecycle.factories import NAMESPACE, at, job_condition, job_pod, running, ts
from tests.ui.test_job_change import change, rebuilt, stopped, with_history
from tests.ui.test_views import NOW, product_job, reservation

ROLES = ("running", "waiting", "done", "failed")


def make_job(i: int, role: str, user: str, dag: str, created_s: int, labelled: bool) -> tuple[dict, list]:
    """A job of ``role`` created ``created_s`` after T0, with its pods."""
    name = f"j{i:03d}"
    conditions = {
        "done": [job_condition("Complete", "Completed", "", at_s=created_s + 100)],
        "failed": [job_condition("Failed", "BackoffLimitExceeded", "exit 1", at_s=created_s + 100)],
    }.get(role, [])
    extra = {labels.DAG_ID: dag}
    if role != "waiting":
        extra[labels.ADMITTED_AT] = ts(created_s + 5)
    job = product_job(
        name,
        user,
        1,
        queued_s=created_s,
        suspend=role == "waiting",
        conditions=conditions,
        annotations=extra,
    )
    job["metadata"]["creationTimestamp"] = ts(created_s)
    if labelled:
        job["metadata"]["labels"][labels.CREATED] = created_label(at(created_s))
    pods = []
    if role == "running":
        pods.append(job_pod(name, phase="Running", statuses=[running("main", ready=True)], ready=True))
    return job, pods


def cluster(specs: list[tuple[str, str, str, int, bool]]) -> views.ClusterState:
    """A namespace of ``specs`` (role, user, DAG, created, labelled), the running jobs holding the
    group's quota in its ledger, the waiting ones queued behind it."""
    jobs, pods, held = [], [], []
    for i, (role, user, dag, created_s, labelled) in enumerate(specs):
        job, own = make_job(i, role, user, dag, created_s, labelled)
        jobs.append(job)
        pods.extend(own)
        if role == "running":
            held.append(dataclasses.replace(reservation(job, created_s + 5), admitted_at=at(created_s + 5)))
    policy = quota.parse_policy(f"groups:\n  phusers: {{gpus: {max(1, len(held))}, user_gpus: 100}}\n")
    return views.ClusterState(
        jobs=tuple(jobs),
        pods=tuple(pods),
        events=(),
        now=NOW,
        policy=policy,
        ledgers={"phusers": quota.Ledger("phusers", tuple(held))},
    )


def window_read(whole: views.ClusterState, window: listing.Window, unlabelled: bool) -> views.ClusterState:
    """What ``inspect.read_window`` reads of ``whole``: the jobs its selector selects, their pods."""
    low = None if window.since is None else window.since - listing.CLOCK_MARGIN - 1
    chosen = []
    for job in whole.jobs:
        value = job["metadata"]["labels"].get(labels.CREATED)
        if value is None:
            if unlabelled:
                chosen.append(job)
        elif low is None or int(value) > low:
            chosen.append(job)
    pods = tuple(p for j in chosen for p in pods_of(j, whole.pods))
    return dataclasses.replace(whole, jobs=tuple(chosen), pods=pods)


def fill(whole: views.ClusterState, page: int = 500) -> job_index.JobIndex:
    """The fill page by page (``inspect.read_in_pages``: each page with its own pods), then a refresh."""
    rows = []
    for start in range(0, len(whole.jobs), page):
        jobs = whole.jobs[start : start + page]
        pods = tuple(p for j in jobs for p in pods_of(j, whole.pods))
        rows.extend(job_index.rows_of(dataclasses.replace(whole, jobs=jobs, pods=pods)))
    return refresh(job_index.filled(rows, whole.now), whole)


def refresh(index: job_index.JobIndex, whole: views.ClusterState) -> job_index.JobIndex:
    window = listing.Window(job_index.refresh_since(index, index.now), None)
    read = window_read(whole, window, index.unlabelled_open)
    return job_index.refreshed(index, read, window, index.unlabelled_open)


def whole_page(whole: views.ClusterState, query: listing.JobQuery, may_read=lambda dag: True):
    ov = views.overview(whole)
    return listing.page_of(listing.narrow(listing.for_reader(ov, may_read), query), query)


def names(index: job_index.JobIndex) -> dict[str, str]:
    return {r.row.name: r.row.state for r in index.rows.values()}


# --- a refresh -----------------------------------------------------------------------------------


def test_a_refresh_updates_the_row_of_a_job_that_finished():
    whole = cluster([("running", "bob", "d", -100, True), ("done", "ann", "d", -3000, True)])
    index = fill(whole)
    assert names(index) == {"j000": "RUNNING", "j001": "SUCCEEDED"}
    finished, _ = make_job(0, "done", "bob", "d", -100, True)
    later = dataclasses.replace(whole, jobs=(finished, whole.jobs[1]), pods=())
    assert names(refresh(index, later)) == {"j000": "SUCCEEDED", "j001": "SUCCEEDED"}


def test_a_new_job_appears_at_the_next_refresh():
    whole = cluster([("done", "ann", "d", -3000, True), ("running", "bob", "d", -100, True)])
    index = fill(whole)
    new, _ = make_job(2, "waiting", "bob", "d", 590, True)
    later = dataclasses.replace(whole, jobs=(*whole.jobs, new))
    refreshed = refresh(index, later)
    assert names(refreshed)["j002"] == "QUEUED"
    assert [(e.name, e.position) for q in refreshed.queues for e in q.entries] == [("j002", 1)]


def test_a_job_of_the_window_no_longer_listed_was_deleted_and_older_finished_ones_stay():
    whole = cluster([("done", "ann", "d", -3000, True), ("running", "bob", "d", -100, True)])
    index = fill(whole)
    # The running job is cancelled (deleted); the finished one lies before the refresh's window.
    assert job_index.refresh_since(index, index.now) == int(at(-100).timestamp())
    later = dataclasses.replace(whole, jobs=whole.jobs[:1], pods=(), ledgers={})
    assert names(refresh(index, later)) == {"j000": "SUCCEEDED"}


def test_the_refresh_reads_from_the_oldest_job_that_may_still_change():
    whole = cluster(
        [
            ("done", "ann", "d", -3000, True),
            ("running", "bob", "d", -2000, True),
            ("done", "x", "d", -10, True),
        ]
    )
    index = fill(whole)
    assert job_index.refresh_since(index, index.now) == int(at(-2000).timestamp())
    finished_only = fill(cluster([("done", "ann", "d", -3000, True)]))
    # Nothing may change: only jobs newer than the last read.
    assert job_index.refresh_since(finished_only, finished_only.now) == int(NOW.timestamp())


def test_an_unfinished_job_without_the_created_label_is_read_at_every_refresh():
    whole = cluster([("running", "bob", "d", -100, False)])
    index = fill(whole)
    assert index.unlabelled_open
    finished, _ = make_job(0, "done", "bob", "d", -100, False)
    assert names(refresh(index, dataclasses.replace(whole, jobs=(finished,), pods=()))) == {
        "j000": "SUCCEEDED"
    }


def test_the_sweep_drops_finished_jobs_deleted_since_and_keeps_the_rest():
    whole = cluster([("done", "ann", "d", -3000, True), ("running", "bob", "d", -100, True)])
    index = fill(whole)
    swept = job_index.without_deleted(index, [(NAMESPACE, "j001")], complete_before=NOW)
    assert names(swept) == {"j001": "RUNNING"}
    # A job created after the listing began may be newer than the listing: kept.
    assert names(job_index.without_deleted(index, [], complete_before=at(-4000))) == names(index)


# --- an action -----------------------------------------------------------------------------------


def test_a_stop_patches_the_jobs_row_the_pools_and_the_queue_as_a_whole_build_after_it():
    whole = with_history()
    index = refresh(job_index.filled(job_index.rows_of(whole), whole.now), whole)
    a = next(j for j in whole.jobs if j["metadata"]["name"] == "a")
    query = listing.JobQuery()
    job_index.page(index, query, lambda dag: True, NOW)  # the default order, sorted before the action
    patched = job_index.with_change(index, change(whole, "a", stopped(a)))
    after = rebuilt(whole, "a", stopped(a))
    ov, page = job_index.page(patched, query, lambda dag: True, NOW)
    assert [r.name for r in page.rows] == [r.name for r in listing.narrow(after, query).jobs]
    assert {r.name: r.state for r in page.rows} == {r.name: r.state for r in after.jobs}
    assert {r.name: r.queue_position for r in page.rows} == {r.name: r.queue_position for r in after.jobs}
    assert (ov.pools, ov.queues) == (after.pools, after.queues)


def crowd(waiting: int) -> views.ClusterState:
    """One running job holding the group's one GPU and ``waiting`` jobs queued behind it."""
    return cluster(
        [("running", "bob", "d", -900, True)]
        + [("waiting", f"u{i % 7}", "d", -800 + i, True) for i in range(waiting)]
    )


def stop_of(whole: views.ClusterState, name: str) -> tuple[dict, views.JobChange]:
    """``name`` as ``actions.stop`` leaves it once its pods are gone, read again with the ledgers the
    stop left (its reservation released), and that change."""
    job = next(j for j in whole.jobs if j["metadata"]["name"] == name)
    left = dict(job, metadata=dict(job["metadata"]), spec=dict(job["spec"], suspend=True))
    left["metadata"]["labels"] = {k: v for k, v in job["metadata"]["labels"].items() if k != labels.ADMITTED}
    annotations = {k: v for k, v in job["metadata"]["annotations"].items() if k != labels.ADMITTED_AT}
    left["metadata"]["annotations"] = {**annotations, labels.STOPPED_AT: ts(590), labels.STOPPED_BY: "admin"}
    uid = job["metadata"]["uid"]
    ledgers = {
        g: dataclasses.replace(ledger, reservations=tuple(r for r in ledger.reservations if r.uid != uid))
        for g, ledger in whole.ledgers.items()
    }
    return left, views.JobChange(NAMESPACE, name, left, (), NOW, whole.policy, None, ledgers, {})


def recomputed(monkeypatch) -> list[str]:
    """The jobs whose snapshot is computed from now on (a row is made from one)."""
    names: list[str] = []
    snapshot = views.snapshot

    def counted(job, *args, **kwargs):
        names.append(job["metadata"]["name"])
        return snapshot(job, *args, **kwargs)

    monkeypatch.setattr(views, "snapshot", counted)
    return names


def test_a_stop_recomputes_only_the_stopped_jobs_row_and_those_whose_place_moved(monkeypatch):
    whole = crowd(40)
    index = fill(whole)
    running = "j000"
    left, stop = stop_of(whole, running)
    seen = recomputed(monkeypatch)
    patched = job_index.with_change(index, stop)
    seen = list(seen)
    after = views.overview(
        dataclasses.replace(whole, jobs=(left, *whole.jobs[1:]), pods=(), ledgers=stop.ledgers)
    )
    # The page after the action is the page a whole build after it gives.
    ov, page = job_index.page(patched, listing.JobQuery(limit=1000), lambda dag: True, NOW)
    assert [(r.name, r.state, r.message, r.queue_position) for r in page.rows] == [
        (r.name, r.state, r.message, r.queue_position) for r in after.jobs
    ]
    assert (ov.pools, ov.queues) == (after.pools, after.queues)
    # Only the stopped job and the rows whose queue status moved (the head, now let in) were redone.
    moved = {
        r.name
        for r in after.jobs
        if (r.state, r.message, r.queue_position)
        != ((old := index.rows[(NAMESPACE, r.name)].row).state, old.message, old.queue_position)
    }
    assert running in moved
    assert sorted(seen) == sorted(moved)


def test_a_stop_among_jobs_waiting_without_a_pool_recomputes_one_row(monkeypatch):
    """As in the browser test (3,000 jobs waiting, no quota pool): nothing but the stopped job moves."""
    whole = dataclasses.replace(crowd(40), policy=None, ledgers={})
    index = fill(whole)
    left, stop = stop_of(whole, "j000")
    seen = recomputed(monkeypatch)
    patched = job_index.with_change(index, stop)
    seen = list(seen)
    after = views.overview(dataclasses.replace(whole, jobs=(left, *whole.jobs[1:]), pods=()))
    assert {r.row.name: (r.row.state, r.row.message) for r in patched.rows.values()} == {
        r.name: (r.state, r.message) for r in after.jobs
    }
    assert seen == ["j000"]


def test_a_stop_at_the_queues_head_moves_every_position_behind_it(monkeypatch):
    whole = crowd(10)
    index = fill(whole)
    left, stop = stop_of(whole, "j001")
    seen = recomputed(monkeypatch)
    patched = job_index.with_change(index, stop)
    seen = list(seen)
    after = views.overview(
        dataclasses.replace(whole, jobs=(whole.jobs[0], left, *whole.jobs[2:]), ledgers=stop.ledgers)
    )
    assert {r.row.name: r.row.queue_position for r in patched.rows.values()} == {
        r.name: r.queue_position for r in after.jobs
    }
    assert patched.rows[(NAMESPACE, "j002")].row.queue_position == 1
    assert sorted(seen) == [f"j{i:03d}" for i in range(1, 11)]  # the stopped job and the 9 behind it


def test_a_cancel_that_deleted_the_job_removes_its_row():
    whole = with_history()
    index = refresh(job_index.filled(job_index.rows_of(whole), whole.now), whole)
    patched = job_index.with_change(index, change(whole, "a", None))
    assert "a" not in names(patched)
    assert set(names(patched)) == {"b", "c", "h"}


# --- compact ------------------------------------------------------------------------------------


def test_a_row_is_a_record_of_shared_strings_numbers_and_times():
    index = fill(cluster([("running", "bob", "d", -100, True), ("done", "ann", "d", -3000, True)]))
    running, done = sorted(index.rows.values(), key=lambda r: r.key)
    for kept in (running, done):
        assert not hasattr(kept, "__dict__") and not hasattr(kept.row, "__dict__")
        assert all(isinstance(v, (str, int, float, datetime, type(None))) for v in kept.row)
        assert all(isinstance(v, (str, int, datetime, tuple, type(None))) for v in kept)
    # The strings many rows repeat are one object each.
    assert running.row.group is done.row.group and running.row.state == "RUNNING"
    assert running.held is not None and running.held[1] is None  # still holding its GPUs


# --- the property ---------------------------------------------------------------------------------

specs = st.lists(
    st.tuples(
        st.sampled_from(ROLES),
        st.sampled_from(["ann", "bob", "lin"]),
        st.sampled_from(["dag_a", "dag_b", ""]),
        st.integers(min_value=-5000, max_value=590),
        st.booleans(),
    ),
    min_size=0,
    max_size=25,
)
queries = st.builds(
    listing.JobQuery,
    users=st.sampled_from([(), ("bob",), ("ann", "lin")]),
    states=st.sampled_from([(), ("RUNNING",), ("QUEUED", "SUCCEEDED")]),
    dags=st.sampled_from([(), ("dag_a",)]),
    sort=st.sampled_from(sorted(listing.SORT_KEYS) + [f"-{k}" for k in listing.SORT_KEYS]),
    offset=st.integers(min_value=0, max_value=10),
    limit=st.integers(min_value=1, max_value=12),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=specs, query=queries, page_size=st.integers(min_value=1, max_value=7), reads_b=st.booleans())
def test_the_index_and_a_whole_build_give_the_same_page(specs, query, page_size, reads_b):
    whole = cluster(specs)
    index = fill(whole, page_size)

    def may_read(dag: str | None) -> bool:
        return dag != "dag_b" or reads_b

    assert job_index.page(index, query, may_read, whole.now) == whole_page(whole, query, may_read)
    # Refreshed again, the index carries the order it sorted over to the rows read anew.
    again = refresh(index, whole)
    assert job_index.page(again, query, may_read, whole.now) == whole_page(whole, query, may_read)
