"""Several namespaces at once: the overview and ``airflow-jobs status`` read every namespace configured
(``[airflow_jobs] namespaces``) or given (``--namespace`` repeated or a comma list) and merge them."""

from __future__ import annotations

import asyncio
import json

import pytest

from airflow_jobs_plugin.airflow import cli
from airflow_jobs_plugin.cluster.kube import JOBS, KubeClient, Resource
from airflow_jobs_plugin.jobs.spec import TaskIdentity
from airflow_jobs_plugin.readmodel.inspect import Target, read_cluster
from airflow_jobs_plugin.readmodel.views import overview
from tests.ui.conftest import _manifest

OTHER = "team-b"
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)


@pytest.fixture(scope="module")
def second_namespace(population):
    """A queued job of a group the policy does not know, in a namespace of its own."""
    identity = TaskIdentity("team_b_training", "train", "manual__2026-01-01", -1, 1)
    body = _manifest(identity, {"*": {"run": None}}, group="research", user="zoe", gpus=1, namespace=OTHER)

    async def with_client(work):
        client = await KubeClient.from_kubeconfig(population.kubeconfig)
        try:
            return await work(client)
        finally:
            await client.close()

    async def create(client):
        await client.create(NAMESPACES, None, {"metadata": {"name": OTHER}})
        await client.create(JOBS, OTHER, body)

    asyncio.run(with_client(create))
    yield body["metadata"]["name"]
    asyncio.run(with_client(lambda client: client.delete(JOBS, OTHER, body["metadata"]["name"])))


def test_read_cluster_merges_every_namespace_of_the_target(population, second_namespace):
    async def read(target):
        client = await KubeClient.from_kubeconfig(population.kubeconfig)
        try:
            return overview(await read_cluster(client, target))
        finally:
            await client.close()

    both = asyncio.run(read(Target(namespace="default", also=(OTHER,))))
    alone = asyncio.run(read(Target(namespace="default")))
    rows = {(r.namespace, r.name): r for r in both.jobs}
    assert rows[(OTHER, second_namespace)].state == "QUEUED"
    assert population.names["runner"] in {name for ns, name in rows if ns == "default"}
    assert {(r.namespace, r.name) for r in alone.jobs} == set(rows) - {(OTHER, second_namespace)}
    queue = {q.group: q for q in both.queues}["research"]
    assert [(e.namespace, e.name, e.reason) for e in queue.entries] == [
        (OTHER, second_namespace, "Inadmissible")
    ]


@pytest.mark.parametrize("flags", [["-n", "default", "-n", OTHER], ["--namespace", f"default,{OTHER}"]])
def test_status_reads_the_namespaces_given(population, second_namespace, capsys, flags):
    code = cli.main(["status", "--kubeconfig", population.kubeconfig, "--json", *flags])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    spaces = {(j["namespace"], j["name"]) for j in data["jobs"]}
    assert (OTHER, second_namespace) in spaces
    assert ("default", population.names["runner"]) in spaces


def test_status_filters_and_pages(population, second_namespace, capsys):
    code = cli.main(
        [
            "status",
            "--kubeconfig",
            population.kubeconfig,
            "-n",
            f"default,{OTHER}",
            "--state",
            "queued",
            "--json",
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert sorted(j["name"] for j in data["jobs"]) == sorted([population.names["waiting"], second_namespace])
    cli.main(["status", "--kubeconfig", population.kubeconfig, "-n", "default", "--json"])
    total = json.loads(capsys.readouterr().out)["jobs_total"]
    code = cli.main(
        ["status", "--kubeconfig", population.kubeconfig, "-n", "default", "--sort", "name", "--limit", "1"]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert total > 1
    assert out.rstrip().endswith(
        f"jobs 1-1 of {total} shown (--limit, --offset, --state, --group, --user, --dag choose others)"
    )


def test_status_refuses_an_unknown_state_naming_it(population, capsys):
    code = cli.main(["status", "--kubeconfig", population.kubeconfig, "--state", "DONE"])
    assert code == 2
    assert "state: DONE is not a job state" in capsys.readouterr().err


def test_lists_read_in_chunks_hold_every_object_once(population, monkeypatch):
    from airflow_jobs_plugin.readmodel import inspect

    async def read():
        client = await KubeClient.from_kubeconfig(population.kubeconfig)
        try:
            return await read_cluster(client, Target(namespace="default"))
        finally:
            await client.close()

    whole = asyncio.run(read())
    monkeypatch.setattr(inspect, "LIST_CHUNK", 2)
    chunked = asyncio.run(read())
    assert len(whole.pods) > 2 and len(whole.jobs) > 2

    def names(objs):
        return sorted(o["metadata"]["name"] for o in objs)

    assert names(chunked.jobs) == names(whole.jobs)
    assert names(chunked.pods) == names(whole.pods)
