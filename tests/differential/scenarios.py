"""The differential scenarios: each drives a cluster through the REST API and returns what a client saw.

Every scenario takes a :class:`~harness.Cluster` and a fresh namespace and returns an observation (plain
data, see ``harness.py``). The pods' behaviour is chosen by the scenario annotation both clusters play
(``sim.airflow-jobs.io/scenario``: the simulator's kubelet, and on the real plane the same kubelet stepped
by ``scripts/realplane/player.py``), so what a scenario compares is everything around the pods: the API
server, the Job controller, the MPI operator, Kueue, the scheduler and the garbage collector.
"""

from __future__ import annotations

import copy
import json
import time
from typing import Any

from harness import (
    JSON,
    MERGE,
    TABLE,
    Cluster,
    Observation,
    ScenarioTimeout,
    condition_set,
    conditions,
    dedupe,
    finished,
    has_condition,
    shape,
)

SCENARIO = "sim.airflow-jobs.io/scenario"
IMAGE = "busybox:1.36"
WAIT = 120.0  # the longest any one scenario waits for a cluster to get somewhere (seconds)


def jobs(ns: str, name: str = "") -> str:
    return f"/apis/batch/v1/namespaces/{ns}/jobs" + (f"/{name}" if name else "")


def pods(ns: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{ns}/pods" + (f"/{name}" if name else "")


def mpijobs(ns: str, name: str = "") -> str:
    return f"/apis/kubeflow.org/v2beta1/namespaces/{ns}/mpijobs" + (f"/{name}" if name else "")


def job_manifest(name: str, scenario: dict | None = None, *, restart: str = "Never", **spec: Any) -> dict:
    """A one-container Job whose pod does what ``scenario`` (the annotation's JSON) says."""
    template: dict = {
        "spec": {
            "restartPolicy": restart,
            "containers": [{"name": "main", "image": IMAGE, "command": ["sh", "-c", "true"]}],
        }
    }
    if scenario is not None:
        template["metadata"] = {"annotations": {SCENARIO: json.dumps(scenario)}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": template, **spec},
    }


def pod_manifest(name: str, scenario: dict, *, restart: str = "Never", init: int = 0, **extra: Any) -> dict:
    spec: dict = {
        "restartPolicy": restart,
        "containers": [{"name": "main", "image": IMAGE, "command": ["sh", "-c", "true"]}],
        **extra,
    }
    if init:
        spec["initContainers"] = [
            {"name": f"init-{i}", "image": IMAGE, "command": ["sh", "-c", "true"]} for i in range(init)
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {SCENARIO: json.dumps(scenario)}},
        "spec": spec,
    }


QUICK = {"main": {"pull": 0, "run": 1, "exit": 0, "logs": ["done"]}}


# ==================================================================================================
# The API server: status codes, reasons and the field paths of errors
# ==================================================================================================


def invalid_job_spec(c: Cluster, ns: str) -> Observation:
    """Jobs the API server refuses: each refusal's code, reason and causes (field, type)."""
    out: Observation = {}
    bad = job_manifest("restart-always")
    bad["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    out["restart_always"] = c.request("POST", jobs(ns), bad).status_summary()

    bad = job_manifest("negative")
    bad["spec"].update(parallelism=-1, backoffLimit=-2)
    out["negative_counts"] = c.request("POST", jobs(ns), bad).status_summary()

    bad = job_manifest("no-image")
    del bad["spec"]["template"]["spec"]["containers"][0]["image"]
    out["no_image"] = c.request("POST", jobs(ns), bad).status_summary()

    out["bad_name"] = c.request("POST", jobs(ns), job_manifest("Not_A_Name")).status_summary()

    bad = job_manifest("no-containers")
    bad["spec"]["template"]["spec"]["containers"] = []
    out["no_containers"] = c.request("POST", jobs(ns), bad).status_summary()

    bad = job_manifest("gpu-request-over-limit")
    bad["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"nvidia.com/gpu": "2"},
        "limits": {"nvidia.com/gpu": "1"},
    }
    out["gpu_request_over_limit"] = c.request("POST", jobs(ns), bad).status_summary()

    bad = job_manifest("indexed-no-completions", completionMode="Indexed")
    out["indexed_without_completions"] = c.request("POST", jobs(ns), bad).status_summary()
    return out


def invalid_pod_spec(c: Cluster, ns: str) -> Observation:
    """Pods the API server refuses, and one whose quantity cannot be decoded."""
    out: Observation = {}
    bad = pod_manifest("dup", QUICK)
    bad["spec"]["containers"].append(dict(bad["spec"]["containers"][0]))
    out["duplicate_container_name"] = c.request("POST", pods(ns), bad).status_summary()

    bad = pod_manifest("bad-pull", QUICK)
    bad["spec"]["containers"][0]["imagePullPolicy"] = "Sometimes"
    out["bad_pull_policy"] = c.request("POST", pods(ns), bad).status_summary()

    bad = pod_manifest("env", QUICK)
    bad["spec"]["containers"][0]["env"] = [{"name": "", "value": "x"}]
    out["empty_env_name"] = c.request("POST", pods(ns), bad).status_summary()

    bad = pod_manifest("lots", QUICK)
    bad["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "lots"}}
    out["malformed_quantity"] = c.request("POST", pods(ns), bad).status_summary()

    bad = pod_manifest("mount", QUICK)
    bad["spec"]["containers"][0]["volumeMounts"] = [{"name": "nowhere", "mountPath": "/data"}]
    out["mount_of_no_volume"] = c.request("POST", pods(ns), bad).status_summary()
    return out


def mpijob_manifest(
    name: str,
    workers: int = 1,
    launcher: dict | None = None,
    worker: dict | None = None,
    run_policy: dict | None = None,
) -> dict:
    def replica(role: str, replicas: int, scenario: dict | None) -> dict:
        template: dict = {
            "spec": {"containers": [{"name": "main", "image": IMAGE, "command": ["sh", "-c", "true"]}]}
        }
        if scenario is not None:
            template["metadata"] = {"annotations": {SCENARIO: json.dumps(scenario)}}
        return {"replicas": replicas, "template": template}

    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name},
        "spec": {
            "slotsPerWorker": 1,
            **({"runPolicy": run_policy} if run_policy else {}),
            "mpiReplicaSpecs": {
                "Launcher": replica("launcher", 1, launcher),
                "Worker": replica("worker", workers, worker),
            },
        },
    }


