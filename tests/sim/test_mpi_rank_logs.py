"""`airflow-jobs logs JOB --rank N` on a finished MPI job, through the CLI on the simulated cluster.

When the launcher ends, the MPI operator's cleanPodPolicy Running deletes the workers still running
(their sshd never exits), which gives their GPUs back at once; the ranks' output lives on in the
launcher's log, where mpirun gathered it, until the job's TTL.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from airflow_jobs_sim.cluster import SimCluster
from airflow_jobs_sim.config import ClusterConfig
from airflow_jobs_sim.scenarios import ANNOTATION
from sim_waiting import wait_for

from airflow_jobs_plugin.airflow import cli
from airflow_jobs_plugin.jobs.manifests import build_manifest
from airflow_jobs_plugin.jobs.spec import TaskIdentity, validate

TAGGED = [
    "train: starting 2 ranks",
    "[1,0]<stdout>:rank 0 epoch 1",
    "[1,1]<stdout>:rank 1 epoch 1",
    "[1,1]<stderr>:rank 1 done",
]


@pytest.fixture(scope="module")
def cluster():
    with SimCluster(ClusterConfig(nodes=2, gpus_per_node=8, time_scale=0.02)) as c:
        yield c


def finished_mpijob(cluster, run: str, launcher_logs: list[str], gpus: int = 1) -> str:
    identity = TaskIdentity("nightly", "train", run, -1, 1)
    spec = validate(
        image="registry.example/trainer:1",
        group="vision",
        user="alice",
        gpus=gpus,
        workers=2,
        ttl_after_finished=None,
        annotations={ANNOTATION: json.dumps({"main": {"run": 2, "logs": launcher_logs}})},
    )
    body = build_manifest(
        spec, name=identity.job_name(1), task=identity, attempt=1, queued_at=datetime.now(timezone.utc)
    )
    # The workers keep the default MPI worker scenario: they run until deleted, as sshd does.
    body["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"].pop(ANNOTATION)
    name = body["metadata"]["name"]
    cluster.store.create("mpijobs", body, namespace="default")
    cluster.store.patch(
        "mpijobs", name, {"spec": {"runPolicy": {"suspend": False}}}, "merge", namespace="default"
    )

    def succeeded() -> bool:
        conditions = (cluster.store.get("mpijobs", name, "default").get("status") or {}).get(
            "conditions"
        ) or []
        return any(c["type"] == "Succeeded" and c["status"] == "True" for c in conditions)

    wait_for(succeeded, timeout=30)
    wait_for(
        lambda: (
            not any(
                p["metadata"]["name"].startswith(f"{name}-worker-")
                for p in cluster.store.list("pods", namespace="default")
            )
        ),
        timeout=30,
    )
    return name


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_finished_mpi_jobs_rank_is_read_from_the_launchers_log_once_its_worker_is_gone(cluster, capsys):
    name = finished_mpijob(cluster, "scheduled__2026-02-01", TAGGED)
    code, out, err = run(capsys, "logs", name, "--rank", "1", "--kubeconfig", cluster.kubeconfig_path)
    assert code == 0, err
    assert out.splitlines() == ["rank 1 epoch 1", "rank 1 done"]
    assert "worker 1's pod was deleted when the job ended" in err
    code, out, _ = run(capsys, "logs", name, "--rank", "0", "--json", "--kubeconfig", cluster.kubeconfig_path)
    data = json.loads(out)
    assert (code, data["source"], data["rank"], data["lines"]) == (0, "launcher", 0, ["rank 0 epoch 1"])
    # The launcher itself is never cleaned: its whole log is there too.
    code, out, _ = run(capsys, "logs", name, "--rank", "-1", "--kubeconfig", cluster.kubeconfig_path)
    assert code == 0 and out.splitlines()[-1] == "[1,1]<stderr>:rank 1 done"


def test_an_untagged_launcher_log_says_how_to_make_ranks_findable(cluster, capsys):
    name = finished_mpijob(cluster, "scheduled__2026-02-02", ["rank 1 epoch 1"])
    code, _, err = run(capsys, "logs", name, "--rank", "1", "--kubeconfig", cluster.kubeconfig_path)
    assert code != 0
    assert "--tag-output" in err and "cleanPodPolicy" in err


# Two workers of two GPUs: mpirun runs ranks 0-1 on worker 0 and ranks 2-3 on worker 1.
TWO_PER_WORKER = [
    "train: starting 4 ranks",
    "[1,0]<stdout>:rank 0 epoch 1",
    "[1,2]<stdout>:rank 2 epoch 1",
    "[1,1]<stdout>:rank 1 epoch 1",
    "[1,3]<stderr>:rank 3 done",
]


def test_rank_n_is_worker_n_on_a_finished_job_too_its_mpi_ranks_read_from_the_launchers_log(cluster, capsys):
    name = finished_mpijob(cluster, "scheduled__2026-02-03", TWO_PER_WORKER, gpus=2)
    code, out, err = run(capsys, "logs", name, "--rank", "1", "--kubeconfig", cluster.kubeconfig_path)
    assert code == 0, err
    assert out.splitlines() == ["[rank 2] rank 2 epoch 1", "[rank 3] rank 3 done"]
    assert "the lines of its MPI ranks 2-3" in err
    code, out, _ = run(capsys, "logs", name, "--rank", "0", "--json", "--kubeconfig", cluster.kubeconfig_path)
    data = json.loads(out)
    assert (data["rank"], data["mpi_ranks"]) == (0, [0, 1])
    assert data["lines"] == ["[rank 0] rank 0 epoch 1", "[rank 1] rank 1 epoch 1"]
