"""Which job of an earlier try a new try may follow instead of submitting one (pure, no I/O).

Job names and task keys are predictable from a DAG's identifiers, and every DAG's code runs with the
same worker identity, so a job found under a task's name or task key may have been planted by another
DAG: with the task's image and command, and an environment variable, a volume or a security context of
its own. A try adopts a job only if it is, field for field, the job this task would have submitted
(:func:`foreign_problem`, first match wins):

1. Its try and attempt labels name a try of this task instance up to this one and one of its attempts,
   and its name is the one :func:`~airflow_jobs_plugin.jobs.naming.job_name` gives them.
2. Its kind is the kind this try's spec runs as.
3. Its Kueue LocalQueue (the queue-name label) is one it may have (:func:`_queue_difference`).
4. Its spec is what that try would have created (:func:`~airflow_jobs_plugin.jobs.manifests.submitted_body`:
   this try's spec, charged as the pool charges it now), carried to that attempt as a job-level retry
   clones it (:func:`~airflow_jobs_plugin.jobs.attempts.next_attempt`): every pod template whole and every
   job-level field (parallelism, completions, completion mode, back-off, deadlines, an MPIJob's replicas,
   slots and run policy), both read in their stored form (``JobKind.stored_form``: what the API server
   and the kind's controller fill in or generate does not count). Not compared: ``suspend``, which
   admission switches, and in a job in a LocalQueue, what Kueue writes into its pod templates when it
   admits it (:func:`_without_kueue_additions`).
5. Its labels and annotations carry this try's value of every key the product writes at creation, and
   no other key of the product's or Kueue's (no quota limit, GPU flavor, device or priority of its own),
   leaving aside the keys written after creation (:data:`WRITTEN_AFTER_CREATION`). Keys of other owners
   are not the product's to judge.
6. It has no owner that could take it away.

Among the annotations is the digest of the task instance and the rendered spec
(:func:`spec_fingerprint`, stamped at submit): a sign that the task's arguments changed, never enough
by itself, since any DAG author can compute it.

A job that fails is never adopted and never deleted: the try fails naming the first field that differs.

A cancel stays a cancel: a job of an earlier try of the same run of the task that carries the Cancelled
verdict ends this try as cancelled (:func:`cancelled_in_run`), even when the try that saw the cancel died
before recording it in the task's state store. A cancel that deleted the job leaves its record instead
(:mod:`airflow_jobs_plugin.jobs.cancel_record`), which the submission reads. A try that ran out of its
``execution_timeout`` is not a person's cancel: its job is cancelled naming the timeout
(:data:`~airflow_jobs_plugin.jobs.timeouts.TIMEOUT_CANCEL_BY`) and Airflow's retries still run, each a
new job through the queue.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from airflow_jobs_plugin.cluster.objects import Meta
from airflow_jobs_plugin.jobs import attempts, kinds, kueue_job, labels
from airflow_jobs_plugin.jobs.cancel_record import cancelled_message
from airflow_jobs_plugin.jobs.differences import ABSENT, Difference, first_difference
from airflow_jobs_plugin.jobs.jobview import JobView
from airflow_jobs_plugin.jobs.manifests import submitted_body
from airflow_jobs_plugin.jobs.naming import MAX_ATTEMPTS, TaskIdentity, attempt_name
from airflow_jobs_plugin.jobs.outcome import same_run_of_task
from airflow_jobs_plugin.jobs.pod_template import merge_under
from airflow_jobs_plugin.jobs.spec import JobSpec
from airflow_jobs_plugin.jobs.timeouts import TIMEOUT_CANCEL_BY
from airflow_jobs_plugin.queueing.quota.flavors import Charge

# Bumped when what the digest covers changes, so a digest of another version never matches by chance.
_FINGERPRINT_VERSION = "1"

# Kueue's mark on a Job it is stopping, between its two writes (kubernetes-sigs/kueue v0.19.2
# pkg/controller/jobs/job/job_controller.go, StoppingAnnotation).
KUEUE_STOPPING = "kueue.x-k8s.io/stopping"
# The label and annotation domains whose keys change what the product or Kueue does with a job (a
# subdomain counts: sim.airflow-jobs.io's scenario, Kueue's podset labels). What Kueue's admission checks
# add to pod templates (a ProvisioningRequest's annotations) is under autoscaling.x-k8s.io.
PRODUCT_DOMAINS = (labels.PREFIX,)
KUEUE_DOMAINS = ("kueue.x-k8s.io", "autoscaling.x-k8s.io")

# Keys the product or Kueue writes on a job after creating it, or whose value differs between a task's
# attempts without changing what runs or what is charged: never compared. Every other key of the
# product's is written at creation and compared (tests/core/test_adoption_rules.py classifies each key
# of labels.py).
WRITTEN_AFTER_CREATION = frozenset(
    {
        labels.CREATED,  # each attempt's creation time
        labels.QUEUED_AT,  # the first attempt's, kept by every later one
        labels.ADMITTED,
        labels.ADMITTED_AT,
        labels.QUEUE_WAITED,
        labels.QUEUE_WAIT_SINCE,
        labels.REQUEUE_COUNT,
        labels.REQUEUE_NOT_BEFORE,
        labels.VERDICT,
        labels.VERDICT_MESSAGE,
        labels.CANCELLED_BY,
        labels.CANCELLED_AT,
        labels.ENDED_SPEC,
        labels.STOPPED_AT,
        labels.STOPPED_BY,
        labels.DELETE_AFTER,
        labels.HISTORY,
        labels.PREEMPTED_BY,
        labels.PREEMPTION_MESSAGE,
        labels.PREEMPTIONS,
        labels.KILL_REQUESTED,  # a trigger's on_kill asks (jobs/kill_request.py)
        # The pool lifts its gate when it hands the job over (ledger.handoff_patch).
        labels.KUEUE_ADMISSION_GATE,
        KUEUE_STOPPING,
    }
)


def spec_fingerprint(spec: JobSpec, task: TaskIdentity) -> str:
    """The digest of the task instance (not the try) and the rendered spec, as stamped at submit."""
    document = {
        "v": _FINGERPRINT_VERSION,
        "task": task.instance_key(),
        "kind": spec.kind,
        "spec": spec.to_dict(),
    }
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Submission:
    """What this try submits: its spec, its task try, how the pool charges it (``None``: no policy),
    and the digest it stamps (:func:`spec_fingerprint`)."""

    spec: JobSpec
    task: TaskIdentity
    charge: Charge | None
    fingerprint: str

    def body(self, try_number: int | None = None) -> dict:
        """The object try ``try_number`` of the task (this one by default) creates with this spec."""
        task = self.task if try_number is None else dataclasses.replace(self.task, try_number=try_number)
        return submitted_body(
            self.spec,
            task=task,
            charge=self.charge,
            fingerprint=self.fingerprint,
            queued_at=datetime.now(timezone.utc),
        )


def foreign_problem(job: Mapping[str, Any], submission: Submission) -> str | None:
    """Why ``job`` is not the job this task would have submitted (None: it is), in one message naming
    the first field that differs."""
    difference = job_difference(job, submission)
    if difference is None:
        return None
    meta = JobView(job)
    ref = f"{meta.kind.resource.kind} {meta.namespace}/{meta.name}"
    return (
        f"{ref} holds this task's name or task key but is not the job this task would submit: "
        f"{difference.describe('this task', 'that job')}. It was submitted by another DAG, or this task's "
        f"arguments changed since an earlier try: it was left alone. Cancel it (airflow-jobs cancel "
        f"{meta.namespace}/{meta.name}) or delete it, then clear the task"
    )


def job_difference(job: Mapping[str, Any], submission: Submission) -> Difference | None:
    """The first field in which ``job`` differs from the job this task would have submitted, in the
    order of the module's rules, or None."""
    meta = JobView(job)
    try_number = _whole(meta.labels.get(labels.TRY), 1, submission.task.try_number)
    if try_number is None:
        tries = f"a try from 1 to {submission.task.try_number}"
        return Difference(f"metadata.labels[{labels.TRY}]", tries, meta.labels.get(labels.TRY, ABSENT))
    attempt = _whole(meta.labels.get(labels.ATTEMPT), 1, MAX_ATTEMPTS)
    if attempt is None:
        span = f"an attempt from 1 to {MAX_ATTEMPTS}"
        return Difference(f"metadata.labels[{labels.ATTEMPT}]", span, meta.labels.get(labels.ATTEMPT, ABSENT))
    expected = _as_attempt(submission.body(try_number), attempt)
    if meta.name != Meta(expected).name:
        return Difference("metadata.name", Meta(expected).name, meta.name)
    kind = kinds.kind_of(expected)
    if kinds.kind_of(job) is not kind:
        return Difference("kind", kind.name, kinds.kind_of(job).name)
    # The server generates what names the object itself (a Job's selector on its uid) from the object.
    expected["metadata"]["uid"] = meta.uid
    wanted, found = kind.stored_form(expected), kind.stored_form(job)
    queue = _queue_difference(expected, job)
    if queue is not None:
        return queue
    if kueue_job.queue_name(job) is not None or meta.annotations.get(labels.KUEUE_HANDOFF):
        # A job for Kueue, handed over or (a later attempt cloned from one Kueue admitted) waiting to be.
        _without_kueue_additions(kind, wanted, found)
    _with_the_authors_values(kind, job, found)
    # Admission switches suspend; it is never what a job runs.
    for stored in (wanted, found):
        if isinstance(stored.get("spec"), Mapping):
            stored["spec"] = merge_under(stored["spec"], kind.suspend_patch(True))
    return (
        first_difference(wanted.get("spec"), found.get("spec", ABSENT), "spec")
        or _metadata_difference(expected, job, "labels")
        or _metadata_difference(expected, job, "annotations")
        or first_difference(
            JobView(expected).owner_references, JobView(job).owner_references, "metadata.ownerReferences"
        )
    )


