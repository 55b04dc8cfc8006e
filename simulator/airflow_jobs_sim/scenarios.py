"""What a simulated container does: scenarios from a pod annotation and from image-name conventions.

A pod (usually through its Job or MPIJob pod template) carries the annotation
``sim.airflow-jobs.io/scenario`` holding a JSON object keyed by container name (``"*"`` applies to every
container not named), each value describing that container::

    {"main": {"pull": 2, "run": 30, "exit": 0, "logs": ["epoch 1", "epoch 2"]},
     "wait-for-workers": {"run": 3}}

Image tags are a shorthand for the common cases (``trainer:oom``, ``trainer:exit-3``, ...); the
annotation wins over the image. The annotation is parsed strictly: an unknown key or a wrong type is a
``ScenarioError`` with a message naming the offending key, never a silent default.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

ANNOTATION = "sim.airflow-jobs.io/scenario"
ALL_CONTAINERS = "*"
MPI_ROLE_LABEL = "training.kubeflow.org/job-role"

DEFAULT_LOGS = ("starting", "step 1/3", "step 2/3", "step 3/3", "done")
WORKER_LOGS = ("Server listening on 0.0.0.0 port 22.",)


class ScenarioError(ValueError):
    """A malformed scenario annotation."""


class PullFailure(str, Enum):
    """How an image pull fails."""

    NOT_FOUND = "not-found"  # the image does not exist: ErrImagePull, then ImagePullBackOff forever
    UNAUTHORIZED = "unauthorized"  # registry refuses: ErrImagePull, then ImagePullBackOff forever
    RATE_LIMITED = "rate-limited"  # registry throttles: fails `pull_failures` times, then succeeds


@dataclass(frozen=True)
class ContainerScenario:
    """The simulated behaviour of one container. Durations are simulated seconds."""

    pull: float = 1.0
    pull_error: PullFailure | None = None
    pull_failures: int = 2
    run: float | None = 5.0  # None: runs until the pod is deleted
    exit: tuple[int, ...] = (0,)  # exit code per attempt (restart); the last one repeats
    logs: tuple[str, ...] = DEFAULT_LOGS
    oom: bool = False  # every attempt is OOMKilled (exit 137) at the end of its run
    cannot_run: str | None = None  # every attempt fails to start (ContainerCannotRun, exit 128)
    ready: float = 0.0  # running seconds before the container reports ready
    message: str | None = None  # terminated message (default: the log tail on failure)
    term_exit: int = 143  # exit code when stopped by pod deletion (0 reads as Completed)

    def exit_code(self, attempt: int) -> int:
        """The exit code of the ``attempt``-th run (0-based): the last listed code repeats."""
        return self.exit[min(attempt, len(self.exit) - 1)]


INIT_DEFAULT = ContainerScenario(run=0.0, logs=())
# A sidecar (an init container with restartPolicy Always) serves the pod until the pod stops it.
SIDECAR_DEFAULT = ContainerScenario(run=None, logs=())
WORKER_DEFAULT = ContainerScenario(run=None, logs=WORKER_LOGS)
MAIN_DEFAULT = ContainerScenario()

_KEYS = {
    "pull",
    "pull_error",
    "pull_failures",
    "run",
    "exit",
    "logs",
    "oom",
    "cannot_run",
    "ready",
    "message",
    "term_exit",
}

# A simplified form of the image reference grammar (distribution/reference): lowercase path components,
# optional registry host with port, optional tag, optional digest.
_IMAGE_RE = re.compile(
    r"^(?:(?:[a-zA-Z0-9-]+\.)*[a-zA-Z0-9-]+(?::[0-9]+)?/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[\w][\w.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$"
)
_EXIT_TAG = re.compile(r"^exit-([0-9]{1,3})$")
_RUN_TAG = re.compile(r"^run-([0-9]+)s$")


def valid_image(image: str) -> bool:
    """Whether ``image`` is a well-formed image reference (else the kubelet reports InvalidImageName)."""
    return bool(image) and len(image) <= 255 and bool(_IMAGE_RE.match(image))


def image_tag(image: str) -> str:
    """The tag of an image reference ("latest" when none is given)."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else "latest"


def normalized_image(image: str) -> str:
    """The fully qualified form the container runtime reports (``docker.io/library/busybox:latest``)."""
    name, _, digest = image.partition("@")
    first = name.split("/", 1)[0]
    has_registry = "/" in name and ("." in first or ":" in first or first == "localhost")
    if not has_registry:
        name = f"docker.io/{name}" if "/" in name else f"docker.io/library/{name}"
    if ":" not in name.rsplit("/", 1)[-1] and not digest:
        name += ":latest"
    return f"{name}@{digest}" if digest else name


def image_convention(image: str, base: ContainerScenario) -> ContainerScenario:
    """Apply the image-tag shorthands to ``base``.

    Tags: ``not-found``, ``unauthorized``, ``rate-limited`` (pull failures), ``oom``, ``cannot-run``,
    ``crash`` (exit 1), ``exit-N``, ``run-Ns`` (run N seconds), ``forever`` (run until deleted).
    """
    tag = image_tag(image)
    if tag in (PullFailure.NOT_FOUND.value, PullFailure.UNAUTHORIZED.value, PullFailure.RATE_LIMITED.value):
        return replace(base, pull_error=PullFailure(tag))
    if tag == "oom":
        return replace(base, oom=True)
    if tag == "cannot-run":
        return replace(base, cannot_run=_default_cannot_run(base))
    if tag == "crash":
        return replace(base, exit=(1,))
    if tag == "forever":
        return replace(base, run=None)
    if m := _EXIT_TAG.match(tag):
        return replace(base, exit=(int(m.group(1)),))
    if m := _RUN_TAG.match(tag):
        return replace(base, run=float(m.group(1)))
    return base


