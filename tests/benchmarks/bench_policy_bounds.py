"""Bad-policy benchmark: how long the triggerer spends on a policy that is garbage, huge or deeply nested,
and how long the event loop waits meanwhile.

Run: ``.venv/bin/python tests/benchmarks/bench_policy_bounds.py`` (results in docs/benchmarks.md,
"Bad policies"). For each policy it reports the parse time, the error's length, and the longest gap
between two ticks of an event loop that ticks every millisecond while ``admission._PolicySource``'s way
of parsing (``asyncio.to_thread``) reads it.
"""

from __future__ import annotations

import asyncio
import time

from airflow_jobs_plugin.queueing.quota.parse import MAX_POLICY_BYTES, PolicyError, parse_policy


def policies() -> dict[str, str]:
    one_line = "".join(f"  g{i}: {{gpus: 8, user_gpus: 4}}\n" for i in range(60_000))
    largest, n = "groups:\n", 0
    while len(largest) + len(line := f"  g{n}: {{gpus: 8}}\n") <= MAX_POLICY_BYTES:
        largest, n = largest + line, n + 1
    return {
        "1 MB of garbage": "x" * 1_000_285,
        "4 KB of nested brackets": "[" * 2_000 + "]" * 2_000,
        "60,000 groups (2 MB)": "groups:\n" + one_line,
        f"256 KiB of one-line groups ({n:,}, past MAX_GROUPS)": largest,
        "5,000 groups of two keys": "groups:\n"
        + "".join(f"  g{i}: {{gpus: 8, user_gpus: 4}}\n" for i in range(5_000)),
    }


def parse(text: str) -> str:
    try:
        parse_policy(text)
        return "valid"
    except PolicyError as exc:
        return f"PolicyError, {len(str(exc))} characters"


async def measure(text: str) -> tuple[float, float, str]:
    gaps: list[float] = []
    done = asyncio.Event()

    async def tick() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    start = time.perf_counter()
    outcome = await asyncio.to_thread(parse, text)
    elapsed = time.perf_counter() - start
    done.set()
    await ticker
    return elapsed, max(gaps, default=0.0), outcome


def main() -> None:
    print("| policy | parse | longest loop gap | outcome |")
    print("|---|---|---|---|")
    for name, text in policies().items():
        elapsed, gap, outcome = asyncio.run(measure(text))
        print(f"| {name} | {elapsed:.3f} s | {gap * 1000:.1f} ms | {outcome} |")


if __name__ == "__main__":
    main()
