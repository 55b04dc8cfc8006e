"""The shared watch's cache only ever moves forward, whatever is folded into it and when."""

from __future__ import annotations

from airflow_jobs_plugin.cluster import resource_version
from airflow_jobs_plugin.cluster.kube import JOBS, PODS
from airflow_jobs_plugin.cluster.watch import SharedWatch


def obj(name: str, version: str, kind: str = "Pod", **fields) -> dict:
    return {
        "kind": kind,
        "metadata": {"name": name, "namespace": "default", "resourceVersion": version},
        **fields,
    }


def watch() -> SharedWatch:
    return SharedWatch(None, "default")  # type: ignore[arg-type] - the cache alone, no API calls


def test_resource_versions_compare_as_integers_of_one_resource():
    assert resource_version.compare("9", "10") == -1
    assert resource_version.compare("10", "10") == 0
    assert resource_version.compare("123", "99") == 1


def test_a_resource_version_that_is_not_a_plain_positive_integer_cannot_be_compared():
    for odd in ("", None, "0", "012", "abc", "1.5", "-3", "١٢"):
        assert resource_version.compare(odd, "5") is None
        assert resource_version.compare("5", odd) is None


async def test_a_read_newer_than_the_cache_is_folded_in():
    w = watch()
    w._apply(PODS, "ADDED", obj("p", "10", status={"phase": "Pending"}))
    assert w.absorb(PODS, obj("p", "12", status={"phase": "Running"}))
    assert w.get(PODS, "p")["status"]["phase"] == "Running"


async def test_a_read_older_than_what_the_watch_already_delivered_is_not_folded_in():
    w = watch()
    w._apply(PODS, "ADDED", obj("p", "15", status={"phase": "Succeeded"}))
    assert not w.absorb(PODS, obj("p", "12", status={"phase": "Running"}))
    assert w.get(PODS, "p")["status"]["phase"] == "Succeeded"


async def test_a_watch_event_older_than_a_read_already_folded_in_is_not_applied():
    """The trigger's final LIST saw the pod Succeeded while the pod stream still carried its Running
    version: delivered late, that version must not turn the pod back to Running (the job's final event
    would have no exit code)."""
    w = watch()
    w._deliver(PODS, "ADDED", obj("p", "10", status={"phase": "Pending"}))
    assert w.absorb(PODS, obj("p", "15", status={"phase": "Succeeded"}))
    w._deliver(PODS, "MODIFIED", obj("p", "12", status={"phase": "Running"}))
    assert w.get(PODS, "p")["status"]["phase"] == "Succeeded"
    w._deliver(PODS, "MODIFIED", obj("p", "15", status={"phase": "Succeeded"}))
    w._deliver(PODS, "MODIFIED", obj("p", "16", status={"phase": "Succeeded"}, extra=1))
    assert w.get(PODS, "p")["metadata"]["resourceVersion"] == "16"


async def test_a_late_deletion_of_an_earlier_object_of_the_name_does_not_remove_the_new_one():
    w = watch()
    w._deliver(JOBS, "ADDED", obj("j", "10", kind="Job"))
    assert w.absorb(JOBS, obj("j", "20", kind="Job"))  # deleted at 14 and created again, read directly
    w._deliver(JOBS, "DELETED", obj("j", "14", kind="Job"))
    assert w.get(JOBS, "j")["metadata"]["resourceVersion"] == "20"
    w._deliver(JOBS, "DELETED", obj("j", "25", kind="Job"))
    assert w.get(JOBS, "j") is None


async def test_a_read_of_an_object_the_watch_saw_deleted_does_not_bring_it_back():
    w = watch()
    w._apply(PODS, "ADDED", obj("p", "10"))
    w._apply(PODS, "DELETED", obj("p", "14"))
    assert not w.absorb(PODS, obj("p", "12"))
    assert w.get(PODS, "p") is None


async def test_an_object_created_again_under_a_deleted_name_is_folded_in():
    w = watch()
    w._apply(PODS, "ADDED", obj("p", "10"))
    w._apply(PODS, "DELETED", obj("p", "14"))
    assert w.absorb(PODS, obj("p", "20"))
    assert w.get(PODS, "p")["metadata"]["resourceVersion"] == "20"


async def test_without_comparable_versions_only_the_same_version_is_refused():
    w = watch()
    w._apply(PODS, "ADDED", obj("p", "a1"))
    assert not w.absorb(PODS, obj("p", "a1"))
    assert w.absorb(PODS, obj("p", "b7"))


