"""How each kind ends a job the product ruled failed (Kueue's ``JobWithCustomStop``): the ruling write's
own part (``ending_spec``), the writes that follow it (``ending_writes``), and the shell that sends them
(``quota.ledger.end_ruled_job``), one rule per test."""

from __future__ import annotations

import asyncio
import copy
import json
from datetime import datetime, timezone

import pytest

from airflow_jobs_plugin.cluster.kube import JOBS, KubeError
from airflow_jobs_plugin.jobs import kinds, labels
from airflow_jobs_plugin.jobs.action_rules import Ending
from airflow_jobs_plugin.jobs.kinds.mpi import MPIJOBS
from airflow_jobs_plugin.jobs.manifests import build_manifest
from airflow_jobs_plugin.jobs.spec import TaskIdentity, validate
from airflow_jobs_plugin.queueing.quota import ledger

TASK = TaskIdentity("nightly", "train", "run-1", -1, 1)
NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def manifest(**args) -> dict:
    spec = validate(image="registry.example/trainer:1", group="vision", user="alice", gpus=1, **args)
    job = build_manifest(spec, name="train-a1", task=TASK, attempt=1, queued_at=NOW)
    job["metadata"].update(namespace="ml", uid="u-1", resourceVersion="7")
    return job


def ruled(job: dict, reason: str = "QueueTimeout", message: str = "waited too long") -> dict:
    """``job`` as the API returns it after its verdict patch (a merge of the patch's metadata and spec)."""
    patch = ledger.verdict_patch(job, reason, message)
    out = copy.deepcopy(job)
    out["metadata"].setdefault("annotations", {}).update(patch["metadata"]["annotations"])
    for field, value in (patch.get("spec") or {}).items():
        out["spec"][field] = value
    return out


def running(job: dict) -> dict:
    out = copy.deepcopy(job)
    kinds.kind_of(out)  # the kind is read before the suspend flag is changed
    if kinds.kind_of(out) is kinds.MPI_JOB:
        out["spec"]["runPolicy"]["suspend"] = False
    else:
        out["spec"]["suspend"] = False
    return out


# --- the ruling write -------------------------------------------------------------------------------


def test_a_queued_batch_job_is_ended_by_its_ruling_write_through_its_own_deadline_with_no_pod():
    job = manifest()
    patch = ledger.verdict_patch(job, "QueueTimeout", "waited too long")
    assert patch["spec"] == {"activeDeadlineSeconds": 1, "suspend": False, "parallelism": 0}
    assert patch["metadata"]["resourceVersion"] == "7"
    recorded = json.loads(patch["metadata"]["annotations"][labels.ENDED_SPEC])
    assert recorded == {"activeDeadlineSeconds": 86400, "parallelism": 1}  # the author's, back on a retry


def test_a_second_ruling_of_a_batch_job_keeps_the_authors_values_recorded_by_the_first():
    again = ledger.verdict_patch(ruled(running(manifest())), "Cancelled", "cancelled by alice")
    assert labels.ENDED_SPEC not in again["metadata"]["annotations"]
    assert again["spec"] == {"activeDeadlineSeconds": 1}


def test_an_mpijobs_ruling_write_changes_no_spec_since_resuming_it_would_place_its_workers():
    patch = ledger.verdict_patch(manifest(workers=2), "QueueTimeout", "waited too long")
    assert "spec" not in patch
    assert patch["metadata"]["annotations"][labels.VERDICT] == "QueueTimeout"


def test_a_batch_job_needs_no_write_after_its_ruling():
    for job in (ruled(manifest()), ruled(running(manifest()))):
        assert not ledger.ruled_but_running(job) and not ledger.ruled_while_queued(job)
        assert kinds.kind_of(job).ending_writes(job, NOW) == []


# --- the MPIJob's writes after it -------------------------------------------------------------------


def test_an_mpijob_ruled_while_running_is_ended_through_its_launcher_jobs_deadline():
    job = ruled(running(manifest(workers=2)), "NodeLost", "node gone")
    assert ledger.ruled_but_running(job)
    first, fallback = kinds.MPI_JOB.ending_writes(job, NOW)
    assert (first.resource, first.name, first.patch) == (
        JOBS,
        "train-a1-launcher",
        {"spec": {"activeDeadlineSeconds": 1}},
    )
    assert first.then is kinds.Then.STOP and first.if_absent is kinds.Then.NEXT
    # No launcher yet: suspending the MPIJob frees its GPUs at once.
    assert (fallback.resource, fallback.name, fallback.patch) == (
        MPIJOBS,
        "train-a1",
        {"spec": {"runPolicy": {"suspend": True}}},
    )


def test_a_cancelled_running_mpijob_without_a_launcher_is_deleted_not_suspended():
    job = ruled(running(manifest(workers=2)), "Cancelled", "cancelled by alice")
    _, fallback = kinds.MPI_JOB.ending_writes(job, NOW)
    assert (fallback.resource, fallback.name, fallback.patch) == (MPIJOBS, "train-a1", None)


