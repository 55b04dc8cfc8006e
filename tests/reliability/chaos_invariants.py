"""The invariants the chaos test samples from the simulator's own objects while the chaos runs.

A sample is taken on the simulator's loop thread (``cluster.call``), where every API write and every
controller step happens, so the jobs, pods and ledger ConfigMaps it reads form one consistent
snapshot: no write falls between reading the jobs and reading the ledgers.

What a sample counts:

- **reservations**: the GPUs in each group's ledger ConfigMap, per group and per user, against the
  quota policy (the protocol's invariant: the ledger never holds more than the quota);
- **unreserved jobs**: an unsuspended, unfinished product job whose uid holds no reservation (the
  protocol's order, reserve before unsuspend and release after suspend or finish, forbids it);
- **pods holding GPUs**: pods bound to a node, not Succeeded or Failed, and not being deleted, summed
  per group and per user against the quota. Pods being deleted (stranded on a lost node until it comes
  back, or in their grace period) are tallied apart as a figure: their job has already ended or been
  requeued, and the quota pool documents that their GPUs are no longer counted against it;
- **live jobs per task**: at most one unfinished job for one task instance (any try, any attempt);
- **one object per (task, try, attempt)**: every uid ever seen under one such key.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.queueing import quota
from airflow_jobs_plugin.queueing.quota.ledger import is_finished, is_suspended
from airflow_jobs_plugin.queueing.quota.ledger_model import LEDGER_NAME_PREFIX

TaskTry = tuple[str, str, str]  # (task key, try, attempt)


def pod_gpus(pod: dict) -> int:
    return sum(
        int(((c.get("resources") or {}).get("limits") or {}).get(labels.GPU_RESOURCE, 0))
        for c in (pod.get("spec") or {}).get("containers") or ()
    )


def _over(used: dict, limit_of) -> list[str]:
    return [f"{key}: {value} > {limit_of(key)}" for key, value in used.items() if value > limit_of(key)]


@dataclass
class Invariants:
    """Samples of the cluster; violations are collected, never raised mid-run."""

    namespace: str
    quotas: dict[str, tuple[int, dict[str, int]]]
    samples: int = 0
    violations: list[str] = field(default_factory=list)
    uids: dict[TaskTry, set[str]] = field(default_factory=lambda: defaultdict(set))
    peak_reserved: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    peak_pods: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    terminating_overlap_samples: int = 0  # samples where pods being deleted pushed a group past quota
    terminating_overlap_peak: int = 0  # most GPUs above a group's quota counting pods being deleted
    # Kueue mode: Kueue admits, so a running job needs an admitted Workload (not a ledger reservation),
    # the quotas are the ClusterQueues' (per group: Kueue has no per-user limit), and a job Kueue had to
    # stop again ("Not admitted by cluster queue") is a fight the product must never start.
    kueue: bool = False

    def _group_limit(self, group: str) -> int:
        return self.quotas[group][0]

    def _user_limit(self, key: tuple[str, str]) -> int:
        group, user = key
        total, users = self.quotas[group]
        return min(total, users.get(user, total))

    def sample(self, store) -> None:
        """One consistent look at the store; call on the simulator's loop thread."""
        jobs, _ = store.list_with_rv("jobs", self.namespace, copy=False)
        pods, _ = store.list_with_rv("pods", self.namespace, copy=False)
        configmaps, _ = store.list_with_rv("configmaps", self.namespace, copy=False)
        self.samples += 1
        found: list[str] = []
        admitted_uids: set[str] = set()
        if self.kueue:
            workloads, _ = store.list_with_rv("workloads", self.namespace, copy=False)
            for wl in workloads:
                conditions = (wl.get("status") or {}).get("conditions") or ()
                if any(c["type"] == "Admitted" and c["status"] == "True" for c in conditions):
                    admitted_uids.add((wl["metadata"].get("labels") or {}).get("kueue.x-k8s.io/job-uid", ""))
            events, _ = store.list_with_rv("events", self.namespace, copy=False)
            found += [
                f"Kueue stopped job {e['involvedObject'].get('name')}: {e['message']}"
                for e in events
                if e.get("reason") == "Stopped" and e.get("message") == "Not admitted by cluster queue"
            ]

        reserved_uids: set[str] = set()
        by_group: dict[str, int] = defaultdict(int)
        by_user: dict[tuple[str, str], int] = defaultdict(int)
        for cm in configmaps:
            name = cm["metadata"]["name"]
            if not name.startswith(LEDGER_NAME_PREFIX):
                continue
            group = name[len(LEDGER_NAME_PREFIX) :]
            if group not in self.quotas:
                continue
            ledger = quota.decode(group, cm.get("data"))
            for r in ledger.reservations:
                reserved_uids.add(r.uid)
                by_group[group] += r.gpus
                by_user[(group, r.user)] += r.gpus
        for group, used in by_group.items():
            self.peak_reserved[group] = max(self.peak_reserved[group], used)
        found += [f"reserved {v}" for v in _over(by_group, self._group_limit)]
        found += [f"reserved {v}" for v in _over(by_user, self._user_limit)]

        live_per_task: dict[str, list[str]] = defaultdict(list)
        for job in jobs:
            meta = job["metadata"]
            job_labels = meta.get("labels") or {}
            if job_labels.get(labels.MANAGED_BY) != labels.MANAGED_BY_VALUE:
                continue
            job = {**job, "kind": "Job"}
            key = (
                job_labels.get(labels.TASK_KEY, ""),
                job_labels.get(labels.TRY, ""),
                job_labels.get(labels.ATTEMPT, ""),
            )
            self.uids[key].add(meta["uid"])
            if is_finished(job) or meta.get("deletionTimestamp"):
                continue
            live_per_task[key[0]].append(meta["name"])
            if self.kueue:
                if not is_suspended(job) and meta["uid"] not in admitted_uids:
                    found.append(f"job {meta['name']} runs unsuspended without an admitted Workload")
            elif not is_suspended(job) and meta["uid"] not in reserved_uids:
                found.append(f"job {meta['name']} runs unsuspended without a reservation")
        found += [
            f"task {task}: live jobs {names}" for task, names in live_per_task.items() if len(names) > 1
        ]

        held: dict[str, int] = defaultdict(int)
        held_user: dict[tuple[str, str], int] = defaultdict(int)
        with_terminating: dict[str, int] = defaultdict(int)
        for pod in pods:
            if not (pod.get("spec") or {}).get("nodeName"):
                continue
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            notes = pod["metadata"].get("annotations") or {}
            group, user = notes.get(labels.GROUP_NAME), notes.get(labels.USER_NAME)
            if group not in self.quotas:
                continue
            gpus = pod_gpus(pod)
            with_terminating[group] += gpus
            if pod["metadata"].get("deletionTimestamp"):
                continue
            held[group] += gpus
            held_user[(group, user)] += gpus
        for group, used in held.items():
            self.peak_pods[group] = max(self.peak_pods[group], used)
        found += [f"pods hold {v}" for v in _over(held, self._group_limit)]
        if not self.kueue:
            found += [f"pods hold {v}" for v in _over(held_user, self._user_limit)]
        excess = max((used - self._group_limit(g) for g, used in with_terminating.items()), default=0)
        if excess > 0:
            self.terminating_overlap_samples += 1
            self.terminating_overlap_peak = max(self.terminating_overlap_peak, excess)

        self.violations += [f"sample {self.samples}: {v}" for v in found]

    def duplicates(self) -> dict[TaskTry, set[str]]:
        """Keys under which more than one job object was ever seen."""
        return {key: uids for key, uids in self.uids.items() if len(uids) > 1}
