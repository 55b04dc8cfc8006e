"""What a tracked job costs the triggerer: the shared watch's cache shares equal parts of its objects
(watch_transform.Sharing), a subscription is a flag and a future, a trigger's log tail holds only the
lines it got. The readings of the cache are what the trimmed objects read (tests/lifecycle/
test_watch_transform.py); these tests are about what is shared and when it is let go."""

from __future__ import annotations

import asyncio
import copy
import gc
import json
import sys
from collections import deque

import pytest

from airflow_jobs_plugin.cluster import watch as watch_module
from airflow_jobs_plugin.cluster import watch_transform
from airflow_jobs_plugin.cluster.kube import JOBS, PODS
from airflow_jobs_plugin.cluster.watch import SharedWatch, Subscription
from airflow_jobs_plugin.cluster.watch_transform import Sharing, trim
from airflow_jobs_plugin.logs.logstream import LogTail
from tests.lifecycle.factories import batch_job, job_pod, running, terminated


def _job_and_pod(name: str) -> tuple[dict, dict]:
    job = batch_job(name)
    pod = job_pod(name, phase="Running", statuses=[running("main")])
    # As the Job controller makes a pod: with its template's labels and annotations.
    annotations = {"airflow-jobs.io/run-id": "run-1"}
    job["spec"]["template"]["metadata"]["labels"] = copy.deepcopy(pod["metadata"]["labels"])
    job["spec"]["template"]["metadata"]["annotations"] = dict(annotations)
    pod["metadata"]["annotations"] = dict(annotations)
    return job, pod


def test_a_pod_shares_its_templates_labels_and_pods_share_equal_statuses():
    sharing = Sharing()
    job, pod = _job_and_pod("train")
    cached_job = trim(job, "Job", sharing)
    cached_pod = trim(pod, "Pod", sharing)
    template = cached_job["spec"]["template"]["metadata"]
    assert cached_pod["metadata"]["labels"] is template["labels"]
    assert cached_pod["metadata"]["annotations"] is template["annotations"]

    other = trim(
        copy.deepcopy(pod) | {"metadata": {**pod["metadata"], "name": "train-other"}}, "Pod", sharing
    )
    assert other["status"] is cached_pod["status"]  # same phase, conditions and container states
    assert other["spec"] is cached_pod["spec"]
    assert other["metadata"] is not cached_pod["metadata"]  # an object's own metadata is its own


def test_shared_objects_read_exactly_as_copies_and_the_input_is_never_changed():
    sharing = Sharing()
    for name in ("a", "b", "c"):
        job, pod = _job_and_pod(name)
        before = copy.deepcopy((job, pod))
        assert trim(job, "Job", sharing) == trim(job, "Job")
        assert trim(pod, "Pod", sharing) == trim(pod, "Pod")
        assert (job, pod) == before
        assert json.dumps(trim(pod, "Pod", sharing)) == json.dumps(trim(pod, "Pod"))


@pytest.mark.parametrize(
    "a,b",
    [
        ({"ready": True}, {"ready": 1}),
        ({"count": 1}, {"count": 1.0}),
        ({"count": 0}, {"count": False}),
        ({"x": None}, {"x": "None"}),
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}),
        ({"x": {}}, {"x": []}),
    ],
)
def test_values_equal_in_python_but_not_in_json_are_never_shared(a: dict, b: dict):
    sharing = Sharing()
    first = trim({"kind": "ConfigMap", "metadata": {"name": "a"}, "data": a}, sharing=sharing)
    second = trim({"kind": "ConfigMap", "metadata": {"name": "b"}, "data": b}, sharing=sharing)
    assert first["data"] is not second["data"]
    assert json.dumps(second["data"]) == json.dumps(b)
    first_list = trim(
        {"kind": "ConfigMap", "metadata": {"name": "c"}, "v": list(a.values())}, sharing=sharing
    )
    second_list = trim(
        {"kind": "ConfigMap", "metadata": {"name": "d"}, "v": list(b.values())}, sharing=sharing
    )
    assert json.dumps(first_list["v"]) == json.dumps(list(a.values()))
    assert json.dumps(second_list["v"]) == json.dumps(list(b.values()))