def test_an_mpijob_ruled_while_queued_gets_its_failed_condition_then_its_launcher_ends_with_no_pod():
    job = ruled(manifest(workers=2))
    job["status"] = {"conditions": [{"type": "Running", "status": "True"}]}
    assert ledger.ruled_while_queued(job)
    status, launcher = kinds.MPI_JOB.ending_writes(job, NOW)
    assert (status.resource, status.name, status.subresource) == (MPIJOBS, "train-a1", "status")
    assert status.patch is not None and status.patch["metadata"] == {"resourceVersion": "7"}
    conditions = status.patch["status"]["conditions"]
    assert [(c["type"], c["status"]) for c in conditions] == [("Running", "False"), ("Failed", "True")]
    assert (conditions[-1]["reason"], conditions[-1]["message"]) == ("QueueTimeout", "waited too long")
    assert status.patch["status"]["completionTime"] == "2026-01-01T00:00:00.000000Z"
    # Gone or changed since read: the next look decides afresh; written: the launcher follows.
    assert (status.then, status.if_absent, status.if_conflict) == (
        kinds.Then.NEXT,
        kinds.Then.STOP,
        kinds.Then.STOP,
    )
    assert launcher.name == kinds.MPI_JOB.launcher_name(job) == "train-a1-launcher"
    assert launcher.patch == {"spec": {"activeDeadlineSeconds": 1, "suspend": False, "parallelism": 0}}


def test_a_queued_mpijob_that_is_cancelled_is_left_to_the_cancels_delete():
    job = ruled(manifest(workers=2), "Cancelled", "cancelled by alice")
    assert not ledger.ruled_while_queued(job)
    assert kinds.MPI_JOB.ending_writes(job, NOW) == []
    assert kinds.MPI_JOB.cancel_ending(suspended=True) is Ending.DELETE


def test_an_ended_mpijob_needs_no_more_writes():
    job = ruled(running(manifest(workers=2)))
    job["status"] = {"conditions": [{"type": "Failed", "status": "True"}]}
    assert not ledger.ruled_but_running(job) and kinds.MPI_JOB.ending_writes(job, NOW) == []


def test_cancel_endings_by_kind():
    assert kinds.BATCH_JOB.cancel_ending(suspended=True) is Ending.OWN_DEADLINE
    assert kinds.TORCHRUN.cancel_ending(suspended=False) is Ending.OWN_DEADLINE
    assert kinds.MPI_JOB.cancel_ending(suspended=False) is Ending.LAUNCHER_DEADLINE


# --- the shell sends the writes, each answer deciding the next ----------------------------------------


class Recording:
    """A client that records each write and answers some with an error."""

    def __init__(self, errors: dict[tuple[str, str], int] | None = None):
        self.errors = errors or {}
        self.calls: list[tuple[str, str, str, str | None]] = []

    def _answer(self, verb: str, plural: str, name: str, sub: str | None) -> dict:
        self.calls.append((verb, plural, name, sub))
        status = self.errors.get((plural, name))
        if status:
            raise KubeError(status, "NotFound" if status == 404 else "Conflict", "refused")
        return {}

    async def merge_patch(self, resource, namespace, name, patch, *, sub=None) -> dict:
        assert namespace == "ml"
        return self._answer("patch", resource.plural, name, sub)

    async def delete(self, resource, namespace, name, *, propagation_policy="Background", **_) -> bool:
        assert propagation_policy == "Background"
        self._answer("delete", resource.plural, name, None)
        return True


def end(job: dict, client: Recording) -> list[tuple[str, str, str, str | None]]:
    asyncio.run(ledger.end_ruled_job(client, job))  # type: ignore[arg-type]
    return client.calls


def test_the_shell_stops_once_the_launcher_took_the_deadline():
    job = ruled(running(manifest(workers=2)))
    assert end(job, Recording()) == [("patch", "jobs", "train-a1-launcher", None)]


def test_the_shell_suspends_the_mpijob_when_it_has_no_launcher_yet():
    job = ruled(running(manifest(workers=2)))
    calls = end(job, Recording({("jobs", "train-a1-launcher"): 404}))
    assert calls == [("patch", "jobs", "train-a1-launcher", None), ("patch", "mpijobs", "train-a1", None)]


def test_the_shell_writes_the_queued_failure_then_ends_the_launcher():
    calls = end(ruled(manifest(workers=2)), Recording())
    assert calls == [("patch", "mpijobs", "train-a1", "status"), ("patch", "jobs", "train-a1-launcher", None)]


def test_the_shell_leaves_the_launcher_alone_when_the_status_write_lost_to_a_newer_version():
    calls = end(ruled(manifest(workers=2)), Recording({("mpijobs", "train-a1"): 409}))
    assert calls == [("patch", "mpijobs", "train-a1", "status")]


def test_the_shell_raises_an_unexpected_refusal():
    with pytest.raises(KubeError):
        end(ruled(running(manifest(workers=2))), Recording({("jobs", "train-a1-launcher"): 409}))


def test_the_shell_sends_nothing_for_a_batch_job():
    assert end(ruled(running(manifest())), Recording()) == []
