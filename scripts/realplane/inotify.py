"""How many log follows kwok can serve: the inotify instances of the user it runs as.

kwok answers ``kubectl logs --follow`` (and the product's follows) with k8s.io/cri-client's
``ReadLogs`` (kwok v0.8.0, pkg/kwok/server/debugging_logs.go), which takes one inotify instance
(``fsnotify.NewWatcher``) per follow once it has read to the end of the file (cri-client v0.36.3,
pkg/logs/logs.go). Linux counts those instances per user against ``fs.inotify.max_user_instances``
(128 by default), and every process of that user shares the count. On a real cluster each node runs its
own kubelet, so the limit bounds one node's follows; here one kwok process plays the kubelet of every
node, so the one limit bounds the follows of the whole cluster, and a benchmark's hundreds of follows
would fail at about 120. ``up`` raises it to :data:`WANTED` when it is lower and the process may write
it (root); otherwise it says so and starts the plane anyway.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SETTING = Path("/proc/sys/fs/inotify/max_user_instances")
# Enough for a 1,000-job benchmark's follows at the product's budget of 500 streams, with room for the
# plane's own watchers; a kernel default of 128 is below it.
WANTED = 1024


@dataclass(frozen=True)
class Outcome:
    """What ``ensure`` found and did: the value before, after, and a sentence for the output."""

    before: int | None
    after: int | None
    message: str


def target(current: int, wanted: int = WANTED) -> int | None:
    """The value to write, or None when the current one is already enough (never lowered)."""
    return wanted if current < wanted else None


def ensure(setting: Path = SETTING, wanted: int = WANTED) -> Outcome:
    """Raise the setting to ``wanted`` if it is lower; never fail: a plane still starts without it."""
    name = "fs.inotify.max_user_instances"
    try:
        current = int(setting.read_text().strip())
    except (OSError, ValueError) as exc:
        return Outcome(None, None, f"{name} cannot be read ({exc}); kwok's follows are bounded by it")
    new = target(current, wanted)
    if new is None:
        return Outcome(current, current, f"{name} is {current} (at least {wanted}): kwok's follows fit")
    try:
        setting.write_text(f"{new}\n")
    except OSError as exc:
        return Outcome(
            current,
            current,
            f"{name} is {current} and cannot be raised to {new} ({exc.strerror or exc}): kwok serves fewer"
            f" than {current} log follows at once (as root: sysctl -w {name}={new})",
        )
    return Outcome(
        current, new, f"{name} raised from {current} to {new}: kwok serves one follow per instance"
    )