def test_a_different_dict_under_the_same_hash_is_not_shared():
    sharing = Sharing()
    impostor = {"phase": "Failed"}
    wanted = {"phase": "Running"}
    key = hash((*wanted, *wanted.values()))
    sharing._shards[key & watch_transform._SHARD_MASK][key] = impostor  # noqa: SLF001 - a forced collision
    assert sharing.of_dict(dict(wanted)) == wanted


def _trimmed(name: str, sharing: Sharing) -> tuple[dict, dict]:
    job, pod = _job_and_pod(name)
    return trim(job, "Job", sharing), trim(pod, "Pod", sharing)


def test_the_table_lets_go_of_what_only_it_holds_and_never_of_what_the_cache_holds():
    sharing = Sharing()
    kept = [_trimmed(name, sharing) for name in ("a", "b")]
    dropped = [_trimmed(name, sharing) for name in ("c", "d")]
    snapshot = json.dumps(kept)
    size = sharing.size
    del dropped
    gc.collect()
    sharing.sweep()
    assert 0 < sharing.size < size
    assert json.dumps(kept) == snapshot
    # What the table still holds is shared again; what it let go is copied afresh, and reads the same.
    again = trim(_job_and_pod("a")[1], "Pod", sharing)
    assert again["status"] is kept[0][1]["status"]
    del kept, again
    gc.collect()
    sharing.sweep()
    assert sharing.size == 0


def test_the_table_sweeps_itself_as_it_grows():
    sharing = Sharing()
    for i in range(20_000):
        trim({"kind": "ConfigMap", "metadata": {"name": f"c{i}"}, "data": {"i": str(i)}}, sharing=sharing)
    assert sharing.size <= 4096 * 2


def test_no_part_of_a_large_table_is_large():
    """The table grows in shards: at 20,000 jobs one dict of its copies would be 10 MB, copied whole
    (the old and the new at once) each time it grows or is compacted."""
    sharing = Sharing()
    kept = [sharing.of_dict({"i": str(i)}) for i in range(50_000)]
    assert sharing.size == len(kept)
    shards = sharing._shards  # noqa: SLF001
    assert sum(map(len, shards)) == len(kept)
    assert max(map(len, shards)) < 2 * len(kept) / len(shards)
    assert all(sharing.of_dict({"i": str(i)}) is kept[i] for i in range(0, 50_000, 997))
    if sys.implementation.name == "cpython":
        assert max(map(sys.getsizeof, shards)) < sys.getsizeof(dict.fromkeys(range(len(kept)))) / 64


async def test_a_watch_shares_a_pods_labels_with_its_jobs_template():
    watch = SharedWatch(None, "default")  # type: ignore[arg-type] - the cache alone, no API calls
    job, pod = _job_and_pod("train")
    job["metadata"]["resourceVersion"], pod["metadata"]["resourceVersion"] = "1", "2"
    watch._apply(JOBS, "ADDED", job)  # noqa: SLF001
    watch._apply(PODS, "ADDED", pod)  # noqa: SLF001
    cached_job, cached_pod = watch.get(JOBS, "train"), watch.get(PODS, pod["metadata"]["name"])
    assert cached_job is not None and cached_pod is not None
    assert cached_pod["metadata"]["labels"] is cached_job["spec"]["template"]["metadata"]["labels"]
    assert watch.pods_of("train") == [cached_pod]


# --- a subscription ---


async def test_a_change_before_the_wait_is_not_lost_and_is_seen_once_read():
    sub = Subscription("job")
    sub.notify()
    assert await sub.wait(timeout=0.01) is True
    assert await sub.wait(timeout=0.01) is True  # not read yet: still news
    sub.clear()  # the subscriber reads the cache, which holds the change
    assert await sub.wait(timeout=0.01) is False


async def test_a_change_while_the_subscriber_reads_wakes_its_next_wait():
    sub = Subscription("job")
    sub.notify()
    assert await sub.wait(timeout=5) is True
    sub.clear()
    sub.notify()  # after the read began: the read may have missed it
    assert await sub.wait(timeout=5) is True


