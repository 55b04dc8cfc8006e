"""JobOperator: a GPU training job on Kubernetes as one deferrable Airflow task."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.exceptions import AirflowException
from airflow.sdk import BaseOperator, BaseOperatorLink
from airflow.sdk.exceptions import AirflowFailException

from airflow_jobs_plugin import DEFAULT_CONN_ID
from airflow_jobs_plugin import spec as spec_defaults
from airflow_jobs_plugin.labels import TASK_STATE_DELIVERED, TASK_STATE_FATAL, TASK_STATE_KEY
from airflow_jobs_plugin.outcome import (
    JobEvent,
    TryOutcome,
    delivered_job,
    failure_message,
    headline,
    repeated_fatal_failure,
    summary,
)
from airflow_jobs_plugin.spec import JobSpec, JobSpecError, TaskIdentity, validate

if TYPE_CHECKING:
    from airflow.sdk import Context

STATE_KEY = TASK_STATE_KEY  # the task_state_store key of the current job

# Operator arguments that describe the job itself (validated together into a JobSpec).
SPEC_ARGS = (
    "image",
    "command",
    "args",
    "env",
    "gpus",
    "workers",
    "cpu",
    "memory",
    "node_selector",
    "tolerations",
    "volumes",
    "volume_mounts",
    "group",
    "user",
    "namespace",
    "backoff_limit",
    "max_attempts",
    "retry_backoff",
    "retry_backoff_max",
    "retryable_exit_codes",
    "fatal_exit_codes",
    "queue_timeout",
    "schedule_timeout",
    "requeue_limit",
    "active_deadline",
    "ttl_after_finished",
    "job_labels",
    "job_annotations",
    "priority",
    "launcher_gpus",
    "launcher_cpu",
    "launcher_memory",
    "worker_command",
    "wait_for_workers",
    "launcher_creation_policy",
    "mpi_implementation",
    "init_containers",
    "image_pull_policy",
    "image_pull_secrets",
    "service_account",
    "queue",
)


# Arguments an earlier version accepted without ever applying them: the quota policy sets these.
POLICY_ONLY = {
    "requeue_backoff": "the back-off between requeues is the quota policy's requeue_backoff.base "
    "(set by the platform admin in the policy ConfigMap): remove this argument",
    "requeue_backoff_max": "the back-off between requeues is capped by the quota policy's "
    "requeue_backoff.cap (set by the platform admin in the policy ConfigMap): remove this argument",
}


class JobLink(BaseOperatorLink):
    """Operator extra link from the task to its job's page in the GPU Jobs view."""

    name = "GPU Job"

    def get_link(self, operator, *, ti_key) -> str:
        return f"/airflow-jobs/jobs/{ti_key.dag_id}/{ti_key.task_id}/{ti_key.run_id}?map_index={ti_key.map_index}"


