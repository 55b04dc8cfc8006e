"""Label and annotation keys the product writes on Jobs, MPIJobs and pods, and reads back.

Everything the product needs to find or resume a job is stored on the cluster objects themselves
(Airflow's metadata DB is out of reach from workers and triggers), so these keys are the contract
between the operator, the trigger, the quota pool, the UI and any second Airflow deployment that
shares the cluster. Pure constants: no I/O.
"""

from __future__ import annotations

PREFIX = "airflow-jobs.io"

# --- labels (selectable; values are DNS-1123-label-safe, at most 63 characters) ---
# Kueue's: the LocalQueue a job is submitted to (kueue ``constants.QueueLabel``). The product writes it
# when building a job and reads it when comparing one; what it means for admission is queueing.kueue's.
KUEUE_QUEUE_NAME = "kueue.x-k8s.io/queue-name"
# Kueue's priority class of a job's Workload (kueue ``constants.WorkloadPriorityClassLabel``).
KUEUE_PRIORITY_CLASS = "kueue.x-k8s.io/priority-class"
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "airflow-jobs-plugin"
# The label selector of every object the product made (the watch's, the UI's and the CLI's LISTs).
MANAGED_SELECTOR = f"{MANAGED_BY}={MANAGED_BY_VALUE}"
GROUP = f"{PREFIX}/group"
USER = f"{PREFIX}/user"
# Identifies the Airflow task instance (dag, task, run, map index), the same for every try and every
# attempt: a retried task finds a still-live job of an earlier try by this label and reattaches to it.
TASK_KEY = f"{PREFIX}/task-key"
# Airflow try number and job-level attempt: (TASK_KEY, TRY, ATTEMPT) names exactly one job object.
TRY = f"{PREFIX}/try"
ATTEMPT = f"{PREFIX}/attempt"
# Set on pods by the manifests: "launcher" / "worker" for MPI jobs, "worker" for single-pod Jobs.
ROLE = f"{PREFIX}/role"
RANK = f"{PREFIX}/rank"
# On a torchrun Job and its pods: "torchrun" (jobs/kinds/torchrun.py). Its pods' ranks are their completion indexes.
FRAMEWORK = f"{PREFIX}/framework"
# When the job object was created, in whole seconds since the epoch: label selectors compare integers
# (``airflow-jobs.io/created>N``; the Gt and Lt operators of k8s.io/apimachinery/pkg/labels/selector.go,
# Kubernetes 1.32), so a reader can ask the API server for the jobs created in a time window and read a
# namespace's newest jobs without its whole history (inspect.read_status).
CREATED = f"{PREFIX}/created"
# "true" exactly while the job carries ADMITTED_AT, written and removed in the same writes: the API server
# can then list the jobs that may wait in the pool's queue (``!airflow-jobs.io/admitted``) without the
# rest, which an annotation cannot select.
ADMITTED = f"{PREFIX}/admitted"
ADMITTED_VALUE = "true"

# A kill of the job's Airflow task asked by its trigger's on_kill (the try it followed), answered by the
# GPU Jobs app in Airflow's API server once Airflow's database confirms the kill (jobs/kill_request.py).
# A label, so the app finds the requests by a selector.
KILL_REQUESTED = f"{PREFIX}/kill-requested"

