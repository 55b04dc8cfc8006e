"""Reading the product's jobs on the cluster for the UI and the CLI, and acting on them by name.

The I/O half of the GPU Jobs views: the Jobs, MPIJobs, pods and events of one or several namespaces,
the quota policy and every group's ledger, read with a handful of LISTs per namespace into a
:class:`~airflow_jobs_plugin.readmodel.views.ClusterState` that the pure builders of
:mod:`airflow_jobs_plugin.readmodel.views` turn into pages and tables. The state indexes its pods and
events by job once (:class:`~airflow_jobs_plugin.lifecycle.owners.OwnerIndex`), so building every
job's snapshot costs time linear in the objects read, not their square.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from airflow_jobs_plugin.cluster.kube import (
    CONFIGMAPS,
    EVENTS,
    JOBS,
    LEASES,
    NODES,
    PENDING_IN_LOCAL_QUEUES,
    PODS,
    WORKLOADS,
    KubeClient,
    KubeError,
    Resource,
)
from airflow_jobs_plugin.cluster.objects import Meta, time_text
from airflow_jobs_plugin.jobs import attempts, kinds, labels
from airflow_jobs_plugin.jobs.jobview import JobView
from airflow_jobs_plugin.jobs.labels import MANAGED_SELECTOR
from airflow_jobs_plugin.jobs.spec import TaskIdentity, split_attempt
from airflow_jobs_plugin.lifecycle.owners import OwnerIndex
from airflow_jobs_plugin.lifecycle.replicas import _CREATED_POD, disrupted_pod
from airflow_jobs_plugin.queueing import kueue, quota
from airflow_jobs_plugin.queueing.quota.fair_share import UsageHistory
from airflow_jobs_plugin.queueing.quota.ledger import is_product_job
from airflow_jobs_plugin.queueing.quota.ledger_model import LEDGER_NAME_PREFIX
from airflow_jobs_plugin.readmodel import listing
from airflow_jobs_plugin.readmodel.views import (
    ClusterState,
    JobChange,
    LogTail,
    log_targets,
    may_be_waiting,
    may_have_a_position,
)

if TYPE_CHECKING:
    # ``airflow-jobs status`` reads jobs and needs neither (imported where they are used).
    from airflow_jobs_plugin.readmodel import nodes as node_view
    from airflow_jobs_plugin.usecases.actions import ActionOutcome, CancelOutcome

LOG_TAIL_LINES = 50


@dataclass(frozen=True)
class Target:
    """Where to look: the namespace of the jobs (and any more to read with it, ``also``), and the
    quota policy's ConfigMap (if any). One quota pool serves them all, as one admission pass does."""

    namespace: str = "default"
    quota_configmap: str | None = quota.DEFAULT_POLICY_CONFIGMAP
    quota_namespace: str | None = None
    also: tuple[str, ...] = ()

    @property
    def ledger_namespace(self) -> str:
        return self.quota_namespace or self.namespace

    @property
    def namespaces(self) -> tuple[str, ...]:
        """Every namespace to read, ``namespace`` first, each once."""
        return tuple(dict.fromkeys((self.namespace, *self.also)))


class JobNotFound(LookupError):
    """No product job of that name (or for that task instance) in the namespace."""


def _now() -> datetime:
    return datetime.now(timezone.utc)


# Objects per LIST request: a namespace keeping 50,000 jobs answers a LIST of 300 MB in one body, and
# decoding it is one C call holding the GIL for seconds, which would stall the API server's event loop
# even from a worker thread. In chunks of 500 (kubectl's default, staging/src/k8s.io/kubectl/pkg/cmd/get
# /get.go, Kubernetes 1.32), every decode is short. The API server serves all chunks of one list from the
# same resourceVersion (apiserver pagination, KEP-365), so the chunks form one consistent list.
LIST_CHUNK = 500
# ``airflow-jobs status`` is a process of its own with no loop to keep answering: it reads in larger
# chunks, each a round trip fewer (17,100 events: 4 requests instead of 35; the last day's 2,000 jobs'
# metadata: 1 instead of 4, each waited for before the next is asked). The API server's first page
# (the same read, in a worker thread) too: it is waited for by a person, chunk after chunk.
STATUS_CHUNK = 5000


async def _items(
    client: KubeClient,
    resource: Resource,
    namespace: str,
    selector: str | None = None,
    *,
    metadata_only: bool = False,
    chunk: int = LIST_CHUNK,
    field_selector: str | None = None,
) -> list:
    items: list = []
    token: str | None = None
    while True:
        found = await client.list(
            resource,
            namespace,
            label_selector=selector,
            field_selector=field_selector,
            limit=chunk,
            continue_token=token,
            metadata_only=metadata_only,
        )
        items.extend(found.get("items") or [])
        token = Meta(found).continue_token
        if token is None:
            break
    if metadata_only:
        # Each item says PartialObjectMetadata: the readers of a job's metadata (its kind adapter, its
        # group and user) are told what the object is, as for a whole one.
        return [
            {"kind": resource.kind, "apiVersion": resource.api_version, "metadata": Meta(i).fields}
            for i in items
        ]
    # A LIST leaves out each built-in item's kind and apiVersion; the pages and the JSON show them as a
    # GET would.
    for item in items:
        item.setdefault("kind", resource.kind)
        item.setdefault("apiVersion", resource.api_version)
    return items


async def _jobs_of(
    client: KubeClient,
    resource: Resource,
    namespace: str,
    selector: str | None = None,
    *,
    metadata_only: bool = False,
    chunk: int = LIST_CHUNK,
) -> list:
    """The objects of one kind's resource, or none where the cluster does not serve it (a custom
    resource whose operator is not installed: ``kinds.may_be_absent``)."""
    try:
        return await _items(client, resource, namespace, selector, metadata_only=metadata_only, chunk=chunk)
    except KubeError as exc:
        if exc.not_found and kinds.may_be_absent(resource):
            return []
        raise


