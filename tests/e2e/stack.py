"""A real Airflow (api-server, scheduler, dag-processor, triggerers) next to the simulated GPU cluster
in exec mode, each a process group of its own, for the end-to-end tests; or, with ``plane=``, next to a
namespace of the real control plane (``scripts/cluster``, tests/e2e/plane_tenant.py).

By default it mirrors what ``scripts/demo`` starts (SQLite, the LocalExecutor, one triggerer), with a
private AIRFLOW_HOME, free ports and faster pacing. ``database="postgres"``, ``executor="CeleryExecutor"``
and ``triggerers=2`` make it the shape production runs (the official chart's defaults plus a second
triggerer for high availability): a private PostgreSQL as the metadata database, a Celery worker on a
private Redis, each triggerer a process of its own (tests/e2e/services.py starts the servers).

The Celery worker shares no disk with the rest, as the chart's worker pods do not: its own AIRFLOW_HOME
and log folder, its own copy of the DAGs folder, the same configuration through the environment
(``[api] secret_key`` and the Fernet key included, which the chart passes to every component from its
Secrets), and its log server on a port of its own. ``task_log`` reads task logs through the api-server's
REST API, as a user does; the api-server fetches what the worker wrote from the worker's log server.

On the simulator every component reads one ``kubernetes_default`` connection (a kubeconfig of the
simulator's admin). On the real plane each component reads its own, as its pod would hold its own service
account's token: the worker (the Celery worker, or the scheduler that runs the LocalExecutor's tasks) the
submitter's, each triggerer the observer's, the api-server the viewer's (helm-values/rbac.yaml); the
scheduler and the dag-processor get none, since they never call the cluster.
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import quote

import httpx
import jwt
import yaml

from tests.e2e.plane_tenant import PlaneTenant
from tests.e2e.services import Postgres, Redis, require_services
from tests.patience import Deadline, stretch

ROOT = Path(__file__).resolve().parents[2]
DAGS = ROOT / "dags"
POLICY_MANIFEST = ROOT / "helm-values" / "quota-policy.yaml"
CLAIM_MANIFEST = ROOT / "helm-values" / "example-artifacts-claim.yaml"
BIN = Path(sys.executable).parent
AIRFLOW_COMPONENTS = ("api-server", "scheduler", "dag-processor")
DATABASES = ("sqlite", "postgres")
EXECUTORS = ("LocalExecutor", "CeleryExecutor")
# The admission controller's service account on the simulated cluster (its own kubeconfig).
CONTROLLER_ACCOUNT = "airflow-jobs-system/airflow-jobs-controller"
STOP_GRACE_SECONDS = 25
# The log source group Airflow 3.3.2 puts first in a try's log (airflow/utils/log/file_task_handler.py,
# ``FileTaskHandler._read``): the files and URLs the api-server read the try from.
SOURCES_BEGIN = "::group::Log message source details"
SOURCES_END = "::endgroup::"
API_USER = "admin"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _clean_environ() -> dict[str, str]:
    # The test session's own Airflow settings (unit test mode, its AIRFLOW_HOME) must not leak in.
    return {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "EXAMPLE_"))}


@dataclass
class Stack:
    """The running processes and where their files are."""

    workdir: Path
    dags_folder: Path = DAGS
    extra_env: dict[str, str] = field(default_factory=dict)
    step_seconds: float = 0.5
    time_scale: float = 0.1
    database: str = "sqlite"
    executor: str = "LocalExecutor"
    triggerers: int = 1
    env: dict[str, str] = field(default_factory=dict)
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    # Components a test killed on purpose: their exit is no failure of the stack.
    killed: set[str] = field(default_factory=set)
    postgres: Postgres | None = None
    redis: Redis | None = None
    # Airflow's id of each triggerer (its row in the ``job`` table) -> its component name.
    triggerer_jobs: dict[int, str] = field(default_factory=dict)
    # A namespace of the real control plane to run the jobs in, instead of the simulator (not yet
    # installed: ``start`` installs it, ``stop`` removes it).
    plane: PlaneTenant | None = None
    # Settings of one component only (its name, or "triggerer" for every triggerer): its connection.
    component_env: dict[str, dict[str, str]] = field(default_factory=dict)
    # The REST API's bearer token, once logged in.
    _token: str | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.database not in DATABASES or self.executor not in EXECUTORS or self.triggerers < 1:
            raise ValueError(
                f"no such stack: {self.database}, {self.executor}, {self.triggerers} triggerer(s)"
            )

    @property
    def triggerer_names(self) -> list[str]:
        """The triggerers' component names: ``triggerer`` alone, else ``triggerer-1``, ``triggerer-2``..."""
        if self.triggerers == 1:
            return ["triggerer"]
        return [f"triggerer-{n}" for n in range(1, self.triggerers + 1)]

    @property
    def home(self) -> Path:
        return self.workdir / "airflow"

    @property
    def worker_home(self) -> Path:
        """The Celery worker's own AIRFLOW_HOME: its machine's disk, which no other component reads."""
        return self.workdir / "celery-worker" / "airflow"

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.env['AIRFLOW__API__PORT']}"

    @property
    def artifacts(self) -> Path:
        return self.workdir / "artifacts"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    def _log(self, name: str) -> Path:
        return self.workdir / f"{name}.out"

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        out = self._log(name).open("ab")  # a restarted component adds to its log
        role = "triggerer" if name.startswith("triggerer") else name
        env = {**env, **self.component_env.get(role, {})}
        self.processes[name] = subprocess.Popen(
            argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=self.workdir
        )

    def start(self) -> Stack:
        self.home.mkdir(parents=True, exist_ok=True)
        self.artifacts.mkdir(parents=True, exist_ok=True)
        api_port = free_port()
        base = _clean_environ()
        base["PATH"] = f"{BIN}{os.pathsep}{base.get('PATH', '')}"
        if self.plane is not None:
            cluster_env = self._install_plane()
        else:
            cluster_env = self._start_simulator(base)
        backend = self._start_backends()
        passwords = self.workdir / "api-passwords.json"
        passwords.write_text(json.dumps({API_USER: secrets.token_hex(8)}))
        self.env = {
            **base,
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": self.executor,
            "AIRFLOW__CORE__PARALLELISM": "6",
            "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "180",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(api_port),
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
            # Each home's airflow.cfg would get keys of its own: the chart gives every component the same
            # ones from its Secrets. The api-server signs its requests to a worker's log server with
            # ``[api] secret_key``, which the log server checks (airflow/utils/serve_logs/log_server.py).
            "AIRFLOW__API__SECRET_KEY": secrets.token_hex(32),
            "AIRFLOW__CORE__FERNET_KEY": base64.urlsafe_b64encode(os.urandom(32)).decode(),
            # The REST API's one user, whose password the tests know (task_log reads logs through it).
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{API_USER}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "60",
            "AIRFLOW_JOBS_EXAMPLE_SCRIPTS": str(DAGS / "scripts"),
            "AIRFLOW_JOBS_EXAMPLE_ARTIFACTS": str(self.artifacts),
            **cluster_env,
            **backend,
            **self.extra_env,
        }
        self.airflow("db", "migrate", timeout=300)
        if self.plane is None:
            self._start_simulated_controller(base)
        # On the plane, the real tier's admission controller (scripts/test) admits the namespace's jobs:
        # its own process, calling as its own service account.
        for component in AIRFLOW_COMPONENTS:
            self._spawn(component, [str(BIN / "airflow"), component], self.env)
        for name in self.triggerer_names:
            self.start_triggerer(name)
        if self.executor == "CeleryExecutor":
            # Tasks run in the worker's process tree, not the scheduler's: the worker takes them from
            # Redis and reports through the API server, as on a machine of its own.
            self._spawn("celery-worker", [str(BIN / "airflow"), "celery", "worker"], self._worker_env())
        return self

    def _worker_env(self) -> dict[str, str]:
        """The Celery worker's settings: production's, but for its own disk.

        Its task logs go to its own home's ``logs``; ``airflow celery worker`` serves that folder on
        ``[logging] worker_log_server_port`` (the providers' celery_command.py starts
        airflow/utils/serve_logs), the port every component's settings name, since the api-server asks
        ``http://<the try's hostname>:<that port>/log/<its file>`` (apache-airflow-core 3.3.2,
        airflow/utils/log/file_task_handler.py, ``_get_log_retrieval_url``). The scheduler serves no
        logs when it runs no local executor, so the port is the worker's alone."""
        self.worker_home.mkdir(parents=True, exist_ok=True)
        # The dags-folder bundle is a path on the worker's disk: a copy there, as an image or a git-sync
        # sidecar gives each pod its own.
        dags = self.worker_home / "dags"
        if not dags.exists():
            shutil.copytree(self.dags_folder, dags, ignore=shutil.ignore_patterns("__pycache__"))
        return {**self.env, "AIRFLOW_HOME": str(self.worker_home), "AIRFLOW__CORE__DAGS_FOLDER": str(dags)}

    def _start_simulator(self, base: dict[str, str]) -> dict[str, str]:
        """The simulated cluster in exec mode; the settings that point Airflow and the DAGs at it."""
        # The example scripts' steps are the states the tests assert were seen (RUNNING before SUCCEEDED):
        # they last as long as the machine's load makes everything else last, or a loaded triggerer's
        # first look comes after the job has ended.
        step = round(self.step_seconds * stretch(), 2)
        sim_env = {**base, "EXAMPLE_STEP_SECONDS": str(step)}
        self._spawn(
            "sim",
            [
                str(BIN / "airflow-jobs-sim"),
                "--nodes",
                "3",
                "--exec-commands",
                "--time-scale",
                str(self.time_scale),
                "--kubeconfig",
                str(self.kubeconfig),
                # The admission controller calls as its own service account (its own kubeconfig).
                "--service-account",
                CONTROLLER_ACCOUNT,
            ],
            sim_env,
        )
        connection = {"conn_type": "kubernetes", "extra": {"kube_config_path": str(self.kubeconfig)}}
        return {
            "AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(connection),
            # The data fetch of the training job's init containers lasts 15 s here (simulated seconds
            # at the stack's time scale), stretched with the machine's load: longer than a loaded
            # triggerer takes to pick a trigger up, so the task log sees the launcher in Init (order,
            # not speed, is what the test asserts).
            "AIRFLOW_JOBS_EXAMPLE_FETCH_SECONDS": str(round(15 * stretch() / self.time_scale)),
        }

    def _start_simulated_controller(self, base: dict[str, str]) -> None:
        """Once the simulator is up: the quota policy and the artifact claim, then its admission controller."""
        self._wait_for(lambda: self.kubeconfig.exists(), 60, "the simulated cluster's kubeconfig")
        self.create_quota_policy()
        controller = Path(f"{self.kubeconfig}-{CONTROLLER_ACCOUNT.split('/')[1]}")
        self._wait_for(controller.exists, 60, "the admission controller's kubeconfig")
        # The admission controller, outside Airflow: the only process that admits the jobs.
        self._spawn(
            "admission-controller",
            [
                str(BIN / "airflow-jobs"),
                "admission-controller",
                "--kubeconfig",
                str(controller),
                "--namespace",
                "default",
                "--identity",
                "e2e-controller",
            ],
            base,
        )

    def _install_plane(self) -> dict[str, str]:
        """The stack's namespaces on the real plane; each component's connection (its own account's
        kubeconfig, module docstring); the settings that point the DAGs and the GPU Jobs page there."""
        plane = self.plane
        assert plane is not None
        plane.install()

        def connection(component: str) -> dict[str, str]:
            extra = {"kube_config_path": str(plane.kubeconfigs[component])}
            return {
                "AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps({"conn_type": "kubernetes", "extra": extra})
            }

        runs_tasks = "celery-worker" if self.executor == "CeleryExecutor" else "scheduler"
        self.component_env = {
            runs_tasks: connection("worker"),
            "triggerer": connection("triggerer"),
            "api-server": connection("api-server"),
        }
        return {
            "AIRFLOW_JOBS_EXAMPLE_NAMESPACE": plane.namespace,
            "AIRFLOW__AIRFLOW_JOBS__NAMESPACE": plane.namespace,
            # The training job's data fetch, in the plane's seconds (scripts/test's plane runs at time
            # scale 1): a few seconds, as in tests/plane_scenarios.
            "AIRFLOW_JOBS_EXAMPLE_FETCH_SECONDS": "5",
        }

    def start_triggerer(self, name: str, timeout: float = 180) -> int:
        """Start (or start again) the triggerer ``name``; its id in Airflow's ``job`` table.

        Airflow 3.3.2's ``job`` table keeps a triggerer's hostname but not its process id
        (airflow/jobs/job.py), and both triggerers share the host: a triggerer is told apart by its row,
        the one that appears once it has started, so triggerers are started one at a time."""
        before = {row[0] for row in self.query("SELECT id FROM job WHERE job_type = 'TriggererJob'")}
        self.killed.discard(name)
        # Each triggerer serves its own log files, on a port of its own.
        own = {"AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port())}
        self._spawn(name, [str(BIN / "airflow"), "triggerer"], {**self.env, **own})
        if self.triggerers == 1:
            return 0
        found: list[int] = []

        def registered() -> bool:
            rows = self.query("SELECT id FROM job WHERE job_type = 'TriggererJob'")
            found[:] = sorted({row[0] for row in rows} - before)
            return bool(found)

        self._wait_for(registered, timeout, f"{name} to register as a triggerer")
        self.triggerer_jobs[found[0]] = name
        return found[0]

    def _start_backends(self) -> dict[str, str]:
        """Start the private PostgreSQL and Redis the stack's shape asks for; Airflow's settings for them."""
        settings: dict[str, str] = {}
        if self.database == "postgres" or self.executor == "CeleryExecutor":
            require_services()
        if self.database == "postgres":
            self.postgres = Postgres().start()
            settings["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = self.postgres.url
        if self.executor == "CeleryExecutor":
            self.redis = Redis(self.workdir / "redis").start()
            settings.update(
                {
                    "AIRFLOW__CELERY__BROKER_URL": self.redis.url,
                    # Results in the metadata database, as the official chart keeps them.
                    "AIRFLOW__CELERY__RESULT_BACKEND": "db+"
                    + (self.postgres.url if self.postgres else f"sqlite:///{self.home / 'airflow.db'}"),
                    "AIRFLOW__CELERY__WORKER_CONCURRENCY": "6",
                }
            )
        return settings

    def create_quota_policy(self) -> None:
        from kubernetes import client, config

        body = yaml.safe_load(POLICY_MANIFEST.read_text())
        api = client.CoreV1Api(config.new_client_from_config(str(self.kubeconfig)))
        api.create_namespaced_config_map("default", body)
        # The example DAGs mount this claim; without it their pods would stay Pending, as on a real cluster.
        api.create_namespaced_persistent_volume_claim("default", yaml.safe_load(CLAIM_MANIFEST.read_text()))

    def airflow(self, *args: str, timeout: float = 180) -> str:
        done = subprocess.run(
            [str(BIN / "airflow"), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.workdir,
        )
        if done.returncode != 0:
            raise RuntimeError(f"airflow {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    # --- the metadata DB, read-only ---

    def query(self, sql: str, *params: object) -> list[tuple]:
        """Rows of one read; ``?`` marks the parameters, whatever the database."""
        if self.postgres is not None:
            import psycopg2

            conn = psycopg2.connect(
                host="127.0.0.1",
                port=self.postgres.port,
                user="airflow",
                dbname="airflow",
                connect_timeout=30,
            )
            try:
                conn.set_session(readonly=True, autocommit=True)
                with conn.cursor() as cursor:
                    cursor.execute(sql.replace("?", "%s"), params)
                    return cursor.fetchall()
            finally:
                conn.close()
        db = sqlite3.connect(f"file:{self.home / 'airflow.db'}?mode=ro", uri=True, timeout=30)
        try:
            return db.execute(sql, params).fetchall()
        finally:
            db.close()

    def wait_for_dags(self, dag_ids: list[str], timeout: float) -> None:
        def parsed() -> bool:
            rows = self.query("SELECT dag_id FROM dag WHERE NOT is_stale")
            return set(dag_ids) <= {r[0] for r in rows}

        self._wait_for(parsed, timeout, f"the DAGs {dag_ids} to be parsed")

    def wait_for_run(self, dag_id: str, timeout: float, run_id: str | None = None) -> tuple[str, str]:
        """(run_id, state) of the DAG's first run to finish, or of the run ``run_id``."""
        finished: list[tuple[str, str]] = []

        def done() -> bool:
            rows = self.query(
                "SELECT run_id, state FROM dag_run WHERE dag_id = ? AND state IN ('success', 'failed')",
                dag_id,
            )
            rows = [row for row in rows if run_id is None or row[0] == run_id]
            finished[:] = rows
            return bool(rows)

        self._wait_for(done, timeout, f"a run of {dag_id} to finish")
        return finished[0]

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str]:
        rows = self.query(
            "SELECT task_id, state FROM task_instance WHERE dag_id = ? AND run_id = ?", dag_id, run_id
        )
        return {task: state for task, state in rows}

    def task_tries(self, dag_id: str, run_id: str) -> dict[str, tuple[str, int]]:
        """task id -> (state, try number) of its latest try."""
        rows = self.query(
            "SELECT task_id, state, try_number FROM task_instance WHERE dag_id = ? AND run_id = ?",
            dag_id,
            run_id,
        )
        return {task: (state, tries) for task, state, tries in rows}

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int | None = None) -> list[str]:
        """The events of the task's log (the worker's and the triggers' parts) of one try, or of every
        try in order, as the api-server's REST API serves them; a failure's event is followed by its
        exception's message."""
        if try_number is not None:
            tries = [try_number]
        else:
            latest = self.task_tries(dag_id, run_id).get(task_id, ("", 0))[1]
            tries = list(range(1, latest + 1))
        events: list[str] = []
        for n in tries:
            events.extend(
                event
                for record in self.task_log_records(dag_id, run_id, task_id, n)
                for event in _events(record)
            )
        return events

    def task_log_records(self, dag_id: str, run_id: str, task_id: str, try_number: int) -> list[dict]:
        """One try's log records through the REST API, in time order, the source group left out.

        The api-server of apache-airflow-core 3.3.2 reads a finished try from its own disk and asks the
        worker's log server only when it has no file of that try (airflow/utils/log/file_task_handler.py,
        ``FileTaskHandler._read``). The triggers' part of a deferred try is on its disk here (the
        triggerers share its home), so for such a try it serves that part alone; the worker's part is
        then read from the worker's log server, as the api-server reads a running try's, with the
        request it would sign. On the chart's defaults (no disk shared, no remote logging) the api-server
        of production shows the worker's part alone once the try has ended: docs/deploying.md."""
        served = self.served_log(dag_id, run_id, task_id, try_number)
        if self.executor == "CeleryExecutor" and not served.read_from_worker(self.worker_log_port):
            return _interleave(served.records, self._worker_part(dag_id, run_id, task_id, try_number))
        return served.records

    def served_log(self, dag_id: str, run_id: str, task_id: str, try_number: int) -> ServedLog:
        """One try's log as the api-server's REST API serves it, whole."""
        path = "/".join(
            quote(part, safe="") for part in ("dags", dag_id, "dagRuns", run_id, "taskInstances", task_id)
        )
        response = self._api_get(f"/api/v2/{path}/logs/{try_number}", params={"full_content": "true"})
        if response.status_code == 404:
            return ServedLog([], [])
        response.raise_for_status()
        return ServedLog.of(response.json().get("content") or [])

    @property
    def worker_log_port(self) -> int:
        return int(self.env["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"])

    def _worker_part(self, dag_id: str, run_id: str, task_id: str, try_number: int) -> list[dict]:
        """The records the worker wrote for a try, from the worker's log server (the api-server's
        request: airflow/utils/log/file_task_handler.py ``_fetch_logs_from_service``, 3.3.2)."""
        rows = self.query(
            "SELECT hostname FROM task_instance WHERE dag_id = ? AND run_id = ? AND task_id = ? AND try_number = ? "
            "UNION SELECT hostname FROM task_instance_history "
            "WHERE dag_id = ? AND run_id = ? AND task_id = ? AND try_number = ?",
            *(dag_id, run_id, task_id, try_number) * 2,
        )
        hosts = [row[0] for row in rows if row[0]]
        if not hosts:
            return []
        relative = f"dag_id={dag_id}/run_id={run_id}/task_id={task_id}/attempt={try_number}.log"
        now = int(time.time())
        token = jwt.encode(
            {"filename": relative, "aud": "task-instance-logs", "iat": now, "nbf": now, "exp": now + 60},
            self.env["AIRFLOW__API__SECRET_KEY"],
            algorithm="HS512",
        )
        response = httpx.get(
            f"http://{hosts[0]}:{self.worker_log_port}/log/{relative}",
            headers={"Authorization": token},
            timeout=30 * stretch(),
        )
        if response.status_code == 404:
            return []
        response.raise_for_status()
        return [_record(line) for line in response.text.splitlines() if line.strip()]

    def _api_get(self, path: str, params: dict[str, str]) -> httpx.Response:
        """A GET of the REST API as its user, logging in again when the token has expired."""
        for _ in range(2):
            if self._token is None:
                password = json.loads(
                    Path(self.env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"]).read_text()
                )[API_USER]
                login = httpx.post(
                    f"{self.api_url}/auth/token",
                    json={"username": API_USER, "password": password},
                    timeout=60 * stretch(),
                )
                login.raise_for_status()
                self._token = login.json()["access_token"]
            response = httpx.get(
                f"{self.api_url}{path}",
                params=params,
                headers={"Authorization": f"Bearer {self._token}", "Accept": "application/json"},
                timeout=60 * stretch(),
            )
            if response.status_code != 401:
                return response
            self._token = None
        return response

    @staticmethod
    def events_of(path: Path) -> list[str]:
        """The events of one log file, a failure's followed by its exception's message."""
        return [
            event
            for line in path.read_text(errors="replace").splitlines()
            for event in _events(_record(line))
        ]

    def unsuccessful(self, dag_id: str, run_id: str, expected: dict[str, str] | None = None) -> str:
        """Every task of the run that ended otherwise than ``expected`` says (default: success), with its
        tries and its log, every try in order: what a failed assertion on the run should show."""
        tries = self.task_tries(dag_id, run_id)
        expected = expected or {}
        wrong = [task for task, (state, _) in tries.items() if state != expected.get(task, "success")]
        return "\n\n".join(
            f"{task} ({tries[task][0]}, {tries[task][1]} tries):\n"
            + "\n".join(self.task_log(dag_id, run_id, task))
            for task in sorted(wrong)
        )

    def _wait_for(self, condition, timeout: float, what: str) -> None:
        deadline = Deadline(timeout)
        while not deadline.passed():
            for name, proc in self.processes.items():
                if name not in self.killed and proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode} while waiting for {what}")
            try:
                if condition():
                    return
            except _DB_BUSY:
                pass  # the DB is being migrated or is locked: ask again
            time.sleep(2)
        raise TimeoutError(f"timed out after {deadline} waiting for {what}")

    # --- teardown ---

    def stop(self) -> None:
        """SIGTERM every process group, then SIGKILL what is left after the grace period."""
        for proc in self.processes.values():
            if proc.poll() is None:
                _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for proc in self.processes.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for proc in self.processes.values():
            # The group may outlive its leader (task supervisors, uvicorn workers).
            _signal_group(proc, signal.SIGKILL)
            if proc.poll() is None:
                proc.wait(timeout=10)
        # SIGKILL is delivered asynchronously: a group member may still be dying when killpg returns.
        deadline = time.monotonic() + 10
        while self.alive_groups() and time.monotonic() < deadline:
            time.sleep(0.2)
        # The servers last: the components above talk to them until they have stopped.
        for server in (self.redis, self.postgres):
            if server is not None:
                server.stop()
        if self.plane is not None:
            self.plane.remove()

    def kill(self, name: str) -> None:
        """SIGKILL a component's whole process group, as a lost machine would end it: no handler runs."""
        proc = self.processes[name]
        self.killed.add(name)
        _signal_group(proc, signal.SIGKILL)
        proc.wait(timeout=30)

    def alive_groups(self) -> list[str]:
        """Names of the components whose process group still has a live process."""
        alive = []
        for name, proc in self.processes.items():
            try:
                os.killpg(proc.pid, 0)
                alive.append(name)
            except ProcessLookupError:
                pass
            except PermissionError:
                alive.append(name)
        return alive

    def output(self, name: str) -> str:
        return self._log(name).read_text(errors="replace")


def _record(line: str) -> dict:
    """A log file's line as Airflow's structured record; a line of plain text is its event."""
    try:
        record = json.loads(line)
    except ValueError:
        return {"event": line}
    return record if isinstance(record, dict) else {"event": line}


def _events(record: dict) -> list[str]:
    """A record's event, followed by the messages of its exceptions."""
    return [str(record.get("event", ""))] + [
        str(error.get("exc_value", "")) for error in record.get("error_detail") or []
    ]


@dataclass
class ServedLog:
    """A try's log as the REST API serves it: where the api-server read it from, and its records."""

    sources: list[str]
    records: list[dict]

    @classmethod
    def of(cls, content: list[dict]) -> ServedLog:
        """Split the API's records into the source group Airflow puts first and the log itself."""
        served = cls([], [])
        inside = False
        for record in content:
            event = str(record.get("event", ""))
            if event == SOURCES_BEGIN:
                inside = True
            elif inside and event == SOURCES_END:
                inside = False
            elif inside:
                served.sources.append(event)
            else:
                served.records.append(record)
        return served

    def read_from_worker(self, port: int) -> bool:
        """Whether the api-server read this try from a worker's log server on ``port``."""
        return any(re.match(rf"https?://[^/]+:{port}/log/", source) for source in self.sources)


_EARLIEST = datetime.min.replace(tzinfo=timezone.utc)


def _timestamps(records: list[dict]) -> list[datetime]:
    """Each record's time; one without a time (a plain line) takes the one before it."""
    times: list[datetime] = []
    last = _EARLIEST
    for record in records:
        stamp = record.get("timestamp")
        if stamp:
            try:
                parsed = datetime.fromisoformat(str(stamp))
                last = parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)
            except ValueError:
                pass
        times.append(last)
    return times


def _interleave(*parts: list[dict]) -> list[dict]:
    """Records of several files in time order, each file's own order kept: what the api-server does
    with the files of one try (file_task_handler.py ``_interleave_logs``)."""
    keyed = [
        (stamp, part_index, line, record)
        for part_index, part in enumerate(parts)
        for line, (stamp, record) in enumerate(zip(_timestamps(part), part, strict=True))
    ]
    keyed.sort(key=lambda item: (item[0], item[1], item[2]))
    return [record for *_, record in keyed]


def _db_errors() -> tuple[type[Exception], ...]:
    errors: list[type[Exception]] = [sqlite3.OperationalError]
    try:
        import psycopg2

        errors.append(psycopg2.OperationalError)
        # The tables are created by the migration the stack runs first.
        errors.append(psycopg2.errors.UndefinedTable)
    except ImportError:
        pass
    return tuple(errors)


_DB_BUSY = _db_errors()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
