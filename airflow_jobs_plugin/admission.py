"""Admission: the step that turns a queued (suspended) job into a running one.

Every job is created suspended so the queue is visible in the cluster; admitting it is unsuspending it.
This module is the one door through which that happens.

Without a quota policy (``quota_configmap`` is ``None``) a job is admitted at once, after any retry
back-off recorded on it. With one, the quota pool gates the door: per process, per namespace and per
group, one worker runs admission passes (:func:`~airflow_jobs_plugin.quota.ledger.admission_pass`)
whenever something that matters changed (a job queued, finished, requeued or deleted, the group's ledger
or the policy changed) and when a timer is due (a back-off or a timeout expires, a periodic resync).
Passes are coalesced: a thousand triggers of one group waiting share every pass. A trigger asks
:meth:`Admission.ensure` for its job's latest decision and is woken when that decision changes.

The policy ConfigMap and the ledgers are read through watches of their own (one per process and quota
namespace), never polled per trigger.
"""

from __future__ import annotations

import asyncio
import contextvars
import difflib
import logging
import random
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar
from weakref import WeakKeyDictionary, WeakSet

from airflow_jobs_plugin import kinds, kueue, kueue_cluster, labels, metrics, quota
from airflow_jobs_plugin.jobview import JobView
from airflow_jobs_plugin.kinds import charge
from airflow_jobs_plugin.kube import (
    CONFIGMAPS,
    EVENTS,
    NODEPOOLS,
    NODES,
    PENDING_IN_LOCAL_QUEUES,
    PODS,
    WORKLOADS,
    KubeClient,
    KubeError,
    Resource,
)
from airflow_jobs_plugin.lifecycle import QueueStatus, Reason
from airflow_jobs_plugin.objects import parse_time
from airflow_jobs_plugin.quota import flavors, ledger, placement, preemption
from airflow_jobs_plugin.quota.ledger import LedgerConflict, group_of, unsuspend_patch
from airflow_jobs_plugin.quota.requeue import format_duration
from airflow_jobs_plugin.waiting import wait_event
from airflow_jobs_plugin.watch import MANAGED_SELECTOR, Scope, SharedWatch, job_key

log = logging.getLogger(__name__)
_T = TypeVar("_T")

__all__ = [
    "Admission",
    "OverQuotaError",
    "PolicyNotFoundError",
    "check_group",
    "not_before",
    "shutdown",
    "unsuspend_patch",
]

# How long ensure() waits for the pass that judges a job it has not seen yet.
ENSURE_WAIT_SECONDS = 10.0
# Kueue's visibility API is read once per LocalQueue per this many seconds for every trigger of the
# process; where it is not served (or not granted) it is asked again only after the longer pause.
POSITIONS_TTL_SECONDS = 5.0
POSITIONS_UNSERVED_SECONDS = 300.0
# A Workload change may move every job behind it: the positions of the queues this process follows
# are read again this long after a burst of changes, and the triggers whose position moved look again.
POSITIONS_SETTLE_SECONDS = 1.0
POSITIONS_FORGET_SECONDS = 600.0  # a queue no trigger asked about for this long is no longer re-read
# Minimum spacing of two passes of one group: events arriving meanwhile are served by the next pass.
PASS_SPACING_SECONDS = 0.05
# What a process's pass reacts to at once: a change of a job one of its own triggers follows, and
# what the process itself wrote. Everything else (another process's job ended, another process wrote
# the ledger) is that process's to act on, and this one looks only this much later, as a backstop:
# three triggerers that all act on every job's end write the same ledger change three times and two
# of the writes lose (docs/benchmarks.md, admission under load). A job no trigger follows anywhere
# (its triggerer is restarting) waits this long more for its next pass.
BACKSTOP_SECONDS = 1.0
# A pass even without events, in case one was missed (a watch gap, a clock jump).
RESYNC_SECONDS = 60.0
# A pass whose job patches lost a race runs again this soon (the view catches up meanwhile).
STALE_RETRY_SECONDS = 0.2
# An admission with no subscribed trigger and no caller for this long stops its workers and watches.
IDLE_SECONDS = 120.0
# How long a pass whose write from the cached ledger lost waits for the watch to bring the winner's
# ledger before it reads the ledger itself.
LEDGER_CATCH_UP_SECONDS = 0.5
# How long a trigger's release waits for its group's pass to drop the reservation before it writes the
# ledger itself.
RELEASE_WAIT_SECONDS = 5.0
# How long the nodes' GPU capacities read for placement are reused (nodes join and leave rarely).
NODES_TTL_SECONDS = 30.0
# How long a ledger's write right, as SelfSubjectAccessReview answered it, is trusted; a refusal is
# asked again sooner, so a fixed Role takes effect within seconds.
LEDGER_ACCESS_TTL_SECONDS = 600.0
LEDGER_ACCESS_RETRY_SECONDS = 15.0
SELF_SUBJECT_ACCESS_REVIEWS = Resource(
    "authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", namespaced=False
)
# The most pods of one stuck job whose events are read to learn whether a node is coming for them.
MAX_POD_EVENT_READS = 4
# The ConfigMap the cluster-autoscaler writes its status to (kubernetes/autoscaler cluster-autoscaler
# FAQ, --write-status-configmap, default true): its presence says the cluster can add nodes.
CLUSTER_AUTOSCALER_STATUS = "cluster-autoscaler-status"
# Cluster-scoped: what each node can offer pods (read-only; the product never changes nodes).
# Kueue's Workloads (read-only: Kueue writes them), on clusters that run Kueue.


_STARTED: WeakSet[Admission] = WeakSet()


def _now() -> datetime:
    return datetime.now(timezone.utc)


def not_before(job: dict) -> datetime | None:
    """The time before which a job must not be admitted (a retry's or a requeue's back-off)."""
    return parse_time(((job.get("metadata") or {}).get("annotations") or {}).get(labels.REQUEUE_NOT_BEFORE))


class OverQuotaError(ValueError):
    """A job needs more GPUs than its user or its group may ever hold: it could never be admitted."""


class PolicyNotFoundError(ValueError):
    """The ``quota_configmap`` a job names does not exist: it would wait as Inadmissible forever."""


