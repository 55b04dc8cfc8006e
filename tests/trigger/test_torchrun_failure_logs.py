"""A failed torchrun job's task log ends with every rank's last lines, once: the Job controller deletes
the surviving ranks' pods when one rank fails past the back-off limit, and the kubelet removes a deleted
pod's containers, their logs with them, as soon as they have stopped; the trigger reads each stopping
rank while it stops. The ranks run as real local processes (the simulator's exec mode), so the surviving
rank prints its last line on SIGTERM, as torchrun's agent does."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowFailException
from sim_fixtures import cluster_fixture
from task_doubles import StateStore

from airflow_jobs_plugin.cluster import kube

from .test_operator import _runs, context_for, deferral, operator, run_to_event

cluster = cluster_fixture(nodes=2, exec_commands=True)


# Rank 1 fails at once; rank 0 trains until the Job controller deletes its pod, then, as torchrun's agent
# stopping its workers, takes a moment to stop, saying so. The pod's grace period (300 s, 3 s at the
# simulator's time scale) is set, as a torchrun user sets it, well beyond that moment, so a busy machine
# never kills the rank before its last line: what is tested is that the trigger reads the stopping
# container before the kubelet removes it with its log, as soon as the rank has exited.
_RANKS_SCRIPT = (
    'if [ "$JOB_COMPLETION_INDEX" = 1 ]; then echo "rank 1: CUDA error, giving up"; sleep 1; exit 3; fi; '
    'trap \'echo "rank 0: SIGTERM at step $n"; sleep 0.25; echo "rank 0: stopped"; exit 143\' TERM; '
    'n=0; while :; do n=$((n+1)); echo "rank 0: step $n"; sleep 0.2; done'
)


def test_a_failed_torchrun_job_s_task_log_ends_with_every_rank_s_last_lines_once(
    cluster, capsys, monkeypatch
):
    # Every rank read in turn, none streamed: a busy triggerer has spent its stream budget on other jobs.
    monkeypatch.setattr(kube, "LOG_STREAM_CONNECTIONS", 0)
    op = operator(
        task_id="train_ddp_fails",
        framework="torchrun",
        workers=2,
        gpus=1,
        backoff_limit=0,
        max_attempts=1,
        command=["sh", "-c", _RANKS_SCRIPT],
        pod_template={"spec": {"terminationGracePeriodSeconds": 300}},
    )
    run_id = f"run-{next(_runs)}"
    deferred = deferral(op, context_for(op, run_id, 1, StateStore()))
    event = run_to_event(deferred)
    with pytest.raises(AirflowFailException):  # exit 3 is not retryable: the task fails
        op.execute_complete(context_for(op, run_id, 1, StateStore()), event)
    text = capsys.readouterr().out
    assert text.count("[node-1] rank 1: CUDA error, giving up") == 1
    # The surviving rank's pod was deleted by the Job controller: its last lines are still in the task
    # log, read while it stopped, each once.
    last = [line for line in text.splitlines() if "[node-0] rank 0: SIGTERM at step" in line]
    assert len(last) == 1, text
    assert text.count("[node-0] rank 0: stopped") == 1
    steps = [line.split("[node-0] ", 1)[1] for line in text.splitlines() if "[node-0] rank 0: step" in line]
    assert len(steps) == len(set(steps))
    assert steps and steps[-1].split()[-1] == last[0].split()[-1]
