"""One list of job arguments (``spec.ARGUMENTS``), and every public argument documented twice: docstring and
docs table. What Python derives from the list (JOB_ARGUMENTS, template_fields, validate()'s keywords and
defaults) is derived; what it cannot (the operator's explicit signature, JobSpec's typed fields, the docs) is
checked against it here."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest

from airflow_jobs_plugin.airflow.operators import JobOperator
from airflow_jobs_plugin.jobs.spec import ARGUMENTS, JOB_ARGUMENTS, SPEC_FIELDS, JobSpec
from airflow_jobs_plugin.jobs.spec_checks import validate

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
# Where the operator's default is not the job argument's, and why.
OPERATOR_DEFAULTS = {
    # Required by the operator; validate() reports them missing ("is required") instead.
    "image": inspect.Parameter.empty,
    "group": inspect.Parameter.empty,
    # A task's job runs in the namespace "default" unless it names one; validate() keeps a namespace
    # left out as None (the spec names none).
    "namespace": "default",
}


def operator_arguments() -> list[str]:
    return [n for n in inspect.signature(JobOperator.__init__).parameters if n not in ("self", "kwargs")]


def test_the_job_arguments_are_the_operators_validates_and_the_specs_fields():
    spec_names = set(SPEC_FIELDS.values())
    assert [n for n in operator_arguments() if n not in OPERATOR_ONLY] == list(JOB_ARGUMENTS)
    # How to check, not what to run: parse time or rendered, the accounts and RuntimeClasses the platform
    # allows.
    context = {"templated", "rendered", "service_accounts", "runtime_classes"}
    assert set(inspect.signature(validate).parameters) - context == spec_names
    assert {f.name for f in dataclasses.fields(JobSpec)} == spec_names


def test_the_operators_defaults_are_the_job_arguments_defaults():
    parameters = inspect.signature(JobOperator.__init__).parameters
    for argument in ARGUMENTS:
        expected = OPERATOR_DEFAULTS.get(argument.name, argument.default)
        assert parameters[argument.name].default == expected, argument.name


def test_validate_takes_each_job_argument_by_its_spec_field_with_its_default():
    parameters = inspect.signature(validate).parameters
    assert [(a.spec_field, a.default) for a in ARGUMENTS] == [
        (name, parameters[name].default) for name in SPEC_FIELDS.values()
    ]
    with pytest.raises(TypeError, match="job_labels"):
        validate(image="registry.example/trainer:1", group="vision", user="ada", job_labels={})


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
    from airflow_jobs_plugin.airflow.sensors import JobSensor

    names = {n for n in inspect.signature(JobSensor.__init__).parameters if n not in ("self", "kwargs")}
    assert set(re.findall(r":param (\w+):", JobSensor.__doc__ or "")) == names
    sensor_docs = DOCS.read_text().split("# JobSensor arguments", 1)[1]
    assert set(re.findall(r"^\| `(\w+)` \|", sensor_docs, re.M)) == names
