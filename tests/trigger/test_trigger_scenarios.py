"""JobTrigger against the simulated cluster: one scenario per lifecycle path.

Each test creates the job as the operator does (suspended, from a real manifest), runs the real
``JobTrigger.run()`` and reads the one event it yields and the lines it logged.
"""

from __future__ import annotations

import asyncio

from sim_fixtures import held_back
from task_doubles import the_api_server_answers_kills

from airflow_jobs_plugin.airflow.triggers import JobTrigger
from airflow_jobs_plugin.cluster.kube import JOBS, PODS
from airflow_jobs_plugin.cluster.objects import condition_true
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.kinds.mpi import MPIJOBS
from tests.patience import stretch

from .conftest import job_manifest, set_scenario, task_identity


async def run_trigger(trigger: JobTrigger, timeout: float = 60) -> list[dict]:
    async def collect():
        return [e.payload async for e in trigger.run()]

    return await asyncio.wait_for(collect(), timeout)


async def submit(client, manifest: dict) -> str:
    resource = MPIJOBS if manifest["kind"] == "MPIJob" else JOBS
    await client.create(resource, "default", manifest)
    return manifest["metadata"]["name"]


async def jobs_of_task(client, manifest: dict) -> list[dict]:
    resource = MPIJOBS if manifest["kind"] == "MPIJob" else JOBS
    key = manifest["metadata"]["labels"][labels.TASK_KEY]
    return (await client.list(resource, "default", label_selector=f"{labels.TASK_KEY}={key}"))["items"]


async def wait_for_state(cluster, name: str, predicate, timeout: float = 20) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        pods = [p for p in cluster.store.list("pods", "default") if name in p["metadata"]["name"]]
        if predicate(pods):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"pods of {name} never reached the expected state")


def running(pods: list[dict]) -> bool:
    return bool(pods) and all((p.get("status") or {}).get("phase") == "Running" for p in pods)


async def test_a_job_that_exits_zero_succeeds(client, capsys):
    # Held in its queue until the trigger follows it, and running long enough (stretched with the
    # machine's load) for the trigger to see it run.
    run = 50 * stretch()
    body = held_back(
        job_manifest(
            task_identity(),
            scenario={"main": {"pull": 1, "run": run, "exit": 0, "logs": ["epoch 1", "epoch 2"]}},
        )
    )
    name = await submit(client, body)
    events = await run_trigger(JobTrigger(job_name=name, namespace="default"))
    assert len(events) == 1
    (event,) = events
    assert event["status"] == "success", event
    assert event["state"] == "SUCCEEDED"
    text = capsys.readouterr().out
    # States are logged in lifecycle order (a fast cluster may pass SCHEDULING between two looks); a
    # job that is never stopped never reads TERMINATING, whichever of its streams arrives first.
    seen = [
        line.split(f"Job {name}: ")[1].split()[0].rstrip(":")
        for line in text.splitlines()
        if f"Job {name}: " in line
    ]
    order = ["QUEUED", "SCHEDULING", "STARTING", "RUNNING", "SUCCEEDED"]
    assert seen[0] == "QUEUED" and seen[-1] == "SUCCEEDED" and "RUNNING" in seen
    assert [order.index(s) for s in seen] == sorted(order.index(s) for s in seen)
    assert "[worker-0] epoch 1" in text and "[worker-0] epoch 2" in text


async def list_pods(client) -> list[dict]:
    return (await client.list(PODS, "default"))["items"]


