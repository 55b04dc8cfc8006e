"""The shared watch's transform (watch_transform.trim) drops only fields nothing reads.

Over every lifecycle scenario, each reading the product takes from the watch's cache (the snapshot, the
kind's pod sets and replicas, the admission's readings of a job and its pods, the result, the log
streamer's containers, what a deleted job ended as) is the same on the trimmed objects as on the whole.
"""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from typing import Any

import pytest

from airflow_jobs_plugin.cluster.watch_transform import trim
from airflow_jobs_plugin.jobs import kinds
from airflow_jobs_plugin.jobs.jobview import JobView
from airflow_jobs_plugin.jobs.results import job_result
from airflow_jobs_plugin.lifecycle import pod_ready, pod_restarts, pod_row, pod_status, snapshot, tracking
from airflow_jobs_plugin.lifecycle.replicas import read_replica
from airflow_jobs_plugin.logs import logstream
from airflow_jobs_plugin.queueing.quota import ledger, placement
from airflow_jobs_plugin.queueing.quota.requeue import RequeueSettings

from .factories import batch_job, job_pod, mpi_job
from .scenarios import NOW, SCENARIOS, Scenario
from .test_pod_status import CASES as POD_STATUS_CASES

NODES = [
    placement.NodeCapacity("gpu-node-1", 8, {"pool": "a100"}),
    placement.NodeCapacity("gpu-node-2", 4, {"pool": "t4"}),
]


def _trimmed_job(job: dict) -> dict:
    return trim(job, job.get("kind"))


def _trimmed_pods(pods: list[dict]) -> list[dict]:
    return [trim(p, "Pod") for p in pods]


def _outcome(fn: Any, *args: Any) -> Any:
    """A reading's value, or the error it raised (readings of malformed objects raise the same)."""
    try:
        return fn(*args)
    except (ValueError, KeyError, TypeError) as exc:
        return type(exc), str(exc)


def _job_readings(job: dict, pods: list[dict]) -> dict[str, Any]:
    kind = kinds.kind_of(job)
    now = SCENARIOS[0].now
    return {
        "kind": kind.name,
        "suspended": kind.is_suspended(job),
        "finished": kind.is_finished(job),
        "succeeded": kind.succeeded(job),
        "pod_sets": [(s.role, s.count) for s in kind.pod_sets(job)],
        "expected_replicas": kind.expected_replicas(job),
        "expected_pods": kind.expected_pods(job),
        "backoff_limit": kind.backoff_limit(job),
        "pod_failures": kind.pod_failures(job),
        "related": kind.related_names(job),
        "pods_of": [p["metadata"]["name"] for p in kind.pods_of(job, pods)],
        "replica_keys": [kind.replica_key(p) for p in pods],
        "pod_shapes": placement.pod_shapes(job),
        "never_fits": placement.never_fits(job, NODES),
        "fingerprint": ledger.fingerprint(job),
        "observe": ledger.observe(job, pods),
        "queued_job": _outcome(ledger.queued_job, job),
        "all_pods_scheduled": ledger.all_pods_scheduled(job, pods),
        "settings": _outcome(ledger.job_settings, job, RequeueSettings()),
        "awaits_release": ledger.awaits_release(job),
        "product_job": ledger.is_product_job(job),
        "group": JobView(job).group,
        "ruled_but_running": ledger.ruled_but_running(job),
        "verdict_patch": ledger.verdict_patch(job, "QueueTimeout", "waited too long"),
        "unsuspend_patch": ledger.unsuspend_patch(job, now),
        "after_deletion": tracking.after_deletion(job, now=now),
    }


def _pod_readings(pods: list[dict]) -> dict[str, Any]:
    return {
        "result": job_result(pods),
        "started": [list(logstream._started_containers(p)) for p in pods],  # noqa: SLF001
        "main_container": [((p.get("spec") or {}).get("containers") or [{}])[0].get("name") for p in pods],
        "scheduled": [ledger.pod_scheduled(p) for p in pods],
    }


def _snap(scenario: Scenario, job: dict | None, pods: list[dict]):
    return snapshot(
        job,
        pods,
        scenario.events,
        queue=scenario.queue,
        reservation=scenario.reservation,
        now=scenario.now,
    )


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.id for s in SCENARIOS])
def test_the_snapshot_of_trimmed_objects_is_the_snapshot_of_the_whole(scenario: Scenario):
    job = None if scenario.job is None else _trimmed_job(scenario.job)
    pods = _trimmed_pods(scenario.pods)
    assert _snap(scenario, job, pods) == _snap(scenario, scenario.job, scenario.pods)
    # Later looks: the clock moved on (deadlines, back-offs, ages).
    later = Scenario(**{**scenario.__dict__, "now": scenario.now + timedelta(minutes=10)})
    assert _snap(later, job, pods) == _snap(later, scenario.job, scenario.pods)


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s.job is not None], ids=lambda s: s.id)
def test_every_reading_of_a_trimmed_job_and_its_pods_is_the_same(scenario: Scenario):
    assert scenario.job is not None
    whole = _job_readings(scenario.job, scenario.pods)
    trimmed = _job_readings(_trimmed_job(scenario.job), _trimmed_pods(scenario.pods))
    assert trimmed == whole


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.id for s in SCENARIOS])
def test_every_reading_of_trimmed_pods_is_the_same(scenario: Scenario):
    assert _pod_readings(_trimmed_pods(scenario.pods)) == _pod_readings(scenario.pods)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.id for s in SCENARIOS])