async def _workloads(client: KubeClient, namespace: str) -> tuple[list, str | None]:
    """Kueue's Workloads of a namespace; none where the cluster serves no Kueue API, and the reason
    where they cannot be read (a Role without ``list`` on ``workloads.kueue.x-k8s.io``)."""
    try:
        return await _items(client, WORKLOADS, namespace), None
    except KubeError as exc:
        if exc.not_found:
            return [], None
        return [], f"Kueue's Workloads of namespace {namespace} cannot be read: {exc}"


async def _kueue_positions(
    client: KubeClient, workloads: Mapping[str, Mapping[str, Any]]
) -> dict[tuple[str, str], kueue.PendingPosition]:
    """The positions of the pending Workloads, one read of Kueue's visibility API per LocalQueue that
    has any; none for a queue it does not answer about (not served, not granted: the jobs then show
    no position, as without Kueue's visibility server)."""
    queues = set()
    for workload in workloads.values():
        status = kueue.queue_status({}, workload)
        if kueue.waits_in_queue(status):
            queues.add((Meta(workload).namespace, kueue.workload_view(workload).queue))

    async def read(namespace: str, queue: str) -> dict[tuple[str, str], kueue.PendingPosition]:
        try:
            summary = await client.get_subresource(
                PENDING_IN_LOCAL_QUEUES, namespace, queue, "pendingworkloads"
            )
        except KubeError:
            return {}
        return {(namespace, name): place for name, place in kueue.pending_positions(summary).items()}

    found: dict[tuple[str, str], kueue.PendingPosition] = {}
    for part in await asyncio.gather(*(read(ns, q) for ns, q in sorted(queues) if ns and q)):
        found.update(part)
    return found


# Pods that may hold GPUs: the scheduler frees a pod's resources when it ends.
LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"


async def read_nodes(client: KubeClient, target: Target) -> node_view.NodeView:
    from airflow_jobs_plugin.readmodel import nodes as node_view

    """The node view: every node with GPUs and the live pods of every namespace holding them.

    Without ``list`` on pods cluster-wide (the api-server's ClusterRole in helm-values/rbac.yaml grants
    it) only the pods of ``target``'s namespaces are counted, and the view says so: other workloads'
    GPUs then read as free."""
    try:
        nodes = (await client.list(NODES, "")).get("items") or []
    except KubeError as exc:
        return node_view.NodeView((), 0, 0, 0, f"the cluster's nodes cannot be read: {exc}")
    problem = None
    try:
        pods = (await client.list(PODS, "", field_selector=LIVE_PODS)).get("items") or []
    except KubeError as exc:
        if exc.status != 403:
            raise
        pods = _joined(
            await asyncio.gather(*(_items(client, PODS, ns, MANAGED_SELECTOR) for ns in target.namespaces))
        )
        problem = (
            f"pods outside {', '.join(target.namespaces)} cannot be read ({exc.message}): only GPU jobs "
            "of those namespaces are counted"
        )
    return node_view.node_view(nodes, pods, problem)


async def read_policy(client: KubeClient, target: Target) -> tuple[quota.QuotaPolicy | None, str | None]:
    """The quota policy, or ``None`` with the reason (not configured, missing, invalid)."""
    if not target.quota_configmap:
        return None, None
    configmap = await client.get_or_none(CONFIGMAPS, target.ledger_namespace, target.quota_configmap)
    if configmap is None:
        return None, (
            f"no quota policy: ConfigMap {target.ledger_namespace}/{target.quota_configmap} does not exist"
        )
    try:
        # In a thread: a large policy takes seconds to read (quota.parse.MAX_POLICY_BYTES).
        return await asyncio.to_thread(quota.policy_from_configmap_data, configmap.get("data")), None
    except quota.PolicyError as exc:
        return None, str(exc)


async def read_ledgers(
    client: KubeClient, target: Target
) -> tuple[dict[str, quota.Ledger], dict[str, UsageHistory]]:
    """Every group's reservations in the quota namespace, by group, from the ledger ConfigMaps
    (``airflow-jobs-quota-<group>``, or ``-<cohort>`` for the groups of a cohort, which share one), and
    the usage histories the ledgers of ``fair_share`` groups keep, by ledger name (a cohort's is one
    history for all its groups, so it cannot be split by group without the policy)."""
    found: dict[str, list[quota.Reservation]] = {}
    unreadable: dict[str, list[quota.UnreadableEntry]] = {}
    histories: dict[str, UsageHistory] = {}
    seen: set[str] = set()
    for configmap in sorted(
        await _items(client, CONFIGMAPS, target.ledger_namespace),
        key=lambda c: Meta(c).name,
    ):
        name = Meta(configmap).name
        if not name.startswith(LEDGER_NAME_PREFIX) or name == target.quota_configmap:
            continue
        unit = name[len(LEDGER_NAME_PREFIX) :]
        if quota.ledger_name(unit) != name:
            continue
        ledger = quota.decode(unit, configmap.get("data"), members=None)
        unreadable.setdefault(unit, []).extend(ledger.unreadable)
        if ledger.usage.at is not None:
            histories[unit] = ledger.usage
        for r in ledger.reservations:
            if r.uid not in seen:
                seen.add(r.uid)
                found.setdefault(r.group, []).append(r)
    ledgers = {
        group: quota.Ledger(group, tuple(found.get(group, ())), tuple(unreadable.get(group, ())))
        for group in sorted(set(found) | set(unreadable))
    }
    return ledgers, histories


def _joined(lists: Sequence[list]) -> list:
    return [item for found in lists for item in found]


