"""The kubelet's rules for a pod, as pure functions: what the simulated kubelet runs and the real plane's
scenario player steps.

From a pod, its runtime record (``PodRun``) and the time, ``step_pod`` computes one kubelet sync: the new
runtime record, the pod status the real kubelet would report (same field shapes and reasons), the events
it records, the log lines its containers write, the local processes to start or stop (exec mode only) and
when the pod next needs a sync. The rules: the pod's scenario (``scenarios``), image pull (with
ErrImagePull / ImagePullBackOff and the pull back-off), init containers one after the other (sidecars
holding on), then the regular containers; run, logs, exit code, restarts with the CrashLoopBackOff
back-off, readiness, termination messages, graceful deletion and node-pressure eviction.

No I/O and no event loop: the ConfigMaps and Secrets a pod names are resolved through a ``lookup``
function the caller hands in (``resolve_references``), and time is an argument. The simulator's
``controllers.kubelet`` applies each step to its store; ``scripts/realplane`` steps a pod from its start
to its end once and plays the result on kwok's nodes.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from airflow_jobs_sim.clock import rfc3339
from airflow_jobs_sim.conditions import set_condition
from airflow_jobs_sim.events import NORMAL, WARNING, EventSpec
from airflow_jobs_sim.references import (
    Lookup,
    MissingReference,
    PodNetwork,
    container_env,
    mount_failures,
    refers_to_objects,
)
from airflow_jobs_sim.scenarios import (
    ContainerScenario,
    PodScenarios,
    PullFailure,
    ScenarioError,
    is_sidecar,
    normalized_image,
    pod_scenarios,
    valid_image,
)

__all__ = [
    "NO_REFERENCES",
    "ContainerRun",
    "EventSpec",
    "KillProcess",
    "LogClose",
    "LogLine",
    "PodNetwork",
    "PodRun",
    "References",
    "StartProcess",
    "Step",
    "TERMINATION_LOG_LINES",
    "TERMINATION_MESSAGE_MAX",
    "crash_backoff",
    "deletion_exit_codes",
    "go_duration",
    "new_pod_run",
    "pull_backoff",
    "resolve_references",
    "step_pod",
    "termination_message",
]

CRASH_BACKOFF_BASE = 10.0
CRASH_BACKOFF_MAX = 300.0
PULL_BACKOFF_BASE = 10.0
PULL_BACKOFF_MAX = 300.0
# How long a failed state (ErrImagePull, a terminated container about to restart) shows before the
# back-off state replaces it, as the next kubelet sync would.
FLASH_SECONDS = 1.0

_PULL_ERRORS = {
    PullFailure.NOT_FOUND: (
        'rpc error: code = NotFound desc = failed to pull and unpack image "{ref}": failed to resolve '
        'reference "{ref}": {ref}: not found'
    ),
    PullFailure.UNAUTHORIZED: (
        'rpc error: code = Unknown desc = failed to pull and unpack image "{ref}": failed to resolve '
        'reference "{ref}": pull access denied, repository does not exist or may require authorization: '
        "server message: insufficient_scope: authorization failed"
    ),
    PullFailure.RATE_LIMITED: (
        'rpc error: code = Unknown desc = failed to pull and unpack image "{ref}": failed to copy: '
        "httpReadSeeker: failed open: unexpected status code {ref}: 429 Too Many Requests - Server message: "
        "toomanyrequests: You have reached your pull rate limit."
    ),
}


# --------------------------------------------------------------------------- runtime records


@dataclass
class ContainerRun:
    """What the simulated container runtime knows about one container of a pod."""

    name: str
    image: str
    init: bool
    exec_argv: tuple[str, ...] | None = None  # exec mode: the command this container runs locally
    sidecar: bool = False  # an init container with restartPolicy Always
    has_started: bool = False  # it ran once: a sidecar no longer holds back the containers after it
    stage: str = "idle"  # idle|pulling|pull_failed|pull_backoff|invalid|never_pull|config_error|running|exited|crash_backoff
    until: datetime | None = None  # end of the current stage (None: until something else happens)
    attempt: int = 0  # restartCount
    pull_failures: int = 0
    pull_started: datetime | None = None
    container_id: str = ""
    image_id: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    ready_at: datetime | None = None
    exit_code: int | None = None
    reason: str = ""
    message: str = ""
    last_terminated: dict | None = None
    logs_sent: int = 0
    log_tail: list[str] = field(default_factory=list)
    restart: bool = False  # the exited container will be restarted after its back-off
    process_exit: int | None = None  # exec mode: set when the local process ended
    process_error: str | None = None  # exec mode: the process could not be started
    process_message: str = ""  # exec mode: what the process wrote to its terminationMessagePath
    kill_sent: bool = False
    retry_at: datetime | None = None  # end of the current image pull back-off
    waiting_message: str = ""  # message of the current waiting state


@dataclass
class PodRun:
    """The runtime record of one pod on its node."""

    uid: str
    node: str
    host_ip: str
    pod_ip: str
    started: datetime
    init: list[ContainerRun]
    containers: list[ContainerRun]
    config_error: str | None = None
    mount_errors: tuple[str, ...] = ()  # the FailedMount messages last reported
    done: bool = False  # a terminal status was reported: nothing runs any more


@dataclass(frozen=True)
class LogLine:
    container: str
    attempt: int
    line: str


@dataclass(frozen=True)
class LogClose:
    container: str
    attempt: int


@dataclass(frozen=True)
class StartProcess:
    container: str
    attempt: int
    argv: tuple[str, ...]
    env: dict[str, str]
    workdir: str | None


@dataclass(frozen=True)
class KillProcess:
    container: str
    attempt: int


@dataclass(frozen=True)
class References:
    """What the pod's names resolved to in this sync: each container's env (or the kubelet's error for
    it) and the FailedMount messages of its volumes (``sim.references``)."""

    env: dict[tuple[bool, str], dict[str, str] | str] = field(default_factory=dict)
    mounts: tuple[str, ...] = ()


NO_REFERENCES = References()


@dataclass
class Step:
    """The outcome of one kubelet sync of a pod."""

    run: PodRun
    status: dict
    events: list[EventSpec] = field(default_factory=list)
    logs: list[LogLine | LogClose] = field(default_factory=list)
    processes: list[StartProcess | KillProcess] = field(default_factory=list)
    pulled: list[str] = field(default_factory=list)
    delete: bool = False  # the pod is stopped: finish its deletion (grace period 0)
    wake_at: datetime | None = None


# --------------------------------------------------------------------------- pure helpers


def go_duration(seconds: float) -> str:
    """A duration as Go prints ``time.Duration`` (``1.5s``, ``250ms``, ``2m0s``)."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    if seconds < 60:
        return f"{seconds:.3f}".rstrip("0").rstrip(".") + "s"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{rest:.0f}s"


