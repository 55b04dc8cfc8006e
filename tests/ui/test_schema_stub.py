"""Type checkers read the JSON API's models from a generated stub, which says what the models are.

``readmodel/schema.py`` makes its models at import time from the dataclasses' declarations; mypy reads
``readmodel/schema_models.pyi`` instead, written by ``scripts/schema-stub`` from those same models.
``tests/typecheck/schema_fields.py`` is what mypy must then catch.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = runpy.run_path(str(ROOT / "scripts" / "schema-stub"))


def test_the_stub_is_what_the_models_derive():
    stub = SCRIPT["STUB"]
    assert stub.read_text() == SCRIPT["render"](), (
        f"{stub.relative_to(ROOT)} is out of date with readmodel/schema.py's models: run {SCRIPT['COMMAND']}"
    )


def test_the_stub_spells_out_every_model_and_field():
    from airflow_jobs_plugin.readmodel import schema

    text = SCRIPT["STUB"].read_text()
    for model in schema._MODELS.values():
        assert f"class {model.__name__}(Model):" in text
    assert "    ready_containers: int | None\n" in text
    assert '    actions: list[Literal["stop", "resume", "cancel"]]\n' in text
    assert "    task: TaskRef | None\n" in text


def test_a_type_the_stub_cannot_write_is_named():
    with pytest.raises(TypeError, match="cannot write the type"):
        SCRIPT["_name"](complex, {}, set())