async def read_cluster(client: KubeClient, target: Target) -> ClusterState:
    """Everything the overview needs, over every namespace of ``target``: pods (with events, policy
    and ledgers) first, then the jobs.

    The jobs are listed after their pods, never alongside: each job is then at least as new as its
    pods, so a pod can never show a resume or a start its job does not show yet, and anything the job
    knows that its pods do not is the job's own word (its conditions and counts), which the lifecycle
    rules read first. Two LISTs in parallel answer at unrelated versions.
    """
    spaces = target.namespaces
    pods, events, (policy, problem), (ledgers, histories), workloads = await asyncio.gather(
        asyncio.gather(*(_items(client, PODS, ns, MANAGED_SELECTOR) for ns in spaces)),
        asyncio.gather(*(_items(client, EVENTS, ns) for ns in spaces)),
        read_policy(client, target),
        read_ledgers(client, target),
        asyncio.gather(*(_workloads(client, ns) for ns in spaces)),
    )
    jobs = _joined(await asyncio.gather(*(read_jobs(client, ns) for ns in spaces)))
    return await _state(
        client, jobs, _joined(pods), _joined(events), (policy, problem), (ledgers, histories), workloads
    )


async def _state(
    client: KubeClient,
    jobs: Sequence[dict],
    pods: Sequence[dict],
    events: Sequence[dict],
    policy_read: tuple[quota.QuotaPolicy | None, str | None],
    ledgers_read: tuple[dict[str, quota.Ledger], dict[str, UsageHistory]],
    workloads: Sequence[tuple[list, str | None]],
) -> ClusterState:
    """The cluster state of what was read, with Kueue's pending positions of its Workloads."""
    (policy, problem), (ledgers, histories) = policy_read, ledgers_read
    by_uid = kueue.by_job_uid(_joined([found for found, _ in workloads]))
    return ClusterState(
        jobs=tuple(jobs),
        pods=tuple(pods),
        events=tuple(events),
        now=_now(),
        policy=policy,
        policy_problem=problem,
        ledgers=ledgers,
        usage_histories=histories,
        workloads=by_uid,
        workloads_problem=next((why for _, why in workloads if why), None),
        kueue_positions=await _kueue_positions(client, by_uid),
    )


# Job names per pod LIST of :func:`read_status`: a selector of 100 names is a URL of a few kilobytes.
NAMES_PER_SELECTOR = 100
# Whole jobs read at once by :func:`read_status` (one GET each).
PARALLEL_GETS = 16


@dataclass(frozen=True)
class StatusRead:
    """What ``airflow-jobs status`` shows, read for one query: the jobs of its page and every job that
    may wait in the pool's queue, whole, with their pods and the namespaces' events, policy, ledgers
    and Workloads (``state``); the page's jobs in order (``page``, namespace and name) and how many jobs
    match the query's filters (``total``)."""

    state: ClusterState
    page: tuple[tuple[str, str], ...]
    total: int | None  # None: only the newest jobs were read (listing.creation_windows)


async def read_status(
    client: KubeClient, target: Target, query: listing.JobQuery, *, chunk: int = LIST_CHUNK
) -> StatusRead:
    """The cluster state ``status`` needs for ``query`` (one that :func:`listing.by_metadata` answers),
    reading the finished history as metadata only.

    A namespace keeping 50,000 finished jobs holds 540 MB of jobs, pods and events; the page shows 100
    jobs, and pools and queues depend only on the ledgers and the jobs waiting in the queue. So every
    job is listed as metadata only (``PartialObjectMetadataList``), which is enough to count, filter and
    order them (:func:`listing.pick_page`) and to know which may wait (:func:`may_be_waiting`); only
    those and the page's jobs are then read whole, with their own pods. Events are read whole: the API
    server keeps them an hour (``--event-ttl``), so they follow the activity, not the history.

    Pods and events are read before the whole jobs, as :func:`read_cluster` orders them, so a pod never
    shows a start its job does not. LISTs come in chunks of ``chunk`` objects (:data:`STATUS_CHUNK` for
    the CLI, a process of its own).
    """
    spaces = target.namespaces
    (every, waiting, complete), (policy, problem), (ledgers, histories), workloads = await asyncio.gather(
        _jobs_for_page(client, spaces, query, chunk),
        read_policy(client, target),
        read_ledgers(client, target),
        asyncio.gather(*(_workloads(client, ns) for ns in spaces)),
    )
    page, counted = listing.pick_page(every, query)
    chosen = {_key(j): j for j in [*page, *(j for j in waiting if may_be_waiting(j))]}
    pods, events = await asyncio.gather(
        _pods_of_jobs(client, list(chosen.values())),
        asyncio.gather(*(_items(client, EVENTS, ns, chunk=chunk) for ns in spaces)),
    )
    limit = asyncio.Semaphore(PARALLEL_GETS)

    async def whole(job: Mapping[str, Any]) -> dict | None:
        namespace, name = _key(job)
        async with limit:
            found = await client.get_or_none(kinds.kind_of(job).resource, namespace, name)
        if found is not None:
            found.setdefault("kind", job["kind"])
            found.setdefault("apiVersion", job["apiVersion"])
        return found

    # The jobs that may wait come whole in one LIST per namespace and kind (read after the pods, as
    # above), not one GET each; a job admitted since the metadata was read has left that list and is
    # read by name with the page's other jobs.
    # The page's jobs come the same way when they are the newest (the default order): one LIST of the
    # jobs created since the oldest of them, when the metadata says it holds few others, instead of a
    # GET each (100 requests).
    lists = [f"!{labels.ADMITTED}"] if any(may_be_waiting(j) for j in waiting) else []
    newest = page_selector(page, every)
    if newest is not None:
        lists.append(newest)
    read: dict[tuple[str, str], dict] = {}
    for found in await asyncio.gather(*(_jobs_whole(client, spaces, sel, chunk) for sel in lists)):
        for job in found:
            if _key(job) in chosen:
                read[_key(job)] = job
    rest = [j for k, j in chosen.items() if k not in read]
    jobs = [*read.values(), *(j for j in await asyncio.gather(*(whole(j) for j in rest)) if j is not None)]
    state = await _state(
        client, jobs, pods, _joined(events), (policy, problem), (ledgers, histories), workloads
    )
    return StatusRead(state, tuple(_key(j) for j in page), counted if complete else None)


# Jobs beyond the page that :func:`page_selector` lets one LIST bring, rather than a GET per page job.
PAGE_LIST_SLACK = 100