def _with_the_authors_values(kind: kinds.JobKind, job: Mapping[str, Any], found: dict) -> None:
    """A job the controller ruled failed was ended through its own spec (``JobKind.ending_spec``: a Job's
    deadline of 1 s, parallelism 0 if it was queued), recording the author's values beside its verdict;
    those are what its try submitted. Only a field that holds exactly the ending's value, on a job whose
    verdict only the controller may write (admission-policy.yaml), is given back: a planted record can
    change nothing that runs."""
    view = JobView(job)
    if not view.verdict or not isinstance(found.get("spec"), dict):
        return
    try:
        recorded = json.loads(view.annotations.get(labels.ENDED_SPEC) or "")
    except ValueError:
        return
    if not isinstance(recorded, Mapping):
        return
    queued = {**job, "spec": merge_under(dict(job.get("spec") or {}), kind.suspend_patch(True))}
    ending = {**kind.ending_spec(job), **kind.ending_spec(queued)}
    spec = found["spec"]
    for field, value in recorded.items():
        if field in ending and field != "suspend" and spec.get(field) == ending[field]:
            if value is None:
                spec.pop(field, None)
            else:
                spec[field] = value


def _whole(value: Any, low: int, high: int) -> int | None:
    if not isinstance(value, str) or not value.isdigit():
        return None
    number = int(value)
    return number if low <= number <= high else None


