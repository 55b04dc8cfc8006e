"""The unmodified ``kubernetes_asyncio`` client against the simulated API server."""

from __future__ import annotations

import asyncio
import json

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException


def status_body(exc: ApiException) -> dict:
    return json.loads(exc.body)


async def collect(stream_fn, *args, count: int, **kwargs) -> list[tuple[str, str]]:
    """The first ``count`` (type, name) pairs of a watch."""
    seen: list[tuple[str, str]] = []
    async with watch.Watch() as w:
        async for event in w.stream(stream_fn, *args, **kwargs):
            obj = event["object"]
            name = obj["metadata"]["name"] if isinstance(obj, dict) else obj.metadata.name
            seen.append((event["type"], name))
            if len(seen) == count:
                w.stop()
    return seen


async def test_pod_crud_and_watch(async_client, namespace, manifests):
    core = client.CoreV1Api(async_client)
    created = await core.create_namespaced_pod(namespace, manifests.pod("apod", labels={"role": "worker"}))
    assert created.spec.termination_grace_period_seconds == 30
    assert (await core.read_namespaced_pod("apod", namespace)).metadata.uid == created.metadata.uid
    pods = await core.list_namespaced_pod(namespace, label_selector="role in (worker,launcher)")
    assert [p.metadata.name for p in pods.items] == ["apod"]

    async def mutate():
        await asyncio.sleep(0.2)
        await core.patch_namespaced_pod("apod", namespace, {"metadata": {"annotations": {"a": "b"}}})
        await core.delete_namespaced_pod("apod", namespace)

    task = asyncio.create_task(mutate())
    seen = await collect(core.list_namespaced_pod, namespace, count=4, timeout_seconds=5)
    await task
    # A pod's delete writes its deletionTimestamp (a MODIFIED event) before it goes, even with grace 0.
    assert seen == [("ADDED", "apod"), ("MODIFIED", "apod"), ("MODIFIED", "apod"), ("DELETED", "apod")]


async def test_job_crud_conflict_and_status(async_client, namespace, manifests):
    batch = client.BatchV1Api(async_client)
    await batch.create_namespaced_job(namespace, manifests.job("ajob", labels={"team": "vision"}))
    stale = await batch.read_namespaced_job("ajob", namespace)
    await batch.patch_namespaced_job("ajob", namespace, {"metadata": {"labels": {"team": "nlp"}}})
    stale.spec.suspend = True
    with pytest.raises(ApiException) as exc:
        await batch.replace_namespaced_job("ajob", namespace, stale)
    assert exc.value.status == 409 and status_body(exc.value)["reason"] == "Conflict"
    status = {"status": {"startTime": "2025-01-01T00:00:00Z", "active": 1}}
    after = await batch.patch_namespaced_job_status("ajob", namespace, status)
    assert after.status.active == 1
    jobs = await batch.list_namespaced_job(namespace, field_selector="status.successful=0")
    assert [j.metadata.name for j in jobs.items] == ["ajob"]
    await batch.delete_namespaced_job(
        "ajob", namespace, body=client.V1DeleteOptions(propagation_policy="Foreground")
    )
    assert (await batch.list_namespaced_job(namespace)).items == []


async def test_already_exists_and_invalid(async_client, namespace, manifests):
    core = client.CoreV1Api(async_client)
    await core.create_namespaced_config_map(namespace, {"metadata": {"name": "cm"}})
    with pytest.raises(ApiException) as exc:
        await core.create_namespaced_config_map(namespace, {"metadata": {"name": "cm"}})
    assert exc.value.status == 409 and status_body(exc.value)["reason"] == "AlreadyExists"
    with pytest.raises(ApiException) as exc:
        await core.create_namespaced_pod(
            namespace, {"metadata": {"name": "nocontainers"}, "spec": {"containers": []}}
        )
    body = status_body(exc.value)
    assert exc.value.status == 422
    assert body["message"] == 'Pod "nocontainers" is invalid: spec.containers: Required value'


async def test_mpijob_custom_objects_and_watch(async_client, namespace, manifests):
    custom = client.CustomObjectsApi(async_client)
    args = ("kubeflow.org", "v2beta1", namespace, "mpijobs")
    created = await custom.create_namespaced_custom_object(*args, manifests.mpijob("ampi"))
    assert created["spec"]["mpiImplementation"] == "OpenMPI"
    patch = [{"op": "replace", "path": "/spec/slotsPerWorker", "value": 4}]
    patched = await custom.patch_namespaced_custom_object(*args, "ampi", patch)
    assert patched["spec"]["slotsPerWorker"] == 4
    seen = await collect(
        custom.list_namespaced_custom_object,
        *args,
        count=1,
        resource_version=created["metadata"]["resourceVersion"],
        timeout_seconds=2,
    )
    assert seen == [("MODIFIED", "ampi")]
    await custom.delete_namespaced_custom_object(*args, "ampi")


