"""JobTrigger: follows a GPU job on the triggerer, from the queue to its final state.

Example (what :class:`~airflow_jobs_plugin.airflow.operators.JobOperator` defers to; DAG authors rarely build
one themselves)::

    self.defer(
        trigger=JobTrigger(job_name="train-3f2a-1-1", namespace="ml", kind="MPIJob", max_attempts=3),
        method_name="execute_complete",
    )

A JobSensor's wait is :class:`~airflow_jobs_plugin.airflow.job_sensor_trigger.JobSensorTrigger`.

Everything the trigger knows comes from the cluster: its kwargs name the job and the retry rules, never a
manifest or a credential (trigger kwargs are stored unencrypted). ``run()`` can start over at any
moment (a triggerer restart rebuilds the trigger from ``serialize()``) and picks up where the cluster
is: the latest attempt of the job, its admission, its pods.

The trigger observes; it admits nothing. The triggerer runs DAG authors' code (Airflow's security
model), so the admission controller (controller/), not the trigger, admits the job, rules on it and
frees what it held; the trigger reads why the job waits from the controller's queue boards
(queueing/engines/observer.py). Its one write is the next attempt of a job that failed for a retryable
reason, created suspended behind the pool's gate as the worker creates the first.
"""

from __future__ import annotations

import gc
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import datetime, timedelta, timezone
from types import MappingProxyType
from typing import Any, TypeVar

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_jobs_plugin import metrics
from airflow_jobs_plugin.airflow.settle import settle
from airflow_jobs_plugin.cluster import watch as shared
from airflow_jobs_plugin.cluster.kube import DEFAULT_CONN_ID, EVENTS, PODS, KubeError, patiently
from airflow_jobs_plugin.cluster.objects import Meta
from airflow_jobs_plugin.cluster.records import ReadMemo
from airflow_jobs_plugin.jobs import attempts, kinds, labels, manifests
from airflow_jobs_plugin.jobs.jobview import JobView
from airflow_jobs_plugin.jobs.kill_request import KILLED_BY
from airflow_jobs_plugin.jobs.naming import attempt_name
from airflow_jobs_plugin.jobs.outcome import AttemptRecord, EventStatus, JobEvent
from airflow_jobs_plugin.jobs.results import job_result
from airflow_jobs_plugin.lifecycle import (
    Failure,
    JobSnapshot,
    JobState,
    QueueStatus,
    Reason,
    Reservation,
    classify_failure,
    disrupted_pod,
    snapshot,
    tracking,
)
from airflow_jobs_plugin.logs.logcursor import LogMarker
from airflow_jobs_plugin.logs.logstream import FINAL_DRAIN, LogStreamer, LogTail
from airflow_jobs_plugin.queueing.engines.observer import Observer
from airflow_jobs_plugin.queueing.quota import ledger
from airflow_jobs_plugin.usecases import actions
from airflow_jobs_plugin.usecases.submission import ensure_companions

T = TypeVar("T")

# A follow that has seen no disruption on its job's pods: one shared empty mapping.
NO_DISRUPTIONS: Mapping[str, Reason] = MappingProxyType({})

# The queue reason of a job the pool admitted (its reservation written) but not yet unsuspended.
ADMITTED = "Admitted"


def _now() -> datetime:
    return datetime.now(timezone.utc)


