"""A job's result: the JSON its program wrote to the termination message, read from the pod status."""

from __future__ import annotations

import pytest
from airflow_jobs_sim.kubelet_model import termination_message

from airflow_jobs_plugin.jobs import labels as keys
from airflow_jobs_plugin.jobs.outcome import EventStatus, JobEvent, summary
from airflow_jobs_plugin.jobs.results import job_result, parse_result


def pod(
    role: str, rank: str | None, exit_code: int, message: str, finished: str = "2026-01-01T00:00:00Z"
) -> dict:
    pod_labels = {keys.ROLE: role}
    if rank is not None:
        pod_labels[keys.RANK] = rank
    terminated = {"exitCode": exit_code, "message": message, "finishedAt": finished}
    return {
        "metadata": {"labels": pod_labels},
        "status": {"containerStatuses": [{"name": "main", "state": {"terminated": terminated}}]},
    }


def test_a_successful_single_pod_job_returns_the_json_it_wrote():
    assert job_result([pod("worker", "0", 0, '{"accuracy": 0.93, "epochs": 3}')]) == {
        "accuracy": 0.93,
        "epochs": 3,
    }


def test_the_mpi_launcher_speaks_for_the_job_not_the_workers():
    pods = [pod("worker", "0", 0, '{"from": "worker"}'), pod("launcher", None, 0, '{"from": "launcher"}')]
    assert job_result(pods) == {"from": "launcher"}


def test_a_failed_containers_message_is_its_log_tail_never_a_result():
    assert job_result([pod("worker", "0", 1, "Traceback ...")]) is None


def test_the_retried_pod_that_finished_last_wins():
    pods = [
        pod("worker", "0", 0, '{"try": 2}', finished="2026-01-01T00:05:00Z"),
        pod("worker", "0", 0, '{"try": 1}', finished="2026-01-01T00:01:00Z"),
    ]
    assert job_result(pods) == {"try": 2}


@pytest.mark.parametrize(
    ("message", "expected"), [("", None), ("  \n", None), ("done", "done"), ("[1, 2]", [1, 2])]
)
def test_a_message_is_json_when_it_parses_else_text_and_empty_is_no_result(message, expected):
    assert parse_result(message) == expected


def test_the_result_travels_in_the_event_and_the_summary():
    event = JobEvent(status=EventStatus.SUCCESS, job_name="j-a1", state="SUCCEEDED", result={"loss": 0.1})
    again = JobEvent.from_payload(event.to_payload())
    assert again.result == {"loss": 0.1}
    assert summary(again)["result"] == {"loss": 0.1}


# --- the kubelet's rule, as the simulator models it ------------------------------------------------


def test_the_written_file_wins_whatever_the_exit_code_and_keeps_its_last_4096_bytes():
    big = "x" * 5000 + "END"
    assert termination_message(big, code=0, reason="", policy="File", log_tail=[]) == big[-4096:]
    assert (
        termination_message("oops", code=3, reason="", policy="FallbackToLogsOnError", log_tail=["l"])
        == "oops"
    )


def test_fallback_to_logs_only_on_failure_with_an_empty_file_and_at_most_80_lines_of_2048_bytes():
    lines = [f"line {i}" for i in range(200)]
    fallback = termination_message("", code=1, reason="", policy="FallbackToLogsOnError", log_tail=lines)
    assert fallback.endswith("line 199") and len(fallback.encode()) <= 2048
    assert fallback.count("\n") <= 79
    assert termination_message("", code=0, reason="", policy="FallbackToLogsOnError", log_tail=lines) == ""
    assert termination_message("", code=1, reason="", policy="File", log_tail=lines) == ""
    assert (
        termination_message(
            "", code=128, reason="ContainerCannotRun", policy="FallbackToLogsOnError", log_tail=lines
        )
        == ""
    )
