"""Triggerer failover on a production-shaped Airflow: PostgreSQL, the LocalExecutor, two triggerers.

The triggerer following a job is SIGKILLed (its whole process group: the supervisor and its trigger
runner), as a lost node ends it; the other triggerer takes the trigger over and the task ends as the job
does, with one job, no pod replaced, and the job's every log line in the task log.

How Airflow hands a dead triggerer's triggers over (apache-airflow-core 3.3.2):

* ``airflow/jobs/triggerer_job_runner.py``: every loop of ``TriggerRunnerSupervisor.run_once`` calls
  ``load_triggers`` (about once a second), which calls ``Trigger.assign_unassigned`` and then runs
  exactly the triggers ``Trigger.ids_for_triggerer`` names for its own job id; ``heartbeat`` writes
  the triggerer's ``job.latest_heartbeat`` every ``[triggerer] job_heartbeat_sec``.
* ``airflow/models/trigger.py``: ``assign_unassigned`` takes the triggers whose ``trigger.triggerer_id``
  is NULL or names no live triggerer, a live one being a ``job`` row of type ``TriggererJob``, not ended,
  whose ``latest_heartbeat`` is younger than ``[triggerer] triggerer_health_check_threshold``.

So which triggerer follows a task's job is ``trigger.triggerer_id`` of the task instance's
``trigger_id``, a ``job.id``; the ``job`` table has the hostname but no process id
(``airflow/jobs/job.py``), so the stack learns each triggerer's id as it starts them one by one. A
killed triggerer's triggers move ``triggerer_health_check_threshold`` after its last heartbeat.

What a new triggerer prints of a running job's log: the trigger starts again from its serialized
arguments, which hold no log cursor (airflow_jobs_plugin/logs/logcursor.py keeps it in the trigger's
memory), so it reads each container from its first line. A line written before the kill may therefore
be in the task log twice (the dead triggerer may have printed it); a line written after it, once.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.e2e.stack import Stack

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

DAGS = Path(__file__).with_name("failover_dags")
LINES = 120
EVERY = 0.5
# Small, so a takeover comes seconds after the kill; not so small that a triggerer slowed by the load of
# the machine looks dead while it lives (both would then follow the job for a moment).
HEARTBEAT = 1
HEALTH_THRESHOLD = 15
TICK = re.compile(r"^\[(?P<replica>[^\]]+)\] tick (?P<n>\d+)/(?P<of>\d+) at (?P<at>[\d.]+)$")
MPI = ("kubeflow.org", "v2beta1", "mpijobs")


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    stack = Stack(
        tmp_path_factory.mktemp("failover"),
        dags_folder=DAGS,
        database="postgres",
        triggerers=2,
        extra_env={
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": str(HEARTBEAT),
            "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": str(HEALTH_THRESHOLD),
            "FAILOVER_TICK_LINES": str(LINES),
            "FAILOVER_TICK_EVERY": str(EVERY),
            "FAILOVER_BURST_JOBS": str(BURST),
        },
    )
    try:
        stack.start()
        stack.wait_for_dags(["failover_mpijob", "failover_torchrun", "failover_burst"], timeout=240)
        for dag_id in ("failover_mpijob", "failover_torchrun", "failover_burst"):
            stack.airflow("dags", "unpause", dag_id)
        yield stack
    finally:
        stack.stop()
    assert stack.alive_groups() == [], "processes left running after the stack stopped"


@pytest.fixture
def both_triggerers(stack):
    """Two live triggerers when the test starts: a test before may have killed one."""
    for name in stack.triggerer_names:
        if name in stack.killed:
            stack.start_triggerer(name)
    return stack


def _trigger(stack: Stack, dag_id: str) -> str:
    run_id = f"failover__{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%S%f')}"
    stack.airflow("dags", "trigger", dag_id, "--run-id", run_id)
    return run_id


def holder(stack: Stack, dag_id: str, run_id: str, task_id: str) -> int | None:
    """The ``job.id`` of the triggerer running the task's trigger; None while none does."""
    rows = stack.query(
        "SELECT t.triggerer_id FROM task_instance ti JOIN trigger t ON t.id = ti.trigger_id "
        "WHERE ti.dag_id = ? AND ti.run_id = ? AND ti.task_id = ?",
        dag_id,
        run_id,
        task_id,
    )
    return rows[0][0] if rows else None


