"""One MPI rank's lines out of the launcher's log: where a rank's output lives once the job has ended.

Pure. Why the launcher's log: ranks run as processes ``mpirun`` starts over ssh on the workers, and
their stdout and stderr travel back to ``mpirun``, so they land in the *launcher's* log; a worker
pod's own log is its ``sshd``'s. The MPI operator never deletes the launcher (``cleanPodPolicy`` acts
on workers only: kubeflow/mpi-operator ``pkg/controller/mpi_job_controller.go`` ``deleteWorkerPods``,
v0.5.0 to v0.8.0), so the launcher's log stays readable until the MPIJob's TTL, while ``Running``
deletes the workers (and their ``sshd``, which never exits) the moment the launcher ends, which is
what gives their GPUs back at once even if no Airflow component is running.

``mpirun`` tells the ranks' lines apart when asked to:

* Open MPI ``--tag-output``: ``[1,3]<stdout>:text`` (job id, rank, stream);
* Intel MPI and MPICH (Hydra) ``-prepend-rank``: ``[3] text``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# Open MPI first: its tag also starts with '[', and "[1,3]" must not read as Hydra's "[1".
_OPEN_MPI = re.compile(r"^\[\d+,(?P<rank>\d+)\]<(?:stdout|stderr|stddiag)>:(?P<text>.*)$")
_HYDRA = re.compile(r"^\[(?P<rank>\d+)\] (?P<text>.*)$")


def rank_of(line: str) -> tuple[int, str] | None:
    """(rank, text) of a line ``mpirun`` tagged, or None for an untagged line."""
    for pattern in (_OPEN_MPI, _HYDRA):
        match = pattern.match(line)
        if match:
            return int(match["rank"]), match["text"]
    return None


def rank_lines(lines: Iterable[str], rank: int) -> list[str] | None:
    """The lines of ``rank`` (tags removed), or None when no line of the log carries a rank tag.

    None and ``[]`` differ on purpose: None means "this launcher did not tag its output, ask for
    --tag-output", ``[]`` means "the rank printed nothing".
    """
    return _lines_of(lines, range(rank, rank + 1))


def worker_ranks(worker: int, slots_per_worker: int) -> range:
    """The MPI ranks that ran on worker ``worker``: the MPI operator's hostfile lists each worker with
    ``slots=<slotsPerWorker>`` in worker order (kubeflow/mpi-operator v0.8.0
    pkg/controller/mpi_job_controller.go, ``newConfigMap``), and mpirun fills a host's slots before the
    next host's (Open MPI's default ``--map-by slot``; Hydra's default placement by the host list), so
    worker N runs ranks N*slots to N*slots+slots-1."""
    slots = max(slots_per_worker, 1)
    return range(worker * slots, (worker + 1) * slots)


def worker_lines(lines: Iterable[str], worker: int, slots_per_worker: int) -> list[str] | None:
    """The lines of every MPI rank that ran on worker ``worker``, in the log's order (tags removed; each
    line starts ``[rank R] `` when the worker ran more than one rank), or None when no line of the log
    carries a rank tag (see :func:`rank_lines`)."""
    return _lines_of(lines, worker_ranks(worker, slots_per_worker))


def _lines_of(lines: Iterable[str], ranks: range) -> list[str] | None:
    """The lines of ``ranks`` in the log's order, tags removed (``[rank R] `` kept apart when there are
    several), or None when no line carries a rank tag."""
    tagged = False
    out: list[str] = []
    for line in lines:
        found = rank_of(line)
        if found is None:
            continue
        tagged = True
        rank, text = found
        if rank in ranks:
            out.append(f"[rank {rank}] {text}" if len(ranks) > 1 else text)
    return out if tagged else None
