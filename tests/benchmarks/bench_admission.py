"""Admission benchmark: 1,000 queued jobs across 20 groups and 200 users, with 1 and with 3 admitting processes.

Run: ``.venv/bin/python tests/benchmarks/bench_admission.py [--jobs 1000] [--processes 1 3]``
(``scripts/bench`` runs it and writes ``docs/benchmarks.md``).

The quota pool in production: every job is created suspended, a ``JobTrigger`` with ``quota_configmap``
follows it, and each triggerer process runs the admission passes of the groups its triggers wait in
(``airflow_jobs_plugin.queueing.engines.pool`` over ``queueing/quota/ledger.py``). Here:

- a policy ConfigMap with 20 groups of 8 GPUs (``user_gpus: 4``), 10 users per group;
- 1,000 jobs of 1 or 2 GPUs, created suspended from real manifests, spread round-robin over the groups,
  each running a staggered few seconds of real time, so that every group has a queue ~6 deep;
- K tracker processes (1 or 3), the jobs dealt round-robin between them: with 3, every group's passes
  run in 3 processes at once and race on the ledger's compare-and-swap.

Capacity is freed when a running job completes. The admission latency of a job is the time from the
last completion in its group before its admission to its admission (the simulator's timestamps of the
Complete condition and of the unsuspend, taken inside the store writes); jobs admitted in the first
wave, before any completion, are not counted, nor are those after an end that came before every
tracker process had started (a triggerer that is not up yet is not there to act on its jobs' ends:
the others do, a backstop later, admission.BACKSTOP_SECONDS). The run also checks the pool's
invariant on the simulator's timeline: at no instant did a group hold more admitted, unfinished GPUs
than its quota.
"""

from __future__ import annotations

import argparse
import bisect
import json
import random
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from benchlib import SimProcess, TrackerProcess, latency_stats, machine, window_rate

GROUPS = 20
USERS_PER_GROUP = 10
GROUP_GPUS = 8
USER_GPUS = 4
POLICY = "bench-quota"


def policy_yaml() -> str:
    lines = ["groups:"]
    for g in range(GROUPS):
        lines.append(f"  g{g:02d}: {{gpus: {GROUP_GPUS}, user_gpus: {USER_GPUS}}}")
    return "\n".join(lines) + "\n"