def trigger_log(stack: Stack, dag_id: str, run_id: str, task_id: str, triggerer: int) -> list[str]:
    """What one triggerer wrote to the task's log (Airflow 3.3.2 names its part of try 1
    ``attempt=1.log.trigger.<job id>.log``: airflow/jobs/triggerer_job_runner.py)."""
    folder = stack.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
    path = folder / f"attempt=1.log.trigger.{triggerer}.log"
    if not path.exists():
        return []
    return stack.events_of(path)


def _wait(stack: Stack, condition, seconds: float, what: str) -> None:
    stack._wait_for(condition, seconds, what)


def follow_until(stack: Stack, dag_id: str, run_id: str, pattern: str, seconds: float = 300) -> int:
    """Wait until a triggerer follows the run's task and has logged a line matching ``pattern``; its id."""
    found: list[int] = []

    def logged() -> bool:
        held = holder(stack, dag_id, run_id, "train")
        if held is None:
            return False
        found[:] = [held]
        return any(re.search(pattern, e) for e in trigger_log(stack, dag_id, run_id, "train", held))

    _wait(stack, logged, seconds, f"a triggerer of {dag_id} {run_id} to log {pattern!r}")
    return found[0]


def kill_and_wait_for_takeover(stack: Stack, dag_id: str, run_id: str, dead: int) -> tuple[float, int | None]:
    """SIGKILL triggerer ``dead``; the moment of the kill, and who took the trigger over (None: the task
    left the trigger before anyone had to)."""
    killed_at = time.time()
    stack.kill(stack.triggerer_jobs[dead])
    after: list[int | None] = [None]

    def moved() -> bool:
        held = holder(stack, dag_id, run_id, "train")
        after[0] = held
        if held is not None:
            return held != dead
        state = stack.task_states(dag_id, run_id).get("train")
        return state != "deferred"

    _wait(stack, moved, HEALTH_THRESHOLD + 120, f"the trigger of {dag_id} {run_id} to leave triggerer {dead}")
    return killed_at, after[0]


def kube(stack: Stack):
    from kubernetes import client, config

    api = config.new_client_from_config(str(stack.kubeconfig))
    return client.BatchV1Api(api), client.CustomObjectsApi(api), client.CoreV1Api(api)


def jobs_of_run(stack: Stack, dag_id: str, run_id: str) -> list[dict]:
    """Every job object (Job or MPIJob) made for the run, by the annotations the product sets."""
    batch, custom, _ = kube(stack)
    found = [j.to_dict() for j in batch.list_namespaced_job("default").items]
    found += custom.list_namespaced_custom_object(*MPI[:2], "default", MPI[2])["items"]
    made = []
    for job in found:
        meta = job.get("metadata") or {}
        notes = meta.get("annotations") or {}
        if notes.get("airflow-jobs.io/dag-id") == dag_id and notes.get("airflow-jobs.io/run-id") == run_id:
            made.append(job)
    return made


def pods_of(stack: Stack, name: str) -> list:
    _, _, core = kube(stack)
    pods = []
    for label in ("training.kubeflow.org/job-name", "batch.kubernetes.io/job-name"):
        pods += core.list_namespaced_pod("default", label_selector=f"{label}={name}").items
    return pods


