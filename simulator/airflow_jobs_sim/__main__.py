"""``airflow-jobs-sim``: a simulated GPU Kubernetes cluster in the foreground, until interrupted.

It writes a kubeconfig for kubectl and for the Kubernetes connection's ``kube_config_path``.
"""

from __future__ import annotations

import argparse
import secrets
import signal
import sys
import threading

from airflow_jobs_sim import ClusterConfig, SimCluster
from airflow_jobs_sim.config import Identity
from airflow_jobs_sim.kubeconfig import write_kubeconfig
from airflow_jobs_sim.rbac import MASTERS


def build_parser() -> argparse.ArgumentParser:
    sim = argparse.ArgumentParser(
        prog="airflow-jobs-sim",
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
        help="run every container that has a command as a local process (its output is the container log). "
        "WARNING: this runs ANY command it is given, as the user running the simulator, for anyone "
        "who can create a Job or MPIJob on it: without --token a random one is required (it is in the "
        "kubeconfig written); keep --host on 127.0.0.1",
    )
    sim.add_argument(
        "--token",
        default=None,
        help="require this bearer token on every request, the /_sim/ admin API included "
        "(default: no authentication)",
    )
    sim.add_argument(
        "--token-ttl",
        type=float,
        default=None,
        metavar="SECONDS",
        help="require short-lived tokens living this long, minted by an exec plugin the kubeconfig runs "
        "(python -m airflow_jobs_sim.mint_token); --token, or a random secret, signs them",
    )
    sim.add_argument(
        "--service-account",
        action="append",
        default=[],
        metavar="NAMESPACE/NAME",
        help="a service account that calls as itself (system:serviceaccount:NAMESPACE:NAME, in "
        "system:masters: the simulator enforces no RBAC here), with a token of its own written to a "
        "kubeconfig beside the cluster's: <kubeconfig>-<NAME>; repeatable",
    )
    return sim


def _service_accounts(values: list[str]) -> list[tuple[str, str, Identity]]:
    """(namespace, name, identity) of each --service-account, each with a fresh token."""
    found = []
    for value in values:
        namespace, _, name = value.partition("/")
        if not namespace or not name:
            raise SystemExit(f"--service-account: expected NAMESPACE/NAME, got {value!r}")
        account = Identity.service_account(namespace, name, secrets.token_hex(16))
        account = Identity(account.token, account.user, (*account.groups, MASTERS))
        found.append((namespace, name, account))
    return found


def run(args: argparse.Namespace) -> int:
    accounts = _service_accounts(args.service_account)
    config = ClusterConfig(
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        time_scale=args.time_scale,
        exec_commands=args.exec_commands,
        host=args.host,
        port=args.port,
        # A cluster that runs commands runs them only for its own clients: never without a token.
        token=args.token
        or (secrets.token_hex(16) if args.token_ttl is not None or args.exec_commands else None),
        token_ttl=args.token_ttl,
        identities=tuple(identity for _, _, identity in accounts),
    )
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    cluster = SimCluster(config, kubeconfig_path=args.kubeconfig).start()
    try:
        print(f"Simulated cluster listening on {cluster.url}", flush=True)
        print(f"kubeconfig: {cluster.kubeconfig_path}", flush=True)
        for namespace, name, identity in accounts:
            path = write_kubeconfig(f"{cluster.kubeconfig_path}-{name}", cluster.url, identity.token)
            print(f"kubeconfig of {namespace}/{name}: {path}", flush=True)
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


def main(argv: list[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
