"""JobOperator through the real path: execute() defers, the trigger runs, execute_complete() decides."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest
from airflow.exceptions import AirflowException
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred
from controller_fixture import CONTROLLER
from task_doubles import FakeTI, StateStore

from airflow_jobs_plugin.airflow.operators import STATE_KEY, JobOperator
from airflow_jobs_plugin.cluster import watch as shared
from airflow_jobs_plugin.cluster.kube import JOBS, KubeClient
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.kinds.mpi import MPIJOBS
from airflow_jobs_plugin.jobs.spec import JobSpecError
from airflow_jobs_plugin.queueing.engines import pool as admission
from airflow_jobs_plugin.queueing.pools import POLICY_LABELS

from .conftest import RUNS

_runs = RUNS  # shared with the package's other modules (conftest.py says why)


def context_for(
    op: JobOperator, run_id: str, try_number: int, store: StateStore, max_tries: int | None = None
) -> dict:
    ti = FakeTI("nightly", op.task_id, run_id, -1, try_number, max_tries)
    return {"ti": ti, "task_state_store": store}


def deferral(op: JobOperator, context: dict) -> TaskDeferred:
    with pytest.raises(TaskDeferred) as info:
        op.execute(context)
    return info.value


def run_to_event(deferred: TaskDeferred, timeout: float = 60) -> dict:
    async def collect():
        try:
            return [e.payload async for e in deferred.trigger.run()]
        finally:
            await admission.shutdown()
            await shared.shutdown()

    (event,) = asyncio.run(asyncio.wait_for(collect(), timeout))
    return event


def jobs_of(cluster, op: JobOperator, run_id: str) -> list[dict]:
    from airflow_jobs_plugin.jobs.spec import TaskIdentity

    key = TaskIdentity("nightly", op.task_id, run_id).instance_key()

    async def go():
        client = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
        try:
            resource = MPIJOBS if op.workers > 1 else JOBS
            return (await client.list(resource, "default", label_selector=f"{labels.TASK_KEY}={key}"))[
                "items"
            ]
        finally:
            await client.close()

    return asyncio.run(go())


def operator(**kwargs) -> JobOperator:
    values = {
        "task_id": "train",
        "image": "registry.example/trainer:1",
        "group": "vision",
        "gpus": 1,
        "owner": "alice",
        "retry_backoff": 0.05,
    }
    values.update(kwargs)
    return JobOperator(**values)


def test_invalid_arguments_fail_at_parse_time_naming_the_argument():
    with pytest.raises(JobSpecError, match="gpus"):
        operator(gpus=-2)
    with pytest.raises(JobSpecError, match="image"):
        operator(image="Registry Example/trainer")
    with pytest.raises(JobSpecError, match=r"env\.EPOCHS"):
        operator(env={"EPOCHS": 3})


def test_templated_values_are_checked_after_rendering_not_at_parse_time():
    op = operator(image="registry.example/trainer:{{ ds_nodash }}")
    assert op.image.endswith("{{ ds_nodash }}")


def test_a_successful_job_returns_a_summary(cluster):
    # 200 simulated seconds at 100x: two real seconds, longer than the timestamps' one-second grain.
    op = operator(job_annotations={"sim.airflow-jobs.io/scenario": '{"main": {"run": 200}}'})
    run_id = f"run-{next(_runs)}"
    store = StateStore()
    deferred = deferral(op, context_for(op, run_id, 1, store))
    assert deferred.method_name == "execute_complete"
    assert store.get(STATE_KEY)["name"] == deferred.trigger.job_name
    _, kwargs = deferred.trigger.serialize()
    assert "token" not in str(kwargs).lower() and "image" not in kwargs  # no manifest, no secret
    result = op.execute_complete(context_for(op, run_id, 1, store), run_to_event(deferred))
    assert result["state"] == "SUCCEEDED" and result["kind"] == "Job" and result["attempts"] == 1
    assert result["job_name"] == deferred.trigger.job_name
    assert result["gpu_seconds"] > 0  # one GPU held from admission to completion


def test_a_failed_job_raises_with_state_reason_exit_code_and_log_tail(cluster):
    op = operator(
        job_annotations={"sim.airflow-jobs.io/scenario": '{"main": {"run": 1, "exit": 4, "logs": ["boom"]}}'},
        backoff_limit=0,
    )
    run_id = f"run-{next(_runs)}"
    store = StateStore()
    deferred = deferral(op, context_for(op, run_id, 1, store))
    event = run_to_event(deferred)
    with pytest.raises(AirflowFailException) as info:  # a non-zero exit is not retryable by default
        op.execute_complete(context_for(op, run_id, 1, store), event)
    message = str(info.value)
    assert "FAILED" in message and "worker-0=4" in message and "[worker-0] boom" in message


def _fatally_failed_first_try() -> tuple[JobOperator, str, StateStore]:
    """A task with retries=2 whose try 1 saw its job exit with code 3 (fatal) and raised."""
    op = operator(
        job_annotations={"sim.airflow-jobs.io/scenario": '{"main": {"run": 1, "exit": 3}}'},
        backoff_limit=0,
        retries=2,
    )
    run_id = f"run-{next(_runs)}"
    store = StateStore()
    event = run_to_event(deferral(op, context_for(op, run_id, 1, store, max_tries=2)))
    with pytest.raises(AirflowFailException):
        op.execute_complete(context_for(op, run_id, 1, store, max_tries=2), event)
    return op, run_id, store


def test_a_try_airflow_starts_after_a_fatal_failure_fails_at_once_without_a_job(cluster):
    # Airflow's scheduler can act on the deferral's stale executor event after the resumed try raised
    # AirflowFailException, and retry the task anyway: the job must not run again.
    op, run_id, store = _fatally_failed_first_try()
    with pytest.raises(AirflowFailException, match=r"(?s)try 1 of this task already failed.*worker-0=3"):
        op.execute(context_for(op, run_id, 2, store, max_tries=2))
    assert len(jobs_of(cluster, op, run_id)) == 1


def test_a_task_cleared_after_a_fatal_failure_runs_its_job_again(cluster):
    op, run_id, store = _fatally_failed_first_try()
    # The clear after try 1 set max_tries to 1 + retries.
    deferred = deferral(op, context_for(op, run_id, 2, store, max_tries=3))
    assert len(jobs_of(cluster, op, run_id)) == 2
    run_to_event(deferred)


def test_an_exit_code_declared_retryable_lets_airflow_retry_the_task(cluster):
    op = operator(
        job_annotations={"sim.airflow-jobs.io/scenario": '{"main": {"run": 1, "exit": 75}}'},
        backoff_limit=0,
        max_attempts=1,
        retryable_exit_codes=[75],
    )
    run_id = f"run-{next(_runs)}"
    store = StateStore()
    event = run_to_event(deferral(op, context_for(op, run_id, 1, store)))
    with pytest.raises(AirflowException) as info:
        op.execute_complete(context_for(op, run_id, 1, store), event)
    assert not isinstance(info.value, AirflowFailException)


def test_a_worker_crash_between_create_and_defer_is_reattached_by_the_retry(cluster, monkeypatch):
    # Still running when the retry comes (200 simulated seconds: two real ones); a job already done is
    # returned without deferring (test_a_retry_adopts_an_earlier_success_whose_result_was_never_returned).
    op = operator(job_annotations={"sim.airflow-jobs.io/scenario": '{"main": {"run": 200}}'})
    run_id = f"run-{next(_runs)}"
    store = StateStore()

    def crash(*_a, **_k):
        raise SystemExit("worker killed")

    with monkeypatch.context() as patch, pytest.raises(SystemExit):
        patch.setattr(op, "defer", crash)
        op.execute(context_for(op, run_id, 1, store))
    (created,) = jobs_of(cluster, op, run_id)
    deferred = deferral(op, context_for(op, run_id, 2, store))  # Airflow's retry: try 2
    assert deferred.trigger.job_name == created["metadata"]["name"]
    assert len(jobs_of(cluster, op, run_id)) == 1
    result = op.execute_complete(context_for(op, run_id, 2, store), run_to_event(deferred))
    assert result["state"] == "SUCCEEDED"


def test_a_retry_after_the_previous_job_ended_submits_a_new_job(cluster):
    op = operator(
        job_annotations={"sim.airflow-jobs.io/scenario": '{"main": {"run": 1, "exit": 1}}'}, backoff_limit=0
    )
    run_id = f"run-{next(_runs)}"
    store = StateStore()
    run_to_event(deferral(op, context_for(op, run_id, 1, store)))
    deferred = deferral(op, context_for(op, run_id, 2, store))
    names = {j["metadata"]["name"] for j in jobs_of(cluster, op, run_id)}
    assert len(names) == 2 and deferred.trigger.job_name in names
    run_to_event(deferred)


def test_an_mpi_operator_task_submits_an_mpijob(cluster):
    op = operator(
        task_id="train_mpi",
        workers=2,
        job_annotations={
            "sim.airflow-jobs.io/scenario": '{"main": {"run": 3}, "wait-for-workers": {"run": 1}}'
        },
    )
    run_id = f"run-{next(_runs)}"
    deferred = deferral(op, context_for(op, run_id, 1, StateStore()))
    assert deferred.trigger.kind == "MPIJob"
    (job,) = jobs_of(cluster, op, run_id)
    assert job["kind"] == "MPIJob" and job["metadata"]["labels"][labels.ATTEMPT] == "1"
    result = op.execute_complete({}, run_to_event(deferred))
    assert result["kind"] == "MPIJob" and result["state"] == "SUCCEEDED"


def test_a_retry_adopts_an_earlier_success_whose_result_was_never_returned(cluster):
    # The scheduler/triggerer race: the job succeeded, but the try that deferred was failed before its
    # execute_complete ran. The retry must not train again.
    op = operator(job_annotations={"sim.airflow-jobs.io/scenario": '{"main": {"run": 3}}'})
    run_id = f"run-{next(_runs)}"
    store = StateStore()
    first = deferral(op, context_for(op, run_id, 1, store))
    assert run_to_event(first)["status"] == "success"  # ... and the try is lost here
    # The retry returns that success from execute(), without deferring on the finished job (a trigger
    # that fires at once would offer Airflow 3.3.2's stale-event race the same window again).
    result = op.execute(context_for(op, run_id, 2, store))
    assert result["state"] == "SUCCEEDED" and result["job_name"] == first.trigger.job_name
    assert len(jobs_of(cluster, op, run_id)) == 1
    assert store.get(labels.TASK_STATE_DELIVERED)["try"] == 2


def _returned_success_of_first_try() -> tuple[JobOperator, str, StateStore, str]:
    """A task with retries=1 whose try 1 returned its job's success; the job's name."""
    op = operator(job_annotations={"sim.airflow-jobs.io/scenario": '{"main": {"run": 3}}'}, retries=1)
    run_id = f"run-{next(_runs)}"
    store = StateStore()
    first = deferral(op, context_for(op, run_id, 1, store, max_tries=1))
    op.execute_complete(context_for(op, run_id, 1, store, max_tries=1), run_to_event(first))
    return op, run_id, store, first.trigger.job_name


def test_a_task_cleared_after_a_delivered_success_trains_again(cluster):
    op, run_id, store, first = _returned_success_of_first_try()
    # A user cleared the task after try 1: Airflow set max_tries to 1 + retries.
    second = deferral(op, context_for(op, run_id, 2, store, max_tries=2))
    assert second.trigger.job_name != first
    run_to_event(second)


def test_a_success_returned_by_a_try_airflow_failed_anyway_is_adopted_not_trained_again(cluster):
    # The scheduler acted on the deferral's stale executor event while the resumed try was returning
    # its result, marked the task for retry, and dropped the result: the same run of the task goes on.
    op, run_id, store, first = _returned_success_of_first_try()
    result = op.execute(context_for(op, run_id, 2, store, max_tries=1))
    assert result["state"] == "SUCCEEDED" and result["job_name"] == first
    assert len(jobs_of(cluster, op, run_id)) == 1


def _failing_first(cluster, monkeypatch, verb: str, resource: str, codes: list[int]) -> list[int]:
    """Answer the next ``len(codes)`` matching requests with those error codes; returns what was served."""
    from airflow_jobs_sim.faults import error_for_code

    pending, served = list(codes), []
    decide = cluster.faults.error_for

    def error_for(v: str, r: str, *caller: str):
        # The worker's requests: the admission controller beside the cluster calls as itself.
        if v == verb and r == resource and pending and CONTROLLER.user not in caller:
            served.append(pending.pop(0))
            return error_for_code(served[-1], 0)
        return decide(v, r, *caller)

    monkeypatch.setattr(cluster.faults, "error_for", error_for)
    return served


def test_a_throttled_or_failing_api_at_submit_is_waited_out_within_the_try(cluster, monkeypatch):
    op = operator()
    run_id = f"run-{next(_runs)}"
    served = _failing_first(cluster, monkeypatch, "create", "jobs", [429, 503, 500])
    deferred = deferral(op, context_for(op, run_id, 1, StateStore()))  # try 1 defers: no Airflow retry
    assert served == [429, 503, 500]
    assert [j["metadata"]["name"] for j in jobs_of(cluster, op, run_id)] == [deferred.trigger.job_name]
    run_to_event(deferred)


def test_an_api_outage_longer_than_the_submit_back_off_fails_the_try_for_airflow_to_retry(
    cluster, monkeypatch
):
    from airflow_jobs_plugin.cluster.kube import KubeError
    from airflow_jobs_plugin.usecases import submission

    monkeypatch.setattr(submission, "SUBMIT_TRIES", 2)
    op = operator()
    run_id = f"run-{next(_runs)}"
    store = StateStore()
    _failing_first(cluster, monkeypatch, "list", "jobs", [503, 503])
    with pytest.raises(KubeError, match="503"):
        op.execute(context_for(op, run_id, 1, store))
    assert jobs_of(cluster, op, run_id) == []
    deferred = deferral(op, context_for(op, run_id, 2, store))
    assert len(jobs_of(cluster, op, run_id)) == 1
    run_to_event(deferred)


class _BrokenStore(StateStore):
    def set(self, key, value, **_):
        raise ConnectionError("state store unavailable")


def test_a_fatal_failure_stays_fatal_when_the_state_store_cannot_record_it():
    op = operator()
    event = {"status": "failed", "state": "FAILED", "reason": "ImagePull", "failure_class": "fatal"}
    context = context_for(op, "run-broken-store", 1, _BrokenStore())
    with pytest.raises(AirflowFailException, match="ImagePull"):
        op.execute_complete(context, {**event, "job_name": "train-a1", "kind": "Job"})
    result = op.execute_complete(context, {"status": "success", "job_name": "train-a1", "kind": "Job"})
    assert result["job_name"] == "train-a1"


# --- the deployment's quota pool ---


def create_policy(cluster, name: str, text: str) -> None:
    from airflow_jobs_plugin.cluster.kube import CONFIGMAPS

    async def go():
        client = await KubeClient.from_kubeconfig(cluster.kubeconfig_path)
        try:
            await client.create(
                CONFIGMAPS,
                "default",
                {"metadata": {"name": name, "labels": POLICY_LABELS}, "data": {"policy.yaml": text}},
            )
        finally:
            await client.close()

    asyncio.run(go())


@pytest.fixture
def deployed_pool(cluster, monkeypatch):
    """A deployment whose [airflow_jobs] quota_configmap names a pool; vision may not leave it, speech may."""
    name = f"pool-{next(_runs)}"
    create_policy(
        cluster,
        name,
        "groups:\n  vision: {gpus: 8, members: [alice]}\n  speech: {gpus: 8, opt_out: true}\n",
    )
    monkeypatch.setenv("AIRFLOW__AIRFLOW_JOBS__QUOTA_CONFIGMAP", name)
    return name


def test_a_task_that_names_no_pool_is_under_the_deployments_pool(cluster, deployed_pool):
    op = operator()
    run_id = f"run-{next(_runs)}"
    store = StateStore()
    deferred = deferral(op, context_for(op, run_id, 1, store))
    assert deferred.trigger.quota_configmap == deployed_pool
    event = run_to_event(deferred)
    assert event["status"] == "success"
    # The pool's rules apply to it: a user who is not a member of the group is refused at submit.
    stranger = operator(owner="mallory")
    with pytest.raises(AirflowFailException, match="mallory"):
        stranger.execute(context_for(stranger, f"run-{next(_runs)}", 1, StateStore()))


def test_leaving_the_deployments_pool_is_refused_unless_the_policy_allows_it_for_the_group(
    cluster, deployed_pool
):
    op = operator(quota_configmap="")
    run_id = f"run-{next(_runs)}"
    with pytest.raises(
        AirflowFailException,
        match=r"group 'vision' is under the quota pool 'pool-\d+' .* only the platform decides",
    ):
        op.execute(context_for(op, run_id, 1, StateStore()))
    assert jobs_of(cluster, op, run_id) == []
    allowed = operator(quota_configmap="", group="speech")
    deferred = deferral(allowed, context_for(allowed, f"run-{next(_runs)}", 1, StateStore()))
    assert deferred.trigger.quota_configmap is None


def test_a_pool_that_does_not_exist_fails_the_task_at_submit_naming_it(cluster, monkeypatch):
    op = operator(quota_configmap="quota-polcy")
    run_id = f"run-{next(_runs)}"
    with pytest.raises(AirflowFailException, match=r"'quota-polcy' .* does not exist in namespace 'default'"):
        op.execute(context_for(op, run_id, 1, StateStore()))
    assert jobs_of(cluster, op, run_id) == []
    # The same for a deployment setting with a typo.
    monkeypatch.setenv("AIRFLOW__AIRFLOW_JOBS__QUOTA_CONFIGMAP", "gpu-qouta")
    plain = operator()
    with pytest.raises(
        AirflowFailException, match=r"'gpu-qouta' \(named by \[airflow_jobs\] quota_configmap\)"
    ):
        plain.execute(context_for(plain, f"run-{next(_runs)}", 1, StateStore()))


def test_execute_complete_prints_the_log_lines_the_trigger_left_to_it_once(cluster, capsys):
    op = operator(
        job_annotations={
            "sim.airflow-jobs.io/scenario": '{"main": {"run": 1, "exit": 0, "logs": ["epoch 1", "epoch 2"]}}'
        },
    )
    run_id = f"run-{next(_runs)}"
    store = StateStore()
    event = run_to_event(deferral(op, context_for(op, run_id, 1, store)))
    pod = event["replicas"][0]["pod"]
    # As if the trigger had printed nothing of this run when it sealed: the marker says so.
    event["log_markers"] = [{"pod": pod, "container": "main", "label": "worker-0"}]
    capsys.readouterr()
    op.execute_complete(context_for(op, run_id, 1, store), event)
    printed = [line for line in capsys.readouterr().out.splitlines() if "[worker-0]" in line]
    assert [line.split("[worker-0] ")[1].split()[:2] for line in printed] == [["epoch", "1"], ["epoch", "2"]]


def test_execution_timeout_is_passed_to_defer_less_what_the_try_already_spent(cluster):
    op = operator(execution_timeout=timedelta(minutes=10))
    run_id = f"run-{next(_runs)}"
    context = context_for(op, run_id, 1, StateStore())
    context["ti"].start_date = datetime.now(timezone.utc) - timedelta(seconds=30)
    deferred = deferral(op, context)
    assert timedelta(minutes=9, seconds=20) <= deferred.timeout <= timedelta(minutes=9, seconds=30)
    # A task without execution_timeout defers without a timeout, as before.
    assert deferral(operator(), context_for(op, f"run-{next(_runs)}", 1, StateStore())).timeout is None


def test_a_timed_out_deferral_fails_naming_the_timeout_and_the_job_and_its_retry_runs_a_new_job(cluster):
    from airflow.sdk.exceptions import TaskDeferralTimeout

    op = operator(
        execution_timeout=timedelta(seconds=60),
        retries=1,
        job_annotations={"sim.airflow-jobs.io/scenario": '{"main": {"run": 360000}}'},
    )
    run_id = f"run-{next(_runs)}"
    store = StateStore()
    first = deferral(op, context_for(op, run_id, 1, store, max_tries=1))
    # What the scheduler's check_trigger_timeouts leaves for the worker that resumes the try.
    with pytest.raises(TaskDeferralTimeout) as failed:
        op.resume_execution("__fail__", {"error": "Trigger timeout"}, context_for(op, run_id, 1, store, 1))
    message = str(failed.value)
    assert "execution_timeout (0:01:00)" in message and first.trigger.job_name in message
    # The try's job is still live until the API server's cancel lands: the retry must not follow it.
    second = deferral(op, context_for(op, run_id, 2, store, max_tries=1))
    assert second.trigger.job_name != first.trigger.job_name
    assert len(jobs_of(cluster, op, run_id)) == 2


def test_a_trigger_failure_that_is_not_a_timeout_resumes_as_airflow_does(cluster):
    from airflow.sdk.exceptions import TaskDeferralError

    op = operator()
    with pytest.raises(TaskDeferralError):
        op.resume_execution(
            "__fail__", {"error": "Trigger failure"}, context_for(op, "run-x", 1, StateStore())
        )
