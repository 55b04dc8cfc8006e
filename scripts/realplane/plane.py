"""Start, watch and stop a real Kubernetes control plane as plain processes on 127.0.0.1.

One plane lives in a state directory beside its kubeconfig (``<kubeconfig>.plane/``): its PKI, every
component's log, etcd's data and ``state.json`` (the process ids, ports and options). Each process runs in
a session of its own, so ``down`` stops it and every child it started by its process group. Ports are free
ports chosen at start, so two planes (two copies of the suite) run side by side.

The order is the one kubeadm and kwokctl use: etcd, the API server (``/readyz``), the controller manager
and the scheduler (``/healthz``), then kwok and its nodes (``Ready``), then the operators after their CRDs
are ``Established``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TextIO

import yaml

from realplane import build, inotify, kueue_setup, nodes, stages
from realplane.pins import Pins
from realplane.pki import LOOPBACK, Authority, Pair

# The checkout this copy of the tooling belongs to (scripts/realplane/ -> the repository).
CHECKOUT = Path(__file__).resolve().parents[2]
SUPERVISOR = Path(__file__).resolve().with_name("supervise.py")


def restarts_record(log: Path) -> Path:
    """Where a supervised component's restarts are counted (beside its log)."""
    return log.with_suffix(".restarts.json")


def restarts(proc_log: str) -> tuple[int, int | None]:
    """How often a component was restarted, and its last exit code (0, None: never)."""
    try:
        record = json.loads(restarts_record(Path(proc_log)).read_text())
    except (OSError, ValueError):
        return 0, None
    return int(record.get("restarts") or 0), record.get("last_exit_code")


class PlaneError(RuntimeError):
    """The plane could not start; the message names the component and ends with its log's last lines."""


OPERATORS = ("mpi-operator", "kueue")
# The add-ons call the API server as the service accounts their own manifests deploy them under
# (kubeflow/mpi-operator v0.8.2 deploy/v2beta1/mpi-operator.yaml; kubernetes-sigs/kueue v0.19.2
# config/default), so the product's admission policy (helm-values/admission-policy.yaml) tells them apart
# on the plane as in a cluster. A client certificate's CommonName is the user's name and its
# Organizations the groups (kubernetes v1.36.3 staging/src/k8s.io/apiserver/pkg/authentication/request/
# x509/x509.go, CommonNameUserConversion); system:masters gives them the rights they have in a cluster
# without their ClusterRoles.
IDENTITIES = {
    "mpi-operator": "system:serviceaccount:mpi-operator:mpi-operator",
    "kueue": "system:serviceaccount:kueue-system:kueue-controller-manager",
}


@dataclass(frozen=True)
class Options:
    kubeconfig: Path
    nodes: int = 3
    gpus_per_node: int = 8
    with_: tuple[str, ...] = ()
    kueue_config: Path | None = None
    time_scale: float = 1.0


@dataclass
class Process:
    name: str
    pid: int
    log: str
    command: list[str]


@dataclass
class State:
    options: dict
    ports: dict[str, int] = field(default_factory=dict)
    processes: list[Process] = field(default_factory=list)
    started_at: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> State:
        data = json.loads(path.read_text())
        data["processes"] = [Process(**p) for p in data.get("processes", [])]
        return cls(**data)

    def save(self, path: Path) -> None:
        data = asdict(self)
        path.write_text(json.dumps(data, indent=2))


def state_dir(kubeconfig: Path) -> Path:
    return kubeconfig.parent / (kubeconfig.name + ".plane")


def registry_dir(cache: Path) -> Path:
    return cache / "planes"


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on 127.0.0.1 now (the kernel's choice, held until all are chosen)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped) is not running.
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
            return False
    return True


def tail(path: Path | str, lines: int = 15) -> str:
    try:
        text = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:])


