"""The plane's scenario player: gives each pod kwok binds its timeline, its logs and its kubelet events.

Run by ``scripts/cluster up`` as one process of the plane (``python -m realplane.player``). It watches the
pods bound to kwok's nodes; for each new one it computes the pod's timeline (``timeline.compute``) and
writes it into the pod's ``plane.airflow-jobs.io/frames`` annotation, which the Stages play. It then
writes the pod's log lines, as they happen, into CRI-format files that kwok serves through the API server
(a ``Logs`` object per pod, owned by the pod so the garbage collector removes it), and records the
kubelet's events (Pulling, Pulled, Started, BackOff, Failed, ...) at their times.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import logging
import shutil
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from airflow_jobs_sim.kubelet_model import (
    EventSpec,
    LogClose,
    LogLine,
    PodNetwork,
    References,
    resolve_references,
)
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from realplane import timeline

log = logging.getLogger("player")

# A talking container (the tracking benchmark's workload): a pod with this annotation gets a line every
# that many seconds in its first container's log from the moment it runs, then a last line ``done``
# DONE_MARGIN seconds before the container ends. Each line says when it was due and when it was
# written (wall clock), as the stand-in's ticker writes them (tests/benchmarks/simproc.py).
TALK_ANNOTATION = "plane.airflow-jobs.io/log-every"
PLANNERS = 8
DONE_MARGIN = 1.0
TALK_PERIOD = 0.1  # the talker's pass: each talking container's due lines are written in one append


@dataclass
class Talker:
    """One talking container: where its log is, its next line's number and time, and its end."""

    path: Path
    every: float
    end: float  # when its container ends (epoch seconds)
    due: float  # when its next line is due
    k: int = 0


def talk_line(k: int, due: float, wrote: float) -> str:
    head = "done" if k < 0 else f"tick {k}"
    return f"{head} due={due:.3f} wrote={wrote:.3f}"


@dataclass(frozen=True, order=True)
class Due:
    """A kubelet effect of one run of a pod (its uid), due at ``at`` (epoch seconds); ``seq`` orders
    effects due at the same instant as they were planned."""

    at: float
    seq: int
    key: str = field(compare=False)
    uid: str = field(compare=False)
    effect: timeline.Effect = field(compare=False)


def cri_line(at: datetime, line: str) -> str:
    # The CRI log format kubelet's log reader parses (k8s.io/cri-client/pkg/logs): time stream tag text.
    return f"{at.astimezone(timezone.utc).strftime('%Y-%m-%dT%H:%M:%S.%fZ')} stdout F {line}\n"


