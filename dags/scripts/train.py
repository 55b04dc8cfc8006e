"""Distributed training step of the example pipeline, run by the MPI launcher.

In a real cluster the launcher's image has ``mpirun``: this script re-executes itself under
``mpirun -np <hosts x slots>`` (``$JOB_WORLD_SIZE`` hosts, ``--slots`` ranks on each: one per GPU, as the
MPI operator's hostfile says with ``slotsPerWorker``) and every rank trains its share on its own GPU. Where there is no ``mpirun`` (the
simulated cluster runs only the launcher as a local process) it plays all ranks in one process and tags
each rank's lines as ``mpirun --tag-output`` does (``[1,<rank>]<stdout>:``), so ``airflow-jobs logs JOB
--rank N`` finds them in the launcher's log either way. Rank 0 writes the model into the run directory.
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import sys
import time
from pathlib import Path

STEP_SECONDS = float(os.environ.get("EXAMPLE_STEP_SECONDS", "1.0"))


def _under_mpi() -> bool:
    return "OMPI_COMM_WORLD_RANK" in os.environ or "PMI_RANK" in os.environ


def _rank() -> int:
    return int(os.environ.get("OMPI_COMM_WORLD_RANK") or os.environ.get("PMI_RANK") or 0)


def accuracy_after(epochs: int, seed: int) -> float:
    """The candidate's accuracy: rises with the epochs, plus a little run-to-run noise."""
    noise = random.Random(seed).uniform(-0.03, 0.03)
    return round(0.80 + 0.14 * (1 - math.exp(-epochs / 4)) + noise, 4)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="train the candidate model")
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--slots", type=int, default=1, help="ranks per host: the GPUs of each worker")
    args = parser.parse_args(argv)
    hosts = int(os.environ.get("JOB_WORLD_SIZE", "1"))
    # Rank r runs on host r // slots (mpirun fills each host's slots in turn, as the hostfile lists them).
    world = hosts * max(1, args.slots)
    mpirun = shutil.which("mpirun")
    if os.environ.get("JOB_ROLE") == "launcher" and not _under_mpi() and mpirun:
        print(f"train: starting {world} ranks with mpirun ({hosts} hosts x {args.slots} slots)", flush=True)
        # --tag-output: every rank's line says whose it is, in the launcher's log that outlives the workers.
        command = [mpirun, "-np", str(world), "--tag-output", sys.executable, os.path.abspath(__file__)]
        os.execv(mpirun, [*command, *argv])
    ranks = [_rank()] if _under_mpi() else list(range(world))
    # Playing the ranks of an MPI launcher in one process: tag their lines as mpirun would.
    playing_ranks = not _under_mpi() and os.environ.get("JOB_ROLE") == "launcher"
    run_dir = Path(args.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    prepared = run_dir / "data.json"
    if prepared.exists():
        data = json.loads(prepared.read_text())
    else:
        data = {"rows": 10000, "seed": 0}
        print("train: no prepared data in the run directory: using a synthetic dataset", flush=True)
    print(
        f"train: {data['rows']} rows over {world} rank(s) on {hosts} host(s), {args.epochs} epochs",
        flush=True,
    )
    for epoch in range(1, args.epochs + 1):
        acc = accuracy_after(epoch, data["seed"])
        loss = round(1.2 * math.exp(-epoch / 3) + 0.05, 4)
        for rank in ranks:
            tag = f"[1,{rank}]<stdout>:" if playing_ranks else ""
            print(f"{tag}train: rank {rank}: epoch {epoch}/{args.epochs} loss={loss} acc={acc}", flush=True)
        print(f"train: epoch {epoch}: gradients all-reduced across {world} rank(s)", flush=True)
        time.sleep(STEP_SECONDS)
    if 0 in ranks:
        model = {"epochs": args.epochs, "accuracy": accuracy_after(args.epochs, data["seed"])}
        (run_dir / "model.json").write_text(json.dumps(model, indent=2))
        print(f"train: rank 0 saved {run_dir / 'model.json'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
