"""JobSpec -> the Kubernetes object to create, whatever its kind: :func:`build_manifest` asks the kind the
registry chooses for the spec to build it, :func:`pool_gate` and :func:`kueue_handoff` prepare it for the
admission that follows, :func:`with_charge` makes the spec say what the quota pool charges.

Pure: returns plain JSON-shaped dicts, ready for the API. Each kind builds its object in its adapter
(``jobs/kinds/batch.py`` a ``batch/v1`` Job, ``mpi.py`` a ``kubeflow.org/v2beta1`` MPIJob, ``torchrun.py``
an Indexed Job) from the pieces every kind shares (``jobs/pod_template.py``). Decisions worth knowing:

* **Always suspended** (``spec.suspend`` / ``spec.runPolicy.suspend``): the job waits in the cluster for
  the quota pool to admit it, and admission is just unsuspending it. While suspended, Kubernetes does
  not run ``activeDeadlineSeconds``, so queueing time never counts against ``active_deadline``.
* **Pod failure policy** (single Job): the author's fatal *and* retryable exit codes fail the Job at
  once (``FailJob``) instead of burning pod retries; the product then tells them apart by exit code
  (fatal: stop; retryable: new attempt after back-off). A pod with the ``DisruptionTarget`` condition
  (preemption, node drain, node lost, kubelet eviction) also fails the Job at once: recreating the pod
  inside the same Job would keep the GPU reservation while the cluster is short of capacity, whereas a
  failed attempt releases it and the product resubmits a new attempt through the queue with back-off
  (bounded by ``max_attempts``). Every other non-zero exit counts against ``backoff_limit``.
  The MPIJob API has no pod failure policy: for MPI jobs the product applies these exit-code rules
  to the launcher's exit code itself.
* **Environment** in every container (init containers too): ``JOB_USER``, ``JOB_GROUP`` (exact values),
  ``JOB_NAME`` (this attempt's job name), ``JOB_ATTEMPT``, ``JOB_ROLE`` (``worker`` or ``launcher``),
  ``JOB_RANK`` and ``JOB_WORLD_SIZE`` (hosts that run ranks). A single-pod job is worker 0 of 1. MPI
  workers read their rank from the MPI operator's replica-index label through the downward API. The
  launcher's ``JOB_RANK`` is ``-1``: always set and always an integer, so ``int(os.environ["JOB_RANK"])``
  works everywhere, and never a valid worker index. A launcher with GPUs is itself the first host
  (:func:`~airflow_jobs_plugin.jobs.kinds.mpi.launcher_works`): it is rank 0, the workers 1..N, and ``JOB_WORLD_SIZE`` is N+1, the
  numbering mpi-operator's hostfile and replica-index labels use then. A container without GPUs gets
  ``NVIDIA_VISIBLE_DEVICES=void`` so a CUDA base image on a GPU node cannot use GPUs it was not charged for.
* **Labels**: MANAGED_BY, GROUP, USER, TASK_KEY, ATTEMPT (plus the author's) on the job and every pod
  template; ROLE and RANK only on pod templates, where they describe a replica. MPI worker pods share
  one template, so their RANK comes from the operator's ``training.kubeflow.org/replica-index`` label
  (see :func:`pod_role_and_rank`); the launcher has no RANK label (``-1`` is not a valid label value).
* **Annotations**: the exact Airflow identifiers, exact group/user and the author's on the job and
  pods; GPUS, PRIORITY, QUEUED_AT and REQUEUE_COUNT only on the job, because they change over the
  job's life and a pod copy would go stale.
* **MPI**: ``slotsPerWorker`` = GPUs per worker (at least 1); the launcher pod uses
  ``restartPolicy: Never`` (every try keeps its own pod, log and exit code, bounded by
  ``backoff_limit``), workers ``OnFailure`` (a crashed ``sshd`` comes back in place; the job shows it
  as degraded).
* **The launcher waits for the names the operator publishes**: the operator's headless Service is
  named after the MPIJob and each worker pod gets ``hostname: <job>-worker-<i>``, ``subdomain: <job>``
  (kubeflow/mpi-operator ``pkg/controller/mpi_job_controller.go``, ``newJobService`` / ``newWorker``,
  v0.5.0 through v0.8.0), so a worker is reachable as :func:`~airflow_jobs_plugin.jobs.kinds.mpi.worker_host` once it is Ready (the Service
  does not ``publishNotReadyAddresses`` unless ``runLauncherAsWorker``). ``launcherCreationPolicy``
  defaults to ``WaitForWorkersReady``, but that policy is only checked when the operator *creates* the
  launcher Job, and for an MPIJob created suspended (always, here) the operator creates it at its first
  sync, suspended, because no worker exists yet and ``countReadyWorkerPods(worker) == len(worker)``
  reads ``0 == 0``; on resume the existing launcher is simply unsuspended with the workers
  (kubeflow/mpi-operator issue #615, open at v0.8.0). So the launcher also runs a ``wait-for-workers``
  init container (the launcher image, a ``sh`` loop over ``getent hosts`` / ``nslookup``) that waits
  for exactly the names of :func:`~airflow_jobs_plugin.jobs.kinds.mpi.worker_host`: the launcher shows ``Init:N/M``, ``PodInitializing``,
  then ``Running``. The author's ``init_containers`` (a data fetch, say) run first, in every replica.
* **cleanPodPolicy: Running**: when the launcher ends, the operator deletes the workers that are
  still Running or Pending (``deleteWorkerPods``), so an ``sshd`` that never exits gives its GPUs back
  at once; workers that already ended stay, with their logs, until the MPIJob's TTL. The v2beta1
  default is ``None`` (``setDefaultsRunPolicy`` in ``pkg/apis/kubeflow/v2beta1/default.go``), which
  would leave every worker holding its GPUs until the TTL deletes the job. Nothing of the ranks is
  lost: their output reaches ``mpirun``, i.e. the launcher's log, which the operator never cleans (a
  worker pod's own log is its ``sshd``'s); ``airflow-jobs logs JOB --rank N`` reads rank N's lines
  there once the worker is gone (:mod:`airflow_jobs_plugin.logs.rank_log`).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from datetime import datetime

from airflow_jobs_plugin.cluster.objects import dig
from airflow_jobs_plugin.cluster.objects import rfc3339 as rfc3339
from airflow_jobs_plugin.jobs import kinds, kueue_job
from airflow_jobs_plugin.jobs import labels as keys
from airflow_jobs_plugin.jobs.kinds import COMPLETION_INDEX
from airflow_jobs_plugin.jobs.spec import JobSpec, TaskIdentity, freeze, thaw
from airflow_jobs_plugin.queueing.quota.flavors import Charge, with_avoidance


def pod_role_and_rank(pod_labels: Mapping[str, str]) -> tuple[str | None, int | None]:
    """Role and rank of a pod of this product from its labels: ('worker', 0), ('launcher', None), ...

    Single-pod jobs carry ROLE and RANK; MPI pods carry ROLE, and workers get their index from the
    MPI operator's replica-index label; torchrun nodes from the Job controller's completion-index label.
    """
    role = pod_labels.get(keys.ROLE) or pod_labels.get(keys.MPI_JOB_ROLE)
    raw = pod_labels.get(keys.RANK)
    if raw is None:
        # Workers, and a launcher that runs ranks itself (only then does it carry an index).
        raw = pod_labels.get(keys.MPI_REPLICA_INDEX)
    if raw is None:
        raw = pod_labels.get(COMPLETION_INDEX)
    try:
        rank = int(raw) if raw is not None else None
    except ValueError:
        rank = None
    return role, rank


def pool_gate(body: dict) -> dict:
    """``body`` held back from Kueue until the quota pool admits it (``kueue_job.POOL_GATE``).

    Harmless where no Kueue runs or where Kueue never takes the job; where it does take it at creation
    (a LocalQueue named ``default`` in the namespace, ``manageJobsWithoutQueueName``), the gate keeps its
    Workload from being admitted before the pool's per-user limits have said yes."""
    out = copy.deepcopy(body)
    annotations = out["metadata"].setdefault("annotations", {})
    present = [g for g in (annotations.get(keys.KUEUE_ADMISSION_GATE) or "").split(",") if g]
    if kueue_job.POOL_GATE not in present:
        annotations[keys.KUEUE_ADMISSION_GATE] = ",".join([*present, kueue_job.POOL_GATE])
    return out