def crash_backoff(restarts: int) -> float:
    """Simulated seconds before restart number ``restarts + 1``: 10 s doubling, capped at 5 min."""
    return min(CRASH_BACKOFF_BASE * 2**restarts, CRASH_BACKOFF_MAX)


def pull_backoff(failures: int) -> float:
    """Simulated seconds before the next pull after ``failures`` failed pulls."""
    return min(PULL_BACKOFF_BASE * 2 ** max(failures - 1, 0), PULL_BACKOFF_MAX)


def pull_policy(container: dict) -> str:
    """The effective imagePullPolicy (the API server's default when unset)."""
    if container.get("imagePullPolicy"):
        return container["imagePullPolicy"]
    image = container.get("image") or ""
    last = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return "Always" if "@" not in image and (":" not in last or last.endswith(":latest")) else "IfNotPresent"


def image_id(image: str) -> str:
    """A stable digest reference for an image, as containerd reports ``imageID``."""
    repo = normalized_image(image).split("@", 1)[0].rsplit(":", 1)[0]
    return f"{repo}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"


def _field_path(c: ContainerRun) -> str:
    return f"spec.{'initContainers' if c.init else 'containers'}{{{c.name}}}"


def _pod_ref(pod: dict) -> str:
    meta = pod["metadata"]
    return f"{meta['name']}_{meta.get('namespace')}({meta.get('uid')})"


def new_pod_run(
    pod: dict, node: str, host_ip: str, pod_ip: str, now: datetime, exec_commands: bool
) -> PodRun:
    """The runtime record of a pod the kubelet just admitted."""
    spec = pod.get("spec", {})
    containers = spec.get("containers") or []

    def make(c: dict, init: bool) -> ContainerRun:
        argv = exec_argv(c) if exec_commands else None
        return ContainerRun(
            name=c["name"],
            image=c.get("image") or "",
            init=init,
            exec_argv=argv,
            sidecar=init and is_sidecar(c),
        )

    return PodRun(
        uid=pod["metadata"].get("uid", ""),
        node=node,
        host_ip=host_ip,
        pod_ip=pod_ip,
        started=now,
        init=[make(c, True) for c in spec.get("initContainers") or []],
        containers=[make(c, False) for c in containers],
    )


