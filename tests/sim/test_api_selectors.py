"""Label and field selectors with the API server's syntax and allow-lists."""

from __future__ import annotations

import pytest
from airflow_jobs_sim.config import RESOURCES
from airflow_jobs_sim.errors import ApiError
from airflow_jobs_sim.selectors import (
    field_value,
    labels_match,
    make_selector,
    parse_label_selector,
)

LABELS = {"app": "train", "tier": "gpu", "rank": "3"}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("", True),
        ("app=train", True),
        ("app==train", True),
        ("app=serve", False),
        ("app!=serve", True),
        ("missing!=x", True),
        ("app in (train,serve)", True),
        ("app in (serve)", False),
        ("app notin (serve)", True),
        ("missing notin (x)", True),
        ("app notin (train)", False),
        ("tier", True),
        ("missing", False),
        ("!missing", True),
        ("!tier", False),
        ("rank>2", True),
        ("rank<2", False),
        ("app=train,tier=gpu", True),
        ("app=train,tier=cpu", False),
        ("app in (train, serve),!missing", True),
    ],
)
def test_label_selector_semantics(selector, expected):
    assert labels_match(parse_label_selector(selector), LABELS) is expected


@pytest.mark.parametrize("selector", ["app=train,", "=x", "app in (bad value)", "k=" + "v" * 64])
def test_malformed_label_selector_is_bad_request(selector):
    with pytest.raises(ApiError) as exc:
        parse_label_selector(selector)
    assert exc.value.code == 400 and exc.value.reason == "BadRequest"


@pytest.mark.parametrize(
    ("resource", "field"),
    [
        ("pods", "spec.nodeName"),
        ("pods", "status.phase"),
        ("pods", "spec.restartPolicy"),
        ("pods", "spec.schedulerName"),
        ("pods", "spec.serviceAccountName"),
        ("pods", "status.podIP"),
        ("pods", "status.nominatedNodeName"),
        ("events", "involvedObject.name"),
        ("events", "involvedObject.uid"),
        ("events", "reason"),
        ("events", "type"),
        ("events", "source"),
        ("events", "reportingComponent"),
        ("jobs", "status.successful"),
        ("nodes", "spec.unschedulable"),
        ("namespaces", "status.phase"),
        ("configmaps", "metadata.name"),
        ("mpijobs", "metadata.namespace"),
    ],
)
def test_allowed_field_selectors_parse(resource, field):
    assert make_selector(None, f"{field}=x", RESOURCES[resource]).fields[0].field == field


@pytest.mark.parametrize(
    ("resource", "field"),
    [
        ("pods", "spec.containers"),
        ("jobs", "status.active"),
        ("configmaps", "data.key"),
        ("mpijobs", "spec.slotsPerWorker"),
    ],
)
def test_unsupported_field_selector_is_bad_request_with_the_real_message(resource, field):
    with pytest.raises(ApiError) as exc:
        make_selector(None, f"{field}=x", RESOURCES[resource])
    assert exc.value.code == 400
    assert exc.value.message == f"field label not supported: {field}"


@pytest.mark.parametrize(
    ("obj", "field", "value"),
    [
        ({"spec": {"nodeName": "n1"}}, "spec.nodeName", "n1"),
        ({"spec": {}}, "spec.nodeName", ""),
        ({"status": {"succeeded": 2}}, "status.successful", "2"),
        ({"status": {}}, "status.successful", "0"),
        ({"spec": {"unschedulable": True}}, "spec.unschedulable", "true"),
        ({"spec": {}}, "spec.unschedulable", "false"),
        ({"source": {"component": "kubelet"}}, "source", "kubelet"),
    ],
)
def test_field_values_as_the_server_compares_them(obj, field, value):
    assert field_value(obj, field) == value


def test_field_selector_inequality_and_conjunction():
    selector = make_selector(None, "status.phase!=Failed,spec.nodeName=n1", RESOURCES["pods"])
    assert selector.matches({"metadata": {}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}})
    assert not selector.matches({"metadata": {}, "spec": {"nodeName": "n1"}, "status": {"phase": "Failed"}})
    assert not selector.matches({"metadata": {}, "spec": {"nodeName": "n2"}, "status": {"phase": "Running"}})
