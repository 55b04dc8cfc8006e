"""The example DAGs as shipped: they import cleanly, use only the public API, fit the shipped quota
policy, and their job scripts do what the DAGs rely on."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from airflow_jobs_plugin.airflow.operators import JobOperator
from airflow_jobs_plugin.jobs.spec import total_gpus
from airflow_jobs_plugin.queueing import quota

ROOT = Path(__file__).resolve().parents[2]
DAGS = ROOT / "dags"
SCRIPTS = DAGS / "scripts"
# The public API is the package itself: `from airflow_jobs_plugin import JobOperator, JobSensor, JobTrigger`.
PUBLIC_MODULES = {"airflow_jobs_plugin"}
DAG_FILES = sorted(p for p in DAGS.glob("*.py") if p.name != "example_settings.py")


@pytest.fixture(scope="module")
def dagbag(monkeypatch_module):
    from airflow.dag_processing.dagbag import DagBag

    # The dag-processor puts the DAGs folder on sys.path (the shared settings module lives there).
    monkeypatch_module.syspath_prepend(str(DAGS))
    return DagBag(str(DAGS))


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def _jobs(dag) -> list[JobOperator]:
    return [t for t in dag.tasks if isinstance(t, JobOperator)]


def test_the_example_dags_import_without_errors(dagbag):
    assert dagbag.import_errors == {}
    assert set(dagbag.dag_ids) == {
        "gpu_retraining",
        "gpu_quota_contention",
        "gpu_failures_and_retries",
        "gpu_ddp_training",
    }


@pytest.mark.parametrize("path", DAG_FILES, ids=lambda p: p.name)
def test_a_dag_uses_only_the_public_api_of_the_provider(path):
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
    ours = {m for m in imported if m.split(".")[0] == "airflow_jobs_plugin"}
    assert ours and ours <= PUBLIC_MODULES


def test_the_retraining_pipeline_is_daily_and_promotes_only_after_the_comparison(dagbag):
    dag = dagbag.dags["gpu_retraining"]
    assert dag.schedule == "@daily"
    assert dag.catchup is False
    order = ["prepare_data", "train", "evaluate", "is_better", "promote"]
    for upstream, downstream in zip(order[:-1], order[1:], strict=True):
        assert dag.get_task(upstream).downstream_task_ids == {downstream}
    train = dag.get_task("train")
    assert train.workers == 2 and train.gpus >= 1
    assert dag.get_task("is_better").task_type == "_ShortCircuitDecoratedOperator"


def test_every_replica_of_the_training_job_fetches_the_data_in_an_init_container_first(dagbag):
    """What makes the launcher's and workers' Init:0/N and PodInitializing visible in the task log."""
    from airflow_jobs_sim.scenarios import ANNOTATION, parse_annotation

    train = dagbag.dags["gpu_retraining"].get_task("train")
    (fetch,) = train.init_containers
    assert fetch["name"] == "fetch-data" and fetch["command"][1].endswith("fetch_data.py")
    # On the simulated cluster the fetch takes a few seconds, like the real one.
    scenario = json.loads(train.job_annotations[ANNOTATION])
    assert scenario["fetch-data"]["run"] >= 2
    assert parse_annotation(train.job_annotations[ANNOTATION]) == scenario


@pytest.mark.parametrize(
    ("candidate", "production", "promote"),
    [(0.91, None, True), (0.91, 0.89, True), (0.91, 0.91, False), (0.88, 0.93, False)],
    ids=["no production model yet", "better", "equal", "worse"],
)
def test_the_candidate_is_promoted_only_if_it_beats_production(
    dagbag, tmp_path, candidate, production, promote
):
    production_dir = tmp_path / "production"
    if production is not None:
        production_dir.mkdir()
        (production_dir / "metrics.json").write_text(json.dumps({"accuracy": production}))
    is_better = dagbag.dags["gpu_retraining"].task_dict["is_better"].python_callable

    # The candidate's metrics arrive as evaluate's XCom "result" (its termination message).
    assert is_better({"accuracy": candidate}, str(production_dir)) is promote


def test_the_contention_dag_asks_each_group_for_more_than_its_quota(dagbag):
    policy = _shipped_policy()
    demand: dict[str, int] = {}
    for job in _jobs(dagbag.dags["gpu_quota_contention"]):
        demand[job.group] = demand.get(job.group, 0) + job.gpus * job.workers
    assert demand
    for group, gpus in demand.items():
        assert gpus > policy.groups[group].gpus, f"group {group} would never queue"


def test_every_example_job_fits_its_group_and_user_in_the_shipped_policy(dagbag):
    policy = _shipped_policy()
    for dag in dagbag.dags.values():
        for job in _jobs(dag):
            assert job.quota_configmap == "airflow-jobs-quota-policy", job.task_id
            group = policy.require_group(job.group)
            user_limit = min(group.gpus, group.users.get(job.user, group.user_gpus or group.gpus))
            needed = total_gpus(job._spec(templated=True))  # what submission charges
            assert needed <= user_limit, f"{dag.dag_id}.{job.task_id} could never run (OverQuota)"


def _shipped_policy() -> quota.QuotaPolicy:
    configmap = yaml.safe_load((ROOT / "helm-values" / "quota-policy.yaml").read_text())
    return quota.policy_from_configmap_data(configmap["data"])


# --- the jobs' scripts, run as the simulated cluster's exec mode runs them ---


def _run(script: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPTS / script), *args],
        env={**os.environ, "EXAMPLE_STEP_SECONDS": "0", **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_pipeline_scripts_hand_a_model_from_step_to_step_and_promote_it(tmp_path):
    run = tmp_path / "runs" / "r1"
    production = tmp_path / "production"
    assert _run("prepare.py", "--out", str(run)).returncode == 0
    train = _run(
        "train.py", "--run-dir", str(run), env={"JOB_ROLE": "launcher", "JOB_WORLD_SIZE": "2", "PATH": ""}
    )
    assert train.returncode == 0, train.stderr
    assert "train: rank 1: epoch 6/6" in train.stdout
    fetch = _run("fetch_data.py", "--run-dir", str(run), env={"JOB_ROLE": "worker", "JOB_RANK": "1"})
    assert fetch.returncode == 0, fetch.stderr
    assert "fetch: worker 1: shard 4/4 staged" in fetch.stdout
    evaluate = _run("evaluate.py", "--run-dir", str(run), "--result", str(tmp_path / "termination-log"))
    assert evaluate.returncode == 0
    assert json.loads((tmp_path / "termination-log").read_text()) == json.loads(
        (run / "metrics.json").read_text()
    )
    metric = [line for line in evaluate.stdout.splitlines() if line.startswith("METRIC accuracy=")]
    assert len(metric) == 1
    assert _run("promote.py", "--run-dir", str(run), "--production", str(production)).returncode == 0
    assert (production / "metrics.json").read_text() == (run / "metrics.json").read_text()


def test_the_training_job_runs_one_mpi_rank_per_gpu_and_each_worker_logs_its_own(dagbag, tmp_path):
    """The retraining DAG's train command, run as its launcher would, starts workers x GPUs ranks, and
    `airflow-jobs logs --rank N` (rank_log.worker_lines, slotsPerWorker = GPUs per worker) finds worker
    N's ranks in it: no worker's GPUs sit idle and no worker's log is empty."""
    from airflow_jobs_plugin.logs.rank_log import worker_lines

    train = dagbag.dags["gpu_retraining"].get_task("train")
    script_at = next(i for i, arg in enumerate(train.command) if str(arg).endswith("train.py"))
    args = [str(a) for a in train.command[script_at + 1 :]]
    args[args.index("--run-dir") + 1] = str(tmp_path / "run")
    run = _run(
        "train.py", *args, env={"JOB_ROLE": "launcher", "JOB_WORLD_SIZE": str(train.workers), "PATH": ""}
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    for worker in range(train.workers):
        mine = worker_lines(lines, worker, train.gpus)
        assert mine, f"worker {worker} has no line in:\n{run.stdout}"
        ranks = {int(line.split("]", 1)[0].removeprefix("[rank ")) for line in mine}
        assert ranks == set(range(worker * train.gpus, (worker + 1) * train.gpus)), mine


def test_the_fetch_script_fails_clearly_when_the_data_was_never_prepared(tmp_path):
    fetch = _run("fetch_data.py", "--run-dir", str(tmp_path / "runs" / "missing"))
    assert fetch.returncode == 1
    assert "data.json is missing: did prepare_data run for this run?" in fetch.stderr


@pytest.mark.parametrize(
    ("fail_times", "exit_code", "expected_exits"),
    [(0, 1, [0, 0]), (1, 1, [1, 0]), (2, 75, [75, 75, 0])],
    ids=["never fails", "fails once", "fails twice with a retryable code"],
)
def test_the_flaky_script_fails_its_first_runs_then_succeeds(tmp_path, fail_times, exit_code, expected_exits):
    state = tmp_path / "task.runs"
    exits = [
        _run(
            "flaky.py", "--state", str(state), "--fail-times", str(fail_times), "--exit-code", str(exit_code)
        ).returncode
        for _ in expected_exits
    ]
    assert exits == expected_exits