def exec_argv(container: dict) -> tuple[str, ...] | None:
    """The local command line of a container in exec mode (None: it follows its scenario).

    A container without ``command`` would run its image's entrypoint, which is not on this machine; an
    ``sshd`` (the MPI workers' default command) needs root and host keys, so it follows its scenario too.
    """
    command = tuple(str(a) for a in container.get("command") or ())
    if not command or os.path.basename(command[0]) == "sshd":
        return None
    return command + tuple(str(a) for a in container.get("args") or ())


class _Sync:
    """One sync of one pod: mutable scratch state behind the pure ``step_pod``."""

    def __init__(
        self,
        pod: dict,
        run: PodRun,
        scenarios: PodScenarios | None,
        now: datetime,
        scale: float,
        images: frozenset[str],
        refs: References = NO_REFERENCES,
    ):
        self.refs = refs
        self.pod = pod
        self.run = run
        self.scenarios = scenarios
        self.now = now
        self.scale = scale
        self.images = set(images)
        self.spec = pod.get("spec", {})
        self.restart_policy = self.spec.get("restartPolicy", "Always")
        self.specs = {(True, c["name"]): c for c in self.spec.get("initContainers") or []} | {
            (False, c["name"]): c for c in self.spec.get("containers") or []
        }
        self.step = Step(run=run, status={})
        self.wake: list[datetime] = []

    # -- helpers
    def later(self, seconds: float) -> datetime:
        return self.now + timedelta(seconds=seconds * self.scale)

    def event(self, type_: str, reason: str, message: str, c: ContainerRun | None = None) -> None:
        self.step.events.append(EventSpec(type_, reason, message, _field_path(c) if c else None))

    def scenario(self, c: ContainerRun) -> ContainerScenario:
        assert self.scenarios is not None
        return (self.scenarios.init if c.init else self.scenarios.containers)[c.name]

    def due(self, c: ContainerRun) -> bool:
        return c.until is not None and c.until <= self.now

    # -- container transitions
    def begin(self, c: ContainerRun) -> None:
        """Pull (or find) the image, then create and start the container."""
        if self.run.config_error is not None:
            if c.stage != "config_error":
                c.stage, c.waiting_message = "config_error", self.run.config_error
                self.event(WARNING, "Failed", f"Error: {self.run.config_error}", c)
            return
        if not valid_image(c.image):
            c.stage = "invalid"
            c.waiting_message = (
                f'Failed to apply default image tag "{c.image}": couldn\'t parse image name "{c.image}": '
                "invalid reference format"
            )
            self.event(WARNING, "InspectFailed", c.waiting_message, c)
            self.event(WARNING, "Failed", "Error: InvalidImageName", c)
            return
        policy = pull_policy(self.specs[(c.init, c.name)])
        present = c.image in self.images
        if policy == "Never" and not present:
            c.stage = "never_pull"
            c.waiting_message = f'Container image "{c.image}" is not present with pull policy of Never'
            self.event(WARNING, "ErrImageNeverPull", c.waiting_message, c)
            self.event(WARNING, "Failed", "Error: ErrImageNeverPull", c)
            return
        if present and policy != "Always":
            self.event(NORMAL, "Pulled", f'Container image "{c.image}" already present on machine', c)
            self.start(c)
            return
        self.pull(c)

    def pull(self, c: ContainerRun) -> None:
        c.stage, c.pull_started = "pulling", self.now
        c.until = self.later(self.scenario(c).pull)
        self.event(NORMAL, "Pulling", f'Pulling image "{c.image}"', c)

    def pull_done(self, c: ContainerRun) -> None:
        sc = self.scenario(c)
        failing = sc.pull_error is not None and (
            sc.pull_error != PullFailure.RATE_LIMITED or c.pull_failures < sc.pull_failures
        )
        if failing:
            assert sc.pull_error is not None
            c.pull_failures += 1
            error = _PULL_ERRORS[sc.pull_error].format(ref=normalized_image(c.image))
            c.stage, c.waiting_message = "pull_failed", error
            backoff = pull_backoff(c.pull_failures)
            c.until = self.later(min(FLASH_SECONDS, backoff))
            c.retry_at = self.later(backoff)
            self.event(WARNING, "Failed", f'Failed to pull image "{c.image}": {error}', c)
            self.event(WARNING, "Failed", "Error: ErrImagePull", c)
            return
        took = go_duration(sc.pull)
        self.event(
            NORMAL,
            "Pulled",
            f'Successfully pulled image "{c.image}" in {took} ({took} including waiting). '
            f"Image size: {_image_size(c.image)} bytes.",
            c,
        )
        self.images.add(c.image)
        self.step.pulled.append(c.image)
        self.start(c)

    def start(self, c: ContainerRun) -> None:
        sc = self.scenario(c)
        env = self.refs.env.get((c.init, c.name))
        if isinstance(env, str):
            # generateContainerConfig fails after the pull: the image stays, no container is created.
            if c.stage != "config_error" or c.waiting_message != env:
                self.event(WARNING, "Failed", f"Error: {env}", c)
            c.stage, c.waiting_message, c.until = "config_error", env, None
            return
        c.container_id = "containerd://" + secrets.token_hex(32)
        c.image_id = image_id(c.image)
        c.exit_code, c.reason, c.message, c.logs_sent, c.log_tail = None, "", "", 0, []
        c.process_exit, c.process_error, c.kill_sent, c.restart = None, None, False, False
        self.event(NORMAL, "Created", f"Created container: {c.name}", c)
        if sc.cannot_run:
            self.exit(c, 128, "ContainerCannotRun", sc.cannot_run, started=self.now)
            self.event(WARNING, "Failed", f"Error: {sc.cannot_run}", c)
            return
        c.stage, c.started_at, c.finished_at, c.has_started = "running", self.now, None, True
        c.ready_at = self.later(sc.ready)
        self.event(NORMAL, "Started", f"Started container {c.name}", c)
        if c.exec_argv is not None:
            c.until = None
            spec = self.specs[(c.init, c.name)]
            if env is None:
                env = {e["name"]: str(e.get("value", "")) for e in spec.get("env") or [] if "name" in e}
            self.step.processes.append(
                StartProcess(c.name, c.attempt, c.exec_argv, env, spec.get("workingDir"))
            )
        else:
            c.until = None if sc.run is None else self.later(sc.run)

    def emit_logs(self, c: ContainerRun, final: bool = False) -> None:
        if c.exec_argv is not None:
            return
        lines = self.scenario(c).logs
        run = self.scenario(c).run
        while c.logs_sent < len(lines):
            if not final and run and c.started_at is not None:
                at = c.started_at + timedelta(seconds=run * self.scale * (c.logs_sent + 1) / (len(lines) + 1))
                if at > self.now:
                    self.wake.append(at)
                    return
            line = lines[c.logs_sent]
            self.step.logs.append(LogLine(c.name, c.attempt, line))
            c.log_tail = (c.log_tail + [line])[-80:]
            c.logs_sent += 1

    def finish_run(self, c: ContainerRun) -> None:
        sc = self.scenario(c)
        self.emit_logs(c, final=True)
        if c.exec_argv is not None:
            if c.process_error is not None:
                self.exit(c, 128, "ContainerCannotRun", c.process_error)
                return
            code = c.process_exit if c.process_exit is not None else 0
        else:
            code = sc.exit_code(c.attempt)
        if sc.oom:
            self.exit(c, 137, "OOMKilled", sc.message or "")
            return
        written = c.process_message if c.exec_argv is not None else (sc.message or "")
        policy = self.specs[(c.init, c.name)].get("terminationMessagePolicy") or "File"
        message = termination_message(written, code=code, reason="", policy=policy, log_tail=c.log_tail)
        self.exit(c, code, "Completed" if code == 0 else "Error", message)

    def exit(
        self, c: ContainerRun, code: int, reason: str, message: str, started: datetime | None = None
    ) -> None:
        c.stage, c.exit_code, c.reason, c.message = "exited", code, reason, message
        if started is not None:
            c.started_at = started
        c.finished_at, c.ready_at = self.now, None
        self.step.logs.append(LogClose(c.name, c.attempt))
        c.restart = self.restarts(c, code) and not self.pod.get("metadata", {}).get("deletionTimestamp")
        if c.restart:
            c.until = self.later(min(FLASH_SECONDS, crash_backoff(c.attempt)))
        else:
            c.until = None

    def restarts(self, c: ContainerRun, code: int) -> bool:
        if c.sidecar:  # whatever the pod's policy: a sidecar is meant to run as long as the pod
            return True
        if self.restart_policy == "Always":
            return not c.init or code != 0
        return self.restart_policy == "OnFailure" and code != 0

    def back_off(self, c: ContainerRun) -> None:
        delay = crash_backoff(c.attempt)
        c.last_terminated = _terminated(c)
        c.stage = "crash_backoff"
        c.waiting_message = (
            f"back-off {go_duration(delay)} restarting failed container={c.name} pod={_pod_ref(self.pod)}"
        )
        c.until = (c.finished_at or self.now) + timedelta(seconds=delay * self.scale)
        self.event(
            WARNING,
            "BackOff",
            f"Back-off restarting failed container {c.name} in pod {_pod_ref(self.pod)}",
            c,
        )

    def relaunch(self, c: ContainerRun) -> None:
        c.attempt += 1
        self.begin(c)

    def advance(self, c: ContainerRun) -> None:
        """Apply every transition of ``c`` that is due now."""
        for _ in range(16):  # a bounded number of zero-duration transitions in one sync
            before = (c.stage, c.attempt, c.until)
            if c.stage == "idle":
                self.begin(c)
            elif c.stage == "pulling" and self.due(c):
                self.pull_done(c)
            elif c.stage == "pull_failed" and self.due(c):
                c.stage, c.until = "pull_backoff", c.retry_at
                c.waiting_message = f'Back-off pulling image "{c.image}": ErrImagePull: {c.waiting_message}'
                self.event(NORMAL, "BackOff", f'Back-off pulling image "{c.image}"', c)
                self.event(WARNING, "Failed", "Error: ImagePullBackOff", c)
            elif c.stage == "pull_backoff" and self.due(c):
                self.pull(c)
            elif c.stage == "running":
                self.emit_logs(c)
                if self.due(c) or c.process_exit is not None or c.process_error is not None:
                    self.finish_run(c)
            elif c.stage == "exited" and c.restart and self.due(c):
                self.back_off(c)
            elif c.stage == "crash_backoff" and self.due(c):
                self.relaunch(c)
            elif c.stage == "config_error" and self.run.config_error is None:
                self.start(c)  # the kubelet retries on every sync: the missing object may exist now
            if (c.stage, c.attempt, c.until) == before:
                break
        if c.until is not None:
            self.wake.append(c.until)
        if c.stage == "running" and c.ready_at is not None and c.ready_at > self.now:
            self.wake.append(c.ready_at)

    def kill(self, c: ContainerRun, code: int) -> bool:
        """Stop ``c`` for pod termination; False while a local process is still shutting down."""
        if c.stage != "running":
            if c.stage in ("exited", "crash_backoff"):
                c.restart = False
                if c.stage == "crash_backoff":
                    c.stage = "exited"
                c.until = None
            return True
        if c.exec_argv is not None and c.process_exit is None and c.process_error is None:
            if not c.kill_sent:
                c.kill_sent = True
                self.event(NORMAL, "Killing", f"Stopping container {c.name}", c)
                self.step.processes.append(KillProcess(c.name, c.attempt))
            return False
        if not c.kill_sent:
            self.event(NORMAL, "Killing", f"Stopping container {c.name}", c)
        if c.exec_argv is not None and c.process_exit is not None:
            code = c.process_exit
        self.emit_logs(c, final=False)
        self.exit(c, code, "Completed" if code == 0 else "Error", "")
        c.restart, c.until = False, None
        return True


