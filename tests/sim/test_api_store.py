"""The store behind the simulated API server: defaults, validation, versions, updates, deletion."""

from __future__ import annotations

import time

import pytest
from airflow_jobs_sim.config import RESOURCES
from airflow_jobs_sim.errors import ApiError
from airflow_jobs_sim.store import Store, default_pull_policy, qos_class, thaw


@pytest.fixture
def store() -> Store:
    s = Store(watch_history=5)
    s.create("namespaces", {"metadata": {"name": "default"}})
    return s


def pod(name="p", **spec):
    return {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}], **spec},
    }


def job(name="j", **spec):
    template = {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox:1.36"}]}}
    return {"metadata": {"name": name}, "spec": {"template": template, **spec}}


def wait_until(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


# --------------------------------------------------------------------------- create


def test_create_sets_uid_timestamp_and_increasing_resource_versions_across_resources(store):
    a = store.create("pods", pod("a"))
    b = store.create("configmaps", {"metadata": {"name": "c"}, "data": {"k": "v"}})
    assert a["metadata"]["uid"] != b["metadata"]["uid"]
    assert a["metadata"]["creationTimestamp"].endswith("Z")
    assert int(b["metadata"]["resourceVersion"]) == int(a["metadata"]["resourceVersion"]) + 1
    assert (a["apiVersion"], a["kind"]) == ("v1", "Pod")


def test_generate_name_appends_five_random_characters(store):
    created = store.create("pods", {**pod(), "metadata": {"generateName": "worker-"}})
    name = created["metadata"]["name"]
    assert name.startswith("worker-") and len(name) == len("worker-") + 5


def test_create_of_existing_name_is_already_exists(store):
    store.create("jobs", job("dup"))
    with pytest.raises(ApiError) as exc:
        store.create("jobs", job("dup"))
    assert (exc.value.code, exc.value.reason) == (409, "AlreadyExists")
    assert exc.value.message == 'jobs.batch "dup" already exists'


def test_create_in_missing_namespace_is_not_found(store):
    with pytest.raises(ApiError) as exc:
        store.create("pods", pod(), namespace="nowhere")
    assert exc.value.message == 'namespaces "nowhere" not found'


def test_get_of_missing_object_is_not_found_with_group_resource(store):
    with pytest.raises(ApiError) as exc:
        store.get("mpijobs", "x", "default")
    assert exc.value.code == 404
    assert exc.value.message == 'mpijobs.kubeflow.org "x" not found'
    assert exc.value.status()["details"] == {"name": "x", "group": "kubeflow.org", "kind": "mpijobs"}


def test_pod_defaults_match_the_real_server(store):
    created = store.create("pods", pod())
    spec = created["spec"]
    assert spec["restartPolicy"] == "Always"
    assert spec["terminationGracePeriodSeconds"] == 30
    assert spec["dnsPolicy"] == "ClusterFirst"
    assert spec["schedulerName"] == "default-scheduler"
    assert spec["serviceAccountName"] == "default"
    container = spec["containers"][0]
    assert container["terminationMessagePath"] == "/dev/termination-log"
    assert container["terminationMessagePolicy"] == "File"
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert created["status"] == {"phase": "Pending", "qosClass": "BestEffort"}


@pytest.mark.parametrize(
    ("image", "policy"),
    [
        ("busybox", "Always"),
        ("busybox:latest", "Always"),
        ("busybox:1.36", "IfNotPresent"),
        ("registry:5000/team/img", "Always"),
        ("registry:5000/team/img:v2", "IfNotPresent"),
        ("img@sha256:abcd", "IfNotPresent"),
    ],
)
def test_image_pull_policy_default_depends_on_the_tag(image, policy):
    assert default_pull_policy(image) == policy


@pytest.mark.parametrize(
    ("resources", "qos"),
    [
        ({}, "BestEffort"),
        ({"limits": {"nvidia.com/gpu": "1"}}, "BestEffort"),
        ({"requests": {"cpu": "1"}}, "Burstable"),
        ({"limits": {"cpu": "1", "memory": "1Gi"}}, "Guaranteed"),
        ({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}}, "Burstable"),
    ],
)
def test_qos_class_follows_cpu_and_memory_requests_and_limits(resources, qos):
    requests = dict(resources.get("limits") or {}, **(resources.get("requests") or {}))
    container = {
        "name": "c",
        "image": "i",
        "resources": {**resources, **({"requests": requests} if requests else {})},
    }
    assert qos_class({"containers": [container]}) == qos


def test_job_defaults_selector_and_template_labels(store):
    created = store.create("jobs", job("train"))
    spec, uid = created["spec"], created["metadata"]["uid"]
    assert (spec["parallelism"], spec["completions"], spec["backoffLimit"]) == (1, 1, 6)
    assert (spec["completionMode"], spec["suspend"], spec["manualSelector"]) == ("NonIndexed", False, False)
    assert spec["podReplacementPolicy"] == "TerminatingOrFailed"
    assert spec["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    assert spec["template"]["metadata"]["labels"] == {
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": "train",
        "controller-uid": uid,
        "job-name": "train",
    }
    assert created["metadata"]["generation"] == 1
    assert created["status"] == {}


def test_mpijob_defaults(store):
    spec = {
        "mpiReplicaSpecs": {"Launcher": {"template": {"spec": {"containers": [{"name": "l", "image": "i"}]}}}}
    }
    created = store.create("mpijobs", {"metadata": {"name": "m"}, "spec": spec, "status": {"x": 1}})
    spec = created["spec"]
    assert spec["slotsPerWorker"] == 1
    assert spec["runPolicy"]["cleanPodPolicy"] == "None"
    assert spec["launcherCreationPolicy"] == "AtStartup"
    assert spec["mpiImplementation"] == "OpenMPI"
    assert "status" not in created  # status belongs to the status subresource


def test_mpijob_replica_defaults_restart_the_launcher_in_place_and_replace_workers(store):
    template = {"spec": {"containers": [{"name": "c", "image": "i"}]}}
    spec = {"mpiReplicaSpecs": {"Launcher": {"template": template}, "Worker": {"template": template}}}
    replicas = store.create("mpijobs", {"metadata": {"name": "m"}, "spec": spec})["spec"]["mpiReplicaSpecs"]
    assert (replicas["Launcher"]["restartPolicy"], replicas["Launcher"]["replicas"]) == ("OnFailure", 1)
    assert (replicas["Worker"]["restartPolicy"], replicas["Worker"]["replicas"]) == ("Never", 0)


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("resource", "manifest", "field", "message"),
    [
        (
            "pods",
            {"metadata": {"name": "p"}, "spec": {"containers": []}},
            "spec.containers",
            "Required value",
        ),
        (
            "pods",
            {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}},
            "spec.containers[0].image",
            "Required value",
        ),
        (
            "pods",
            {"metadata": {"name": "p"}, "spec": {"containers": [{"image": "i"}]}},
            "spec.containers[0].name",
            "Required value",
        ),
        (
            "pods",
            {"metadata": {"name": "Bad_Name"}, "spec": {"containers": [{"name": "c", "image": "i"}]}},
            "metadata.name",
            'Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain',
        ),
        (
            "pods",
            {
                "metadata": {"name": "p", "labels": {"k": "v" * 64}},
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            },
            "metadata.labels",
            "must be no more than 63 characters",
        ),
        (
            "pods",
            {"metadata": {}, "spec": {"containers": [{"name": "c", "image": "i"}]}},
            "metadata.name",
            "Required value: name or generateName is required",
        ),
        (
            "jobs",
            {
                "metadata": {"name": "j"},
                "spec": {
                    "template": {
                        "spec": {"restartPolicy": "Always", "containers": [{"name": "c", "image": "i"}]}
                    }
                },
            },
            "spec.template.spec.restartPolicy",
            # batch validateJobSpec (kubernetes v1.36.3) calls `Always` a missing value.
            'Required value: valid values: "OnFailure", "Never"',
        ),
        (
            "jobs",
            {
                "metadata": {"name": "j" * 64},
                "spec": {
                    "template": {
                        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}
                    }
                },
            },
            "spec.template.metadata.labels",
            "must be no more than 63 characters",
        ),
        ("namespaces", {"metadata": {"name": "a.b"}}, "metadata.name", "a lowercase RFC 1123 label"),
        ("mpijobs", {"metadata": {"name": "m"}, "spec": {}}, "spec.mpiReplicaSpecs", "Required value"),
    ],
)
def test_invalid_manifest_is_rejected_with_422_and_field_causes(store, resource, manifest, field, message):
    with pytest.raises(ApiError) as exc:
        store.create(resource, manifest)
    assert exc.value.code == 422 and exc.value.reason == "Invalid"
    causes = exc.value.status()["details"]["causes"]
    assert any(c["field"] == field and message in c["message"] for c in causes), causes
    kind = RESOURCES[resource].kind
    assert exc.value.message.startswith(f"{kind}")
    assert " is invalid: " in exc.value.message


