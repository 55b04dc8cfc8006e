"""Keep one plane component running, as its Deployment (or the kubelet, for a static pod) would.

Upstream controllers exit on purpose when they lose their leader lease (an API server outage longer than
the lease: the MPI operator's and Kueue's ``Leader election stopped``), and a cluster restarts them. A
plane without that restart leaves a cancelled job's GPUs reserved until someone notices. So a component
runs under this loop: when it exits it is started again after a back-off that doubles from 1 s to 30 s
(the kubelet's CrashLoopBackOff shape, shorter) and resets once a run has lasted a minute; each restart
is counted in ``--record`` (JSON), which ``scripts/cluster status`` reads.

A first run that ends within ``--settle`` seconds is not restarted: the component cannot start at all
(a bad flag, a port taken), and ``scripts/cluster up`` should fail naming it, as it did before.

Usage: python supervise.py --name NAME --record FILE [--settle S] -- COMMAND...
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

BACKOFF_START = 1.0
BACKOFF_CAP = 30.0
STEADY_RUN = 60.0


def next_backoff(current: float, ran_for: float) -> float:
    """The wait before the next start: back to the start after a steady run, else doubled, capped."""
    if ran_for >= STEADY_RUN:
        return BACKOFF_START
    return min(BACKOFF_CAP, current * 2)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", required=True)
    parser.add_argument("--record", required=True, type=Path)
    parser.add_argument("--settle", type=float, default=10.0)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    stopping = False
    child: subprocess.Popen | None = None

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    restarts = 0
    backoff = BACKOFF_START
    first = True
    while True:
        started = time.monotonic()
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL)
        code = child.wait()
        ran_for = time.monotonic() - started
        if stopping:
            return code
        if first and ran_for < args.settle:
            print(
                f"supervise: {args.name} exited with code {code} {ran_for:.1f} s after its start", flush=True
            )
            return code or 1
        first = False
        backoff = next_backoff(backoff, ran_for) if restarts else BACKOFF_START
        restarts += 1
        record = {"restarts": restarts, "last_exit_code": code, "last_exit_at": time.time()}
        args.record.write_text(json.dumps(record))
        print(
            f"supervise: {args.name} exited with code {code} after {ran_for:.0f} s; "
            f"restart {restarts} in {backoff:g} s",
            flush=True,
        )
        deadline = time.monotonic() + backoff
        while time.monotonic() < deadline and not stopping:
            time.sleep(0.1)
        if stopping:
            return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
