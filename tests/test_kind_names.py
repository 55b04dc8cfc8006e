"""Nothing but the kind adapters asks which kind a job is (docs/architecture.md, "How to add a kind").

Outside ``kinds/`` (and the simulator, which plays the cluster's controllers), no module of the product
compares against a kind's name or API kind (``"MPIJob"``, ``"Job"`` as a kind), names an adapter
(``MPI_JOB``, ``BATCH_JOB``, ``TORCHRUN``) or asks ``is_mpi``: it iterates ``kinds.KINDS``, lists
``kinds.RESOURCES`` or asks ``kinds.kind_of(job)``, so a new kind is one new adapter. Read from the
source (docstrings and comments are prose, not code, and are not counted).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "airflow_jobs_plugin"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE

# The API kinds and product names of the kinds, and the adapters' names.
KIND_WORDS = frozenset({"Job", "MPIJob", "torchrun", "mpijobs"})
ADAPTER_NAMES = frozenset({"MPI_JOB", "BATCH_JOB", "TORCHRUN", "is_mpi", "MPIJOBS", "LAUNCHER_SUFFIX"})

# Modules that may name a kind, each with why. Kept short: a new entry needs a reason a reviewer accepts.
ALLOWED = {
    # The core API resources the product reads beside PODS: JOBS (batch/v1 Job), which the launcher Job
    # of an MPIJob and the owners of pods are whatever kind the job is. A kind's own resource that is no
    # core API (MPIJOBS) is its adapter's.
    "cluster/resources.py": "the core API resource batch/v1 Job, beside PODS",
    # The JSON API's model of one job of any kind is named Job (its OpenAPI title): a name, not a kind.
    "readmodel/schema.py": "the JSON model named Job",
}


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring constants of ``tree``'s module, classes and functions."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def kind_names_in(source: str) -> list[tuple[int, str]]:
    """(line, what) for every kind name the code of ``source`` uses."""
    tree = ast.parse(source)
    prose = _docstrings(tree)
    hits: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and id(node) not in prose and node.value in KIND_WORDS:
            hits.append((node.lineno, repr(node.value)))
        elif isinstance(node, ast.Name) and node.id in ADAPTER_NAMES:
            hits.append((node.lineno, node.id))
        elif isinstance(node, ast.Attribute) and node.attr in ADAPTER_NAMES:
            hits.append((node.lineno, f".{node.attr}"))
        elif isinstance(node, ast.alias) and node.name in ADAPTER_NAMES:
            hits.append((node.lineno, f"import {node.name}"))
    return sorted(set(hits))


def product_modules() -> list[Path]:
    return sorted(
        path
        for path in ROOT.rglob("*.py")
        if path.relative_to(ROOT).parts[:2] != ("jobs", "kinds")
        and str(path.relative_to(ROOT)) not in ALLOWED
    )


def test_no_module_outside_the_kinds_names_a_kind():
    named = {
        f"{path.relative_to(ROOT)}:{line}": what
        for path in product_modules()
        for line, what in kind_names_in(path.read_text())
    }
    assert named == {}, "ask kinds.kind_of(job), iterate kinds.KINDS or list kinds.RESOURCES instead"


def test_the_check_sees_a_comparison_with_a_kind_and_an_adapter():
    source = 'from .kinds import MPI_JOB\nif job.get("kind") == "MPIJob" or kinds.is_mpi(job):\n    pass\n'
    assert [what for _, what in kind_names_in(source)] == ["import MPI_JOB", "'MPIJob'", ".is_mpi"]


def test_prose_may_name_a_kind():
    source = '"""An MPIJob is ended through its launcher Job."""\n# "MPIJob" in a comment\nx = 1\n'
    assert kind_names_in(source) == []


def test_every_allowed_module_exists_and_still_names_a_kind():
    for module in ALLOWED:
        assert kind_names_in((ROOT / module).read_text()), f"{module} names no kind: drop it from ALLOWED"


def _imported(path: Path) -> set[str]:
    """The modules ``path`` imports, anywhere in it (inside functions too), type checkers' imports aside."""
    tree = ast.parse(path.read_text())
    checking = {
        id(child)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for child in ast.walk(node)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in checking:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return found


def test_the_pieces_every_kind_shares_import_no_kind():
    # The kinds build from jobs/pod_template.py; were it to import them, they could only import it lazily.
    assert not {
        m for m in _imported(ROOT / "jobs" / "pod_template.py") if m.startswith(f"{PACKAGE}.jobs.kinds")
    }


def test_each_kind_builds_its_own_object():
    # A kind's builder is in its module, not in jobs/manifests.py (which is about any kind and reads them).
    for path in sorted((ROOT / "jobs" / "kinds").glob("*.py")):
        assert f"{PACKAGE}.jobs.manifests" not in _imported(path), path.name
