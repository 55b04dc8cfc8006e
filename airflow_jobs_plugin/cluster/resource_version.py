"""Ordering of Kubernetes resourceVersions.

For a long time a resourceVersion was an opaque string that clients could only test for equality.
Kubernetes made them comparable (KEP-5504, stable in 1.35): within one resource they are positive
decimal integers without leading zeros, and a larger one is a later version. Caches use this to never
put back an object older than the one they hold; where a server sends something else, the answer is
"unknown" and callers fall back to equality.
"""

from __future__ import annotations


def _valid(version: str | None) -> bool:
    return (
        bool(version)
        and version is not None
        and version.isdigit()
        and version.isascii()
        and version[0] != "0"
    )


def compare(a: str | None, b: str | None) -> int | None:
    """-1, 0 or 1 as ``a`` is older than, the same as or newer than ``b``; ``None`` if either cannot be
    compared (empty, not a positive integer, a leading zero)."""
    if not (_valid(a) and _valid(b)):
        return None
    assert a is not None and b is not None
    if len(a) != len(b):
        return -1 if len(a) < len(b) else 1
    return (a > b) - (a < b)
