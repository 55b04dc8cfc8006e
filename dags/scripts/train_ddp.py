"""PyTorch distributed data-parallel training, one process per GPU on every node, started by torchrun.

The job's pods are the nodes of an Indexed Job: each finds its settings in the environment the
JobOperator gives it (``PET_NNODES``, ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK``, ``PET_MASTER_ADDR``,
``PET_MASTER_PORT``), which ``torchrun`` reads in place of its flags. Where ``torchrun`` is installed this
script re-executes itself under it, and torchrun starts one process per GPU with ``RANK``,
``LOCAL_RANK`` and ``WORLD_SIZE`` set. Where it is not (the simulated cluster runs each node as one local
process), the node plays its local ranks in one process and tags each rank's lines
(``[rank 5]``). Node 0 resolves nothing; the other nodes first resolve node 0's name, as the rendezvous
does. Global rank 0 writes the run's metrics with ``--result``: the container's termination message,
which the task returns as its XCom ``result``. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

STEP_SECONDS = float(os.environ.get("EXAMPLE_STEP_SECONDS", "1.0"))


def _resolve(host: str) -> str:
    """The address of ``host`` as the cluster's DNS answers it (``getent`` follows the pod's resolver)."""
    try:
        out = subprocess.run(["getent", "hosts", host], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.split()[0] if out.split() else ""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="data-parallel training under torchrun")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--result", help="where global rank 0 writes the run's metrics")
    args = parser.parse_args(argv)
    nnodes = int(os.environ.get("PET_NNODES", "1"))
    nproc = int(os.environ.get("PET_NPROC_PER_NODE", "1"))
    node = int(os.environ.get("PET_NODE_RANK", "0"))
    master = f"{os.environ.get('PET_MASTER_ADDR', 'localhost')}:{os.environ.get('PET_MASTER_PORT', '29500')}"
    torchrun = shutil.which("torchrun")
    if torchrun and "LOCAL_RANK" not in os.environ:
        print(
            f"train_ddp: node {node}/{nnodes}: torchrun starts {nproc} processes, rendezvous {master}",
            flush=True,
        )
        os.execv(torchrun, [torchrun, os.path.abspath(__file__), *argv])
    if "LOCAL_RANK" in os.environ:
        ranks = [int(os.environ["RANK"])]
        world = int(os.environ["WORLD_SIZE"])
    else:
        ranks = [node * nproc + local for local in range(nproc)]
        world = nnodes * nproc
    if node != 0:
        address = _resolve(os.environ.get("PET_MASTER_ADDR", "localhost"))
        print(f"train_ddp: node {node}: rendezvous at {master} ({address or 'not resolved yet'})", flush=True)
    print(f"train_ddp: node {node}/{nnodes}: ranks {ranks[0]}..{ranks[-1]} of {world}", flush=True)
    loss = 0.0
    for epoch in range(1, args.epochs + 1):
        loss = round(2.0 * math.exp(-epoch / 2) + 0.1, 4)
        for rank in ranks:
            print(f"[rank {rank}] epoch {epoch}/{args.epochs} loss={loss}", flush=True)
        time.sleep(STEP_SECONDS)
    if 0 in ranks and args.result:
        metrics = {"loss": loss, "epochs": args.epochs, "world_size": world}
        # Kubernetes keeps at most 4096 bytes of a termination message: a few numbers, not a report.
        Path(args.result).write_text(json.dumps(metrics))
        print(f"train_ddp: rank 0 wrote the metrics {metrics}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
