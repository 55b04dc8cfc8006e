"""A job Kueue admits is ordered by Kueue's priorities, not the pool's: priority= says so at parse time."""

from __future__ import annotations

import pytest

from airflow_jobs_plugin.jobs.spec import JobSpec, JobSpecError

BASE = {"image": "ghcr.io/acme/trainer:1", "group": "vision", "user": "alice", "gpus": 1}


def test_a_priority_on_a_job_kueue_admits_is_refused_naming_the_workload_priority_class():
    with pytest.raises(JobSpecError) as refused:
        JobSpec.build(**BASE, kueue_queue="team-a", priority=5)
    message = str(refused.value)
    assert message.startswith("priority: 5 has no effect on a job Kueue admits")
    assert "kueue.x-k8s.io/priority-class" in message


def test_a_workload_priority_class_label_is_how_a_kueue_job_gets_its_priority():
    spec = JobSpec.build(**BASE, kueue_queue="team-a", labels={"kueue.x-k8s.io/priority-class": "high"})
    assert spec.labels["kueue.x-k8s.io/priority-class"] == "high"


def test_a_priority_without_kueue_still_orders_the_pool():
    assert JobSpec.build(**BASE, priority=5).priority == 5
