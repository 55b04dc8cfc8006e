"""The example DAGs' jobs on a real control plane: the retraining MPIJob through the kubeflow MPI
operator, torchrun's Indexed Job and headless Service through the Job controller, a fatal exit code and
a retried one.

Each job is the DAG's own operator, parsed from dags/ as the dag-processor parses it and run as a worker
and the triggerer run it; the task log is what the trigger logs. On the plane the pods play the
scenario annotation through kwok (the images are never pulled), on the simulator the same annotation.
"""

from __future__ import annotations

import sys
from datetime import datetime, timedelta, timezone

import pytest
from airflow.sdk.exceptions import AirflowFailException
from task_doubles import task_context

from airflow_jobs_plugin.cluster.kube import JOBS
from airflow_jobs_plugin.cluster.resources import SERVICES
from tests.patience import stretch

from .plane import TaskLog, create_or_replace, defer, ensure_namespace, follow, on_cluster, scenario, shipped

pytestmark = [pytest.mark.real_cluster, pytest.mark.timeout(900)]

ROOT_DAGS = __import__("pathlib").Path(__file__).resolve().parents[2] / "dags"
NAMESPACE = "plane-examples"
# A run of its own per session: job names are deterministic, and a finished job of an earlier session's
# run would be adopted instead of a new one being created.
RUN_ID = f"manual__{datetime.now(timezone.utc).isoformat()}"


@pytest.fixture(scope="module")
def dags(cluster):
    """The example DAGs as the dag-processor parses them, for jobs in this module's namespace, with the
    shipped quota policy and the artifact claim they mount."""
    from airflow.dag_processing.dagbag import DagBag

    real = not getattr(cluster, "simulated", True)

    async def prepare(client) -> None:
        await ensure_namespace(client, NAMESPACE)
        for doc in shipped("quota-policy.yaml"):
            await create_or_replace(client, doc, NAMESPACE)
        for doc in shipped("example-artifacts-claim.yaml"):
            await create_or_replace(client, doc, NAMESPACE, replace=False)
        if real:
            # The claim binds to a volume of its own (no provisioner on the plane); kwok mounts nothing.
            volume = {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": f"{NAMESPACE}-ml-artifacts"},
                "spec": {
                    "capacity": {"storage": "50Gi"},
                    "accessModes": ["ReadWriteMany"],
                    "hostPath": {"path": f"/tmp/{NAMESPACE}-artifacts"},
                    "claimRef": {"namespace": NAMESPACE, "name": "ml-artifacts"},
                },
            }
            await create_or_replace(client, volume, replace=False)

    on_cluster(cluster.kubeconfig_path, prepare)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AIRFLOW_JOBS_EXAMPLE_NAMESPACE", NAMESPACE)
        # The data fetch of the training job's init containers: seconds of the cluster's clock.
        patch.setenv("AIRFLOW_JOBS_EXAMPLE_FETCH_SECONDS", "3")
        # The training nodes follow their scenario on both clusters: their run is the RUNNING the tests
        # assert was seen, so it lasts about 5 s of real time stretched with the machine's load, as the
        # waits do (the simulator here runs at 0.05 real seconds per scenario second, the plane at 1).
        patch.setenv("AIRFLOW_JOBS_EXAMPLE_TRAIN_SECONDS", str(round(5 * stretch() / (1 if real else 0.05))))
        patch.syspath_prepend(str(ROOT_DAGS))
        patch.delitem(sys.modules, "example_settings", raising=False)
        bag = DagBag(str(ROOT_DAGS))
        assert bag.import_errors == {}
        yield bag.dags
        sys.modules.pop("example_settings", None)


def the_task(dags, dag_id: str, task_id: str, try_number: int = 1):
    """The DAG's operator and the context a worker hands it, its templates rendered."""
    op = dags[dag_id].get_task(task_id)
    context = task_context(dag_id, task_id, run_id=RUN_ID, try_number=try_number)
    context.update(run_id=RUN_ID, task=op, dag=dags[dag_id])
    op.render_template_fields(context)
    return op, context


