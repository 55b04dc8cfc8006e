"""How a dataclass's field reads in the JSON API, declared on the field itself. No I/O, no pydantic.

A dataclass the JSON API returns (a view of ``readmodel/views.py``, the lifecycle's ``JobSnapshot``, an
action's outcome) declares each field once, with its JSON description beside its type::

    state: Annotated[str, Json("where the job is in its life", as_type=JobState)]

and ``readmodel/schema.py`` derives the JSON API's model from those declarations (:func:`json_fields`),
so the dataclass, the JSON answer and its OpenAPI description cannot drift apart. A property (a value
computed from the fields) is part of the JSON when its return annotation carries a :class:`Json` too.

It sits at the package's root, beside nothing it imports: the dataclasses that declare their JSON form
live in every layer (``jobs/action_rules.py``, ``lifecycle/``, ``readmodel/``), and each layer may import
only its own or an inner one (``tests/test_layers.py``). Under ``readmodel/`` the lifecycle and the jobs
rules could not reach it; under ``jobs/`` it would sit among rules about jobs it has nothing to do with.
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
    """A field's JSON form.

    ``description`` is the OpenAPI description. ``as_type`` is the JSON's type when it is not the
    field's own: the enum whose value a state's text is. ``blank_is_null``: the dataclass keeps ``""``
    (or kubectl's ``<none>``) for an absent text, which the pages print; the JSON says ``null``.
    ``digits``: a number the JSON rounds to that many decimals (a decayed usage has no more meaning).
    ``after``: the JSON field this one follows, where the JSON's order is not the declaration's (a
    property beside the fields it reads, a field a positional constructor keeps last).
    """

    description: str
    as_type: Any = None
    blank_is_null: bool = False
    digits: int | None = None
    after: str | None = None


@dataclass(frozen=True)
class JsonField:
    """One field of a dataclass as the JSON API returns it: its name, its JSON type and its :class:`Json`."""

    name: str
    type: Any
    json: Json


def _declared(hint: Any) -> tuple[Any, Json] | None:
    if typing.get_origin(hint) is not typing.Annotated:
        return None
    base, *extras = typing.get_args(hint)
    found = [e for e in extras if isinstance(e, Json)]
    return (base, found[0]) if found else None


@functools.cache  # a class's declarations do not change; reading them (get_type_hints) is not cheap
def json_fields(view: type) -> tuple[JsonField, ...]:
    """Every field of ``view`` the JSON carries, in declaration order, then its JSON properties; a
    field declared ``after`` another is moved to follow it.

    A field without a :class:`Json` is the dataclass's own business (the page's printed cells) and
    stays out; ``blank_is_null`` makes the JSON type optional.
    """
    module = vars(sys.modules[view.__module__])
    hints = typing.get_type_hints(view, globalns=module, include_extras=True)
    ordered: list[JsonField] = []
    for field in _fields(view, hints, module):
        if field.json.after is None:
            ordered.append(field)
            continue
        names = [f.name for f in ordered]
        if field.json.after not in names:
            raise TypeError(
                f"{view.__name__}.{field.name}: Json(after={field.json.after!r}) names no JSON field "
                f"declared before it (declared: {', '.join(names)})"
            )
        ordered.insert(names.index(field.json.after) + 1, field)
    return tuple(ordered)


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
