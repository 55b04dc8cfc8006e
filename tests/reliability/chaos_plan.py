"""The chaos test's workload: which tasks run, what each one's job does, and how each must end.

Pure data and rules, no I/O. A task's final outcome depends on its scenario and, for the two
disruption scenarios, on what the chaos actually hit (which attempt-1 pods were evicted or were on the
node when it was lost), which the test records while it runs.
"""

from __future__ import annotations

import enum
import json
import random
from dataclasses import dataclass, field
from typing import Any

SCENARIO_ANNOTATION = "sim.airflow-jobs.io/scenario"
POLICY_NAME = "chaos-quota"
LOST_NODE = "sim-node-0"
# Nodes other than the one that gets lost carry this label; every task outside the node-loss scenario
# selects it, so the node loss hits exactly the tasks that expect it.
POOL_LABEL = "chaos.example/pool"
POOL_MAIN = "main"

# Quotas smaller than the work submitted at once, so every group queues. "edge" runs on the lost node
# alone; its quota is half that node, so pods stranded there could show as over-use if the product
# released their GPUs while they still hold them.
POLICY_YAML = """\
groups:
  vision: {gpus: 16, user_gpus: 8, users: {carol: 4}}
  nlp: {gpus: 8, user_gpus: 6}
  edge: {gpus: 4, user_gpus: 4}
"""
QUOTAS: dict[str, tuple[int, dict[str, int]]] = {
    "vision": (16, {"alice": 8, "bob": 8, "carol": 4}),
    "nlp": (8, {"alice": 6, "bob": 6, "dan": 6}),
    "edge": (4, {"erin": 4}),
}
USERS = {"vision": ("alice", "bob", "carol"), "nlp": ("alice", "bob", "dan"), "edge": ("erin",)}


class Kind(str, enum.Enum):
    OK = "ok"  # runs and exits 0
    FATAL = "fatal"  # exits 1, declared fatal: fails at once, no retry
    RETRYABLE = "retryable"  # exits 3, declared retryable, max_attempts 2: both attempts fail
    EVICTED = "evicted"  # its first attempt's pod is evicted while it runs; the second succeeds
    NODE_LOSS = "node-loss"  # pinned to the node that gets lost; whatever was placed there is retried


@dataclass(frozen=True)
class Task:
    """One Airflow task instance of the chaos run and how its job behaves."""

    task_id: str
    kind: Kind
    group: str
    user: str
    gpus: int
    run_seconds: float  # simulated seconds
    crash_before_defer: bool = False  # the worker dies between creating the job and deferring
    operator_args: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class Expected:
    status: str  # success | failed
    attempt: int  # the job-level attempt the final event reports on
    exit_code: int | None  # worker-0's exit code in the final event, where meaningful
    first_attempt_reason: str | None  # the failure reason of attempt 1, when it had to fail


def plan(rng: random.Random, total: int) -> list[Task]:
    """``total`` tasks in a fixed mix of scenarios, shuffled; sizes and durations drawn from ``rng``."""
    mix = [
        (Kind.FATAL, 0.11),
        (Kind.RETRYABLE, 0.09),
        (Kind.EVICTED, 0.08),
        (Kind.NODE_LOSS, 0.07),
    ]
    counts = {kind: round(total * share) for kind, share in mix}
    counts[Kind.OK] = total - sum(counts.values())
    kinds = [kind for kind, n in counts.items() for _ in range(n)]
    rng.shuffle(kinds)
    tasks = []
    for index, kind in enumerate(kinds):
        group = "edge" if kind is Kind.NODE_LOSS else rng.choice(("vision", "vision", "nlp"))
        user = rng.choice(USERS[group])
        gpus = 2 if kind is Kind.NODE_LOSS else rng.choice((1, 1, 2, 2, 4))
        run = {
            Kind.OK: rng.uniform(5, 20),
            Kind.FATAL: rng.uniform(2, 6),
            Kind.RETRYABLE: rng.uniform(2, 6),
            Kind.EVICTED: 80.0,
            Kind.NODE_LOSS: 120.0,
        }[kind]
        tasks.append(
            Task(
                task_id=f"t{index:03d}-{kind.value}",
                kind=kind,
                group=group,
                user=user,
                gpus=gpus,
                run_seconds=round(run, 2),
                crash_before_defer=kind is Kind.OK and rng.random() < 0.12,
            )
        )
    return tasks


def operator_kwargs(task: Task) -> dict[str, Any]:
    """JobOperator arguments for the task (besides task_id and the connection)."""
    exit_code = {Kind.FATAL: 1, Kind.RETRYABLE: 3}.get(task.kind, 0)
    scenario = {"main": {"pull": 0.5, "run": task.run_seconds, "exit": exit_code}}
    pool = {"kubernetes.io/hostname": LOST_NODE} if task.kind is Kind.NODE_LOSS else {POOL_LABEL: POOL_MAIN}
    return {
        "image": "registry.example/trainer:1",
        "gpus": task.gpus,
        "group": task.group,
        "user": task.user,
        "node_selector": pool,
        "backoff_limit": 0,
        "max_attempts": {Kind.FATAL: 1, Kind.RETRYABLE: 2, Kind.EVICTED: 2, Kind.NODE_LOSS: 3}.get(
            task.kind, 2
        ),
        "fatal_exit_codes": [1],
        "retryable_exit_codes": [3],
        "job_annotations": {SCENARIO_ANNOTATION: json.dumps(scenario)},
        "quota_configmap": POLICY_NAME,
    }


def expected(task: Task, *, evicted: bool, stranded: bool) -> Expected:
    """How the task must end, given whether its attempt-1 pod was evicted or stranded on the lost node."""
    if task.kind is Kind.FATAL:
        return Expected("failed", 1, 1, None)
    if task.kind is Kind.RETRYABLE:
        return Expected("failed", 2, 3, None)
    if evicted:
        return Expected("success", 2, 0, "Evicted")
    if stranded:
        return Expected("success", 2, 0, "NodeLost")
    return Expected("success", 1, 0, None)