def page_selector(page: Sequence[Mapping[str, Any]], every: Iterable[Mapping[str, Any]]) -> str | None:
    """The label selector listing ``page``'s jobs (metadata) whole in one LIST per kind: every job whose
    ``created`` label is at least the page's oldest, if ``every`` (the metadata the page was chosen from,
    which holds every job of that range: each window read is complete) names at most
    :data:`PAGE_LIST_SLACK` other jobs there; ``None`` when a page job carries no such label or the
    range holds more (a filter leaving out most jobs), so its jobs are read by name."""
    values = [_created(j) for j in page]
    if not values or any(v is None for v in values):
        return None
    low = min(v for v in values if v is not None)
    listed = sum(1 for j in every if (v := _created(j)) is not None and v >= low)
    if listed > len(values) + PAGE_LIST_SLACK:
        return None
    return f"{labels.CREATED}>{low - 1}"


def _created(job: Mapping[str, Any]) -> int | None:
    value = str(Meta(job).labels.get(labels.CREATED) or "")
    return int(value) if value.isdigit() else None


async def read_around_job(
    client: KubeClient, target: Target, job: Mapping[str, Any], attempts: Sequence[Mapping[str, Any]] = ()
) -> ClusterState:
    """What a job's page reads besides the job when no index of the namespace is at hand (the server
    has just started, or the namespace is not one it keeps, or ``airflow-jobs describe``): the pods of
    the job and of ``attempts`` (its task try's other attempts, :func:`attempts_of`), the events about
    them, the job's own Kueue Workload, policy and ledgers; and only if the job may have a place in the
    pool's queue, the jobs that may wait with it (whole: its position) and the jobs the ledgers hold
    GPUs for (as a pass observes them). Never the namespace's history: what it reads grows with the
    job's pods, the queue and the pool's reservations, not with the jobs the namespace keeps.

    Pods and events are read before the waiting jobs, as :func:`read_cluster` orders them."""
    own = Meta(job).uid
    others = [dict(a) for a in attempts if Meta(a).uid != own]
    pods, policy_read, ledgers_read, workload = await asyncio.gather(
        _pods_of_jobs(client, [job, *others]),
        read_policy(client, target),
        read_ledgers(client, target),
        _workload_of(client, job),
    )
    events = await events_about(client, [job, *others], pods)
    # As the index keeps them: the waiting jobs only, the job itself as just read if it waits too. The
    # queue is read only for a job that may have a place in it (its position); a running, finished or
    # stopped job's page reads nothing of it (3,000 waiting jobs whole took the page after a Stop
    # seconds: a stop removes ``admitted-at``, but a stopped job has no position).
    waiting: list[dict] = []
    reserved: list[dict] = []
    if may_have_a_position(job):
        waiting, reserved = await asyncio.gather(
            _jobs_whole(client, target.namespaces, f"!{labels.ADMITTED}"),
            _reserved_jobs(client, ledgers_read[0].values()),
        )
        # A pass sees the reserved jobs with their pods (a job ended keeps its GPUs while they stop).
        pods = [*pods, *await _pods_of_jobs(client, reserved)]
    jobs = {_key(j): j for j in [*waiting, dict(job)] if may_be_waiting(j)}
    for other in [*reserved, *others]:
        jobs.setdefault(_key(other), other)
    return await _state(
        client, list(jobs.values()), _unique(pods), events, policy_read, ledgers_read, [workload]
    )


def _unique(objects: Iterable[Mapping[str, Any]]) -> list:
    """Each object once (by namespace and name), in the order first given."""
    return list({_key(o): o for o in reversed(list(objects))}.values())[::-1]


async def _workload_of(client: KubeClient, job: Mapping[str, Any]) -> tuple[list, str | None]:
    """The Kueue Workload made for ``job`` (by Kueue's job-uid label), as :func:`_workloads` reads a
    namespace's: none where the cluster serves no Kueue API, the reason where it cannot be read."""
    meta = Meta(job)
    try:
        return await _items(client, WORKLOADS, meta.namespace, f"{kueue.JOB_UID_LABEL}={meta.uid}"), None
    except KubeError as exc:
        if exc.not_found:
            return [], None
        return [], f"Kueue's Workloads of namespace {meta.namespace} cannot be read: {exc}"


async def _reserved_jobs(client: KubeClient, ledgers: Iterable[quota.Ledger]) -> list[dict]:
    """The jobs the ledgers hold reservations for, read by name (a handful of GETs each, at most
    :data:`PARALLEL_GETS` at once): the pool's running jobs, never its history. A job gone, or another
    job by that name (a new uid), is left out, as a pass reads it as gone."""
    wanted = {(r.namespace, r.job): r.uid for ledger in ledgers for r in ledger.reservations if r.namespace}
    limit = asyncio.Semaphore(PARALLEL_GETS)

    async def read(namespace: str, name: str) -> dict | None:
        async with limit:
            try:
                found = await find_job(client, namespace, name)
            except JobNotFound:
                return None
        found.setdefault("kind", kinds.kind_of(found).resource.kind)
        return found

    found = await asyncio.gather(*(read(ns, name) for ns, name in sorted(wanted)))
    return [j for j in found if j is not None and Meta(j).uid == wanted[_key(j)]]


# Objects whose events :func:`events_about` reads one field-selected LIST each; beyond, it reads the
# namespace's events in one LIST (an MPIJob of hundreds of workers would cost hundreds of requests).
EVENT_LISTS_MAX = 64


