"""The Kubernetes resource types the product reads and writes, addressed by their REST paths.

Plain data with no I/O, so the pure core (job kinds, manifests) can name a resource without importing
the client in :mod:`airflow_jobs_plugin.kube`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Resource:
    """One Kubernetes resource type, addressed by its REST path."""

    group: str  # "" for the core API
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
            if sub:
                base += f"/{sub}"
        return base


JOBS = Resource("batch", "v1", "jobs", "Job")
MPIJOBS = Resource("kubeflow.org", "v2beta1", "mpijobs", "MPIJob")
PODS = Resource("", "v1", "pods", "Pod")
EVENTS = Resource("", "v1", "events", "Event")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
SERVICES = Resource("", "v1", "services", "Service")
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
