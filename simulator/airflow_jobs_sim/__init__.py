"""A simulated GPU Kubernetes cluster that speaks the real REST API over HTTP.

Standalone: imports nothing from the rest of the product. Start one with
``SimCluster(ClusterConfig(...)).start()`` or ``airflow-jobs-sim``.

The names below load on first use (PEP 562), so a pure module of the package (``kubelet_model``, which
the real plane's scenario player imports) loads without the server, its event loop and HTTP stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_jobs_sim.cluster import SimCluster
    from airflow_jobs_sim.config import ClusterConfig
    from airflow_jobs_sim.errors import ApiError

__all__ = ["ApiError", "ClusterConfig", "SimCluster"]

_HOMES = {
    "ApiError": "airflow_jobs_sim.errors",
    "ClusterConfig": "airflow_jobs_sim.config",
    "SimCluster": "airflow_jobs_sim.cluster",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