class JobTrigger(BaseTrigger):
    """Follow the job a :class:`~airflow_jobs_plugin.airflow.operators.JobOperator` submitted, through the
    process's shared watch: say why it waits, log its states and its pods' logs, start its next attempt
    after a retryable failure, and yield exactly one event (a :class:`~airflow_jobs_plugin.jobs.outcome.JobEvent`
    payload) when it is over.

    A STOPPED job is not over: the trigger logs who stopped it and waits (deferred, on no worker) for a
    resume. A job cancelled or deleted on purpose ends the wait as CANCELLED, naming who and when.
    """

    def __init__(
        self,
        *,
        job_name: str,
        namespace: str,
        kind: str = kinds.DEFAULT_KIND.name,
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
        deferred_at: str | None = None,
        ttl_after_finished: float | None = None,
        **previous: Any,
    ):
        super().__init__()
        kinds.for_name(kind)  # a bad name is refused here, naming the choices
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
        # When the task deferred, and the job's TTL after it finishes: together they tell a job deleted
        # by hand while no triggerer ran from one its TTL cleaned up (tracking.unseen_deletion_is_a_cancel).
        self.deferred_at = deferred_at
        self.ttl_after_finished = None if ttl_after_finished is None else float(ttl_after_finished)
        self._sensor = _previous_sensor(self, previous)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        if self._sensor is not None:
            return self._sensor.serialize()
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
                "deferred_at": self.deferred_at,
                "ttl_after_finished": self.ttl_after_finished,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        if self._sensor is not None:  # a JobSensor's wait deferred by the previous version
            async for sensed in self._sensor.run():
                yield sensed
            return
        watch = await shared.acquire(self.kubernetes_conn_id, self.namespace)
        follow = _Follow(self, watch)
        try:
            await follow.start()
            freeze_start_up_objects()
            # The follow's loop is here, in the frame every deferred trigger keeps anyway: a coroutine of
            # the follow's running it would be a second frame held as long as the job runs (216 bytes).
            # The look returns before the wait: what it read (the job, its pods, the snapshot) is not
            # held in a suspended frame either.
            while not isinstance(outcome := await follow.look(), JobEvent):
                if outcome is not None:
                    await follow.sub.wait(timeout=outcome)
            event = outcome
            # A job that ended seconds after the deferral is reported once Airflow 3.3.2's scheduler has
            # had time to drain the deferring worker's exit (jobs/stale_event.py).
            await settle(self.deferred_at, event.job_name)
            metrics.emit(metrics.outcome(event.state, event.reason, JobView(follow.last_seen or {}).group))
            yield TriggerEvent(event.to_payload())
        finally:
            await follow.close()
            shared.release(self.kubernetes_conn_id, self.namespace)

    # --- user kill and teardown ---

    async def on_kill(self) -> None:
        """A user marked the task failed or success, or cleared it: ask for its job to be cancelled.

        The triggerer runs DAG authors' code, so it may not cancel a job itself (any DAG could then cancel
        any tenant's job): it writes a kill request on the job (``labels.KILL_REQUESTED``, the try it
        followed), and the GPU Jobs app in Airflow's API server cancels the job once Airflow's database
        says its task instance was killed (jobs/kill_request.py), naming Airflow's user as who."""
        await self._request_kill("task killed in Airflow")

    async def _request_kill(self, why: str) -> None:
        client = await shared.client_for(self.kubernetes_conn_id)
        resource = kinds.for_name(self.kind).resource
        job = await client.get_or_none(resource, self.namespace, self.job_name)
        if job is None:
            self.log.info("%s: %s %s/%s already gone", why, self.kind, self.namespace, self.job_name)
            return
        job = await actions.newest_attempt(client, self.namespace, job)
        view = JobView(job)
        if view.finished:
            self.log.info(
                "%s: %s %s/%s already finished, left as it is",
                why,
                self.kind,
                self.namespace,
                view.name,
            )
            return
        try_number = getattr(getattr(self, "task_instance", None), "try_number", None) or 0
        await client.merge_patch(
            kinds.kind_of(job).resource,
            self.namespace,
            view.name,
            {"metadata": {"labels": {labels.KILL_REQUESTED: str(try_number)}}},
        )
        self.log.info(
            "%s: asked for %s %s/%s to be cancelled (the GPU Jobs app in Airflow's API server cancels it "
            "once Airflow's database confirms it)",
            why,
            self.kind,
            self.namespace,
            view.name,
        )

    async def cleanup(self) -> None:
        """Runs on every exit, including a triggerer restart. Touches the job only once the deferral's
        deadline has passed: Airflow 3.3 cancels a trigger past its timeout without calling ``on_kill``
        (airflow-core 3.3 ``jobs/triggerer_job_runner.py``, ``run_trigger``: "For timeout, raise
        immediately without calling on_kill()"), only this, so the kill is asked for here. The API server
        cancels only once Airflow's database shows the try failing for its timeout (jobs/kill_request.py
        rule 5): asked at a triggerer's restart just past the deadline, before the scheduler's check, it
        is declined, and the trigger's next cancel asks again."""
        deadline = getattr(self, "timeout_after", None)  # set by the triggerer from the deferral's timeout
        if not isinstance(deadline, datetime):
            return
        if (deadline if deadline.tzinfo else deadline.replace(tzinfo=timezone.utc)) > _now():
            return
        try:
            await self._request_kill("task's deferral timed out (execution_timeout)")
        except Exception as exc:  # the teardown must not fail; the job then runs to its active_deadline
            self.log.warning(
                "deferral timed out: could not ask for %s %s/%s to be cancelled: %s",
                self.kind,
                self.namespace,
                self.job_name,
                exc,
            )