def invalid_mpijob(c: Cluster, ns: str) -> Observation:
    """MPIJobs the API server refuses (the CRD's schema) and one it accepts that has no launcher."""
    out: Observation = {}
    bad = mpijob_manifest("wrong-type")
    bad["spec"]["slotsPerWorker"] = "two"
    out["wrong_type"] = c.request("POST", mpijobs(ns), bad).status_summary()

    bad = mpijob_manifest("no-replica-specs")
    del bad["spec"]["mpiReplicaSpecs"]
    out["no_replica_specs"] = c.request("POST", mpijobs(ns), bad).status_summary()

    bad = mpijob_manifest("bad-impl")
    bad["spec"]["mpiImplementation"] = "MVAPICH"
    out["bad_implementation"] = c.request("POST", mpijobs(ns), bad).status_summary()

    bad = mpijob_manifest("Bad_Name")
    out["bad_name"] = c.request("POST", mpijobs(ns), bad).status_summary()

    bad = mpijob_manifest("unknown-field")
    bad["spec"]["slotsPerWorkers"] = 2
    out["unknown_field_strict"] = c.request(
        "POST", mpijobs(ns), bad, query={"fieldValidation": "Strict"}
    ).status_summary()
    return out


def not_found(c: Cluster, ns: str) -> Observation:
    """404s: a missing Job, MPIJob and Pod, a delete of nothing, a namespace that does not exist."""
    return {
        "job": c.request("GET", jobs(ns, "nothing")).status_summary(),
        "mpijob": c.request("GET", mpijobs(ns, "nothing")).status_summary(),
        "delete_pod": c.request("DELETE", pods(ns, "nothing")).status_summary(),
        "job_status": c.request("GET", jobs(ns, "nothing") + "/status").status_summary(),
        "in_missing_namespace": c.request("GET", jobs("no-such-namespace", "x")).status_summary(),
        "create_in_missing_namespace": c.request(
            "POST", jobs("no-such-namespace"), job_manifest("x")
        ).status_summary(),
    }


def configmap(name: str, **data: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def stale_update_conflict(c: Cluster, ns: str) -> Observation:
    """409s: an update on a stale resourceVersion, a create of an existing name, a wrong precondition."""
    path = f"/api/v1/namespaces/{ns}/configmaps"
    created = c.ok("POST", path, configmap("cm", a="1"))
    first = copy.deepcopy(created)
    first["data"]["a"] = "2"
    c.ok("PUT", f"{path}/cm", first)
    stale = copy.deepcopy(created)
    stale["data"]["a"] = "3"
    out: Observation = {"stale_update": c.request("PUT", f"{path}/cm", stale).status_summary()}
    out["create_existing"] = c.request("POST", path, configmap("cm")).status_summary()
    out["stale_patch"] = c.request(
        "PATCH",
        f"{path}/cm",
        {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]}, "data": {"a": "4"}},
        content_type=MERGE,
    ).status_summary()
    out["delete_wrong_uid"] = c.request(
        "DELETE",
        f"{path}/cm",
        {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "0000-not-it"}},
    ).status_summary()
    out["update_without_resource_version"] = c.request("PUT", f"{path}/cm", {**configmap("cm", a="5")}).status
    out["update_of_missing"] = c.request("PUT", f"{path}/other", configmap("other")).status_summary()
    return out


def unsupported_media_type(c: Cluster, ns: str) -> Observation:
    """415s (and 406): bodies and answers in types the server does not speak."""
    path = f"/api/v1/namespaces/{ns}/configmaps"
    c.ok("POST", path, configmap("cm", a="1"))
    text = json.dumps(configmap("text"))
    return {
        "create_as_text": c.request("POST", path, text, content_type="text/plain").status_summary(),
        "patch_as_json": c.request(
            "PATCH", f"{path}/cm", {"data": {"a": "2"}}, content_type=JSON
        ).status_summary(),
        "patch_as_text": c.request(
            "PATCH", f"{path}/cm", '{"data": {"a": "2"}}', content_type="text/plain"
        ).status_summary(),
        "strategic_patch_of_mpijob": c.request(
            "PATCH",
            mpijobs(ns, "x"),
            {"spec": {}},
            content_type="application/strategic-merge-patch+json",
        ).status,
        "accept_yaml_only": c.request("GET", f"{path}/cm", accept="application/yaml").status,
        "accept_unknown": c.request("GET", f"{path}/cm", accept="text/csv").status_summary(),
    }


def strict_field_validation(c: Cluster, ns: str) -> Observation:
    """Unknown and duplicate fields under each fieldValidation level."""
    path = jobs(ns)
    bad = job_manifest("strict", QUICK, suspend=True)
    bad["spec"]["parallelismm"] = 1
    out: Observation = {
        "strict": c.request("POST", path, bad, query={"fieldValidation": "Strict"}).status_summary()
    }
    out["warn_status"] = c.request("POST", path, bad, query={"fieldValidation": "Warn"}).status
    second = copy.deepcopy(bad)
    second["metadata"]["name"] = "ignored"
    out["ignore_status"] = c.request("POST", path, second, query={"fieldValidation": "Ignore"}).status
    out["bad_level"] = c.request(
        "POST", path, job_manifest("lvl"), query={"fieldValidation": "Loud"}
    ).status_summary()
    wrong = job_manifest("wrong-type")
    wrong["spec"]["parallelism"] = "two"
    out["wrong_type"] = c.request("POST", path, wrong).status_summary()
    return out


