"""What a container's local process sees of its pod in exec mode, besides DNS (``sim.dns``).

Without root there is no mount namespace and no PID namespace, so two things a container relies on are
approximated, and said so in docs/simulator.md:

- ``emptyDir`` volumes are directories of the pod's own; their ``mountPath`` written in a container's
  command line (or in an exec'd command) is rewritten to that directory. A path computed at run time
  (from a variable, in a script file) is not rewritten.
- ``terminationMessagePath`` (``/dev/termination-log`` by default) is a file of the container's own under
  the pod's directory, and the path written in its command line is rewritten to it, like an ``emptyDir``
  mount path; the kubelet reads it when the process ends.
- ``pgrep`` sees only the processes of the container (its session, and the commands exec'd into it,
  which carry the session in their environment): the cncf provider stops its XCom sidecar with
  ``kill -2 $(pgrep -u $(id -u) -f 'sh')`` (``utils/pod_manager.py`` ``extract_xcom_kill``), which on a
  shared machine would otherwise reach every ``sh`` of the user, and which in a real container also
  stops the exec'd shell itself, ending the exec session the operator waits on.
"""

from __future__ import annotations

import os
import signal
import stat
import sys
from dataclasses import dataclass

SESSION_ENV = "SIM_CONTAINER_SESSION"


@dataclass(frozen=True)
class Mount:
    path: str  # the mountPath inside the container
    local: str  # the directory on this machine


def empty_dir_mounts(pod: dict, container: dict, pod_dir: str) -> tuple[Mount, ...]:
    """The container's mounts of the pod's ``emptyDir`` volumes, each a directory under ``pod_dir``."""
    empty = {v.get("name") for v in (pod.get("spec") or {}).get("volumes") or () if "emptyDir" in v}
    return tuple(
        Mount(m["mountPath"].rstrip("/") or "/", os.path.join(pod_dir, "volumes", m["name"]))
        for m in container.get("volumeMounts") or ()
        if m.get("name") in empty and m.get("mountPath")
    )


DEFAULT_TERMINATION_MESSAGE_PATH = "/dev/termination-log"


def termination_mount(container: dict, pod_dir: str, attempt: int) -> Mount:
    """Where this run of the container writes its termination message on this machine: one file per
    restart, so a message left by an earlier run is never read as this one's (the kubelet gives every
    container it creates a fresh file, ``makeMounts`` in ``pkg/kubelet/kuberuntime/kuberuntime_container.go``)."""
    path = container.get("terminationMessagePath") or DEFAULT_TERMINATION_MESSAGE_PATH
    name = container.get("name") or "container"
    return Mount(path, os.path.join(pod_dir, "termination", f"{name}-{attempt}"))


def rewrite(argv: tuple[str, ...] | list[str], mounts: tuple[Mount, ...]) -> tuple[str, ...]:
    """``argv`` with every mount path (longest first) replaced by its local directory."""
    ordered = sorted(mounts, key=lambda m: len(m.path), reverse=True)
    out = []
    for arg in argv:
        for m in ordered:
            arg = arg.replace(m.path, m.local)
        out.append(arg)
    return tuple(out)


# Signals a shell started in the background (``cmd &`` without job control, ``nohup``) ignores, and
# passes on to every child. A container's process does not inherit them from whoever started the
# kubelet, and POSIX forbids a non-interactive shell to trap a signal ignored on entry: the cncf XCom
# sidecar's ``trap "exit 0" INT`` would never fire and its pod would never end.
_INHERITED = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT)
_RESET_AND_EXEC = (
    "import os, signal, sys\n"
    "for s in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT): signal.signal(s, signal.SIG_DFL)\n"
    "os.execvp(sys.argv[1], sys.argv[1:])"
)


def with_default_signals(argv: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """``argv``, started through a reset of the signals this process ignores, if it ignores any.

    Dispositions set to default survive ``exec``; the reset costs an interpreter start, so it is paid
    only when this process was itself started ignoring a signal."""
    if argv and any(signal.getsignal(s) == signal.SIG_IGN for s in _INHERITED):
        return (sys.executable, "-c", _RESET_AND_EXEC, *argv)
    return tuple(argv)


_PGREP = '''#!{python}
"""pgrep for a simulated container: only the processes of the container's session (${session})."""
import os, re, sys

args, pattern, full, uid = sys.argv[1:], None, False, None
i = 0
while i < len(args):
    a = args[i]
    if a == "-f":
        full = True
    elif a == "-u":
        i += 1
        uid = args[i]
    elif a.startswith("-u"):
        uid = a[2:]
    elif a.startswith("-"):
        pass
    else:
        pattern = a
    i += 1
session = os.environ.get("{session}")
if pattern is None or session is None:
    sys.exit(2)
marker = ("{session}=" + session).encode()
found = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    if int(pid) == os.getpid():
        continue
    try:
        with open(f"/proc/{{pid}}/stat") as f:
            stat = f.read()
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[3] != session:
            # An exec'd process is the container's too, as in its PID namespace: it carries the session.
            with open(f"/proc/{{pid}}/environ", "rb") as f:
                if marker not in f.read().split(b"\\0"):
                    continue
        if uid is not None and str(os.stat(f"/proc/{{pid}}").st_uid) != uid:
            continue
        if full:
            with open(f"/proc/{{pid}}/cmdline", "rb") as f:
                text = f.read().replace(b"\\0", b" ").decode(errors="replace").strip()
        else:
            text = stat[stat.index("(") + 1 : stat.rindex(")")]
    except (OSError, ValueError, IndexError):
        continue
    if re.search(pattern, text):
        found.append(pid)
print("\\n".join(found)) if found else None
sys.exit(0 if found else 1)
'''


def write_pgrep(directory: str) -> None:
    """Write the session-scoped ``pgrep`` into ``directory``."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "pgrep")
    with open(path, "w") as f:
        f.write(_PGREP.format(python=sys.executable, session=SESSION_ENV))
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
