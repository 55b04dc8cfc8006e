"""What mypy checks of the JSON API's models (``mypy`` runs over this file; pytest collects nothing here).

The models are made at import time, so only the generated stub (``readmodel/schema_models.pyi``) tells a
type checker their fields. Each line below fails ``mypy`` if the models are seen as anything less than
themselves: a field's type is its JSON type, and a field the JSON does not have is an error (the
``type: ignore`` would be unused, which ``warn_unused_ignores`` reports).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal, assert_type

from airflow_jobs_plugin.jobs import action_rules
from airflow_jobs_plugin.lifecycle import JobState
from airflow_jobs_plugin.readmodel import schema, views


def a_job_has_its_rows_fields(row: views.JobRow) -> None:
    job = schema.job(row)
    assert_type(job.name, str)
    assert_type(job.state, JobState)
    assert_type(job.created_at, datetime | None)
    print(job.no_such_field)  # type: ignore[attr-defined]


def a_job_page_holds_typed_models(detail: views.JobDetail) -> None:
    page = schema.job_detail(detail)
    assert_type(page.job, schema.Job)
    assert_type(page.snapshot.task, schema.TaskRef | None)
    assert_type(page.snapshot.replicas[0].ready_containers, int | None)
    assert_type(page.actions, list[Literal["stop", "resume", "cancel"]])
    print(page.snapshot.no_such_field)  # type: ignore[attr-defined]


def an_overview_carries_its_paging(ov: views.Overview) -> None:
    answer = schema.overview(ov, total=None, offset=0, limit=100, more=False)
    assert_type(answer.jobs_total, int | None)
    assert_type(answer.jobs, list[schema.Job])


def an_outcome_is_a_result(outcome: action_rules.CancelOutcome) -> None:
    assert_type(schema.cancel_result(outcome).message, str | None)
    print(schema.cancel_result(outcome).done)  # type: ignore[attr-defined]
