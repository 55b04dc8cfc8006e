"""When a trigger reads a job afresh before deriving a state: its pods show a change its cached object
does not (tracking.pods_outran_job)."""

from __future__ import annotations

from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.lifecycle.tracking import pods_outran_job


def job(
    *, suspend: bool = False, failed: int = 0, verdict: str | None = None, finished: bool = False
) -> dict:
    annotations = {labels.VERDICT: verdict} if verdict else {}
    status: dict = {"failed": failed}
    if finished:
        status["conditions"] = [{"type": "Complete", "status": "True"}]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "annotations": annotations},
        "spec": {"suspend": suspend, "template": {"spec": {"containers": [{"name": "main"}]}}},
        "status": status,
    }


def pod(name: str = "j-1", *, phase: str = "Running", deleting: bool = False) -> dict:
    meta: dict = {"name": name, "resourceVersion": "1"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"phase": phase}}


def test_a_running_jobs_running_pods_need_no_read():
    assert not pods_outran_job(job(), [pod()], ["j-1"])


def test_a_pod_being_deleted_under_a_job_the_cache_shows_running_needs_a_read():
    assert pods_outran_job(job(), [pod(deleting=True)], ["j-1"])


def test_a_failure_the_job_does_not_count_yet_needs_a_read_and_one_it_counts_does_not():
    assert pods_outran_job(job(failed=0), [pod(phase="Failed")], ["j-1"])
    assert not pods_outran_job(job(failed=1), [pod(phase="Failed"), pod("j-2")], ["j-1", "j-2"])


def test_a_pod_gone_since_the_last_look_needs_a_read():
    assert pods_outran_job(job(), [], ["j-1"])


def test_a_suspended_ruled_or_finished_job_explains_its_pods_already():
    for cached in (job(suspend=True), job(verdict="Cancelled"), job(finished=True)):
        assert not pods_outran_job(cached, [pod(deleting=True)], ["j-1", "j-2"])
