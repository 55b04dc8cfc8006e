"""The simulated Job controller's Indexed completion mode (kubernetes/kubernetes 1.32
``pkg/controller/job/indexed_job_utils.go``, ``job_controller.go`` ``manageJob``): one pod per index with
the index as annotation, label, hostname and ``JOB_COMPLETION_INDEX``; a failed index is replaced under
the same index; the Job completes when every index has succeeded."""

from __future__ import annotations

from datetime import timedelta

from airflow_jobs_sim.controllers.job import (
    COMPLETION_INDEX_KEY,
    CreatePod,
    format_indexes,
    parse_indexes,
    plan_job,
)
from test_ctrl_job import T0, cond, job, job_pod


def indexed(**spec) -> dict:
    return job(completionMode="Indexed", **{"completions": 2, "parallelism": 2, **spec})


def index_pod(index: int, phase: str = "Running", **kwargs) -> dict:
    pod = job_pod(f"train-{index}-abcde", phase, **kwargs)
    pod["metadata"]["annotations"] = {COMPLETION_INDEX_KEY: str(index)}
    pod["metadata"]["labels"] = {COMPLETION_INDEX_KEY: str(index)}
    return pod


def created(plan) -> list[dict]:
    return [a.pod for a in plan.actions if isinstance(a, CreatePod)]


def test_each_index_gets_one_pod_with_its_index_hostname_and_variable():
    pods = created(plan_job(indexed(), [], T0, suffix=lambda: "abcde"))
    assert [p["metadata"]["name"] for p in pods] == ["train-0-abcde", "train-1-abcde"]
    for i, pod in enumerate(pods):
        meta = pod["metadata"]
        assert meta["generateName"] == f"train-{i}-"
        assert meta["annotations"][COMPLETION_INDEX_KEY] == str(i)
        assert meta["labels"][COMPLETION_INDEX_KEY] == str(i)
        assert pod["spec"]["hostname"] == f"train-{i}"
        (var,) = [e for e in pod["spec"]["containers"][0]["env"] if e["name"] == "JOB_COMPLETION_INDEX"]
        assert var["valueFrom"]["fieldRef"]["fieldPath"] == f"metadata.labels['{COMPLETION_INDEX_KEY}']"


def test_an_author_set_completion_index_variable_is_left_alone():
    spec = indexed()
    spec["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "JOB_COMPLETION_INDEX", "value": "7"}
    ]
    (pod, _) = created(plan_job(spec, [], T0, suffix=lambda: "abcde"))
    assert pod["spec"]["containers"][0]["env"] == [{"name": "JOB_COMPLETION_INDEX", "value": "7"}]


def test_a_failed_index_is_replaced_under_the_same_index():
    counted = plan_job(indexed(), [index_pod(0), index_pod(1, "Failed", exit_code=1)], T0)
    assert counted.status["failed"] == 1 and not created(counted)  # the pod re-creation back-off first
    later = plan_job(
        indexed(status=counted.status),
        [index_pod(0), index_pod(1, "Failed", exit_code=1, finalizer=False)],
        T0 + timedelta(minutes=5),
        memory=counted.memory,
        suffix=lambda: "fghij",
    )
    (replacement,) = created(later)
    assert replacement["metadata"]["name"] == "train-1-fghij"
    assert replacement["metadata"]["annotations"][COMPLETION_INDEX_KEY] == "1"
    assert replacement["spec"]["hostname"] == "train-1"


def test_the_job_completes_when_every_index_succeeded():
    first = plan_job(indexed(), [index_pod(0, "Succeeded"), index_pod(1)], T0)
    assert first.status["completedIndexes"] == "0" and first.status["succeeded"] == 1
    assert cond(first, "SuccessCriteriaMet") is None and not created(first)
    # The sync that finds the last index done writes SuccessCriteriaMet with the pod not yet counted
    # (uncountedTerminatedPods); the next one counts it and completes the Job.
    met = plan_job(
        indexed(status=first.status),
        [index_pod(0, "Succeeded", finalizer=False), index_pod(1, "Succeeded")],
        T0,
        memory=first.memory,
    )
    assert cond(met, "SuccessCriteriaMet")["status"] == "True" and cond(met, "Complete") is None
    assert met.status["completedIndexes"] == "0" and met.status["succeeded"] == 1
    assert len(met.status["uncountedTerminatedPods"]["succeeded"]) == 1
    done = plan_job(
        indexed(status=met.status),
        [index_pod(0, "Succeeded", finalizer=False), index_pod(1, "Succeeded")],
        T0,
        memory=met.memory,
    )
    assert done.status["completedIndexes"] == "0-1" and done.status["succeeded"] == 2
    assert cond(done, "Complete")["status"] == "True"


def test_completed_indexes_use_the_controllers_interval_form():
    assert format_indexes({0, 1, 2, 4, 6, 7}) == "0-2,4,6-7"
    assert parse_indexes("0-2,4,6-7") == {0, 1, 2, 4, 6, 7}
    assert format_indexes(set()) == "" and parse_indexes("") == set()
