"""JobTrigger: follows a GPU job on the triggerer, from the queue to its final state.

Example (what :class:`~airflow_jobs_plugin.operators.JobOperator` defers to; DAG authors rarely build
one themselves)::

    self.defer(
        trigger=JobTrigger(job_name="train-3f2a-1-1", namespace="ml", kind="MPIJob", max_attempts=3),
        method_name="execute_complete",
    )

Everything the trigger knows comes from the cluster: its kwargs name the job and the retry rules, never a
manifest or a credential (trigger kwargs are stored unencrypted). ``run()`` can start over at any
moment (a triggerer restart rebuilds the trigger from ``serialize()``) and picks up where the cluster
is: the latest attempt of the job, its admission, its pods.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_jobs_plugin import actions, attempts, labels, metrics, tracking
from airflow_jobs_plugin import watch as shared
from airflow_jobs_plugin.admission import Admission
from airflow_jobs_plugin.kube import (
    DEFAULT_CONN_ID,
    EVENTS,
    JOBS,
    MPIJOBS,
    PODS,
    KubeClient,
    KubeError,
    Resource,
    patiently,
)
from airflow_jobs_plugin.lifecycle import (
    Failure,
    JobSnapshot,
    JobState,
    classify_failure,
    disrupted_pod,
    snapshot,
)
from airflow_jobs_plugin.logstream import LogStreamer
from airflow_jobs_plugin.spec import attempt_name

T = TypeVar("T")


def _resource(kind: str) -> Resource:
    return MPIJOBS if kind == "MPIJob" else JOBS


def _now() -> datetime:
    return datetime.now(timezone.utc)


class JobTrigger(BaseTrigger):
    """Wait for a job (a batch/v1 Job or a kubeflow MPIJob) through the process's shared watch.

    Yields exactly one event: ``status`` is ``success`` or ``failed`` (with state, reason, exit codes,
    the attempts and the last log lines), or ``error`` if the job vanished.
    """

    def __init__(
        self,
        *,
        job_name: str,
        namespace: str,
        kind: str = "Job",
        kubernetes_conn_id: str = DEFAULT_CONN_ID,
        max_attempts: int = 1,
        retry_backoff: float = 60.0,
        retry_backoff_max: float = 1800.0,
        retryable_exit_codes: list[int] | tuple[int, ...] = (),
        fatal_exit_codes: list[int] | tuple[int, ...] = (),
        stream_logs: bool = True,
        log_tail_lines: int = 30,
        recheck_interval: float = 60.0,
        quota_configmap: str | None = None,
        quota_namespace: str | None = None,
        observe: bool = False,
        label_selector: str | None = None,
        target_states: list[str] | tuple[str, ...] = (JobState.SUCCEEDED.value,),
        fail_states: list[str] | tuple[str, ...] = (JobState.FAILED.value, JobState.CANCELLED.value),
    ):
        super().__init__()
        if kind not in ("Job", "MPIJob"):
            raise ValueError(f"kind: must be 'Job' or 'MPIJob', got {kind!r}")
        self.job_name = job_name
        self.namespace = namespace
        self.kind = kind
        self.kubernetes_conn_id = kubernetes_conn_id
        self.max_attempts = max(1, int(max_attempts))
        self.retry_backoff = float(retry_backoff)
        self.retry_backoff_max = float(retry_backoff_max)
        self.retryable_exit_codes = tuple(int(c) for c in retryable_exit_codes)
        self.fatal_exit_codes = tuple(int(c) for c in fatal_exit_codes)
        self.stream_logs = bool(stream_logs)
        self.log_tail_lines = int(log_tail_lines)
        self.recheck_interval = float(recheck_interval)
        self.quota_configmap = quota_configmap
        self.quota_namespace = quota_namespace
        # Observe mode (JobSensor): follow a job something else submitted; never admit, retry or delete.
        self.observe = bool(observe)
        self.label_selector = label_selector
        self.target_states = tuple(JobState(s).value for s in target_states)
        self.fail_states = tuple(JobState(s).value for s in fail_states)
        if set(self.target_states) & set(self.fail_states):
            raise ValueError("target_states and fail_states must not overlap")

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "job_name": self.job_name,
                "namespace": self.namespace,
                "kind": self.kind,
                "kubernetes_conn_id": self.kubernetes_conn_id,
                "max_attempts": self.max_attempts,
                "retry_backoff": self.retry_backoff,
                "retry_backoff_max": self.retry_backoff_max,
                "retryable_exit_codes": list(self.retryable_exit_codes),
                "fatal_exit_codes": list(self.fatal_exit_codes),
                "stream_logs": self.stream_logs,
                "log_tail_lines": self.log_tail_lines,
                "recheck_interval": self.recheck_interval,
                "quota_configmap": self.quota_configmap,
                "quota_namespace": self.quota_namespace,
                "observe": self.observe,
                "label_selector": self.label_selector,
                "target_states": list(self.target_states),
                "fail_states": list(self.fail_states),
            },
        )

    # --- the run loop ---

    async def run(self) -> AsyncIterator[TriggerEvent]:
        if self.observe:
            async for event in self._observe():
                yield event
            return
        resource = _resource(self.kind)
        watch = await shared.acquire(self.kubernetes_conn_id, self.namespace)
        client = watch.client
        admission = Admission.for_watch(
            watch, quota_configmap=self.quota_configmap, quota_namespace=self.quota_namespace
        )
        tail: deque[str] = deque(maxlen=self.log_tail_lines)
        streamer = LogStreamer(client, self.namespace, self.log, tail) if self.stream_logs else None
        name = self.job_name
        sub = watch.subscribe(name)
        try:
            await watch.wait_synced(timeout=60)
            name = self._latest_attempt_name(watch, resource, name)
            if name != sub.key:
                watch.unsubscribe(sub)
                sub = watch.subscribe(name)
            # The initial listing notified the subscription; the first look below reads what it
            # listed. Left set, that stale wake-up would make the second look read the cache before
            # the admission's own change arrives, and admit the job a second time.
            sub.clear()
            seen: tuple | None = None
            history: list[dict[str, Any]] = []
            final_read = False
            final_events: list[dict] = []  # read with the final look: what outlives a disrupted pod
            unsuspended_from: str | None = None  # resourceVersion this process admitted without quota
            while True:
                job = watch.get(resource, name) or await self._patiently(
                    client.get_or_none, resource, self.namespace, name
                )
                if job is None:
                    self.log.error("job %s/%s no longer exists", self.namespace, name)
                    yield TriggerEvent(
                        {
                            "status": "error",
                            "job_name": name,
                            "kind": self.kind,
                            "namespace": self.namespace,
                            "state": JobState.UNKNOWN.value,
                            "reason": "JobDeleted",
                            "message": f"{self.kind} {name} was deleted outside the task",
                            "attempts": history,
                            "log_tail": list(tail),
                            "retryable": False,
                        }
                    )
                    return
                job.setdefault("kind", self.kind)
                pods = watch.pods_of(name)
                # A job the product has ruled on (a verdict) stays suspended: never admit it again.
                waiting = _suspended(job) and labels.VERDICT not in (job["metadata"].get("annotations") or {})
                version = job["metadata"].get("resourceVersion")
                if waiting and unsuspended_from is not None and unsuspended_from == version:
                    # This process unsuspended this very version: the change is on its way, but a pod's
                    # event (another watch stream) can wake us before the job's own. Do not admit twice.
                    queue = None
                else:
                    queue = await self._patiently(admission.ensure, job) if waiting else None
                    direct = waiting and queue is None and not admission.quota_enabled
                    unsuspended_from = version if direct else None
                snap = snapshot(job, pods, final_events, queue=queue, now=_now())
                if tracking.signature(snap) != seen:
                    seen = tracking.signature(snap)
                    self.log.info("%s %s: %s", self.kind, name, tracking.state_line(snap))
                if streamer is not None:
                    streamer.follow(snap, pods)
                failure = _failure(snap, self.retryable_exit_codes, self.fatal_exit_codes)
                attempt = attempts.attempt_of(job)
                decision = tracking.decide(
                    snap,
                    failure,
                    attempt=attempt,
                    max_attempts=self.max_attempts,
                    backoff=timedelta(seconds=self.retry_backoff),
                    backoff_max=timedelta(seconds=self.retry_backoff_max),
                )
                if decision.step is tracking.Step.FAIL_FAST:
                    # The pod's back-off message hides the registry's answer; the pull events carry it.
                    # Look once, just before ruling, so a transient refusal is never ruled permanent.
                    events = await self._patiently(
                        self._events_of, client, [p["metadata"]["name"] for p in pods]
                    )
                    snap = snapshot(job, pods, events, queue=queue, now=_now())
                    failure = _failure(snap, self.retryable_exit_codes, self.fatal_exit_codes)
                    if tracking.stuck_for_good(snap, failure, events):
                        await self._patiently(self._rule_failed, client, resource, job, snap, failure)
                    await sub.wait(timeout=self.recheck_interval)
                    continue
                if decision.step is tracking.Step.WAIT:
                    await sub.wait(timeout=admission.wake_after(job, self.recheck_interval))
                    continue
                if not final_read:
                    # Jobs and pods arrive on separate watch streams: the Job's final condition can
                    # overtake its pods' last statuses. Read the pods once, then decide on fresh facts.
                    final_read = True
                    fresh = await self._patiently(self._pods_now, client, name)
                    for pod in fresh:
                        watch.absorb(PODS, pod)
                    disrupted = disrupted_pod(job)
                    if disrupted:
                        # The disrupted pod may be gone; its events still say whether its node was lost.
                        final_events = await self._patiently(self._events_of, client, [disrupted])
                    continue
                await admission.release(job)
                history.append(_attempt_record(job, snap))
                if decision.step is tracking.Step.RETRY:
                    name = await self._patiently(
                        self._submit_next_attempt, client, resource, job, attempt, decision.delay
                    )
                    self.log.warning(
                        "attempt %d of %s failed (%s); attempt %d of %d starts after %s as %s",
                        attempt,
                        self.job_name,
                        getattr(snap.reason, "value", snap.reason),
                        attempt + 1,
                        self.max_attempts,
                        decision.delay,
                        name,
                    )
                    watch.unsubscribe(sub)
                    sub = watch.subscribe(name)
                    seen = None
                    final_read = False
                    final_events = []
                    continue
                if streamer is not None:
                    await streamer.drain(timeout=10)
                status = "success" if snap.state is JobState.SUCCEEDED else "failed"
                metrics.emit(metrics.finished(job, snap.state.value, snap.reason.value))
                yield TriggerEvent(
                    tracking.event_payload(
                        snap,
                        failure,
                        status=status,
                        job_name=name,
                        kind=self.kind,
                        namespace=self.namespace,
                        attempts=history,
                        log_tail=list(tail),
                        retryable=decision.retryable,
                    )
                )
                return
        finally:
            watch.unsubscribe(sub)
            if streamer is not None:
                await streamer.close()
            shared.release(self.kubernetes_conn_id, self.namespace)

    async def _observe(self) -> AsyncIterator[TriggerEvent]:
        """JobSensor's wait: until the job (by name, or the newest matching the labels) reaches a target
        or a fail state. A job that does not exist yet is waited for."""
        resource = _resource(self.kind)
        scope = (
            shared.Scope.for_labels(self.label_selector)
            if self.label_selector
            else shared.Scope.for_job(self.job_name, self.kind)
        )
        watch = await shared.acquire(self.kubernetes_conn_id, self.namespace, scope)
        subs: dict[str, shared.Subscription] = {}
        wake = asyncio.Event()
        remove = watch.add_listener(lambda *_: wake.set())
        seen: tuple | None = None
        try:
            await watch.wait_synced(timeout=60)
            while True:
                job = self._observed_job(watch, resource)
                if job is not None:
                    name = job["metadata"]["name"]
                    job.setdefault("kind", self.kind)
                    snap = snapshot(job, watch.pods_of(name), (), now=_now())
                    if tracking.signature(snap) != seen:
                        seen = tracking.signature(snap)
                        self.log.info("%s %s: %s", self.kind, name, tracking.state_line(snap))
                    state = snap.state.value
                    if state in self.target_states or state in self.fail_states:
                        yield TriggerEvent(
                            tracking.event_payload(
                                snap,
                                None,
                                status="success" if state in self.target_states else "failed",
                                job_name=name,
                                kind=self.kind,
                                namespace=self.namespace,
                                attempts=[_attempt_record(job, snap)],
                                log_tail=[],
                                retryable=False,
                            )
                        )
                        return
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(wake.wait(), self.recheck_interval)
                wake.clear()
        finally:
            remove()
            for sub in subs.values():
                watch.unsubscribe(sub)
            shared.release(self.kubernetes_conn_id, self.namespace, scope)

    async def _patiently(self, call: Callable[..., Awaitable[T]], *args: Any) -> T:
        # Without this, one throttled or failed request would fail the Airflow task of a job that is
        # running fine: on the triggerer, wait the API out.
        return await patiently(call, *args, log=self.log)

    def _observed_job(self, watch: shared.SharedWatch, resource: Resource) -> dict | None:
        if not self.label_selector:
            return watch.get(resource, self.job_name)
        jobs = watch.jobs(resource)
        jobs.sort(key=lambda j: j["metadata"].get("creationTimestamp") or "")
        return jobs[-1] if jobs else None

    def _latest_attempt_name(self, watch: shared.SharedWatch, resource: Resource, name: str) -> str:
        """After a rebuild, the job in the kwargs may have been followed by later attempts."""
        first = watch.get(resource, name)
        if first is None:
            return name
        meta_labels = first["metadata"].get("labels") or {}
        # Later attempts are only ever named attempt_name(job_name, k): look those names up rather than
        # scan every cached job (a scan per trigger is quadratic when a triggerer restarts with
        # thousands of triggers, and stalls the loop for all of them).
        try:
            names = [attempt_name(self.job_name, k) for k in range(1, self.max_attempts + 1)]
            candidates = [j for j in (watch.get(resource, n) for n in names) if j is not None]
        except ValueError:  # a name this product did not make: fall back to the labels
            candidates = watch.jobs(resource)
        siblings = [
            j
            for j in candidates
            if (j["metadata"].get("labels") or {}).get(labels.TASK_KEY) == meta_labels.get(labels.TASK_KEY)
            and (j["metadata"].get("labels") or {}).get(labels.TRY) == meta_labels.get(labels.TRY)
        ]
        latest = attempts.latest_attempt(siblings) or first
        return latest["metadata"]["name"]

    async def _pods_now(self, client: KubeClient, name: str) -> list[dict]:
        key = labels.MPI_JOB_NAME if self.kind == "MPIJob" else labels.LEGACY_JOB_NAME
        listing = await client.list(PODS, self.namespace, label_selector=f"{key}={name}")
        return listing.get("items") or []

    async def _events_of(self, client: KubeClient, pod_names: list[str]) -> list[dict]:
        events: list[dict] = []
        for pod in pod_names:
            listing = await client.list(EVENTS, self.namespace, field_selector=f"involvedObject.name={pod}")
            events.extend(listing.get("items") or [])
        return events

    async def _rule_failed(
        self, client: KubeClient, resource: Resource, job: dict, snap: JobSnapshot, failure: Failure | None
    ) -> None:
        """Record the product's verdict on the job and suspend it, so its pods (and GPUs) go now."""
        reason = snap.reason.value
        message = (failure.message if failure else "") + (f": {snap.message}" if snap.message else "")
        self.log.error("%s %s cannot start (%s); failing it now", self.kind, job["metadata"]["name"], reason)
        suspend = {"runPolicy": {"suspend": True}} if self.kind == "MPIJob" else {"suspend": True}
        patch = {
            "metadata": {"annotations": {labels.VERDICT: reason, labels.VERDICT_MESSAGE: message[:1000]}},
            "spec": suspend,
        }
        try:
            await client.merge_patch(resource, self.namespace, job["metadata"]["name"], patch)
        except KubeError as exc:
            if not exc.not_found:
                raise

    async def _submit_next_attempt(
        self, client: KubeClient, resource: Resource, job: dict, attempt: int, delay: timedelta
    ) -> str:
        now = _now()
        name = attempt_name(self.job_name, attempt + 1)
        body = attempts.next_attempt(job, name=name, attempt=attempt + 1, not_before=now + delay, now=now)
        try:
            await client.create(resource, self.namespace, body)
        except KubeError as exc:
            if not exc.already_exists:  # a rebuilt trigger already submitted it: adopt
                raise
        return name

    # --- user kill and teardown ---

    async def on_kill(self) -> None:
        """A user marked the task failed/success or cleared it: delete the job, free its quota."""
        client = await shared.client_for(self.kubernetes_conn_id)
        resource = _resource(self.kind)
        job = await client.get_or_none(resource, self.namespace, self.job_name)
        name = self.job_name
        what = "already gone"
        if job is not None:
            job.setdefault("kind", resource.kind)
            ledger_namespace = (self.quota_namespace or self.namespace) if self.quota_configmap else None
            outcome = await actions.cancel(client, self.namespace, job, "airflow", ledger_namespace)
            name = outcome.name
            if outcome.already_finished:
                what = "already finished, left as it is"
            elif outcome.deleted:
                what = "cancelled and deleted"
        self.log.info("task killed by a user: %s %s/%s %s", self.kind, self.namespace, name, what)

    async def cleanup(self) -> None:
        """Runs on every exit, including a triggerer restart: never touches the job."""


