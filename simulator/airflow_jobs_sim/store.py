"""The object store of the simulated API server: CRUD with the real server's defaults, validation,
resourceVersion semantics, graceful deletion, finalizers and propagation policies, plus the bounded
event history that watches resume from.

Thread-safe (one RLock). Stored objects are immutable snapshots (:class:`FrozenDict` and
:class:`FrozenList`, subclasses of dict and list whose mutating methods raise :class:`FrozenError`):
every read (GET, LIST, watch events, the controllers' notifications) hands out the stored object itself,
shared and never copied, and a write builds a new object, copying only what it changes and sharing the
rest with the version before, then swaps it in under a new resourceVersion. As in a real API server, no
reader's change can reach the stored state: it is refused. Code that wants to change what it read asks
for a private copy (``copy.deepcopy``, :func:`thaw`, ``copy=True`` on the reads).

Defaulting is pure functions at the bottom of this module; validation is in validation.py.
"""

from __future__ import annotations

import base64
import binascii
import builtins
import logging
import random
import threading
import uuid
from collections import deque
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_jobs_sim import errors
from airflow_jobs_sim.config import RESOURCES, ResourceType
from airflow_jobs_sim.errors import ApiError
from airflow_jobs_sim.patch import apply_patch
from airflow_jobs_sim.selectors import Selector, make_selector
from airflow_jobs_sim.validation import validate, validate_update

log = logging.getLogger(__name__)

Subscriber = Callable[[str, str, dict], None]
# Internal watchers also get the resourceVersion and the previous version of the object (None on ADDED),
# which selector-filtered watches need to turn "stopped matching" into DELETED like the real server.
Watcher = Callable[[int, str, str, dict, "dict | None"], None]

FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"
# Real batch/v1 Jobs keep their pods by default when deleted (a compatibility default of the Job REST
# strategy); everything else served here cascades in the background.
DEFAULT_PROPAGATION = {"jobs": "Orphan"}


class FrozenError(TypeError):
    """An attempt to change a stored object (or a part of one) in place."""


def _refuse(self: Any, *args: Any, **kwargs: Any) -> Any:
    raise FrozenError(
        "objects read from the store are immutable snapshots shared by every reader: "
        "change a copy (copy.deepcopy, store.thaw, or copy=True on the read) and write it back"
    )


class FrozenDict(dict):
    """A dict that refuses every change: a stored object or a part of one.

    A real dict for every reader (``isinstance``, ``json.dumps``, ``==``, iteration), so reading costs
    nothing extra. ``copy.copy`` gives a plain dict sharing the (frozen) values, ``copy.deepcopy`` a
    plain, fully mutable copy. ``encoded`` caches the object's JSON encoding: it can never go stale.
    """

    __slots__ = ("encoded",)
    encoded: bytes  # set on first use (sim/server.py ``_encoded``), absent until then
    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __copy__(self) -> dict:
        return dict(self)

    def __deepcopy__(self, memo: dict) -> dict:
        return thaw(self)

    def __reduce__(self) -> Any:
        return (dict, (thaw(self),))