# --- annotations (free text; the exact Airflow identifiers live here, labels carry safe slugs) ---
DAG_ID = f"{PREFIX}/dag-id"
TASK_ID = f"{PREFIX}/task-id"
RUN_ID = f"{PREFIX}/run-id"
MAP_INDEX = f"{PREFIX}/map-index"
TRY_NUMBER = f"{PREFIX}/try-number"
GPUS = f"{PREFIX}/gpus"  # total GPUs over all replicas, what the quota pool charges
# The GPU device those are (the job's gpu_resource), when not whole NVIDIA GPUs (GPU_RESOURCE): the pool
# charges the group's quota of that device.
GPU_DEVICE = f"{PREFIX}/gpu-resource"
# The GPU flavor (a kind of GPU node, queueing/quota/flavors.py) the job's node selector picks: the quota line
# it is charged against instead of its resource's.
GPU_FLAVOR = f"{PREFIX}/gpu-flavor"
PRIORITY = f"{PREFIX}/priority"
# Exact group and user as given by the DAG author: the GROUP / USER labels carry sanitized slugs
# (a label value allows only 63 characters of [A-Za-z0-9._-]), so readers that need the real name
# (quota policy lookup, UI, JOB_USER / JOB_GROUP env) read these annotations.
GROUP_NAME = f"{PREFIX}/group-name"
USER_NAME = f"{PREFIX}/user-name"
# Enqueue time of the first attempt (RFC 3339): a requeued job keeps its original queue position.
QUEUED_AT = f"{PREFIX}/queued-at"
ADMITTED_AT = f"{PREFIX}/admitted-at"
# The queue clock (queue_clock.py): ``queue_timeout`` measures only the time a job waited for quota. The
# seconds it waited in earlier waits, banked when a run or a stop took it off the queue (decimal), and when
# its current wait began (RFC 3339; absent: at QUEUED_AT). A run's time is never on the clock.
QUEUE_WAITED = f"{PREFIX}/queue-waited"
QUEUE_WAIT_SINCE = f"{PREFIX}/queue-wait-since"
REQUEUE_COUNT = f"{PREFIX}/requeue-count"
# Not before this time (RFC 3339) may a requeued job be admitted again (exponential back-off).
REQUEUE_NOT_BEFORE = f"{PREFIX}/requeue-not-before"
# The job's own limits for the quota pool, in seconds (decimal) or a count, written at submit time from
# the task's arguments: any process running an admission pass reads them from the job, so every process
# applies the same limits. Absent: the quota policy's value; REQUEUE_LIMIT "none" means no limit.
SCHEDULE_TIMEOUT = f"{PREFIX}/schedule-timeout"
QUEUE_TIMEOUT = f"{PREFIX}/queue-timeout"
REQUEUE_LIMIT = f"{PREFIX}/requeue-limit"
# A terminal verdict the product reached itself (QueueTimeout, OverQuota, OverRequeueLimit, Cancelled),
# written on the object so every reader computes the same state.
VERDICT = f"{PREFIX}/verdict"
VERDICT_MESSAGE = f"{PREFIX}/verdict-message"
CANCELLED_BY = f"{PREFIX}/cancelled-by"
# A digest of the task instance and the rendered spec its try submitted (adoption.spec_fingerprint): one of
# the annotations a later try compares before it reattaches to a job, never enough by itself (any DAG
# author can compute it): the whole job must be the one the try would submit (jobs/adoption.py).
SPEC_FINGERPRINT = f"{PREFIX}/spec-fingerprint"
# The spec fields (JSON) the product overwrote to end a Job through its own controller (a one-second
# activeDeadlineSeconds, parallelism 0): a retry's next attempt, cloned from the ended one, restores them.
ENDED_SPEC = f"{PREFIX}/ended-spec"
CANCELLED_AT = f"{PREFIX}/cancelled-at"
# On the record a product cancel leaves for its task try (a Lease: jobs/cancel_record.py): RECORD is
# "cancel", the label the orphan sweep lists to remove expired records; CANCELLED_JOB names the job the
# cancel acted on ("<Kind>/<name>"), which may be gone.
RECORD = f"{PREFIX}/record"
CANCEL_RECORD_VALUE = "cancel"
CANCELLED_JOB = f"{PREFIX}/cancelled-job"
# A user stopped the job (RFC 3339 time, and who): it is suspended, holds no GPUs and no reservation, and
# no admission pass may unsuspend it until a resume removes both annotations. QUEUED_AT is kept, so a
# resumed job goes back to its original queue position; its queue clock stops while it is stopped and
# counts only its waits for quota (QUEUE_WAITED).
STOPPED_AT = f"{PREFIX}/stopped-at"
# When a finished MPIJob is to be deleted (RFC 3339: its end plus its ttl_after_finished), written by the
# trigger that saw it finish. mpi-operator v0.5-v0.8 copies ttlSecondsAfterFinished only onto the
# launcher Job and never deletes the MPIJob, so the orphan sweep deletes it then (plugin/sweep.py).
DELETE_AFTER = f"{PREFIX}/delete-after"
# The Kueue LocalQueue a job is handed to once its user's limit in the product's pool allows it (the
# pool admits it by writing Kueue's queue-name label; Kueue's ClusterQueue does the rest: docs/kueue.md).
KUEUE_HANDOFF = f"{PREFIX}/kueue-queue"
STOPPED_BY = f"{PREFIX}/stopped-by"
# What people did to the job (stop, resume, cancel: when, who, and the run a stop or cancel ended), a
# JSON list written by each action in the write that acts (history.py): the stop and resume annotations
# above are removed by the resume, and the pods that showed a run's start are deleted by a stop or cancel.
HISTORY = f"{PREFIX}/history"
# The quota pool preempted the job's current attempt for a higher-priority job of its group: who (the
# preemptor, "<namespace>/<job>") and why, shown in the task log. Preemptions are counted apart from
# requeues after a stuck start (REQUEUE_COUNT counts both): requeue_limit bounds only the latter, since
# a job sent back for someone else's sake must never fail for it.
PREEMPTED_BY = f"{PREFIX}/preempted-by"
PREEMPTION_MESSAGE = f"{PREFIX}/preemption-message"
PREEMPTIONS = f"{PREFIX}/preemptions"