def immutable_job_fields(c: Cluster, ns: str) -> Observation:
    """Updates of a running Job that the API server refuses."""
    job = c.ok("POST", jobs(ns), job_manifest("held", {"main": {"pull": 0, "run": None}}))
    name = "held"
    out: Observation = {}
    out["template_change"] = c.request(
        "PATCH",
        jobs(ns, name),
        {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "busybox:1.37"}]}}}},
        content_type="application/strategic-merge-patch+json",
    ).status_summary()
    out["completions_change"] = c.request(
        "PATCH", jobs(ns, name), {"spec": {"completions": 3}}, content_type=MERGE
    ).status_summary()
    out["selector_change"] = c.request(
        "PATCH",
        jobs(ns, name),
        {"spec": {"selector": {"matchLabels": {"x": "y"}}}},
        content_type=MERGE,
    ).status_summary()
    out["completion_mode_change"] = c.request(
        "PATCH", jobs(ns, name), {"spec": {"completionMode": "Indexed"}}, content_type=MERGE
    ).status_summary()
    out["generated_labels"] = sorted((job["spec"]["template"]["metadata"].get("labels") or {}).keys())
    out["selector_keys"] = sorted((job["spec"].get("selector") or {}).get("matchLabels", {}).keys())
    c.request("DELETE", jobs(ns, name), query={"propagationPolicy": "Background"})
    return out


def job_defaults(c: Cluster, ns: str) -> Observation:
    """What the API server fills in on a Job and its pod template (what a client reads back)."""
    manifest = job_manifest("defaults", QUICK, suspend=True)
    del manifest["spec"]["backoffLimit"]
    job = c.ok("POST", jobs(ns), manifest)
    spec = job["spec"]
    tmpl = spec["template"]["spec"]
    container = tmpl["containers"][0]
    return {
        "spec": {k: v for k, v in spec.items() if k not in ("template", "selector")},
        "template": {k: v for k, v in tmpl.items() if k != "containers"},
        "container": {k: v for k, v in container.items() if k not in ("name", "image", "command")},
        "status": job.get("status"),
    }


# ==================================================================================================
# The Job controller: a Job's life as a watch shows it, its conditions, its events
# ==================================================================================================


def _job_frame(obj: dict) -> tuple:
    status = obj.get("status") or {}
    return (
        tuple(t for t, s, _ in conditions(obj) if s == "True"),
        bool(status.get("active")),
        status.get("succeeded", 0),
        status.get("failed", 0),
    )


def watch_job(c: Cluster, ns: str, manifest: dict, until=finished) -> dict:
    """Create ``manifest`` and watch it until ``until(job)``: the event types in order, the distinct
    (true conditions, active?, succeeded, failed) frames in order, and the Job as it ended."""
    name = manifest["metadata"]["name"]
    stream = c.watch(jobs(ns), query={"fieldSelector": f"metadata.name={name}"}, timeout=WAIT)
    types: list[str] = []
    frames: list[tuple] = []
    last: dict | None = None
    c.ok("POST", jobs(ns), manifest)
    for event in stream:
        if event["type"] == "BOOKMARK":
            continue
        types.append(event["type"])
        last = event["object"]
        frames.append(_job_frame(last))
        if until(last):
            break
    if last is None or not until(last):
        raise ScenarioTimeout(f"{c.label}: job {name} never got there; last: {json.dumps(last)[:2000]}")
    return {"types": dedupe(types), "frames": dedupe(frames), "job": last}


# Kueue v0.19.2's pod webhook (mpod.kb.io, the shipped `pod` integration) looks a new pod's owner up in
# its own informer, which may not have the Job yet when the Job controller creates its first pod within
# milliseconds: the pod is refused ("Job.batch "ok" not found"), the controller records FailedCreate and
# creates it on its next sync. A race of the real plane's Kueue with its own cache, not a rule a client
# can rely on either way; the simulator's Kueue has no pod webhook. Left out of the comparison.
KUEUE_OWNER_LAG = 'admission webhook "mpod.kb.io" denied the request: Job.batch'
# A Job's terminal event is recorded by the controller's event broadcaster after its status is written,
# so it may arrive a moment after the watch has shown the terminal condition.
TERMINAL_EVENTS = {"Completed", "DeadlineExceeded", "BackoffLimitExceeded", "PodFailurePolicy"}


def job_events(c: Cluster, ns: str, name: str, timeout: float = 15.0) -> list[str]:
    """The reasons of the events about Job ``name``, sorted (their order across sources is not kept),
    once the Job's terminal event has arrived (or ``timeout`` has passed)."""
    deadline = time.monotonic() + timeout
    while True:
        listing = c.ok(
            "GET",
            f"/api/v1/namespaces/{ns}/events",
            query={"fieldSelector": f"involvedObject.kind=Job,involvedObject.name={name}"},
        )
        reasons = {
            f"{e['reason']} ({e.get('message', '')})" if e["reason"] == "FailedCreate" else e["reason"]
            for e in listing.get("items", [])
            if not (e["reason"] == "FailedCreate" and KUEUE_OWNER_LAG in (e.get("message") or ""))
        }
        if reasons & TERMINAL_EVENTS or time.monotonic() > deadline:
            return sorted(reasons)
        time.sleep(0.2)


def job_summary(job: dict) -> dict:
    status = job.get("status") or {}
    return {
        "conditions": condition_set(job),
        "counts": {k: status.get(k) for k in ("active", "succeeded", "failed", "ready", "terminating")},
        "has_start_time": "startTime" in status,
        "has_completion_time": "completionTime" in status,
        "uncounted": status.get("uncountedTerminatedPods"),
    }


def job_complete_watch(c: Cluster, ns: str) -> Observation:
    """A Job that succeeds: ADDED, MODIFIED... in order, SuccessCriteriaMet then Complete."""
    seen = watch_job(c, ns, job_manifest("ok", QUICK))
    return {**seen, "job": job_summary(seen["job"]), "events": job_events(c, ns, "ok")}


def job_backoff_limit_exceeded(c: Cluster, ns: str) -> Observation:
    """A Job whose only pod fails with backoffLimit 0: FailureTarget then Failed, BackoffLimitExceeded."""
    seen = watch_job(c, ns, job_manifest("fails", {"main": {"pull": 0, "run": 1, "exit": 3}}))
    return {**seen, "job": job_summary(seen["job"]), "events": job_events(c, ns, "fails")}


