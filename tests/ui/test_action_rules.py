"""When cancel, stop and resume apply, and the one line a user gets when they do not."""

from __future__ import annotations

import pytest

from airflow_jobs_plugin.jobs.action_rules import Action, JobFacts, available, facts_of, refusal
from airflow_jobs_plugin.plugin import origin

RUNNING = JobFacts(kind="Job", name="train", finished=False, deleting=False, suspended=False)
QUEUED = JobFacts(kind="Job", name="train", finished=False, deleting=False, suspended=True)
STOPPED = JobFacts(
    kind="MPIJob",
    name="dist",
    finished=False,
    deleting=False,
    suspended=True,
    stopped_by="alice",
    stopped_at="2026-03-02T09:00:00+00:00",
)
CANCELLED = JobFacts(
    kind="Job",
    name="train",
    finished=True,
    deleting=False,
    suspended=True,
    verdict="Cancelled",
    cancelled_by="bob",
    cancelled_at="2026-03-02 09:05:00 UTC",
)
SUCCEEDED = JobFacts(kind="Job", name="train", finished=True, deleting=False, suspended=False)
TIMED_OUT = JobFacts(
    kind="Job", name="train", finished=True, deleting=False, suspended=True, verdict="QueueTimeout"
)
DELETING = JobFacts(kind="Job", name="train", finished=False, deleting=True, suspended=False)


@pytest.mark.parametrize(
    ("job", "actions"),
    [
        (RUNNING, ("stop", "cancel")),
        (QUEUED, ("stop", "cancel")),
        (STOPPED, ("resume", "cancel")),
        (CANCELLED, ()),
        (SUCCEEDED, ()),
        (TIMED_OUT, ()),
        (DELETING, ()),
    ],
)
def test_the_actions_a_job_offers_follow_its_state(job, actions):
    assert tuple(a.value for a in available(job)) == actions


@pytest.mark.parametrize(
    ("action", "job", "answer"),
    [
        (Action.CANCEL, CANCELLED, "job/train was already cancelled by bob at 2026-03-02 09:05:00 UTC"),
        (Action.STOP, CANCELLED, "job/train was already cancelled by bob at 2026-03-02 09:05:00 UTC"),
        (Action.CANCEL, SUCCEEDED, "job/train already finished: nothing to cancel"),
        (Action.RESUME, TIMED_OUT, "job/train already finished (QueueTimeout): nothing to resume"),
        (
            Action.STOP,
            STOPPED,
            "mpijob/dist is already stopped by alice at 2026-03-02 09:00:00 UTC; "
            "resume puts it back in its queue",
        ),
        (Action.RESUME, RUNNING, "job/train is not stopped (admitted and holds its GPUs): nothing to resume"),
        (Action.RESUME, QUEUED, "job/train is not stopped (waiting in its queue): nothing to resume"),
        (Action.CANCEL, DELETING, "job/train is already being deleted: nothing to cancel"),
    ],
)
def test_an_action_that_does_not_apply_says_why_in_one_line(action, job, answer):
    assert refusal(action, job) == answer


def test_facts_of_read_suspend_where_each_kind_keeps_it():
    mpi = {"kind": "MPIJob", "metadata": {"name": "d"}, "spec": {"runPolicy": {"suspend": True}}}
    job = {"kind": "Job", "metadata": {"name": "j"}, "spec": {"suspend": False}}
    assert facts_of(mpi, finished=False).suspended
    assert not facts_of(job, finished=False).suspended
    assert facts_of(mpi, finished=False).ref == "mpijob/d"


# --- the cross-origin guard of cookie-authenticated POSTs ----------------------------------------

# As origin.own_site gives it behind a trusted proxy: the Host and the forwarded host, no base_url.
OWN = origin.OwnSite(("http://airflow.example:8080", "https://airflow.corp.example"))


@pytest.mark.parametrize(
    ("origin_header", "referer"),
    [
        ("http://airflow.example:8080", None),
        ("HTTP://Airflow.Example:8080", None),
        ("https://airflow.corp.example:443", None),
        (None, "https://airflow.corp.example/airflow-jobs/jobs/default/x"),
    ],
)
def test_a_post_from_this_airflows_own_pages_is_accepted(origin_header, referer):
    assert origin.refusal(origin_header, referer, OWN) is None


@pytest.mark.parametrize(
    ("origin_header", "referer", "why"),
    [
        ("https://evil.example", None, "Origin https://evil.example is not this Airflow"),
        ("http://airflow.example:9999", None, "Origin http://airflow.example:9999 is not this Airflow"),
        ("http://airflow.example:8080.evil.example", None, "is not this Airflow"),
        ("null", "http://airflow.example:8080/", "has no origin (Origin: null)"),
        (None, "https://evil.example/page", "Referer https://evil.example is not this Airflow"),
        (None, None, "no Origin or Referer header"),
    ],
)
def test_a_post_from_anywhere_else_is_refused_with_the_reason(origin_header, referer, why):
    answer = origin.refusal(origin_header, referer, OWN)
    assert answer is not None and why in answer
