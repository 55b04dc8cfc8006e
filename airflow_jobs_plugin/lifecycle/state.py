"""The product's job states and the reasons that qualify them.

One :class:`JobState` says where a job is in its life; a :class:`Reason` says why it is there (which
quota holds it, what failed, who stopped it). Both are computed from cluster objects only, so every
process that looks at the same objects reads the same state.
"""

from __future__ import annotations

from enum import Enum


class JobState(str, Enum):
    """Where a job is in its life, from queued to a terminal state.

    QUEUED: created suspended, waiting for quota. SCHEDULING: quota reserved, pods not all placed yet.
    STARTING: placed; pulling images, running init containers, creating containers. RUNNING: every
    replica running. DEGRADED: some replicas running, others not (restarting, not ready, lost).
    RETRYING: a pod failed and the job will try again. TERMINATING: being stopped, pods still hold
    GPUs. STOPPED: stopped by a user, holding nothing, until resumed. SUCCEEDED, FAILED, CANCELLED: terminal. UNKNOWN: the state cannot be read (lost node,
    missing objects).
    """

    QUEUED = "QUEUED"
    SCHEDULING = "SCHEDULING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    DEGRADED = "DEGRADED"
    RETRYING = "RETRYING"
    TERMINATING = "TERMINATING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    # Suspended by a user on purpose: pods deleted, GPUs and quota released, the task still deferred.
    # Not terminal: a resume sends the job back to its group's queue.
    STOPPED = "STOPPED"
    UNKNOWN = "UNKNOWN"

    def __str__(self) -> str:
        return self.value

    @property
    def is_terminal(self) -> bool:
        """True for SUCCEEDED, FAILED and CANCELLED: the job will not change any more."""
        return self in TERMINAL_STATES

    @property
    def holds_gpus(self) -> bool:
        """True while pods may be placed on GPUs (from SCHEDULING up to the end of TERMINATING)."""
        return self in _HOLDING_STATES


TERMINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
_HOLDING_STATES = frozenset(
    {
        JobState.SCHEDULING,
        JobState.STARTING,
        JobState.RUNNING,
        JobState.DEGRADED,
        JobState.RETRYING,
        JobState.TERMINATING,
    }
)


class Reason(str, Enum):
    """Why a job is in its state. Values are the words shown to users, in the sources' spelling."""

    # Waiting in the queue (QUEUED) or for placement (SCHEDULING).
    PENDING = "Pending"  # nothing wrong, the next step has not happened yet
    GROUP_QUOTA = "GroupQuota"  # the group's remaining GPUs are too few; the group's queue stops here
    USER_QUOTA = "UserQuota"  # the user's remaining GPUs are too few; others may pass
    BEHIND_HEAD = "BehindHead"  # an earlier job of the group waits for group quota
    INADMISSIBLE = "Inadmissible"  # the queue or group cannot admit anything now (stopped, unknown)
    REQUEUED = "Requeued"  # sent back to the queue after admission (stuck start or preemption)
    PREEMPTING = "Preempting"  # the head of its group's queue waits for the jobs it preempted to end
    QUOTA_RESERVED = "QuotaReserved"  # admitted by the pool, not yet released to the cluster
    CREATING = "Creating"  # replicas whose pods do not exist yet
    UNSCHEDULABLE = "Unschedulable"  # the scheduler found no node; its message says why
    SCHEDULING_GATED = "SchedulingGated"  # a scheduling gate holds a pod back
    # Starting.
    CONTAINER_CREATING = "ContainerCreating"
    INITIALIZING = "Initializing"  # init containers running (Init:A/B, PodInitializing)
    IMAGE_PULL = "ImagePull"  # ErrImagePull / ImagePullBackOff (mcli: FailedImagePull)
    INVALID_IMAGE_NAME = "InvalidImageName"
    CONTAINER_CONFIG_ERROR = "CreateContainerConfigError"  # a missing secret/configmap key
    # The API server refused the pods the job's controller asked for (a PriorityClass that does not
    # exist, PodSecurity, a ResourceQuota): its FailedCreate events say why; the controller retries for ever.
    POD_REFUSED = "PodRefused"
    # Running.
    RUNNING = "Running"
    FINISHING = "Finishing"  # every pod ended well; the controller has not declared the job done
    NOT_READY = "NotReady"
    # Pod failures (RETRYING, DEGRADED, FAILED).
    ERROR = "Error"  # non-zero exit code
    CRASH_LOOP_BACK_OFF = "CrashLoopBackOff"
    OOM_KILLED = "OOMKilled"
    CONTAINER_CANNOT_RUN = "ContainerCannotRun"
    NODE_LOST = "NodeLost"
    EVICTED = "Evicted"
    PREEMPTED = "Preempted"
    # Job-level verdicts (FAILED, CANCELLED, TERMINATING).
    BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
    DEADLINE_EXCEEDED = "DeadlineExceeded"  # Run:ai TimedOut
    QUEUE_TIMEOUT = "QueueTimeout"
    OVER_QUOTA = "OverQuota"
    OVER_REQUEUE_LIMIT = "OverRequeueLimit"
    DEACTIVATED = "Deactivated"  # Kueue deactivated the job's Workload: it will never be admitted
    CANCELLED = "Cancelled"
    STOPPED = "Stopped"  # a user stopped the job; it waits for a resume
    DELETED = "Deleted"  # the job object is being deleted without a product verdict
    COMPLETED = "Completed"
    NOT_FOUND = "NotFound"  # the job object is gone

    def __str__(self) -> str:
        return self.value


