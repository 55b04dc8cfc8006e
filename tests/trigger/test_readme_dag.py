"""The README's example DAG, copied as a newcomer would, runs with `airflow dags test` against the
simulated cluster; and the README's state table is the one the lifecycle model renders."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_jobs_plugin.lifecycle import render_markdown_table

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_dag() -> str:
    text = README.read_text()
    section = text[text.index("## Using it in a DAG") :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "the README's usage section has no python block"
    return match.group(1)


def test_readme_states_table_is_the_rendered_vocabulary():
    assert render_markdown_table() in README.read_text()


@pytest.mark.slow
def test_the_readme_dag_runs_with_airflow_dags_test_against_the_simulator(cluster, tmp_path):
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "readme_quickstart.py").write_text(readme_dag())
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(tmp_path / "home"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
    }
    airflow = [sys.executable, "-m", "airflow"]
    subprocess.run([*airflow, "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)
    result = subprocess.run(
        [*airflow, "dags", "test", "readme_quickstart"], env=env, capture_output=True, text=True, timeout=300
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    assert "SUCCEEDED" in out, out[-3000:]
    assert "[worker-0]" in out, out[-3000:]
