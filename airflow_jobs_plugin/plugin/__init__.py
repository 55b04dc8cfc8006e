"""The GPU Jobs Airflow plugin: pages and JSON under ``/airflow-jobs``, a nav entry, a task view.

``AirflowJobsPlugin`` is registered through the ``airflow.plugins`` entry point (and listed in the
provider info). It is resolved lazily so that the pure modules of this package (``views``, ``svg``,
``text``), which the CLI uses too, can be imported without building the web app.
"""

from __future__ import annotations

from typing import Any

__all__ = ["AirflowJobsPlugin"]


def __getattr__(name: str) -> Any:
    if name == "AirflowJobsPlugin":
        from airflow_jobs_plugin.plugin.entry import AirflowJobsPlugin

        return AirflowJobsPlugin
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
