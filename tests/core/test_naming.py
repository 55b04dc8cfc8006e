"""Job naming: names are deterministic, distinct per task try, valid DNS labels with room for every name the
MPI operator derives, and any text becomes a valid, distinct label value."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_jobs_plugin.jobs.naming import (
    DNS_LABEL_MAX,
    MAX_ATTEMPTS,
    MAX_WORKERS,
    NAME_MAX,
    TaskIdentity,
    attempt_name,
    is_dns_label,
    job_name,
    label_value,
    split_attempt,
    task_key,
)
from tests.examples_budget import examples

DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


# --- naming -------------------------------------------------------------------------------------------

ids = st.text(min_size=1, max_size=300)
map_indexes = st.integers(min_value=-1, max_value=100_000)
tries = st.integers(min_value=1, max_value=1000)
attempts = st.integers(min_value=1, max_value=MAX_ATTEMPTS)


def test_name_is_a_readable_slug_plus_hash_and_attempt():
    name = job_name(
        "nightly_retrain", "train.resnet50", "scheduled__2024-05-01T00:00:00+00:00", -1, 1, attempt=2
    )
    assert re.fullmatch(r"nightly-retrain-train-resnet50-[0-9a-f]{10}-a2", name)


def test_task_key_is_the_name_without_the_attempt_suffix():
    task = TaskIdentity("dag", "task", "run", 3, 2)
    assert task.job_name(1) == task.task_key() + "-a1"
    assert task.job_name(7) == task.task_key() + "-a7"
    assert task.task_key() == task_key("dag", "task", "run", 3, 2)


def test_naming_accepts_a_task_identity_or_separate_identifiers():
    task = TaskIdentity("dag", "task", "run", 3, 2)
    assert job_name(task, attempt=4) == job_name("dag", "task", "run", 3, 2, 4) == task.job_name(4)
    assert job_name("dag", "task", "run", map_index=3, try_number=2, attempt=4) == task.job_name(4)
    assert task_key(task) == task_key("dag", "task", "run", 3, 2)


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((TaskIdentity("d", "t", "r"), "extra"), {}),
        (("d", "t"), {}),
        (("d", "t", "r"), {"dag_id": "again"}),
        (("d", "t", "r"), {"colour": "red"}),
    ],
)
def test_naming_rejects_mixed_or_missing_identifiers(args, kwargs):
    with pytest.raises(TypeError):
        task_key(*args, **kwargs)


def test_attempt_names_share_the_task_key():
    first = TaskIdentity("dag", "task", "run").job_name(1)
    assert attempt_name(first, 3) == TaskIdentity("dag", "task", "run").job_name(3)
    assert split_attempt(attempt_name(first, 12)) == (TaskIdentity("dag", "task", "run").task_key(), 12)


@pytest.mark.parametrize("name", ["plain-job", "job-a0", "job-a", "-a3"])
def test_foreign_names_have_no_attempt(name):
    with pytest.raises(ValueError, match="not a job name"):
        split_attempt(name)


def test_name_leaves_room_for_the_mpi_operator_suffixes():
    assert NAME_MAX + len(f"-worker-{MAX_WORKERS - 1}") == DNS_LABEL_MAX
    longest = job_name("d" * 500, "t" * 500, "r" * 500, 99999, 999, attempt=MAX_ATTEMPTS)
    assert len(longest) <= NAME_MAX
    for derived in (f"{longest}-launcher", f"{longest}-worker", f"{longest}-worker-{MAX_WORKERS - 1}"):
        assert len(derived) <= DNS_LABEL_MAX and DNS_1035.match(derived)


def test_dag_id_starting_with_a_digit_still_gives_a_name_starting_with_a_letter():
    assert job_name("2024_etl", "load", "r")[0].isalpha()


def test_unicode_ids_are_folded_or_hashed():
    assert job_name("café_modèle", "entraînement", "r").startswith("cafe-modele-entrainement-")
    assert job_name("日本語", "タスク", "r").startswith("job-")


def test_map_index_none_means_unmapped():
    assert task_key("d", "t", "r", None) == task_key("d", "t", "r", -1)


@pytest.mark.parametrize("attempt", [0, -1, MAX_ATTEMPTS + 1, True, 1.0])
def test_attempt_out_of_range_is_rejected(attempt):
    with pytest.raises(ValueError, match="attempt"):
        job_name("d", "t", "r", attempt=attempt)


@settings(max_examples=examples(300), deadline=None)
@given(dag=ids, task=ids, run=ids, index=map_indexes, try_number=tries, attempt=attempts)
def test_any_identifiers_give_a_valid_deterministic_name(dag, task, run, index, try_number, attempt):
    name = job_name(dag, task, run, index, try_number, attempt)
    assert len(name) <= NAME_MAX
    assert is_dns_label(name) and DNS_1035.match(name)
    assert name == job_name(dag, task, run, index, try_number, attempt)
    assert LABEL_VALUE.match(task_key(dag, task, run, index, try_number))


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(st.tuples(ids, ids, ids, map_indexes, tries), min_size=2, max_size=2, unique=True),
)
def test_distinct_task_instances_get_distinct_names(pair):
    first, second = pair
    assert job_name(*first) != job_name(*second)


def test_names_differ_only_by_identifiers_with_equal_slugs():
    assert job_name("a_b", "t", "r") != job_name("a-b", "t", "r")
    assert job_name("d", "t", "run1") != job_name("d", "t", "run2")
    assert job_name("d", "t", "r", 0) != job_name("d", "t", "r", 1)
    assert job_name("d", "t", "r", -1, 1) != job_name("d", "t", "r", -1, 2)


# --- label values -------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["vision", "Alice.Smith", "a_b-c", "x" * 63, ""])
def test_valid_label_values_are_kept_unchanged(value):
    assert label_value(value) == value


@pytest.mark.parametrize("value", ["alice@example.com", "-lead", "trail-", "x" * 64, "日本", "a b", "___"])
def test_invalid_label_values_are_sanitized(value):
    result = label_value(value)
    assert result != value
    assert len(result) <= 63 and LABEL_VALUE.match(result)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.text(max_size=100), min_size=2, max_size=2, unique=True))
def test_label_values_are_valid_and_distinct(pair):
    first, second = (label_value(v) for v in pair)
    assert LABEL_VALUE.match(first) and len(first) <= 63
    assert first != second
