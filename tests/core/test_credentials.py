"""When a connection's credentials are renewed: the pure rules of ``cluster/credentials.py``, then the client's
``Credentials`` applying them with a fake clock and a counting source."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest

from airflow_jobs_plugin.cluster.credentials import (
    Credential,
    Kind,
    Verdict,
    after_unauthorized,
    due,
    expiry_of,
    refused_message,
    renew_at,
)
from airflow_jobs_plugin.cluster.kube import Credentials, KubeError

T0 = datetime(2026, 11, 23, 12, 0, tzinfo=timezone.utc)


def exec_token(lifetime: timedelta, generation: int = 0, obtained_at: datetime = T0) -> Credential:
    return Credential(Kind.EXEC, "Bearer x", obtained_at, obtained_at + lifetime, generation)


# --- renewing ahead of expiry ---


@pytest.mark.parametrize(
    ("lifetime", "renewed_before_expiry"),
    [
        (timedelta(seconds=10), timedelta(seconds=2.5)),  # a quarter of a short lifetime
        (timedelta(minutes=15), timedelta(minutes=3, seconds=45)),  # EKS: a 15-minute token
        (timedelta(hours=1), timedelta(minutes=5)),  # GKE: never more than five minutes early
    ],
)
def test_an_exec_token_is_renewed_a_quarter_of_its_life_early_but_at_most_five_minutes(
    lifetime, renewed_before_expiry
):
    credential = exec_token(lifetime)
    assert renew_at(credential) == T0 + lifetime - renewed_before_expiry
    assert not due(credential, T0 + lifetime - renewed_before_expiry - timedelta(milliseconds=1))
    assert due(credential, T0 + lifetime - renewed_before_expiry)


def test_an_exec_token_without_expiry_is_renewed_only_when_refused():
    credential = Credential(Kind.EXEC, "Bearer x", T0, expiry_of(Kind.EXEC, T0, None))
    assert credential.expires_at is None
    assert not due(credential, T0 + timedelta(days=30))


def test_a_token_file_is_reread_every_minute_ten_seconds_early_as_client_go_does():
    credential = Credential(Kind.TOKEN_FILE, "Bearer x", T0, expiry_of(Kind.TOKEN_FILE, T0, None))
    assert credential.expires_at == T0 + timedelta(minutes=1)
    assert not due(credential, T0 + timedelta(seconds=49))
    assert due(credential, T0 + timedelta(seconds=50))


def test_a_token_file_ignores_any_reported_expiry():
    assert expiry_of(Kind.TOKEN_FILE, T0, T0 + timedelta(hours=1)) == T0 + timedelta(minutes=1)


def test_a_client_certificate_or_static_token_is_never_renewed_by_the_clock():
    credential = Credential(Kind.STATIC, None, T0, expiry_of(Kind.STATIC, T0, T0 + timedelta(seconds=1)))
    assert not due(credential, T0 + timedelta(days=365))


def test_an_already_expired_token_is_due():
    assert due(exec_token(timedelta(seconds=10)), T0 + timedelta(minutes=1))


# --- after a 401 ---


def test_a_refused_request_renews_a_credential_that_is_not_brand_new():
    used = exec_token(timedelta(minutes=15))
    assert after_unauthorized(used, used, retried=False, now=T0 + timedelta(seconds=5)) is Verdict.RENEW


def test_a_refused_request_resends_when_someone_renewed_meanwhile():
    used = exec_token(timedelta(minutes=15))
    current = exec_token(timedelta(minutes=15), generation=1, obtained_at=T0 + timedelta(seconds=4))
    now = T0 + timedelta(seconds=4, milliseconds=10)
    assert after_unauthorized(used, current, retried=False, now=now) is Verdict.RESEND


def test_a_request_refused_again_after_its_retry_gives_up():
    used = exec_token(timedelta(minutes=15), generation=1)
    later = T0 + timedelta(minutes=1)
    assert after_unauthorized(used, used, retried=True, now=later) is Verdict.GIVE_UP


def test_a_credential_refused_within_a_second_of_being_obtained_is_not_renewed_again():
    fresh = exec_token(timedelta(minutes=15), generation=3)
    now = T0 + timedelta(milliseconds=300)
    assert after_unauthorized(fresh, fresh, retried=False, now=now) is Verdict.GIVE_UP


def test_a_young_credential_refused_past_its_expiry_is_renewed():
    # A slow plugin handed out a token with half a second to live; the request arrived after it died.
    dying = Credential(Kind.EXEC, "Bearer x", T0, T0 + timedelta(milliseconds=500), generation=2)
    now = T0 + timedelta(milliseconds=700)
    assert after_unauthorized(dying, dying, retried=False, now=now) is Verdict.RENEW


def test_the_refusal_names_the_connection_and_the_remedy_but_never_the_token():
    credential = Credential(Kind.EXEC, "Bearer s3cr3t-token", T0, T0 + timedelta(minutes=15))
    text = refused_message("connection 'kubernetes_default'", credential, "Unauthorized")
    assert "connection 'kubernetes_default'" in text
    assert "exec plugin" in text and "valid until 2026-11-23T12:15:00+00:00" in text
    assert "s3cr3t" not in text and "s3cr3t" not in repr(credential)


# --- the client's Credentials, with a fake clock ---


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


class Source:
    """An exec plugin that mints numbered 10-second tokens, optionally failing or slow."""

    def __init__(self, clock: Clock, lifetime: float = 10.0) -> None:
        self.clock = clock
        self.lifetime = lifetime
        self.runs = 0
        self.fail: Exception | None = None
        self.gate: asyncio.Event | None = None

    async def __call__(self):
        self.runs += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        return Kind.EXEC, f"Bearer token-{self.runs}", self.clock() + timedelta(seconds=self.lifetime)


async def started(clock: Clock, source: Source) -> Credentials:
    return await Credentials.start("connection 'k8s'", source, clock)


async def test_a_token_in_its_last_quarter_is_renewed_before_the_next_request():
    clock = Clock()
    source = Source(clock)
    creds = await started(clock, source)
    clock.advance(seconds=7)
    assert (await creds.current()).header == "Bearer token-1"
    clock.advance(seconds=0.5)
    renewed = await creds.current()
    assert renewed.header == "Bearer token-2" and renewed.generation == 1
    assert source.runs == 2


async def test_many_requests_due_at_once_run_the_plugin_once():
    clock = Clock()
    source = Source(clock)
    creds = await started(clock, source)
    clock.advance(seconds=9)
    source.gate = asyncio.Event()
    waiting = [asyncio.create_task(creds.current()) for _ in range(50)]
    await asyncio.sleep(0)
    source.gate.set()
    results = await asyncio.gather(*waiting)
    assert {c.header for c in results} == {"Bearer token-2"}
    assert source.runs == 2


async def test_many_requests_refused_at_once_renew_once_and_all_resend():
    clock = Clock()
    source = Source(clock)
    creds = await started(clock, source)
    used = creds.credential
    clock.advance(seconds=3)  # revoked early, long before its expiry
    resent = await asyncio.gather(
        *(creds.refused(used, retried=False, server_message="Unauthorized") for _ in range(20))
    )
    assert {c.header for c in resent} == {"Bearer token-2"}
    assert source.runs == 2 and creds.renewals == 1


async def test_a_renewed_credential_refused_again_is_an_error_naming_the_connection():
    clock = Clock()
    source = Source(clock)
    creds = await started(clock, source)
    clock.advance(seconds=3)
    renewed = await creds.refused(creds.credential, retried=False, server_message="Unauthorized")
    with pytest.raises(KubeError) as caught:
        await creds.refused(renewed, retried=True, server_message="Unauthorized")
    assert caught.value.status == 401
    assert "connection 'k8s'" in caught.value.message and "refused freshly obtained" in caught.value.message
    assert not caught.value.transient


async def test_a_plugin_failing_before_expiry_keeps_the_current_token():
    clock = Clock()
    source = Source(clock)
    creds = await started(clock, source)
    clock.advance(seconds=8)
    source.fail = RuntimeError("exec: process returned 1")
    assert (await creds.current()).header == "Bearer token-1"


async def test_a_plugin_failing_before_expiry_is_not_run_again_for_every_request():
    clock = Clock()
    source = Source(clock)
    creds = await started(clock, source)
    clock.advance(seconds=8)
    source.fail = RuntimeError("exec: process returned 1")
    for _ in range(20):
        assert (await creds.current()).header == "Bearer token-1"
    assert source.runs == 2
    clock.advance(seconds=1)
    source.fail = None
    assert (await creds.current()).header == "Bearer token-3"


async def test_a_plugin_failing_after_expiry_is_a_transient_error_naming_the_connection():
    clock = Clock()
    source = Source(clock)
    creds = await started(clock, source)
    clock.advance(seconds=11)
    source.fail = RuntimeError("exec: process returned 1")
    with pytest.raises(KubeError) as caught:
        await creds.current()
    assert caught.value.transient and "connection 'k8s'" in caught.value.message
    source.fail = None
    assert (await creds.current()).header == f"Bearer token-{source.runs}"


def test_a_renewed_credential_that_expired_in_flight_is_renewed_again_not_given_up():
    # A process starved for longer than a short-lived token lives: the server refused it for being
    # expired, not for what it is.
    renewed = Credential(Kind.EXEC, "Bearer b", T0, T0 + timedelta(seconds=4), 1)
    assert after_unauthorized(renewed, renewed, retried=True, now=T0 + timedelta(seconds=5)) is Verdict.RENEW
    assert (
        after_unauthorized(renewed, renewed, retried=True, now=T0 + timedelta(seconds=3)) is Verdict.GIVE_UP
    )
    minted_expired = Credential(Kind.EXEC, "Bearer c", T0, T0 - timedelta(seconds=1), 2)
    assert after_unauthorized(minted_expired, minted_expired, retried=True, now=T0) is Verdict.GIVE_UP
