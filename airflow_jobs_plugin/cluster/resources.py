"""The Kubernetes resource types the product reads and writes, addressed by their REST paths.

Plain data with no I/O, so the pure core (job kinds, manifests) can name a resource without importing
the client in :mod:`airflow_jobs_plugin.cluster.kube`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote


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
        """The REST path; a namespace or name that could change which path it is raises ValueError."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{segment(namespace, 'namespace')}"
        base += f"/{self.plural}"
        if name:
            base += f"/{segment(name, 'name')}"
            if sub:
                base += f"/{segment(sub, 'subresource')}"
        return base


class UnsafeName(ValueError):
    """A namespace or name that is no object's: it would change the path of a request."""


def segment(value: str, what: str) -> str:
    """``value`` as one segment of a REST path, percent-quoted.

    Names the API server can hold never are ``.`` or ``..`` and never contain ``/`` or ``%``
    (k8s.io/apimachinery v0.36 pkg/api/validation/path/name.go ``IsValidPathSegmentName``); such a
    value would make the request another one (``jobs/..`` is the list of every namespace's jobs once
    the URL is normalised), so it is refused, never sent. The rest is quoted, so no character of a name
    is read as the query or the fragment.
    """
    text = str(value)
    if not text or text in (".", "..") or "/" in text or "%" in text or any(ord(c) < 0x20 for c in text):
        raise UnsafeName(
            f"{what} {text[:80]!r} is not a Kubernetes {what}: it may not be '.', '..' or contain '/' or '%'"
        )
    return quote(text, safe="")


JOBS = Resource("batch", "v1", "jobs", "Job")
PODS = Resource("", "v1", "pods", "Pod")
EVENTS = Resource("", "v1", "events", "Event")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
SERVICES = Resource("", "v1", "services", "Service")
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
# Leases (coordination.k8s.io/v1): the admission controller's leader election (controller/lease.py), and
# a product cancel's record, which outlives the job it cancelled (jobs/cancel_record.py).
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
# Karpenter's NodePools (karpenter.sh/v1): what nodes the cluster can add, where Karpenter runs.
NODEPOOLS = Resource("karpenter.sh", "v1", "nodepools", "NodePool", namespaced=False)


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def name_problem(namespace: str | None, name: str | None) -> str | None:
    """Why ``namespace``/``name`` can name no job (``None``: they can): a namespace is a DNS-1123
    label, a job's name a DNS-1123 subdomain (kubernetes v1.36 pkg/apis/core/validation
    ``ValidateNamespaceName``; batch/v1 Jobs and MPIJobs use ``NameIsDNSSubdomain``). Checked where a
    name comes in (a page's URL, the CLI, a sensor), so nothing else reaches the API server's paths."""
    if namespace is not None and (len(namespace) > 63 or not _DNS_LABEL.match(namespace)):
        shown = namespace[:80]
        return (
            f"namespace {shown!r} is not a Kubernetes namespace (a DNS-1123 label: at most 63 lowercase "
            "letters, digits and '-', starting and ending with a letter or digit)"
        )
    if name is not None and (len(name) > 253 or not _DNS_SUBDOMAIN.match(name)):
        shown = name[:80]
        return (
            f"job name {shown!r} is not a Kubernetes name (a DNS-1123 subdomain: lowercase letters, digits, "
            "'-' and '.', starting and ending with a letter or digit)"
        )
    return None
