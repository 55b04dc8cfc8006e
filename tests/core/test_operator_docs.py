"""One list of job arguments, and every public argument documented twice: docstring and docs table."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

from airflow_jobs_plugin.operators import JobOperator
from airflow_jobs_plugin.spec import JOB_ARGUMENTS, JobSpec, validate

DOCS = Path(__file__).resolve().parents[2] / "docs" / "operator.md"
OPERATOR_ONLY = {
    "pod_template_file",
    "kubernetes_conn_id",
    "stream_logs",
    "quota_configmap",
    "quota_namespace",
    # KubernetesPodOperator's names, folded into pod_template, env, env_from and volumes (operators.py).
    "runtime_class_name",
    "secrets",
}
# The operator's names for what JobSpec and validate() call labels and annotations.
RENAMED = {"job_labels": "labels", "job_annotations": "annotations"}


def operator_arguments() -> list[str]:
    return [n for n in inspect.signature(JobOperator.__init__).parameters if n not in ("self", "kwargs")]


def test_the_job_arguments_are_the_operators_validates_and_the_specs_fields():
    spec_names = {RENAMED.get(n, n) for n in JOB_ARGUMENTS}
    assert set(operator_arguments()) - OPERATOR_ONLY == set(JOB_ARGUMENTS)
    # How to check, not what to run: parse time or rendered, and the accounts the platform allows.
    context = {"templated", "rendered", "service_accounts"}
    assert set(inspect.signature(validate).parameters) - context == spec_names
    assert {f.name for f in dataclasses.fields(JobSpec)} == spec_names


def test_every_job_argument_may_be_templated():
    assert set(JOB_ARGUMENTS) | {"pod_template_file"} <= set(JobOperator.template_fields)


def test_every_argument_has_a_param_line_in_the_docstring():
    documented = set(re.findall(r":param (\w+):", JobOperator.__doc__ or ""))
    assert set(operator_arguments()) == documented


def test_every_argument_has_a_row_in_docs_operator_md():
    rows = set(re.findall(r"^\| `(\w+)` \|", DOCS.read_text().split("# JobSensor arguments", 1)[0], re.M))
    assert set(operator_arguments()) == rows


def test_the_operator_assigns_each_argument_plainly_as_airflows_operator_lint_asks():
    # apache/airflow scripts/ci/prek/validate_operators_init.py: a template field is assigned in __init__
    # as `self.x = x`, with no logic, so rendering and type checkers see the attribute.
    source = inspect.getsource(JobOperator.__init__)
    for name in (*JOB_ARGUMENTS, "pod_template_file"):
        assert re.search(rf"^\s+self\.{name} = {name}$", source, re.M), name


def test_every_sensor_argument_is_documented_in_the_docstring_and_the_docs():
    from airflow_jobs_plugin.sensors import JobSensor

    names = {n for n in inspect.signature(JobSensor.__init__).parameters if n not in ("self", "kwargs")}
    assert set(re.findall(r":param (\w+):", JobSensor.__doc__ or "")) == names
    sensor_docs = DOCS.read_text().split("# JobSensor arguments", 1)[1]
    assert set(re.findall(r"^\| `(\w+)` \|", sensor_docs, re.M)) == names
