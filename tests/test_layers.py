"""The package's layers, read from its source: dependencies point inward (docs/architecture.md).

The tree shows the layers: ``jobs``, ``lifecycle``, ``queueing``, ``logs`` and ``readmodel`` hold the
rules, each with the few modules that do its I/O beside them; ``cluster`` is the client and the shared
watch; ``airflow`` (operator, sensor, triggers, CLI) and ``plugin`` (the web app) are Airflow's side.

- The core (rules over plain data: every module not named below) imports no shell or Airflow module of
  the product and no library that does I/O (Airflow, the Kubernetes clients, aiohttp, FastAPI).
- The shell (the client, the watch, admission, the ledger's reads and writes, actions, logs) imports no
  module of the Airflow layer (operators, sensors, triggers, the web app, the CLI).
- The provider never imports the simulator (``airflow_jobs_sim``, its own distribution): not even
  inside a function. The demo and the tests install it beside the provider.

Imports only type checkers read (under ``if TYPE_CHECKING:``) are not dependencies and are not counted.
A new module is core until it is named here, so a module that does I/O has to say so.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "airflow_jobs_plugin"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE

SHELL = {
    # the package itself: its constants, the provider-info entry point that reads the config, and the
    # public names it resolves on first use
    "",
    "config",
    "metrics",
    "cluster.kube",
    "cluster.lazy_kubernetes",
    "cluster.watch",
    "cluster.single_flight",
    "controller.leader",
    "jobs.submission",
    "jobs.actions",
    "queueing.engines.pool",
    "queueing.engines.door",
    "queueing.engines.kueue",
    "queueing.engines.unmanaged",
    "queueing.engines.observer",
    "controller.runner",
    "controller.main",
    "queueing.kueue_cluster",
    "queueing.quota.ledger",
    "readmodel.inspect",
    "logs.logstream",
    "logs.logtail",
}
AIRFLOW = {
    "airflow",
    "airflow.operators",
    "airflow.sensors",
    "airflow.triggers",
    "airflow.job_sensor_trigger",
    "airflow.cluster_policy",
    "airflow.cli",
    "airflow.airflow_cli",
    "plugin",  # the Airflow plugin's entry (plugin/__init__ loads plugin.entry on demand)
    "plugin.entry",
    "plugin.app",
    "plugin.deps",
    "plugin.reads",
    "plugin.routes",
    "plugin.routes.api",
    "plugin.routes.pages",
    "plugin.sweep",
    "plugin.kills",
    "plugin.state_cache",
}
SIMULATOR = "airflow_jobs_sim"
IO_LIBRARIES = {"airflow", "kubernetes_asyncio", "kubernetes", "aiohttp", "fastapi", "starlette", "httpx"}


@dataclass(frozen=True)
class Import:
    module: str  # the imported module, relative to the package ("" the package; external names whole)
    internal: bool
    at_module_level: bool
    function: str | None


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in ROOT.rglob("*.py")}


def _resolve(name: str, known: set[str]) -> str:
    """The longest known module a dotted name (``plugin.views.JobRow``) is, or is inside of."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name


def _imports(name: str, path: Path, known: set[str]) -> list[Import]:
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, function: str | None, top: bool) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child, function, top)
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for child in node.body:
                visit(child, node.name, False)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                _add(alias.name, function, top)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                origin = ".".join([PACKAGE, *base, *([node.module] if node.module else [])])
            else:
                origin = node.module or ""
            for alias in node.names:
                _add(f"{origin}.{alias.name}", function, top)
        for child in ast.iter_child_nodes(node):
            visit(child, function, top and not isinstance(node, (ast.ClassDef,)))

    def _add(dotted: str, function: str | None, top: bool) -> None:
        if dotted == SIMULATOR or dotted.startswith(SIMULATOR + "."):
            found.append(Import(SIMULATOR, False, top, function))
        elif dotted == PACKAGE or dotted.startswith(PACKAGE + "."):
            relative = dotted[len(PACKAGE) + 1 :]
            found.append(Import(_resolve(relative, known), True, top, function))
        else:
            found.append(Import(dotted.split(".")[0], False, top, function))

    for node in tree.body:
        visit(node, None, True)
    return found


def _layer(module: str) -> str:
    return "airflow" if module in AIRFLOW else "shell" if module in SHELL else "core"


def _violations() -> list[str]:
    modules = _modules()
    known = set(modules)
    found = []
    for name, path in sorted(modules.items()):
        layer = _layer(name)
        for imp in _imports(name, path, known):
            where = f"{name or PACKAGE} imports {imp.module or PACKAGE}"
            if imp.module == SIMULATOR:
                found.append(f"{where}: the provider never loads the simulator")
            elif not imp.internal:
                if layer == "core" and imp.module in IO_LIBRARIES:
                    found.append(f"{where}: a core module does no I/O")
            elif layer == "core" and _layer(imp.module) != "core":
                found.append(f"{where} ({_layer(imp.module)}): the core imports only the core")
            elif layer == "shell" and _layer(imp.module) == "airflow":
                found.append(f"{where} (airflow): the shell does not import the Airflow layer")
    return found


def test_every_dependency_points_inward():
    assert _violations() == []


def test_every_named_module_exists():
    """A module renamed or removed is taken off the lists, so they never name what is not there."""
    modules = set(_modules())
    assert (SHELL | AIRFLOW) - modules == set()


def test_the_check_sees_a_core_module_that_imports_the_shell(tmp_path):
    """The rule can fail: a core module importing the client is reported."""
    fake = tmp_path / PACKAGE
    (fake / "quota").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "cluster").mkdir()
    (fake / "cluster" / "__init__.py").write_text("")
    (fake / "cluster" / "kube.py").write_text("import aiohttp\n")
    (fake / "quota" / "__init__.py").write_text("")
    (fake / "quota" / "rule.py").write_text(
        "from ..cluster.kube import KubeClient\nimport kubernetes_asyncio\n"
    )
    globals()["ROOT"] = fake
    try:
        found = _violations()
    finally:
        globals()["ROOT"] = Path(__file__).resolve().parents[1] / PACKAGE
    assert found == [
        "quota.rule imports cluster.kube (shell): the core imports only the core",
        "quota.rule imports kubernetes_asyncio: a core module does no I/O",
    ]


def test_the_check_sees_the_provider_import_the_simulator(tmp_path):
    """The simulator is never imported by the provider, not even inside a function."""
    fake = tmp_path / PACKAGE
    (fake / "airflow").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "airflow" / "__init__.py").write_text("")
    (fake / "airflow" / "cli.py").write_text("def run():\n    from airflow_jobs_sim import SimCluster\n")
    globals()["ROOT"] = fake
    try:
        found = _violations()
    finally:
        globals()["ROOT"] = Path(__file__).resolve().parents[1] / PACKAGE
    assert found == ["airflow.cli imports airflow_jobs_sim: the provider never loads the simulator"]
