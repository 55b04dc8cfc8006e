"""Submitting a job for a task try: create it suspended, or reattach to the live job of an earlier try.

The worker-side shell of :class:`~airflow_jobs_plugin.airflow.operators.JobOperator`: never two live jobs for
one task, whatever crashes where.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from airflow_jobs_plugin.cluster.kube import CONFIGMAPS, LEASES, KubeClient, KubeError, Resource, patiently
from airflow_jobs_plugin.cluster.objects import Meta
from airflow_jobs_plugin.jobs import adoption, cancel_record, kinds, labels
from airflow_jobs_plugin.jobs.bounded import bounded
from airflow_jobs_plugin.jobs.manifests import build_manifest
from airflow_jobs_plugin.jobs.naming import TaskIdentity
from airflow_jobs_plugin.jobs.spec import JobSpec, total_gpus
from airflow_jobs_plugin.lifecycle import JobState, snapshot
from airflow_jobs_plugin.queueing import pools, quota_source
from airflow_jobs_plugin.queueing.quota.flavors import Charge
from airflow_jobs_plugin.queueing.quota.model import QuotaPolicy
from airflow_jobs_plugin.queueing.quota.parse import PolicyError, policy_from_configmap_data
from airflow_jobs_plugin.queueing.quota.priority_classes import named_by_job
from airflow_jobs_plugin.queueing.quota.submit_check import (
    PolicyNotFoundError,
    policy_configmap_names,
    policy_not_found,
    submit_charge,
)
from airflow_jobs_plugin.queueing.quota_source import QuotaSource

# Attempts per API call before the try fails (back-off 0.2 s doubling: about 6 s in all). Throttling and
# brief server trouble are absorbed here; a longer outage fails the try and Airflow's retry takes over.
SUBMIT_TRIES = 6


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
    priority_classes: Sequence[str] = (),
) -> Charge | None:
    """Submit-time check of a job against the quota policy, before the job is created; how it is
    charged, ``None`` without a usable policy. The rule is :func:`~.quota.submit_check.submit_charge`'s.

    Without a policy configured there is nothing to check. A ``quota_configmap`` that names no ConfigMap
    (a typo, the wrong namespace) raises :class:`~.quota.submit_check.PolicyNotFoundError` naming the
    policy ConfigMaps that exist: the job would wait forever. A policy that exists but is invalid is not
    the DAG author's fault: the job is created and waits as Inadmissible, with the reason, until an admin
    fixes the policy.
    """
    if quota_configmap is None:
        return None
    configmap = await client.get_or_none(CONFIGMAPS, quota_namespace, quota_configmap)
    if configmap is None:
        try:
            listing = await client.list(CONFIGMAPS, quota_namespace)
        except KubeError:  # no list permission: say what is known
            listing = {}
        names = policy_configmap_names(listing.get("items") or [])
        raise PolicyNotFoundError(policy_not_found(quota_configmap, quota_namespace, names))
    try:
        # In a thread: reading a large policy takes seconds (quota.parse.MAX_POLICY_BYTES).
        policy = await asyncio.to_thread(policy_from_configmap_data, configmap.get("data"))
    except PolicyError:
        return None
    return submit_charge(
        policy,
        group,
        user,
        gpus,
        kueue_queue=kueue_queue,
        resource=resource,
        node_selector=node_selector,
        priority_classes=priority_classes,
    )


class SubmissionRefused(ValueError):
    """The job can never run as asked (unknown group, not a member, can never fit its quota, a quota
    pool that does not exist, leaving a pool that does not allow it), or this try must not run one: a
    job under the task's name or key is not the one it would submit, or an earlier try was cancelled."""


class TryCancelled(SubmissionRefused):
    """An earlier try of the same run of the task was cancelled: this try ends as cancelled too."""


@dataclass(frozen=True)
class Tries:
    """Where this try stands in its task's tries (what tells a retry from a clear: outcome.py)."""

    try_number: int
    max_tries: int | None
    retries: int


@dataclass(frozen=True)
class Submitted:
    """The job a try follows, and the quota pool it is under (``quota_configmap`` None: none)."""

    name: str
    kind: str
    quota_configmap: str | None
    quota_namespace: str | None
    # An earlier try's job that already SUCCEEDED and whose success no try returned: this try returns it
    # without deferring (returned_at_once).
    succeeded: bool = False


