"""How the page and the CLI tables print the view models' typed values: kubectl's words and ages.

The view models and the JSON API carry times and seconds; a person reads ``5m12s`` and ``1/2``. Both
human readers (``html.py`` and ``text.py``) print through these, so the page and ``airflow-jobs`` agree.
"""

from __future__ import annotations

from airflow_jobs_plugin.lifecycle import human_duration
from airflow_jobs_plugin.readmodel.views import ReplicaRow

UNKNOWN = "<unknown>"  # kubectl's AGE cell without a timestamp
NONE = "<none>"  # kubectl's word for an empty cell


def age(seconds: float | None) -> str:
    """An AGE cell as kubectl prints it (``19s``, ``5m12s``, ``3d4h``)."""
    return UNKNOWN if seconds is None else human_duration(seconds)


def ready(row: ReplicaRow) -> str:
    """kubectl's READY cell: ``<ready>/<containers>``."""
    if row.ready_containers is None or row.containers is None:
        return NONE
    return f"{row.ready_containers}/{row.containers}"


def replica_age(row: ReplicaRow) -> str:
    """The AGE of a replica's pod; no pod, no age."""
    return NONE if row.pod_created_at is None else age(row.age_seconds)


def recent_gpus(value: float | None) -> str:
    """A user's recent usage in GPUs (a decayed average: ``2.5``); empty outside a fair_share group."""
    return "" if value is None else f"{value:.1f}"
