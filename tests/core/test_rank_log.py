"""A rank's lines out of the MPI launcher's log, as `airflow-jobs logs JOB --rank N` serves them once
the operator's cleanPodPolicy has deleted the worker pods."""

from __future__ import annotations

import pytest

from airflow_jobs_plugin.logs.rank_log import rank_lines, rank_of

LAUNCHER_LOG = [
    "train: starting 2 ranks with mpirun",
    "[1,0]<stdout>:train: rank 0: epoch 1/2 loss=0.9",
    "[1,1]<stdout>:train: rank 1: epoch 1/2 loss=0.9",
    "[1,1]<stderr>:warning: slow shard",
    "[1,0]<stdout>:train: rank 0: epoch 2/2 loss=0.5",
    "[1,1]<stdout>:train: rank 1: epoch 2/2 loss=0.5",
]


def test_open_mpi_tag_output_gives_each_rank_its_stdout_and_stderr():
    assert rank_lines(LAUNCHER_LOG, 1) == [
        "train: rank 1: epoch 1/2 loss=0.9",
        "warning: slow shard",
        "train: rank 1: epoch 2/2 loss=0.5",
    ]


def test_hydra_prepend_rank_of_intel_mpi_and_mpich_is_understood():
    assert rank_lines(["[0] hello", "[12] step 3", "[1,2] not a hydra tag"], 12) == ["step 3"]


def test_a_rank_that_printed_nothing_is_an_empty_list_not_an_untagged_log():
    assert rank_lines(LAUNCHER_LOG, 5) == []
    assert rank_lines(["train: rank 1: epoch 1/2"], 1) is None


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("[1,3]<stdout>:x", (3, "x")),
        ("[1,3]<stderr>:", (3, "")),
        ("[7] y z", (7, "y z")),
        ("[launcher] no", None),
        ("plain", None),
    ],
)
def test_rank_of_reads_the_tags_mpirun_writes(line, expected):
    assert rank_of(line) == expected


def test_worker_n_ran_the_mpi_ranks_of_its_slots():
    from airflow_jobs_plugin.logs.rank_log import worker_lines, worker_ranks

    assert list(worker_ranks(1, 1)) == [1]
    assert list(worker_ranks(1, 4)) == [4, 5, 6, 7]
    log = ["[1,0]<stdout>:a", "[1,3]<stdout>:b", "[1,2]<stderr>:c", "untagged"]
    assert worker_lines(log, 1, 2) == ["[rank 3] b", "[rank 2] c"]
    assert worker_lines(log, 0, 1) == ["a"]
    assert worker_lines(["untagged"], 0, 2) is None
