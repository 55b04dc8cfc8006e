"""A real ``airflow api-server`` with the plugin, in a fresh AIRFLOW_HOME, for the API and browser tests.

SimpleAuthManager with two users: ``admin`` (Admin role) and ``viewer`` (Viewer role: read-only). The
Kubernetes connection points at the simulated cluster's kubeconfig.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.patience import Deadline

PASSWORDS = {"admin": "admin-pw", "viewer": "viewer-pw"}
STARTUP_SECONDS = 90


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class ApiServer:
    url: str
    home: Path
    process: subprocess.Popen

    def token(self, user: str) -> str:
        """A JWT from Airflow's own token endpoint, as the UI's login does."""
        response = httpx.post(
            f"{self.url}/auth/token", json={"username": user, "password": PASSWORDS[user]}, timeout=30
        )
        response.raise_for_status()
        return response.json()["access_token"]

    def log_tail(self, lines: int = 60) -> str:
        path = self.home / "api-server.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def environment(home: Path, kubeconfig: str, namespace: str = "default") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    passwords = home / "passwords.json"
    passwords.write_text(json.dumps(PASSWORDS))
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(home / "plugins"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__CORE__AUTH_MANAGER": (
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
            ),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,viewer:viewer",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            "AIRFLOW__API_AUTH__JWT_SECRET": "ui-test-secret-" + "0" * 32,
            "AIRFLOW__API__SECRET_KEY": "ui-test-key-" + "1" * 32,
            "AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(
                {"conn_type": "kubernetes", "extra": {"kube_config_path": kubeconfig}}
            ),
            "AIRFLOW__AIRFLOW_JOBS__NAMESPACE": namespace,
        }
    )
    return env


def start(home: Path, kubeconfig: str, namespace: str = "default") -> ApiServer:
    """Migrate a fresh DB, start the API server (reading ``namespace``), wait until it answers."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "dags").mkdir(exist_ok=True)
    (home / "plugins").mkdir(exist_ok=True)
    env = environment(home, kubeconfig, namespace)
    airflow = str(Path(sys.executable).with_name("airflow"))
    migrate = subprocess.run(
        [airflow, "db", "migrate"], env=env, capture_output=True, text=True, timeout=180, check=False
    )
    if migrate.returncode != 0:
        raise RuntimeError(f"airflow db migrate failed:\n{migrate.stdout[-2000:]}\n{migrate.stderr[-2000:]}")
    port = free_port()
    log = open(home / "api-server.log", "w")  # noqa: SIM115 - closed with the process
    process = subprocess.Popen(
        [
            airflow,
            "api-server",
            "--apps",
            "core",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = ApiServer(f"http://127.0.0.1:{port}", home, process)
    deadline = Deadline(STARTUP_SECONDS)
    while not deadline.passed():
        if process.poll() is not None:
            raise RuntimeError(f"the API server exited with {process.returncode}:\n{server.log_tail()}")
        try:
            if httpx.get(f"{server.url}/api/v2/monitor/health", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    server.stop()
    raise RuntimeError(f"the API server did not answer within {deadline}:\n{server.log_tail()}")
