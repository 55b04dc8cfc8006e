"""Which jobs Kueue owns and what its Workload says about a queued job (airflow_jobs_plugin.queueing.kueue)."""

from __future__ import annotations

from airflow_jobs_plugin.jobs.action_rules import Action, facts_of, refusal
from airflow_jobs_plugin.queueing import kueue


def job(queue: str | None = "team-a", owner_kind: str | None = None) -> dict:
    meta: dict = {"name": "train", "labels": {kueue.QUEUE_NAME_LABEL: queue} if queue else {}}
    if owner_kind:
        meta["ownerReferences"] = [{"kind": owner_kind, "name": "parent", "controller": True}]
    return {"kind": "Job", "metadata": meta, "spec": {"suspend": True}}


def workload(*conditions: tuple[str, str, str, str], cq: str | None = None) -> dict:
    status: dict = {
        "conditions": [{"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in conditions]
    }
    if cq:
        status["admission"] = {"clusterQueue": cq}
    return {"metadata": {"name": "job-train-abcde"}, "spec": {"queueName": "team-a"}, "status": status}


def test_a_job_naming_a_local_queue_is_kueues():
    assert kueue.manages(job())
    assert not kueue.manages(job(queue=None))


def test_an_mpijobs_launcher_belongs_to_its_parent_not_to_kueue_directly():
    assert not kueue.manages(job(owner_kind="MPIJob"))


def test_the_queue_is_the_tasks_then_the_deployments_then_kueues_default_when_it_manages_all():
    assert kueue.choose_queue("mine", "deployed", True) == "mine"
    assert kueue.choose_queue(None, "deployed", False) == "deployed"
    assert kueue.choose_queue(None, "", True) == "default"
    assert kueue.choose_queue(None, "", False) is None


def test_a_job_without_a_workload_yet_is_submitted():
    status = kueue.queue_status(job(), None)
    assert status.reason == kueue.PENDING and "LocalQueue team-a" in status.message


def test_waiting_for_quota_carries_kueues_message():
    msg = "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor f, 4 more needed"
    status = kueue.queue_status(job(), workload(("QuotaReserved", "False", "Pending", msg)))
    assert status.reason == kueue.PENDING
    assert status.message == f"Kueue: {msg} (LocalQueue team-a)"


def test_a_missing_local_queue_is_inadmissible():
    status = kueue.queue_status(
        job(), workload(("QuotaReserved", "False", "Inadmissible", "LocalQueue team-a doesn't exist"))
    )
    assert (status.reason, status.message) == (kueue.INADMISSIBLE, "Kueue: LocalQueue team-a doesn't exist")


def test_quota_reserved_reads_as_reserved_with_its_cluster_queue():
    status = kueue.queue_status(
        job(),
        workload(
            ("QuotaReserved", "True", "QuotaReserved", ""), ("Admitted", "True", "Admitted", ""), cq="cq"
        ),
    )
    assert status == kueue.KueueStatus(kueue.RESERVED, "Kueue: admitted by ClusterQueue cq")


def test_an_evicted_workload_is_requeued_with_kueues_reason():
    status = kueue.queue_status(
        job(),
        workload(("Evicted", "True", "Preempted", "Preempted to accommodate a workload (UID: u, JobUID: j)")),
    )
    assert status.reason == kueue.REQUEUED
    assert "evicted (Preempted): Preempted to accommodate a workload" in status.message
    assert status.evicted_for == "Preempted"


def test_an_eviction_for_a_pods_ready_timeout_carries_that_cause():
    status = kueue.queue_status(
        job(),
        workload(("Evicted", "True", "PodsReadyTimeout", "Exceeded the PodsReady timeout ns/wl")),
    )
    assert (status.reason, status.evicted_for) == (kueue.REQUEUED, "PodsReadyTimeout")


def test_stop_and_resume_of_a_kueue_job_are_refused_and_cancel_is_not():
    facts = facts_of(job(), finished=False)
    assert "queued by Kueue (LocalQueue team-a)" in (refusal(Action.STOP, facts) or "")
    assert refusal(Action.CANCEL, facts) is None


def test_a_job_follows_only_its_own_workload_from_the_watchs_index():
    from airflow_jobs_plugin.queueing.engines.kueue import _WorkloadSource

    source = _WorkloadSource(None, "default", lambda name: None)  # type: ignore[arg-type]
    mine = {
        **workload(cq="cq"),
        "metadata": {"name": "job-train-abcde", "labels": {kueue.JOB_UID_LABEL: "u1"}},
    }
    other = {**workload(), "metadata": {"name": "job-eval-fghij", "labels": {kueue.JOB_UID_LABEL: "u2"}}}
    for obj in (mine, other):
        source.watch._apply(admission_workloads(), "ADDED", obj)  # noqa: SLF001 - the watch's own path
    train = {"metadata": {"uid": "u1"}}
    assert source.of(train)["metadata"]["name"] == "job-train-abcde"
    source.watch._apply(admission_workloads(), "DELETED", mine)  # noqa: SLF001
    assert source.of(train) is None
    assert source.of({"metadata": {"uid": "u3"}}) is None


def admission_workloads():
    from airflow_jobs_plugin.cluster.kube import WORKLOADS

    return WORKLOADS


def test_the_deployment_says_whether_kueue_manages_every_job_the_way_airflow_spells_booleans(monkeypatch):
    import pytest

    from airflow_jobs_plugin import config

    for spelled, meant in (("True", True), ("t", True), ("1", True), ("false", False), ("0", False)):
        monkeypatch.setenv("AIRFLOW__AIRFLOW_JOBS__KUEUE_MANAGES_ALL_JOBS", spelled)
        assert config.get_bool("kueue_manages_all_jobs") is meant
    monkeypatch.setenv("AIRFLOW__AIRFLOW_JOBS__KUEUE_MANAGES_ALL_JOBS", "maybe")
    with pytest.raises(ValueError, match="kueue_manages_all_jobs: must be True or False"):
        config.get_bool("kueue_manages_all_jobs")


def test_a_workload_without_its_queue_name_is_told_by_its_jobs_local_queue():
    unnamed = workload(("QuotaReserved", "False", "Pending", "waiting for quota"))
    del unnamed["spec"]["queueName"]
    status = kueue.queue_status(job(), unnamed)
    assert "(LocalQueue team-a)" in status.message, status.message
    assert "LocalQueue )" not in kueue.queue_status({}, unnamed).message