async def test_an_exit_code_declared_retryable_starts_a_new_attempt(client, capsys):
    body = job_manifest(
        task_identity(), scenario={"main": {"run": 1, "exit": [3]}}, backoff_limit=0, env={"SEED": "17"}
    )
    name = await submit(client, body)
    trigger = JobTrigger(
        job_name=name, namespace="default", max_attempts=2, retry_backoff=0.05, retryable_exit_codes=[3]
    )
    (event,) = await run_trigger(trigger)
    assert event["status"] == "failed" and event["failure_class"] == "retryable"
    assert [a["attempt"] for a in event["attempts"]] == [1, 2]
    assert event["job_name"].endswith("-a2")
    first, second = sorted(await jobs_of_task(client, body), key=lambda j: j["metadata"]["name"])
    # The next attempt is a clone of the whole first one (the watch's cache keeps no env or volumes).
    pod_specs = [j["spec"]["template"]["spec"] for j in (first, second)]
    envs = [{e["name"]: e.get("value") for e in s["containers"][0]["env"]} for s in pod_specs]
    assert envs[1] == {**envs[0], "JOB_ATTEMPT": "2", "JOB_NAME": second["metadata"]["name"]}
    assert envs[1]["SEED"] == "17"
    assert pod_specs[1]["volumes"] == pod_specs[0]["volumes"] and pod_specs[0]["volumes"]


async def test_missing_image_fails_fast_with_an_image_pull_reason(client, capsys):
    body = job_manifest(task_identity(), image="registry.example/trainer:not-found")
    name = await submit(client, body)
    (event,) = await run_trigger(JobTrigger(job_name=name, namespace="default"))
    assert (event["state"], event["reason"]) == ("FAILED", "ImagePull")
    assert event["failure_class"] == "fatal"
    out = capsys.readouterr().out
    assert "ErrImagePull" in out or "ImagePullBackOff" in out
    # Ended through its own controller, so kubectl shows it Failed (not Suspended, as a queued job
    # looks), its pods are gone and its GPUs free; the product's verdict keeps the real reason.
    for _ in range(200):
        (job,) = await jobs_of_task(client, body)
        conditions = {c["type"]: c["status"] for c in job.get("status", {}).get("conditions", [])}
        if conditions.get("Failed") == "True":
            break
        await asyncio.sleep(0.05)
    assert conditions.get("Failed") == "True", job.get("status")
    assert job["spec"].get("suspend") is not True
    assert job["metadata"]["annotations"][labels.VERDICT] == "ImagePull"
    assert not [
        p for p in await list_pods(client) if p["metadata"]["labels"].get(labels.LEGACY_JOB_NAME) == name
    ]


async def test_a_rate_limited_pull_is_waited_out_not_failed(client):
    body = job_manifest(
        task_identity(),
        image="registry.example/trainer:rate-limited",
        scenario={"main": {"pull_failures": 1}},
    )
    name = await submit(client, body)
    (event,) = await run_trigger(JobTrigger(job_name=name, namespace="default"))
    assert event["status"] == "success", event


async def test_container_cannot_run_fails_with_that_reason(client):
    body = job_manifest(task_identity(), image="registry.example/trainer:cannot-run")
    name = await submit(client, body)
    (event,) = await run_trigger(JobTrigger(job_name=name, namespace="default"))
    assert (event["state"], event["reason"]) == ("FAILED", "ContainerCannotRun")
    assert event["failure_class"] == "fatal"


async def test_active_deadline_fails_the_job_as_timed_out(client):
    body = job_manifest(
        task_identity(), scenario={"main": {"run": None}}, active_deadline=30, schedule_timeout=10
    )
    name = await submit(client, body)
    (event,) = await run_trigger(JobTrigger(job_name=name, namespace="default"))
    assert (event["state"], event["reason"]) == ("FAILED", "DeadlineExceeded")


async def test_an_unschedulable_job_reports_the_schedulers_message_until_killed(client, capsys):
    # No node carries the label (yet): the scheduler says so and the job waits (a pod larger than any
    # node, by contrast, fails at once: tests/quota_shell/test_quota_shell_never_fits.py).
    body = job_manifest(task_identity(), node_selector={"pool": "h100"})
    name = await submit(client, body)
    trigger = JobTrigger(job_name=name, namespace="default")
    task = asyncio.ensure_future(run_trigger(trigger))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while "Unschedulable" not in (out := capsys.readouterr().out) and loop.time() < deadline:
        await asyncio.sleep(0.05)
        print(out, end="")
    task.cancel()
    assert "didn't match Pod's node affinity/selector" in out
    await trigger.on_kill()
    await the_api_server_answers_kills(client, "default", "failed")
    await ended_by_cancel(client, name)


