"""The ``airflow-jobs`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from airflow_jobs_plugin import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="airflow-jobs",
        description="GPU jobs on Kubernetes for Apache Airflow: inspect jobs, queues and quota pools.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_sim_command(subparsers)
    return parser


def _add_sim_command(subparsers: argparse._SubParsersAction) -> None:
    sim = subparsers.add_parser(
        "sim",
        help="run a simulated GPU Kubernetes cluster in the foreground",
        description="Run a simulated GPU Kubernetes cluster (API server and controllers) until interrupted, "
        "and write a kubeconfig for kubectl and the Kubernetes connection's kube_config_path.",
    )
    sim.add_argument("--nodes", type=int, default=2, help="number of GPU nodes (default 2)")
    sim.add_argument("--gpus-per-node", type=int, default=8, help="nvidia.com/gpu per node (default 8)")
    sim.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    sim.add_argument("--port", type=int, default=0, help="port to listen on (default: any free port)")
    sim.add_argument(
        "--kubeconfig", default=None, help="where to write the kubeconfig (default: a temp file)"
    )
    sim.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="multiply every simulated duration by this (0.1 = 10x faster)",
    )
    sim.add_argument(
        "--exec-commands",
        action="store_true",
        help="run the main container's command as a local process (its output is the pod log)",
    )
    sim.add_argument("--token", default=None, help="require this bearer token (default: no authentication)")
    sim.set_defaults(handler=_run_sim)


def _run_sim(args: argparse.Namespace) -> int:
    import signal
    import threading

    from airflow_jobs_plugin.sim import ClusterConfig, SimCluster

    config = ClusterConfig(
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        time_scale=args.time_scale,
        exec_commands=args.exec_commands,
        host=args.host,
        port=args.port,
        token=args.token,
    )
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    cluster = SimCluster(config, kubeconfig_path=args.kubeconfig).start()
    try:
        print(f"Simulated cluster listening on {cluster.url}", flush=True)
        print(f"kubeconfig: {cluster.kubeconfig_path}", flush=True)
        print(f"  kubectl --kubeconfig {cluster.kubeconfig_path} get pods", flush=True)
        print("Press Ctrl+C to stop.", flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        cluster.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print("Simulated cluster stopped.", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    handler = getattr(args, "handler", None)
    if handler is None:  # pragma: no cover - every subcommand sets one
        parser.error(f"unknown command {args.command!r}")
    return int(handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