async def events_about(
    client: KubeClient, jobs: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]
) -> list[dict]:
    """The events about ``jobs`` and ``pods`` (their pods, as :func:`_pods_of_jobs` reads them): those
    :meth:`OwnerIndex.events_for` picks for each job from the namespace's events, read by the name of
    the object they are about (``involvedObject.name``), in the order the namespace lists them (by
    name). Two rounds: the objects the jobs and pods name, then the pods the jobs' controllers report
    having created (``SuccessfulCreate``), which may be gone and still explain the job."""
    owners = OwnerIndex(pods, ())
    wanted: dict[str, set[str]] = {}
    creators: dict[str, set[str]] = {}
    for job in jobs:
        namespace, name = _key(job)
        kind = kinds.kind_of(job)
        names = wanted.setdefault(namespace, set())
        names |= {name, *(related for _, related in kind.related_names(job))}
        names |= {Meta(p).name for p in owners.pods_for(job)}
        if disrupted := disrupted_pod(job):
            names.add(disrupted)
        creators.setdefault(namespace, set()).update(kind.pod_creators(job))
    if sum(len(n) for n in wanted.values()) > EVENT_LISTS_MAX:
        every = _joined(await asyncio.gather(*(_items(client, EVENTS, ns) for ns in sorted(wanted))))
        index = OwnerIndex(pods, every)
        chosen = {id(e): e for job in jobs for e in index.events_for(job, index.pods_for(job))}
        return [e for e in every if id(e) in chosen]
    found = await _events_named(client, wanted)
    created: dict[str, set[str]] = {}
    for event in found:
        about = event.get("involvedObject") or {}
        namespace = Meta(event).namespace
        if about.get("name") in creators.get(namespace, ()) and about.get("kind") == JOBS.kind:
            if event.get("reason") == "SuccessfulCreate":
                pod = _CREATED_POD.match(str(event.get("message") or ""))
                if pod and pod["pod"] not in wanted[namespace]:
                    created.setdefault(namespace, set()).add(pod["pod"])
    if created:
        found += await _events_named(client, created)
    return sorted(
        {(Meta(e).namespace, Meta(e).name): e for e in found}.values(),
        key=lambda e: (Meta(e).namespace, Meta(e).name),
    )


async def _events_named(client: KubeClient, names: Mapping[str, set[str]]) -> list[dict]:
    """The events about the objects of ``names`` (by namespace), one field-selected LIST per object."""
    limit = asyncio.Semaphore(PARALLEL_GETS)

    async def read(namespace: str, name: str) -> list:
        async with limit:
            return await _items(client, EVENTS, namespace, field_selector=f"involvedObject.name={name}")

    reads = [read(ns, n) for ns in sorted(names) for n in sorted(names[ns]) if n]
    return _joined(await asyncio.gather(*reads))


async def _jobs_whole(
    client: KubeClient, spaces: Sequence[str], selector: str, chunk: int = LIST_CHUNK
) -> list[dict]:
    return _joined(
        await asyncio.gather(*(_product_jobs(client, ns, selector=selector, chunk=chunk) for ns in spaces))
    )


async def _jobs_metadata(
    client: KubeClient, spaces: Sequence[str], selector: str = "", chunk: int = LIST_CHUNK
) -> list[dict]:
    return _joined(
        await asyncio.gather(
            *(_product_jobs(client, ns, metadata_only=True, selector=selector, chunk=chunk) for ns in spaces)
        )
    )


async def _jobs_for_page(
    client: KubeClient, spaces: Sequence[str], query: listing.JobQuery, chunk: int = LIST_CHUNK
) -> tuple[list[dict], list[dict], bool]:
    """The jobs (as metadata) ``query``'s page is chosen from, the jobs that may wait in the pool's
    queue, and whether the first are every job of the namespaces.

    Newest first (the default order), the jobs are read by their ``created`` label window by window back
    in time (:func:`listing.creation_windows`) until the page is decided, with every unlabelled job
    (created before the label existed) and every job without the ``admitted`` label (the only ones that
    may wait); the history beyond the page is not read. Any other order reads every job's metadata."""
    if query.sort != "-created":
        every = await _jobs_metadata(client, spaces, chunk=chunk)
        return every, every, True
    windows = listing.creation_windows(_now())
    seen: dict[tuple[str, str], dict] = {}
    unlabelled, waiting, first = await asyncio.gather(
        _jobs_metadata(client, spaces, f"!{labels.CREATED}", chunk),
        _jobs_metadata(client, spaces, f"!{labels.ADMITTED}", chunk),
        _jobs_metadata(client, spaces, windows[0].selector(labels.CREATED), chunk),
    )
    for job in [*unlabelled, *first]:
        seen[_key(job)] = job
    for i, window in enumerate(windows):
        if i:
            for job in await _jobs_metadata(client, spaces, window.selector(labels.CREATED), chunk):
                seen[_key(job)] = job
        if listing.decides_newest_page(seen.values(), query, window.since, labels.CREATED):
            return list(seen.values()), waiting, window.since is None
    raise AssertionError("the last window decides every page")  # pragma: no cover


def _key(job: Mapping[str, Any]) -> tuple[str, str]:
    meta = Meta(job)
    return meta.namespace, meta.name


async def _pods_of_jobs(client: KubeClient, jobs: Sequence[Mapping[str, Any]]) -> list:
    """The pods of ``jobs``, by the label each kind's controller puts on its pods (the one a job's
    trigger lists them by), a hundred job names per LIST."""
    wanted: dict[tuple[str, str], list[str]] = {}
    for job in jobs:
        namespace, name = _key(job)
        wanted.setdefault((namespace, kinds.kind_of(job).pod_job_label), []).append(name)
    reads = []
    for (namespace, label), names in sorted(wanted.items()):
        for i in range(0, len(names), NAMES_PER_SELECTOR):
            chunk = ",".join(sorted(names[i : i + NAMES_PER_SELECTOR]))
            reads.append(_items(client, PODS, namespace, f"{MANAGED_SELECTOR},{label} in ({chunk})"))
    return _joined(await asyncio.gather(*reads))


async def _product_jobs(
    client: KubeClient,
    namespace: str,
    *,
    metadata_only: bool = False,
    selector: str = "",
    chunk: int = LIST_CHUNK,
) -> list[dict]:
    chosen = f"{MANAGED_SELECTOR},{selector}" if selector else MANAGED_SELECTOR
    lists = await asyncio.gather(
        *(
            _jobs_of(client, r, namespace, chosen, metadata_only=metadata_only, chunk=chunk)
            for r in kinds.RESOURCES
        )
    )
    return [j for found in lists for j in found if is_product_job(j)]


