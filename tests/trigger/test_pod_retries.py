"""A pod that fails and is replaced within its job, as the trigger reports it.

Its own cluster, whose clock runs slower as the machine is loaded: the RETRYING line lasts from the pod's
failure to its replacement's creation, the Job controller's pod back-off (``DefaultJobPodFailureBackOff``,
10 s, kubernetes ``pkg/controller/job/job_controller.go``), which a fixed 0.01 time scale made 0.1 s,
shorter than a look of the trigger on a machine loaded to 20.
"""

from __future__ import annotations

from sim_fixtures import cluster_fixture, held_back

from airflow_jobs_plugin.airflow.triggers import JobTrigger
from airflow_jobs_plugin.cluster.kube import PODS
from airflow_jobs_plugin.jobs import labels
from tests.patience import stretch

from .conftest import job_manifest, task_identity
from .test_trigger_scenarios import run_trigger, submit

cluster = cluster_fixture(nodes=1, time_scale=0.01 * stretch())


async def test_exit_one_with_backoff_limit_two_errors_retries_then_fails(client, capsys):
    # Held until the trigger follows it: its first pod's failure is seen, not found already replaced.
    body = held_back(
        job_manifest(
            task_identity(),
            scenario={"main": {"run": 2, "exit": [1], "logs": ["loss: nan"]}},
            backoff_limit=2,
        )
    )
    name = await submit(client, body)
    (event,) = await run_trigger(JobTrigger(job_name=name, namespace="default"))
    assert event["status"] == "failed"
    assert (event["state"], event["reason"]) == ("FAILED", "BackoffLimitExceeded")
    assert event["exit_codes"] == {"worker-0": 1}
    assert event["failure_class"] == "fatal"  # a non-zero exit is not retried at job level by default
    assert "[worker-0] loss: nan" in event["log_tail"]
    out = capsys.readouterr().out
    assert f"Job {name}: RETRYING" in out
    assert out.count("[worker-0] loss: nan") == 3  # every pod's log, the replaced ones too
    pods = [
        p
        for p in (await client.list(PODS, "default"))["items"]
        if p["metadata"]["labels"].get(labels.LEGACY_JOB_NAME) == name
    ]
    assert len(pods) == 3  # the first pod and backoff_limit=2 replacements
