"""The moving parts of the chaos test: the Airflow worker, the triggerer process, the chaos itself.

- :class:`Worker` runs ``JobOperator.execute`` as an Airflow worker would, with a fake task instance and
  a ``task_state_store`` kept across tries. ``TaskDeferred`` hands the trigger's ``serialize()`` output
  to the triggerer; any other exception is a failed try, which Airflow retries with the next try
  number. A worker that dies between the create and the deferral is a ``defer`` that raises.
- :class:`Triggerer` is the OS process of :mod:`.chaos_triggerer`, killed with SIGKILL and restarted.
- :class:`Chaos` evicts pods and loses a node, recording which tasks it hit.
- :class:`Controllers` are two replicas of the admission controller, OS processes electing a leader;
  the leader is SIGKILLed and restarted.
"""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.sdk.exceptions import TaskDeferred
from task_doubles import FakeTI, StateStore

from airflow_jobs_plugin.airflow.operators import STATE_KEY, JobOperator
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.spec import TaskIdentity

from .chaos_plan import LOST_NODE, Kind, Task, operator_kwargs
from .chaos_triggerer import append_record, read_records, triggerer_main

DAG_ID = "chaos"
RUN_ID = "chaos-run"


class WorkerDied(BaseException):
    """The worker process dies right after creating the job, before the deferral reaches Airflow."""


def task_key(task: Task) -> str:
    return TaskIdentity(DAG_ID, task.task_id, RUN_ID).instance_key()


@dataclass
class Submission:
    """What the worker did for one task: the try that deferred and the job its trigger follows."""

    deferred_try: int
    trigger_job: str
    created_by_crashed_try: str | None = None  # the job name the crashed try had stored


class Worker:
    """Executes every task until it defers, retrying failed tries as Airflow does."""

    def __init__(
        self,
        deferrals: Path,
        max_tries: int = 8,
        kwargs_of: Callable[[Task], dict[str, Any]] = operator_kwargs,
    ):
        self.deferrals = deferrals
        self.max_tries = max_tries
        self.kwargs_of = kwargs_of
        self.submissions: dict[str, Submission] = {}
        self.failed_tries: list[str] = []  # "task try N: error" for each try that raised
        self.gave_up: list[str] = []  # tasks that failed every try

    def submit_all(self, tasks: list[Task], workers: int) -> list[threading.Thread]:
        """Submit ``tasks`` in order from ``workers`` threads, as several Airflow workers would."""
        queue = list(reversed(tasks))
        lock = threading.Lock()

        def work() -> None:
            while True:
                with lock:
                    if not queue:
                        return
                    task = queue.pop()
                self.submit(task)

        return [run_in_thread(work) for _ in range(workers)]

    def submit(self, task: Task) -> None:
        op = JobOperator(
            task_id=task.task_id,
            retry_backoff=timedelta(seconds=0.2),
            retry_backoff_max=timedelta(seconds=1),
            **self.kwargs_of(task),
        )
        store = StateStore()
        crashed_job: str | None = None
        for try_number in range(1, self.max_tries + 1):
            context = {"ti": FakeTI(DAG_ID, task.task_id, RUN_ID, -1, try_number), "task_state_store": store}
            crash_now = task.crash_before_defer and crashed_job is None
            try:
                if crash_now:
                    op.defer = _die  # type: ignore[method-assign]
                try:
                    op.execute(context)
                finally:
                    if crash_now:
                        del op.defer
            except TaskDeferred as deferred:
                classpath, kwargs = deferred.trigger.serialize()
                append_record(
                    self.deferrals, {"task": task.task_id, "classpath": classpath, "kwargs": kwargs}
                )
                self.submissions[task.task_id] = Submission(try_number, kwargs["job_name"], crashed_job)
                return
            except WorkerDied:
                crashed_job = store.get(STATE_KEY)["name"]
                self.failed_tries.append(f"{task.task_id} try {try_number}: worker died after the create")
            except Exception as exc:  # a failed try: Airflow retries the task
                self.failed_tries.append(
                    f"{task.task_id} try {try_number}: {type(exc).__name__}: {exc}"[:300]
                )
        # Airflow would fail the task here; the test reports it (raising would only end this thread).
        self.gave_up.append(f"{task.task_id} never deferred in {self.max_tries} tries")


def _die(*_args: Any, **_kwargs: Any) -> None:
    raise WorkerDied()


class Triggerer:
    """The triggerer OS process; ``restart`` SIGKILLs it and starts a fresh one on the same files.

    Processes come from a fork server that has imported Airflow and the product once: a fresh process
    per (re)start, with nothing in memory from the one killed, without paying Airflow's import time
    (several seconds on a loaded CI runner) at every restart.
    """

    def __init__(self, deferrals: Path, events: Path, log: Path, connection: str):
        self.files = (str(deferrals), str(events), str(log), connection)
        self.context = multiprocessing.get_context("forkserver")
        self.context.set_forkserver_preload(
            ["airflow_jobs_plugin.airflow.triggers", triggerer_main.__module__]
        )
        self.process: multiprocessing.process.BaseProcess | None = None
        self.ready = self.context.Event()
        self.kills = 0
        self.pids: list[int] = []

    def start(self) -> None:
        self.ready = self.context.Event()
        self.process = self.context.Process(
            target=triggerer_main, args=(*self.files, self.ready), daemon=True
        )
        self.process.start()
        self.pids.append(self.process.pid)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.join(timeout=10)
        self.kills += 1

    def restart(self) -> None:
        self.kill()
        self.start()

    def stop(self) -> None:
        if self.process is not None and self.process.is_alive():
            self.process.kill()
            self.process.join(timeout=10)


