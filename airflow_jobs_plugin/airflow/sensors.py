"""JobSensor: wait for a GPU job that something else submitted."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from airflow.exceptions import AirflowException
from airflow.sdk import BaseSensorOperator

from airflow_jobs_plugin import DEFAULT_CONN_ID
from airflow_jobs_plugin.cluster.objects import Meta, latest
from airflow_jobs_plugin.cluster.resources import name_problem
from airflow_jobs_plugin.jobs import kinds
from airflow_jobs_plugin.jobs.outcome import JobEvent, failure_message
from airflow_jobs_plugin.jobs.spec import JobSpecError
from airflow_jobs_plugin.jobs.spec_checks import check_conn_id, is_unrendered
from airflow_jobs_plugin.lifecycle import snapshot
from airflow_jobs_plugin.lifecycle.tracking import (
    DEFAULT_FAIL_STATES,
    DEFAULT_TARGET_STATES,
    SensorVerdict,
    check_states,
    sensor_verdict,
)

if TYPE_CHECKING:
    from airflow.sdk import Context


class JobSensor(BaseSensorOperator):
    """Wait until a job (by name, or the newest job matching labels) reaches a target state.

    Deferrable by default: the waiting happens on the triggerer through the shared watch, not on a
    worker. The task fails when the job reaches one of ``fail_states``.

    A target the job has already passed counts as reached: a job that SUCCEEDED went through QUEUED,
    SCHEDULING, STARTING and RUNNING, so ``target_states=["RUNNING"]`` is met by a job that finished
    between two looks. A job that ended in a state that is neither a target nor a fail state can never
    reach a target: the sensor fails at once, naming the state, instead of waiting for its timeout.

    Example::

        wait = JobSensor(
            task_id="wait_for_nightly_train",
            job_name="nightly-train-a1",          # or labels={"team": "vision"}
            kind="MPIJob",
            target_states=["SUCCEEDED"],
        )

    :param job_name: the job to wait for (its attempt's name, e.g. ``nightly-train-a1``); or give ``labels``.
    :param labels: wait for the newest job carrying all these labels instead of a name.
    :param kind: ``Job``, ``MPIJob`` or ``torchrun``.
    :param namespace: namespace of the job.
    :param kubernetes_conn_id: the Airflow Kubernetes connection of the cluster.
    :param target_states: job states that end the wait successfully (a state passed on the way counts).
    :param fail_states: job states that fail the task.
    :param deferrable: wait on the triggerer (default) instead of poking from a worker slot.
    """

    # kubernetes_conn_id is templated as KubernetesPodOperator's is (cncf provider 10.25.0,
    # airflow/operators/pod.py template_fields); a sensor streams no logs, so it has no stream_logs.
    template_fields: Sequence[str] = ("job_name", "labels", "kubernetes_conn_id")

    def __init__(
        self,
        *,
        job_name: str | None = None,
        labels: Mapping[str, str] | None = None,
        kind: str = kinds.DEFAULT_KIND.name,
        namespace: str = "default",
        kubernetes_conn_id: str = DEFAULT_CONN_ID,
        target_states: Sequence[str] = DEFAULT_TARGET_STATES,
        fail_states: Sequence[str] = DEFAULT_FAIL_STATES,
        deferrable: bool = True,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        if (job_name is None) == (not labels):
            raise ValueError("JobSensor: give exactly one of job_name or labels")
        job_kind = kinds.for_name(kind)  # a bad name fails the DAG's import, naming the choices
        # A name that could change a request's path fails the DAG's import (a templated one is checked
        # by the trigger's client: resources.segment).
        problem = name_problem(namespace, None if job_name is None or "{{" in job_name else job_name)
        if problem:
            raise ValueError(f"JobSensor: {problem}")
        self.target_states, self.fail_states = check_states(tuple(target_states), tuple(fail_states))
        self.job_name = job_name
        self.labels = labels
        self.kind = job_kind.name
        self.namespace = namespace
        # A literal id is checked here, at parse time; a template once rendered (_conn_id).
        self._templated_conn_id = is_unrendered(kubernetes_conn_id)
        self.kubernetes_conn_id = (
            kubernetes_conn_id if self._templated_conn_id else check_conn_id(kubernetes_conn_id)
        )
        self.deferrable = deferrable

    def _conn_id(self) -> str:
        """The connection id as rendered, checked: a bad one fails the task naming the argument (no
        retry renders it otherwise)."""
        from airflow.sdk.exceptions import AirflowFailException

        try:
            return check_conn_id(self.kubernetes_conn_id, rendered=self._templated_conn_id)
        except JobSpecError as exc:
            raise AirflowFailException(
                f"invalid rendered value of kubernetes_conn_id (no retry can fix this; correct the DAG):\n{exc}"
            ) from exc

    @property
    def _selector(self) -> str | None:
        return ",".join(f"{k}={v}" for k, v in sorted((self.labels or {}).items())) or None

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        # Loads the cluster client: worker only.
        from airflow_jobs_plugin.airflow.job_sensor_trigger import JobSensorTrigger

        self.defer(
            trigger=JobSensorTrigger(
                job_name=self.job_name or "",
                namespace=self.namespace,
                kind=self.kind,
                kubernetes_conn_id=self._conn_id(),
                label_selector=self._selector,
                target_states=list(self.target_states),
                fail_states=list(self.fail_states),
                deferred_at=datetime.now(timezone.utc).isoformat(),
            ),
            method_name="execute_complete",
            timeout=self.execution_timeout,
        )

    def poke(self, context: Context) -> bool:
        """Non-deferrable mode: one read of the job per poke interval."""
        import asyncio

        return asyncio.run(self._poke())

    async def _poke(self) -> bool:
        from airflow_jobs_plugin.cluster.kube import PODS, KubeClient

        adapter = kinds.for_name(self.kind)
        client = await KubeClient.from_connection(self._conn_id())
        try:
            if self.job_name:
                job = await client.get_or_none(adapter.resource, self.namespace, self.job_name)
            else:
                found = await client.list(adapter.resource, self.namespace, label_selector=self._selector)
                job = latest(found["items"], lambda j: Meta(j).created_at)
            if job is None:
                return False
            key = adapter.pod_job_label
            pods = (await client.list(PODS, self.namespace, label_selector=f"{key}={Meta(job).name}"))[
                "items"
            ]
            state = snapshot(job, pods, (), now=datetime.now(timezone.utc)).state
        finally:
            await client.close()
        verdict = sensor_verdict(state, target_states=self.target_states, fail_states=self.fail_states)
        if verdict is SensorVerdict.FAILED:
            raise AirflowException(
                f"{self.kind} {Meta(job).name} reached {state.value}, which is not one of "
                f"{list(self.target_states)} and never will be"
            )
        return verdict is SensorVerdict.REACHED

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        result = JobEvent.from_payload(event)
        if not result.succeeded:
            raise AirflowException(
                failure_message(result) + f"\nthe sensor waited for {list(self.target_states)}"
            )
        return {
            "job_name": result.job_name,
            "kind": result.kind,
            "namespace": result.namespace,
            "state": result.state,
            "reason": result.reason,
        }
