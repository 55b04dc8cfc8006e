"""The ``airflow-jobs`` command line."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from airflow_jobs_plugin import __version__

if TYPE_CHECKING:  # each command imports its modules only when it runs
    from airflow_jobs_plugin.cluster.kube import KubeClient
    from airflow_jobs_plugin.readmodel.inspect import Target
    from airflow_jobs_plugin.usecases.actions import ActionOutcome, CancelOutcome


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="airflow-jobs",
        description="GPU jobs on Kubernetes for Apache Airflow: inspect jobs, queues and quota pools.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_inspect_commands(subparsers)
    from airflow_jobs_plugin.controller.main import add_command

    add_command(subparsers)
    return parser


# --- status, describe, logs, cancel, stop, resume ---


def _cluster_arguments(command: argparse.ArgumentParser, *, many_namespaces: bool = False) -> None:
    where = command.add_argument_group("cluster")
    if many_namespaces:
        where.add_argument(
            "--namespace",
            "-n",
            action="append",
            default=None,
            help="namespace of the jobs; repeat it or give a comma list to read several (default: "
            "[airflow_jobs] namespace and namespaces, itself default 'default')",
        )
    else:
        where.add_argument(
            "--namespace",
            "-n",
            default=None,
            help="namespace of the jobs (default: [airflow_jobs] namespace, itself default 'default')",
        )
    source = where.add_mutually_exclusive_group()
    source.add_argument(
        "--conn-id",
        default=None,
        help="Airflow Kubernetes connection to read the cluster through "
        "(default: [airflow_jobs] kubernetes_conn_id, itself default kubernetes_default)",
    )
    source.add_argument(
        "--kubeconfig",
        default=None,
        metavar="PATH",
        help="use this kubeconfig file instead (default: $AIRFLOW_JOBS_KUBECONFIG, where set)",
    )
    where.add_argument(
        "--quota-configmap",
        default=None,
        help="ConfigMap holding the quota policy (default: [airflow_jobs] quota_configmap; '' for none)",
    )
    where.add_argument(
        "--quota-namespace",
        default=None,
        help="namespace of the policy and ledgers (default: [airflow_jobs] quota_namespace, else --namespace)",
    )
    command.add_argument("--json", action="store_true", help="print JSON instead of tables")


def _add_inspect_commands(subparsers: argparse._SubParsersAction) -> None:
    status = subparsers.add_parser(
        "status", help="quota pools, queues and jobs", description="Show quota pools, queues and jobs."
    )
    _cluster_arguments(status, many_namespaces=True)
    shown = status.add_argument_group("which jobs (pools and queues count every job of the groups)")
    for flag, what in (
        ("group", "groups"),
        ("user", "users"),
        ("state", "states, e.g. RUNNING,QUEUED"),
        ("dag", "DAG ids"),
    ):
        shown.add_argument(
            f"--{flag}",
            action="append",
            default=None,
            help=f"only jobs of these {what} (repeat or comma list)",
        )
    shown.add_argument(
        "--sort", default=None, help="column to sort jobs by, '-' first for descending (default: -created)"
    )
    shown.add_argument("--limit", type=int, default=None, help="jobs to show (default 100, at most 1000)")
    shown.add_argument("--offset", type=int, default=None, help="jobs to skip first")
    shown.add_argument(
        "--queue-rows",
        type=int,
        default=None,
        help="waiting jobs to list per queue and users per pool (default 20, at most 1000; the rest are counted)",
    )
    status.set_defaults(handler=_run_status)

    nodes = subparsers.add_parser(
        "nodes",
        help="GPUs per node, used and free, and the jobs holding them",
        description="Show every node with GPUs: how many it offers, hold and has free, and which jobs hold them.",
    )
    _cluster_arguments(nodes, many_namespaces=True)
    nodes.set_defaults(handler=_run_nodes)

    describe = subparsers.add_parser(
        "describe",
        help="one job: state, timeline, replicas, events, log tails",
        description="Describe one job: its state, timeline, replicas with their kubectl STATUS, events "
        "and the last log lines of every replica.",
    )
    describe.add_argument("job", metavar="JOB", help="job name")
    describe.add_argument(
        "--tail", type=int, default=10, help="log lines per replica (default 10, 0 for none)"
    )
    _cluster_arguments(describe)
    describe.set_defaults(handler=_run_describe)

    logs = subparsers.add_parser(
        "logs",
        help="a job's log, by rank",
        description="Print the log of one replica of a job: the launcher of an MPI job (rank -1) or "
        "worker 0 of a single-pod job unless --rank says which worker. --rank N is always worker N (the "
        "replica index, as `describe` lists them), live or finished: once an MPI job has ended and worker "
        "N's pod is gone, it prints the lines of the MPI ranks worker N ran (ranks N*slots to "
        "N*slots+slots-1, slots = GPUs per worker) from the launcher's log.",
    )
    logs.add_argument("job", metavar="JOB", help="job name")
    which = logs.add_mutually_exclusive_group()
    which.add_argument(
        "--rank",
        type=int,
        default=None,
        help="worker index N (-1 is the MPI launcher); on an ended MPI job, the MPI ranks worker N ran",
    )
    which.add_argument(
        "--failed", action="store_true", help="the first container that failed (its rank, its container)"
    )
    logs.add_argument(
        "--follow", "-f", action="store_true", help="keep printing new lines until the pod ends"
    )
    logs.add_argument("--tail", type=int, default=None, help="only the last N lines")
    _cluster_arguments(logs)
    logs.set_defaults(handler=_run_logs)

    cancel = subparsers.add_parser(
        "cancel",
        help="cancel a job",
        description="Cancel a job: mark it Cancelled, free its quota and delete it with its pods.",
    )
    cancel.add_argument("job", metavar="JOB", help="job name")
    cancel.add_argument(
        "--by", default=None, help="who cancels, recorded on the job (default: the login name)"
    )
    _cluster_arguments(cancel)
    cancel.set_defaults(handler=_run_action)

    stop = subparsers.add_parser(
        "stop",
        help="stop a job (frees its GPUs; resume requeues it)",
        description="Stop a job: suspend it so its pods are deleted and its GPUs and quota reservation "
        "are released. Its task stays deferred in STOPPED until the job is resumed or cancelled.",
    )
    stop.add_argument("job", metavar="JOB", help="job name")
    stop.add_argument("--by", default=None, help="who stops, recorded on the job (default: the login name)")
    _cluster_arguments(stop)
    stop.set_defaults(handler=_run_action)

    resume = subparsers.add_parser(
        "resume",
        help="resume a stopped job",
        description="Resume a stopped job: it goes back to its group's queue at its original position "
        "(without a quota pool it starts at once) and runs again from the start.",
    )
    resume.add_argument("job", metavar="JOB", help="job name")
    resume.add_argument(
        "--by", default=None, help="who resumes, recorded in the job's events (default: the login name)"
    )
    _cluster_arguments(resume)
    resume.set_defaults(handler=_run_action)


def _target(args: argparse.Namespace):
    from airflow_jobs_plugin.queueing import quota
    from airflow_jobs_plugin.readmodel.inspect import Target

    configmap = quota.DEFAULT_POLICY_CONFIGMAP if args.quota_configmap is None else args.quota_configmap
    return Target(
        namespace=args.namespace, quota_configmap=configmap or None, quota_namespace=args.quota_namespace
    )


def _defaults_from_airflow_config(args: argparse.Namespace) -> None:
    """Fill what the command line left out from ``[airflow_jobs]``, as the UI reads it (config.get)."""
    from airflow_jobs_plugin import config

    if args.namespace is None:
        args.namespace = config.get("namespace") or "default"
    if args.quota_configmap is None:
        args.quota_configmap = config.get("quota_configmap")  # "" means no quota pool
    if args.quota_namespace is None:
        args.quota_namespace = config.get("quota_namespace") or None
    if getattr(args, "conn_id", None) is None and not getattr(args, "kubeconfig", None):
        args.conn_id = config.get("kubernetes_conn_id") or None


# How long the API server may take to answer its /version before a command gives up: a server that
# answers nothing (stopped behind a proxy, a firewall dropping packets) would otherwise hold every
# request for the client's 30-second timeout, and a command makes several.
REACH_SECONDS = 5.0
HOW_TO_POINT = (
    "pass --kubeconfig PATH, set AIRFLOW_JOBS_KUBECONFIG=PATH, or set the Airflow connection "
    "(AIRFLOW_CONN_KUBERNETES_DEFAULT, or [airflow_jobs] kubernetes_conn_id)"
)


def _airflow_may_know(conn_id: str) -> bool:
    """Whether Airflow could hold connection ``conn_id`` in this shell, without importing it: the
    connection as an environment variable (``AIRFLOW_CONN_<ID>``), or an Airflow configured here
    (a config file, a metadata database or a secrets backend named by the environment, or the config
    file or SQLite database of ``$AIRFLOW_HOME``, ``~/airflow`` by default: Airflow 3.3's
    ``airflow/configuration.py`` ``get_airflow_home`` / ``get_airflow_config``). Where none is, importing
    Airflow only to learn that costs seconds, creates ``$AIRFLOW_HOME`` and its logs folder, and makes
    the Kubernetes hook log a warning about a kubeconfig nobody asked for."""
    env = os.environ
    if "airflow.configuration" in sys.modules or f"AIRFLOW_CONN_{conn_id.upper()}" in env:
        return True  # inside Airflow's own CLI (airflow jobs ...), or the connection is right here
    if any(
        key in env
        for key in (
            "AIRFLOW_CONFIG",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_SECRET",
            "AIRFLOW__SECRETS__BACKEND",
        )
    ):
        return True
    home = os.path.expanduser(os.path.expandvars(env.get("AIRFLOW_HOME", "~/airflow")))
    return any(os.path.exists(os.path.join(home, f)) for f in ("airflow.cfg", "airflow.db"))


def _default_kubeconfig() -> str | None:
    """What a Kubernetes connection that Airflow does not have falls back to (the cncf hook loads the
    client's default kubeconfig): the first file of ``$KUBECONFIG``, else ``~/.kube/config``; None when
    there is none."""
    listed = os.environ.get("KUBECONFIG")
    paths = listed.split(os.pathsep) if listed else [os.path.join("~", ".kube", "config")]
    return next((os.path.expanduser(p) for p in paths if p and os.path.isfile(os.path.expanduser(p))), None)


def _with_client(args: argparse.Namespace, work) -> int:
    """Run ``work(client)`` on a client for the chosen cluster; errors print one line and exit 1.

    A cluster that is not there fails the command in seconds: with nothing configured, before Airflow
    is imported at all; with a server that does not answer, after :data:`REACH_SECONDS`."""
    import asyncio

    if not getattr(args, "kubeconfig", None) and os.environ.get("AIRFLOW_JOBS_KUBECONFIG"):
        if getattr(args, "conn_id", None) is None:
            args.kubeconfig = os.environ["AIRFLOW_JOBS_KUBECONFIG"]
    _defaults_from_airflow_config(args)

    from airflow_jobs_plugin.cluster.kube import DEFAULT_CONN_ID, KubeClient, KubeError
    from airflow_jobs_plugin.readmodel.inspect import JobNotFound

    class NoCluster(Exception):
        pass

    conn_id = args.conn_id or DEFAULT_CONN_ID
    kubeconfig = args.kubeconfig
    if not kubeconfig and not _airflow_may_know(conn_id):
        kubeconfig = _default_kubeconfig()
        if kubeconfig is None:
            print(
                f"error: no Kubernetes cluster is configured here: no Airflow connection {conn_id!r} "
                f"(AIRFLOW_CONN_{conn_id.upper()} is not set and no Airflow is configured in "
                f"{os.environ.get('AIRFLOW_HOME', '~/airflow')}), and no KUBECONFIG or ~/.kube/config; "
                f"{HOW_TO_POINT}",
                file=sys.stderr,
            )
            return 1

    async def run() -> int:
        try:
            if kubeconfig:
                client = await KubeClient.from_kubeconfig(kubeconfig)
            else:
                client = await KubeClient.from_connection(conn_id)
        except Exception as exc:  # a missing or unreadable kubeconfig, a connection that names none
            where = f"kubeconfig {kubeconfig}" if kubeconfig else f"the Airflow connection {conn_id!r}"
            raise NoCluster(
                f"cannot reach a Kubernetes cluster through {where}: {str(exc).strip() or type(exc).__name__}; "
                f"{HOW_TO_POINT}"
            ) from exc
        try:
            try:
                await client.version(timeout=REACH_SECONDS)
            except KubeError as exc:
                # Any answer of the server itself will do: a 401 or 403 is said better by the
                # command's own request. No answer, or a proxy's word that none came, ends it here.
                if exc.status not in (0, 502, 503, 504):
                    return int(await work(client) or 0)
                why = (
                    f"did not answer within {REACH_SECONDS:g}s"
                    if "TimeoutError" in str(exc)
                    else f"cannot be reached ({exc})"
                )
                source = f"kubeconfig {kubeconfig}" if kubeconfig else f"Airflow connection {conn_id!r}"
                raise NoCluster(
                    f"the Kubernetes API server {client.server} ({source}) {why}; is the cluster running? "
                    f"{HOW_TO_POINT}"
                ) from exc
            return int(await work(client) or 0)
        finally:
            await client.close()
            await _settled()

    try:
        return asyncio.run(run())
    except JobNotFound as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return 1
    except NoCluster as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KubeError as exc:
        print(f"error: the cluster answered {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


async def _settled() -> None:
    """End the requests a failed command left running (a read of several lists stops at its first
    error, the others still going): cancelled and awaited here, they end quietly instead of printing
    their tracebacks as ``asyncio.run`` shuts down."""
    import asyncio

    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)


def _print_json(value) -> None:
    """Print JSON: a model of the JSON API (``readmodel/schema.py``), so ``--json`` prints what the GPU Jobs
    routes return, or a plain dict (``logs``)."""
    import json

    from pydantic import BaseModel

    body = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
    print(json.dumps(body, indent=2, sort_keys=True))


def _status_namespaces(args: argparse.Namespace) -> None:
    """``--namespace`` given (repeated or comma lists): those; else ``[airflow_jobs] namespace`` and
    ``namespaces``. Leaves ``args.namespace`` the first and ``args.also_namespaces`` the rest."""
    from airflow_jobs_plugin import config

    given = [n.strip() for item in args.namespace or () for n in item.split(",") if n.strip()]
    if given:
        spaces = tuple(dict.fromkeys(given))
    else:
        spaces = config.namespaces(config.get("namespace") or "default", config.get("namespaces"))
    args.namespace, args.also_namespaces = spaces[0], spaces[1:]


def _run_status(args: argparse.Namespace) -> int:
    import dataclasses

    from airflow_jobs_plugin.readmodel import listing
    from airflow_jobs_plugin.readmodel.inspect import STATUS_CHUNK, read_cluster, read_status
    from airflow_jobs_plugin.readmodel.text import status_text
    from airflow_jobs_plugin.readmodel.views import overview

    try:
        query = listing.parse_query(
            group=args.group,
            user=args.user,
            state=args.state,
            dag=args.dag,
            sort=args.sort,
            offset=args.offset,
            limit=args.limit,
        )
    except listing.QueryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rows = listing.QUEUE_ROWS if args.queue_rows is None else args.queue_rows
    if not 0 <= rows <= listing.MAX_QUEUE_ROWS:
        print(f"error: --queue-rows must be from 0 to {listing.MAX_QUEUE_ROWS}, got {rows}", file=sys.stderr)
        return 2
    _status_namespaces(args)

    async def work(client) -> int:
        target = dataclasses.replace(_target(args), also=args.also_namespaces)
        if listing.by_metadata(query):
            # The page is chosen from every job's metadata and only its jobs and the waiting ones are
            # read whole (inspect.read_status): the finished history costs its metadata, not its pods.
            # The GPU-usage charts need every job's admission and end, so this view carries none.
            read = await read_status(client, target, query, chunk=STATUS_CHUNK)
            view, page = listing.with_page(overview(read.state), query, read.page, read.total)
            view = dataclasses.replace(view, charts=())
        else:
            view, page = listing.page_of(
                listing.narrow(overview(await read_cluster(client, target)), query), query
            )
        view = listing.bounded(view, rows)
        if args.json:
            # The JSON models (pydantic) cost a tenth of a second to import: only for --json.
            from airflow_jobs_plugin.readmodel import schema

            _print_json(
                schema.overview(view, total=page.total, offset=page.offset, limit=page.limit, more=page.more)
            )
            return 0
        print(status_text(view))
        first = page.offset + 1 if page.rows else 0
        shown = f"jobs {first}-{page.offset + len(page.rows)}"
        choose = "--limit, --offset, --state, --group, --user, --dag choose others"
        if page.total is None:
            if page.more:
                # Only the newest jobs were read (inspect.read_status): counting means reading them all.
                print(f"\n{shown} shown, newest first; older ones follow ({choose}; --sort name counts them)")
        elif page.total > len(page.rows):
            print(f"\n{shown} of {page.total} shown ({choose})")
        return 0

    return _with_client(args, work)


def _run_nodes(args: argparse.Namespace) -> int:
    from airflow_jobs_plugin.readmodel import schema
    from airflow_jobs_plugin.readmodel.inspect import read_nodes
    from airflow_jobs_plugin.readmodel.text import nodes_text

    _status_namespaces(args)

    async def work(client) -> int:
        target = dataclasses.replace(_target(args), also=args.also_namespaces)
        view = await read_nodes(client, target)
        if args.json:
            _print_json(schema.node_view(view))
        else:
            print(nodes_text(view))
        return 0

    return _with_client(args, work)


def _run_describe(args: argparse.Namespace) -> int:
    from airflow_jobs_plugin.readmodel import schema
    from airflow_jobs_plugin.readmodel.inspect import read_job, read_log_tails
    from airflow_jobs_plugin.readmodel.text import describe_text
    from airflow_jobs_plugin.readmodel.views import job_detail

    async def work(client) -> int:
        state, job = await read_job(client, _target(args), args.job)
        tails = (
            await read_log_tails(client, args.namespace, job, state.pods, args.tail) if args.tail > 0 else ()
        )
        detail = job_detail(state, job, tails)
        _print_json(schema.job_detail(detail)) if args.json else print(describe_text(detail))
        return 0

    return _with_client(args, work)


async def _rank_from_launcher(
    client, args: argparse.Namespace, job: dict, launcher: tuple[str, int, str, str]
) -> int:
    """A worker whose pod is gone (the MPI operator deletes running workers when the launcher ends): the
    lines of the MPI ranks it ran, from the launcher's log, where mpirun gathers every rank's output
    (rank_log.py). ``--rank`` is the worker's index here too, as on a live job: with several GPUs (and
    so several MPI ranks) per worker, worker N ran ranks N*slots to N*slots+slots-1."""

    from airflow_jobs_plugin.logs.rank_log import worker_lines, worker_ranks
    from airflow_jobs_plugin.readmodel.inspect import JobNotFound

    _, _, pod, container = launcher
    slots = int((job.get("spec") or {}).get("slotsPerWorker") or 1)
    ranks = worker_ranks(args.rank, slots)
    text = await client.read_log(args.namespace, pod, container=container or None)
    lines = worker_lines(text.splitlines(), args.rank, slots)
    if lines is None:
        raise JobNotFound(
            f"job {args.job}: the pod of worker {args.rank} was deleted when the job ended (cleanPodPolicy "
            f"Running frees its GPUs), and the launcher's log does not say which line is whose: run mpirun "
            f"with --tag-output (Open MPI) or -prepend-rank (Intel MPI, MPICH), or read the whole log "
            f"with --rank -1"
        )
    if args.tail is not None:
        lines = lines[-args.tail :] if args.tail > 0 else []
    which = f"MPI rank {ranks[0]}" if len(ranks) == 1 else f"MPI ranks {ranks[0]}-{ranks[-1]}"
    print(
        f"worker {args.rank}'s pod was deleted when the job ended; the lines of its {which} from the "
        f"launcher's log ({pod}):",
        file=sys.stderr,
    )
    if args.json:
        _print_json(
            {
                "job": args.job,
                "replica": f"worker-{args.rank}",
                "rank": args.rank,
                "mpi_ranks": list(ranks),
                "pod": pod,
                "container": container,
                "source": "launcher",
                "lines": lines,
            }
        )
    else:
        for line in lines:
            print(line)
    sys.stdout.flush()
    return 0


def _run_logs(args: argparse.Namespace) -> int:
    import json

    from airflow_jobs_plugin.jobs import kinds
    from airflow_jobs_plugin.readmodel.inspect import JobNotFound, find_job, follow_log, pods_of_job
    from airflow_jobs_plugin.readmodel.views import (
        expected_ranks,
        failed_log_target,
        log_targets,
        no_log_target,
        pick_log_target,
    )

    async def work(client) -> int:
        job = await find_job(client, args.namespace, args.job)
        ranks = expected_ranks(job)
        if args.rank is not None and args.rank not in ranks:
            raise JobNotFound(f"job {args.job} has no rank {args.rank} (ranks: {', '.join(map(str, ranks))})")
        pods = await pods_of_job(client, job)
        targets = log_targets(job, pods)
        if args.failed:
            chosen = failed_log_target(job, pods)
            if chosen is None:
                raise JobNotFound(f"job {args.job}: no container of it has failed (or its pods are gone)")
        else:
            chosen = pick_log_target(targets, args.rank)
        if chosen is None:
            launcher = pick_log_target(targets, kinds.LAUNCHER_RANK)
            if (
                kinds.kind_of(job).ranks_in_launcher_log
                and launcher is not None
                and args.rank is not None
                and args.rank >= 0
            ):
                return await _rank_from_launcher(client, args, job, launcher)
            finished = kinds.kind_of(job).is_finished(job)
            raise JobNotFound(no_log_target(args.job, args.rank, targets, finished=finished))
        replica, rank, pod, container = chosen

        def emit(line: str) -> None:
            if args.json:
                print(
                    json.dumps({"job": args.job, "replica": replica, "rank": rank, "pod": pod, "line": line})
                )
            else:
                print(line)
            sys.stdout.flush()

        if args.follow:
            async for line in follow_log(client, args.namespace, pod, container or None, args.tail):
                emit(line)
            return 0
        text = await client.read_log(args.namespace, pod, container=container or None, tail_lines=args.tail)
        lines = text.splitlines()
        if args.json:
            _print_json(
                {
                    "job": args.job,
                    "replica": replica,
                    "rank": rank,
                    "pod": pod,
                    "container": container,
                    "lines": lines,
                }
            )
        else:
            for line in lines:
                print(line)
        return 0

    return _with_client(args, work)


def _run_action(args: argparse.Namespace) -> int:
    """``cancel``, ``stop`` or ``resume``: one door each to the same actions the GPU Jobs page uses."""
    import getpass

    from airflow_jobs_plugin.readmodel import inspect, schema

    acts: dict[str, Callable[[KubeClient, Target, str, str], Awaitable[CancelOutcome | ActionOutcome]]] = {
        "cancel": inspect.cancel,
        "stop": inspect.stop,
        "resume": inspect.resume,
    }
    act = acts[args.command]

    async def work(client) -> int:
        outcome = await act(client, _target(args), args.job, args.by or getpass.getuser())
        _print_json(schema.outcome(outcome)) if args.json else print(outcome.message)
        return 0

    return _with_client(args, work)


def _names_problem(args: argparse.Namespace) -> str | None:
    """Why a namespace or job name given on the command line can name nothing on the cluster."""
    from airflow_jobs_plugin.cluster.resources import name_problem

    given = getattr(args, "namespace", None)
    spaces = (
        [n.strip() for item in given for n in item.split(",") if n.strip()]
        if isinstance(given, list)
        else [given]
    )
    for namespace in [*spaces, getattr(args, "quota_namespace", None)]:
        problem = name_problem(namespace, None) if namespace is not None else None
        if problem:
            return problem
    job = getattr(args, "job", None)
    return name_problem(None, job) if job is not None else None


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None:
        # Run as a program (the ``airflow-jobs`` script, ``python -m``): nothing else in this process
        # uses the Kubernetes client library, so its generated classes need not be imported.
        from airflow_jobs_plugin.cluster.lazy_kubernetes import defer_generated_classes

        defer_generated_classes()
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    problem = _names_problem(args)
    if problem:
        parser.error(problem)  # exits 2, before any request could carry the name into a path
    handler = getattr(args, "handler", None)
    if handler is None:  # pragma: no cover - every subcommand sets one
        parser.error(f"unknown command {args.command!r}")
    return int(handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