async def test_strategic_merge_patch_on_a_custom_resource_is_unsupported_media_type(
    sim, namespace, manifests
):
    import aiohttp

    sim.store.create("mpijobs", manifests.mpijob("smp"), namespace)
    url = f"{sim.url}/apis/kubeflow.org/v2beta1/namespaces/{namespace}/mpijobs/smp"
    async with aiohttp.ClientSession() as session:
        headers = {"Content-Type": "application/strategic-merge-patch+json"}
        async with session.patch(url, data=b'{"spec":{}}', headers=headers) as resp:
            assert resp.status == 415
            assert (await resp.json())["reason"] == "UnsupportedMediaType"


async def test_watch_resume_and_410_then_relist(sim, async_client, namespace):
    core = client.CoreV1Api(async_client)
    start = await core.create_namespaced_config_map(namespace, {"metadata": {"name": "a"}})
    await core.create_namespaced_config_map(namespace, {"metadata": {"name": "b"}})
    seen = await collect(
        core.list_namespaced_config_map,
        namespace,
        count=1,
        resource_version=start.metadata.resource_version,
        timeout_seconds=2,
    )
    assert seen == [("ADDED", "b")]

    sim.faults.force_gone(1)
    with pytest.raises(ApiException) as exc:
        await collect(
            core.list_namespaced_config_map,
            namespace,
            count=1,
            resource_version=start.metadata.resource_version,
            timeout_seconds=2,
        )
    assert exc.value.status == 410
    listed = await core.list_namespaced_config_map(namespace)
    assert sorted(c.metadata.name for c in listed.items) == ["a", "b"]


async def test_watch_drop_is_survived_by_a_retrying_watch(sim, async_client, namespace):
    core = client.CoreV1Api(async_client)
    seen: list[str] = []

    async def consume():
        async with watch.Watch() as w:
            # no timeout_seconds: the client reconnects from its last resourceVersion after a drop
            async for event in w.stream(core.list_namespaced_config_map, namespace):
                seen.append(event["object"].metadata.name)
                if len(seen) == 2:
                    w.stop()
                    return

    task = asyncio.create_task(consume())
    await core.create_namespaced_config_map(namespace, {"metadata": {"name": "before-drop"}})
    for _ in range(100):
        if seen:
            break
        await asyncio.sleep(0.02)
    assert sim.faults.drop_watches() >= 1
    await core.create_namespaced_config_map(namespace, {"metadata": {"name": "after-drop"}})
    await asyncio.wait_for(task, 10)
    assert seen == ["before-drop", "after-drop"]


async def test_log_follow(sim, async_client, namespace, manifests):
    core = client.CoreV1Api(async_client)
    await core.create_namespaced_pod(namespace, manifests.pod("alog", nodeName="sim-node-1"))
    sim.logs.append(namespace, "alog", "main", "starting")
    resp = await core.read_namespaced_pod_log(
        "alog", namespace, follow=True, timestamps=True, _preload_content=False
    )
    first = await resp.content.readline()
    assert first.decode().rstrip().endswith("Z starting")
    sim.logs.append(namespace, "alog", "main", "step 1")
    assert (await resp.content.readline()).decode().rstrip().endswith(" step 1")
    sim.logs.close(namespace, "alog", "main")
    assert await resp.content.read() == b""
    resp.release()


async def test_log_follow_ends_when_the_pod_is_deleted(sim, async_client, namespace, manifests):
    core = client.CoreV1Api(async_client)
    await core.create_namespaced_pod(namespace, manifests.pod("blog", nodeName="sim-node-1"))
    sim.logs.append(namespace, "blog", "main", "only line")
    resp = await core.read_namespaced_pod_log("blog", namespace, follow=True, _preload_content=False)
    assert await resp.content.readline() == b"only line\n"
    await core.delete_namespaced_pod("blog", namespace, grace_period_seconds=0)
    assert await asyncio.wait_for(resp.content.read(), 10) == b""
    resp.release()


async def test_events_and_nodes(async_client, namespace):
    core = client.CoreV1Api(async_client)
    event = {
        "metadata": {"name": "p.1"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": namespace},
        "reason": "FailedScheduling",
        "type": "Warning",
        "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
    }
    await core.create_namespaced_event(namespace, event)
    warnings = await core.list_namespaced_event(namespace, field_selector="type=Warning")
    assert [e.reason for e in warnings.items] == ["FailedScheduling"]
    nodes = await core.list_node()
    assert {n.metadata.name for n in nodes.items} == {"sim-node-0", "sim-node-1"}