def test_trim_is_idempotent_and_never_changes_its_input(scenario: Scenario):
    for obj, kind in [(scenario.job, None), *((p, "Pod") for p in scenario.pods)]:
        if obj is None:
            continue
        before = copy.deepcopy(obj)
        once = trim(obj, kind or obj.get("kind"))
        assert obj == before
        assert trim(once, kind or obj.get("kind")) == once


def _with_managed_fields(obj: dict) -> dict:
    out = copy.deepcopy(obj)
    out["metadata"]["managedFields"] = [
        {"manager": "kube-controller-manager", "operation": "Update", "fieldsType": "FieldsV1"}
    ]
    return out


@pytest.mark.parametrize(
    "obj,kind",
    [
        (batch_job(), "Job"),
        (mpi_job(), "MPIJob"),
        (job_pod(), "Pod"),
        ({"metadata": {"name": "ledger-vision"}, "data": {"k": "v"}}, "ConfigMap"),
    ],
)
def test_managed_fields_are_dropped_from_every_kind(obj: dict, kind: str):
    trimmed = trim(_with_managed_fields(obj), kind)
    assert "managedFields" not in trimmed["metadata"]
    assert trimmed["metadata"] == {k: v for k, v in obj["metadata"].items()}


def test_other_kinds_keep_everything_but_managed_fields():
    configmap = {"kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"ledger": json.dumps({"a": 1})}}
    assert trim(configmap) == configmap


@pytest.mark.parametrize("case", POD_STATUS_CASES, ids=[c[0] for c in POD_STATUS_CASES])
def test_kubectl_columns_of_a_trimmed_pod_are_the_same(case: tuple):
    whole = case[1]
    trimmed = trim(whole, "Pod")
    columns = (pod_status, pod_ready, pod_restarts)
    assert [c(trimmed) for c in columns] == [c(whole) for c in columns]
    assert pod_row(trimmed, NOW) == pod_row(whole, NOW)
    assert read_replica("worker", 0, trimmed) == read_replica("worker", 0, whole)


def _gpu_template(
    template: dict, gpus: int, *, node_selector: dict | None = None, init_gpus: int = 0
) -> None:
    spec = template["spec"]
    spec["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}, "requests": {"cpu": "4"}}
    spec["containers"][0]["env"] = [
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
    ]
    spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}}]
    spec["affinity"] = {"podAntiAffinity": {}}
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    if init_gpus:
        spec["initContainers"] = [
            {"name": "warm-up", "image": "x", "resources": {"limits": {"amd.com/gpu": str(init_gpus)}}}
        ]


def _placement_jobs() -> list[dict]:
    jobs = []
    for gpus, selector, init_gpus in [
        (8, None, 0),
        (8, {"pool": "t4"}, 0),  # fits nowhere it may run
        (4, {"pool": "t4"}, 0),
        (2, {"pool": "h100"}, 0),  # no such node yet
        (1, None, 16),  # the init container asks for more than any node has
    ]:
        job = batch_job()
        _gpu_template(job["spec"]["template"], gpus, node_selector=selector, init_gpus=init_gpus)
        jobs.append(job)
        mpi = mpi_job()
        for replica in mpi["spec"]["mpiReplicaSpecs"].values():
            _gpu_template(replica["template"], gpus, node_selector=selector, init_gpus=init_gpus)
        jobs.append(mpi)
    return jobs


@pytest.mark.parametrize("job", _placement_jobs(), ids=lambda j: f"{j['kind']}")
def test_placement_of_a_trimmed_job_is_the_same_and_its_pod_templates_shrink(job: dict):
    trimmed = _trimmed_job(job)
    assert placement.pod_shapes(trimmed) == placement.pod_shapes(job)
    assert placement.never_fits(trimmed, NODES) == placement.never_fits(job, NODES)
    assert _job_readings(trimmed, []) == _job_readings(job, [])
    for pod_set in kinds.kind_of(trimmed).pod_sets(trimmed):
        spec = pod_set.template["spec"]
        assert "volumes" not in spec and "affinity" not in spec
        assert all(set(c) <= {"name", "resources", "restartPolicy"} for c in spec["containers"])
