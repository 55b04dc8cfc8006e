"""The simulated control plane: scheduler, kubelets, Job controller and MPI operator.

``Controllers.run()`` runs them all on the calling event loop, woken by store notifications and their own
timers. The fault methods (``lose_node``, ``restore_node``, ``evict_pod``) may be called from any thread:
they are carried out on the controllers' loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

from airflow_jobs_sim.clock import Clock
from airflow_jobs_sim.controllers.job import JobController
from airflow_jobs_sim.controllers.kubelet import (
    DEFAULT_EVICTION_MESSAGE,
    NODE_LOST_EVICTION_SECONDS,
    Kubelet,
)
from airflow_jobs_sim.controllers.kueue import KueueController
from airflow_jobs_sim.controllers.mpi import MPIController
from airflow_jobs_sim.controllers.scheduler import Scheduler
from airflow_jobs_sim.events import EventRecorder

log = logging.getLogger(__name__)

__all__ = ["Controllers"]


class Controllers:
    """Every simulated controller of one cluster, sharing its store, log store and clock."""

    def __init__(self, store: Any, logs: Any, clock: Clock, config: Any):
        self.store = store
        self.logs = logs
        self.clock = clock
        self.config = config
        self.recorder = EventRecorder(store, clock)
        self.scheduler = Scheduler(store, clock, self.recorder)
        self.kubelet = Kubelet(
            store, logs, clock, self.recorder, exec_commands=bool(getattr(config, "exec_commands", False))
        )
        self.jobs = JobController(store, clock, self.recorder)
        self.mpi = MPIController(store, clock, self.recorder)
        self._reconcilers: tuple[Any, ...] = (self.scheduler, self.kubelet, self.jobs, self.mpi)
        # Kueue, when the cluster installs it: its controller, and its job webhook inside the store.
        kueue_config = getattr(config, "kueue", None)
        self.kueue = KueueController(store, clock, self.recorder, kueue_config) if kueue_config else None
        if self.kueue is not None:
            store.webhooks.append(self.kueue)
            self._reconcilers += (self.kueue,)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    async def run(self) -> None:
        """Run every controller until cancelled; existing objects are picked up first."""
        loop = asyncio.get_running_loop()

        def notify(event_type: str, resource: str, obj: dict) -> None:
            try:
                loop.call_soon_threadsafe(self._dispatch, event_type, resource, obj)
            except RuntimeError:  # the loop is closing: nothing left to wake
                pass

        unsubscribe = self.store.subscribe(notify)
        with self._lock:
            self._loop = loop
            pending, self._pending = self._pending, []
        existing: tuple[str, ...] = ("nodes", "pods", "jobs", "mpijobs")
        if self.kueue is not None:
            existing += ("clusterqueues", "localqueues", "workloads")
        for resource in existing:
            for obj in self.store.list(resource):
                self._dispatch("ADDED", resource, obj)
        for action in pending:
            self._safely(action)
        tasks = [asyncio.create_task(r.run(), name=f"sim-{r.name}") for r in self._reconcilers]
        try:
            await asyncio.gather(*tasks)
        finally:
            unsubscribe()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.kubelet.shutdown()
            with self._lock:
                self._loop = None

    def _dispatch(self, event_type: str, resource: str, obj: dict) -> None:
        for reconciler in self._reconcilers:
            try:
                reconciler.on_change(event_type, resource, obj)
            except Exception:  # noqa: BLE001 - a bad object must not stop the notifications
                log.exception("%s: handling %s %s failed", reconciler.name, event_type, resource)

    def _safely(self, action: Callable[[], None]) -> None:
        try:
            action()
        except Exception:  # noqa: BLE001 - a failed fault injection is logged, the cluster goes on
            log.exception("simulated fault failed")

    def _on_loop(self, action: Callable[[], None]) -> None:
        with self._lock:
            loop = self._loop
            if loop is None:
                self._pending.append(action)
                return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._safely(action)
        else:
            loop.call_soon_threadsafe(self._safely, action)

    def lose_node(self, node: str, eviction_after: float = NODE_LOST_EVICTION_SECONDS) -> None:
        """The node stops reporting: NotReady (Unknown), unreachable taints, its pods not Ready; after
        ``eviction_after`` simulated seconds its pods get reason NodeLost and are marked for deletion."""
        self._on_loop(lambda: self.kubelet.lose_node(node, eviction_after))

    def restore_node(self, node: str) -> None:
        """The node reports Ready again; its kubelet resumes its pods."""
        self._on_loop(lambda: self.kubelet.restore_node(node))

    def evict_pod(
        self, namespace: str, name: str, message: str = DEFAULT_EVICTION_MESSAGE, *, via_api: bool = False
    ) -> None:
        """Evict a pod.

        By default the kubelet evicts it (node pressure): phase Failed, reason Evicted, the message,
        DisruptionTarget (TerminationByKubelet), containers stopped; the pod object stays. With
        ``via_api`` it is evicted through the Eviction API instead: DisruptionTarget
        (EvictionByEvictionAPI), then a graceful deletion.
        """
        if via_api:
            self._on_loop(lambda: self.kubelet.evict_via_api(namespace, name))
        else:
            self._on_loop(lambda: self.kubelet.evict(namespace, name, message))
