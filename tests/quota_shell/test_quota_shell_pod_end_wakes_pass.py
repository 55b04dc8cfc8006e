"""A pass keeps the reservation of a job that ended while its pods still hold GPUs; the job's end and
its pods' ends arrive on separate watch streams. When such a pod ends, its group's pass runs again at
once: nothing waits for the next resync (a minute) to free the GPUs.

At once in the process whose trigger follows the job; in the others, a backstop later
(admission.BACKSTOP_SECONDS): the job's end is its own triggerer's to act on, and three processes that
all write the same change at once lose two of the writes."""

from __future__ import annotations

from types import SimpleNamespace

from airflow_jobs_plugin.cluster.kube import JOBS
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.queueing.engines.pool import BACKSTOP_SECONDS, Admission


class Worker:
    def __init__(self) -> None:
        self.marked = 0
        self.later: list[float] = []

    def mark(self) -> None:
        self.marked += 1

    def mark_later(self, delay: float) -> None:
        self.later.append(delay)


def job(name: str, finished: bool) -> dict:
    conditions = [{"type": "Complete", "status": "True"}] if finished else []
    return {
        "kind": "Job",
        "metadata": {"name": name, "uid": name, "annotations": {labels.GROUP_NAME: "vision"}},
        "status": {"conditions": conditions},
    }


def pod(job_name: str, phase: str) -> dict:
    return {
        "kind": "Pod",
        "metadata": {"name": f"{job_name}-x", "labels": {labels.BATCH_JOB_NAME: job_name}},
        "status": {"phase": phase},
    }


def _admission(jobs: dict[str, dict], followed: set[str]) -> Admission:
    admission = Admission.__new__(Admission)
    admission.watch = SimpleNamespace(
        get=lambda resource, name: jobs.get(name) if resource is JOBS else None,
        followed=lambda key: key in followed,
    )
    admission._fingerprints = {}
    return admission


def test_the_end_of_a_finished_jobs_pod_wakes_its_groups_pass_and_nothing_else_does():
    jobs = {"done": job("done", finished=True), "live": job("live", finished=False)}
    admission = _admission(jobs, followed={"done", "live"})
    worker = Worker()
    admission._groups = {"vision": worker}
    admission._on_job_event("MODIFIED", "pods", pod("done", "Running"))  # still holding: no pass yet
    admission._on_job_event("MODIFIED", "pods", pod("live", "Succeeded"))  # its job runs on
    assert worker.marked == 0
    admission._on_job_event("MODIFIED", "pods", pod("done", "Succeeded"))
    admission._on_job_event("DELETED", "pods", pod("done", "Running"))
    assert worker.marked == 2
    assert worker.later == []


def test_a_change_of_a_job_no_trigger_of_the_process_follows_runs_a_pass_only_as_a_backstop():
    jobs = {"mine": job("mine", finished=True), "theirs": job("theirs", finished=True)}
    admission = _admission(jobs, followed={"mine"})
    worker = Worker()
    admission._groups = {"vision": worker}
    admission._on_job_event("MODIFIED", "jobs", jobs["theirs"])
    admission._on_job_event("MODIFIED", "pods", pod("theirs", "Succeeded"))
    assert (worker.marked, worker.later) == (0, [BACKSTOP_SECONDS, BACKSTOP_SECONDS])
    admission._on_job_event("MODIFIED", "jobs", jobs["mine"])
    admission._on_job_event("MODIFIED", "pods", pod("mine", "Succeeded"))
    assert worker.marked == 2