class Player:
    def __init__(self, kubeconfig: str, logs_dir: Path, scale: float) -> None:
        config.load_kube_config(config_file=kubeconfig)
        pooled = client.Configuration.get_default_copy()
        pooled.connection_pool_maxsize = PLANNERS + 2  # the planners' writes and the watch at once
        client.Configuration.set_default(pooled)
        self.core = client.CoreV1Api()
        self.custom = client.CustomObjectsApi()
        self.logs_dir = logs_dir
        self.scale = scale
        self.queue: list[Due] = []
        self.seq = itertools.count()
        self.lock = threading.Condition()
        self.known: dict[str, str] = {}  # pod key -> uid it was planned for
        self.ip_counters: dict[str, int] = {}
        # Pods being planned, and the pool that plans them (PLANNERS at once, as many connections).
        self.planning: set[str] = set()
        self.pool = ThreadPoolExecutor(PLANNERS, thread_name_prefix="plan")
        self.talkers: dict[str, Talker] = {}
        self.talk_lock = threading.Lock()
        self.talked = 0  # lines of talking containers written, and the latest one was behind its time
        self.lag_max = 0.0

    # --- planning ---------------------------------------------------------------------------------

    def plan(self, pod: dict) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        key = f"{meta['namespace']}/{meta['name']}"
        start = timeline.utcnow().replace(microsecond=(timeline.utcnow().microsecond // 1000) * 1000)
        node = spec["nodeName"]
        host_ip = "127.0.0.1"
        pod_ip = self._pod_ip(node)
        refs = self._references(pod, node, host_ip, pod_ip)
        plan = timeline.compute(pod, start, host_ip=host_ip, pod_ip=pod_ip, scale=self.scale, refs=refs)
        self._logs_object(pod)
        try:
            self.core.patch_namespaced_pod(
                meta["name"],
                meta["namespace"],
                {"metadata": {"annotations": {timeline.FRAMES_ANNOTATION: plan.annotation()}}},
            )
        except ApiException as exc:
            log.warning("planning %s: %s", key, exc.reason)
            return
        self.known[key] = meta["uid"]
        talker = self._talk(pod, plan, self._pod_dir(meta["namespace"], meta["name"], meta["uid"]))
        if talker is not None:
            with self.talk_lock:
                self.talkers[key] = talker
        with self.lock:
            for timed in plan.effects:
                heapq.heappush(
                    self.queue, Due(timed.at.timestamp(), next(self.seq), key, meta["uid"], timed.effect)
                )
            self.lock.notify()
        log.info("planned %s: %d frames, %d effects", key, len(plan.frames), len(plan.effects))

    @staticmethod
    def _talk(pod: dict, plan: timeline.Timeline, directory: Path) -> Talker | None:
        """The first line of a talking container (``TALK_ANNOTATION``): when its pod first runs, until
        the end of its first container's first run."""
        every = ((pod["metadata"].get("annotations") or {}).get(TALK_ANNOTATION) or "").strip()
        containers = pod["spec"].get("containers") or []
        if not every or not containers:
            return None
        name = containers[0]["name"]
        start = next((f.at.timestamp() for f in plan.frames if f.status.get("phase") == "Running"), None)
        end = next(
            (
                t.at.timestamp()
                for t in plan.effects
                if isinstance(t.effect, LogClose) and t.effect.container == name
            ),
            None,
        )
        if start is None or end is None:
            return None
        return Talker(directory / f"{name}.log", max(0.01, float(every)), end, start)

    def run_talkers(self) -> None:
        """Every ``TALK_PERIOD``: each talking container's lines due by now, in one append, and its last
        line ``DONE_MARGIN`` seconds before it ends (a thread of its own: the effects' queue holds one
        entry per event, this one entry per container, and thousands of lines a second would not fit
        through one heap)."""
        while True:
            time.sleep(TALK_PERIOD)
            now = time.time()
            with self.talk_lock:
                talkers = list(self.talkers.items())
            for key, t in talkers:
                if t.due > now:
                    continue
                last = t.end - DONE_MARGIN
                chunk = []
                while t.due <= now and t.due < last:
                    chunk.append(talk_line(t.k, t.due, now))
                    self.lag_max = max(self.lag_max, now - t.due)
                    t.due, t.k = t.due + t.every, t.k + 1
                done = now >= last
                if done:
                    chunk.append(talk_line(-1, last, now))
                    if now > t.end:
                        # Late by more than DONE_MARGIN (a loaded machine): a real container cannot write
                        # after it ended, so a reader that read its log to the end after the end missed
                        # this line through no fault of its own. Said here for the benchmark to tell apart.
                        log.warning("late last line: %s %.3f s after its container ended", key, now - t.end)
                stamp = datetime.fromtimestamp(now, timezone.utc)
                try:
                    with t.path.open("a") as fh:
                        fh.write("".join(cri_line(stamp, line) for line in chunk))
                except OSError as exc:  # its pod is gone: its directory with it
                    log.debug("talker of %s: %s", key, exc)
                    done = True
                self.talked += len(chunk)
                if done:
                    with self.talk_lock:
                        self.talkers.pop(key, None)

    def _pod_ip(self, node: str) -> str:
        index = int(node.rsplit("-", 1)[-1]) if node.rsplit("-", 1)[-1].isdigit() else 0
        base = 200 if node.startswith("mig-") else 0
        with self.lock:
            self.ip_counters[node] = self.ip_counters.get(node, 1) % 250 + 1
            return f"10.244.{base + index}.{self.ip_counters[node] + 1}"

    def _references(self, pod: dict, node: str, host_ip: str, pod_ip: str) -> References:
        """The pod's ConfigMaps and Secrets as the API server holds them now."""

        def lookup(kind: str, namespace: str, name: str) -> dict | None:
            try:
                if kind == "secrets":
                    obj = self.core.read_namespaced_secret(name, namespace)
                else:
                    obj = self.core.read_namespaced_config_map(name, namespace)
                return self.core.api_client.sanitize_for_serialization(obj)
            except ApiException:
                return None

        return resolve_references(pod, lookup, PodNetwork(node, host_ip, pod_ip))

    def _pod_dir(self, namespace: str, name: str, uid: str) -> Path:
        return self.logs_dir / f"{namespace}_{name}_{uid}"

    def _logs_object(self, pod: dict) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        directory = self._pod_dir(meta["namespace"], meta["name"], meta["uid"])
        directory.mkdir(parents=True, exist_ok=True)
        entries = []
        for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
            current, previous = directory / f"{c['name']}.log", directory / f"{c['name']}.previous.log"
            current.touch()
            previous.touch()
            entries.append(
                {
                    "containers": [c["name"]],
                    "logsFile": str(current),
                    "previousLogsFile": str(previous),
                    "follow": True,
                }
            )
        body = {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Logs",
            "metadata": {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}
                ],
            },
            "spec": {"logs": entries},
        }
        try:
            self.custom.create_namespaced_custom_object(
                "kwok.x-k8s.io", "v1alpha1", meta["namespace"], "logs", body
            )
        except ApiException as exc:
            if exc.status != 409:
                log.warning("logs of %s/%s: %s", meta["namespace"], meta["name"], exc.reason)

    # --- effects ----------------------------------------------------------------------------------

    def run_effects(self) -> None:
        attempts: dict[tuple[str, str], int] = {}
        while True:
            with self.lock:
                while not self.queue or self.queue[0].at > time.time():
                    self.lock.wait(
                        timeout=None if not self.queue else max(0.0, self.queue[0].at - time.time())
                    )
                due = heapq.heappop(self.queue)
            uid, effect = due.uid, due.effect
            if self.known.get(due.key) != uid:
                continue  # the pod is gone (or replaced): its effects go with it
            namespace, name = due.key.split("/", 1)
            directory = self._pod_dir(namespace, name, uid)
            at = datetime.fromtimestamp(due.at, timezone.utc)
            try:
                if isinstance(effect, LogLine):
                    current = directory / f"{effect.container}.log"
                    seen = attempts.get((due.key, effect.container), 0)
                    if effect.attempt > seen:
                        # A restarted container: its earlier run is what `kubectl logs --previous` shows.
                        shutil.copyfile(current, directory / f"{effect.container}.previous.log")
                        current.write_text("")
                        attempts[(due.key, effect.container)] = effect.attempt
                    with current.open("a") as fh:
                        fh.write(cri_line(at, effect.line))
                elif isinstance(effect, EventSpec):
                    self._event(namespace, name, uid, effect, at)
                elif isinstance(effect, LogClose):
                    pass
            except OSError as exc:
                log.warning("effect of %s: %s", due.key, exc)

    def _event(self, namespace: str, name: str, uid: str, spec: EventSpec, at: datetime) -> None:
        stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "metadata": {"generateName": f"{name}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": name,
                "namespace": namespace,
                "uid": uid,
                **({"fieldPath": spec.field_path} if spec.field_path else {}),
            },
            "type": spec.type,
            "reason": spec.reason,
            "message": spec.message,
            "source": {"component": "kubelet"},
            "reportingComponent": "kubelet",
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            self.core.create_namespaced_event(namespace, body)
        except ApiException as exc:
            log.debug("event of %s/%s: %s", namespace, name, exc.reason)

    # --- the watch --------------------------------------------------------------------------------

    def forget(self, pod: dict) -> None:
        meta = pod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        if self.known.get(key) == meta.get("uid"):
            del self.known[key]
        with self.talk_lock:
            self.talkers.pop(key, None)
        shutil.rmtree(self._pod_dir(meta["namespace"], meta["name"], meta.get("uid", "")), ignore_errors=True)

    def watch_pods(self) -> None:
        resource_version = ""
        while True:
            try:
                if not resource_version:
                    listing = self.core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=")
                    resource_version = listing.metadata.resource_version
                    for item in listing.items:
                        self.on_pod("ADDED", self.core.api_client.sanitize_for_serialization(item))
                stream = watch.Watch().stream(
                    self.core.list_pod_for_all_namespaces,
                    field_selector="spec.nodeName!=",
                    resource_version=resource_version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=300,
                    _preload_content=False,
                )
                log.info("watching pods from resourceVersion %s", resource_version)
                for event in stream:
                    obj = event["raw_object"]
                    resource_version = obj.get("metadata", {}).get("resourceVersion", resource_version)
                    if event["type"] == "ERROR":
                        resource_version = ""
                        break
                    if event["type"] != "BOOKMARK":
                        self.on_pod(event["type"], obj)
            except ApiException as exc:
                if exc.status == 410:
                    resource_version = ""
                else:
                    log.warning("watch: %s", exc)
                    time.sleep(1)
            except Exception as exc:  # noqa: BLE001 - the player outlives a dropped connection
                log.warning("watch: %s", exc)
                time.sleep(1)

    def on_pod(self, event_type: str, pod: dict) -> None:
        meta = pod.get("metadata", {})
        if event_type == "DELETED":
            self.forget(pod)
            return
        annotations = meta.get("annotations") or {}
        if timeline.FRAMES_ANNOTATION in annotations or meta.get("deletionTimestamp"):
            return
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        with self.lock:
            # Events of a pod that arrive before its plan's annotation does (kwok's, the scheduler's)
            # must not plan it twice: its lines would be written twice.
            if key in self.planning or self.known.get(key) == meta.get("uid"):
                return
            self.planning.add(key)
        self.pool.submit(self._plan, key, pod)

    def _plan(self, key: str, pod: dict) -> None:
        """Plan one pod in the pool: its two writes (the frames, the Logs object) wait on the API
        server, and thousands of pods bound at once are planned several at a time."""
        try:
            self.plan(pod)
        except Exception:  # noqa: BLE001 - one pod's bad plan never stops the others
            log.exception("planning %s", key)
        finally:
            with self.lock:
                self.planning.discard(key)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="realplane.player")
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--logs-dir", required=True, type=Path)
    ap.add_argument("--time-scale", type=float, default=1.0)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stdout)
    player = Player(args.kubeconfig, args.logs_dir, args.time_scale)
    threading.Thread(target=player.run_effects, daemon=True, name="effects").start()
    threading.Thread(target=player.run_talkers, daemon=True, name="talkers").start()
    player.watch_pods()
    return 0


if __name__ == "__main__":
    sys.exit(main())