# kubernetes pkg/kubelet/container/runtime.go (v1.31): MaxContainerTerminationMessageLength,
# MaxContainerTerminationMessageLogLength, MaxContainerTerminationMessageLogLines.
TERMINATION_MESSAGE_MAX = 4 * 1024
TERMINATION_LOG_MAX = 2 * 1024
TERMINATION_LOG_LINES = 80


def termination_message(written: str, *, code: int, reason: str, policy: str, log_tail: list[str]) -> str:
    """A terminated container's ``message``, by the kubelet's rule (kubernetes
    ``pkg/kubelet/kuberuntime/kuberuntime_container.go`` v1.31, ``getTerminationMessage`` and
    ``convertToKubeContainerStatus``): the file's last 4096 bytes, whatever the exit code; when the file
    is empty or absent, the policy is ``FallbackToLogsOnError`` and the container failed (not
    ``ContainerCannotRun``: no log), the log's last 80 lines, at most their last 2048 bytes."""
    if written:
        return _tail_bytes(written, TERMINATION_MESSAGE_MAX)
    if policy == "FallbackToLogsOnError" and code != 0 and reason != "ContainerCannotRun":
        return _tail_bytes("\n".join(log_tail[-TERMINATION_LOG_LINES:]), TERMINATION_LOG_MAX)
    return ""


