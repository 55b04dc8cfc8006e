"""A simulated GPU Kubernetes cluster that speaks the real REST API over HTTP.

Standalone: imports nothing from the rest of the product. Start one with
``SimCluster(ClusterConfig(...)).start()`` or ``airflow-jobs-sim``.
"""

from __future__ import annotations

from airflow_jobs_sim.cluster import SimCluster
from airflow_jobs_sim.config import ClusterConfig
from airflow_jobs_sim.errors import ApiError

__all__ = ["ApiError", "ClusterConfig", "SimCluster"]