# The verdicts the product itself writes on a job (labels.VERDICT) and the reason each one reads as.
VERDICTS: dict[str, Reason] = {
    Reason.QUEUE_TIMEOUT.value: Reason.QUEUE_TIMEOUT,
    Reason.OVER_QUOTA.value: Reason.OVER_QUOTA,
    Reason.OVER_REQUEUE_LIMIT.value: Reason.OVER_REQUEUE_LIMIT,
    # Kueue deactivated the Workload (an admin, or its requeuing limit): the job would wait for ever.
    Reason.DEACTIVATED.value: Reason.DEACTIVATED,
    Reason.CANCELLED.value: Reason.CANCELLED,
    # Pods stuck pulling never fail by themselves; the trigger rules on a permanent pull failure.
    Reason.IMAGE_PULL.value: Reason.IMAGE_PULL,
    Reason.INVALID_IMAGE_NAME.value: Reason.INVALID_IMAGE_NAME,
    # Containers that cannot be created (a missing Secret or ConfigMap key, a bad mount) are retried by
    # the kubelet forever too; the trigger rules on them after a grace (lifecycle.start_cannot_succeed).
    Reason.CONTAINER_CONFIG_ERROR.value: Reason.CONTAINER_CONFIG_ERROR,
    Reason.CONTAINER_CANNOT_RUN.value: Reason.CONTAINER_CANNOT_RUN,
    # Pods the API server refuses are asked for again and again by their controller; the trigger rules.
    Reason.POD_REFUSED.value: Reason.POD_REFUSED,
    # A pod larger than any node: the scheduler reports Unschedulable forever; admission rules on it.
    Reason.UNSCHEDULABLE.value: Reason.UNSCHEDULABLE,
    # A pod on a lost node never becomes terminal by itself; the trigger ends the attempt.
    Reason.NODE_LOST.value: Reason.NODE_LOST,
    # Pods the pool can never charge (a negative count, GPUs it cannot count): admission ends the job,
    # which would otherwise wait in no queue for ever.
    Reason.INADMISSIBLE.value: Reason.INADMISSIBLE,
}

# Reasons a QueueStatus from the quota pool may carry; anything else reads as Pending.
QUEUE_REASONS = frozenset(
    {
        Reason.PENDING,
        Reason.GROUP_QUOTA,
        Reason.USER_QUOTA,
        Reason.BEHIND_HEAD,
        Reason.INADMISSIBLE,
        Reason.REQUEUED,
        Reason.PREEMPTING,
    }
)
