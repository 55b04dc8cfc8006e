"""Time for the simulated cluster: real wall-clock timestamps, compressed durations.

Timestamps written on objects are the real UTC time, so that ages printed by kubectl and computed by
clients are right. Only durations (image pulls, container runs, back-offs, deadlines) are simulated:
a duration of ``s`` simulated seconds takes ``s * time_scale`` real seconds.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone


class Clock:
    """The cluster's clock: real timestamps, scaled durations."""

    def __init__(self, time_scale: float = 1.0):
        if time_scale <= 0:
            raise ValueError(f"time_scale must be positive, got {time_scale}")
        self.time_scale = time_scale

    def now(self) -> datetime:
        """The real wall-clock time, timezone-aware UTC."""
        return datetime.now(timezone.utc)

    def scaled(self, seconds: float) -> float:
        """Real seconds that ``seconds`` simulated seconds take."""
        return seconds * self.time_scale

    def after(self, seconds: float, start: datetime | None = None) -> datetime:
        """The real instant ``seconds`` simulated seconds after ``start`` (default: now)."""
        return (start or self.now()) + timedelta(seconds=self.scaled(seconds))


def rfc3339(moment: datetime) -> str:
    """A timestamp as the API server writes ``metav1.Time``: UTC, whole seconds, ``Z`` suffix."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_micro(moment: datetime) -> str:
    """A timestamp as the API server writes ``metav1.MicroTime`` (event times)."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: str | None) -> datetime | None:
    """Parse an RFC 3339 timestamp from an object (None for a missing or empty value)."""
    if not value:
        return None
    text = value[:-1] + "+00:00" if value.endswith("Z") else value
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