async def submit(
    spec: JobSpec,
    identity: TaskIdentity,
    store: Any,
    *,
    delivered: str | None,
    conn_id: str,
    pool: QuotaSource,
    log: logging.Logger | Any,
    tries: Tries | None = None,
    passed_over: int | None = None,
) -> Submitted:
    """The job this try follows, created if no earlier try's job lives, and the pool it is under.

    ``delivered`` names the job whose returned success Airflow kept ("" none, None: adopt no success).
    ``passed_over`` is an earlier try whose jobs are never followed (its deferral timed out).
    Raises :class:`TryCancelled` if a job of an earlier try of this run of the task was cancelled (its
    verdict on a job still there, or the record the cancel left: :func:`recorded_cancel`), and
    :class:`SubmissionRefused` naming a job under the task's name or key that is not, field for field,
    the one this task would submit (``adoption.foreign_problem``), and the first field that differs."""
    kind = spec.kind
    resource = kinds.for_name(kind).resource
    client = await KubeClient.from_connection(conn_id)
    try:
        quota_configmap = await _pool_of(client, pool, spec, log)
        quota_namespace = (pool.namespace or spec.namespace) if quota_configmap else None
        jobs = await patiently(
            jobs_of_task, client, resource, spec.namespace, identity, log=log, tries=SUBMIT_TRIES
        )
        if tries is not None:
            # The cancel as the cluster keeps it, whatever the task's state store holds: the try that
            # saw the cancel may have died before recording it. The Cancelled verdict on a job still
            # there, else the record the cancel left before it ended or deleted the job.
            cancelled = adoption.cancelled_in_run(
                jobs, try_number=tries.try_number, max_tries=tries.max_tries, retries=tries.retries
            ) or await patiently(
                recorded_cancel, client, spec.namespace, identity, tries, log=log, tries=SUBMIT_TRIES
            )
            if cancelled:
                raise TryCancelled(cancelled)
        # An unknown group, a non-member, a priority class the group may not use, or a job that could
        # never fit its quota fails here, before anything is created (the error names the group and the
        # known ones, the class and the allowed ones, or the numbers). The classes are read off the
        # manifest as the pool reads them off the job. How the pool charges the job is also part of what
        # an earlier try's job must match to be followed.
        expected = build_manifest(
            spec, name=identity.job_name(1), task=identity, attempt=1, queued_at=datetime.now(timezone.utc)
        )
        try:
            charge = await patiently(
                functools.partial(
                    check_group,
                    kueue_queue=spec.kueue_queue,
                    resource=spec.gpu_resource,
                    node_selector=spec.node_selector,
                    priority_classes=named_by_job(expected),
                ),
                client,
                quota_configmap,
                quota_namespace or spec.namespace,
                spec.group,
                spec.user,
                total_gpus(spec),
                log=log,
                tries=SUBMIT_TRIES,
            )
        except ValueError as exc:
            raise SubmissionRefused(str(exc)) from exc
        # What this try creates, and what the job of an earlier try must be, field for field, to be
        # followed instead (jobs/adoption.py).
        submission = adoption.Submission(
            spec,
            identity,
            charge,
            fingerprint=adoption.spec_fingerprint(spec, identity),
        )
        live = live_job_among(jobs, delivered, passed_over)
        if live is not None:
            foreign = adoption.foreign_problem(live, submission)
            if foreign:
                raise SubmissionRefused(foreign)
            name = Meta(live).name
            log.info("reattaching to %s %s/%s of an earlier try", kind, spec.namespace, name)
            _remember(store, name, kind, spec.namespace)
            # The earlier try may have stopped between creating the job and what goes beside it.
            await patiently(ensure_companions, client, live, log=log, tries=SUBMIT_TRIES)
            return Submitted(
                name,
                kind,
                quota_configmap,
                quota_namespace,
                returned_at_once(live, datetime.now(timezone.utc)),
            )
        name = identity.job_name(1)
        # Remember the name before creating: a worker that dies right after the create leaves a record
        # the retry finds (and the TASK_KEY label finds the job even without the record).
        _remember(store, name, kind, spec.namespace)
        # The GPU flavor the node selector picks is the quota line the job waits in
        # (queueing/quota/flavors.py); a job under a pool that names a Kueue LocalQueue is handed to it by
        # the pool, and Kueue may take a pooled job at creation anyway (a `default` LocalQueue, a Kueue
        # managing every job): its admission gate keeps it for the pool to judge first
        # (manifests.submitted_body).
        body = submission.body()
        try:
            # A create the server applied but answered with an error is repeated into AlreadyExists: adopted.
            created = await patiently(
                client.create, resource, spec.namespace, body, log=log, tries=SUBMIT_TRIES
            )
            log.info("created %s %s/%s (suspended until admitted)", kind, spec.namespace, name)
        except KubeError as exc:
            if exc.invalid:
                # Validation refused the manifest: every retry would send the same one.
                raise SubmissionRefused(invalid_problem(kind, f"{spec.namespace}/{name}", exc)) from exc
            if not exc.already_exists:
                raise RuntimeError(f"creating {kind} {spec.namespace}/{name} failed: {exc}") from exc
            created = await patiently(client.get, resource, spec.namespace, name, log=log, tries=SUBMIT_TRIES)
            # A create repeated into AlreadyExists finds this try's own job; a job planted under the
            # name (the name is predictable) is refused, never adopted nor deleted.
            foreign = adoption.foreign_problem(created, submission)
            if foreign:
                raise SubmissionRefused(foreign) from exc
            log.info("%s %s/%s already exists: adopting it", kind, spec.namespace, name)
        await patiently(ensure_companions, client, created, log=log, tries=SUBMIT_TRIES)
        return Submitted(name, kind, quota_configmap, quota_namespace)
    finally:
        await client.close()


