"""The rules of one read in flight per question (cluster/single_flight.py), against a counting fake read
held open by the test: no timing, only who asked and what each caller got."""

from __future__ import annotations

import asyncio

import pytest

from airflow_jobs_plugin.cluster.single_flight import SingleFlight


class _HeldRead:
    """A read that counts its calls and answers only when the test lets it."""

    def __init__(self) -> None:
        self.calls = 0
        self.release = asyncio.Event()
        self.fail_next = False

    async def __call__(self) -> str:
        self.calls += 1
        failing = self.fail_next
        self.fail_next = False
        await self.release.wait()
        if failing:
            raise RuntimeError("the API server said no")
        return f"answer {self.calls}"


async def _settle() -> None:
    # Let every started task run to its first await: the callers have all asked.
    for _ in range(5):
        await asyncio.sleep(0)


async def test_callers_asking_while_a_read_is_in_flight_share_that_one_read():
    flights: SingleFlight[str] = SingleFlight("probe")
    read = _HeldRead()
    callers = [asyncio.ensure_future(flights.run("q", read)) for _ in range(200)]
    await _settle()
    read.release.set()
    answers = await asyncio.gather(*callers)
    assert read.calls == 1 and flights.started == 1
    assert set(answers) == {"answer 1"}
    assert not flights.in_flight("q")


async def test_different_questions_fly_separately():
    flights: SingleFlight[str] = SingleFlight("probe")
    read = _HeldRead()
    read.release.set()
    await asyncio.gather(flights.run("a", read), flights.run("b", read), flights.run("a", read))
    assert read.calls == 2


async def test_a_failed_read_reaches_every_waiter_and_is_not_kept_the_next_caller_reads_again():
    flights: SingleFlight[str] = SingleFlight("probe")
    read = _HeldRead()
    read.fail_next = True
    callers = [asyncio.ensure_future(flights.run("q", read)) for _ in range(10)]
    await _settle()
    read.release.set()
    results = await asyncio.gather(*callers, return_exceptions=True)
    assert read.calls == 1
    assert all(isinstance(r, RuntimeError) for r in results)
    assert await flights.run("q", read) == "answer 2"
    assert read.calls == 2


async def test_a_cancelled_caller_does_not_cancel_the_read_for_the_others():
    flights: SingleFlight[str] = SingleFlight("probe")
    read = _HeldRead()
    first = asyncio.ensure_future(flights.run("q", read))  # the caller that starts the read
    others = [asyncio.ensure_future(flights.run("q", read)) for _ in range(5)]
    await _settle()
    first.cancel()
    await _settle()
    assert flights.in_flight("q")
    read.release.set()
    assert await asyncio.gather(*others) == ["answer 1"] * 5
    with pytest.raises(asyncio.CancelledError):
        await first
    assert read.calls == 1


async def test_a_read_every_caller_left_still_lands_and_its_failure_is_logged_by_no_one(caplog):
    flights: SingleFlight[str] = SingleFlight("probe")
    read = _HeldRead()
    read.fail_next = True
    caller = asyncio.ensure_future(flights.run("q", read))
    await _settle()
    caller.cancel()
    read.release.set()
    await _settle()
    assert not flights.in_flight("q")
    assert "never retrieved" not in caplog.text
