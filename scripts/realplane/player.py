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
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from airflow_jobs_plugin.sim.controllers.kubelet import LogClose, LogLine, References
from airflow_jobs_plugin.sim.events import EventSpec
from airflow_jobs_plugin.sim.references import (
    MissingReference,
    PodNetwork,
    container_env,
    mount_failures,
    refers_to_objects,
)
from realplane import timeline

log = logging.getLogger("player")


@dataclass(order=True)
class Due:
    at: float
    seq: int
    key: str = field(compare=False)
    what: object = field(compare=False)


def cri_line(at: datetime, line: str) -> str:
    # The CRI log format kubelet's log reader parses (k8s.io/cri-client/pkg/logs): time stream tag text.
    return f"{at.astimezone(timezone.utc).strftime('%Y-%m-%dT%H:%M:%S.%fZ')} stdout F {line}\n"


class Player:
    def __init__(self, kubeconfig: str, logs_dir: Path, scale: float) -> None:
        config.load_kube_config(config_file=kubeconfig)
        self.core = client.CoreV1Api()
        self.custom = client.CustomObjectsApi()
        self.logs_dir = logs_dir
        self.scale = scale
        self.queue: list[Due] = []
        self.seq = itertools.count()
        self.lock = threading.Condition()
        self.known: dict[str, str] = {}  # pod key -> uid it was planned for
        self.ip_counters: dict[str, int] = {}

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
        with self.lock:
            for timed in plan.effects:
                heapq.heappush(
                    self.queue, Due(timed.at.timestamp(), next(self.seq), key, (meta["uid"], timed.effect))
                )
            self.lock.notify()
        log.info("planned %s: %d frames, %d effects", key, len(plan.frames), len(plan.effects))

    def _pod_ip(self, node: str) -> str:
        index = int(node.rsplit("-", 1)[-1]) if node.rsplit("-", 1)[-1].isdigit() else 0
        base = 200 if node.startswith("mig-") else 0
        self.ip_counters[node] = self.ip_counters.get(node, 1) % 250 + 1
        return f"10.244.{base + index}.{self.ip_counters[node] + 1}"

    def _references(self, pod: dict, node: str, host_ip: str, pod_ip: str) -> References | None:
        if not refers_to_objects(pod):
            return None

        def lookup(kind: str, namespace: str, name: str) -> dict | None:
            try:
                if kind == "secrets":
                    obj = self.core.read_namespaced_secret(name, namespace)
                else:
                    obj = self.core.read_namespaced_config_map(name, namespace)
                return self.core.api_client.sanitize_for_serialization(obj)
            except ApiException:
                return None

        net = PodNetwork(node, host_ip, pod_ip)
        env: dict = {}
        for init, group in (
            (True, pod["spec"].get("initContainers") or []),
            (False, pod["spec"].get("containers") or []),
        ):
            for c in group:
                try:
                    env[(init, c["name"])] = container_env(c, pod, lookup, net)
                except MissingReference as exc:
                    env[(init, c["name"])] = str(exc)
        return References(env=env, mounts=tuple(mount_failures(pod, lookup)))

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
            uid, effect = due.what  # type: ignore[misc]
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
        try:
            self.plan(pod)
        except Exception:  # noqa: BLE001 - one pod's bad plan never stops the others
            log.exception("planning %s/%s", meta.get("namespace"), meta.get("name"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="realplane.player")
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--logs-dir", required=True, type=Path)
    ap.add_argument("--time-scale", type=float, default=1.0)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stdout)
    player = Player(args.kubeconfig, args.logs_dir, args.time_scale)
    threading.Thread(target=player.run_effects, daemon=True, name="effects").start()
    player.watch_pods()
    return 0


if __name__ == "__main__":
    sys.exit(main())