def events_by_task(events: Path) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for record in read_records(events):
        out.setdefault(record["task"], []).append(record)
    return out


class Chaos:
    """Cluster faults aimed at the disruption scenarios; remembers which attempt-1 pods it hit."""

    def __init__(self, cluster, namespace: str, tasks: list[Task]):
        self.cluster = cluster
        self.namespace = namespace
        self.task_of_key = {task_key(t): t for t in tasks}
        self.evicted: set[str] = set()  # task ids
        self.stranded: set[str] = set()  # task ids whose attempt-1 pod was on the node when it was lost
        self.lost = False

    def _first_attempt_pods(self, pods: list[dict], kind: Kind) -> list[tuple[Task, dict]]:
        out = []
        for pod in pods:
            pod_labels = pod["metadata"].get("labels") or {}
            task = self.task_of_key.get(pod_labels.get(labels.TASK_KEY, ""))
            if task is not None and task.kind is kind and pod_labels.get(labels.ATTEMPT) == "1":
                out.append((task, pod))
        return out

    def evict_running(self) -> int:
        """Evict every running attempt-1 pod of an EVICTED task not evicted yet; how many now."""

        def on_loop() -> int:
            pods = self.cluster.store.list("pods", self.namespace)
            count = 0
            for task, pod in self._first_attempt_pods(pods, Kind.EVICTED):
                status = pod.get("status") or {}
                running = any(
                    "running" in (c.get("state") or {}) for c in status.get("containerStatuses") or ()
                )
                if task.task_id in self.evicted or not running or pod["metadata"].get("deletionTimestamp"):
                    continue
                self.cluster.controllers.evict_pod(self.namespace, pod["metadata"]["name"])
                self.evicted.add(task.task_id)
                count += 1
            return count

        return self.cluster.call(on_loop)

    def running_on_lost_node(self) -> int:
        def on_loop() -> int:
            pods = self.cluster.store.list("pods", self.namespace)
            return sum(
                1
                for _, pod in self._first_attempt_pods(pods, Kind.NODE_LOSS)
                if (pod.get("status") or {}).get("phase") == "Running"
            )

        return self.cluster.call(on_loop)

    def lose_node(self, eviction_after: float) -> None:
        """Lose the node; in the same step of the simulator, note whose attempt-1 pods it strands."""

        def on_loop() -> None:
            pods = self.cluster.store.list("pods", self.namespace)
            for task, pod in self._first_attempt_pods(pods, Kind.NODE_LOSS):
                placed = (pod.get("spec") or {}).get("nodeName") == LOST_NODE
                ended = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
                if placed and not ended and not pod["metadata"].get("deletionTimestamp"):
                    self.stranded.add(task.task_id)
            self.cluster.controllers.lose_node(LOST_NODE, eviction_after=eviction_after)
            self.lost = True

        self.cluster.call(on_loop)

    def restore_node(self) -> None:
        self.cluster.controllers.restore_node(LOST_NODE)


def run_in_thread(target, *args: Any) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


def wait_until(predicate, timeout: float, interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


class Controllers:
    """Two replicas of the admission controller, each an OS process of its own (``airflow-jobs
    admission-controller``) electing a leader on a Lease: ``kill_leader`` SIGKILLs the one that leads
    (no release: the other takes over once the Lease expires) and starts it again, as a Deployment's
    restart does. A short Lease (3 s) keeps the takeover within the test's budget."""

    LEASE = ("--lease-duration", "3", "--renew-deadline", "2", "--retry-period", "0.5")

    def __init__(self, kubeconfig: str, namespace: str, logs: Path):
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.logs = logs
        self.processes: dict[str, subprocess.Popen] = {}
        self.identities: dict[str, str] = {}  # identity in the Lease -> replica
        self.starts = 0
        self.kills = 0

    def start(self, name: str) -> None:
        log = (self.logs / f"{name}.log").open("ab")
        argv = [
            sys.executable,
            "-m",
            "airflow_jobs_plugin.airflow.cli",
            "admission-controller",
            "--kubeconfig",
            self.kubeconfig,
            "--namespace",
            self.namespace,
            "--identity",
            # A new pod of a Deployment has a new name: the restarted replica is another candidate.
            f"{name}-{self.starts}",
            *self.LEASE,
        ]
        self.processes[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self.identities[f"{name}-{self.starts}"] = name
        self.starts += 1

    def start_all(self) -> None:
        for name in ("controller-a", "controller-b"):
            self.start(name)

    def leader(self, store: Any) -> str | None:
        """The replica the Lease names (read from the simulator's store), if one holds it."""
        try:
            lease = store.get("leases", "airflow-jobs-admission-controller", namespace=self.namespace)
        except Exception:  # noqa: BLE001 - no Lease yet
            return None
        return self.holding((lease.get("spec") or {}).get("holderIdentity"))

    def holding(self, holder: str | None) -> str | None:
        """The replica a Lease's ``holderIdentity`` names, if that is its live process."""
        replica = self.identities.get(holder or "")
        # Only a live holder: after a kill the Lease names the dead one until another takes it over.
        if replica is None or not holder or holder != self._current(replica):
            return None
        return replica

    def _current(self, replica: str) -> str | None:
        named = [identity for identity, r in self.identities.items() if r == replica]
        return named[-1] if named else None

    def kill(self, name: str) -> None:
        process = self.processes[name]
        process.kill()
        process.wait(timeout=10)
        self.kills += 1
        self.start(name)

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
