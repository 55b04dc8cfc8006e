"""A cancel outlives its job: the record a product cancel leaves on the cluster, and what a later try of
the task reads of it. Pure: no I/O (the shells are ``actions.cancel``, ``submission.submit`` and the
orphan sweep).

**Why a record.** A later try of a cancelled task must not run the job again (README, "Cancel means
cancel"). It learns of the cancel from the Cancelled verdict on the job (``adoption.cancelled_in_run``)
or from the task's state store, which the cancelled try writes once its worker has resumed from the
trigger's event (``JobOperator.execute_complete``). A cancel that deletes the job (a queued or stopped
MPIJob, a queued Kueue job: ``action_rules.cancel_ending``), or a cancelled Job that a short TTL removes,
leaves no verdict; and a worker that dies before writing the store leaves a try that Airflow retries.
That retry found nothing and submitted the cancelled work again. So every product cancel writes a
record *before* it ends or deletes the job, and every later try reads it before it submits anything.

**Where it lives, and why a Lease.** One ``coordination.k8s.io/v1`` Lease per cancelled task try, in
the job's namespace, named :data:`PREFIX` + the try's task key (``naming.task_key``: the try's jobs are
that key plus ``-a<attempt>``), so at most 23 + 47 = 70 characters of a DNS subdomain. Not an Event:
kube-apiserver deletes Events after ``--event-ttl``, one hour by default (kubernetes v1.36.3,
``kube-apiserver --help``), while Airflow waits up to ``[core] max_task_retry_delay``, 24 hours by
default (airflow-core ``config_templates/config.yml``), before a retry. Not a ConfigMap: the reader is
the worker, where DAG code runs, and RBAC cannot grant ``get`` by a name prefix, so a ConfigMap record
would hand every DAG the namespace's ConfigMaps (the quota ledgers, the chart's configuration) that
rbac.yaml keeps from workers; reading Leases reveals nothing else. A Lease also says exactly what the
record says: who holds it (``holderIdentity``: who cancelled), since when (``acquireTime``) and for how
long (``leaseDurationSeconds``: how long the record is kept).

**Found by name, never by label.** The reading try computes each record's name from its own identity
(:func:`record_name` of each earlier try of its run) and GETs it; the labels and annotations on a record
are for people and for the sweep, and are never trusted.

**Who writes it.** The identity that acts for people: the api-server (the GPU Jobs page) and CLI users
with their own kubeconfig. rbac.yaml grants ``create`` on Leases to the api-server's Role only, and
admission-policy.yaml's rule cancel-records limits that identity's Lease writes to records and forbids the
worker and triggerer identities (where DAG code runs) any write of a record: a DAG's code can neither
block another user's task with a record nor delete one to undo a cancel. A cancel that cannot write its
record does nothing and says which right is missing: written without it, the cancel could be undone.

**Which cancels write none.** The orphan sweep's: it cancels only jobs whose task instance ended or no
longer exists, so no try of that run follows, and a record for a run that does not exist yet (a DAG
could plant a job for a future run) would block that run when it comes. Airflow's own kill (the
trigger's ``on_kill``): mark failed and mark success end the task instance themselves, and a clear
starts a new run that must run.

**Whose try.** The record names the try the job's annotations name (the exact Airflow ids, the ones the
GPU Jobs page checks the user's permission on), and only if the job's name is an attempt of that try and
its task-key and try labels agree (:func:`task_try_of`). A job whose labels disagree with its annotations
was not made by the product, and its cancel records nothing.

**A clear runs it again.** A try reads only the records of the tries before it in the same run of the
task (:func:`earlier_tries`, ``outcome.same_run_of_task``): a clear sets Airflow's ``max_tries`` so that
the next try starts a new run, which never reads the old run's records. An expired record does not count
(:func:`refusal`); the orphan sweep deletes expired records (:func:`expired_records`).

A job deleted by hand (``kubectl delete``) leaves no record: the only witness is the task's trigger,
whose identity (DAG code runs in the triggerer) may not write records. Its try records the cancel in
the task's state store as before; should its worker die first, a later try runs the job again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from airflow_jobs_plugin.cluster.objects import Meta, as_int, dig, parse_time, rfc3339, time_text
from airflow_jobs_plugin.cluster.resources import LEASES
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.naming import TaskIdentity, split_attempt

PREFIX = "airflow-jobs-cancelled-"
# How long a record is kept when the deployment says nothing ([airflow_jobs] cancel_record_ttl): a week,
# well past Airflow's longest wait before a retry (24 h) and the heartbeat timeout that starts it.
DEFAULT_KEEP = timedelta(days=7)
# leaseDurationSeconds is an int32 (k8s.io/api coordination/v1 LeaseSpec).
MAX_KEEP = timedelta(seconds=2**31 - 1)


@dataclass(frozen=True)
class CancelRecord:
    """A product cancel of one task try: the try (``task.try_number``), the job it acted on, who and when."""

    task: TaskIdentity
    kind: str
    job: str
    by: str
    at: datetime
    keep: timedelta = DEFAULT_KEEP

    @property
    def name(self) -> str:
        return record_name(self.task)

    @property
    def expires_at(self) -> datetime:
        return self.at + self.keep


def record_name(task: TaskIdentity) -> str:
    """The name of the record of a cancel of ``task``'s try (its ``try_number``)."""
    return PREFIX + task.task_key()


