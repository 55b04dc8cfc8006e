"""Scenario annotations and image-name conventions of the simulated containers."""

from __future__ import annotations

import json

import pytest
from airflow_jobs_sim.scenarios import (
    ANNOTATION,
    DEFAULT_LOGS,
    ContainerScenario,
    PullFailure,
    ScenarioError,
    image_convention,
    normalized_image,
    parse_annotation,
    pod_scenarios,
    valid_image,
)


def pod(annotation: object | None = None, image: str = "trainer:1.0", role: str | None = None) -> dict:
    meta: dict = {"name": "p", "namespace": "default"}
    if annotation is not None:
        meta["annotations"] = {
            ANNOTATION: annotation if isinstance(annotation, str) else json.dumps(annotation)
        }
    if role:
        meta["labels"] = {"training.kubeflow.org/job-role": role}
    return {
        "metadata": meta,
        "spec": {
            "initContainers": [{"name": "wait-for-workers", "image": "busybox:1.36"}],
            "containers": [{"name": "main", "image": image}],
        },
    }


def test_an_unannotated_pod_pulls_one_second_runs_five_and_exits_zero_with_a_few_log_lines():
    main = pod_scenarios(pod()).containers["main"]
    assert (main.pull, main.run, main.exit_code(0)) == (1.0, 5.0, 0)
    assert main.logs == DEFAULT_LOGS and len(main.logs) >= 3


def test_an_init_container_succeeds_right_after_its_pull_by_default():
    init = pod_scenarios(pod()).init["wait-for-workers"]
    assert (init.run, init.exit_code(0), init.logs) == (0.0, 0, ())


def test_an_mpi_worker_runs_until_its_pod_is_deleted_by_default():
    assert pod_scenarios(pod(role="worker")).containers["main"].run is None


def test_the_annotation_sets_each_named_container():
    scenarios = pod_scenarios(
        pod({"main": {"pull": 2, "run": 30, "exit": 3, "logs": ["epoch 1"]}, "wait-for-workers": {"run": 4}})
    )
    main = scenarios.containers["main"]
    assert (main.pull, main.run, main.exit_code(0), main.logs) == (2.0, 30.0, 3, ("epoch 1",))
    assert scenarios.init["wait-for-workers"].run == 4.0


def test_the_star_entry_applies_to_every_container_and_a_named_entry_wins():
    scenarios = pod_scenarios(pod({"*": {"pull": 0}, "main": {"pull": 7}}))
    assert scenarios.init["wait-for-workers"].pull == 0.0
    assert scenarios.containers["main"].pull == 7.0


def test_a_list_of_exit_codes_gives_one_code_per_attempt_and_the_last_repeats():
    main = pod_scenarios(pod({"main": {"exit": [1, 1, 0]}})).containers["main"]
    assert [main.exit_code(i) for i in range(5)] == [1, 1, 0, 0, 0]


def test_null_run_means_until_deleted():
    assert pod_scenarios(pod({"main": {"run": None}})).containers["main"].run is None


def test_the_annotation_wins_over_the_image_convention():
    main = pod_scenarios(pod({"main": {"exit": 0}}, image="trainer:exit-3")).containers["main"]
    assert main.exit_code(0) == 0


@pytest.mark.parametrize(
    ("tag", "expected"),
    [
        ("not-found", {"pull_error": PullFailure.NOT_FOUND}),
        ("unauthorized", {"pull_error": PullFailure.UNAUTHORIZED}),
        ("rate-limited", {"pull_error": PullFailure.RATE_LIMITED}),
        ("oom", {"oom": True}),
        ("crash", {"exit": (1,)}),
        ("exit-42", {"exit": (42,)}),
        ("run-90s", {"run": 90.0}),
        ("forever", {"run": None}),
        ("1.0", {}),
    ],
)
def test_image_tags_are_shorthands_for_common_scenarios(tag, expected):
    scenario = image_convention(f"registry.example.com/team/trainer:{tag}", ContainerScenario())
    for key, value in expected.items():
        assert getattr(scenario, key) == value
    if not expected:
        assert scenario == ContainerScenario()


def test_the_cannot_run_tag_gives_a_runtime_error_message():
    scenario = image_convention("trainer:cannot-run", ContainerScenario())
    assert scenario.cannot_run and "executable file not found" in scenario.cannot_run


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"main": 3}', "container 'main': must be an object"),
        ('{"main": {"rnu": 3}}', "unknown key 'rnu'"),
        ('{"main": {"run": -1}}', "'run' must be a non-negative number of seconds or null"),
        ('{"main": {"pull": "fast"}}', "'pull' must be a non-negative number of seconds"),
        ('{"main": {"exit": 300}}', "'exit' must be an exit code 0-255"),
        ('{"main": {"exit": []}}', "'exit' must be an exit code 0-255 or a non-empty list"),
        ('{"main": {"logs": "one line"}}', "'logs' must be a list of strings"),
        (
            '{"main": {"pull_error": "gone"}}',
            "'pull_error' must be one of not-found, unauthorized, rate-limited",
        ),
        ('{"main": {"oom": "yes"}}', "'oom' must be true or false"),
        ('{"main": {"pull_failures": 0}}', "'pull_failures' must be a positive integer"),
    ],
)
def test_a_malformed_annotation_is_an_error_naming_the_offending_key(text, fragment):
    with pytest.raises(ScenarioError) as err:
        parse_annotation(text)
    assert fragment in str(err.value)
    assert ANNOTATION in str(err.value)


def test_an_annotation_naming_a_container_the_pod_does_not_have_is_an_error():
    with pytest.raises(ScenarioError, match="container 'trainer' is not in the pod"):
        pod_scenarios(pod({"trainer": {"run": 1}}))


@pytest.mark.parametrize(
    ("image", "valid"),
    [
        ("busybox", True),
        ("busybox:1.36", True),
        ("docker.io/library/busybox:1.36", True),
        ("localhost:5000/team/trainer:v2", True),
        ("nvcr.io/nvidia/pytorch:24.01-py3", True),
        ("busybox@sha256:" + "a" * 64, True),
        ("Busybox:1.36", False),
        ("bad image", False),
        ("trainer:", False),
        ("", False),
    ],
)
def test_image_references_are_checked_like_the_runtime_does(image, valid):
    assert valid_image(image) is valid


@pytest.mark.parametrize(
    ("image", "normalized"),
    [
        ("busybox", "docker.io/library/busybox:latest"),
        ("busybox:1.36", "docker.io/library/busybox:1.36"),
        ("team/trainer:v1", "docker.io/team/trainer:v1"),
        ("nvcr.io/nvidia/pytorch:24.01-py3", "nvcr.io/nvidia/pytorch:24.01-py3"),
    ],
)
def test_images_are_reported_fully_qualified(image, normalized):
    assert normalized_image(image) == normalized