def kueue_handoff(body: dict) -> dict:
    """``body`` to be handed to Kueue by the quota pool rather than at once: no queue-name label yet
    (Kueue ignores a job without one, unless it manages every job of the namespace), and the LocalQueue
    it will get in ``keys.KUEUE_HANDOFF``. The pool writes the label once the job's user may run it
    (``quota.ledger.handoff_patch``), so a user over their limit never reaches Kueue's queue."""
    out = copy.deepcopy(body)
    queue = out["metadata"]["labels"].pop(keys.KUEUE_QUEUE_NAME, None)
    if not queue:
        raise ValueError("kueue_handoff: the job names no Kueue LocalQueue")
    out["metadata"].setdefault("annotations", {})[keys.KUEUE_HANDOFF] = queue
    for template in [pod_set.template for pod_set in kinds.kind_of(out).pod_sets(out)]:
        template_labels = dig(template, "metadata", "labels")
        if isinstance(template_labels, dict):
            template_labels.pop(keys.KUEUE_QUEUE_NAME, None)
    return out


def build_manifest(
    spec: JobSpec, *, name: str, task: TaskIdentity, attempt: int, queued_at: datetime
) -> dict:
    """The object to create for one attempt: a Job when ``spec.workers == 1``, else an MPIJob, or with
    ``framework='torchrun'`` an Indexed Job: the kind the registry chooses for ``spec`` builds it
    (``kinds.for_spec``, ``JobKind.build``).

    ``name`` is normally ``task.job_name(attempt)``; ``queued_at`` (timezone-aware) is the enqueue time
    of the task's first attempt, so a resubmitted attempt keeps its place in the queue.
    """
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
        raise ValueError(f"attempt must be a whole number >= 1, got {attempt!r}")
    return kinds.for_spec(spec).build(spec, name=name, task=task, attempt=attempt, queued_at=queued_at)


