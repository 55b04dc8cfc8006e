"""Bounds on what bad input can make the product write or do: message length, YAML size and depth.

A message the product writes (a task log line, a job's verdict annotation, an exception) may quote what
a person wrote, and what they wrote may be a megabyte of garbage. :func:`bounded` keeps a message's
head, where the field path and the fix are, and says how much was left out; :func:`excerpt` quotes a
value in at most a line. :class:`BoundedSafeLoader` reads YAML no deeper than :data:`MAX_YAML_DEPTH`
levels, so a few kilobytes of ``[[[[...`` are an error naming the limit, never a ``RecursionError``.
Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

import yaml

# The longest message the product writes for one problem (a log line, an annotation, an exception):
# long enough for a field path, the value quoted in short and the fix.
MESSAGE_LIMIT = 2_000
# The longest quote of a value inside a message.
EXCERPT_LIMIT = 80
# The deepest YAML the product reads. Its own documents nest at most six levels (a policy's
# groups.<group>.users.<user>); PyYAML's composer recurses once per level (about five Python frames
# each), so a few kilobytes of flow brackets would otherwise exhaust the interpreter's stack.
MAX_YAML_DEPTH = 32


def bounded(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """``text`` cut to at most ``limit`` characters, its head kept and the cut said."""
    if len(text) <= limit:
        return text
    note = f" ... ({len(text) - limit:,} more characters left out)"
    return text[: max(limit - len(note), 0)] + note


def excerpt(value: Any, limit: int = EXCERPT_LIMIT) -> str:
    """``repr(value)`` in at most ``limit`` characters (and the whole length when cut)."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f" ({len(value):,} characters)" if isinstance(value, str) else ""
    return text[: max(limit - 3, 1)] + "..." + size


class YamlTooDeepError(yaml.YAMLError):
    """The YAML nests deeper than :data:`MAX_YAML_DEPTH` levels."""


class BoundedSafeLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader that refuses documents nested deeper than :data:`MAX_YAML_DEPTH` levels."""

    max_depth = MAX_YAML_DEPTH

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:  # noqa: N803 - PyYAML's name
        # Checked in the scanner too: it keeps a possible simple key per open bracket and walks them all
        # at every token, so 1,000 nested brackets took seconds before the composer got to count them.
        if self.flow_level >= self.max_depth:
            mark = self.get_mark()
            raise YamlTooDeepError(
                f"nested deeper than {self.max_depth} levels (line {mark.line + 1}, column "
                f"{mark.column + 1}); no document the product reads needs more"
            )
        super().fetch_flow_collection_start(TokenClass)

    def compose_node(self, parent: Any, index: Any) -> Any:  # noqa: D102 - PyYAML's composer hook
        self._depth += 1
        try:
            if self._depth > self.max_depth:
                mark = self.peek_event().start_mark
                raise YamlTooDeepError(
                    f"nested deeper than {self.max_depth} levels (line {mark.line + 1}, column "
                    f"{mark.column + 1}); no document the product reads needs more"
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1
