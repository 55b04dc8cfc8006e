"""A training step that fails its first runs on purpose, for the failure and retry example.

Counts its runs in a state file: the first ``--fail-times`` runs exit with ``--exit-code``, later runs
train for ``--steps`` steps and succeed. Standard library only.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

STEP_SECONDS = float(os.environ.get("EXAMPLE_STEP_SECONDS", "1.0"))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="fail the first runs, then succeed")
    parser.add_argument("--state", required=True, help="file counting the runs")
    parser.add_argument("--fail-times", type=int, default=1)
    parser.add_argument("--exit-code", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args(argv)
    state = Path(args.state)
    state.parent.mkdir(parents=True, exist_ok=True)
    run = int(state.read_text() or "0") + 1 if state.exists() else 1
    state.write_text(str(run))
    attempt = os.environ.get("JOB_ATTEMPT", "?")
    print(f"flaky: run {run} (job attempt {attempt})", flush=True)
    time.sleep(STEP_SECONDS)
    if run <= args.fail_times:
        print(f"flaky: failing on purpose with exit code {args.exit_code}", file=sys.stderr, flush=True)
        return args.exit_code
    for step in range(1, args.steps + 1):
        print(f"flaky: step {step}/{args.steps}", flush=True)
        time.sleep(STEP_SECONDS)
    print("flaky: done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
