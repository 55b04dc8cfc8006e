"""Build the real control plane's binaries from their Go modules, once per pinned version.

Every binary lands in ``<cache>/bin/<component>-<version>/`` and is reused while its pin holds. Module
downloads and Go's build cache live beside it (``<cache>/gomod``, ``<cache>/gobuild``), so a rebuild after
a pin change downloads and compiles only what changed. Nothing is written inside the repository.

Two components cannot be built with a plain ``go install module/cmd@version``:
- ``k8s.io/kubernetes`` and ``go.etcd.io/etcd/server/v3`` carry ``replace`` directives to their own
  staging directories (kubernetes/kubernetes go.mod; etcd-io/etcd server/go.mod), which ``go install``
  refuses. Each is built from a small wrapper module that requires it and points every staging module at
  its published tag (``k8s.io/api`` v0.36.3 for Kubernetes v1.36.3).
- the proxy refuses the version list of ``github.com/kubeflow/mpi-operator`` (403), which
  ``go install pkg@version`` reads to report deprecation; a wrapper module that requires the exact version
  as a ``tool`` never asks for the list.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from realplane.pins import Pin, Pins

# A build recipe that changes what a binary is (an overlay) renames its cache entry, so no stale binary
# built by an older recipe is reused.
RECIPES = {"mpi-operator": "+health-addr"}

KUBE_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")


class BuildError(RuntimeError):
    """A component could not be built; the message names it and ends with the Go command's last lines."""


@dataclass(frozen=True)
class Layout:
    """Where the cache keeps modules, build objects, wrapper modules and binaries."""

    root: Path

    @property
    def gomodcache(self) -> Path:
        return self.root / "gomod"

    @property
    def gocache(self) -> Path:
        return self.root / "gobuild"

    def bin_dir(self, pin: Pin) -> Path:
        return self.root / "bin" / f"{pin.name}-{pin.version}{RECIPES.get(pin.name, '')}"

    def src_dir(self, pin: Pin) -> Path:
        return self.root / "src" / f"{pin.name}-{pin.version}"

    def log(self, pin: Pin) -> Path:
        return self.root / "logs" / f"build-{pin.name}-{pin.version}.log"


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(os.environ.get("AIRFLOW_JOBS_PLANE_CACHE", str(Path(base) / "airflow-jobs-plane")))


def go_env(layout: Layout) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        GOTOOLCHAIN="local",
        CGO_ENABLED="0",
        GOMODCACHE=str(layout.gomodcache),
        GOCACHE=str(layout.gocache),
        GOFLAGS="-mod=mod -buildvcs=false",
        GOWORK="off",
    )
    return env


def binaries(pin: Pin) -> tuple[str, ...]:
    return {
        "kubernetes": KUBE_COMMANDS,
        "etcd": ("etcd",),
        "kwok": ("kwok",),
        "mpi-operator": ("mpi-operator",),
        "kueue": ("kueue",),
    }[pin.name]


def is_built(layout: Layout, pin: Pin) -> bool:
    d = layout.bin_dir(pin)
    return all((d / name).is_file() and os.access(d / name, os.X_OK) for name in binaries(pin))


def module_dir(layout: Layout, pin: Pin) -> Path:
    """The module's own files (manifests, CRDs, stages) as the module cache holds them."""
    return layout.gomodcache / _escape(pin.module + "@" + pin.version)


def _escape(path: str) -> str:
    # The module cache escapes capitals as "!" + lowercase (golang.org/x/mod/module.EscapePath).
    return re.sub(r"[A-Z]", lambda m: "!" + m.group(0).lower(), path)


def ensure(layout: Layout, pins: Pins, names: tuple[str, ...], out: TextIO = sys.stderr) -> dict[str, float]:
    """Build every component of ``names`` that is not cached yet; returns the seconds each build took."""
    if shutil.which("go") is None:
        raise BuildError(
            "go: not found on PATH; the real control plane is built from Go modules (Go >= 1.26)"
        )
    took: dict[str, float] = {}
    for name in names:
        pin = pins[name]
        if is_built(layout, pin):
            continue
        start = time.monotonic()
        print(f"cluster: building {pin.name} {pin.version} ({pin.module}); log {layout.log(pin)}", file=out)
        layout.log(pin).parent.mkdir(parents=True, exist_ok=True)
        BUILDERS[pin.name](layout, pin)
        took[name] = time.monotonic() - start
        print(f"cluster: built {pin.name} {pin.version} in {took[name]:.0f} s", file=out)
    return took