def record_name_of_job(name: str) -> str | None:
    """The name of the record a cancel of the job called ``name`` leaves (its try's); ``None`` for a name
    the product does not give jobs."""
    try:
        family, _ = split_attempt(name)
    except ValueError:
        return None
    return PREFIX + family


def task_try_of(job: Mapping[str, Any]) -> TaskIdentity | None:
    """The Airflow task try ``job`` was submitted for, from its annotations, or ``None`` when it names
    none or its name and labels disagree with them (a job the product did not make)."""
    meta = Meta(job)
    annotations, job_labels = meta.annotations, meta.labels
    dag_id, task_id, run_id = (annotations.get(k) for k in (labels.DAG_ID, labels.TASK_ID, labels.RUN_ID))
    try_number = as_int(annotations.get(labels.TRY_NUMBER))
    raw_index = annotations.get(labels.MAP_INDEX)
    map_index = -1 if raw_index is None else as_int(raw_index)
    if not (dag_id and task_id and run_id) or try_number is None or try_number < 1 or map_index is None:
        return None
    task = TaskIdentity(str(dag_id), str(task_id), str(run_id), map_index, try_number)
    try:
        family, _ = split_attempt(meta.name)
    except ValueError:
        return None
    if family != task.task_key():
        return None
    if job_labels.get(labels.TASK_KEY) != task.instance_key() or job_labels.get(labels.TRY) != str(
        try_number
    ):
        return None
    return task


def record_of(
    job: Mapping[str, Any], *, kind: str, by: str, at: datetime, keep: timedelta
) -> CancelRecord | None:
    """The record of cancelling ``job`` (``None``: it belongs to no task try, nothing to record)."""
    task = task_try_of(job)
    if task is None:
        return None
    return CancelRecord(task, kind, Meta(job).name, by, at, keep)


def lease(record: CancelRecord) -> dict[str, Any]:
    """The Lease that records ``record``."""
    task = record.task
    return {
        "apiVersion": LEASES.api_version,
        "kind": LEASES.kind,
        "metadata": {
            "name": record.name,
            "labels": {
                labels.MANAGED_BY: labels.MANAGED_BY_VALUE,
                labels.RECORD: labels.CANCEL_RECORD_VALUE,
                labels.TASK_KEY: task.instance_key(),
                labels.TRY: str(task.try_number),
            },
            "annotations": {
                labels.DAG_ID: task.dag_id,
                labels.TASK_ID: task.task_id,
                labels.RUN_ID: task.run_id,
                labels.MAP_INDEX: str(task.map_index),
                labels.TRY_NUMBER: str(task.try_number),
                labels.CANCELLED_JOB: f"{record.kind}/{record.job}",
            },
        },
        "spec": {
            "holderIdentity": record.by,
            "acquireTime": rfc3339(record.at),
            "renewTime": rfc3339(record.at),
            "leaseDurationSeconds": int(record.keep.total_seconds()),
        },
    }


