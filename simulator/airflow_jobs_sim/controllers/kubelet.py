"""The simulated kubelets (one per node) and the node lifecycle controller.

Every bound pod is run from its scenario by the kubelet's rules in ``kubelet_model`` (``step_pod``: the
pure part, shared with the real plane's scenario player). ``Kubelet`` applies each step to the store:
the status, the events, the log lines, the local processes of exec mode, the deletion, and a wake-up
when the pod next needs a sync.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import os
import signal
import tempfile
from collections import deque
from dataclasses import replace
from datetime import datetime
from typing import Any

from airflow_jobs_sim import dns, processes
from airflow_jobs_sim.clock import Clock, rfc3339
from airflow_jobs_sim.conditions import set_condition
from airflow_jobs_sim.controllers.base import (
    Reconciler,
    key_of,
    pod_is_terminal,
    split_key,
)
from airflow_jobs_sim.events import (
    KUBELET,
    NODE_CONTROLLER,
    NORMAL,
    TAINT_MANAGER,
    WARNING,
    EventRecorder,
    EventSpec,
)
from airflow_jobs_sim.kubelet_model import (
    TERMINATION_LOG_LINES,
    TERMINATION_MESSAGE_MAX,
    KillProcess,
    LogLine,
    PodNetwork,
    PodRun,
    References,
    StartProcess,
    new_pod_run,
    resolve_references,
    step_pod,
)
from airflow_jobs_sim.references import CONFIGMAPS, SECRETS

log = logging.getLogger(__name__)

DNS_KEY = "~hosts"  # queue key of the exec-mode hosts file (pod keys always contain a "/")
NODE_LOST_EVICTION_SECONDS = 300.0  # the default tolerationSeconds for node.kubernetes.io/unreachable
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
DEFAULT_EVICTION_MESSAGE = (
    "The node was low on resource: memory. Threshold quantity: 100Mi, available: 12Mi. "
)


# --------------------------------------------------------------------------- node lifecycle (pure)


def node_lost(node: dict, now: datetime) -> dict:
    """The node object once its kubelet stopped reporting: Ready Unknown and the unreachable taints."""
    node = copy.deepcopy(node)
    status = node.setdefault("status", {})
    conditions = status.get("conditions") or []
    for cond in conditions:
        cond["status"] = "Unknown"
        cond["reason"] = "NodeStatusUnknown"
        cond["message"] = "Kubelet stopped posting node status."
        cond["lastTransitionTime"] = rfc3339(now)
    if not any(c.get("type") == "Ready" for c in conditions):
        conditions = set_condition(
            conditions,
            "Ready",
            "Unknown",
            now,
            "NodeStatusUnknown",
            "Kubelet stopped posting node status.",
            style="node",
        )
    status["conditions"] = conditions
    taints = [t for t in node.setdefault("spec", {}).get("taints") or [] if t.get("key") != UNREACHABLE_TAINT]
    taints.append({"key": UNREACHABLE_TAINT, "effect": "NoSchedule", "timeAdded": rfc3339(now)})
    taints.append({"key": UNREACHABLE_TAINT, "effect": "NoExecute", "timeAdded": rfc3339(now)})
    node["spec"]["taints"] = taints
    return node


def node_restored(node: dict, now: datetime) -> dict:
    """The node object once its kubelet reports again."""
    node = copy.deepcopy(node)
    healthy = {
        "Ready": ("True", "KubeletReady", "kubelet is posting ready status"),
        "MemoryPressure": ("False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        "DiskPressure": ("False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        "PIDPressure": ("False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    }
    conditions = node.setdefault("status", {}).get("conditions") or []
    for cond in conditions:
        if cond.get("type") in healthy:
            status, reason, message = healthy[cond["type"]]
            cond.update(status=status, reason=reason, message=message, lastTransitionTime=rfc3339(now))
            cond["lastHeartbeatTime"] = rfc3339(now)
    if not any(c.get("type") == "Ready" for c in conditions):
        conditions = set_condition(
            conditions, "Ready", *healthy["Ready"][:1], now, *healthy["Ready"][1:], style="node"
        )
    node["status"]["conditions"] = conditions
    taints = [t for t in node.get("spec", {}).get("taints") or [] if t.get("key") != UNREACHABLE_TAINT]
    node.setdefault("spec", {})["taints"] = taints
    if not taints:
        node["spec"].pop("taints")
    return node


def node_lost_pod_status(pod: dict, node: str, now: datetime) -> dict:
    """Status of a pod whose node was lost for longer than its toleration: NodeLost, not Ready."""
    status = copy.deepcopy(pod.get("status") or {})
    status["reason"] = "NodeLost"
    status["message"] = f"Node {node} which was running pod {pod['metadata']['name']} is unresponsive"
    conditions = set_condition(status.get("conditions"), "Ready", "False", now)
    conditions = set_condition(
        conditions,
        "DisruptionTarget",
        "True",
        now,
        "DeletionByTaintManager",
        "Taint manager: deleting due to NoExecute taint",
    )
    status["conditions"] = conditions
    return status


# --------------------------------------------------------------------------- the shell


class Kubelet(Reconciler):
    """Runs every bound pod on its (simulated) node and answers node loss and eviction."""

    name = "kubelet"

    def __init__(
        self, store: Any, logs: Any, clock: Clock, recorder: EventRecorder, exec_commands: bool = False
    ):
        super().__init__()
        self.store = store
        self.logs = logs
        self.clock = clock
        self.recorder = recorder
        self.exec_commands = exec_commands
        self.runs: dict[str, PodRun] = {}
        self.images: dict[str, set[str]] = {}
        self.lost_nodes: set[str] = set()
        self._evictions: dict[str, tuple[str, str]] = {}
        self._ips: dict[str, int] = {}
        self._processes: dict[tuple[str, str, int], asyncio.subprocess.Process] = {}
        self._tasks: set[asyncio.Task] = set()
        self._node_timers: dict[str, asyncio.TimerHandle] = {}
        self._root: tempfile.TemporaryDirectory | None = None  # exec mode: working dirs, hosts file, shims
        # exec mode: (pod uid, container) -> what an exec into its running process gets
        self._targets: dict[
            tuple[str, str], tuple[dict[str, str], str, tuple[processes.Mount, ...], int]
        ] = {}

    # -- notifications
    def on_change(self, event_type: str, resource: str, obj: dict) -> None:
        """Store notification: every change of a bound pod syncs it; a ConfigMap or Secret written
        resyncs the pods of its namespace still waiting for one (the kubelet's managers watch them)."""
        if self._root is not None and resource in ("pods", "services"):
            self.enqueue(DNS_KEY)  # a name may have appeared or moved: the hosts file follows
        if resource in (CONFIGMAPS, SECRETS):
            if event_type != "DELETED":
                self._resync_waiting(obj["metadata"].get("namespace"))
            return
        if resource != "pods":
            return
        key = key_of(obj)
        if event_type == "DELETED":
            run = self.runs.get(key)
            if run is not None and run.uid == obj["metadata"].get("uid"):
                self._forget(key, run)
            return
        if obj.get("spec", {}).get("nodeName"):
            self.enqueue(key)

    def _resync_waiting(self, namespace: str | None) -> None:
        prefix = f"{namespace}/"
        for key, run in list(self.runs.items()):
            if not key.startswith(prefix) or run.done:
                continue
            if run.mount_errors or any(c.stage == "config_error" for c in run.init + run.containers):
                self.enqueue(key)

    def _references(self, pod: dict, run: PodRun) -> References:
        """Resolve the pod's ConfigMaps and Secrets against the store."""

        def lookup(kind: str, namespace: str, name: str) -> dict | None:
            try:
                return self.store.get(kind, name, namespace=namespace, copy=False)
            except Exception:  # noqa: BLE001 - not found, or a kind this server does not serve
                return None

        return resolve_references(pod, lookup, PodNetwork(run.node, run.host_ip, run.pod_ip))

    def _forget(self, key: str, run: PodRun) -> None:
        del self.runs[key]
        for c in run.init + run.containers:
            self._targets.pop((run.uid, c.name), None)
            proc = self._processes.pop((run.uid, c.name, c.attempt), None)
            if proc is not None and proc.returncode is None:
                _signal(proc, signal.SIGKILL)

    # -- faults
    def evict(self, namespace: str, name: str, message: str) -> None:
        """Evict a pod on the next sync (node-pressure eviction)."""
        key = f"{namespace}/{name}"
        self._evictions[key] = ("Evicted", message)
        self.enqueue(key)

    def evict_via_api(self, namespace: str, name: str) -> None:
        """An Eviction API call: DisruptionTarget (EvictionByEvictionAPI), then a graceful deletion."""
        pod = self.store.get("pods", name, namespace=namespace)
        conditions = set_condition(
            pod.get("status", {}).get("conditions"),
            "DisruptionTarget",
            "True",
            self.clock.now(),
            "EvictionByEvictionAPI",
            "Eviction API: evicting",
        )
        self._patch_status(pod, {**pod.get("status", {}), "conditions": conditions})
        self.store.delete("pods", name, namespace=namespace)

    def lose_node(self, node: str, eviction_after: float = NODE_LOST_EVICTION_SECONDS) -> None:
        """The node's kubelet stops reporting; its pods are marked NodeLost after ``eviction_after`` s."""
        self.lost_nodes.add(node)
        now = self.clock.now()
        obj = self.store.get("nodes", node)
        lost = node_lost(obj, now)
        self.store.patch("nodes", node, {"spec": {"taints": lost["spec"]["taints"]}}, "merge")
        self.store.patch(
            "nodes",
            node,
            {"status": {"conditions": lost["status"]["conditions"]}},
            "merge",
            subresource="status",
        )
        self.recorder.record(
            obj,
            EventSpec(NORMAL, "NodeNotReady", f"Node {node} status is now: NodeNotReady"),
            NODE_CONTROLLER,
        )
        for pod in self._pods_on(node):
            if pod_is_terminal(pod):
                continue
            conditions = set_condition(pod.get("status", {}).get("conditions"), "Ready", "False", now)
            self._patch_status(pod, {**pod.get("status", {}), "conditions": conditions})
            self.recorder.record(
                pod, EventSpec(WARNING, "NodeNotReady", "Node is not ready"), NODE_CONTROLLER
            )
        timer = self._node_timers.pop(node, None)
        if timer is not None:
            timer.cancel()
        self._node_timers[node] = asyncio.get_running_loop().call_later(
            self.clock.scaled(eviction_after), self._evict_lost_node_pods, node
        )

    def _evict_lost_node_pods(self, node: str) -> None:
        self._node_timers.pop(node, None)
        if node not in self.lost_nodes:
            return
        now = self.clock.now()
        for pod in self._pods_on(node):
            if pod_is_terminal(pod) or pod["metadata"].get("deletionTimestamp"):
                continue
            try:
                updated = self._patch_status(pod, node_lost_pod_status(pod, node, now))
                self.recorder.record(
                    updated,
                    EventSpec(NORMAL, "TaintManagerEviction", f"Marking for deletion Pod {key_of(pod)}"),
                    TAINT_MANAGER,
                )
                self.store.delete("pods", pod["metadata"]["name"], namespace=pod["metadata"].get("namespace"))
            except Exception:  # noqa: BLE001 - one pod must not stop the others' eviction
                log.exception("marking pod %s NodeLost failed", key_of(pod))

    def restore_node(self, node: str) -> None:
        """The node's kubelet reports again: it resumes (and finishes deleting) its pods."""
        self.lost_nodes.discard(node)
        timer = self._node_timers.pop(node, None)
        if timer is not None:
            timer.cancel()
        now = self.clock.now()
        obj = self.store.get("nodes", node)
        healthy = node_restored(obj, now)
        self.store.patch("nodes", node, {"spec": {"taints": healthy["spec"].get("taints")}}, "merge")
        self.store.patch(
            "nodes",
            node,
            {"status": {"conditions": healthy["status"]["conditions"]}},
            "merge",
            subresource="status",
        )
        self.recorder.record(
            obj, EventSpec(NORMAL, "NodeReady", f"Node {node} status is now: NodeReady"), NODE_CONTROLLER
        )
        for pod in self._pods_on(node):
            self.enqueue(key_of(pod))

    def _pods_on(self, node: str) -> list[dict]:
        return [p for p in self.store.list("pods") if p.get("spec", {}).get("nodeName") == node]

    # -- sync
    def reconcile(self, key: str) -> None:
        """Sync one pod."""
        if key == DNS_KEY:
            self._write_hosts()
            return
        ns, name = split_key(key)
        try:
            pod = self.store.get("pods", name, namespace=ns)
        except Exception:  # noqa: BLE001 - gone: nothing to run
            run = self.runs.get(key)
            if run is not None:
                self._forget(key, run)
            return
        node = pod.get("spec", {}).get("nodeName")
        if not node or node in self.lost_nodes:
            return
        uid = pod["metadata"].get("uid", "")
        run = self.runs.get(key)
        if run is not None and run.uid != uid:
            self._forget(key, run)
            run = None
        now = self.clock.now()
        if run is None:
            if pod_is_terminal(pod) or pod["metadata"].get("deletionTimestamp"):
                if pod["metadata"].get("deletionTimestamp"):
                    self._finish_deletion(pod)
                return
            run = new_pod_run(pod, node, self._host_ip(node), self._pod_ip(node), now, self.exec_commands)
        evict = self._evictions.pop(key, None)
        step = step_pod(
            pod,
            run,
            now,
            self.clock.time_scale,
            images=frozenset(self.images.get(node, ())),
            evict=evict,
            refs=self._references(pod, run),
        )
        self.runs[key] = step.run
        self.images.setdefault(node, set()).update(step.pulled)
        for effect in step.logs:
            if isinstance(effect, LogLine):
                self.logs.append(ns, name, effect.container, effect.line, restart=effect.attempt)
            else:
                self.logs.close(ns, name, effect.container, restart=effect.attempt)
        for spec in step.events:
            self.recorder.record(pod, spec, KUBELET, host=node)
        if step.status != pod.get("status"):
            pod = self._patch_status(pod, step.status)
        for proc in step.processes:
            if isinstance(proc, StartProcess):
                self._start_process(key, step.run, pod, proc)
            else:
                self._kill_process(step.run, pod, proc)
        if step.delete:
            self._finish_deletion(pod)
        self.enqueue_at(key, step.wake_at, now)

    def _finish_deletion(self, pod: dict) -> None:
        meta = pod["metadata"]
        try:
            self.store.delete("pods", meta["name"], namespace=meta.get("namespace"), grace_period_seconds=0)
        except Exception as exc:  # noqa: BLE001 - already gone is fine
            if getattr(exc, "code", None) != 404:
                raise

    def _patch_status(self, pod: dict, status: dict) -> dict:
        """Write the whole status (fields the kubelet no longer reports disappear)."""
        meta = pod["metadata"]
        body = {"metadata": {"name": meta["name"], "namespace": meta.get("namespace")}, "status": status}
        return self.store.update("pods", body, subresource="status")

    def _host_ip(self, node: str) -> str:
        try:
            for addr in self.store.get("nodes", node).get("status", {}).get("addresses") or ():
                if addr.get("type") == "InternalIP":
                    return addr["address"]
        except Exception:  # noqa: BLE001 - a pod bound to an unknown node still runs
            pass
        return f"10.0.0.{_node_index(node) + 10}"

    def _pod_ip(self, node: str) -> str:
        self._ips[node] = self._ips.get(node, 1) % 250 + 1
        return f"10.244.{_node_index(node)}.{self._ips[node] + 1}"

    # -- exec mode
    def _exec_root(self) -> str:
        if self._root is None:
            self._root = tempfile.TemporaryDirectory(prefix="sim-kubelet-")
            dns.write_shims(os.path.join(self._root.name, "bin"))
            processes.write_pgrep(os.path.join(self._root.name, "bin"))
            self._write_hosts()
        return self._root.name

    def _write_hosts(self) -> None:
        if self._root is None:
            return
        try:
            services = self.store.list("services")
        except Exception:  # noqa: BLE001 - a server without Services: pods' names only
            services = []
        text = dns.hosts_text(dns.cluster_records(services, self.store.list("pods")))
        path = os.path.join(self._root.name, "hosts")
        with open(path + ".new", "w") as f:
            f.write(text)
        os.replace(path + ".new", path)  # a reader sees the old file or the new one, never half of one

    def _start_process(self, key: str, run: PodRun, pod: dict, proc: StartProcess) -> None:
        root = self._exec_root()
        pod_dir = os.path.join(root, "pods", run.uid or key.replace("/", "_"))
        os.makedirs(pod_dir, exist_ok=True)
        spec = pod.get("spec", {})
        container: dict = next(
            (
                c
                for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])
                if c["name"] == proc.container
            ),
            {},
        )
        mounts = processes.empty_dir_mounts(pod, container, pod_dir)
        for mount in mounts:
            os.makedirs(mount.local, exist_ok=True)
        message_file = processes.termination_mount(container, pod_dir, proc.attempt)
        os.makedirs(os.path.dirname(message_file.local), exist_ok=True)
        with open(message_file.local, "w"):
            pass  # the kubelet creates the file before the container starts (makeMounts)
        mounts = (*mounts, message_file)
        proc = replace(proc, argv=processes.rewrite(proc.argv, mounts))
        if not proc.workdir or not os.path.isdir(proc.workdir):
            # The image's directory does not exist on this machine: each pod gets its own empty one.
            proc = replace(proc, workdir=pod_dir)
        namespace = pod["metadata"].get("namespace") or "default"
        path = os.pathsep.join(
            (os.path.join(root, "bin"), proc.env.get("PATH") or os.environ.get("PATH", ""))
        )
        proc = replace(
            proc,
            env={
                **proc.env,
                "PATH": path,
                "HOSTNAME": pod.get("spec", {}).get("hostname") or pod["metadata"]["name"],
                dns.HOSTS_ENV: os.path.join(root, "hosts"),
                dns.SEARCH_ENV: dns.search_path(namespace),
            },
        )
        task = asyncio.get_running_loop().create_task(
            self._run_process(key, run.uid, pod, proc, mounts, message_file.local)
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def exec_target(
        self, pod: dict, container: str
    ) -> tuple[dict[str, str], str, tuple[processes.Mount, ...]] | None:
        """Environment, working directory and mounts for an exec into ``container`` (None: no process runs)."""
        target = self._targets.get((pod["metadata"].get("uid", ""), container))
        if target is None:
            return None
        env, cwd, mounts, pid = target
        return {**env, processes.SESSION_ENV: str(pid)}, cwd, mounts

    async def _run_process(
        self,
        key: str,
        uid: str,
        pod: dict,
        proc: StartProcess,
        mounts: tuple[processes.Mount, ...] = (),
        message_path: str = "",
    ) -> None:
        ns, name = pod["metadata"].get("namespace"), pod["metadata"]["name"]
        exit_code: int | None = None
        error: str | None = None
        message = ""
        tail: deque[str] = deque(maxlen=TERMINATION_LOG_LINES)  # for FallbackToLogsOnError
        try:
            process = await asyncio.create_subprocess_exec(
                *processes.with_default_signals(proc.argv),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                stdin=asyncio.subprocess.DEVNULL,
                env={**os.environ, **proc.env},
                cwd=proc.workdir,
                start_new_session=True,
            )
        except OSError as exc:
            error = f'failed to create containerd task: exec: "{proc.argv[0] if proc.argv else ""}": {exc.strerror}'
        else:
            self._processes[(uid, proc.container, proc.attempt)] = process
            self._targets[(uid, proc.container)] = (proc.env, proc.workdir or "", mounts, process.pid)
            assert process.stdout is not None
            async for raw in process.stdout:
                line = raw.decode(errors="replace").rstrip("\n")
                self.logs.append(ns, name, proc.container, line, restart=proc.attempt)
                tail.append(line)
            code = await process.wait()
            exit_code = 128 + -code if code < 0 else code
            message = _read_tail(message_path, TERMINATION_MESSAGE_MAX)
            self._processes.pop((uid, proc.container, proc.attempt), None)
            self._targets.pop((uid, proc.container), None)
        run = self.runs.get(key)
        if run is None or run.uid != uid:
            return
        for c in run.init + run.containers:
            if c.name == proc.container and c.attempt == proc.attempt:
                c.process_exit, c.process_error, c.process_message = exit_code, error, message
                c.log_tail = list(tail)
        self.enqueue(key)

    def _kill_process(self, run: PodRun, pod: dict, kill: KillProcess) -> None:
        process = self._processes.get((run.uid, kill.container, kill.attempt))
        if process is None or process.returncode is not None:
            return
        _signal(process, signal.SIGTERM)
        grace = pod.get("spec", {}).get("terminationGracePeriodSeconds", 30)
        asyncio.get_running_loop().call_later(
            min(self.clock.scaled(grace), 10.0),
            lambda: process.returncode is None and _signal(process, signal.SIGKILL),
        )

    async def shutdown(self) -> None:
        """Kill every local process and wait for their readers."""
        for handle in self._node_timers.values():
            handle.cancel()
        for process in list(self._processes.values()):
            if process.returncode is None:
                _signal(process, signal.SIGKILL)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for process in list(self._processes.values()):
            try:
                await asyncio.wait_for(process.wait(), 2)
            except (TimeoutError, ProcessLookupError):
                pass
        self._processes.clear()
        if self._root is not None:
            self._root.cleanup()
            self._root = None


def _read_tail(path: str, limit: int) -> str:
    """The last ``limit`` bytes of a file, as the kubelet's ``tail.ReadAtMost`` reads a termination
    message; empty when there is no file."""
    if not path:
        return ""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _signal(process: asyncio.subprocess.Process, sig: int) -> bool:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        try:
            process.send_signal(sig)
        except ProcessLookupError:
            pass
    return True


def _node_index(node: str) -> int:
    digits = "".join(ch for ch in node.rsplit("-", 1)[-1] if ch.isdigit())
    return int(digits) % 250 if digits else 0
