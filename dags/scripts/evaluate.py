"""Evaluate the candidate model of one run and write its metrics next to it.

Prints ``METRIC accuracy=<value>`` (visible in the task log), writes ``metrics.json`` into the run
directory (promotion copies it next to the production model) and, with ``--result``, writes the same
metrics to that file: the container's termination message (``/dev/termination-log``), which the task
returns as its XCom ``result`` for the comparison step. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

STEP_SECONDS = float(os.environ.get("EXAMPLE_STEP_SECONDS", "1.0"))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="evaluate the candidate model")
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--result", help="where to write the metrics as the job's result")
    args = parser.parse_args(argv)
    run_dir = Path(args.run_dir)
    model = json.loads((run_dir / "model.json").read_text())
    for split in ("validation", "holdout"):
        print(f"evaluate: scoring the {split} split", flush=True)
        time.sleep(STEP_SECONDS)
    metrics = {"accuracy": model["accuracy"]}
    (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
    print(f"METRIC accuracy={metrics['accuracy']}", flush=True)
    if args.result:
        # Kubernetes keeps at most 4096 bytes of a termination message: a few numbers, not a report.
        Path(args.result).write_text(json.dumps(metrics))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
