"""The orphan sweep judges the namespace one page at a time: the same decisions as judging every job at
once, and never more than one page of job bodies held."""

from __future__ import annotations

import asyncio
import gc
import re
import weakref
from datetime import datetime, timedelta, timezone
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_jobs_plugin.cluster.kube import JOBS
from airflow_jobs_plugin.cluster.watch import MANAGED_SELECTOR
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.kinds.mpi import MPIJOBS
from airflow_jobs_plugin.jobs.orphans import TaskRecord, TaskRef
from airflow_jobs_plugin.plugin.sweep import Memory, judge_page, refs_of, sweep
from airflow_jobs_plugin.readmodel import inspect
from airflow_jobs_plugin.readmodel.inspect import Target

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=timezone.utc)
GRACE = timedelta(minutes=10)
STATES = [None, "running", "deferred", "queued", "up_for_retry", "success", "failed", "skipped"]


class Body(dict):
    """A job's ``metadata`` the test can see die (a plain dict takes no weak reference)."""

    __slots__ = ("__weakref__", "page")


def metadata(n: int, *, dag: str, task: str, run: str, age_min: int, verdict: bool, deleting: bool) -> Body:
    body = Body(
        name=f"job-{n}",
        uid=f"uid-{n}",
        creationTimestamp=(NOW - timedelta(minutes=age_min)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        labels={labels.MANAGED_BY: labels.MANAGED_BY_VALUE, labels.TASK_KEY: f"key-{dag}-{task}-{run}"},
        annotations={
            labels.DAG_ID: dag,
            labels.TASK_ID: task,
            labels.RUN_ID: run,
            labels.TRY_NUMBER: "1",
            **({labels.VERDICT: "Failed"} if verdict else {}),
        },
    )
    if deleting:
        body["deletionTimestamp"] = NOW.strftime("%Y-%m-%dT%H:%M:%SZ")
    return body


jobs_strategy = st.lists(
    st.tuples(
        st.sampled_from(["nightly", "weekly", "foreign"]),
        st.sampled_from(["train", "eval"]),
        st.sampled_from(["r1", "r2", "r3"]),
        st.integers(0, 120),
        st.booleans(),
        st.booleans(),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(
    jobs=jobs_strategy,
    states=st.dictionaries(
        st.tuples(st.sampled_from(["nightly", "weekly"]), st.sampled_from(["train", "eval"])),
        st.tuples(st.sampled_from(STATES), st.integers(0, 120)),
    ),
    cuts=st.lists(st.integers(0, 60), max_size=8),
    finished=st.sets(st.integers(0, 59)),
)
def test_judging_page_by_page_decides_what_judging_every_job_at_once_decides(jobs, states, cuts, finished):
    bodies = [
        {"metadata": metadata(n, dag=d, task=t, run=r, age_min=a, verdict=v, deleting=x)}
        for n, (d, t, r, a, v, x) in enumerate(jobs)
    ]
    seen_finished = {f"uid-{n}" for n in finished}

    def read_tasks(refs: set[TaskRef]) -> tuple[set[str], dict[TaskRef, TaskRecord]]:
        # What the database answers depends on the instance asked for only, as Airflow's does.
        found = {}
        for ref in refs:
            if (ref.dag_id, ref.task_id) in states:
                state, ended = states[(ref.dag_id, ref.task_id)]
                found[ref] = TaskRecord(state, 1, NOW - timedelta(minutes=ended))
        return {r.dag_id for r in refs if r.dag_id != "foreign"}, found

    def decide(page: list[dict]) -> tuple[list, list]:
        known, tasks = read_tasks(refs_of(page, seen_finished))
        decided = judge_page(page, seen_finished, tasks, known, now=NOW, grace=GRACE)
        return list(decided.kept), [(d.uid, d.record, d.task_key) for d in decided.doubts]

    at_once = decide(bodies)
    bounds = sorted({0, len(bodies), *(c for c in cuts if c <= len(bodies))})
    kept, doubts = [], []
    for start, end in zip(bounds, bounds[1:], strict=False):
        page_kept, page_doubts = decide(bodies[start:end])
        kept += page_kept
        doubts += page_doubts
    assert (kept, doubts) == at_once


def test_a_page_of_jobs_it_would_cancel_becomes_doubts_with_their_task_keys():
    page = [
        {
            "metadata": metadata(
                1, dag="nightly", task="train", run="r1", age_min=60, verdict=False, deleting=False
            )
        },
        {
            "metadata": metadata(
                2, dag="nightly", task="eval", run="r1", age_min=60, verdict=False, deleting=False
            )
        },
        {
            "metadata": metadata(
                3, dag="nightly", task="eval", run="r2", age_min=60, verdict=True, deleting=False
            )
        },
    ]
    tasks = {
        TaskRef("nightly", "train", "r1"): TaskRecord("failed", 1, NOW - timedelta(hours=1)),
        TaskRef("nightly", "eval", "r1"): TaskRecord("deferred", 1, None),
    }
    decided = judge_page(page, set(), tasks, {"nightly"}, now=NOW, grace=GRACE)
    assert [(d.uid, d.task_key) for d in decided.doubts] == [("uid-1", "key-nightly-train-r1")]
    assert [(s.name, s.verdict.reason) for s in decided.kept] == [("job-2", "task instance is deferred")]


# --- what a sweep holds --------------------------------------------------------------------------------

FINISHED_STATUS = {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1}


class PagedCluster:
    """A namespace of finished jobs whose tasks ended long ago (every one a doubt the first sweep must
    read whole), served as an API server pages a LIST; each LIST records which earlier job bodies are
    still alive when it is asked."""

    def __init__(self, count: int, *, shared_key: bool = False, resource: Any = JOBS) -> None:
        self.count, self.shared_key, self.resource = count, shared_key, resource
        self.made: list[weakref.ref[Body]] = []
        self.metadata_lists: list[tuple[int | None, str | None]] = []
        self.whole_lists: list[str] = []
        self.held_at_list: list[int] = []  # bodies of earlier pages still alive at each LIST
        self.page = 0

    def _metadata(self, n: int) -> Body:
        body = metadata(n, dag="nightly", task=f"t{n}", run="r1", age_min=120, verdict=False, deleting=False)
        body.page = self.page
        if self.shared_key:  # every job a try of one task instance
            body["labels"][labels.TASK_KEY] = "key-shared"
        self.made.append(weakref.ref(body))
        return body

    def alive(self) -> list[Body]:
        return [b for ref in self.made if (b := ref()) is not None]

    async def list(self, resource: Any, namespace: str, **kw: Any) -> dict:
        if resource is not self.resource:
            return {"metadata": {}, "items": []}  # one kind of job here
        # A real LIST waits for the network: the loop runs its other callbacks (and drops the
        # wake-up handles that still name the previous reads' results) before the answer comes.
        await asyncio.sleep(0)
        gc.collect()
        selector = kw.get("label_selector") or ""
        if kw.get("metadata_only"):
            # Before the next page: nothing of the pages before it, metadata or whole, is still held.
            self.held_at_list.append(len(self.alive()))
            assert selector == MANAGED_SELECTOR
            self.metadata_lists.append((kw.get("limit"), kw.get("continue_token")))
            self.page += 1
            start = int(kw.get("continue_token") or 0)
            end = min(start + (kw.get("limit") or self.count), self.count)
            more = {"continue": str(end)} if end < self.count else {}
            return {"metadata": more, "items": [{"metadata": self._metadata(n)} for n in range(start, end)]}
        # A page's doubts read whole: nothing of an earlier page is still held.
        self.held_at_list.append(sum(1 for b in self.alive() if b.page < self.page))
        self.whole_lists.append(selector)
        keys = re.search(r"in \(([^)]*)\)", selector)
        assert keys is not None, selector
        wanted = set(keys.group(1).split(","))
        items = []
        for n in range(self.count):
            body = self._metadata(n)
            if body["labels"][labels.TASK_KEY] in wanted:
                items.append({"kind": self.resource.kind, "metadata": body, "status": FINISHED_STATUS})
        return {"metadata": {}, "items": items}

    async def close(self) -> None:
        pass


def test_the_sweep_asks_for_pages_and_never_holds_more_than_one(monkeypatch):
    monkeypatch.setattr(inspect, "LIST_CHUNK", 10)
    cluster = PagedCluster(count=45)
    long_ago = NOW - timedelta(hours=2)

    def read_tasks(refs: set[TaskRef]) -> tuple[set[str], dict[TaskRef, TaskRecord]]:
        return {"nightly"}, {r: TaskRecord("success", 1, long_ago) for r in refs}

    memory = Memory()
    swept = asyncio.run(
        sweep(cluster, Target(namespace="default"), read_tasks, now=NOW, grace=GRACE, memory=memory)  # type: ignore[arg-type]
    )
    # Five pages of ten, each asked for with the continue token the previous one named.
    assert cluster.metadata_lists == [(10, None), (10, "10"), (10, "20"), (10, "30"), (10, "40")]
    # Every page's doubts read whole once, by their task keys, before the next page.
    assert len(cluster.whole_lists) == 5
    # No LIST is asked while a body of an earlier page is still held.
    assert cluster.held_at_list and max(cluster.held_at_list) == 0, cluster.held_at_list
    # Every job was found finished and is remembered: nothing cancelled, nothing to read whole again.
    assert swept == [] and memory.finished == {f"uid-{n}" for n in range(45)}
    cluster.whole_lists.clear()
    asyncio.run(sweep(cluster, Target(namespace="default"), read_tasks, now=NOW, grace=GRACE, memory=memory))  # type: ignore[arg-type]
    assert cluster.whole_lists == []


def test_jobs_found_finished_are_remembered_so_tries_sharing_a_task_key_are_read_once(monkeypatch):
    monkeypatch.setattr(inspect, "LIST_CHUNK", 10)
    cluster = PagedCluster(count=45, shared_key=True)

    def read_tasks(refs: set[TaskRef]) -> tuple[set[str], dict[TaskRef, TaskRecord]]:
        return {"nightly"}, {r: TaskRecord("success", 1, NOW - timedelta(hours=2)) for r in refs}

    memory = Memory()
    asyncio.run(sweep(cluster, Target(namespace="default"), read_tasks, now=NOW, grace=GRACE, memory=memory))  # type: ignore[arg-type]
    # The first page's doubts found all 45 tries finished: the later pages have no doubt left to read.
    assert cluster.whole_lists == [f"{MANAGED_SELECTOR},{labels.TASK_KEY} in (key-shared)"]
    assert memory.finished == {f"uid-{n}" for n in range(45)}


def test_each_page_s_expired_mpijobs_are_deleted_by_uid(monkeypatch):
    monkeypatch.setattr(inspect, "LIST_CHUNK", 10)
    cluster = PagedCluster(count=25, resource=MPIJOBS)
    expired = {3, 14, 22}  # one on each page
    deleted: list[tuple[str, str, dict]] = []
    made = cluster._metadata

    def metadata_with_ttl(n: int) -> Body:
        body = made(n)
        if n in expired:
            body["annotations"][labels.DELETE_AFTER] = "2026-03-02T11:00:00Z"
        return body

    async def delete(resource: Any, namespace: str, name: str, **kw: Any) -> None:
        deleted.append((resource.kind, name, kw.get("preconditions") or {}))

    cluster._metadata = metadata_with_ttl  # type: ignore[method-assign]
    cluster.delete = delete  # type: ignore[attr-defined]
    asyncio.run(
        sweep(cluster, Target(namespace="default"), lambda refs: ({"nightly"}, {}), now=NOW, grace=GRACE)
    )  # type: ignore[arg-type]
    assert deleted == [("MPIJob", f"job-{n}", {"uid": f"uid-{n}"}) for n in sorted(expired)]


def test_a_delete_after_mark_on_a_kind_whose_controller_applies_its_ttl_deletes_nothing():
    """Only the kinds whose controller leaves a finished job in place (``outlives_its_ttl``: MPIJobs) are
    the sweep's to delete; a batch Job carrying the mark is the TTL controller's."""
    from airflow_jobs_plugin.plugin.sweep import expired_mpijobs

    mark = {"annotations": {labels.DELETE_AFTER: "2026-03-02T11:00:00Z"}, "name": "t", "uid": "u"}
    assert expired_mpijobs([{"kind": "Job", "apiVersion": "batch/v1", "metadata": mark}], NOW) == []
    mpijob = {"kind": "MPIJob", "apiVersion": "kubeflow.org/v2beta1", "metadata": mark}
    assert expired_mpijobs([mpijob], NOW) == [(MPIJOBS, "t", "u")]
