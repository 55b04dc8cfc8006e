"""Suite-wide set-up: every test runs against a throw-away AIRFLOW_HOME, never ~/airflow."""

from __future__ import annotations

import os
import tempfile

# Set before anything imports airflow, so its config and SQLite DB land in a private directory.
_home = tempfile.mkdtemp(prefix="ajp-airflow-home-")
os.environ.setdefault("AIRFLOW_HOME", _home)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "True")