def _failure(snap: JobSnapshot, retryable: tuple[int, ...], fatal: tuple[int, ...]) -> Failure | None:
    """The failure class of a snapshot reporting a failure (a FAILED job, or live pods stuck on one);
    None otherwise and for product verdicts (QueueTimeout, OverQuota, ...) that are not pod failures."""
    if snap.state not in (
        JobState.FAILED,
        JobState.STARTING,
        JobState.RETRYING,
        JobState.DEGRADED,
        JobState.UNKNOWN,
    ):
        return None
    try:
        return classify_failure(snap, retryable_exit_codes=retryable, fatal_exit_codes=fatal)
    except ValueError:
        return None


def _suspended(job: dict) -> bool:
    spec = job.get("spec") or {}
    if job.get("kind") == "MPIJob":
        return bool((spec.get("runPolicy") or {}).get("suspend"))
    return bool(spec.get("suspend"))


def _attempt_record(job: dict, snap: JobSnapshot) -> dict[str, Any]:
    return {
        "attempt": attempts.attempt_of(job),
        "job_name": job["metadata"]["name"],
        "state": snap.state.value,
        "reason": str(getattr(snap.reason, "value", snap.reason) or ""),
        "exit_codes": tracking.exit_codes(snap),
        "queued_at": _iso(snap.queued_at),
        "started_at": _iso(snap.started_at),
        "finished_at": _iso(snap.finished_at),
        "gpu_seconds": snap.gpu_seconds,
    }


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None