async def test_a_write_result_is_folded_in_only_over_the_version_the_write_replaced():
    w = watch()
    w._apply(JOBS, "ADDED", obj("j", "10", kind="Job", spec={"suspend": True}))
    assert w.absorb(JOBS, obj("j", "11", kind="Job", spec={"suspend": False}), replaces="10")
    w._apply(JOBS, "MODIFIED", obj("j", "13", kind="Job", spec={"suspend": False}, status={"active": 1}))
    assert not w.absorb(JOBS, obj("j", "11", kind="Job", spec={"suspend": False}), replaces="10")
    assert w.get(JOBS, "j")["metadata"]["resourceVersion"] == "13"


class _SlowList:
    """A client whose LIST answers with what it read before a read the test folds in meanwhile."""

    def __init__(self, items: list[dict], listed_at: str):
        self.items, self.listed_at = items, listed_at
        self.answered = None

    async def list(self, resource, namespace, *, label_selector=None, field_selector=None, **_page) -> dict:
        import asyncio

        self.answered = asyncio.Event()
        await self.answered.wait()
        return {"items": [dict(i) for i in self.items], "metadata": {"resourceVersion": self.listed_at}}


async def test_a_relist_taken_before_a_fresher_read_does_not_put_the_older_version_back():
    """A watch drop forces a relist; while it is in flight the trigger reads the job's pods for its final
    look (the pod has failed meanwhile). The list, taken earlier, must not turn the pod back to Running:
    the final event would report a failed job with no exit code."""
    import asyncio

    client = _SlowList([obj("p", "10", status={"phase": "Running"})], listed_at="10")
    w = SharedWatch(client, "default")  # type: ignore[arg-type]
    w._apply(PODS, "ADDED", obj("p", "10", status={"phase": "Running"}))
    relist = asyncio.create_task(w._relist(PODS))
    await asyncio.sleep(0)
    assert w.absorb(PODS, obj("p", "12", status={"phase": "Failed"}))
    assert w.absorb(PODS, obj("q", "13", status={"phase": "Pending"}))  # created after the list
    client.answered.set()
    await relist
    assert w.get(PODS, "p")["status"]["phase"] == "Failed"
    assert w.get(PODS, "q") is not None


def _by_team(plural: str, o: dict) -> str | None:
    return (o.get("metadata", {}).get("labels") or {}).get("team") if plural == "jobs" else None


def _job(name: str, version: str, team: str | None) -> dict:
    job = obj(name, version, kind="Job")
    if team is not None:
        job["metadata"]["labels"] = {"team": team}
    return job


async def test_an_index_files_each_object_under_its_value_and_follows_every_change():
    """client-go's indexers: an object moves between values as it changes, leaves the index when it is
    deleted, and an index added late files what the cache already holds."""
    w = watch()
    w._apply(JOBS, "ADDED", _job("a", "1", "red"))
    w.add_index("team", _by_team)
    w._apply(JOBS, "ADDED", _job("b", "2", "red"))
    w._apply(JOBS, "ADDED", _job("c", "3", "blue"))
    pod = obj("a-pod", "4")
    pod["metadata"]["labels"] = {"team": "red"}
    w._apply(PODS, "ADDED", pod)  # the index files jobs only
    assert [j["metadata"]["name"] for j in w.by_index("team", "red")] == ["a", "b"]
    assert [j["metadata"]["name"] for j in w.by_index("team", "blue")] == ["c"]

    w._apply(JOBS, "MODIFIED", _job("a", "5", "blue"))  # moved
    w._apply(JOBS, "MODIFIED", _job("b", "6", "red"))  # the same value: stays where it was
    assert [j["metadata"]["name"] for j in w.by_index("team", "red")] == ["b"]
    assert {j["metadata"]["name"] for j in w.by_index("team", "blue")} == {"a", "c"}

    w._apply(JOBS, "DELETED", _job("b", "7", "red"))
    w._apply(JOBS, "MODIFIED", _job("c", "8", None))  # no value: not filed
    assert w.by_index("team", "red") == []
    assert [j["metadata"]["name"] for j in w.by_index("team", "blue")] == ["a"]
    assert "red" not in w._indices["team"]  # no empty bucket left per value ever seen
    assert w.by_index("no-such-index", "blue") == []


async def test_the_index_returns_the_cached_objects_as_they_are_now():
    w = watch()
    w.add_index("team", _by_team)
    w._apply(JOBS, "ADDED", _job("a", "1", "red"))
    assert w.absorb(JOBS, _job("a", "2", "red"))
    assert w.by_index("team", "red") == [w.get(JOBS, "a")]
    assert w.by_index("team", "red")[0]["metadata"]["resourceVersion"] == "2"