class Plane:
    def __init__(self, options: Options, cache: Path | None = None, out: TextIO = sys.stderr) -> None:
        self.options = options
        self.cache = cache or build.default_cache()
        self.layout = build.Layout(self.cache)
        self.pins = Pins.load()
        self.dir = state_dir(options.kubeconfig)
        self.out = out
        self.state_file = self.dir / "state.json"
        self.state: State | None = None

    # --- paths -----------------------------------------------------------------------------------

    def bin(self, component: str, binary: str | None = None) -> str:
        return str(self.layout.bin_dir(self.pins[component]) / (binary or component))

    def module(self, component: str) -> Path:
        return build.module_dir(self.layout, self.pins[component])

    @property
    def admin_kubeconfig(self) -> Path:
        return self.dir / "admin.kubeconfig"

    def own_kubeconfig(self, component: str) -> Path:
        """The kubeconfig of an add-on (IDENTITIES): its own client certificate."""
        return self.dir / f"{component}.kubeconfig"

    def say(self, message: str) -> None:
        print(f"cluster: {message}", file=self.out, flush=True)

    # --- up ----------------------------------------------------------------------------------------

    def components(self) -> tuple[str, ...]:
        base = ("etcd", "kubernetes", "kwok")
        return base + tuple(c for c in OPERATORS if c in self.options.with_)

    def up(self) -> dict[str, float]:
        if self.state_file.exists():
            existing = State.load(self.state_file)
            if any(alive(p.pid) for p in existing.processes):
                raise PlaneError(
                    f"a plane already runs for {self.options.kubeconfig} "
                    f"(scripts/cluster down --kubeconfig {self.options.kubeconfig} first)"
                )
        t0 = time.monotonic()
        built = build.ensure(self.layout, self.pins, self.components(), out=self.out)
        build_seconds = time.monotonic() - t0
        if self.dir.exists():
            # A stopped plane's data is not reused: each `up` is a fresh cluster.
            subprocess.run(["rm", "-rf", str(self.dir)], check=True)
        (self.dir / "logs").mkdir(parents=True)
        names = [
            "etcd",
            "etcd-peer",
            "apiserver",
            "controller-manager",
            "scheduler",
            "kwok",
            "mpi-operator",
            "kueue-webhook",
            "kueue-health",
            "kueue-metrics",
            "kueue-visibility",
        ]
        ports = dict(zip(names, free_ports(len(names)), strict=True))
        self.state = State(options=_jsonable(self.options), ports=ports, started_at=time.time())
        self.state.timings["build_seconds"] = round(build_seconds, 1)
        self.state.timings.update({f"build_{k}_seconds": round(v, 1) for k, v in built.items()})
        self._register()
        t1 = time.monotonic()
        try:
            self._pki()
            self._start_etcd()
            self._start_apiserver()
            self._start_controllers()
            self._start_kwok()
            if "mpi-operator" in self.options.with_:
                self._start_mpi_operator()
            if "kueue" in self.options.with_:
                self._start_kueue()
        except BaseException:
            self.down(quiet=True)
            raise
        self.state.timings["start_seconds"] = round(time.monotonic() - t1, 1)
        self._save()
        self._write_user_kubeconfig()
        return self.state.timings

    def _save(self) -> None:
        assert self.state is not None
        self.state.save(self.state_file)

    def _register(self) -> None:
        reg = registry_dir(self.cache)
        reg.mkdir(parents=True, exist_ok=True)
        key = hashlib.sha256(str(self.dir.resolve()).encode()).hexdigest()[:16]
        entry = {"state_dir": str(self.dir.resolve()), "checkout": str(CHECKOUT)}
        (reg / f"{key}.json").write_text(json.dumps(entry))

    def _pki(self) -> None:
        ca = Authority(self.dir / "pki")
        self.ca = ca
        hosts = (*LOOPBACK, "kubernetes", "kubernetes.default", "kubernetes.default.svc", "10.96.0.1")
        self.apiserver_pair = ca.issue("apiserver", "kube-apiserver", hosts=hosts)
        self.admin_pair = ca.issue("admin", "admin", organizations=("system:masters",), client=True)
        self.front_proxy = ca.issue("front-proxy-client", "front-proxy-client", client=True)
        self.serving = ca.issue("serving", "localhost", hosts=LOOPBACK)
        self.sa_key = ca.service_account_key()
        self._kubeconfig(self.admin_kubeconfig)
        for component, user in IDENTITIES.items():
            pair = ca.issue(component, user, organizations=("system:masters",), client=True)
            self._kubeconfig(self.own_kubeconfig(component), pair, component)

    def _kubeconfig(self, path: Path, pair: Pair | None = None, user: str = "admin") -> None:
        assert self.state is not None
        import base64

        def b64(p: Path) -> str:
            return base64.b64encode(p.read_bytes()).decode()

        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "airflow-jobs-plane",
                    "cluster": {
                        "server": f"https://127.0.0.1:{self.state.ports['apiserver']}",
                        "certificate-authority-data": b64(self.ca.ca.cert),
                    },
                }
            ],
            "users": [
                {
                    "name": user,
                    "user": {
                        "client-certificate-data": b64((pair or self.admin_pair).cert),
                        "client-key-data": b64((pair or self.admin_pair).key),
                    },
                }
            ],
            "contexts": [
                {"name": "airflow-jobs-plane", "context": {"cluster": "airflow-jobs-plane", "user": user}}
            ],
            "current-context": "airflow-jobs-plane",
        }
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)

    def _write_user_kubeconfig(self) -> None:
        target = self.options.kubeconfig
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(self.admin_kubeconfig.read_text())
        target.chmod(0o600)

    def _spawn(
        self, name: str, command: list[str], env: dict[str, str] | None = None, *, supervised: bool = False
    ) -> Process:
        """Start ``name``; ``supervised``: restarted whenever it exits, as a cluster restarts the
        controllers it runs as Deployments (supervise.py)."""
        assert self.state is not None
        log = self.dir / "logs" / f"{name}.log"
        if supervised:
            record = restarts_record(log)
            command = [
                sys.executable,
                str(SUPERVISOR),
                "--name",
                name,
                "--record",
                str(record),
                "--",
                *command,
            ]
        with open(log, "ab") as fh:
            proc = subprocess.Popen(
                command,
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.dir,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
        entry = Process(name=name, pid=proc.pid, log=str(log), command=command)
        self.state.processes.append(entry)
        self._save()
        return entry

    def _wait(self, proc: Process, what: str, check: Callable[[], bool], timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        last_error = ""
        while time.monotonic() < deadline:
            if not alive(proc.pid):
                raise PlaneError(
                    f"{proc.name} exited before {what}; last lines of {proc.log}:\n{tail(proc.log)}"
                )
            try:
                if check():
                    return
            except Exception as exc:  # noqa: BLE001 - any failure of a probe means "not yet"
                last_error = f"{type(exc).__name__}: {exc}"
            time.sleep(0.25)
        raise PlaneError(
            f"{proc.name}: not {what} after {timeout:.0f} s ({last_error or 'no answer'}); "
            f"last lines of {proc.log}:\n{tail(proc.log)}"
        )

    def _https_ok(self, port: int, path: str, client: bool = True) -> bool:
        ctx = ssl.create_default_context(cafile=str(self.ca.ca.cert))
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        if client:
            ctx.load_cert_chain(str(self.admin_pair.cert), str(self.admin_pair.key))
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}{path}", context=ctx, timeout=5) as resp:
                return resp.status == 200
        except urllib.error.HTTPError:
            return False

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        cmd = [self.bin("kubernetes", "kubectl"), f"--kubeconfig={self.admin_kubeconfig}", *args]
        proc = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=180)
        if check and proc.returncode != 0:
            raise PlaneError(f"kubectl {' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip()}")
        return proc.stdout

    def apply(self, documents: Iterable[dict] | str, what: str) -> None:
        text = documents if isinstance(documents, str) else yaml.safe_dump_all(list(documents))
        try:
            self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=text)
        except PlaneError as exc:
            raise PlaneError(f"{what}: {exc}") from None

    def established(self, names: list[str], timeout: float = 60.0) -> None:
        """Wait until every CRD of ``names`` is Established (its API is served)."""
        deadline = time.monotonic() + timeout
        pending = set(names)
        while pending:
            out = json.loads(self.kubectl("get", "crd", "-o", "json"))
            for crd in out.get("items", []):
                conditions = (crd.get("status") or {}).get("conditions") or []
                if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                    pending.discard(crd["metadata"]["name"])
            if pending and time.monotonic() > deadline:
                raise PlaneError(f"CRDs not Established after {timeout:.0f} s: {', '.join(sorted(pending))}")
            if pending:
                time.sleep(0.2)

    # --- the components ----------------------------------------------------------------------------

    def _start_etcd(self) -> None:
        assert self.state is not None
        p = self.state.ports
        client, peer = f"http://127.0.0.1:{p['etcd']}", f"http://127.0.0.1:{p['etcd-peer']}"
        proc = self._spawn(
            "etcd",
            [
                self.bin("etcd"),
                "--name=plane",
                f"--data-dir={self.dir / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=plane={peer}",
                # The data dies with the plane; fsync would only slow the suite on a shared disk.
                "--unsafe-no-fsync=true",
                "--auto-compaction-retention=1",
                "--quota-backend-bytes=8589934592",
                "--listen-metrics-urls=",
            ],
        )

        def healthy() -> bool:
            with urllib.request.urlopen(f"{client}/health", timeout=3) as resp:
                return json.loads(resp.read()).get("health") == "true"

        self._wait(proc, "healthy", healthy, timeout=60)

    def _start_apiserver(self) -> None:
        assert self.state is not None
        p, ca = self.state.ports, self.ca.ca.cert
        proc = self._spawn(
            "kube-apiserver",
            [
                self.bin("kubernetes", "kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{p['etcd']}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={p['apiserver']}",
                f"--tls-cert-file={self.apiserver_pair.cert}",
                f"--tls-private-key-file={self.apiserver_pair.key}",
                f"--client-ca-file={ca}",
                f"--kubelet-client-certificate={self.admin_pair.cert}",
                f"--kubelet-client-key={self.admin_pair.key}",
                f"--service-account-key-file={self.sa_key}",
                f"--service-account-signing-key-file={self.sa_key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--authorization-mode=Node,RBAC",
                "--allow-privileged=true",
                # The `kubernetes` Service's endpoints would be 127.0.0.1, which Endpoints validation
                # refuses (loopback): nothing in this plane reaches the API server through the Service.
                "--endpoint-reconciler-type=none",
                f"--requestheader-client-ca-file={ca}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={self.front_proxy.cert}",
                f"--proxy-client-key-file={self.front_proxy.key}",
                # Every component here is trusted; throttling would only measure this laptop-sized host.
                "--max-requests-inflight=1000",
                "--max-mutating-requests-inflight=500",
            ],
        )
        self._wait(proc, "ready (/readyz)", lambda: self._https_ok(p["apiserver"], "/readyz"), timeout=180)

    def _start_controllers(self) -> None:
        assert self.state is not None
        p, kc = self.state.ports, str(self.admin_kubeconfig)
        common = [
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1",
            "--leader-elect=false",
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
        ]
        kcm = self._spawn(
            "kube-controller-manager",
            [
                self.bin("kubernetes", "kube-controller-manager"),
                *common,
                f"--secure-port={p['controller-manager']}",
                f"--service-account-private-key-file={self.sa_key}",
                f"--root-ca-file={self.ca.ca.cert}",
                "--use-service-account-credentials=false",
                "--kube-api-qps=200",
                "--kube-api-burst=400",
                # The Job controller's workers (default 5: kubernetes v1.36.3, pkg/controller/job/config/
                # v1alpha1/defaults.go): each creates its job's pods with a request
                # that waits on a busy API server, so thousands of jobs resumed at once would start at a
                # few pods a second (measured: 1,000 jobs in 309 s on 2 loaded cores).
                "--concurrent-job-syncs=50",
                # No cloud, no pod network: the controllers that would wait on one are off.
                "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller",
            ],
            supervised=True,
        )
        sched = self._spawn(
            "kube-scheduler",
            [
                self.bin("kubernetes", "kube-scheduler"),
                *common,
                f"--secure-port={p['scheduler']}",
                "--kube-api-qps=200",
                "--kube-api-burst=400",
            ],
            supervised=True,
        )
        self._wait(kcm, "healthy", lambda: self._https_ok(p["controller-manager"], "/healthz", client=False))
        self._wait(sched, "healthy", lambda: self._https_ok(p["scheduler"], "/healthz", client=False))
        # The service-account controller creates each namespace's `default` account; pods need it.
        self._wait(
            kcm, "serving accounts", lambda: "default" in self.kubectl("get", "sa", "-o", "name"), timeout=60
        )

    def _start_kwok(self) -> None:
        assert self.state is not None
        # One kwok plays every node's kubelet: its follows share one user's inotify instances.
        self.say(inotify.ensure().message)
        p = self.state.ports
        kw = self.module("kwok")
        self.apply(
            "\n---\n".join(
                (kw / "kustomize" / "crd" / "bases" / f"kwok.x-k8s.io_{n}.yaml").read_text()
                for n in ("logs", "clusterlogs")
            ),
            "kwok CRDs",
        )
        self.established(["logs.kwok.x-k8s.io", "clusterlogs.kwok.x-k8s.io"])
        config = self.dir / "kwok.yaml"
        config.write_text(stages.kwok_configuration(kw))
        proc = self._spawn(
            "kwok",
            [
                self.bin("kwok"),
                f"--kubeconfig={self.admin_kubeconfig}",
                f"--config={config}",
                f"--manage-nodes-with-annotation-selector={nodes.MANAGED_ANNOTATION}=fake",
                "--node-ip=127.0.0.1",
                "--node-name=localhost",
                f"--node-port={p['kwok']}",
                f"--server-address=127.0.0.1:{p['kwok']}",
                f"--tls-cert-file={self.serving.cert}",
                f"--tls-private-key-file={self.serving.key}",
                "--cidr=10.0.0.0/16",
                "--enable-crds=Logs,ClusterLogs",
            ],
            supervised=True,
        )
        self._wait(proc, "serving", lambda: self._https_ok(p["kwok"], "/healthz", client=False), timeout=60)
        self.apply(stages.storage_class(kw), "default StorageClass")
        specs = nodes.gpu_nodes(self.options.nodes, self.options.gpus_per_node)
        self.apply(specs, "GPU nodes")
        names = [n["metadata"]["name"] for n in specs]
        self._wait(proc, f"Ready on {len(names)} nodes", lambda: self._nodes_ready(names), timeout=90)
        self._start_player()

    def _start_player(self) -> None:
        """The scenario player (realplane/player.py): every bound pod's timeline, logs and events."""
        logs = self.dir / "pod-logs"
        logs.mkdir(exist_ok=True)
        scripts = str(Path(__file__).resolve().parent.parent)
        proc = self._spawn(
            "scenario-player",
            [
                sys.executable,
                "-m",
                "realplane.player",
                f"--kubeconfig={self.admin_kubeconfig}",
                f"--logs-dir={logs}",
                f"--time-scale={self.options.time_scale}",
            ],
            env={"PYTHONPATH": scripts + os.pathsep + os.environ.get("PYTHONPATH", "")},
            supervised=True,
        )
        self._wait(proc, "watching pods", lambda: "watching" in Path(proc.log).read_text(), timeout=60)

    def _nodes_ready(self, names: list[str]) -> bool:
        data = json.loads(self.kubectl("get", "nodes", "-o", "json"))
        ready = {
            n["metadata"]["name"]
            for n in data["items"]
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in n.get("status", {}).get("conditions", [])
            )
        }
        return set(names) <= ready

    def _start_mpi_operator(self) -> None:
        assert self.state is not None
        crd = self.module("mpi-operator") / "manifests" / "base" / "kubeflow.org_mpijobs.yaml"
        self.apply(crd.read_text(), "MPIJob CRD")
        self.established(["mpijobs.kubeflow.org"])
        # It always leader-elects in --lock-namespace (cmd/mpi-operator/app/server.go), which must exist.
        self.apply(
            [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "mpi-operator"}}], "namespace"
        )
        port = self.state.ports["mpi-operator"]
        proc = self._spawn(
            "mpi-operator",
            [
                self.bin("mpi-operator"),
                f"--kubeConfig={self.own_kubeconfig('mpi-operator')}",
                "--lock-namespace=mpi-operator",
                "--kube-api-qps=100",
                "--kube-api-burst=200",
                "--threadiness=4",
            ],
            env={build.MPI_HEALTH_ADDR_ENV: f"127.0.0.1:{port}"},
            supervised=True,
        )

        def leading() -> bool:
            out = self.kubectl("get", "lease", "-n", "mpi-operator", "-o", "json", check=False)
            return bool(out) and any(
                (i.get("spec") or {}).get("holderIdentity") for i in json.loads(out).get("items", [])
            )

        self._wait(proc, "leading (its lease held)", leading, timeout=90)

    def _start_kueue(self) -> None:
        assert self.state is not None
        kueue_setup.install(self)

    def restart_kueue(self, kueue_config: Path | None) -> None:
        """Stop this plane's Kueue and start it again with ``kueue_config`` merged over the shipped
        configuration (``None``: as shipped), as an admin rolls out a new manager ConfigMap."""
        self.state = State.load(self.state_file)
        kueue = [p for p in self.state.processes if p.name == "kueue"]
        if not kueue:
            raise PlaneError(f"the plane of {self.options.kubeconfig} runs no Kueue (start it --with kueue)")
        for proc in kueue:
            stop_group(proc.pid)
            self.state.processes.remove(proc)
        self.options = Options(**{**self.options.__dict__, "kueue_config": kueue_config})
        self._pki()
        kueue_setup.start_manager(self)
        self._save()

    # --- status and down ---------------------------------------------------------------------------

    def down(self, quiet: bool = False) -> list[str]:
        stopped = stop_state(self.state) if self.state is not None else stop_directory(self.dir)
        if not quiet:
            for s in stopped:
                self.say(f"stopped {s}")
        return stopped


