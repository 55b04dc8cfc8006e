"""The attempts a job's page shows are those of its own task try: the jobs carrying its task key and
try labels and named as its attempts (``<base>-a<N>``). A job under the same labels by another name (a
copy of the manifest) is not one, and its pods are not read."""

from __future__ import annotations

import asyncio

from airflow_jobs_plugin.cluster.kube import JOBS
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.readmodel import inspect


def job(name: str) -> dict:
    return {
        "kind": "Job",
        "apiVersion": "batch/v1",
        "metadata": {
            "name": name,
            "namespace": "ml-team",
            "uid": f"uid-{name}",
            "labels": {labels.TASK_KEY: "k-1", labels.TRY: "1"},
        },
    }


def test_only_jobs_named_as_attempts_of_the_same_try_are_its_attempts(monkeypatch):
    listed = [job("train-a1"), job("train-a2"), job("copy-of-train-a1"), job("train-extra-a1")]
    asked: list[tuple[str, str | None]] = []

    async def items(client, resource, namespace, selector=None, **kwargs):
        asked.append((resource.plural, selector))
        assert resource is JOBS
        return listed

    monkeypatch.setattr(inspect, "_items", items)
    found = asyncio.run(inspect.attempts_of(None, "ml-team", job("train-a2")))  # type: ignore[arg-type]
    assert [j["metadata"]["name"] for j in found] == ["train-a1", "train-a2"]
    assert asked == [("jobs", f"{labels.TASK_KEY}=k-1,{labels.TRY}=1")]
