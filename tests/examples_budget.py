"""How many examples a property test draws, from the loaded Hypothesis profile.

The suite registers two profiles in tests/conftest.py: ``full`` (the default; every property test draws
the count written beside it) and ``fast`` (the fast lane, ``scripts/test --fast``: a tenth of it, at
least a few). A test asks ``examples(300)`` instead of writing ``max_examples=examples(300)``, so the count it
states is the thorough one and the profile scales it.
"""

from __future__ import annotations

from hypothesis import settings

# The profiles' max_examples is a percentage of each test's own count: ``full`` registers 100.
FULL = 100


def examples(count: int) -> int:
    """The number of examples for a test written to draw ``count`` in the full run."""
    return max(5, count * settings.default.max_examples // FULL)
