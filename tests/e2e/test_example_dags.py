"""End to end: the example DAGs on a real Airflow (scheduler, dag-processor, triggerer, api-server)
against the simulated GPU cluster running the jobs' scripts as local processes.

Each test runs on two Airflows, one after the other: the demo's (SQLite, the LocalExecutor, one
triggerer) and production's shape (PostgreSQL, the CeleryExecutor with a worker on Redis, two
triggerers). One stack serves every test of a shape: its DAGs' runs go at the same time, as they would
on a shared cluster. Production's shape runs the DAGs that cover an MPIJob, a torchrun job and Airflow's
retries (the quota contention run adds nothing the executor or the database changes, and time).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.e2e.stack import Stack

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

RETRAINING = "gpu_retraining"
CONTENTION = "gpu_quota_contention"
FAILURES = "gpu_failures_and_retries"
DDP = "gpu_ddp_training"
RUN_TIMEOUT = 360
QUOTA_REASON = re.compile(r"QUEUED \((GroupQuota|UserQuota|BehindHead)\b")
SHAPES = {
    "demo": {},
    "production": {"database": "postgres", "executor": "CeleryExecutor", "triggerers": 2},
}
PRODUCTION_DAGS = (FAILURES, DDP)


@pytest.fixture(scope="module", params=sorted(SHAPES))
def stack(request, tmp_path_factory):
    stack = Stack(tmp_path_factory.mktemp(f"e2e-{request.param}"), **SHAPES[request.param])
    triggered = (CONTENTION, FAILURES, DDP) if request.param == "demo" else PRODUCTION_DAGS
    try:
        stack.start()
        stack.wait_for_dags([RETRAINING, *triggered], timeout=180)
        # Unpausing the daily DAG starts today's run at once (catchup is off).
        stack.airflow("dags", "unpause", RETRAINING)
        for dag_id in triggered:
            stack.airflow("dags", "unpause", dag_id)
            stack.airflow("dags", "trigger", dag_id)
        yield stack
    finally:
        stack.stop()
    assert stack.alive_groups() == [], "processes left running after the stack stopped"


def _first(events: list[str], pattern: str) -> int:
    for index, event in enumerate(events):
        if re.search(pattern, event):
            return index
    return -1


def test_daily_retraining_runs_to_success_and_streams_the_pods_logs(stack):
    run_id, state = stack.wait_for_run(RETRAINING, timeout=RUN_TIMEOUT)
    states = stack.task_states(RETRAINING, run_id)

    assert state == "success", f"{RETRAINING} {run_id} ended {state}: {states}\n" + stack.unsuccessful(
        RETRAINING, run_id
    )
    # The first run has no production model to beat, so the candidate is promoted.
    assert states == {
        "prepare_data": "success",
        "train": "success",
        "evaluate": "success",
        "is_better": "success",
        "promote": "success",
    }
    prepare = stack.task_log(RETRAINING, run_id, "prepare_data")
    assert any(e.startswith("[worker-0] prepare: shard 1/4") for e in prepare)
    train = stack.task_log(RETRAINING, run_id, "train")
    assert any(
        e.startswith("[launcher] train: epoch 6: gradients all-reduced across 4 rank(s)") for e in train
    )
    # The launcher's init containers (the DAG's fetch-data, then wait-for-workers) show while it starts:
    # the README's "STARTING (launcher Init:0/2, ...)" is what the task log says.
    launcher_init = _first(train, r"^MPIJob \S+: STARTING \(.*\blauncher Init:\d+/2\b")
    running = _first(train, r"^MPIJob \S+: RUNNING")
    assert 0 <= launcher_init < running, "\n".join(train)
    evaluate = stack.task_log(RETRAINING, run_id, "evaluate")
    assert any(re.match(r"\[worker-0\] METRIC accuracy=0\.\d+$", e) for e in evaluate), "\n".join(evaluate)
    # is_better compared the metrics evaluate's job wrote to its termination message (XCom "result").
    is_better = stack.task_log(RETRAINING, run_id, "is_better")
    assert any(
        re.search(r"candidate accuracy 0\.\d+|promoting the candidate \(accuracy 0\.\d+\)", e)
        for e in is_better
    )
    assert (stack.artifacts / "production" / "model.json").exists()


def test_torchrun_training_starts_every_node_streams_every_rank_and_returns_its_metrics(stack):
    run_id, state = stack.wait_for_run(DDP, timeout=RUN_TIMEOUT)
    states = stack.task_states(DDP, run_id)

    assert state == "success", f"{DDP} {run_id} ended {state}: {states}\n" + stack.unsuccessful(DDP, run_id)
    assert states == {"train": "success", "report": "success"}
    train = stack.task_log(DDP, run_id, "train")
    # Both nodes ran, each its 4 local ranks (global ranks 0-3 on node 0, 4-7 on node 1), and each
    # node's log reached the task log under its own name.
    assert any(e.startswith("[node-0] [rank 0] epoch 3/3 loss=") for e in train), "\n".join(train)
    assert any(e.startswith("[node-1] [rank 7] epoch 3/3 loss=") for e in train), "\n".join(train)
    assert any(e.startswith("[node-1] train_ddp: node 1: rendezvous at ") for e in train)
    running = _first(train, r"^torchrun \S+: RUNNING \(nodes 2/2 Running\)")
    succeeded = _first(train, r"^torchrun \S+: SUCCEEDED")
    assert 0 <= running < succeeded, "\n".join(train)
    # Rank 0's termination message came back as XCom "result" and report read it.
    report = stack.task_log(DDP, run_id, "report")
    assert any(re.search(r"final loss 0\.\d+ after 3 epochs on 8 GPUs", e) for e in report), report


def test_the_celery_worker_keeps_its_task_logs_on_its_own_disk_and_the_api_server_serves_them(stack):
    if stack.executor != "CeleryExecutor":
        pytest.skip("the LocalExecutor runs tasks in the scheduler's process tree, on its disk")
    run_id, _ = stack.wait_for_run(DDP, timeout=RUN_TIMEOUT)
    # report never defers: the worker alone wrote its log, on its disk and nowhere else.
    relative = Path(f"dag_id={DDP}", f"run_id={run_id}", "task_id=report", "attempt=1.log")
    assert (stack.worker_home / "logs" / relative).is_file()
    assert not (stack.home / "logs" / relative).exists()
    # The worker reads its own copy of the DAGs, not the scheduler's folder.
    dags = stack.worker_home / "dags"
    assert not dags.is_symlink() and dags.resolve() != stack.dags_folder.resolve()
    served = stack.served_log(DDP, run_id, "report", 1)
    assert served.read_from_worker(stack.worker_log_port), served.sources
    assert any(re.search(r"final loss 0\.\d+ after 3 epochs", str(r.get("event"))) for r in served.records)


def test_quota_contention_queues_jobs_with_a_quota_reason_before_they_run(stack):
    if stack.executor != "LocalExecutor":
        pytest.skip("production's shape runs the MPIJob, torchrun and retry DAGs only (module docstring)")
    run_id, state = stack.wait_for_run(CONTENTION, timeout=RUN_TIMEOUT)
    states = stack.task_states(CONTENTION, run_id)

    assert state == "success", f"{CONTENTION} {run_id} ended {state}: {states}\n" + stack.unsuccessful(
        CONTENTION, run_id
    )
    queued_then_ran = {}
    for task_id in states:
        events = stack.task_log(CONTENTION, run_id, task_id)
        queued = _first(events, QUOTA_REASON.pattern)
        running = _first(events, r"^Job \S+: RUNNING")
        if queued >= 0:
            assert running > queued, f"{task_id} ran before it was queued: {events}"
            queued_then_ran[task_id] = QUOTA_REASON.search(events[queued]).group(1)
        assert any(e.startswith("[worker-0] train: rank 0: epoch 30/30") for e in events), task_id
    # research holds 6 GPUs and its users ask for 12: whichever 4-GPU job comes second waits for the group.
    assert queued_then_ran, "no job was ever queued for quota"
    assert "GroupQuota" in queued_then_ran.values() or "BehindHead" in queued_then_ran.values()


def _fatal_failure_ended_the_task(stack, run_id: str, task_id: str, pattern: str) -> bool:
    """Exactly one try saw its job fail as ``pattern`` says and raised; no try after it ran a job.

    Airflow may start other tries on its own (scheduler races): an earlier one whose trigger fired
    before the scheduler processed its deferral never resumes, so it never raises; a later one, started
    because the scheduler acted on the deferral's stale executor event after the resumed try had failed,
    must fail at once, naming the fatal try, without creating a job."""
    _, last = stack.task_tries(FAILURES, run_id)[task_id]
    logs = {n: stack.task_log(FAILURES, run_id, task_id, n) for n in range(1, last + 1)}
    refused = {
        n for n, events in logs.items() if _first(events, r"^try \d+ of this task already failed") >= 0
    }
    raised = [
        n
        for n, events in logs.items()
        if n not in refused
        and _first(events, pattern) >= 0
        and _first(events, r"^Task failed with exception") >= 0
    ]
    if len(raised) != 1:
        return False
    (fatal,) = raised
    return all(
        n in refused
        and _first(logs[n], rf"^try {fatal} of this task already failed") >= 0
        and _first(logs[n], r"^created (Job|MPIJob) ") < 0
        for n in range(fatal + 1, last + 1)
    )


def test_failures_are_retried_at_the_right_level_and_fatal_ones_never(stack):
    run_id, state = stack.wait_for_run(FAILURES, timeout=RUN_TIMEOUT)
    tries = stack.task_tries(FAILURES, run_id)

    # Two tasks cannot succeed by design, so the run fails; each task ends as its scenario says.
    assert state == "failed"
    expected = {
        "pod_restart_in_job": "success",
        "job_resubmitted": "success",
        "task_retry": "success",
        "fatal_exit_code": "failed",
        "missing_image": "failed",
    }
    ended = {task: state for task, (state, _) in tries.items()}
    # A task that ended otherwise is told with its log, every try in order: what its jobs did.
    assert ended == expected, stack.unsuccessful(FAILURES, run_id, expected)
    # Level 1: the second run of the script is a new pod of the same job.
    restarted = stack.task_log(FAILURES, run_id, "pod_restart_in_job")
    first_run = _first(restarted, r"^\[worker-0\] flaky: run 1 \(job attempt 1\)")
    assert 0 <= first_run < _first(restarted, r"^\[worker-0\] flaky: run 2 \(job attempt 1\)"), "\n".join(
        restarted
    )
    # Level 2: a second attempt of the job, within the same task.
    resubmitted = stack.task_log(FAILURES, run_id, "job_resubmitted")
    assert _first(resubmitted, r"attempt 2 of 3 starts after") >= 0
    assert _first(resubmitted, r"^\[worker-0\] flaky: run 2 \(job attempt 2\)") >= 0
    # Level 3: both attempts of the first try failed; a later try of the task succeeded.
    assert tries["task_retry"][1] >= 2
    assert _first(stack.task_log(FAILURES, run_id, "task_retry"), r"attempt 2 of 2 starts after") >= 0
    # Fatal failures end the task at once, whatever its retries.
    assert _fatal_failure_ended_the_task(stack, run_id, "fatal_exit_code", r"exited with code 3")
    assert _fatal_failure_ended_the_task(stack, run_id, "missing_image", r"FAILED \(ImagePull")


def test_no_try_was_failed_on_airflows_stale_executor_event(stack):
    # Airflow 3.3.2's scheduler records each try it fails on a stale executor report as a "state mismatch"
    # (airflow-core 3.3.2 jobs/scheduler_job_runner.py, process_executor_events); the triggers report a
    # job that ended seconds after its deferral only once the deferral has settled (jobs/stale_event.py),
    # so none may be found once every run of the stack has finished, whatever the machine's load.
    for dag_id in (
        RETRAINING,
        *(PRODUCTION_DAGS if stack.executor == "CeleryExecutor" else (CONTENTION, FAILURES, DDP)),
    ):
        stack.wait_for_run(dag_id, timeout=RUN_TIMEOUT)
    mismatches = stack.query("SELECT dag_id, task_id, extra FROM log WHERE event = 'state mismatch'")
    assert mismatches == [], "\n".join(f"{dag}.{task}: {extra}" for dag, task, extra in mismatches)
