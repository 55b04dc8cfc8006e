"""The simulated pod log endpoint takes ``sinceTime``, ``timestamps``, ``tailLines`` and ``limitBytes``
as the Kubernetes API server does, and refuses what it refuses (kubernetes v1.34 series:
``ValidatePodLogOptions`` in pkg/apis/core/validation/validation.go, ``LogLocation`` in
pkg/registry/core/pod/strategy.go, ``logWriter.write`` in pkg/kubelet/kuberuntime/logs/logs.go)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from airflow_jobs_sim.errors import ApiError
from airflow_jobs_sim.log_options import parse_log_options
from kubernetes import client

from airflow_jobs_plugin.cluster.kube import KubeClient, KubeError


@pytest.mark.parametrize(
    ("query", "status", "message"),
    [
        (
            {"tailLines": "-1"},
            422,
            'PodLogOptions "p" is invalid: tailLines: Invalid value: -1: must be greater than or equal to 0',
        ),
        (
            {"limitBytes": "0"},
            422,
            'PodLogOptions "p" is invalid: limitBytes: Invalid value: 0: must be greater than 0',
        ),
        (
            {"sinceSeconds": "0"},
            422,
            'PodLogOptions "p" is invalid: sinceSeconds: Invalid value: 0: must be greater than 0',
        ),
        (
            {"sinceSeconds": "10", "sinceTime": "2026-01-01T00:00:00Z"},
            422,
            'PodLogOptions "p" is invalid: Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified',
        ),
        ({"tailLines": "x"}, 400, 'strconv.ParseInt: parsing "x": invalid syntax'),
        (
            {"sinceTime": "yesterday"},
            400,
            'parsing time "yesterday" as "2006-01-02T15:04:05Z07:00": cannot parse',
        ),
        ({"sinceTime": "2026-01-01 00:00:00"}, 400, None),
    ],
)
def test_log_options_the_api_server_refuses_are_refused(query, status, message):
    with pytest.raises(ApiError) as exc:
        parse_log_options(query, "p")
    assert exc.value.code == status
    if message is not None:
        assert exc.value.message == message


def test_since_time_reaches_the_kubelet_in_whole_seconds():
    options = parse_log_options({"sinceTime": "2026-01-01T10:00:05.900Z"}, "p")
    assert options.since == datetime(2026, 1, 1, 10, 0, 5, tzinfo=timezone.utc)
    shifted = parse_log_options({"sinceTime": "2026-01-01T12:00:05+02:00"}, "p")
    assert shifted.since == options.since


@pytest.fixture
def core(sync_client):
    return client.CoreV1Api(sync_client)


@pytest.fixture
async def kube(sim):
    # The product's own client: the sync kubernetes client has no sinceTime argument.
    kube = await KubeClient.from_kubeconfig(sim.kubeconfig_path)
    yield kube
    await kube.close()


async def test_since_time_keeps_the_lines_of_its_whole_second_with_their_timestamps(
    sim, kube, core, namespace, manifests, monkeypatch
):
    core.create_namespaced_pod(namespace, manifests.pod("stamped", nodeName="sim-node-0"))
    times = iter(
        datetime(2026, 1, 1, 10, 0, s, us, tzinfo=timezone.utc)
        for s, us in ((4, 900_000), (5, 100_000), (5, 700_000), (6, 0))
    )
    monkeypatch.setattr(sim.logs, "_now", lambda: next(times))
    for text in ("a", "b", "c", "d"):
        sim.logs.append(namespace, "stamped", "main", text)
    # The fraction of sinceTime is dropped: .7 reads from 10:00:05, so "b" (at .1) comes back too.
    body = await kube.read_log(
        namespace, "stamped", since_time="2026-01-01T10:00:05.700000Z", timestamps=True
    )
    assert body == (
        "2026-01-01T10:00:05.100000000Z b\n"
        "2026-01-01T10:00:05.700000000Z c\n"
        "2026-01-01T10:00:06.000000000Z d\n"
    )


async def test_since_time_with_since_seconds_is_refused_over_http(kube, core, namespace, manifests):
    core.create_namespaced_pod(namespace, manifests.pod("both", nodeName="sim-node-0"))
    with pytest.raises(KubeError) as exc:
        await kube.read_log(namespace, "both", since_seconds=5, since_time="2026-01-01T00:00:00Z")
    assert exc.value.status == 422
