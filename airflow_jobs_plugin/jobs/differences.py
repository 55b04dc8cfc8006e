"""The first place two Kubernetes objects differ, named by its path (pure, no I/O).

A path reads as the API server's own field paths do in its validation errors, with list items named
where the API names them (merge keys): ``spec.template.spec.containers[0].env[PYTHONPATH]``,
``spec.template.spec.volumes[data]``, ``spec.template.metadata.annotations[sim.airflow-jobs.io/scenario]``.
What is compared is whatever the caller hands in; :mod:`~airflow_jobs_plugin.jobs.stored_form` is what
makes two objects that run the same pods compare equal.

    >>> first_difference({"env": [{"name": "A", "value": "1"}]}, {"env": []}, "spec").path
    'spec.env[A]'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_jobs_plugin.jobs.bounded import excerpt
from airflow_jobs_plugin.jobs.stored_form import MAP_FIELDS


class _Absent:
    """The value of a field that one side does not have."""

    def __repr__(self) -> str:
        return "absent"


ABSENT: Any = _Absent()

# Lists whose items the API merges by a key (the ``patchMergeKey`` of the core types): their items are
# named by it in a path, and matched by it, so an item added in the middle names itself, not every item
# after it. Containers are matched by position, as the API server names them in its errors.
MERGE_KEYS = {
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "schedulingGates": "name",
    "resourceClaims": "name",
}
# Maps whose keys are names (labels, a node selector's keys, an MPIJob's replica types): bracketed in a path.
KEYED_MAPS = MAP_FIELDS | {"mpiReplicaSpecs"}
# Keyed lists whose order changes what runs: a variable may refer to one defined before it ("$(NAME)").
ORDERED = frozenset({"env"})


@dataclass(frozen=True)
class Difference:
    """Where two objects first differ: ``wanted`` is the first's value there, ``found`` the second's
    (:data:`ABSENT` where one has none)."""

    path: str
    wanted: Any
    found: Any

    def describe(self, wanted: str = "wanted", found: str = "found") -> str:
        """``<path>: <wanted> has ..., <found> has ...``, each value quoted in short."""
        return f"{self.path}: {wanted} has {_show(self.wanted)}, {found} has {_show(self.found)}"


def _show(value: Any) -> str:
    return "none" if value is ABSENT else excerpt(value)


def first_difference(wanted: Any, found: Any, path: str = "") -> Difference | None:
    """The first place ``found`` differs from ``wanted`` (both JSON-shaped), in ``wanted``'s order and
    then the fields only ``found`` has, or ``None`` when they are equal. A ``1`` and a ``1.0`` are
    equal; ``True`` and ``1`` are not."""
    return _compare(wanted, found, path, None)


def _compare(wanted: Any, found: Any, path: str, field: str | None) -> Difference | None:
    if isinstance(wanted, Mapping) and isinstance(found, Mapping):
        return _compare_maps(wanted, found, path, field)
    if isinstance(wanted, list) and isinstance(found, list):
        key = MERGE_KEYS.get(field or "")
        if key is not None and _keyed(wanted, key) and _keyed(found, key):
            return _compare_keyed(wanted, found, path, field or "", key)
        for index in range(max(len(wanted), len(found))):
            left = wanted[index] if index < len(wanted) else ABSENT
            right = found[index] if index < len(found) else ABSENT
            difference = _compare(left, right, f"{path}[{index}]", field)
            if difference is not None:
                return difference
        return None
    return None if _same(wanted, found) else Difference(path, wanted, found)


def _compare_maps(
    wanted: Mapping[str, Any], found: Mapping[str, Any], path: str, field: str | None
) -> Difference | None:
    names = [*wanted, *sorted(k for k in found if k not in wanted)]
    for name in names:
        where = f"{path}[{name}]" if field in KEYED_MAPS else (f"{path}.{name}" if path else str(name))
        difference = _compare(wanted.get(name, ABSENT), found.get(name, ABSENT), where, name)
        if difference is not None:
            return difference
    return None


def _compare_keyed(wanted: list, found: list, path: str, field: str, key: str) -> Difference | None:
    theirs = {item[key]: item for item in found}
    for item in wanted:
        difference = _compare(item, theirs.get(item[key], ABSENT), f"{path}[{item[key]}]", field)
        if difference is not None:
            return difference
    ours = {item[key] for item in wanted}
    for item in found:
        if item[key] not in ours:
            return Difference(f"{path}[{item[key]}]", ABSENT, item)
    if field in ORDERED:
        order = [item[key] for item in found]
        if order != [item[key] for item in wanted]:
            return Difference(f"{path} (order)", [item[key] for item in wanted], order)
    return None


def _keyed(items: list, key: str) -> bool:
    """Every item carries the key, each a different one (else items are compared by position)."""
    names = [item.get(key) if isinstance(item, Mapping) else None for item in items]
    return all(isinstance(n, str) for n in names) and len(set(names)) == len(names)


def _same(wanted: Any, found: Any) -> bool:
    if isinstance(wanted, bool) or isinstance(found, bool):
        return type(wanted) is type(found) and wanted == found
    if isinstance(wanted, int | float) and isinstance(found, int | float):
        return wanted == found
    return type(wanted) is type(found) and wanted == found