# --- kubeflow MPI operator labels on MPIJob pods ---
MPI_JOB_NAME = "training.kubeflow.org/job-name"
MPI_JOB_ROLE = "training.kubeflow.org/job-role"
MPI_REPLICA_INDEX = "training.kubeflow.org/replica-index"

# --- batch/v1 Job controller labels on Job pods ---
BATCH_JOB_NAME = "batch.kubernetes.io/job-name"
LEGACY_JOB_NAME = "job-name"
CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
LEGACY_CONTROLLER_UID = "controller-uid"  # the controller-uid label before Kubernetes 1.27

GPU_RESOURCE = "nvidia.com/gpu"

# --- Airflow task_state_store ---
# The job of the current try, recorded before the job is created, so a retry finds it even if the
# worker died between the create and the deferral.
TASK_STATE_KEY = "airflow_jobs_plugin.job"
# The job whose success a try of this task returned, and that try. A later try may adopt an earlier
# try's succeeded job only if its result never counted: no try returned it (the try was lost after the
# job finished, as in a scheduler/triggerer race), or the try that returned it was failed by Airflow
# anyway (a later try in the same run of the task). A task cleared after a returned success trains again.
TASK_STATE_DELIVERED = "airflow_jobs_plugin.delivered"
# The try whose job failed in a way no retry can cure, with its message. Airflow may still start another
# try of that task (its scheduler can act on a stale event of the deferral after the resumed try has
# failed); such a try fails at once instead of running a job that cannot succeed.
TASK_STATE_FATAL = "airflow_jobs_plugin.fatal"
# The try whose deferral ran out of its execution_timeout, and its job. Its job is being cancelled; a
# retry that starts before the cancel lands must not follow it, but submit a job of its own.
TASK_STATE_TIMED_OUT = "airflow_jobs_plugin.timed_out"


# --- Kueue's keys and names the product writes on a job or compares (facts of Kueue's API, kept here so
# that building and comparing a job needs no queueing engine; queueing.kueue says what they mean) ---
# Kueue's admission gate (kubernetes-sigs/kueue v0.19.2 ``pkg/constants/constants.go``,
# AdmissionGatedByAnnotation; feature AdmissionGatedBy, beta and on by default since v0.19): while a job
# carries it, Kueue creates the job's Workload but admits it to no ClusterQueue. It can be set only when
# the job is created, and only removed later (``pkg/util/webhook/validation_admissiongatedby.go``).
KUEUE_ADMISSION_GATE = "kueue.x-k8s.io/admission-gated-by"
# Kueue's default LocalQueue name (``pkg/controller/constants`` DefaultLocalQueueName): its webhook gives
# an unlabelled job this queue when the namespace has one (``jobframework/defaults.go``).
KUEUE_DEFAULT_LOCAL_QUEUE = "default"
