"""``airflow-jobs status|describe|logs|cancel|stop|resume`` against a simulated cluster, as tables and as JSON."""

from __future__ import annotations

import json
import time

from airflow_jobs_plugin.airflow import cli
from airflow_jobs_plugin.plugin.app import create_app
from tests.ui.json_api import display_values, validate

# What the JSON routes answer (readmodel/schema.py): --json prints the same documents.
SPEC = create_app().openapi()


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_status_prints_pools_queues_and_jobs_as_tables(population, capsys):
    code, out, _ = run(capsys, "status", "--kubeconfig", population.kubeconfig)
    assert code == 0
    pools, rest = out.split("QUEUES")
    queues, jobs = rest.split("JOBS")
    assert pools.splitlines()[1].split() == [
        "GROUP",
        "USER",
        "DEVICE",
        "QUOTA",
        "USED",
        "FREE",
        "QUEUED",
        "QUEUED",
        "GPUS",
    ]
    assert any(
        line.split()[:5] == ["vision", "<none>", "nvidia.com/gpu", "4", "2"] for line in pools.splitlines()
    )
    waiting = next(line for line in queues.splitlines() if population.names["waiting"] in line)
    assert waiting.split()[:3] == ["vision", "1", f"default/{population.names['waiting']}"]
    assert "GroupQuota" in waiting
    states = {line.split()[0]: line.split()[1] for line in jobs.splitlines()[2:] if line.strip()}
    assert states[population.names["runner"]] == "RUNNING"
    assert states[population.names["done"]] == "SUCCEEDED"
    assert states[population.names["broken"]] == "FAILED"
    assert states[population.names["waiting"]] == "QUEUED"


def test_status_json_has_the_same_data(population, capsys):
    code, out, _ = run(capsys, "status", "--kubeconfig", population.kubeconfig, "--json")
    assert code == 0
    data = json.loads(out)
    by_name = {j["name"]: j for j in data["jobs"]}
    waiting = by_name[population.names["waiting"]]
    assert (waiting["state"], waiting["reason"], waiting["queue_position"]) == ("QUEUED", "GroupQuota", 1)
    assert by_name[population.names["mpi"]]["kind"] == "MPIJob"
    assert by_name[population.names["mpi"]]["gpus"] == 4
    pools = {p["group"]: p for p in data["pools"]}
    assert (pools["vision"]["quota"], pools["vision"]["queued_jobs"], pools["vision"]["queued_gpus"]) == (
        4,
        1,
        4,
    )
    assert [e["name"] for q in data["queues"] for e in q["entries"]] == [population.names["waiting"]]
    # The charts need every job's admission and end, which status does not read (the page draws them).
    assert data["charts"] == []
    validate(SPEC, "GET", "/api/overview", data)
    assert display_values(data) == []


def test_describe_shows_replicas_timeline_events_and_log_tails(population, capsys):
    name = population.names["mpi"]
    code, out, _ = run(capsys, "describe", name, "--kubeconfig", population.kubeconfig)
    assert code == 0
    assert f"Name:           {name}" in out
    assert "State:          RUNNING" in out
    replicas = out.split("Replicas:")[1].split("Events:")[0]
    rows = [line.split() for line in replicas.splitlines()[2:] if line.strip()]
    assert [(r[0], r[1], r[4]) for r in rows] == [
        ("launcher", "-1", "Running"),
        ("worker-0", "0", "Running"),
        ("worker-1", "1", "Running"),
    ]
    assert "MPIJobCreated" in out.split("Events:")[1]
    assert "Log of launcher (rank -1" in out and "mpirun started" in out


def test_describe_json(population, capsys):
    code, out, _ = run(
        capsys, "describe", population.names["broken"], "--kubeconfig", population.kubeconfig, "--json"
    )
    assert code == 0
    data = json.loads(out)
    assert (data["job"]["state"], data["snapshot"]["exit_code"]) == ("FAILED", 3)
    assert [t["label"] for t in data["timeline"]][:2] == ["QUEUED", "ADMITTED"]
    assert data["timeline"][-1]["label"] == "FAILED"
    assert data["logs"][0]["lines"][-1] == "boom: bad shard"
    assert data["actions"] == []
    validate(SPEC, "GET", "/api/jobs/{namespace}/{name}", data)
    assert display_values(data) == []


def test_nodes_json_is_the_node_routes_json(population, capsys):
    code, out, _ = run(capsys, "nodes", "--kubeconfig", population.kubeconfig, "--json")
    assert code == 0
    data = json.loads(out)
    validate(SPEC, "GET", "/api/nodes", data)
    assert data["gpus"] == 16 and display_values(data) == []