def assert_ticks(events: list[str], replicas: list[str], killed_at: float) -> None:
    """Each replica's lines all in the log; only those written before the kill more than once."""
    seen: Counter[tuple[str, int]] = Counter()
    written: dict[tuple[str, int], float] = {}
    for event in events:
        match = TICK.match(event)
        if match is None:
            continue
        key = (match["replica"], int(match["n"]))
        seen[key] += 1
        written[key] = float(match["at"])
    for replica in replicas:
        missing = [n for n in range(1, LINES + 1) if (replica, n) not in seen]
        assert not missing, f"[{replica}] lines missing from the task log: {missing}"
    twice = {key: count for key, count in seen.items() if count > 1}
    late = {key: count for key, count in twice.items() if written[key] >= killed_at}
    assert not late, f"lines written after the kill ({killed_at:.3f}) repeated: {sorted(late)}"
    assert max(twice.values(), default=1) <= 2, f"a line printed more than twice: {twice}"


def assert_one_job_and_no_restart(
    stack: Stack, dag_id: str, run_id: str, events: list[str], pods: int
) -> None:
    made = jobs_of_run(stack, dag_id, run_id)
    assert len(made) == 1, [j["metadata"]["name"] for j in made]
    assert sum(1 for e in events if re.match(r"^created (Job|MPIJob|torchrun) ", e)) == 1, "\n".join(events)
    job = made[0]
    status = job.get("status") or {}
    if job.get("kind") == "MPIJob":
        launcher = (status.get("replicaStatuses") or status.get("replica_statuses") or {}).get(
            "Launcher"
        ) or {}
        assert not launcher.get("failed"), status
    else:
        assert not status.get("failed"), status
        assert status.get("succeeded") == pods, status
    for pod in pods_of(stack, job["metadata"]["name"]):
        for container in (pod.status.init_container_statuses or []) + (pod.status.container_statuses or []):
            assert container.restart_count == 0, f"{pod.metadata.name}/{container.name} restarted"


def run_failover(stack: Stack, dag_id: str, replicas: list[str], pods: int) -> None:
    run_id = _trigger(stack, dag_id)
    dead = follow_until(stack, dag_id, run_id, rf"^\[{re.escape(replicas[0])}\] tick 5/")
    killed_at, taker = kill_and_wait_for_takeover(stack, dag_id, run_id, dead)
    run, state = stack.wait_for_run(dag_id, timeout=600, run_id=run_id)
    tries = stack.task_tries(dag_id, run_id)
    assert (state, tries["train"]) == ("success", ("success", 1)), stack.unsuccessful(dag_id, run_id)
    events = stack.task_log(dag_id, run_id, "train")
    assert taker is None or taker in stack.triggerer_jobs, taker
    if taker is not None:
        assert trigger_log(stack, dag_id, run_id, "train", taker), "the new triggerer logged nothing"
    assert_ticks(events, replicas, killed_at)
    assert_one_job_and_no_restart(stack, dag_id, run_id, events, pods)


def test_a_running_mpijob_is_taken_over_by_the_other_triggerer(both_triggerers):
    run_failover(both_triggerers, "failover_mpijob", ["launcher"], pods=3)


def test_a_running_torchrun_job_is_taken_over_by_the_other_triggerer(both_triggerers):
    run_failover(both_triggerers, "failover_torchrun", ["node-0", "node-1"], pods=2)


def test_a_queued_job_is_taken_over_by_the_other_triggerer(both_triggerers):
    stack = both_triggerers
    dag_id = "failover_mpijob"
    controller = stack.processes["admission-controller"]
    # The admission controller held still: the job waits in the queue for as long as the test needs.
    os.killpg(controller.pid, signal.SIGSTOP)
    try:
        run_id = _trigger(stack, dag_id)
        dead = follow_until(stack, dag_id, run_id, r"^MPIJob \S+: QUEUED")
        killed_at, taker = kill_and_wait_for_takeover(stack, dag_id, run_id, dead)
        assert taker is not None, "the task left its trigger while its job was queued"
        # The new triggerer sees the job queued too before it may run.
        _wait(
            stack,
            lambda: any(
                re.search(r"^MPIJob \S+: QUEUED", e)
                for e in trigger_log(stack, dag_id, run_id, "train", taker)
            ),
            120,
            "the new triggerer to report the job queued",
        )
    finally:
        os.killpg(controller.pid, signal.SIGCONT)
    run, state = stack.wait_for_run(dag_id, timeout=600, run_id=run_id)
    tries = stack.task_tries(dag_id, run_id)
    assert (state, tries["train"]) == ("success", ("success", 1)), stack.unsuccessful(dag_id, run_id)
    events = stack.task_log(dag_id, run_id, "train")
    assert_ticks(events, ["launcher"], killed_at)
    assert_one_job_and_no_restart(stack, dag_id, run_id, events, pods=3)


