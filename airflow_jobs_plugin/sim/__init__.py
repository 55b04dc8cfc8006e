"""A simulated GPU Kubernetes cluster that speaks the real REST API over HTTP.

Standalone: imports nothing from the rest of the product. Start one with
``SimCluster(ClusterConfig(...)).start()`` or ``airflow-jobs sim``.
"""

from __future__ import annotations

from .cluster import SimCluster
from .config import ClusterConfig
from .errors import ApiError

__all__ = ["ApiError", "ClusterConfig", "SimCluster"]