def test_logs_of_a_single_pod_job(population, capsys):
    code, out, _ = run(capsys, "logs", population.names["broken"], "--kubeconfig", population.kubeconfig)
    assert code == 0
    assert out.splitlines()[-2:] == ["loading data", "boom: bad shard"]


def test_logs_by_rank_and_as_json(population, capsys):
    code, out, _ = run(
        capsys,
        "logs",
        population.names["mpi"],
        "--rank",
        "1",
        "--json",
        "--kubeconfig",
        population.kubeconfig,
    )
    assert code == 0
    data = json.loads(out)
    assert (data["replica"], data["rank"]) == ("worker-1", 1)
    assert data["pod"].endswith("-worker-1")
    assert "step 1" in data["lines"]


def test_logs_follow_prints_until_the_container_ends(population, capsys):
    code, out, _ = run(
        capsys,
        "logs",
        population.names["broken"],
        "--follow",
        "--json",
        "--kubeconfig",
        population.kubeconfig,
    )
    assert code == 0
    lines = [json.loads(line)["line"] for line in out.splitlines()]
    assert lines[-2:] == ["loading data", "boom: bad shard"]


def test_logs_of_a_rank_the_job_does_not_have(population, capsys):
    code, _, err = run(
        capsys, "logs", population.names["broken"], "--rank", "5", "--kubeconfig", population.kubeconfig
    )
    assert code == 1
    assert "has no rank 5 (ranks: 0)" in err


def test_logs_of_an_mpi_rank_the_job_does_not_have_says_so_and_fails(population, capsys):
    """Rank 7 of a job of two workers: not a deleted worker whose lines the launcher's log holds."""
    name = population.names["mpi"]
    code, out, err = run(capsys, "logs", name, "--rank", "7", "--kubeconfig", population.kubeconfig)
    assert code == 1 and out == ""
    assert f"job {name} has no rank 7 (ranks: -1, 0, 1)" in err


def test_logs_follow_honours_tail(population, capsys):
    code, out, _ = run(
        capsys,
        "logs",
        population.names["broken"],
        "--follow",
        "--tail",
        "1",
        "--kubeconfig",
        population.kubeconfig,
    )
    assert code == 0
    assert out.splitlines() == ["boom: bad shard"]


def test_unknown_job(population, capsys):
    code, _, err = run(capsys, "describe", "no-such-job", "--kubeconfig", population.kubeconfig)
    assert code == 1
    assert err.strip() == "error: no GPU job default/no-such-job"


def test_cancel_ends_the_job_and_status_lists_it_cancelled(population, capsys):
    name = population.names["victim"]
    code, out, _ = run(capsys, "cancel", name, "--by", "ops-alice", "--kubeconfig", population.kubeconfig)
    assert code == 0
    assert out.strip() == (
        f"job/{name} cancelled: its pods are stopped and it stays listed as cancelled until it is deleted"
    )

    def listed() -> dict:
        code, out, _ = run(capsys, "status", "--json", "--kubeconfig", population.kubeconfig)
        assert code == 0
        return {j["name"]: j for j in json.loads(out)["jobs"]}[name]

    deadline = time.monotonic() + 30
    while listed()["state"] != "CANCELLED":  # TERMINATING while the Job controller deletes its pod
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert listed()["reason"] == "Cancelled"
    assert "ops-alice" in listed()["message"]
    population.admit()  # the admitting triggerer's pass, woken by the job's change
    code, out, _ = run(capsys, "status", "--json", "--kubeconfig", population.kubeconfig)
    pools = {p["group"]: p for p in json.loads(out)["pools"]}
    assert "erin" not in {u["user"] for u in pools["nlp"]["users"]}  # its GPUs went back to the pool


def test_cancel_json_of_a_finished_job_leaves_it_alone(population, capsys):
    code, out, _ = run(
        capsys, "cancel", population.names["done"], "--json", "--kubeconfig", population.kubeconfig
    )
    assert code == 0
    assert json.loads(out) == {
        "already_finished": True,
        "deleted": False,
        "ended": False,
        "kind": "Job",
        "message": f"job/{population.names['done']} already finished: nothing to cancel",
        "name": population.names["done"],
        "namespace": "default",
    }


