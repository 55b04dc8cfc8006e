"""One declaration per field: the job row the pages and the CLI print, the index's record of a job and
the JSON API's ``Job`` are one set of fields, declared on ``views.JobRow``; the OpenAPI document is the
pinned one."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any

import pytest

from airflow_jobs_plugin import json_fields as fields
from airflow_jobs_plugin.lifecycle import Health, JobSnapshot, JobState, Reason, ReplicaStatus
from airflow_jobs_plugin.plugin import app as plugin_app
from airflow_jobs_plugin.readmodel import job_index, schema, views

SNAPSHOT = Path(__file__).with_name("openapi_snapshot.json")


def _unordered(node: Any) -> Any:
    """The document with the order of object keys and of ``required`` lists (a set in JSON Schema) left out."""
    if isinstance(node, dict):
        return {
            k: sorted(v) if k == "required" and isinstance(v, list) else _unordered(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_unordered(v) for v in node]
    return node


def row(**changes: Any) -> views.JobRow:
    values: dict[str, Any] = {
        "namespace": "ml-team",
        "name": "train-1",
        "kind": "Job",
        "state": "RUNNING",
        "reason": "Running",
        "message": "",
        "group": "vision",
        "user": "",
        "gpus": 2,
        "device": "nvidia.com/gpu",
        "attempt": 1,
        "requeue_count": 0,
        "pod_failures": 0,
        "created_at": datetime(2026, 3, 2, 9, 0),
        "age_seconds": 60.0,
        "queue_position": None,
        "dag_id": "nightly",
        "task_id": "train",
        "run_id": "manual__1",
        "map_index": 3,
    }
    return views.JobRow(**{**values, **changes})


def test_the_openapi_document_is_the_pinned_one():
    assert _unordered(plugin_app.create_app().openapi()) == _unordered(json.loads(SNAPSHOT.read_text()))


def test_the_json_job_has_exactly_the_rows_declared_fields_with_their_descriptions():
    declared = fields.json_fields(views.JobRow)
    assert [f.name for f in declared] == [*views.JobRow._fields, "detail_url", "dag_run_url", "task_url"]
    described = {name: f.description for name, f in schema.Job.model_fields.items()}
    assert described == {f.name: f.json.description for f in declared}


def test_the_index_keeps_the_row_and_repeats_none_of_its_fields():
    assert "row" in job_index.IndexRow._fields
    assert set(job_index.IndexRow._fields) & set(views.JobRow._fields) == set()


def test_a_blank_text_is_null_a_state_its_enum_and_a_naive_time_utc_in_the_json():
    answer = schema.job(row(message="", user=""))
    assert (answer.message, answer.user, answer.group) == (None, None, "vision")
    assert answer.state is JobState.RUNNING and answer.reason is Reason("Running")
    assert answer.created_at == datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("changes", "task_url"),
    [
        ({}, "/dags/nightly/runs/manual__1/tasks/train/mapped/3"),
        ({"map_index": -1}, "/dags/nightly/runs/manual__1/tasks/train"),
        ({"task_id": None}, None),
    ],
)
def test_the_links_are_computed_from_the_row_and_carried_in_the_json(changes, task_url):
    answer = schema.job(row(**changes)).model_dump(mode="json")
    assert answer["detail_url"] == "/airflow-jobs/jobs/ml-team/train-1"
    assert answer["dag_run_url"] == "/dags/nightly/runs/manual__1"
    assert answer["task_url"] == task_url


def test_a_page_row_from_the_index_is_the_stored_row_at_the_pages_now():
    stored = row(age_seconds=5.0)
    kept = job_index.IndexRow(row=stored, uid="u", created_label=None, terminal=False, held=None)
    now = datetime(2026, 3, 2, 9, 10)
    assert job_index.job_row(kept, now) == stored._replace(age_seconds=600.0)


@pytest.mark.parametrize("view", list(schema._MODELS), ids=lambda v: v.__name__)
def test_every_derived_model_has_exactly_its_views_declared_fields(view):
    model = schema._MODELS[view]
    assert {n: f.description for n, f in model.model_fields.items()} == {
        f.name: f.json.description for f in fields.json_fields(view)
    }


def test_a_pool_holds_its_users_and_devices_models_its_computed_free_and_a_rounded_usage():
    pool = views.PoolRow(
        group="vision",
        quota=8,
        used=2,
        free=6,
        queued_jobs=0,
        queued_gpus=0,
        users=(views.UserRow("alice", 2, 1, None, 0, 0, recent_gpus=1.23456),),
        devices=(views.DeviceRow("nvidia.com/mig-1g.10gb", quota=2, used=3),),
    )
    (answer,) = [p.model_dump(mode="json") for p in schema.pools([pool])]
    assert answer["users"] == [
        {
            "user": "alice",
            "gpus": 2,
            "jobs": 1,
            "limit": None,
            "queued_jobs": 0,
            "queued_gpus": 0,
            "recent_gpus": 1.235,
        }
    ]
    assert answer["devices"] == [{"resource": "nvidia.com/mig-1g.10gb", "quota": 2, "used": 3, "free": 0}]


def test_every_model_but_the_error_is_derived_from_a_dataclasss_declarations():
    written_by_hand = {m.__name__ for m in schema.Model.__subclasses__()} - {
        m.__name__ for m in schema._MODELS.values()
    }
    assert written_by_hand == {"Problem"}


def test_a_field_declared_after_another_follows_it_in_the_json():
    """A replica's name and READY counts are properties, and a cancel's ``ended`` is its constructor's
    last argument: each sits where the JSON has always had it."""
    assert list(schema.SnapshotReplica.model_fields)[:8] == [
        "role",
        "index",
        "name",
        "pod",
        "status",
        "ready_containers",
        "containers",
        "restarts",
    ]
    assert list(schema.CancelResult.model_fields)[3:5] == ["deleted", "ended"]


def test_a_field_declared_after_no_field_is_refused_with_the_names_it_could_follow():
    @dataclass(frozen=True)
    class Misplaced:
        first: Annotated[int, fields.Json("one")]
        second: Annotated[int, fields.Json("two", after="frist")]

    Misplaced.__module__ = __name__
    with pytest.raises(TypeError, match=r"Misplaced.second: Json\(after='frist'\) .*declared: first"):
        fields.json_fields(Misplaced)


@pytest.mark.parametrize(("ready", "counts"), [("1/2", (1, 2)), ("0/1", (0, 1)), ("<none>", (None, None))])
def test_a_snapshot_replicas_ready_column_is_two_counts_in_the_json(ready, counts):
    replica = ReplicaStatus("worker", 0, "p", "Running", ready, 0, "gpu-a", Health.RUNNING)
    answer = schema.snapshot(
        JobSnapshot("j", "ns", "Job", JobState.RUNNING, Reason("Running"), "", (replica,))
    )
    (json_replica,) = answer.model_dump(mode="json")["replicas"]
    assert (json_replica["ready_containers"], json_replica["containers"]) == counts
    assert json_replica["name"] == "worker-0"
