"""The policy ConfigMap as the admission door reads it: absent, missing, invalid, fixed; submit checks."""

from __future__ import annotations

import asyncio
import threading

import pytest

from airflow_jobs_plugin.cluster import watch as shared
from airflow_jobs_plugin.cluster.kube import CONFIGMAPS, JOBS
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.queueing import quota
from airflow_jobs_plugin.queueing.engines.pool import Admission
from airflow_jobs_plugin.queueing.engines.unmanaged import UnmanagedEngine
from airflow_jobs_plugin.queueing.quota import ledger as ledger_io
from airflow_jobs_plugin.queueing.quota.submit_check import OverQuotaError, PolicyNotFoundError
from airflow_jobs_plugin.usecases.submission import check_group

from .conftest import NAMESPACE, annotation, create_jobs, job_body, policy_yaml, put_policy, unique, wait_for


async def admission_for(policy: str) -> Admission:
    watch = await shared.acquire("kubernetes_default", NAMESPACE)
    await watch.wait_synced(timeout=30)
    return Admission.for_watch(watch, quota_configmap=policy, quota_namespace=NAMESPACE)


async def cached(admission: Admission, job: dict) -> dict:
    """The job as the shared watch holds it (what a trigger hands to ensure)."""
    name = job["metadata"]["name"]
    return await wait_for(lambda: admission.watch.get(JOBS, name))


async def test_without_a_quota_policy_a_job_is_admitted_at_once(client):
    watch = await shared.acquire("kubernetes_default", NAMESPACE)
    await watch.wait_synced(timeout=30)
    admission = UnmanagedEngine.for_watch(watch)
    # As large as a node, far beyond any group's share: no pool limits it (one larger than any node
    # can never start and fails at once: test_quota_shell_never_fits.py).
    (job,) = await create_jobs(client, job_body(unique("any"), "ann", 8))

    assert await admission.ensure(await cached(admission, job)) is None

    current = await client.get(JOBS, NAMESPACE, job["metadata"]["name"])
    assert not ledger_io.is_suspended(current) and annotation(current, labels.ADMITTED_AT)


async def test_a_missing_policy_configmap_keeps_jobs_queued_as_inadmissible_until_it_is_created(client):
    group, name = unique("grp"), unique("policy")
    admission = await admission_for(name)
    (job,) = await create_jobs(client, job_body(group, "ann", 2))

    status = await admission.ensure(await cached(admission, job))

    assert status.reason == "Inadmissible"
    assert f"the quota policy ConfigMap {NAMESPACE}/{name} does not exist" in status.message
    assert ledger_io.is_suspended(await client.get(JOBS, NAMESPACE, job["metadata"]["name"]))

    await put_policy(client, name, policy_yaml(group))

    async def admitted():
        return annotation(await client.get(JOBS, NAMESPACE, job["metadata"]["name"]), labels.ADMITTED_AT)

    await wait_for(admitted)


async def test_an_invalid_policy_keeps_jobs_queued_with_the_policy_error_until_it_is_fixed(client):
    group, name = unique("grp"), unique("policy")
    await put_policy(client, name, f"groups:\n  {group}: {{gpus: 4, user_gpu: 2}}\n")
    admission = await admission_for(name)
    (job,) = await create_jobs(client, job_body(group, "ann", 2))

    status = await admission.ensure(await cached(admission, job))

    assert status.reason == "Inadmissible"
    assert f"groups.{group}.user_gpu: unknown key; did you mean 'user_gpus'?" in status.message

    configmap = await client.get(CONFIGMAPS, NAMESPACE, name)
    configmap["data"] = {quota.POLICY_KEY: policy_yaml(group)}
    await client.replace(CONFIGMAPS, NAMESPACE, configmap)

    async def admitted():
        return annotation(await client.get(JOBS, NAMESPACE, job["metadata"]["name"]), labels.ADMITTED_AT)

    await wait_for(admitted)


async def test_a_job_of_a_group_the_policy_does_not_know_waits_as_inadmissible(client):
    name = unique("policy")
    await put_policy(client, name, policy_yaml("vision"))
    admission = await admission_for(name)
    (job,) = await create_jobs(client, job_body("visoin", "ann", 2))

    status = await admission.ensure(await cached(admission, job))

    assert status.reason == "Inadmissible"
    assert "group 'visoin' is not in the quota policy" in status.message and "vision" in status.message


