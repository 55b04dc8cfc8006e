"""What the cluster's Kueue does with a job that names no LocalQueue, read from the cluster (the shell of
``kueue.takes_unlabelled_jobs``).

Two signs, either enough: Kueue's own configuration says it manages every job of the namespace
(``manageJobsWithoutQueueName``, read from its manager ConfigMap where this identity may read it), or
Kueue already made a Workload for the job. The first is known before Kueue has looked at the job, so the
product never unsuspends a job Kueue would only suspend again; the second covers a deployment whose
configuration this identity cannot read.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import yaml

from airflow_jobs_plugin.cluster.kube import CONFIGMAPS, WORKLOADS, KubeClient, KubeError
from airflow_jobs_plugin.cluster.objects import Meta
from airflow_jobs_plugin.cluster.resources import NAMESPACES
from airflow_jobs_plugin.queueing import kueue

log = logging.getLogger(__name__)

# A changed Kueue configuration is a redeployment of Kueue; reading it again every few minutes is enough.
CONFIG_TTL_SECONDS = 300.0

_UNSERVED = "_airflow_jobs_kueue_unserved"
_CONFIG = "_airflow_jobs_kueue_config"
_NAMESPACE_LABELS = "_airflow_jobs_namespace_labels"


async def configuration(client: KubeClient) -> Mapping[str, Any] | None:
    """Kueue's manager configuration, or ``None`` where there is none this identity may read."""
    loop = asyncio.get_running_loop()
    cached = getattr(client, _CONFIG, None)
    if cached is not None and cached[0] > loop.time():
        return cached[1]
    found: Mapping[str, Any] | None = None
    try:
        configmap = await client.get(CONFIGMAPS, kueue.CONFIG_NAMESPACE, kueue.CONFIG_MAP)
        text = (configmap.get("data") or {}).get(kueue.CONFIG_KEY) or ""
        loaded = yaml.safe_load(text) if text else None
        found = loaded if isinstance(loaded, Mapping) else None
    except KubeError as exc:
        if not (exc.not_found or exc.status == 403):
            raise
    except yaml.YAMLError as exc:
        log.warning(
            "Kueue's configuration %s/%s is not YAML: %s", kueue.CONFIG_NAMESPACE, kueue.CONFIG_MAP, exc
        )
    setattr(client, _CONFIG, (loop.time() + CONFIG_TTL_SECONDS, found))
    return found


async def namespace_labels(client: KubeClient, namespace: str) -> Mapping[str, str]:
    """The namespace's labels; only the name label the API server sets where it cannot be read."""
    cache: dict[str, Mapping[str, str]] = getattr(client, _NAMESPACE_LABELS, None) or {}
    if namespace in cache:
        return cache[namespace]
    labels: Mapping[str, str] = {kueue.NAMESPACE_NAME_LABEL: namespace}
    try:
        obj = await client.get(NAMESPACES, "", namespace)
        labels = {**labels, **Meta(obj).labels}
    except KubeError as exc:
        if not (exc.not_found or exc.status == 403):
            raise
    cache[namespace] = labels
    setattr(client, _NAMESPACE_LABELS, cache)
    return labels


async def workload_of(client: KubeClient, job: Mapping[str, Any]) -> dict | None:
    """The Workload Kueue made for ``job`` (by its job-uid label), ``None`` if none or no Kueue here."""
    if getattr(client, _UNSERVED, False):
        return None
    meta = Meta(job)
    try:
        found = await client.list(
            WORKLOADS, meta.namespace, label_selector=f"{kueue.JOB_UID_LABEL}={meta.uid}"
        )
    except KubeError as exc:
        if exc.not_found:
            setattr(client, _UNSERVED, True)  # the cluster serves no Kueue API: ask no more
        return None
    items = found.get("items") or []
    return items[0] if items else None


async def configured_to_take(client: KubeClient, job: Mapping[str, Any]) -> bool:
    """Whether Kueue's own configuration says it manages ``job`` though it names no LocalQueue."""
    if kueue.queue_name(job):
        return False
    namespace = Meta(job).namespace
    config = await configuration(client)
    return config is not None and kueue.takes_unlabelled_jobs(
        config, await namespace_labels(client, namespace)
    )


async def takes(client: KubeClient, job: Mapping[str, Any]) -> bool:
    """Whether Kueue manages ``job`` though it names no LocalQueue: its configuration says so, or it
    made a Workload for the job (asked of the API server; a process with the shared Workload watch asks
    that first, see ``engines.kueue.KueueEngine.takes``)."""
    if kueue.queue_name(job):
        return False
    return await configured_to_take(client, job) or await workload_of(client, job) is not None