def test_invalid_message_lists_every_cause_in_brackets(store):
    with pytest.raises(ApiError) as exc:
        store.create("pods", {"metadata": {"name": "p"}, "spec": {"containers": [{}]}})
    assert exc.value.message == (
        'Pod "p" is invalid: [spec.containers[0].name: Required value, spec.containers[0].image: Required value]'
    )


# --------------------------------------------------------------------------- update and patch


def test_update_with_stale_resource_version_is_conflict(store):
    created = thaw(store.create("jobs", job("x")))
    fresh = store.patch("jobs", "x", {"metadata": {"labels": {"a": "b"}}}, "merge", "default")
    created["metadata"]["labels"] = {"c": "d"}
    with pytest.raises(ApiError) as exc:
        store.update("jobs", created)
    assert exc.value.code == 409
    assert exc.value.message == (
        'Operation cannot be fulfilled on jobs.batch "x": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    assert (
        store.get("jobs", "x", "default")["metadata"]["resourceVersion"]
        == fresh["metadata"]["resourceVersion"]
    )


def test_update_without_resource_version_is_unconditional(store):
    created = thaw(store.create("configmaps", {"metadata": {"name": "c"}, "data": {"a": "1"}}))
    created["metadata"].pop("resourceVersion")
    created["data"] = {"a": "2"}
    assert store.update("configmaps", created)["data"] == {"a": "2"}


