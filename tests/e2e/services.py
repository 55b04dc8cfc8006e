"""Private PostgreSQL and Redis servers for the production-shaped Airflow of the end-to-end tests.

Each is started from the machine's binaries (Debian's ``postgresql`` and ``redis-server`` packages;
``scripts/setup-services`` installs them), listens on 127.0.0.1 on a free port, keeps its files in a
directory of its own, and is stopped, its files removed, by ``stop``. The packages' system services
are not used.

PostgreSQL refuses to run as root (``initdb`` and ``postgres`` both exit "cannot be run as root"), and
the tests do run as root in containers: the server then runs as an unprivileged account, the
``postgres`` account the Debian package creates, else ``nobody``, owning a data directory outside the
test's (root-only) temporary directory.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.patience import Deadline

SERVICES_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "setup-services"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def postgres_bin() -> Path | None:
    """The newest installed PostgreSQL's bin directory (Debian keeps each major version apart)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def missing_services() -> list[str]:
    """The servers the production-shaped tier needs that the machine lacks."""
    missing = []
    if postgres_bin() is None:
        missing.append("postgresql")
    if shutil.which("redis-server") is None:
        missing.append("redis-server")
    return missing


def require_services() -> None:
    """Skip the calling test, naming what is missing, unless ``AJP_PRODUCTION_TIER=require`` (CI), where a
    missing server fails it: scripts/setup-services installs both."""
    import pytest

    missing = missing_services()
    if not missing:
        return
    message = f"{', '.join(missing)} not installed: run scripts/setup-services"
    if os.environ.get("AJP_PRODUCTION_TIER") == "require":
        pytest.fail(message)
    pytest.skip(message)


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _unprivileged_account() -> pwd.struct_passwd | None:
    """The account PostgreSQL runs as: None when the tests do not run as root (it runs as them)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise RuntimeError("running as root and neither a 'postgres' nor a 'nobody' account to run PostgreSQL as")


@dataclass
class Postgres:
    """A private PostgreSQL cluster with one database, ``airflow``, owned by its superuser ``airflow``."""

    port: int = 0
    datadir: Path | None = None
    process: subprocess.Popen | None = None
    account: pwd.struct_passwd | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"postgresql+psycopg2://airflow@127.0.0.1:{self.port}/airflow"

    def _run_as(self) -> dict:
        if self.account is None:
            return {}
        return {"user": self.account.pw_uid, "group": self.account.pw_gid, "extra_groups": []}

    def start(self, timeout: float = 60) -> Postgres:
        binaries = postgres_bin()
        if binaries is None:
            raise RuntimeError("PostgreSQL is not installed: run scripts/setup-services")
        self.account = _unprivileged_account()
        # Outside the test's tmp_path: pytest makes that readable by its user only.
        self.datadir = Path(tempfile.mkdtemp(prefix="ajp-postgres."))
        if self.account is not None:
            os.chown(self.datadir, self.account.pw_uid, self.account.pw_gid)
        env = {"PATH": os.environ.get("PATH", ""), "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}
        data = self.datadir / "data"
        subprocess.run(
            [str(binaries / "initdb"), "-D", str(data), "-U", "airflow", "--auth=trust", "-E", "UTF8"],
            env=env,
            cwd=self.datadir,
            check=True,
            capture_output=True,
            **self._run_as(),
        )
        self.port = free_port()
        log = (self.datadir / "postgres.log").open("wb")
        self.process = subprocess.Popen(
            [
                str(binaries / "postgres"),
                "-D",
                str(data),
                "-p",
                str(self.port),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                f"unix_socket_directories={self.datadir}",
                # Throwaway data: durability buys nothing here and costs every commit a disk flush.
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
                "-c",
                "max_connections=300",
            ],
            env=env,
            cwd=self.datadir,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            **self._run_as(),
        )
        self._wait_until_ready(binaries, env, timeout)
        subprocess.run(
            [str(binaries / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "airflow", "airflow"],
            env=env,
            check=True,
            capture_output=True,
            **self._run_as(),
        )
        return self

    def _wait_until_ready(self, binaries: Path, env: dict[str, str], timeout: float) -> None:
        deadline = Deadline(timeout)
        while not deadline.passed():
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"postgres exited with {self.process.returncode}:\n{self.log()}")
            ready = subprocess.run(
                [str(binaries / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)],
                env=env,
                capture_output=True,
            )
            if ready.returncode == 0:
                return
            time.sleep(0.5)
        raise TimeoutError(f"postgres not ready after {deadline}:\n{self.log()}")

    def log(self) -> str:
        if self.datadir is None:
            return ""
        path = self.datadir / "postgres.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        # SIGINT is PostgreSQL's fast shutdown: open sessions are ended, nothing waits for clients.
        _stop(self.process, signal.SIGINT)
        if self.datadir is not None:
            shutil.rmtree(self.datadir, ignore_errors=True)


@dataclass
class Redis:
    """A private Redis without persistence: the Celery broker and result backend of one stack."""

    workdir: Path
    port: int = 0
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 30) -> Redis:
        server = shutil.which("redis-server")
        if server is None:
            raise RuntimeError("redis-server is not installed: run scripts/setup-services")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        log = (self.workdir / "redis.log").open("wb")
        self.process = subprocess.Popen(
            [
                server,
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--dir",
                str(self.workdir),
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "yes",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=self.workdir,
        )
        deadline = Deadline(timeout)
        while not _accepts(self.port):
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.process.returncode}")
            if deadline.passed():
                raise TimeoutError(f"redis-server not listening after {deadline}")
            time.sleep(0.2)
        return self

    def stop(self) -> None:
        _stop(self.process, signal.SIGTERM)


def _stop(process: subprocess.Popen | None, sig: int, grace: float = 20) -> None:
    if process is None or process.poll() is not None:
        return
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        return
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=10)
