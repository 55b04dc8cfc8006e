"""JobSensorTrigger: what a deferred :class:`~airflow_jobs_plugin.airflow.sensors.JobSensor` waits on.

It only watches: it never admits, retries, cancels or deletes a job (the job belongs to whoever
submitted it). It waits for the job (by name, or the newest job matching labels) to reach one of
``target_states``, to have passed one (see :func:`airflow_jobs_plugin.lifecycle.tracking.sensor_verdict`), or to
end in a way that can never reach one, and yields one :class:`~airflow_jobs_plugin.jobs.outcome.JobEvent`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_jobs_plugin.airflow.settle import settle
from airflow_jobs_plugin.cluster import watch as shared
from airflow_jobs_plugin.cluster.kube import DEFAULT_CONN_ID
from airflow_jobs_plugin.cluster.objects import Meta, latest
from airflow_jobs_plugin.cluster.records import ReadMemo
from airflow_jobs_plugin.cluster.waiting import wait_event
from airflow_jobs_plugin.jobs import kinds
from airflow_jobs_plugin.jobs.outcome import EventStatus
from airflow_jobs_plugin.lifecycle import snapshot, tracking
from airflow_jobs_plugin.lifecycle.tracking import (
    DEFAULT_FAIL_STATES,
    DEFAULT_TARGET_STATES,
    check_states,
)


class JobSensorTrigger(BaseTrigger):
    """Wait through the process's shared watch (scoped to the job's name or labels) for a job's state."""

    def __init__(
        self,
        *,
        job_name: str,
        namespace: str,
        kind: str = kinds.DEFAULT_KIND.name,
        kubernetes_conn_id: str = DEFAULT_CONN_ID,
        label_selector: str | None = None,
        target_states: list[str] | tuple[str, ...] = DEFAULT_TARGET_STATES,
        fail_states: list[str] | tuple[str, ...] = DEFAULT_FAIL_STATES,
        recheck_interval: float = 60.0,
        deferred_at: str | None = None,
    ):
        super().__init__()
        kinds.for_name(kind)  # a bad name is refused here, naming the choices
        if not job_name and not label_selector:
            raise ValueError("JobSensorTrigger: give job_name or label_selector")
        self.job_name = job_name
        self.namespace = namespace
        self.kind = kind
        self.kubernetes_conn_id = kubernetes_conn_id
        self.label_selector = label_selector
        self.target_states, self.fail_states = check_states(target_states, fail_states)
        self.recheck_interval = float(recheck_interval)
        # When the sensor deferred: a state reached sooner after it is reported once the deferral has
        # settled (jobs/stale_event.py).
        self.deferred_at = deferred_at

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "job_name": self.job_name,
                "namespace": self.namespace,
                "kind": self.kind,
                "kubernetes_conn_id": self.kubernetes_conn_id,
                "label_selector": self.label_selector,
                "target_states": list(self.target_states),
                "fail_states": list(self.fail_states),
                "recheck_interval": self.recheck_interval,
                "deferred_at": self.deferred_at,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        scope = (
            shared.Scope.for_labels(self.label_selector)
            if self.label_selector
            else shared.Scope.for_job(self.job_name, self.kind)
        )
        watch = await shared.acquire(self.kubernetes_conn_id, self.namespace, scope)
        wake = asyncio.Event()
        remove = watch.add_listener(lambda *_: wake.set())
        seen: tuple | None = None
        pods_read = ReadMemo()  # the watch replaces a changed pod, never edits it: see ReadMemo
        try:
            await watch.wait_synced(timeout=60)
            while True:
                job = self._observed_job(watch)
                if job is None:
                    # A job of a custom resource the cluster did not serve at the watch's last check
                    # (its operator not installed yet): look again at the sensor's own pace.
                    watch.want(kinds.for_name(self.kind).resource)
                else:
                    name = Meta(job).name
                    snap = snapshot(
                        job, watch.pods_of(name), (), now=datetime.now(timezone.utc), memo=pods_read
                    )
                    if tracking.signature(snap) != seen:
                        seen = tracking.signature(snap)
                        self.log.info("%s %s: %s", self.kind, name, tracking.state_line(snap))
                    verdict = tracking.sensor_verdict(
                        snap.state, target_states=self.target_states, fail_states=self.fail_states
                    )
                    if verdict is not tracking.SensorVerdict.WAIT:
                        reached = verdict is tracking.SensorVerdict.REACHED
                        event = tracking.final_event(
                            snap,
                            None,
                            status=EventStatus.SUCCESS if reached else EventStatus.FAILED,
                            job_name=name,
                            kind=self.kind,
                            namespace=self.namespace,
                            history=[tracking.attempt_record(job, snap)],
                            log_tail=[],
                            retryable=False,
                            annotations=Meta(job).annotations,
                        )
                        await settle(self.deferred_at, name)
                        yield TriggerEvent(event.to_payload())
                        return
                await wait_event(wake, self.recheck_interval)
                wake.clear()
        finally:
            remove()
            shared.release(self.kubernetes_conn_id, self.namespace, scope)

    def _observed_job(self, watch: shared.SharedWatch) -> dict | None:
        resource = kinds.for_name(self.kind).resource
        if not self.label_selector:
            return watch.get(resource, self.job_name)
        return latest(watch.jobs(resource), lambda j: Meta(j).created_at)