def job_deadline_exceeded(c: Cluster, ns: str) -> Observation:
    """A Job past its activeDeadlineSeconds: DeadlineExceeded, its running pod stopped."""
    manifest = job_manifest("slow", {"main": {"pull": 0, "run": None}}, activeDeadlineSeconds=3)
    seen = watch_job(c, ns, manifest)
    return {**seen, "job": job_summary(seen["job"]), "events": job_events(c, ns, "slow")}


def job_pod_failure_policy(c: Cluster, ns: str) -> Observation:
    """A pod exiting 42 under a FailJob rule fails the Job at once (PodFailurePolicy), backoff unused."""
    manifest = job_manifest(
        "policy",
        {"main": {"pull": 0, "run": 1, "exit": 42}},
        backoffLimit=5,
        podFailurePolicy={
            "rules": [
                {
                    "action": "FailJob",
                    "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]},
                }
            ]
        },
    )
    seen = watch_job(c, ns, manifest)
    return {**seen, "job": job_summary(seen["job"]), "events": job_events(c, ns, "policy")}


def job_suspended_then_resumed(c: Cluster, ns: str) -> Observation:
    """A Job created suspended (Suspended=True, no pods, no startTime), then resumed to completion."""
    manifest = job_manifest("later", QUICK, suspend=True)
    seen = watch_job(c, ns, manifest, until=lambda j: has_condition(j, "Suspended"))
    suspended = job_summary(seen["job"])
    pods_while_suspended = len(c.ok("GET", pods(ns)).get("items", []))
    c.ok("PATCH", jobs(ns, "later"), {"spec": {"suspend": False}}, content_type=MERGE)
    job = c.until(jobs(ns, "later"), finished, WAIT)
    assert job is not None
    return {
        "suspended": suspended,
        "suspended_frames": seen["frames"],
        "pods_while_suspended": pods_while_suspended,
        "finished": job_summary(job),
        "events": job_events(c, ns, "later"),
    }


# ==================================================================================================
# Pods: the `kubectl get pods` STATUS column over a pod's life
# ==================================================================================================


def status_column(c: Cluster, ns: str, manifest: dict, until) -> list[str]:
    """Create the pod and watch it as ``kubectl get pods -w`` does (server-side Table rows): the STATUS
    column's values in order, runs folded, until ``until(pod)``."""
    name = manifest["metadata"]["name"]
    stream = c.watch(
        pods(ns),
        accept=TABLE,
        query={"fieldSelector": f"metadata.name={name}", "includeObject": "Object"},
        timeout=WAIT,
    )
    column = 2
    values: list[str] = []
    pod: dict | None = None
    c.ok("POST", pods(ns), manifest)
    for event in stream:
        table = event["object"]
        if event["type"] in ("BOOKMARK", "ERROR"):
            continue
        names = [d["name"] for d in table.get("columnDefinitions") or []]
        if "Status" in names:
            column = names.index("Status")
        for row in table.get("rows") or []:
            values.append(row["cells"][column])
            pod = row.get("object")
        if pod is not None and until(pod):
            break
    if pod is None or not until(pod):
        raise ScenarioTimeout(f"{c.label}: pod {name} never got there; STATUS so far: {values}")
    return dedupe(values)


def _phase_in(*phases: str):
    return lambda pod: (pod.get("status") or {}).get("phase") in phases


def _restarts_at_least(n: int):
    def check(pod: dict) -> bool:
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        return any(s.get("restartCount", 0) >= n and (s.get("state") or {}).get("waiting") for s in statuses)

    return check


def _waiting_reason(reason: str, times: int = 1):
    seen = {"n": 0, "last": None}

    def check(pod: dict) -> bool:
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        now = [(s.get("state") or {}).get("waiting", {}).get("reason") for s in statuses]
        if reason in now and seen["last"] != reason:
            seen["n"] += 1
        seen["last"] = reason if reason in now else None
        return seen["n"] >= times

    return check


def pod_init_containers_status(c: Cluster, ns: str) -> Observation:
    """Two init containers, then the main one: Init:0/2, Init:1/2, PodInitializing, Running, Completed."""
    manifest = pod_manifest(
        "init",
        {"init-0": {"pull": 0, "run": 1}, "init-1": {"pull": 0, "run": 1}, "main": {"pull": 0, "run": 1}},
        init=2,
    )
    return {"status": status_column(c, ns, manifest, _phase_in("Succeeded", "Failed"))}


def pod_error_exit_status(c: Cluster, ns: str) -> Observation:
    """A container exiting 1 under restartPolicy Never: Error, phase Failed."""
    manifest = pod_manifest("err", {"main": {"pull": 0, "run": 1, "exit": 1}})
    return {"status": status_column(c, ns, manifest, _phase_in("Succeeded", "Failed"))}


def pod_oom_killed_status(c: Cluster, ns: str) -> Observation:
    """An OOM-killed container: OOMKilled."""
    manifest = pod_manifest("oom", {"main": {"pull": 0, "run": 1, "oom": True}})
    return {"status": status_column(c, ns, manifest, _phase_in("Succeeded", "Failed"))}


def pod_err_image_pull_status(c: Cluster, ns: str) -> Observation:
    """A pull that fails: ErrImagePull, ImagePullBackOff, ErrImagePull again."""
    manifest = pod_manifest("pull", {"main": {"pull": 0, "pull_error": "not-found"}})
    # An image no node has pulled before: a cached image is not pulled again, and so cannot fail to be.
    manifest["spec"]["containers"][0]["image"] = f"registry.invalid/{ns}/absent:v1"
    return {"status": status_column(c, ns, manifest, _waiting_reason("ErrImagePull", times=2))}


def pod_crash_loop_status(c: Cluster, ns: str) -> Observation:
    """A container that keeps failing under restartPolicy Always: Error, CrashLoopBackOff, Error, ..."""
    manifest = pod_manifest("crash", {"main": {"pull": 0, "run": 0.5, "exit": 1}}, restart="Always")
    return {"status": status_column(c, ns, manifest, _restarts_at_least(2))}