class FrozenList(list):
    """A list that refuses every change; see :class:`FrozenDict`."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse

    def __copy__(self) -> list:
        return list(self)

    def __deepcopy__(self, memo: dict) -> list:
        return thaw(self)

    def __reduce__(self) -> Any:
        return (list, (thaw(self),))


def freeze(value: Any) -> Any:
    """An immutable version of JSON data: plain dicts and lists are copied into frozen ones, parts that
    are frozen already are shared as they are (a new version of an object shares what did not change)."""
    kind = type(value)
    if kind is FrozenDict or kind is FrozenList:
        return value
    if isinstance(value, dict):
        return FrozenDict({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return FrozenList([freeze(v) for v in value])
    return value


def thaw(value: Any) -> Any:
    """A plain, fully mutable deep copy of JSON data, frozen or not (faster than copy.deepcopy)."""
    if isinstance(value, dict):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, list):
        return [thaw(v) for v in value]
    return value


clone = thaw


def format_time(t: datetime) -> str:
    """RFC 3339 in UTC with second precision, as metav1.Time serializes."""
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> datetime | None:
    """Parse an RFC 3339 timestamp (None for empty input)."""
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class Store:
    """Thread-safe object store; see the module docstring."""

    def __init__(self, watch_history: int = 1000, now: Callable[[], datetime] | None = None):
        self._lock = threading.RLock()
        self._objects: dict[str, dict[tuple[str, str], dict]] = {r: {} for r in RESOURCES}
        self._rv = 0
        self._history_limit = max(1, watch_history)
        self._history: dict[str, deque] = {r: deque() for r in RESOURCES}
        # Per resource: the newest resourceVersion whose event fell out of the history.
        self._compacted: dict[str, int] = dict.fromkeys(RESOURCES, 0)
        self._subscribers: list[Subscriber] = []
        # Indexes for the garbage collector: uid -> (resource, key), owner uid -> dependents' (resource, key).
        self._by_uid: dict[str, tuple[str, tuple[str, str]]] = {}
        self._dependents: dict[str, set[tuple[str, tuple[str, str]]]] = {}
        # Per resource, (label key, value) -> keys of the objects carrying it: a list with an equality
        # selector (a job's pods, one task's jobs) reads its matches instead of scanning every object.
        self._by_label: dict[str, dict[tuple[str, str], set[tuple[str, str]]]] = {r: {} for r in RESOURCES}
        self._watchers: list[Watcher] = []
        self.now: Callable[[], datetime] = now or (lambda: datetime.now(timezone.utc))
        # Admission webhooks of installed add-ons (Kueue's job webhook): each has
        # ``admit_create(resource, obj)``, which may mutate, and ``admit_update(resource, new, old)``,
        # which may refuse with an ApiError. They run where the API server calls webhooks: after
        # defaulting, before the object is stored.
        self.webhooks: list[Any] = []
        # Validating admission (ValidatingAdmissionPolicy): ``admit(operation, resource, new, old)`` after
        # the object validated, as the API server runs validating admission last.
        self.validators: list[Any] = []

    # ------------------------------------------------------------------ helpers
    @property
    def lock(self) -> threading.RLock:
        """The store lock, for callers that need several operations to be atomic."""
        return self._lock

    def current_rv(self) -> int:
        """The latest resourceVersion handed out."""
        with self._lock:
            return self._rv

    def _rtype(self, resource: str) -> ResourceType:
        try:
            return RESOURCES[resource]
        except KeyError:
            raise ApiError(404, "NotFound", "the server could not find the requested resource") from None

    def _key(self, rtype: ResourceType, name: str, namespace: str | None) -> tuple[str, str]:
        return ((namespace or "default") if rtype.namespaced else "", name)

    def _put(self, resource: str, key: tuple[str, str], obj: dict) -> None:
        """Store a new version of an object, keeping the uid and owner indexes current."""
        old = self._objects[resource].get(key)
        self._objects[resource][key] = obj
        self._index_labels(resource, key, old, obj)
        self._by_uid[obj["metadata"]["uid"]] = (resource, key)
        old_owners = {r.get("uid") for r in ((old or {}).get("metadata") or {}).get("ownerReferences") or []}
        new_owners = {r.get("uid") for r in obj["metadata"].get("ownerReferences") or []}
        for uid in old_owners - new_owners:
            self._unlink(uid, resource, key)
        for uid in new_owners - old_owners:
            self._dependents.setdefault(uid, set()).add((resource, key))

    def _unlink(self, owner_uid: str | None, resource: str, key: tuple[str, str]) -> None:
        deps = self._dependents.get(owner_uid or "")
        if deps is not None:
            deps.discard((resource, key))
            if not deps:
                del self._dependents[owner_uid or ""]

    def _pop(self, resource: str, key: tuple[str, str]) -> dict:
        obj = self._objects[resource].pop(key)
        self._index_labels(resource, key, obj, None)
        self._by_uid.pop(obj["metadata"]["uid"], None)
        for ref in obj["metadata"].get("ownerReferences") or []:
            self._unlink(ref.get("uid"), resource, key)
        return obj

    def _index_labels(self, resource: str, key: tuple[str, str], old: dict | None, new: dict | None) -> None:
        before, after = _label_pairs(old), _label_pairs(new)
        index = self._by_label[resource]
        for pair in before - after:
            keys = index.get(pair)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del index[pair]
        for pair in after - before:
            index.setdefault(pair, set()).add(key)

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _emit(self, event_type: str, resource: str, obj: dict, prev: dict | None) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        history = self._history[resource]
        history.append((rv, event_type, obj, prev))
        while len(history) > self._history_limit:
            dropped = history.popleft()
            self._compacted[resource] = dropped[0]
        for watcher in list(self._watchers):
            try:
                watcher(rv, event_type, resource, obj, prev)
            except Exception:  # a broken watcher must not break writes
                log.exception("store watcher failed")
        for fn in list(self._subscribers):
            try:
                fn(event_type, resource, obj)
            except Exception:
                log.exception("store subscriber failed")

    def subscribe(self, fn: Subscriber) -> Callable[[], None]:
        """Call ``fn(event_type, resource, obj)`` after every change (under the store lock); ``obj`` is the
        stored snapshot, shared by every subscriber."""
        with self._lock:
            self._subscribers.append(fn)

        def unsubscribe() -> None:
            with self._lock:
                if fn in self._subscribers:
                    self._subscribers.remove(fn)

        return unsubscribe

    def watch(
        self, resource: str, since: int | None, fn: Watcher
    ) -> tuple[list[tuple], int, Callable[[], None]]:
        """Atomically take the starting events of a watch and register ``fn`` for later ones.

        With ``since`` None the starting events are a synthetic ADDED per current object; otherwise the
        history after ``since``. Returns ``(rv, type, obj, prev)`` tuples, the current resourceVersion and
        an unregister function. Raises ApiError 410 when ``since`` is older than the kept history.
        """
        with self._lock:
            if since is None:
                replay = [
                    (int(o["metadata"]["resourceVersion"]), "ADDED", o, None)
                    for _, o in sorted(self._objects[resource].items())
                ]
            else:
                if since < self._compacted[resource]:
                    raise errors.gone(str(since), self._compacted[resource] + 1)
                replay = [e for e in self._history[resource] if e[0] > since]
            self._watchers.append(fn)
            current = self._rv

        def unregister() -> None:
            with self._lock:
                if fn in self._watchers:
                    self._watchers.remove(fn)

        return replay, current, unregister

    def snapshot(self, resource: str) -> tuple[builtins.list[dict], int]:
        """All objects of a resource (the stored snapshots) and the current resourceVersion."""
        with self._lock:
            return [o for _, o in sorted(self._objects[resource].items())], self._rv

    # ------------------------------------------------------------------ reads
    def get(self, resource: str, name: str, namespace: str | None = None, copy: bool = False) -> dict:
        """One object (404 ApiError if absent): the stored, immutable snapshot, or with ``copy`` a private
        mutable copy."""
        rtype = self._rtype(resource)
        with self._lock:
            obj = self._objects[resource].get(self._key(rtype, name, namespace))
            if obj is None:
                raise errors.not_found(rtype.group_resource, name)
            return thaw(obj) if copy else obj

    def list(
        self,
        resource: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        copy: bool = False,
    ) -> builtins.list[dict]:
        """Objects of a resource, optionally in one namespace and filtered by selectors (the stored
        snapshots, or with ``copy`` private mutable copies)."""
        return self.list_with_rv(resource, namespace, label_selector, field_selector, copy)[0]

    def list_with_rv(
        self,
        resource: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        copy: bool = False,
    ) -> tuple[builtins.list[dict], str]:
        """Like :meth:`list`, also returning the list's resourceVersion."""
        rtype = self._rtype(resource)
        selector = make_selector(label_selector, field_selector, rtype)
        with self._lock:
            return self._select(resource, rtype, namespace, selector, copy), str(self._rv)

    def _select(
        self,
        resource: str,
        rtype: ResourceType,
        namespace: str | None,
        selector: Selector,
        copy: bool = False,
    ) -> builtins.list[dict]:
        out = []
        objects = self._objects[resource]
        narrowing = next((r for r in selector.labels if r.op in ("=", "in")), None)
        if narrowing is not None:
            index = self._by_label[resource]
            keys = set().union(*(index.get((narrowing.key, v), ()) for v in narrowing.values))
            items = sorted((k, objects[k]) for k in keys)
        else:
            items = sorted(objects.items())
        for (ns, _), obj in items:
            if namespace and rtype.namespaced and ns != namespace:
                continue
            if selector.empty or selector.matches(obj):
                out.append(thaw(obj) if copy else obj)
        return out

    # ------------------------------------------------------------------ create
    def create(self, resource: str, obj: dict, namespace: str | None = None) -> dict:
        """Create an object with the server's defaults; 409 AlreadyExists, 422 Invalid, 404/403 namespace."""
        rtype = self._rtype(resource)
        # A private copy: the server's defaults and the webhooks change it, the caller's stays as it was.
        obj = thaw(obj)
        if not isinstance(obj, dict):
            raise errors.bad_request("the body must be a JSON object")
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            meta = obj["metadata"] = {}
        if rtype.namespaced:
            body_ns = meta.get("namespace")
            if namespace and body_ns and body_ns != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = namespace or body_ns or "default"
        else:
            meta.pop("namespace", None)
        obj["apiVersion"] = rtype.api_version
        obj["kind"] = rtype.kind
        with self._lock:
            if rtype.namespaced:
                self._check_namespace(rtype, meta)
            asked_name = meta.get("name") or meta.get("generateName") or "Unknown"
            if not meta.get("name") and meta.get("generateName"):
                for _ in range(8):
                    candidate = meta["generateName"] + _random_suffix()
                    if self._key(rtype, candidate, meta.get("namespace")) not in self._objects[resource]:
                        meta["name"] = candidate
                        break
            for k in (
                "resourceVersion",
                "uid",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "selfLink",
            ):
                meta.pop(k, None)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = format_time(self.now())
            obj = prepare_for_create(rtype, obj)
            if resource == "pods":
                self._admit_priority(obj, asked_name)
            for webhook in self.webhooks:
                webhook.admit_create(resource, obj)
            if resource == "services":
                self._allocate_cluster_ip(obj["spec"])
            causes = validate(rtype, obj)
            if causes:
                raise errors.invalid(
                    rtype.kind, meta.get("name") or meta.get("generateName") or "", causes, rtype.group
                )
            for validator in self.validators:
                validator.admit("CREATE", resource, obj, None)
            key = self._key(rtype, meta["name"], meta.get("namespace"))
            if key in self._objects[resource]:
                raise errors.already_exists(rtype.group_resource, meta["name"])
            if resource in ("jobs", "mpijobs"):
                meta["generation"] = 1
            meta["resourceVersion"] = self._next_rv()
            obj = freeze(obj)
            self._put(resource, key, obj)
            self._emit("ADDED", resource, obj, None)
            return obj

    def _admit_priority(self, pod: dict, asked_name: str) -> None:
        """The Priority admission plugin (kubernetes plugin/pkg/admission/priority/admission.go, v1.36,
        ``admitPod``): a pod naming a PriorityClass that does not exist is refused, 403 in apimachinery's
        ``admission.NewForbidden`` words, which name a pod by its generateName while it has no name yet
        (staging/src/k8s.io/apiserver/pkg/admission/errors.go, ``extractResourceName``); one that exists
        gives the pod its value as ``spec.priority``."""
        spec = pod.get("spec")
        if not isinstance(spec, dict) or not spec.get("priorityClassName"):
            return
        wanted = spec["priorityClassName"]
        found = self._objects["priorityclasses"].get(("", wanted))
        if found is None:
            raise errors.forbidden_error(
                "pods",
                asked_name,
                f"no PriorityClass with name {wanted} was found",
            )
        spec["priority"] = found.get("value", 0)

    def _allocate_cluster_ip(self, spec: dict) -> None:
        """A free address of the service range 10.96.0.0/12 (kubeadm's default), like the IP allocator;
        ``None`` (headless), ExternalName services and a requested free address are left as they are."""
        if spec.get("type") == "ExternalName" or spec.get("clusterIP") == "None":
            if spec.get("clusterIP") == "None":
                spec["clusterIPs"] = ["None"]
            return
        taken = {(o.get("spec") or {}).get("clusterIP") for o in self._objects["services"].values()}
        wanted = spec.get("clusterIP")
        if wanted:
            if wanted in taken:
                raise errors.invalid(
                    "Service",
                    "",
                    [
                        errors.invalid_value(
                            "spec.clusterIPs",
                            [wanted],
                            f"failed to allocate IP {wanted}: provided IP is already allocated",
                        )
                    ],
                )
        else:
            n = len(taken) + 1
            while True:
                wanted = f"10.{96 + (n >> 16) % 16}.{(n >> 8) & 255}.{n & 255}"
                if wanted not in taken and n & 255 not in (0, 255):
                    break
                n += 1
        spec["clusterIP"] = wanted
        spec["clusterIPs"] = [wanted]
        if spec.get("type") in ("NodePort", "LoadBalancer"):
            # The node-port allocator's range is 30000-32767 (--service-node-port-range default).
            used = {
                p.get("nodePort")
                for o in self._objects["services"].values()
                for p in (o.get("spec") or {}).get("ports") or []
                if isinstance(p, dict)
            }
            free = (n for n in range(30000, 32768) if n not in used)
            for port in spec.get("ports") or []:
                if isinstance(port, dict) and not port.get("nodePort"):
                    port["nodePort"] = next(free)

    def _check_namespace(self, rtype: ResourceType, meta: dict) -> None:
        ns = self._objects["namespaces"].get(("", meta["namespace"]))
        if ns is None:
            raise errors.not_found("namespaces", meta["namespace"])
        if ns["metadata"].get("deletionTimestamp"):
            raise errors.forbidden_error(
                rtype.group_resource,
                meta.get("name") or meta.get("generateName") or "",
                f"unable to create new content in namespace {meta['namespace']} because it is being terminated",
            )

    # ------------------------------------------------------------------ update / patch
    def update(
        self, resource: str, obj: dict, subresource: str | None = None, namespace: str | None = None
    ) -> dict:
        """PUT: replace an object (409 on a stale resourceVersion; unconditional without one)."""
        rtype = self._rtype(resource)
        if not isinstance(obj, dict):
            raise errors.bad_request("the body must be a JSON object")
        obj = dict(obj)  # _update copies what it keeps; this keeps the caller's top level as it was
        meta = obj.get("metadata") or {}
        name = meta.get("name")
        if not name:
            raise errors.invalid(
                rtype.kind,
                "",
                [errors.required("metadata.name", "name or generateName is required")],
                rtype.group,
            )
        ns = (namespace or meta.get("namespace") or "default") if rtype.namespaced else None
        if rtype.namespaced and namespace and meta.get("namespace") and meta["namespace"] != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        with self._lock:
            if (
                rtype.create_on_update
                and subresource is None
                and self._key(rtype, name, ns) not in self._objects[resource]
            ):
                return self.create(resource, obj, ns)
            return self._update(rtype, ns, obj, subresource)

    def _update(self, rtype: ResourceType, ns: str | None, obj: dict, subresource: str | None) -> dict:
        """Store a new version built from ``obj`` (the caller's body or a patch's result, whose top level
        this may change): values identical to the stored version's are shared, everything else is copied
        before the defaults, the webhooks and the freeze touch it."""
        resource = rtype.plural
        meta = obj.setdefault("metadata", {})
        name = meta["name"]
        key = self._key(rtype, name, ns)
        old = self._objects[resource].get(key)
        if old is None:
            raise errors.not_found(rtype.group_resource, name)
        old_meta = old["metadata"]
        want_rv = meta.get("resourceVersion")
        if not want_rv and not rtype.unconditional_update:
            # store.go Update: the GroupKind of this error is the group and the *resource*, not the kind.
            cause = errors.invalid_value("metadata.resourceVersion", 0, "must be specified for an update")
            raise errors.invalid(rtype.plural, name, [cause], rtype.group)
        if want_rv and want_rv != old_meta["resourceVersion"]:
            raise errors.conflict(rtype.group_resource, name)
        if meta.get("uid") and meta["uid"] != old_meta["uid"]:
            raise errors.conflict(
                rtype.group_resource,
                name,
                f"Precondition failed: UID in precondition: {meta['uid']}, UID in object meta: {old_meta['uid']}",
            )
        if subresource == "status":
            new = dict(old)
            new["metadata"] = dict(old_meta)
            new["status"] = obj.get("status") or {}
        elif subresource:
            raise errors.method_not_allowed()
        else:
            new = _unshare(obj, old)
            new["apiVersion"] = rtype.api_version
            new["kind"] = rtype.kind
            if rtype.has_status:
                if "status" in old:
                    new["status"] = old["status"]
                else:
                    new.pop("status", None)
            new_meta = new["metadata"]
            for k in (
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ):
                if k in old_meta:
                    new_meta[k] = old_meta[k]
                else:
                    new_meta.pop(k, None)
            if rtype.namespaced:
                new_meta["namespace"] = old_meta["namespace"]
            else:
                new_meta.pop("namespace", None)
            new = prepare_for_update(rtype, new, old)
            causes = validate(rtype, new) + validate_update(rtype, new, old)
            if causes:
                raise errors.invalid(rtype.kind, name, causes, rtype.group)
            for webhook in self.webhooks:
                webhook.admit_update(resource, new, old)
            for validator in self.validators:
                validator.admit("UPDATE", resource, new, old, subresource or "")
            if "generation" in old_meta and _spec_of(new) != _spec_of(old):
                new_meta["generation"] = old_meta["generation"] + 1
        new["metadata"]["resourceVersion"] = old_meta["resourceVersion"]
        if new == old:  # cheap: the parts shared with the stored version compare by identity
            return old  # a no-op write is not stored and emits nothing, like the real server
        new["metadata"]["resourceVersion"] = self._next_rv()
        new = freeze(new)
        self._put(resource, key, new)
        self._emit("MODIFIED", resource, new, old)
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            if not (resource == "pods" and new["metadata"].get("deletionGracePeriodSeconds", 0) > 0):
                if resource != "namespaces":
                    return self._remove(rtype, key)
        return new

    def patch(
        self,
        resource: str,
        name: str,
        patch: dict | builtins.list,
        patch_type: str,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> dict:
        """PATCH with "merge", "strategic" or "json"; a resourceVersion in the patch is a precondition."""
        rtype = self._rtype(resource)
        with self._lock:
            key = self._key(rtype, name, namespace)
            old = self._objects[resource].get(key)
            if old is None:
                raise errors.not_found(rtype.group_resource, name)
            # The patch functions build a new value and share the parts they leave alone with ``old``.
            patched = apply_patch(old, patch, patch_type)
            if not isinstance(patched, dict):
                raise errors.bad_request("the patch must produce a JSON object")
            patched = dict(patched)
            meta = patched.get("metadata")
            meta = patched["metadata"] = dict(meta) if isinstance(meta, dict) else {}
            if meta.get("name", name) != name:
                raise errors.invalid(
                    rtype.kind,
                    name,
                    [errors.invalid_value("metadata.name", meta.get("name"), "field is immutable")],
                    rtype.group,
                )
            meta["name"] = name
            if rtype.namespaced:
                meta["namespace"] = old["metadata"]["namespace"]
            return self._update(rtype, key[0] or None, patched, subresource)

    # ------------------------------------------------------------------ delete
    def delete(
        self,
        resource: str,
        name: str,
        namespace: str | None = None,
        grace_period_seconds: int | None = None,
        propagation_policy: str | None = None,
        preconditions: dict | None = None,
    ) -> dict:
        """DELETE with the real server's grace period, finalizer and propagation semantics.

        Returns the object as it stands after the call (marked for deletion, or as it was when removed).
        """
        return self.delete_ex(
            resource, name, namespace, grace_period_seconds, propagation_policy, preconditions
        )[0]

    def delete_ex(
        self,
        resource: str,
        name: str,
        namespace: str | None = None,
        grace_period_seconds: int | None = None,
        propagation_policy: str | None = None,
        preconditions: dict | None = None,
    ) -> tuple[dict, bool]:
        """Like :meth:`delete`, also telling whether the object is gone (True) or only marked (False)."""
        rtype = self._rtype(resource)
        policy = propagation_policy or DEFAULT_PROPAGATION.get(resource, "Background")
        if policy not in ("Orphan", "Background", "Foreground"):
            raise errors.invalid(
                "DeleteOptions",
                "",
                [
                    errors.not_supported(
                        "propagationPolicy", policy, ["Foreground", "Background", "Orphan", "nil"]
                    )
                ],
                "meta.k8s.io",
            )
        if grace_period_seconds is not None and grace_period_seconds < 0:
            grace_period_seconds = 0
        with self._lock:
            key = self._key(rtype, name, namespace)
            obj = self._objects[resource].get(key)
            if obj is None:
                raise errors.not_found(rtype.group_resource, name)
            meta = obj["metadata"]
            pre = preconditions or {}
            # A delete's preconditions are checked by rest.BeforeDelete, which names the object by its
            # kind, not its resource (k8s.io/apiserver pkg/registry/rest/delete.go, v1.36.3):
            # `Operation cannot be fulfilled on ConfigMap "x": the UID in the precondition ...`.
            by_kind = f"{rtype.kind}.{rtype.group}" if rtype.group else rtype.kind
            if pre.get("uid") and pre["uid"] != meta["uid"]:
                raise errors.conflict(
                    by_kind,
                    name,
                    f"the UID in the precondition ({pre['uid']}) does not match the UID in record "
                    f"({meta['uid']}). The object might have been deleted and then recreated",
                )
            if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
                raise errors.conflict(
                    by_kind,
                    name,
                    f"the ResourceVersion in the precondition ({pre['resourceVersion']}) does not match the "
                    f"ResourceVersion in record ({meta['resourceVersion']}). The object might have been modified",
                )
            # Validating admission sees a delete after its preconditions, with the object as stored
            # (k8s.io/apiserver pkg/registry/generic/registry/store.go, ``Delete``: ``deleteValidation``).
            for validator in self.validators:
                validator.admit("DELETE", resource, None, obj)
            if resource == "namespaces":
                return self._delete_namespace(rtype, key, obj), False
            if policy == "Orphan":
                self._orphan_dependents(meta["uid"])
            now = self.now()
            finalizers = list(meta.get("finalizers") or [])
            if policy == "Foreground" and self._has_dependents(meta["uid"]) and FOREGROUND not in finalizers:
                finalizers.append(FOREGROUND)
            grace = 0
            if resource == "pods":
                grace = self._pod_grace(obj, grace_period_seconds)
            # Only a pod has a graceful-deletion strategy: every delete of one, even with grace 0, first
            # writes its deletionTimestamp and deletionGracePeriodSeconds (a MODIFIED event), then removes
            # it when the grace is 0 and no finalizer holds it (k8s.io/apiserver
            # pkg/registry/generic/registry/store.go ``updateForGracefulDeletionAndFinalizers``,
            # pkg/registry/rest/delete.go ``BeforeDelete``, v1.36.3). So a kubelet's final delete of a
            # pod it stopped shows the grace going to 0 before the pod goes.
            if not finalizers and grace == 0 and resource != "pods":
                return self._remove(rtype, key), True
            new = dict(obj)
            nmeta = new["metadata"] = dict(meta)
            if finalizers:
                nmeta["finalizers"] = finalizers
            if not nmeta.get("deletionTimestamp"):
                nmeta["deletionTimestamp"] = format_time(now + timedelta(seconds=grace))
                nmeta["deletionGracePeriodSeconds"] = grace
            elif grace < nmeta.get("deletionGracePeriodSeconds", 0):
                # A shorter grace period replaces a longer one, counted from when the deletion was asked
                # (BeforeDelete: the old timestamp less the old period plus the new); a longer one never
                # extends it.
                asked = (parse_time(nmeta["deletionTimestamp"]) or now) - timedelta(
                    seconds=nmeta.get("deletionGracePeriodSeconds", 0)
                )
                nmeta["deletionTimestamp"] = format_time(asked + timedelta(seconds=grace))
                nmeta["deletionGracePeriodSeconds"] = grace
            if new == obj:
                return obj, False
            nmeta["resourceVersion"] = self._next_rv()
            new = freeze(new)
            self._put(resource, key, new)
            self._emit("MODIFIED", resource, new, obj)
            if not finalizers and grace == 0:
                return self._remove(rtype, key), True
            return new, False

    def _pod_grace(self, pod: dict, requested: int | None) -> int:
        spec = pod.get("spec") or {}
        phase = (pod.get("status") or {}).get("phase")
        if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
            return 0  # nothing runs it: no kubelet has to stop anything
        if requested is None:
            requested = spec.get("terminationGracePeriodSeconds", 30)
        if requested == 0:
            return 0
        return max(1, int(requested))

    def _delete_namespace(self, rtype: ResourceType, key: tuple[str, str], obj: dict) -> dict:
        name = key[1]
        if name in ("default", "kube-system", "kube-public"):
            raise errors.forbidden_error("namespaces", name, "this namespace may not be deleted")
        if obj["metadata"].get("deletionTimestamp"):
            return obj
        new = dict(obj)
        new["metadata"] = {
            **obj["metadata"],
            "deletionTimestamp": format_time(self.now()),
            "deletionGracePeriodSeconds": 0,
            "resourceVersion": self._next_rv(),
        }
        new["status"] = {**(obj.get("status") or {}), "phase": "Terminating"}
        new = freeze(new)
        self._put("namespaces", key, new)
        self._emit("MODIFIED", "namespaces", new, obj)
        return new

    def finalize_namespace(self, name: str) -> bool:
        """Remove a terminating namespace once it is empty (the namespace controller's last step)."""
        rtype = RESOURCES["namespaces"]
        with self._lock:
            obj = self._objects["namespaces"].get(("", name))
            if obj is None or not obj["metadata"].get("deletionTimestamp"):
                return False
            for resource, objs in self._objects.items():
                if RESOURCES[resource].namespaced and any(ns == name for ns, _ in objs):
                    return False
            self._remove(rtype, ("", name))
            return True

    def _remove(self, rtype: ResourceType, key: tuple[str, str]) -> dict:
        obj = self._pop(rtype.plural, key)
        gone = freeze({**obj, "metadata": {**obj["metadata"], "resourceVersion": self._next_rv()}})
        self._emit("DELETED", rtype.plural, gone, obj)
        return gone

    def _has_dependents(self, uid: str) -> bool:
        return bool(self._dependents.get(uid))

    def dependents(self, uid: str) -> builtins.list[tuple[str, dict]]:
        """(resource, object) pairs whose ownerReferences name ``uid``."""
        with self._lock:
            return [(r, self._objects[r][k]) for r, k in sorted(self._dependents.get(uid, ()))]

    def owned(self, resource: str, owner_uid: str) -> builtins.list[dict]:
        """The ``resource`` objects whose ownerReferences name ``owner_uid``, in key order.

        Controllers read their children through the owner index: a label-selector list scans every
        object of the resource, which made each Job change cost O(all pods)."""
        with self._lock:
            keys = sorted(k for r, k in self._dependents.get(owner_uid, ()) if r == resource)
            return [self._objects[resource][k] for k in keys]

    def exists_uid(self, uid: str) -> bool:
        """Whether any stored object has this uid."""
        with self._lock:
            return uid in self._by_uid

    def find_uid(self, uid: str) -> tuple[str, dict] | None:
        """(resource, object) of the object with this uid, if it exists."""
        with self._lock:
            where = self._by_uid.get(uid)
            if where is None:
                return None
            return where[0], self._objects[where[0]][where[1]]

    def _orphan_dependents(self, uid: str) -> None:
        for resource, key in sorted(self._dependents.get(uid, ())):
            old = self._objects[resource][key]
            new = dict(old)
            new_meta = new["metadata"] = dict(old["metadata"])
            kept = [ref for ref in old["metadata"].get("ownerReferences") or [] if ref.get("uid") != uid]
            if kept:
                new_meta["ownerReferences"] = kept
            else:
                new_meta.pop("ownerReferences", None)
            new_meta["resourceVersion"] = self._next_rv()
            new = freeze(new)
            self._put(resource, key, new)
            self._emit("MODIFIED", resource, new, old)

    def delete_collection(
        self,
        resource: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        grace_period_seconds: int | None = None,
        propagation_policy: str | None = None,
    ) -> builtins.list[dict]:
        """Delete every matching object; returns them as the delete calls left them."""
        out = []
        with self._lock:
            for obj in self.list(resource, namespace, label_selector, field_selector):
                try:
                    out.append(
                        self.delete(
                            resource,
                            obj["metadata"]["name"],
                            obj["metadata"].get("namespace"),
                            grace_period_seconds,
                            propagation_policy,
                        )
                    )
                except ApiError as exc:
                    if exc.code != 404:
                        raise
        return out


# ====================================================================== defaults and validation (pure)

_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def _label_pairs(obj: dict | None) -> set[tuple[str, str]]:
    labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
    return {(k, v) for k, v in labels.items() if isinstance(v, str)} if isinstance(labels, dict) else set()


def _unshare(obj: dict, old: dict) -> dict:
    """The top level of an update's new version: values identical to the stored version's stay shared,
    the metadata is a new dict (the store sets its server-owned fields), any other value is a private
    copy that the defaults and webhooks may change."""
    out: dict[str, Any] = {}
    for key, value in obj.items():
        if key == "metadata" and isinstance(value, dict):
            out[key] = dict(value)
        elif value is old.get(key):
            out[key] = value
        else:
            out[key] = thaw(value)
    return out


def _random_suffix(n: int = 5) -> str:
    return "".join(random.choice(_SUFFIX_ALPHABET) for _ in range(n))


def _spec_of(obj: dict) -> dict:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def default_pull_policy(image: str) -> str:
    """IfNotPresent for a pinned tag or digest, Always for ``:latest`` or no tag."""
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else "latest"
    return "Always" if tag == "latest" else "IfNotPresent"


def _default_container(c: dict) -> None:
    if not isinstance(c, dict):
        return
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    if isinstance(c.get("image"), str) and c["image"]:
        c.setdefault("imagePullPolicy", default_pull_policy(c["image"]))
    resources = c.setdefault("resources", {})
    if isinstance(resources, dict) and resources.get("limits"):
        requests = resources.setdefault("requests", {})
        for k, v in resources["limits"].items():
            requests.setdefault(k, v)
    for p in c.get("ports") or []:
        if isinstance(p, dict):
            p.setdefault("protocol", "TCP")
    for e in c.get("env") or []:
        ref = (e.get("valueFrom") or {}).get("fieldRef") if isinstance(e, dict) else None
        if isinstance(ref, dict):
            ref.setdefault("apiVersion", "v1")


def default_pod_spec(spec: dict) -> dict:
    """SetDefaults for a PodSpec (also applied to pod templates)."""
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        _default_container(c)
    # SetDefaults_Volume (kubernetes v1.36 pkg/apis/core/v1/defaults.go): a volume naming no source
    # is an emptyDir, never a 422.
    for volume in spec.get("volumes") or []:
        if isinstance(volume, dict) and not any(volume.get(k) is not None for k in volume if k != "name"):
            volume["emptyDir"] = {}
    return spec


_NOT_READY_TOLERATIONS = [
    {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
    {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
]


def qos_class(spec: dict) -> str:
    """Guaranteed, Burstable or BestEffort from the cpu/memory requests and limits."""
    containers = (spec.get("initContainers") or []) + (spec.get("containers") or [])
    any_set, guaranteed = False, True
    for c in containers:
        res = c.get("resources") or {} if isinstance(c, dict) else {}
        req = {k: v for k, v in (res.get("requests") or {}).items() if k in ("cpu", "memory")}
        lim = {k: v for k, v in (res.get("limits") or {}).items() if k in ("cpu", "memory")}
        if req or lim:
            any_set = True
        if set(lim) != {"cpu", "memory"} or any(str(req.get(k, lim[k])) != str(lim[k]) for k in lim):
            guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def prepare_for_create(rtype: ResourceType, obj: dict) -> dict:
    """Defaults and status reset the server applies on create."""
    spec = obj.get("spec")
    if rtype.plural == "pods":
        spec = obj.setdefault("spec", {}) if not isinstance(spec, dict) else spec
        default_pod_spec(spec)
        spec.setdefault("enableServiceLinks", True)
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
        spec.setdefault("priority", 0)
        spec.setdefault("serviceAccountName", spec.get("serviceAccount") or "default")
        spec.setdefault("serviceAccount", spec["serviceAccountName"])
        tolerations = spec.setdefault("tolerations", [])
        if isinstance(tolerations, list):
            for t in _NOT_READY_TOLERATIONS:
                if not any(isinstance(x, dict) and x.get("key") == t["key"] for x in tolerations):
                    tolerations.append(dict(t))
        obj["status"] = {"phase": "Pending", "qosClass": qos_class(spec)}
    elif rtype.plural == "jobs":
        spec = obj.setdefault("spec", {}) if not isinstance(spec, dict) else spec
        default_job_spec(spec, obj["metadata"])
        obj["status"] = {}
    elif rtype.plural == "mpijobs":
        if isinstance(spec, dict):
            default_mpijob_spec(spec)
        obj.pop("status", None)
    elif rtype.plural == "namespaces":
        obj["spec"] = {"finalizers": ["kubernetes"]}
        obj["status"] = {"phase": "Active"}
        obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = obj["metadata"].get(
            "name", ""
        )
    elif rtype.plural == "events":
        if "series" not in obj:
            obj.setdefault("count", 1)
        obj.setdefault("type", "Normal")
    elif rtype.plural == "secrets":
        default_secret(obj)
    elif rtype.plural == "services":
        spec = obj.setdefault("spec", {}) if not isinstance(spec, dict) else spec
        default_service_spec(spec)
        obj["status"] = {"loadBalancer": {}}
    elif rtype.plural == "leases" and isinstance(spec, dict):
        drop_coordinated_lease_fields(spec)
    return obj


def drop_coordinated_lease_fields(spec: dict) -> None:
    """Coordinated leader election's fields are dropped, as kube-apiserver v1.36.3 drops them with its
    CoordinatedLeaderElection feature gate off (the default; seen on the real plane by the differential
    set's ``lease_api``): a Lease written with ``strategy`` and ``preferredHolder`` is stored without them,
    and so never refused for them either."""
    spec.pop("strategy", None)
    spec.pop("preferredHolder", None)


def default_secret(obj: dict) -> None:
    """type Opaque; ``stringData`` is write-only: merged into ``data`` (base64), its keys winning.

    Upstream: pkg/apis/core/v1/conversion.go (Convert_v1_Secret_To_core_Secret) and defaults.go,
    release-1.32. Undecodable ``data`` is refused as the JSON decoder refuses it (400).
    """
    obj.setdefault("type", "Opaque")
    data = obj.get("data")
    if isinstance(data, dict):
        for key, value in data.items():
            if not isinstance(value, str):
                continue
            try:
                base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                raise errors.bad_request(
                    f'Secret in version "v1" cannot be handled as a Secret: illegal base64 data in data[{key}]'
                ) from None
    string_data = obj.pop("stringData", None)
    if isinstance(string_data, dict) and string_data:
        merged = obj["data"] = dict(data) if isinstance(data, dict) else {}
        for key, value in string_data.items():
            merged[key] = base64.b64encode(str(value).encode()).decode()


def default_service_spec(spec: dict) -> None:
    """SetDefaults_Service (pkg/apis/core/v1/defaults.go, release-1.32): type ClusterIP, session affinity
    None, ports TCP with ``targetPort`` = ``port``, single-stack IPv4, internal traffic policy Cluster."""
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    for port in spec.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            if port.get("targetPort") in (None, 0, "") and "port" in port:
                port["targetPort"] = port["port"]
    if spec["type"] != "ExternalName":
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("internalTrafficPolicy", "Cluster")


def prepare_for_update(rtype: ResourceType, new: dict, old: dict) -> dict:
    """Defaults the server re-applies on update.

    A ``spec`` that is the stored version's own (shared, frozen) was defaulted when it was stored, and
    defaulting again would change nothing, so it is left alone.
    """
    spec = new.get("spec")
    if spec is old.get("spec") and rtype.plural != "namespaces":
        spec = None
    if rtype.plural == "pods" and isinstance(spec, dict):
        default_pod_spec(spec)
    elif rtype.plural == "jobs" and isinstance(spec, dict):
        template = spec.get("template")
        if isinstance(template, dict) and isinstance(template.get("spec"), dict):
            default_pod_spec(template["spec"])
    elif rtype.plural == "mpijobs" and isinstance(spec, dict):
        default_mpijob_spec(spec)
    elif rtype.plural == "secrets":
        default_secret(new)
    elif rtype.plural == "leases" and isinstance(spec, dict):
        drop_coordinated_lease_fields(spec)
    elif rtype.plural == "services" and isinstance(spec, dict):
        # patchAllocatedValues (pkg/registry/core/service/storage/storage.go, release-1.32): an update
        # that leaves the allocated IPs out keeps them, so a re-applied manifest is not a change.
        old_spec = old.get("spec") or {}
        for key in ("clusterIP", "clusterIPs"):
            if not spec.get(key) and old_spec.get(key):
                spec[key] = thaw(old_spec[key])
        default_service_spec(spec)
    elif rtype.plural == "namespaces":
        new["spec"] = old.get("spec") or {}
        labels = new["metadata"].get("labels")
        labels = dict(labels) if isinstance(labels, dict) else {}
        labels["kubernetes.io/metadata.name"] = new["metadata"]["name"]
        new["metadata"]["labels"] = labels
    return new


def default_job_spec(spec: dict, meta: dict) -> None:
    """The batch/v1 Job defaults, generated selector and template labels."""
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
        spec["parallelism"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault(
        "podReplacementPolicy", "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed"
    )
    spec.setdefault("manualSelector", False)
    template = spec.setdefault("template", {})
    if not isinstance(template, dict):
        return
    tmeta = template.setdefault("metadata", {})
    tspec = template.get("spec")
    if isinstance(tspec, dict):
        default_pod_spec(tspec)
    if not spec.get("manualSelector"):
        uid, name = meta.get("uid", ""), meta.get("name", "")
        spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
        labels = tmeta.setdefault("labels", {})
        labels.update(
            {
                "batch.kubernetes.io/controller-uid": uid,
                "batch.kubernetes.io/job-name": name,
                "controller-uid": uid,
                "job-name": name,
            }
        )


def default_mpijob_spec(spec: dict) -> None:
    """The kubeflow.org/v2beta1 MPIJob defaults."""
    spec.setdefault("slotsPerWorker", 1)
    run_policy = spec.setdefault("runPolicy", {})
    if isinstance(run_policy, dict):
        run_policy.setdefault("cleanPodPolicy", "None")
        run_policy.setdefault("suspend", False)
    spec.setdefault("launcherCreationPolicy", "AtStartup")
    spec.setdefault("mpiImplementation", "OpenMPI")
    spec.setdefault("sshAuthMountPath", "/root/.ssh")
    spec.setdefault("runLauncherAsWorker", False)
    for role, replica in (spec.get("mpiReplicaSpecs") or {}).items():
        if isinstance(replica, dict):
            launcher = role == "Launcher"
            replica.setdefault("replicas", 1 if launcher else 0)
            # The operator's defaults differ by role: a launcher retries in place (its mpirun may start
            # before the workers' sshd answers), a worker is not restarted (nor is a failed worker pod
            # replaced: getOrCreateWorker creates only missing ones, mpi-operator v0.8.2).
            if not replica.get("restartPolicy"):
                replica["restartPolicy"] = "OnFailure" if launcher else "Never"
