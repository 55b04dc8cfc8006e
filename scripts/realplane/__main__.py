"""scripts/cluster: a real Kubernetes control plane on this machine (see docs/real-cluster.md).

scripts/cluster up --kubeconfig PATH [--nodes N] [--gpus-per-node G] [--with mpi-operator,kueue]
                   [--kueue-config FILE] [--time-scale S]
scripts/cluster down [--kubeconfig PATH]     stop one plane, or every plane started from this checkout
scripts/cluster status [--kubeconfig PATH]   what runs, with process ids and ports
scripts/cluster build [--with ...]           build (or find cached) every binary, start nothing
scripts/cluster account --kubeconfig PATH --service-account NS/NAME --out PATH [--cluster-role ROLE]
                                             a service account's own kubeconfig (a token of it)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from realplane import build, plane
from realplane.pins import Pins

WITH_CHOICES = plane.OPERATORS


def _with(value: str) -> tuple[str, ...]:
    items = tuple(v.strip() for v in value.split(",") if v.strip())
    unknown = [v for v in items if v not in WITH_CHOICES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"--with: unknown component {unknown[0]!r} (choose from {', '.join(WITH_CHOICES)})"
        )
    return items


def _positive(value: str) -> int:
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="scripts/cluster", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="build what is missing, start the plane, write an admin kubeconfig")
    up.add_argument("--kubeconfig", required=True, type=Path)
    up.add_argument("--nodes", type=_positive, default=3, help="GPU nodes (one MIG node is added)")
    up.add_argument("--gpus-per-node", type=_positive, default=8)
    up.add_argument("--with", dest="with_", type=_with, default=(), help="mpi-operator,kueue")
    up.add_argument("--kueue-config", type=Path, help="a Kueue Configuration merged over the shipped one")
    up.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="real seconds per second of a pod scenario (the simulator's time_scale)",
    )
    for name in ("down", "status"):
        p = sub.add_parser(name)
        p.add_argument("--kubeconfig", type=Path)
    k = sub.add_parser("kueue", help="restart the plane's Kueue with another configuration")
    k.add_argument("--kubeconfig", required=True, type=Path)
    k.add_argument("--kueue-config", type=Path, help="merged over the shipped one (omit: as shipped)")
    a = sub.add_parser("account", help="a service account's own kubeconfig (a TokenRequest token of it)")
    a.add_argument("--kubeconfig", required=True, type=Path, help="the plane's admin kubeconfig")
    a.add_argument("--service-account", required=True, metavar="NAMESPACE/NAME")
    a.add_argument("--cluster-role", default=None, help="bind it to this ClusterRole too")
    a.add_argument("--out", required=True, type=Path, help="where to write its kubeconfig")
    b = sub.add_parser("build", help="build every pinned component (cached), start nothing")
    b.add_argument("--with", dest="with_", type=_with, default=WITH_CHOICES)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    cache = build.default_cache()
    try:
        if args.command == "build":
            names = ("etcd", "kubernetes", "kwok", *args.with_)
            took = build.ensure(build.Layout(cache), Pins.load(), names)
            print(f"cluster: {len(names)} components ready in {cache / 'bin'} ({_took(took)})")
            return 0
        if args.command == "account":
            from realplane.accounts import service_account_kubeconfig

            namespace, _, name = args.service_account.partition("/")
            if not namespace or not name:
                print("cluster: --service-account: expected NAMESPACE/NAME", file=sys.stderr)
                return 2
            out = service_account_kubeconfig(args.kubeconfig, namespace, name, args.out, args.cluster_role)
            print(f"cluster: kubeconfig of {namespace}/{name}: {out}")
            return 0
        if args.command == "up":
            if args.kueue_config is not None and not args.kueue_config.is_file():
                print(f"cluster: --kueue-config: no such file {args.kueue_config}", file=sys.stderr)
                return 2
            options = plane.Options(
                kubeconfig=args.kubeconfig.resolve(),
                nodes=args.nodes,
                gpus_per_node=args.gpus_per_node,
                with_=args.with_,
                kueue_config=args.kueue_config.resolve() if args.kueue_config else None,
                time_scale=args.time_scale,
            )
            p = plane.Plane(options, cache)
            t = time.monotonic()
            timings = p.up()
            assert p.state is not None
            for proc in p.state.processes:
                print(f"cluster: started {proc.name} (pid {proc.pid}, log {proc.log})")
            print(
                f"cluster: ready in {time.monotonic() - t:.0f} s (build {timings.get('build_seconds', 0):.0f} s, "
                f"start {timings.get('start_seconds', 0):.0f} s); {options.nodes} GPU nodes x "
                f"{options.gpus_per_node} GPUs + 1 MIG node; kubeconfig {options.kubeconfig}"
            )
            return 0
        if args.command == "kueue":
            state_file = plane.state_dir(args.kubeconfig.resolve()) / "state.json"
            if not state_file.exists():
                print(f"cluster: no plane runs for {args.kubeconfig}", file=sys.stderr)
                return 1
            saved = plane.State.load(state_file).options
            options = plane.Options(
                kubeconfig=args.kubeconfig.resolve(),
                nodes=saved["nodes"],
                gpus_per_node=saved["gpus_per_node"],
                with_=tuple(saved["with_"]),
                kueue_config=args.kueue_config.resolve() if args.kueue_config else None,
                time_scale=saved["time_scale"],
            )
            plane.Plane(options, cache).restart_kueue(options.kueue_config)
            how = (
                f"with {args.kueue_config} merged over the shipped configuration"
                if args.kueue_config
                else "as shipped"
            )
            print(f"cluster: Kueue restarted {how}")
            return 0
        if args.kubeconfig:
            targets = [plane.state_dir(args.kubeconfig.resolve())]
        elif args.command == "down":
            # Only this checkout's: another checkout's plane, or another test run's, is not ours to stop.
            targets = plane.known_planes(cache, plane.CHECKOUT)
        else:
            targets = plane.known_planes(cache)
        if args.command == "down":
            for directory in targets:
                for stopped in plane.stop_directory(directory):
                    print(f"cluster: stopped {stopped}")
                plane.forget(cache, directory)
            return 0
        if args.command == "status":
            running = 0
            for directory in targets:
                state_file = directory / "state.json"
                if not state_file.exists():
                    continue
                state = plane.State.load(state_file)
                print(f"plane {directory} (kubeconfig {state.options.get('kubeconfig')})")
                print(
                    f"  API server https://127.0.0.1:{state.ports.get('apiserver')}; started {time.ctime(state.started_at)}"
                )
                for proc in state.processes:
                    up = plane.alive(proc.pid)
                    running += up
                    count, code = plane.restarts(proc.log)
                    again = f"  restarted {count}x (last exit code {code})" if count else ""
                    print(
                        f"  {proc.name:24} pid {proc.pid:>7}  {'running' if up else 'STOPPED'}  {proc.log}{again}"
                    )
            if not running:
                print("cluster: no plane runs")
            return 0
    except (plane.PlaneError, build.BuildError) as exc:
        print(f"cluster: {exc}", file=sys.stderr)
        return 1
    return 2


def _took(took: dict[str, float]) -> str:
    if not took:
        return "all cached"
    return ", ".join(f"{k} built in {v:.0f} s" for k, v in took.items())


if __name__ == "__main__":
    sys.exit(main())
