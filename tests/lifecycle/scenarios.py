"""Cluster situations, one per job state and reason, with the state and reason the product must read.

Each scenario is what listing the cluster would return at one moment of a job's life: the Job or
MPIJob, its pods, its events, and the quota pool's view (queue status, reservation).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.lifecycle import JobState, QueueStatus, Reason, Reservation

from .factories import (
    at,
    batch_job,
    ended,
    event,
    job_condition,
    job_pod,
    launcher_pod,
    mpi_job,
    running,
    terminated,
    ts,
    waiting,
    worker_pod,
)

NOW = at(240)
HELD = Reservation(gpus=4, admitted_at=at(-30))
UNSCHEDULABLE = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available: 4 No preemption victims found for incoming pod."
NOT_FOUND = (
    'Failed to pull image "registry.example.com/vision/train:1.4": rpc error: code = NotFound desc = failed to pull '
    'and unpack image "registry.example.com/vision/train:1.4": failed to resolve reference '
    '"registry.example.com/vision/train:1.4": registry.example.com/vision/train:1.4: not found'
)
RATE_LIMITED = (
    'Failed to pull image "docker.io/library/pytorch:2.3": rpc error: code = Unknown desc = failed to pull and '
    "unpack image: failed to copy: httpReadSeeker: failed open: unexpected status code "
    "https://registry-1.docker.io/v2/library/pytorch/manifests/2.3: 429 Too Many Requests - Server message: "
    "toomanyrequests: You have reached your pull rate limit."
)


@dataclass(frozen=True)
class Scenario:
    """A cluster situation and the state/reason the snapshot must report for it."""

    id: str
    job: dict | None
    pods: list[dict]
    state: JobState
    reason: Reason
    events: list[dict] = field(default_factory=list)
    queue: QueueStatus | None = None
    reservation: Reservation | None = None
    now: datetime = NOW


def _running_mpi(workers: int = 2) -> list[dict]:
    return [launcher_pod(phase="Running", statuses=[running()])] + [
        worker_pod(index=i, phase="Running", statuses=[running()]) for i in range(workers)
    ]


def _requeued(count: int, not_before: float | None = None) -> dict:
    annotations = {labels.REQUEUE_COUNT: str(count), labels.ADMITTED_AT: ts(-30)}
    if not_before is not None:
        annotations[labels.REQUEUE_NOT_BEFORE] = ts(not_before)
    return annotations


def _stopped(by: str) -> dict:
    return {labels.STOPPED_AT: ts(-5), labels.STOPPED_BY: by}


def _verdict(verdict: str, message: str = "") -> dict:
    annotations = {labels.VERDICT: verdict}
    if message:
        annotations[labels.VERDICT_MESSAGE] = message
    return annotations


_FAILED_BACKOFF = job_condition(
    "Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit"
)
_FAILED_DEADLINE = job_condition(
    "Failed", "DeadlineExceeded", "Job was active longer than specified deadline"
)


def _failed_pod(*statuses: dict, suffix: str = "x7k2p", created: float = 0, **kwargs) -> dict:
    return job_pod(
        suffix=suffix, phase="Failed", statuses=list(statuses), created=created, ready=False, **kwargs
    )


SCENARIOS: list[Scenario] = [
    # --- QUEUED ---
    Scenario(
        "queued-without-queue-status-is-pending", batch_job(suspend=True), [], JobState.QUEUED, Reason.PENDING
    ),
    Scenario(
        "queued-behind-group-quota",
        batch_job(suspend=True),
        [],
        JobState.QUEUED,
        Reason.GROUP_QUOTA,
        queue=QueueStatus("GroupQuota", 0, "group vision uses 6 of 8 GPUs; needs 4"),
    ),
    Scenario(
        "queued-over-user-quota",
        batch_job(suspend=True),
        [],
        JobState.QUEUED,
        Reason.USER_QUOTA,
        queue=QueueStatus("UserQuota", 3, "alice uses 4 of 4 GPUs; needs 4"),
    ),
    Scenario(
        "queued-behind-head-of-group",
        batch_job(suspend=True),
        [],
        JobState.QUEUED,
        Reason.BEHIND_HEAD,
        queue=QueueStatus("BehindHead", 1, "behind vision/big-train waiting for group quota"),
    ),
    Scenario(
        "queued-inadmissible-unknown-group",
        batch_job(suspend=True),
        [],
        JobState.QUEUED,
        Reason.INADMISSIBLE,
        queue=QueueStatus("Inadmissible", None, "group vision has no quota in the policy"),
    ),
    Scenario(
        "queued-requeued-during-back-off",
        batch_job(suspend=True, annotations=_requeued(1, not_before=600)),
        [],
        JobState.QUEUED,
        Reason.REQUEUED,
        queue=QueueStatus("GroupQuota", 0, "group vision uses 8 of 8 GPUs"),
    ),
    Scenario(
        "queued-requeued-without-queue-status",
        batch_job(suspend=True, annotations=_requeued(2)),
        [],
        JobState.QUEUED,
        Reason.REQUEUED,
    ),
    Scenario(
        "queued-requeued-after-back-off-takes-queue-reason",
        batch_job(suspend=True, annotations=_requeued(1, not_before=60)),
        [],
        JobState.QUEUED,
        Reason.BEHIND_HEAD,
        queue=QueueStatus("BehindHead", 1),
    ),
    Scenario("queued-mpijob-suspended", mpi_job(suspend=True), [], JobState.QUEUED, Reason.PENDING),
    # --- SCHEDULING ---
    Scenario(
        "scheduling-quota-reserved-not-yet-unsuspended",
        batch_job(suspend=True),
        [],
        JobState.SCHEDULING,
        Reason.QUOTA_RESERVED,
        reservation=HELD,
    ),
    # The trigger knows the pool's decision, not the ledger: "Admitted" is a reservation too.
    Scenario(
        "scheduling-quota-reserved-as-the-pool-decided",
        batch_job(suspend=True),
        [],
        JobState.SCHEDULING,
        Reason.QUOTA_RESERVED,
        queue=QueueStatus("Admitted", None, "admitted: group vision now uses 4 of 8 GPUs"),
    ),
    Scenario(
        "scheduling-pods-not-created-yet",
        batch_job(),
        [],
        JobState.SCHEDULING,
        Reason.CREATING,
        reservation=HELD,
    ),
    Scenario(
        "scheduling-pod-awaiting-scheduler",
        batch_job(active=1),
        [job_pod(node=None)],
        JobState.SCHEDULING,
        Reason.PENDING,
    ),
    Scenario(
        "scheduling-unschedulable-with-scheduler-message",
        batch_job(active=1),
        [job_pod(node=None, unschedulable_message=UNSCHEDULABLE)],
        JobState.SCHEDULING,
        Reason.UNSCHEDULABLE,
    ),
    Scenario(
        "scheduling-gated",
        batch_job(active=1),
        [job_pod(node=None, gated=True)],
        JobState.SCHEDULING,
        Reason.SCHEDULING_GATED,
    ),
    Scenario(
        "scheduling-mpi-one-worker-unschedulable",
        mpi_job(),
        [
            launcher_pod(node=None, unschedulable_message=UNSCHEDULABLE),
            worker_pod(index=0, phase="Running", statuses=[running()]),
            worker_pod(index=1, node=None, unschedulable_message=UNSCHEDULABLE),
        ],
        JobState.SCHEDULING,
        Reason.UNSCHEDULABLE,
    ),
    # --- STARTING ---
    Scenario(
        "starting-container-creating",
        batch_job(active=1),
        [job_pod(statuses=[waiting()])],
        JobState.STARTING,
        Reason.CONTAINER_CREATING,
    ),
    Scenario(
        "starting-mpi-launcher-init-1-of-2",
        mpi_job(),
        [
            launcher_pod(
                init_containers=("wait-for-workers", "fetch-code"),
                init_statuses=[terminated("wait-for-workers"), running("fetch-code", ready=False)],
                statuses=[waiting("main", "PodInitializing")],
            ),
            worker_pod(index=0, phase="Running", statuses=[running()]),
            worker_pod(index=1, phase="Running", statuses=[running()]),
        ],
        JobState.STARTING,
        Reason.INITIALIZING,
    ),
    Scenario(
        "starting-mpi-launcher-pod-initializing",
        mpi_job(),
        [
            launcher_pod(
                init_containers=("wait-for-workers",),
                init_statuses=[terminated("wait-for-workers")],
                statuses=[waiting("main", "PodInitializing")],
            ),
            worker_pod(index=0, phase="Running", statuses=[running()]),
            worker_pod(index=1, phase="Running", statuses=[running()]),
        ],
        JobState.STARTING,
        Reason.INITIALIZING,
    ),
    Scenario(
        "starting-mpi-launcher-not-created-yet",
        mpi_job(),
        [
            worker_pod(index=0, phase="Running", statuses=[running()]),
            worker_pod(index=1, phase="Running", statuses=[running()]),
        ],
        JobState.STARTING,
        Reason.CREATING,
    ),
    Scenario(
        "starting-image-pull-back-off",
        batch_job(active=1),
        [
            job_pod(
                statuses=[
                    waiting(
                        "main",
                        "ImagePullBackOff",
                        'Back-off pulling image "registry.example.com/vision/train:1.4"',
                    )
                ]
            )
        ],
        JobState.STARTING,
        Reason.IMAGE_PULL,
        events=[event("Pod", "train-x7k2p", "Failed", RATE_LIMITED, at_s=40)],
    ),
    Scenario(
        "starting-err-image-pull",
        batch_job(active=1),
        [job_pod(statuses=[waiting("main", "ErrImagePull", NOT_FOUND)])],
        JobState.STARTING,
        Reason.IMAGE_PULL,
    ),
    Scenario(
        "starting-invalid-image-name",
        batch_job(active=1),
        [
            job_pod(
                statuses=[
                    waiting(
                        "main",
                        "InvalidImageName",
                        'Failed to apply default image tag "Train:latest!": invalid reference format',
                    )
                ]
            )
        ],
        JobState.STARTING,
        Reason.INVALID_IMAGE_NAME,
    ),
    Scenario(
        "starting-create-container-config-error",
        batch_job(active=1),
        [job_pod(statuses=[waiting("main", "CreateContainerConfigError", 'secret "wandb-key" not found')])],
        JobState.STARTING,
        Reason.CONTAINER_CONFIG_ERROR,
    ),
    # --- RUNNING ---
    Scenario(
        "running-single-pod",
        batch_job(active=1),
        [job_pod(phase="Running", statuses=[running()])],
        JobState.RUNNING,
        Reason.RUNNING,
    ),
    Scenario(
        "running-mpi-launcher-and-all-workers", mpi_job(), _running_mpi(), JobState.RUNNING, Reason.RUNNING
    ),
    Scenario(
        "running-finishing-pod-succeeded-before-job-complete",
        batch_job(active=0, succeeded=1),
        [job_pod(phase="Succeeded", statuses=[terminated()], ready=False)],
        JobState.RUNNING,
        Reason.FINISHING,
    ),
    # --- DEGRADED ---
    Scenario(
        "degraded-mpi-worker-not-ready",
        mpi_job(),
        _running_mpi(1) + [worker_pod(index=1, phase="Running", statuses=[running(ready=False)])],
        JobState.DEGRADED,
        Reason.NOT_READY,
    ),
    Scenario(
        "degraded-mpi-worker-crash-loop-back-off",
        mpi_job(),
        _running_mpi(1)
        + [
            worker_pod(
                index=1,
                phase="Running",
                statuses=[
                    waiting(
                        "main",
                        "CrashLoopBackOff",
                        "back-off 40s restarting failed container",
                        restarts=3,
                        last=ended(1),
                    )
                ],
            )
        ],
        JobState.DEGRADED,
        Reason.CRASH_LOOP_BACK_OFF,
    ),
    Scenario(
        "degraded-mpi-worker-exited-with-error",
        mpi_job(),
        _running_mpi(1)
        + [worker_pod(index=1, phase="Running", statuses=[terminated("main", 2, restarts=1)])],
        JobState.DEGRADED,
        Reason.ERROR,
    ),
    Scenario(
        # mpi-operator v0.8.2 neither replaces a failed worker nor fails the MPIJob for it (only an
        # evicted one): the job runs short of a rank until mpirun on the launcher fails.
        "degraded-mpi-worker-failed-next-to-its-running-launcher",
        mpi_job(),
        _running_mpi(1)
        + [
            worker_pod(
                index=1, phase="Failed", restart_policy="Never", statuses=[terminated("main", 3)], ready=False
            )
        ],
        JobState.DEGRADED,
        Reason.ERROR,
    ),
    Scenario(
        "degraded-mpi-worker-on-lost-node",
        mpi_job(),
        _running_mpi(1)
        + [
            worker_pod(
                index=1,
                phase="Running",
                statuses=[running()],
                node="gpu-node-7",
                deleting=True,
                reason="NodeLost",
                message="Node gpu-node-7 which was running pod dist-worker-1 is unresponsive",
            )
        ],
        JobState.DEGRADED,
        Reason.NODE_LOST,
    ),
    Scenario(
        "degraded-mpi-worker-being-deleted",
        mpi_job(),
        _running_mpi(1) + [worker_pod(index=1, phase="Running", statuses=[running()], deleting=True)],
        JobState.DEGRADED,
        Reason.DELETED,
    ),
    # --- RETRYING ---
    Scenario(
        "retrying-after-non-zero-exit",
        batch_job(failed=1),
        [_failed_pod(terminated("main", 1))],
        JobState.RETRYING,
        Reason.ERROR,
    ),
    Scenario(
        "retrying-crash-loop-back-off-in-place",
        batch_job(active=1),
        [
            job_pod(
                phase="Running",
                restart_policy="OnFailure",
                statuses=[
                    waiting(
                        "main",
                        "CrashLoopBackOff",
                        "back-off 20s restarting failed container",
                        restarts=2,
                        last=ended(3),
                    )
                ],
            )
        ],
        JobState.RETRYING,
        Reason.CRASH_LOOP_BACK_OFF,
    ),
    Scenario(
        "retrying-after-oom-killed",
        batch_job(failed=1),
        [_failed_pod(terminated("main", 137, "OOMKilled"))],
        JobState.RETRYING,
        Reason.OOM_KILLED,
    ),
    Scenario(
        "retrying-after-container-cannot-run",
        batch_job(failed=1),
        [
            _failed_pod(
                terminated(
                    "main",
                    128,
                    "ContainerCannotRun",
                    message='exec: "python": executable file not found in $PATH',
                )
            )
        ],
        JobState.RETRYING,
        Reason.CONTAINER_CANNOT_RUN,
    ),
    Scenario(
        "retrying-after-kubelet-eviction",
        batch_job(failed=1),
        [
            _failed_pod(
                terminated("main", 137, "Error"),
                reason="Evicted",
                message="The node was low on resource: memory. Threshold quantity: 100Mi, available: 42Mi.",
                disruption="TerminationByKubelet",
            )
        ],
        JobState.RETRYING,
        Reason.EVICTED,
    ),
    Scenario(
        "retrying-after-preemption-by-scheduler",
        batch_job(failed=1),
        [_failed_pod(terminated("main", 143, "Error"), disruption="PreemptionByScheduler")],
        JobState.RETRYING,
        Reason.PREEMPTED,
    ),
    Scenario(
        "retrying-after-pod-gc-on-lost-node",
        batch_job(failed=1),
        [_failed_pod(terminated("main", 137, "Error"), disruption="DeletionByPodGC")],
        JobState.RETRYING,
        Reason.NODE_LOST,
    ),
    Scenario(
        "retrying-mpi-launcher-init-error",
        mpi_job(),
        [
            launcher_pod(
                init_containers=("wait-for-workers", "fetch-code"),
                init_statuses=[terminated("wait-for-workers", 1), waiting("fetch-code", "PodInitializing")],
                statuses=[waiting("main", "PodInitializing")],
            ),
            worker_pod(index=0, phase="Running", statuses=[running()]),
            worker_pod(index=1, phase="Running", statuses=[running()]),
        ],
        JobState.RETRYING,
        Reason.ERROR,
    ),
    Scenario(
        "retrying-mpi-launcher-init-crash-loop-back-off",
        mpi_job(),
        [
            launcher_pod(
                init_containers=("wait-for-workers", "fetch-code"),
                init_statuses=[
                    waiting(
                        "wait-for-workers", "CrashLoopBackOff", "back-off 1m20s", restarts=4, last=ended(1)
                    ),
                    waiting("fetch-code", "PodInitializing"),
                ],
                statuses=[waiting("main", "PodInitializing")],
            ),
            worker_pod(index=0, phase="Running", statuses=[running()]),
            worker_pod(index=1, phase="Running", statuses=[running()]),
        ],
        JobState.RETRYING,
        Reason.CRASH_LOOP_BACK_OFF,
    ),
    Scenario(
        "retrying-failed-pods-already-removed", batch_job(failed=2), [], JobState.RETRYING, Reason.ERROR
    ),
    # --- TERMINATING ---
    Scenario(
        "terminating-cancelled-pods-still-running",
        batch_job(annotations=_verdict("Cancelled"), active=1),
        [job_pod(phase="Running", statuses=[running()], deleting=True)],
        JobState.TERMINATING,
        Reason.CANCELLED,
    ),
    Scenario(
        "terminating-over-requeue-limit-pods-still-running",
        batch_job(suspend=True, annotations={**_requeued(3), **_verdict("OverRequeueLimit")}),
        [job_pod(statuses=[waiting("main", "ContainerCreating")], deleting=True)],
        JobState.TERMINATING,
        Reason.OVER_REQUEUE_LIMIT,
    ),
    Scenario(
        "terminating-requeued-after-stuck-start",
        batch_job(suspend=True, annotations=_requeued(1, not_before=600)),
        [job_pod(statuses=[waiting("main", "ContainerCreating")], deleting=True)],
        JobState.TERMINATING,
        Reason.REQUEUED,
    ),
    # A pod never placed holds no GPUs: its deletion does not keep the job TERMINATING.
    Scenario(
        "queued-requeued-whose-unplaced-pod-is-being-deleted",
        batch_job(suspend=True, annotations=_requeued(1, not_before=600)),
        [job_pod(node=None, unschedulable_message=UNSCHEDULABLE, deleting=True)],
        JobState.QUEUED,
        Reason.REQUEUED,
    ),
    Scenario(
        "terminating-preempted-by-suspension",
        batch_job(suspend=True, annotations={labels.ADMITTED_AT: ts(-30)}),
        [job_pod(phase="Running", statuses=[running()], deleting=True)],
        JobState.TERMINATING,
        Reason.PREEMPTED,
    ),
    Scenario(
        "terminating-evicted-by-eviction-api",
        batch_job(active=1),
        [job_pod(phase="Running", statuses=[running()], deleting=True, disruption="EvictionByEvictionAPI")],
        JobState.TERMINATING,
        Reason.EVICTED,
    ),
    Scenario(
        "terminating-job-object-deleted",
        batch_job(active=1, deleting=True),
        [job_pod(phase="Running", statuses=[running()], deleting=True)],
        JobState.TERMINATING,
        Reason.DELETED,
    ),
    Scenario(
        "terminating-failure-target-pods-still-running",
        batch_job(
            failed=4,
            conditions=[
                job_condition(
                    "FailureTarget", "BackoffLimitExceeded", "Job has reached the specified backoff limit"
                )
            ],
        ),
        [
            _failed_pod(terminated("main", 1)),
            job_pod(suffix="m3n8d", created=100, phase="Running", statuses=[running()], deleting=True),
        ],
        JobState.TERMINATING,
        Reason.BACKOFF_LIMIT_EXCEEDED,
    ),
    Scenario(
        "terminating-success-criteria-met-pods-still-running",
        batch_job(
            succeeded=1,
            conditions=[
                job_condition(
                    "SuccessCriteriaMet", "CompletionsReached", "Reached expected number of succeeded pods"
                )
            ],
        ),
        [job_pod(phase="Running", statuses=[running()], deleting=True)],
        JobState.TERMINATING,
        Reason.COMPLETED,
    ),
    # --- One job, two watch streams: a view where one stream lags reads as a state the job was in ---
    # The job was admitted (unsuspended) and its pod created, but the Job's own update has not arrived:
    # the pod, created after the job's last Suspended=True transition, proves the resume.
    Scenario(
        "starting-resumed-job-whose-own-update-lags-its-pod",
        batch_job(suspend=True),
        [job_pod(statuses=[waiting("main", "ContainerCreating")], created=0)],
        JobState.STARTING,
        Reason.CONTAINER_CREATING,
    ),
    # A pod older than the suspension is one the controller is stopping, even before its deletion shows.
    Scenario(
        "terminating-preempted-pod-predates-the-suspension",
        batch_job(suspend=True),
        [job_pod(phase="Running", statuses=[running()], created=-120)],
        JobState.TERMINATING,
        Reason.PREEMPTED,
    ),
    # Suspended again after a resume the controller recorded, before it acted on the new suspension.
    Scenario(
        "terminating-suspended-again-before-the-controller-acted",
        batch_job(
            suspend=True,
            conditions=[job_condition("Suspended", "JobResumed", "Job resumed", status="False", at_s=-30)],
        ),
        [job_pod(phase="Running", statuses=[running()], created=-20)],
        JobState.TERMINATING,
        Reason.PREEMPTED,
    ),
    # The Job is Complete (its controller counted the pod succeeded) while the pod's last status lags.
    Scenario(
        "succeeded-job-complete-whose-pod-update-lags",
        batch_job(
            succeeded=1,
            conditions=[
                job_condition("Complete", "CompletionsReached", "Reached expected number of succeeded pods")
            ],
        ),
        [job_pod(phase="Running", statuses=[running()])],
        JobState.SUCCEEDED,
        Reason.COMPLETED,
    ),
    Scenario(
        "succeeded-success-criteria-met-whose-pod-update-lags",
        batch_job(
            succeeded=1,
            conditions=[
                job_condition(
                    "SuccessCriteriaMet", "CompletionsReached", "Reached expected number of succeeded pods"
                )
            ],
        ),
        [job_pod(phase="Running", statuses=[running()])],
        JobState.SUCCEEDED,
        Reason.COMPLETED,
    ),
    # --- SUCCEEDED ---
    Scenario(
        "succeeded-job-complete",
        batch_job(
            succeeded=1,
            conditions=[
                job_condition("Complete", "CompletionsReached", "Reached expected number of succeeded pods")
            ],
        ),
        [job_pod(phase="Succeeded", statuses=[terminated()], ready=False)],
        JobState.SUCCEEDED,
        Reason.COMPLETED,
        reservation=Reservation(4, at(-30), at(300)),
    ),
    Scenario(
        "succeeded-mpijob",
        mpi_job(
            conditions=[
                job_condition("Succeeded", "MPIJobSucceeded", "MPIJob ml-team/dist successfully completed.")
            ]
        ),
        [launcher_pod(phase="Succeeded", statuses=[terminated()], ready=False)],
        JobState.SUCCEEDED,
        Reason.COMPLETED,
    ),
    # The launcher is done but the workers still hold their GPUs while they stop (mcli: "until this
    # phase is complete, the run can still be consuming resources").
    Scenario(
        "terminating-mpijob-succeeded-while-workers-stop",
        mpi_job(
            conditions=[
                job_condition("Succeeded", "MPIJobSucceeded", "MPIJob ml-team/dist successfully completed.")
            ]
        ),
        [launcher_pod(phase="Succeeded", statuses=[terminated()], ready=False)]
        + [worker_pod(index=i, phase="Running", statuses=[running()], deleting=True) for i in range(2)],
        JobState.TERMINATING,
        Reason.COMPLETED,
    ),
    # --- FAILED ---
    Scenario(
        "failed-backoff-limit-exceeded",
        batch_job(failed=4, conditions=[_FAILED_BACKOFF]),
        [_failed_pod(terminated("main", 1), suffix=f"p{i}", created=i * 60) for i in range(4)],
        JobState.FAILED,
        Reason.BACKOFF_LIMIT_EXCEEDED,
    ),
    Scenario(
        "failed-error-exit-without-retries",
        batch_job(failed=1, backoff_limit=0, conditions=[_FAILED_BACKOFF]),
        [_failed_pod(terminated("main", 3))],
        JobState.FAILED,
        Reason.ERROR,
    ),
    Scenario(
        "failed-image-pull-after-deadline",
        batch_job(failed=1, conditions=[_FAILED_DEADLINE]),
        [
            _failed_pod(
                waiting(
                    "main",
                    "ImagePullBackOff",
                    'Back-off pulling image "registry.example.com/vision/train:1.4"',
                )
            )
        ],
        JobState.FAILED,
        Reason.IMAGE_PULL,
        events=[event("Pod", "train-x7k2p", "Failed", NOT_FOUND, at_s=60)],
    ),
    # A controller older than 1.31 writes Failed before the pod is gone: its GPUs are still held.
    Scenario(
        "terminating-failed-image-pull-pod-still-being-deleted",
        batch_job(failed=1, conditions=[_FAILED_DEADLINE]),
        [job_pod(statuses=[waiting("main", "ErrImagePull", NOT_FOUND)], deleting=True)],
        JobState.TERMINATING,
        Reason.IMAGE_PULL,
    ),
    Scenario(
        "failed-invalid-image-name",
        batch_job(failed=1, conditions=[_FAILED_DEADLINE]),
        [
            _failed_pod(
                waiting(
                    "main",
                    "InvalidImageName",
                    'Failed to apply default image tag "Train:latest!": invalid reference format',
                )
            )
        ],
        JobState.FAILED,
        Reason.INVALID_IMAGE_NAME,
    ),
    Scenario(
        "terminating-mpijob-failed-on-invalid-image-while-workers-still-run",
        mpi_job(
            conditions=[
                job_condition("Failed", "DeadlineExceeded", "Job was active longer than specified deadline")
            ]
        ),
        [
            worker_pod(
                index=i,
                statuses=[waiting("main", "InvalidImageName", 'couldn\'t parse image name "Mpi:Bad Tag"')],
            )
            for i in range(2)
        ],
        JobState.TERMINATING,
        Reason.INVALID_IMAGE_NAME,
    ),
    Scenario(
        "failed-container-cannot-run",
        batch_job(failed=4, conditions=[_FAILED_BACKOFF]),
        [
            _failed_pod(
                terminated(
                    "main",
                    128,
                    "ContainerCannotRun",
                    message='exec: "python": executable file not found in $PATH',
                )
            )
        ],
        JobState.FAILED,
        Reason.CONTAINER_CANNOT_RUN,
    ),
    Scenario(
        "failed-create-container-config-error",
        batch_job(failed=1, conditions=[_FAILED_DEADLINE]),
        [_failed_pod(waiting("main", "CreateContainerConfigError", 'secret "wandb-key" not found'))],
        JobState.FAILED,
        Reason.CONTAINER_CONFIG_ERROR,
    ),
    Scenario(
        "failed-oom-killed",
        batch_job(failed=4, conditions=[_FAILED_BACKOFF]),
        [_failed_pod(terminated("main", 137, "OOMKilled"))],
        JobState.FAILED,
        Reason.OOM_KILLED,
    ),
    Scenario(
        "failed-deadline-exceeded-while-running",
        batch_job(failed=1, conditions=[_FAILED_DEADLINE]),
        [_failed_pod(terminated("main", 143, "Error"), reason="DeadlineExceeded")],
        JobState.FAILED,
        Reason.DEADLINE_EXCEEDED,
    ),
    Scenario(
        "failed-pods-refused-by-the-api-server",
        batch_job(
            failed=0,
            conditions=[_FAILED_DEADLINE],
            annotations=_verdict(
                "PodRefused",
                'the API server refused its pods: pods "train-" is forbidden: no PriorityClass with name '
                "hihg was found",
            ),
        ),
        [],
        JobState.FAILED,
        Reason.POD_REFUSED,
    ),
    Scenario(
        "failed-queue-timeout",
        batch_job(
            suspend=True, annotations=_verdict("QueueTimeout", "waited 6h in the queue of group vision")
        ),
        [],
        JobState.FAILED,
        Reason.QUEUE_TIMEOUT,
    ),
    Scenario(
        "failed-over-quota",
        batch_job(suspend=True, annotations=_verdict("OverQuota", "needs 16 GPUs; group vision has 8")),
        [],
        JobState.FAILED,
        Reason.OVER_QUOTA,
    ),
    Scenario(
        "failed-pod-larger-than-any-node",
        batch_job(
            suspend=True,
            annotations=_verdict(
                "Unschedulable", "its worker pod asks for 16 GPUs but any node offers at most 8"
            ),
        ),
        [],
        JobState.FAILED,
        Reason.UNSCHEDULABLE,
    ),
    # The product ended a queued job through its controller (activeDeadlineSeconds, parallelism 0):
    # kubectl shows it Failed (DeadlineExceeded); the product's verdict stays its reason.
    Scenario(
        "failed-queue-timeout-ended-by-the-job-controller",
        batch_job(
            annotations=_verdict("QueueTimeout", "waited 2h in the queue of group vision"),
            conditions=[_FAILED_DEADLINE],
        ),
        [],
        JobState.FAILED,
        Reason.QUEUE_TIMEOUT,
    ),
    Scenario(
        "failed-over-requeue-limit",
        batch_job(suspend=True, annotations={**_requeued(3), **_verdict("OverRequeueLimit")}),
        [],
        JobState.FAILED,
        Reason.OVER_REQUEUE_LIMIT,
    ),
    Scenario(
        "failed-node-lost",
        batch_job(failed=4, conditions=[_FAILED_BACKOFF]),
        [_failed_pod(terminated("main", 137, "Error"), disruption="DeletionByTaintManager")],
        JobState.FAILED,
        Reason.NODE_LOST,
    ),
    Scenario(
        "failed-mpi-worker-evicted",
        mpi_job(conditions=[job_condition("Failed", "MPIJobEvicted", "1/2 workers are evicted")]),
        [
            launcher_pod(phase="Failed", statuses=[terminated("main", 1)], ready=False),
            worker_pod(
                index=1,
                phase="Failed",
                reason="Evicted",
                message="The node was low on resource: memory.",
                statuses=[terminated("main", 137, "Error")],
                ready=False,
            ),
        ],
        JobState.FAILED,
        Reason.EVICTED,
    ),
    Scenario(
        "terminating-mpi-worker-evicted-while-the-others-stop",
        mpi_job(conditions=[job_condition("Failed", "MPIJobEvicted", "1/2 workers are evicted")]),
        [
            launcher_pod(phase="Failed", statuses=[terminated("main", 1)], ready=False),
            worker_pod(index=0, phase="Running", statuses=[running()], deleting=True),
            worker_pod(
                index=1,
                phase="Failed",
                reason="Evicted",
                message="The node was low on resource: memory.",
                statuses=[terminated("main", 137, "Error")],
                ready=False,
            ),
        ],
        JobState.TERMINATING,
        Reason.EVICTED,
    ),
    Scenario(
        "failed-after-preemption",
        batch_job(failed=4, conditions=[_FAILED_BACKOFF]),
        [_failed_pod(terminated("main", 143, "Error"), disruption="PreemptionByScheduler")],
        JobState.FAILED,
        Reason.PREEMPTED,
    ),
    # --- CANCELLED ---
    Scenario(
        "cancelled-by-user",
        batch_job(suspend=True, annotations={**_verdict("Cancelled"), labels.CANCELLED_BY: "alice"}),
        [],
        JobState.CANCELLED,
        Reason.CANCELLED,
    ),
    Scenario(
        "cancelled-mpijob-pods-ended",
        mpi_job(annotations=_verdict("Cancelled", "stopped from the UI")),
        [launcher_pod(phase="Failed", statuses=[terminated("main", 143, "Error")], ready=False)],
        JobState.CANCELLED,
        Reason.CANCELLED,
    ),
    # --- STOPPED ---
    Scenario(
        "stopped-by-user-pods-still-stopping",
        batch_job(suspend=True, annotations=_stopped("bob")),
        [job_pod(phase="Running", statuses=[running()], deleting=True)],
        JobState.TERMINATING,
        Reason.STOPPED,
    ),
    Scenario(
        "stopped-by-user-pods-gone",
        mpi_job(suspend=True, annotations=_stopped("bob")),
        [],
        JobState.STOPPED,
        Reason.STOPPED,
    ),
    # --- UNKNOWN ---
    Scenario(
        "unknown-only-pod-on-lost-node",
        batch_job(active=1),
        [
            job_pod(
                phase="Running",
                statuses=[running()],
                deleting=True,
                reason="NodeLost",
                message="Node gpu-node-1 which was running pod train-x7k2p is unresponsive",
            )
        ],
        JobState.UNKNOWN,
        Reason.NODE_LOST,
    ),
    Scenario(
        "unknown-job-object-missing",
        None,
        [job_pod(phase="Running", statuses=[running()])],
        JobState.UNKNOWN,
        Reason.NOT_FOUND,
    ),
]

BY_ID = {scenario.id: scenario for scenario in SCENARIOS}
assert len(BY_ID) == len(SCENARIOS), "scenario ids must be unique"
