"""GPU training jobs on a shared Kubernetes cluster as ordinary Airflow tasks.

Public API, importable from the package itself::

    from airflow_jobs_plugin import JobOperator, JobSensor, JobTrigger

(:class:`~airflow_jobs_plugin.airflow.operators.JobOperator`,
:class:`~airflow_jobs_plugin.airflow.sensors.JobSensor`,
:class:`~airflow_jobs_plugin.airflow.triggers.JobTrigger`). They are resolved on first use (PEP 562), so
that importing the package (the providers manager reads :func:`get_provider_info`; the CLI and the
simulator's users need none of Airflow's task machinery) stays cheap.

The layers, inward to outward (``docs/architecture.md``; import-linter's ``layers`` contract in
``pyproject.toml`` holds them): ``config`` and ``json_fields``; ``metrics`` (a sink); ``cluster`` (the
client and the shared watch); ``jobs`` (what a job is); ``lifecycle`` (what state it is in); ``queueing``
(who runs next) beside ``logs``; ``usecases`` (submit, cancel, stop, resume: jobs and queueing together);
``readmodel`` (what people are shown) beside ``controller`` (the admission controller); then ``airflow``
(operator, sensor, triggers, CLI) and ``plugin`` (the web app). Each package holds its pure rules and
the few modules that do its I/O beside them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_jobs_plugin.airflow.operators import JobOperator
    from airflow_jobs_plugin.airflow.sensors import JobSensor
    from airflow_jobs_plugin.airflow.triggers import JobTrigger

__version__ = "0.1.0"

PACKAGE_NAME = "airflow-jobs-plugin"
# The cncf provider's Kubernetes connection, used unless a task names another.
DEFAULT_CONN_ID = "kubernetes_default"


INTEGRATION = "GPU Jobs"


def get_provider_info() -> dict:
    """Describe this provider to Airflow's providers manager (``apache_airflow_provider`` entry point).

    The keys follow Airflow 3.3's ``airflow-core/src/airflow/provider_info.schema.json``. The provider
    declares no connection type of its own: it reuses the cncf provider's ``kubernetes`` connection
    (``apache-airflow-providers-cncf-kubernetes`` is a dependency), and declaring the same type twice
    would make the providers manager pick one hook at random.
    """
    from airflow_jobs_plugin.config import provider_config

    return {
        "package-name": PACKAGE_NAME,
        "name": "Airflow Jobs (GPU jobs on Kubernetes)",
        "description": (
            "Run GPU training jobs (batch/v1 Jobs and kubeflow MPIJobs) on a shared Kubernetes cluster "
            "as deferrable Airflow tasks, with a per-group and per-user GPU quota pool, a UI and a CLI."
        ),
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "external-doc-url": "https://kubernetes.io/docs/concepts/workloads/controllers/job/",
                "tags": ["software"],
            }
        ],
        "operators": [
            {"integration-name": INTEGRATION, "python-modules": ["airflow_jobs_plugin.airflow.operators"]}
        ],
        "sensors": [
            {"integration-name": INTEGRATION, "python-modules": ["airflow_jobs_plugin.airflow.sensors"]}
        ],
        "triggers": [
            {"integration-name": INTEGRATION, "python-modules": ["airflow_jobs_plugin.airflow.triggers"]}
        ],
        "extra-links": ["airflow_jobs_plugin.airflow.operators.JobLink"],
        "config": provider_config(),
        "cli": ["airflow_jobs_plugin.airflow.airflow_cli.get_cli_commands"],
        "plugins": [
            {"name": "airflow_jobs", "plugin-class": "airflow_jobs_plugin.plugin.AirflowJobsPlugin"},
        ],
    }


_PUBLIC = {
    "JobOperator": "airflow_jobs_plugin.airflow.operators",
    "JobSensor": "airflow_jobs_plugin.airflow.sensors",
    "JobTrigger": "airflow_jobs_plugin.airflow.triggers",
}
__all__ = ["DEFAULT_CONN_ID", "JobOperator", "JobSensor", "JobTrigger", "__version__", "get_provider_info"]


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        import importlib

        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