def _default_cannot_run(_: ContainerScenario) -> str:
    return (
        "failed to create containerd task: failed to create shim task: OCI runtime create failed: "
        'runc create failed: unable to start container process: exec: "train": executable file not '
        "found in $PATH: unknown"
    )


def parse_annotation(text: str) -> dict[str, dict[str, Any]]:
    """Parse and validate the annotation text; the result maps container name (or ``*``) to its overrides."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScenarioError(f"{ANNOTATION}: not valid JSON: {exc.msg} at position {exc.pos}") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{ANNOTATION}: must be a JSON object keyed by container name")
    out: dict[str, dict[str, Any]] = {}
    for name, spec in data.items():
        where = f"{ANNOTATION}: container {name!r}"
        if not isinstance(spec, dict):
            raise ScenarioError(f"{where}: must be an object")
        unknown = sorted(set(spec) - _KEYS)
        if unknown:
            raise ScenarioError(
                f"{where}: unknown key {unknown[0]!r} (expected one of: {', '.join(sorted(_KEYS))})"
            )
        out[name] = {key: _check(where, key, value) for key, value in spec.items()}
    return out


def _check(where: str, key: str, value: Any) -> Any:
    def fail(expected: str) -> ScenarioError:
        return ScenarioError(f"{where}: {key!r} must be {expected}, got {json.dumps(value)}")

    def number(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0

    def exit_code(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 255

    if key in ("pull", "ready"):
        if not number(value):
            raise fail("a non-negative number of seconds")
        return float(value)
    if key == "run":
        if value is not None and not number(value):
            raise fail("a non-negative number of seconds or null (run until deleted)")
        return None if value is None else float(value)
    if key in ("exit", "term_exit"):
        if exit_code(value):
            return (value,) if key == "exit" else value
        if key == "exit" and isinstance(value, list) and value and all(exit_code(v) for v in value):
            return tuple(value)
        raise fail("an exit code 0-255" + (" or a non-empty list of them" if key == "exit" else ""))
    if key == "logs":
        if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise fail("a list of strings")
        return tuple(value)
    if key == "pull_error":
        try:
            return PullFailure(value) if value is not None else None
        except ValueError:
            raise fail("one of " + ", ".join(p.value for p in PullFailure)) from None
    if key == "pull_failures":
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            raise fail("a positive integer")
        return value
    if key == "oom":
        if not isinstance(value, bool):
            raise fail("true or false")
        return value
    if key == "cannot_run":
        if isinstance(value, bool):
            return _default_cannot_run(MAIN_DEFAULT) if value else None
        if isinstance(value, str) and value:
            return value
        raise fail("true, false or an error message")
    if key == "message":
        if not isinstance(value, str):
            raise fail("a string")
        return value
    raise fail("a known key")  # pragma: no cover - _KEYS and this function list the same keys


@dataclass(frozen=True)
class PodScenarios:
    """The scenario of every container of one pod."""

    init: Mapping[str, ContainerScenario] = field(default_factory=dict)
    containers: Mapping[str, ContainerScenario] = field(default_factory=dict)


def is_sidecar(container: dict) -> bool:
    """Whether an init container is a sidecar: restartable, started before and kept beside the others."""
    return container.get("restartPolicy") == "Always"


def pod_scenarios(pod: dict) -> PodScenarios:
    """Resolve every container's scenario: role default, then image tag, then the annotation.

    Raises ``ScenarioError`` for a malformed annotation.
    """
    meta = pod.get("metadata", {})
    text = (meta.get("annotations") or {}).get(ANNOTATION)
    overrides = parse_annotation(text) if text else {}
    spec = pod.get("spec", {})
    names = {c.get("name") for c in spec.get("initContainers") or []} | {
        c.get("name") for c in spec.get("containers") or []
    }
    stray = sorted(k for k in overrides if k != ALL_CONTAINERS and k not in names)
    if stray:
        raise ScenarioError(
            f"{ANNOTATION}: container {stray[0]!r} is not in the pod (containers: {', '.join(sorted(map(str, names)))})"
        )
    worker = (meta.get("labels") or {}).get(MPI_ROLE_LABEL) == "worker"

    def resolve(container: dict, base: ContainerScenario) -> ContainerScenario:
        scenario = image_convention(container.get("image") or "", base)
        for key in (ALL_CONTAINERS, container.get("name")):
            if key in overrides:
                scenario = replace(scenario, **overrides[key])
        return scenario

    return PodScenarios(
        init={
            c["name"]: resolve(c, SIDECAR_DEFAULT if is_sidecar(c) else INIT_DEFAULT)
            for c in spec.get("initContainers") or []
        },
        containers={
            c["name"]: resolve(c, WORKER_DEFAULT if worker else MAIN_DEFAULT)
            for c in spec.get("containers") or []
        },
    )
