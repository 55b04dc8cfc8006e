"""Who a DAG may charge: the platform's map from DAG folders to the groups and users their jobs bill.

A task's ``owner`` is whatever its DAG file says, so it cannot decide whose GPU quota a job spends. The
platform team decides instead, per DAG folder (one folder per team's bundle or git-sync checkout)::

    folders:
      /opt/airflow/dags/vision:           # DAG files under this folder...
        groups: [vision]                  # ...may charge these groups...
        users: [retraining-bot, alice]    # ...as these users
      /opt/airflow/dags:
        groups: [research, nlp]
        users: [alice, bob]

The most specific folder holding the DAG file decides; a file under no folder may charge nothing. The
charged user is the task's ``user`` if it names one, else its owner. Pure rules over plain data: the
cluster policy (``airflow/cluster_policy.py``) reads the file and applies them at parse time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

import yaml

from airflow_jobs_plugin.jobs.bounded import BoundedSafeLoader


class ChargingError(ValueError):
    """The charging map is malformed; the message names the field and the fix."""


@dataclass(frozen=True)
class Allowance:
    """What the DAGs of one folder may charge."""

    folder: str
    groups: frozenset[str]
    users: frozenset[str]


@dataclass(frozen=True)
class ChargingMap:
    allowances: tuple[Allowance, ...]  # most specific folder first

    def allows_anywhere(self, group: str, user: str) -> bool:
        """Whether some folder's DAGs may charge ``group`` as ``user``: all a reader of the job alone
        (the admitting triggerer) can check, since the job's own claim of its DAG file is text."""
        return any(group in a.groups and user in a.users for a in self.allowances)

    def allowance_for(self, dag_file: str) -> Allowance | None:
        path = PurePosixPath(dag_file)
        for allowance in self.allowances:
            if path.is_relative_to(allowance.folder):
                return allowance
        return None


def _names(value: object, where: str) -> frozenset[str]:
    if not isinstance(value, list) or not value:
        raise ChargingError(f"{where}: must be a non-empty list of names, e.g. [alice, bob]")
    for index, name in enumerate(value):
        if not isinstance(name, str) or not name:
            raise ChargingError(f"{where}[{index}]: must be a name (a string), got {name!r}")
    return frozenset(value)


def parse_charging(text: str) -> ChargingMap:
    """Parse the charging map YAML; a malformed one raises :class:`ChargingError` naming the field."""
    try:
        document = yaml.load(text, Loader=BoundedSafeLoader)  # noqa: S506 - a SafeLoader subclass
    except (yaml.YAMLError, RecursionError) as exc:
        raise ChargingError(f"not YAML: {str(exc)[:200]}") from None
    if not isinstance(document, Mapping) or not isinstance(document.get("folders"), Mapping):
        raise ChargingError("folders: the charging map needs a 'folders:' mapping of DAG folder -> allowance")
    unknown = set(document) - {"folders"}
    if unknown:
        raise ChargingError(f"{', '.join(sorted(map(str, unknown)))}: unknown key; only 'folders' is read")
    allowances = []
    for folder, entry in document["folders"].items():
        where = f"folders.{folder}"
        if not isinstance(folder, str) or not folder.startswith("/"):
            raise ChargingError(f"{where}: a folder must be an absolute path, e.g. /opt/airflow/dags/team")
        if not isinstance(entry, Mapping) or set(entry) != {"groups", "users"}:
            raise ChargingError(f"{where}: needs exactly 'groups' and 'users' lists")
        allowances.append(
            Allowance(
                folder=str(PurePosixPath(folder)),
                groups=_names(entry["groups"], f"{where}.groups"),
                users=_names(entry["users"], f"{where}.users"),
            )
        )
    allowances.sort(key=lambda a: len(PurePosixPath(a.folder).parts), reverse=True)
    return ChargingMap(tuple(allowances))


def charge_problem(
    charging: ChargingMap, *, dag_file: str, owner: str, user: str | None, group: str, known_groups: set[str]
) -> str | None:
    """Why a task of ``dag_file`` may not charge ``group`` as ``user`` (or its owner); None: it may."""
    charged = user or owner
    allowance = charging.allowance_for(dag_file)
    if allowance is None:
        return (
            f"charging: DAG file {dag_file} is under no folder of the platform's charging map, so it may "
            "charge no GPU quota; ask a platform admin to add its folder"
        )
    if group not in known_groups:
        return f"group: unknown group {group!r}; known groups: {', '.join(sorted(known_groups)) or '(none)'}"
    if group not in allowance.groups:
        return (
            f"charging: DAGs under {allowance.folder} may charge groups {', '.join(sorted(allowance.groups))}, "
            f"not {group!r}"
        )
    if charged not in allowance.users:
        return (
            f"charging: DAGs under {allowance.folder} may charge users {', '.join(sorted(allowance.users))}, "
            f"not {charged!r} (the task's {'user' if user else 'owner'})"
        )
    return None