async def test_a_change_wakes_the_wait_and_nothing_is_held_between_waits():
    sub = Subscription("job")
    assert await sub.wait(timeout=0.01) is False
    assert sub._waiter is None and sub._timer is None  # noqa: SLF001
    waiter = sub.wait(timeout=5)
    assert sub.wait(timeout=1) is waiter  # a second wait shares the pending one
    assert not waiter.done()
    sub.notify()
    assert await waiter is True
    assert sub._waiter is None and sub._timer is None  # noqa: SLF001 - its timer cancelled too


async def test_a_wait_holds_no_coroutine_and_its_timer_no_context_of_its_own():
    sub = Subscription("job")
    waiter = sub.wait(timeout=5)
    assert isinstance(waiter, asyncio.Future)
    timer = sub._timer  # noqa: SLF001
    assert timer is not None and timer._context is watch_module._NO_CONTEXT  # noqa: SLF001
    sub.notify()
    assert await waiter is True


async def test_a_cancelled_wait_leaves_nothing_behind():
    sub = Subscription("job")
    waiter = asyncio.ensure_future(sub.wait(timeout=5))
    task = asyncio.create_task(_await(waiter))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    timer = sub._timer  # noqa: SLF001
    assert await sub.wait(timeout=0.01) is False  # a new wait, the cancelled one's timer dropped
    assert timer is not None and timer.cancelled()
    sub.notify()
    assert await sub.wait(timeout=0.01) is True


async def _await(future: asyncio.Future) -> bool:
    return await future


async def test_the_deleted_job_reaches_its_subscribers_once():
    watch = SharedWatch(None, "default")  # type: ignore[arg-type] - the cache alone, no API calls
    sub = watch.subscribe("train")
    job, pod = _job_and_pod("train")
    job["metadata"]["resourceVersion"], pod["metadata"]["resourceVersion"] = "1", "2"
    watch._apply(JOBS, "ADDED", copy.deepcopy(job))  # noqa: SLF001
    watch._apply(PODS, "DELETED", pod)  # noqa: SLF001 - a pod is not the job
    assert sub.take_gone("jobs") is None
    job["metadata"]["annotations"] = {"airflow-jobs.io/verdict": "Cancelled"}
    watch._apply(JOBS, "DELETED", job)  # noqa: SLF001
    assert sub.take_gone("mpijobs") is None
    gone = sub.take_gone("jobs")
    assert gone is not None and gone["metadata"]["annotations"] == {"airflow-jobs.io/verdict": "Cancelled"}
    assert sub.take_gone("jobs") is None
    watch.unsubscribe(sub)
    assert watch.subscriber_count == 0


# --- a log tail ---


@pytest.mark.parametrize("size,lines", [(3, 0), (3, 2), (3, 3), (3, 7), (3, 50), (0, 5), (1, 4)])
def test_a_log_tail_keeps_the_last_lines_as_a_bounded_deque_does(size: int, lines: int):
    tail, reference = LogTail(size), deque(maxlen=size)
    for i in range(lines):
        tail.append(f"line {i}")
        reference.append(f"line {i}")
        assert list(tail) == list(reference) and len(tail) == len(reference)


# --- listing ---


class _PagedList:
    """A client serving a LIST in pages of ``limit``, each at a newer version (as the simulator does;
    a real API server reads every page at the first one's version)."""

    def __init__(self, names: list[str]):
        self.names = names
        self.pages: list[int | None] = []
        self.version = 100

    async def list(
        self,
        resource,
        namespace,
        *,
        label_selector=None,
        field_selector=None,
        limit=None,
        continue_token=None,
    ):
        self.pages.append(limit)
        start = int(continue_token or 0)
        chunk = self.names[start : start + limit] if limit else self.names[start:]
        self.version += 1
        meta: dict = {"resourceVersion": str(self.version)}
        if limit and start + limit < len(self.names):
            meta["continue"] = str(start + limit)
        items = [
            {"metadata": {"name": n, "resourceVersion": "50"}, "status": {"phase": "Running"}} for n in chunk
        ]
        return {"items": items, "metadata": meta}


async def test_a_list_comes_in_pages_and_is_taken_at_its_first_pages_version():
    client = _PagedList([f"pod-{i}" for i in range(1203)])
    watch = SharedWatch(client, "default", resources=(PODS,))  # type: ignore[arg-type]
    listed_at = await watch._relist(PODS)  # noqa: SLF001
    assert len(watch.jobs(PODS)) == 1203
    assert client.pages == [500, 500, 500]
    assert listed_at == "101"
    assert await watch.wait_synced(timeout=0) is True