def stop_state(state: State) -> list[str]:
    """Stop every process of a plane, the last started first; what was still running."""
    return [f"{p.name} (pid {p.pid})" for p in reversed(state.processes) if stop_group(p.pid)]


def stop_directory(directory: Path) -> list[str]:
    """Stop the plane whose state lives in ``directory`` (nothing if there is none)."""
    state_file = directory / "state.json"
    return stop_state(State.load(state_file)) if state_file.exists() else []


def stop_group(pid: int, grace: float = 10.0) -> bool:
    """Stop the process group ``pid`` leads (every component was started as a session leader)."""
    if not alive(pid):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and alive(pid):
        time.sleep(0.1)
    if alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    return True


def _jsonable(options: Options) -> dict:
    data = asdict(options)
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in data.items()}


def known_planes(cache: Path, checkout: Path | None = None) -> list[Path]:
    """Every plane the machine's cache knows, or only those started from ``checkout``: the cache is
    shared by every checkout and every test run of the user, and one's `down` must not stop another's."""
    reg = registry_dir(cache)
    out = []
    for entry in sorted(reg.glob("*.json")) if reg.exists() else []:
        with contextlib.suppress(OSError, ValueError, KeyError):
            recorded = json.loads(entry.read_text())
            if checkout is None or recorded.get("checkout") == str(checkout):
                out.append(Path(recorded["state_dir"]))
    return out


def forget(cache: Path, directory: Path) -> None:
    reg = registry_dir(cache)
    for entry in reg.glob("*.json") if reg.exists() else []:
        with contextlib.suppress(OSError, ValueError, KeyError):
            if Path(json.loads(entry.read_text())["state_dir"]) == directory:
                entry.unlink()
