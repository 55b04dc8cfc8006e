"""A job's result: the small JSON document its program wrote to its termination message.

Pure. The main container's ``terminationMessagePath`` is ``/dev/termination-log`` (see pod_template.py); the
kubelet copies the file's last 4096 bytes into the pod status,
``status.containerStatuses[].state.terminated.message`` (kubernetes
``pkg/kubelet/kuberuntime/kuberuntime_container.go`` v1.31, ``getTerminationMessage``), where the trigger
reads it: no sidecar, no exec, no shared volume.

Rules, first match wins:

1. Only a container that exited 0 has a result. A failed container's message under
   ``FallbackToLogsOnError`` is its log's tail, never a result.
2. The result comes from the pod that speaks for the job: the MPI launcher, else rank 0 (the only pod
   of a single-pod job; a torchrun job's node 0). Among that role's pods the one that finished last wins (a retried pod's
   earlier try failed).
3. A message that parses as JSON is returned parsed; any other non-empty text is returned as text; an
   empty message is no result (None).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_jobs_plugin.cluster.objects import Meta
from airflow_jobs_plugin.jobs.manifests import pod_role_and_rank
from airflow_jobs_plugin.jobs.spec import MAIN_CONTAINER


def _main_terminated(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or ():
        if status.get("name") == MAIN_CONTAINER:
            terminated = (status.get("state") or {}).get("terminated")
            return terminated if isinstance(terminated, Mapping) else None
    return None


def _speaks_for_the_job(pod: Mapping[str, Any]) -> int:
    """0 for the launcher, 1 for rank 0 (worker 0, torchrun's node 0), 2 for any other pod (never a
    result)."""
    role, rank = pod_role_and_rank(Meta(pod).labels)
    if role == "launcher":
        return 0
    return 1 if role is not None and rank == 0 else 2


def job_result(pods: Iterable[Mapping[str, Any]]) -> Any:
    """The job's result from its pods (see the module's rules), or None."""
    candidates = []
    for pod in pods:
        order = _speaks_for_the_job(pod)
        terminated = _main_terminated(pod)
        if order == 2 or terminated is None or terminated.get("exitCode") != 0:
            continue
        candidates.append((order, str(terminated.get("finishedAt") or ""), terminated.get("message") or ""))
    if not candidates:
        return None
    best = min(order for order, _, _ in candidates)
    _, _, message = max(c for c in candidates if c[0] == best)
    return parse_result(message)


def parse_result(message: str) -> Any:
    """The JSON value of a termination message, the text itself when it is not JSON, None when empty."""
    if not message.strip():
        return None
    try:
        return json.loads(message)
    except ValueError:
        return message