# The process whose start-up objects were frozen (gc.freeze): once per process, and again in a child
# forked after it (its own start-up).
_FROZEN_IN: int | None = None


def freeze_start_up_objects() -> bool:
    """Once per process, when its first JobTrigger has started: move every object alive now out of the
    garbage collector's generations (``gc.freeze``, Python 3.7+). True if it froze them now.

    A full collection walks every tracked object of the process with the loop stopped: at 1,000 to
    20,000 triggers that is 0.6 to 1.5 s in which no trigger of the process runs, and a final event
    that falls in it waits. Most of what it walks lives as long as the process: Airflow's and the
    product's modules, the triggerer's own objects, the shared watch's cache as first listed, the
    triggers already built. Frozen objects are skipped by every later collection (CPython's gc docs:
    ``gc.freeze`` moves them to a permanent generation ignored by future collections) and are still
    freed by their reference counts when they die; only a cycle among them would outlive its use, so a
    collection first clears the start-up's cyclic garbage. That one collection is paid once, at
    start-up, instead of on every full collection after. The collector's thresholds, and what it does
    with every object made afterwards, are Airflow's and the other triggers' as before.

    The triggerer runs its triggers in a child process of its own (Airflow 3.3,
    ``airflow/jobs/triggerer_job_runner.py``: the ``TriggerRunnerSupervisor`` starts the runner's
    process), which is the process the first ``run`` is in."""
    global _FROZEN_IN
    pid = os.getpid()
    if _FROZEN_IN == pid:
        return False
    _FROZEN_IN = pid
    gc.collect()
    gc.freeze()
    return True


# Who a cancel from Airflow's own controls is put down to: Airflow does not tell a trigger which user.
AIRFLOW_USER = KILLED_BY


def _previous_sensor(trigger: JobTrigger, previous: dict[str, Any]) -> BaseTrigger | None:
    """The previous version served JobSensor too (``observe=True``) and wrote the sensor's kwargs into
    every JobTrigger it serialized; a triggerer upgraded mid-run rebuilds those from the database."""
    unknown = set(previous) - {"observe", "label_selector", "target_states", "fail_states"}
    if unknown:
        raise TypeError(f"JobTrigger got unexpected keyword argument(s) {sorted(unknown)}")
    if not previous.get("observe"):
        return None
    from airflow_jobs_plugin.airflow.job_sensor_trigger import JobSensorTrigger

    return JobSensorTrigger(
        job_name=trigger.job_name,
        namespace=trigger.namespace,
        kind=trigger.kind,
        kubernetes_conn_id=trigger.kubernetes_conn_id,
        label_selector=previous.get("label_selector"),
        target_states=previous.get("target_states") or (JobState.SUCCEEDED.value,),
        fail_states=previous.get("fail_states") or (JobState.FAILED.value, JobState.CANCELLED.value),
        recheck_interval=trigger.recheck_interval,
    )