async def _policy_not_found(client: KubeClient, quota_configmap: str, quota_namespace: str) -> str:
    """Why a named policy ConfigMap cannot be used, with the policy ConfigMaps that do exist."""
    try:
        listing = await client.list(CONFIGMAPS, quota_namespace)
    except KubeError:  # no list permission: say what is known
        listing = {}
    policies = sorted(
        str(cm["metadata"]["name"])
        for cm in listing.get("items") or []
        if quota.POLICY_KEY in (cm.get("data") or {})
    )
    close = difflib.get_close_matches(quota_configmap, policies, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    known = ", ".join(policies) or "none"
    return (
        f"quota_configmap: no ConfigMap {quota_configmap!r} in namespace {quota_namespace}{hint} "
        f"(quota policy ConfigMaps there: {known}); fix quota_configmap, or ask a platform admin to create "
        f"the policy (key {quota.POLICY_KEY}) before submitting"
    )


async def _read_policy(
    client: KubeClient, quota_configmap: str, quota_namespace: str
) -> quota.QuotaPolicy | None:
    configmap = await client.get_or_none(CONFIGMAPS, quota_namespace, quota_configmap)
    if configmap is None:
        return None
    # In a thread: reading a large policy takes seconds (quota.policy.MAX_POLICY_BYTES).
    return await asyncio.to_thread(quota.policy_from_configmap_data, configmap.get("data"))


async def check_group(
    client: KubeClient,
    quota_configmap: str | None,
    quota_namespace: str,
    group: str,
    user: str,
    gpus: int,
    *,
    kueue_queue: str | None = None,
    resource: str = labels.GPU_RESOURCE,
    node_selector: Mapping[str, str] | None = None,
) -> flavors.Charge | None:
    """Submit-time check of a job against the quota policy, before the job is created; how it is
    charged (its GPU flavor, or the flavored nodes it must avoid), ``None`` without a usable policy.

    A job handed to Kueue (``kueue_queue``) is checked against its user's limit only: the group's
    quota is its ClusterQueue's.

    Raises :class:`~airflow_jobs_plugin.quota.UnknownGroupError` (a ValueError) naming the group and
    the known groups, a ValueError if ``user`` is not a member of a group that lists its members or if
    its ``node_selector`` and the policy's GPU flavors disagree, and :class:`OverQuotaError` if ``gpus``
    (the total over all replicas) exceeds what ``user`` may ever hold in ``group``. Without a policy
    configured there is nothing to check. A ``quota_configmap`` that names no ConfigMap (a typo, the
    wrong namespace) raises :class:`PolicyNotFoundError` naming the policy ConfigMaps that exist: the
    job would wait forever. A policy that exists but is invalid is not the DAG author's fault: the job
    is created and waits as Inadmissible, with the reason, until an admin fixes the policy.
    """
    if quota_configmap is None:
        return None
    try:
        policy = await _read_policy(client, quota_configmap, quota_namespace)
    except quota.PolicyError:
        return None
    if policy is None:
        raise PolicyNotFoundError(await _policy_not_found(client, quota_configmap, quota_namespace))
    group_quota = policy.require_group(group)
    problem = quota.policy.claim_problem(policy, owner=user, user=None, group=group) or policy.charge_problem(
        group, user
    )
    if problem:  # the rules and their wording live in the pure core, shared with admission
        raise ValueError(problem)
    charged = flavors.charge(
        policy.flavors, group, group_quota.flavors, group_quota.gpus, resource, node_selector
    )
    key = charged.key
    if key == labels.GPU_RESOURCE:
        unit = "GPUs"
    elif charged.flavor is not None:
        unit = f"{key} GPUs"
    else:
        unit = key
    whole = policy.capacity(group, key)
    if gpus > whole and kueue_queue is None:
        hint = (
            "ask for fewer GPUs or a larger group quota"
            if key == labels.GPU_RESOURCE or whole or charged.flavor is not None
            else f"ask a platform admin for groups.{group}.devices.{resource} in the quota policy"
        )
        raise OverQuotaError(
            f"the job needs {gpus} {unit} but the whole quota of group {group} is {whole}: "
            f"it could never start; {hint}"
        )
    limit = policy.user_capacity(group, user, key)
    if gpus > limit:
        raise OverQuotaError(
            f"the job needs {gpus} {unit} but user {user} may hold at most {limit} in group {group}: "
            "it could never start; ask for fewer GPUs or a larger user quota"
        )
    return charged


# The shared watch's index of the product's jobs by quota group (a pass reads one group's jobs).
_BY_GROUP = "quota-group"


def _group_index(plural: str, obj: dict) -> str | None:
    return group_of(obj) if kinds.is_job_resource(plural) else None


def _wake(watch: SharedWatch, job_name: str) -> None:
    """Wake the triggers following ``job_name`` (their job did not change, its queue status did)."""
    watch.notify(job_name)


@dataclass(frozen=True)
class _PolicyState:
    policy: quota.QuotaPolicy | None
    problem: str | None  # why no job of any group can be admitted now
    version: str | None = None


class _PolicySource:
    """The policy ConfigMap through a watch of its own: parsed once per change."""

    def __init__(self, client: KubeClient, namespace: str, name: str, on_change: Callable[[], None]):
        self.namespace = namespace
        self.name = name
        self.watch = SharedWatch(
            client,
            namespace,
            resources=(CONFIGMAPS,),
            scope=Scope(job_labels=None, job_fields=f"metadata.name={name}", pod_labels=None),
        )
        self.watch.add_listener(lambda *_: on_change())
        self._state: _PolicyState | None = None
        self._parsing = asyncio.Lock()

    def start(self) -> None:
        self.watch.start()

    async def stop(self) -> None:
        await self.watch.stop()

    @property
    def state(self) -> _PolicyState | None:
        """The policy as last parsed (``None`` before the first pass read it)."""
        return self._state

    async def current(self) -> _PolicyState:
        where = f"{self.namespace}/{self.name}"
        if not await self.watch.wait_synced(timeout=ENSURE_WAIT_SECONDS):
            return _PolicyState(None, f"the quota policy ConfigMap {where} could not be read yet; retrying")
        configmap = self.watch.get(CONFIGMAPS, self.name)
        if configmap is None:
            return _PolicyState(
                None,
                f"the quota policy ConfigMap {where} does not exist; jobs wait until a platform admin "
                f"creates it (key {quota.POLICY_KEY})",
            )
        version = configmap["metadata"].get("resourceVersion")
        if self._state is not None and self._state.version == version:
            return self._state
        async with self._parsing:  # one parse per version, however many groups' passes ask at once
            if self._state is not None and self._state.version == version:
                return self._state
            try:
                # In a thread: a policy near its size limit takes seconds to read, and the triggerer's
                # event loop follows every job meanwhile (quota.policy.MAX_POLICY_BYTES).
                parsed = await asyncio.to_thread(quota.policy_from_configmap_data, configmap.get("data"))
                state = _PolicyState(parsed, None, version)
            except quota.PolicyError as exc:
                state = _PolicyState(None, f"the quota policy ConfigMap {where} is invalid: {exc}", version)
                log.error("%s", state.problem)
            self._state = state
            return state


def _owner_name(obj: dict) -> str | None:
    """The name of the job that controls a Workload."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller") and ref.get("name"):
            return str(ref["name"])
    return None


class _WorkloadSource:
    """Kueue's Workloads of one namespace through a watch of their own. A Workload's change wakes the
    trigger of its job (the job itself does not change while Kueue decides)."""

    def __init__(self, client: KubeClient, namespace: str, wake: Callable[[str], None]):
        self.client = client
        self.namespace = namespace
        self.watch = SharedWatch(
            client,
            namespace,
            resources=(WORKLOADS,),
            scope=Scope(job_labels=None, job_fields=None, pod_labels=None),
        )
        self.watch.add_listener(self._on_event)
        self._wake = wake
        self.served: bool | None = None  # whether the cluster serves Kueue's API at all
        # Workload name by its job's uid (Kueue's job-uid label), kept by the watch's events: a look of
        # one trigger reads its own Workload, never a scan of the namespace's.
        self._by_job: dict[str, str] = {}
        # LocalQueue -> (until when it holds, positions by Workload name or None: unknown).
        self._positions: dict[str, tuple[float, dict[str, kueue.PendingPosition] | None]] = {}
        self._asking: dict[str, asyncio.Future] = {}
        self._asked_at: dict[str, float] = {}
        self._said_unserved = False
        self._refresh: asyncio.TimerHandle | None = None
        self._refreshing: asyncio.Future | None = None

    async def start(self) -> bool:
        if self.served is None:
            try:
                await self.client.list(
                    WORKLOADS, self.namespace, label_selector=f"{kueue.JOB_UID_LABEL}=none"
                )
                self.served = True
            except KubeError as exc:
                if not exc.not_found:
                    raise
                self.served = False
        if self.served:
            self.watch.start()
        return self.served

    async def stop(self) -> None:
        if self._refresh is not None:
            self._refresh.cancel()
        if self._refreshing is not None:
            self._refreshing.cancel()
        await self.watch.stop()

    def of(self, job: dict) -> dict | None:
        name = self._by_job.get((job.get("metadata") or {}).get("uid") or "")
        return self.watch.get(WORKLOADS, name) if name else None

    async def positions(self, queue: str) -> dict[str, kueue.PendingPosition] | None:
        """The positions of LocalQueue ``queue``'s pending Workloads, by Workload name, from Kueue's
        visibility API: one read per queue per ``POSITIONS_TTL_SECONDS`` shared by every trigger of the
        process (the triggers of one queue ask together); ``None`` where it did not say."""
        loop = asyncio.get_running_loop()
        self._asked_at[queue] = loop.time()
        cached = self._positions.get(queue)
        if cached is not None and cached[0] > loop.time():
            return cached[1]
        asking = self._asking.get(queue)
        if asking is None:
            asking = _spawn(self._read_positions(queue), f"ajp-kueue-positions-{queue}")
            self._asking[queue] = asking
            asking.add_done_callback(self._asked(queue))
        return await asyncio.shield(asking)

    def _asked(self, queue: str) -> Callable[[asyncio.Future], None]:
        def forget(_done: asyncio.Future) -> None:
            self._asking.pop(queue, None)

        return forget

    async def _read_positions(self, queue: str) -> dict[str, kueue.PendingPosition] | None:
        loop = asyncio.get_running_loop()
        try:
            summary = await self.client.get_subresource(
                PENDING_IN_LOCAL_QUEUES, self.namespace, queue, "pendingworkloads"
            )
        except KubeError as exc:
            # 404: no visibility server (or no such LocalQueue, which the job's state already says);
            # 403: not granted. Neither changes soon; anything else may be gone on the next look.
            lasting = exc.not_found or exc.status == 403
            if lasting and not self._said_unserved:
                self._said_unserved = True
                log.info(
                    "Kueue's visibility API gave no positions for LocalQueue %s/%s (%s): queued Kueue jobs "
                    "show no position",
                    self.namespace,
                    queue,
                    exc.message,
                )
            pause = POSITIONS_UNSERVED_SECONDS if lasting else POSITIONS_TTL_SECONDS
            self._positions[queue] = (loop.time() + pause, None)
            return None
        found = kueue.pending_positions(summary)
        self._positions[queue] = (loop.time() + POSITIONS_TTL_SECONDS, found)
        return found

    def _on_event(self, etype: str, plural: str, obj: dict) -> None:
        meta = obj.get("metadata") or {}
        uid = (meta.get("labels") or {}).get(kueue.JOB_UID_LABEL)
        if uid and etype == "DELETED":
            self._by_job.pop(uid, None)
        elif uid:
            self._by_job[uid] = meta.get("name", "")
        owner = _owner_name(obj)
        if owner:
            self._wake(owner)
        self._refresh_positions_soon()

    def _refresh_positions_soon(self) -> None:
        if not self._asked_at or self._refresh is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._refresh = loop.call_later(POSITIONS_SETTLE_SECONDS, self._start_refresh, context=_detached())

    def _start_refresh(self) -> None:
        self._refresh = None
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.ensure_future(self._refresh_positions())

    async def _refresh_positions(self) -> None:
        """Read again the positions of the queues triggers follow; wake those whose position moved."""
        now = asyncio.get_running_loop().time()
        for queue, asked in list(self._asked_at.items()):
            if now - asked > POSITIONS_FORGET_SECONDS:
                self._asked_at.pop(queue, None)
                self._positions.pop(queue, None)
                continue
            until, before = self._positions.get(queue, (0.0, None))
            if before is None and until > now:
                continue  # not served, not granted or failed: its pause holds
            self._positions.pop(queue, None)
            after = await self.positions(queue)
            self._asked_at[queue] = asked  # a refresh is not a trigger asking
            for name, place in (after or {}).items():
                if (before or {}).get(name) != place:
                    owner = _owner_name(self.watch.get(WORKLOADS, name) or {})
                    if owner:
                        self._wake(owner)


class _GroupWorker:
    """Runs the admission passes of one group in this process, one at a time, when due."""

    def __init__(self, admission: Admission, group: str):
        self.admission = admission
        self.group = group
        self.decisions: dict[str, quota.Decision] = {}
        self.statuses: dict[str, QueueStatus | None] = {}
        self.seen: dict[str, tuple] = {}  # uid -> fingerprint of the job the last pass judged
        self.problem: str | None = None  # the policy cannot be used: every job of the group waits
        self.error: str | None = None  # the last pass failed (API trouble): shown until one succeeds
        self.ledger_version: str | None = None
        self.ledger_problems: tuple[str, ...] = ()
        self.next_due: datetime | None = None
        self.started = 0
        self.finished = 0
        self.failures = 0
        self._dirty = asyncio.Event()
        self._done = asyncio.Event()
        self._backstop: asyncio.TimerHandle | None = None
        # A pass runs for every trigger of the group: it logs in no trigger's context (the triggerer's own
        # log), and a line about one job goes to that job's trigger (Admission.job_log).
        self.task = _spawn(self._run(), f"ajp-admission-{group}")

    def mark(self) -> None:
        self._dirty.set()

    def mark_later(self, delay: float) -> None:
        """Run a pass ``delay`` from now (one pending backstop covers every change until it fires)."""
        if self._backstop is None:
            self._backstop = asyncio.get_running_loop().call_later(
                delay, self._backstop_due, context=_detached()
            )

    def _backstop_due(self) -> None:
        self._backstop = None
        self.mark()

    def stop(self) -> None:
        if self._backstop is not None:
            self._backstop.cancel()
            self._backstop = None
        self.task.cancel()

    async def wait_pass(self, timeout: float) -> None:
        """Wait for a pass that starts after this call to finish (bounded by ``timeout``)."""
        target = self.started + 1
        self.mark()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.finished < target:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            await wait_event(self._done, remaining)

    async def _run(self) -> None:
        while not self.admission.closed:
            timeout = None
            if self.next_due is not None:
                timeout = max(0.0, (self.next_due - _now()).total_seconds())
            await wait_event(self._dirty, timeout)
            if self.admission.closed:
                return
            self._dirty.clear()
            self.started += 1
            try:
                await self.admission._pass(self)
                self.failures = 0
                self.error = None
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # never let a bad pass kill the worker: retry with back-off
                self.failures += 1
                delay = min(30.0, 0.2 * 2**self.failures)
                if isinstance(exc, (KubeError, LedgerConflict)):
                    log.warning(
                        "admission pass of group %s failed (%s); retrying in %.1fs", self.group, exc, delay
                    )
                else:
                    log.exception("admission pass of group %s failed; retrying in %.1fs", self.group, delay)
                self.next_due = _now() + timedelta(seconds=delay)
                self.error = (
                    f"the quota pool could not run an admission pass ({exc}); retrying in {delay:.0f}s"
                )
            self.finished = self.started
            done, self._done = self._done, asyncio.Event()
            done.set()
            await asyncio.sleep(PASS_SPACING_SECONDS)


def _detached() -> contextvars.Context:
    """An empty context for the pool's background work (passes, timers, shared reads): whichever
    trigger's call starts it, its lines are no task's (Admission.job_log routes a job's own)."""
    return contextvars.Context()


def _spawn(coro: Coroutine[Any, Any, _T], name: str) -> asyncio.Task[_T]:
    """A task of the pool's own, in an empty context (a task copies the context it is created in;
    ``create_task``'s ``context`` argument is Python 3.11+)."""
    return _detached().run(asyncio.create_task, coro, name=name)


class Admission:
    """Admission for the jobs of one shared watch (one namespace of one cluster) under one policy."""

    _registry: WeakKeyDictionary[SharedWatch, dict[tuple[str | None, str], Admission]] = WeakKeyDictionary()

    def __init__(self, watch: SharedWatch, quota_configmap: str | None, quota_namespace: str | None):
        self.watch = watch
        self.client: KubeClient = watch.client
        self.quota_configmap = quota_configmap
        self.quota_namespace = quota_namespace or watch.namespace
        self.hook: ledger.Hook | None = None  # step hook for every pass and requeue (tests)
        self._groups: dict[str, _GroupWorker] = {}
        self._units: dict[str, str] = {}  # group -> whose ledger holds it (its cohort's), as last read
        self._fingerprints: dict[str, tuple] = {}
        self._policy: _PolicySource | None = None
        self._ledgers: SharedWatch | None = None
        self._ledger_changed: asyncio.Event | None = None  # set (and replaced) on every ledger event
        self._released: set[str] = set()  # uids of jobs whose triggers are letting them go (release)
        # uid -> the context of the trigger that follows the job in this process: a line about the job
        # that a pass logs is logged there, so it reaches that job's task log and no other (job_log).
        self._job_contexts: dict[str, contextvars.Context] = {}
        self._workloads: _WorkloadSource | None = None
        self._remove_listener: Callable[[], None] | None = None
        self._reaper: asyncio.Task | None = None
        self._last_use = 0.0
        self._rng = random.Random()
        self._node_capacities: list[placement.NodeCapacity] = []
        self._autoscaling = placement.NO_AUTOSCALING
        # Per ledger: until when the answer holds, and why it may not be written (None: it may).
        self._ledger_access: dict[str, tuple[float, str | None]] = {}
        self._nodes_read_at: float | None = None
        self._nodes_lock: asyncio.Lock | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.closed = False

    @classmethod
    def for_watch(
        cls, watch: SharedWatch, *, quota_configmap: str | None = None, quota_namespace: str | None = None
    ) -> Admission:
        """The process's admission for ``watch`` and this policy (one per watch and policy)."""
        by_policy = cls._registry.setdefault(watch, {})
        key = (quota_configmap, quota_namespace or watch.namespace)
        existing = by_policy.get(key)
        if existing is None:
            existing = cls(watch, quota_configmap, quota_namespace)
            by_policy[key] = existing
        return existing

    @property
    def quota_enabled(self) -> bool:
        return self.quota_configmap is not None

    # --- the trigger's interface ---

    async def ensure(self, job: dict) -> QueueStatus | None:
        """Called while ``job`` is suspended: admit it if it may run, else say why it waits.

        Without a quota policy the job is unsuspended here. With one, the group's pass admits it; this
        returns the latest decision for the job (reason, position, message), waiting for a pass first if
        no pass has judged this version of the job yet; ``None`` if no pass has seen the job.
        """
        meta = job.get("metadata") or {}
        self._follow(meta.get("uid"))
        if JobView(job).verdict:
            return None
        if kueue.manages(job) and not (self.quota_enabled and kueue.gated_by_pool(job)):
            # Kueue admits it; the product only reports what Kueue says (see kueue.py: never fight).
            # A job the pool still gates (Kueue gave it its `default` LocalQueue at creation) is the
            # pool's to judge first, below.
            return await self._kueue_status(job)
        if not self.quota_enabled and await self._kueue_takes(job):
            # A Kueue that manages every job has it (its configuration says so, or it made a Workload):
            # unsuspending it would only make Kueue suspend it again (the fight kueue.py describes).
            return await self._kueue_status(job)
        nodes = await self._nodes()
        too_large = placement.never_fits(job, nodes, self._autoscaling)
        if too_large is not None:
            # Admitting it would only trade a wait in the queue for a wait as Unschedulable.
            await self._rule(job, Reason.UNSCHEDULABLE.value, too_large)
            return None
        if not self.quota_enabled:
            return await self._admit_at_once(job)
        try:
            charge.job_charge(job)
        except charge.ChargeRefused as exc:
            # Its pod templates cannot change while it waits: it would wait in no queue for ever.
            await self._rule(job, Reason.INADMISSIBLE.value, str(exc))
            return None
        group = group_of(job)
        if not group:
            return QueueStatus(
                reason="Inadmissible",
                message=f"the job has no {labels.GROUP_NAME} annotation: the quota pool cannot place it in a queue",
            )
        worker = self._worker(group)
        uid = meta.get("uid") or ""
        if worker.seen.get(uid) != ledger.fingerprint(job):
            await worker.wait_pass(ENSURE_WAIT_SECONDS)
        return self._status(worker, uid)

    def wake_after(self, job: dict, default: float) -> float:
        """How long a trigger may sleep before it must look again even without a watch event.

        With a quota policy this also makes sure the job's group has a worker in this process, so a
        trigger rebuilt while its job already runs still gets its schedule deadline watched.
        """
        group = group_of(job) if self.quota_enabled else None
        if group:
            self._follow((job.get("metadata") or {}).get("uid"))
            self._worker(group)
        wait_until = not_before(job)
        if wait_until is None:
            return default
        return max(0.05, min(default, (wait_until - _now()).total_seconds()))

    async def release(self, job: dict) -> None:
        """A job reached its end: give its GPUs back and let the next jobs of its group start.

        Whatever its pods still hold (pods stranded on a lost node would keep the quota for as long as
        the node is away), in one write with the admissions the freed GPUs allow: the group's next pass
        in this process drops the reservation as released. Usually the pass has dropped it already (the
        job's end wakes it at once, while the trigger reads the pods before it decides), and nothing
        is asked of the API server. Only if that pass could not (it failed, or the ledger watch lags)
        does the release write the ledger itself."""
        if not self.quota_enabled:
            return
        group = group_of(job)
        uid = (job.get("metadata") or {}).get("uid") or ""
        if not group or not uid:
            return
        worker = self._worker(group)
        if self._holds(group, uid) is False:
            self._job_contexts.pop(uid, None)
            worker.mark()
            return
        if self._deleted_with_pods(job):
            # Deleted (kubectl delete) while its pods still stop on their nodes: they hold the GPUs until
            # they are gone, and the group's passes drop the reservation then (a pod's end wakes them).
            worker.mark()
            return
        self._follow(uid)
        self._released.add(uid)
        try:
            await worker.wait_pass(RELEASE_WAIT_SECONDS)
        finally:
            self._released.discard(uid)
        if self._holds(group, uid) is not False:
            await self._release_in_ledger(group, uid, (job.get("metadata") or {}).get("name"))
            worker.mark()
        # Its trigger is done with it: a later pass's line about it goes to the triggerer's own log.
        self._job_contexts.pop(uid, None)

    def _deleted_with_pods(self, job: dict) -> bool:
        """A job deleted or being deleted whose pods, as this process's watch holds them, still hold GPUs."""
        meta = job.get("metadata") or {}
        current = self.watch.get(ledger.resource_of(job), meta.get("name") or "")
        deleted = current is None or bool((current.get("metadata") or {}).get("deletionTimestamp"))
        pods = self._pods_of(job)
        return deleted and pods is not None and ledger.pods_hold_gpus(pods, _now())

    def _follow(self, uid: str | None) -> None:
        """Remember the calling trigger's context as the one job ``uid``'s lines are logged in."""
        if uid:
            self._job_contexts[uid] = contextvars.copy_context()

    def job_log(self, uid: str, level: int, message: str, *args: object) -> None:
        """Log a line about one job in the context of the trigger that follows it in this process
        (Airflow's triggerer routes a record to a task's log by the ``trigger_id`` its ``run_trigger``
        binds in contextvars: apache-airflow 3.3 airflow/jobs/triggerer_job_runner.py,
        ``bind_log_contextvars``), or, when none does, in the triggerer's own log: never in the log of
        whichever trigger's call happened to run the pass, which would show one DAG another's jobs."""
        context = self._job_contexts.get(uid)
        if context is None:
            log.log(level, message, *args)
        else:
            context.run(log.log, level, message, *args)

    def _unit_of(self, group: str) -> tuple[str, tuple[str, ...]]:
        """Whose ledger holds ``group`` (its cohort's, as the last pass read the policy), and the
        cohort's member groups (none for a group with a ledger of its own)."""
        unit = self._units.get(group, group)
        state = self._policy.state if self._policy is not None else None
        policy = state.policy if state is not None else None
        members = policy.members(unit) if policy is not None and unit != group else ()
        return unit, members

    def _ledger_of(self, group: str) -> ledger.StoredLedger | None:
        """The ledger holding ``group`` (its cohort's) as the ledger watch holds it; ``None`` unknown."""
        return self._cached_ledger(*self._unit_of(group))

    def _holds(self, group: str, uid: str) -> bool | None:
        """Whether the cached ledger holds a reservation of job ``uid``; ``None`` if it is not known."""
        stored = self._ledger_of(group)
        return None if stored is None else stored.ledger.find(uid) is not None

    async def _release_in_ledger(self, group: str, uid: str, name: str | None) -> None:
        """Remove job ``uid``'s reservation from the ledger that holds its group (its cohort's for a
        group in a cohort: a lost write re-reads that one, never the group's own, which does not
        exist), starting from the ledger the watch holds."""
        unit, members = self._unit_of(group)
        try:
            await ledger.release(
                self.client,
                self.quota_namespace,
                unit,
                uid,
                members=members,
                cached=self._cached_ledger(unit, members),
            )
        except (KubeError, LedgerConflict) as exc:
            # Not fatal: the job has ended, so the next pass of any process drops its reservation.
            log.warning("could not release the GPUs of %s now (%s); the next pass will", name, exc)

    # --- more of the pool, for the CLI, the operator and tests ---

    def start_group(self, group: str) -> None:
        """Run the group's passes in this process from now on (triggers do this through ensure)."""
        self._worker(group).mark()

    async def run_pass(self, group: str, timeout: float = 30.0) -> None:
        """Run a pass of ``group`` now and wait for it."""
        await self._worker(group).wait_pass(timeout)

    def decision(self, job_uid: str) -> quota.Decision | None:
        """The latest decision of any group's pass for a queued job."""
        for worker in self._groups.values():
            found = worker.decisions.get(job_uid)
            if found is not None:
                return found
        return None

    async def close(self) -> None:
        """Stop this admission's workers and watches; the next call that needs them starts them again."""
        self.closed = True
        if self._remove_listener is not None:
            self._remove_listener()
        tasks = [w.task for w in self._groups.values()]
        for worker in self._groups.values():
            worker.stop()
        if self._reaper is not None and self._reaper is not asyncio.current_task():
            tasks.append(self._reaper)
            self._reaper.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)
        self._groups.clear()
        stops = [
            asyncio.ensure_future(watch.stop())
            for watch in (
                self._policy.watch if self._policy else None,
                self._ledgers,
                self._workloads.watch if self._workloads else None,
            )
            if watch is not None
        ]
        if stops:
            await asyncio.wait(stops, timeout=5)
        self._policy = self._ledgers = self._remove_listener = self._reaper = None
        self._workloads = None

    # --- internals ---

    def _workload_source(self) -> _WorkloadSource:
        if self._workloads is None:
            self._workloads = _WorkloadSource(
                self.client, self.watch.namespace, lambda name: _wake(self.watch, name)
            )
        return self._workloads

    async def _kueue_takes(self, job: dict) -> bool:
        """Whether Kueue manages ``job`` though it names no LocalQueue: its configuration says so, or
        it made a Workload for it (the shared Workload watch first, then the API server)."""
        if kueue.queue_name(job):
            return False
        if await kueue_cluster.configured_to_take(self.client, job):
            return True
        return await self._workload_taking(job) is not None

    async def _workload_taking(self, job: dict) -> dict | None:
        """The Workload of a job that names no LocalQueue -- Kueue took it anyway (manageJobsWithout-
        QueueName) -- or ``None``: none yet, or no Kueue here. The shared Workload watch answers first,
        then the API server, by the job's uid label."""
        source = self._workload_source()
        if not await source.start():
            return None
        await source.watch.wait_synced(timeout=ENSURE_WAIT_SECONDS)
        return source.of(job) or await kueue_cluster.workload_of(self.client, job)

    async def _kueue_status(self, job: dict) -> QueueStatus | None:
        source = self._workload_source()
        if not await source.start():
            missing = kueue.no_api_status(job)
            return QueueStatus(reason=missing.reason, message=missing.message)
        await source.watch.wait_synced(timeout=ENSURE_WAIT_SECONDS)
        workload = source.of(job)
        if workload is None and not kueue.queue_name(job):
            workload = await self._workload_taking(job)
        ended = kueue.deactivation(workload)
        if ended is not None:
            # Kueue will never admit it: the task ends now instead of waiting for ever. The verdict is
            # written alone; the job's suspend stays Kueue's (see kueue.py).
            await self._rule_kueue_job(job, Reason.DEACTIVATED.value, ended)
            return None
        if not kueue.queue_name(job):
            status = kueue.manages_every_job_status(workload)
            return QueueStatus(reason=status.reason, message=status.message)
        if kueue.ignores_gate(job, workload):
            log.warning(
                "%s %s: Kueue took it without the quota pool's admission gate (%s): it does not honour "
                "admission gates (Kueue before %s, or its AdmissionGatedBy feature off), so per-user "
                "limits cannot stand in front of it for jobs it takes at creation",
                kinds.kind_of(job).resource.kind,
                (job.get("metadata") or {}).get("name"),
                kueue.ADMISSION_GATE_ANNOTATION,
                kueue.MIN_GATED_VERSION,
            )
        status = kueue.queue_status(job, workload)
        if workload is not None and kueue.waits_in_queue(status):
            view = kueue.workload_view(workload)
            positions = await source.positions(view.queue)
            status = kueue.with_position(status, (positions or {}).get(view.name), view.queue)
        return QueueStatus(reason=status.reason, position=status.position, message=status.message)

    async def _admit_at_once(self, job: dict) -> QueueStatus | None:
        now = _now()
        if ledger.is_stopped(job):
            return await self._hold_stopped(job, now)
        wait_until = not_before(job)
        if wait_until is not None and wait_until > now:
            secs = int((wait_until - now).total_seconds())
            return QueueStatus(
                reason="BackingOff", position=None, message=f"retry back-off: admitted in {secs}s"
            )
        resource = kinds.kind_of(job).resource
        meta = job["metadata"]
        try:
            patched = await self.client.merge_patch(
                resource, meta["namespace"], meta["name"], unsuspend_patch(job, now, conditional=False)
            )
        except KubeError as exc:
            if not exc.not_found:
                raise
            return None
        # Fold the unsuspended job into the shared watch now, as the quota path does: its pods can
        # arrive on their own stream before the Job's own update does, and must not meet a cached Job
        # that still reads suspended.
        if meta.get("namespace") == self.watch.namespace:
            self.watch.absorb(resource, patched, replaces=meta.get("resourceVersion"))
        return None

    async def _hold_stopped(self, job: dict, now: datetime) -> QueueStatus | None:
        """A stopped job is never released; past its own queue timeout it fails as the timeout says."""
        try:
            queued: quota.QueuedJob | None = ledger.queued_job(job)
        except ValueError:  # no readable queue time or timeout: it simply stays stopped
            queued = None
        stopped_at = (queued.stopped_at if queued else None) or now
        timeout = queued.queue_timeout if queued else None
        if queued is not None and timeout is not None and quota.queue_timed_out(queued.waited(now), timeout):
            message = (
                f"stopped at {ledger.rfc3339(stopped_at)} after waiting {format_duration(queued.waited(now))} "
                f"for quota, longer than queue_timeout {format_duration(timeout)}"
            )
            await self._rule(job, quota.Verdict.QUEUE_TIMEOUT.value, message, ledger.is_stopped)
            return None
        return QueueStatus(
            reason="Stopped", message=f"stopped at {ledger.rfc3339(stopped_at)}; resume to requeue it"
        )

    async def _rule_kueue_job(self, job: dict, reason: str, message: str) -> None:
        """Fail a Kueue job with the product's verdict, written alone: ending it through a deadline would
        need an unsuspend, which Kueue undoes for a job it has not admitted."""
        log.warning(
            "%s %s: %s: %s", kinds.kind_of(job).resource.kind, job["metadata"]["name"], reason, message
        )
        result, _ = await ledger.settle(
            self.client, job, lambda j: ledger.verdict_only_patch(j, reason, message), ledger.is_finished
        )
        if result is not None and job["metadata"].get("namespace") == self.watch.namespace:
            self.watch.absorb(
                ledger.resource_of(job), result, replaces=job["metadata"].get("resourceVersion")
            )

    async def _rule(
        self, job: dict, reason: str, message: str, still_wanted: Callable[[dict], bool] = lambda _j: True
    ) -> None:
        """Fail a queued job with the product's verdict (conditional on the version read; a job changed
        meanwhile is re-read once), and fold the result into the shared watch."""
        log.warning(
            "%s %s: %s: %s", kinds.kind_of(job).resource.kind, job["metadata"]["name"], reason, message
        )
        result, _ = await ledger.settle(
            self.client,
            job,
            lambda j: ledger.verdict_patch(j, reason, message),
            ledger.is_finished,
            still_wanted,
        )
        if result is not None:
            await ledger.end_ruled_job(self.client, result)
        if result is not None and job["metadata"].get("namespace") == self.watch.namespace:
            self.watch.absorb(
                ledger.resource_of(job), result, replaces=job["metadata"].get("resourceVersion")
            )

    async def _nodes(self) -> list[placement.NodeCapacity]:
        """The cluster's nodes as placement sees them, listed at most every NODES_TTL_SECONDS; empty
        when they cannot be read (no permission to list nodes: nothing is ruled on then)."""
        loop = asyncio.get_running_loop()
        if self._nodes_read_at is not None and loop.time() - self._nodes_read_at < NODES_TTL_SECONDS:
            return self._node_capacities
        if self._nodes_lock is None:
            self._nodes_lock = asyncio.Lock()
        async with self._nodes_lock:  # a thousand triggers starting at once share one LIST
            if self._nodes_read_at is not None and loop.time() - self._nodes_read_at < NODES_TTL_SECONDS:
                return self._node_capacities
            await self._read_nodes(loop)
        return self._node_capacities

    async def _read_nodes(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            listing = await self.client.list(NODES, "")
            self._node_capacities = [placement.NodeCapacity.of(n) for n in listing.get("items") or []]
            self._autoscaling = await self._read_autoscaling()
        except KubeError as exc:
            if self._nodes_read_at is None:
                log.warning(
                    "cannot list the cluster's nodes (%s): pods larger than any node are not caught", exc
                )
            self._node_capacities = []
        self._nodes_read_at = loop.time()

    async def _ledger_access_problem(self, unit: str) -> str | None:
        """Why this process may not write the ledger of ``unit`` (``None``: it may, or it cannot tell).

        The shipped Role names the ledgers it may update (RBAC cannot grant update by a name's prefix),
        and a ConfigMap's create cannot be limited by name: a group added to the policy but not to the
        Role would get its first job admitted (the ledger created) and every later write refused (403),
        its jobs waiting for ever. Asked of the API server once per ledger and a while
        (SelfSubjectAccessReview, kubernetes v1.36 pkg/apis/authorization: what any authenticated
        identity may ask about itself), before anything of the group is admitted."""
        loop = asyncio.get_running_loop()
        cached = self._ledger_access.get(unit)
        if cached is not None and loop.time() < cached[0]:
            return cached[1]
        name = quota.ledger_name(unit)
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {
                "resourceAttributes": {
                    "namespace": self.quota_namespace,
                    "verb": "update",
                    "resource": "configmaps",
                    "name": name,
                }
            },
        }
        try:
            answer = await self.client.create(SELF_SUBJECT_ACCESS_REVIEWS, "", review)
        except KubeError as exc:
            # An API server without the review (the simulator) or a refusal to answer: the writes say.
            log.debug("cannot ask whether the ledger %s may be written (%s)", name, exc)
            self._ledger_access[unit] = (loop.time() + LEDGER_ACCESS_TTL_SECONDS, None)
            return None
        allowed = bool((answer.get("status") or {}).get("allowed"))
        problem = None
        if not allowed:
            problem = (
                f"this triggerer may not update the ledger ConfigMap {self.quota_namespace}/{name} (RBAC): add "
                f"{name!r} to the resourceNames of the configmaps 'update' rule of Role airflow-jobs-admitter "
                "(helm-values/rbac.yaml) and apply it; the group's jobs wait until then"
            )
            log.error("quota group %s: %s", unit, problem)
        # A refusal is asked again soon (the admin is fixing it); a grant stays true for a while.
        ttl = LEDGER_ACCESS_TTL_SECONDS if allowed else LEDGER_ACCESS_RETRY_SECONDS
        self._ledger_access[unit] = (loop.time() + ttl, problem)
        return problem

    async def _read_autoscaling(self) -> placement.Autoscaling:
        """The nodes the cluster can add: the ``autoscaled_node_shapes`` option, else Karpenter's
        NodePools, else whether a cluster-autoscaler reports its status (then nothing is ruled)."""
        from airflow_jobs_plugin import config

        try:
            shapes = placement.parse_node_shapes(config.get("autoscaled_node_shapes"))
        except placement.NodeShapesError as exc:
            log.error("%s; no job is ruled larger than any node until it is fixed", exc)
            return placement.Autoscaling(unbounded=str(exc))
        if shapes:
            return placement.Autoscaling(shapes=shapes)
        try:
            pools = (await self.client.list(NODEPOOLS, "")).get("items") or []
        except KubeError:
            pools = []  # no Karpenter (404), or no right to read its NodePools (403)
        if pools:
            bounded = [placement.nodepool_shape(pool) for pool in pools]
            if any(shape is None for shape in bounded):
                return placement.Autoscaling(unbounded="a Karpenter NodePool without a GPU limit")
            return placement.Autoscaling(shapes=tuple(shape for shape in bounded if shape is not None))
        try:
            status = await self.client.get_or_none(CONFIGMAPS, "kube-system", CLUSTER_AUTOSCALER_STATUS)
        except KubeError:
            status = None
        if status is not None:
            return placement.Autoscaling(
                unbounded="a cluster-autoscaler (kube-system/cluster-autoscaler-status)"
            )
        return placement.NO_AUTOSCALING

    def _start(self) -> None:
        if self._policy is not None:
            return
        assert self.quota_configmap is not None
        # A trigger may still hold an admission the reaper closed: it simply starts again.
        self.closed = False
        self.loop = asyncio.get_running_loop()
        _STARTED.add(self)
        self._policy = _PolicySource(self.client, self.quota_namespace, self.quota_configmap, self._mark_all)
        self._policy.start()
        self._ledgers = SharedWatch(
            self.client,
            self.quota_namespace,
            resources=(CONFIGMAPS,),
            scope=Scope(job_labels=MANAGED_SELECTOR, job_fields=None, pod_labels=None),
        )
        self._ledgers.add_listener(self._on_ledger_event)
        self._ledgers.start()
        self.watch.add_index(_BY_GROUP, _group_index)
        self._remove_listener = self.watch.add_listener(self._on_job_event)
        self._reaper = _spawn(self._reap(), "ajp-admission-reaper")

    def _worker(self, group: str) -> _GroupWorker:
        self._last_use = asyncio.get_running_loop().time()
        # The policy's and the ledgers' watches are the pool's, not the first calling trigger's.
        _detached().run(self._start)
        worker = self._groups.get(group)
        if worker is None:
            worker = self._groups[group] = _GroupWorker(self, group)
            worker.mark()
        return worker

    def _mark_all(self) -> None:
        for worker in self._groups.values():
            worker.mark()

    def _on_job_event(self, etype: str, plural: str, obj: dict) -> None:
        if plural == "pods":
            self._on_pod_event(etype, obj)
            return
        if not kinds.is_job_resource(plural):
            return
        group = group_of(obj)
        worker = self._groups.get(group) if group else None
        if worker is None:
            return
        uid = (obj.get("metadata") or {}).get("uid") or ""
        if etype == "DELETED":
            self._fingerprints.pop(uid, None)
            self._mark_for(worker, job_key(obj))
            return
        current = ledger.fingerprint(obj)
        if self._fingerprints.get(uid) != current:
            self._fingerprints[uid] = current
            self._mark_for(worker, job_key(obj))

    def _mark_for(self, worker: _GroupWorker, key: str | None) -> None:
        """A pass for a change of job ``key``: now if a trigger of this process follows it, else as a
        backstop (see BACKSTOP_SECONDS)."""
        if key and self.watch.followed(key):
            worker.mark()
        else:
            worker.mark_later(BACKSTOP_SECONDS)

    def _on_pod_event(self, etype: str, obj: dict) -> None:
        """A pass keeps the reservation of a job that ended (or was suspended) while its pods still hold GPUs
        (ledger_model.reconcile_drops), and the job's own watch stream can deliver its end before its
        pods' (separate streams): when such a pod ends, the group's pass runs again to free the GPUs,
        instead of waiting for the next resync."""
        phase = (obj.get("status") or {}).get("phase")
        if etype != "DELETED" and phase not in ("Succeeded", "Failed"):
            return
        key = job_key(obj)
        if not key:
            return
        found = False
        for resource in kinds.RESOURCES:
            job = self.watch.get(resource, key)
            found = found or job is not None
            # Ended, or suspended by a stop, a requeue or a preemption: its reservation waits for its pods.
            if job is not None and (
                ledger.is_finished(job)
                or ledger.is_suspended(job)
                or job["metadata"].get("deletionTimestamp")
            ):
                group = group_of(job)
                worker = self._groups.get(group) if group else None
                if worker is not None:
                    self._mark_for(worker, key)
                return
        if not found:
            # A deleted job's reservation waits for its pods too; which group it was of the pod does not
            # say, so every group of this process looks (a pass is coalesced, and a rare event).
            for worker in self._groups.values():
                self._mark_for(worker, key)

    def _on_ledger_event(self, etype: str, plural: str, obj: dict) -> None:
        meta = obj.get("metadata") or {}
        name = meta.get("name") or ""
        if not name.startswith(quota.ledger_name("")):
            return
        if self._ledger_changed is not None:
            changed, self._ledger_changed = self._ledger_changed, None
            changed.set()
        unit = name[len(quota.ledger_name("")) :]
        # A cohort's ledger holds several groups: every worker of one of them runs a pass. A version
        # this process wrote is already the worker's; another process's write is that process's to
        # follow up (it runs its own pass after its release or its admission): a backstop here.
        for worker in list(self._groups.values()):
            if self._units.get(worker.group, worker.group) == unit and (
                etype == "DELETED" or meta.get("resourceVersion") != worker.ledger_version
            ):
                worker.mark_later(BACKSTOP_SECONDS)

    async def _reap(self) -> None:
        """Stop when no trigger of this process follows a job of the watch any more."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(IDLE_SECONDS / 4)
            if self.watch.subscriber_count == 0 and loop.time() - self._last_use > IDLE_SECONDS:
                await self.close()
                return

    def _group_jobs(self, group: str) -> list[dict]:
        # A job Kueue admits is never the pool's: admitting, requeueing or charging it would fight Kueue.
        # One the pool handed to Kueue stays in view only so that it counts against its user's limits,
        # and one the pool's admission gate still holds (Kueue gave it a queue at creation) is the
        # pool's to judge. Read through the watch's index by group: a pass costs its group's jobs.
        return [
            job
            for job in self.watch.by_index(_BY_GROUP, group)
            if not kueue.manages(job) or kueue.gated_by_pool(job) or ledger.handed_to_kueue(job)
        ]

    def _status(self, worker: _GroupWorker, uid: str) -> QueueStatus | None:
        if worker.problem is not None:
            return QueueStatus(reason="Inadmissible", message=worker.problem)
        status = worker.statuses.get(uid)
        if status is None and worker.error is not None:
            return QueueStatus(reason="Pending", message=worker.error)
        return status

    async def _pass(self, worker: _GroupWorker) -> None:
        """One pass of a group, then the stuck-start checks, then the next timer."""
        assert self._policy is not None
        state = await self._policy.current()
        group = worker.group
        jobs = self._group_jobs(group)
        problem = state.problem
        if state.policy is not None:
            problem = await self._ledger_access_problem(state.policy.ledger_of(group))
        if state.policy is None or problem is not None:
            changed, worker.problem = worker.problem != problem, problem
            worker.decisions = {}
            worker.next_due = _now() + timedelta(seconds=RESYNC_SECONDS)
            for job in jobs:
                worker.seen[job["metadata"]["uid"]] = ledger.fingerprint(job)
                if changed:
                    _wake(self.watch, job["metadata"]["name"])
            return
        policy = state.policy
        had_problem, worker.problem = worker.problem, None
        # The groups of a cohort share one ledger, and one pass decides for all of them.
        unit = policy.ledger_of(group)
        members = policy.members(unit) if unit != group else ()
        self._units[group] = unit
        # A group that preempts chooses its victims by the nodes too (quota/preemption.py): read them.
        preempts = any(
            (q := policy.groups.get(g)) is not None and q.within_group is not preemption.WithinGroup.NEVER
            for g in members or (group,)
        )
        nodes = await self._nodes() if preempts else []
        outcome = await ledger.admission_pass(
            self.client,
            ledger_namespace=self.quota_namespace,
            group=unit,
            policy=policy,
            jobs=lambda: [job for g in members or (group,) for job in self._group_jobs(g)],
            hook=self.hook,
            rng=self._rng,
            cached=lambda: self._cached_ledger(unit, members),
            cached_after=lambda version: self._cached_ledger_after(unit, members, version),
            pods_of=self._pods_of,
            members=members,
            released=frozenset(self._released),
            placement_of=(
                # Every product pod of the namespace, other groups' too, takes room on its node.
                (
                    lambda fetched: placement.preemption_placement(
                        nodes, fetched, self._pods_of, self.watch.jobs(PODS)
                    )
                )
                if nodes
                else None
            ),
        )
        worker.ledger_version = outcome.stored.version
        self._absorb(outcome)
        metrics.emit(metrics.from_pass(outcome, policy, _now()))
        for drop in outcome.drops:
            self.job_log(drop.reservation.uid, logging.INFO, "%s", drop.message)
        if outcome.ledger.problems != worker.ledger_problems:
            worker.ledger_problems = outcome.ledger.problems
            for problem in outcome.ledger.problems:
                log.warning("quota ledger: %s (kept and not counted until an admin removes it)", problem)
        now = _now()
        due: list[datetime] = [now + timedelta(seconds=RESYNC_SECONDS)]
        if outcome.stale:
            due.append(now + timedelta(seconds=STALE_RETRY_SECONDS))
        if outcome.unsuspend_due is not None:
            due.append(outcome.unsuspend_due)
        due.extend(await self._check_stuck(outcome, policy, now))
        self._record(worker, outcome, policy, due, had_problem is not None)
        worker.next_due = min(due)

    def _pods_of(self, job: dict) -> list[dict] | None:
        """A job's pods as this process's watch holds them; ``None`` for a job outside its namespace."""
        meta = job.get("metadata") or {}
        if meta.get("namespace") != self.watch.namespace or not self.watch.synced:
            return None
        return self.watch.pods_of(meta.get("name") or "")

    def _cached_ledger(self, group: str, members: tuple[str, ...] = ()) -> ledger.StoredLedger | None:
        """The group's ledger as this process's ledger watch holds it; ``None`` before it has synced."""
        if self._ledgers is None or not self._ledgers.synced:
            return None
        configmap = self._ledgers.get(CONFIGMAPS, quota.ledger_name(group))
        return ledger.StoredLedger(quota.decode(group, (configmap or {}).get("data"), members), configmap)

    async def _cached_ledger_after(
        self, group: str, members: tuple[str, ...], version: str | None
    ) -> ledger.StoredLedger | None:
        """The group's ledger as the ledger watch holds it once that is not ``version`` (the cache only
        moves forward: newer), waiting up to LEDGER_CATCH_UP_SECONDS; ``None`` if it did not come."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LEDGER_CATCH_UP_SECONDS
        while True:
            stored = self._cached_ledger(group, members)
            if stored is None or stored.version != version:
                return stored
            remaining = deadline - loop.time()
            if remaining <= 0:
                return None
            if self._ledger_changed is None:
                self._ledger_changed = asyncio.Event()
            await wait_event(self._ledger_changed, remaining)

    def _absorb(self, outcome: ledger.PassOutcome) -> None:
        """Fold what the pass wrote into this process's caches: its next pass (and the triggers) see
        it at once instead of acting again on the versions the watches have not replaced yet."""
        written = outcome.stored.configmap if outcome.written else None
        if self._ledgers is not None and written is not None:
            if outcome.written_over is not None:
                self._ledgers.absorb(CONFIGMAPS, written, replaces=outcome.written_over)
            elif self._ledgers.get(CONFIGMAPS, written["metadata"]["name"]) is None:  # this pass created it
                self._ledgers.absorb(CONFIGMAPS, written)
        for read_version, job in outcome.patched:
            if (job.get("metadata") or {}).get("namespace") == self.watch.namespace:
                self.watch.absorb(ledger.resource_of(job), job, replaces=read_version)

    def _record(
        self,
        worker: _GroupWorker,
        outcome: ledger.PassOutcome,
        policy: quota.QuotaPolicy,
        due: list[datetime],
        force_wake: bool,
    ) -> None:
        decisions = {d.job.uid: d for d in outcome.decisions}
        statuses: dict[str, QueueStatus | None] = {}
        for uid, decision in decisions.items():
            # An admitted job stays suspended until the pass's unsuspend lands: say so meanwhile.
            statuses[uid] = QueueStatus(decision.reason, decision.position, decision.message)
            if decision.verdict is quota.Verdict.BACKING_OFF and decision.job.not_before is not None:
                due.append(decision.job.not_before)
            if decision.verdict.waiting:
                timeout = decision.job.queue_timeout or policy.requeue.queue_timeout
                if timeout is not None:
                    due.append(decision.job.queued_at + timeout)
        for uid, problem in outcome.view.unreadable.items():
            statuses[uid] = QueueStatus(reason="Inadmissible", message=problem)
        for uid, job in outcome.view.by_uid.items():
            worker.seen[uid] = ledger.fingerprint(job)
            if force_wake or statuses.get(uid) != worker.statuses.get(uid):
                _wake(self.watch, job["metadata"]["name"])
        for uid in set(worker.seen) - set(outcome.view.by_uid):
            del worker.seen[uid]
        worker.decisions = decisions
        worker.statuses = statuses

    async def _check_stuck(
        self, outcome: ledger.PassOutcome, policy: quota.QuotaPolicy, now: datetime
    ) -> list[datetime]:
        """Requeue admitted jobs whose pods missed their schedule deadline; the deadlines still ahead."""
        due: list[datetime] = []
        for uid, job in outcome.view.by_uid.items():
            if (
                ledger.is_suspended(job)
                or ledger.handed_to_kueue(job)  # Kueue's waitForPodsReady is its stuck-start rule
                or ledger.is_finished(job)
                or job["metadata"].get("deletionTimestamp")
                # Its pods are outside this process's view: the processes watching its namespace judge it.
                or job["metadata"].get("namespace") != self.watch.namespace
            ):
                continue
            reservation = outcome.ledger.find(uid)
            admitted_at = reservation.admitted_at if reservation is not None else ledger.admitted_at_of(job)
            if admitted_at is None:
                continue
            name = job["metadata"]["name"]
            if ledger.all_pods_scheduled(job, self.watch.pods_of(name)):
                continue
            try:
                settings = ledger.job_settings(job, policy.requeue)
            except ValueError as exc:
                self.job_log(uid, logging.WARNING, "job %s: %s; using the policy's limits", name, exc)
                settings = policy.requeue
            deadline = quota.schedule_deadline(admitted_at, settings.schedule_timeout)
            if deadline > now:
                due.append(deadline)
                continue
            coming = await self._node_coming(job)
            if coming is not None and coming > now:
                # An autoscaler is adding a node for its pods: waiting, not stuck.
                due.append(coming)
                continue
            unit = policy.ledger_of(group_of(job) or "")
            result = await ledger.requeue_stuck(
                self.client,
                job,
                ledger_namespace=self.quota_namespace,
                settings=settings,
                now=now,
                hook=self.hook,
                rng=self._rng,
                ledger_group=unit,
                members=policy.members(unit) if unit not in policy.groups else (),
            )
            if result is not None:
                self.job_log(
                    uid, logging.WARNING, "%s %s: %s", kinds.kind_of(job).resource.kind, name, result.message
                )
                metrics.emit(metrics.after_requeue(job, result))
            # The job changed (requeued, failed, or raced): the next pass sees the new state.
            due.append(now)
        return due

    async def _node_coming(self, job: dict) -> datetime | None:
        """Until when an autoscaler's node is waited for by ``job``'s unscheduled pods (their events)."""
        pending = [
            pod["metadata"]["name"]
            for pod in self.watch.pods_of(job["metadata"]["name"])
            if not (pod.get("spec") or {}).get("nodeName") and not pod["metadata"].get("deletionTimestamp")
        ]
        until: datetime | None = None
        for name in pending[:MAX_POD_EVENT_READS]:
            try:
                listing = await self.client.list(
                    EVENTS,
                    self.watch.namespace,
                    field_selector=f"involvedObject.kind=Pod,involvedObject.name={name}",
                )
            except KubeError as exc:
                log.info("cannot read the events of pod %s (%s): judged without them", name, exc)
                return None
            coming = placement.node_coming(listing.get("items") or [])
            if coming is None:
                return None  # one pod no node is coming for is enough to be stuck
            until = coming if until is None else min(until, coming)
        return until


async def shutdown() -> None:
    """Close every admission started on the running loop (tests, CLI, benchmarks)."""
    loop = asyncio.get_running_loop()
    for admission in list(_STARTED):
        if admission.loop is loop and not admission.closed:
            await admission.close()
