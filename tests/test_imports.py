"""Every module of the provider and of the simulator imports first, in a fresh interpreter.

An import cycle between two modules works when the process happens to import the right one first and
raises ImportError otherwise: a DAG file, a plugin or a CLI that starts from the other end fails at
parse time. The suite itself imports in one order only, so it is checked here module by module, each
in a child process that has imported nothing of the two distributions.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = (REPO / "airflow_jobs_plugin", REPO / "simulator" / "airflow_jobs_sim")

# The child imports the heavy third-party libraries once, then forks one grandchild per module: each
# grandchild forgets every module of the product before importing its one, so any order-dependent
# cycle shows.
_CHILD = r"""
import importlib, os, sys, traceback
import airflow.sdk, kubernetes_asyncio.client, aiohttp  # shared by most modules; loaded once
ours = ("airflow_jobs_plugin", "airflow_jobs_sim", "cyclic")
failed = []
for name in sys.argv[1:]:
    pid = os.fork()
    if pid == 0:
        # Airflow's start-up may have loaded the provider (its entry points): forget it, so the module
        # under test runs its own imports from scratch.
        for loaded in [m for m in sys.modules if m.split(".")[0] in ours]:
            del sys.modules[loaded]
        try:
            importlib.import_module(name)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        failed.append(name)
print("FAILED:" + ",".join(failed))
"""


def _modules() -> list[str]:
    names = []
    for package in PACKAGES:
        for path in sorted(package.rglob("*.py")):
            if path.name == "__main__.py":
                continue
            parts = path.relative_to(package.parent).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


# A process per module: tens of seconds of CPU, so not in the fast lane.
@pytest.mark.slow
def test_every_module_imports_first_in_a_fresh_interpreter():
    modules = _modules()
    assert len(modules) > 100, modules  # the finder found the packages
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, *modules],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    failed = done.stdout.strip().rsplit("FAILED:", 1)[-1]
    assert failed == "", f"these modules fail when imported first: {failed}\n{done.stderr[-5000:]}"


def test_a_module_in_a_cycle_is_caught(tmp_path):
    """The check itself: a pair of modules that import each other's names fails from one end."""
    package = tmp_path / "cyclic"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from cyclic.b import B\nA = 1\n")
    (package / "b.py").write_text("from cyclic.a import A\nB = 2\n")
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, "cyclic.a"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.stdout.strip().rsplit("FAILED:", 1)[-1] == "cyclic.a", done.stdout + done.stderr