def _as_attempt(first: dict, attempt: int) -> dict:
    """``first`` (an attempt 1) as the trigger clones it into ``attempt`` (``attempts.next_attempt``)."""
    if attempt == 1:
        return first
    name = attempt_name(Meta(first).name, attempt)
    now = datetime.now(timezone.utc)
    return attempts.next_attempt(first, name=name, attempt=attempt, not_before=now, now=now)


def _in(domains: tuple[str, ...], key: str) -> bool:
    """Whether the label or annotation ``key`` is in one of ``domains`` or a subdomain of one."""
    prefix = key.split("/", 1)[0] if "/" in key else ""
    return any(prefix == domain or prefix.endswith(f".{domain}") for domain in domains)


def _metadata_difference(
    expected: Mapping[str, Any], job: Mapping[str, Any], field: str
) -> Difference | None:
    wanted: Mapping[str, Any] = getattr(JobView(expected), field)
    found: Mapping[str, Any] = getattr(JobView(job), field)
    for key in [*wanted, *sorted(k for k in found if k not in wanted)]:
        if key in WRITTEN_AFTER_CREATION or key == labels.KUEUE_QUEUE_NAME:
            continue
        if key not in wanted and not _in(PRODUCT_DOMAINS + KUEUE_DOMAINS, key):
            continue  # another owner's key: nothing the product or Kueue reads
        difference = first_difference(
            wanted.get(key, ABSENT), found.get(key, ABSENT), f"metadata.{field}[{key}]"
        )
        if difference is not None:
            return difference
    return None


