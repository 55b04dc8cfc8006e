"""A whole simulated cluster in one object: store, API server, garbage collector, controllers.

Everything runs on one private event loop in a daemon thread, so synchronous tests, the CLI and async
code can all use it::

    with SimCluster(ClusterConfig(nodes=2, time_scale=0.01)) as cluster:
        kubernetes.config.load_kube_config(cluster.kubeconfig_path)
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from aiohttp import web

from airflow_jobs_sim.admission_policy import PolicyAdmission
from airflow_jobs_sim.config import ClusterConfig
from airflow_jobs_sim.faults import Faults
from airflow_jobs_sim.gc import GarbageCollector
from airflow_jobs_sim.kubeconfig import write_kubeconfig
from airflow_jobs_sim.logs import LogStore
from airflow_jobs_sim.server import ApiServer
from airflow_jobs_sim.store import Store

log = logging.getLogger(__name__)

SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
# The PriorityClasses the API server creates at start-up (kubernetes pkg/apis/scheduling/types.go,
# SystemCriticalPriority = 2000000000; pkg/registry/scheduling/rest/storage_scheduling.go, v1.36).
SYSTEM_PRIORITY_CLASSES = {"system-node-critical": 2000001000, "system-cluster-critical": 2000000000}
DEFAULT_CONFIG = ClusterConfig()


def node_name(index: int) -> str:
    """Name of the index-th simulated node."""
    return f"sim-node-{index}"


def node_object(index: int, config: ClusterConfig) -> dict:
    """A Ready GPU node with the configured capacity."""
    name = node_name(index)
    capacity = {
        "cpu": config.cpu_per_node,
        "memory": config.memory_per_node,
        "pods": "110",
        "ephemeral-storage": "1Ti",
        "nvidia.com/gpu": str(config.gpus_per_node),
        **{name: str(count) for name, count in config.devices_per_node},
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.count": str(config.gpus_per_node),
                **dict(config.node_labels[index] if index < len(config.node_labels) else ()),
            },
        },
        "spec": {"podCIDR": f"10.244.{index}.0/24"},
        "status": {
            "capacity": dict(capacity),
            "allocatable": dict(capacity),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                }
            ],
            "addresses": [
                {"type": "InternalIP", "address": f"10.0.{index // 250}.{index % 250 + 2}"},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "machineID": f"{index:032x}",
                "systemUUID": f"00000000-0000-0000-0000-{index:012x}",
                "bootID": f"b0000000-0000-0000-0000-{index:012x}",
                "kubeletVersion": "v1.32.0",
                "kubeProxyVersion": "v1.32.0",
                "containerRuntimeVersion": "sim://1.0.0",
                "operatingSystem": "linux",
                "architecture": "amd64",
                "osImage": "Simulated GPU node",
                "kernelVersion": "6.1.0-sim",
            },
        },
    }


def _load_controllers() -> tuple[Any, Any]:
    """The Controllers and Clock classes, or (None, None) while they are not part of the package."""
    here = os.path.dirname(os.path.abspath(__file__))
    if not os.path.exists(os.path.join(here, "controllers", "__init__.py")):
        return None, None
    from airflow_jobs_sim.clock import Clock
    from airflow_jobs_sim.controllers import Controllers

    return Controllers, Clock


class SimCluster:
    """A running simulated cluster; see the module docstring."""

    def __init__(
        self,
        config: ClusterConfig = DEFAULT_CONFIG,
        kubeconfig_path: str | None = None,
        controllers: bool = True,
    ):
        self.config = config
        self.store = Store(watch_history=config.watch_history)
        self.store.validators.append(PolicyAdmission(self.store))
        self.logs = LogStore()
        self.faults = Faults()
        self.controllers: Any = None
        self.clock: Any = None
        self.url = ""
        self.kubeconfig_path = kubeconfig_path or ""
        self._own_kubeconfig = kubeconfig_path is None
        self._want_controllers = controllers
        self._server = ApiServer(
            self.store, self.logs, self.faults, config, controllers=lambda: self.controllers
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._tasks: list[asyncio.Task] = []
        self._unsubscribe: Callable[[], None] | None = None

    # -- lifecycle
    def start(self) -> SimCluster:
        """Start the loop thread, the HTTP server, the cluster's objects and its controllers."""
        if self._thread is not None:
            return self
        for ns in SYSTEM_NAMESPACES:
            self.store.create("namespaces", {"metadata": {"name": ns}})
        for name, value in SYSTEM_PRIORITY_CLASSES.items():
            self.store.create("priorityclasses", {"metadata": {"name": name}, "value": value})
        for i in range(self.config.nodes):
            self.store.create("nodes", node_object(i, self.config))
        self._unsubscribe = self.store.subscribe(self._on_event)
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run_loop, args=(ready,), name="sim-cluster", daemon=True)
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._setup(), self._loop).result(timeout=30)
        except BaseException:
            self.stop()
            raise
        self.kubeconfig_path = write_kubeconfig(
            None if self._own_kubeconfig else self.kubeconfig_path,
            self.url,
            self.config.token,
            token_ttl=self.config.token_ttl,
        )
        return self

    def _run_loop(self, ready: threading.Event) -> None:
        assert self._loop is not None
        asyncio.set_event_loop(self._loop)
        ready.set()
        self._loop.run_forever()
        # Drain what stop() scheduled, then close.
        self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        self._loop.close()

    async def _setup(self) -> None:
        self._runner = web.AppRunner(self._server.app(), handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.host, self.config.port, shutdown_timeout=0.5)
        await site.start()
        # The runner serves only this site; its address holds the port the OS chose when config.port is 0.
        addresses = self._runner.addresses
        port = addresses[0][1] if addresses else self.config.port
        self.url = f"http://{self.config.host}:{port}"
        self._server.address = f"{self.config.host}:{port}"
        self._tasks.append(asyncio.create_task(GarbageCollector(self.store).run(), name="sim-gc"))
        self._tasks.append(asyncio.create_task(self._fault_ticker(), name="sim-faults"))
        if self._want_controllers:
            controllers_cls, clock_cls = _load_controllers()
            if controllers_cls is not None:
                self.clock = clock_cls(self.config.time_scale)
                self.controllers = controllers_cls(self.store, self.logs, self.clock, self.config)
                self._tasks.append(asyncio.create_task(self.controllers.run(), name="sim-controllers"))

    async def _fault_ticker(self) -> None:
        while True:
            await asyncio.sleep(0.05)
            self.faults.drop_due()

    def _on_event(self, event_type: str, resource: str, obj: dict) -> None:
        if event_type == "DELETED" and resource == "pods":
            meta = obj["metadata"]
            self.logs.forget_pod(meta.get("namespace", ""), meta["name"])

    def stop(self) -> None:
        """Stop controllers, server and loop thread; remove a kubeconfig this cluster created."""
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None and thread.is_alive():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=15)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=15)
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._own_kubeconfig and self.kubeconfig_path and os.path.exists(self.kubeconfig_path):
            os.unlink(self.kubeconfig_path)
        self._thread = None
        self._loop = None

    async def _shutdown(self) -> None:
        self.faults.drop_watches()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        current = asyncio.current_task()
        rest = [t for t in asyncio.all_tasks() if t is not current]
        for task in rest:
            task.cancel()
        for task in rest:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def __enter__(self) -> SimCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- helpers for tests, CLI and benchmarks
    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The cluster's event loop (running in its own thread)."""
        if self._loop is None:
            raise RuntimeError("the cluster is not running")
        return self._loop

    def counters(self) -> dict[tuple[str, str], int]:
        """Requests served so far per (verb, resource), e.g. ("list", "pods")."""
        return dict(self._server.counters)

    def reset_counters(self) -> None:
        """Start counting from zero."""
        self.call(self._server.counters.clear)

    def authorized(self) -> dict[tuple[str, Any, bool], int]:
        """Under RBAC (``ClusterConfig.rbac``): the resource requests served so far by caller, each as
        (user name, ``rbac.Request``: verb, API group, resource, subresource, namespace, name, and
        whether RBAC allowed it), with their counts. The requests a test's components sent, each under
        its own identity."""
        return self.call(lambda: dict(self._server.authorized))

    def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn`` (plain or async) on the cluster's loop thread and return its result."""

        async def runner() -> Any:
            result = fn(*args, **kwargs)
            if inspect.isawaitable(result):
                result = await result
            return result

        return asyncio.run_coroutine_threadsafe(runner(), self.loop).result()