async def test_every_trigger_waiting_for_the_first_list_shares_one_wait():
    watch = SharedWatch(_PagedList(["p"]), "default", resources=(PODS,))  # type: ignore[arg-type]
    before = len(asyncio.all_tasks())
    waiters = [asyncio.create_task(watch.wait_synced(timeout=5)) for _ in range(50)]
    await asyncio.sleep(0)
    assert len(asyncio.all_tasks()) == before + 50  # the callers' own, no task of the wait's
    await watch._relist(PODS)  # noqa: SLF001
    assert await asyncio.gather(*waiters) == [True] * 50
    assert await SharedWatch(_PagedList([]), "x", resources=(PODS,)).wait_synced(timeout=0.01) is False  # type: ignore[arg-type]


def test_a_cached_jobs_own_dicts_share_their_key_tables_and_read_as_plain_dicts(monkeypatch):
    """PEP 412's key-sharing dicts: each cached Job's metadata, labels, annotations, spec and status keep
    only their values, the keys once per kind of dict. To every reader they are ordinary dicts. (A key
    table holds 30 keys: a process whose jobs carry more kinds of annotation gets ordinary dicts for
    the rest; here the annotations' table starts empty.)"""
    monkeypatch.setattr(watch_transform, "_ANNOTATIONS", watch_transform._shape("annotations"))
    jobs = []
    for name in ("a", "b", "c"):
        job, _ = _job_and_pod(name)
        job["metadata"]["annotations"] = {f"airflow-jobs.io/note-{i}": f"{name}-{i}" for i in range(12)}
        jobs.append((job, trim(job, "Job", Sharing())))
    for job, cached in jobs:
        plain = json.loads(json.dumps(cached))
        assert cached == plain and json.dumps(cached) == json.dumps(trim(job, "Job"))
        assert type(cached["metadata"]["annotations"]) is dict
        assert list(cached["metadata"]["annotations"]) == list(job["metadata"]["annotations"])
    annotations = jobs[-1][1]["metadata"]["annotations"]
    if sys.implementation.name == "cpython":
        assert sys.getsizeof(annotations) < sys.getsizeof(dict(annotations))


def test_keys_an_attribute_cannot_take_leave_a_plain_dict():
    job, _ = _job_and_pod("odd")
    job["metadata"]["labels"] = {"__dict__": "x", "__class__": "y", "team": "z"}
    cached = trim(job, "Job", Sharing())
    assert cached["metadata"]["labels"] == {"__dict__": "x", "__class__": "y", "team": "z"}


def _decoded(obj: dict) -> dict:
    """``obj`` as a watch event brings it: every string a fresh copy (``copy.deepcopy`` keeps strings)."""
    return json.loads(json.dumps(obj))


def _interned(value: str) -> bool:
    """Whether ``value`` is the interpreter's interned copy (interning an equal fresh string returns it)."""
    return sys.intern("".join(value)) is value


def test_an_objects_own_names_uids_and_versions_are_one_copy_it_does_not_intern():
    """A job's name, uid and resourceVersion, and the product's times on it, repeat in no other object:
    interning them would only grow the interpreter's table of interned strings, which never shrinks.
    Within the object they are one copy (the job's name and uid also label its pod template), and what
    repeats across jobs (label keys, a group, condition types) is interned."""
    job, pod = _job_and_pod(f"own-{id(object())}")
    job["metadata"]["resourceVersion"] = f"{id(job)}7"
    job["metadata"]["annotations"] = {
        "airflow-jobs.io/queued-at": "2026-11-27T10:00:00.123456Z",
        "airflow-jobs.io/group-name": "vision",
    }
    sharing = Sharing()
    cached = trim(job, "Job", sharing)
    meta, template = cached["metadata"], cached["spec"]["template"]["metadata"]
    own = [
        meta["name"],
        meta["uid"],
        meta["resourceVersion"],
        meta["annotations"]["airflow-jobs.io/queued-at"],
    ]
    if sys.implementation.name == "cpython":
        assert not any(map(_interned, own))
        assert _interned(meta["annotations"]["airflow-jobs.io/group-name"])
        assert _interned(cached["status"]["startTime"])
        assert all(_interned(key) for key in template["labels"])
    assert template["labels"]["batch.kubernetes.io/job-name"] is meta["name"]
    assert template["labels"]["job-name"] is meta["name"]
    assert template["labels"]["batch.kubernetes.io/controller-uid"] is meta["uid"]
    assert template["labels"]["controller-uid"] is meta["uid"]

    cached_pod = trim(pod, "Pod", sharing)
    assert cached_pod["metadata"]["labels"] is template["labels"]  # the job's one copy, through sharing
    assert not _interned(cached_pod["metadata"]["uid"])
    assert cached == trim(job, "Job") and cached_pod == trim(pod, "Pod")


