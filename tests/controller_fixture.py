"""The admission controller beside a test's cluster, as a deployment runs it beside Airflow.

A cluster the product runs on has its admission controller (``airflow-jobs admission-controller``): the
only identity that admits. The tests run it in a thread of its own with its own event loop and client,
so nothing it holds is shared with the test's triggers, workers or their loop: what it knows it reads
from the cluster, as the controller's own process does. Leader election is left out here (one replica);
tests/controller/ tests the election itself, and the real-plane tier runs the controller as a process.
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
from pathlib import Path

import yaml
from airflow_jobs_sim.config import Identity

from airflow_jobs_plugin.cluster.kube import KubeClient
from airflow_jobs_plugin.controller.runner import ClusterController

IDENTITY = "test-admission-controller"
# The controller's own caller on a simulated cluster: the service account the shipped manifests give it,
# in system:masters here (the tests that check its Role apply rbac.yaml to a cluster that enforces it).
CONTROLLER_TOKEN = "admission-controller-token"
CONTROLLER = Identity(
    CONTROLLER_TOKEN,
    "system:serviceaccount:airflow-jobs-system:airflow-jobs-controller",
    ("system:serviceaccounts", "system:serviceaccounts:airflow-jobs-system", "system:masters"),
)


def own_kubeconfig(kubeconfig_path: str, token: str) -> str:
    """A copy of ``kubeconfig_path`` whose user is ``token``'s: the controller's own credentials."""
    config = yaml.safe_load(Path(kubeconfig_path).read_text())
    for user in config.get("users") or []:
        user["user"] = {"token": token}
    path = Path(tempfile.mkdtemp(prefix="ajp-controller-")) / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return str(path)


class ControllerThread:
    """The admission controller of every namespace of a cluster, in a thread."""

    def __init__(
        self,
        kubeconfig_path: str,
        *,
        namespaces: tuple[str, ...] = (),
        selector: str = "",
        token: str | None = None,
    ):
        self.kubeconfig_path = own_kubeconfig(kubeconfig_path, token) if token else kubeconfig_path
        self.namespaces = namespaces
        self.selector = selector
        self.loop: asyncio.AbstractEventLoop | None = None
        self.controller: ClusterController | None = None
        self._task: asyncio.Task | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="admission-controller", daemon=True)

    def __enter__(self) -> ControllerThread:
        self._thread.start()
        self._started.wait(timeout=60)
        if self._error is not None:
            raise self._error
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        loop, task = self.loop, self._task
        if loop is not None and task is not None and not loop.is_closed():
            loop.call_soon_threadsafe(task.cancel)
        self._thread.join(timeout=30)

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # noqa: BLE001 - reported to the test that started it
            self._error = exc
            self._started.set()

    async def _serve(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        client = await KubeClient.from_kubeconfig(self.kubeconfig_path)
        try:
            self.controller = ClusterController(
                client,
                IDENTITY,
                namespaces=self.namespaces,
                selector=None if self.namespaces else self.selector,
            )
            runner = asyncio.create_task(self.controller.run())
            self._started.set()
            try:
                await runner
            except asyncio.CancelledError:
                runner.cancel()
                await asyncio.gather(runner, return_exceptions=True)
        finally:
            await client.close()