async def read_jobs(client: KubeClient, namespace: str) -> list[dict]:
    """The product's Jobs and MPIJobs of a namespace, without their pods and events."""
    return await _product_jobs(client, namespace)


# --- the UI's read model (readmodel/job_index.py): filled page by page, refreshed by creation window ---


def _name_kind(items: list, resource: Resource, metadata_only: bool) -> None:
    """Set each listed item's kind and apiVersion to its resource's (in a function of its own, so that
    no loop variable of the page generator keeps an item alive while the next page is read)."""
    for item in items:
        if metadata_only:
            # Each item says PartialObjectMetadata: its readers (its kind adapter, which the orphan sweep
            # asks whether its controller outlives its TTL) are told what the object is.
            item["kind"], item["apiVersion"] = resource.kind, resource.api_version
        else:
            item.setdefault("kind", resource.kind)
            item.setdefault("apiVersion", resource.api_version)


async def _pages(
    client: KubeClient, resource: Resource, namespace: str, selector: str, *, metadata_only: bool = False
) -> AsyncIterator[list]:
    """A LIST of ``resource`` page by page (:data:`LIST_CHUNK` items, kind and apiVersion set on each),
    so its reader can drop one page before the next is decoded; nothing where the kind is not served."""
    token: str | None = None
    while True:
        try:
            found = await client.list(
                resource,
                namespace,
                label_selector=selector,
                limit=LIST_CHUNK,
                continue_token=token,
                metadata_only=metadata_only,
            )
        except KubeError as exc:
            if exc.not_found and kinds.may_be_absent(resource):
                return
            raise
        items = found.get("items") or []
        _name_kind(items, resource, metadata_only)
        token = Meta(found).continue_token
        page = [i for i in items if is_product_job(i)]
        # Dropped before the next chunk is asked for: a reader holds one page, not two.
        del found, items
        yield page
        del page
        if token is None:
            return


async def read_in_pages(client: KubeClient, target: Target) -> AsyncIterator[ClusterState]:
    """Every product job of ``target``'s namespaces, whole, a page of :data:`LIST_CHUNK` jobs at a time,
    each with its own pods (label-selected, :func:`_pods_of_jobs`) and the namespaces' events, policy,
    ledgers and Workloads read once before: the index's fill (``readmodel/job_index.py``), which turns each
    page into rows and drops it, so the namespace is never held whole. A page's pods are read after its
    jobs; the refresh that follows the fill reads every unfinished job again in :func:`read_cluster`'s
    order (pods first)."""
    spaces = target.namespaces
    events, policy_read, ledgers_read, workloads = await asyncio.gather(
        asyncio.gather(*(_items(client, EVENTS, ns) for ns in spaces)),
        read_policy(client, target),
        read_ledgers(client, target),
        asyncio.gather(*(_workloads(client, ns) for ns in spaces)),
    )
    (policy, problem), (ledgers, histories) = policy_read, ledgers_read
    by_uid = kueue.by_job_uid(_joined([found for found, _ in workloads]))
    every_event = _joined(events)
    # Each page gets the events about its own jobs and pods only (in the namespace's order), found
    # through one index of the events: not every event indexed again for every page.
    about = OwnerIndex((), every_event)
    position = {id(e): i for i, e in enumerate(every_event)}
    for namespace in spaces:
        for resource in kinds.RESOURCES:
            async for jobs in _pages(client, resource, namespace, MANAGED_SELECTOR):
                pods = await _pods_of_jobs(client, jobs) if jobs else []
                owners = OwnerIndex(pods, ())
                chosen = {
                    position[id(e)]: e for job in jobs for e in about.events_for(job, owners.pods_for(job))
                }
                yield ClusterState(
                    jobs=tuple(jobs),
                    pods=tuple(pods),
                    events=tuple(chosen[i] for i in sorted(chosen)),
                    now=_now(),
                    policy=policy,
                    policy_problem=problem,
                    ledgers=ledgers,
                    usage_histories=histories,
                    workloads=by_uid,
                )


async def read_window(client: KubeClient, target: Target, selector: str, unlabelled: bool) -> ClusterState:
    """The jobs of one creation window (``selector``, :meth:`listing.Window.selector`) and, if
    ``unlabelled``, every job without the ``created`` label, whole, with their own pods, the namespaces'
    events, policy, ledgers and Workloads: the index's refresh. The window's jobs are named by a
    metadata-only LIST first, so their pods are read before the jobs whole, as :func:`read_cluster`
    orders them; a job created in between is read without pods, and gets them at the next refresh."""
    spaces = target.namespaces
    selectors = [selector, *([f"!{labels.CREATED}"] if unlabelled else [])]
    named = _joined(await asyncio.gather(*(_jobs_metadata(client, spaces, s) for s in selectors)))
    pods, events, policy_read, ledgers_read, workloads = await asyncio.gather(
        _pods_of_jobs(client, named),
        asyncio.gather(*(_items(client, EVENTS, ns) for ns in spaces)),
        read_policy(client, target),
        read_ledgers(client, target),
        asyncio.gather(*(_workloads(client, ns) for ns in spaces)),
    )
    jobs = {
        _key(j): j
        for j in _joined(await asyncio.gather(*(_jobs_whole(client, spaces, s) for s in selectors)))
    }
    return await _state(
        client, list(jobs.values()), pods, _joined(events), policy_read, ledgers_read, workloads
    )


async def read_job_keys(client: KubeClient, target: Target) -> list[tuple[str, str]]:
    """The namespace and name of every product job of ``target``'s namespaces, from a metadata-only
    LIST in chunks: what the index's sweep of deleted jobs compares with."""
    return [_key(j) for j in await _jobs_metadata(client, target.namespaces)]


async def read_job_metadata(client: KubeClient, namespace: str) -> list[dict]:
    """The product's Jobs and MPIJobs of a namespace as metadata only (``PartialObjectMetadataList``),
    in chunks of :data:`LIST_CHUNK`: names, uids, labels, annotations, creation and deletion times."""
    return await _product_jobs(client, namespace, metadata_only=True)


