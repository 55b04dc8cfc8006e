"""docs/architecture.md names every module of the package: a reader who finds a file finds its row.

A module of a package the page describes as one (``jobs/kinds/``) is named through its package.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "airflow_jobs_plugin"
PAGE = ROOT / "docs" / "architecture.md"
# Packages whose modules the page describes together, in the row of the package.
DESCRIBED_WHOLE = ("jobs/kinds/",)


def _unnamed(page: str, package: Path) -> list[str]:
    missing = []
    for path in sorted(package.rglob("*.py")):
        if path.name == "__init__.py":
            continue
        name = path.relative_to(package).as_posix()
        if any(name.startswith(whole) and whole in page for whole in DESCRIBED_WHOLE):
            continue
        if name not in page:
            missing.append(name)
    return missing


def test_every_module_has_a_row():
    assert _unnamed(PAGE.read_text(), PACKAGE) == []


def test_a_module_the_page_does_not_name_is_found(tmp_path):
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "spec.py").write_text("")
    (tmp_path / "jobs" / "newcomer.py").write_text("")
    assert _unnamed("| core | `jobs/spec.py` | the spec |", tmp_path) == ["jobs/newcomer.py"]