async def test_a_lost_node_fails_the_attempt_and_a_new_attempt_succeeds(client, cluster):
    body = job_manifest(task_identity(), scenario={"main": {"run": 150}})
    name = await submit(client, body)
    trigger = JobTrigger(job_name=name, namespace="default", max_attempts=2, retry_backoff=0.05)
    task = asyncio.ensure_future(run_trigger(trigger))
    await wait_for_state(cluster, name, running)
    (pod,) = [p for p in cluster.store.list("pods", "default") if name in p["metadata"]["name"]]
    cluster.call(cluster.controllers.lose_node, pod["spec"]["nodeName"])
    try:
        (event,) = await task
    finally:
        cluster.call(cluster.controllers.restore_node, pod["spec"]["nodeName"])
    assert event["status"] == "success", event
    assert [a["attempt"] for a in event["attempts"]] == [1, 2]
    assert event["attempts"][0]["reason"] == "NodeLost"


async def test_an_evicted_pod_is_retried_as_a_new_attempt(client, cluster):
    body = job_manifest(task_identity(), scenario={"main": {"run": 150}})
    name = await submit(client, body)
    trigger = JobTrigger(job_name=name, namespace="default", max_attempts=2, retry_backoff=0.05)
    task = asyncio.ensure_future(run_trigger(trigger))
    await wait_for_state(cluster, name, running)
    (pod,) = [p for p in cluster.store.list("pods", "default") if name in p["metadata"]["name"]]
    cluster.call(cluster.controllers.evict_pod, "default", pod["metadata"]["name"])
    (event,) = await task
    assert event["status"] == "success", event
    assert event["attempts"][0]["reason"] == "Evicted"


async def test_an_mpi_job_goes_through_launcher_init_then_runs_to_success(client, capsys):
    body = job_manifest(task_identity(), workers=2, gpus=2)
    set_scenario(
        body,
        "launcher",
        # The init phase lasts 1.5 s here: long enough to be seen on a loaded machine, where a trigger
        # may look only every few hundred milliseconds; a 50 ms phase is not a state a user would see.
        {"wait-for-workers": {"run": 150}, "main": {"run": 5, "logs": ["mpirun: rank 0 done"]}},
    )
    name = await submit(client, body)
    (event,) = await run_trigger(JobTrigger(job_name=name, namespace="default", kind="MPIJob"))
    assert event["status"] == "success", event
    out = capsys.readouterr().out
    assert "launcher Init:0/1" in out
    assert "launcher PodInitializing" in out or "launcher Running" in out
    assert "workers 2/2" in out
    assert "[launcher] mpirun: rank 0 done" in out
    assert {r["role"] for r in event["replicas"]} == {"launcher", "worker"}
    # The final look reads the pods again; the end is logged once, on those fresh facts.
    assert out.count(f"MPIJob {name}: SUCCEEDED") == 1


async def test_a_crash_looping_mpi_worker_degrades_the_job_until_the_launcher_fails(client, capsys):
    # Workers restart on failure (CrashLoopBackOff); mpirun on the launcher notices the lost rank and
    # exits non-zero, which fails the job with the launcher's exit code.
    body = job_manifest(task_identity(), workers=2, gpus=1, backoff_limit=0)
    set_scenario(body, "launcher", {"main": {"run": 40, "exit": [1], "logs": ["mpirun: rank 1 lost"]}})
    set_scenario(body, "worker", {"main": {"run": 3, "exit": [2]}})
    name = await submit(client, body)
    (event,) = await run_trigger(JobTrigger(job_name=name, namespace="default", kind="MPIJob"))
    assert event["status"] == "failed" and event["state"] == "FAILED"
    assert event["exit_codes"].get("launcher") == 1
    assert "[launcher] mpirun: rank 1 lost" in event["log_tail"]
    out = capsys.readouterr().out
    assert "CrashLoopBackOff" in out
    assert f"MPIJob {name}: DEGRADED" in out or f"MPIJob {name}: RETRYING" in out