# Where in a job's pod template a field is set, by the DAG argument that sets it: the API server names
# fields by their path in the object, the DAG author knows the arguments.
_ARGUMENT_OF_FIELD = (
    ("affinity", "affinity"),
    ("volumes", "volumes"),
    ("tolerations", "tolerations"),
    ("nodeSelector", "node_selector"),
    ("volumeMounts", "volume_mounts"),
    ("env", "env"),
    ("resources", "cpu, memory or container_resources"),
    ("securityContext", "security_context or container_security_context"),
    ("imagePullSecrets", "image_pull_secrets"),
    ("initContainers", "init_containers"),
    ("metadata.labels", "labels"),
    ("metadata.annotations", "annotations"),
)


def invalid_problem(kind: str, where: str, exc: KubeError) -> str:
    """Why the API server refused to create the job (422 Invalid), naming each field it named and the
    DAG argument that sets it (pod_template for the rest); no retry can change the answer."""
    causes = exc.field_causes()
    fields = "; ".join(causes) if causes else exc.message
    arguments: list[str] = []
    for cause in causes:
        if ": " not in cause:
            continue  # "and N more"
        # spec.template.spec.containers[0].resources.limits -> .spec.template.spec.containers.resources.limits.
        path = "." + re.sub(r"\[[^]]*\]", "", cause.split(": ", 1)[0]) + "."
        argument = next((arg for key, arg in _ARGUMENT_OF_FIELD if f".{key}." in path), None)
        chosen = argument or "pod_template"
        if chosen not in arguments:
            arguments.append(chosen)
    fix = f"fix {' / '.join(arguments)} in the task's arguments" if arguments else "fix the task's arguments"
    if arguments and arguments != ["pod_template"]:
        fix += " (or pod_template, where it sets them)"
    return bounded(
        f"the API server refused {kind} {where} as invalid (422), which no retry can change: {fields}; {fix}"
    )


async def ensure_companions(client: KubeClient, job: Mapping[str, Any]) -> None:
    """Create what the job's kind runs beside it (a torchrun job's headless Service), owned by ``job``
    (as the server returned it, with its uid) so that it goes when the job goes. Idempotent."""
    for resource, body in kinds.kind_of(job).companions(job):
        try:
            await client.create(resource, Meta(body).namespace, body)
        except KubeError as exc:
            if not exc.already_exists:
                raise


async def _pool_of(
    client: KubeClient, pool: QuotaSource, spec: JobSpec, log: logging.Logger | Any
) -> str | None:
    """The policy ConfigMap that will judge the job (None: no pool), as the admission controller will
    route it (queueing/pools.py): the pool of the namespace's policies that lists its group. The task's
    own choice changes nothing on the cluster; it is only checked against that answer, so a task that
    expects another pool, or none, fails here with the reason instead of waiting for ever."""
    namespace = spec.namespace or "default"
    listing = await patiently(client.list, CONFIGMAPS, namespace, log=log, tries=SUBMIT_TRIES)
    docs: list[pools.PolicyDoc] = []
    for configmap in listing.get("items") or []:
        meta = Meta(configmap)
        if not pools.is_policy(meta.name, meta.labels):
            continue
        try:
            # In a thread: reading a large policy takes seconds (quota.parse.MAX_POLICY_BYTES).
            policy: QuotaPolicy | None = await asyncio.to_thread(
                policy_from_configmap_data, configmap.get("data")
            )
            docs.append(pools.PolicyDoc(meta.name, policy))
        except PolicyError as exc:
            docs.append(pools.PolicyDoc(meta.name, None, str(exc)))
    namespace_pools = pools.index(namespace, docs)
    route = pools.route(namespace_pools, spec.group)
    problem = quota_source.route_problem(pool, route, spec.group, namespace, namespace_pools.names)
    if problem:
        raise SubmissionRefused(problem)
    if route.way is pools.Way.LET_GO:
        log.info("%s", route.message)
        return None
    if route.way is pools.Way.HOLD:
        # The platform's to fix (two policies naming the group, a policy that cannot be read): the job
        # is created and waits with the reason, as the admission controller says.
        log.warning("the job will wait: %s", route.message)
    return route.policy