def test_the_retraining_mpijob_runs_through_the_mpi_operator_with_the_launchers_init_phases(dags, capsys):
    log = TaskLog(capsys)
    op, context = the_task(dags, "gpu_retraining", "train")

    event = follow(defer(op, context))

    assert event["status"] == "success", event
    assert event["kind"] == "MPIJob" and event["state"] == "SUCCEEDED", event
    # Every replica fetches the data first; the launcher then waits for the workers' names: its two init
    # containers show in the task log before it runs (README, "STARTING (launcher Init:0/2, ...)").
    launcher_init = log.first(r"^MPIJob \S+: STARTING \(.*\blauncher Init:[01]/2\b")
    workers_init = log.first(r"^MPIJob \S+: STARTING \(.*\bworkers [12]/2 Init:0/1\b")
    running = log.first(r"^MPIJob \S+: RUNNING \(launcher Running, workers 2/2 Running\)")
    succeeded = log.first(r"^MPIJob \S+: SUCCEEDED")
    assert 0 <= workers_init < running, log
    assert 0 <= launcher_init < running < succeeded, log
    # Every replica's log reached the task log under its own name.
    for replica in ("launcher", "worker-0", "worker-1"):
        assert log.first(rf"^\[{replica}\] ") >= 0, f"no line of {replica}:\n{log}"


def test_the_torchrun_job_runs_every_node_of_its_indexed_job_behind_a_headless_service(cluster, dags, capsys):
    log = TaskLog(capsys)
    op, context = the_task(dags, "gpu_ddp_training", "train")

    trigger = defer(op, context)

    async def objects(client):
        job = await client.get(JOBS, NAMESPACE, trigger.job_name)
        return job, await client.get(SERVICES, NAMESPACE, trigger.job_name)

    job, service = on_cluster(cluster.kubeconfig_path, objects)
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["parallelism"] == job["spec"]["completions"] == 2
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    event = follow(trigger)
    assert event["status"] == "success", event
    assert event["kind"] == "torchrun" and event["state"] == "SUCCEEDED", event
    # The trigger may start following after the first node finished (the controller admits the job
    # before the trigger's first look, and the DAG's run times do not stretch with the machine's load).
    running = log.first(r"^torchrun \S+: RUNNING \(nodes (2/2 Running|1/2 Completed, 1/2 Running)\)")
    succeeded = log.first(r"^torchrun \S+: SUCCEEDED")
    assert 0 <= running < succeeded, log
    assert log.first(r"^\[node-0\] ") >= 0 and log.first(r"^\[node-1\] ") >= 0, log


def test_a_fatal_exit_code_fails_the_task_at_once_naming_the_code(dags, capsys):
    log = TaskLog(capsys)
    op, context = the_task(dags, "gpu_failures_and_retries", "fatal_exit_code")
    # What flaky.py does on its first run (--exit-code 3): the pod exits 3.
    op.job_annotations = scenario(main={"run": 1, "exit": 3, "logs": ["flaky: run 1"]})

    event = follow(defer(op, context))

    assert event["status"] == "failed" and event["state"] == "FAILED", event
    assert event["exit_codes"] == {"worker-0": 3}, event
    assert [a["attempt"] for a in event["attempts"]] == [1], event["attempts"]
    with pytest.raises(AirflowFailException, match="exited with code 3"):
        op.execute_complete(context, event)
    assert log.first(r"^\[worker-0\] flaky: run 1") >= 0, log


def test_a_retryable_exit_code_submits_a_second_attempt_of_the_job(dags, capsys):
    log = TaskLog(capsys)
    op, context = the_task(dags, "gpu_failures_and_retries", "job_resubmitted")
    # Every run exits 75 (EX_TEMPFAIL, declared retryable): two attempts, a short back-off.
    op.job_annotations = scenario(main={"run": 1, "exit": 75})
    op.max_attempts = 2
    op.retry_backoff = timedelta(seconds=1)

    event = follow(defer(op, context))

    assert event["status"] == "failed", event
    assert [a["attempt"] for a in event["attempts"]] == [1, 2], event["attempts"]
    assert [a["exit_codes"] for a in event["attempts"]] == [{"worker-0": 75}] * 2, event["attempts"]
    assert event["job_name"].endswith("-a2"), event
    assert log.first(r"attempt 2 of 2 starts after") >= 0, log
