"""End to end on the real control plane: the flagship example DAGs on production's Airflow (PostgreSQL,
the CeleryExecutor with a worker on Redis, two triggerers), their jobs on the real API server, Job
controller, scheduler and kubeflow MPI operator of ``scripts/cluster``, in a namespace of the test's own
(tests/e2e/plane_tenant.py: the shipped Roles, each component calling as its own service account, the
shipped quota policy; all of it removed afterwards).

kwok plays the plane's kubelet and runs no container: every pod follows the scenario annotation
(``sim.airflow-jobs.io/scenario``, docs/real-cluster.md), else the simulator's defaults (pull 1 s, run
5 s, the default log lines; an MPI worker runs until its launcher ends). The retraining DAG's evaluate
job and the torchrun job carry scenarios that end with the metrics their scripts write, so the XComs
downstream tasks read are there; the artifact store stays empty (no command runs), so ``is_better``
finds no production model and ``promote`` runs. The simulator's run of the same DAGs, whose commands do
run, is tests/e2e/test_example_dags.py.

Not run here: ``gpu_failures_and_retries``, whose outcomes (docs/demo.md's table) a scenario annotation
cannot give. Its failures come from flaky.py counting its runs in the artifact store across pods, job
attempts and task tries, a command kwok does not run; a scenario is stateless per pod instead. Its
``exit`` list is indexed by the container's restarts in place (``restartCount``: the simulator kubelet's
``exit_code(c.attempt)``), the product's Jobs run their pods with ``restartPolicy: Never``
(jobs/kinds/batch.py; podFailurePolicy requires it), so every run is a new pod at restart 0, from the
same template. So ``pod_restart_in_job``'s second pod would exit 1 as its first did and the job would fail
at its backoff limit, and ``job_resubmitted``'s next attempt, a copy of the previous Job with its pod
template and annotation (jobs/attempts.py, ``next_attempt``), would exit 75 again until its attempts run
out. ``fatal_exit_code`` (``{"main": {"exit": 3}}``) and ``missing_image`` (its ``:not-found`` tag, a
shorthand of the scenario language) could be played, and ``task_retry`` with an annotation templated on
``ti.try_number``, but the run would not end as the table says. Playing it needs a scenario keyed on the
pod's place in its Job or on the job's attempt (the label ``airflow-jobs.io/attempt`` the next attempt's
templates carry). ``gpu_quota_contention`` adds nothing the plane changes (its queue is the admission
controller's, tested on the plane in tests/plane_scenarios).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.e2e.plane_tenant import PlaneTenant
from tests.e2e.stack import Stack

pytestmark = [pytest.mark.slow, pytest.mark.real_cluster, pytest.mark.timeout(600)]

RETRAINING = "gpu_retraining"
DDP = "gpu_ddp_training"
RUN_TIMEOUT = 300
REAL_CLUSTER_ENV = "AIRFLOW_JOBS_TEST_KUBECONFIG"
PLANE_ENV = "AIRFLOW_JOBS_TEST_PLANE"


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    kubeconfig = os.environ.get(REAL_CLUSTER_ENV)
    if not kubeconfig or not os.environ.get(PLANE_ENV):
        pytest.skip(
            f"runs on scripts/cluster's plane only ({REAL_CLUSTER_ENV} and {PLANE_ENV}: scripts/test's "
            "real tier sets both), whose kwok plays the pods' scenarios; tests/e2e/test_example_dags.py "
            "runs the same DAGs on the simulator"
        )
    workdir = tmp_path_factory.mktemp("e2e-plane")
    stack = Stack(
        workdir,
        database="postgres",
        executor="CeleryExecutor",
        triggerers=2,
        plane=PlaneTenant(Path(kubeconfig), workdir / "accounts"),
    )
    try:
        stack.start()
        stack.wait_for_dags([RETRAINING, DDP], timeout=180)
        # Unpausing the daily DAG starts today's run at once (catchup is off).
        stack.airflow("dags", "unpause", RETRAINING)
        stack.airflow("dags", "unpause", DDP)
        stack.airflow("dags", "trigger", DDP)
        yield stack
    finally:
        stack.stop()
    assert stack.alive_groups() == [], "processes left running after the stack stopped"


def _first(events: list[str], pattern: str) -> int:
    return next((i for i, event in enumerate(events) if re.search(pattern, event)), -1)


def jobs_of(stack: Stack, dag_id: str, run_id: str) -> dict[str, list[str]]:
    """task id -> the names of the jobs (batch/v1 Jobs, MPIJobs) the product created for the run's
    tasks, read with the plane's admin kubeconfig (the MPI operator's launcher Job is the MPIJob's, not
    the task's)."""
    from kubernetes import client, config

    from airflow_jobs_plugin.jobs import labels

    assert stack.plane is not None
    api = config.new_client_from_config(str(stack.plane.admin_kubeconfig))
    namespace = stack.plane.namespace
    objects = [
        *client.BatchV1Api(api).list_namespaced_job(namespace).to_dict()["items"],
        *client.CustomObjectsApi(api).list_namespaced_custom_object(
            "kubeflow.org", "v2beta1", namespace, "mpijobs"
        )["items"],
    ]
    found: dict[str, list[str]] = {}
    for item in objects:
        metadata = item["metadata"]
        annotations = metadata.get("annotations") or {}
        if metadata.get("owner_references") or metadata.get("ownerReferences"):
            continue
        if annotations.get(labels.DAG_ID) == dag_id and annotations.get(labels.RUN_ID) == run_id:
            found.setdefault(annotations[labels.TASK_ID], []).append(metadata["name"])
    return found


