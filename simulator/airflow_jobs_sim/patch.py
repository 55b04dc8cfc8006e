"""The three PATCH flavours the API server accepts, as pure functions over plain JSON values.

- JSON merge patch (RFC 7386): objects merge recursively, ``null`` deletes, lists are replaced.
- Strategic merge patch: like merge, but lists the Kubernetes types mark ``patchStrategy: merge`` are
  merged by their key (containers by name, conditions by type, ...), with the ``$patch`` and
  ``$deleteFromPrimitiveList`` directives.
- JSON patch (RFC 6902): add, remove, replace, move, copy, test.

The merge flavours never change their target and copy only the path they change: the result shares
every value the patch leaves alone with the target (the store's stored objects are immutable, so a new
version costs the size of the patch, not of the object). The patch's own values are copied.
"""

from __future__ import annotations

from typing import Any

from airflow_jobs_sim.errors import ApiError

# Merge keys of the list fields used by Pods, Jobs, Nodes and Events (patchMergeKey in the Go types).
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "conditions": "type",
    "ownerReferences": "uid",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
    "addresses": "type",
    "podIPs": "ip",
}
# Lists of scalars merged as sets (patchStrategy: merge without a key).
PRIMITIVE_MERGE_LISTS = frozenset({"finalizers"})


class PatchError(ApiError):
    """A patch that cannot be applied (422, like the server's patch failures)."""

    def __init__(self, message: str):
        super().__init__(422, "Invalid", message)


def _copy(value: Any) -> Any:
    """A deep copy of JSON data (faster than copy.deepcopy for dicts and lists)."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply an RFC 7386 merge patch, returning a new value (sharing what the patch leaves alone)."""
    if not isinstance(patch, dict):
        return _copy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Apply a strategic merge patch, returning a new value (sharing what the patch leaves alone)."""
    return _smp_value(None, target, patch)


def _smp_value(name: str | None, target: Any, patch: Any) -> Any:
    if isinstance(patch, dict):
        if patch.get("$patch") == "replace":
            return {k: _copy(v) for k, v in patch.items() if k != "$patch"}
        if patch.get("$patch") == "delete":
            return None
        return _smp_dict(target if isinstance(target, dict) else {}, patch)
    if isinstance(patch, list):
        if name in MERGE_KEYS and isinstance(target, list):
            return _smp_keyed_list(MERGE_KEYS[name], target, patch)
        if name in PRIMITIVE_MERGE_LISTS and isinstance(target, list):
            return target + [v for v in patch if v not in target]
        return [_copy(v) for v in patch if not (isinstance(v, dict) and "$patch" in v)]
    return _copy(patch)


def _smp_dict(target: dict, patch: dict) -> dict:
    result = dict(target)
    deletions: dict[str, list] = {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key == "$retainKeys":
            continue  # ordering hints only
        if key.startswith("$deleteFromPrimitiveList/"):
            deletions[key.split("/", 1)[1]] = value or []
            continue
        if value is None:
            result.pop(key, None)
            continue
        merged = _smp_value(key, result.get(key), value)
        if merged is None and isinstance(value, dict) and value.get("$patch") == "delete":
            result.pop(key, None)
        else:
            result[key] = merged
    for key, values in deletions.items():
        if isinstance(result.get(key), list):
            result[key] = [v for v in result[key] if v not in values]
    return result


def _smp_keyed_list(key: str, target: list, patch: list) -> list:
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [_copy(p) for p in patch if not (isinstance(p, dict) and "$patch" in p)]
    result = list(target)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise PatchError(f"map: {item} does not contain declared merge key: {key}")
        index = next(
            (i for i, t in enumerate(result) if isinstance(t, dict) and t.get(key) == item[key]), None
        )
        if item.get("$patch") == "delete":
            if index is not None:
                result.pop(index)
            continue
        if index is None:
            result.append(_smp_dict({}, item))
        else:
            result[index] = _smp_dict(result[index], item)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"json patch: invalid path {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _resolve(doc: Any, parts: list[str], path: str) -> Any:
    cur = doc
    for part in parts:
        if isinstance(cur, dict):
            if part not in cur:
                raise PatchError(f"json patch: path {path!r} does not exist")
            cur = cur[part]
        elif isinstance(cur, list):
            try:
                cur = cur[int(part)]
            except (ValueError, IndexError) as exc:
                raise PatchError(f"json patch: path {path!r} does not exist") from exc
        else:
            raise PatchError(f"json patch: path {path!r} does not exist")
    return cur


def _add(doc: Any, path: str, value: Any) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent = _resolve(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        else:
            try:
                index = int(last)
            except ValueError as exc:
                raise PatchError(f"json patch: invalid index in {path!r}") from exc
            if index < 0 or index > len(parent):
                raise PatchError(f"json patch: index out of range in {path!r}")
            parent.insert(index, value)
    else:
        raise PatchError(f"json patch: path {path!r} does not exist")
    return doc


def _remove(doc: Any, path: str) -> tuple[Any, Any]:
    parts = _pointer(path)
    if not parts:
        raise PatchError("json patch: cannot remove the whole document")
    parent = _resolve(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"json patch: path {path!r} does not exist")
        return doc, parent.pop(last)
    if isinstance(parent, list):
        try:
            return doc, parent.pop(int(last))
        except (ValueError, IndexError) as exc:
            raise PatchError(f"json patch: path {path!r} does not exist") from exc
    raise PatchError(f"json patch: path {path!r} does not exist")


def json_patch(target: Any, operations: list) -> Any:
    """Apply an RFC 6902 JSON patch, returning a new value."""
    if not isinstance(operations, list):
        raise ApiError(400, "BadRequest", "json patch: the patch must be a list of operations")
    doc = _copy(target)  # edited in place, along any path: a private copy
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"json patch: invalid operation {op!r}")
        kind, path = op["op"], op["path"]
        if kind == "add":
            doc = _add(doc, path, _copy(op.get("value")))
        elif kind == "remove":
            doc, _ = _remove(doc, path)
        elif kind == "replace":
            _resolve(doc, _pointer(path), path)
            if _pointer(path):
                doc, _ = _remove(doc, path)
                doc = _add(doc, path, _copy(op.get("value")))
            else:
                doc = _copy(op.get("value"))
        elif kind in ("move", "copy"):
            source = op.get("from", "")
            value = _copy(_resolve(doc, _pointer(source), source))
            if kind == "move":
                doc, _ = _remove(doc, source)
            doc = _add(doc, path, value)
        elif kind == "test":
            if _resolve(doc, _pointer(path), path) != op.get("value"):
                raise PatchError(f"json patch: test operation failed for path {path!r}")
        else:
            raise PatchError(f"json patch: unknown operation {kind!r}")
    return doc


def apply_patch(target: dict, patch: Any, patch_type: str) -> dict:
    """Apply a patch of type "merge", "strategic" or "json" to an object."""
    if patch_type == "json":
        return json_patch(target, patch)
    if not isinstance(patch, dict):
        raise ApiError(400, "BadRequest", f"{patch_type} patch: the patch must be a JSON object")
    if patch_type == "merge":
        return merge_patch(target, patch)
    if patch_type == "strategic":
        return strategic_merge_patch(target, patch)
    raise ApiError(415, "UnsupportedMediaType", f"unknown patch type {patch_type!r}")