def pod_create_container_config_error_status(c: Cluster, ns: str) -> Observation:
    """A container whose env names a missing Secret: CreateContainerConfigError."""
    manifest = pod_manifest("cfg", {"main": {"pull": 0, "run": 1}})
    manifest["spec"]["containers"][0]["env"] = [
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "token"}}}
    ]
    return {"status": status_column(c, ns, manifest, _waiting_reason("CreateContainerConfigError"))}


# ==================================================================================================
# Owner references and garbage collection
# ==================================================================================================


def job_pods_deleted_with_job(c: Cluster, ns: str) -> Observation:
    """A Job's pods: their names, labels, owner reference and finalizers; deleting the Job (Background)
    deletes them; deleting with the default policy (Orphan for batch/v1 Jobs) keeps them."""
    c.ok("POST", jobs(ns), job_manifest("gc", {"main": {"pull": 0, "run": None}}))
    listing = c.until(pods(ns), lambda p: bool(p and p.get("items")), WAIT)
    assert listing is not None
    pod = listing["items"][0]
    meta = pod["metadata"]
    owner = (meta.get("ownerReferences") or [{}])[0]
    out: Observation = {
        "pod_name": shape(meta["name"], "gc-"),
        "pod_label_keys": sorted(meta.get("labels", {})),
        "pod_finalizers": meta.get("finalizers"),
        "owner": {k: v for k, v in owner.items() if k != "uid"},
        "generate_name": meta.get("generateName"),
    }
    reply = c.request("DELETE", jobs(ns, "gc"), query={"propagationPolicy": "Background"})
    out["delete_status"] = reply.status
    c.until(pods(ns), lambda p: not (p or {}).get("items"), WAIT)
    out["pods_after_delete"] = 0

    c.ok("POST", jobs(ns), job_manifest("orphan", {"main": {"pull": 0, "run": None}}))
    c.until(pods(ns), lambda p: bool(p and p.get("items")), WAIT)
    deleted = c.request("DELETE", jobs(ns, "orphan"))
    out["default_delete_status"] = deleted.status
    out["default_delete_body_kind"] = (deleted.body or {}).get("kind")
    c.until(jobs(ns, "orphan"), lambda j: j is None, WAIT)
    orphan = c.ok("GET", pods(ns))["items"]
    out["orphans"] = len(orphan)
    out["orphan_owner_references"] = [p["metadata"].get("ownerReferences") for p in orphan]
    for p in orphan:
        c.request("DELETE", pods(ns, p["metadata"]["name"]), query={"gracePeriodSeconds": "0"})
    return out


def job_ttl_after_finished(c: Cluster, ns: str) -> Observation:
    """ttlSecondsAfterFinished: the finished Job and its pods are deleted."""
    seen = watch_job(c, ns, job_manifest("ttl", QUICK, ttlSecondsAfterFinished=1), until=finished)
    gone = c.until(jobs(ns, "ttl"), lambda j: j is None, WAIT)
    c.until(pods(ns), lambda p: not (p or {}).get("items"), WAIT)
    return {"frames": seen["frames"], "job_deleted": gone is None, "pods_left": 0}


def pod_deleted_with_grace_period(c: Cluster, ns: str) -> Observation:
    """A running pod deleted with gracePeriodSeconds 30: the DELETE answers the pod with its
    deletionTimestamp and deletionGracePeriodSeconds; the kubelet stops its container (SIGTERM's exit
    143, phase Failed) and the pod is removed without waiting out the grace period, its container having
    ended. The watch's frames: (type, phase, the main container's state, grace period)."""
    c.ok("POST", pods(ns), pod_manifest("doomed", {"main": {"pull": 0, "run": None}}))
    running = c.until(
        pods(ns, "doomed"), lambda p: ((p or {}).get("status") or {}).get("phase") == "Running", WAIT
    )
    assert running is not None
    stream = c.watch(pods(ns), query={"fieldSelector": "metadata.name=doomed"}, timeout=WAIT)
    reply = c.request("DELETE", pods(ns, "doomed"), query={"gracePeriodSeconds": "30"})
    body = reply.body if isinstance(reply.body, dict) else {}
    out: Observation = {
        "delete_status": reply.status,
        "delete_kind": body.get("kind"),
        "delete_grace": (body.get("metadata") or {}).get("deletionGracePeriodSeconds"),
        "delete_has_timestamp": "deletionTimestamp" in (body.get("metadata") or {}),
    }
    frames: list = []
    started = time.monotonic()
    for event in stream:
        if event["type"] == "BOOKMARK":
            continue
        obj = event["object"]
        status = obj.get("status") or {}
        main = next((cs for cs in status.get("containerStatuses") or [] if cs.get("name") == "main"), {})
        state = main.get("state") or {}
        terminated = state.get("terminated") or {}
        frames.append(
            (
                event["type"],
                status.get("phase"),
                next(iter(state), None),
                terminated.get("exitCode"),
                terminated.get("reason"),
                obj["metadata"].get("deletionGracePeriodSeconds"),
            )
        )
        if event["type"] == "DELETED":
            break
    out["frames"] = dedupe(frames)
    out["gone_before_the_grace_period"] = time.monotonic() - started < 30
    # A pod that has ended is deleted at once (the pod strategy's grace is 0), yet through the same
    # graceful path: its deletionTimestamp and grace 0 are written (MODIFIED) before it goes.
    c.ok("POST", pods(ns), pod_manifest("ended", QUICK))
    done = c.until(
        pods(ns, "ended"), lambda p: ((p or {}).get("status") or {}).get("phase") == "Succeeded", WAIT
    )
    assert done is not None
    stream = c.watch(pods(ns), query={"fieldSelector": "metadata.name=ended"}, timeout=WAIT)
    c.request("DELETE", pods(ns, "ended"))
    ended: list = []
    for event in stream:
        if event["type"] == "BOOKMARK":
            continue
        meta = event["object"]["metadata"]
        ended.append((event["type"], "deletionTimestamp" in meta, meta.get("deletionGracePeriodSeconds")))
        if event["type"] == "DELETED":
            break
    out["ended_pod_frames"] = dedupe(ended)
    return out