def test_daily_retraining_runs_its_mpijob_on_the_plane_with_one_job_per_task(stack):
    run_id, state = stack.wait_for_run(RETRAINING, timeout=RUN_TIMEOUT)
    states = stack.task_states(RETRAINING, run_id)

    assert state == "success", f"{RETRAINING} {run_id} ended {state}: {states}\n" + stack.unsuccessful(
        RETRAINING, run_id
    )
    assert states == dict.fromkeys(("prepare_data", "train", "evaluate", "is_better", "promote"), "success")
    jobs = jobs_of(stack, RETRAINING, run_id)
    assert sorted(jobs) == ["evaluate", "prepare_data", "promote", "train"], jobs
    assert all(len(names) == 1 for names in jobs.values()), jobs
    # The MPI operator ran the launcher and both workers; each one's log reached the task log.
    train = stack.task_log(RETRAINING, run_id, "train")
    assert _first(train, r"^MPIJob \S+: SUCCEEDED") >= 0, "\n".join(train)
    for replica in ("launcher", "worker-0", "worker-1"):
        assert _first(train, rf"^\[{replica}\] ") >= 0, f"no line of {replica}:\n" + "\n".join(train)
    assert _first(stack.task_log(RETRAINING, run_id, "prepare_data"), r"^\[worker-0\] done$") >= 0
    evaluate = stack.task_log(RETRAINING, run_id, "evaluate")
    assert _first(evaluate, r"^\[worker-0\] METRIC accuracy=0\.91$") >= 0, "\n".join(evaluate)
    # is_better read evaluate's metrics from its termination message (XCom "result").
    is_better = stack.task_log(RETRAINING, run_id, "is_better")
    assert _first(is_better, r"promoting the candidate \(accuracy 0\.91\)") >= 0, "\n".join(is_better)


def test_torchrun_training_runs_its_indexed_job_on_the_plane_and_returns_rank_0s_metrics(stack):
    run_id, state = stack.wait_for_run(DDP, timeout=RUN_TIMEOUT)
    states = stack.task_states(DDP, run_id)

    assert state == "success", f"{DDP} {run_id} ended {state}: {states}\n" + stack.unsuccessful(DDP, run_id)
    assert states == {"train": "success", "report": "success"}
    jobs = jobs_of(stack, DDP, run_id)
    assert {task: len(names) for task, names in jobs.items()} == {"train": 1}, jobs
    train = stack.task_log(DDP, run_id, "train")
    # Both nodes ran and each one's log reached the task log under its own name. (Which states the log
    # shows before SUCCEEDED depends on when a triggerer picks the trigger up: the nodes run 5 s.)
    for node in ("node-0", "node-1"):
        assert _first(train, rf"^\[{node}\] train_ddp: epoch 3/3 loss=") >= 0, "\n".join(train)
    assert _first(train, r"^torchrun \S+: SUCCEEDED") >= 0, "\n".join(train)
    # Node 0's termination message came back as XCom "result" and report read it.
    report = stack.task_log(DDP, run_id, "report")
    assert _first(report, r"final loss 0\.5463 after 3 epochs on 8 GPUs") >= 0, report
