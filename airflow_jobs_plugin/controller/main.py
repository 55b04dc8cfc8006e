"""``airflow-jobs admission-controller``: the admission controller as its own process.

It runs outside Airflow, with an identity of its own (its pod's service account in a cluster, or a
kubeconfig), because Airflow's security model (airflow-core ``docs/security/security_model.rst``,
apache-airflow 3.3) lets DAG authors run code in the workers, the dag-processor and the triggerer: any
right those processes hold is a DAG author's, so none of them may admit. Replicas elect a leader on a
``coordination.k8s.io`` Lease (controller/leader.py); only the leader admits, and each time a process
becomes the leader it builds its state from the cluster afresh (controller/runner.py).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
from dataclasses import dataclass

from airflow_jobs_plugin.cluster.kube import KubeClient
from airflow_jobs_plugin.cluster.resources import name_problem

log = logging.getLogger("airflow_jobs_plugin.controller")

LEASE_NAME = "airflow-jobs-admission-controller"
# Where a pod finds its own namespace (the service account volume, as client-go's InClusterConfig reads).
POD_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


@dataclass(frozen=True)
class Options:
    namespaces: tuple[str, ...]  # empty: the namespaces ``selector`` matches ("": every namespace)
    lease_namespace: str
    lease_name: str
    identity: str
    selector: str | None = None
    kubeconfig: str | None = None
    context: str | None = None
    in_cluster: bool = False
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


def add_command(subparsers: argparse._SubParsersAction) -> None:
    command = subparsers.add_parser(
        "admission-controller",
        help="run the admission controller (the only identity that admits GPU jobs)",
        description=(
            "Admit, queue and rule on the GPU jobs of the given namespaces under their quota pools, as "
            "the only identity that may: run it outside Airflow, with its own service account "
            "(docs/deploying.md). Replicas elect a leader on a Lease; only the leader acts."
        ),
    )
    source = command.add_mutually_exclusive_group(required=True)
    source.add_argument("--kubeconfig", metavar="PATH", help="the controller's own kubeconfig")
    source.add_argument(
        "--in-cluster", action="store_true", help="use the service account of the pod it runs in"
    )
    command.add_argument("--context", default=None, help="the kubeconfig context (default: its current one)")
    which = command.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--namespace",
        "-n",
        action="append",
        help="a namespace whose jobs it admits; repeat it or give a comma list",
    )
    which.add_argument(
        "--namespace-selector",
        metavar="SELECTOR",
        help="admit in every namespace whose labels match this selector (airflow-jobs.io/managed=true), "
        "as namespaces come and go",
    )
    which.add_argument("--all-namespaces", action="store_true", help="admit in every namespace")
    command.add_argument(
        "--lease-namespace",
        default=None,
        help="namespace of the leader election's Lease (default: the pod's own namespace in a cluster, "
        "else the first --namespace)",
    )
    command.add_argument("--lease-name", default=LEASE_NAME, help=f"the Lease's name (default {LEASE_NAME})")
    command.add_argument(
        "--identity",
        default=None,
        help="this replica's name in the Lease (default: the host name and process id)",
    )
    command.add_argument("--lease-duration", type=float, default=15.0, help="seconds (default 15)")
    command.add_argument("--renew-deadline", type=float, default=10.0, help="seconds (default 10)")
    command.add_argument("--retry-period", type=float, default=2.0, help="seconds (default 2)")
    command.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING (default INFO)")
    command.set_defaults(handler=run)


def options_of(args: argparse.Namespace) -> Options:
    given = args.namespace or []
    namespaces = tuple(dict.fromkeys(n.strip() for value in given for n in value.split(",") if n.strip()))
    selector = "" if args.all_namespaces else args.namespace_selector
    if not namespaces and selector is None:
        raise ValueError(
            "--namespace: give at least one namespace (or --namespace-selector, --all-namespaces)"
        )
    for namespace in namespaces:
        problem = name_problem(namespace, None)
        if problem:
            raise ValueError(f"--namespace: {problem}")
    lease_namespace = args.lease_namespace
    if lease_namespace is None and args.in_cluster and os.path.exists(POD_NAMESPACE_FILE):
        with open(POD_NAMESPACE_FILE, encoding="utf-8") as handle:
            lease_namespace = handle.read().strip() or None
    lease_namespace = lease_namespace or (namespaces[0] if namespaces else None)
    if not lease_namespace:
        raise ValueError(
            "--lease-namespace: needed with --namespace-selector or --all-namespaces outside a pod"
        )
    problem = name_problem(lease_namespace, None)
    if problem:
        raise ValueError(f"--lease-namespace: {problem}")
    if not (0 < args.retry_period < args.renew_deadline < args.lease_duration):
        raise ValueError(
            "--retry-period, --renew-deadline, --lease-duration: need retry-period < renew-deadline < "
            f"lease-duration, got {args.retry_period}, {args.renew_deadline}, {args.lease_duration}"
        )
    return Options(
        namespaces=namespaces,
        selector=selector if not namespaces else None,
        lease_namespace=lease_namespace,
        lease_name=args.lease_name,
        identity=args.identity or f"{socket.gethostname()}-{os.getpid()}",
        kubeconfig=args.kubeconfig,
        context=args.context,
        in_cluster=bool(args.in_cluster),
        lease_duration=args.lease_duration,
        renew_deadline=args.renew_deadline,
        retry_period=args.retry_period,
    )


async def serve(options: Options) -> None:
    """Campaign for the Lease and, while leading, keep every namespace's jobs; until cancelled."""
    from airflow_jobs_plugin.controller.leader import LeaderElector
    from airflow_jobs_plugin.controller.runner import ClusterController

    if options.in_cluster:
        client = await KubeClient.in_cluster()
    else:
        assert options.kubeconfig is not None
        client = await KubeClient.from_kubeconfig(options.kubeconfig, options.context)
    # The Lease is renewed on a pool of its own: on the namespaces' pool, a renewal could wait for a
    # connection behind their watches past the renew deadline, and the leader would step down.
    lease_client = client.sibling()
    try:
        elector = LeaderElector(
            lease_client,
            options.lease_namespace,
            options.lease_name,
            options.identity,
            lease_duration=options.lease_duration,
            renew_deadline=options.renew_deadline,
            retry_period=options.retry_period,
        )

        async def lead() -> None:
            where = ", ".join(options.namespaces) or f"the namespaces matching {options.selector!r}"
            log.info("admission controller %s leads: admitting in %s", options.identity, where)
            await ClusterController(
                client, options.identity, namespaces=options.namespaces, selector=options.selector
            ).run()

        log.info(
            "admission controller %s: campaigning for Lease %s/%s",
            options.identity,
            options.lease_namespace,
            options.lease_name,
        )
        await elector.run(lead)
    finally:
        await lease_client.close()
        await client.close()


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        options = options_of(args)
    except ValueError as exc:
        log.error("%s", exc)
        return 2

    async def main() -> None:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        assert task is not None
        for signum in (signal.SIGTERM, signal.SIGINT):
            # A stop releases the Lease on the way out, so a standby takes over at once.
            loop.add_signal_handler(signum, task.cancel)
        try:
            await serve(options)
        except asyncio.CancelledError:
            log.info("admission controller %s stopped", options.identity)

    asyncio.run(main())
    return 0