def submitted_body(
    spec: JobSpec,
    *,
    task: TaskIdentity,
    charge: Charge | None,
    fingerprint: str,
    queued_at: datetime,
) -> dict:
    """The object try ``task`` creates: the first attempt of ``spec`` as the pool charges it
    (:func:`with_charge`), its LocalQueue, where it names one, only asked for (:func:`kueue_handoff`: the
    admission controller names it on the job once the job may run), held back from Kueue and from
    running until the admission controller lets it go (:func:`pool_gate`: the admission policy refuses a
    job without the gate), and stamped with the digest of its task and spec (``fingerprint``). What a try
    creates, and what a try that finds an earlier try's job compares it with (``jobs/adoption.py``)."""
    body = build_manifest(
        with_charge(spec, charge), name=task.job_name(1), task=task, attempt=1, queued_at=queued_at
    )
    if spec.kueue_queue:
        body = kueue_handoff(body)
    body = pool_gate(body)
    body["metadata"].setdefault("annotations", {})[keys.SPEC_FINGERPRINT] = fingerprint
    return body


def with_charge(spec: JobSpec, charge: Charge | None) -> JobSpec:
    """``spec`` as the quota pool charges it: a job on a GPU flavor's nodes carries the flavor's name
    (the quota line it waits in); one that names no flavor of a resource that has some is kept off
    every flavored node, so it never spends a flavor's GPUs uncharged (queueing/quota/flavors.py)."""
    if charge is None:
        return spec
    if charge.flavor is not None:
        return dataclasses.replace(
            spec, annotations=freeze({**spec.annotations, keys.GPU_FLAVOR: charge.flavor.name})
        )
    if charge.avoid:
        return dataclasses.replace(spec, affinity=freeze(with_avoidance(thaw(spec.affinity), charge.avoid)))
    return spec