class CancelRecordsUnreadable(RuntimeError):
    """The worker may not read the task's cancel records: the try fails (Airflow retries it) rather than
    risk running a cancelled job again."""


async def recorded_cancel(
    client: KubeClient, namespace: str, identity: TaskIdentity, tries: Tries
) -> str | None:
    """Why this try must not run, if an earlier try of the same run of the task was cancelled by the
    product: the record that cancel left (:mod:`~airflow_jobs_plugin.jobs.cancel_record`), read by the
    name this try computes for each earlier try (never by label), the newest first. ``None``: none."""
    now = datetime.now(timezone.utc)
    names = cancel_record.record_names(identity, max_tries=tries.max_tries, retries=tries.retries)
    for earlier, name in names:
        try:
            record = await client.get_or_none(LEASES, namespace, name)
        except KubeError as exc:
            if exc.status != 403:
                raise
            raise CancelRecordsUnreadable(
                f"cannot read whether an earlier try of this task was cancelled (Lease {namespace}/{name}: "
                f"{exc}): the worker's Role needs get on leases.coordination.k8s.io in namespace "
                f"{namespace} (helm-values/rbac.yaml)"
            ) from exc
        if record is None:
            continue
        refusal = cancel_record.refusal(record, earlier, now=now)
        if refusal:
            return refusal
    return None


async def jobs_of_task(
    client: KubeClient, resource: Resource, namespace: str, identity: TaskIdentity
) -> list[dict]:
    """Every job of any try of this task instance (by its task key), as the API server lists them."""
    listing = await client.list(
        resource, namespace, label_selector=f"{labels.TASK_KEY}={identity.instance_key()}"
    )
    return list(listing.get("items") or [])


def live_job_among(
    jobs: list[dict], delivered: str | None = None, passed_over: int | None = None
) -> dict | None:
    """The job a new try of this task instance should follow instead of submitting one, if any.

    The newest job of any earlier try that has not ended; failing that, the newest one that succeeded
    but whose result no try has returned (``delivered`` names the job whose result was returned). A
    failed job is never adopted: the retry exists to run it again. Nor is any job of the try
    ``passed_over`` (its time ran out: its job is being cancelled).
    """
    now = datetime.now(timezone.utc)
    live, undelivered = [], []
    for item in jobs:
        if Meta(item).deleting:
            continue
        if passed_over is not None and Meta(item).labels.get(labels.TRY) == str(passed_over):
            continue
        state = snapshot(item, [], (), now=now).state
        if not state.is_terminal:
            live.append(item)
        elif state is JobState.SUCCEEDED and delivered is not None and Meta(item).name != delivered:
            undelivered.append(item)
    for candidates in (live, undelivered):
        if candidates:
            return max(candidates, key=lambda j: Meta(j).creation_timestamp)
    return None


def _remember(store: Any, name: str, kind: str, namespace: str | None) -> None:
    if store is not None:
        store.set(labels.TASK_STATE_KEY, {"name": name, "kind": kind, "namespace": namespace})


def returned_at_once(job: Mapping[str, Any], now: datetime) -> bool:
    """True if a try that follows ``job`` (an earlier try's) returns its success at once, on the worker,
    instead of deferring: the job already SUCCEEDED.

    Such a job is followed only when no try returned its success, which is what Airflow 3.3.2's stale
    executor event does to a try whose job ends seconds after the deferral: the scheduler drains the
    worker's success of the deferral exit after the trigger's event has queued or started the resumed
    try, takes the try for killed externally and fails it (airflow-core 3.3.2
    ``jobs/scheduler_job_runner.py``, ``process_executor_events``: only a ``scheduled`` task instance
    with ``next_method`` is told apart; apache/airflow#66374, #67287, #72716). Deferring again on the
    finished job would fire the trigger at once and offer the race the same window; returning from
    ``execute`` offers none."""
    return snapshot(job, [], (), now=now).state is JobState.SUCCEEDED
