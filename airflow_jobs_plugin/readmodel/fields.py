"""How a view's field reads in the JSON API, declared on the field itself. No I/O, no pydantic.

A view (``readmodel/views.py``) declares each field once, with its JSON description beside its type::

    state: Annotated[str, Json("where the job is in its life", as_type=JobState)]

and ``readmodel/schema.py`` derives the JSON API's model from those declarations (:func:`json_fields`),
so the view, the JSON answer and its OpenAPI description cannot drift apart. A property of the view
(a value computed from its fields) is part of the JSON when its return annotation carries a
:class:`Json` too.
"""

from __future__ import annotations

import functools
import sys
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Json:
    """A view field's JSON form.

    ``description`` is the OpenAPI description. ``as_type`` is the JSON's type when it is not the
    field's own: the enum whose value a state's text is. ``blank_is_null``: the view keeps ``""`` (or
    kubectl's ``<none>``) for an absent text, which the pages print; the JSON says ``null``.
    ``digits``: a number the JSON rounds to that many decimals (a decayed usage has no more meaning).
    """

    description: str
    as_type: Any = None
    blank_is_null: bool = False
    digits: int | None = None


@dataclass(frozen=True)
class JsonField:
    """One field of a view as the JSON API returns it: its name, its JSON type and its :class:`Json`."""

    name: str
    type: Any
    json: Json


def _declared(hint: Any) -> tuple[Any, Json] | None:
    if typing.get_origin(hint) is not typing.Annotated:
        return None
    base, *extras = typing.get_args(hint)
    found = [e for e in extras if isinstance(e, Json)]
    return (base, found[0]) if found else None


@functools.cache  # a view's declarations do not change; reading them (get_type_hints) is not cheap
def json_fields(view: type) -> tuple[JsonField, ...]:
    """Every field of ``view`` the JSON carries, in declaration order, then its JSON properties.

    A field without a :class:`Json` is the view's own business (the page's printed cells) and stays
    out; ``blank_is_null`` makes the JSON type optional.
    """
    module = vars(sys.modules[view.__module__])
    hints = typing.get_type_hints(view, globalns=module, include_extras=True)
    return tuple(_fields(view, hints, module))


def _fields(view: type, hints: dict[str, Any], module: dict[str, Any]) -> Iterator[JsonField]:
    for name, hint in hints.items():
        declared = _declared(hint)
        if declared is not None:
            yield _field(name, *declared)
    for name, member in vars(view).items():
        if isinstance(member, property) and member.fget is not None:
            returns = typing.get_type_hints(member.fget, globalns=module, include_extras=True).get("return")
            declared = _declared(returns)
            if declared is not None:
                yield _field(name, *declared)


def _field(name: str, base: Any, json: Json) -> JsonField:
    kind = json.as_type if json.as_type is not None else base
    return JsonField(name, kind | None if json.blank_is_null else kind, json)