def workload(jobs: int, time_scale: float, run_real: tuple[float, float]) -> list[dict]:
    rng = random.Random(jobs)
    out = []
    for i in range(jobs):
        g = i % GROUPS
        user = g * USERS_PER_GROUP + (i // GROUPS) % USERS_PER_GROUP
        out.append(
            {
                "group": f"g{g:02d}",
                "user": f"u{user:03d}",
                "gpus": 2 if i % 3 == 0 else 1,
                "run": rng.uniform(*run_real) / time_scale,
            }
        )
    return out


def run_admission(
    jobs: int = 1000,
    processes: int = 1,
    *,
    time_scale: float = 0.5,
    run_real: tuple[float, float] = (4.0, 12.0),
    say: Any = print,
) -> dict[str, Any]:
    """One admission run; returns the figures (see the module docstring)."""
    namespace = f"admit-{processes}p"
    specs = workload(jobs, time_scale, run_real)
    say(
        f"[admission] {jobs} jobs, {GROUPS} groups, {GROUPS * USERS_PER_GROUP} users, {processes} process(es)"
    )
    with SimProcess(nodes=GROUPS + 4, time_scale=time_scale) as sim:
        t0 = time.time()
        names = sim.cmd("create_jobs", namespace=namespace, prefix=f"q{processes}", jobs=specs)
        from airflow_jobs_plugin.jobs import (  # noqa: F401 - fail early if the pool is missing
            labels,
        )
        from airflow_jobs_plugin.queueing import (  # noqa: F401 - fail early if the pool is missing
            quota,
        )

        sim.cmd(
            "put_configmap",
            namespace=namespace,
            name=POLICY,
            data={quota.POLICY_KEY: policy_yaml()},
        )
        shares = [names[k::processes] for k in range(processes)]
        # Started together: one after the other, on a loaded machine the last would start ten seconds
        # after the first, and the ends of its jobs in between would be nobody's to act on at once.
        with ThreadPoolExecutor(max_workers=processes) as starting:
            trackers = list(
                starting.map(
                    lambda share: TrackerProcess(
                        sim,
                        "ours",
                        share,
                        namespace,
                        cap=jobs * 2.0 + 300,
                        extra=["--quota-configmap", POLICY],
                    ),
                    shares,
                )
            )
        all_ready = max(t.ready for t in trackers)
        results = [t.result(timeout=jobs * 2.0 + 600) for t in trackers]
        transitions = sim.cmd("transitions", namespace=namespace)
        samples = [(t, c) for t, c in sim.cmd("samples", since=t0)]
    gpus_of = {name: spec["gpus"] for name, spec in zip(names, specs, strict=True)}
    return summarize(
        jobs, processes, transitions, gpus_of, results, samples, time_scale, run_real, all_ready=all_ready
    )


def summarize(
    jobs: int,
    processes: int,
    transitions: dict[str, dict],
    gpus_of: dict[str, int],
    results: list[dict],
    samples: list,
    time_scale: float,
    run_real: tuple[float, float],
    all_ready: float = 0.0,
) -> dict[str, Any]:
    by_group: dict[str, dict[str, list]] = {}
    for name, entry in transitions.items():
        group = by_group.setdefault(entry.get("group") or "?", {"admits": [], "ends": [], "spans": []})
        if "unsuspended" in entry:
            group["admits"].append((entry["unsuspended"], name))
        if "finished" in entry:
            group["ends"].append((entry["finished"], name))
        if "unsuspended" in entry:
            group["spans"].append(
                (entry["unsuspended"], entry.get("finished", float("inf")), gpus_of.get(name, 0))
            )
    latencies: list[float] = []
    counted: list[tuple[float, str, str]] = []  # (latency, the job admitted, the job whose end made room)
    over_quota = 0
    for group in by_group.values():
        ends = sorted(group["ends"])
        end_times = [t for t, _ in ends]
        for admitted, name in group["admits"]:
            i = bisect.bisect_right(end_times, admitted)
            if i and end_times[i - 1] >= all_ready:
                latencies.append(admitted - end_times[i - 1])
                counted.append((admitted - end_times[i - 1], name, ends[i - 1][1]))
        # The invariant, on the cluster's own timeline: admitted and unfinished GPUs never above quota.
        moments = sorted([(s, g) for s, _, g in group["spans"]] + [(e, -g) for _, e, g in group["spans"]])
        held = 0
        for _, change in moments:
            held += change
            if held > GROUP_GPUS:
                over_quota += 1
    admits = sorted(t for g in by_group.values() for t, _ in g["admits"])
    events = sum(len(r["events"]) for r in results)
    statuses: dict[str, int] = {}
    for r in results:
        for v in r["events"].values():
            statuses[v["status"]] = statuses.get(v["status"], 0) + 1
    started = min(r["started"] for r in results)
    ended = max(r["ended"] for r in results)
    return {
        "jobs": jobs,
        "processes": processes,
        "groups": GROUPS,
        "users": GROUPS * USERS_PER_GROUP,
        "admitted": len(admits),
        "events": events,
        "statuses": statuses,
        "latency": latency_stats(latencies),
        "admissions_per_second": (len(admits) - 1) / (admits[-1] - admits[0]) if len(admits) > 1 else None,
        "makespan_seconds": round(ended - started, 1),
        "over_quota_instants": over_quota,
        "requests": window_rate(samples, started, ended, covering=True),
        "cpu_seconds": [round(r["cpu_seconds"], 1) for r in results],
        "peak_rss_mb": [round(r["peak_rss_kb"] / 1024, 1) for r in results],
        "errors": [e for r in results for e in r["errors"]][:5],
        "tail": tail_breakdown(counted, transitions, results),
        "setup": {
            "time_scale": time_scale,
            "run_seconds_real": list(run_real),
            "group_gpus": GROUP_GPUS,
            # how long after the first tracker process the last was ready
            "trackers_ready_spread": round(all_ready - min(r["started"] for r in results), 1),
        },
    }


def tail_breakdown(
    counted: list[tuple[float, str, str]],
    transitions: dict[str, dict],
    results: list[dict],
    share: float = 0.05,
) -> dict[str, Any]:
    """Where the slowest ``share`` of the admissions spent their time, from the end that made room
    (``finished``, the simulator's clock) to the unsuspend, each step as the processes timed it:

    - ``pod_end``: until the ending job's pod ended (its reservation is kept while its pods live);
    - ``delivered``: until the first process received the end over its watch;
    - ``pass_start``: until the pass that admitted the job started;
    - ``pass``: that pass, from its start to the unsuspend; ``conflicts``: its lost compare-and-swaps;
    - ``passes_between`` and ``lost_writes``: the group's passes and lost ledger writes of every process
      in the whole interval (racing work).

    Each figure is the mean over the slow admissions; ``slowest`` lists the ten slowest in full."""
    if not counted or not all("admission_trace" in r for r in results):
        return {}
    slow = sorted(counted, reverse=True)[: max(1, int(len(counted) * share))]
    passes = [(p, k) for k, r in enumerate(results) for p in r["admission_trace"]["passes"]]
    writes = [(w, k) for k, r in enumerate(results) for w in r["admission_trace"]["writes"]]
    rows = []
    for latency, name, ended in slow:
        end = transitions[ended]["finished"]
        admitted = transitions[name]["unsuspended"]
        group = transitions[name].get("group")
        received = [r["received"].get(ended, {}).get("finished") for r in results]
        received = [t for t in received if t is not None]
        admitting = [(p, k) for p, k in passes if name in p[4]]
        # The pass that admitted it is the last to start before the unsuspend.
        before = [(p, k) for p, k in admitting if p[0] <= admitted + 0.01]
        chosen = max(before, key=lambda pk: pk[0][0]) if before else None
        owner = next((k for k, r in enumerate(results) if ended in r["events"]), None)
        owner_passes = [
            [round(p[0] - end, 3), round(p[1] - end, 3), len(p[4]), p[3]]
            for p, k in passes
            if k == owner and p[2] == group and end - 0.5 <= p[0] <= admitted
        ]
        rows.append(
            {
                "job": name,
                "ended": ended,
                "owner": owner,
                "owner_final_event": round(results[owner]["events"][ended]["t"] - end, 3)
                if owner is not None
                else None,
                "owner_passes": owner_passes,
                "latency": round(latency, 3),
                "pod_end": round(transitions[ended].get("pod_ended", end) - end, 3),
                "delivered": round(min(received) - end, 3) if received else None,
                "pass_start": round(chosen[0][0] - end, 3) if chosen else None,
                "pass": round(admitted - chosen[0][0], 3) if chosen else None,
                "conflicts": chosen[0][3] if chosen else None,
                "process": chosen[1] if chosen else None,
                "passes_between": sum(1 for p, _ in passes if p[2] == group and end <= p[0] <= admitted),
                "lost_writes": sum(
                    1 for w, _ in writes if w[2] == group and end <= w[0] <= admitted and not w[4]
                ),
            }
        )

    def mean(key: str) -> float | None:
        values = [r[key] for r in rows if r[key] is not None]
        return round(sum(values) / len(values), 3) if values else None

    return {
        "share": share,
        "count": len(rows),
        "mean": {
            key: mean(key)
            for key in (
                "latency",
                "pod_end",
                "delivered",
                "pass_start",
                "pass",
                "conflicts",
                "passes_between",
                "lost_writes",
            )
        },
        "slowest": rows[:10],
        "lost_writes": sum(1 for w, _ in writes if not w[4]),
        "writes": len(writes),
        "release_writes": sum(1 for w, _ in writes if w[3] == "release"),
        "passes": len(passes),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()
    results = []
    for k in args.processes:
        result = run_admission(args.jobs, k)
        results.append(result)
        print(json.dumps(result, indent=1, default=str))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"machine": machine(), "admission": results}, f, indent=1)


if __name__ == "__main__":
    main()