def _queue_difference(expected: Mapping[str, Any], job: Mapping[str, Any]) -> Difference | None:
    """The job's Kueue LocalQueue (its queue-name label), if it is not one it may have: this try's; where
    this try names none, none, Kueue's ``default`` (the one Kueue's webhook gives a job naming none where
    a LocalQueue of that name exists), or the one the pool hands it to (``labels.KUEUE_HANDOFF``)."""
    wanted = kueue_job.queue_name(expected)
    found = kueue_job.queue_name(job)
    allowed: set[str | None]
    if wanted is not None:
        allowed = {wanted}
    else:
        handoff = JobView(expected).annotations.get(labels.KUEUE_HANDOFF)
        allowed = {None, labels.KUEUE_DEFAULT_LOCAL_QUEUE, handoff}
    if found in allowed:
        return None
    return Difference(
        f"metadata.labels[{labels.KUEUE_QUEUE_NAME}]", ABSENT if wanted is None else wanted, found
    )


def _without_kueue_additions(
    kind: kinds.JobKind, wanted: Mapping[str, Any], found: Mapping[str, Any]
) -> None:
    """Take out of ``found``'s pod templates what Kueue adds to them when it admits a job in one of its
    LocalQueues (kubernetes-sigs/kueue v0.19.2 ``pkg/podset/podset.go``, ``Merge`` of ``FromAssignment``
    and ``FromUpdate``; ``pkg/controller/jobframework/reconciler.go``, ``getPodSetsInfoFromStatus``): its
    flavors' node labels as node-selector entries, their tolerations after the template's own, its
    topology scheduling gate, and labels and annotations of its own domain and of its admission checks.
    Kueue refuses to change a value the template sets (``Merge`` fails on a conflict), and takes all of
    it back when it suspends the job; a job it once admitted keeps them in a later attempt's clone."""
    pairs = zip(kind.pod_sets(wanted), kind.pod_sets(found), strict=False)
    for ours, theirs in pairs:
        template = theirs.template
        if not isinstance(template, dict):
            continue
        for field in ("labels", "annotations"):
            own = getattr(Meta(ours.template), field)
            found_map = getattr(Meta(template), field)
            if isinstance(found_map, dict):
                for key in [k for k in found_map if k not in own and _in(KUEUE_DOMAINS, k)]:
                    del found_map[key]
        spec = template.get("spec")
        own_spec = ours.template.get("spec") or {}
        if not isinstance(spec, dict):
            continue
        selector = spec.get("nodeSelector")
        if isinstance(selector, dict):
            own_selector = own_spec.get("nodeSelector") or {}
            for key in [k for k in selector if k not in own_selector]:
                del selector[key]
            if not selector:
                del spec["nodeSelector"]
        own_tolerations = list(own_spec.get("tolerations") or [])
        tolerations = spec.get("tolerations")
        if isinstance(tolerations, list) and tolerations[: len(own_tolerations)] == own_tolerations:
            if own_tolerations:
                spec["tolerations"] = own_tolerations
            else:
                del spec["tolerations"]
        gates = spec.get("schedulingGates")
        if isinstance(gates, list):
            own_gates = own_spec.get("schedulingGates") or []
            kept = [
                g
                for g in gates
                if g in own_gates or not (isinstance(g, Mapping) and _in(KUEUE_DOMAINS, str(g.get("name"))))
            ]
            if kept:
                spec["schedulingGates"] = kept
            else:
                del spec["schedulingGates"]


def cancelled_in_run(
    jobs: Iterable[Mapping[str, Any]], *, try_number: int, max_tries: int | None, retries: int
) -> str | None:
    """The message to end this try with as cancelled, or None: a job of an earlier try of the same run of
    the task (no clear between) was cancelled; after a clear the task runs again."""
    for job in jobs:
        view = JobView(job)
        annotations = view.annotations
        if view.verdict != "Cancelled" or annotations.get(labels.CANCELLED_BY) == TIMEOUT_CANCEL_BY:
            continue
        try:
            earlier = int(view.labels.get(labels.TRY) or "")
        except ValueError:
            continue
        if not same_run_of_task(earlier, try_number=try_number, max_tries=max_tries, retries=retries):
            continue
        return cancelled_message(
            earlier, view.name, annotations.get(labels.CANCELLED_BY), annotations.get(labels.CANCELLED_AT)
        )
    return None
