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
    parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser


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