# The suite's burst: big enough that the killed triggerer holds dozens of triggers while the other
# holds dozens more, small enough for the suite's time (each task runs twice in a worker, submit and
# resume: 200 took 7.6 minutes on 2 cores). FAILOVER_BURST_JOBS runs the burst at another size.
BURST = int(os.environ.get("FAILOVER_BURST_JOBS", "60"))


@pytest.mark.timeout(1800)
def test_a_triggerer_killed_during_a_burst_of_deferred_jobs_loses_and_doubles_none(both_triggerers):
    stack = both_triggerers
    dag_id = "failover_burst"
    _burst_policy(stack)
    run_id = _trigger(stack, dag_id)
    held: Counter[int] = Counter()

    def many_deferred() -> bool:
        rows = stack.query(
            "SELECT t.triggerer_id FROM task_instance ti JOIN trigger t ON t.id = ti.trigger_id "
            "WHERE ti.dag_id = ? AND ti.run_id = ? AND t.triggerer_id IS NOT NULL",
            dag_id,
            run_id,
        )
        held.clear()
        held.update(row[0] for row in rows)
        if sum(held.values()) >= BURST // 4:
            return True
        # A burst that ends (or fails) before it gets there is told below, with its tasks' states.
        return bool(stack.query("SELECT 1 FROM dag_run WHERE run_id = ? AND end_date IS NOT NULL", run_id))

    _wait(stack, many_deferred, 600, f"{BURST // 4} of the burst's tasks to be followed by a triggerer")
    assert held, f"no task of the burst was ever deferred: {stack.unsuccessful(dag_id, run_id)[:3000]}"
    dead, followed = held.most_common(1)[0]
    stack.kill(stack.triggerer_jobs[dead])
    run, state = stack.wait_for_run(dag_id, timeout=1500, run_id=run_id)
    rows = stack.query(
        "SELECT map_index, state, try_number FROM task_instance WHERE dag_id = ? AND run_id = ?",
        dag_id,
        run_id,
    )
    assert len(rows) == BURST
    wrong = sorted((i, s, n) for i, s, n in rows if (s, n) != ("success", 1))
    assert not wrong, f"{len(wrong)} of the burst's tasks ended otherwise than success at try 1: {wrong[:20]}"
    assert state == "success"
    made = Counter(
        (j["metadata"].get("annotations") or {}).get("airflow-jobs.io/map-index")
        for j in jobs_of_run(stack, dag_id, run_id)
    )
    assert sorted(made) == sorted(str(i) for i in range(BURST)), sorted(made)
    assert set(made.values()) == {1}, {i: n for i, n in made.items() if n != 1}
    assert followed > 0


def _burst_policy(stack: Stack) -> None:
    """A quota policy whose group admits the whole burst at once: one user's whole burst of jobs of no GPU."""
    from kubernetes import client, config

    policy = f"""
groups:
  burst:
    gpus: 1
    max_running_jobs_per_user: {BURST}
"""
    body = {
        "metadata": {"name": "failover-burst-policy", "labels": {"airflow-jobs.io/quota-policy": "true"}},
        "data": {"policy.yaml": policy},
    }
    api = client.CoreV1Api(config.new_client_from_config(str(stack.kubeconfig)))
    try:
        api.create_namespaced_config_map("default", body)
    except client.ApiException as exc:
        if exc.status != 409:
            raise