class _Follow:
    """One trigger's follow of one task try's job, attempt after attempt. Each look at the cluster is
    :meth:`step`; the rest are its steps."""

    # A triggerer holds one per deferred job for as long as the job runs.
    __slots__ = (
        "t",
        "log",
        "watch",
        "client",
        "adapter",
        "resource",
        "observer",
        "tail",
        "streamer",
        "name",
        "sub",
        "history",
        "ran",
        "looked",
        "reported",
        "preemptions_seen",
        "final_read",
        "final_events",
        "_last_seen",
        "pods_read",
        "pod_names_seen",
        "pods_confirmed",
        "pods_listing",
        "pods_looked",
        "disruptions",
    )
    _last_seen: dict | None

    def __init__(self, trigger: JobTrigger, watch: shared.SharedWatch):
        self.t = trigger
        self.log = trigger.log
        self.watch = watch
        self.client = watch.client
        self.adapter = kinds.for_name(trigger.kind)
        self.resource = self.adapter.resource
        # What the admission controller (or Kueue) says of the job while it waits: read only.
        self.observer = Observer.for_watch(watch)
        self.tail = LogTail(trigger.log_tail_lines)
        self.streamer = (
            LogStreamer(self.client, trigger.namespace, self.log, self.tail, owner=trigger.job_name)
            if trigger.stream_logs
            else None
        )
        self.name = trigger.job_name
        self.sub = watch.subscribe(self.name)
        watch.want(self.resource)
        self.history: list[AttemptRecord] = []
        # The watch's cached pods are replaced on every change, never edited: what a look read of the
        # pods an event did not touch serves the next look.
        self.pods_read = ReadMemo()
        # The pods the last look saw, and their picture when the job was last read afresh because of
        # them (_caught_up).
        self.pod_names_seen: tuple[str, ...] = ()
        self.pods_confirmed: tuple[tuple[str, str], ...] | None = None
        self._new_attempt()

    def _new_attempt(self) -> None:
        self.ran: JobSnapshot | None = None  # the job's last look while admitted, until a run ends
        self.looked: JobSnapshot | None = None  # the job's previous look
        # The look last logged. Its signature is computed again at each look rather than kept: the
        # snapshot is usually the very one ``looked`` holds, and a kept signature (its nested tuples, about
        # 300 bytes) is what one of 20,000 triggers would pay for it (docs/benchmarks.md).
        self.reported: JobSnapshot | None = None
        self.preemptions_seen: str | None = None  # the job's preemption count at the last look
        self.final_read = False
        # The names in the one consistent LIST of the pods, and its version, once the job's ruling came
        # before its pods' last statuses (tracking.pods_lag_ruling); the pods the last look used; the
        # disruptions seen on pods (tracking.disruptions_seen), which outlive the pods.
        self.pods_listing: tuple[frozenset[str], str | None] | None = None
        self.pods_looked: tuple[dict, ...] = ()
        self.disruptions: Mapping[str, Reason] = NO_DISRUPTIONS
        # Read with the final look: what outlives a disrupted pod.
        self.final_events: list[dict] | tuple[()] = ()
        self.last_seen = None  # the job as last seen, or as the watch saw it deleted

    @property
    def last_seen(self) -> dict | None:
        """The job as last seen, or as the watch saw it deleted since: the DELETED event carries the
        object as it was deleted, so a cancel's verdict written just before the delete is read there
        even if no look caught the object in between."""
        gone = self.sub.take_gone(self.resource.plural)
        if gone is not None:
            self._last_seen = gone
        return self._last_seen

    @last_seen.setter
    def last_seen(self, value: dict | None) -> None:
        self.sub.take_gone(self.resource.plural)  # a deletion seen before this look is older news
        self._last_seen = value

    async def close(self) -> None:
        self.watch.unsubscribe(self.sub)
        if self.streamer is not None:
            await self.streamer.close()

    async def start(self) -> None:
        """Wait for the watch's lists, then follow the newest attempt of the task try's job."""
        await self.watch.wait_synced(timeout=60)
        self._follow(self._newest_attempt_name())

    async def look(self) -> JobEvent | float | None:
        """One look at the job: the final event, the seconds to wait for the next change before looking
        again, or None to look again at once."""
        t = self.t
        # The look reads every change notified so far: only one notified from here on wakes the next
        # wait. (The initial listing notified the subscription too; left set, that stale wake-up would
        # make the second look read the cache before the admission's own change arrives, and admit the
        # job a second time.)
        self.sub.clear()
        job = await self._look()
        if job is None:
            return await self._vanished()
        job, pods = await self._caught_up(job, self.watch.pods_of(self.name))
        self.last_seen = job
        queue, reservation = await self._admit(job)
        snap = snapshot(
            job,
            pods,
            self.final_events,
            queue=queue,
            reservation=reservation,
            now=_now(),
            memo=self.pods_read,
            disruptions=self.disruptions,
        )
        self.disruptions = tracking.disruptions_seen(snap, self.disruptions)
        snap, annotations = tracking.who_cancelled(snap, Meta(job).annotations, now=_now())
        self._note_interrupted_run(job, snap)
        self._note_preemption(job)
        failure = _failure(snap, t.retryable_exit_codes, t.fatal_exit_codes)
        attempt = attempts.attempt_of(job)
        decision = tracking.decide(
            snap,
            failure,
            attempt=attempt,
            max_attempts=t.max_attempts,
            backoff=timedelta(seconds=t.retry_backoff),
            backoff_max=timedelta(seconds=t.retry_backoff_max),
        )
        if decision.step is not tracking.Step.WAIT and decision.step is not tracking.Step.FAIL_FAST:
            if not self.final_read:
                # Jobs and pods arrive on separate watch streams: the Job's final condition can overtake
                # its pods' last statuses. Read the pods once, then decide (and log) on fresh facts.
                await self._read_final_facts(job)
                return None
        resumed = tracking.resumed_line(self.reported, snap, Meta(job).annotations)
        if resumed is not None:
            self.log.info("%s %s: %s", t.kind, self.name, resumed)
        self._report(snap, pods)
        if decision.step is tracking.Step.FAIL_FAST:
            # Stuck for good: the admission controller rules on it (controller/rulings.py) and the
            # verdict's write wakes this trigger.
            return t.recheck_interval
        if decision.step is tracking.Step.WAIT:
            return self.observer.wake_after(job, t.recheck_interval)
        whole = None
        if decision.step is tracking.Step.RETRY:
            whole = await self._whole(job)
            if whole is None:
                # Deleted (or replaced) since this look: the next look tells which, once the watch does.
                return t.recheck_interval
        self.observer.forget(Meta(job).uid)
        self.history.append(tracking.attempt_record(job, snap))
        if whole is not None:
            await self._start_next_attempt(whole, snap, attempt, decision.delay)
            return None
        return await self._finish(snap, failure, decision.retryable, annotations, job_result(pods))

    def _note_interrupted_run(self, job: dict, snap: JobSnapshot) -> None:
        """A run that ended with the job back in a queue (preempted, requeued, stopped) goes into the
        history beside the attempts, so the task's summary shows every run, not only the last."""
        if snap.state in tracking.STARTED:
            self.ran = snap
        else:
            record = tracking.interrupted_run(job, self.ran, self.looked, snap, _now())
            if record is not None:
                self.history.append(record)
                self.ran = None
        self.looked = snap

    # --- the steps ---

    async def _look(self) -> dict | None:
        job = self.watch.get(self.resource, self.name) or await self._patiently(
            self.client.get_or_none, self.resource, self.t.namespace, self.name
        )
        return job

    async def _caught_up(self, job: dict, pods: list[dict]) -> tuple[dict, list[dict]]:
        """The job and its pods of one moment: the job as new as its pods (``_job_caught_up``), the pods
        as new as the job's ruling (one LIST of them, tracking.pods_lag_ruling, once per attempt), and
        no pod older than the last look saw it (tracking.newest_pods)."""
        job = await self._job_caught_up(job, pods)
        if self.pods_listing is None and tracking.pods_lag_ruling(job, pods):
            listed, listed_at = await self._patiently(self._pods_listed)
            for pod in listed:
                self.watch.absorb(PODS, pod)
            self.pods_listing = (frozenset(Meta(pod).name for pod in listed), listed_at)
            pods = self.watch.pods_of(self.name)
        if self.pods_listing is not None:
            pods = tracking.pods_as_listed(pods, *self.pods_listing)
        pods = tracking.newest_pods(self.pods_looked, pods)
        self.pods_looked = tuple(pods)
        return job, pods

    async def _job_caught_up(self, job: dict, pods: list[dict]) -> dict:
        """The job as new as its pods: read again from the API server when the pods show a change the
        cached job does not (tracking.pods_outran_job), once per change of the pods; folded into the
        watch, so later looks do not go back to the older version while its stream catches up."""
        seen, self.pod_names_seen = (
            self.pod_names_seen,
            tuple(Meta(p).name for p in pods),
        )
        if not tracking.pods_outran_job(job, pods, seen):
            return job
        picture = tracking.pods_picture(pods)
        if picture == self.pods_confirmed:
            return job
        self.pods_confirmed = picture
        fresh = await self._patiently(self.client.get_or_none, self.resource, self.t.namespace, self.name)
        if fresh is None or Meta(fresh).uid != Meta(job).uid:
            return job  # gone or replaced: the watch's DELETED event tells how it ended
        self.watch.absorb(self.resource, fresh)
        return self.watch.get(self.resource, self.name) or job

    async def _admit(self, job: dict) -> tuple[QueueStatus | None, Reservation | None]:
        """What the queue says of a job that waits for admission, and its reservation once the pool has
        admitted it (SCHEDULING / QuotaReserved until the controller's unsuspend lands)."""
        # A job the product ruled on (a verdict) or a user stopped is not waiting for admission.
        view = JobView(job)
        waiting = view.suspended and view.verdict is None and not view.stopped
        if not waiting:
            return None, None
        queue = await self._patiently(self.observer.status, job)
        reservation = None
        if queue is not None and queue.reason == ADMITTED:
            reservation = Reservation(_charged_gpus(job), _now())
        return queue, reservation

    def _note_preemption(self, job: dict) -> None:
        """Say in the task log that the pool preempted the job, and by whom, even when its TERMINATING and
        QUEUED states passed between two looks: the job's preemption count moved on."""
        annotations = Meta(job).annotations
        count = annotations.get(labels.PREEMPTIONS) or "0"
        if self.preemptions_seen is not None and count != self.preemptions_seen:
            message = annotations.get(labels.PREEMPTION_MESSAGE) or "preempted by a job of higher priority"
            self.log.info("%s %s: PREEMPTED: %s", self.t.kind, self.name, message)
        self.preemptions_seen = count

    def _report(self, snap: JobSnapshot, pods: list[dict]) -> None:
        news = self.reported is None or tracking.signature(snap) != tracking.signature(self.reported)
        self.reported = snap  # news or the same signature: the newest, the very snapshot ``looked`` keeps
        if news:
            self.log.info("%s %s: %s", self.t.kind, self.name, tracking.state_line(snap))
        if self.streamer is not None:
            self.streamer.follow(snap, pods)

    async def _read_final_facts(self, job: dict) -> None:
        self.final_read = True
        fresh = await self._patiently(self._pods_now)
        for pod in fresh:
            self.watch.absorb(PODS, pod)
        disrupted = disrupted_pod(job)
        if disrupted:
            # The disrupted pod may be gone; its events still say whether its node was lost.
            self.final_events = await self._patiently(self._events_of, [disrupted])

    async def _whole(self, job: dict) -> dict | None:
        """The whole object of the attempt ``job`` (a look from the watch's cache, which keeps only what
        the product reads of it: watch_transform), for the next attempt to be cloned from: its env,
        volumes and every field of its pod templates. None if it is gone or is another object now."""
        whole = await self._patiently(self.client.get_or_none, self.resource, self.t.namespace, self.name)
        if whole is None or Meta(whole).uid != Meta(job).uid:
            return None
        return whole

    async def _start_next_attempt(self, job: dict, snap: JobSnapshot, attempt: int, delay: timedelta) -> None:
        """Submit the next attempt, cloned from ``job``: the failed attempt's whole object (``_whole``)."""
        t = self.t
        name = attempt_name(t.job_name, attempt + 1)
        now = _now()
        body = attempts.next_attempt(job, name=name, attempt=attempt + 1, not_before=now + delay, now=now)
        await self._patiently(self._create_adopting, body)
        self.log.warning(
            "attempt %d of %s failed (%s); attempt %d of %d starts after %s as %s",
            attempt,
            t.job_name,
            getattr(snap.reason, "value", snap.reason),
            attempt + 1,
            t.max_attempts,
            delay,
            name,
        )
        self._follow(name)
        self._new_attempt()
        # This trigger created it: should it vanish before the first look, someone deleted it (a cancel).
        self.last_seen = body

    async def _finish(
        self,
        snap: JobSnapshot,
        failure: Failure | None,
        retryable: bool,
        annotations: dict[str, str],
        result: Any = None,
    ) -> JobEvent:
        markers = await self._logs_so_far()
        return tracking.final_event(
            snap,
            failure,
            status=EventStatus.SUCCESS if snap.state is JobState.SUCCEEDED else EventStatus.FAILED,
            job_name=self.name,
            kind=self.t.kind,
            namespace=self.t.namespace,
            history=self.history,
            log_tail=list(self.tail),
            retryable=retryable,
            annotations=annotations,
            result=result,
            log_markers=markers,
        )

    async def _logs_so_far(self) -> tuple[LogMarker, ...]:
        """Give the ended containers' logs a moment to finish printing, then stop printing: the event
        carries where each unfinished log stands, and the worker prints the rest (logtail)."""
        if self.streamer is None:
            return ()
        await self.streamer.drain(timeout=FINAL_DRAIN)
        return self.streamer.seal()

    async def _vanished(self) -> JobEvent | float:
        """The job object is gone: cancelled, deleted by hand, or (never seen) unknown; the seconds to wait
        while pods of it still stop."""
        t = self.t
        ttl = None if t.ttl_after_finished is None else timedelta(seconds=t.ttl_after_finished)
        if self.last_seen is None and tracking.unseen_deletion_is_a_cancel(t.deferred_at, ttl, now=_now()):
            # Gone before its TTL could have removed it: deleted on purpose while nobody watched.
            self.last_seen = {"kind": t.kind, "metadata": {"name": self.name, "namespace": t.namespace}}
        if self.last_seen is None:
            self.log.error("%s %s/%s does not exist", t.kind, t.namespace, self.name)
            return JobEvent(
                status=EventStatus.ERROR,
                job_name=self.name,
                kind=t.kind,
                namespace=t.namespace,
                state=JobState.UNKNOWN.value,
                reason="JobDeleted",
                message=f"{t.kind} {self.name} was deleted before the task could follow it",
                attempts=tuple(self.history),
                log_tail=tuple(self.tail),
            )
        last = self.last_seen
        pods = tracking.newest_pods(self.pods_looked, self.watch.pods_of(self.name))
        self.pods_looked = tuple(pods)
        snap, annotations = tracking.after_deletion(last, now=_now(), pods=pods)
        if not snap.state.is_terminal:
            # Its pods still stop (a deletion's garbage collection): TERMINATING until the last is gone.
            self._report(snap, pods)
            return t.recheck_interval
        self.observer.forget(Meta(last).uid)
        self.history.append(tracking.attempt_record(last, snap))
        self.reported = None
        self._report(snap, [])
        markers = await self._logs_so_far()
        failure = _failure(snap, t.retryable_exit_codes, t.fatal_exit_codes)
        return tracking.final_event(
            snap,
            failure,
            status=EventStatus.SUCCESS if snap.state is JobState.SUCCEEDED else EventStatus.FAILED,
            job_name=self.name,
            kind=t.kind,
            namespace=t.namespace,
            history=self.history,
            log_tail=list(self.tail),
            retryable=False,
            annotations=annotations,
            log_markers=markers,
        )

    # --- helpers ---

    def _follow(self, name: str) -> None:
        if name != self.sub.key:
            self.watch.unsubscribe(self.sub)
            self.sub = self.watch.subscribe(name)
        self.name = name

    async def _patiently(self, call: Callable[..., Awaitable[T]], *args: Any) -> T:
        # Without this, one throttled or failed request would fail the Airflow task of a job that is
        # running fine: on the triggerer, wait the API out.
        return await patiently(call, *args, log=self.log)

    def _newest_attempt_name(self) -> str:
        """After a rebuild, the job in the kwargs may have been followed by later attempts (and the first
        may be gone, deleted by its TTL). Later attempts are only ever named ``attempt_name(job_name, k)``:
        look those names up rather than scan every cached job (a scan per trigger is quadratic when a
        triggerer restarts with thousands of triggers, and stalls the loop for all of them)."""
        t = self.t
        try:
            names = [attempt_name(t.job_name, k) for k in range(1, t.max_attempts + 1)]
        except ValueError:  # a name this product did not make: it has no later attempts
            return t.job_name
        found = [j for j in (self.watch.get(self.resource, n) for n in names) if j is not None]
        newest = attempts.latest_attempt(found)
        return Meta(newest).name if newest is not None else t.job_name

    async def _pods_now(self) -> list[dict]:
        return (await self._pods_listed())[0]

    async def _pods_listed(self) -> tuple[list[dict], str | None]:
        """The job's pods in one LIST, and the version the list was read at."""
        key = self.adapter.pod_job_label
        listing = await self.client.list(PODS, self.t.namespace, label_selector=f"{key}={self.name}")
        return listing.get("items") or [], Meta(listing).resource_version

    async def _events_of(self, pod_names: list[str]) -> list[dict]:
        events: list[dict] = []
        for pod in pod_names:
            listing = await self.client.list(
                EVENTS, self.t.namespace, field_selector=f"involvedObject.name={pod}"
            )
            events.extend(listing.get("items") or [])
        return events

    async def _create_adopting(self, body: dict) -> None:
        # The next attempt waits behind the pool's gate, as every job is created (the admission policy
        # refuses anything else from this identity): the admission controller hands it on.
        body = manifests.pool_gate(body)
        try:
            created = await self.client.create(self.resource, self.t.namespace, body)
        except KubeError as exc:
            if not exc.already_exists:  # a rebuilt trigger already submitted it: adopt
                raise
            created = await self.client.get(self.resource, self.t.namespace, Meta(body).name)
        await ensure_companions(self.client, created)


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


def _charged_gpus(job: dict) -> int:
    """The GPUs the pool charges a job (what its reservation holds), 0 where it cannot be read."""
    try:
        return ledger.queued_job(job).gpus
    except ValueError:
        return 0
