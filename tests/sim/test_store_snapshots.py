"""Stored objects are immutable snapshots shared by every reader: what a reader does with the object it
got (a GET, a LIST, a watch event, a controller's notification) can never change the stored state, as
with a real API server. Writes copy only what they change."""

from __future__ import annotations

import copy
import json
import pickle
import time
import urllib.request
import uuid

import pytest
from airflow_jobs_sim.store import FrozenDict, FrozenError, FrozenList, Store, freeze, thaw


@pytest.fixture
def store() -> Store:
    s = Store(watch_history=50)
    s.create("namespaces", {"metadata": {"name": "default"}})
    return s


def job(name: str = "j", **spec) -> dict:
    template = {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox:1.36"}]}}
    return {"metadata": {"name": name, "labels": {"app": "x"}}, "spec": {"template": template, **spec}}


MUTATIONS = [
    ("set a key", lambda o: o["metadata"].__setitem__("name", "other")),
    ("delete a key", lambda o: o["metadata"].__delitem__("labels")),
    ("setdefault", lambda o: o.setdefault("extra", {})),
    ("pop", lambda o: o["metadata"].pop("labels", None)),
    ("update", lambda o: o["metadata"]["labels"].update(b="c")),
    ("clear", lambda o: o["spec"].clear()),
    ("append to a list", lambda o: o["spec"]["template"]["spec"]["containers"].append({"name": "x"})),
    ("set a list item", lambda o: o["spec"]["template"]["spec"]["containers"].__setitem__(0, {})),
    ("sort a list", lambda o: o["spec"]["template"]["spec"]["containers"].sort()),
    ("change a nested dict", lambda o: o["spec"]["template"]["spec"]["containers"][0].update(image="evil")),
]


@pytest.mark.parametrize("mutate", [m for _, m in MUTATIONS], ids=[n for n, _ in MUTATIONS])
def test_a_get_result_refuses_every_change_and_the_store_keeps_its_object(store, mutate):
    store.create("jobs", job())
    before = thaw(store.get("jobs", "j", "default"))
    got = store.get("jobs", "j", "default")
    with pytest.raises(FrozenError):
        mutate(got)
    assert store.get("jobs", "j", "default") == before


@pytest.mark.parametrize("mutate", [m for _, m in MUTATIONS], ids=[n for n, _ in MUTATIONS])
def test_list_results_and_write_results_refuse_changes(store, mutate):
    created = store.create("jobs", job())
    patched = store.patch("jobs", "j", {"metadata": {"annotations": {"a": "b"}}}, "merge", "default")
    before = thaw(patched)
    for obj in (created, patched, store.list("jobs")[0], store.list_with_rv("jobs", "default")[0][0]):
        with pytest.raises(FrozenError):
            mutate(obj)
    assert store.get("jobs", "j", "default") == before


def test_the_list_itself_is_the_callers_own(store):
    store.create("jobs", job())
    items = store.list("jobs")
    items.clear()
    assert len(store.list("jobs")) == 1


def test_a_mutable_copy_is_there_when_asked_for_and_is_independent(store):
    store.create("jobs", job())
    for mine in (
        store.get("jobs", "j", "default", copy=True),
        store.list("jobs", copy=True)[0],
        copy.deepcopy(store.get("jobs", "j", "default")),
        thaw(store.get("jobs", "j", "default")),
    ):
        assert type(mine) is dict and type(mine["spec"]["template"]["spec"]["containers"]) is list
        mine["metadata"]["labels"]["app"] = "changed"
        mine["spec"]["template"]["spec"]["containers"].append({"name": "x"})
    stored = store.get("jobs", "j", "default")
    assert stored["metadata"]["labels"] == {"app": "x"}
    assert len(stored["spec"]["template"]["spec"]["containers"]) == 1


def test_the_callers_body_stays_its_own_after_a_write(store):
    body = job()
    created = store.create("jobs", body)
    body["metadata"]["labels"]["app"] = "changed"
    body["spec"]["template"]["spec"]["containers"][0]["image"] = "other:1"
    assert created["metadata"]["labels"] == {"app": "x"}
    assert (
        store.get("jobs", "j", "default")["spec"]["template"]["spec"]["containers"][0]["image"]
        == "busybox:1.36"
    )
    status = {"active": 1, "conditions": [{"type": "Suspended", "status": "False"}]}
    store.update("jobs", {"metadata": {"name": "j", "namespace": "default"}, "status": status}, "status")
    status["conditions"][0]["status"] = "True"
    assert store.get("jobs", "j", "default")["status"]["conditions"][0]["status"] == "False"


def test_watchers_subscribers_and_replays_get_snapshots_they_cannot_change(store):
    seen: list[dict] = []
    refused: list[str] = []

    def tamper(obj: dict) -> None:
        seen.append(obj)
        try:
            obj["metadata"]["labels"]["app"] = "tampered"
        except FrozenError:
            refused.append(obj["metadata"]["name"])

    store.watch("jobs", store.current_rv(), lambda rv, t, r, obj, prev: tamper(obj))
    store.subscribe(lambda t, r, obj: tamper(obj) if r == "jobs" else None)
    store.create("jobs", job("a"))
    store.patch("jobs", "a", {"metadata": {"annotations": {"k": "v"}}}, "merge", "default")
    replay, _, _ = store.watch("jobs", None, lambda *a: None)
    for _, _, obj, _ in replay:
        tamper(obj)
    history, _, _ = store.watch("jobs", 0, lambda *a: None)
    for _, _, obj, _ in history:
        tamper(obj)
    assert len(refused) == len(seen) == 2 + 2 + 1 + 2
    assert store.get("jobs", "a", "default")["metadata"]["labels"] == {"app": "x"}
    # Every reader got the same shared object, not a copy each.
    assert seen[2] is seen[3] is store.get("jobs", "a", "default")


def test_a_write_copies_only_what_it_changes(store):
    created = store.create("jobs", job(suspend=True))
    status_only = store.update(
        "jobs", {"metadata": {"name": "j", "namespace": "default"}, "status": {"active": 1}}, "status"
    )
    assert status_only["spec"] is created["spec"]
    assert status_only["metadata"] is not created["metadata"]  # a new resourceVersion
    assert status_only["metadata"]["labels"] is created["metadata"]["labels"]
    labelled = store.patch("jobs", "j", {"metadata": {"labels": {"b": "c"}}}, "merge", "default")
    assert labelled["spec"] is created["spec"] and labelled["status"] is status_only["status"]
    assert labelled["metadata"]["labels"] == {"app": "x", "b": "c"}
    assert created["metadata"]["labels"] == {"app": "x"}  # the old version is untouched


def test_a_changed_spec_is_defaulted_even_where_it_shares_parts_with_the_stored_one(store):
    # The strategic merge shares the container's ``requests`` with the stored version; the defaults must
    # still copy requests from the new limits (requests default to limits).
    body = job(suspend=True)
    body["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    store.create("jobs", body)
    patch = {
        "spec": {
            "template": {
                "spec": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
            }
        }
    }
    updated = store.patch("jobs", "j", patch, "strategic", "default")
    resources = updated["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources == {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}


def test_frozen_values_read_and_serialize_as_plain_ones():
    plain = {"a": [1, {"b": None}], "c": "d"}
    frozen = freeze(plain)
    assert isinstance(frozen, FrozenDict) and isinstance(frozen["a"], FrozenList)
    assert isinstance(frozen, dict) and frozen == plain
    assert json.dumps(frozen) == json.dumps(plain)
    assert pickle.loads(pickle.dumps(frozen)) == plain
    assert freeze(frozen) is frozen  # already frozen parts are shared, not copied
    mixed = {"new": 1, "old": frozen["a"]}
    assert freeze(mixed)["old"] is frozen["a"]
    assert type(copy.copy(frozen)) is dict and type(copy.copy(frozen["a"])) is list


# ---------------------------------------------------------------------------- over HTTP


def _get(sim, path: str) -> dict:
    with urllib.request.urlopen(sim.url + path, timeout=10) as resp:
        return json.loads(resp.read())


def test_mutating_what_the_api_answered_changes_nothing_on_the_server(sim):
    ns = f"t-{uuid.uuid4().hex[:8]}"
    sim.store.create("namespaces", {"metadata": {"name": ns}})
    sim.store.create("configmaps", {"metadata": {"name": "c"}, "data": {"k": "v"}}, ns)
    with urllib.request.urlopen(
        f"{sim.url}/api/v1/namespaces/{ns}/configmaps?watch=true&resourceVersion=0&timeoutSeconds=1",
        timeout=10,
    ) as resp:
        watched = [json.loads(line)["object"] for line in resp]
    got = _get(sim, f"/api/v1/namespaces/{ns}/configmaps/c")
    listed = _get(sim, f"/api/v1/namespaces/{ns}/configmaps")["items"]
    for obj in (got, listed[0], watched[0]):
        obj["data"]["k"] = "changed"
        obj["metadata"]["labels"] = {"x": "y"}
    again = _get(sim, f"/api/v1/namespaces/{ns}/configmaps/c")
    assert again["data"] == {"k": "v"} and "labels" not in again["metadata"]
    assert sim.store.get("configmaps", "c", ns)["data"] == {"k": "v"}


def test_a_list_is_sent_as_a_plain_json_list_of_the_stored_objects(sim):
    ns = f"t-{uuid.uuid4().hex[:8]}"
    sim.store.create("namespaces", {"metadata": {"name": ns}})
    for i in range(3):
        sim.store.create("configmaps", {"metadata": {"name": f"c{i}"}, "data": {"i": str(i)}}, ns)
    body = _get(sim, f"/api/v1/namespaces/{ns}/configmaps")
    assert list(body) == ["kind", "apiVersion", "metadata", "items"]
    assert body["kind"] == "ConfigMapList" and body["metadata"]["resourceVersion"]
    assert body["items"] == [thaw(o) for o in sim.store.list("configmaps", ns)]


# ---------------------------------------------------------------------------- the controllers


def test_no_controller_changes_a_version_it_read(live_sim):
    """Every version of every object written while a Job runs (pods, events, the Job's statuses) is
    still, at the end, exactly what it was when it was written: the controllers (scheduler, kubelet,
    Job controller, garbage collector) copy what they change."""
    ns = f"t-{uuid.uuid4().hex[:8]}"
    live_sim.store.create("namespaces", {"metadata": {"name": ns}})
    versions: list[tuple[dict, dict]] = []

    def record(rv, event_type, resource, obj, prev):
        versions.append((obj, thaw(obj)))

    live_sim.call(lambda: live_sim.store.watch("pods", live_sim.store.current_rv(), record))
    body = job("run")
    body["spec"]["template"]["metadata"] = {
        "annotations": {"sim.airflow-jobs.io/scenario": json.dumps({"main": {"pull": 0, "run": 1}})}
    }
    live_sim.call(lambda: live_sim.store.create("jobs", body, ns))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        status = live_sim.call(lambda: live_sim.store.get("jobs", "run", ns))["status"]
        if any(c["type"] == "Complete" for c in status.get("conditions") or ()):
            break
        time.sleep(0.05)
    else:
        pytest.fail("the job did not complete")
    live_sim.call(lambda: live_sim.store.delete("jobs", "run", ns, propagation_policy="Foreground"))
    time.sleep(0.3)
    resources = {o.get("kind") for o, _ in versions}
    assert {"Job", "Pod", "Event"} <= resources
    assert all(isinstance(o, FrozenDict) for o, _ in versions)
    changed = [o["metadata"]["name"] for o, at_write in versions if o != at_write]
    assert not changed
