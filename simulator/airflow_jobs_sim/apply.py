"""Server-side apply and field ownership (``metadata.managedFields``), as pure functions.

Modelled on sigs.k8s.io/structured-merge-diff v4 (the library kube-apiserver 1.32 uses) and the
apiserver's ``pkg/endpoints/handlers/fieldmanager``:

- every write records which manager owns which fields: an apply as operation ``Apply`` with the fields of
  the applied configuration, a create / update / patch as operation ``Update`` with the fields it
  changed, taking them from the other managers;
- an apply that changes a field another manager owns, to a different value, is refused with ``409
  Conflict``, one cause ``FieldManagerConflict`` per field; ``force=true`` takes the fields over;
- a field the applier owned before and leaves out of its new configuration is removed, unless another
  manager owns it too;
- lists are merged by their keys (``containers`` by ``name``, ``ports`` by port and protocol, ...),
  ``finalizers`` is a set, any other list is atomic (owned and replaced whole).

Field sets use the ``FieldsV1`` notation of ``managedFields``: a path is a tuple of ``f:<field>``,
``k:<json of the key fields>`` and ``v:<json value>`` steps; ``fieldsV1`` is the nested-dict form with
``"."`` marking a list item owned as a whole.

Known differences: type-specific details of the real merge (e.g. ``x-kubernetes-map-type: atomic``
structs, unions and the discriminators of volume sources) are not modelled; every struct is granular.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

Path = tuple[str, ...]

# Lists merged by key (the patchMergeKey / listMapKeys of the served kinds' schemas).
LIST_KEYS: dict[str, tuple[str, ...]] = {
    "containers": ("name",),
    "initContainers": ("name",),
    "ephemeralContainers": ("name",),
    "env": ("name",),
    "volumes": ("name",),
    "volumeMounts": ("mountPath",),
    "imagePullSecrets": ("name",),
    "ownerReferences": ("uid",),
    "conditions": ("type",),
    "hostAliases": ("ip",),
    "schedulingGates": ("name",),
    "resourceClaims": ("name",),
}
SET_LISTS = {"finalizers"}
# What a manager never owns: identity, server-set metadata and the status of the main resource.
_UNTRACKED_METADATA = {
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
    "generateName",
}


def _keys_for(field: str, item: object) -> tuple[str, ...] | None:
    if field == "ports" and isinstance(item, dict):
        return ("containerPort", "protocol") if "containerPort" in item else ("port", "protocol")
    return LIST_KEYS.get(field)


def _key_step(item: dict, keys: tuple[str, ...]) -> str:
    picked = {k: item.get(k, "TCP" if k == "protocol" else None) for k in keys}
    return "k:" + json.dumps(picked, separators=(",", ":"), sort_keys=True)


def fields_of(obj: dict, subresource: str | None = None) -> set[Path]:
    """The field set an object (or an applied configuration) sets."""
    out: set[Path] = set()
    for key, value in obj.items():
        if key in ("apiVersion", "kind"):
            continue
        if (key == "status") != (subresource == "status"):
            continue
        if key == "metadata" and isinstance(value, dict):
            meta = {k: v for k, v in value.items() if k not in _UNTRACKED_METADATA}
            if meta:  # name and namespace identify the object: nobody owns them
                _collect(meta, ("f:metadata",), out)
            continue
        _value_fields(key, value, (f"f:{key}",), out)
    return out


def _collect(obj: dict, prefix: Path, out: set[Path]) -> None:
    if not obj:
        out.add(prefix)
        return
    for key, value in obj.items():
        _value_fields(key, value, (*prefix, f"f:{key}"), out)


def _value_fields(field: str, value: object, path: Path, out: set[Path]) -> None:
    if isinstance(value, dict):
        _collect(value, path, out)
    elif isinstance(value, list) and field in SET_LISTS:
        out.update((*path, "v:" + json.dumps(v, separators=(",", ":"))) for v in value)
    elif (
        isinstance(value, list)
        and value
        and all(isinstance(v, dict) for v in value)
        and _keys_for(field, value[0])
    ):
        for item in value:
            step = (*path, _key_step(item, _keys_for(field, item) or ()))
            out.add((*step, "."))
            for k, v in item.items():
                _value_fields(k, v, (*step, f"f:{k}"), out)
    else:
        out.add(path)


def to_fields_v1(paths: set[Path]) -> dict:
    """The nested ``fieldsV1`` form of a field set."""
    root: dict = {}
    for path in sorted(paths):
        node = root
        for step in path:
            node = node.setdefault(step, {})
    return root


def from_fields_v1(tree: dict, prefix: Path = ()) -> set[Path]:
    """The field set of a ``fieldsV1`` tree."""
    out: set[Path] = set()
    for step, sub in (tree or {}).items():
        if step == ".":
            out.add((*prefix, "."))
        elif not sub:
            out.add((*prefix, step))
        else:
            out |= from_fields_v1(sub, (*prefix, step))
    return out


_MISSING = object()


def value_at(obj: object, path: Path) -> object:
    """The value a field path points at in an object (``_MISSING`` when absent)."""
    cur = obj
    for step in path:
        if step == ".":
            return cur
        kind, _, arg = step.partition(":")
        if kind == "f":
            if not isinstance(cur, dict) or arg not in cur:
                return _MISSING
            cur = cur[arg]
        elif kind == "k":
            wanted = json.loads(arg)
            if not isinstance(cur, list):
                return _MISSING
            match = [
                i
                for i in cur
                if isinstance(i, dict)
                and all(i.get(k, "TCP" if k == "protocol" else None) == v for k, v in wanted.items())
            ]
            if not match:
                return _MISSING
            cur = match[0]
        elif kind == "v":
            value = json.loads(arg)
            return value if isinstance(cur, list) and value in cur else _MISSING
    return cur


def _remove(obj: object, path: Path) -> None:
    """Delete the field (or list item) a path points at, when present."""
    if not path:
        return
    if path[-1] == ".":
        parent, step = value_at(obj, path[:-2]), path[-2]
        item = value_at(obj, path[:-1])
        if isinstance(parent, list) and item is not _MISSING:
            parent.remove(item)
        return
    parent, step = value_at(obj, path[:-1]), path[-1]
    kind, _, arg = step.partition(":")
    if kind == "f" and isinstance(parent, dict):
        parent.pop(arg, None)
    elif kind == "v" and isinstance(parent, list):
        value = json.loads(arg)
        if value in parent:
            parent.remove(value)


def merge(live: object, config: object, field: str = "") -> object:
    """The live object with the applied configuration merged in (lists by key, sets united)."""
    if isinstance(config, dict) and isinstance(live, dict):
        out = dict(live)
        for key, value in config.items():
            out[key] = merge(live.get(key, _MISSING), value, key) if key in live else value
        return out
    if isinstance(config, list) and isinstance(live, list):
        if field in SET_LISTS:
            return live + [v for v in config if v not in live]
        if config and all(isinstance(v, dict) for v in config) and _keys_for(field, config[0]):
            out_list = list(live)
            for item in config:
                step = _key_step(item, _keys_for(field, item) or ())
                existing = value_at(out_list, (step,))
                if existing is _MISSING:
                    out_list.append(item)
                else:
                    out_list[out_list.index(existing)] = merge(existing, item)
            return out_list
    return config


@dataclass(frozen=True)
class Conflict:
    """A field another manager owns with a different value."""

    manager: str
    path: Path

    @property
    def field(self) -> str:
        """The path as the API server prints it: ``.spec.containers[name="main"].image``."""
        text = ""
        for step in self.path:
            kind, _, arg = step.partition(":")
            if kind == "f":
                text += f".{arg}"
            elif kind == "k":
                text += "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in json.loads(arg).items()) + "]"
            elif kind == "v":
                text += f"[{arg}]"
        return text


@dataclass(frozen=True)
class Applied:
    """The object after an apply, and the conflicts that stopped it (empty when it went through)."""

    obj: dict
    conflicts: tuple[Conflict, ...]


def _entries(obj: dict) -> list[dict]:
    return [e for e in (obj.get("metadata") or {}).get("managedFields") or [] if isinstance(e, dict)]


def _entry(
    manager: str, operation: str, api_version: str, paths: set[Path], now: str, sub: str | None
) -> dict:
    entry = {
        "manager": manager,
        "operation": operation,
        "apiVersion": api_version,
        "time": now,
        "fieldsType": "FieldsV1",
        "fieldsV1": to_fields_v1(paths),
    }
    if sub:
        entry["subresource"] = sub
    return entry


def _same_entry(entry: dict, manager: str, operation: str, sub: str | None) -> bool:
    return (entry.get("manager"), entry.get("operation"), entry.get("subresource")) == (
        manager,
        operation,
        sub,
    )


def apply(
    live: dict | None,
    config: dict,
    manager: str,
    force: bool,
    now: str,
    subresource: str | None = None,
) -> Applied:
    """Apply ``config`` as ``manager`` to ``live`` (None: the object does not exist yet)."""
    api_version = str(config.get("apiVersion") or "")
    applied = fields_of(config, subresource)
    base: dict = live or {}
    entries = _entries(base)
    mine = next((e for e in entries if _same_entry(e, manager, "Apply", subresource)), None)
    before = from_fields_v1(mine.get("fieldsV1") or {}) if mine else set()
    conflicts: list[Conflict] = []
    others: list[tuple[dict, set[Path]]] = []
    for entry in entries:
        if entry is mine or entry.get("subresource") != subresource:
            continue
        owned = from_fields_v1(entry.get("fieldsV1") or {})
        # Owning a list item (".") is shared freely: only the fields inside it can clash.
        clash = {
            p
            for p in owned & applied
            if p[-1] != "." and value_at(base, p) is not _MISSING and value_at(base, p) != value_at(config, p)
        }
        if clash and not force:
            conflicts += [Conflict(str(entry.get("manager", "")), p) for p in sorted(clash)]
        others.append((entry, owned - clash if force else owned))
    if conflicts:
        return Applied(base, tuple(conflicts))
    body = {k: v for k, v in config.items() if k not in ("apiVersion", "kind")}
    meta = dict(body.get("metadata") or {})
    for k in _UNTRACKED_METADATA:
        meta.pop(k, None)
    body["metadata"] = meta
    result = merge(_strip_managed(base), body)
    assert isinstance(result, dict)
    identity = {k: v for k, v in (config.get("metadata") or {}).items() if k in ("name", "namespace")}
    result["metadata"] = {**(result.get("metadata") or {}), **identity}
    result["apiVersion"], result["kind"] = config.get("apiVersion"), config.get("kind")
    still_owned = set().union(*(owned for _, owned in others)) if others else set()
    for path in sorted(before - applied - still_owned, key=len, reverse=True):
        _remove(result, path)
    new_entries = [{**entry, "fieldsV1": to_fields_v1(owned)} for entry, owned in others if owned] + [
        _entry(manager, "Apply", api_version, applied, now, subresource)
    ]
    new_entries += [e for e in entries if e.get("subresource") != subresource and e is not mine]
    result.setdefault("metadata", {})["managedFields"] = new_entries
    return Applied(result, ())


def _strip_managed(obj: dict) -> dict:
    out = dict(obj)
    out["metadata"] = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return out


def record_update(
    old: dict | None, new: dict, manager: str, now: str, subresource: str | None = None
) -> list[dict]:
    """The ``managedFields`` after a create / update / patch by ``manager``: it owns the fields it set
    or changed (operation ``Update``), and the other managers lose them."""
    before = fields_of(old, subresource) if old else set()
    after = fields_of(new, subresource)
    changed = {p for p in after if p not in before or (p[-1] != "." and value_at(old, p) != value_at(new, p))}
    removed = before - after
    entries = _entries(old) if old else []
    out: list[dict] = []
    mine: set[Path] = set()
    for entry in entries:
        if entry.get("subresource") != subresource:
            out.append(entry)
            continue
        owned = from_fields_v1(entry.get("fieldsV1") or {})
        if _same_entry(entry, manager, "Update", subresource):
            mine = owned - removed
            continue
        kept = owned - changed - removed
        if kept:
            out.append({**entry, "fieldsV1": to_fields_v1(kept)})
    mine |= changed
    if mine:
        out.append(_entry(manager, "Update", str(new.get("apiVersion") or ""), mine, now, subresource))
    return out


def conflict_message(conflicts: tuple[Conflict, ...]) -> str:
    """The 409 message of a refused apply, worded as the apiserver's (fieldmanager/internal/conflict.go)."""
    if len(conflicts) == 1:
        c = conflicts[0]
        return f'Apply failed with 1 conflict: conflict with "{c.manager}": {c.field}'
    by_manager: dict[str, list[str]] = {}
    for c in conflicts:
        by_manager.setdefault(c.manager, []).append(c.field)
    parts = [
        f'conflicts with "{m}":\n' + "\n".join(f"- {f}" for f in fields) for m, fields in by_manager.items()
    ]
    return f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(parts)
