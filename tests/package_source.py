"""The product's own source, read by the tests that check a rule of its layout (which module may read
what): every module's path inside the package, with the lines a finder reports."""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path

PACKAGE = "airflow_jobs_plugin"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE


def findings(find: Callable[[str], list[int]], exempt: Collection[str] = ()) -> set[str]:
    """``module:line`` for every line ``find`` reports in a module of the package, except in ``exempt``
    (paths inside the package, as ``jobs/jobview.py``)."""
    return {
        f"{path.relative_to(ROOT)}:{line}"
        for path in ROOT.rglob("*.py")
        if str(path.relative_to(ROOT)) not in exempt
        for line in find(path.read_text())
    }