async def test_a_queued_job_reports_reason_numbers_and_position(client):
    group, name = unique("grp"), unique("policy")
    await put_policy(client, name, policy_yaml(group, gpus=4, user_gpus=4))
    admission = await admission_for(name)
    _, waiting = await create_jobs(
        client, job_body(group, "ann", 3, run=10_000, task="big"), job_body(group, "ben", 2, task="next")
    )

    status = await admission.ensure(await cached(admission, waiting))

    assert (status.reason, status.position) == ("GroupQuota", 1)
    assert status.message == f"group {group} uses 3 of 4 GPUs; this job needs 2"


CHECKS = [
    ("a known group and a job that fits", "vision", "ann", 4, None, None),
    ("an unknown group", "visoin", "ann", 1, quota.UnknownGroupError, "unknown quota group 'visoin'"),
    ("more GPUs than the user may hold", "vision", "ann", 5, OverQuotaError, "user ann may hold at most 4"),
    (
        "more GPUs than the whole group",
        "vision",
        "ann",
        9,
        OverQuotaError,
        "whole quota of group vision is 8",
    ),
    (
        "a user outside the group's members",
        "nlp",
        "ann",
        1,
        ValueError,
        "'ann' is not a member of group 'nlp'",
    ),
    ("a listed member", "nlp", "zoe", 1, None, None),
]


@pytest.mark.parametrize(
    ("case", "group", "user", "gpus", "error", "text"), CHECKS, ids=[c[0] for c in CHECKS]
)
async def test_check_group_at_submit_time(client, case, group, user, gpus, error, text):
    name = unique("policy")
    await put_policy(
        client, name, "groups:\n  vision: {gpus: 8, user_gpus: 4}\n  nlp: {gpus: 16, members: [zoe]}\n"
    )
    if error is None:
        charged = await check_group(client, name, NAMESPACE, group, user, gpus)
        assert charged is not None and (charged.key, charged.flavor, dict(charged.avoid)) == (
            "nvidia.com/gpu",
            None,
            {},
        )  # whole GPUs, no flavors in this policy
        return
    with pytest.raises(error) as raised:
        await check_group(client, name, NAMESPACE, group, user, gpus)
    assert text in str(raised.value)
    if error is quota.UnknownGroupError:
        assert "known groups: nlp, vision" in str(raised.value)


async def test_check_group_without_a_policy_configured_checks_nothing(client):
    assert await check_group(client, None, NAMESPACE, "vision", "ann", 99) is None


async def test_a_mistyped_quota_configmap_fails_at_submit_naming_the_policies_that_exist(client):
    name = unique("team-policy")
    await put_policy(client, name, policy_yaml("vision"))
    with pytest.raises(PolicyNotFoundError) as raised:
        await check_group(client, name + "x", NAMESPACE, "vision", "ann", 1)
    text = str(raised.value)
    assert text.startswith(f"quota_configmap: no ConfigMap '{name}x' in namespace {NAMESPACE}")
    assert f"did you mean {name!r}?" in text


async def test_a_policy_of_garbage_puts_one_bounded_line_in_every_waiting_jobs_status(client):
    group, name = unique("grp"), unique("policy")
    await put_policy(client, name, "groups: " + "x" * 200_000)
    admission = await admission_for(name)
    (job,) = await create_jobs(client, job_body(group, "ann", 2))

    status = await admission.ensure(await cached(admission, job))

    assert status.reason == "Inadmissible"
    assert len(status.message) < 500
    assert f"the quota policy ConfigMap {NAMESPACE}/{name} is invalid" in status.message
    assert "groups: must be a mapping of group name to group settings" in status.message


async def test_the_triggerer_loop_keeps_running_while_the_policy_is_parsed(client, monkeypatch):
    """Parsing happens in a thread: here the parse itself waits for the loop to run a callback, which
    it could never do if the parse held the loop."""
    group, name = unique("grp"), unique("policy")
    await put_policy(client, name, policy_yaml(group))
    loop, loop_ran = asyncio.get_running_loop(), threading.Event()
    parsed_while_loop_ran: list[bool] = []
    parse = quota.policy_from_configmap_data

    def slow_parse(data):
        loop.call_soon_threadsafe(loop_ran.set)
        parsed_while_loop_ran.append(loop_ran.wait(timeout=30))
        return parse(data)

    monkeypatch.setattr(quota, "policy_from_configmap_data", slow_parse)
    admission = await admission_for(name)
    (job,) = await create_jobs(client, job_body(group, "ann", 2))

    status = await admission.ensure(await cached(admission, job))

    assert status is not None and status.reason == "Admitted"
    assert parsed_while_loop_ran and all(parsed_while_loop_ran)
