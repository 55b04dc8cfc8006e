"""The pool engine: the quota pool's admission, the step that turns a queued (suspended) job into a
running one when its group's quota allows.

Every job is created suspended so the queue is visible in the cluster; admitting it is unsuspending it.
A trigger asks its engine (engines/: this pool, Kueue, or unmanaged) and no other door; this one gates
the jobs of a quota pool: per process, per namespace and per group, one worker runs admission passes
(:func:`~airflow_jobs_plugin.queueing.quota.ledger.admission_pass`) whenever something that matters changed (a
job queued, finished, requeued or deleted, the group's ledger or the policy changed) and when a timer
is due (a back-off or a timeout expires, a periodic resync). Passes are coalesced: a thousand triggers
of one group waiting share every pass. A trigger asks :meth:`Admission.ensure` for its job's latest
decision and is woken when that decision changes. A job the pool hands to Kueue is the Kueue engine's
from then on.

The policy ConfigMap and the ledgers are read through watches of their own (one per process and quota
namespace), never polled per trigger.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from weakref import WeakKeyDictionary, WeakSet

from airflow_jobs_plugin import metrics
from airflow_jobs_plugin.cluster.kube import (
    CONFIGMAPS,
    EVENTS,
    PODS,
    KubeClient,
    KubeError,
    Resource,
)
from airflow_jobs_plugin.cluster.objects import Meta
from airflow_jobs_plugin.cluster.waiting import wait_event
from airflow_jobs_plugin.cluster.watch import MANAGED_SELECTOR, Scope, SharedWatch, job_key
from airflow_jobs_plugin.jobs import kinds, labels
from airflow_jobs_plugin.jobs.jobview import JobView
from airflow_jobs_plugin.lifecycle import QueueStatus
from airflow_jobs_plugin.queueing import kueue, kueue_cluster, quota
from airflow_jobs_plugin.queueing.engines.door import (
    ENSURE_WAIT_SECONDS,
    Door,
    ThroughTheDoor,
    detached,
    spawn,
)
from airflow_jobs_plugin.queueing.engines.kueue import KueueEngine
from airflow_jobs_plugin.queueing.engines.ruling import wake_after
from airflow_jobs_plugin.queueing.quota import ledger, placement, preemption
from airflow_jobs_plugin.queueing.quota.ledger import LedgerConflict
from airflow_jobs_plugin.queueing.quota.requeue import Requeue

log = logging.getLogger(__name__)

__all__ = ["Admission", "shutdown"]

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
# How long a ledger's write right, as SelfSubjectAccessReview answered it, is trusted; a refusal is
# asked again sooner, so a fixed Role takes effect within seconds.
LEDGER_ACCESS_TTL_SECONDS = 600.0
LEDGER_ACCESS_RETRY_SECONDS = 15.0
SELF_SUBJECT_ACCESS_REVIEWS = Resource(
    "authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", namespaced=False
)
# The most pods of one stuck job whose events are read to learn whether a node is coming for them.
MAX_POD_EVENT_READS = 4
# How long what those events said holds for a job. A pass runs on every change of its group (at
# start-up, many a second), and each would read the events again of every job waiting past its deadline
# for an autoscaler's node: a LIST per pod and pass, exactly when the API server is busiest, and no
# watch cache serves events (each is a range read of the namespace's events in etcd). Read at most this
# often per job instead; the node's own arrival (a pod scheduled) is seen at once by the pod watch.
NODE_EVENTS_TTL_SECONDS = 30.0
_STARTED: WeakSet[Admission] = WeakSet()


def requeue_metrics(job: dict, result: object) -> tuple[metrics.Metric, ...]:
    """A stuck start was handled: a requeue counts; a job failed at its requeue limit counts as an
    outcome when its trigger sees it end, not here."""
    if isinstance(result, Requeue):
        return (metrics.requeued(JobView(job).group, "ScheduleTimeout"),)
    return ()


def _now() -> datetime:
    return datetime.now(timezone.utc)


# The shared watch's index of the product's jobs by quota group (a pass reads one group's jobs).
_BY_GROUP = "quota-group"


def _group_index(plural: str, obj: dict) -> str | None:
    return JobView(obj).group if kinds.is_job_resource(plural) else None


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
        version = Meta(configmap).resource_version
        if self._state is not None and self._state.version == version:
            return self._state
        async with self._parsing:  # one parse per version, however many groups' passes ask at once
            if self._state is not None and self._state.version == version:
                return self._state
            try:
                # In a thread: a policy near its size limit takes seconds to read, and the triggerer's
                # event loop follows every job meanwhile (quota.parse.MAX_POLICY_BYTES).
                parsed = await asyncio.to_thread(quota.policy_from_configmap_data, configmap.get("data"))
                state = _PolicyState(parsed, None, version)
            except quota.PolicyError as exc:
                state = _PolicyState(None, f"the quota policy ConfigMap {where} is invalid: {exc}", version)
                log.error("%s", state.problem)
            self._state = state
            return state


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
        self.task = spawn(self._run(), f"ajp-admission-{group}")

    def mark(self) -> None:
        self._dirty.set()

    def mark_later(self, delay: float) -> None:
        """Run a pass ``delay`` from now (one pending backstop covers every change until it fires)."""
        if self._backstop is None:
            self._backstop = asyncio.get_running_loop().call_later(
                delay, self._backstop_due, context=detached()
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


class Admission(ThroughTheDoor):
    """Admission for the jobs of one shared watch (one namespace of one cluster) under one policy."""

    _registry: WeakKeyDictionary[SharedWatch, dict[tuple[str | None, str], Admission]] = WeakKeyDictionary()

    direct = False  # ``ensure``'s None says nothing of an admission: the pool's passes admit

    def __init__(self, watch: SharedWatch, quota_configmap: str, quota_namespace: str | None):
        self.watch = watch
        self.client: KubeClient = watch.client
        self.door = Door(watch)
        # A job the pool hands to Kueue (or that a Kueue took without the pool's gate) is Kueue's.
        self.kueue = KueueEngine(watch, self.door)
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
        self._remove_listener: Callable[[], None] | None = None
        self._reaper: asyncio.Task | None = None
        self._last_use = 0.0
        self._rng = random.Random()
        # Job uid -> (when read, until when a node is coming for it): _node_coming's last answer.
        self._node_reads: dict[str, tuple[float, datetime | None]] = {}
        # Per ledger: until when the answer holds, and why it may not be written (None: it may).
        self._ledger_access: dict[str, tuple[float, str | None]] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.closed = False
        # Where the statuses of each pass go, by ledger unit (the admission controller publishes them on
        # the unit's queue board: queueing/board.py); None in a process that publishes nothing.
        self.board_sink: Callable[[str, Mapping[str, QueueStatus]], None] | None = None

    @classmethod
    def for_watch(
        cls, watch: SharedWatch, *, quota_configmap: str, quota_namespace: str | None = None
    ) -> Admission:
        """The process's admission for ``watch`` and this policy (one per watch and policy)."""
        by_policy = cls._registry.setdefault(watch, {})
        key = (quota_configmap, quota_namespace or watch.namespace)
        existing = by_policy.get(key)
        if existing is None:
            existing = cls(watch, quota_configmap, quota_namespace)
            by_policy[key] = existing
        return existing

    # --- the trigger's interface ---

    async def ensure(self, job: dict) -> QueueStatus | None:
        """Called while ``job`` is suspended: say why it waits, or ``None`` once it is ruled on.

        The group's pass admits it; this returns the latest decision for the job (reason, position,
        message), waiting for a pass first if no pass has judged this version of the job yet; ``None``
        if no pass has seen the job.
        """
        view = JobView(job)
        self._follow(view.uid)
        if view.verdict:
            return None
        if kueue.manages(job) and not kueue.gated_by_pool(job):
            # Kueue admits it; the product only reports what Kueue says (see kueue.py: never fight).
            # A job the pool still gates (Kueue gave it its `default` LocalQueue at creation) is the
            # pool's to judge first, below.
            return await self.kueue.ensure(job)
        ruling = await self.door.ruling_before_queue(job, pooled=True)
        if ruling is not None:
            await self.door.rule(job, ruling.reason, ruling.message)
            return None
        group = view.group
        if not group:
            return QueueStatus(
                reason="Inadmissible",
                message=f"the job has no {labels.GROUP_NAME} annotation: the quota pool cannot place it in a queue",
            )
        worker = self._worker(group)
        uid = view.uid
        if worker.seen.get(uid) != ledger.fingerprint(job):
            await worker.wait_pass(ENSURE_WAIT_SECONDS)
        return self._status(worker, uid)

    def wake_after(self, job: dict, default: float) -> float:
        """How long a trigger may sleep before it must look again even without a watch event.

        This also makes sure the job's group has a worker in this process, so a
        trigger rebuilt while its job already runs still gets its schedule deadline watched.
        """
        view = JobView(job)
        group = view.group
        if group:
            self._follow(view.uid)
            self._worker(group)
        return wake_after(job, default, _now())

    async def release(self, job: dict) -> None:
        """A job reached its end: give its GPUs back and let the next jobs of its group start.

        Whatever its pods still hold (pods stranded on a lost node would keep the quota for as long as
        the node is away), in one write with the admissions the freed GPUs allow: the group's next pass
        in this process drops the reservation as released. Usually the pass has dropped it already (the
        job's end wakes it at once, while the trigger reads the pods before it decides), and nothing
        is asked of the API server. Only if that pass could not (it failed, or the ledger watch lags)
        does the release write the ledger itself."""
        view = JobView(job)
        group, uid = view.group, view.uid
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
            await self._release_in_ledger(group, uid, view.name)
            worker.mark()
        # Its trigger is done with it: a later pass's line about it goes to the triggerer's own log.
        self._job_contexts.pop(uid, None)

    def _deleted_with_pods(self, job: dict) -> bool:
        """A job deleted or being deleted whose pods, as this process's watch holds them, still hold GPUs."""
        current = self.watch.get(ledger.resource_of(job), JobView(job).name)
        deleted = current is None or JobView(current).deleting
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

    def reserved_gpus(self, uid: str) -> int | None:
        """The GPUs the latest pass reserved for job ``uid`` (``None``: no pass decided on it)."""
        found = self.decision(uid)
        return None if found is None else found.job.gpus

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
            )
            if watch is not None
        ]
        if stops:
            await asyncio.wait(stops, timeout=5)
        self._policy = self._ledgers = self._remove_listener = self._reaper = None
        await self.kueue.close()

    # --- internals ---

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
        self._reaper = spawn(self._reap(), "ajp-admission-reaper")

    def _worker(self, group: str) -> _GroupWorker:
        self._last_use = asyncio.get_running_loop().time()
        # The policy's and the ledgers' watches are the pool's, not the first calling trigger's.
        detached().run(self._start)
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
        view = JobView(obj)
        group = view.group
        worker = self._groups.get(group) if group else None
        if worker is None:
            return
        uid = view.uid
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
            if job is None:
                continue
            found = True
            view = JobView(job)
            # Ended, or suspended by a stop, a requeue or a preemption: its reservation waits for its pods.
            if view.finished or view.suspended or view.deleting:
                group = view.group
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
        meta = Meta(obj)
        name = meta.name
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
                etype == "DELETED" or meta.resource_version != worker.ledger_version
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
                view = JobView(job)
                worker.seen[view.uid] = ledger.fingerprint(job)
                if changed:
                    _wake(self.watch, view.name)
            if self.board_sink is not None and problem is not None:
                inadmissible = QueueStatus(reason="Inadmissible", message=problem)
                unit = self._units.get(group, group)
                self.board_sink(unit, {JobView(job).uid: inadmissible for job in jobs if JobView(job).uid})
            return
        policy = state.policy
        had_problem, worker.problem = worker.problem, None
        # The groups of a cohort share one ledger, and one pass decides for all of them.
        unit = policy.ledger_of(group)
        members = policy.members(unit) if unit != group else ()
        self._units[group] = unit
        # A group that preempts chooses its victims by the nodes too (queueing/quota/preemption.py): read them.
        preempts = any(
            (q := policy.groups.get(g)) is not None and q.within_group is not preemption.WithinGroup.NEVER
            for g in members or (group,)
        )
        nodes = await self.door.nodes() if preempts else []
        held = await self._kueue_holds([job for g in members or (group,) for job in self._group_jobs(g)])
        outcome = await ledger.admission_pass(
            self.client,
            ledger_namespace=self.quota_namespace,
            group=unit,
            policy=policy,
            jobs=lambda: [
                job
                for g in members or (group,)
                for job in self._group_jobs(g)
                if JobView(job).uid not in held
            ],
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
        self._record(worker, outcome, policy, due, had_problem is not None, held)
        worker.next_due = min(due)

    async def _kueue_holds(self, jobs: list[dict]) -> dict[str, tuple[dict, str]]:
        """The waiting jobs of a pass that are for Kueue but whose LocalQueue may not take them now (it
        does not exist, or is not active), each with why: they stay out of the pass, charged to no one,
        until it may (kueue.local_queue_problem). Whether Kueue takes a job that names no queue is read
        from Kueue's configuration here; a Workload made for it is looked for only at its admission."""
        held: dict[str, tuple[dict, str]] = {}
        for job in jobs:
            view = JobView(job)
            if not (view.suspended and kueue.gated_by_pool(job)) or view.verdict or view.stopped:
                continue
            requested = view.annotations.get(labels.KUEUE_HANDOFF)
            if not (
                requested or kueue.manages(job) or await kueue_cluster.configured_to_take(self.client, job)
            ):
                continue
            problem = await self.kueue.queue_problem(kueue.handoff_queue(job, requested))
            if problem is not None:
                held[view.uid] = (job, problem)
        return held

    def _pods_of(self, job: dict) -> list[dict] | None:
        """A job's pods as this process's watch holds them; ``None`` for a job outside its namespace."""
        view = JobView(job)
        if view.namespace != self.watch.namespace or not self.watch.synced:
            return None
        return self.watch.pods_of(view.name)

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
            elif self._ledgers.get(CONFIGMAPS, Meta(written).name) is None:  # this pass created it
                self._ledgers.absorb(CONFIGMAPS, written)
        for read_version, job in outcome.patched:
            if JobView(job).namespace == self.watch.namespace:
                self.watch.absorb(ledger.resource_of(job), job, replaces=read_version)

    def _record(
        self,
        worker: _GroupWorker,
        outcome: ledger.PassOutcome,
        policy: quota.QuotaPolicy,
        due: list[datetime],
        force_wake: bool,
        held: Mapping[str, tuple[dict, str]] | None = None,
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
        for uid, (job, problem) in (held or {}).items():
            statuses[uid] = QueueStatus(reason="Inadmissible", message=problem)
            worker.seen[uid] = ledger.fingerprint(job)
            if force_wake or statuses[uid] != worker.statuses.get(uid):
                _wake(self.watch, JobView(job).name)
        for uid, job in outcome.view.by_uid.items():
            worker.seen[uid] = ledger.fingerprint(job)
            if force_wake or statuses.get(uid) != worker.statuses.get(uid):
                _wake(self.watch, JobView(job).name)
        for uid in set(worker.seen) - set(outcome.view.by_uid) - set(held or {}):
            del worker.seen[uid]
        worker.decisions = decisions
        worker.statuses = statuses
        if self.board_sink is not None:
            unit = self._units.get(worker.group, worker.group)
            self.board_sink(unit, {uid: status for uid, status in statuses.items() if status is not None})

    async def _check_stuck(
        self, outcome: ledger.PassOutcome, policy: quota.QuotaPolicy, now: datetime
    ) -> list[datetime]:
        """Requeue admitted jobs whose pods missed their schedule deadline; the deadlines still ahead."""
        due: list[datetime] = []
        for uid, job in outcome.view.by_uid.items():
            view = JobView(job)
            if (
                view.suspended
                or ledger.handed_to_kueue(job)  # Kueue's waitForPodsReady is its stuck-start rule
                or view.finished
                or view.deleting
                # Its pods are outside this process's view: the processes watching its namespace judge it.
                or view.namespace != self.watch.namespace
            ):
                continue
            reservation = outcome.ledger.find(uid)
            admitted_at = reservation.admitted_at if reservation is not None else view.admitted_at
            if admitted_at is None:
                continue
            name = view.name
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
            unit = policy.ledger_of(view.group or "")
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
                metrics.emit(requeue_metrics(job, result))
            # The job changed (requeued, failed, or raced): the next pass sees the new state.
            due.append(now)
        return due

    async def _node_coming(self, job: dict) -> datetime | None:
        """Until when an autoscaler's node is waited for by ``job``'s unscheduled pods (their events),
        read at most every NODE_EVENTS_TTL_SECONDS per job."""
        uid = JobView(job).uid
        clock = asyncio.get_running_loop().time()
        known = self._node_reads.get(uid)
        if known is not None and clock - known[0] < NODE_EVENTS_TTL_SECONDS:
            return known[1]
        try:
            until = await self._read_node_coming(job)
        except KubeError as exc:
            log.info("cannot read the events of %s's pods (%s): judged without them", JobView(job).name, exc)
            return None  # not kept: the next pass reads again
        # Forget the jobs that left the pass's view (requeued, ended): only those still stuck are kept.
        for old in [k for k, (at, _) in self._node_reads.items() if clock - at >= NODE_EVENTS_TTL_SECONDS]:
            del self._node_reads[old]
        self._node_reads[uid] = (clock, until)
        return until

    async def _read_node_coming(self, job: dict) -> datetime | None:
        pending = [
            Meta(pod).name
            for pod in self.watch.pods_of(JobView(job).name)
            if not (pod.get("spec") or {}).get("nodeName") and not Meta(pod).deleting
        ]
        until: datetime | None = None
        for name in pending[:MAX_POD_EVENT_READS]:
            listing = await self.client.list(
                EVENTS,
                self.watch.namespace,
                field_selector=f"involvedObject.kind=Pod,involvedObject.name={name}",
            )
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
