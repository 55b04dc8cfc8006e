"""The ``AirflowPlugin`` class Airflow loads through the ``airflow.plugins`` entry point."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from airflow_jobs_plugin.airflow.operators import JobLink
from airflow_jobs_plugin.plugin.app import URL_PREFIX, create_app


class AirflowJobsPlugin(AirflowPlugin):
    """GPU Jobs: a FastAPI app with pages and JSON, a nav entry, a task-instance view, the job link."""

    name = "airflow_jobs"
    fastapi_apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "GPU Jobs"}]
    external_views = [
        {
            "name": "GPU Jobs",
            "href": f"{URL_PREFIX}/",
            "destination": "nav",
            "nav_top_level": True,
            "url_route": "gpu-jobs",
        },
        {
            "name": "GPU Job",
            "href": f"{URL_PREFIX}/jobs/{{DAG_ID}}/{{TASK_ID}}/{{RUN_ID}}?map_index={{MAP_INDEX}}",
            "destination": "task_instance",
            "url_route": "gpu-job",
        },
    ]
    operator_extra_links = [JobLink()]
