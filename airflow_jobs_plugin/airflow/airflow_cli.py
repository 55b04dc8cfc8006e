"""The ``airflow-jobs`` commands inside Airflow's own CLI, as ``airflow gpu-jobs ...``.

Airflow 3 loads a provider's commands from the functions its ``get_provider_info()`` lists under ``cli``
(``ProvidersManager._discover_cli_command`` and ``airflow/cli/cli_parser.py``, Airflow 3.3). The
commands, their arguments and their help are the ``airflow-jobs`` parser's (:mod:`airflow_jobs_plugin.airflow.cli`),
translated once here, so the two never drift apart; ``airflow-jobs`` stays for machines without Airflow.

Example::

    airflow gpu-jobs status --group vision
    airflow gpu-jobs logs nightly-train-a1 --failed
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from airflow_jobs_plugin.airflow import cli

if TYPE_CHECKING:
    from airflow.cli.cli_config import Arg, CLICommand

GROUP = "gpu-jobs"
# The simulator is a development tool of its own; in Airflow's CLI only the commands on the cluster.
COMMANDS = ("status", "nodes", "describe", "logs", "cancel", "stop", "resume")


def _arg(action: argparse.Action) -> Arg:
    from airflow.cli.cli_config import Arg

    kwargs: dict[str, Any] = {"help": action.help}
    if not action.option_strings:  # a positional argument
        return Arg((action.dest,), metavar=action.metavar, nargs=action.nargs, **kwargs)
    kwargs["dest"] = action.dest
    if isinstance(action, argparse._StoreTrueAction):
        return Arg(tuple(action.option_strings), action="store_true", **kwargs)
    if isinstance(action, argparse._AppendAction):
        kwargs["action"] = "append"
    for name in ("default", "type", "choices", "metavar", "nargs"):
        value = getattr(action, name)
        if value is not None:
            kwargs[name] = value
    if action.required:
        kwargs["required"] = True
    return Arg(tuple(action.option_strings), **kwargs)


def _runner(handler: Any):
    def run(args: argparse.Namespace) -> None:
        code = int(handler(args) or 0)
        if code:
            sys.exit(code)

    return run


def get_cli_commands() -> list[CLICommand]:
    """``airflow gpu-jobs``: one group, a command per ``airflow-jobs`` cluster command."""
    from airflow.cli.cli_config import ActionCommand, GroupCommand

    parser = cli.build_parser()
    (choices,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {c.dest: c.help for c in choices._choices_actions}
    commands = []
    for name in COMMANDS:
        sub = choices.choices[name]
        commands.append(
            ActionCommand(
                name=name,
                help=helps.get(name) or "",
                description=sub.description,
                func=_runner(sub.get_default("handler")),
                args=tuple(_arg(a) for a in sub._actions if not isinstance(a, argparse._HelpAction)),
            )
        )
    return [
        GroupCommand(
            name=GROUP,
            help="GPU jobs on Kubernetes: quota pools, queues, jobs, logs; cancel, stop, resume",
            subcommands=commands,
        )
    ]