async def job_metadata_pages(client: KubeClient, namespace: str) -> AsyncIterator[list[dict]]:
    """The product's jobs of a namespace, resource by resource (``kinds.RESOURCES``), as metadata only,
    one LIST chunk of :data:`LIST_CHUNK` at a time (what :func:`read_job_metadata` joins), so the orphan
    sweep can judge and drop each page before the next is decoded."""
    for resource in kinds.RESOURCES:
        async for page in _pages(client, resource, namespace, MANAGED_SELECTOR, metadata_only=True):
            yield page
            del page  # not held while the next chunk is read


async def jobs_of_tasks_pages(
    client: KubeClient, namespace: str, task_keys: Iterable[str]
) -> AsyncIterator[list[dict]]:
    """The whole product jobs carrying any of ``task_keys`` (the TASK_KEY label), a hundred keys per
    label-selected LIST, one LIST chunk of :data:`LIST_CHUNK` at a time: however many jobs share the
    keys, the reader holds one chunk of them."""
    keys = sorted(set(task_keys))
    for i in range(0, len(keys), NAMES_PER_SELECTOR):
        selector = f"{MANAGED_SELECTOR},{labels.TASK_KEY} in ({','.join(keys[i : i + NAMES_PER_SELECTOR])})"
        for resource in kinds.RESOURCES:
            async for page in _pages(client, resource, namespace, selector):
                yield page
                del page  # not held while the next chunk is read


async def find_job(client: KubeClient, namespace: str, name: str) -> dict:
    """The product job ``name`` (a Job or an MPIJob); :class:`JobNotFound` otherwise."""
    for resource in kinds.RESOURCES:
        try:
            job = await client.get_or_none(resource, namespace, name)
        except KubeError as exc:
            if exc.not_found and kinds.may_be_absent(resource):
                continue
            raise
        if job is not None:
            if Meta(job).labels.get(labels.MANAGED_BY) == labels.MANAGED_BY_VALUE:
                return job
    raise JobNotFound(f"no GPU job {namespace}/{name}")


async def read_change(client: KubeClient, target: Target, namespace: str, name: str) -> JobChange:
    """Job ``name`` as it is now (``None`` once deleted), with its own pods and the quota policy and
    ledgers: what :func:`job_index.with_change` needs to patch the kept index after an action on it."""
    try:
        job: dict | None = await find_job(client, namespace, name)
    except JobNotFound:
        job = None
    pods: list = []
    if job is not None:
        pods = await _pods_of_jobs(client, [job])
        job.setdefault("kind", kinds.kind_of(job).resource.kind)
    (policy, problem), (ledgers, histories) = await asyncio.gather(
        read_policy(client, target), read_ledgers(client, target)
    )
    return JobChange(namespace, name, job, tuple(pods), _now(), policy, problem, ledgers, histories)


async def find_task_job(
    client: KubeClient, namespace: str, dag_id: str, task_id: str, run_id: str, map_index: int = -1
) -> dict:
    """The latest job (newest try, then newest attempt) of a task instance, by its TASK_KEY label."""
    key = TaskIdentity(dag_id, task_id, run_id, map_index).instance_key()
    selector = f"{labels.TASK_KEY}={key}"
    found = [j for r in kinds.RESOURCES for j in await _jobs_of(client, r, namespace, selector)]
    found = [j for j in found if is_product_job(j)]
    if not found:
        raise JobNotFound(f"no GPU job for task {dag_id}.{task_id} of run {run_id} (map index {map_index})")

    def order(job: Mapping[str, Any]) -> tuple:
        meta = Meta(job)
        try_label = str(meta.labels.get(labels.TRY) or "")
        try_number = int(try_label) if try_label.isdigit() else 0
        return (try_number, attempts.attempt_of(job), meta.creation_timestamp)

    return max(found, key=order)


async def attempts_of(client: KubeClient, namespace: str, job: Mapping[str, Any]) -> list[dict]:
    """Every attempt of ``job``'s task try the cluster still holds (``job`` among them), by the
    TASK_KEY and TRY labels: one selected LIST of the job's own kind. Only jobs named as attempts of
    the same try (``<base>-a<N>``, ``spec.attempt_name``) count: labels can be copied onto any job, and
    the job page reads the pods of every attempt, so a namespace holding thousands of jobs under one
    task key (copies of one manifest) would have it read thousands of pod LISTs."""
    meta = Meta(job)
    meta_labels = meta.labels
    if not meta_labels.get(labels.TASK_KEY):
        return [dict(job)]
    selector = f"{labels.TASK_KEY}={meta_labels[labels.TASK_KEY]}"
    if meta_labels.get(labels.TRY):
        selector += f",{labels.TRY}={meta_labels[labels.TRY]}"
    found = await _jobs_of(client, kinds.kind_of(job).resource, namespace, selector)
    base = _attempt_base(meta.name)
    return [j for j in found if is_product_job(j) and _attempt_base(Meta(j).name) == base] or [dict(job)]


async def read_job(client: KubeClient, target: Target, name: str) -> tuple[ClusterState, dict]:
    """The cluster state around one job (:func:`read_around_job`: its pods and events, its task try's
    other attempts, and for a job that may wait the queue and the pool's reservations) and the job.
    ``name`` may leave out the ``-a<N>`` suffix: the task try's newest attempt. Reads grow with the job,
    its attempts and the pool's queue, never with the jobs the namespace keeps."""
    job = await _job_or_newest_attempt(client, target.namespace, name)
    attempts = await attempts_of(client, target.namespace, job)
    return await read_around_job(client, target, job, attempts), job


