"""A job's page and ``airflow-jobs describe`` tell its history as it happened: each run, each stop,
resume and cancel, and who did it, even after the pods that showed a run are gone.

The scenarios run on the simulated cluster through the functions the page and the CLI call (stop,
resume, cancel, then the job page's model and the describe text), with the quota pool's admission
passes run by hand where a triggerer would run them.
"""

from __future__ import annotations

import asyncio

import pytest
from airflow_jobs_sim import ClusterConfig, SimCluster

from airflow_jobs_plugin.jobs import history, labels
from airflow_jobs_plugin.lifecycle import snapshot, tracking
from airflow_jobs_plugin.plugin import html
from airflow_jobs_plugin.queueing.quota.ledger_model import UNSUSPEND_GRACE
from airflow_jobs_plugin.readmodel import text
from airflow_jobs_plugin.readmodel.inspect import cancel, read_job, resume, stop
from airflow_jobs_plugin.readmodel.views import JobDetail, job_detail

from .test_actions import QUOTA, Cluster, manifest, scenario, until


@pytest.fixture
def cluster():
    # The tests drive the quota pool's passes themselves (Cluster.admit): no admission controller.
    with SimCluster(ClusterConfig(nodes=2, gpus_per_node=8, time_scale=0.02)) as sim:
        yield sim


async def detail(c: Cluster, name: str) -> JobDetail:
    state, job = await read_job(c.client, c.target, name)
    return job_detail(state, job)


async def running(c: Cluster, name: str) -> None:
    async def runs() -> bool:
        return (await detail(c, name)).job.state == "RUNNING"

    await until(runs)


async def pods_gone(c: Cluster, name: str) -> None:
    async def gone() -> bool:
        return not await c.all_pods(name)

    await until(gone)


def test_a_job_cancelled_while_running_shows_that_it_ran_and_who_cancelled_it(cluster):
    async def body(c: Cluster) -> None:
        name = await c.create(manifest("cancelled"))
        await c.admit()
        await running(c, name)
        started = (await detail(c, name)).snapshot.started_at
        assert started is not None

        assert not (await cancel(c.client, QUOTA, name, by="alice")).already_finished
        await pods_gone(c, name)

        async def cancelled() -> JobDetail | None:
            d = await detail(c, name)
            return d if d.job.state == "CANCELLED" else None

        d = await until(cancelled)
        assert isinstance(d, JobDetail)
        assert [p.state for p in d.phases] == ["QUEUED", "SCHEDULING", "RUNNING", "CANCELLED"]
        labels_seen = [e.label for e in d.timeline]
        ours = [label for label in labels_seen if label.isupper()]
        assert ours == ["QUEUED", "ADMITTED", "STARTED", "CANCELLED"], labels_seen
        assert d.timeline[-1].detail.startswith("cancelled by alice (ran;")
        # How the product ends a Job (its one-second deadline) is not what happened to it.
        assert not any(e.label.startswith(("FailureTarget", "Failed")) for e in d.timeline), labels_seen
        assert not any("DeadlineExceeded" in e.detail for e in d.timeline)
        (attempt,) = d.attempts
        assert attempt.started_at == started
        assert attempt.gpu_seconds > 0
        described = text.describe_text(d)
        assert f"{started:%Y-%m-%d %H:%M:%S}Z  STARTED" in described
        assert "CANCELLED  cancelled by alice" in described
        page = html.job_page(d)
        assert "no pod has started yet" not in page
        assert "its pods are gone, and their logs with them" in page

    scenario(QUOTA, body, cluster)


def test_a_stopped_resumed_then_cancelled_job_shows_each_run_stop_resume_and_cancel(cluster):
    async def body(c: Cluster) -> None:
        name = await c.create(manifest("twice"))
        await c.admit()
        await running(c, name)
        first_start = (await detail(c, name)).snapshot.started_at

        assert (await stop(c.client, QUOTA, name, by="alice")).done
        await pods_gone(c, name)
        await c.admit()  # frees the stopped job's GPUs
        assert (await resume(c.client, QUOTA, name, by="bob")).done
        await c.admit()
        await running(c, name)
        second_start = (await detail(c, name)).snapshot.started_at
        assert (await cancel(c.client, QUOTA, name, by="carol")).message

        async def cancelled() -> JobDetail | None:
            d = await detail(c, name)
            return d if d.job.state == "CANCELLED" else None

        d = await until(cancelled)
        assert isinstance(d, JobDetail)
        assert [(p.state, p.detail) for p in d.phases] == [
            ("QUEUED", "waiting for quota"),
            ("SCHEDULING", "admitted with 4 GPU(s)"),
            ("RUNNING", "first container started"),
            ("STOPPED", "stopped by alice"),
            ("QUEUED", "resumed by bob; waiting for quota"),
            ("SCHEDULING", "admitted with 4 GPU(s)"),
            ("RUNNING", "first container started"),
            ("CANCELLED", "cancelled by carol"),
        ]
        assert [e.label for e in d.timeline if e.label in ("STARTED", "STOPPED", "RESUMED", "CANCELLED")] == [
            "STARTED",
            "STOPPED",
            "RESUMED",
            "STARTED",
            "CANCELLED",
        ]
        starts = [e.at for e in d.timeline if e.label == "STARTED"]
        assert starts == [first_start, second_start]
        (attempt,) = d.attempts
        assert attempt.started_at == first_start
        # Both runs' GPU-seconds: the first as the stop recorded it, the second up to the cancel.
        job = await c.job(name)
        first, _, last = history.entries(job["metadata"]["annotations"])
        assert first.run is not None and first.run.started_at == first_start
        assert last.run is not None and last.run.started_at == second_start
        first_run = first.run.gpu_seconds(first.at)
        assert first_run > 0
        assert attempt.gpu_seconds > first_run


