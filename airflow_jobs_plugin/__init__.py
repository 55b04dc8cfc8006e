"""GPU training jobs on a shared Kubernetes cluster as ordinary Airflow tasks.

Public API: :class:`~airflow_jobs_plugin.operators.JobOperator`,
:class:`~airflow_jobs_plugin.sensors.JobSensor` and
:class:`~airflow_jobs_plugin.triggers.JobTrigger`.
"""

from __future__ import annotations

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
        "operators": [{"integration-name": INTEGRATION, "python-modules": ["airflow_jobs_plugin.operators"]}],
        "sensors": [{"integration-name": INTEGRATION, "python-modules": ["airflow_jobs_plugin.sensors"]}],
        "triggers": [{"integration-name": INTEGRATION, "python-modules": ["airflow_jobs_plugin.triggers"]}],
        "extra-links": ["airflow_jobs_plugin.operators.JobLink"],
        "config": provider_config(),
        "cli": ["airflow_jobs_plugin.airflow_cli.get_cli_commands"],
        "plugins": [
            {"name": "airflow_jobs", "plugin-class": "airflow_jobs_plugin.plugin.AirflowJobsPlugin"},
        ],
    }