async def _job_or_newest_attempt(client: KubeClient, namespace: str, name: str) -> dict:
    """Job ``name``, or the newest attempt of the task try whose jobs are named ``<name>-a<N>``: found
    through its first attempt's labels (:func:`attempts_of`), or, once a TTL removed that one, among
    the namespace's job names (metadata only)."""
    try:
        return await find_job(client, namespace, name)
    except JobNotFound:
        pass
    try:
        first = await find_job(client, namespace, f"{name}-a1")
    except JobNotFound:
        named = [j for j in await read_job_metadata(client, namespace) if _attempt_base(Meta(j).name) == name]
        newest = attempts.latest_attempt(named)
        if newest is None:
            raise JobNotFound(f"no GPU job {namespace}/{name}") from None
        return await find_job(client, namespace, Meta(newest).name)
    newest = attempts.latest_attempt(await attempts_of(client, namespace, first))
    return dict(newest) if newest is not None else first


def _attempt_base(name: str) -> str | None:
    try:
        return split_attempt(name)[0]
    except ValueError:
        return None


async def read_log_tails(
    client: KubeClient,
    namespace: str,
    job: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    lines: int = LOG_TAIL_LINES,
) -> tuple[LogTail, ...]:
    """The last ``lines`` of every replica's current pod, launcher first (an unreadable log says why)."""

    async def tail(replica: str, rank: int, pod: str, container: str) -> LogTail:
        try:
            text = await client.read_log(namespace, pod, container=container or None, tail_lines=lines)
        except KubeError as exc:
            return LogTail(replica, rank, pod, container, (), exc.message or str(exc))
        return LogTail(replica, rank, pod, container, tuple(text.splitlines()))

    return tuple(await asyncio.gather(*(tail(*t) for t in log_targets(job, pods))))


async def follow_log(
    client: KubeClient, namespace: str, pod: str, container: str | None, tail_lines: int | None = None
) -> AsyncIterator[str]:
    """A pod's log from its start (or its last ``tail_lines`` lines), following it until the container
    ends."""
    async for line in client.follow_log(namespace, pod, container=container, tail_lines=tail_lines):
        yield line


async def pods_of_job(client: KubeClient, job: Mapping[str, Any]) -> list[dict]:
    """The pods of one job, by the label its kind's controller puts on them: not the namespace's."""
    return await _pods_of_jobs(client, [job])


def _ledger_namespace(target: Target) -> str | None:
    """Where reservations live, or ``None`` without a quota pool."""
    return target.ledger_namespace if target.quota_configmap else None


async def _recorded_earlier(client: KubeClient, namespace: str, name: str) -> CancelOutcome | None:
    """A cancel of a job that is already gone: what the record of its try's cancel says, while it is kept
    (jobs/cancel_record.py; Events go after an hour). None without one, or without the right to read it."""
    from airflow_jobs_plugin.jobs import cancel_record
    from airflow_jobs_plugin.usecases import actions

    record_name = cancel_record.record_name_of_job(name)
    if record_name is None:
        return None
    try:
        record = await client.get_or_none(LEASES, namespace, record_name)
    except KubeError:
        return None
    if record is None:
        return None
    seen = cancel_record.found(record)
    kind = str(Meta(record).annotations.get(labels.CANCELLED_JOB) or "").partition("/")[0]
    at = f" at {time_text(seen.at)}" if seen.at is not None else ""
    message = (
        f"{kind.lower() + '/' if kind else ''}{name} was already cancelled by {seen.by or 'someone'}{at}"
    )
    return actions.CancelOutcome(namespace, name, kind, False, True, f"{message} (deleted)")


async def _cancelled_earlier(client: KubeClient, namespace: str, name: str) -> CancelOutcome | None:
    """A cancel of a job that is already gone: what the record of the cancel says, else what its
    ``Cancelled`` event says, if either is still kept."""
    from airflow_jobs_plugin.usecases import actions

    recorded = await _recorded_earlier(client, namespace, name)
    if recorded is not None:
        return recorded
    listing = await client.list(EVENTS, namespace, field_selector=f"involvedObject.name={name}")
    events = [
        e
        for e in listing.get("items") or []
        if e.get("reason") == "Cancelled" and (e.get("source") or {}).get("component") == actions.EVENT_SOURCE
    ]
    if not events:
        return None
    last = max(events, key=lambda e: str(e.get("lastTimestamp") or ""))
    kind = str((last.get("involvedObject") or {}).get("kind") or "")
    when = last.get("lastTimestamp")
    message = (
        f"{kind.lower() + '/' if kind else ''}{name} was already {last.get('message') or 'cancelled'}"
        + (f" at {time_text(when)}" if when else "")
    )
    return actions.CancelOutcome(namespace, name, kind, False, True, f"{message} (deleted)")


async def cancel(client: KubeClient, target: Target, name: str, by: str) -> CancelOutcome:
    """Cancel a job as a user's kill of its task does (see :func:`airflow_jobs_plugin.usecases.actions.cancel`).

    A job cancelled earlier and already deleted answers with who cancelled it, from its event.
    """
    from airflow_jobs_plugin.usecases import actions

    try:
        job = await find_job(client, target.namespace, name)
    except JobNotFound:
        earlier = await _cancelled_earlier(client, target.namespace, name)
        if earlier is None:
            raise
        return earlier
    return await actions.cancel(client, target.namespace, job, by)


async def stop(client: KubeClient, target: Target, name: str, by: str) -> ActionOutcome:
    """Stop a job (see :func:`airflow_jobs_plugin.usecases.actions.stop`)."""
    from airflow_jobs_plugin.usecases import actions

    job = await find_job(client, target.namespace, name)
    return await actions.stop(client, target.namespace, job, by)


async def resume(client: KubeClient, target: Target, name: str, by: str) -> ActionOutcome:
    """Resume a stopped job (see :func:`airflow_jobs_plugin.usecases.actions.resume`)."""
    from airflow_jobs_plugin.usecases import actions

    job = await find_job(client, target.namespace, name)
    # A group of a cohort keeps its reservations in the cohort's ledger (QuotaPolicy.ledger_of).
    policy, _ = await read_policy(client, target) if _ledger_namespace(target) else (None, None)
    group = JobView(job).group
    unit = policy.ledger_of(group) if policy is not None and group else None
    members = policy.members(unit) if policy is not None and unit else ()
    return await actions.resume(client, target.namespace, job, by, _ledger_namespace(target), unit, members)