@dataclass(frozen=True)
class Found:
    """What a reader makes of a Lease found under a record's name (any field may be missing)."""

    job: str | None
    by: str | None
    at: datetime | None
    expires_at: datetime | None


def found(record: Mapping[str, Any]) -> Found:
    """A record as stored, read leniently: a Lease found under a record's name is a cancel, whatever it
    lacks. Its time is its ``acquireTime`` (else its creation) and it is kept ``leaseDurationSeconds``
    (else :data:`DEFAULT_KEEP`)."""
    at = parse_time(dig(record, "spec", "acquireTime")) or Meta(record).created_at
    seconds = as_int(dig(record, "spec", "leaseDurationSeconds"))
    keep = timedelta(seconds=seconds) if seconds is not None and seconds > 0 else DEFAULT_KEEP
    job = Meta(record).annotations.get(labels.CANCELLED_JOB)
    by = dig(record, "spec", "holderIdentity")
    return Found(
        str(job).split("/", 1)[-1] if job else None,
        str(by) if by else None,
        at,
        at + keep if at is not None else None,
    )


def earlier_tries(*, try_number: int, max_tries: int | None, retries: int) -> range:
    """The tries before ``try_number`` in the same run of the task, whose records this try reads.

    The rule is ``outcome.same_run_of_task``'s: a clear sets ``max_tries`` to the last try plus
    ``retries``, so the run's first try is ``max_tries - retries + 1``. Unknown ``max_tries``: none."""
    if max_tries is None:
        return range(0)
    return range(max(1, max_tries - retries + 1), try_number)


def record_names(task: TaskIdentity, *, max_tries: int | None, retries: int) -> list[tuple[int, str]]:
    """``(try, record name)`` of every earlier try of ``task``'s run, the newest first."""
    tries = earlier_tries(try_number=task.try_number, max_tries=max_tries, retries=retries)
    return [(n, record_name(replace(task, try_number=n))) for n in reversed(tries)]


def cancelled_message(try_number: int, job: str | None, by: str | None, at: str | None) -> str:
    """What a later try of the same run fails with: which try was cancelled, by whom and when."""
    what = f"job {job}, " if job else ""
    when = f" at {time_text(at)}" if at else ""
    return (
        f"try {try_number} of this task was cancelled ({what}by {by or 'someone'}{when}) and the task was "
        "not cleared since: not running the job again (clear the task to run it again)"
    )


def refusal(record: Mapping[str, Any], try_number: int, *, now: datetime) -> str | None:
    """The message to end this try with, given the record of earlier try ``try_number`` found under its
    name; ``None`` once it has expired."""
    seen = found(record)
    if seen.expires_at is not None and seen.expires_at <= now:
        return None
    at = seen.at.isoformat(timespec="seconds") if seen.at is not None else None
    return cancelled_message(try_number, seen.job, seen.by, at)


def expired_records(records: Iterable[Mapping[str, Any]], now: datetime) -> list[tuple[str, str]]:
    """``(name, uid)`` of the records (Leases listed by the RECORD label) whose time has run out, and that
    are named as records: what the orphan sweep deletes."""
    out = []
    for record in records:
        meta = Meta(record)
        if not meta.name.startswith(PREFIX) or meta.labels.get(labels.RECORD) != labels.CANCEL_RECORD_VALUE:
            continue
        expires = found(record).expires_at
        if expires is not None and expires <= now and not meta.deleting:
            out.append((meta.name, meta.uid))
    return out


def keep_from(value: str | None) -> timedelta:
    """``[airflow_jobs] cancel_record_ttl`` (whole seconds) as a keep time; anything else is refused with
    the option's name and range."""
    text = (value or "").strip()
    seconds = as_int(text) if text else int(DEFAULT_KEEP.total_seconds())
    if seconds is None or not 1 <= seconds <= MAX_KEEP.total_seconds():
        raise ValueError(
            f"[airflow_jobs] cancel_record_ttl must be whole seconds from 1 to {int(MAX_KEEP.total_seconds())} "
            f"(a Lease's leaseDurationSeconds), got {value!r}; the default is {int(DEFAULT_KEEP.total_seconds())} "
            "(7 days)"
        )
    return timedelta(seconds=seconds)