def _run(layout: Layout, pin: Pin, args: list[str], cwd: Path) -> str:
    with layout.log(pin).open("a") as log:
        log.write(f"$ (cd {cwd} && {' '.join(args)})\n")
        log.flush()
        proc = subprocess.run(
            args, cwd=cwd, env=go_env(layout), stdout=subprocess.PIPE, stderr=log, text=True
        )
    if proc.returncode != 0:
        tail = "\n".join(layout.log(pin).read_text().splitlines()[-12:])
        raise BuildError(
            f"{pin.name} {pin.version}: `{' '.join(args)}` failed (exit {proc.returncode}):\n{tail}"
        )
    return proc.stdout


def _wrapper(layout: Layout, pin: Pin) -> Path:
    src = layout.src_dir(pin)
    src.mkdir(parents=True, exist_ok=True)
    if not (src / "go.mod").exists():
        _run(layout, pin, ["go", "mod", "init", f"local.plane/{pin.name}"], src)
    return src


def _into(layout: Layout, pin: Pin) -> Path:
    """A fresh staging directory; binaries move into the cache's bin directory only once all are built."""
    staging = layout.bin_dir(pin).with_name(layout.bin_dir(pin).name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    return staging


def _publish(layout: Layout, pin: Pin, staging: Path) -> None:
    final = layout.bin_dir(pin)
    shutil.rmtree(final, ignore_errors=True)
    staging.rename(final)


def build_kubernetes(layout: Layout, pin: Pin) -> None:
    src = _wrapper(layout, pin)
    info = json.loads(
        _run(layout, pin, ["go", "mod", "download", "-json", f"{pin.module}@{pin.version}"], src)
    )
    minor = pin.version.lstrip("v").split(".")[1]
    staging_tag = "v0." + ".".join(pin.version.lstrip("v").split(".")[1:])
    gomod = Path(info["GoMod"]).read_text()
    staged = re.findall(r"^\s*(k8s\.io/[A-Za-z0-9._-]+)\s+=>\s+\./staging/", gomod, flags=re.M)
    if not staged:
        raise BuildError(
            f"kubernetes {pin.version}: its go.mod lists no staging replaces; the wrapper needs them"
        )
    edits = [f"-replace={m}={m}@{staging_tag}" for m in staged]
    _run(layout, pin, ["go", "mod", "edit", f"-require={pin.module}@{pin.version}", *edits], src)
    for cmd in KUBE_COMMANDS:
        _run(layout, pin, ["go", "mod", "edit", f"-tool={pin.module}/cmd/{cmd}"], src)
    _run(layout, pin, ["go", "mod", "tidy"], src)
    # Unversioned builds report v0.0.0-master (k8s.io/component-base/version/base.go); Kueue reads the
    # server version (cmd/kueue/main.go) and kubectl warns on skew, so stamp the release.
    version = pin.version
    ldflags = " ".join(
        [
            "-s -w",
            f"-X k8s.io/component-base/version.gitVersion={version}",
            "-X k8s.io/component-base/version.gitMajor=1",
            f"-X k8s.io/component-base/version.gitMinor={minor}",
            "-X k8s.io/component-base/version.gitTreeState=clean",
            f"-X k8s.io/client-go/pkg/version.gitVersion={version}",
            "-X k8s.io/client-go/pkg/version.gitMajor=1",
            f"-X k8s.io/client-go/pkg/version.gitMinor={minor}",
        ]
    )
    out = _into(layout, pin)
    pkgs = [f"{pin.module}/cmd/{cmd}" for cmd in KUBE_COMMANDS]
    _run(layout, pin, ["go", "build", "-trimpath", "-ldflags", ldflags, "-o", str(out) + "/", *pkgs], src)
    _publish(layout, pin, out)


def build_etcd(layout: Layout, pin: Pin) -> None:
    src = _wrapper(layout, pin)
    info = json.loads(
        _run(layout, pin, ["go", "mod", "download", "-json", f"{pin.module}@{pin.version}"], src)
    )
    gomod = Path(info["GoMod"]).read_text()
    # server/go.mod points its sibling modules at ../api, ../client/...: use their published tags instead.
    siblings = re.findall(r"^\s*(go\.etcd\.io/etcd/[A-Za-z0-9/._-]+)\s+=>\s+\.\./", gomod, flags=re.M)
    edits = [f"-replace={m}={m}@{pin.version}" for m in siblings]
    _run(
        layout,
        pin,
        ["go", "mod", "edit", f"-require={pin.module}@{pin.version}", *edits, f"-tool={pin.module}"],
        src,
    )
    _run(layout, pin, ["go", "mod", "tidy"], src)
    out = _into(layout, pin)
    _run(
        layout,
        pin,
        ["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(out / "etcd"), pin.module],
        src,
    )
    _publish(layout, pin, out)


def _tool_build(layout: Layout, pin: Pin, package: str, binary: str) -> None:
    src = _wrapper(layout, pin)
    _run(layout, pin, ["go", "mod", "edit", f"-require={pin.module}@{pin.version}", f"-tool={package}"], src)
    _run(layout, pin, ["go", "mod", "tidy"], src)
    # The wrapper's go.mod keeps the module's own minimum versions (tidy only adds what is missing), so the
    # binary is built from the dependency set the release itself was tested with.
    out = _into(layout, pin)
    _run(
        layout, pin, ["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(out / binary), package], src
    )
    _publish(layout, pin, out)


def build_kwok(layout: Layout, pin: Pin) -> None:
    _tool_build(layout, pin, f"{pin.module}/cmd/kwok", "kwok")


# mpi-operator v0.8.x serves its health check on ":8080", a constant (cmd/mpi-operator/app/server.go,
# `healthCheckPort = 8080`): every interface, and the port Airflow's API server takes by default, so a
# second plane (or the demo's Airflow) beside the first would make it exit ("Error starting server for
# health check"). The build copies the release's module into the wrapper (the module cache stays
# read-only, and `go build -overlay` refuses files beneath it), changes that one expression so the address
# comes from MPI_OPERATOR_HEALTH_ADDR (upstream's ":8080" when unset), and points the wrapper's `replace`
# at the copy.
MPI_HEALTH_ADDR = 'fmt.Sprintf(":%d", healthCheckPort)'
MPI_HEALTH_ADDR_ENV = "MPI_OPERATOR_HEALTH_ADDR"


def build_mpi_operator(layout: Layout, pin: Pin) -> None:
    package = f"{pin.module}/cmd/mpi-operator"
    src = _wrapper(layout, pin)
    _run(layout, pin, ["go", "mod", "download", f"{pin.module}@{pin.version}"], src)
    copy = src / "mpi-operator"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(module_dir(layout, pin), copy)
    for path in copy.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    server = copy / "cmd" / "mpi-operator" / "app" / "server.go"
    text = server.read_text()
    if text.count(MPI_HEALTH_ADDR) != 1:
        raise BuildError(
            f"mpi-operator {pin.version}: {server} no longer has one `{MPI_HEALTH_ADDR}`; "
            "review the health-address change in scripts/realplane/build.py for this release"
        )
    replacement = (
        f'func() string {{ if a := os.Getenv("{MPI_HEALTH_ADDR_ENV}"); a != "" {{ return a }}; '
        f"return {MPI_HEALTH_ADDR} }}()"
    )
    server.write_text(text.replace(MPI_HEALTH_ADDR, replacement))
    edits = [
        f"-require={pin.module}@{pin.version}",
        f"-replace={pin.module}=./mpi-operator",
        f"-tool={package}",
    ]
    _run(layout, pin, ["go", "mod", "edit", *edits], src)
    _run(layout, pin, ["go", "mod", "tidy"], src)
    out = _into(layout, pin)
    args = ["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(out / "mpi-operator"), package]
    _run(layout, pin, args, src)
    _publish(layout, pin, out)


def build_kueue(layout: Layout, pin: Pin) -> None:
    # Kueue's version package (sigs.k8s.io/kueue/pkg/version) defaults to "v0.0.0"; stamp the release so its
    # logs and metrics say what runs.
    src = _wrapper(layout, pin)
    package = f"{pin.module}/cmd/kueue"
    _run(layout, pin, ["go", "mod", "edit", f"-require={pin.module}@{pin.version}", f"-tool={package}"], src)
    _run(layout, pin, ["go", "mod", "tidy"], src)
    out = _into(layout, pin)
    ldflags = f"-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion={pin.version}"
    _run(
        layout, pin, ["go", "build", "-trimpath", "-ldflags", ldflags, "-o", str(out / "kueue"), package], src
    )
    _publish(layout, pin, out)


BUILDERS = {
    "kubernetes": build_kubernetes,
    "etcd": build_etcd,
    "kwok": build_kwok,
    "mpi-operator": build_mpi_operator,
    "kueue": build_kueue,
}