# ==================================================================================================
# The MPI operator
# ==================================================================================================


def _owner(obj: dict) -> dict | None:
    refs = obj["metadata"].get("ownerReferences") or []
    return {k: v for k, v in refs[0].items() if k != "uid"} if refs else None


def mpijob_runs_to_success(c: Cluster, ns: str) -> Observation:
    """An MPIJob of 2 workers whose launcher succeeds: the objects it makes, their names, labels and
    owners, and the MPIJob's conditions in order."""
    manifest = mpijob_manifest("train", workers=2, launcher={"main": {"pull": 0, "run": 3, "exit": 0}})
    stream = c.watch(mpijobs(ns), query={"fieldSelector": "metadata.name=train"}, timeout=WAIT)
    frames: list = []
    last: dict | None = None
    objects: Observation = {}

    def done(job: dict) -> bool:
        return has_condition(job, "Succeeded") or has_condition(job, "Failed")

    c.ok("POST", mpijobs(ns), manifest)
    for event in stream:
        if event["type"] == "BOOKMARK":
            continue
        last = event["object"]
        frames.append(tuple(t for t, s, _ in conditions(last) if s == "True"))
        if has_condition(last, "Running") and not objects:
            objects = _mpi_objects(c, ns)
        if done(last):
            break
    if last is None or not done(last):
        raise ScenarioTimeout(f"{c.label}: MPIJob never ended; last: {json.dumps(last)[:2000]}")
    status = last.get("status") or {}
    return {
        "frames": dedupe(frames),
        "conditions": condition_set(last),
        "replica_statuses": status.get("replicaStatuses"),
        "objects_while_running": objects,
        "launcher_job": job_summary(c.ok("GET", jobs(ns, "train-launcher"))),
    }


def _masked(labels: dict) -> list[tuple[str, str]]:
    """Labels with the values that name a uid masked (they differ on every cluster)."""
    return [(k, "<uid>" if k.endswith("controller-uid") else v) for k, v in labels.items()]


def _mpi_objects(c: Cluster, ns: str) -> Observation:
    listing = c.ok("GET", pods(ns))["items"]
    svc = c.get(f"/api/v1/namespaces/{ns}/services/train")
    cm = c.get(f"/api/v1/namespaces/{ns}/configmaps/train-config")
    launcher = c.get(jobs(ns, "train-launcher"))
    return {
        "pods": sorted(
            (shape(p["metadata"]["name"], "train-launcher"), sorted(_masked(p["metadata"].get("labels", {}))))
            for p in listing
        ),
        "pod_owners": sorted(
            json.dumps((shape(p["metadata"]["name"], "train-launcher"), _owner(p))) for p in listing
        ),
        "service": svc
        and {
            "owner": _owner(svc),
            "clusterIP": svc["spec"].get("clusterIP"),
            "selector": svc["spec"].get("selector"),
            "publishNotReadyAddresses": svc["spec"].get("publishNotReadyAddresses"),
        },
        "configmap": cm
        and {
            "owner": _owner(cm),
            "keys": sorted(cm.get("data", {})),
            "hostfile": cm["data"].get("hostfile", "").replace(ns, "<ns>"),
        },
        "launcher_job": launcher
        and {"owner": _owner(launcher), "labels": launcher["metadata"].get("labels")},
    }


def _watch_mpijob(c: Cluster, ns: str, manifest: dict, until, note=None) -> dict:
    """Create the MPIJob ``manifest`` and watch it until ``until(mpijob)``: the distinct frames of its
    true conditions in order, what ``note(mpijob)`` first returned that was not None, and the MPIJob as
    it ended."""
    name = manifest["metadata"]["name"]
    stream = c.watch(mpijobs(ns), query={"fieldSelector": f"metadata.name={name}"}, timeout=WAIT)
    frames: list = []
    noted: Any = None
    last: dict | None = None
    c.ok("POST", mpijobs(ns), manifest)
    for event in stream:
        if event["type"] == "BOOKMARK":
            continue
        last = event["object"]
        frames.append(tuple(t for t, s, _ in conditions(last) if s == "True"))
        if note is not None and noted is None:
            noted = note(last)
        if until(last):
            break
    if last is None or not until(last):
        raise ScenarioTimeout(f"{c.label}: MPIJob {name} never got there; last: {json.dumps(last)[:2000]}")
    return {"frames": dedupe(frames), "noted": noted, "mpijob": last}


def _worker_status(mpijob: dict) -> dict:
    return ((mpijob.get("status") or {}).get("replicaStatuses") or {}).get("Worker") or {}


def mpijob_failed_worker(c: Cluster, ns: str) -> Observation:
    """Both workers exit 1 while the launcher runs: mpi-operator v0.8.2 (``updateMPIJobStatus``) counts
    them and leaves the MPIJob running; it fails when its launcher does (mpirun losing the ranks, here the
    launcher's scenario exiting 1 with backoffLimit 0)."""
    manifest = mpijob_manifest(
        "train",
        workers=2,
        launcher={"main": {"pull": 0, "run": 20, "exit": 1}},
        worker={"main": {"pull": 0, "run": 8, "exit": 1}},
        run_policy={"backoffLimit": 0},
    )

    def both_failed(job: dict) -> dict | None:
        if _worker_status(job).get("failed") != 2:
            return None
        return {"conditions": condition_set(job), "replica_statuses": job["status"].get("replicaStatuses")}

    seen = _watch_mpijob(c, ns, manifest, until=lambda j: has_condition(j, "Failed"), note=both_failed)
    worker_pods = sorted(
        (p["metadata"]["name"], (p.get("status") or {}).get("phase"))
        for p in c.ok("GET", pods(ns))["items"]
        if "-worker-" in p["metadata"]["name"]
    )
    return {
        "frames": seen["frames"],
        "while_the_launcher_runs": seen["noted"],
        "ended": condition_set(seen["mpijob"]),
        "worker_pods": worker_pods,
    }


# ==================================================================================================
# Kueue
# ==================================================================================================


