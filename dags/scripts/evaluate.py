"""Evaluate the candidate model of one run and write its metrics next to it.

Prints ``METRIC accuracy=<value>`` (visible in the task log) and writes ``metrics.json`` into the run
directory, which the pipeline's comparison step reads. Standard library only.
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
    args = parser.parse_args(argv)
    run_dir = Path(args.run_dir)
    model = json.loads((run_dir / "model.json").read_text())
    for split in ("validation", "holdout"):
        print(f"evaluate: scoring the {split} split", flush=True)
        time.sleep(STEP_SECONDS)
    metrics = {"accuracy": model["accuracy"]}
    (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
    print(f"METRIC accuracy={metrics['accuracy']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
