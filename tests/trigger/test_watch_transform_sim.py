"""The shared watch keeps trimmed objects (watch_transform): on real manifests run by the simulator, they
are much smaller than the whole objects and every reading the product takes of them is the same."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timezone

from airflow_jobs_plugin.cluster import watch as shared
from airflow_jobs_plugin.cluster.kube import JOBS, PODS
from airflow_jobs_plugin.cluster.watch_transform import trim
from airflow_jobs_plugin.jobs import kinds
from airflow_jobs_plugin.jobs.kinds.mpi import MPIJOBS
from airflow_jobs_plugin.lifecycle import snapshot
from airflow_jobs_plugin.queueing.quota import ledger, placement
from airflow_jobs_plugin.queueing.quota.ledger_model import Ledger, plan_admission
from airflow_jobs_plugin.queueing.quota.parse import parse_policy

from .conftest import job_manifest, task_identity

USER_ENV = {"DATA_DIR": "/data", "WANDB_PROJECT": "vision-nightly", "SEED": "17"}


def _size(obj: dict) -> int:
    return len(json.dumps(obj))


def _manifests() -> list[dict]:
    common = {"env": USER_ENV, "scenario": {"main": {"run": 600}}}
    made = [
        job_manifest(task_identity("single"), **common),
        job_manifest(task_identity("mpi"), workers=2, **common),
        job_manifest(task_identity("torchrun"), workers=2, framework="torchrun", **common),
    ]
    for body in made:
        if body["kind"] == "MPIJob":
            body["spec"]["runPolicy"]["suspend"] = False
        else:
            body["spec"]["suspend"] = False
    return made


async def _running(client, names: list[str], pods_wanted: int) -> list[dict]:
    for _ in range(600):
        pods = [
            p
            for p in (await client.list(PODS, "default"))["items"]
            if any(p["metadata"]["name"].startswith(n) for n in names)
        ]
        if len(pods) >= pods_wanted and all((p.get("status") or {}).get("phase") == "Running" for p in pods):
            return pods
        await asyncio.sleep(0.05)
    raise AssertionError("the jobs' pods never all ran")


async def test_cached_objects_are_trimmed_much_smaller_and_read_the_same(client, cluster):
    bodies = _manifests()
    for body in bodies:
        await client.create(MPIJOBS if body["kind"] == "MPIJob" else JOBS, "default", body)
    names = [b["metadata"]["name"] for b in bodies]
    # A Job's pod, an MPIJob's launcher and 2 workers, a torchrun Job's 2 nodes.
    pods = await _running(client, names, 6)
    jobs = [
        j
        for resource in (JOBS, MPIJOBS)
        for j in (await client.list(resource, "default"))["items"]
        if j["metadata"]["name"] in names
    ]
    assert len(jobs) == 3

    # The shared watch holds the trimmed objects, whichever way they came in.
    watch = await shared.acquire(shared.DEFAULT_CONN_ID, "default")
    try:
        assert await watch.wait_synced(timeout=10)
        for job in jobs:
            resource = MPIJOBS if job.get("kind") == "MPIJob" or "mpiReplicaSpecs" in job["spec"] else JOBS
            cached = watch.get(resource, job["metadata"]["name"])
            assert cached is not None and "managedFields" not in cached["metadata"]
            assert _size(cached) < _size(job)
    finally:
        shared.release(shared.DEFAULT_CONN_ID, "default")

    # Much smaller: a job with its pods at most half its whole size.
    for job in jobs:
        kind = kinds.kind_of(job)
        mine = kind.pods_of(job, pods)
        whole = _size(job) + sum(_size(p) for p in mine)
        trimmed = _size(trim(job, kind.resource.kind)) + sum(_size(trim(p, "Pod")) for p in mine)
        assert trimmed <= whole / 2, (kind.name, trimmed, whole)
        assert "env" not in json.dumps(trim(job, kind.resource.kind)["spec"])

    # Every reading is the same: the snapshot, placement, the admission's view and plan.
    now = datetime.now(timezone.utc)
    trimmed_jobs = [trim(j, kinds.kind_of(j).resource.kind) for j in jobs]
    trimmed_pods = [trim(p, "Pod") for p in pods]
    for job, small in zip(jobs, trimmed_jobs, strict=True):
        kind = kinds.kind_of(job)
        assert kinds.kind_of(small) is kind
        assert snapshot(small, kind.pods_of(small, trimmed_pods), (), now=now) == snapshot(
            job, kind.pods_of(job, pods), (), now=now
        )
        assert placement.pod_shapes(small) == placement.pod_shapes(job)
        nodes = [placement.NodeCapacity("n", 1, {}), placement.NodeCapacity("m", 8, {})]
        assert placement.never_fits(small, nodes[:1]) == placement.never_fits(job, nodes[:1])
        assert ledger.fingerprint(small) == ledger.fingerprint(job)
        assert ledger.all_pods_scheduled(
            small, kind.pods_of(small, trimmed_pods)
        ) == ledger.all_pods_scheduled(job, kind.pods_of(job, pods))

    policy = parse_policy("groups: {vision: {gpus: 4, user_gpus: 2}}")
    empty = Ledger("vision")

    async def plan(jobs_seen: list[dict], pods_seen: list[dict]):
        def pods_of(job: dict) -> list:
            return list(kinds.kind_of(job).pods_of(job, pods_seen))

        # An empty ledger holds none of the running jobs: each is read again before it is adopted, the
        # same read whichever view (trimmed or whole) found it.
        view = await ledger.read_view(client, "vision", empty, jobs_seen, "default", now, pods_of)
        return (
            view.queued,
            view.running,
            view.observed,
            view.unreadable,
            plan_admission(policy, empty, view.queued, view.observed, now, view.running),
        )

    assert await plan(trimmed_jobs, trimmed_pods) == await plan(jobs, pods)