def kueue_queues(c: Cluster, ns: str, gpus: int) -> None:
    base = "/apis/kueue.x-k8s.io/v1beta2"
    flavor = f"f-{ns}"
    c.ok(
        "POST",
        f"{base}/resourceflavors",
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": flavor}},
    )
    c.ok("POST", f"{base}/clusterqueues", _cluster_queue(f"cq-{ns}", flavor, gpus))
    c.ok(
        "POST",
        f"{base}/namespaces/{ns}/localqueues",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "lq"},
            "spec": {"clusterQueue": f"cq-{ns}"},
        },
    )


def queued_job(name: str, gpus: int, scenario: dict) -> dict:
    manifest = job_manifest(name, scenario)
    manifest["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "lq"}
    manifest["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "1", "nvidia.com/gpu": str(gpus)},
        "limits": {"nvidia.com/gpu": str(gpus)},
    }
    return manifest


def _workload(c: Cluster, ns: str, job: str) -> dict | None:
    listing = c.ok("GET", f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/workloads")
    for wl in listing.get("items", []):
        owners = wl["metadata"].get("ownerReferences") or []
        if any(o.get("kind") == "Job" and o.get("name") == job for o in owners):
            return wl
    return None


def _workload_view(wl: dict | None) -> dict | None:
    if wl is None:
        return None
    return {
        "name": shape(wl["metadata"]["name"], "job-"),
        "conditions": condition_set(wl),
        "queue": wl["spec"].get("queueName"),
        "admitted_flavors": [
            sorted((a.get("flavors") or {}).keys())
            for a in ((wl.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []
        ],
    }


def kueue_workload_lifecycle(c: Cluster, ns: str) -> Observation:
    """A queued Job admitted and run to the end beside one that waits for quota: each Workload's
    conditions (QuotaReserved, Admitted, PodsReady, Finished, Pending), and the Jobs' suspend flags as
    Kueue sets them."""
    kueue_queues(c, ns, gpus=2)
    # What the create answers: the Job as Kueue's webhook left it (a later read races Kueue's admission).
    created = c.ok("POST", jobs(ns), queued_job("first", 2, {"main": {"pull": 0, "run": 10}}))
    out: Observation = {"suspended_on_create": created["spec"].get("suspend")}
    running = c.until(jobs(ns, "first"), lambda j: bool(j and (j.get("status") or {}).get("active")), WAIT)
    assert running is not None
    # waitForPodsReady (on by default in Kueue v0.19.2): the Workload is WaitForStart until the Job
    # controller counts its pod ready, then Started. Observed once Started: the moment before depends on
    # how soon each Job controller writes status.ready.
    c.until(
        f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/workloads",
        lambda _: has_condition(_workload(c, ns, "first"), "PodsReady"),
        WAIT,
    )
    c.ok("POST", jobs(ns), queued_job("second", 2, {"main": {"pull": 0, "run": 1}}))
    wl2 = c.until(
        f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/workloads",
        # Both writers of a pending Workload have written: the scheduler's QuotaReserved=False and the
        # job reconciler's PodsReady=False WaitForStart, which Kueue v0.19.2 writes on a Workload not yet
        # admitted too (pkg/controller/jobframework/reconciler.go, step 5, generatePodsReadyCondition),
        # on a later reconcile of the job than the scheduler's.
        lambda _: bool(
            (w := _workload(c, ns, "second"))
            and has_condition(w, "QuotaReserved", "False")
            and has_condition(w, "PodsReady", "False")
        ),
        WAIT,
    )
    assert wl2 is not None
    out["first_admitted"] = _workload_view(_workload(c, ns, "first"))
    out["second_pending"] = _workload_view(_workload(c, ns, "second"))
    out["second_suspended"] = c.ok("GET", jobs(ns, "second"))["spec"].get("suspend")
    c.until(jobs(ns, "first"), finished, WAIT)
    c.until(
        f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/workloads",
        lambda _: has_condition(_workload(c, ns, "first"), "Finished"),
        WAIT,
    )
    out["first_finished"] = _workload_view(_workload(c, ns, "first"))
    c.until(jobs(ns, "second"), finished, WAIT)
    c.until(
        f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/workloads",
        lambda _: has_condition(_workload(c, ns, "second"), "Finished"),
        WAIT,
    )
    out["second_finished"] = _workload_view(_workload(c, ns, "second"))
    return out


def _cluster_queue(name: str, flavor: str, gpus: int, cohort: str | None = None) -> dict:
    """A ClusterQueue of ``gpus`` GPUs (and 64 CPUs) in ``flavor``, in ``cohort`` when one is named."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            **({"cohortName": cohort} if cohort else {}),
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": flavor,
                            "resources": [
                                {"name": "cpu", "nominalQuota": "64"},
                                {"name": "nvidia.com/gpu", "nominalQuota": str(gpus)},
                            ],
                        }
                    ],
                }
            ],
        },
    }


def kueue_borrowing(c: Cluster, ns: str) -> Observation:
    """A ClusterQueue with no GPU quota in a cohort beside an idle lender of 4 GPUs: four 1-GPU Jobs are
    admitted by borrowing, one by one, and a fifth waits with Kueue's message (v0.19.2
    ``pkg/cache/scheduler/resource_node.go`` ``available``, ``flavorassigner.go`` ``fitsResourceQuota``)."""
    base = "/apis/kueue.x-k8s.io/v1beta2"
    flavor, cohort = f"f-{ns}", f"co-{ns}"
    c.ok(
        "POST",
        f"{base}/resourceflavors",
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": flavor}},
    )
    c.ok("POST", f"{base}/clusterqueues", _cluster_queue(f"lender-{ns}", flavor, 4, cohort))
    c.ok("POST", f"{base}/clusterqueues", _cluster_queue(f"borrower-{ns}", flavor, 0, cohort))
    c.ok(
        "POST",
        f"{base}/namespaces/{ns}/localqueues",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "lq"},
            "spec": {"clusterQueue": f"borrower-{ns}"},
        },
    )
    workloads = f"{base}/namespaces/{ns}/workloads"
    reserved: list = []
    for i in range(5):
        name = f"j{i}"
        c.ok("POST", jobs(ns), queued_job(name, 1, {"main": {"pull": 0, "run": None}}))
        c.until(workloads, lambda _, name=name: bool(conditions(_workload(c, ns, name))), WAIT)
        c.until(
            workloads,
            lambda _, name=name: (
                has_condition(_workload(c, ns, name), "QuotaReserved")
                or has_condition(_workload(c, ns, name), "QuotaReserved", "False")
            ),
            WAIT,
        )
        wl = _workload(c, ns, name)
        quota = next(
            x for x in (wl or {}).get("status", {}).get("conditions", []) if x["type"] == "QuotaReserved"
        )
        reserved.append(
            (name, quota["status"], quota["reason"], (quota.get("message") or "").replace(ns, "<ns>"))
        )
    for i in range(5):
        c.request("DELETE", jobs(ns, f"j{i}"), query={"propagationPolicy": "Background"})
    return {"quota_reserved": reserved}


# --- leader election's Leases ------------------------------------------------------------------------


def leases(ns: str, name: str = "") -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases" + (f"/{name}" if name else "")


def lease(name: str, **spec: Any) -> dict:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name}, "spec": spec}


HELD = {
    "holderIdentity": "controller-0",
    "leaseDurationSeconds": 15,
    "acquireTime": "2026-03-01T12:00:00.000000Z",
    "renewTime": "2026-03-01T13:30:02.500001+01:30",
    "leaseTransitions": 0,
}


def _refusal(reply: Any) -> dict:
    """A refusal with its message and each cause's message (the texts a client may show)."""
    body = reply.body if isinstance(reply.body, dict) else {}
    causes = (body.get("details") or {}).get("causes") or []
    return {
        **reply.status_summary(),
        "message": body.get("message"),
        "cause_messages": sorted(c.get("message", "") for c in causes),
    }


def lease_api(c: Cluster, ns: str) -> Observation:
    """Leases as leader election uses them: MicroTime read and written back, validation, the
    compare-and-swap, create-on-update, no unconditional update, a watch, kubectl's columns, discovery."""
    out: Observation = {}
    group = c.ok("GET", "/apis/coordination.k8s.io/v1")
    entry = next(r for r in group["resources"] if r["name"] == "leases")
    out["discovery"] = (entry["kind"], entry["namespaced"], sorted(entry["verbs"]))
    created = c.ok("POST", leases(ns), lease("held", **HELD))
    out["created_spec"] = created["spec"]
    out["released_spec"] = c.ok(
        "POST", leases(ns), lease("released", holderIdentity="", leaseDurationSeconds=1)
    )["spec"]
    for key, written in (
        ("no_fraction", "2026-03-01T12:00:00Z"),
        ("millis", "2026-03-01T12:00:00.123Z"),
        ("nanos", "2026-03-01T12:00:00.123456789Z"),
        ("lower_z", "2026-03-01T12:00:00.000000z"),
        ("month_13", "2026-13-01T12:00:00.000000Z"),
        ("february_30", "2026-02-30T12:00:00.000000Z"),
        ("trailing", "2026-03-01T12:00:00.000000Z trailing"),
    ):
        out[f"micro_time_{key}"] = _refusal(c.request("POST", leases(ns), lease("bad", renewTime=written)))
    out["micro_time_comma"] = c.ok(
        "POST", leases(ns), lease("comma", renewTime="2026-03-01T12:00:00,123456Z")
    )["spec"]
    for key, spec in (
        ("duration_zero", {"leaseDurationSeconds": 0}),
        ("transitions_negative", {"leaseTransitions": -1}),
        ("both_wrong", {"leaseDurationSeconds": -2, "leaseTransitions": -5}),
    ):
        name = f"invalid-{key.replace('_', '-')}"
        out[f"invalid_{key}"] = _refusal(c.request("POST", leases(ns), lease(name, **spec)))
    coordinated = c.request(
        "POST",
        leases(ns),
        lease("coordinated", strategy="OldestEmulationVersion", preferredHolder="controller-1"),
    )
    out["coordinated"] = (coordinated.status, (coordinated.body or {}).get("spec"))
    # With coordinated election's feature gate off (v1.36.3's default), its fields are dropped, never refused.
    for key, spec in (
        ("preferred_without_strategy", {"preferredHolder": "controller-1"}),
        ("unknown_strategy", {"strategy": "Youngest"}),
    ):
        reply = c.request("POST", leases(ns), lease(key.replace("_", "-"), **spec))
        out[key] = (reply.status, (reply.body or {}).get("spec"))

    renewed = c.ok("PUT", leases(ns, "held"), {**created, "spec": {**HELD, "leaseTransitions": 1}})
    out["renewed_spec"] = renewed["spec"]
    out["stale_update"] = _refusal(
        c.request("PUT", leases(ns, "held"), {**created, "spec": {**HELD, "holderIdentity": "controller-1"}})
    )
    out["update_without_resource_version"] = _refusal(
        c.request("PUT", leases(ns, "held"), lease("held", **HELD))
    )
    put = c.request("PUT", leases(ns, "put-created"), lease("put-created", **HELD))
    out["put_of_missing"] = (put.status, (put.body or {}).get("spec"))
    stale_put = c.request(
        "PUT",
        leases(ns, "put-stale"),
        {**lease("put-stale", **HELD), "metadata": {"name": "put-stale", "resourceVersion": "1"}},
    )
    out["put_of_missing_with_resource_version"] = (stale_put.status, (stale_put.body or {}).get("reason"))

    table = c.ok("GET", leases(ns), accept=TABLE)
    out["table_columns"] = [col["name"] for col in table["columnDefinitions"]]
    out["table_rows"] = sorted(row["cells"][:2] for row in table["rows"])

    events = []
    for event in c.watch(
        leases(ns),
        query={
            "resourceVersion": created["metadata"]["resourceVersion"],
            "fieldSelector": "metadata.name=held",
        },
        timeout=5,
    ):
        events.append((event["type"], event["object"]["spec"].get("leaseTransitions")))
        if len(events) == 1:
            c.ok("DELETE", leases(ns, "held"))
        if len(events) == 2:
            break
    out["watch"] = events
    return out
