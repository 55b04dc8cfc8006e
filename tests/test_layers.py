"""The package's layers, held by import-linter's contracts in pyproject.toml (docs/architecture.md).

`lint-imports` runs in scripts/test beside ruff and mypy; these tests hold what it cannot say by itself:

- the contracts are kept (so a plain pytest run sees a broken one too);
- every module is named: in the `pure-core` contract's sources, in its forbidden shell modules, or on
  Airflow's side (``airflow/``, ``plugin/``), so a new module has to say whether it does I/O;
- the contracts can fail: an upward import, an I/O import in the core and an import of the simulator,
  each planted inside a function of a copy of the package, break the contract that forbids it, and the
  upward one also breaks, through the module that imports it, the contract of the kinds; an event loop
  planted in the kubelet's model and a simulator internal planted in the real plane's tooling break
  theirs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "airflow_jobs_plugin"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
AIRFLOW_SIDE = (f"{PACKAGE}.airflow", f"{PACKAGE}.plugin")


def _contracts() -> dict[str, dict]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {c["id"]: c for c in config["contracts"]}


def _modules(root: Path = ROOT / PACKAGE) -> set[str]:
    names = set()
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names.add(".".join(parts))
    return names


def _lint(package_parent: Path) -> subprocess.CompletedProcess[str]:
    # The real plane's tooling (a root package of the graph) is importable from scripts/, as scripts/test
    # runs lint-imports; a copy under ``package_parent`` comes first.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(package_parent), str(ROOT / "scripts")))}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(ROOT / "pyproject.toml")],
        cwd=package_parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_contracts_are_kept():
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_module_is_core_shell_or_airflow():
    core = _contracts()["pure-core"]
    sources = set(core["source_modules"])
    shell = {m for m in core["forbidden_modules"] if m.startswith(PACKAGE)}
    modules = _modules()
    airflow_side = {m for m in modules if m.startswith(AIRFLOW_SIDE)}
    assert modules - sources - shell - airflow_side == set(), "name each new module core or shell"
    assert (sources | shell) - modules == set(), "a module renamed or removed is taken off the lists"
    assert sources & shell == set()


def test_the_contracts_see_planted_imports(tmp_path):
    """A copy of the package with three imports planted inside functions breaks every contract."""
    copy = tmp_path / PACKAGE
    shutil.copytree(ROOT / PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    with (copy / "jobs" / "spec.py").open("a") as f:  # jobs is below queueing
        f.write(
            "\n\ndef _planted():\n    from airflow_jobs_plugin.queueing import pools\n\n    return pools\n"
        )
    with (copy / "lifecycle" / "state.py").open("a") as f:  # core: no I/O library
        f.write("\n\ndef _planted():\n    import aiohttp\n\n    return aiohttp\n")
    with (copy / "airflow" / "cli.py").open("a") as f:  # the provider never loads the simulator
        f.write("\n\ndef _planted():\n    import airflow_jobs_sim\n\n    return airflow_jobs_sim\n")
    result = _lint(tmp_path)
    out = " ".join(result.stdout.split())
    assert result.returncode != 0, out
    names = {c["id"]: " ".join(c["name"].split()) for c in _contracts().values()}
    for broken in ("layers", "pure-core", "no-simulator", "kinds-no-engine"):
        assert f"{names[broken]} BROKEN" in out, out
    assert "airflow_jobs_plugin.jobs.spec -> airflow_jobs_plugin.queueing.pools" in out
    assert "airflow_jobs_plugin.lifecycle.state -> aiohttp" in out
    assert "airflow_jobs_plugin.airflow.cli -> airflow_jobs_sim" in out
    # indirect: a kind imports the spec, which now imports a queueing module
    assert (
        "airflow_jobs_plugin.jobs.spec -> airflow_jobs_plugin.queueing.pools"
        in out.split(names["kinds-no-engine"])[-1]
    )


def test_the_kubelet_model_contracts_see_planted_imports(tmp_path):
    """Copies of the simulator and of the plane's tooling: the model imports asyncio through a module it
    imports, and the player reaches past the model into the simulator's scenarios."""
    sim, plane = tmp_path / "airflow_jobs_sim", tmp_path / "realplane"
    shutil.copytree(
        ROOT / "simulator" / "airflow_jobs_sim", sim, ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copytree(ROOT / "scripts" / "realplane", plane, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / PACKAGE, tmp_path / PACKAGE, ignore=shutil.ignore_patterns("__pycache__"))
    with (sim / "scenarios.py").open("a") as f:  # indirect: the model imports the scenarios
        f.write("\n\ndef _planted():\n    import asyncio\n\n    return asyncio\n")
    with (plane / "player.py").open("a") as f:
        f.write("\n\ndef _planted():\n    from airflow_jobs_sim import scenarios\n\n    return scenarios\n")
    result = _lint(tmp_path)
    out = " ".join(result.stdout.split())
    assert result.returncode != 0, out
    names = {c["id"]: " ".join(c["name"].split()) for c in _contracts().values()}
    for broken in ("kubelet-model-pure", "player-uses-the-model"):
        assert f"{names[broken]} BROKEN" in out, out
    for kept in ("layers", "pure-core", "no-simulator", "kinds-no-engine"):
        assert f"{names[kept]} KEPT" in out, out
    assert "airflow_jobs_sim.scenarios -> asyncio" in out
    assert "realplane.player -> airflow_jobs_sim.scenarios" in out
