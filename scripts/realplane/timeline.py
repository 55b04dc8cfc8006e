"""A pod's whole life, computed once when it is bound: the frames kwok's Stages play, the log lines and
the kubelet's events.

The simulator's kubelet is a pure function of a pod and a time (``airflow_jobs_sim.kubelet_model.
step_pod``: the scenario annotation, image-tag conventions, init containers one at a time,
pull errors and back-off, crash loops with ``restartCount``, exit codes, readiness, sidecars). Stepping it
from the pod's start to its end gives every status the pod will report and when; the plane's Stages then
write each status at its time (``stages/scenario.yaml``), so a pod on kwok and a pod on the simulator
follow one scenario language with one meaning. What is left to kwok is what a kubelet does on its own
clock: applying the statuses, and the pod's deletion.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from airflow_jobs_sim.kubelet_model import (
    NO_REFERENCES,
    EventSpec,
    LogClose,
    LogLine,
    References,
    deletion_exit_codes,
    new_pod_run,
    step_pod,
)

FRAMES_ANNOTATION = "plane.airflow-jobs.io/frames"
FRAME_ANNOTATION = "plane.airflow-jobs.io/frame"  # the index of the frame the Stages wrote last
# Bounds: a pod's annotations may hold 256 KiB in all (apimachinery ValidateAnnotationsSize); a crash
# loop's frames stop at the back-off's cap, when every later restart looks like the one before.
MAX_FRAMES = 60
MAX_STEPS = 4000


@dataclass(frozen=True)
class Frame:
    at: datetime
    status: dict


# A side effect of the kubelet: a log line, the end of a container run, or an event.
Effect = LogLine | LogClose | EventSpec


@dataclass(frozen=True)
class Timed:
    """A side effect of the kubelet at a time."""

    at: datetime
    effect: Effect


@dataclass(frozen=True)
class Timeline:
    frames: tuple[Frame, ...]
    effects: tuple[Timed, ...]
    term_exit: dict[str, int]  # exit code of each container stopped by the pod's deletion
    initial: dict  # the status the pod showed when it was planned (the scheduler's)

    def annotation(self) -> str:
        return json.dumps(
            {
                "f": [
                    {
                        "at": _ms(f.at),
                        "s": smp_status(f.status, self.frames[i - 1].status if i else self.initial),
                    }
                    for i, f in enumerate(self.frames)
                ],
                "t": self.term_exit,
            },
            separators=(",", ":"),
        )


def _ms(t: datetime) -> int:
    return int(t.timestamp() * 1000)


# Every field a container state can hold, by state (k8s.io/api v0.36 core/v1 ContainerStateWaiting,
# ContainerStateRunning, ContainerStateTerminated).
_STATE_FIELDS = {
    "waiting": ("reason", "message"),
    "running": ("startedAt",),
    "terminated": ("exitCode", "signal", "reason", "message", "startedAt", "finishedAt", "containerID"),
}


def _whole_state(state: dict | None) -> dict:
    """A container state (or last state) as a patch that leaves nothing of any earlier one: every state
    and field it lacks is set to null.

    A strategic-merge patch merges maps key by key, so a container going from waiting to running would
    keep its old `waiting`, and a new waiting reason the old one's message. Nulls, not a `$patch:
    replace` directive, because a frame may be applied to a pod that never showed the frames before it:
    kwok writes the latest frame due when its stage fires (late under load), so a pod can go from no
    container status to the Running frame at once; the merge then adds the container's item whole, and
    a directive inside an added item is dropped with the map it sits in, leaving `state: {}` (seen at
    150 and 200 jobs: most pods Running with an empty state until the next frame, minutes later). A
    null in an added item is dropped when the API server decodes the pod, which leaves the state
    itself."""
    state = state or {}
    return {
        key: None if state.get(key) is None else {**dict.fromkeys(fields), **state[key]}
        for key, fields in _STATE_FIELDS.items()
    }


def _nulls(previous: dict | None, current: dict) -> dict:
    """``current`` with every key ``previous`` had and ``current`` lacks set to null: a strategic-merge
    patch keeps what it does not mention (a condition's old message, a container's old containerID)."""
    out = dict(current)
    for key in previous or {}:
        if key not in out:
            out[key] = None
    return out


def _by(items: list[dict] | None, key: str) -> dict[str, dict]:
    return {item[key]: item for item in items or []}


def smp_status(status: dict, previous: dict | None = None) -> dict:
    """The strategic-merge patch that turns ``previous`` (the status the pod shows) into ``status``."""
    previous = previous or {}
    out = dict(status)
    for key in ("initContainerStatuses", "containerStatuses"):
        if key in out:
            before = _by(previous.get(key), "name")
            # A container the pod does not list yet is added whole: a `$patch: replace` inside a list item
            # the strategic merge adds (not merges) is dropped with the map it sits in, so the pod's
            # first frame of a container would read `state: {}` (seen with a pod whose only frame was
            # CreateContainerConfigError).
            out[key] = [
                {
                    **_nulls(before.get(s["name"]), s),
                    "state": _whole_state(s.get("state")) if s["name"] in before else s.get("state") or {},
                    "lastState": _whole_state(s.get("lastState"))
                    if s["name"] in before
                    else s.get("lastState") or {},
                }
                for s in out[key]
            ]
    if "conditions" in out:
        before = _by(previous.get("conditions"), "type")
        out["conditions"] = [_nulls(before.get(c["type"]), c) for c in out["conditions"]]
    return out


def compute(
    pod: dict,
    start: datetime,
    *,
    host_ip: str,
    pod_ip: str,
    scale: float = 1.0,
    refs: References = NO_REFERENCES,
) -> Timeline:
    """Step the simulator's kubelet over ``pod`` from ``start`` until it ends (or runs for ever)."""
    node = pod["spec"]["nodeName"]
    run = new_pod_run(pod, node, host_ip, pod_ip, start, exec_commands=False)
    now = start
    frames: list[Frame] = []
    effects: list[Timed] = []
    images: frozenset[str] = frozenset()
    for _ in range(MAX_STEPS):
        step = step_pod(pod, run, now, scale, images=images, refs=refs)
        images = images | frozenset(step.pulled)
        run = step.run
        status = {k: v for k, v in step.status.items()}
        if not frames or status != frames[-1].status:
            frames.append(Frame(now, status))
        effects += [Timed(now, e) for e in step.logs]
        effects += [Timed(now, e) for e in step.events]
        if run.done or step.wake_at is None or len(frames) >= MAX_FRAMES:
            break
        now = max(step.wake_at, now + timedelta(milliseconds=1))
    return Timeline(
        frames=tuple(frames),
        effects=tuple(effects),
        term_exit=deletion_exit_codes(pod),
        initial=dict(pod.get("status") or {}),
    )


def utcnow() -> datetime:
    return datetime.now(timezone.utc)