def _tail_bytes(text: str, limit: int) -> str:
    data = text.encode()
    return data[-limit:].decode(errors="ignore") if len(data) > limit else text


def _image_size(image: str) -> int:
    return 20_000_000 + int(hashlib.sha256(image.encode()).hexdigest()[:6], 16) * 100


def _terminated(c: ContainerRun) -> dict:
    term: dict[str, Any] = {
        "exitCode": c.exit_code if c.exit_code is not None else 0,
        "reason": c.reason or ("Completed" if not c.exit_code else "Error"),
        "startedAt": rfc3339(c.started_at) if c.started_at else None,
        "finishedAt": rfc3339(c.finished_at) if c.finished_at else None,
        "containerID": c.container_id,
    }
    if c.message:
        term["message"] = c.message
    return term


def container_status(c: ContainerRun, now: datetime, default_waiting: str) -> dict:
    """The API ``ContainerStatus`` of ``c``."""
    waiting: dict[str, str] | None = None
    state: dict[str, Any]
    if c.stage in ("idle",) or (c.stage == "pulling" and c.pull_failures == 0):
        waiting = {"reason": default_waiting}
    elif c.stage == "pulling":
        waiting = {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{c.image}"'}
    elif c.stage == "pull_failed":
        waiting = {"reason": "ErrImagePull", "message": c.waiting_message}
    elif c.stage == "pull_backoff":
        waiting = {"reason": "ImagePullBackOff", "message": c.waiting_message}
    elif c.stage == "invalid":
        waiting = {"reason": "InvalidImageName", "message": c.waiting_message}
    elif c.stage == "never_pull":
        waiting = {"reason": "ErrImageNeverPull", "message": c.waiting_message}
    elif c.stage == "config_error":
        waiting = {"reason": "CreateContainerConfigError", "message": c.waiting_message}
    elif c.stage == "crash_backoff":
        waiting = {"reason": "CrashLoopBackOff", "message": c.waiting_message}
    if waiting is not None:
        state = {"waiting": waiting}
    elif c.stage == "running":
        state = {"running": {"startedAt": rfc3339(c.started_at or now)}}
    else:
        state = {"terminated": _terminated(c)}
    status: dict[str, Any] = {
        "name": c.name,
        "state": state,
        "lastState": {"terminated": c.last_terminated} if c.last_terminated else {},
        "ready": c.stage == "running" and c.ready_at is not None and c.ready_at <= now,
        "restartCount": c.attempt,
        "image": normalized_image(c.image) if c.image_id else c.image,
        "imageID": c.image_id,
        "started": c.stage == "running",
    }
    if c.container_id and c.stage in ("running", "exited", "crash_backoff"):
        status["containerID"] = c.container_id
    elif c.container_id and c.last_terminated:
        status["containerID"] = c.last_terminated.get("containerID", "")
    return status


def _init_done(c: ContainerRun) -> bool:
    """Whether the containers after ``c`` may start: it succeeded, or it is a sidecar that has started."""
    if c.sidecar:
        return c.has_started
    return c.stage == "exited" and c.exit_code == 0


def pod_phase(run: PodRun, restart_policy: str) -> str:
    """The pod phase from its containers, with the kubelet's rules (``getPhase``)."""
    for c in run.init:
        if _init_done(c):
            continue
        if c.stage == "exited" and not c.restart and restart_policy == "Never":
            return "Failed"
        return "Pending"
    waiting = running = stopped = succeeded = 0
    for c in run.containers:
        if c.stage == "running":
            running += 1
        elif c.stage == "exited":
            stopped += 1
            succeeded += c.exit_code == 0
        elif c.last_terminated is not None:
            stopped += 1
        else:
            waiting += 1
    if waiting:
        return "Pending"
    if running:
        return "Running"
    if stopped:
        if restart_policy == "Always":
            return "Running"
        if stopped == succeeded:
            return "Succeeded"
        if restart_policy == "Never":
            return "Failed"
        return "Running" if any(c.restart for c in run.containers) else "Failed"
    return "Pending"


def pod_status(pod: dict, run: PodRun, now: datetime) -> dict:
    """The full pod status the kubelet reports for ``run`` (keeps conditions owned by others)."""
    status = dict(pod.get("status") or {})
    has_init = bool(run.init)
    init_done = all(_init_done(c) for c in run.init)
    phase = pod_phase(run, pod.get("spec", {}).get("restartPolicy", "Always"))
    default_waiting = "PodInitializing" if has_init else "ContainerCreating"
    init_statuses = [container_status(c, now, "PodInitializing") for c in run.init]
    statuses = [container_status(c, now, default_waiting) for c in run.containers]
    conditions = status.get("conditions") or []
    conditions = set_condition(conditions, "PodReadyToStartContainers", "True", now)
    completed = phase in ("Succeeded", "Failed")
    if init_done:
        conditions = set_condition(
            conditions, "Initialized", "True", now, "PodCompleted" if completed and has_init else None
        )
    else:
        pending = [c.name for c in run.init if not _init_done(c)]
        conditions = set_condition(
            conditions,
            "Initialized",
            "False",
            now,
            "ContainersNotInitialized",
            f"containers with incomplete status: [{' '.join(pending)}]",
        )
    # Sidecars serve the regular containers: their readiness is part of the pod's.
    sidecar_statuses = [s for c, s in zip(run.init, init_statuses, strict=True) if c.sidecar]
    unready = [s["name"] for s in sidecar_statuses + statuses if not s["ready"]]
    for type_ in ("Ready", "ContainersReady"):
        if phase == "Succeeded" or (completed and not unready):
            conditions = set_condition(conditions, type_, "False", now, "PodCompleted")
        elif unready or not statuses:
            reason = "PodFailed" if completed else "ContainersNotReady"
            message = None if completed else f"containers with unready status: [{' '.join(unready)}]"
            conditions = set_condition(conditions, type_, "False", now, reason, message)
        else:
            conditions = set_condition(conditions, type_, "True", now)
    order = {
        t: i
        for i, t in enumerate(
            ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
        )
    }
    conditions.sort(key=lambda cond: order.get(cond["type"], len(order)))
    status.update(
        {
            "phase": phase,
            "conditions": conditions,
            "hostIP": run.host_ip,
            "hostIPs": [{"ip": run.host_ip}],
            "podIP": run.pod_ip,
            "podIPs": [{"ip": run.pod_ip}],
            "startTime": rfc3339(run.started),
            "containerStatuses": statuses,
        }
    )
    if has_init:
        status["initContainerStatuses"] = init_statuses
    else:
        status.pop("initContainerStatuses", None)
    return status


def _copy_run(run: PodRun) -> PodRun:
    """What ``copy.deepcopy(run)`` gives, for a fraction of its cost (a sync runs on every change of
    every pod): every field but the containers' log tails and last terminated states is immutable."""
    return replace(
        run,
        init=[_copy_container(c) for c in run.init],
        containers=[_copy_container(c) for c in run.containers],
    )


def _copy_container(c: ContainerRun) -> ContainerRun:
    return replace(
        c,
        log_tail=list(c.log_tail),
        last_terminated=dict(c.last_terminated) if c.last_terminated is not None else None,  # flat
    )


def step_pod(
    pod: dict,
    run: PodRun,
    now: datetime,
    scale: float,
    *,
    images: frozenset[str] = frozenset(),
    evict: tuple[str, str] | None = None,
    refs: References = NO_REFERENCES,
) -> Step:
    """One kubelet sync of ``pod`` (pure: ``run`` is not modified, the new record is in the result).

    ``images`` are the images already on the node; ``evict`` is ``(reason, message)`` when the kubelet
    must evict the pod (node pressure) in this sync.
    """
    run = _copy_run(run)
    scenarios: PodScenarios | None = None
    if run.config_error is None:
        try:
            scenarios = pod_scenarios(pod)
        except ScenarioError as exc:
            run.config_error = f"invalid {exc}"
    sync = _Sync(pod, run, scenarios, now, scale, images, refs)
    deleting = bool(pod.get("metadata", {}).get("deletionTimestamp"))
    if run.done:
        sync.step.status = pod.get("status") or {}
        sync.step.delete = deleting
        return sync.step
    if evict is not None:
        return _evict(sync, *evict)
    if deleting:
        return _terminate(sync)
    if refs.mounts and not any(c.has_started for c in run.init + run.containers):
        # Volumes are set up before the sandbox: nothing starts, every container shows ContainerCreating.
        if refs.mounts != run.mount_errors:
            for message in refs.mounts:
                sync.event(WARNING, "FailedMount", message)
        run.mount_errors = refs.mounts
        status = pod_status(pod, run, now)
        status["conditions"] = set_condition(status["conditions"], "PodReadyToStartContainers", "False", now)
        sync.step.status = status
        return sync.step
    for c in run.init:
        sync.advance(c)
        if not _init_done(c):
            break
    if all(_init_done(c) for c in run.init):
        for c in run.containers:
            sync.advance(c)
    status = pod_status(pod, run, now)
    if status["phase"] in ("Succeeded", "Failed"):
        # The regular containers are done: the kubelet stops the sidecars, the last one first.
        term_codes = {name: sc.term_exit for name, sc in (scenarios.init if scenarios else {}).items()}
        for c in reversed(run.init):
            if c.sidecar:
                sync.kill(c, term_codes.get(c.name, 143))
        status = pod_status(pod, run, now)
        run.done = True
        for c in run.init + run.containers:
            c.until = None
        sync.wake.clear()
    sync.step.status = status
    sync.step.wake_at = min(sync.wake) if sync.wake else None
    return sync.step


def _terminate(sync: _Sync) -> Step:
    run = sync.run
    term_codes = {}
    if sync.scenarios is not None:
        term_codes = {
            (init, name): sc.term_exit
            for init, group in ((True, sync.scenarios.init), (False, sync.scenarios.containers))
            for name, sc in group.items()
        }
    stopped = True
    for c in run.init + run.containers:
        stopped = sync.kill(c, term_codes.get((c.init, c.name), 143)) and stopped
    status = pod_status(sync.pod, run, sync.now)
    if stopped:
        phase = (
            "Succeeded" if all(c.stage == "exited" and c.exit_code == 0 for c in run.containers) else "Failed"
        )
        if not all(_init_done(c) for c in run.init):
            phase = "Failed"
        status = pod_status(sync.pod, run, sync.now)
        status["phase"] = phase
        for type_ in ("Ready", "ContainersReady"):
            status["conditions"] = set_condition(
                status["conditions"],
                type_,
                "False",
                sync.now,
                "PodCompleted" if phase == "Succeeded" else "PodFailed",
            )
        run.done = True
        sync.step.delete = True
    sync.step.status = status
    return sync.step


def _evict(sync: _Sync, reason: str, message: str) -> Step:
    run = sync.run
    for c in run.init + run.containers:
        sync.kill(c, 137)
        c.kill_sent = True
    status = pod_status(sync.pod, run, sync.now)
    status["phase"] = "Failed"
    status["reason"] = reason
    status["message"] = message
    conditions = set_condition(
        status["conditions"], "DisruptionTarget", "True", sync.now, "TerminationByKubelet", message
    )
    for type_ in ("Ready", "ContainersReady"):
        conditions = set_condition(conditions, type_, "False", sync.now, "PodFailed")
    status["conditions"] = conditions
    sync.event(WARNING, reason, message)
    run.done = True
    sync.step.status = status
    return sync.step


# --------------------------------------------------------------------------- what a pod names


def resolve_references(pod: dict, lookup: Lookup, network: PodNetwork) -> References:
    """What the pod's ConfigMaps and Secrets resolve to now, through ``lookup(kind, namespace, name)``
    (the stored object, or None): each container's env, or the kubelet's error for it, and the
    FailedMount messages of its volumes. A pod that names none is not looked up at all."""
    if not refers_to_objects(pod):
        return NO_REFERENCES
    env: dict[tuple[bool, str], dict[str, str] | str] = {}
    spec = pod.get("spec", {})
    for init, group in ((True, spec.get("initContainers") or []), (False, spec.get("containers") or [])):
        for c in group:
            try:
                env[(init, c["name"])] = container_env(c, pod, lookup, network)
            except MissingReference as exc:
                env[(init, c["name"])] = str(exc)
    return References(env=env, mounts=tuple(mount_failures(pod, lookup)))


def deletion_exit_codes(pod: dict) -> dict[str, int]:
    """The exit code each container reports when the pod's deletion stops it while it runs (its
    scenario's ``term_exit``), by container name; empty when the pod's scenario is invalid (its
    containers never start)."""
    try:
        scenarios = pod_scenarios(pod)
    except ScenarioError:
        return {}
    return {name: sc.term_exit for name, sc in {**scenarios.init, **scenarios.containers}.items()}
