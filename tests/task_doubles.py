"""What a worker hands an operator, for tests that call ``execute()`` directly: the task instance's
identity and the ``task_state_store`` that survives retries."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class FakeTI:
    dag_id: str
    task_id: str = "train"
    run_id: str = "run-1"
    map_index: int = -1
    try_number: int = 1
    # Airflow's cumulative retry budget: retries at first, last try + retries after a clear.
    max_tries: int | None = None
    # XComs by (task_id, key): what xcom_push wrote and what XComArgs resolve to.
    xcoms: dict[tuple[str, str], Any] = field(default_factory=dict)

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcoms[(self.task_id, key)] = value

    def xcom_pull(self, task_ids: str, key: str = "return_value", default: Any = None, **_: Any) -> Any:
        return self.xcoms.get((task_ids, key), default)


@dataclass
class StateStore:
    """The task_state_store accessor's get/set, kept across tries of one task instance."""

    values: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def set(self, key: str, value: Any, **_: Any) -> None:
        self.values[key] = value


def task_context(
    dag_id: str,
    task_id: str = "train",
    *,
    run_id: str = "run-1",
    try_number: int = 1,
    store: StateStore | None = None,
) -> dict:
    """The context ``execute()`` reads: ``ti`` and ``task_state_store``."""
    return {
        "ti": FakeTI(dag_id, task_id, run_id, -1, try_number),
        "task_state_store": store if store is not None else StateStore(),
    }


async def the_api_server_answers_kills(client: Any, namespace: str, state: str | None = "failed") -> list:
    """What the GPU Jobs app in Airflow's API server does with the kill requests of ``namespace`` when
    Airflow's database says every task instance asked about is in ``state`` (a mark failed: "failed";
    a clear: None), the same try as its job's (plugin/kills.py)."""
    from airflow_jobs_plugin.jobs.orphans import TaskRecord
    from airflow_jobs_plugin.plugin import kills
    from airflow_jobs_plugin.readmodel import inspect

    def read_tasks(refs):
        return {r.dag_id for r in refs}, {r: TaskRecord(state, 1) for r in refs}

    return await kills.answer(client, inspect.Target(namespace=namespace, quota_configmap=None), read_tasks)