async def test_an_evicted_mpi_worker_fails_the_attempt_and_the_next_attempt_runs(client, cluster):
    body = job_manifest(task_identity(), workers=2, gpus=1)
    set_scenario(body, "launcher", {"main": {"run": 100}})
    name = await submit(client, body)
    trigger = JobTrigger(
        job_name=name, namespace="default", kind="MPIJob", max_attempts=2, retry_backoff=0.05
    )
    task = asyncio.ensure_future(run_trigger(trigger))
    await wait_for_state(cluster, f"{name}-worker", lambda pods: len(pods) == 2 and running(pods))
    cluster.call(cluster.controllers.evict_pod, "default", f"{name}-worker-1")
    (event,) = await task
    assert event["status"] == "success", event
    assert event["attempts"][0]["reason"] == "Evicted"


async def ended_by_cancel(client, name: str) -> dict:
    """Wait until the cancelled job ``name`` has failed through its deadline and its pods are gone; the
    job itself stays (until its TTL), carrying the cancel."""
    for _ in range(400):
        job = await client.get(JOBS, "default", name)
        failed = condition_true(job, "Failed")
        if failed and not [p for p in await list_pods(client) if name in p["metadata"]["name"]]:
            break
        await asyncio.sleep(0.05)
    assert job["metadata"]["annotations"][labels.VERDICT] == "Cancelled"
    assert failed and not [p for p in await list_pods(client) if name in p["metadata"]["name"]]
    return job


async def test_a_user_kill_ends_the_job_and_its_pods_and_keeps_it_cancelled(client, cluster):
    body = job_manifest(task_identity(), scenario={"main": {"run": None}})
    name = await submit(client, body)
    trigger = JobTrigger(job_name=name, namespace="default")
    task = asyncio.ensure_future(run_trigger(trigger))
    await wait_for_state(cluster, name, running)
    task.cancel()
    await trigger.on_kill()
    await the_api_server_answers_kills(client, "default", "failed")
    job = await ended_by_cancel(client, name)
    assert job["metadata"]["annotations"][labels.CANCELLED_BY].startswith("an Airflow user")


async def test_cleanup_after_a_triggerer_restart_never_deletes_the_job(client, cluster):
    body = job_manifest(task_identity(), scenario={"main": {"run": None}})
    name = await submit(client, body)
    trigger = JobTrigger(job_name=name, namespace="default")
    task = asyncio.ensure_future(run_trigger(trigger))
    await wait_for_state(cluster, name, running)
    task.cancel()
    await trigger.cleanup()
    assert (await client.get(JOBS, "default", name))["metadata"].get("deletionTimestamp") is None
    await trigger.on_kill()
    await the_api_server_answers_kills(client, "default", "failed")


async def test_a_trigger_rebuilt_from_serialize_mid_run_resumes_without_resubmitting(client, cluster):
    body = job_manifest(task_identity(), scenario={"main": {"run": 100}})
    name = await submit(client, body)
    first = JobTrigger(job_name=name, namespace="default", max_attempts=3)
    task = asyncio.ensure_future(run_trigger(first))
    await wait_for_state(cluster, name, running)
    task.cancel()  # the triggerer restarts: the trigger is gone mid-run
    classpath, kwargs = first.serialize()
    assert classpath == "airflow_jobs_plugin.airflow.triggers.JobTrigger"
    rebuilt = JobTrigger(**kwargs)
    (event,) = await run_trigger(rebuilt)
    assert event["status"] == "success"
    assert len(await jobs_of_task(client, body)) == 1