def test_a_new_version_keeps_the_strings_of_the_one_it_replaces():
    """Every reader of a job (its trigger's snapshot, the indexes, the log streams) holds strings of the
    version it read: they are all the first version's, not one copy per version."""
    job, pod = _job_and_pod(f"versions-{id(object())}")
    sharing = Sharing()
    first = trim(job, "Job", sharing)
    newer = _decoded(job)
    newer["metadata"]["resourceVersion"] = "99"
    newer["status"]["active"] = 1
    second = trim(newer, "Job", sharing, previous=first)
    assert second == trim(newer, "Job")
    assert second["metadata"]["name"] is first["metadata"]["name"]
    assert second["metadata"]["uid"] is first["metadata"]["uid"]
    assert second["spec"]["template"]["metadata"]["labels"]["controller-uid"] is first["metadata"]["uid"]
    assert second["metadata"]["resourceVersion"] == "99"

    first_pod = trim(pod, "Pod", sharing)
    newer_pod = _decoded(pod)
    newer_pod["metadata"]["resourceVersion"] = "100"
    second_pod = trim(newer_pod, "Pod", sharing, previous=first_pod)
    assert second_pod["metadata"]["name"] is first_pod["metadata"]["name"]
    assert (
        second_pod["metadata"]["ownerReferences"][0]["uid"]
        is first_pod["metadata"]["ownerReferences"][0]["uid"]
    )


async def test_the_watch_trims_a_new_version_against_the_cached_one():
    job, _ = _job_and_pod(f"watched-{id(object())}")
    watch = SharedWatch(_PagedList([]), "x", resources=(JOBS,))  # type: ignore[arg-type]
    watch.absorb(JOBS, _decoded(job))
    first = watch.get(JOBS, job["metadata"]["name"])
    newer = _decoded(job)
    newer["metadata"]["resourceVersion"] = str(int(job["metadata"]["resourceVersion"]) + 1)
    assert watch.absorb(JOBS, newer)
    second = watch.get(JOBS, job["metadata"]["name"])
    assert (
        second is not first and second["metadata"]["resourceVersion"] == newer["metadata"]["resourceVersion"]
    )
    assert second["metadata"]["name"] is first["metadata"]["name"]
    assert second["metadata"]["uid"] is first["metadata"]["uid"]


def test_containers_that_ended_alike_share_one_state_without_their_runtime_ids():
    """The runtime's id of a terminated container (ContainerStateTerminated.containerID) is read by
    nothing and unique to each: without it, pods whose containers ended in the same second with the same
    exit code share their status."""
    sharing = Sharing()
    cached = []
    for name, container_id in (("a", "containerd://0a1b"), ("b", "containerd://2c3d")):
        _, pod = _job_and_pod(name)
        status = terminated("main", 0, "Completed")
        status["state"]["terminated"]["containerID"] = container_id
        status["lastState"] = {"terminated": {**status["state"]["terminated"], "exitCode": 1}}
        pod["status"] = {"phase": "Succeeded", "containerStatuses": [status]}
        before = copy.deepcopy(pod)
        cached.append(trim(_decoded(pod), "Pod", sharing))
        assert pod == before
    first, second = (c["status"]["containerStatuses"][0] for c in cached)
    assert "containerID" not in first["state"]["terminated"]
    assert "containerID" not in first["lastState"]["terminated"]
    assert first["state"]["terminated"]["exitCode"] == 0 and first["lastState"]["terminated"]["exitCode"] == 1
    assert second is first