def test_a_resumed_job_says_who_resumed_it_while_it_waits(cluster):
    async def body(c: Cluster) -> None:
        name = await c.create(manifest("waits"))
        await c.admit()
        await running(c, name)
        assert (await stop(c.client, QUOTA, name, by="alice")).done
        await pods_gone(c, name)
        await c.admit()
        assert (await resume(c.client, QUOTA, name, by="bob")).done
        # No pass has looked at it since: the job says who put it back, not that it was created so.
        state, job = await read_job(c.client, c.target, name)
        snap = snapshot(job, (), (), now=state.now)
        assert snap.state.value == "QUEUED"
        assert snap.message.startswith("resumed by bob at ")
        assert "created suspended" not in snap.message
        # The line the task's trigger writes into the task log on this change.
        assert "resumed by bob at " in tracking.state_line(snap)

    scenario(QUOTA, body, cluster)


def test_a_resume_after_the_stopped_pods_are_gone_does_not_say_they_are_stopping(cluster):
    async def body(c: Cluster) -> None:
        name = await c.create(manifest("late"))
        await c.admit()
        await running(c, name)
        assert (await stop(c.client, QUOTA, name, by="alice")).done
        await pods_gone(c, name)
        # No admission pass ran since the stop: the ledger still holds the run's GPUs.
        again = await resume(c.client, QUOTA, name, by="alice")
        assert again.message == (
            f"job/{name} resumed: it still holds its GPUs (its stopped pods are gone, but no admission "
            "pass has freed them since), so it starts again without queueing"
        )
        await asyncio.sleep(UNSUSPEND_GRACE.total_seconds() + 0.1)
        await c.admit()
        await running(c, name)

    scenario(QUOTA, body, cluster)


def test_a_resume_after_the_pool_freed_the_gpus_says_it_is_back_in_its_queue(cluster):
    async def body(c: Cluster) -> None:
        name = await c.create(manifest("freed"))
        other = await c.create(manifest("other", user="bob"))
        await c.admit()
        await running(c, name)
        assert (await stop(c.client, QUOTA, name, by="alice")).done
        await pods_gone(c, name)
        await c.admit()  # frees the GPUs and gives them to the other job
        await running(c, other)
        again = await resume(c.client, QUOTA, name, by="alice")
        assert "back in group vision's queue at its original position" in again.message
        assert "holds its GPUs" not in again.message
        job = await c.job(name)
        acts = [e.act for e in history.entries(job["metadata"]["annotations"])]
        assert acts == [history.Act.STOPPED, history.Act.RESUMED]
        assert labels.STOPPED_BY not in job["metadata"]["annotations"]

    scenario(QUOTA, body, cluster)


def test_facts_of_one_second_are_told_in_the_order_the_job_lived_them():
    """Two runs in one second: the product's times carry microseconds, Kubernetes' whole seconds."""
    from airflow_jobs_plugin.readmodel import views
    from tests.lifecycle.factories import at, job_condition, job_pod, running
    from tests.ui.test_views import product_job

    def micro(seconds: float) -> str:
        return at(seconds).isoformat().replace("+00:00", "Z")

    stop = history.Entry(history.Act.STOPPED, at(0.4), "alice", history.Run(at(0.1), at(0), None, 1))
    resume = history.Entry(history.Act.RESUMED, at(0.5), "bob")
    annotations: dict[str, str] = {}
    for entry in (stop, resume):
        annotations[labels.HISTORY] = history.appended(annotations, entry)
    job = product_job(
        "f",
        "bob",
        1,
        queued_s=0.05,
        suspend=False,
        annotations={**annotations, labels.ADMITTED_AT: micro(0.7)},
        conditions=[job_condition("Suspended", "JobResumed", "Job resumed", status="False", at_s=0)],
    )
    pod = job_pod("f", statuses=[running("main", since=0)])
    found = views.timeline(job, snapshot(job, [pod], (), now=at(5)))
    assert [e.label for e in found] == [
        "QUEUED",
        "ADMITTED",
        "STARTED",
        "STOPPED",
        "RESUMED",
        "ADMITTED",
        "Suspended=False",
        "STARTED",
    ]


def test_a_run_cancelled_in_a_later_second_than_it_started_is_told_after_the_pool_let_it_go():
    """The pool releases a cancelled job's reservation, and with it the admission the page reads; the
    run is then known from its start, which came before the cancel (in an earlier second when the cancel
    came a moment later) and after the resume. Its pods gone, the cancel's record gives the start."""
    from airflow_jobs_plugin.readmodel import views
    from tests.lifecycle.factories import at
    from tests.ui.test_views import product_job

    stop = history.Entry(history.Act.STOPPED, at(1.4), "bob", history.Run(at(0.5), at(1), None, 2))
    resume = history.Entry(history.Act.RESUMED, at(1.6), "bob")
    cancel = history.Entry(history.Act.CANCELLED, at(3.1), "bob", history.Run(at(2.7), at(2), None, 2))
    annotations: dict[str, str] = {}
    for entry in (stop, resume, cancel):
        annotations[labels.HISTORY] = history.appended(annotations, entry)
    job = product_job("c", "bob", 2, queued_s=0.2, suspend=False, annotations=annotations)
    snap = snapshot(job, [], (), now=at(5))  # no pods left, no reservation kept
    assert snap.admitted_at is None
    found = [e.label for e in views.timeline(job, snap)]
    assert [label for label in found if label in ("STARTED", "STOPPED", "RESUMED", "CANCELLED")] == [
        "STARTED",
        "STOPPED",
        "RESUMED",
        "STARTED",
        "CANCELLED",
    ], found