class JobOperator(BaseOperator):
    """Run a GPU job on Kubernetes and wait for it on the triggerer.

    ``workers=1`` submits a ``batch/v1`` Job; ``workers>1`` a kubeflow ``MPIJob`` with one launcher and
    that many workers. The job waits for its group's GPU quota, runs, streams its logs into this task's
    log, retries retryable failures with a back-off, and fails with the state, reason, exit codes and last
    log lines. Invalid arguments fail when the DAG is parsed, naming the argument.

    Example::

        train = JobOperator(
            task_id="train",
            image="ghcr.io/acme/trainer:{{ ds_nodash }}",
            command=["python", "train.py", "--epochs", "10"],
            gpus=4,
            workers=2,
            group="vision",
            env={"DATA": "/project/vision/data"},
            max_attempts=3,
        )
    """

    template_fields: Sequence[str] = (
        "image",
        "command",
        "args",
        "env",
        "init_containers",
        "job_labels",
        "job_annotations",
    )
    template_fields_renderers = {"env": "json", "command": "py", "args": "py"}
    operator_extra_links = (JobLink(),)
    ui_color = "#7fb2e5"

    def __init__(
        self,
        *,
        image: str,
        command: Sequence[str] | str | None = None,
        args: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        gpus: int = 0,
        workers: int = 1,
        cpu: str | None = None,
        memory: str | None = None,
        node_selector: Mapping[str, str] | None = None,
        tolerations: Sequence[Mapping[str, Any]] | None = None,
        volumes: Sequence[Mapping[str, Any]] | None = None,
        volume_mounts: Sequence[Mapping[str, Any]] | None = None,
        group: str,
        user: str | None = None,
        namespace: str = "default",
        kubernetes_conn_id: str = DEFAULT_CONN_ID,
        backoff_limit: int = spec_defaults.DEFAULT_BACKOFF_LIMIT,
        max_attempts: int = spec_defaults.DEFAULT_MAX_ATTEMPTS,
        retry_backoff: timedelta = spec_defaults.DEFAULT_RETRY_BACKOFF,
        retry_backoff_max: timedelta = spec_defaults.DEFAULT_RETRY_BACKOFF_MAX,
        retryable_exit_codes: Sequence[int] = (),
        fatal_exit_codes: Sequence[int] = (),
        queue_timeout: timedelta | None = None,
        schedule_timeout: timedelta = spec_defaults.DEFAULT_SCHEDULE_TIMEOUT,
        requeue_limit: int | str | None = spec_defaults.DEFAULT_REQUEUE_LIMIT,
        active_deadline: timedelta | None = spec_defaults.DEFAULT_ACTIVE_DEADLINE,
        ttl_after_finished: timedelta | None = spec_defaults.DEFAULT_TTL_AFTER_FINISHED,
        job_labels: Mapping[str, str] | None = None,
        job_annotations: Mapping[str, str] | None = None,
        priority: int | str = 0,
        launcher_gpus: int = 0,
        launcher_cpu: str | None = None,
        launcher_memory: str | None = None,
        worker_command: Sequence[str] | str | None = None,
        wait_for_workers: bool = True,
        launcher_creation_policy: str = "WaitForWorkersReady",
        mpi_implementation: str = "OpenMPI",
        init_containers: Sequence[Mapping[str, Any]] | None = None,
        image_pull_policy: str | None = None,
        image_pull_secrets: Sequence[str] | None = None,
        service_account: str | None = None,
        queue: str | None = None,
        stream_logs: bool = True,
        quota_configmap: str | None = None,
        quota_namespace: str | None = None,
        **kwargs: Any,
    ):
        for gone in sorted(set(kwargs) & set(POLICY_ONLY)):
            raise JobSpecError(gone, POLICY_ONLY[gone])
        super().__init__(**kwargs)
        values = locals()
        for arg in SPEC_ARGS:
            setattr(self, arg, values[arg])
        self.env = dict(env or {})
        self.job_labels = dict(job_labels or {})
        self.job_annotations = dict(job_annotations or {})
        self.retryable_exit_codes = tuple(retryable_exit_codes)
        self.fatal_exit_codes = tuple(fatal_exit_codes)
        self.kubernetes_conn_id = kubernetes_conn_id
        self.stream_logs = stream_logs
        self.quota_configmap = quota_configmap
        self.quota_namespace = quota_namespace
        # Parse-time check: a bad argument fails the DAG import, naming the argument. Values that are
        # still Jinja templates are checked again once rendered, in execute().
        self._spec(templated=True)

    # --- the spec ---

    def _spec(self, *, templated: bool) -> JobSpec:
        values = {arg: getattr(self, arg) for arg in SPEC_ARGS}
        values["labels"] = values.pop("job_labels")
        values["annotations"] = values.pop("job_annotations")
        values["user"] = values["user"] or self.owner
        return validate(**values, templated=templated)

    # --- execute ---

    def execute(self, context: Context) -> Any:
        try:
            spec = self._spec(templated=False)
        except JobSpecError as exc:
            # A value that is only wrong once rendered is as wrong on every retry: do not spend them.
            fields = ", ".join(dict.fromkeys(f for f, _ in exc.errors))
            raise AirflowFailException(
                f"invalid rendered value of {fields} (no retry can fix this; correct the DAG):\n{exc}"
            ) from exc
        ti = context["ti"]
        identity = TaskIdentity(
            dag_id=ti.dag_id,
            task_id=ti.task_id,
            run_id=ti.run_id,
            map_index=ti.map_index if ti.map_index is not None else -1,
            try_number=ti.try_number,
        )
        store = context.get("task_state_store")
        tries = dict(
            try_number=ti.try_number, max_tries=getattr(ti, "max_tries", None), retries=self.retries or 0
        )
        delivered = None  # without a task_state_store nothing says what was returned: adopt no success
        if store is not None:
            repeated = repeated_fatal_failure(TryOutcome.from_json(store.get(TASK_STATE_FATAL)), **tries)
            if repeated:
                raise AirflowFailException(repeated)
            delivered = delivered_job(TryOutcome.from_json(store.get(TASK_STATE_DELIVERED)), **tries)
        # The cluster client and the trigger load only here, on the worker: a DAG file that merely
        # parses never pays for them.
        from airflow_jobs_plugin import config, kueue, quota_source
        from airflow_jobs_plugin.submission import SubmissionRefused, submit
        from airflow_jobs_plugin.triggers import JobTrigger

        chosen_queue = kueue.choose_queue(
            spec.queue,
            config.get("kueue_queue"),
            config.get("kueue_manages_all_jobs").strip().lower() in ("true", "1", "yes"),
        )
        if chosen_queue != spec.queue:
            spec = dataclasses.replace(spec, queue=chosen_queue)
        pool = (
            # Kueue admits the job: the product's pool neither checks nor charges it (docs/kueue.md).
            quota_source.QuotaSource(None, None)
            if spec.queue
            else quota_source.choose(
                self.quota_configmap,
                self.quota_namespace,
                config.get("quota_configmap"),
                config.get("quota_namespace"),
            )
        )
        try:
            job = asyncio.run(
                submit(
                    spec,
                    identity,
                    store,
                    delivered=delivered,
                    conn_id=self.kubernetes_conn_id,
                    pool=pool,
                    log=self.log,
                )
            )
        except SubmissionRefused as exc:
            raise AirflowFailException(str(exc)) from exc
        self.defer(
            trigger=JobTrigger(
                job_name=job.name,
                namespace=spec.namespace,
                kind=job.kind,
                kubernetes_conn_id=self.kubernetes_conn_id,
                max_attempts=spec.max_attempts,
                retry_backoff=spec.retry_backoff.total_seconds(),
                retry_backoff_max=spec.retry_backoff_max.total_seconds(),
                retryable_exit_codes=list(spec.retryable_exit_codes),
                fatal_exit_codes=list(spec.fatal_exit_codes),
                stream_logs=self.stream_logs,
                quota_configmap=job.quota_configmap,
                quota_namespace=job.quota_namespace,
            ),
            method_name="execute_complete",
        )

    # --- completion ---

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        try_number = context["ti"].try_number if "ti" in context else 0
        ended = JobEvent.from_payload(event)
        if ended.succeeded:
            result = summary(ended)
            self._remember(context, TASK_STATE_DELIVERED, TryOutcome(try_number, job=result["job_name"]))
            self.log.info(
                "%s %s succeeded after %d attempt(s); %.0f GPU-seconds",
                result["kind"],
                result["job_name"],
                result["attempts"],
                result["gpu_seconds"] or 0,
            )
            return result
        message = failure_message(ended)
        if ended.cancelled:
            # The task log's last lines: cancelled, by whom, when; and no retry will run it again.
            self.log.error("%s; not retried (clear the task to run it again)", headline(ended))
        if ended.fatal:
            self._remember(
                context,
                TASK_STATE_FATAL,
                TryOutcome(try_number, job=ended.job_name, message=message, cancelled=ended.cancelled),
            )
            raise AirflowFailException(message)
        raise AirflowException(message)

    def _remember(self, context: Context, key: str, outcome: TryOutcome) -> None:
        """Record what this try returned for later tries; a record that cannot be written must not
        change the task's outcome (a fatal failure must stay fatal), so the error is only logged."""
        store = context.get("task_state_store")
        if store is None:
            return
        try:
            store.set(key, outcome.to_json())
        except Exception as exc:  # whatever the state store's backend raises
            self.log.warning("could not record %s in the task state store: %s", key, exc)

    def on_kill(self) -> None:
        """Nothing runs on the worker while the job runs: the trigger's on_kill deletes the job."""
