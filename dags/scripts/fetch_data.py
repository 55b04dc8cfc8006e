"""Fetch the run's dataset before training: the init container of every replica of the training job.

On a real cluster this is where each pod stages its shards from the object store onto local disk
before ``mpirun`` starts; here it checks the manifest ``prepare.py`` wrote and stages each shard in
turn, so the launcher and the workers show ``Init:0/N`` and ``PodInitializing`` for a few seconds.
Standard library only. ``EXAMPLE_STEP_SECONDS`` paces the steps (default 1 s per shard).
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
    parser = argparse.ArgumentParser(description="stage the run's dataset for one replica")
    parser.add_argument("--run-dir", required=True, help="the run directory prepare.py wrote")
    args = parser.parse_args(argv)
    manifest_file = Path(args.run_dir) / "data.json"
    if not manifest_file.exists():
        print(f"fetch: {manifest_file} is missing: did prepare_data run for this run?", file=sys.stderr)
        return 1
    manifest = json.loads(manifest_file.read_text())
    shards = int(manifest["shards"])
    role, rank = os.environ.get("JOB_ROLE", "replica"), os.environ.get("JOB_RANK", "")
    # The launcher's JOB_RANK is -1 (it is no rank of the world): name it by its role alone.
    who = role if role == "launcher" or not rank else f"{role} {rank}"
    for shard in range(1, shards + 1):
        time.sleep(STEP_SECONDS)
        print(f"fetch: {who}: shard {shard}/{shards} staged", flush=True)
    print(f"fetch: {who}: {manifest['rows']} rows ready", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
