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
from airflow_jobs_plugin.cluster.single_flight import SingleFlight
from airflow_jobs_plugin.queueing import kueue

log = logging.getLogger(__name__)

# A changed Kueue configuration is a redeployment of Kueue; reading it again every few minutes is enough.
CONFIG_TTL_SECONDS = 300.0

_UNSERVED = "_airflow_jobs_kueue_unserved"
_CONFIG = "_airflow_jobs_kueue_config"
_NAMESPACE_LABELS = "_airflow_jobs_namespace_labels"


# The reads in flight, by client (and namespace): every trigger of a restarted triggerer asks these at
# once, before the first answer is cached; they share one read (single_flight).
_CONFIG_READS: SingleFlight[Mapping[str, Any] | None] = SingleFlight("kueue-config")
_NAMESPACE_READS: SingleFlight[Mapping[str, str]] = SingleFlight("namespace-labels")
_SERVED_READS: SingleFlight[bool] = SingleFlight("kueue-workloads-served")


async def configuration(client: KubeClient) -> Mapping[str, Any] | None:
    """Kueue's manager configuration, or ``None`` where there is none this identity may read."""
    cached = getattr(client, _CONFIG, None)
    if cached is not None and cached[0] > asyncio.get_running_loop().time():
        return cached[1]
    return await _CONFIG_READS.run(id(client), lambda: _read_configuration(client))


async def _read_configuration(client: KubeClient) -> Mapping[str, Any] | None:
    loop = asyncio.get_running_loop()
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
    return await _NAMESPACE_READS.run(
        (id(client), namespace), lambda: _read_namespace_labels(client, namespace)
    )


async def _read_namespace_labels(client: KubeClient, namespace: str) -> Mapping[str, str]:
    labels: Mapping[str, str] = {kueue.NAMESPACE_NAME_LABEL: namespace}
    try:
        obj = await client.get(NAMESPACES, "", namespace)
        labels = {**labels, **Meta(obj).labels}
    except KubeError as exc:
        if not (exc.not_found or exc.status == 403):
            raise
    cache = getattr(client, _NAMESPACE_LABELS, None) or {}
    cache[namespace] = labels
    setattr(client, _NAMESPACE_LABELS, cache)
    return labels


async def _served(client: KubeClient, namespace: str) -> bool:
    """Whether the cluster serves Kueue's Workloads: probed once per client (a 404 on the resource says
    no Kueue API; it is not asked again), every concurrent caller awaiting the one probe in flight. A
    probe that failed otherwise (403 in this namespace, 500) says nothing: the read it guards is tried."""
    known = getattr(client, _UNSERVED, None)
    if known is not None:
        return not known
    return await _SERVED_READS.run(id(client), lambda: _probe_served(client, namespace))


async def _probe_served(client: KubeClient, namespace: str) -> bool:
    try:
        await client.list(WORKLOADS, namespace, label_selector=f"{kueue.JOB_UID_LABEL}=none")
    except KubeError as exc:
        if not exc.not_found:
            return True
        setattr(client, _UNSERVED, True)
        return False
    setattr(client, _UNSERVED, False)
    return True


async def workload_of(client: KubeClient, job: Mapping[str, Any]) -> dict | None:
    """The Workload Kueue made for ``job`` (by its job-uid label), ``None`` if none or no Kueue here."""
    meta = Meta(job)
    if not await _served(client, meta.namespace):
        return None
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