def test_main_resource_update_keeps_status_and_status_update_keeps_spec(store):
    created = thaw(store.create("jobs", job("s")))
    created["status"] = {"active": 1}
    created["spec"]["suspend"] = True
    updated = thaw(store.update("jobs", created))
    assert updated["status"] == {} and updated["spec"]["suspend"] is True
    assert updated["metadata"]["generation"] == 2
    updated["status"] = {"active": 1}
    updated["spec"]["suspend"] = False
    after = store.update("jobs", updated, subresource="status")
    assert after["status"] == {"active": 1} and after["spec"]["suspend"] is True
    assert after["metadata"]["generation"] == 2


def test_no_op_update_keeps_resource_version_and_emits_nothing(store):
    created = store.create("configmaps", {"metadata": {"name": "same"}, "data": {"a": "1"}})
    seen = []
    store.subscribe(lambda t, r, o: seen.append(t))
    again = store.update("configmaps", created)
    assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert seen == []


def test_strategic_merge_patch_merges_containers_by_name_and_conditions_by_type(store):
    store.create("pods", pod("sp", containers=[{"name": "a", "image": "x:1"}, {"name": "b", "image": "y:1"}]))
    patched = store.patch(
        "pods", "sp", {"spec": {"containers": [{"name": "b", "image": "y:2"}]}}, "strategic", "default"
    )
    assert [(c["name"], c["image"]) for c in patched["spec"]["containers"]] == [("a", "x:1"), ("b", "y:2")]
    status = {"status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}}
    store.patch("pods", "sp", status, "strategic", "default", subresource="status")
    status = {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    after = store.patch("pods", "sp", status, "strategic", "default", subresource="status")
    assert [c["type"] for c in after["status"]["conditions"]] == ["PodScheduled", "Ready"]


def test_merge_patch_replaces_lists_and_null_deletes(store):
    store.create(
        "configmaps", {"metadata": {"name": "m", "labels": {"a": "1", "b": "2"}}, "data": {"k": "v"}}
    )
    patched = store.patch(
        "configmaps", "m", {"metadata": {"labels": {"a": None}}, "data": {"x": "y"}}, "merge", "default"
    )
    assert patched["metadata"]["labels"] == {"b": "2"}
    assert patched["data"] == {"k": "v", "x": "y"}


def test_json_patch_applies_operations_and_test_failure_is_rejected(store):
    store.create("configmaps", {"metadata": {"name": "jp"}, "data": {"k": "v"}})
    patched = store.patch(
        "configmaps", "jp", [{"op": "add", "path": "/data/n", "value": "1"}], "json", "default"
    )
    assert patched["data"] == {"k": "v", "n": "1"}
    with pytest.raises(ApiError) as exc:
        store.patch(
            "configmaps", "jp", [{"op": "test", "path": "/data/k", "value": "other"}], "json", "default"
        )
    assert exc.value.code == 422


def test_resource_version_inside_a_patch_is_a_precondition(store):
    created = store.create("jobs", job("pre"))
    store.patch("jobs", "pre", {"metadata": {"labels": {"a": "1"}}}, "merge", "default")
    stale = {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"], "labels": {"a": "2"}}}
    with pytest.raises(ApiError) as exc:
        store.patch("jobs", "pre", stale, "merge", "default")
    assert exc.value.code == 409


def test_job_selector_is_immutable(store):
    created = thaw(store.create("jobs", job("imm")))
    created["spec"]["selector"] = {"matchLabels": {"x": "y"}}
    with pytest.raises(ApiError) as exc:
        store.update("jobs", created)
    assert exc.value.code == 422 and "spec.selector" in exc.value.message


# --------------------------------------------------------------------------- delete


def test_unbound_pod_is_deleted_at_once(store):
    store.create("pods", pod("gone"))
    store.delete("pods", "gone", "default")
    with pytest.raises(ApiError):
        store.get("pods", "gone", "default")


def test_bound_running_pod_gets_a_deletion_timestamp_and_stays_until_grace_zero(store):
    store.create("pods", pod("bound", nodeName="sim-node-0"))
    marked = store.delete("pods", "bound", "default")
    assert marked["metadata"]["deletionGracePeriodSeconds"] == 30
    assert marked["metadata"]["deletionTimestamp"]
    assert store.get("pods", "bound", "default")["metadata"]["deletionTimestamp"]
    store.delete("pods", "bound", "default", grace_period_seconds=0)
    with pytest.raises(ApiError):
        store.get("pods", "bound", "default")


def test_finalizers_keep_an_object_until_removed(store):
    store.create("configmaps", {"metadata": {"name": "fin", "finalizers": ["example.com/keep"]}})
    marked = store.delete("configmaps", "fin", "default")
    assert marked["metadata"]["deletionTimestamp"]
    store.patch("configmaps", "fin", {"metadata": {"finalizers": None}}, "merge", "default")
    with pytest.raises(ApiError):
        store.get("configmaps", "fin", "default")


def test_deleting_a_job_orphans_its_pods_by_default(store):
    owner = store.create("jobs", job("own"))
    ref = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "own",
        "uid": owner["metadata"]["uid"],
        "controller": True,
    }
    store.create("pods", {**pod("own-1"), "metadata": {"name": "own-1", "ownerReferences": [ref]}})
    store.delete("jobs", "own", "default")
    assert "ownerReferences" not in store.get("pods", "own-1", "default")["metadata"]


def test_delete_precondition_on_uid_is_conflict(store):
    store.create("configmaps", {"metadata": {"name": "u"}})
    with pytest.raises(ApiError) as exc:
        store.delete("configmaps", "u", "default", preconditions={"uid": "other"})
    assert exc.value.code == 409 and "the UID in the precondition (other) does not match" in exc.value.message


def test_default_namespace_cannot_be_deleted(store):
    with pytest.raises(ApiError) as exc:
        store.delete("namespaces", "default")
    assert exc.value.code == 403


def test_background_propagation_collects_dependents(sim, namespace):
    owner = sim.store.create("jobs", job("bg"), namespace)
    ref = {"apiVersion": "batch/v1", "kind": "Job", "name": "bg", "uid": owner["metadata"]["uid"]}
    sim.store.create("pods", {**pod(), "metadata": {"name": "bg-1", "ownerReferences": [ref]}}, namespace)
    sim.store.delete("jobs", "bg", namespace, propagation_policy="Background")
    assert wait_until(lambda: not sim.store.list("pods", namespace))


def test_foreground_propagation_deletes_dependents_before_the_owner(sim, namespace):
    owner = sim.store.create(
        "mpijobs", {"metadata": {"name": "fg"}, "spec": {"mpiReplicaSpecs": {"Launcher": {}}}}, namespace
    )
    ref = {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "name": "fg",
        "uid": owner["metadata"]["uid"],
    }
    sim.store.create("configmaps", {"metadata": {"name": "fg-config", "ownerReferences": [ref]}}, namespace)
    marked = sim.store.delete("mpijobs", "fg", namespace, propagation_policy="Foreground")
    assert "foregroundDeletion" in marked["metadata"]["finalizers"]
    assert wait_until(lambda: not sim.store.list("mpijobs", namespace))
    assert not sim.store.list("configmaps", namespace)


def test_deleting_a_namespace_removes_its_content_then_the_namespace(sim):
    sim.store.create("namespaces", {"metadata": {"name": "doomed"}})
    sim.store.create("configmaps", {"metadata": {"name": "c"}}, "doomed")
    terminating = sim.store.delete("namespaces", "doomed")
    assert terminating["status"]["phase"] == "Terminating"
    assert wait_until(
        lambda: not any(n["metadata"]["name"] == "doomed" for n in sim.store.list("namespaces"))
    )


def test_pod_whose_owner_never_existed_is_collected(sim, namespace):
    ref = {"apiVersion": "batch/v1", "kind": "Job", "name": "ghost", "uid": "no-such-uid"}
    sim.store.create("pods", {**pod(), "metadata": {"name": "orphan", "ownerReferences": [ref]}}, namespace)
    assert wait_until(lambda: not sim.store.list("pods", namespace))


# --------------------------------------------------------------------------- watch history


def test_watch_from_a_compacted_version_is_gone(store):
    first = store.create("configmaps", {"metadata": {"name": "w0"}})
    for i in range(1, 8):
        store.create("configmaps", {"metadata": {"name": f"w{i}"}})
    with pytest.raises(ApiError) as exc:
        store.watch("configmaps", int(first["metadata"]["resourceVersion"]), lambda *a: None)
    assert exc.value.code == 410 and exc.value.message.startswith("too old resource version: ")


def test_watch_replays_events_after_a_recent_version(store):
    first = store.create("configmaps", {"metadata": {"name": "r0"}})
    store.create("configmaps", {"metadata": {"name": "r1"}})
    store.delete("configmaps", "r0", "default")
    replay, _, unregister = store.watch(
        "configmaps", int(first["metadata"]["resourceVersion"]), lambda *a: None
    )
    unregister()
    assert [(e[1], e[2]["metadata"]["name"]) for e in replay] == [("ADDED", "r1"), ("DELETED", "r0")]


def test_history_is_kept_per_resource(store):
    cm = store.create("configmaps", {"metadata": {"name": "quiet"}})
    for i in range(10):
        store.create("pods", pod(f"busy-{i}"))
    replay, _, unregister = store.watch(
        "configmaps", int(cm["metadata"]["resourceVersion"]) - 1, lambda *a: None
    )
    unregister()
    assert [e[2]["metadata"]["name"] for e in replay] == ["quiet"]


def test_a_dependent_released_by_patch_survives_its_former_owner(sim, namespace):
    owner = sim.store.create("jobs", job("rel"), namespace)
    ref = {"apiVersion": "batch/v1", "kind": "Job", "name": "rel", "uid": owner["metadata"]["uid"]}
    sim.store.create("configmaps", {"metadata": {"name": "kept", "ownerReferences": [ref]}}, namespace)
    sim.store.create("configmaps", {"metadata": {"name": "collected", "ownerReferences": [ref]}}, namespace)
    sim.store.patch("configmaps", "kept", {"metadata": {"ownerReferences": None}}, "merge", namespace)
    sim.store.delete("jobs", "rel", namespace, propagation_policy="Background")
    assert wait_until(
        lambda: [c["metadata"]["name"] for c in sim.store.list("configmaps", namespace)] == ["kept"]
    )


def test_a_list_by_label_follows_relabels_and_deletions(store):
    for name, team in (("a", "red"), ("b", "blue"), ("c", "red")):
        body = pod(name)
        body["metadata"]["labels"] = {"team": team}
        store.create("pods", body, "default")

    def names(selector: str) -> list[str]:
        return [p["metadata"]["name"] for p in store.list("pods", "default", label_selector=selector)]

    assert names("team=red") == ["a", "c"]
    store.patch("pods", "a", {"metadata": {"labels": {"team": "blue"}}}, "merge", namespace="default")
    store.patch("pods", "c", {"metadata": {"labels": {"team": None}}}, "merge", namespace="default")
    store.delete("pods", "b", namespace="default", grace_period_seconds=0)
    assert names("team=red") == []
    assert names("team in (blue,red)") == ["a"]
    assert names("team=blue,team!=red") == ["a"]
    assert names("!team") == ["c"]
