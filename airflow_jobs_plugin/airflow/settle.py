"""The triggers' wait before they report a job's end to Airflow: jobs/stale_event.py says why."""

from __future__ import annotations

import asyncio
import logging
import math
from datetime import datetime, timezone

from airflow_jobs_plugin import config
from airflow_jobs_plugin.jobs.stale_event import DEFAULT_SETTLE_SECONDS, settle_wait

log = logging.getLogger(__name__)


def settle_seconds() -> float:
    """[airflow_jobs] resume_settle_seconds. A value that is no number logs why and counts as the default:
    a typo in the deployment's configuration must not fail every trigger of the triggerer."""
    raw = config.get("resume_settle_seconds")
    try:
        value = float(raw)
        if not math.isfinite(value):
            raise ValueError(raw)
    except ValueError:
        log.error(
            "[%s] resume_settle_seconds must be a number of seconds, got %r; using %s",
            config.SECTION,
            raw,
            DEFAULT_SETTLE_SECONDS,
        )
        return DEFAULT_SETTLE_SECONDS
    return max(0.0, value)


async def settle(deferred_at: str | None, job_name: str) -> None:
    """Return once the deferral made at ``deferred_at`` has settled (at once for one long past)."""
    wait = settle_wait(deferred_at, datetime.now(timezone.utc), settle_seconds())
    if wait > 0:
        log.debug("%s ended within the deferral's settle: reported in %.1f s", job_name, wait)
        await asyncio.sleep(wait)