def test_stop_then_resume_from_the_command_line(population, capsys):
    name, kube = population.names["halted"], population.kubeconfig
    code, out, _ = run(capsys, "stop", name, "--by", "ops-ivan", "--kubeconfig", kube)
    assert code == 0
    assert out.strip() == (
        f"job/{name} stopped: its pods are deleted and its GPUs released; resume puts it back in its queue"
    )

    def state() -> tuple[str, str]:
        _, described, _ = run(capsys, "describe", name, "--json", "--tail", "0", "--kubeconfig", kube)
        data = json.loads(described)
        return data["job"]["state"], data["job"]["message"]

    deadline = time.monotonic() + 30
    while state()[0] != "STOPPED":  # TERMINATING (Stopped) while its pod stops
        assert time.monotonic() < deadline, state()
        time.sleep(0.1)
    assert state()[1].startswith("stopped by ops-ivan at ")
    population.admit()  # the admitting triggerer's pass, woken by the pod's end
    _, status, _ = run(capsys, "status", "--json", "--kubeconfig", kube)
    assert "ivan" not in {u["user"] for p in json.loads(status)["pools"] for u in p["users"] if u["gpus"]}

    code, out, _ = run(capsys, "stop", name, "--kubeconfig", kube)
    assert code == 0
    assert out.strip().startswith(f"job/{name} is already stopped by ops-ivan at ")

    code, out, _ = run(capsys, "resume", name, "--json", "--kubeconfig", kube)
    assert code == 0
    resumed = json.loads(out)
    assert (resumed["action"], resumed["done"]) == ("resume", True)
    assert resumed["message"].startswith(
        f"job/{name} resumed: back in group nlp's queue at its original position"
    )
    assert state()[0] == "QUEUED"

    code, out, _ = run(capsys, "resume", name, "--kubeconfig", kube)
    assert out.strip() == f"job/{name} is not stopped (waiting in its queue): nothing to resume"
    # Out of the queue again, so the other tests find the queues as the population made them.
    assert run(capsys, "cancel", name, "--kubeconfig", kube)[0] == 0


def test_stop_of_an_unknown_job(population, capsys):
    code, _, err = run(capsys, "stop", "no-such-job", "--kubeconfig", population.kubeconfig)
    assert code == 1
    assert err.strip() == "error: no GPU job default/no-such-job"


def test_status_through_the_airflow_connection(population, capsys, monkeypatch):
    conn = {"conn_type": "kubernetes", "extra": {"kube_config_path": population.kubeconfig}}
    monkeypatch.setenv("AIRFLOW_CONN_UI_CLUSTER", json.dumps(conn))
    # The suite runs Airflow in unit-test mode, which announces its config on stdout; a user's CLI does not.
    monkeypatch.delenv("AIRFLOW__CORE__UNIT_TEST_MODE", raising=False)
    code, out, _ = run(capsys, "status", "--conn-id", "ui_cluster", "--json")
    assert code == 0
    assert population.names["runner"] in {j["name"] for j in json.loads(out)["jobs"]}


def test_no_reachable_cluster_is_one_line_naming_what_to_set(capsys, tmp_path):
    code, out, err = run(capsys, "status", "--kubeconfig", str(tmp_path / "missing.yaml"))
    assert code == 1 and out == ""
    (line,) = [text for text in err.splitlines() if text.startswith("error:")]
    assert "--kubeconfig" in line and "AIRFLOW_CONN_KUBERNETES_DEFAULT" in line


def test_describe_takes_a_task_trys_name_without_its_attempt_and_shows_every_attempt(population, capsys):
    name = population.names["broken"]
    base = name.rsplit("-a", 1)[0]
    code, out, _ = run(capsys, "describe", base, "--kubeconfig", population.kubeconfig, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["job"]["name"] == name  # the try's newest attempt
    assert [a["name"] for a in data["attempts"]] == [name]
    assert data["attempts"][0]["exit_codes"] == {"worker-0": 3}
    code, _, err = run(capsys, "describe", base + "x", "--kubeconfig", population.kubeconfig)
    assert code == 1 and "no GPU job" in err


def test_logs_failed_shows_the_container_that_failed_and_says_so_when_none_did(population, capsys):
    code, out, _ = run(
        capsys, "logs", population.names["broken"], "--failed", "--kubeconfig", population.kubeconfig
    )
    assert code == 0
    assert out.splitlines()[-1] == "boom: bad shard"
    code, _, err = run(
        capsys, "logs", population.names["runner"], "--failed", "--kubeconfig", population.kubeconfig
    )
    assert code == 1 and "no container of it has failed" in err
