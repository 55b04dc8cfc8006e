"""Benchmark of the simulated API server: start-up time and requests per second with the sync client.

Run: ``.venv/bin/python tests/benchmarks/bench_sim_api.py [--seconds 3] [--pods 200]``. Not a test.
"""

from __future__ import annotations

import argparse
import time

from kubernetes import client, config


def rate(label: str, fn, seconds: float) -> float:
    """Call ``fn`` repeatedly for ``seconds``; print and return calls per second."""
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        fn()
        count += 1
    per_second = count / (time.perf_counter() - started)
    print(f"{label:<40} {per_second:8.0f} req/s  ({count} requests)")
    return per_second


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=3.0, help="duration of each measurement")
    parser.add_argument(
        "--pods", type=int, default=200, help="pods in the namespace for the list measurement"
    )
    args = parser.parse_args()

    started = time.perf_counter()
    from airflow_jobs_sim import ClusterConfig, SimCluster

    imported = time.perf_counter()
    full = SimCluster(ClusterConfig(nodes=4, time_scale=0.01)).start()
    running = time.perf_counter()
    full.stop()
    print(f"{'import of the simulator package':<40} {imported - started:8.3f} s")
    print(f"{'start-up (objects, HTTP server, controllers)':<40} {running - imported:8.3f} s")
    # Request rates of the API server alone: with controllers running, the pods created below would be
    # scheduled and run, and the rates would measure the controllers' load as well.
    cluster = SimCluster(ClusterConfig(nodes=4), controllers=False).start()
    api = config.new_client_from_config(config_file=cluster.kubeconfig_path)
    try:
        core = client.CoreV1Api(api)
        core.create_namespaced_pod(
            "default",
            {"metadata": {"name": "bench"}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}},
        )
        for i in range(args.pods):
            cluster.store.create(
                "pods",
                {
                    "metadata": {"name": f"p-{i}", "labels": {"i": str(i % 10)}},
                    "spec": {"containers": [{"name": "c", "image": "i:1"}]},
                },
                "default",
            )
        rate("get pod", lambda: core.read_namespaced_pod("bench", "default"), args.seconds)
        rate(
            "get pod (raw JSON, no model decoding)",
            lambda: core.read_namespaced_pod("bench", "default", _preload_content=False).data,
            args.seconds,
        )
        rate(
            f"list {args.pods // 10} pods by label (of {args.pods + 1})",
            lambda: core.list_namespaced_pod("default", label_selector="i=3"),
            args.seconds,
        )
        rate(
            f"list all {args.pods + 1} pods (raw JSON)",
            lambda: core.list_namespaced_pod("default", _preload_content=False).data,
            args.seconds,
        )
        counter = iter(range(10**9))
        rate(
            "create configmap",
            lambda: core.create_namespaced_config_map(
                "default", {"metadata": {"name": f"cm-{next(counter)}"}}
            ),
            args.seconds,
        )
        served = sum(cluster.counters().values())
        print(f"{'requests served in total':<40} {served:8d}")
    finally:
        api.close()
        cluster.stop()


if __name__ == "__main__":
    main()
